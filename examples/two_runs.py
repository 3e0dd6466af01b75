"""Your machine in two runs: calibrate sacmodel on two SGLang ``bench_serving`` runs of your own server (the
lowest and the highest load you care about), then ask it about every other load, and about a B200.

On your machine you would have run, with your server up (SGLang's benchmark client)::

    python3 -m sglang.bench_serving --backend sglang --dataset-name random --random-input-len 1024 \
        --random-output-len 1024 --random-range-ratio 0.8 --max-concurrency 4 --num-prompts 40 \
        --output-file results.jsonl
    python3 -m sglang.bench_serving ... --random-input-len 8192 --max-concurrency 64 --num-prompts 640 \
        --output-file results.jsonl

and then, with the machine it ran on (or ``--server-log server.log --gpu h200`` for the launch arguments)::

    sacmodel calibrate results.jsonl --gpu h200 --gpus 8 --tp 8 --model deepseek-r1 --out mine.yaml
    sacmodel predict --scenario mine.yaml --system gpu --context 1K --output 1K --concurrency 16 --prompts distinct
    sacmodel predict --scenario mine.yaml --gpu b200 --system gpu --context 1K --output 1K --concurrency 16

This script does the same in Python. Without files of your own it writes ``results.jsonl`` from two public runs
of 8 x H200 serving DeepSeek-R1 (``../shared/data/external``, InferenceX's client: lengths in [0.8, 1] x nominal,
10 x concurrency prompts), shaped as bench_serving writes them.
"""
import csv
import json
import math
import sys
import tempfile
from pathlib import Path

from sacmodel.cli import main

work = Path(tempfile.mkdtemp(prefix="sacmodel-two-runs-"))
files = sys.argv[1:]
if not files:
    rows = list(csv.DictReader(open(Path(__file__).resolve().parents[2] / "shared" / "data" / "external" /
                                    "h200-deepseek-r1-sglang-tp8.csv")))
    lines = []
    for r in (rows[0], rows[14]):          # 1K/1K at concurrency 4, 8K/1K at concurrency 64
        c, osl = int(r["concurrency"]), int(r["osl"])
        ttft, tpot = float(r["ttft_mean_ms"]), float(r["tpot_mean_ms"])
        lines.append({"backend": "sglang", "dataset_name": "random", "request_rate": math.inf, "max_concurrency": c,
                      "random_input_len": int(r["isl"]), "random_output_len": osl, "random_range_ratio": 0.8,
                      "completed": 10 * c, "duration": 1.0, "mean_ttft_ms": ttft, "mean_tpot_ms": tpot,
                      # the public table has no throughput: the closed loop's, from its TTFT and TPOT
                      "output_throughput": c * 0.9 * osl / (ttft / 1e3 + (0.9 * osl - 1) * tpot / 1e3)})
    (work / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    files = [str(work / "results.jsonl")]

mine = str(work / "mine.yaml")
assert main(["calibrate", *files, "--gpu", "h200", "--gpus", "8", "--tp", "8", "--model", "deepseek-r1",
             "--out", mine]) == 0
for conc in (8, 32):
    assert main(["predict", "--scenario", mine, "--system", "gpu", "--context", "1K", "--output", "1K",
                 "--concurrency", str(conc), "--prompts", "distinct", "--json"]) == 0
assert main(["predict", "--scenario", mine, "--gpu", "b200", "--system", "gpu", "--context", "1K", "--output", "1K",
             "--concurrency", "16", "--prompts", "distinct", "--json"]) == 0
print(f"calibrated scenario: {mine}")
