"""One instance replaying a request trace (arrivals, prompt and output lengths, prefix blocks)."""
from __future__ import annotations

import numpy as np

from ..data.records import DataError
from ..data.traces import Trace
from .capacity import static_check
from .config import resolve
from sacmodel.serving.engine.stepmodel import TRACE_CONTEXT_GRID, Model
from sacmodel.serving.engine.workload import Requests
from sacmodel.serving.engine.loop import run_engine
from .predict import Prediction, fill


def replay(scenario, system: str, trace: Trace, *, concurrency: int | None = None, time_scale: float = 1.0,
           cache: str = "trace", **resources) -> Prediction:
    """Replay ``trace`` (arrivals divided by ``time_scale``) through the engine for ``system``.

    ``cache``: 'trace' (Mooncake prefix blocks), 'none' (prefill everything) or 'all' (every prompt cached).
    ``concurrency``: requests in flight at most (default: what the GPUs' memory holds at the trace's mean
    lengths, with distinct prompts).
    """
    if cache not in ("trace", "none", "all"):
        raise DataError(f"cache must be 'trace', 'none' or 'all', not {cache!r}")
    if cache == "trace" and not trace.has_prefix_info:
        raise DataError(f"{trace.name}: the trace has no prefix information; choose cache='none' or 'all'")
    if not time_scale > 0:
        raise DataError("time_scale must be positive")
    cfg = resolve(scenario, system, **resources)
    L_max, O_max = int(trace.input_len.max()), int(trace.output_len.max())
    if cfg.model.max_position and L_max + O_max > cfg.model.max_position:
        raise DataError(f"{trace.name}: a request of {L_max} + {O_max} tokens exceeds {cfg.model.name}'s maximum "
                        f"position {cfg.model.max_position}")
    pred = Prediction(system, cfg.topo.name, int(trace.input_len.mean()), int(trace.output_len.mean()),
                      concurrency or 0, len(trace), True, None,
                      config={"trace": trace.name, "time_scale": time_scale, "cache": cache})
    alone = static_check(cfg, context=L_max, output=O_max, concurrency=1, prompts="distinct")
    if not alone["feasible"]:
        pred.feasible, pred.limit, pred.capacity = False, f"{alone['limit']} (largest request alone)", alone
        pred.success_fraction = 0.0
        return pred
    if concurrency is None:
        concurrency = memory_concurrency(cfg, int(trace.input_len.mean()), int(trace.output_len.mean()))
        pred.concurrency = concurrency
    cached = {"trace": trace.cached, "none": np.zeros(len(trace)), "all": trace.input_len - 1.0}[cache]
    reqs = Requests(trace.arrival / time_scale, trace.input_len, trace.output_len, np.asarray(cached, float))
    res = run_engine(cfg, reqs, concurrency, model=Model(cfg, context_grid=TRACE_CONTEXT_GRID))
    return fill(pred, cfg, reqs, res)


def memory_concurrency(cfg, context: int, output: int) -> int:
    """Largest concurrency whose memory use fits with distinct prompts (bisection on the static check)."""
    ok = lambda c: static_check(cfg, context=context, output=output, concurrency=c, prompts="distinct")["fits_at_once"]  # noqa: E731
    lo, hi = 1, 1
    while ok(hi * 2) and hi < 1 << 16:
        hi *= 2
    hi *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
