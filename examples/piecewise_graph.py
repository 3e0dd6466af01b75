"""What SGLang's piecewise CUDA graph (its default from v0.5.10 on) buys: 8 x H200 serving DeepSeek-R1 in FP8
(TP8), 1K prompts and outputs, at a few concurrencies.

Without it every prefill launches each kernel from Python (``t_launch`` per kernel); with it a prefill of up to
2,048 tokens replays captured graphs between the layers' attention ops, so a short prompt reaches its first
token sooner. Decode ran as a CUDA graph already, so TBT hardly moves.
"""
from sacmodel import predict, scenario

print(f"{'graph':>6s} {'conc':>5s} {'TTFT ms':>8s} {'TBT ms':>7s} {'tok/s':>7s}")
for graph in (False, True):
    machine = scenario("h200", gpus=8, model="deepseek-r1", weights="fp8", piecewise_cuda_graph=graph)
    for conc in (1, 8, 32):
        p = predict(machine, "gpu", context=1024, output=(819, 1024), concurrency=conc, requests=4 * conc,
                    prefix_cached=False, prompts="distinct", draws=2)
        print(f"{'on' if graph else 'off':>6s} {conc:5d} {p.ttft_mean_ms:8.0f} {p.tbt_mean_ms:7.2f} "
              f"{p.output_throughput_tok_s:7.0f}")
