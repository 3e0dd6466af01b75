"""Analytic steady state of the serving model: a fixed point on the request throughput, no event engine.

It uses the same step model as the engine but replaces the simulation by averages: every rank holds
``concurrency / dp`` requests, a decode step sees the mean context ``L + O/2`` and the request's mean misses
over its output, and admissions and RDMA copies stall all ranks once per wave (the benchmark's requests move
in waves: a rank admits its requests together). Use it for quick sweeps of steady load; use the engine
(the default) for TTFT, percentiles, the first wave, capacity overflow and varied outputs. In particular its
TTFT of the pools that copy the prompt first (rdma, cxl-prefetch) leaves out that first tokens wait for the
copies scheduled after their prefill (the engine's overlap scheduler): it is a lower bound there.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq

from .config import Config, fetch_bandwidth
from sacmodel.serving.engine.stepmodel import Model
from sacmodel.serving.engine.workload import Requests


def steady_state(cfg: Config, reqs: Requests, concurrency: int) -> dict:
    """Metrics of the steady state (fields of :class:`sacmodel.serving.predict.Prediction`)."""
    mdl = Model(cfg)
    L = float(np.mean(reqs.context))
    O = float(np.mean(reqs.output))
    dp = cfg.dp
    b = max(1, math.ceil(min(concurrency, len(reqs)) / dp))
    active = min(dp, min(concurrency, len(reqs)))
    c = mdl.misses(int(L), int(max(O, 2)))
    m_mean = c[int(O) - 1] / max(O - 1, 1) if O > 1 else 0.0
    T = mdl.shared(b * active, False) + mdl.rank_time(b, active, L + O / 2, b * m_mean, L > cfg.device_buffer)
    if b > cfg.graph_bs:
        T += mdl.t_eager
    E = float(cfg.page) if reqs.cached.max() > 0 else L
    pf = mdl.shared(int(E * b * active), True, None, b * active) + b * mdl.prefill(E, L - E) + mdl.t_eager
    fetch = 0.0
    if cfg.system in ("rdma", "cxl-prefetch"):
        bw = fetch_bandwidth(cfg, tuple(range(active))).get(0, 0.0) if cfg.system == "rdma" else 0.0
        fetch = b * mdl.fetch(L, bw)
    fe = mdl.v["t_token"] * L

    def cycle(X: float) -> float:
        waves = X / (b * active)                     # waves per second
        stall = waves * (pf + fetch)
        if stall >= 1:
            return math.inf
        return mdl.v["t_request"] + fe * b * active / 2 + pf + fetch + (O - 1) * T / (1 - stall)

    hi = 1.0 / max(fe, 1e-9)
    g = lambda X: X * cycle(X) - concurrency  # noqa: E731
    X = brentq(g, 1e-9, hi * (1 - 1e-9)) if g(hi * (1 - 1e-9)) > 0 else hi
    R = cycle(X)
    stall = X / (b * active) * (pf + fetch)
    tbt = T / (1 - stall) + fetch / max(O - 1, 1)
    ttft = mdl.v["t_request"] + fe * b * active / 2 + pf
    return {"ttft_mean_ms": ttft * 1e3, "tbt_mean_ms": tbt * 1e3, "e2e_mean_ms": R * 1e3,
            "output_throughput_tok_s": X * O, "request_throughput_req_s": X,
            "breakdown": {"mean_step_ms": T * 1e3, "prefill_iteration_ms": pf * 1e3, "prefix_fetch_ms": fetch * 1e3,
                          "misses_per_layer_per_request": m_mean, "share_time_stalled": stall}}
