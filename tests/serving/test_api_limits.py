"""The documented limits hold for predict's arguments from the Python API as on the command line: requests
(100,000), context, concurrency and every entry of ``outputs`` (16M tokens), which must be whole numbers
(before: requests=10^6 ran, outputs=[10^9] * 8 ran past the model's positions, NaN gave 'cannot convert float
NaN to integer')."""
import os
import subprocess
import sys
import textwrap

import pytest

CASES = [
    ("{'requests': 10**6}", "requests=1000000 is above the limit of 100,000"),
    ("{'context': 10**9}", "context=1000000000 is above the limit of 16,777,216"),
    ("{'concurrency': 10**6}", "concurrency=1000000 is above the limit of 10,000"),
    ("{'outputs': [10**9] * 8}", "outputs must be 8 whole numbers of tokens in 1..16,777,216"),
    ("{'outputs': [math.nan] * 8}", "outputs must be 8 whole numbers"),
    ("{'outputs': [1.5] * 8}", "outputs must be 8 whole numbers"),
    ("{'outputs': [10**30] * 8}", "outputs must be 8 whole numbers"),
    ("{'outputs': ['a'] * 8}", "outputs must be 8 whole numbers"),
    ("{'outputs': [16] * 7 + [200000]}", "output 200000 (outputs) exceeds deepseek-v3.2's maximum position"),
    ("{'cxl_devices': 10**9}", "cxl_devices=1000000000: a pool has at most 1024 members"),
]


def test_arguments_beyond_the_limits_are_refused():
    """In a child with a memory limit and a timeout: before the limits, these ran millions of requests."""
    code = textwrap.dedent(f"""
        import math
        from sacmodel import predict
        for kw in ({', '.join(k for k, _ in CASES)},):
            try:
                predict("sac-testbed", "dram", **{{**dict(context=8192, output=16, concurrency=4, requests=8), **kw}})
                print("PREDICTED")
            except ValueError as exc:
                print(exc)
    """)

    def limit():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, preexec_fn=limit,
                       env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    lines = r.stdout.splitlines()
    assert len(lines) == len(CASES), (lines, r.stderr[-2000:])
    for line, (kw, msg) in zip(lines, CASES):
        assert msg in line, (kw, line)


@pytest.mark.parametrize("kw,msg", [
    (dict(device_buffer=float("inf")), "device_buffer must be a positive integer, got inf"),
    (dict(device_buffer=float("nan")), "device_buffer must be a positive integer, got nan"),
    (dict(output=10 ** 9), "output=1000000000 is above the limit of 16,777,216 tokens"),
    (dict(output=(0, 10 ** 9)), "output range must be two whole numbers in 0..16,777,216"),
])
def test_non_finite_and_huge_arguments_get_one_clear_error(kw, msg):
    from sacmodel.serving.predict import ConfigError, predict
    args = dict(context=32768, output=128, concurrency=8, **kw) if "output" not in kw else \
        dict(context=32768, concurrency=8, **kw)
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        predict("sac-testbed", "cxl", **args)



@pytest.mark.parametrize("system,kw", [("cxl", {"cxl_devices": 1025}), ("rdma", {"rdma_nics": 1025})])
def test_a_pool_larger_than_1024_members_is_refused_as_the_cli_and_scenario_files_refuse_it(system, kw):
    # (found by the long fuzz run: cxl_devices=10**9 grew a billion planned devices until memory ran out; that
    # case runs in the bounded child above)
    from sacmodel.serving.predict import ConfigError, predict
    with pytest.raises(ConfigError, match="a pool has at most 1024 members"):
        predict("sac-testbed", system, context=8192, output=16, concurrency=2, requests=4, **kw)


@pytest.mark.parametrize("system, pool", [("cxl", "cxl"), ("rdma", "rdma")])
def test_a_missing_pool_names_how_to_add_it(system, pool):
    """A built machine has no CXL or RDMA pool: the error said '(cxl_devices=1); add its pool', naming a count
    the user never gave and no way to add one. The fix it names must be accepted."""
    import sacmodel
    from sacmodel.serving.config import ConfigError
    with pytest.raises(ConfigError, match=rf"no pools\.{pool}\); add one \(--pool {pool} .*pool='{pool}' in "
                                          r"sacmodel\.scenario\(\)\)") as e:
        sacmodel.predict(sacmodel.scenario("h200"), system, context=4096, output=16, concurrency=1)
    assert "_devices=" not in str(e.value) and "_nics=" not in str(e.value)
    assert pool in sacmodel.scenario("h200", pool=pool).pools
