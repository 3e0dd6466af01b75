"""Generated Mooncake-style traces (multi-turn conversations over shared system prompts), written as a
stream: for scale tests and examples when no public trace is big enough."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..util.files import atomic_path


def write_conversations(path, requests: int, *, seed: int = 0, rate: float = 3.4, system_prompts: int = 64,
                        system_blocks: int = 4, turn_blocks: tuple = (1, 12), turns: tuple = (1, 8),
                        output: tuple = (16, 600), block: int = 512) -> Path:
    """Write ``requests`` JSONL lines: Poisson arrivals at ``rate``/s; each conversation starts from one of
    ``system_prompts`` shared prompts and every turn extends the previous prompt by new blocks (so later turns
    hit the earlier ones). Block ids are chained as in Mooncake: an id names its whole prefix."""
    rng = np.random.default_rng(seed)
    path = Path(path)
    next_id = system_prompts * system_blocks
    live: list[tuple[list[int], int]] = []          # open conversations: (blocks so far, turns left)
    t = 0.0
    with atomic_path(path) as tmp, tmp.open("w") as fh:
        for _ in range(requests):
            t += rng.exponential(1.0 / rate)
            if not live or rng.random() < 0.3:
                s = int(rng.integers(system_prompts))
                live.append((list(range(s * system_blocks, (s + 1) * system_blocks)), int(rng.integers(*turns))))
            j = int(rng.integers(len(live)))
            blocks, left = live[j]
            k = int(rng.integers(*turn_blocks))
            blocks = blocks + list(range(next_id, next_id + k))
            next_id += k
            n_in = (len(blocks) - 1) * block + int(rng.integers(1, block + 1))
            fh.write(json.dumps({"timestamp": int(t * 1e3), "input_length": n_in,
                                 "output_length": int(rng.integers(*output)), "hash_ids": blocks}) + "\n")
            if left <= 1:
                live.pop(j)
            else:
                live[j] = (blocks, left - 1)
            if len(live) > 4096:                    # bound the generator's own memory
                live.pop(0)
    return path
