"""What a run reports besides the per-request times: where the time went, and a log-like timeline."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)        # slots: its counters are updated every iteration
class Stats:
    """Counters of one run (times in s; device tokens per rank)."""
    iterations: int = 0
    decode_steps: int = 0
    prefill_iterations: int = 0
    fetch_s: float = 0.0                  # iterations stalled by prefix copies
    decode_s: float = 0.0
    prefill_s: float = 0.0
    shared_s: float = 0.0                 # the shared (MoE, dense) part of the decode steps
    peak_rank_requests: int = 0
    first_token_copy_wait_s: float = 0.0  # first tokens held back by the next batch's prefix copies, summed
    cold_backup_s: float = 0.0            # GPU time the cold-staging backups held
    # (batch, active ranks, has long requests) -> [steps, steps x mean context, steps x misses] of the
    # slowest rank, for the step breakdown
    swap_states: dict = field(default_factory=dict)
    decode_tokens: float = 0.0            # decode steps x tokens of the step (all ranks), for the shared part
    decode_distinct: float = 0.0          # decode steps x distinct tokens of the step

    def add_iteration(self, jump: int, step: float, shared: float, copy_t: float, prefill: bool, active: int,
                      slowest: tuple | None, n_tok: int = 0, n_distinct: int = 0) -> None:
        """Account ``jump`` iterations of ``step`` s each (``active``: decoding ranks; ``slowest``: the slowest
        decoding rank's state; ``n_tok``, ``n_distinct``: the iteration's tokens over all ranks, and how many of
        them are distinct)."""
        self.iterations += jump
        self.fetch_s += copy_t
        if prefill:
            self.prefill_iterations += 1
            self.prefill_s += step
            return
        self.decode_steps += jump
        self.decode_s += jump * step
        self.shared_s += jump * shared
        self.decode_tokens += jump * n_tok
        self.decode_distinct += jump * n_distinct
        b, Lm, M, lg = slowest
        sw = self.swap_states.setdefault((b, active, lg), [0.0, 0.0, 0.0])
        sw[0] += jump
        sw[1] += jump * Lm
        sw[2] += jump * M

    def as_dict(self, peak_used: float) -> dict:
        return {"iterations": self.iterations, "decode_steps": self.decode_steps,
                "prefill_iterations": self.prefill_iterations, "fetch_s": self.fetch_s, "decode_s": self.decode_s,
                "prefill_s": self.prefill_s, "shared_s": self.shared_s, "peak_used": peak_used,
                "peak_rank_requests": self.peak_rank_requests, "swap_states": self.swap_states,
                "first_token_copy_wait_s": self.first_token_copy_wait_s, "cold_backup_s": self.cold_backup_s,
                "decode_tokens": self.decode_tokens, "decode_distinct": self.decode_distinct}


class Timeline:
    """A per-rank timeline sampled like the server log (every 40 decode steps: time, rank, running requests,
    device tokens held), with prefill batches, prefix copies and backups; off unless ``record``."""

    def __init__(self, record: bool, dp: int):
        self.on = record
        self.rows: list[tuple] = []
        self._steps = [0] * dp

    def decode(self, t: float, r: int, jump: int, running: int, used: float) -> None:
        self._steps[r] += jump
        while self._steps[r] >= 40:
            self._steps[r] -= 40
            self.rows.append((t, r, "decode", running, used))

    def event(self, t: float, rank: int, kind: str, a, b) -> None:
        self.rows.append((t, rank, kind, a, b))
