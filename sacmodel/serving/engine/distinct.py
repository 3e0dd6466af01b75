"""Distinct tokens of an iteration: requests of one prompt decoded greedily (the benchmark) generate the same
token at the same position, so the MoE layers read the experts of the distinct tokens only.

Identical requests compute identical tokens when they are rows of one batch: a rank's requests of one prompt
that joined its decode batch at the same clock. On two ranks the batches differ in size, and GEMM results are
not invariant to the batch size, so their greedy tokens part after a few steps (He et al., "Defeating
Nondeterminism in LLM Inference", Thinking Machines Lab, 2025). So the distinct tokens of an iteration are the
groups of (prompt, join clock) summed over the decoding ranks, as the server logs' admission batches count them
(:func:`sacmodel.fit.calibrate.step_observations`).
"""
from __future__ import annotations


class DistinctTokens:
    """Groups of identical requests per rank, keyed by (prompt, join clock)."""

    def __init__(self, dp: int, pid: list[int] | None):
        self.on = pid is not None
        self.pid = pid
        self.groups: list[dict] = [{} for _ in range(dp)]   # (prompt, join clock) -> requests
        self.total = 0                                        # groups over all ranks

    def join(self, r: int, requests: list[int], clock: int) -> None:
        """``requests`` join rank ``r``'s decode batch at decode clock ``clock``."""
        g, pid = self.groups[r], self.pid
        for i in requests:
            key = (pid[i], clock)
            n = g.get(key, 0)
            if not n:
                self.total += 1
            g[key] = n + 1

    def leave(self, r: int, requests: list[int], joined: list[int], clock: int) -> None:
        """The ``requests`` (joined at ``joined[i]``) leave rank ``r``."""
        g, pid = self.groups[r], self.pid
        for i in requests:
            key = (pid[i], joined[i])
            g[key] -= 1
            if not g[key]:
                del g[key]
                self.total -= 1

    def count(self, decoding: list[int], clock: list[int]) -> int:
        """Distinct decode tokens of the ranks in ``decoding``: the groups of identical requests of each rank."""
        groups, n = self.groups, 0
        for r in decoding:
            n += len(groups[r])
        return n

    def count_except(self, admits: list) -> int:
        """:meth:`count` over every rank but those prefilling (``admits``: (rank, batch) pairs): every rank with
        running requests decodes or prefills, and a rank without any has no groups."""
        groups, n = self.groups, self.total
        for r, _ in admits:
            n -= len(groups[r])
        return n
