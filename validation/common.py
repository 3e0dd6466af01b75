"""What the report's sections share: the scenario, the run categories of the cross-validation, error
tables and markdown helpers."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from sacmodel.fit.calibrate import NOT_FITTED

HERE = Path(__file__).resolve().parent


SCENARIO = "sac-testbed"


PLOTS = HERE / "plots"


KEY = ("ttft_mean_ms", "tbt_mean_ms", "output_throughput_tok_s")


LABEL = {"ttft_mean_ms": "TTFT", "tbt_mean_ms": "TBT", "output_throughput_tok_s": "throughput"}


SYSTEMS = ("gpu", "dram", "cxl", "rdma")


def fixed(r):
    return r.output_min is None or r.output_min == r.output_max


CATEGORIES = {
    "output > 1024": lambda r: fixed(r) and r.output > 1024,
    "buffer 6144 (dc_0502)": lambda r: fixed(r) and r.device_buffer == 6144,
    "one CXL device": lambda r: r.system == "cxl" and r.cxl_devices == 1,
    "GPU only": lambda r: r.system == "gpu",
    "concurrency <= 16": lambda r: r.concurrency <= 16,
    "concurrency > 96": lambda r: r.concurrency > 96,
    "context 16K": lambda r: r.context == 16384,
    "context 32K": lambda r: r.context == 32768,
    "context 64K": lambda r: r.context == 65536,
    "context 128K": lambda r: r.context == 131072,
}


def category_of(r) -> list[str]:
    return [c for c, f in CATEGORIES.items() if f(r)] or ["base"]


def errors(comps):
    out = []
    for c in comps:
        row = {"file": c.run.file, "system": c.run.system, "context": c.run.context, "concurrency": c.run.concurrency,
               "output": c.run.output, "categories": category_of(c.run), "failed": c.run.failed,
               "measured_success": (c.run.num_success or 0) / max(c.run.requests, 1),
               "predicted_success": c.predicted.get("success_fraction")}
        for m in KEY:
            row[f"{m}_measured"] = c.run.metrics.get(m)
            row[f"{m}_predicted"] = c.predicted.get(m)
            e = c.error(m)
            row[f"{m}_error_pct"] = None if e is None else 100 * e
        out.append(row)
    return out


def mape(rows, systems=SYSTEMS):
    """MAPE % per system and metric (and 'all') over rows of :func:`errors`."""
    out = {}
    for s in (*systems, "all"):
        sel = [r for r in rows if s == "all" or r["system"] == s]
        if not sel:
            continue
        d = {"runs": len(sel)}
        for m in KEY:       # every prediction counts, those of metrics left out of the fit included
            e = [abs(r[f"{m}_error_pct"]) for r in sel if r[f"{m}_error_pct"] is not None]
            d[m] = float(np.mean(e)) if e else None
            e_fit = [abs(r[f"{m}_error_pct"]) for r in sel if r[f"{m}_error_pct"] is not None
                     and (r["system"], m) not in NOT_FITTED]
            d[f"{m}_fitted_only"] = float(np.mean(e_fit)) if e_fit else None
        d["completion_right_pct"] = 100 * float(np.mean([
            (r["predicted_success"] is not None and r["predicted_success"] >= 1.0) == (not r["failed"]) for r in sel]))
        out[s] = d
    return out


def table(rows, cols):
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    return head + "".join("| " + " | ".join(str(x) for x in r) + " |\n" for r in rows)


def fmt(v, nd=1):
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{nd}f}"


def mape_table(tab, with_completion=True):
    rows = []
    for s, d in tab.items():
        row = [s, d["runs"]] + [fmt(d[m]) for m in KEY]
        if s == "all":
            row[2] = f"{fmt(d['ttft_mean_ms'])} ({fmt(d['ttft_mean_ms_fitted_only'])} without RDMA)"
        if with_completion:
            row.append(fmt(d["completion_right_pct"], 0))
        rows.append(row)
    return table(rows, ["system", "runs", "TTFT %", "TBT %", "throughput %"] + (["completion right %"] if with_completion else []))


# Concurrency bands the held-out errors are also grouped by (a trend across them is a missing mechanism, even
# inside a category whose MAPE looks small).
CONCURRENCY_BANDS = (("8-16", 1, 16), ("32-48", 17, 48), ("64", 49, 64), ("80-96", 65, 96), ("128-192", 97, 10 ** 9))


def band_of(concurrency: int) -> str:
    return next(name for name, lo, hi in CONCURRENCY_BANDS if lo <= concurrency <= hi)


def abs_and_signed(rows, m) -> tuple[float | None, float | None]:
    """(MAPE %, mean signed error %: predicted above measured is positive) of metric ``m`` over rows of
    :func:`errors`."""
    e = [r[f"{m}_error_pct"] for r in rows if r[f"{m}_error_pct"] is not None]
    if not e:
        return None, None
    return float(np.mean(np.abs(e))), float(np.mean(e))


def fmt_signed(rows, m) -> str:
    """``MAPE (signed)`` of metric ``m``, e.g. ``8.4 (-4.3)``."""
    a, s = abs_and_signed(rows, m)
    return "-" if a is None else f"{a:.1f} ({s:+.1f})"
