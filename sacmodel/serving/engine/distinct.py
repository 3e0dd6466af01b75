"""Distinct tokens of an iteration: requests of one prompt decoded greedily (the benchmark) generate the same
token at the same position, so the MoE layers read the experts of the distinct tokens only.

A decoding request's token is identified by (prompt, age) where age = the rank's decode clock - the clock at
which the request joined. Requests are kept in groups by (prompt, join clock) per rank; the distinct
decode tokens of an iteration are the distinct (prompt, age) pairs over the decoding ranks.
"""
from __future__ import annotations


class DistinctTokens:
    """Groups of identical requests per rank; with one prompt, a bit mask of the ages being decoded."""

    def __init__(self, dp: int, pid: list[int] | None):
        self.on = pid is not None
        self.pid = pid
        self.single = self.on and len(set(pid)) == 1       # one prompt: groups keyed by join clock alone
        self.groups: list[dict] = [{} for _ in range(dp)]   # (prompt, join clock) -> requests
        self.version = 0                                     # changes whenever a group appears or goes
        self._cache: dict = {}
        # one prompt: bit a of age_bits[r] is set while rank r decodes requests a steps after they joined, so
        # the distinct ages over the decoding ranks are the set bits of the OR of their masks
        self.age_bits = [0] * dp

    def join(self, r: int, requests: list[int], clock: int) -> None:
        """``requests`` join rank ``r``'s decode batch at decode clock ``clock``."""
        g, pid = self.groups[r], self.pid
        for i in requests:
            key = clock if self.single else (pid[i], clock)
            g[key] = g.get(key, 0) + 1
            self.version += 1
        if self.single:
            self.age_bits[r] |= 1

    def advance(self, ranks: list[int], jump: int) -> None:
        """The ``ranks`` decoded ``jump`` steps: every request on them is ``jump`` steps older."""
        if self.single:
            bits = self.age_bits
            for r in ranks:
                bits[r] <<= jump

    def leave(self, r: int, requests: list[int], joined: list[int], clock: int) -> None:
        """The ``requests`` (joined at ``joined[i]``) leave rank ``r``, whose clock is now ``clock``."""
        g, single, pid = self.groups[r], self.single, self.pid
        for i in requests:
            j = joined[i]
            key = j if single else (pid[i], j)
            g[key] -= 1
            if not g[key]:
                del g[key]
                self.version += 1
                if single:
                    self.age_bits[r] &= ~(1 << (clock - j))

    def count(self, decoding: list[int], clock: list[int]) -> int:
        """Distinct decode tokens of the ranks in ``decoding`` at their clocks."""
        if self.single:
            u = 0
            for r in decoding:
                u |= self.age_bits[r]
            return u.bit_count()
        # the count depends on the groups and on the ranks' clocks relative to each other only
        c0 = clock[decoding[0]] if decoding else 0
        key = (self.version, tuple([clock[r] - c0 for r in decoding]), tuple(decoding))
        n = self._cache.get(key)
        if n is None:
            n = self._cache[key] = len({(p, clock[r] - j) for r in decoding for (p, j) in self.groups[r]})
        return n
