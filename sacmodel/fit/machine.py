"""Your machine in a few runs: fit the constants a machine decides to its own benchmark runs (SGLang
``bench_serving`` or vLLM ``bench serve`` results, :mod:`sacmodel.data.bench`).

The interface is small on purpose: :data:`MACHINE_CONSTANTS` maps a constant's name to the scenario parameter it
sets, its physical range, its kind (``software``: carried unchanged to another GPU; ``kernel``: moved by the
transfer rules of :mod:`sacmodel.hardware.transfer`) and the run that pins it. Values are applied to a scenario
through the scenario-override mechanism (:func:`sacmodel.hardware.params.with_params`), so when the kernel
classes of the step model are renamed only this table changes.

:func:`fit_machine` decides which constants the given runs identify (from the Jacobian of the log errors of
TTFT, TPOT and throughput at the transferred values: a constant is identified when its linearised standard
deviation, at a benchmark repeatability of :data:`NOISE`, stays under :data:`IDENTIFIED_SD` with the constants
already taken), fits those within their ranges (least squares in log space, with each constant's transferred
value as a prior whose width is its physical range, :func:`prior_width`: a maximum a posteriori fit), keeps at its
transferred value any whose fitted move stays under :data:`MOVED_SD` of its standard deviations at that
repeatability (:func:`moved_sd`: the runs do not tell it from its transferred value), gives each a standard deviation
(Gauss-Newton, from the Jacobian at the solution and the residuals' own scatter, never below the repeatability),
and leaves every other constant at its transferred value, saying which run would pin it. Each fitted constant
also gets an interval from a bootstrap over runs (:func:`bootstrap`: the runs resampled with replacement,
seeded, each draw one Gauss-Newton step from the solution on the draw's rows), written into the scenario's
provenance. The band a calibrated scenario prints is the leave-one-run-out error of the same protocol
(:func:`cross_validate`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..data.bench import BenchRun
from ..data.records import DataError

NOISE = 0.02            # run-to-run repeatability of a benchmark's mean TPOT / throughput (log units)
# each metric's repeatability relative to NOISE: a mean TTFT scatters about twice as much (the public H200 runs:
# 260 ms at concurrency 4, 245 ms at 8), so its errors weigh half in the fit
WEIGHT = {"ttft": 0.5, "tpot": 1.0, "throughput": 1.0}
# errors beyond this (log units) weigh less than squared (soft L1): one metric the model cannot follow (a
# queueing TTFT it under-predicts) does not drag every constant away from what the other metrics say
ROBUST = 0.1
FOLLOW = 0.2    # a fitted run still missed by more than this is named (MachineFit.warnings)
IDENTIFIED_SD = 0.25    # a constant is identified when its linearised sd (log units) is below this
METRICS = ("ttft", "tpot", "throughput")
# requests the engine simulates per evaluation of the runs, at most: a calibration evaluates every run at each step
# of its Jacobian, its fit and its leave-one-run-out check (dozens of times), and one evaluation of 100,000
# requests takes 4-20 s (bench_serving's default is 1,000 prompts)
MAX_CALIBRATION_REQUESTS = 10_000


@dataclass(frozen=True)
class MachineConstant:
    """A constant the machine decides: the scenario ``param`` it sets, its physical range (SI), ``kind``
    (software / kernel) and the run that pins it."""
    param: str
    lo: float
    hi: float
    kind: str
    pins: str
    range_source: str
    unit: float = 0.0       # > 0: fitted as value / unit (an additive time); 0: fitted as log(value) (a rate)
    probe: tuple = (1024, 128, 1)   # the pinning run's (prompt, output, concurrency): checked to move the constant

    def to_x(self, v: float) -> float:
        return v / self.unit if self.unit else math.log(v)

    def from_x(self, x: float) -> float:
        return x * self.unit if self.unit else math.exp(x)


MACHINE_CONSTANTS: dict[str, MachineConstant] = {
    "t_request": MachineConstant(
        "t_request", 1e-4, 0.3, "software",
        "a run at concurrency 1 with a short prompt (1K): its TTFT is this path plus one short prefill",
        "HTTP, tokenizer, detokenizer and the client between the benchmark and the engine: about 1 ms on "
        "localhost to 300 ms through a gateway (public harnesses show 60-80 ms, issue 32)", unit=0.01),
    "t_graph_kernel": MachineConstant(
        "t_graph_kernel", 1e-6, 15e-6, "kernel",
        "a run at concurrency 1 (TPOT of a one-request decode step is the small-kernel floor)",
        "an in-graph small kernel of a decode step: 1-15 us on Hopper and Blackwell"),
    "moe_eff": MachineConstant(
        "moe_eff", 0.3, 0.95, "kernel",
        "a run at concurrency 64 or more (TPOT of a batch that reads most experts)",
        "grouped-GEMM weight reads reach 0.5-0.9 of HBM bandwidth", probe=(1024, 128, 64)),
    "prefill_eff": MachineConstant(
        "prefill_eff", 0.2, 0.9, "kernel",
        "a run with long prompts (8K or more) at low concurrency, beside a 1K one (the TTFT the longer prompt adds)",
        "prefill GEMMs reach 0.2-0.9 of the tensor-core peak", probe=(8192, 128, 4)),
    "moe_prefill_eff": MachineConstant(
        "moe_prefill_eff", 0.03, 0.78, "kernel",
        "a run with long prompts (8K or more) beside a 1K one (the TTFT the longer prompt adds; the routed experts "
        "are a third of it)",
        "the routed experts' grouped GEMMs at prefill sizes reach 0.03 (vLLM's Triton fused MoE at DeepSeek's TP8 "
        "shapes on H100: 2,818 us for 2,048 tokens, 64 of 1,979 TFLOP/s, vllm-project/vllm#13932) to 0.78 of the "
        "tensor-core peak (DeepGEMM's best, deepseek-ai/DeepGEMM README)", probe=(8192, 128, 4)),
    "compute_eff": MachineConstant(
        "compute_eff", 0.1, 0.9, "kernel",
        "a run at long context (32K or more) and high concurrency (decode attention over the context)",
        "decode attention and small GEMMs reach 0.1-0.9 of the tensor-core peak", probe=(32768, 64, 64)),
}


def constant_range(topo, name: str) -> tuple[float, float]:
    """The physical range (SI) of constant ``name`` on ``topo``'s machine: :data:`MACHINE_CONSTANTS`' range,
    except where the kernel the server runs has published rates below the GPU's peak. Then ``prefill_eff`` (a
    fraction of the peak) spans that kernel's published rates at prefill shapes, as the tensor-core range spans
    the published block-FP8 GEMMs': FlashInfer's TRT-LLM FP8 GEMM on Blackwell, 295-533 of 4,500 TFLOP/s
    (:func:`sacmodel.hardware.transfer.prefill_gemm_range`)."""
    c = MACHINE_CONSTANTS[name]
    if name == "prefill_eff" and topo is not None and "fp8_gemm_backend" in topo.serving:
        from ..hardware.transfer import prefill_gemm_range
        from ..serving.config import weights_of
        span = prefill_gemm_range(topo.node(topo.gpus[0])["flops_fp8"], weights_of(topo),
                                  topo.serving["fp8_gemm_backend"].raw)
        if span is not None:
            return span
    return c.lo, c.hi


def _ranges(topo, names) -> dict[str, tuple[float, float]]:
    return {n: constant_range(topo, n) for n in names}


def apply_constants(topo, values: dict[str, float]):
    """A private copy of ``topo`` with the named machine constants (SI) set, through the scenario-override
    mechanism; a stand-in of :data:`TAKES_OVER` not given moves in proportion with the constant it stands in for
    (``prefill_eff`` is the class's prefill rate: the routed experts' follows it)."""
    from ..hardware.params import with_params
    vals = {MACHINE_CONSTANTS[k].param: v for k, v in values.items()}
    for n, alt in TAKES_OVER.items():   # a stand-in not set itself moves with the constant it stands in for
        if n in vals and alt not in vals and topo.has_param(alt):
            vals[alt] = vals[n] * topo.param(alt) / topo.param(n)
    return with_params(topo, vals)


def bench_requests(run: BenchRun, seed: int = 0):
    """The client's requests: each request's own lengths when the run has them, else lengths uniform in
    [ratio x nominal, nominal] (SGLang's random dataset); all sent at once, or Poisson at the run's rate."""
    from ..serving.engine.workload import Requests
    rng = np.random.default_rng(seed)
    n = run.requests
    if run.input_lens is not None:
        ins, outs = run.input_lens.astype(int), run.output_lens.astype(int)
    else:
        def lengths(nominal: int) -> np.ndarray:
            lo = max(1, int(nominal * run.range_ratio))
            return rng.integers(lo, nominal + 1, size=n)
        ins, outs = lengths(run.isl), np.maximum(lengths(run.osl), 2)
    arrival = np.zeros(n) if math.isinf(run.request_rate) else np.cumsum(rng.exponential(1 / run.request_rate, n))
    # lead=0: the users start together (the benchmark clients send every request at once, or Poisson)
    return Requests(arrival, ins, outs, np.zeros(n), lead=0)


def predict_bench(topo, run: BenchRun) -> dict:
    """TTFT and TPOT means (ms, over requests, as the benchmarks report them) and output throughput (tok/s)
    of ``run`` on ``topo`` (GPU-only serving); ``feasible`` False with ``limit`` when it cannot be served."""
    from ..serving.capacity import static_check
    from ..serving.config import resolve
    from ..serving.predict import simulate
    cfg = resolve(topo, "gpu")
    cap = static_check(cfg, context=run.isl, output=run.osl, concurrency=1, prompts="distinct")
    if not cap["feasible"]:
        return {"feasible": False, "limit": cap["limit"], "ttft": math.nan, "tpot": math.nan, "throughput": math.nan}
    p = simulate(cfg, bench_requests(run), run.concurrency)
    ok = p.per_request["completed"]
    tpot = p.per_request["tbt_ms"]
    return {"feasible": p.feasible, "limit": p.limit, "ttft": p.ttft_mean_ms,
            "tpot": float(np.nanmean(tpot[ok])) if ok.any() else math.nan, "throughput": p.output_throughput_tok_s}


def predict_run(topo, run) -> dict:
    """:func:`predict_bench` of a :class:`BenchRun`; any other run object (one with ``ttft_mean_ms``,
    ``tpot_mean_ms``, ``output_tok_s``, ``source`` and a ``predict(topo)`` giving the same dict, as the
    validation's testbed runs) predicts itself."""
    return run.predict(topo) if hasattr(run, "predict") else predict_bench(topo, run)


def measured(run: BenchRun) -> dict:
    return {"ttft": run.ttft_mean_ms, "tpot": run.tpot_mean_ms, "throughput": run.output_tok_s}


def log_errors(run: BenchRun, pred: dict, weighted: bool = False) -> list[float]:
    """log(predicted / measured) of TTFT, TPOT and throughput, those measured (3 for a run predicted unserved);
    ``weighted``: each times its :data:`WEIGHT`."""
    meas = measured(run)
    out = []
    for m in METRICS:
        v, x = pred.get(m, math.nan), meas[m]
        if not (x > 0 and math.isfinite(x)):
            continue
        e = math.log(v / x) if pred["feasible"] and v > 0 and math.isfinite(v) else 3.0
        out.append(e * WEIGHT[m] if weighted else e)
    return out


def _metrics_of(run: BenchRun) -> list[str]:
    return [m for m in METRICS if measured(run)[m] > 0 and math.isfinite(measured(run)[m])]


@dataclass
class MachineFit:
    """What :func:`fit_machine` found. ``values``: every constant of :data:`MACHINE_CONSTANTS` (SI), fitted or
    transferred; ``fitted``: identified and fitted; ``sd``: the fitted ones' relative standard deviation (log
    units; for a constant fitted by its unit, sd / value); ``unidentified``: name -> the run that would pin it; ``at_bound``: fitted ones that stopped at a bound."""
    values: dict[str, float]
    transferred: dict[str, float]
    fitted: list[str]
    sd: dict[str, float]
    unidentified: dict[str, str]
    at_bound: list[str]
    rms: float
    runs: list[str]
    errors: list[dict] = field(default_factory=list)      # per run: {metric: signed relative error}
    cv: dict | None = None                                # leave-one-run-out errors (cross_validate)
    jac: np.ndarray | None = field(default=None, repr=False)     # weighted log errors' Jacobian at the solution
    resid: np.ndarray | None = field(default=None, repr=False)   # (rows: the runs' metrics in order; cols: fitted)
    interval: dict = field(default_factory=dict)          # bootstrap over runs, per fitted constant (bootstrap)
    ranges: dict = field(default_factory=dict)            # name -> (lo, hi) on this machine (constant_range)

    def range_of(self, name: str) -> tuple[float, float]:
        c = MACHINE_CONSTANTS[name]
        return self.ranges.get(name, (c.lo, c.hi))

    def warnings(self, limit: float = FOLLOW) -> list[str]:
        """The fitted runs the model still misses by more than ``limit``: a mechanism the constants cannot
        absorb, which may bias them (say so rather than trust them)."""
        return [f"{src}: {m} {100 * e:+.0f}% after the fit" for src, errs in zip(self.runs, self.errors)
                for m, e in errs.items() if abs(e) > limit]


def _to_x(names, values) -> np.ndarray:
    return np.array([MACHINE_CONSTANTS[n].to_x(values[n]) for n in names])


def _values(names, x) -> dict[str, float]:
    return {n: MACHINE_CONSTANTS[n].from_x(float(v)) for n, v in zip(names, x)}


def check_work(runs) -> None:
    """Refuse, before anything is simulated, runs whose requests together exceed
    :data:`MAX_CALIBRATION_REQUESTS` (a :class:`DataError` naming the largest run)."""
    sizes = [int(getattr(r, "requests", 0) or 0) for r in runs]
    total = sum(sizes)
    if total > MAX_CALIBRATION_REQUESTS:
        big = runs[int(np.argmax(sizes))]
        over = f" ({total:,} over the {len(runs)} runs)" if len(runs) > 1 else ""
        raise DataError(f"{big.source}: {max(sizes):,} requests{over}: a calibration simulates its runs dozens of "
                        f"times and takes at most {MAX_CALIBRATION_REQUESTS:,} requests over them (give runs of "
                        "fewer prompts)")


def _residuals(topo, runs, names, x):
    t = apply_constants(topo, _values(names, x)) if names else topo
    return np.array([e for r in runs for e in log_errors(r, predict_run(t, r), weighted=True)])


def jacobian(topo, runs, names, values, step: float = 0.1) -> np.ndarray:
    """d log-error / d x of every run's metrics, x = log(constant) (or constant / unit), by forward differences
    of ``step`` (x 10 for a constant fitted by its unit)."""
    check_work(runs)
    x0 = _to_x(names, values)
    r0 = _residuals(topo, runs, names, x0)
    cols = []
    for j, n in enumerate(names):
        c = MACHINE_CONSTANTS[n]
        h = step * (10 if c.unit else 1)
        h = h if x0[j] + h <= c.to_x(constant_range(topo, n)[1]) else -h
        x = x0.copy()
        x[j] += h
        cols.append((_residuals(topo, runs, names, x) - r0) / h)
    return np.array(cols).T


def _sd(J: np.ndarray, sigma: float) -> np.ndarray:
    try:
        d = np.diag(np.linalg.inv(J.T @ J))
        return sigma * np.sqrt(np.where(d > 0, d, np.inf))      # a negative variance: numerically singular
    except np.linalg.LinAlgError:
        return np.full(J.shape[1], np.inf)


def _tolerance(name: str) -> float:
    """The linearised sd (in the fitted coordinate) below which a constant counts as identified:
    :data:`IDENTIFIED_SD` in log units, a tenth of the range for one fitted by its unit."""
    c = MACHINE_CONSTANTS[name]
    return 0.1 * (c.hi - c.lo) / c.unit if c.unit else IDENTIFIED_SD


def identify(J: np.ndarray, names: list[str]) -> list[str]:
    """The constants the runs identify: the largest set in which every constant's linearised sd, at a
    repeatability of :data:`NOISE`, is below its :func:`_tolerance` (of sets of equal size, the one with the
    smallest sum of sd / tolerance)."""
    from itertools import combinations
    tol = np.array([_tolerance(n) for n in names])
    for k in range(min(len(names), J.shape[0]), 0, -1):
        best, score = None, math.inf
        for c in combinations(range(len(names)), k):
            ratio = _sd(J[:, list(c)], NOISE) / tol[list(c)]
            if (ratio < 1).all() and ratio.sum() < score:
                best, score = c, float(ratio.sum())
        if best is not None:
            return [names[j] for j in best]
    return []


def transferred_values(topo, names=None) -> dict[str, float]:
    return {n: topo.param(MACHINE_CONSTANTS[n].param) for n in (names or machine_constants(topo))}


def machine_constants(topo) -> list[str]:
    """The constants of :data:`MACHINE_CONSTANTS` ``topo`` has (a scenario file written before one was a
    constant of its own, as the testbed's without ``moe_prefill_eff``, uses the one it follows)."""
    return [n for n, c in MACHINE_CONSTANTS.items() if topo.has_param(c.param)]


# A constant that stands in for another when that one stops at its lower bound: prefill GEMMs slower than the
# dense kernels' published floor are the routed experts' (SGLang's Triton fused MoE under TP, whose own range
# reaches lower). The two move a run's TTFT alike, so runs that identify one cannot tell them apart: the stand-in
# is not identified beside the other, only fitted in its place.
TAKES_OVER = {"prefill_eff": "moe_prefill_eff"}


def default_constants(topo) -> list[str]:
    """The constants a calibration of ``topo`` identifies by default: :func:`machine_constants` but the
    stand-ins of :data:`TAKES_OVER`."""
    return [n for n in machine_constants(topo) if n not in TAKES_OVER.values()]


# A constant moves from its transferred value only when the runs tell the two apart: the move they ask exceeds this
# many of its linearised standard deviations at the runs' repeatability (:data:`NOISE`); else the runs agree with
# the transferred value and a fit to them would chase their scatter (two runs fitted exactly by two constants)
MOVED_SD = 2.0


def moved_sd(J: np.ndarray, resid: np.ndarray, names: list[str], values: dict[str, float],
             start: dict[str, float]) -> dict[str, float]:
    """How far the runs alone ask each fitted constant from ``start`` (its transferred value), in its linearised
    standard deviations at a repeatability of :data:`NOISE`. ``J``, ``resid``: the runs' weighted log errors and
    their Jacobian at the fit ``values`` (columns ``names``); what they ask is the fit plus the Gauss-Newton step
    they still take from it (the prior's pull undone; past a bound that stopped the fit)."""
    step = np.linalg.lstsq(J, -resid, rcond=None)[0]
    return {n: abs(MACHINE_CONSTANTS[n].to_x(values[n]) + dx - MACHINE_CONSTANTS[n].to_x(start[n])) / s
            for n, dx, s in zip(names, step, _sd(J, NOISE))}


def fit_machine(topo, runs: list[BenchRun], names=None, *, jac: np.ndarray | None = None) -> MachineFit:
    """Fit the constants ``runs`` identify (of ``names``, default all of :data:`MACHINE_CONSTANTS`) on the
    scenario ``topo`` (the machine with its transferred constants); see the module docstring."""
    check_work(runs)
    names = list(names or default_constants(topo))
    base = transferred_values(topo, names)
    ranges = _ranges(topo, names)
    start = {n: min(max(v, ranges[n][0]), ranges[n][1]) for n, v in base.items()}
    J = jacobian(topo, runs, names, start) if jac is None else jac
    fitted = identify(J, names)
    values = dict(base)
    sd, at_bound, rms = {}, [], float("nan")
    jac_at = resid = None
    kept: dict[str, float] = {}     # identified, but the runs do not tell it from its transferred value
    while fitted:      # identified at the solution too, else the least identified one is left transferred
        values, sd, at_bound, rms, ratio, jac_at, resid = _fit(topo, runs, fitted, base, start)
        if max(ratio.values()) > 1:
            fitted = [n for n in fitted if n != max(ratio, key=ratio.get)]
        else:
            z = moved_sd(jac_at, resid, fitted, values, start)
            weakest = min(z, key=z.get)
            if z[weakest] >= MOVED_SD:
                break
            kept[weakest] = z[weakest]
            fitted = [n for n in fitted if n != weakest]
        values = dict(base)
    if not fitted:
        values, sd, at_bound, jac_at, resid = dict(base), {}, [], None, None
        rms = float(np.sqrt(np.mean(_residuals(topo, runs, [], np.array([])) ** 2)))
    for n, alt in TAKES_OVER.items():           # at its lower bound: its stand-in, fitted in its place
        if n in at_bound and values[n] < ranges[n][0] * 1.01 and alt not in names and \
                topo.has_param(MACHINE_CONSTANTS[alt].param):
            base[alt] = topo.param(MACHINE_CONSTANTS[alt].param)
            ranges[alt] = constant_range(topo, alt)
            start[alt] = min(max(base[alt], ranges[alt][0]), ranges[alt][1])
            fitted = [alt if x == n else x for x in fitted]
            values, sd, at_bound, rms, ratio, jac_at, resid = _fit(topo, runs, fitted, base, start)
    unident = {n: pin_text(topo, runs, n, J=J, names=names, start=start) for n in names if n not in fitted}
    for n, z in kept.items():
        if n in unident:
            unident[n] = (f"{unident[n]}; these runs ask a move of only {z:.1f} sd of their repeatability from the "
                          f"transferred value (under {MOVED_SD:g}), so it is kept there")
    final = apply_constants(topo, {n: values[n] for n in fitted})
    errs = [{m: math.exp(e) - 1 for m, e in zip(_metrics_of(r), log_errors(r, predict_run(final, r)))}
            for r in runs]
    out = MachineFit(values, base, fitted, sd, unident, at_bound, rms, [r.source for r in runs], errs,
                     jac=jac_at, resid=resid, ranges=ranges)
    out.interval = bootstrap(out, runs)
    return out


MOVES = 0.05       # a probe run moves a constant when its range moves a metric by this much (log units)


def probe_run(run, shape: tuple):
    """A run of the same client and server as ``run`` with the probe's (prompt, output, concurrency), as many
    requests as the concurrency, fixed lengths, all sent at once."""
    from dataclasses import replace
    isl, osl, conc = shape
    return replace(run, source="probe", requests=conc, concurrency=conc, request_rate=math.inf, isl=isl, osl=osl,
                   range_ratio=1.0, per_request=False, input_lens=None, output_lens=None, ttfts_s=None)


def probe_moves(topo, run, name: str) -> bool:
    """Whether the run that pins ``name`` (:attr:`MachineConstant.probe`) moves any metric on this machine by
    :data:`MOVES` (log units) between the two ends of the constant's physical range: a constant none of whose
    costs binds anywhere in its range (decode attention bandwidth-bound, so ``compute_eff`` never counts) cannot
    be pinned by any run, nor matters. The ends, not a small step: at the transferred value a cost may hide
    behind another (a short prefill behind the CPU's launches) and bind once the constant is far from it."""
    c = MACHINE_CONSTANTS[name]
    probe = probe_run(run, c.probe)
    a, b = (predict_run(apply_constants(topo, {name: v}), probe) for v in constant_range(topo, name))
    if not (a["feasible"] and b["feasible"]):
        return True             # the probe does not fit this machine: keep the advice, it may on a bigger one
    return any(abs(math.log(b[m] / a[m])) >= MOVES for m in METRICS if a[m] > 0 and b[m] > 0)


def pin_text(topo, runs, name: str, *, J: np.ndarray | None = None, names=None, start=None) -> str:
    """What would pin an unidentified constant: the run :attr:`MachineConstant.pins` names, checked on this
    machine. The probe run of its shape must move a metric (:func:`probe_moves`; else no run can, and that is
    harmless); given the runs' Jacobian ``J`` (over ``names`` at ``start``), the probe's rows added to it must
    make :func:`identify` take the constant, else the text says which fitted constants it stays tangled with."""
    c = MACHINE_CONSTANTS[name]
    if not runs or not isinstance(runs[0], BenchRun):
        return c.pins
    if not probe_moves(topo, runs[0], name):
        isl, osl, conc = c.probe
        lo, hi = constant_range(topo, name)
        return (f"no run: on this machine no value in its range {lo:g}-{hi:g} moves a metric of "
                f"{c.pins.split(' (')[0]} ({isl} / {osl} tokens, concurrency {conc}) by {100 * MOVES:.0f}%, so its "
                f"cost never binds and predictions do not depend on it")
    if J is None or names is None or start is None:
        return c.pins
    rows = jacobian(topo, [probe_run(runs[0], c.probe)], names, start)
    ids = identify(np.vstack([J, rows]), names)
    if name in ids:
        return f"{c.pins}; checked: with such a run added these runs identify it"
    return (f"{c.pins}; checked: such a run added to these ones moves it but does not separate it from "
            f"{', '.join(n for n in names if n not in ids and n != name) or 'the others'} (identified then: "
            f"{', '.join(ids)}): add runs that move those")


BOOTSTRAP_DRAWS = 400       # resamples of the runs; each costs one least-squares solve of a few rows
BOOTSTRAP_SEED = 0


def _rows_of(runs) -> list[np.ndarray]:
    """Each run's row indices in the stacked residuals (its measured metrics, in order)."""
    edges = np.cumsum([0] + [len(_metrics_of(r)) for r in runs])
    return [np.arange(edges[k], edges[k + 1]) for k in range(len(runs))]


def bootstrap(fit: MachineFit, runs, draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED) -> dict[str, dict]:
    """Intervals of the fitted constants from a bootstrap over runs: ``draws`` resamples of the runs with
    replacement, each drawn run's metrics remeasured at the benchmark's repeatability (:data:`NOISE` on every
    weighted log error: what running the benchmarks again would give; with two runs, case resampling alone has
    one usable draw). Each resample moves the solution by the one Gauss-Newton step its rows of the weighted
    residuals and their Jacobian at the solution ask for beyond the full data's own step (exact for a linear
    model; no new prediction, so 400 draws take milliseconds), within the constants' ranges. A resample whose
    distinct runs do not identify every fitted constant (:func:`identify`'s rule) is set aside and counted.
    Seeded: the same runs give the same intervals. Per constant (SI): ``p16``/``p84`` (68%) and
    ``p2_5``/``p97_5`` (95%) percentiles, ``draws`` used, ``unidentified`` draws set aside; empty when
    nothing was fitted."""
    if not fit.fitted or fit.jac is None or fit.resid is None:
        return {}
    names = fit.fitted
    rows = _rows_of(runs)
    x0 = _to_x(names, fit.values)
    lo = _to_x(names, {n: fit.range_of(n)[0] for n in names})
    hi = _to_x(names, {n: fit.range_of(n)[1] for n in names})
    tol = np.array([_tolerance(n) for n in names])
    base = np.linalg.lstsq(fit.jac, -fit.resid, rcond=None)[0]
    rng = np.random.default_rng(seed)
    xs, skipped = [], 0
    for _ in range(draws):
        pick = rng.integers(0, len(runs), size=len(runs))
        keep = np.concatenate([rows[k] for k in pick])
        noise = rng.normal(0.0, NOISE, size=len(keep))
        distinct = np.concatenate([rows[k] for k in sorted(set(pick.tolist()))])
        if not (_sd(fit.jac[distinct], NOISE) / tol < 1).all():
            skipped += 1
            continue
        step = np.linalg.lstsq(fit.jac[keep], -(fit.resid[keep] + noise), rcond=None)[0]
        xs.append(np.clip(x0 + step - base, lo, hi))
    out = {}
    for j, n in enumerate(names):
        c = MACHINE_CONSTANTS[n]
        if not xs:
            out[n] = {"draws": 0, "unidentified": skipped}
            continue
        col = np.array([x[j] for x in xs])
        q = {k: c.from_x(float(np.percentile(col, v))) for k, v in
             (("p2_5", 2.5), ("p16", 16.0), ("p84", 84.0), ("p97_5", 97.5))}
        out[n] = {**q, "draws": len(xs), "unidentified": skipped}
    return out


def interval_text(iv: dict, unit: str = "") -> str:
    """``bootstrap over runs: 68% 0.61-0.66, 95% 0.58-0.70 (400 draws, seed 0; 120 drew too few distinct
    runs)`` for one constant's :func:`bootstrap` entry."""
    if not iv or not iv.get("draws"):
        return (f"bootstrap over runs: no resample identifies it ({iv.get('unidentified', 0)} draws, seed "
                f"{BOOTSTRAP_SEED}): the runs pin it only together")
    u = f" {unit}" if unit else ""
    skip = f"; {iv['unidentified']} drew too few distinct runs, set aside" if iv["unidentified"] else ""
    return (f"bootstrap over runs: 68% {iv['p16']:.4g}-{iv['p84']:.4g}{u}, 95% {iv['p2_5']:.4g}-{iv['p97_5']:.4g}"
            f"{u} ({iv['draws']} draws, seed {BOOTSTRAP_SEED}{skip})")


def _fit(topo, runs, fitted, base, start):
    """Least squares of the weighted log errors over ``fitted`` within their ranges: (values, sd, at_bound,
    rms, ratio, jacobian, residuals); ``sd`` at the residuals' own scatter (at least :data:`NOISE`), ``ratio`` the sd at
    :data:`NOISE` over the constant's tolerance (above 1: not identified at the solution)."""
    from scipy.optimize import least_squares
    values = dict(base)
    sd, at_bound, rms, ratio, jac, fun = {}, [], float("nan"), {}, None, None
    if fitted:
        ranges = _ranges(topo, fitted)
        lo = _to_x(fitted, {n: ranges[n][0] for n in fitted})
        hi = _to_x(fitted, {n: ranges[n][1] for n in fitted})
        x0 = np.clip(_to_x(fitted, start), lo + 1e-6, hi - 1e-6)
        width = (hi - lo) / PRIOR_SPAN                          # prior_width, from the bounds at hand

        def posterior(x):       # the runs' weighted log errors, then the transferred values' prior rows
            return np.concatenate([_residuals(topo, runs, fitted, x), NOISE * (x - x0) / width])
        res = least_squares(posterior, x0, bounds=(lo, hi),
                            x_scale=np.ones(len(fitted)), diff_step=0.03, ftol=1e-3, xtol=1e-3, max_nfev=15,
                            loss="soft_l1", f_scale=ROBUST)
        values.update(_values(fitted, res.x))
        n, p = len(res.fun) - len(fitted), len(fitted)
        r, J = res.fun[:n], res.jac[:n]         # the runs' rows: what the bootstrap and the folds resample
        rms = float(np.sqrt(np.mean(r ** 2)))
        sigma = max(NOISE, float(np.sqrt(np.sum(r ** 2) / (n - p))) if n > p else NOISE)
        sdx = _sd(np.vstack([J, sigma / NOISE * res.jac[n:]]), sigma)     # posterior: the runs and the prior
        sd = {nm: float(sx * MACHINE_CONSTANTS[nm].unit / values[nm] if MACHINE_CONSTANTS[nm].unit else sx)
              for nm, sx in zip(fitted, sdx)}
        at_bound = [nm for nm, x, a, b in zip(fitted, res.x, lo, hi) if min(x - a, b - x) < 1e-3]
        ratio = {nm: float(sx / _tolerance(nm)) for nm, sx in zip(fitted, _sd(J, NOISE))}
        jac, fun = J, r
    return values, sd, at_bound, rms, ratio, jac, fun


# The transferred value of a constant is a prior: its physical range (constant_range) spans PRIOR_SPAN of the prior's
# standard deviations in the fitted coordinate (log of a rate, or a time over its unit), so the range is the prior's
# 95% interval. Two runs cannot pin several constants: a constant moves from its transferred value only as far as
# the runs, at their repeatability (NOISE), outweigh that prior (a maximum a posteriori fit).
PRIOR_SPAN = 4.0


def prior_width(topo, names) -> np.ndarray:
    """Each constant's prior standard deviation in the fitted coordinate: its range on ``topo``'s machine
    (:func:`constant_range`) over :data:`PRIOR_SPAN`."""
    ranges = _ranges(topo, names)
    return (_to_x(names, {n: ranges[n][1] for n in names}) - _to_x(names, {n: ranges[n][0] for n in names})) / PRIOR_SPAN


def cross_validate(topo, runs: list[BenchRun], names=None, J: np.ndarray | None = None,
                   fit: MachineFit | None = None) -> dict:
    """Leave one run out: fit on the others (the same identification rule, on their rows of the Jacobian),
    predict the run left out. Returns ``errors`` (per run, signed relative error per metric) and ``band``
    (per metric, the largest absolute error: what a calibrated scenario prints as its expected error).

    With up to :data:`EXACT_FOLDS` runs each fold is refitted from the transferred values; with more (and
    ``fit``, the fit on all runs) each fold takes one Gauss-Newton step from ``fit`` without the left-out
    run's rows (exact for a linear model), so a calibration on many runs stays within seconds."""
    names = list(names or default_constants(topo))
    if len(runs) < 2:
        return {"errors": [], "band": {}}
    if J is None:
        J = jacobian(topo, runs, names, transferred_values(topo, names))
    rows = [len(_metrics_of(r)) for r in runs]
    edges = np.cumsum([0] + rows)
    errors = []
    for i, run in enumerate(runs):
        keep = np.concatenate([np.arange(edges[k], edges[k + 1]) for k in range(len(runs)) if k != i])
        if len(runs) > EXACT_FOLDS and fit is not None and fit.jac is not None:
            values = _one_step(fit, J[keep], names, keep)
        else:
            f = fit_machine(topo, [r for k, r in enumerate(runs) if k != i], names, jac=J[keep])
            values = {n: f.values[n] for n in f.fitted}
        e = log_errors(run, predict_run(apply_constants(topo, values), run))
        errors.append({m: math.exp(x) - 1 for m, x in zip(_metrics_of(run), e)})
    band = {m: max(abs(e[m]) for e in errors if m in e) for m in METRICS if any(m in e for e in errors)}
    return {"errors": errors, "band": band}


EXACT_FOLDS = 3


def _one_step(fit: MachineFit, J_keep: np.ndarray, names: list[str], keep: np.ndarray) -> dict[str, float]:
    """The constants a fold identifies (on its rows of ``J_keep``, the Jacobian at the transferred values),
    moved from ``fit`` by one Gauss-Newton step on the fold's rows of its Jacobian at the solution; the
    others at their transferred values."""
    ids = [n for n in identify(J_keep, names) if n in fit.fitted]
    if not ids:
        return {}
    cols = [fit.fitted.index(n) for n in ids]
    A, r = fit.jac[keep][:, cols], fit.resid[keep]
    step = np.linalg.lstsq(A, -r, rcond=None)[0]
    out = {}
    for n, dx in zip(ids, step):
        c = MACHINE_CONSTANTS[n]
        lo, hi = fit.range_of(n)
        x = min(max(c.to_x(fit.values[n]) + dx, c.to_x(lo)), c.to_x(hi))
        out[n] = c.from_x(x)
    return out


# ---- a calibrated scenario: provenance, band, and carrying it to another GPU ---------------------------
CALIBRATED = "calibrated:"          # the source of a calibrated constant starts with this
BAND_TEXT = "leave-one-run-out error"  # ... and carries its band (read by sacmodel.serving.bands.own_band)


def band_text(band: dict) -> str:
    """``leave-one-run-out error: TTFT 12.0%, TPOT 3.1%, throughput 2.0%`` (the metrics measured)."""
    names = {"ttft": "TTFT", "tpot": "TPOT", "throughput": "throughput"}
    return f"{BAND_TEXT}: " + ", ".join(f"{names[m]} {100 * v:.1f}%" for m, v in band.items())


def _runs_text(runs: list[BenchRun]) -> str:
    return "; ".join(f"{r.source} (prompt {r.isl}, output {r.osl}, concurrency {r.concurrency}, {r.harness})"
                     for r in runs)


def calibration_entries(fit: MachineFit, runs: list[BenchRun], cv: dict, old: dict) -> dict:
    """The ``calibration:`` entries of the calibrated constants (value, source with provenance) and the
    unidentified ones' sources (value kept, named as transferred and what would pin them). ``old``: the
    scenario's entries ({name: {value, source}})."""
    from ..hardware.transfer import _format
    out = {}
    band = band_text(cv["band"]) if cv.get("band") else "no cross-validation (one run)"
    for name in fit.fitted:
        c = MACHINE_CONSTANTS[name]
        unit = " ".join(str(old[c.param]["value"]).split()[1:])
        bound = " [at its bound]" if name in fit.at_bound else ""
        lo, hi = fit.range_of(name)
        why = c.range_source if (lo, hi) == (c.lo, c.hi) else \
            f"{c.range_source}, of the published rate of the kernel the server runs"
        out[c.param] = {"value": _format(fit.values[name], unit),
                        "source": f"{CALIBRATED} {len(runs)} runs ({_runs_text(runs)}); +-{100 * fit.sd[name]:.1f}% "
                                  f"(1 sd, linearised){bound}; {interval_text(fit.interval.get(name, {}), 'SI')}; "
                                  f"fit rms {100 * fit.rms:.1f}% (log); {band}; "
                                  f"range {lo:.3g}-{hi:.3g} ({why})"}
    for name, pins in fit.unidentified.items():
        c = MACHINE_CONSTANTS[name]
        out[c.param] = {"value": old[c.param]["value"],
                        "source": f"not identified by the calibration runs, transferred: {old[c.param]['source']}; "
                                  f"pinned by {pins}"}
    for n, alt in TAKES_OVER.items():         # a stand-in not fitted moves with the constant it stands in for
        if n in fit.fitted and alt not in fit.fitted and alt in old:
            ratio = float(old[alt]["value"]) / float(old[n]["value"])
            out[alt] = {"value": _format(fit.values[n] * ratio, ""),
                        "source": f"{n} as calibrated x {ratio:.4g} (its transferred ratio to {n}): "
                                  f"{old[alt]['source']}"}
    return out


def calibrated_scenario_dict(machine: dict, fit: MachineFit, runs: list[BenchRun], cv: dict) -> dict:
    """:func:`sacmodel.hardware.build.scenario_dict` of ``machine`` with the calibration written in."""
    from ..hardware.build import scenario_dict
    kw = dict(machine)
    data = scenario_dict(kw.pop("gpu"), **kw)
    data["calibration"].update(calibration_entries(fit, runs, cv, data["calibration"]))
    data["name"] = f"{data['name']}-calibrated"
    data["description"] += f"; constants calibrated on {len(runs)} benchmark runs by sacmodel calibrate"
    return data


def write_calibrated(path, data: dict, head: str = "") -> None:
    """Write a calibrated scenario as YAML, atomically (a temporary file checked by loading it, then renamed):
    a failure leaves whatever was at ``path`` as it was."""
    import yaml

    from ..hardware.scenarios import load_topology
    from ..util.files import write_text

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data):
            return True
    text = head + yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)
    write_text(path, text, check=lambda tmp: load_topology(tmp))


def carry(topo, gpu: str, machine: dict):
    """A scenario calibrated on one GPU carried to ``gpu``: the machine rebuilt on ``gpu`` (``machine``: the
    other keywords of :func:`sacmodel.scenario`); software constants (the request path, the scheduler's host
    work) keep their calibrated values; each calibrated kernel constant moves as the transfer rules move it
    between the two GPUs (calibrated x target's transferred / source's transferred), within its range."""
    from ..hardware.build import scenario
    from ..hardware.params import with_params
    from ..serving.bands import gpu_name
    from ..hardware.gpus import get_gpu
    src_gpu = gpu_name(topo.node(topo.gpus[0]))
    source = scenario(src_gpu, **machine)
    if machine.get("fp8_gemm_backend") == "flashinfer_trtllm" and get_gpu(gpu).arch != "blackwell":
        # FlashInfer's TRT-LLM FP8 GEMM is Blackwell's: SGLang there runs its default (DeepGEMM)
        machine = {k: v for k, v in machine.items() if k != "fp8_gemm_backend"}
    target = scenario(gpu, **machine)
    values = {}
    for name, c in MACHINE_CONSTANTS.items():
        p = topo.calibration.get(c.param)
        if p is None or not (p.source or "").startswith(CALIBRATED):
            continue
        if c.kind == "software":
            values[c.param] = p.value
        else:
            moved = p.value * target.param(c.param) / source.param(c.param)
            lo, hi = constant_range(target, name)
            values[c.param] = min(max(moved, lo), hi)
    out = with_params(target, values)
    for k in values:
        rule = "kept (software)" if MACHINE_CONSTANTS[k].kind == "software" else \
            f"moved from {src_gpu} by the transfer rules"
        out.calibration[k].source = f"carried to {gpu}, {rule}, from {topo.calibration[k].source}"
    for n, alt in TAKES_OVER.items():         # a stand-in not calibrated moves with the constant it stands in for
        if n in values and alt not in values and out.has_param(alt):
            out.calibration[alt].value = values[n] * target.param(alt) / target.param(n)
    return out


def machine_of(topo) -> dict:
    """The keywords of :func:`sacmodel.scenario` (besides the GPU) that describe a built scenario's server."""
    from ..serving.config import weights_of
    s = topo.serving
    kw = {"gpus": len(topo.gpus), "model": topo.model_name, "weights": weights_of(topo)}
    for k in ("tp", "dp", "ep"):
        if k in s:
            kw[k] = int(s[k].value)
    if "mem_fraction" in s:
        kw["mem_fraction"] = float(s["mem_fraction"].value)
    if "fp8_gemm_backend" in s:
        kw["fp8_gemm_backend"] = s["fp8_gemm_backend"].raw
    return kw


def is_calibrated(topo) -> bool:
    """Whether any constant of the scenario was calibrated by :func:`fit_machine` (``sacmodel calibrate``)."""
    return any((p.source or "").startswith(CALIBRATED) for p in topo.calibration.values())
