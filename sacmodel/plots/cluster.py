"""Cluster plots: TTFT distribution per configuration, hit rate vs cache capacity. Files go through the writing
layer (:mod:`sacmodel.util.files`): a failed plot never leaves half a file."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.ticker import FuncFormatter

from ..util.files import atomic_path
from .serving import plt


def save_atomic(fig, path) -> Path:
    """Save ``fig`` to ``path`` through the writing layer (:func:`sacmodel.util.files.atomic_path`)."""
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=120)
    finally:
        plt.close(fig)
    return Path(path)

def plot_ttft_cdf(preds: dict, path, title: str = "") -> Path:
    """Empirical CDF of the per-request TTFT of every configuration (``{label: ClusterPrediction}``)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, p in preds.items():
        x = np.sort(p.per_request["ttft_ms"][np.isfinite(p.per_request["ttft_ms"])]) / 1e3
        if len(x):
            ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("time to first token (s)")
    ax.set_ylabel("share of requests")
    ax.set_ylim(0, 1.01)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return save_atomic(fig, path)


def plot_hit_rate(curves: dict, path, title: str = "", theory: dict | None = None) -> Path:
    """Hit rate vs capacity; ``curves``: {label: [(capacity tokens, hit rate), ...]} (inf drawn as a line)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for j, (label, pts) in enumerate(curves.items()):
        color = f"C{j}"
        fin = [(c, h) for c, h in pts if math.isfinite(c)]
        ax.plot([c / 1e6 for c, _ in fin], [100 * h for _, h in fin], "o-", color=color, label=label)
        inf = [h for c, h in pts if not math.isfinite(c)]
        if inf:
            ax.axhline(100 * inf[0], color=color, ls="--", lw=0.8, label=f"{label}, unbounded cache")
        if theory and label in theory:
            ax.annotate(f"unbounded: {100 * theory[label]:.1f}%", (fin[-1][0] / 1e6 if fin else 1, 100 * theory[label]),
                        textcoords="offset points", xytext=(-4, 4), ha="right", fontsize=8, color=color)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("prefix-cache capacity (million tokens)")
    ax.set_ylabel("prompt tokens served from cache (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return save_atomic(fig, path)
