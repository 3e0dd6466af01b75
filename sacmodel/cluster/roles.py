"""The prefill/decode role search: how many prefill and decode instances, with which parallelism each, serve a
trace within its SLO at the lowest cost (``cluster_plan(..., roles="search")``, ``plan --trace --roles search``).

1. **Each role's parallelism.** Candidate configurations of one instance on the scenario's GPU and model (tensor
   parallel ``tp`` of 1, 2, 4, 8 GPUs up to the host's; data-parallel attention ``dp = tp`` for an MLA model),
   each a machine :func:`sacmodel.scenario` builds (the scenario itself where it already is that machine); those
   the GPU cannot hold are listed with SGLang's or vLLM's reason.
2. **Capacities** (one instance alone, engine predictions counted in a :class:`~sacmodel.planning.search.Tally`):
   - prefill, in prompt tokens/s: a backlog of the prompt an average prefill token belongs to (sum L^2 / sum L:
     long prompts cost more per token) with one output token each (its throughput times the prompt), and none
     when the prompt at the TTFT bound's quantile (the 90th percentile for ``ttft_p90_ms``) alone misses it;
   - decode, in output tokens/s: the trace's mean request, its prompt's KV already there (as the prefill
     instance hands it over), at doubling concurrency while the mean TBT is within the TBT bound; none when one
     request alone misses it;
   - a configuration that cannot hold the trace's largest request alone serves neither role.
3. **The bracket.** The trace asks ``input_tok_s`` = its uncached prompt tokens (the unbounded-cache hit rate of
   the fast path taken off: no cache does better) over its span, and ``output_tok_s``; a split of ``P`` prefill
   and ``D`` decode instances of configurations ``(p, d)`` starts at ``P = ceil(input_tok_s / prefill(p))``,
   ``D = ceil(output_tok_s / decode(d))``: fewer cannot keep up with the arrivals.
4. **Co-simulation, cheapest first.** Candidates are replayed (:func:`~sacmodel.cluster.replay.replay` with
   ``pd`` and the decode role's own scenario) in increasing cost. A replay that misses adds its neighbours: twice
   the prefill instances when TTFT (or the queue) fails, twice the decode instances when TBT fails, both
   otherwise (an overloaded replay: at least the offered over the served rate times as many); a split that meets
   adds the splits halfway back to the largest of its pair that missed (bisection: more instances never serve
   a trace worse), and the search ends when no candidate left costs less than the cheapest split that met, which
   is the answer. A replay that blames one role (its TTFT missed, or its TBT) teaches a floor for that role's
   configuration whatever the other role runs: a prefill configuration that misses at ``P`` instances misses
   at ``P`` with any decode instances (its load is the trace's prompts); candidates below a floor are moved up
   to it without a replay. A prefill configuration whose TTFT falls by less than a tenth when it gets more instances
   (and no queue is left) is bound by its prompts' own prefill, not by their number: it is grown no further
   (``stalled``); where the decode instances are at least :data:`DECODE_BUSY` loaded by the trace's output rate,
   a missed TTFT grows the decode role too instead. ``max_replays`` bounds the search; the answer says when it stopped there.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from ..hardware.models import model_of
from ..hardware.scenarios import as_topology, cluster_of
from ..hardware.topology import TopologyError
from ..planning.pricing import gpu_model, gpu_part, prices, usd
from ..planning.search import Tally
from ..serving.config import engine_of
from ..serving.predict import ConfigError, predict
from .workload import load_workload

TP_CHOICES = (1, 2, 4, 8)
# decode instances whose capacity the trace's output rate loads this much (or more) queue the requests the prefill
# role hands over (an M/D/1 queue's wait grows as rho / (1 - rho): 2x the service at 0.8): a missed TTFT then
# grows the decode role too, and says nothing about the prompts' own prefill
DECODE_BUSY = 0.8


@dataclass
class RoleConfig:
    """One instance's parallelism and what it serves alone (tokens/s; None: the role cannot meet the SLO)."""
    tp: int
    dp: int
    scenario: object = None
    gpus: int = 0
    prefill_tok_s: float | None = None
    decode_tok_s: float | None = None
    why: str | None = None

    @property
    def name(self) -> str:
        return f"tp{self.tp}" + (f"-dp{self.dp}" if self.dp > 1 else "")

    def to_dict(self) -> dict:
        return {"config": self.name, "tp": self.tp, "dp": self.dp, "gpus": self.gpus,
                "prefill_tok_s": self.prefill_tok_s, "decode_tok_s": self.decode_tok_s, "why": self.why}


@dataclass
class RolePlan:
    """The answer: the cheapest split meeting the SLO (None if none was found), every replay tried, the
    runners-up the bracket left unreplayed, each configuration's capacities and the trace's rates."""
    best: dict | None
    message: str
    tried: list = field(default_factory=list)
    runners_up: list = field(default_factory=list)
    configs: list = field(default_factory=list)
    rates: dict = field(default_factory=dict)
    predictions: dict = field(default_factory=dict)
    replays: int = 0
    stalled: dict = field(default_factory=dict)   # prefill configuration -> the count past which TTFT stopped falling
    launch: dict = field(default_factory=dict)    # role -> the SGLang launch command of its instances (or why none)

    def to_dict(self) -> dict:
        return {"best": self.best, "message": self.message, "tried": self.tried, "runners_up": self.runners_up,
                "configs": self.configs, "rates": self.rates, "predictions": self.predictions,
                "replays": self.replays, "stalled": self.stalled, "launch": self.launch}


def launch_commands(p: RoleConfig, d: RoleConfig, system: str) -> dict[str, str]:
    """The SGLang launch commands of the answer's two roles (:func:`sacmodel.sglang_command` with
    ``--disaggregation-mode prefill`` / ``decode`` and Mooncake's transfer backend, SGLang's default; a role over
    several hosts with ``--nnodes`` and ``--node-rank``). The decode role of an RDMA system reads the KV it was
    handed in host DRAM, as the replay runs it (``dram``). Where SGLang's command cannot describe the role (a
    vLLM scenario, a what-if system), the reason instead, starting with ``#``."""
    from ..planning.common import SolverError
    from ..planning.emit import sglang_command
    out = {}
    for role, rc, sys_r in (("prefill", p, system),
                            ("decode", d, "dram" if system in ("rdma", "rdma-topk") else system)):
        try:
            out[role] = sglang_command(rc.scenario, sys_r, disaggregation_mode=role)
        except (SolverError, ConfigError, TopologyError) as exc:
            out[role] = f"# no SGLang launch command for the {role} role: {exc}"
    return out


def role_configs(scenario, parallel=None) -> list[RoleConfig]:
    """The candidate configurations of one instance (``parallel``: (tp, dp) pairs; default: tp 1, 2, 4, 8 up to
    the host's GPUs, and dp = tp for an MLA model), each with its scenario or the reason it cannot run."""
    from ..fit.machine import machine_of
    from ..hardware.build import scenario as build
    host = cluster_of(scenario).host
    gpu = gpu_model(host)
    have = len(host.gpus)
    if parallel is None:
        mla = host.model_name.startswith("deepseek")
        parallel = [(t, 1) for t in TP_CHOICES if t <= max(have, 1)] + \
            ([(t, t) for t in TP_CHOICES[1:] if t <= have] if mla else [])
    kw = {k: v for k, v in machine_of(host).items() if k in ("model", "weights")}
    out = []
    for tp, dp in parallel:
        rc = RoleConfig(int(tp), int(dp), gpus=int(tp))
        mine = machine_of(host)
        if mine.get("tp", have) == tp and mine.get("dp", 1) == dp and have == tp:
            rc.scenario = host                       # the scenario itself: its calibration kept
        elif gpu is None:
            rc.why = "the scenario's GPU is not in the catalog: only its own configuration can be tried"
        else:
            try:
                rc.scenario = build(gpu, gpus=tp, tp=tp, dp=dp, engine=engine_of(host), **kw)
            except (TopologyError, ValueError) as exc:
                rc.why = str(exc)
        out.append(rc)
    return out


def slo_bounds(slo: dict) -> tuple[float, float]:
    """(TTFT bound, TBT bound) in seconds from a plan's SLO (the tightest TTFT and TBT metrics; inf: none)."""
    ttft = min((v for k, v in slo.items() if k.startswith("ttft_")), default=math.inf) / 1e3
    tbt = min((v for k, v in slo.items() if k.startswith("tbt_")), default=math.inf) / 1e3
    return ttft, tbt


def ttft_quantile(slo: dict) -> float:
    """The share of requests the tightest TTFT bound speaks for: 0.9 for ttft_p90_ms, 0.5 for a median or mean."""
    bounds = [(v, k) for k, v in slo.items() if k.startswith("ttft_")]
    if not bounds:
        return 0.5
    name = min(bounds)[1]
    return int(name.split("_")[1][1:]) / 100 if name.split("_")[1].startswith("p") else 0.5


def measure(rc: RoleConfig, system: str, rates: dict, ttft_s: float, tbt_s: float, tally: Tally) -> RoleConfig:
    """Fill ``rc``'s prefill and decode capacities (tokens/s) for the trace's mean request under the bounds:
    prefill with every prompt computed, decode with the prompt's KV already there (as a decode instance gets it
    from the prefill one). A configuration that cannot hold the trace's largest request alone is refused."""
    if rc.scenario is None:
        return rc
    prompt, output = rates["prompt"], rates["output"]
    big = _predict(rc.scenario, system, rates["largest"][0], tally, output=max(2, rates["largest"][1]),
                   concurrency=1, requests=1, prefix_cached=False)
    if big is None or not big.feasible or big.success_fraction < 1:
        rc.why = (f"the trace's largest request ({rates['largest'][0]:,} + {rates['largest'][1]:,} tokens) does not "
                  f"run alone: {getattr(big, 'limit', None) or 'it fails'}")
        return rc
    heavy = rates["prompt_weighted"]           # the prompt an average prefill token belongs to
    one = lambda **kw: _predict(rc.scenario, system, heavy, tally, prefix_cached=False, **kw)     # noqa: E731
    # the TTFT bound speaks for a share of the requests: the prompt at that quantile must meet it alone
    alone = _predict(rc.scenario, system, rates["prompt_at_bound"], tally, output=1, concurrency=1, requests=1,
                     prefix_cached=False)
    if alone is not None and alone.feasible and alone.ttft_mean_ms / 1e3 <= ttft_s:
        c = max(4, math.ceil(4 * max(heavy, 8192) / heavy))
        p = one(output=1, concurrency=c, requests=4 * c)
        if p is not None and p.feasible:
            rc.prefill_tok_s = p.request_throughput_req_s * heavy
    c, best = 1, None
    while c <= 1024:
        p = _predict(rc.scenario, system, prompt, tally, output=max(2, output), concurrency=c, requests=2 * c,
                     prefix_cached=True)
        if p is None or not p.feasible or p.success_fraction < 1 or p.tbt_mean_ms / 1e3 > tbt_s:
            break
        best = p.output_throughput_tok_s
        c *= 2
    rc.decode_tok_s = best
    return rc


def _predict(scenario, system, prompt, tally, **kw):
    tally.add("engine")
    try:
        return predict(scenario, system, context=prompt, **kw)
    except ConfigError:
        return None


def trace_rates(trace, scenario, limit=None, quantile: float = 0.5) -> dict:
    """The trace's prompt and output tokens per second over its span; prompts less what an unbounded prefix
    cache would hit (the fast path; none without prefix information); the mean request and the largest one the
    model takes (its positions)."""
    tr, _ = load_workload(trace, limit)
    span = float(tr.arrival.max() - tr.arrival.min()) if len(tr) > 1 else 1.0
    span = span if span > 0 else 1.0
    hit = 0.0
    if tr.has_prefix_info:
        from .hitrate import hit_rates
        hit = hit_rates(tr, ["inf"], block_tokens=tr.block_tokens)[0]["hit_rate"]
    tokens_in = float(tr.input_len.sum())
    size = tr.input_len + tr.output_len
    top = model_of(cluster_of(scenario).host).max_position or math.inf
    fits = size <= top                      # longer ones the model refuses: they fail alone on any instance
    k = int(np.where(fits, size, -1).argmax())
    return {"input_tok_s": tokens_in * (1 - hit) / span, "output_tok_s": float(tr.output_len.sum()) / span,
            "span_s": span, "hit_rate_bound": hit, "prompt": int(round(tr.input_len.mean())),
            "output": int(round(tr.output_len.mean())), "requests": len(tr),
            "largest": (int(tr.input_len[k]), int(tr.output_len[k])),
            "prompt_weighted": int(round(float((tr.input_len[fits] ** 2.0).sum() / max(tr.input_len[fits].sum(), 1)))),
            "prompt_at_bound": int(np.quantile(tr.input_len[fits], quantile)) if fits.any() else 1}


def split_cost(p: RoleConfig, d: RoleConfig, n_p: int, n_d: int, price_table=None) -> float:
    """USD per hour of ``n_p`` prefill instances of ``p`` and ``n_d`` decode instances of ``d`` (their GPUs)."""
    table = prices(price_table)
    row = gpu_part(as_topology(p.scenario), table)
    return (n_p * p.gpus + n_d * d.gpus) * usd(table, row)


def bracket(p: RoleConfig, d: RoleConfig, rates: dict) -> tuple[int, int]:
    """The fewest prefill and decode instances that keep up with the trace's token rates."""
    return (max(1, math.ceil(rates["input_tok_s"] / p.prefill_tok_s - 1e-9)),
            max(1, math.ceil(rates["output_tok_s"] / d.decode_tok_s - 1e-9)))


def role_search(scenario, system: str, trace, slo: dict, *, parallel=None, max_replays: int = 12,
                fixed: dict | None = None, price_table=None, tally: Tally | None = None,
                replay_row=None) -> RolePlan:
    """The cheapest prefill/decode split (counts and each role's parallelism) whose replay meets ``slo``; see
    the module docstring. ``replay_row(scenario_p, scenario_d, n_p, n_d) -> row`` runs one co-simulation
    (the cluster plan passes its own, which prices and checks the row)."""
    tally = tally or Tally()
    rates = trace_rates(trace, scenario, (fixed or {}).get("limit"), ttft_quantile(slo))
    ttft_s, tbt_s = slo_bounds(slo)
    configs = [measure(rc, system, rates, ttft_s, tbt_s, tally)
               for rc in role_configs(scenario, parallel)]
    pre = [c for c in configs if c.prefill_tok_s]
    dec = [c for c in configs if c.decode_tok_s]
    plan = RolePlan(None, "", configs=[c.to_dict() for c in configs], rates=rates)
    if not pre or not dec:
        role = "prefill" if not pre else "decode"
        plan.message = f"no configuration can serve the {role} role within the SLO: " + "; ".join(
            f"{c.name}: {c.why or 'misses the ' + ('TTFT' if role == 'prefill' else 'TBT') + ' bound alone'}"
            for c in configs)
        plan.predictions = tally.to_dict()
        return plan
    heap, seen = [], set()

    def push(p, d, n_p, n_d):
        key = (p.name, d.name, n_p, n_d)
        if key not in seen:
            seen.add(key)
            heapq.heappush(heap, (split_cost(p, d, n_p, n_d, price_table), n_p + n_d, key, p, d))
    for p in pre:
        for d in dec:
            push(p, d, *bracket(p, d, rates))
    floor_p: dict = {}                      # role configuration -> fewest instances a replay left possible
    floor_d: dict = {}
    ttfts: dict = {}                        # configuration pair -> {prefill instances: TTFT of its replays}
    widened: set = set()                    # pairs whose stalled prefill got one more decode instance to try
    missed: dict = {}                       # configuration pair -> its splits that missed
    met: dict = {}                          # configuration pair -> its splits that met
    best_cost = math.inf
    while heap and plan.replays < max_replays:
        cost, _, (pn, dn, n_p, n_d), p, d = heapq.heappop(heap)
        if cost >= best_cost:
            break                           # nothing left is cheaper than the split that met: it is the answer
        if n_p < floor_p.get(pn, 0) or n_d < floor_d.get(dn, 0):
            push(p, d, max(n_p, floor_p.get(pn, 0)), max(n_d, floor_d.get(dn, 0)))
            continue
        if n_p > plan.stalled.get(pn, math.inf):
            continue
        row = replay_row(p.scenario, d.scenario, n_p, n_d)
        plan.replays += 1
        row.update({"prefill": pn, "decode": dn, "pd": f"{n_p}:{n_d}", "cost_usd_per_hour": cost})
        plan.tried.append(row)
        if row.get("meets"):
            plan.best, best_cost = row, cost
            plan.launch = launch_commands(p, d, system)
            met.setdefault((pn, dn), []).append((n_p, n_d))
            for n_p2, n_d2 in _halfway(missed.get((pn, dn), ()), met[(pn, dn)]):
                push(p, d, n_p2, n_d2)
            continue
        missed.setdefault((pn, dn), []).append((n_p, n_d))
        for n_p2, n_d2 in _halfway(missed[(pn, dn)], met.get((pn, dn), ())):
            push(p, d, n_p2, n_d2)
        busy = rates["output_tok_s"] / (n_d * d.decode_tok_s) >= DECODE_BUSY
        if not busy:                        # a decode role near saturation holds first tokens: not the prompts
            _note_stall(plan.stalled, ttfts.setdefault((pn, dn), {}), pn, n_p, row, slo)
        grown = _next_splits(row, slo, n_p, n_d)
        if busy and (n_p, 2 * n_d) not in grown:
            grown.append((n_p, 2 * n_d))
        for n_p2, n_d2 in grown:
            if n_p2 <= plan.stalled.get(pn, math.inf):
                push(p, d, n_p2, n_d2)
            elif (pn, dn) not in widened:   # more of this prefill does not help: try one more decode instance
                widened.add((pn, dn))
                push(p, d, n_p, n_d + 1)
        if len(grown) == 1:                 # the replay blamed one role: its configuration needs more than this
            low = _least(row, n_p if grown[0][0] > n_p else n_d)
            if grown[0][0] > n_p:
                floor_p[pn] = max(floor_p.get(pn, 0), low)
            else:
                floor_d[dn] = max(floor_d.get(dn, 0), low)
    plan.runners_up = _runners_up(heap, plan.best)
    plan.predictions = tally.to_dict()
    plan.message = _message(plan, max_replays)
    return plan


def _note_stall(stalled: dict, seen: dict, pn: str, n_p: int, row: dict, slo: dict) -> None:
    """A prefill configuration whose TTFT (the SLO's tightest TTFT metric) fell by less than a tenth when its
    instances grew, with no queue left before them, is bound by its prompts' own prefill: more of its instances
    do not help, so it is grown no further (``stalled``: configuration -> its largest count worth trying)."""
    metric = min(((v, k) for k, v in slo.items() if k.startswith("ttft_")), default=(None, None))[1]
    ttft = row.get(metric) if metric else None
    if ttft is None or (isinstance(ttft, float) and math.isnan(ttft)):
        return
    fewer = [m for m in seen if m < n_p]
    queue = row.get("queue_p50_s")
    unqueued = queue is not None and not row.get("overloaded") and queue * 1e3 < 0.1 * ttft
    if fewer and unqueued and ttft > 0.9 * seen[max(fewer)] and pn not in stalled:
        stalled[pn] = n_p
    seen[n_p] = ttft


def _next_splits(row: dict, slo: dict, n_p: int, n_d: int) -> list[tuple[int, int]]:
    """The splits a missed replay points to: twice the prefill instances when TTFT (or the queue) fails, twice the
    decode instances when TBT fails, both when neither says which; an overloaded replay at least the offered over
    the served rate times the role it blames (:func:`_least`)."""
    ttft_bad = any(k.startswith(("ttft", "queue")) and not _within(row, k, v) for k, v in slo.items())
    tbt_bad = any(k.startswith("tbt") and not _within(row, k, v) for k, v in slo.items())
    grow = lambda n: max(2 * n, _least(row, n))      # noqa: E731
    out = []
    if ttft_bad or not tbt_bad:
        out.append((grow(n_p), n_d))
    if tbt_bad or not ttft_bad:
        out.append((n_p, grow(n_d)))
    return out


def _least(row: dict, n: int) -> int:
    """The fewest instances of the role a missed replay of ``n`` blames that can meet: ``n + 1``, or where the
    replay was overloaded the offered over the served rate times ``n`` (its instances saturated: fewer than that
    cannot keep up)."""
    served = max(row.get("served_req_s") or 0.0, row.get("served_window_req_s") or 0.0)
    scale = row["offered_req_s"] / served if row.get("overloaded") and row.get("offered_req_s") and served > 0 \
        else 1.0
    return max(n + 1, math.ceil(n * scale - 1e-9))


def _halfway(missed, met) -> list[tuple[int, int]]:
    """Bisection within one configuration pair: for every split that met, the split halfway back to the largest
    that missed with the same count of the other role (none where the two are neighbours)."""
    out = []
    for n_p, n_d in met:
        fewer_p = [m for m, k in missed if k == n_d and m < n_p]
        if fewer_p and n_p - max(fewer_p) > 1:
            out.append(((max(fewer_p) + n_p) // 2, n_d))
        fewer_d = [k for m, k in missed if m == n_p and k < n_d]
        if fewer_d and n_d - max(fewer_d) > 1:
            out.append((n_p, (max(fewer_d) + n_d) // 2))
    return out


def _within(row: dict, metric: str, bound: float) -> bool:
    v = row.get(metric)
    return v is not None and not (isinstance(v, float) and math.isnan(v)) and v <= bound


def _runners_up(heap: list, best: dict | None, k: int = 3) -> list[dict]:
    """The cheapest candidates of other configuration pairs left in the queue (not replayed: they cost at least
    as much as the answer)."""
    out, pairs = [], {(best["prefill"], best["decode"])} if best else set()
    for cost, _, (pn, dn, n_p, n_d), _, _ in sorted(heap):
        if (pn, dn) in pairs:
            continue
        pairs.add((pn, dn))
        out.append({"prefill": pn, "decode": dn, "pd": f"{n_p}:{n_d}", "cost_usd_per_hour": cost,
                    "replayed": False})
        if len(out) == k:
            break
    return out


def _message(plan: RolePlan, max_replays: int) -> str:
    b = plan.best
    if b is None:
        why = "the search stopped at --max-replays" if plan.replays >= max_replays else "no candidate is left"
        stalls = "; ".join(f"{pn}'s TTFT stopped falling past {n} prefill instances (its prompts' own prefill binds)"
                           for pn, n in plan.stalled.items())
        return f"no prefill/decode split met the SLO in {plan.replays} replays ({why})" + (f"; {stalls}" if stalls
                                                                                             else "")
    return (f"cheapest split meeting the SLO: {b['pd'].split(':')[0]} prefill x {b['prefill']} + "
            f"{b['pd'].split(':')[1]} decode x {b['decode']} ({b['cost_usd_per_hour']:.2f} USD/hour, goodput "
            f"{b.get('goodput_req_s', math.nan):.3g} req/s)")
