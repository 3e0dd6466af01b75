"""Plots (matplotlib, Agg backend): metric-vs-context curves, break-even curves and maps, tornado charts."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"gpu": "#555555", "dram": "#1f77b4", "cxl": "#d62728", "rdma": "#2ca02c", "cxl-prefetch": "#ff7f0e",
          "rdma-topk": "#9467bd"}
METRIC_LABELS = {"output_throughput_tok_s": "output throughput (tok/s)", "ttft_mean_ms": "mean TTFT (ms)",
                 "tbt_mean_ms": "mean TBT (ms)", "e2e_mean_ms": "mean E2E latency (ms)"}


def plot_compare(rows, path, title="", metrics=("output_throughput_tok_s", "ttft_mean_ms", "tbt_mean_ms")):
    """``rows``: [(context, {system: Prediction})]. One panel per metric, one curve per system."""
    systems = list(rows[0][1])
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4))
    for ax, m in zip(axes, metrics):
        for s in systems:
            pts = [(L, getattr(res[s], m)) for L, res in rows if res[s].feasible]
            if pts:
                ax.plot([p[0] / 1024 for p in pts], [p[1] for p in pts], "o-", label=s, color=COLORS.get(s))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context (K tokens)")
        ax.set_ylabel(METRIC_LABELS.get(m, m))
        if m == "ttft_mean_ms":
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
