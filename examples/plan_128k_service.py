"""Capacity planning for a 128K-context service on the SAC testbed.

Question: how many CXL memory devices does a DeepSeek-V3.2 service with 128K-token cached prompts,
1K-token answers and 64 requests in flight need to keep the mean time between tokens under 80 ms and the
output throughput above 750 tokens/s? And how much load does that configuration then sustain?
"""
import sacmodel
from sacmodel.planning.plan import max_load, plan

SCENARIO = "sac-testbed"
workload = dict(context=131072, output=1024, concurrency=64)
slo = {"tbt_mean_ms": 80.0, "output_throughput_tok_s": 750.0}

r = plan(SCENARIO, "cxl", workload=workload, slo=slo, vary="cxl_devices", max_value=8)
print(r.message)
for row in r.tried:
    print(f"  {row['value']} device(s): TBT {row['tbt_mean_ms']:.1f} ms, "
          f"{row['output_throughput_tok_s']:.0f} tok/s -> {'meets' if row['meets'] else 'misses'} the SLO")
if r.found:
    print(f"cost of the parts: {r.cost_usd_per_hour['total']:.2f} USD/hour "
          f"({', '.join(f'{k} {v:.2f}' for k, v in r.cost_usd_per_hour.items() if k != 'total')})")

    # The inverse question: with that many devices, how many requests can be in flight within the TBT SLO?
    m = max_load(SCENARIO, "cxl", workload=dict(context=131072, output=1024, cxl_devices=r.value),
                 slo={"tbt_mean_ms": 80.0}, vary="concurrency", max_value=512)
    print(m.message)

# The same service on the RDMA pool, for comparison
p = sacmodel.predict(SCENARIO, "rdma", **workload)
print(f"RDMA pool at the same load: TBT {p.tbt_mean_ms:.0f} ms, {p.output_throughput_tok_s:.0f} tok/s, "
      f"TTFT {p.ttft_mean_ms / 1e3:.1f} s")
