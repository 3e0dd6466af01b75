"""Tokens leaving the ranks for the front end (:mod:`sacmodel.serving.engine.frontend`).

- **First tokens.** SGLang's overlap scheduler processes a batch's results (a prefill's first tokens) once the
  next batch has been launched, so they leave after that scheduling, with it after the prefix copies it runs
  on the RDMA pool (``disable_overlap_schedule=False`` in the testbed's logs), and, on a rank whose next batch
  runs without a CUDA graph, after the CPU has launched its kernels. One message per rank.
- **Decode tokens.** Each decoding rank streams its tokens every step, one message per rank per step; the
  last step's message of a finishing request carries its last token.
"""
from __future__ import annotations

from .frontend import FrontEnd


class Emission:
    """First tokens computed and not yet sent, and the messages of each iteration."""

    def __init__(self, frontend: FrontEnd, rank_of: list[int], out: list[int]):
        self.frontend, self.rank_of, self.out = frontend, rank_of, out
        self.unsent: list[int] = []

    def first_tokens(self, when: float, delays: list[float] | None = None) -> None:
        """Send the first tokens in ``unsent`` at ``when`` (a request of one output token ends with it), rank r's
        ``delays[r]`` s later (the work before the launch of its next batch)."""
        by_rank: dict[int, list] = {}
        for i in self.unsent:
            by_rank.setdefault(self.rank_of[i], []).append((i, False))
            if self.out[i] <= 1:
                by_rank[self.rank_of[i]].append((i, True))
        def delay(r: int) -> float:
            return delays[r] if delays else 0.0
        # in time order: the front end's queue is first in, first out
        for r in sorted(by_rank, key=lambda r: (delay(r), r)):
            self.frontend.produce(when + delay(r), 1, by_rank[r])
        self.unsent.clear()

    def decode_tokens(self, when: float, decoding: list[int], jump: int, ended: list) -> None:
        """The messages of ``jump`` decode steps of the ``decoding`` ranks; ``ended`` (request, True) pairs
        ride on their rank's last message."""
        fe = self.frontend
        plain = jump * len(decoding)
        if ended:
            by_rank: dict[int, list] = {}
            for e in ended:
                by_rank.setdefault(self.rank_of[e[0]], []).append(e)
            plain -= len(decoding)
            for r in decoding:
                plain += 1
                if r in by_rank:
                    fe.produce(when, plain, by_rank[r])
                    plain = 0
        fe.produce(when, plain)
