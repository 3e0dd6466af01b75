"""Plots (matplotlib, Agg backend): metric-vs-context curves, break-even curves and maps, tornado charts, sweeps.

Every axis names its quantity and unit; files are written atomically (a temporary file, then a rename).
"""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..util.files import atomic_path  # noqa: E402
from ..util.names import fmt_value, kind_of  # noqa: E402

COLORS = {"gpu": "#555555", "dram": "#1f77b4", "cxl": "#d62728", "rdma": "#2ca02c", "cxl-prefetch": "#ff7f0e",
          "rdma-topk": "#9467bd"}
MARKERS = {"gpu": "s", "dram": "o", "cxl": "^", "rdma": "D", "cxl-prefetch": "v", "rdma-topk": "P"}
NONE_COLOR = "#dddddd"
# metric -> (axis label, factor from the metric's own unit to the plotted one)
METRIC_LABELS = {"output_throughput_tok_s": ("output throughput (tokens/s)", 1.0),
                 "request_throughput_req_s": ("request throughput (requests/s)", 1.0),
                 "ttft_mean_ms": ("mean TTFT (ms)", 1.0), "ttft_p50_ms": ("median TTFT (ms)", 1.0),
                 "ttft_p99_ms": ("p99 TTFT (ms)", 1.0), "tbt_mean_ms": ("mean TBT (ms)", 1.0),
                 "tbt_p99_ms": ("p99 TBT (ms)", 1.0), "e2e_mean_ms": ("mean E2E latency (ms)", 1.0),
                 # unloaded closed forms come in seconds (bytes for bytes_per_step)
                 "ttft": ("unloaded TTFT (ms)", 1e3), "tbt": ("unloaded TBT (ms)", 1e3),
                 "e2e": ("unloaded E2E latency (s)", 1.0), "ttft_cold": ("unloaded cold TTFT (s)", 1.0),
                 "bytes_per_step": ("bytes read per decode step (MB)", 1e-6)}


def metric_axis(metric: str) -> tuple[str, float]:
    """(label with unit, factor) for a metric's values."""
    return METRIC_LABELS.get(metric, (metric, 1.0))


def quantity_axis(name: str, values=()) -> tuple[str, float]:
    """(label with unit, factor from SI) for a varied quantity, e.g. node:cxl_device.bandwidth -> GB/s."""
    kind = kind_of(name)
    if kind == "tokens":
        return f"{name} (tokens)", 1.0
    if kind == "bandwidth":
        return f"{name} (GB/s)", 1e-9
    if kind == "flops":
        return f"{name} (TFLOP/s)", 1e-12
    if kind == "bytes":
        return f"{name} (GB)", 1e-9
    if kind == "rate":
        return f"{name} (requests/s)", 1.0
    if kind == "time":
        top = max((abs(float(v)) for v in values), default=1.0)
        for unit, f in (("s", 1.0), ("ms", 1e3), ("us", 1e6)):
            if top * f >= 1:
                return f"{name} ({unit})", f
        return f"{name} (ns)", 1e9
    return name, 1.0


def _scale_axis(ax, axis: str, name: str, values):
    """Log scale for wide positive ranges; token axes in powers of two labelled 8K, 128K, 1M."""
    v = np.asarray(values, dtype=float)
    if not (len(v) and v.min() > 0 and v.max() / v.min() > 20):   # geometric ranges read better on log axes
        return
    if kind_of(name) != "tokens":
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        return
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    powers = [2 ** k for k in range(int(np.floor(np.log2(v.min()))), int(np.ceil(np.log2(v.max()))) + 1)]
    powers = [p for p in powers if v.min() / 1.5 <= p <= v.max() * 1.5]
    step = max(1, math.ceil(len(powers) / 8))
    a = ax.xaxis if axis == "x" else ax.yaxis
    a.set_major_locator(FixedLocator(powers[::step]))
    a.set_minor_locator(NullLocator())
    a.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 2**20:g}M" if x >= 2**20 else
                                        f"{x / 1024:g}K" if x >= 1024 else f"{x:g}"))


def _edges(v):
    """Cell edges around grid values: geometric midpoints on a wide positive grid, arithmetic otherwise."""
    v = np.asarray(v, dtype=float)
    if len(v) == 1:
        return np.array([v[0] * 0.9, v[0] * 1.1]) if v[0] else np.array([-0.5, 0.5])
    geo = v.min() > 0 and v.max() / v.min() > 20
    w = np.log(v) if geo else v
    mid = (w[1:] + w[:-1]) / 2
    e = np.concatenate([[w[0] - (mid[0] - w[0])], mid, [w[-1] + (w[-1] - mid[-1])]])
    return np.exp(e) if geo else e


def _plain_log_ticks(axis):
    """Plain numbers (1000, not 10^3) at 1, 2 and 5 per decade on a log axis."""
    from matplotlib.ticker import LogLocator, NullLocator, ScalarFormatter
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_minor_locator(NullLocator())
    fmt = ScalarFormatter()
    fmt.set_scientific(False)
    axis.set_major_formatter(fmt)


def _save(fig, path):
    fig.tight_layout()
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=120, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path


def plot_compare(rows, path, title="", metrics=("output_throughput_tok_s", "ttft_mean_ms", "tbt_mean_ms")):
    """``rows``: [(context, {system: Prediction})]. One panel per metric, one curve per system."""
    systems = list(rows[0][1])
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4.2))
    for ax, m in zip(np.atleast_1d(axes), metrics):
        for s in systems:
            pts = [(L, getattr(res[s], m)) for L, res in rows if res[s].feasible]
            if pts:
                ax.plot([p[0] / 1024 for p in pts], [p[1] for p in pts], "-", marker=MARKERS.get(s, "o"),
                        label=s, color=COLORS.get(s), alpha=0.85)
        ax.set_xscale("log", base=2)
        ticks = sorted({L / 1024 for L, _ in rows})
        ax.set_xticks(ticks, [f"{t:g}K" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel(metric_axis(m)[0])
        if m == "ttft_mean_ms":
            ax.set_yscale("log")
            _plain_log_ticks(ax.yaxis)
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].legend()
    fig.suptitle(title)
    return _save(fig, path)


def plot_breakeven(be, path, subtitle=""):
    """Both systems' metric over the varied range, with every crossing marked and labelled below the title."""
    fig, ax = plt.subplots(figsize=(7, 4.8))
    x = np.asarray(be.curve["x"], dtype=float)
    xl, xf = quantity_axis(be.vary, x)
    yl, yf = metric_axis(be.metric)
    for s in (be.a, be.b):
        ys = np.asarray(be.curve[s], dtype=float) * (1 if s == be.a else be.ratio) * yf
        label = s if s == be.a or be.ratio == 1 else f"{be.ratio:g} x {s}"
        ax.plot(x * xf, ys, "-", marker=MARKERS.get(s, "o"), ms=3, label=label, color=COLORS.get(s))
    _scale_axis(ax, "x", be.vary, x * xf)
    y = np.asarray([v for s in (be.a, be.b) for v in be.curve[s]], dtype=float)
    y = y[np.isfinite(y) & (y > 0)]
    if len(y) and y.max() / y.min() > 100:
        ax.set_yscale("log")
    for i, r in enumerate(be.values):
        ax.axvline(r * xf, color="k", ls="--", lw=0.8)
        ax.annotate(fmt_value(r, kind_of(be.vary)), (r * xf, 1.0 - 0.06 * (i % 3)), xycoords=("data", "axes fraction"),
                    xytext=(3, -12), textcoords="offset points", fontsize=8, ha="left",
                    bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.8))
    ax.set_xlabel(xl)
    ax.set_ylabel(yl)
    ax.set_title(be.message + (f"\n{subtitle}" if subtitle else ""), fontsize=9)
    ax.legend(loc="best")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_winner_map(xs, ys, winner, labels, path, xlabel, ylabel, title=""):
    """Heatmap of which system wins (``winner``: 2-D indices into ``labels``, -1 = none feasible)."""
    from matplotlib.colors import ListedColormap
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    w = np.asarray(winner)
    fig, ax = plt.subplots(figsize=(7, 5.2))
    xl, xf = quantity_axis(xlabel, xs)
    yl, yf = quantity_axis(ylabel, ys)
    cmap = ListedColormap([NONE_COLOR] + [COLORS.get(s, "#999999") for s in labels])
    ax.pcolormesh(_edges(xs * xf), _edges(ys * yf), w.T + 1, cmap=cmap, vmin=-0.5, vmax=len(labels) + 0.5,
                  shading="flat")
    _scale_axis(ax, "x", xlabel, xs * xf)
    _scale_axis(ax, "y", ylabel, ys * yf)
    for i, s in enumerate(labels):
        if (w == i).any():
            ax.plot([], [], "s", ms=10, color=COLORS.get(s, "#999999"), label=f"{s} best")
    if (w < 0).any():
        ax.plot([], [], "s", ms=10, color=NONE_COLOR, label="none feasible")
    ax.set_xlabel(xl)
    ax.set_ylabel(yl)
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return _save(fig, path)


def plot_tornado(rows, path, title="", top=12):
    """Ranked elasticities (rows of (name, elasticity, ...)) as a tornado chart of the ``top`` largest."""
    rows = [r for r in rows if math.isfinite(r[1])][:top][::-1]
    fig, ax = plt.subplots(figsize=(7, 0.38 * len(rows) + 1.6))
    ax.barh([r[0] for r in rows], [r[1] for r in rows], color=["#d62728" if r[1] > 0 else "#1f77b4" for r in rows])
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("elasticity d ln(metric) / d ln(parameter)  (+: metric grows with the parameter)")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def plot_sweep(cols: dict, names: list[str], metric: str, path, title="", ylabel=None, yfactor=1.0):
    """``metric`` against the first grid name; one curve per value of the other names (up to 8), else points."""
    x = np.asarray(cols[names[0]], dtype=float)
    y = np.asarray(cols[metric], dtype=float) * yfactor
    xl, xf = quantity_axis(names[0], x)
    fig, ax = plt.subplots(figsize=(7, 4.8))
    rest = names[1:]
    keys = list(zip(*[np.asarray(cols[n]) for n in rest])) if rest else [()] * len(x)
    groups = list(dict.fromkeys(keys))
    if len(groups) <= 8:
        for g in groups:
            sel = np.array([k == g for k in keys])
            lab = ", ".join(f"{n} = {fmt_value(float(v), kind_of(n), 3)}" for n, v in zip(rest, g)) or None
            ax.plot(x[sel] * xf, y[sel], "o-", ms=4, label=lab)
        if rest:
            ax.legend(fontsize=8)
    else:
        ax.plot(x * xf, y, "o", ms=3, alpha=0.5)
    _scale_axis(ax, "x", names[0], x * xf)
    ax.set_xlabel(xl)
    ax.set_ylabel(ylabel or metric_axis(metric)[0])
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_validation(comps, path, title="predicted vs measured",
                    metrics=("ttft_mean_ms", "tbt_mean_ms", "output_throughput_tok_s")):
    """Predicted against measured per metric (log axes, y = x line), one colour per system, every system shown.

    ``comps``: :class:`sacmodel.data.runs.Comparison` objects; runs without a comparable value are left out
    and counted in the panel title.
    """
    systems = sorted({c.run.system for c in comps}, key=lambda s: (list(COLORS).index(s) if s in COLORS else 99, s))
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), 4.8))
    for ax, m in zip(np.atleast_1d(axes), metrics):
        pts = [(c.run.system, c.run.metrics.get(m), c.predicted.get(m)) for c in comps if c.error(m) is not None]
        for s in systems:
            xs = [x for sy, x, _ in pts if sy == s]
            ys = [y for sy, _, y in pts if sy == s]
            ax.scatter(xs, ys, label=f"{s} ({len(xs)})", color=COLORS.get(s, "#999999"), s=22,
                       edgecolor="white", linewidth=0.5)
        if pts:
            lo = min(min(x, y) for _, x, y in pts) / 1.15
            hi = max(max(x, y) for _, x, y in pts) * 1.15
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="predicted = measured")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
        ax.set_xscale("log")
        ax.set_yscale("log")
        _plain_log_ticks(ax.xaxis)
        _plain_log_ticks(ax.yaxis)
        ax.tick_params(axis="x", labelrotation=30)
        label = metric_axis(m)[0]
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted {label}")
        left = len(comps) - len(pts)
        ax.set_title(f"{label}: {len(pts)} runs" + (f" ({left} not comparable)" if left else ""), fontsize=9)
        ax.grid(alpha=0.3, which="both")
    np.atleast_1d(axes)[0].legend(fontsize=8, title="system (runs)", title_fontsize=8)
    fig.suptitle(title)
    return _save(fig, path)
