"""The prefill/decode role search (``cluster_plan(..., roles="search")``): its capacities, bracket and costs by
hand, the search's order, and the law that a tighter SLO never buys a cheaper plan."""
import math

import numpy as np
import pytest
from launch_commands import parse

import sacmodel
from sacmodel.cluster.plan import cluster_plan
from sacmodel.cluster.roles import (RoleConfig, bracket, launch_commands, measure, role_configs, role_search,
                                    split_cost, trace_rates, ttft_quantile)
from sacmodel.data.traces import Trace
from sacmodel.planning.pricing import prices, usd
from sacmodel.planning.search import Tally
from sacmodel.workloads import shared_prefix


@pytest.fixture(scope="module")
def host():
    return sacmodel.scenario("h100", gpus=8, model="qwen3-32b", weights="bf16")


def _even_trace(n=10, gap=1.0, prompt=1000, output=100):
    z = np.zeros(n)
    return Trace("even", np.arange(n) * gap, np.full(n, prompt), np.full(n, output), z, False)


def test_trace_rates_by_hand(host):
    # 10 requests a second apart: a span of 9 s, 10,000 prompt and 1,000 output tokens, no prefix information
    r = trace_rates(_even_trace(), host)
    assert r["input_tok_s"] == pytest.approx(10_000 / 9) and r["output_tok_s"] == pytest.approx(1000 / 9)
    assert (r["prompt"], r["output"], r["prompt_weighted"], r["largest"], r["prompt_at_bound"]) == \
        (1000, 100, 1000, (1000, 100), 1000)
    # prompts of 1,000 and 3,000 tokens: an average prefill token belongs to a (1e6 + 9e6) / 4,000 = 2,500 one
    t = _even_trace(2)
    t.input_len[:] = [1000, 3000]
    assert trace_rates(t, host)["prompt_weighted"] == 2500
    # the prompt a TTFT bound speaks for: the 90th percentile of 1,000 ... 10,000 is 9,100 (numpy's linear rule)
    t = _even_trace(10)
    t.input_len[:] = np.arange(1, 11) * 1000
    assert trace_rates(t, host, quantile=ttft_quantile({"ttft_p90_ms": 1.0, "tbt_p99_ms": 9.0}))["prompt_at_bound"] \
        == 9100
    assert ttft_quantile({"ttft_mean_ms": 1.0}) == 0.5 and ttft_quantile({"tbt_p99_ms": 1.0}) == 0.5


def test_bracket_and_cost_by_hand(host):
    p = RoleConfig(2, 1, scenario=host, gpus=2, prefill_tok_s=500.0)
    d = RoleConfig(4, 1, scenario=host, gpus=4, decode_tok_s=40.0)
    rates = {"input_tok_s": 10_000 / 9, "output_tok_s": 1000 / 9}
    assert bracket(p, d, rates) == (3, 3)            # ceil(1,111 / 500), ceil(111 / 40)
    assert bracket(p, d, {"input_tok_s": 1000.0, "output_tok_s": 80.0}) == (2, 2)      # exact multiples
    gpu = usd(prices(), "gpu_h100")
    assert split_cost(p, d, 3, 3) == pytest.approx((3 * 2 + 3 * 4) * gpu)


def test_capacities_are_the_engines_and_grow_with_tensor_parallelism(host):
    rates = trace_rates(_even_trace(prompt=4000, output=200), host)
    tp2, tp4 = (measure(rc, "gpu", rates, math.inf, 0.05, Tally()) for rc in role_configs(host, [(2, 1), (4, 1)]))
    # a backlog of four 8,192-token chunks: ceil(4 x 8,192 / 4,000) = 9 prompts in flight, 36 in all
    alone = sacmodel.predict(tp2.scenario, "gpu", context=4000, output=1, concurrency=9, requests=36,
                             prefix_cached=False)
    assert tp2.prefill_tok_s == pytest.approx(alone.request_throughput_req_s * 4000)
    assert tp4.prefill_tok_s > tp2.prefill_tok_s and tp4.decode_tok_s > tp2.decode_tok_s
    # a TBT bound below one request's step leaves no decode capacity; a TTFT bound below one prompt, no prefill
    tight = measure(role_configs(host, [(2, 1)])[0], "gpu", rates, 1e-3, 1e-3, Tally())
    assert tight.prefill_tok_s is None and tight.decode_tok_s is None


def test_a_configuration_the_gpu_cannot_hold_is_named(host):
    (one,) = role_configs(sacmodel.scenario("h100", gpus=8, model="llama-3.1-70b", weights="bf16"), [(1, 1)])
    assert one.scenario is None and "weights" in one.why


def test_the_search_answers_the_cheapest_split_that_meets(host):
    """With a stand-in co-simulation that meets the SLO from 3 prefill and 2 decode instances of TP2 on, the
    search (doubling a missed role, bisecting back from a split that met) answers the cheapest split that meets:
    every replay cheaper than the answer missed, and it stops once nothing cheaper is left."""
    tr = shared_prefix(10, 4, 1000, 500, 100, rate=[(4.0, 20.0)], seed=1, block_tokens=64)
    seen = []

    def fake(sp, sd, n_p, n_d):
        tp_p, tp_d = len(sp.gpus), len(sd.gpus)
        ok = tp_p == 2 and tp_d == 2 and n_p >= 3 and n_d >= 2
        seen.append((tp_p, tp_d, n_p, n_d))
        return {"meets": ok, "ttft_p90_ms": 100.0 if n_p >= 3 else 9e9, "tbt_p99_ms": 10.0 if n_d >= 2 else 9e9}
    r = role_search(host, "gpu", tr, {"ttft_p90_ms": 1000, "tbt_p99_ms": 50}, parallel=[(2, 1), (4, 1)],
                    replay_row=fake, max_replays=40)
    assert all(not row["meets"] for row in r.tried if row["cost_usd_per_hour"] < r.best["cost_usd_per_hour"])
    assert r.best is not None and (r.best["prefill"], r.best["decode"], r.best["pd"]) == ("tp2", "tp2", "3:2")
    assert r.replays == len(seen) and r.predictions["engine"] > 0
    assert all(u["cost_usd_per_hour"] >= r.best["cost_usd_per_hour"] for u in r.runners_up)
    # the answer's launch commands parse back to its configuration, one per role
    for role in ("prefill", "decode"):
        flags = parse(r.launch[role])
        assert flags["--disaggregation-mode"] == role and flags["--disaggregation-transfer-backend"] == "mooncake"
        assert flags["--tp-size"] == "2" and "--dp-size" not in flags and "--nnodes" not in flags


def test_launch_commands_of_roles_across_hosts_parse_back_to_their_configuration():
    """A prefill role of DeepEP over 16 H100s (2 hosts, DP attention, EP16) and a decode role of TP16: each
    command carries its role, its parallelism and the hosts it spans (host 0's: --node-rank 0)."""
    pre = RoleConfig(16, 16, gpus=16, scenario=sacmodel.scenario("h100", gpus=16, model="deepseek-v3", dp=16, ep=16,
                                                                 mem_fraction=0.85, moe_a2a="deepep"))
    dec = RoleConfig(16, 1, gpus=16, scenario=sacmodel.scenario("h100", gpus=16, model="deepseek-v3"))
    cmds = launch_commands(pre, dec, "gpu")
    p, d = parse(cmds["prefill"]), parse(cmds["decode"])
    assert (p["--disaggregation-mode"], p["--tp-size"], p["--dp-size"], p["--ep-size"], p["--moe-a2a-backend"]) == \
        ("prefill", "16", "16", "16", "deepep")
    assert p["--enable-dp-attention"] is True and (p["--nnodes"], p["--node-rank"]) == ("2", "0")
    assert (d["--disaggregation-mode"], d["--tp-size"], d["--ep-size"], d["--nnodes"]) == ("decode", "16", "1", "2")
    assert "--dp-size" not in d and "--moe-a2a-backend" not in d
    assert p["--dist-init-addr"] == "$DIST_INIT_ADDR" and '"$DIST_INIT_ADDR"' in cmds["prefill"]
    # a role SGLang's command cannot describe says why instead of printing a wrong command
    vllm = RoleConfig(2, 1, gpus=2, scenario=sacmodel.scenario("h100", gpus=2, model="qwen3-32b", weights="bf16",
                                                               engine="vllm"))
    assert launch_commands(vllm, vllm, "gpu")["prefill"].startswith("# no SGLang launch command for the prefill")


def test_a_tighter_slo_never_picks_a_cheaper_plan(host):
    tr = shared_prefix(20, 5, 2000, 1000, 150, rate=[(6.0, 30.0)], seed=2, block_tokens=64)
    loose = cluster_plan(host, "gpu", tr, {"ttft_p90_ms": 5000, "tbt_p99_ms": 100}, roles="search",
                         parallel=[(2, 1), (4, 1)])
    tight = cluster_plan(host, "gpu", tr, {"ttft_p90_ms": 800, "tbt_p99_ms": 30}, roles="search",
                         parallel=[(2, 1), (4, 1)])
    assert loose.best is not None and tight.best is not None
    assert tight.best["cost_usd_per_hour"] >= loose.best["cost_usd_per_hour"]
    assert tight.best["ttft_p90_ms"] <= 800 and tight.best["tbt_p99_ms"] <= 30


def test_a_missed_role_doubles_and_a_split_that_met_bisects_back(host):
    """Stand-in replays that meet from 11 prefill instances of TP2 on (decode never binds): from the bracket the
    prefill count doubles until a split meets, then halves the gap back to the largest that missed, so the
    answer, 11, comes in a logarithmic number of replays (one at a time would take about 11)."""
    tr = shared_prefix(10, 4, 1000, 500, 100, rate=[(4.0, 20.0)], seed=1, block_tokens=64)
    seen = []

    def fake(sp, sd, n_p, n_d):
        ok = len(sp.gpus) == 2 and n_p >= 11
        seen.append((len(sp.gpus), len(sd.gpus), n_p, n_d))
        return {"meets": ok, "ttft_p90_ms": 100.0 if ok else 9e9, "tbt_p99_ms": 10.0}
    r = role_search(host, "gpu", tr, {"ttft_p90_ms": 1000, "tbt_p99_ms": 50}, parallel=[(2, 1)],
                    replay_row=fake, max_replays=40)
    assert r.best is not None and r.best["pd"].split(":")[0] == "11"
    assert r.replays <= 9
    assert all(not row["meets"] for row in r.tried if row["cost_usd_per_hour"] < r.best["cost_usd_per_hour"])


def test_roles_other_than_search_are_refused(host):
    with pytest.raises(ValueError, match="roles: 'search'"):
        cluster_plan(host, "gpu", _even_trace(), {"ttft_p90_ms": 1000}, roles="list")


def test_the_cli_prints_the_split_the_runners_up_and_a_check_that_reproduces_it(tmp_path, capsys):
    import json
    import shlex

    from sacmodel.cli.app import main
    p = tmp_path / "t.jsonl"
    rng = np.random.default_rng(3)
    rows = [(0.25 * i, int(rng.integers(1000, 6000)), int(rng.integers(50, 300))) for i in range(120)]
    p.write_text("".join(json.dumps({"timestamp": int(t * 1000), "input_length": n, "output_length": o,
                                     "hash_ids": [1000 * i + j for j in range(-(-n // 512))]}) + "\n"
                         for i, (t, n, o) in enumerate(rows)))
    machine = ["--gpu", "h100", "--gpus", "8", "--model", "qwen3-32b", "--weights", "bf16"]
    assert main(["plan", "--trace", str(p), *machine, "--system", "gpu", "--slo", "ttft_p90_ms=3000",
                 "--slo", "tbt_p99_ms=40", "--roles", "search", "--parallel", "2,4"]) == 0
    out = capsys.readouterr().out
    assert "cheapest split meeting the SLO" in out and "cluster replays" in out and "USD/hour" in out
    assert "launch the prefill role" in out and "launch the decode role" in out
    assert "--disaggregation-mode prefill" in out and "--disaggregation-mode decode" in out
    check = next(line for line in out.splitlines() if line.startswith("check it: ")).removeprefix("check it: ")
    assert main(["plan", "--trace", str(p), *machine, "--system", "gpu", "--slo", "ttft_p90_ms=3000",
                 "--slo", "tbt_p99_ms=40", "--roles", "search", "--parallel", "2,4", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    # the printed launch commands parse back to the answer's configuration of each role
    lines = out.splitlines()
    for role in ("prefill", "decode"):
        at = next(i for i, ln in enumerate(lines) if ln.startswith(f"launch the {role} role"))
        end = next((i for i in range(at + 1, len(lines)) if lines[i].startswith("launch the ")), len(lines))
        flags = parse("\n".join(lines[at + 1:end]))
        assert flags["--disaggregation-mode"] == role and flags["--tp-size"] == best[role].split("-")[0][2:]
    words = shlex.split(check)
    assert words[:2] == ["sacmodel", "replay"] and "--pd" in words
    assert main(words[1:] + ["--json", "--quiet"]) == 0
    (rep,) = json.loads(capsys.readouterr().out).values()
    assert rep["summary"]["ttft_p90_ms"] == pytest.approx(best["ttft_p90_ms"], rel=1e-9)
    assert rep["summary"]["tbt_p99_ms"] == pytest.approx(best["tbt_p99_ms"], rel=1e-9)


def test_the_cli_refuses_a_bad_parallel_list(tmp_path, capsys):
    from sacmodel.cli.app import main
    (tmp_path / "x.jsonl").write_text("")
    assert main(["plan", "--trace", str(tmp_path / "x.jsonl"), "--system", "gpu", "--slo", "ttft_p90_ms=1",
                 "--roles", "search",
                 "--parallel", "4/3"]) == 2
    assert "need 1 <= DP <= TP" in capsys.readouterr().err


def test_replay_decode_tp_runs_the_decode_role_on_its_own_machine(tmp_path, capsys):
    import json

    from sacmodel.cli.app import main
    from sacmodel.cluster.replay import replay
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"timestamp": 500 * i, "input_length": 3000, "output_length": 64,
                                     "hash_ids": [10 * i + j for j in range(6)]}) + "\n" for i in range(20)))
    assert main(["replay", str(p), "--gpu", "h100", "--gpus", "2", "--model", "qwen3-32b", "--weights", "bf16",
                 "--system", "gpu", "--instances", "2", "--pd", "1:1", "--decode-tp", "4", "--json", "--quiet"]) == 0
    (cli,) = json.loads(capsys.readouterr().out).values()
    pod = sacmodel.scenario("h100", gpus=2, model="qwen3-32b", weights="bf16")
    api = replay(pod, "gpu", p, instances=2, pd="1:1", decode=sacmodel.scenario("h100", gpus=4, model="qwen3-32b",
                                                                                 weights="bf16"))
    same = replay(pod, "gpu", p, instances=2, pd="1:1")
    assert cli["summary"]["tbt_p50_ms"] == pytest.approx(api.summary["tbt_p50_ms"], rel=1e-12)
    assert api.summary["tbt_p50_ms"] < same.summary["tbt_p50_ms"]          # four GPUs decode faster than two
    assert main(["replay", str(p), "--gpu", "h100", "--gpus", "2", "--model", "qwen3-32b", "--weights", "bf16",
                 "--system", "gpu", "--decode-tp", "4"]) == 2
    assert "give --pd too" in capsys.readouterr().err


def test_a_trace_percentile_slo_without_a_trace_is_refused(capsys):
    from sacmodel.cli.app import main
    assert main(["plan", "--system", "gpu", "--context", "8K", "--slo", "ttft_p90_ms=1000"]) == 2
    assert "give --trace TRACE" in capsys.readouterr().err


def test_a_prefill_configuration_whose_ttft_stops_falling_is_grown_no_further(host):
    """Stand-in replays: TP2 prefill leaves TTFT at 5 s (no queue) however many instances it gets, TP4 prefill
    meets the 2 s bound from two on (one queues). The search stops growing TP2 after its TTFT failed to fall,
    says so, and answers with TP4."""
    tr = shared_prefix(10, 4, 1000, 500, 100, rate=[(4.0, 20.0)], seed=1, block_tokens=64)
    tried = []

    def fake(sp, sd, n_p, n_d):
        tp = len(sp.gpus)
        tried.append((tp, n_p))
        ttft, queue = (5000.0, 0.001) if tp == 2 else ((500.0, 0.001) if n_p >= 2 else (3000.0, 2.0))
        return {"meets": ttft <= 2000, "ttft_p90_ms": ttft, "tbt_p99_ms": 10.0, "queue_p50_s": queue}
    r = role_search(host, "gpu", tr, {"ttft_p90_ms": 2000, "tbt_p99_ms": 50}, parallel=[(2, 1), (4, 1)],
                    replay_row=fake, max_replays=40)
    assert r.best is not None and r.best["prefill"] == "tp4" and r.best["pd"].startswith("2:")
    assert r.stalled.get("tp2") == 2 and "tp4" not in r.stalled and max(n for tp, n in tried if tp == 2) == 2
