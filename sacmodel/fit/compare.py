"""Predicted against measured: the ``predict`` arguments that reproduce a measured run, and the errors."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..data.runs import METRICS, Run


@dataclass
class Comparison:
    run: Run
    predicted: dict[str, float]
    feasible: bool
    limit: str | None

    def error(self, metric: str) -> float | None:
        """Relative error (predicted - measured) / measured, or None when not comparable."""
        m, p = self.run.metrics.get(metric), self.predicted.get(metric)
        if m is None or p is None or not m or not math.isfinite(p) or self.run.failed:
            return None
        return (p - m) / m


def compare_runs(scenario, runs: list[Run], **overrides) -> list[Comparison]:
    """Predict every run's configuration on ``scenario`` and pair it with the measurement."""
    from ..serving.predict import ConfigError, predict
    from .compare import run_kwargs
    out = []
    for r in runs:
        try:
            p = predict(scenario, r.system, **{**run_kwargs(r), **overrides})
        except ConfigError as exc:            # a measured setting the model refuses: the error names the run
            raise ConfigError(f"{r.file}: {exc}") from None
        predicted = {k: (v if v is not None and math.isfinite(v) else None) for k in METRICS
                     for v in [getattr(p, k)]}       # None: the model has no value (no TBT for one token)
        predicted["success_fraction"] = p.success_fraction
        out.append(Comparison(r, predicted, p.feasible, p.limit))
    return out


def mape_table(comps: list[Comparison], metrics=METRICS) -> dict[str, dict[str, float]]:
    """MAPE (%) per system and metric, plus the share of runs whose feasibility was predicted right."""
    out: dict[str, dict[str, float]] = {}
    for s in sorted({c.run.system for c in comps}):
        cs = [c for c in comps if c.run.system == s]
        row = {}
        for m in metrics:
            errs = [abs(e) for c in cs if (e := c.error(m)) is not None]
            if errs:
                row[m] = 100 * float(np.mean(errs))
        row["feasibility_right"] = 100 * float(np.mean([c.feasible == (not c.run.failed) for c in cs]))
        row["runs"] = len(cs)
        out[s] = row
    return out


def run_kwargs(r: Run) -> dict:
    """``predict`` arguments that reproduce a measured run's configuration and workload."""
    out = r.output if r.output_min is None or r.output_min == r.output_max else (r.output_min, r.output_max)
    # the testbed's prompts have exactly the target length (its logs: 64-token tails beyond the cached pages)
    # the testbed's client (bench_serving) sent every request at once: its users start together
    kw = dict(context=r.context, output=out, concurrency=r.concurrency, requests=r.requests, exact_prompt=True,
              start="together")
    if r.cxl_devices and r.system in ("cxl", "cxl-prefetch"):
        kw["cxl_devices"] = r.cxl_devices
    if r.rdma_nics and r.system in ("rdma", "rdma-topk"):
        kw["rdma_nics"] = r.rdma_nics
    if r.device_buffer and r.system != "gpu":
        kw["device_buffer"] = r.device_buffer
    if r.max_total_tokens:
        kw["max_total_tokens"] = r.max_total_tokens
    if r.max_running_requests:
        kw["max_running_requests"] = r.max_running_requests
    if not r.prefix_cached:
        kw["prefix_cached"] = False
    if r.outputs is not None and len(r.outputs) == r.requests and r.output_min != r.output_max and not r.failed:
        kw["outputs"] = [max(int(x), 1) for x in r.outputs]
    return kw
