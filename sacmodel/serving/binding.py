"""What binds: for each term of a decode step and of a request's first token, the resource that sets its time
and how much of that resource the term uses.

A term of the step model (:mod:`sacmodel.serving.step`) is a function of named rates (the GPU's HBM bandwidth
and FLOP/s, NVLink, the bandwidth share a route gives a rank, a NIC's rate) and constants (fitted CPU-side
times, the GPU's small-kernel floor, the scheduler's CPU copy bandwidth). The resource that binds a term is the
one its time is most elastic to, e = d ln(t) / d ln(x), by central differences of 0.01% over the generated step
code: a transfer of B bytes at rate x has e = -1; a roofline max(FLOPs / peak, bytes / HBM) has e = -1 on the
side it is on and 0 on the other; a sum shares e out by time. A route's rate is a max-min share of links and
devices, and :func:`sacmodel.hardware.topology.paths_binding` names the link or device that saturates.

Each entry of :func:`what_binds`: ``part`` (``step``: the busiest rank's decode step; ``ttft``: one request's way
to its first token), ``resource`` (its name in the scenario), ``kind`` (``link``; ``device``: a node's own
bandwidth, such as a CXL device; ``hbm``; ``flops``; ``latency``: the loads a kernel keeps in flight over a
route's round trip; ``constant``: fitted CPU-side or kernel-floor time; ``queue``: waiting behind other
requests), ``utilisation`` (0-1: the work the term puts on the resource over the resource's capacity during the
term; None for the queue), ``seconds`` (s); a route-bound term adds ``next`` (what binds once the resources
that bind now are unbounded) and ``headroom`` (how much faster, relative, the route then runs).
"""
from __future__ import annotations

import math

from ..hardware.topology import Share, paths_binding
from . import step as steps
from .config import SWAP_POOL, Config

# symbol -> kind of resource it stands for (ties in elasticity go to the earlier entry)
RATES = {"hbm_bw": "hbm", "peak_w": "flops", "peak_bf16": "flops", "peak_fp8": "flops", "sw_bw": "route",
         "bk_bw": "route", "nic_bw": "route", "link_bw": "link", "pf_rate": "link", "sw_lat": "latency"}
CONSTANTS = ("t_hs", "t_hs_req", "t_hs_admit", "t_graph_kernel", "t_collective", "t_launch", "t_kernel",
             "t_token", "t_request", "rdma_op_cost", "stage_copy_bw")
EFFICIENCIES = ("hbm_eff", "decode_attn_eff", "moe_eff", "compute_eff", "prefill_eff", "mlp_eff", "moe_mlp_eff")
CONSTANT_NAMES = {"t_hs": "HiSparse CPU work per step (t_hs)", "t_hs_req": "HiSparse CPU work per request (t_hs_req)",
                  "t_hs_admit": "HiSparse admission CPU work (t_hs_admit)",
                  "t_graph_kernel": "GPU small-kernel floor (t_graph_kernel)",
                  "t_collective": "collective latency (t_collective; NCCL's model across hosts)",
                  "t_launch": "CPU kernel launches (t_launch)", "t_kernel": "gather kernel fixed cost (t_kernel)",
                  "t_token": "front end, per prompt token (t_token)",
                  "t_request": "serving path outside the engine (t_request)",
                  "rdma_op_cost": "NIC per-operation cost (rdma_op_cost)",
                  "stage_copy_bw": "scheduler CPU copy (stage_copy_bw)"}
REL = 1e-4


def elasticities(fn, names: tuple, values: dict, symbols, uses=None) -> tuple[float, dict[str, float]]:
    """The term's time t = fn(values in ``names`` order) (s) and d ln(t) / d ln(x) for each of ``symbols``
    among ``names`` (central differences of 0.01%). ``uses``: the names the term contains (None: all); it does
    not change with the others, whose elasticity is 0 without evaluating it."""
    args = [values[n] for n in names]
    key = (fn, symbols, uses, *args)
    known = _ELASTICITIES.get(key)
    if known is not None:                   # the same term at the same values: a prediction asks it again
        return known
    if len(_ELASTICITIES) >= ELASTICITIES_KEPT:
        _ELASTICITIES.clear()
    _ELASTICITIES[key] = t, out = _elasticities(fn, args, names, symbols, uses)
    return t, out


ELASTICITIES_KEPT = 4096
"""Terms whose elasticities are kept (by function and argument values): the first token's prefill and shared
terms, the launches and the copies repeat from one prediction of a configuration to the next."""
_ELASTICITIES: dict = {}


def _elasticities(fn, args: list, names: tuple, symbols, uses) -> tuple[float, dict[str, float]]:
    t = float(fn(*args))
    out = {}
    if t <= 0:
        return t, out
    for s, i in _positions(names, symbols):
        x = args[i]
        if not x or not math.isfinite(x):
            continue
        if uses is not None and s not in uses:
            out[s] = 0.0
            continue
        hi, lo = list(args), list(args)
        hi[i], lo[i] = x * (1 + REL), x / (1 + REL)
        up, down = float(fn(*hi)), float(fn(*lo))
        if up > 0 and down > 0:
            out[s] = (math.log(up) - math.log(down)) / (2 * math.log(1 + REL))
    return t, out


_POSITIONS: dict = {}


def _positions(names: tuple, symbols: tuple) -> list[tuple[str, int]]:
    """(symbol, its index in ``names``) of the ``symbols`` among ``names``, in ``symbols`` order; kept, since
    every prediction asks it of the same few terms."""
    key = (names, symbols)
    out = _POSITIONS.get(key)
    if out is None:
        out = _POSITIONS[key] = [(s, names.index(s)) for s in symbols if s in names]
    return out


def term_binding(fn, names: tuple, values: dict, routes: dict, labels: dict, uses=None) -> dict | None:
    """What binds one term: its most elastic rate or constant (``routes``: route symbol -> (:class:`Share` of
    the busiest flow, the element adding most to its round trip); ``labels``: names of the GPU's resources)."""
    t, el = elasticities(fn, names, values, (*RATES, *CONSTANTS, *EFFICIENCIES), uses)
    if t <= 0 or not el:
        return None
    rate = max((s for s in RATES if s in el), key=lambda s: abs(el[s]), default=None)
    const = max((s for s in CONSTANTS if s in el), key=lambda s: abs(el[s]), default=None)
    consts = sum(abs(el.get(c, 0.0)) for c in CONSTANTS)
    if const is not None and consts > 1e-9 and (rate is None or consts >= abs(el[rate])):
        return {"resource": CONSTANT_NAMES[const], "kind": "constant", "utilisation": min(1.0, consts)}
    if rate is None or abs(el[rate]) <= 1e-9:
        return None
    best, e = rate, abs(el[rate])
    kind = RATES[best]
    if kind in ("hbm", "flops"):
        eff = next((values[x] for x in EFFICIENCIES if x in el and abs(el[x] - el[best]) < 1e-6), 1.0)
        return {"resource": labels[best], "kind": kind, "utilisation": min(1.0, e * eff)}
    if kind == "route":
        share = routes[best][0]
        out = {"resource": resource_name(share.binding, labels["topo"]),
               "kind": "device" if share.binding[0] == "node" else "link",
               "utilisation": min(1.0, e * share.utilisation)}
        if share.next_binding is not None:
            out.update(next=resource_name(share.next_binding, labels["topo"]), headroom=share.headroom)
        return out
    if kind == "latency":
        return {"resource": routes["sw_bw"][1], "kind": "latency", "utilisation": min(1.0, e)}
    return {"resource": labels[best], "kind": kind, "utilisation": min(1.0, e)}


def resource_name(res: tuple, topo) -> str:
    """A resource of the topology by its scenario names: ``cxl_dev[0] (cxl_device)``, ``cxl_adapter -> rc link``."""
    if res[0] == "node":
        return f"{res[1]} ({topo.node(res[1])['kind']})"
    proto = topo._edges[res[1], res[2]].get("protocol", "")
    cap = " per-flow cap" if res[0] == "flow_cap" else ""
    return f"{res[1]} -> {res[2]} link ({proto}{cap})".replace(" ()", "")


def _slowest_latency(topo, path: list[str]) -> str:
    """The element of ``path`` that adds most to its round trip (a node's latency, or a link's, twice)."""
    parts = [(topo._nodes[n].get("latency", 0.0), f"{n} latency") for n in path]
    parts += [(2 * topo._edges[u, v]["latency"], f"{u} -> {v} link latency") for u, v in zip(path, path[1:])]
    return max(parts, key=lambda p: p[0])[1]


def _route(topo, paths: list[list[str]]) -> tuple[Share, str]:
    """The busiest (slowest) of concurrent flows along ``paths``: its :class:`Share` and its slowest latency."""
    shares = paths_binding(topo, paths)
    i = min(range(len(paths)), key=lambda j: shares[j].rate)
    return shares[i], _slowest_latency(topo, paths[i])


def route_shares(cfg: Config, active: int) -> dict:
    """The routes of the step's and the first token's transfers when ``active`` ranks move data at once: the
    swap-in (pool to GPU), the cold backup (GPU to pool) and the RDMA prefix fetch (remote memory to host DRAM
    through the rank's NIC)."""
    ranks = range(max(1, min(active, cfg.dp)))
    key = ("binding routes", cfg.system, cfg.cxl_devices, cfg.rdma_nics, len(ranks))   # kept with the routes
    if key not in cfg.topo._routes:
        cfg.topo._routes[key] = _route_shares(cfg, ranks)
    return dict(cfg.topo._routes[key])


def _route_shares(cfg: Config, ranks: range) -> dict:
    t, out = cfg.topo, {}
    pool = SWAP_POOL.get(cfg.system)
    if pool is None:
        return out
    n = cfg.cxl_devices if pool == "cxl" else None
    out["sw_bw"] = _route(t, [t.route(t.pool_for(r, pool, n), t.gpus[r]) for r in ranks])
    out["bk_bw"] = _route(t, [t.route(t.gpus[r], t.pool_for(r, pool, n)) for r in ranks])
    if cfg.system == "rdma":
        remote = t.nodes_of("remote_memory")[0]
        paths = []
        for r in ranks:
            nic = t.pool_for(r, "rdma", cfg.rdma_nics)
            paths.append(t.route(remote, nic) + t.route(nic, t.pool_for(r, "dram"))[1:])
        out["nic_bw"] = _route(t, paths)
    return out


def labels_of(cfg: Config) -> dict:
    """Names of the GPU's and the NIC's resources for :func:`term_binding`."""
    from ..hardware.sizing import gemm_precision
    t = cfg.topo
    nics = t.pools.get("rdma", [])
    domain = int(t.node(t.gpus[0]).get("nvlink_domain", len(t.gpus)))
    deepep = "moe_a2a" in t.serving and t.serving["moe_a2a"].raw == "deepep"
    link = ("NVLink (per GPU and direction)" if cfg.tp <= domain else
            "the hosts' NICs (DeepEP dispatch and combine)" if deepep else
            "the hosts' NICs (NCCL collectives across hosts)")
    return {"topo": t, "hbm_bw": "GPU HBM bandwidth", "peak_bf16": "GPU BF16 FLOP/s", "peak_fp8": "GPU FP8 FLOP/s",
            "peak_w": f"GPU {gemm_precision(cfg.weights).upper()} FLOP/s ({cfg.weights} weights)",
            "link_bw": link, "pf_rate": f"{nics[0]} rate" if nics else "NIC rate"}


# ---- a prediction's terms -------------------------------------------------------------------------
def what_binds(cfg: Config, model, stats: dict, reqs, pred) -> dict:
    """What binds each term of the busiest rank's decode step (its most frequent state in the run: batch,
    decoding ranks, mean context and misses) and of one request's first token (the workload's first request:
    front end, its prefill chunks, a prefix fetch or cold backup), with the rest of the mean TTFT as
    ``ttft_queue``. ``stats``: the engine's run statistics; ``pred``: the filled :class:`Prediction`."""
    labels = labels_of(cfg)
    out = _step_binding(cfg, model, stats, pred.breakdown, labels)
    out.update(_ttft_binding(cfg, model, reqs, pred, labels))
    return out


def _entries(group: str, values: dict, seconds: dict, routes: dict, labels: dict, part: str, prefix: str = ""):
    c = steps.compiled(group)
    for term, fn in c.funcs.items():
        sec = seconds.get(term, 0.0)
        if sec > 1e-12:
            b = term_binding(fn, c.names, values, routes, labels, c.uses[term])
            if b:
                yield prefix + term, {"part": part, **b, "seconds": sec}


def _step_binding(cfg: Config, model, stats: dict, breakdown: dict, labels: dict) -> dict:
    states = stats.get("swap_states") or {}
    if not states:
        return {}
    (b, active, lg), (w, wl, wm) = max(states.items(), key=lambda kv: (kv[1][0], kv[0]))
    routes = route_shares(cfg, active)
    v = model.rank_values(b, active, wl / w, wm / w, lg)
    rank_s = {k[5:-3]: x / 1e3 for k, x in breakdown.items() if k.startswith("step_") and k.endswith("_ms")}
    out = dict(_entries("rank", v, rank_s, routes, labels, "step"))
    n = max(stats.get("decode_steps", 0), 1)
    tok, distinct = stats.get("decode_tokens", 0.0) / n, stats.get("decode_distinct", 0.0) / n
    sv = model.shared_values(tok, False, distinct, tok)
    c = steps.compiled("shared")
    args = c.args(sv)
    terms = {k: f(*args) for k, f in c.funcs.items()}
    total = sum(terms.values())
    scale = breakdown.get("step_shared_ms", 0.0) / 1e3 / total if total > 0 else 0.0
    out.update(_entries("shared", sv, {k: x * scale for k, x in terms.items()}, routes, labels, "step"))
    return out


def _chunks(cfg: Config, reqs) -> tuple[int, list[tuple[int, int, bool]]]:
    """The first request's prompt length and its prefill chunks (tokens, tokens before, first chunk)."""
    from .engine.workload import prompt_todo
    L = int(reqs.context[0])
    todo = prompt_todo(L, int(reqs.cached[0]), cfg.page, None if reqs.tail is None else int(reqs.tail[0]))
    done, out = L - todo, []
    while todo > 0:
        P = min(cfg.prefill_chunk, todo)
        out.append((P, done, not out))
        done, todo = done + P, todo - P
    return L, out


def _ttft_binding(cfg: Config, model, reqs, pred, labels: dict) -> dict:
    if not len(reqs):
        return {}
    routes = route_shares(cfg, cfg.dp)
    L, chunks = _chunks(cfg, reqs)
    out = dict(_entries("front", dict(model.v, L=float(L)), _seconds("front", dict(model.v, L=float(L))),
                        routes, labels, "ttft", "ttft_"))
    if chunks:
        last = chunks[-1]
        pv = dict(model.v, **model.prefill_values(*last))
        sec = _summed("prefill", [dict(model.v, **model.prefill_values(*c)) for c in chunks])
        out.update(_entries("prefill", pv, sec, routes, labels, "ttft", "ttft_"))
        sec = _summed("shared", [model.shared_values(c[0], True, c[0], 1) for c in chunks])
        out.update(_entries("shared", model.shared_values(last[0], True, last[0], 1), sec, routes, labels, "ttft",
                            "ttft_prefill_"))
        out.update(_entries("eager", model.v, {k: x * len(chunks) for k, x in _seconds("eager", model.v).items()},
                            routes, labels, "ttft", "ttft_"))
    if cfg.system == "rdma":
        fv = dict(model.v, N_f=float(L), nic_bw=routes["nic_bw"][0].rate)
        fetch = dict(_entries("fetch", fv, _seconds("fetch", fv), routes, labels, "ttft", "ttft_"))
        for e in fetch.values():       # the copy runs after the first token leaves, before decode
            e["when"] = ("after the first token is sent (the prefix copy before decode): it delays the requests "
                         "behind it, inside their queue row")
        out.update(fetch)
    elif cfg.system == "cxl-prefetch":
        out["ttft_prefetch"] = _prefetch_entry(cfg, model, L)
    if pred.breakdown.get("cold_backup_s", 0.0) > 0 and "bk_bw" in routes:
        sv = dict(model.v, N_b=float(L), bk_bw=routes["bk_bw"][0].rate)
        out.update(_entries("staging", sv, _seconds("staging", sv), routes, labels, "ttft", "ttft_"))
        if "ttft_cold_backup" in out:
            out["ttft_cold_backup"]["when"] = ("every request (prompts prefilled cold)" if not reqs.cached.any()
                                               else "a request staged without a host-pool entry (the first prefix "
                                                    "hit on each rank)")
    own = sum(e["seconds"] for e in out.values() if not e.get("when"))   # rows with 'when' overlap the others
    rest = pred.ttft_mean_ms / 1e3 - own if math.isfinite(pred.ttft_mean_ms) else 0.0
    if rest > 1e-6:
        out["ttft_queue"] = {"part": "ttft", "resource": "other requests ahead (front end, prefill batches, "
                             "prefix copies)", "kind": "queue", "utilisation": None, "seconds": rest}
    return out


def _seconds(group: str, values: dict) -> dict[str, float]:
    c = steps.compiled(group)
    a = c.args(values)
    return {k: float(f(*a)) for k, f in c.funcs.items()}


def _summed(group: str, values: list[dict]) -> dict[str, float]:
    out: dict[str, float] = {}
    for v in values:
        for k, x in _seconds(group, v).items():
            out[k] = out.get(k, 0.0) + x
    return out


def _prefetch_entry(cfg: Config, model, L: int) -> dict:
    """cxl-prefetch: the whole prompt copied from the CXL devices into host DRAM before decode."""
    t = cfg.topo
    share, _ = _route(t, [t.route(d, t.pool_for(0, "dram")) for d in t.pools["cxl"][:cfg.cxl_devices]])
    out = {"part": "ttft", "resource": resource_name(share.binding, t),
           "kind": "device" if share.binding[0] == "node" else "link", "utilisation": min(1.0, share.utilisation),
           "seconds": float(model.fetch(L, 0.0))}
    if share.next_binding is not None:
        out.update(next=resource_name(share.next_binding, t), headroom=share.headroom)
    return out
