"""What-if: the SAC design on 8 x H200 with a four-device CXL pool and 400 Gb/s NICs.

Compares the measured testbed with the what-if scenario (topologies/h200-cxl-large.yaml) across context
lengths, shows which hardware number the time between tokens is most sensitive to, and draws the curves.
"""
from pathlib import Path

from sacmodel.planning.sensitivity import sensitivity
from sacmodel.plots.serving import plot_compare, plot_tornado
from sacmodel.serving.predict import compare

OUT = Path("out")          # figures go here, never into the current folder itself
OUT.mkdir(exist_ok=True)

for scenario in ("sac-testbed", "h200-cxl-large"):
    rows = []
    for L in (32768, 131072):
        r = compare(scenario, ("dram", "cxl", "rdma"), context=L, output=1024, concurrency=64)
        rows.append((L, r))
        print(f"{scenario:15s} {L // 1024:4d}K: " + "  ".join(
            f"{s} {p.output_throughput_tok_s:6.0f} tok/s TBT {p.tbt_mean_ms:5.1f} ms" for s, p in r.items()))
    plot_compare(rows, OUT / f"whatif_{scenario}.png", title=f"{scenario}, concurrency 64, output 1024")

from sacmodel.planning.sensitivity import symbol_kind  # noqa: E402

rows = [r for r in sensitivity("h200-cxl-large", "cxl", "tbt", context=131072) if symbol_kind(r[0]) == "hardware"]
print("hardware numbers the unloaded TBT at 128K on the what-if is most sensitive to (elasticity):",
      ", ".join(f"{n} ({e:+.3f})" for n, e, _, _ in rows[:4]))
plot_tornado(rows, OUT / "whatif_tornado.png", title="h200-cxl-large, cxl: unloaded TBT at 128K, hardware numbers")
print(f"plots in {OUT}/")
