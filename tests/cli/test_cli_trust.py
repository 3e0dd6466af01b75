"""predict and compare say what binds and how sure they are (issue 22, items 3 and 4)."""
import json

from sacmodel.cli import main


def run(capsys, *args):
    rc = main(list(args))
    return rc, capsys.readouterr().out


def test_predict_json_has_binding_and_band(capsys):
    rc, out = run(capsys, "predict", "--system", "cxl", "--context", "32K", "--concurrency", "16", "--output", "64",
                  "--json")
    d = json.loads(out)
    assert rc == 0 and {"binding", "band", "band_basis"} <= set(d)
    assert set(d["band"]) == {"ttft_mean_ms", "tbt_mean_ms", "output_throughput_tok_s"}
    sw = d["binding"]["swap"]
    assert sw["part"] == "step" and sw["kind"] in ("device", "link") and 0 < sw["utilisation"] <= 1
    assert sw["resource"].startswith("cxl_dev[")          # the testbed's devices bind, 22.5 GB/s each
    assert d["binding"]["ttft_request"]["kind"] == "constant"


def test_predict_prints_what_binds_and_the_expected_error(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "140")
    rc, out = run(capsys, "predict", "--scenario", "h200-cxl-large", "--system", "cxl", "--context", "32K",
                  "--concurrency", "16", "--output", "64")
    assert rc == 0 and "what binds" in out and "binding resource" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("expected error:"))
    assert "TTFT ±" in line and "TBT ±" in line and "throughput ±" in line
    assert "carried to H200" in out and "widened" in out


def test_compare_prints_one_band_line(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    rc, out = run(capsys, "compare", "--contexts", "16K", "--concurrency", "8", "--output", "64",
                  "--systems", "dram,cxl")
    lines = [ln for ln in out.splitlines() if ln.startswith("expected error")]
    assert rc == 0 and len(lines) == 1 and "dram ±" in lines[0] and "cxl ±" in lines[0]
