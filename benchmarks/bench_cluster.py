"""Speed and memory of the cluster model (issue 8 targets), pinned to one core.

- ``hitrate`` on the Mooncake conversation trace: seconds per capacity point (target: under 1 s);
- replay of the conversation trace (12,031 requests) through the 4-instance ``sac-cluster-4x``: wall time,
  split into the single-instance engine runs and the cluster layer (target: under 10 s);
- peak memory (resident set) of reading and replaying a generated 1M-request trace (target: under 1 GB).

    python3 benchmarks/bench_cluster.py [--skip-million] [--out benchmarks/bench_cluster_results.md]

Each measurement runs in a fresh subprocess so that its peak memory is its own.
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO.parent / "shared" / "data" / "traces" / "mooncake_conversation_trace.jsonl"

CHILD = r'''
import json, os, resource, sys, time
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
sys.path.insert(0, sys.argv[1])
job = json.loads(sys.argv[2])
out = {}
if job["kind"] == "hitrate":
    from sacmodel.cluster.hitrate import hit_rates
    from sacmodel.data.traces import load_trace
    t0 = time.process_time(); tr = load_trace(job["trace"]); out["load_s"] = time.process_time() - t0
    t0, w0 = time.process_time(), time.perf_counter(); r = hit_rates(tr, job["caps"])
    out["per_point_s"] = (time.process_time() - t0) / len(job["caps"])
    out["per_point_wall_s"] = (time.perf_counter() - w0) / len(job["caps"])
    out["hit_rates"] = {str(c): x["hit_rate"] for c, x in zip(job["caps"], r)}
    out["requests"] = len(tr)
else:
    import sacmodel.cluster.replay as R
    from sacmodel.cluster.load import estimate
    from sacmodel.serving import resolve, run_engine
    t0 = time.process_time(); estimate(resolve("sac-testbed", job["system"])); out["calibration_s"] = time.process_time() - t0
    spent = [0.0]
    def timed(*a, **k):
        t = time.process_time(); r = run_engine(*a, **k); spent[0] += time.process_time() - t; return r
    if job.get("stub_engine"):
        import numpy as np
        from sacmodel.serving.engine import EngineResult
        def timed(cfg, reqs, conc, **k):   # the cluster layer alone: every request served at once
            a = np.asarray(reqs.arrival, float)
            return EngineResult(a, a, a + 1e-3, np.ones(len(a), bool), None, {"decode_steps": 0})
    import sacmodel.serving.predict as S            # instances run through serving.simulate -> run_engine
    S.run_engine = timed
    t0, w0 = time.process_time(), time.perf_counter()
    p = R.replay(job["scenario"], job["system"], job["trace"], router=job["router"], time_scale=job["time_scale"],
                 pd=job.get("pd"))
    out["cpu_s"] = time.process_time() - t0
    out["wall_s"] = time.perf_counter() - w0
    out["engine_s"] = spent[0]
    out["requests"] = p.requests
    out["summary"] = {k: p.summary[k] for k in ("ttft_p50_ms", "ttft_p99_ms", "tbt_p50_ms", "hit_rate_total")}
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
'''


def child(job: dict) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, str(REPO), json.dumps(job)], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-million", action="store_true", help="skip the 1M-request memory runs")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "bench_cluster_results.md"))
    a = ap.parse_args(argv)
    if not TRACE.exists():
        print(f"{TRACE} not found: nothing to measure")
        return 0
    lines = ["# Cluster model: speed and memory", "",
             f"`python3 benchmarks/bench_cluster.py` on {platform.processor() or platform.machine()}, "
             f"Python {platform.python_version()}, one core (sched_setaffinity), {time.strftime('%Y-%m-%d')}. "
             "Times are CPU seconds of the measuring process (the machine is shared with other jobs, which "
             "inflates wall-clock times; wall times are given beside them).", ""]
    h = child({"kind": "hitrate", "trace": str(TRACE), "caps": ["1M", "3M", "10M", "inf"]})
    lines += ["## hitrate, conversation trace (12,031 requests)", "",
              f"- reading the trace: {h['load_s']:.2f} s; per capacity point: **{h['per_point_s']:.2f} s** "
              f"(wall {h['per_point_wall_s']:.2f} s; target < 1 s); hit rates {', '.join(f'{k} {100 * v:.1f}%' for k, v in h['hit_rates'].items())}",
              f"- peak memory: {h['peak_rss_mb']:.0f} MB", ""]
    lines += ["## replay, conversation trace, 4 instances (sac-cluster-4x)", "",
              "| configuration | CPU (s) | engine runs (s) | cluster layer (s) | wall (s) | peak memory (MB) |",
              "|---|---|---|---|---|---|"]
    for label, job in [("cxl, kv, x1", dict(system="cxl", router="kv", time_scale=1.0)),
                       ("cxl, round_robin, x0.1", dict(system="cxl", router="round_robin", time_scale=0.1)),
                       ("cxl, kv, P:D 2:2, x0.1", dict(system="cxl", router="kv", time_scale=0.1, pd="2:2"))]:
        r = child({"kind": "replay", "scenario": "sac-cluster-4x", "trace": str(TRACE), **job})
        lines.append(f"| {label} | {r['cpu_s']:.1f} | {r['engine_s']:.1f} | {r['cpu_s'] - r['engine_s']:.1f} | "
                     f"{r['wall_s']:.1f} | {r['peak_rss_mb']:.0f} |")
    lines += ["", "Target: under 10 s. The single-instance engine runs (issue 7's engine, used through "
              "`run_engine`) take most of it; the cluster layer (routing, caches, transfers) is the rest.", ""]
    if not a.skip_million:
        from sacmodel.cluster.synth import write_conversations  # noqa: E402  (after REPO on sys.path)
        big = Path("/tmp/sacmodel_1M.jsonl")
        if not big.exists():
            write_conversations(big, 1_000_000, seed=1)
        m = child({"kind": "hitrate", "trace": str(big), "caps": ["10M"]})
        s = child({"kind": "replay", "scenario": "sac-cluster-4x", "trace": str(big), "system": "cxl",
                   "router": "kv", "time_scale": 1.0, "stub_engine": True})
        lines += ["## 1M-request generated trace (multi-turn conversations, `sacmodel.cluster.synth`)", "",
                  f"- read + hitrate (10M tokens): peak memory **{m['peak_rss_mb']:.0f} MB**, read "
                  f"{m['load_s']:.1f} s, {m['per_point_s']:.1f} s per capacity point (CPU)",
                  f"- replay through 4 instances with the engine replaced by a stub (the cluster layer alone: "
                  f"routing, caches, transfers, per-request arrays): peak memory **{s['peak_rss_mb']:.0f} MB**, "
                  f"{s['cpu_s']:.0f} s CPU", ""]
    text = "\n".join(lines)
    Path(a.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
