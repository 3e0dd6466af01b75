"""Serving model: TTFT, TBT, throughput, completion and memory of each KV-cache architecture.

:func:`predict` builds the workload (``requests`` in a closed loop, at most ``concurrency`` in flight; independent
users with distinct prompts, each joining at its own phase, unless the scenario's ``workload:`` or ``prompts=``
says they share one and start together, as the SAC testbed's benchmark does), checks capacity
(:mod:`sacmodel.serving.capacity`) and runs the event engine (:mod:`sacmodel.serving.engine.loop`) over the step
model (:mod:`sacmodel.serving.step`). A run whose device pool overflows stops where the server did;
``success_fraction`` says which share of the requests completed and ``limit`` names the resource.
"""
from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field

import numpy as np

from .bands import error_band
from .binding import what_binds
from .capacity import static_check
from .config import Config, ConfigError, PositionError, resolve, static_values, swap_route
from sacmodel.serving.engine.stepmodel import Model
from sacmodel.serving.engine.workload import Requests
from sacmodel.serving.engine.loop import run_engine

__all__ = ["ConfigError", "Prediction", "Requests", "compare", "predict", "resolve", "run_engine", "workload"]

# A request's way from the client to the server (network, HTTP, the client's event loop) can be given a delay
# that varies from request to request (``jitter``, s). Off by default: the testbed's clients and server share a
# host, and 0-5 ms of it would move the benchmark's 32K TTFT by 10-18% (a wave's requests reach the front end
# apart and are taken in differently), which the measured runs do not show.
CLIENT_JITTER = 0.0
# Draws of the requests' randomness (their delays if ``jitter``; their prompts' partial last pages where the
# caller asked for varying prompt lengths) that a prediction averages: its metrics are the mean over the draws,
# and ``spread`` gives their range. A workload with nothing random (the default: exact prompts, no jitter) is
# the same in every draw, so it takes one, whatever ``draws`` asks.
DRAWS = 4
SPREAD_METRICS = ("ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms", "tbt_mean_ms", "tbt_p99_ms", "e2e_mean_ms",
                  "output_throughput_tok_s", "request_throughput_req_s", "duration_s")


@dataclass
class Prediction:
    """Predicted serving metrics of one system on one workload. Times in ms, throughput in tokens/s.

    ``tbt_mean_ms`` pools every inter-token gap (as the benchmark does); ``success_fraction`` is the share of
    requests that complete (below 1 the run overflowed ``limit`` and ``feasible`` is False).
    """
    system: str
    scenario: str
    context: int
    output: int | tuple
    concurrency: int
    requests: int
    feasible: bool
    limit: str | None
    success_fraction: float = 1.0
    ttft_mean_ms: float = math.nan
    ttft_p50_ms: float = math.nan
    ttft_p99_ms: float = math.nan
    tbt_mean_ms: float = math.nan
    tbt_p99_ms: float = math.nan
    e2e_mean_ms: float = math.nan
    output_throughput_tok_s: float = math.nan
    request_throughput_req_s: float = math.nan
    duration_s: float = math.nan
    breakdown: dict = field(default_factory=dict)
    spread: dict = field(default_factory=dict)
    capacity: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    binding: dict = field(default_factory=dict)
    band: dict = field(default_factory=dict)
    band_basis: str = ""
    per_request: dict = field(default_factory=dict, repr=False)

    def to_dict(self, per_request: bool = False) -> dict:
        d = asdict(self)
        if not per_request:
            d.pop("per_request")
        else:
            d["per_request"] = {k: np.asarray(v).tolist() for k, v in self.per_request.items()}
        return _clean(d)


def _clean(x):
    if isinstance(x, float):
        return None if not math.isfinite(x) else x
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, np.generic):
        return _clean(x.item())
    return x


def _positive_int(name, v, allow_none=False):
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ConfigError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


def output_spec(output) -> tuple[int, int]:
    """(min, max) of the output lengths: an int (fixed) or a (min, max) pair drawn uniformly, each at most
    ``LIMITS["tokens"]``."""
    from ..util.names import LIMITS
    top = LIMITS["tokens"]
    if isinstance(output, (tuple, list)) and len(output) == 2:
        lo, hi = output
        for v in (lo, hi):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 or v > top:
                raise ConfigError(f"output range must be two whole numbers in 0..{top:,}, got {output!r}")
        if hi < lo or hi < 1:
            raise ConfigError(f"output range must have min <= max and max >= 1, got {output!r}")
        return int(lo), int(hi)
    n = _positive_int("output", output)
    if n > top:
        raise ConfigError(f"output={n} is above the limit of {top:,} tokens")
    return n, n


def workload(cfg: Config, *, context: int, output, requests: int, rate: float | None = None, seed: int = 0,
             prefix_cached: bool = True, prompts: str = "shared", cold_staging: bool = True,
             exact_prompt: bool = True, jitter: float = CLIENT_JITTER, phase: int = 0, concurrency: int = 0,
             lifetime: float = 0.0) -> Requests:
    """The benchmark's requests: one cached prompt of ``context`` tokens (or distinct prompts), outputs fixed
    or uniform in [min, max] (0 counts as 1, as the benchmark client does), arrivals at once or Poisson.
    ``cold_staging``: no host-pool entry is found yet for the shared prompt's prefix, so each rank's first hit
    backs the prompt up again (what the benchmark's second round meets: its logs show it on every rank).
    ``exact_prompt`` (default): the prompt has exactly ``context`` tokens, so a prefix hit leaves the same tail
    beyond the last full page for every request: SGLang matches a prefix page-aligned and computes at least one
    token, so the tail is ``context - page x floor((context - 1) / page)``, 1..page tokens (the testbed's logs
    show 64-token tails at 16K and 32K: ``#new-token`` 64 per request over ``#cached-token`` 16,320). False (on
    request only): the tail varies over the page from request to request (seeded), for prompts whose lengths
    vary by a few tokens. ``jitter``: each
    request reaches the server a uniform 0..jitter s after it is sent (seeded). ``phase``: which draw of the
    tails and delays (the workload's lengths and arrivals stay those of ``seed``). ``concurrency`` > 0 and
    ``lifetime`` > 0 (closed loop, staggered start): the first ``concurrency`` requests are the users' first,
    user k joining at ``(k + u_k) / concurrency x lifetime`` s with u_k uniform in [0, 1) (seeded, stratified:
    one user in each slice of a request's lifetime), and the rest follow in the closed loop."""
    lo, hi = output_spec(output)
    rng = np.random.default_rng(seed) if lo != hi or rate else None
    outs = np.full(requests, hi) if lo == hi else np.maximum(rng.integers(lo, hi + 1, size=requests), 1)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=requests)) if rate else np.zeros(requests)
    cached = np.full(requests, context if prefix_cached else 0)
    prefix = 0
    if prefix_cached and prompts == "shared":
        # the first round prefilled the prompt on every rank; the radix cache keeps its device pages
        prefix = context if cfg.system == "gpu" else max(0, context - cfg.prefill_chunk + cfg.page)
    tail = None
    if prefix_cached and not exact_prompt and cfg.page > 1:
        tail = np.random.default_rng([seed, 1, phase]).integers(1, cfg.page + 1, size=requests)
    delay = np.random.default_rng([seed, 2, phase]).uniform(0.0, jitter, size=requests) if jitter > 0 else None
    lead = min(concurrency, requests) if concurrency > 0 and lifetime > 0 and not rate else 0
    if lead:
        u = np.random.default_rng([seed, 3, phase]).uniform(0.0, 1.0, size=lead)
        arrivals[:lead] = (np.arange(lead) + u) / lead * lifetime
    return Requests(arrivals, np.full(requests, context), outs, cached, prefix_pages=prefix,
                    prompt=np.zeros(requests, dtype=np.int64) if prompts == "shared" else None,
                    cold_staging=bool(cold_staging and prefix_cached and prompts == "shared"), tail=tail,
                    delay=delay, lead=lead)


def default_prompts(topo) -> str:
    """The prompts of the workload a scenario stands for when a prediction names none: its ``workload:``
    field (the SAC testbed's: one shared prompt, its benchmark), else ``"distinct"`` (independent users)."""
    return getattr(topo, "workload", None) or "distinct"


def default_cached(prompts: str) -> bool:
    """Whether prompts are in the prefix cache when a prediction does not say: one shared prompt is (every
    request after the first hits it), distinct prompts are not (independent users' prompts were never sent
    before; bench_serving's random dataset draws fresh random tokens per request)."""
    return prompts == "shared"


def default_start(prompts: str) -> str:
    """How the users start when a prediction does not say: independent users (distinct prompts) are not
    synchronized, so each joins at its own phase (``"staggered"``); the testbed's benchmark (one shared prompt)
    sends every request at once (``"together"``), as its client (bench_serving) did."""
    return "together" if prompts == "shared" else "staggered"


def lifetime_estimate(cfg: Config, reqs: Requests, concurrency: int) -> float:
    """One request's expected lifetime (s, sending to last token) at ``concurrency`` users in steady state
    (the analytic steady state of :mod:`sacmodel.serving.analytic`, without waves: milliseconds, not a second
    engine run); 0 where the steady state has no answer (a capacity stop: the engine's run names it)."""
    from .analytic import steady_state
    res = steady_state(cfg, reqs, concurrency, None, start="staggered")
    e2e = res.get("e2e_mean_ms", math.nan)
    return float(e2e) / 1e3 if math.isfinite(e2e) and e2e > 0 else 0.0


def percentile(x, q: float) -> float:
    """``np.percentile(x, q)`` (linear interpolation, the same arithmetic) without importing ``numpy.ma``,
    which numpy 2.4's percentile does (40 ms of a 0.5 s command)."""
    s = np.sort(np.asarray(x, dtype=float))
    pos = (len(s) - 1) * q / 100.0
    i = min(int(pos), len(s) - 1)
    a, b, g = s[i], s[min(i + 1, len(s) - 1)], pos - i
    return float(b - (b - a) * (1.0 - g) if g >= 0.5 else a + (b - a) * g)


def _check(context, concurrency, requests, rate, prompts, method, start=None):
    """The workload arguments of :func:`predict`, within the documented limits (``util.names.LIMITS``)."""
    from ..util.names import LIMITS, RATE_RANGE
    for name, v, lim in (("context", context, "tokens"), ("concurrency", concurrency, "concurrency"),
                         ("requests", requests, "requests")):
        if v is None and name == "requests":
            continue
        _positive_int(name, v)
        if v > LIMITS[lim]:
            raise ConfigError(f"{name}={v} is above the limit of {LIMITS[lim]:,} per prediction")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float, np.integer, np.floating))
                             or not RATE_RANGE[0] <= rate <= RATE_RANGE[1]):
        raise ConfigError(f"rate must be a number of requests/s from {RATE_RANGE[0]:g} to {RATE_RANGE[1]:g}, "
                          f"got {rate!r}")
    if prompts not in (None, "shared", "distinct"):
        raise ConfigError(f"prompts must be 'shared', 'distinct' or None (the scenario's workload), not {prompts!r}")
    if start not in (None, "together", "staggered"):
        raise ConfigError(f"start must be 'together', 'staggered' or None (the workload's), not {start!r}")
    if start is not None and rate is not None:
        raise ConfigError("start: an open loop (rate) has its own Poisson arrivals; give start or rate, not both")
    if method not in ("engine", "analytic"):
        raise ConfigError(f"method must be 'engine' or 'analytic', not {method!r}")


def _check_flags(prefix_cached, draws, **flags) -> None:
    """:func:`predict`'s ``prefix_cached`` (True, False or None), ``draws`` (1 to 64) and True/False ``flags``."""
    if prefix_cached is not None and not isinstance(prefix_cached, bool):
        raise ConfigError(f"prefix_cached must be True, False or None, got {prefix_cached!r}")
    for name, v in flags.items():
        if not isinstance(v, bool):
            raise ConfigError(f"{name} must be True or False, got {v!r}")
    if isinstance(draws, bool) or not isinstance(draws, (int, np.integer)) or not 1 <= draws <= 64:
        raise ConfigError(f"draws must be a whole number from 1 to 64, got {draws!r}")


def predict(scenario, system: str, *, context: int, output, concurrency: int, requests: int | None = None,
            cxl_devices: int | None = None, device_buffer: int | None = None, rdma_nics: int | None = None,
            rate: float | None = None, max_total_tokens: int | None = None, max_running_requests: int | None = None,
            seed: int = 0, prefix_cached: bool | None = None, prompts: str | None = None, method: str = "engine",
            outputs=None, record: bool = False, cold_staging: bool = True, exact_prompt: bool = True,
            draws: int = DRAWS, start: str | None = None, explain: bool = True) -> Prediction:
    """Predict TTFT, TBT, E2E latency, throughput and completion of ``system`` on ``scenario``.

    Closed loop (default): ``requests`` (default 8 x concurrency) released at t = 0, at most ``concurrency``
    in flight; open loop: Poisson arrivals at ``rate`` requests/s. ``output``: an int, or a ``(min, max)``
    pair drawn uniformly per request (``seed``), or the exact lengths in ``outputs``. ``prefix_cached=False``:
    every prompt is prefilled from scratch (the testbed's first round); True: every prompt's KV is cached (a
    prompt seen before); None (default): cached for one shared prompt (the benchmark's second round), uncached
    for distinct prompts (independent users send prompts no one sent before, as bench_serving's random
    dataset does: no prefix hits). ``prompts="distinct"``: independent
    users, each request with its own prompt (and its own output tokens); ``"shared"``: every request hits one
    cached prompt (the testbed benchmark: the prefix is stored once, and greedy decoding gives every request
    the same tokens, so a MoE layer reads the experts of one token); None (default): the scenario's
    ``workload:`` (:func:`default_prompts`), else distinct. ``cold_staging`` (shared prompt): each rank's
    first hit finds no host-pool entry under its prefix key and backs the prompt up again, as in the testbed's
    second round; False: the entry exists (steady state). ``exact_prompt`` (default True): a prompt of
    ``context`` tokens has exactly ``context`` tokens; False: its last partial page varies from request to
    request (:func:`workload`). ``draws``: seeded draws of the requests' randomness the metrics average, where
    there is any (varying prompt tails; staggered users' joining phases, where two draws within 1% on every
    metric settle it: :data:`SETTLED`); ``spread`` reports their range. A workload with nothing random takes
    one draw. ``start`` (closed loop): ``"together"``: every user sends its first request at t = 0 (a
    benchmark client such as bench_serving, and the testbed's); ``"staggered"``: each user joins at its own
    phase, stratified over one request's expected lifetime (:func:`workload`, :func:`lifetime_estimate`),
    and the metrics are the steady state's: TTFT, TBT and E2E over the requests after each user's first
    (the ramp excluded, as a simulator excludes its warm-up), throughput over the time every user is in the
    loop (from the last user's joining to the last request sent); None (default): staggered for distinct
    prompts (independent users are not synchronized), together for a shared prompt (:func:`default_start`).
    An open loop (``rate``) has its own Poisson arrivals: ``start`` does not apply (giving both is an error).
    ``method="analytic"``: the steady state without the event engine (no percentiles; quicker; no waves when
    staggered). ``explain=False`` leaves ``binding`` (what binds each metric) empty: for a caller that reads
    only the metrics, such as a fit (the metrics are the same).
    """
    _check(context, concurrency, requests, rate, prompts, method, start)
    _check_flags(prefix_cached, draws, cold_staging=cold_staging, exact_prompt=exact_prompt, explain=explain)
    lo, hi = output_spec(output)
    cfg = resolve(scenario, system, cxl_devices=cxl_devices, device_buffer=device_buffer, rdma_nics=rdma_nics,
                  max_total_tokens=max_total_tokens, max_running_requests=max_running_requests)
    prompts = default_prompts(cfg.topo) if prompts is None else prompts
    prefix_cached = default_cached(prompts) if prefix_cached is None else prefix_cached
    start = None if rate else (default_start(prompts) if start is None else start)
    if cfg.model.max_position and context + hi > cfg.model.max_position:
        raise PositionError(f"context {context} + output {hi} exceeds {cfg.model.name}'s maximum position "
                          f"{cfg.model.max_position}")
    n_req = requests if requests is not None else 8 * concurrency
    if outputs is not None:
        outputs = _outputs(cfg, outputs, n_req, context)
    out_field = hi if lo == hi else (lo, hi)
    pred = Prediction(system, cfg.topo.name, context, out_field, concurrency, n_req, True, None,
                      config={"cxl_devices": cfg.cxl_devices, "rdma_nics": cfg.rdma_nics,
                              "device_buffer": cfg.device_buffer, "dp": cfg.dp, "rate": rate,
                              "max_total_tokens": cfg.max_total_tokens,
                              "max_running_requests": cfg.max_running_requests, "prompts": prompts,
                              "prefix_cached": prefix_cached, "cold_staging": cold_staging, "start": start})
    pred.band, pred.band_basis = error_band(cfg, context=context, output=hi, concurrency=concurrency)
    if method == "analytic":
        pred.band_basis += "; measured for the engine, not for the analytic steady state"
    cap = static_check(cfg, context=context, output=hi, concurrency=concurrency, prompts=prompts)
    pred.capacity = cap
    if not cap["feasible"]:
        pred.feasible, pred.limit, pred.success_fraction = False, cap["limit"], 0.0
        return pred
    life = 0.0                                  # one request's lifetime (s) over which staggered users join
    def requests_of(phase: int) -> Requests:
        r = workload(cfg, context=context, output=(lo, hi), requests=n_req, rate=rate, seed=seed,
                     prefix_cached=prefix_cached, prompts=prompts, cold_staging=cold_staging,
                     exact_prompt=exact_prompt, phase=phase, concurrency=concurrency, lifetime=life)
        if outputs is not None:
            r.output = outputs
        return r
    if method == "analytic":
        from .analytic import steady_state
        res = steady_state(cfg, requests_of(0), concurrency, rate, start=start or "together")
        for k, v in res.items():
            setattr(pred, k, v)
        return pred
    # the server's warm-up request and the first round went round-robin before: round 2 starts one rank on
    first_round = cfg.dp + 1 if prefix_cached else 1
    if start == "staggered":
        life = lifetime_estimate(cfg, requests_of(0), concurrency)
    model = Model(cfg)
    tails = prefix_cached and not exact_prompt and cfg.page > 1
    runs, first = _draw_runs(pred, cfg, model, requests_of, concurrency, draws, tails, start == "staggered",
                             record=record, first_round=first_round)
    pred = _average(pred, runs)
    if explain:
        pred.binding = what_binds(cfg, model, first[0].stats, first[1], pred)
    return pred


def _draw_runs(pred, cfg, model, requests_of, concurrency, draws, tails, staggered, *, record, first_round):
    """The engine's runs of ``draws`` draws of the requests' randomness, and the first run's (result, requests):
    the prompts' tails where they vary, and staggered users' joining phases, each draw its own, so a lockstep of
    waves that a 1% step would flip is averaged over the draws as over a real server's runs; with nothing drawn,
    one run."""
    if not (tails or staggered):
        draws = 1
    runs, first = [], None
    for d in range(draws):
        reqs = requests_of(d)
        res = run_engine(cfg, reqs, concurrency, model=model, record=record and d == 0, first_round=first_round)
        first = first or (res, reqs)
        runs.append(fill(copy.copy(pred) if d else pred, cfg, reqs, res, model))
        if d == 1 and not tails and _settled(runs):
            break               # two phase draws agree: no lockstep for a step to flip, the rest would repeat them
    return runs, first


def _outputs(cfg: Config, outputs, n_req: int, context: int) -> np.ndarray:
    """``predict``'s explicit output lengths, checked: ``n_req`` whole numbers of tokens within the limits."""
    from ..util.names import LIMITS
    try:
        arr = np.asarray(outputs)
        ok = arr.ndim == 1 and len(arr) == n_req and arr.dtype.kind in "iu" and \
            bool(((arr >= 1) & (arr <= LIMITS["tokens"])).all())
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ConfigError(f"outputs must be {n_req} whole numbers of tokens in 1..{LIMITS['tokens']:,}")
    outputs = arr.astype(np.int64)
    if cfg.model.max_position and context + int(outputs.max()) > cfg.model.max_position:
        raise PositionError(f"context {context} + output {int(outputs.max())} (outputs) exceeds "
                            f"{cfg.model.name}'s maximum position {cfg.model.max_position}")
    return outputs


SETTLED = 0.01      # two draws of the users' joining phases within 1% on every metric: the draws stop there


def _settled(runs: list[Prediction]) -> bool:
    """Whether the first two draws agree within :data:`SETTLED` on every metric of :data:`SPREAD_METRICS` (users
    whose waves do not fall into a lockstep give the same steady state whatever their phases)."""
    a, b = runs[0], runs[1]
    for m in SPREAD_METRICS:
        x, y = getattr(a, m), getattr(b, m)
        if not (math.isfinite(x) and math.isfinite(y)) or abs(x - y) > SETTLED * max(abs(x), abs(y), 1e-12):
            return False
    return True


def _average(pred: Prediction, runs: list[Prediction]) -> Prediction:
    """The first draw's prediction with each metric the mean over the draws, and its [min, max] as spread."""
    if len(runs) == 1:
        return pred
    for m in SPREAD_METRICS:
        vals = [getattr(r, m) for r in runs if math.isfinite(getattr(r, m))]
        if vals:
            setattr(pred, m, float(np.mean(vals)))
            pred.spread[m] = [float(min(vals)), float(max(vals))]
    pred.success_fraction = float(np.mean([r.success_fraction for r in runs]))
    pred.spread["draws"] = len(runs)
    return pred


def simulate(cfg: Config, reqs: Requests, concurrency: int, **engine_kw) -> Prediction:
    """Run the engine on a resolved configuration and explicit requests; metrics plus ``per_request`` arrays
    (the interface the multi-instance package builds on)."""
    pred = Prediction(cfg.system, cfg.topo.name, int(np.mean(reqs.context)) if len(reqs) else 0,
                      int(np.mean(reqs.output)) if len(reqs) else 0, concurrency, len(reqs), True, None)
    return fill(pred, cfg, reqs, run_engine(cfg, reqs, concurrency, **engine_kw))


def fill(pred: Prediction, cfg: Config, reqs: Requests, res, model: Model | None = None) -> Prediction:
    """Metrics of an engine run, over the requests that completed; with a staggered start (``reqs.lead``),
    latencies over the requests after the users' first ones and throughput over the window in which every
    user is in the loop (:func:`steady_window`). ``model``: the run's step model (built from ``cfg`` if not
    given)."""
    ok = res.completed
    out = reqs.output.astype(float)
    pred.success_fraction = float(ok.mean()) if len(ok) else 1.0
    if res.crash is not None:
        pred.feasible = False
        pred.limit = f"{res.crash.resource}: {res.crash.reason}"
    ttft = (res.first - res.release) * 1e3
    e2e = (res.done - res.release) * 1e3
    steady = np.arange(len(ok)) >= reqs.lead if 0 < reqs.lead < len(ok) else np.ones(len(ok), dtype=bool)
    okm = ok & steady
    multi = okm & (out > 1)
    gaps = (res.done - res.first)[multi]
    if okm.any():
        pred.ttft_mean_ms = float(ttft[okm].mean())
        pred.ttft_p50_ms = percentile(ttft[okm], 50)
        pred.ttft_p99_ms = percentile(ttft[okm], 99)
        pred.e2e_mean_ms = float(e2e[okm].mean())
    if multi.any():
        pred.tbt_mean_ms = float(gaps.sum() / (out[multi] - 1).sum() * 1e3)
        pred.tbt_p99_ms = percentile(gaps / (out[multi] - 1) * 1e3, 99)
    end = float(np.nanmax(res.done)) if ok.any() else math.nan
    if res.crash is not None:
        end = res.crash.time
    duration = end - float(np.nanmin(res.release)) if ok.any() else math.nan
    pred.duration_s = duration
    window = steady_window(reqs, res) if res.crash is None else None
    if window is not None:
        pred.output_throughput_tok_s, pred.request_throughput_req_s = window
    elif duration and duration > 0:
        pred.output_throughput_tok_s = float(out[ok].sum() / duration)
        pred.request_throughput_req_s = float(ok.sum() / duration)
    pred.breakdown = breakdown(cfg, res, duration, model)
    pred.per_request = {"release_s": res.release, "first_s": res.first, "done_s": res.done, "ttft_ms": ttft,
                        "tbt_ms": np.where(out > 1, (res.done - res.first) / np.maximum(out - 1, 1) * 1e3, np.nan),
                        "e2e_ms": e2e, "output": reqs.output, "completed": ok, "steady": steady}
    if res.timeline:
        pred.breakdown["timeline"] = res.timeline
    return pred


def steady_window(reqs: Requests, res) -> tuple[float, float] | None:
    """Output tokens/s and requests/s while every user is in the loop of a staggered start: from the last
    user's joining to the last request's sending (after it the run drains). A request's first token counts at
    its first-token time and the other ``output - 1`` evenly over its span to the last token. None: no
    staggered start, or no such window (no request beyond the users' first ones)."""
    lead, n = reqs.lead, len(reqs)
    if not 0 < lead < n:
        return None
    t0, t1 = float(res.release[lead - 1]), float(np.nanmax(res.release))
    if not t1 > t0:
        return None
    out = reqs.output.astype(float)
    first, done = res.first, res.done
    ok = np.isfinite(first) & np.isfinite(done)
    f, d, o = first[ok], done[ok], out[ok]
    at_first = ((f >= t0) & (f < t1)).astype(float)
    span = np.maximum(d - f, 1e-12)
    share = np.clip((np.minimum(d, t1) - np.maximum(f, t0)) / span, 0.0, 1.0)
    tokens = float((at_first + (o - 1.0) * share).sum())
    ended = float(((d >= t0) & (d < t1)).sum())
    return tokens / (t1 - t0), ended / (t1 - t0)


def breakdown(cfg: Config, res, duration: float, model: Model | None = None) -> dict:
    """Where a decode step's time goes (ms, time-weighted over the run) and how the run spent its time
    (``model``: the run's step model, built from ``cfg`` if not given)."""
    s = res.stats
    mdl = model if model is not None else Model(cfg)
    comp: dict[str, float] = {}
    total = 0.0
    for (b, active, lg), (w, wl, wm) in s.get("swap_states", {}).items():
        terms = mdl.rank_terms(b, active, wl / w, wm / w, lg)
        for k, x in terms.items():
            comp[k] = comp.get(k, 0.0) + w * x
        total += w
    out = {f"step_{k}_ms": v / total * 1e3 for k, v in comp.items()} if total else {}
    steps_ = max(s.get("decode_steps", 0), 1)
    out["step_shared_ms"] = s.get("shared_s", 0.0) / steps_ * 1e3
    out["mean_step_ms"] = s.get("decode_s", 0.0) / steps_ * 1e3
    if total:
        out["misses_per_layer_per_request"] = sum(wm / b for (b, _, _), (w, wl, wm) in s["swap_states"].items()) / total
    if duration and duration > 0:
        out["share_time_prefill"] = s.get("prefill_s", 0.0) / duration
        out["share_time_prefix_fetch"] = s.get("fetch_s", 0.0) / duration
        out["share_time_decode"] = s.get("decode_s", 0.0) / duration
        out["share_time_cold_backup"] = s.get("cold_backup_s", 0.0) / duration
    out["cold_backup_s"] = s.get("cold_backup_s", 0.0)      # GPU time the ranks' cold staging backups held
    if s.get("first_token_copy_wait_s"):       # first tokens held back by the next batch's prefix copies
        out["ttft_copy_wait_ms"] = s["first_token_copy_wait_s"] / max(len(res.first), 1) * 1e3
    out["peak_device_tokens_per_rank"] = s.get("peak_used", 0.0)
    out["peak_requests_per_rank"] = s.get("peak_rank_requests", 0)
    if "peak_host" in s:
        out["peak_host_tokens_per_rank"] = s["peak_host"]
    if cfg.system != "gpu":
        bw, _ = swap_route(cfg, cfg.dp)
        out["swap_bandwidth_share_GBps"] = bw / 1e9
    return out


def compare(scenario, systems=("gpu", "dram", "cxl", "rdma"), **kw) -> dict[str, Prediction]:
    """``predict`` for several systems on the same workload."""
    return {s: predict(scenario, s, **kw) for s in systems}


def values(cfg: Config) -> dict:
    """The static numbers of the step model for a configuration (for display and the solvers)."""
    return static_values(cfg)
