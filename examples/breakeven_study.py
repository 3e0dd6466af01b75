"""Break-even study: where does one way of holding the KV cache overtake another?

1. SAC (load top-k entries from CXL on demand) vs bulk-copying the prefix over CXL first (cxl-prefetch):
   above which output length does the up-front copy pay for itself? (closed form, solved by sympy)
2. The same question as a function of context length for a long (16K-token) answer (numeric root).
3. How slow may the GPU<->host PCIe path get before SAC's time between tokens is more than 10% worse than the
   DRAM pool's at 128K context and 64 requests in flight? (full serving model)
"""
from sacmodel.plots import plot_breakeven
from sacmodel.solvers import breakeven

S = "sac-testbed"

be = breakeven(S, "cxl", "cxl-prefetch", metric="e2e", vary="output", lo=1, hi=10**6, context=131072)
print(f"[1] {be.message} tokens ({be.method}); {be.winner_below} wins below, {be.winner_above} above; "
      f"residual {be.residual:.1e}")

be2 = breakeven(S, "cxl", "cxl-prefetch", metric="e2e", vary="context", lo=8192, hi=262144, output=16384)
print(f"[2] {be2.message} tokens ({be2.method}, residual {be2.residual:.1e})" if be2.found else f"[2] {be2.message}")

be3 = breakeven(S, "cxl", "dram", metric="tbt_mean_ms", vary="link:gpu.latency", lo=1e-7, hi=2e-5, ratio=1.1,
                points=16, context=131072, output=1024, concurrency=64)
if be3.found:
    print(f"[3] SAC's TBT reaches 1.1x the DRAM pool's when the one-way GPU<->root-complex latency is "
          f"{be3.value * 1e9:.0f} ns ({be3.winner_below} better below that, {be3.winner_above} above)")
else:
    print(f"[3] {be3.message}")
plot_breakeven(be, "breakeven_output.png")
print("plot: breakeven_output.png")
