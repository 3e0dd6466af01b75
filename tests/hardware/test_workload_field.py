"""Issue 32, item 1: a scenario may say which workload it stands for (``workload:``); none means independent
users."""
import pytest
import yaml

from sacmodel.hardware.scenarios import load_topology
from sacmodel.hardware.topology import TopologyError
from sacmodel.serving.predict import default_prompts


def test_the_testbed_stands_for_its_shared_prompt_benchmark_and_a_built_machine_for_independent_users():
    import sacmodel
    assert load_topology("sac-testbed").workload == "shared" and default_prompts(load_topology("sac-testbed")) == "shared"
    assert default_prompts(sacmodel.scenario("h200", gpus=8, weights="fp8", dp=8)) == "distinct"


@pytest.mark.parametrize("workload,field", [({"prompts": "many", "source": "x"}, "workload.prompts"),
                                            ({"prompts": "shared"}, "workload.source"),
                                            ({"prompts": "shared", "source": "x", "rate": 3}, "workload.rate")])
def test_a_bad_workload_field_is_named(tmp_path, workload, field):
    from pathlib import Path
    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "topologies" / "sac-testbed.yaml").read_text())
    data["workload"] = workload
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(TopologyError, match=field.replace(".", r"\.")):
        load_topology(str(f))
