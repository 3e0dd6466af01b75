"""The error bands every prediction carries (``sacmodel/data/error_bands.json``), written from the report's own
figures so that they cannot go stale: section 5 (held out, per system and per category) and section 10 (other
machines). ``python3 validation/sections/bands.py`` rewrites the file from ``validation/report.json``;
``validation/run.py`` calls :func:`write` after every full run."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sacmodel.serving.bands import BAND_FILE  # noqa: E402
from sacmodel.util.files import write_text  # noqa: E402

KEY = ("ttft_mean_ms", "tbt_mean_ms", "output_throughput_tok_s")
SHORT = ("ttft", "tbt", "throughput")


def _r(x) -> float | None:
    return None if x is None else round(float(x), 1)


def _check_machines() -> dict[str, tuple[str, str, bool]]:
    """Each public check group's (gpu, model, whether its server spans hosts), read as the external section
    reads its checks."""
    from sacmodel.data.external import load_external_runs
    from sacmodel.hardware.gpus import spans_hosts
    return {r.group: (r.gpu, r.model, spans_hosts(r.gpu, r.gpus))
            for r in load_external_runs(REPO / "validation" / "data" / "external_checks.csv")}


def bands(report: dict, old: dict) -> dict:
    """``old`` (the file's structure and its sources) with every figure recomputed from ``report``."""
    new = json.loads(json.dumps(old))
    cv = report["cross_validation"]
    pooled: dict = {}
    for d in cv.values():
        for r in d["runs"]:
            for m in KEY:
                if r[f"{m}_error_pct"] is not None:
                    pooled.setdefault(r["system"], {k: [] for k in KEY})[m].append(abs(r[f"{m}_error_pct"]))
    systems = new["testbed"]["systems"]
    for s, v in pooled.items():
        systems[s] = {**{k: _r(np.mean(v[m])) for k, m in zip(SHORT, KEY)}, "predictions": len(v["ttft_mean_ms"])}
    cats = {"source": new["testbed"]["categories"]["source"]}
    for name, d in cv.items():
        cats[name] = {s: [_r(d["mape_pct"][s][m]) for m in KEY] for s in d["mape_pct"] if s != "all"}
    new["testbed"]["categories"] = cats
    mape = report["external"]["mape"]
    ex = new["external"]
    for name, key in (("rules_only", "before"), ("checks", "checks")):
        for short, m in zip(SHORT, ("ttft", "tpot", "throughput")):
            ex[name][short] = _r(mape[key][m])
        ex[name]["runs"] = mape[key]["runs"]
    machine = _check_machines()
    for g, v in mape["by_group"].items():
        if g not in ex["groups"]:                 # a group new to the checks: its machine from the checks' file
            ex["groups"][g] = dict(zip(("gpu", "model"), machine.get(g, (None, None))[:2]))
        if g in machine and machine[g][2]:
            ex["groups"][g]["spans_hosts"] = True
        ex["groups"][g].update({short: _r(v[m]) for short, m in zip(SHORT, ("ttft", "tpot", "throughput"))},
                               runs=v.get("runs", ex["groups"][g].get("runs")))
    cov = report["external"].get("coverage", {})
    gens = {"source": "validation/report.md section 10, the checks of each GPU generation: per metric the error "
                      "80% of them lie within (the ceil(0.8 n)-th smallest absolute error; TPOT as tbt). A built "
                      "machine's band is at least this, so it holds at least 80% of its generation's checks on one host; a "
                      "generation with no check takes the widest generation's figure x 1.5 (no_check_factor); "
                      "cross-host: the checks whose server spans hosts, which a server across hosts adds"}
    for gen, v in cov.items():
        gens[gen] = {**{short: _r(v[m]) for short, m in zip(SHORT, ("ttft", "tpot", "throughput"))}, "runs": v["runs"]}
    gens["no_check_factor"] = 1.5
    ex["generations"] = gens
    return new


def _dump(x, indent: int = 0) -> str:
    """JSON with one line per leaf entry (a dict or list of plain values), as the file is laid out."""
    flat = lambda v: not isinstance(v, dict) or all(not isinstance(w, dict) for w in v.values())  # noqa: E731
    if not isinstance(x, dict) or (indent >= 4 and flat(x)):
        return json.dumps(x, ensure_ascii=False)
    pad = " " * (indent + 2)
    items = [f"{pad}{json.dumps(k)}: {_dump(v, indent + 2)}" for k, v in x.items()]
    return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"


def write(report_path: Path = REPO / "validation" / "report.json") -> None:
    old = json.loads(BAND_FILE.read_text())
    new = bands(json.loads(report_path.read_text()), old)
    write_text(BAND_FILE, _dump(new) + "\n")


if __name__ == "__main__":
    write()
    print(f"wrote {BAND_FILE}")
