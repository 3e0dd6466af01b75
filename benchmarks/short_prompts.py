"""Benchmark: single-request predictions of short prompts with long outputs, on every system (issue 24).

    python benchmarks/short_prompts.py            # the grid below, on sac-testbed
    python benchmarks/short_prompts.py --azure    # also the Azure conversation trace's first 2,000 requests

Prompts of 64-3,000 tokens are shorter than the GPU buffer (4,096 slots) and some than the top-k (2,048); with
outputs up to 4,000 tokens the context grows past the buffer while decoding. Each prediction used to fall back
to the exact access process at every decode age past the buffer (about 0.5 s per point, minutes per
prediction). Prints each system's slowest case and the slowest overall (wall time of one ``predict`` call, the
first call of the process included); exits 1 if any case takes 2 s or more or has a TBT that is not finite
and positive. Not a test.
"""
import math
import sys
import tempfile
import time
from pathlib import Path

import sacmodel

SYSTEMS = ("gpu", "dram", "rdma", "cxl")
CONTEXTS = (64, 100, 300, 700, 1000, 2047, 2049, 3000)
OUTPUTS = (16, 100, 1000, 2500, 4000)
LIMIT_S = 2.0


def grid() -> list[tuple[float, str, int, int, float]]:
    """(seconds, system, context, output, TBT ms) of every single-request prediction of the grid."""
    rows = []
    for system in SYSTEMS:
        for context in CONTEXTS:
            for output in OUTPUTS:
                t = time.perf_counter()
                p = sacmodel.predict("sac-testbed", system, context=context, output=output, concurrency=1,
                                     requests=1)
                rows.append((time.perf_counter() - t, system, context, output, p.tbt_mean_ms))
    return rows


def two_requests() -> float:
    """Seconds to replay the issue's two requests (3,000 tokens with 4,000 out, then 300 with 10 out) on cxl."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "two.csv"
        path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                        "2023-11-16 18:15:46.0000000,3000,4000\n2023-11-16 18:15:47.0000000,300,10\n")
        t = time.perf_counter()
        for cache in ("none", "all"):
            sacmodel.replay("sac-testbed", "cxl", str(path), cache=cache)
        return time.perf_counter() - t


def azure(limit: int = 2000) -> list[tuple[str, float, float]]:
    """(system, seconds, completed share) of a replay of the Azure conversation trace's first ``limit`` requests,
    every prompt cached (the trace has no prefix information)."""
    trace = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "azure_llm_2023_conv.csv"
    out = []
    for system in SYSTEMS:
        t = time.perf_counter()
        r = sacmodel.replay("sac-testbed", system, str(trace), limit=limit, cache="all")
        out.append((system, time.perf_counter() - t, r.summary["success_fraction"]))
    return out


def main() -> int:
    rows = grid()
    bad = [r for r in rows if r[0] >= LIMIT_S or not (math.isfinite(r[4]) and r[4] > 0)]
    for system in SYSTEMS:
        s = max((r for r in rows if r[1] == system), key=lambda r: r[0])
        print(f"{system:5s} slowest: context {s[2]:5d}, output {s[3]:5d}: {s[0]:.3f} s (TBT {s[4]:.1f} ms)")
    s = max(rows, key=lambda r: r[0])
    print(f"{len(rows)} predictions, slowest {s[0]:.3f} s ({s[1]}, context {s[2]}, output {s[3]}); "
          f"total {sum(r[0] for r in rows):.1f} s; {len(bad)} at or over {LIMIT_S} s or without a finite TBT")
    print(f"replay of two requests (3,000 + 4,000 out, 300 + 10 out), cache none and all: {two_requests():.2f} s")
    if "--azure" in sys.argv:
        for system, secs, ok in azure():
            print(f"Azure conversation trace, first 2,000 requests, {system}: {secs:.1f} s ({ok:.0%} completed)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
