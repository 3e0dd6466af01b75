"""Fitting the few free parameters of a scenario to measured data (scipy least squares).

Parameter names: a calibration/serving parameter (``t_layer``), every node of a kind (``node:rdma_nic.op_cost``)
or every link touching a GPU (``link:gpu.latency``). Residuals are relative errors (fetch latency) or log
ratios (serving metrics), so every metric weighs alike. :func:`write_params` records the fitted values in
the scenario file with a ``fitted:`` source.
"""
from __future__ import annotations

import copy
import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import least_squares

from .measured import FetchPoint, Run
from .systems import as_topology, fetch_latency_us
from .topology import Topology, TopologyError

# name -> (display unit, SI scale, lower, upper) ; the fit works in display units
PARAM_UNITS: dict[str, tuple[str, float, float, float]] = {
    "t_kernel": ("us", 1e-6, 0.0, 100.0),
    "outstanding_lines": ("", 1.0, 10.0, 1e5),
    "link:gpu.latency": ("ns", 1e-9, 0.0, 1e4),
    "node:rdma_nic.op_cost": ("us", 1e-6, 0.0, 100.0),
    "t_layer": ("ms", 1e-3, 0.0, 10.0),
    "compute_eff": ("", 1.0, 0.02, 1.0),
    "topk_overlap": ("", 1.0, 0.0, 1.0),
    "topk_churn_exponent": ("", 1.0, -1.0, 2.0),
    "t_admit": ("ms", 1e-3, 0.0, 5000.0),
    "t_request": ("ms", 1e-3, 0.0, 5000.0),
    "prefetch_poll": ("s", 1.0, 0.0, 60.0),
    "admit_bandwidth": ("GB/s", 1e9, 0.1, 1000.0),
    "copy_bandwidth": ("GB/s", 1e9, 0.1, 1000.0),
    "prefill_eff": ("", 1.0, 0.02, 1.0),
}
MICROBENCH_PARAMS = ("t_kernel", "outstanding_lines", "link:gpu.latency", "node:rdma_nic.op_cost")
SERVING_PARAMS = ("t_layer", "compute_eff", "topk_overlap", "topk_churn_exponent", "t_admit", "t_request",
                  "admit_bandwidth", "copy_bandwidth", "prefetch_poll")
SERVING_METRICS = ("ttft_mean_ms", "tbt_mean_ms", "output_throughput_tok_s")
PREFILL_PARAMS = ("prefill_eff",)          # fitted to the cold round 1 TTFTs


def get_param(topo: Topology, name: str) -> float:
    if name.startswith("node:"):
        kind, fld = name[5:].split(".")
        return topo.node(topo.nodes_of(kind)[0])[fld]
    if name.startswith("link:"):
        kind, fld = name[5:].split(".")
        u = topo.nodes_of(kind)[0]
        v = next(iter(topo.graph.successors(u)))
        return topo.graph.edges[u, v][fld]
    return topo.param(name)


def set_param(topo: Topology, name: str, value: float) -> None:
    """Set parameter ``name`` (SI) on an in-memory scenario (copy it first if it is shared)."""
    if name.startswith("node:"):
        kind, fld = name[5:].split(".")
        for n in topo.nodes_of(kind):
            topo.graph.nodes[n][fld] = value
    elif name.startswith("link:"):
        kind, fld = name[5:].split(".")
        for n in topo.nodes_of(kind):
            for u, v in list(topo.graph.out_edges(n)) + list(topo.graph.in_edges(n)):
                topo.graph.edges[u, v][fld] = value
    elif name in topo.calibration:
        topo.calibration[name].value = value
    elif name in topo.serving:
        topo.serving[name].value = value
    else:
        raise TopologyError(f"{topo.name}: no parameter {name!r} to set")
    topo._routes.clear()


def with_params(scenario, values: dict[str, float]) -> Topology:
    """A private copy of ``scenario`` with parameters replaced (SI values)."""
    t = copy.deepcopy(as_topology(scenario))
    for k, v in values.items():
        set_param(t, k, v)
    return t


@dataclass
class FitResult:
    params: dict[str, float]           # SI values
    display: dict[str, str]
    residual_rms: float
    n_points: int
    what: str


def _fit(topo, names, residuals, what) -> FitResult:
    for n in names:
        if n not in PARAM_UNITS:
            raise TopologyError(f"cannot fit {n!r}; fittable: {', '.join(PARAM_UNITS)}")
    scale = np.array([PARAM_UNITS[n][1] for n in names])
    lo = np.array([PARAM_UNITS[n][2] for n in names])
    hi = np.array([PARAM_UNITS[n][3] for n in names])
    x0 = np.array([get_param(topo, n) for n in names]) / scale
    work = copy.deepcopy(topo)
    span = hi - lo
    u0 = np.clip((x0 - lo) / span, 1e-6, 1 - 1e-6)   # fit in unit coordinates: every parameter in [0, 1]

    def fun(u):
        for n, v in zip(names, (lo + u * span) * scale):
            set_param(work, n, float(v))
        return residuals(work)

    def jac(u):
        # forward differences with an absolute step of 1% of each parameter's range: the engine's event
        # times make the objective slightly rough at finer scales
        f0 = fun(u)
        J = np.empty((len(f0), len(u)))
        for j in range(len(u)):
            h = 0.01 if u[j] + 0.01 <= 1 else -0.01
            du = u.copy()
            du[j] += h
            J[:, j] = (fun(du) - f0) / h
        return J
    r = least_squares(fun, u0, jac=jac, bounds=(0.0, 1.0), x_scale=1.0, xtol=1e-6)
    r.x = lo + r.x * span
    vals = {n: float(v) for n, v in zip(names, r.x * scale)}
    disp = {n: f"{v / PARAM_UNITS[n][1]:.4g} {PARAM_UNITS[n][0]}".strip() for n, v in vals.items()}
    return FitResult(vals, disp, float(np.sqrt(np.mean(r.fun ** 2))), len(r.fun), what)


def fit_microbench(scenario, points: list[FetchPoint], names=MICROBENCH_PARAMS) -> FitResult:
    """Fit fetch-path parameters to micro-benchmark means (relative residuals)."""
    topo = as_topology(scenario)

    def res(t):
        return np.array([fetch_latency_us(t, p.backend, topk=p.topk, entry_bytes=p.entry_bytes) / p.mean_us - 1
                         for p in points])
    return _fit(topo, list(names), res, f"{len(points)} micro-benchmark points")


def serving_residuals(topo: Topology, runs: list[Run], metrics=SERVING_METRICS) -> np.ndarray:
    from .serving import predict
    out = []
    for r in runs:
        p = predict(topo, r.system, **run_kwargs(r))
        for m in metrics:
            if m in r.metrics and r.metrics[m] > 0:
                v = getattr(p, m)
                out.append(math.log(v / r.metrics[m]) if p.feasible and v > 0 else 3.0)
    return np.array(out)


def run_kwargs(r: Run) -> dict:
    kw = dict(context=r.context, output=r.output, concurrency=r.concurrency, requests=r.requests)
    if r.cxl_devices and r.system in ("cxl", "cxl-prefetch"):
        kw["cxl_devices"] = r.cxl_devices
    if r.rdma_nics and r.system in ("rdma", "rdma-topk"):
        kw["rdma_nics"] = r.rdma_nics
    if r.device_buffer:
        kw["device_buffer"] = r.device_buffer
    if not r.prefix_cached:
        kw["prefix_cached"] = False
    return kw


def fit_serving(scenario, runs: list[Run], names=SERVING_PARAMS, metrics=SERVING_METRICS) -> FitResult:
    """Fit serving parameters to measured runs (log-ratio residuals of ``metrics``)."""
    topo = as_topology(scenario)
    runs = [r for r in runs if not r.failed]
    return _fit(topo, list(names), lambda t: serving_residuals(t, runs, metrics), f"{len(runs)} serving runs")


def _entry(name: str, v: float) -> str:
    unit, scale = PARAM_UNITS[name][0], PARAM_UNITS[name][1]
    return f"{v / scale:.6g} {unit}".strip()


def write_params(path: str | Path, fit: FitResult, source: str, *, template: str | Path | None = None) -> None:
    """Record fitted values in the scenario YAML at ``path`` with source ``fitted: <source>``.

    The text comes from ``template`` (default: ``path`` itself); comments and layout are kept, and the file
    is replaced only once the new text loads and gives back the fitted values
    (:func:`sacmodel.scenario_io.update_scenario`). Nothing is written after a failed fit.
    """
    from .scenario_io import ScenarioWriteError, update_scenario
    bad = [n for n, v in fit.params.items() if not math.isfinite(v)]
    if not fit.n_points or not math.isfinite(fit.residual_rms) or bad:
        raise ScenarioWriteError(f"the fit failed ({fit.n_points} points, rms residual {fit.residual_rms:g}"
                                 f"{', non-finite ' + ', '.join(bad) if bad else ''}); nothing written to {path}")
    src = f"fitted: {source}"
    entries = {name: (_entry(name, v), src) for name, v in fit.params.items()}
    expected = {name: float(_entry(name, v).split()[0]) * PARAM_UNITS[name][1] for name, v in fit.params.items()}
    update_scenario(template or path, path, entries, expected)
