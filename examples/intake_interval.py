"""What SGLang's --scheduler-recv-interval costs and buys: 8 x B200 serving DeepSeek-R1 in FP8 (TP8), the
InferenceX benchmark's workload (1K in, 1K out, lengths in [0.8, 1] x, 10 x concurrency requests).

The scheduler takes new requests in only after N decode iterations (at once after a prefill or when idle):
fewer, larger admissions interrupt decoding less, and each request waits about (N - 1) / 2 steps longer
for its first token.
"""
from sacmodel import predict, scenario

print(f"{'N':>3s} {'conc':>5s} {'TTFT ms':>8s} {'TBT ms':>7s} {'tok/s':>7s}")
for n in (1, 10, 30):
    machine = scenario("b200", gpus=8, model="deepseek-r1", weights="fp8", mem_fraction=0.82,
                       chunked_prefill=32768, scheduler_recv_interval=n)
    for conc in (4, 16, 64):
        p = predict(machine, "gpu", context=1024, output=(819, 1024), concurrency=conc, requests=10 * conc,
                    prefix_cached=False, prompts="distinct", draws=2)
        print(f"{n:3d} {conc:5d} {p.ttft_mean_ms:8.0f} {p.tbt_mean_ms:7.2f} {p.output_throughput_tok_s:7.0f}")
