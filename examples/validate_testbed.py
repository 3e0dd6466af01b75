"""Check the model against the measured SAC testbed runs (../shared/data/sac-testbed).

Loads every run of the calibration set, predicts each configuration and prints the error per run and the
mean absolute percentage error per system and metric. Point it at your own runs (testbed JSON or SGLang
bench_serving results) by passing their paths.
"""
import sys

from sacmodel.data.runs import load_runs
from sacmodel.fit.compare import compare_runs, mape_table

runs = load_runs(sys.argv[1:] or None)
comps = compare_runs("sac-testbed", runs)
for c in sorted(comps, key=lambda c: (c.run.system, c.run.context, c.run.concurrency))[:12]:
    errs = ", ".join(f"{m.split('_')[0]} {100 * c.error(m):+.1f}%" for m in
                     ("ttft_mean_ms", "tbt_mean_ms", "output_throughput_tok_s"))
    print(f"{c.run.key():40s} {errs}")
print("...")
for system, row in mape_table(comps).items():
    print(f"{system:5s} MAPE: TTFT {row['ttft_mean_ms']:.1f}%, TBT {row['tbt_mean_ms']:.1f}%, "
          f"throughput {row['output_throughput_tok_s']:.1f}% over {row['runs']} runs")
