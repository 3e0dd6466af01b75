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
        ticks = sorted({L / 1024 for L, _ in rows})
        ax.set_xticks(ticks, [f"{t:g}K" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("context (tokens)")
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


def plot_breakeven(be, path):
    """Both systems' metric over the varied range, with every crossing marked."""
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    x = be.curve["x"]
    for s in (be.a, be.b):
        ys = be.curve[s] if s == be.a else [be.ratio * v for v in be.curve[s]]
        ax.plot(x, ys, "-", label=s if s == be.a or be.ratio == 1 else f"{be.ratio:g} x {s}", color=COLORS.get(s))
    for r in be.values:
        ax.axvline(r, color="k", ls="--", lw=0.8)
        ax.annotate(f"{r:.4g}", (r, ax.get_ylim()[1]), ha="center", va="bottom", fontsize=8)
    if x[0] > 0 and x[-1] / x[0] > 20:
        ax.set_xscale("log")
    ax.set_xlabel(be.vary)
    ax.set_ylabel(METRIC_LABELS.get(be.metric, be.metric))
    ax.set_title(be.message, fontsize=9)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_winner_map(xs, ys, winner, labels, path, xlabel, ylabel, title=""):
    """Heatmap of which system wins (``winner`` 2-D array of indices into ``labels``) over two parameters."""
    import numpy as np
    from matplotlib.colors import ListedColormap
    fig, ax = plt.subplots(figsize=(6.5, 4.8))
    cmap = ListedColormap([COLORS.get(s, "#999999") for s in labels])
    ax.pcolormesh(xs, ys, np.asarray(winner).T, cmap=cmap, vmin=-0.5, vmax=len(labels) - 0.5, shading="auto")
    for values, setter in ((xs, ax.set_xscale), (ys, ax.set_yscale)):
        if values[0] > 0 and values[-1] / values[0] > 20:   # geometric grids read better on log axes
            setter("log")
    for i, s in enumerate(labels):
        ax.plot([], [], "s", color=COLORS.get(s, "#999999"), label=f"{s} wins")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_tornado(rows, path, title="", top=12):
    """Ranked elasticities (rows of (name, elasticity, ...)) as a tornado chart."""
    rows = rows[:top][::-1]
    fig, ax = plt.subplots(figsize=(6.5, 0.35 * len(rows) + 1.5))
    ax.barh([r[0] for r in rows], [r[1] for r in rows], color=["#d62728" if r[1] > 0 else "#1f77b4" for r in rows])
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("elasticity d ln(metric) / d ln(parameter)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
