"""From a finished prefill to decode: staging, the RDMA pool's prefix copy, and cold-staging backups.

- **Staging.** With HiSparse an admitted request joins decode one iteration after its first token (its new
  tokens are copied to the host pool first); without it, the next batch the scheduler builds merges it.
- **Prefix copy (RDMA pool, cxl-prefetch).** The scheduler then copies the request's whole prompt from the
  pool (CPU gather, RDMA READ, CPU transpose and scatter) before anything else, which stalls every rank for
  that iteration; concurrent copies share the NICs.
- **Cold staging.** A request staged without a host-pool entry for its prefix backs its whole prompt up from
  the GPU to the pool as its result is processed: a prompt prefilled from scratch, and the first prefix hit of
  a prompt on a rank when no entry is found for it (``cold_staging``: in the benchmark's second round the
  first round's entry is not reused; the logs show each rank's first hit staged cold). The copy starts when
  the forward launched before it ends and holds the GPU: the next iteration lasts that much longer (the ranks
  backing up at once share the GPU-to-pool route), and the request, with the rank's requests staged after it,
  is acknowledged one iteration later than a warm one. Other prefix hits reuse the entry and stage only
  their new tokens.
"""
from __future__ import annotations

from ..config import FETCH_SYSTEMS, Config, backup_bandwidth, fetch_bandwidth
from .stepmodel import Model
from .workload import RequestTable


class Staging:
    """Staged requests per rank, in the order their results were processed, and the copies they need."""

    def __init__(self, cfg: Config, table: RequestTable, model: Model, cold_staging: bool):
        self.cfg, self.model, self.table = cfg, model, table
        dp = cfg.dp
        self.staged: list[list[tuple[int, int]]] = [[] for _ in range(dp)]   # (iteration it may decode from, i)
        self.count = 0
        self.holding: set[int] = set()             # ranks with staged requests
        self.hisparse = cfg.hisparse
        self.first_hits = bool(cfg.hisparse) and table.pid is not None and cold_staging
        self.cold_seen: list[set] = [set() for _ in range(dp)]
        self.cold = [False] * table.n
        self.copies_prefix = cfg.system in FETCH_SYSTEMS
        self._copy_cache: dict = {}

    def add(self) -> None:
        self.cold.append(False)

    def on_admit(self, r: int, i: int) -> None:
        """Request ``i`` starts its prefill on rank ``r``: note whether it will be staged cold."""
        if self.hisparse and not self.table.hit[i]:
            self.cold[i] = True
        elif self.first_hits and self.table.pid[i] not in self.cold_seen[r]:
            self.cold_seen[r].add(self.table.pid[i])
            self.cold[i] = True

    def stage(self, r: int, i: int, it: int) -> None:
        """Request ``i``'s prefill ended before iteration ``it``: it decodes from the iteration after, a cold one
        a step later (its backup is still running when that iteration acknowledges staged requests, and the
        rank's later ones wait behind it)."""
        lag = (2 if self.cold[i] else 1) if self.hisparse else 0   # without HiSparse: merged into the next batch
        self.staged[r].append((it + lag, i))
        self.holding.add(r)
        self.count += 1

    def ready(self, it: int) -> list[tuple[int, list[int]]]:
        """(rank, requests) acknowledged at iteration ``it``, in order: a later one waits for an earlier one."""
        out, staged, holding = [], self.staged, self.holding
        for r in sorted(holding) if len(holding) > 1 else list(holding):
            st = staged[r]
            if st[0][0] <= it:
                k, n = 1, len(st)
                while k < n and st[k][0] <= it:
                    k += 1
                if k == n:              # all of them (the usual case, often one)
                    out.append((r, [st[0][1]] if n == 1 else [i for _, i in st]))
                    st.clear()
                    holding.discard(r)
                else:
                    out.append((r, [i for _, i in st[:k]]))
                    del st[:k]
                self.count -= k
        return out

    def copy_time(self, joined: list[tuple[int, list[int]]]) -> float:
        """Seconds the prefix copies of the requests joining decode stall the iteration (for a system that
        copies whole prefixes, ``copies_prefix``): the slowest rank's copies, back to back, at its share of the
        NICs."""
        if not joined:
            return 0.0
        bws = fetch_bandwidth(self.cfg, tuple(r for r, _ in joined)) if self.cfg.system == "rdma" else {}
        L, t = self.table.L, 0.0
        for r, ready in joined:
            bw = bws.get(r, 0.0)
            t = max(t, sum(self._copy(L[i], bw) for i in ready))
        return t

    def _copy(self, tokens: int, bw: float) -> float:
        key = (tokens, bw)
        x = self._copy_cache.get(key)
        if x is None:
            x = self._copy_cache[key] = self.model.fetch(tokens, bw)
        return x

    def backups(self, first: list[int], rank_of: list[int]) -> tuple[float, int]:
        """Seconds the cold backups of the requests in ``first`` (their first tokens just computed) hold the
        GPU in the next iteration, and how many ranks back up (HiSparse only)."""
        backing: dict[int, int] | None = None
        L, cold = self.table.L, self.cold
        for i in first:
            if cold[i]:
                if backing is None:
                    backing = {}
                backing[rank_of[i]] = backing.get(rank_of[i], 0) + L[i]
        if backing is None:
            return 0.0, 0
        bws = backup_bandwidth(self.cfg, tuple(backing))
        return max(self.model.backup(tok, bws[r]) for r, tok in backing.items()), len(backing)
