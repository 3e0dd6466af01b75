"""Generated workloads, as traces (:class:`~sacmodel.data.traces.Trace`) a cluster replay takes.

``shared_prefix`` rebuilds the shape of the common prefix-sharing benchmarks (inference-perf's
``shared_prefix`` data, used by llm-d's scheduling benchmarks; SGLang's ``generated-shared-prefix``):
``groups`` system prompts of ``system_tokens`` each, ``prompts_per_group`` questions of ``question_tokens``
per group, every request one of these prompts followed by ``output_tokens`` of output. As inference-perf
does, the groups x prompts prompts are shuffled once and the requests cycle through that fixed list, so after
the first pass a prompt repeats whole. Arrivals are Poisson at ``rate`` requests/s, or a ladder of stages
``[(rate, seconds), ...]`` run back to back (queues carry over from one stage to the next; the trace
keeps its ``stages``, so a replay can hold each stage until the previous one has finished, as inference-perf
does: ``replay(..., stage_barrier=s)``).

Blocks: a prompt's KV blocks of ``block_tokens`` tokens are named by (group, block) while they hold system-prompt
tokens only, and by (prompt, block) from the first block that holds question tokens on: two prompts share
exactly their system prompt's whole blocks.
"""
from __future__ import annotations

import numpy as np

from .records import LIMITS, DataError
from .traces import Trace

MAX_REQUESTS = 1_000_000
MAX_BLOCK_IDS = 1 << 24           # block ids of a generated trace (8 bytes each, and a few temporaries)


def shared_prefix(groups: int, prompts_per_group: int, system_tokens: int, question_tokens: int,
                  output_tokens: int, *, rate, requests: int | None = None, seed: int = 0,
                  block_tokens: int = 64, arrivals: str = "poisson") -> Trace:
    """The workload of a shared-prefix benchmark (see the module docstring). ``rate``: requests/s, or a list of
    (requests/s, seconds) stages; ``requests``: how many at a single rate (default: each prompt once);
    ``arrivals``: "poisson" (inference-perf's ``load.type: poisson``) or "constant" (``load.type: constant``:
    evenly spaced at 1 / rate)."""
    if arrivals not in ("poisson", "constant"):
        raise DataError(f"shared_prefix: arrivals is 'poisson' or 'constant', got {arrivals!r}")
    for name, v, lo in (("groups", groups, 1), ("prompts_per_group", prompts_per_group, 1),
                        ("system_tokens", system_tokens, 0), ("question_tokens", question_tokens, 1),
                        ("output_tokens", output_tokens, 1), ("block_tokens", block_tokens, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo or v > 10 ** 7:
            raise DataError(f"shared_prefix: {name} must be a whole number in {lo}..10,000,000, got {v!r}")
    if groups * prompts_per_group > MAX_REQUESTS:
        raise DataError(f"shared_prefix: groups x prompts_per_group = {groups * prompts_per_group:,} distinct "
                        f"prompts; at most {MAX_REQUESTS:,}")
    L = system_tokens + question_tokens
    if L > LIMITS["request_tokens"]:
        raise DataError(f"shared_prefix: system_tokens + question_tokens = {L:,}; a prompt holds at most "
                        f"{LIMITS['request_tokens']:,} tokens")
    rng = np.random.default_rng(seed)
    arrival = _arrivals(rate, requests, groups * prompts_per_group, rng, arrivals == "constant")
    n = len(arrival)
    n_blocks = -(-L // block_tokens)
    if n * n_blocks > MAX_BLOCK_IDS:
        raise DataError(f"shared_prefix: {n:,} requests x {n_blocks:,} blocks = {n * n_blocks:,} block ids; at "
                        f"most {MAX_BLOCK_IDS:,} (fewer requests, or larger block_tokens)")
    order = rng.permutation(groups * prompts_per_group)
    prompt = order[np.arange(n) % len(order)]
    shared = system_tokens // block_tokens                # whole blocks of system prompt only
    g = prompt // prompts_per_group
    j = np.arange(n_blocks)
    ids = np.where(j[None, :] < shared, g[:, None] * n_blocks + j[None, :],
                   (groups + prompt[:, None]) * n_blocks + j[None, :])
    ladder = None if isinstance(rate, (int, float)) else tuple((float(r), float(d)) for r, d in rate)
    return Trace(f"shared_prefix-{groups}x{prompts_per_group}", arrival, np.full(n, L, np.int64),
                 np.full(n, output_tokens, np.int64), _cached(prompt, g, shared, n_blocks, L, block_tokens), True,
                 ids.ravel().astype(np.int64), np.arange(n + 1, dtype=np.int64) * n_blocks, block_tokens,
                 stages=ladder)


def _arrivals(rate, requests, default: int, rng, constant: bool = False) -> np.ndarray:
    """Arrival times (s), Poisson or evenly spaced (``constant``), at one rate or over a ladder of (rate,
    seconds) stages."""
    gap = (lambda r: 1.0 / r) if constant else (lambda r: rng.exponential(1.0 / r))
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        if not 0 < rate < 1e6:
            raise DataError(f"shared_prefix: rate must be a positive number of requests/s, got {rate!r}")
        n = default if requests is None else requests
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_REQUESTS:
            raise DataError(f"shared_prefix: requests must be a whole number in 1..{MAX_REQUESTS:,}, got {n!r}")
        gaps = np.full(n, 1.0 / rate) if constant else rng.exponential(1.0 / rate, n)
        return np.cumsum(gaps) - gaps[0]
    try:
        stages = [(float(r), float(d)) for r, d in rate]
    except (TypeError, ValueError):
        raise DataError(f"shared_prefix: rate is requests/s or a list of (requests/s, seconds), got {rate!r}") from None
    if not stages or any(not (0 < r < 1e6 and 0 < d < 1e7) for r, d in stages):
        raise DataError("shared_prefix: every stage needs a positive rate and duration")
    if sum(r * d for r, d in stages) > MAX_REQUESTS:
        raise DataError(f"shared_prefix: the ladder holds more than {MAX_REQUESTS:,} requests")
    out, t0 = [], 0.0
    for r, d in stages:
        t = t0 + (0.0 if constant else gap(r))
        while t < t0 + d:
            out.append(t)
            t += gap(r)
        t0 += d
    return np.array(out) if out else np.zeros(1)


def _cached(prompt: np.ndarray, group: np.ndarray, shared: int, n_blocks: int, L: int, bt: int) -> np.ndarray:
    """Tokens of each prompt found in an unbounded prefix cache of the earlier ones (its leading blocks seen, as
    the block ids above name them): all but its last token once the same prompt came before; its group's
    ``shared`` whole system-prompt blocks once another prompt of its group came before; none before that.
    Vectorised: a million requests in well under a second (a loop over a set of their block ids took tens)."""
    i = np.arange(len(prompt))

    def first(x: np.ndarray) -> np.ndarray:         # index of each value's first request, per request
        u, at = np.unique(x, return_index=True)
        return at[np.searchsorted(u, x)]
    k = np.where(i > first(prompt), n_blocks, np.where(i > first(group), shared, 0))
    return np.minimum(k * bt, L - 1).astype(float)


def stage_of(trace: Trace, stages) -> np.ndarray:
    """The stage index of every request of a ladder trace (by arrival time)."""
    ends = np.cumsum([d for _, d in stages])
    return np.searchsorted(ends, trace.arrival, side="right")
