"""Every example that a `--help` prints runs as written (issue 22), in a folder holding the files the examples
name: trace.jsonl / trace.csv (the head of the shared traces), my_runs/ (a link to the released runs, as a user
would make one), a run file, path/to/config.json, and ../shared (the shared data)."""
import json
import shlex
import shutil

import pytest
from measured_data import SHARED, needs_shared

from sacmodel.cli import app as cli
from sacmodel.cli import main
from sacmodel.hardware.models import CATALOG_CONFIGS


def _examples():
    ap = cli.build_parser()
    sub = next(a for a in ap._actions if a.__class__.__name__ == "_SubParsersAction")
    return [line.strip() for p in sub.choices.values() for line in (p.epilog or "").splitlines()[1:]
            if line.strip().startswith("sacmodel")]


def _folder(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "shared").symlink_to(SHARED.parent)
    traces = SHARED / "traces"
    (work / "trace.jsonl").write_text("".join(
        (traces / "mooncake_conversation_trace.jsonl").read_text().splitlines(keepends=True)[:300]))
    (work / "trace.csv").write_text("".join(
        (traces / "azure_llm_2023_conv.csv").read_text().splitlines(keepends=True)[:301]))
    runs = SHARED / "sac-testbed" / "runs"
    (work / "my_runs").symlink_to(runs)
    shutil.copy(next(runs.glob("*cxl2_ctx32k*.json")), work / "my_bench_cxl2_ctx32k.json")
    (work / "results.jsonl").write_text(_bench_results())     # SGLang bench_serving --output-file lines
    (work / "path" / "to").mkdir(parents=True)
    cfg = {k: v for k, v in CATALOG_CONFIGS["deepseek-v3.2"].items() if not k.startswith("_")}
    (work / "path" / "to" / "config.json").write_text(json.dumps(cfg))
    return work


def _bench_results() -> str:
    """Two public H200 DeepSeek-R1 runs (shared/data/external) as bench_serving result lines."""
    import csv
    import math
    rows = list(csv.DictReader((SHARED / "external" / "h200-deepseek-r1-sglang-tp8.csv").read_text().splitlines()))
    out = []
    for r in (rows[0], rows[-1]):
        c, osl, ttft, tpot = int(r["concurrency"]), int(r["osl"]), float(r["ttft_mean_ms"]), float(r["tpot_mean_ms"])
        out.append(json.dumps({"dataset_name": "random", "request_rate": math.inf, "max_concurrency": c,
                               "random_input_len": int(r["isl"]), "random_output_len": osl,
                               "random_range_ratio": 0.8, "completed": 10 * c, "duration": 1.0,
                               "mean_ttft_ms": ttft, "mean_tpot_ms": tpot,
                               "output_throughput": c * 0.9 * osl / (ttft / 1e3 + (0.9 * osl - 1) * tpot / 1e3)}))
    return "\n".join(out) + "\n"


EXAMPLES = _examples()


@needs_shared
@pytest.mark.parametrize("line", EXAMPLES, ids=[f"{i:02d}-{ln.split()[1]}" for i, ln in enumerate(EXAMPLES)])
def test_every_help_example_runs_as_written(line, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(_folder(tmp_path))
    cmd, _, redirect = line.split("#")[0].partition(" > ")
    rc = main(shlex.split(cmd)[1:])
    out, err = capsys.readouterr()
    assert rc == 0, f"{line}\n{err}"
    assert out.strip() or redirect or "--csv" in cmd or "--plot" in cmd, line
