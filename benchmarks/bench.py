"""Benchmark: vectorised sweep points per second, predict calls per second, lambdified fetch model speed, and the
CPU time and prediction counts of the searches (breakeven, sensitivity, pareto, winner-map, max_load).

    python benchmarks/bench.py

Not a test: prints figures for the closing notes and the README.
"""
import time

import numpy as np

import sacmodel
from sacmodel.planning.sweep import sweep, sweep_predict
from sacmodel.serving.costs import compile_expr, gather_time


def rate(fn, n, repeat=3):
    best = min(_t(fn) for _ in range(repeat))
    return n / best, best


def _t(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


f = compile_expr(gather_time())
N = 1_000_000
n = np.random.default_rng(0).integers(1, 4096, N)
r, s = rate(lambda: f(n=n, lines_per_entry=11, cacheline=64, bw=22.5e9, lat=1.6e-6, outstanding_lines=612,
                      t_kernel=8.5e-6), N)
print(f"lambdified fetch (gather) model: {N:,} inputs in {s * 1e3:.1f} ms ({r / 1e6:.1f} M/s)")

grid = {"context": np.geomspace(4096, 1 << 20, 1000), "sw_bw": np.linspace(2e9, 64e9, 1000)}
sweep("sac-testbed", "cxl", grid, "tbt")  # compile once
r, s = rate(lambda: sweep("sac-testbed", "cxl", grid, "tbt"), 1_000_000)
print(f"vectorised sweep (unloaded TBT, cxl): 1,000,000 design points in {s:.2f} s ({r / 1e6:.2f} M points/s, one core)")

sacmodel.predict("sac-testbed", "cxl", context=32768, output=1024, concurrency=64)
for system in ("dram", "cxl", "rdma"):
    k = 30
    t = time.perf_counter()
    for i in range(k):
        sacmodel.predict("sac-testbed", system, context=16384 + 4096 * i, output=1024, concurrency=64)
    dt = (time.perf_counter() - t) / k
    print(f"predict ({system}, 512 requests, concurrency 64): {dt * 1e3:.1f} ms per call ({1 / dt:.0f} calls/s)")

# the issue-7 target: a 128K, 512-request prediction under 20 ms median on one core (CPU time of this process).
# This VM's speed swings by up to 2x from minute to minute, so five rounds interleave the systems and the best
# and worst round medians are both printed (the best is the quiet-machine figure).
topo = sacmodel.load_topology("sac-testbed")
SYSTEMS = ("gpu", "dram", "cxl", "rdma")
medians = {s: [] for s in SYSTEMS}
for s in SYSTEMS:
    sacmodel.predict(topo, s, context=131072, output=1024, concurrency=64, requests=512)
for _ in range(5):
    for system in SYSTEMS:
        ts = []
        for i in range(15):
            t = time.process_time()
            sacmodel.predict(topo, system, context=131072 - 64 * i, output=1024, concurrency=64, requests=512)
            ts.append(time.process_time() - t)
        medians[system].append(float(np.median(ts)))
for system in SYSTEMS:
    m = medians[system]
    print(f"predict ({system}, 128K, 512 requests, concurrency 64): median {min(m) * 1e3:.1f} ms CPU in the "
          f"quietest of 5 rounds, {max(m) * 1e3:.1f} ms in the busiest")

# issue 34: the default prediction (its draws included) against one draw of the same run, interleaved, CPU time.
# A workload with nothing random (exact prompts, the default) is one engine run whatever ``draws`` asks; drawn
# prompt tails (exact_prompt=False, on request) cost one run per draw.
KW = dict(context=131072, output=1024, concurrency=64, requests=512)
cost = {"default": [], "draws=1": [], "exact_prompt=False (4 draws)": []}
for _ in range(5):
    for label, extra in (("default", {}), ("draws=1", {"draws": 1}), ("exact_prompt=False (4 draws)",
                                                                      {"exact_prompt": False})):
        ts = []
        for i in range(9):
            t = time.process_time()
            sacmodel.predict(topo, "cxl", **dict(KW, context=131072 - 64 * i), **extra)
            ts.append(time.process_time() - t)
        cost[label].append(float(np.median(ts)))
one = min(cost["draws=1"])
for label, m in cost.items():
    print(f"predict (cxl, 128K, 512 requests, concurrency 64, {label}): median {min(m) * 1e3:.1f} ms CPU in the "
          f"quietest of 5 rounds ({min(m) / one:.2f}x one draw)")

combos = {"context": [16384, 24576, 32768, 49152, 65536, 98304, 131072, 160000],
          "concurrency": list(range(8, 264, 8))}
t = time.perf_counter()
rows = sweep_predict("sac-testbed", "cxl", combos, fixed={"output": 1024}, progress=False)
dt = time.perf_counter() - t
print(f"sweep_predict on all local cores: {len(rows)} predictions in {dt:.1f} s ({len(rows) / dt:.0f} predict/s)")

# issue 34: searches that reuse work. CPU seconds of this process for each search (the CLI adds its start-up,
# about 1 s of imports), with the predictions each ran, by method.
from sacmodel.planning.breakeven import breakeven  # noqa: E402
from sacmodel.planning.pareto import pareto  # noqa: E402
from sacmodel.planning.plan import max_load  # noqa: E402
from sacmodel.planning.search import Tally, tally_line  # noqa: E402
from sacmodel.planning.sensitivity import sensitivity_loaded  # noqa: E402
from sacmodel.planning.sweep import winner_map  # noqa: E402


def search(label, fn):
    t = time.process_time()
    counts = fn()
    print(f"{label}: {time.process_time() - t:.2f} s CPU; {tally_line(counts)}")


search("breakeven (README: cxl vs dram, tbt x1.1 over context 8K-256K, concurrency 64)",
       lambda: breakeven("sac-testbed", "cxl", "dram", metric="tbt_mean_ms", vary="context", lo=8192, hi=262144,
                         ratio=1.1, output=1024, concurrency=64).predictions)


def _sensitivity():
    c = Tally()
    sensitivity_loaded("sac-testbed", "cxl", "tbt_mean_ms", context=131072, output=1024, concurrency=16, counts=c)
    return c.to_dict()


search("sensitivity (cxl, 128K, concurrency 16, every parameter, 16 draws)", _sensitivity)
search("pareto (cxl,dram,rdma at 64K, the default 112 configurations)",
       lambda: pareto("sac-testbed", ["cxl", "dram", "rdma"], context=65536).predictions)
search("winner-map (context 8K-128K x output 256-8K, 5 x 6, dram,cxl,rdma, tbt at concurrency 64)",
       lambda: winner_map("sac-testbed", ["dram", "cxl", "rdma"], "tbt_mean_ms",
                          ("context", np.linspace(8192, 131072, 5)), ("output", np.linspace(256, 8192, 6)),
                          concurrency=64)["predictions"])
search("plan --max-load concurrency (cxl, 128K, tbt <= 80 ms)",
       lambda: max_load("sac-testbed", "cxl", workload={"context": 131072, "output": 1024},
                        slo={"tbt_mean_ms": 80.0}, max_value=1024).predictions)
