"""One discrete-event simulation of a whole cluster: every instance's engine on one clock.

Events, earliest first: actions due (a router or cache update at the time it happens), the network's transfers
(:mod:`~sacmodel.cluster.fabric`), a request arriving at the router, and the engines' iterations. A request's
path:

1. **Route** (at its arrival): the router picks an instance (and a data-parallel rank, if it addresses ranks;
   else the instance's round-robin does) from what it can know (:mod:`~sacmodel.cluster.routers`). Hits in a
   tier beyond the system's home tier are brought home first (a transfer); then the request reaches the engine.
2. **Serve**: at admission the rank looks its prefix up in its caches as they are at that moment
   (:mod:`~sacmodel.cluster.caches`); prefill chunks insert the blocks they computed; new blocks are written to
   the shared tiers (readable once the write lands); the request's generated tokens join the cache at its end.
   Decode steps of hosts on one CXL pool share its devices: a host whose swap-in traffic exceeds its max-min
   share of the devices runs slower steps.
3. **Disaggregation**: the proxy picks the decode instance at arrival too (the decode router books it and the
   decode rank's cache gives up its room from then: the decode server pre-allocates); a prefill instance
   computes the prompt and its first token; once that response is back, the decode instance pulls the blocks
   it lacks (Transfer Engine, NICs nearest
   the GPUs; or reads the CXL pool the prefill wrote), then serves the request; the prefill instance frees the
   request's KV when the pull is done. The client's first token comes from the decode instance.

Times the client sees include the serving path outside the engine (``t_request``).
"""
from __future__ import annotations

import heapq
import math

import numpy as np

from ..hardware.cluster import HOME
from ..serving.engine.loop import open_engine
from ..serving.engine.stepmodel import TRACE_CONTEXT_GRID, Model
from .fabric import Fabric
from .prefix_cache import chain, page_keys
from .routers import RouterState


class Server:
    """One instance: its engine, role, host, and the global ids of the requests it was given (by local id)."""

    def __init__(self, k: int, spec, cfg, model, role: str, max_output: int):
        self.k, self.id, self.host, self.role, self.cfg = k, spec.id, spec.host, role, cfg
        self.engine = open_engine(cfg, model=model, max_output=max_output)
        self.glob: list[int] = []
        self.turn = 0                         # the instance's round-robin over its ranks
        self.t_request = model.v["t_request"]
        self.failed = False


class _Hooks:
    """What an engine tells the cluster, forwarded with its instance."""

    def __init__(self, sim: "CoSim", srv: Server):
        self.sim, self.srv = sim, srv

    def lookup(self, r, i):
        self.sim.on_lookup(self.srv, r, i)

    def started(self, r, i):
        self.sim.on_started(self.srv, r, i)

    def prefilled(self, r, i, n):
        self.sim.later(self.srv.engine.t, self.sim.on_prefilled, self.srv, r, i, n)

    def ended(self, r, i):
        return self.sim.on_ended(self.srv, r, i)


class CoSim:
    """The cluster replay on one clock (see the module docstring). ``setup`` is a
    :class:`~sacmodel.cluster.replay.Setup`."""

    def __init__(self, setup):
        self.s = s = setup
        tr, n = s.tr, len(s.tr)
        self.n = n
        self.L, self.out = tr.input_len.tolist(), tr.output_len.tolist()
        self.arrival = (tr.arrival / s.time_scale).tolist()
        self.order = np.argsort(tr.arrival, kind="stable").tolist()
        nan = math.nan
        self.first, self.done, self.submit_t, self.admit_t = [nan] * n, [nan] * n, [nan] * n, [nan] * n
        self.taken_in_t = [nan] * n             # when the instance's scheduler could first admit the request
        self.load_s, self.handoff_s, self.cached = [0.0] * n, [0.0] * n, [0.0] * n
        self.inst, self.dec = [-1] * n, [-1] * n
        self.rejected: dict[int, str] = {}
        self.by_tier: dict[str, list] = {t: [0.0] * n for t in s.tier_names}
        self.keys: list = [None] * n
        self.cont: dict[int, list] = _continuations(s, self.order) if s.cache == "trace" else {}
        self.pins: dict[int, list] = {}
        self.outside: dict[int, tuple] = {}
        self.found: dict[int, tuple] = {}
        self.hbm_tiers: dict[int, list] = {}    # id of a private cache -> whether each of its tiers is device memory
        self.brought: dict[int, int] = {}       # request -> prefix blocks brought home from far tiers for it
        self.actions: list = []
        self.seq = 0
        self.fabric = Fabric(s.net.capacity)
        self.pool_stats: dict[int, list] = {}
        self.pool_keys: dict[int, list] = {}     # instance -> (stream key, resources) of each host's pool loads
        self._build_servers()
        self.queue: list[int] = []              # requests waiting in the router
        self.next_arr = 0
        self.in_flight = 0
        self.slot_at = 0.0
        self.finished = 0
        self._stages(tr)
        self.now = 0.0
        self.rank_pre: dict[int, tuple] = {}       # request -> (rank, local id) on its prefill instance
        self.dec_cand: dict[int, int] = {}
        self.dec_rank: dict[int, int] = {}         # request -> decode rank chosen at arrival
        self.prealloc: dict[int, tuple] = {}       # request -> (decode home cache, tokens reserved there)
        self.landed: dict[int, float] = {}         # request -> when its prompt's write to the CXL pool landed
        self.after_land: dict = {}

    # ---- set-up --------------------------------------------------------------------------------------
    def _build_servers(self) -> None:
        s = self.s
        max_out = int(s.tr.output_len.max()) if self.n else 1
        models = {}
        self.servers: list[Server] = []
        for k, spec in enumerate(s.insts):
            role = "prefill" if s.split and k in s.pre_set else ("decode" if s.split else "both")
            cfg = s.cfg_of(k)
            if id(cfg) not in models:
                models[id(cfg)] = Model(cfg, context_grid=TRACE_CONTEXT_GRID)
            srv = Server(k, spec, cfg, models[id(cfg)], role, 1 if role == "prefill" else max_out)
            if s.concurrency:
                srv.engine.client.concurrency = s.concurrency
            srv.engine.ranks.hooks = _Hooks(self, srv)
            srv.engine.client.listener = self._listener(srv)
            if HOME[s.system] == "cxl" and s.pool_tier:
                srv.engine.pool = self._pool(srv)
            self.servers.append(srv)
        self.eng_heap: list = []
        self.sched = [math.inf] * len(self.servers)     # each engine's time in the heap (inf: not in it)
        self.cands_pre = self._candidates(s.pre, s.router)
        self.cands_dec = self._candidates(s.dec, s.router_dec) if s.split else []
        self.state_pre = RouterState(len(self.cands_pre))
        self.state_dec = RouterState(len(self.cands_dec)) if s.split else None
        self.cand_of: dict = {}
        for router, cands in ((s.router, self.cands_pre), (s.router_dec, self.cands_dec)):
            if hasattr(router, "metrics"):
                router.metrics = self._metrics(cands)

    def _metrics(self, cands):
        """What a pod exports to a scheduler that scrapes metrics: waiting requests and KV use (0-1)."""
        def of(c):
            k, r = cands[c]
            eng = self.servers[k].engine
            ranks = range(eng.cfg.dp) if r is None else (r,)
            wait = sum(len(eng.ranks.waiting[j]) for j in ranks) + eng.dispatch.count + len(eng.frontend.intake) \
                + len(eng.frontend.tokq)
            use = sum(eng.memory.used[j] for j in ranks) / (len(ranks) * eng.memory.max_total)
            return wait, min(1.0, use)
        return of

    def _candidates(self, ks, router) -> list[tuple]:
        if router.rank_aware:
            return [(k, r) for k in ks for r in range(self.s.cfg_of(k).dp)]
        return [(k, None) for k in ks]

    # ---- the clock -----------------------------------------------------------------------------------
    def later(self, t: float, fn, *args) -> None:
        self.seq += 1
        heapq.heappush(self.actions, (t, self.seq, fn, args))

    def run(self, progress=None) -> None:
        eng_heap, actions, fabric = self.eng_heap, self.actions, self.fabric
        self.prog = progress
        while True:
            t_arr = self._next_arrival()
            t_act = actions[0][0] if actions else math.inf
            t_fab = fabric.next_time()
            t_ext = min(t_arr, t_act, t_fab)
            while eng_heap and eng_heap[0][0] < t_ext:
                due, _, k = heapq.heappop(eng_heap)
                self._step(k, due, t_ext)
                t_act = actions[0][0] if actions else math.inf
                t_ext = min(t_arr, t_act, fabric.next_time())
            if t_ext == math.inf:
                break
            if t_act <= t_ext:
                self.now, _, fn, args = heapq.heappop(actions)
                fn(*args)
            elif fabric.next_time() <= t_ext:
                fabric.advance(t_ext)
            else:
                self._arrive(self.order[self.next_arr], t_arr)

    def _push(self, k: int) -> None:
        """(Re)schedule engine ``k`` at its due time; older entries of it in the heap become stale."""
        d = self.servers[k].engine.due()
        if d < math.inf and d != self.sched[k]:
            self.seq += 1
            heapq.heappush(self.eng_heap, (d, self.seq, k))
        self.sched[k] = d

    def _step(self, k: int, due: float, horizon: float) -> None:
        srv = self.servers[k]
        eng = srv.engine
        if srv.failed or due != self.sched[k]:       # a stale entry: the engine was rescheduled since
            return
        self.sched[k] = math.inf
        busy = eng.step(horizon)
        if eng.memory.crash is not None:
            srv.failed = True
            self._out_of_routing(k)
            return
        if busy:
            self._push(k)
        if eng.pool is not None and not any(eng.ranks.running):
            for key, res in self.pool_keys.get(k, ()):
                self.fabric.stream(key, eng.t, 0.0, res)

    def _out_of_routing(self, k: int) -> None:
        """A failed instance leaves routing: its candidates are removed from the routers' views (the requests
        it held stay unfinished)."""
        for cands, state in ((self.cands_pre, self.state_pre), (self.cands_dec, self.state_dec)):
            for j, (kk, _) in enumerate(cands):
                if kk == k:
                    state.remove(j)

    # ---- arrivals and routing ------------------------------------------------------------------------
    def _stages(self, tr) -> None:
        """A ladder trace replayed with a stage barrier: each request's stage (by position in arrival order) and
        the stages' nominal starts (s, scaled); the shift the barriers have added so far."""
        barrier, ladder = getattr(self.s, "stage_barrier", None), tr.stages
        self.barrier = barrier if barrier is not None and ladder else None
        if self.barrier is None:
            return
        ends = np.cumsum([d for _, d in ladder]) / self.s.time_scale
        self.stage_t0 = np.concatenate(([0.0], ends[:-1])).tolist()
        self.stage_pos = np.searchsorted(ends, np.asarray(self.arrival)[self.order], side="right").tolist()
        self.open_stage, self.shift = self.stage_pos[0] if self.n else 0, 0.0

    def _barrier(self) -> bool:
        """Whether the next request's stage may start: the client waits until every earlier request has
        finished, then starts the stage ``barrier`` s after the last of them (the shift carries to later
        stages)."""
        st = self.stage_pos[self.next_arr]
        if st == self.open_stage:
            return True
        if self.finished < self.next_arr:
            return False
        self.shift = max(self.shift, self.slot_at + self.barrier - self.stage_t0[st])
        self.open_stage = st
        return True

    def _next_arrival(self) -> float:
        if self.next_arr >= self.n:
            return math.inf
        g = self.order[self.next_arr]
        if self.barrier is not None:
            if not self._barrier():
                return math.inf
            if self.s.closed_loop:
                return math.inf if self.in_flight >= self.s.closed_loop else \
                    max(self.arrival[g] + self.shift, self.slot_at)
            return self.arrival[g] + self.shift
        if self.s.closed_loop:
            if self.in_flight >= self.s.closed_loop:
                return math.inf
            return max(self.arrival[g], self.slot_at)
        return self.arrival[g]

    def _arrive(self, g: int, t: float) -> None:
        self.next_arr += 1
        self.in_flight += 1
        self.arrival[g] = t
        s = self.s
        why = s.reject(self.L[g], self.out[g])
        if why:
            self.rejected[g] = why
            self._end_request(g, t)
            return
        if s.cache == "trace":
            o0, o1 = s.tr.offsets[g], s.tr.offsets[g + 1]
            self.keys[g] = chain(page_keys(s.tr.blocks[o0:o1], self.L[g], s.tr.block_tokens, s.bt))
        else:
            self.keys[g] = []
        self.state_pre.now = t
        if s.router.waits(self.state_pre):
            self.queue.append(g)
            return
        self._route(g, t)

    def _route(self, g: int, t: float) -> None:
        s, keys = self.s, self.keys[g]
        if not self.state_pre.up or (s.split and not self.state_dec.up):
            self.rejected[g] = "every instance that could serve it failed"
            self._end_request(g, t)
            return
        c, k, r = self._pick(s.router, self.state_pre, self.cands_pre, g, t)
        self.inst[g] = k
        self.cand_of[g] = c
        if s.split and self.out[g] > 1:
            self._choose_decode(g, t)
        far = s.caches.far(k, r, keys, s.caches.near(k, r, keys, t)[0], t) if s.cache == "trace" else []
        if not far:
            self._submit(g, k, r, t)
            return
        self._load_far(g, k, r, t, far)

    def _overlap(self, cand, keys, t, memo) -> tuple:
        """(device, host, disk, shared) blocks of ``keys`` a router's KV events show on candidate ``cand``."""
        k, r = cand
        caches = self.s.caches
        pc = caches.private.get(caches.scope(k, r if r is not None else 0))
        dev = host = 0
        if pc is not None and keys:
            c, names = pc
            path = c.match(keys)
            if path:
                hbm = self.hbm_tiers.get(id(c))
                if hbm is None:           # per tier of this cache: is it device memory
                    hbm = self.hbm_tiers[id(c)] = [self.s.kind_of[n] == "hbm" for n in names]
                tier = c.tier
                for node in path:
                    if hbm[tier[node]]:
                        dev += 1
                    else:
                        host += 1
        if "shared" not in memo:
            memo["shared"] = max((caches.shared[x].match_len(keys) if not hasattr(caches.shared[x], "lease")
                                  else 0 for x in caches.shared), default=0)
        return dev, host, 0, memo["shared"]

    def _load_far(self, g: int, k: int, r: int, t: float, far: list) -> None:
        """Bring far hits home (transfers over the network), then submit."""
        s, srv = self.s, self.servers[k]
        flows = []
        have = s.caches.near(k, r, self.keys[g], t)[0]
        for tier, blocks in far:
            ts = s.cl.tiers[tier]
            nbytes = blocks * s.bt * s.bpt
            holders = s.caches.shared[tier].holders(self.keys[g][have:have + blocks]) \
                if tier in s.caches.shared and hasattr(s.caches.shared[tier], "holders") else None
            for h, (gpu, share) in s.readers(k, r).items():      # each host of the rank reads its share
                flows += s.net.load(h, gpu, ts, nbytes * share, holders)
            self.by_tier[tier][g] += min(blocks * s.bt, self.L[g] - 1)
            have += blocks
        left = [len(flows)]

        def done(td, g=g, k=k, r=r, n=have):
            left[0] -= 1
            if left[0] == 0:
                self.load_s[g] = td - t
                s.caches.promote(k, r, self.keys[g], n)
                self.brought[g] = n
                self._submit(g, k, r, td)
        for nbytes, lat, res in flows:
            self.fabric.transfer(t, nbytes, lat, res, done)

    def _submit(self, g: int, k: int, r: int, t: float, decode: bool = False) -> None:
        srv = self.servers[k]
        out = 1 if srv.role == "prefill" else self.out[g]
        srv.engine.submit(t, self.L[g], out, 0.0, rank=r)
        srv.glob.append(g)
        if not decode:
            self.submit_t[g] = t
        self._push(k)

    # ---- what the engines report ---------------------------------------------------------------------
    def on_lookup(self, srv: Server, r: int, i: int) -> None:
        """Admission: the rank's caches as they are now give the request's cached prefix."""
        g, s, tb = srv.glob[i], self.s, srv.engine.table
        L = self.L[g]
        if srv.role == "decode" or s.cache == "all":
            tb.set_cached(i, L - 1)
            return
        if s.cache == "none" or not self.keys[g]:
            return
        n, by = s.caches.near(srv.k, r, self.keys[g], srv.engine.t)
        # blocks loaded for this request sit in its own KV memory, whether or not a home tier caches them
        # (a chain of the store alone has none: SGLang's HiCache prefetches L3 hits into the request's pool)
        n = max(n, self.brought.pop(g, 0))
        self.found[g] = (n, by)
        tb.set_cached(i, min(n * s.bt, L - 1))
        mem = srv.engine.memory
        if hasattr(mem, "set_held") and n:          # the prefix other running requests hold is not held twice
            mem.set_held(i, L - s.caches.shared_in_use(srv.k, r, self.keys[g], n) * s.bt)

    def on_started(self, srv: Server, r: int, i: int) -> None:
        """The request's prefill starts: pin its cached prefix; its new and generated tokens take room."""
        g, s = srv.glob[i], self.s
        self._let_go(g)        # admitted again after a retraction or preemption: its first admission's pins go
        if srv.role == "decode":
            self._decode_holds(srv, r, g)
            return
        self.rank_pre[g] = (r, i)
        self.admit_t[g] = srv.engine.t
        self.taken_in_t[g] = srv.engine.dispatch.taken_in.pop(i, srv.engine.t)
        n, by = self.found.pop(g, (0, {}))
        tokens = min(n * s.bt, self.L[g] - 1) if n else 0.0
        self.cached[g] = tokens
        for t in by:                 # admitted again: this admission's hits replace the last one's
            self.by_tier[t][g] = 0.0
        own = tokens - sum(self.by_tier[t][g] for t in s.far_tiers)   # far hits were brought home before
        for t, b in by.items():
            x = min(b * s.bt, max(own, 0.0))
            self.by_tier[t][g] += x
            own -= x
        c = s.caches.home(srv.k, r)
        if c is None or s.cache != "trace":
            return
        self.pins[g] = [(c, s.caches.pin(c, self.keys[g], n))] if n else []
        held = (self.L[g] - tokens) + self.out[g]
        self.outside[g] = (c, held)
        s.caches.hold(c, held)

    def _decode_holds(self, srv: Server, r: int, g: int) -> None:
        """A decode instance holds the whole prompt it received: it joins the rank's private cache, pinned."""
        s = self.s
        c = s.caches.home(srv.k, r)
        if c is None or s.cache != "trace" or c is not s.caches.private.get(s.caches.scope(srv.k, r), (None,))[0]:
            return
        self.pins[g] = [(c, s.caches.pin(c, self.keys[g], len(self.keys[g])))]
        self.outside[g] = (c, self.out[g])
        s.caches.hold(c, self.out[g])

    def on_prefilled(self, srv: Server, r: int, i: int, n_done: int) -> None:
        """A prefill chunk ended: the blocks it completed join the rank's private home cache; at the prompt's
        end its new blocks are written to the shared tiers."""
        g, s = srv.glob[i], self.s
        if s.cache != "trace" or srv.role == "decode":
            return
        tb = srv.engine.table
        computed = self.L[g] - tb.todo[i] + n_done
        blocks = min(computed // s.bt, len(self.keys[g]))
        c = s.caches.home(srv.k, r)
        if c is not None and c is s.caches.private.get(s.caches.scope(srv.k, r), (None,))[0] and blocks:
            old = self.pins.get(g, [])
            had = len(old[0][1]) if old else 0
            oc, held = self.outside.get(g, (None, 0.0))
            moving = max(0, blocks - had) * s.bt                  # tokens about to move into the cache
            s.caches.hold(oc, -moving)
            self.pins[g] = [(c, s.caches.pin(c, self.keys[g], blocks))]
            for cc, path in old:
                cc.release(path)
            moved = max(0, len(self.pins[g][0][1]) - had) * s.bt
            s.caches.hold(oc, moving - moved)                     # what did not fit stays outside
            if oc is not None:
                self.outside[g] = (oc, held - moved)
        if n_done >= tb.todo[i]:
            self._write_shared(g, srv, r, blocks, srv.engine.t)

    def _write_shared(self, g: int, srv: Server, r: int, blocks: int, t: float) -> None:
        s, keys = self.s, self.keys[g]
        for tier in s.caches.write_targets(srv.k):
            c = s.caches.shared[tier]
            have = c.match_len(keys, t) if hasattr(c, "lease") else c.match_len(keys)
            new = keys[have:blocks]
            if not new:
                continue
            alloc = c.put_start(new, t, s.host_of(srv.k, r)) if hasattr(c, "put_start") else None
            if alloc is not None and not alloc:
                continue
            nb = len(alloc if alloc is not None else new)
            flows = [f for h, (gpu, share) in s.writers(srv.k, r).items()
                     for f in s.net.write(h, gpu, s.cl.tiers[tier], nb * s.bt * s.bpt * share)]
            landed = keys[:blocks] if alloc is None else alloc
            left = [len(flows)]

            pool = s.via_cxl and s.cl.tiers[tier].kind == "cxl"
            if pool:
                self.landed[g] = math.inf

            def done(td, tier=tier, landed=landed, alloc=alloc, pool=pool):
                left[0] -= 1
                if left[0] == 0:
                    s.caches.land(tier, landed, td, alloc)
                    if pool:
                        self.landed[g] = td
                        if g in self.after_land:
                            self.after_land.pop(g)(td)
            for nbytes, lat, res in flows:
                self.fabric.transfer(t, nbytes, lat, res, done)

    def on_ended(self, srv: Server, r: int, i: int) -> bool:
        """The request's last token was computed: unpin, add its generated tokens to the cache. A prefill
        instance keeps its KV for the decode instance's pull (True)."""
        g = srv.glob[i]
        self.later(srv.engine.t, self._release, g, srv.role == "prefill")
        return srv.role == "prefill" and self.out[g] > 1

    def _let_go(self, g: int):
        """Unpin request ``g``'s blocks and give back the room it held outside the cache; returns that cache."""
        for c, path in self.pins.pop(g, []):
            c.release(path)
        c, held = self.outside.pop(g, (None, 0.0))
        if c is not None:
            self.s.caches.hold(c, -held)
        return c

    def _release(self, g: int, prefill: bool) -> None:
        s = self.s
        c = self._let_go(g)
        if c is not None:
            if prefill or not self.keys[g]:
                return
            ext = self.cont.get(g)
            if ext is not None:          # prompt + output as the next turn names them (SGLang caches both)
                c.release(s.caches.pin(c, ext, len(ext)))
                return
            gen = self.out[g] // s.bt
            if gen:
                own = chain([g, -1] + list(range(gen)))[2:]          # blocks no prompt names
                c.release(s.caches.pin(c, self.keys[g] + own, len(self.keys[g]) + gen))

    def _pool(self, srv: Server):
        """The engine's decode steps on a shared CXL pool: its swap-in traffic is a stream on the devices through
        each host's CXL adapters; an instance over several hosts loads each rank's entries through the adapters
        of the hosts its GPUs are on (:meth:`~sacmodel.cluster.replay.Setup.host_shares`), and its lockstep step
        lasts as long as its slowest host's loads."""
        s, fabric, k, per_entry = self.s, self.fabric, srv.k, self.s.cfg.token_bytes
        shares = [s.host_shares(k, r) for r in range(srv.cfg.dp)]
        hosts = sorted({h for x in shares for h in x})
        res = {h: s.pool_res(h) for h in hosts}
        self.pool_keys[k] = [((k, h), res[h]) for h in hosts]
        stats = self.pool_stats.setdefault(k, [0.0, 0.0, 0.0])     # bytes, seconds alone, seconds shared

        def price(eng, T: float, misses: float, steps: int) -> float:
            nbytes = misses * per_entry
            if nbytes <= 0 or T <= 0:
                return T
            if len(hosts) == 1:
                part = {hosts[0]: 1.0}
            else:                        # the ranks' loads, by their running requests, on their hosts' adapters
                run = eng.ranks.running
                tot = sum(run)
                part = dict.fromkeys(hosts, 0.0)
                for r, x in enumerate(shares):
                    w = run[r] / tot if tot else 1.0 / len(shares)
                    for h, f in x.items():
                        part[h] += w * f
            T2 = T
            for h, f in part.items():
                demand = nbytes * f / T
                got = fabric.stream((k, h), eng.t, demand, res[h])
                if got < demand:
                    T2 = max(T2, nbytes * f / got)
            moved = nbytes * sum(part.values())
            stats[0] += moved * steps
            stats[1] += T * steps
            stats[2] += T2 * steps
            return T2
        return price

    # ---- what the client sees ------------------------------------------------------------------------
    def _listener(self, srv: Server):
        def seen(i: int, last: bool, when: float) -> None:
            self.later(when + srv.t_request, self._seen, srv, srv.glob[i], last)
        return seen

    def _seen(self, srv: Server, g: int, last: bool) -> None:
        """A token of request ``g`` reached the client (or, from a prefill instance, the proxy) now."""
        t = self.now
        if srv.role == "prefill":
            if last:
                self._prefill_back(srv, g, t)
            return
        state, c = (self.state_dec, self.dec_cand[g]) if srv.role == "decode" else (self.state_pre, self.cand_of[g])
        if self.first[g] != self.first[g]:
            self.first[g] = t
            state.now = t
            state.first_token(c, self.L[g], rid=g)
            if self.queue:
                self._drain_queue(t)
        if last:
            self.done[g] = t
            state.finish(c, self.keys[g])
            self._end_request(g, t)

    def _end_request(self, g: int, t: float) -> None:
        self.finished += 1
        self.in_flight -= 1
        self.slot_at = t
        if self.prog is not None:
            self.prog(self.finished)

    def _drain_queue(self, t: float) -> None:
        self.state_pre.now = t
        while self.queue and not self.s.router.waits(self.state_pre):
            self._route(self.queue.pop(0), t)

    # ---- disaggregation ----------------------------------------------------------------------------------
    def _pick(self, router, state, cands: list, g: int, t: float) -> tuple[int, int, int]:
        """Request ``g``'s candidate by ``router`` at ``t`` (booked in its ``state``): (candidate index, instance,
        rank); a candidate without a rank of its own takes its instance's ranks round-robin."""
        keys = self.keys[g]
        state.now = t
        memo: dict = {}
        c = router.choose(state, lambda j: self._overlap(cands[j], keys, t, memo), self.L[g], keys) \
            if len(cands) > 1 else 0
        router.admit(state, c, keys, self.L[g], rid=g)
        k, r = cands[c]
        if r is None:
            srv = self.servers[k]
            r = srv.turn % srv.cfg.dp
            srv.turn += 1
        return c, k, r

    def _choose_decode(self, g: int, t: float) -> None:
        """At arrival, the PD proxy picks the decode instance too and the decode server pre-allocates the
        request's KV (SGLang's mini_lb ``select_pair`` sends the request to the prefill and the decode server at
        once, ``python/sglang/srt/disaggregation/mini_lb.py``; the decode server's prealloc queue reserves it;
        vLLM's disaggregated proxy also picks both at the request's start): the decode router books it now and
        the rank's home cache gives up the prompt + output from now."""
        s = self.s
        cd, kd, rd = self._pick(s.router_dec, self.state_dec, self.cands_dec, g, t)
        self.dec[g], self.dec_cand[g], self.dec_rank[g] = kd, cd, rd
        c = s.caches.home(kd, rd) if s.cache == "trace" else None
        if c is not None and c is s.caches.private.get(s.caches.scope(kd, rd), (None,))[0]:
            held = float(self.L[g] + self.out[g])
            s.caches.hold(c, held)
            self.prealloc[g] = (c, held)

    def _prefill_back(self, srv: Server, g: int, t: float) -> None:
        """The prefill's response is back: hand the KV over to the decode instance chosen at arrival."""
        s, c = self.s, self.cand_of[g]
        self.state_pre.now = t
        self.state_pre.first_token(c, self.L[g], rid=g)
        self.state_pre.finish(c, self.keys[g])
        if self.queue:
            self._drain_queue(t)
        if self.out[g] <= 1:
            self.first[g] = self.done[g] = t
            self._end_request(g, t)
            return
        keys = self.keys[g]
        kd, rd = self.dec[g], self.dec_rank.pop(g)
        rp, ip = self.rank_pre[g]

        def arrived(td, g=g, kd=kd, rd=rd):
            c_dec, held = self.prealloc.pop(g, (None, 0.0))
            s.caches.hold(c_dec, -held)           # the pre-allocated room now holds the request itself
            srv.engine.release(rp, ip)
            self._push(srv.k)                 # freed memory may let the prefill instance admit more
            self.handoff_s[g] = td - t
            self._submit(g, kd, rd, td, decode=True)
        if s.via_cxl:                     # the decode instance reads the pool the prefill wrote
            if self.landed.get(g, -math.inf) <= t:
                arrived(t)
            else:
                self.after_land[g] = arrived
            return
        have = s.caches.near(kd, rd, keys, t)[0] if keys else 0
        missing = self.L[g] - min(have * s.bt, self.L[g] - 1)
        flows = s.net.handoff(s.gpus_of(srv.k, rp), s.gpus_of(kd, rd), missing * s.bpt, s.lanes_split)
        if not flows:
            arrived(t)
            return
        left = [len(flows)]

        def done(td):
            left[0] -= 1
            if left[0] == 0:
                arrived(td)
        for nbytes, lat, res in flows:
            self.fabric.transfer(t, nbytes, lat, res, done)


def _continuations(s, order) -> dict[int, list]:
    """Request -> the cache keys of its prompt and output as the conversation's next turn names them.

    SGLang's radix cache inserts a finished request's whole sequence, prompt and generated tokens
    (``cache_finished_req``), and a chat's next turn sends them back as its prompt's prefix. The trace names only
    prompts, so a request's output blocks are named by its next turn: the first later request whose prompt holds
    the request's last full prompt block (a chained key, so its whole prefix) and is at least prompt + output
    long (on the Mooncake conversation trace 2,956 of the 3,308 requests with a later turn are covered so:
    the next turn's prompt repeats the previous input and output). Only requests whose last full block is their
    own (not a prefix an earlier request already sent) have a next turn; the keys are the next turn's first
    (prompt + output) // block full blocks, kept only when they add a block."""
    tr, bt = s.tr, s.bt
    L, out, offs = tr.input_len.tolist(), tr.output_len.tolist(), tr.offsets.tolist()
    seen: set = set()
    pending: dict = {}                   # last full prompt key -> request waiting for its next turn
    cont: dict[int, list] = {}
    for j in order:
        keys = chain(page_keys(tr.blocks[offs[j]:offs[j + 1]], L[j], tr.block_tokens, bt))
        for x in keys:
            g = pending.get(x)
            if g is not None and L[j] >= L[g] + out[g]:
                del pending[x]
                n = min((L[g] + out[g]) // bt, len(keys))
                if n > L[g] // bt:
                    cont[g] = keys[:n]
        nf = min(L[j] // bt, len(keys))
        if nf and keys[nf - 1] not in seen:
            pending[keys[nf - 1]] = j
        seen.update(keys)
    return cont
