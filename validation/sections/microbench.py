"""Section 1: the single-layer fetch micro-benchmark against the fetch model."""
from __future__ import annotations

import numpy as np

from common import PLOTS, SCENARIO, fmt, table
from sacmodel.data.microbench import latest_per_backend, load_microbench
from sacmodel.serving.systems import fetch_latency_us


def microbench_case():
    pts = latest_per_backend(load_microbench())
    rows, per = [], {}
    for p in pts:
        pred = fetch_latency_us(SCENARIO, p.backend, topk=p.topk, entry_bytes=p.entry_bytes)
        rows.append({"backend": p.backend, "context": p.context, "topk": p.topk, "measured_us": p.mean_us,
                     "predicted_us": pred, "error_pct": 100 * (pred / p.mean_us - 1), "file": p.file})
        per.setdefault(p.backend, []).append(abs(pred / p.mean_us - 1))
    return {"rows": rows, "mape_pct": {b: 100 * float(np.mean(v)) for b, v in per.items()}}


def plot_microbench(mb):
    from sacmodel.plots.serving import plt
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for b, col in (("dram", "#1f77b4"), ("cxl", "#d62728"), ("rdma", "#2ca02c")):
        rows = sorted([r for r in mb["rows"] if r["backend"] == b and r["context"] == 32768], key=lambda r: r["topk"])
        ax.plot([r["topk"] for r in rows], [r["measured_us"] for r in rows], "o", color=col, label=f"{b} measured")
        ax.plot([r["topk"] for r in rows], [r["predicted_us"] for r in rows], "-", color=col, label=f"{b} model")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("top-k (entries per layer)")
    ax.set_ylabel("single-layer gather latency (µs)")
    ax.set_title("Fetch micro-benchmark, 32K context", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(PLOTS / "microbench.png", dpi=110)
    plt.close(fig)


def render(rep) -> list[str]:
    """The report's section 1 section (markdown lines)."""
    L: list[str] = []
    mb = rep["microbench"]
    L += ["## 1. Fetch micro-benchmark (single-layer top-k gather)", "",
          table([[b, fmt(v)] for b, v in mb["mape_pct"].items()], ["backend", "MAPE %"]),
          "![microbench](plots/microbench.png)", ""]
    return L
