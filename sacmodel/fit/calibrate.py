"""Fitting the few free parameters of a scenario to measured data (scipy least squares), in stages.

1. Fetch path (:func:`fit_microbench`): gather-kernel constants and link latency to the single-layer
   fetch micro-benchmark.
2. Decode step (:func:`fit_steps`): the step model's constants to the **time-resolved** decode step times of
   the server logs (every 40 decode steps, per rank: running requests and generation throughput), each
   interval at its requests' age since admission.
3. Front end, admission and prefix copy: the front end's work per prompt token measured in the server logs
   (:func:`measure_front_end`), then the rest (:func:`fit_serving`) to the runs' TTFT, TBT and throughput
   through the event engine, with the step constants fixed.
4. Prefill efficiency (``fit_serving(..., PREFILL_PARAMS, ("ttft_mean_ms",))``): to the cold first rounds.

Parameter names: a calibration/serving parameter (``t_graph_kernel``), every node of a kind (``node:rdma_nic.op_cost``)
or every link touching a GPU (``link:gpu.latency``). Residuals are relative errors (fetch latency) or log
ratios (serving metrics), so every metric weighs alike. :func:`write_params` records the fitted values in
the scenario file with a ``fitted:`` source.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from ..data.microbench import FetchPoint
from ..data.runs import Run
from ..hardware.params import get_param, set_param, with_params
from ..hardware.scenarios import as_topology
from ..hardware.topology import Topology, TopologyError
from ..serving.systems import fetch_latency_us
from .compare import run_kwargs

# name -> (display unit, SI scale, lower, upper): the fit works in display units within physical bounds
PARAM_UNITS: dict[str, tuple[str, float, float, float]] = {
    "t_kernel": ("us", 1e-6, 0.0, 100.0),
    "outstanding_lines": ("", 1.0, 10.0, 1e5),
    "link:gpu.latency": ("ns", 1e-9, 0.0, 1e4),
    "node:rdma_nic.op_cost": ("us", 1e-6, 0.0, 100.0),
    "t_graph_kernel": ("us", 1e-6, 0.5, 30.0),
    "compute_eff": ("", 1.0, 0.05, 1.0),
    "t_hs": ("ms", 1e-3, 0.0, 40.0),
    "t_hs_req": ("ms", 1e-3, 0.0, 2.0),
    "score_correlation": ("", 1.0, 0.5, 0.9995),
    "drift_settling": ("", 1.0, 0.0, 100.0),
    "settling_steps": ("steps", 1.0, 10.0, 10000.0),
    "t_request": ("ms", 1e-3, 0.0, 30.0),
    "t_token": ("us", 1e-6, 0.01, 5.0),
    "t_launch": ("us", 1e-6, 1.0, 200.0),
    "t_hs_admit": ("ms", 1e-3, 0.0, 50.0),
    "stage_copy_bw": ("GB/s", 1e9, 1.0, 50.0),
    "prefill_eff": ("", 1.0, 0.05, 1.0),
}
# What a physically reasonable value looks like, and why (the validation report lists it next to each fit)
PLAUSIBLE: dict[str, str] = {
    "t_graph_kernel": "2-15 us: one small kernel of a CUDA-graph decode step (a 2-3 us launch gap and its work on "
                      "the H20's 78 SMs)",
    "compute_eff": "0.15-0.6: small-batch decode kernels (projections, indexer, sparse attention)",
    "t_hs": "5-30 ms: HiSparse's blocking host syncs make the scheduler's per-step CPU work (Python) serial "
            "with the GPU",
    "t_hs_req": "0.05-1 ms: per-request bookkeeping, unfused top-k and HiSparse's own attention kernel",
    "score_correlation": "0.95-0.9999: consecutive decode queries are highly correlated",
    "drift_settling": "0-100: how much faster the query drifts right after admission than later",
    "settling_steps": "100-3000 steps: greedy decoding settles within hundreds to thousands of tokens",
    "t_request": "1-30 ms: an HTTP response on localhost: the request's JSON and its streamed chunks, the "
                 "detokeniser and the client outside the engine",
    "t_token": "0.2-2 us: the front end's serial work per prompt token (HTTP body, JSON, a fast tokenizer's "
               "0.5-5 M tokens/s)",
    "t_hs_admit": "1-20 ms: HiSparse's admission of a request on the scheduler's thread: 61 per-layer copies of the "
                  "prefix's last page, 8-9 GPU synchronisations, three hashes of the prompt's token ids "
                  "(hisparse_coordinator.py prepare_prefill_prefix_mappings, admit_request_into_staging)",
    "stage_copy_bw": "1-20 GB/s: one CPU thread copying into freshly allocated (page-faulting) buffers",
    "prefill_eff": "0.3-0.8 of peak FLOP/s in large prefill chunks",
}
# The same ranges as numbers (display units), and the a-priori value each fit may start from: the geometric
# middle of the range (of 1 - phi for the correlation; the plain middle where the range starts at 0). It
# uses no data, so a cross-validation fold that starts there learns nothing of the runs it leaves out.
PLAUSIBLE_RANGE: dict[str, tuple[float, float]] = {
    "t_graph_kernel": (2.0, 15.0), "compute_eff": (0.15, 0.6), "t_hs": (5.0, 30.0), "t_hs_req": (0.05, 1.0),
    "score_correlation": (0.95, 0.9999), "drift_settling": (0.0, 100.0), "settling_steps": (100.0, 3000.0),
    "t_request": (1.0, 30.0), "t_token": (0.2, 2.0), "t_hs_admit": (1.0, 20.0), "stage_copy_bw": (1.0, 20.0),
    "prefill_eff": (0.3, 0.8),
}


def from_prior(scenario, names=None):
    """``scenario`` with the constants ``names`` (default: stages 2 and 3) at their a-priori values; names
    without a plausible range keep the scenario's value."""
    names = (*STEP_PARAMS, *SERVING_PARAMS) if names is None else names      # a measured constant has no prior
    return with_params(scenario, {k: prior(k) for k in names if k in PLAUSIBLE_RANGE})


def prior(name: str) -> float:
    """A-priori value of a fitted constant (SI units), from its plausible range alone."""
    lo, hi = PLAUSIBLE_RANGE[name]
    if name == "score_correlation":
        v = 1 - math.sqrt((1 - lo) * (1 - hi))
    else:
        v = math.sqrt(lo * hi) if lo > 0 else (lo + hi) / 2
    return v * PARAM_UNITS[name][1]


MICROBENCH_PARAMS = ("t_kernel", "outstanding_lines", "link:gpu.latency", "node:rdma_nic.op_cost")
STEP_PARAMS = ("t_graph_kernel", "compute_eff", "t_hs", "t_hs_req", "score_correlation", "drift_settling",
               "settling_steps")
MEASURED_PARAMS = ("t_token",)             # stage 3, measured in the server logs (measure_front_end)
SERVING_PARAMS = ("t_request", "t_hs_admit", "stage_copy_bw")
SERVING_METRICS = ("ttft_mean_ms", "tbt_mean_ms", "output_throughput_tok_s")
PREFILL_PARAMS = ("prefill_eff",)          # fitted to the cold round 1 TTFTs



@dataclass
class FitResult:
    params: dict[str, float]           # SI values
    display: dict[str, str]
    residual_rms: float
    n_points: int
    what: str
    sources: dict[str, str] = field(default_factory=dict)     # the record of a constant measured, not fitted


def _fit(topo, names, residuals, what, diff_step: float = 0.01) -> FitResult:
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

    last: dict[bytes, np.ndarray] = {}

    def fun(u):
        # least_squares asks for the Jacobian right after the residuals at the same point: keep the last ones
        k = np.asarray(u, dtype=float).tobytes()
        if k not in last:
            for n, v in zip(names, (lo + u * span) * scale):
                set_param(work, n, float(v))
            last.clear()
            last[k] = residuals(work)
        return last[k].copy()

    def jac(u):
        # forward differences with an absolute step of ``diff_step`` of each parameter's range: the engine's
        # event times make the objective slightly rough at finer scales
        f0 = fun(u)
        J = np.empty((len(f0), len(u)))
        for j in range(len(u)):
            h = diff_step if u[j] + diff_step <= 1 else -diff_step
            du = u.copy()
            du[j] += h
            J[:, j] = (fun(du) - f0) / h
        return J
    # log-ratio residuals: a relative cost change below 1e-4 or a step below 1e-4 of a range is far inside
    # the runs' noise (2-4%), so the fit stops there; scaling by the Jacobian's columns takes a fit from the
    # a-priori values to the optimum in a third of the evaluations
    r = least_squares(fun, u0, jac=jac, bounds=(0.0, 1.0), x_scale="jac", ftol=1e-4, xtol=1e-4, gtol=1e-8)
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


# ---- decode steps from the server logs ------------------------------------------------------------------
@dataclass
class StepObservation:
    """Decode steps of one rank between two log lines: requests, their age and prompt, and the step time."""
    run: Run
    b: int                  # requests decoding on the rank
    age: float              # decode steps since the rank admitted them (middle of the interval)
    step_s: float           # measured mean step time
    weight: int = 1         # log intervals merged into this observation
    distinct: float = 0.0   # distinct decode positions over all ranks (admission batches of the waves)


def step_observations(runs: list[Run], bin_steps: int = 200) -> list[StepObservation]:
    """Steady decode intervals of every run with a server log and fixed outputs, merged per age bin.

    An interval counts when the rank ran no prefill since its previous decode line and the running count did
    not change; the age is counted from the rank's last prefill batch (its requests were admitted together).
    """
    obs = []
    for run in runs:
        if not run.server_log or run.output_min != run.output_max or run.failed or not run.prefix_cached:
            continue
        obs += [StepObservation(run, *o) for o in _log_observations(Path(run.server_log), bin_steps)]
    return obs


_OBS_SOURCES = ("fit/calibrate.py", "data/server_logs.py", "data/records.py", "util/reading.py", "util/names.py")


def _log_observations(path: Path, bin_steps: int) -> list[tuple]:
    """(b, age, step_s, weight, distinct) of the steady decode intervals of one server log (see
    :func:`step_observations`), kept in the on-disk cache keyed on the log's bytes and this code."""
    from ..data.records import LIMITS
    from ..util import cache
    try:
        small = path.is_file() and path.stat().st_size <= LIMITS["log_bytes"]
        k = cache.key(path.read_bytes(), str(path), str(bin_steps), code=_OBS_SOURCES) if small else None
    except OSError:
        k = None
    got = cache.load("step-observations", k) if k else None
    if isinstance(got, list):
        return got
    got = _steady_intervals(path, bin_steps)
    if k:
        cache.store("step-observations", k, got)
    return got


def _steady_intervals(path: Path, bin_steps: int) -> list[tuple]:
    from ..data.server_logs import load_server_log
    log = load_server_log(path).rounds(8)[1]
    bins: dict[tuple[int, int], list[float]] = {}
    dist: dict[tuple[int, int], list[float]] = {}
    # per rank: times of its decode lines and how many prefill batches its current wave came in
    waves = []
    for r in range(log.ranks):
        lg = log.rank(r)
        d = lg.decode
        pre = np.sort(lg.prefill["t"])
        prev = np.concatenate([[-np.inf], d["t"][:-1]])
        n_batches = np.searchsorted(pre, d["t"], side="right") - np.searchsorted(pre, prev, side="right")
        count = np.zeros(len(d))
        cur = 1
        for i, nb in enumerate(n_batches):
            cur = nb if nb else cur
            count[i] = min(max(cur, 1), d["running"][i])
        waves.append((d["t"], count))

    def distinct_at(t: np.ndarray) -> np.ndarray:
        """Decode positions over all ranks at each time ``t`` (at least 1), the ranks added in order."""
        tot = np.zeros(len(t))
        for times, count in waves:
            j = np.searchsorted(times, t, side="right") - 1
            tot = tot + np.where(j >= 0, count[np.maximum(j, 0)] if len(count) else 0.0, 0.0)
        return np.maximum(tot, 1.0)
    for r in range(log.ranks):
        lg = log.rank(r)
        d = lg.decode
        pre = np.sort(lg.prefill["t"])
        distinct = distinct_at(d["t"]).tolist()
        upto = np.searchsorted(pre, d["t"], side="right")         # prefill batches up to each decode line
        age, last = None, None
        for i in range(len(d)):
            t = d["t"][i]
            if last is None or upto[i] > upto[i - 1]:
                age, last = 40, t           # this line's interval holds the wave's admission
                continue
            if d["running"][i] == d["running"][i - 1] and d["gen_tps"][i] > 0:
                key = (int(d["running"][i]), int((age + 20) // bin_steps))
                bins.setdefault(key, []).append(d["running"][i] / d["gen_tps"][i])
                dist.setdefault(key, []).append(distinct[i])
            age += 40
            last = t
    out = []
    for (b, k), v in bins.items():
        if len(v) >= 4:
            out.append((b, (k + 0.5) * bin_steps, float(np.median(v)), len(v), float(np.median(dist[(b, k)]))))
    return out


def predicted_steps(topo: Topology, obs: list[StepObservation]) -> np.ndarray:
    """Step time (s) the model gives each observation: its rank's b requests at that age, all ranks alike."""
    from ..serving.config import resolve
    from sacmodel.serving.engine.stepmodel import Model
    out = np.empty(len(obs))
    models: dict = {}
    for j, o in enumerate(obs):
        kw = run_kwargs(o.run)
        key = (o.run.system, kw.get("cxl_devices"), kw.get("rdma_nics"), kw.get("device_buffer"),
               kw.get("max_total_tokens"))
        if key not in models:
            models[key] = Model(resolve(topo, o.run.system, **{k: v for k, v in kw.items() if k in (
                "cxl_devices", "rdma_nics", "device_buffer", "max_total_tokens")}))
        mdl = models[key]
        L0 = o.run.context
        active = min(mdl.cfg.dp, o.run.concurrency)
        a = int(o.age)
        c = mdl.misses(L0, max(o.run.output, a + 2))
        M = o.b * (c[a + 1] - c[a])
        n_tok = o.b * active
        distinct = int(round(min(o.distinct, n_tok)))
        out[j] = mdl.joined(mdl.shared(n_tok, False, distinct),
                            mdl.rank_time(o.b, active, L0 + a + 1, M, L0 > mdl.cfg.device_buffer),
                            mdl.tbo_left(n_tok, False, distinct))
    return out


def fit_steps(scenario, runs: list[Run], names=STEP_PARAMS, obs=None) -> FitResult:
    """Fit the decode-step constants to the server logs' time-resolved step times (log ratios)."""
    topo = as_topology(scenario)
    obs = obs if obs is not None else step_observations([r for r in runs if not r.failed])
    if not obs:
        raise TopologyError("no decode intervals to fit: the runs have no server logs with fixed outputs")
    meas = np.log([o.step_s for o in obs])
    per_run: dict[str, int] = {}
    for o in obs:
        per_run[o.run.file] = per_run.get(o.run.file, 0) + 1
    w = np.array([1.0 / math.sqrt(per_run[o.run.file]) for o in obs])   # every run weighs alike
    return _fit(topo, list(names), lambda t: w * (np.log(predicted_steps(t, obs)) - meas),
                f"{len(obs)} decode intervals of {len({o.run.file for o in obs})} server logs", diff_step=0.002)


def front_end_observations(runs: list[Run]) -> list[tuple[Run, float]]:
    """(run, seconds of front-end work per request) from the server logs' request arrivals.

    Round 2 releases ``concurrency`` requests at once; the HTTP server logs each as its one event loop takes
    it in, one after another, so the loop's rate is the number logged per whole second inside the wave
    (median; the first and last seconds are partial). Waves that fill fewer than three seconds of the log
    (one-second timestamps) give no rate.
    """
    from ..data.records import DataError
    from ..data.server_logs import load_server_log
    out = []
    for r in runs:
        if not r.server_log or r.failed:
            continue
        log = load_server_log(r.server_log)
        try:
            a = np.sort(log.rounds(8)[1].arrivals)
        except DataError:           # a log without a second round
            continue
        wave = a[:r.concurrency] - a[0]
        per_second = np.bincount(wave.astype(int))
        if len(wave) < r.concurrency or len(per_second) < 3:
            continue
        out.append((r, 1.0 / float(np.median(per_second[1:-1]))))
    return out


def front_end_per_token(obs: list[tuple[Run, float]]) -> float:
    """Seconds of front-end work per prompt token measured by :func:`front_end_observations` (the median over
    runs)."""
    if not obs:
        raise TopologyError("no request waves that span three seconds of a server log")
    return float(np.median([s / r.context for r, s in obs]))


def measure_front_end(runs: list[Run]) -> FitResult:
    """``t_token``, measured: the front end's intake of released waves in the runs' server logs
    (:func:`front_end_per_token`), not fitted to the runs' metrics."""
    obs = front_end_observations(runs)
    v = front_end_per_token(obs)
    what = f"the intake of the released waves of {len(obs)} server logs"
    return FitResult({"t_token": v}, {"t_token": f"{v / 1e-6:.4g} us"}, 0.0, len(obs), what,
                     {"t_token": f"measured: {what}"})


def variable_output_steps(runs: list[Run], age: float = 300.0, min_intervals: int = 8) -> list[StepObservation]:
    """Decode intervals of the variable-output runs (HiSparse pools other than RDMA), per running count.

    A check, never fitted: the requests of a rank there have mixed ages (outputs drawn per request, a new
    request admitted whenever one ends), so each observation carries one nominal ``age`` (steps) for the
    buffer's warm-up. RDMA is left out: its intervals hold the prefix copies of the continual admissions.
    An interval counts when the running count did not change; the median step time of at least
    ``min_intervals`` intervals per (run, running count) makes one observation.
    """
    from ..data.server_logs import load_server_log
    obs = []
    for run in runs:
        if (not run.server_log or run.output_min == run.output_max or run.failed or run.system == "rdma"
                or not run.prefix_cached):
            continue
        log = load_server_log(run.server_log).rounds(8)[1]
        per_b: dict[int, list[float]] = {}
        for r in range(log.ranks):
            d = log.rank(r).decode
            same = (d["running"][1:] == d["running"][:-1]) & (d["gen_tps"][1:] > 0)
            for b, tps in zip(d["running"][1:][same], d["gen_tps"][1:][same]):
                per_b.setdefault(int(b), []).append(b / tps)
        obs += [StepObservation(run, b, age, float(np.median(v)), len(v), float(b * log.ranks))
                for b, v in sorted(per_b.items()) if len(v) >= min_intervals]
    return obs


def step_residuals(scenario, obs: list[StepObservation]) -> np.ndarray:
    """Relative errors (predicted - measured) / measured of the step time of each observation."""
    return predicted_steps(as_topology(scenario), obs) / np.array([o.step_s for o in obs]) - 1


# ---- run-level metrics ------------------------------------------------------------------------------
# The RDMA runs' first-token latency is predicted but left out of the fit: what remains of its error comes
# from the front end, which delivers a wave's requests more slowly while the prefix copies run (the logs'
# admissions: about 100-240 ms per request during copies against 15-30 ms without), a mechanism the model does
# not have; fitting TTFT there would bend the copy bandwidth instead. The report includes that error.
NOT_FITTED = {("rdma", "ttft_mean_ms")}


# Constants a prediction reads only through its step model's static values (sacmodel.serving.config.static_values;
# the engine and the metrics read the scenario's constants through nothing else): a run whose static values did
# not move between two points of a fit has the same prediction at both (the RDMA pool's copy bandwidth moves
# only the RDMA runs, HiSparse's admission only HiSparse's).
STATIC_ONLY = frozenset(SERVING_PARAMS + PREFILL_PARAMS)


def serving_residuals(topo: Topology, runs: list[Run], metrics=SERVING_METRICS, skip=NOT_FITTED,
                      memo: dict | None = None) -> np.ndarray:
    """Log ratios predicted / measured of ``metrics`` of every run (3.0 where nothing was predicted).
    ``memo``: a dict kept over a fit that moves only :data:`STATIC_ONLY` constants, holding each run
    configuration's prediction under its static values, so that a run they leave alone (or a second run of the
    same configuration) is not simulated again."""
    out = []
    for i, r in enumerate(runs):
        p = _run_prediction(topo, r, i, memo)
        for m in metrics:
            if (r.system, m) in skip:
                continue
            if m in r.metrics and r.metrics[m] > 0:
                v = getattr(p, m)
                out.append(math.log(v / r.metrics[m]) if v and v > 0 and math.isfinite(v) else 3.0)
    return np.array(out)


def _run_prediction(topo: Topology, run: Run, i: int, memo: dict | None):
    from ..serving.config import resolve, static_values
    from ..serving.predict import predict
    kw = run_kwargs(run)
    if memo is None:
        return predict(topo, run.system, **kw, explain=False)
    cfg = resolve(topo, run.system, **{k: kw[k] for k in ("cxl_devices", "device_buffer", "rdma_nics",
                                                           "max_total_tokens", "max_running_requests") if k in kw})
    # keyed on the run's configuration, not its place: two runs of one configuration (the splits repeat some)
    # have the same prediction
    key = (run.system, tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in kw.items())),
           tuple(static_values(cfg).items()))
    p = memo.get(key)
    if p is None:
        p = memo[key] = predict(topo, run.system, **kw, explain=False)
    return p


def fit_serving(scenario, runs: list[Run], names=SERVING_PARAMS, metrics=SERVING_METRICS) -> FitResult:
    """Fit serving parameters to measured runs (log-ratio residuals of ``metrics``)."""
    topo = as_topology(scenario)
    runs = [r for r in runs if not r.failed]
    memo = {} if set(names) <= STATIC_ONLY else None
    return _fit(topo, list(names), lambda t: serving_residuals(t, runs, metrics, memo=memo),
                f"{len(runs)} serving runs")


def calibrate_runs(scenario, runs: list[Run], names=None) -> FitResult:
    """Stages 2 and 3 on measured runs: the step constants to their server logs, the front end measured in them,
    then the rest to the runs."""
    names = list(names) if names else list(STEP_PARAMS + MEASURED_PARAMS + SERVING_PARAMS)
    step_names = [n for n in names if n in STEP_PARAMS]
    run_names = [n for n in names if n not in STEP_PARAMS and n not in MEASURED_PARAMS]
    topo = as_topology(scenario)
    fits = []
    if step_names:
        fits.append(fit_steps(topo, runs, step_names))
        topo = with_params(topo, fits[-1].params)
    if any(n in MEASURED_PARAMS for n in names):
        fits.append(measure_front_end(runs))
        topo = with_params(topo, fits[-1].params)
    if run_names:
        fits.append(fit_serving(topo, runs, run_names))
    return FitResult({k: v for f in fits for k, v in f.params.items()},
                     {k: v for f in fits for k, v in f.display.items()},
                     float(np.sqrt(np.mean([f.residual_rms ** 2 for f in fits]))), sum(f.n_points for f in fits),
                     "; ".join(f.what for f in fits), {k: v for f in fits for k, v in f.sources.items()})


def _entry(name: str, v: float) -> str:
    unit, scale = PARAM_UNITS[name][0], PARAM_UNITS[name][1]
    if unit == "steps":                  # a count of decode steps: a bare number in the scenario file
        unit = ""
    return f"{v / scale:.6g} {unit}".strip()


def write_params(path: str | Path, fit: FitResult, source: str, *, template: str | Path | None = None) -> None:
    """Record fitted values in the scenario YAML at ``path`` with source ``fitted: <source>`` (a measured one
    with its own record, ``measured: ...``).

    The text comes from ``template`` (default: ``path`` itself); comments and layout are kept, and the file
    is replaced only once the new text loads and gives back the fitted values
    (:func:`sacmodel.hardware.scenario_io.update_scenario`). Nothing is written after a failed fit.
    """
    from ..hardware.scenario_io import ScenarioWriteError, update_scenario
    bad = [n for n, v in fit.params.items() if not math.isfinite(v)]
    if not fit.n_points or not math.isfinite(fit.residual_rms) or bad:
        raise ScenarioWriteError(f"the fit failed ({fit.n_points} points, rms residual {fit.residual_rms:g}"
                                 f"{', non-finite ' + ', '.join(bad) if bad else ''}); nothing written to {path}")
    src = f"fitted: {source}"
    entries = {name: (_entry(name, v), fit.sources.get(name, src)) for name, v in fit.params.items()}
    expected = {name: float(_entry(name, v).split()[0]) * PARAM_UNITS[name][1] for name, v in fit.params.items()}
    update_scenario(template or path, path, entries, expected)
