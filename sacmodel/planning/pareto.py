"""The throughput-per-GPU vs interactivity frontier (:func:`pareto`), the chart serving benchmarks such as
SemiAnalysis InferenceMAX draw: every configuration of systems, client concurrency, CXL devices and attention
parallelism is predicted, and the configurations no other one beats on both axes form the frontier.

Axes, as the benchmarks define them:

- **interactivity** ``tok_s_per_user`` (tokens/s per user) = 1 / TPOT = 1000 / ``tbt_mean_ms``. The
  prediction's mean TBT pools every inter-token gap; with the fixed output lengths of the benchmark it equals
  the mean time per output token of ``bench_serving`` (mean over requests of (E2E - TTFT) / (output - 1)).
- **throughput per GPU** ``tok_s_per_gpu`` (output tokens/s per GPU) = the server's output throughput
  divided by its GPUs (``tp``, every GPU of the server).

A configuration is on the frontier when it is feasible (every request completes) and no other feasible one
has at least its interactivity and its throughput per GPU, and more of one of them.
"""
from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field

import numpy as np

from ..hardware.build import follow_parallelism
from ..hardware.topology import Param, Topology
from ..serving.config import resolve, system_uses
from ..serving.predict import predict
from ..serving.systems import check_system
from ..util.names import LIMITS
from ..util.progress import track
from .common import SolverError, _positive_tokens, _topology, _with_value, queues
from .search import Tally

DEFAULT_CONCURRENCIES = (4, 8, 16, 32, 64, 128, 256)      # InferenceMAX's usual client sweep
SERVER_SETTINGS = ("dp", "cxl_devices", "rdma_nics", "device_buffer", "max_total_tokens", "max_running_requests")


@dataclass
class ParetoPoint:
    """One configuration and its predicted metrics (times in ms, throughputs in tokens/s).

    ``settings``: the server settings it ran with (``dp`` and the keyword arguments of :func:`predict` that
    describe the server; what :func:`sacmodel.sglang_command` takes); ``workload``: the client's side.
    """
    system: str
    concurrency: int
    dp: int
    tp: int
    gpus: int
    cxl_devices: int | None             # None: the system uses no CXL pool
    rdma_nics: int | None               # None: the system uses no RDMA pool
    feasible: bool
    success_fraction: float
    limit: str | None
    tok_s_per_user: float               # interactivity, 1 / TPOT (tokens/s per user)
    tok_s_per_gpu: float                # output tokens/s per GPU
    ttft_mean_ms: float
    ttft_p99_ms: float
    tbt_mean_ms: float
    e2e_mean_ms: float
    output_throughput_tok_s: float      # the whole server's
    queued: bool = False                # requests waited for memory: fewer users served at once than asked
    on_frontier: bool = False           # on the frontier across every system and setting
    on_system_frontier: bool = False    # on the frontier of its own system
    settings: dict = field(default_factory=dict)
    workload: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        """'cxl c64 dp8 2dev': the configuration in a few characters."""
        dev = f" {self.cxl_devices}dev" if self.cxl_devices is not None else ""
        return f"{self.system} c{self.concurrency} dp{self.dp}{dev}"


@dataclass
class ParetoResult:
    """Every configuration tried (``points``) and the frontier across them (``frontier``, by interactivity)."""
    scenario: str
    context: int
    output: int | tuple             # tokens per request, or (min, max) drawn uniformly per request
    points: list[ParetoPoint]
    topology: Topology | None = field(default=None, repr=False)     # the scenario the settings apply to
    predictions: dict = field(default_factory=dict)      # predictions run, by method (engine, analytic)

    @property
    def frontier(self) -> list[ParetoPoint]:
        """The points on the frontier across systems, by increasing interactivity (decreasing throughput)."""
        return sorted((p for p in self.points if p.on_frontier), key=lambda p: (p.tok_s_per_user, -p.tok_s_per_gpu))

    def system_frontier(self, system: str) -> list[ParetoPoint]:
        """The points on ``system``'s own frontier, by increasing interactivity."""
        return sorted((p for p in self.points if p.system == system and p.on_system_frontier),
                      key=lambda p: (p.tok_s_per_user, -p.tok_s_per_gpu))

    def to_dict(self) -> dict:
        return {"scenario": self.scenario, "context": self.context, "output": self.output,
                "x": "tok_s_per_user = 1000 / tbt_mean_ms (interactivity, 1 / TPOT)",
                "y": "tok_s_per_gpu = output_throughput_tok_s / gpus",
                "points": [{**asdict(p), "label": p.label} for p in self.points],
                "frontier": [self.points.index(p) for p in self.frontier], "predictions": self.predictions}


MAX_FRONT_POINTS = 10 ** 8       # points of pareto_front (a few arrays of 8 bytes each)


def pareto_front(x, y, valid=None) -> np.ndarray:
    """Mask of the points no other valid point dominates, both axes to be maximised.

    ``q`` dominates ``p`` when ``x[q] >= x[p]`` and ``y[q] >= y[p]`` with one of them strictly greater; equal
    points do not dominate each other (both stay on the frontier). Points not ``valid`` (and any with a
    non-finite coordinate) are never on it and dominate nothing. One sort, O(n log n): sorted by x falling, a
    point is dominated by a point of larger x and no smaller y, or of equal x and larger y.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise SolverError("pareto_front: x and y must be 1-d arrays of the same length")
    if x.size > MAX_FRONT_POINTS:
        raise SolverError(f"pareto_front: {x.size:,} points; at most {MAX_FRONT_POINTS:,}")
    ok = np.isfinite(x) & np.isfinite(y)
    if valid is not None:
        v = np.asarray(valid, dtype=bool)
        if v.shape != x.shape:
            raise SolverError("pareto_front: valid must be a 1-d array of the points' length")
        ok &= v
    on = np.zeros(x.shape, dtype=bool)
    idx = np.flatnonzero(ok)
    if not idx.size:
        return on
    order = idx[np.lexsort((-y[idx], -x[idx]))]          # x falling, then y falling
    xs, ys = x[order], y[order]
    start = np.r_[True, xs[1:] != xs[:-1]]               # first point of each run of equal x
    group = np.cumsum(start) - 1
    top = ys[start]                                      # the largest y of each run of equal x
    before = np.r_[-np.inf, np.maximum.accumulate(top)[:-1]]   # largest y at strictly larger x
    on[order] = (ys > before[group]) & (ys >= top[group])
    return on


def dp_choices(scenario) -> list[int]:
    """The attention parallelisms the scenario allows: every divisor of ``tp`` for MLA models (SGLang's DP
    attention), else the scenario's own ``dp``."""
    cfg = resolve(scenario, "gpu")
    if cfg.model.kind != "mla":
        return [cfg.dp]
    return [d for d in range(1, cfg.tp + 1) if cfg.tp % d == 0 and cfg.tp % cfg.ep == 0]


def with_dp(scenario, dp: int) -> Topology:
    """A copy of the scenario served with ``dp`` data-parallel attention groups on the same ``tp`` GPUs.

    The chunked-prefill size is SGLang's launch value divided by ``dp`` (per rank), so it is rescaled from the
    scenario's; ``mem_fraction`` is recomputed where the scenario took SGLang's default (its source says so),
    and kept where it was given.
    """
    t = copy.deepcopy(_topology(scenario))
    cfg = resolve(t, "gpu")
    if isinstance(dp, bool) or not isinstance(dp, (int, np.integer)) or dp < 1 or cfg.tp % dp:
        raise SolverError(f"dp={dp!r}: the attention groups must divide tp={cfg.tp} (try "
                          f"{', '.join(str(d) for d in dp_choices(t))})")
    dp = int(dp)
    if dp == cfg.dp:
        return t
    _set(t, "tp", cfg.tp, "kept: the GPUs of the server")
    _set(t, "dp", dp, "pareto: attention groups varied")
    follow_parallelism(t, cfg.dp)       # the per-rank chunk and SGLang's default mem_fraction follow dp
    t._routes.clear()
    return t


def _set(t: Topology, name: str, value: float, source: str) -> None:
    t.serving[name] = Param(float(value), source, f"{value:g}")


def _lists(scenario, systems, concurrencies, cxl_devices, dps):
    """The grid's axes, checked: systems, concurrencies, CXL device counts and attention groups."""
    if isinstance(systems, str):
        systems = [systems]
    systems = list(dict.fromkeys(systems or ()))
    if not systems:
        raise SolverError("give at least one system")
    for s in systems:
        check_system(s)
    t = _topology(scenario)
    for s in systems:
        for pool in ("cxl", "rdma"):
            if system_uses(s, pool) and not t.pools.get(pool):
                raise SolverError(f"{s} needs a {pool} pool and {t.name} has none (a built machine adds one "
                                  f"with pool='{pool}', --pool {pool})")
    conc = _counts("concurrency", concurrencies or DEFAULT_CONCURRENCIES, LIMITS["concurrency"])
    devs = _counts("cxl_devices", cxl_devices, 1024) if cxl_devices is not None else \
        list(range(1, len(t.pools.get("cxl", [])) + 1)) or [1]
    dps = _counts("dp", dps, 256) if dps is not None else dp_choices(t)
    n = len(conc) * len(dps) * sum(len(devs) if system_uses(s, "cxl") else 1 for s in systems)
    if n > LIMITS["predictions"]:
        raise SolverError(f"{n:,} configurations: at most {LIMITS['predictions']:,} predictions (a documented "
                          "limit); give fewer concurrencies, devices or dp values")
    return systems, conc, devs, dps


def _counts(name: str, values, hi: int) -> list[int]:
    try:
        vals = [values] if isinstance(values, (int, np.integer)) else list(values)
    except TypeError:
        raise SolverError(f"{name}: give a whole number or a list of them, got {values!r}") from None
    if not vals:
        raise SolverError(f"{name}: give at least one value")
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= hi:
            raise SolverError(f"{name} must be whole numbers from 1 to {hi:,}, got {v!r}")
    return sorted({int(v) for v in vals})


def pareto(scenario, systems, *, context: int, output: int = 1024, concurrencies=None, cxl_devices=None,
           dp=None, device_buffer: int | None = None, max_total_tokens: int | None = None,
           max_running_requests: int | None = None, method: str = "engine", draws: int | None = None,
           **workload) -> ParetoResult:
    """Predict every configuration and mark the throughput-per-GPU vs interactivity frontier.

    ``systems``: names (see ``SYSTEMS``); ``context`` and ``output``: tokens per request; ``concurrencies``:
    client concurrencies (requests in flight; default 4 to 256 in powers of two); ``cxl_devices``: CXL device
    counts for the systems that use the pool (default 1 to the scenario's pool size; more grow the pool as
    ``plan`` does); ``dp``: attention groups on the server's ``tp`` GPUs (default: every divisor of ``tp`` for
    MLA models, :func:`dp_choices`). Further keywords (``requests``, ``prompts``, ``prefix_cached``...) go to
    :func:`predict` unchanged. ``method="analytic"`` uses the steady state instead of the engine.
    """
    _positive_tokens("context", context)
    _positive_tokens("output", output, allow_range=True)
    systems, conc, devs, dps = _lists(scenario, systems, concurrencies, cxl_devices, dp)
    base = _topology(scenario)
    server = {k: v for k, v in dict(device_buffer=device_buffer, max_total_tokens=max_total_tokens,
                                    max_running_requests=max_running_requests).items() if v is not None}
    extra = {"method": method, **({"draws": draws} if draws is not None else {}), **workload}
    grid = [(d, s, n, c) for d in dps for s in systems for n in (devs if system_uses(s, "cxl") else [None])
            for c in conc]
    points, topo, counts = [], {}, Tally()
    for d, s, n, c in track(grid, f"pareto: {len(grid)} configurations"):
        if (d, n) not in topo:
            t = with_dp(base, d)
            topo[d, n] = (*(_with_value(t, "cxl_devices", n) if n is not None else (t, {})), resolve(t, "gpu").tp)
        t, kw, tp = topo[d, n]
        p = predict(t, s, context=context, output=output, concurrency=c, **server, **kw, **extra)
        counts.add(method)
        points.append(_point(p, s, c, d, tp, n, {**server, **kw},
                             {"context": context, "output": output, **workload}))
    _mark(points)
    return ParetoResult(base.name, int(context), output if isinstance(output, tuple) else int(output), points, base,
                        counts.to_dict())


def _point(p, system, concurrency, dp, tp, devices, server, workload) -> ParetoPoint:
    """A prediction as a point; the server's GPUs are its ``tp`` (DP attention groups share them)."""
    cfg, gpus = p.config, tp
    tbt, thr = p.tbt_mean_ms, p.output_throughput_tok_s
    ok = bool(p.feasible) and math.isfinite(tbt) and tbt > 0 and math.isfinite(thr)
    rnics = cfg.get("rdma_nics") if system_uses(system, "rdma") else None
    settings = {"dp": dp, **server, **({"rdma_nics": rnics} if rnics is not None else {})}
    return ParetoPoint(system, concurrency, dp, tp, gpus, devices, rnics, ok, float(p.success_fraction), p.limit,
                       1000.0 / tbt if ok else math.nan, thr / gpus if ok else math.nan, p.ttft_mean_ms,
                       p.ttft_p99_ms, tbt, p.e2e_mean_ms, thr, queues(p), settings=settings,
                       workload={**workload, "concurrency": concurrency})


def _mark(points: list[ParetoPoint]) -> None:
    """Set ``on_frontier`` (across all points) and ``on_system_frontier`` (within each system), over the
    configurations that serve their users: every request completes and none waits in the queue (a queued
    point's TBT is that of fewer users, its wait hidden in its TTFT)."""
    if not points:
        return
    x = np.array([p.tok_s_per_user for p in points])
    y = np.array([p.tok_s_per_gpu for p in points])
    ok = np.array([p.feasible and not p.queued for p in points])
    for p, on in zip(points, pareto_front(x, y, ok)):
        p.on_frontier = bool(on)
    for s in {p.system for p in points}:
        idx = [i for i, p in enumerate(points) if p.system == s]
        for i, on in zip(idx, pareto_front(x[idx], y[idx], ok[idx])):
            points[i].on_system_frontier = bool(on)
