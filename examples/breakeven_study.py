"""Break-even study: where does one way of holding the KV cache overtake another?

1. SAC (load top-k entries from CXL on demand) vs bulk-copying the prefix over CXL first (cxl-prefetch):
   above which output length does the up-front copy pay for itself? (closed form, solved by sympy)
2. The same question as a function of context length for a long (16K-token) answer (numeric root).
3. At what one-way GPU<->root-complex latency does SAC's time between tokens come within 10% of the DRAM
   pool's, at 128K context and 64 requests in flight? A longer PCIe path slows both pools, the DRAM pool
   relatively more. (loaded: the serving engine at every point)
"""
from pathlib import Path

from sacmodel.planning.breakeven import breakeven
from sacmodel.plots.serving import plot_breakeven

S = "sac-testbed"
OUT = Path("out")          # figures go here, never into the current folder itself

be = breakeven(S, "cxl", "cxl-prefetch", metric="e2e", vary="output", lo=1, hi=10**6, context=131072)
print(f"[1] unloaded: {be.message} ({be.method}); {be.winner_below} is better below, {be.winner_above} above; "
      f"residual {be.residual:.1e}")

be2 = breakeven(S, "cxl", "cxl-prefetch", metric="e2e", vary="context", lo=8192, hi=262144, output=16384)
print(f"[2] unloaded: {be2.message} ({be2.method}, residual {be2.residual:.1e})" if be2.found
      else f"[2] unloaded: {be2.message}")

be3 = breakeven(S, "cxl", "dram", metric="tbt_mean_ms", vary="link:gpu.latency", lo=1e-7, hi=2e-5, ratio=1.1,
                points=16, context=131072, output=1024, concurrency=64)
within = {"cxl": "within", "dram": "more than"}          # be3.winner_*: 'cxl' where cxl < 1.1 x dram
if be3.found:
    print(f"[3] loaded, concurrency 64: {be3.message}; below that SAC's TBT is {within[be3.winner_below]} 1.1x "
          f"the DRAM pool's, above it {within[be3.winner_above]}")
else:
    print(f"[3] loaded, concurrency 64: {be3.message}")
OUT.mkdir(exist_ok=True)
plot_breakeven(be, OUT / "breakeven_output.png", subtitle="unloaded closed form: one request alone")
print(f"plot: {OUT / 'breakeven_output.png'}")
