"""The throughput-per-GPU vs interactivity chart of serving benchmarks (matplotlib, Agg): every configuration
as a faint marker, each system's frontier as a line with its concurrencies labelled, the frontier across systems
drawn over them. Written atomically."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .serving import COLORS, MARKERS, _save  # noqa: E402


def plot_pareto(points, path, title: str = ""):
    """``points``: objects with ``system, concurrency, tok_s_per_user, tok_s_per_gpu, feasible, on_frontier,
    on_system_frontier`` (a :class:`sacmodel.planning.pareto.ParetoResult`'s points). x: tokens/s per user
    (1 / TPOT), y: output tokens/s per GPU."""
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for s in dict.fromkeys(p.system for p in points):
        mine = [p for p in points if p.system == s and p.feasible]
        if not mine:
            continue
        c, m = COLORS.get(s), MARKERS.get(s, "o")
        ax.scatter([p.tok_s_per_user for p in mine], [p.tok_s_per_gpu for p in mine], s=14, color=c, marker=m,
                   alpha=0.25, linewidths=0)
        front = sorted((p for p in mine if p.on_system_frontier), key=lambda p: p.tok_s_per_user)
        ax.plot([p.tok_s_per_user for p in front], [p.tok_s_per_gpu for p in front], "-", marker=m, color=c,
                label=f"{s} frontier", alpha=0.9)
        for p in front:
            ax.annotate(str(p.concurrency), (p.tok_s_per_user, p.tok_s_per_gpu), textcoords="offset points",
                        xytext=(4, 3), fontsize=7, color=c)
    best = sorted((p for p in points if p.on_frontier), key=lambda p: p.tok_s_per_user)
    if best:
        ax.plot([p.tok_s_per_user for p in best], [p.tok_s_per_gpu for p in best], "--", color="black", lw=1,
                label="frontier across systems", zorder=0)
    ax.set_xlabel("interactivity (tokens/s per user, 1 / TPOT)")
    ax.set_ylabel("output throughput per GPU (tokens/s per GPU)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title + ("\n" if title else "") + "labels: client concurrency", fontsize=9)
    return _save(fig, path)
