"""Golden values: predictions of the default comparison and of the fetch model, stored in tests/golden.

A change to the model or to a scenario's numbers changes them on purpose: regenerate with
``SACMODEL_UPDATE_GOLDEN=1 python3 -m pytest tests/serving/test_golden.py`` and commit the new file with the change
(and regenerate validation/report.md).
"""
import json
import os
from pathlib import Path

import pytest

from sacmodel.serving.predict import compare
from sacmodel.serving.systems import fetch_latency_us

GOLDEN = Path(__file__).resolve().parent / "golden" / "default_compare.json"
FIELDS = ("ttft_mean_ms", "ttft_p99_ms", "tbt_mean_ms", "e2e_mean_ms", "output_throughput_tok_s")


def current():
    out = {}
    for L in (16384, 32768, 65536, 131072):
        for s, p in compare("sac-testbed", ("gpu", "dram", "cxl", "rdma"), context=L, output=1024,
                            concurrency=64).items():
            out[f"{s}@{L}"] = {f: getattr(p, f) for f in FIELDS}
    for b in ("dram", "cxl", "rdma"):
        out[f"fetch_{b}@2048"] = fetch_latency_us("sac-testbed", b, topk=2048)
    return out


def test_default_comparison_is_unchanged():
    now = current()
    if os.environ.get("SACMODEL_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert set(now) == set(want)
    for k, v in want.items():
        if isinstance(v, dict):
            for f, x in v.items():
                assert now[k][f] == pytest.approx(x, rel=1e-6), (k, f)   # last digits move with what earlier predictions cached
        else:
            assert now[k] == pytest.approx(v, rel=1e-6), k
