"""vLLM's engine (``engine="vllm"``): its scheduler by hand and its laws.

vLLM V1 (vllm-project/vllm at 00024d31, ``Scheduler.schedule``) schedules the running requests first (one token
per decoding request), then fills what is left of ``max_num_batched_tokens`` with prefill chunks; SGLang runs a
prefill batch or a decode batch per iteration. The laws below hold for vLLM's scheduler and fail for SGLang's,
so each can fail."""
import math

import numpy as np
import pytest

import sacmodel
from sacmodel.hardware.sizing import vllm_batch_defaults
from sacmodel.serving.config import ConfigError, as_engine, resolve
from sacmodel.serving.engine.loop import open_engine
from sacmodel.serving.engine.vllm import VLLMMemory, VLLMRanks


def _pod(engine="vllm", **kw):
    return sacmodel.scenario("h100", gpus=2, model="qwen3-32b", weights="bf16", engine=engine, **kw)


def _recorded(eng):
    """Wrap the engine's scheduler: every call's (admits, decoding, tokens) and the running requests before it."""
    calls, inner = [], eng.ranks.schedule

    def schedule(now):
        before = list(eng.ranks.running)
        out = inner(now)
        calls.append((before, out))
        return out
    eng.ranks.schedule = schedule
    return calls


def _three_decodes_then_long_prompt(engine: str, budget: int = 8192, prompt: int = 10_000):
    cfg = resolve(_pod(engine, chunked_prefill=budget), "gpu")
    eng = open_engine(cfg, max_output=2000)
    for _ in range(3):
        eng.submit(0.0, 100, 2000)
    while eng.ranks.running[0] < 3:
        eng.step()
    calls = _recorded(eng)
    eng.submit(eng.t, prompt, 2)
    while eng.due() < math.inf and eng.table.n and eng.ranks.prefilled[3] < prompt:
        eng.step()
    return eng, calls


def test_defaults_are_vllms_for_the_gpu():
    cfg = resolve(_pod(), "gpu")
    assert (cfg.engine, cfg.prefill_chunk, cfg.max_running_requests, cfg.page) == ("vllm", 8192, 1024, 16)
    assert vllm_batch_defaults(40 * 1024, "a100") == (2048, 256)        # below 70 GiB: the small defaults
    assert vllm_batch_defaults(81559, "a100-80gb") == (2048, 256)       # A100 is kept on them by name
    # the KV pool: 0.9 of the memory, less the weights (Qwen3-32B BF16 at TP2: 32.8 GB per GPU), in 16-token blocks
    assert cfg.max_total_tokens % 16 == 0
    assert isinstance(open_engine(cfg).ranks, VLLMRanks) and isinstance(open_engine(cfg).memory, VLLMMemory)


def test_a_host_carried_to_vllm_takes_vllms_settings():
    sg = resolve(_pod("sglang"), "gpu")
    v = as_engine(sg, "vllm")
    ref = resolve(_pod(), "gpu")
    assert (v.engine, v.page, v.prefill_chunk, v.max_running_requests, v.max_total_tokens) == \
        (ref.engine, ref.page, ref.prefill_chunk, ref.max_running_requests, ref.max_total_tokens)


def test_hisparse_systems_are_refused_with_vllm():
    with pytest.raises(ConfigError, match="HiSparse"):
        resolve(sacmodel.scenario("h200", gpus=8, pool="cxl", engine="vllm"), "cxl")


def test_first_mixed_iteration_by_hand():
    """Budget 8192, three decoding requests and one 10K prompt: the first iteration after it arrives runs the
    three decode tokens and 8192 - 3 = 8189 prompt tokens; the next one the other 1,811 with the decodes."""
    eng, calls = _three_decodes_then_long_prompt("vllm")
    firsts = [(before, out) for before, out in calls if out[0]]
    (b1, (admits1, dec1, n1, _)), (b2, (admits2, dec2, n2, _)) = firsts[:2]
    assert dec1 == [0] and b1[0] == 3
    assert admits1 == [(0, [(3, 8189)])] and n1 == 3 + 8189
    assert admits2 == [(0, [(3, 10_000 - 8189)])] and n2 == 3 + 1811 and dec2 == [0]


def test_sglang_runs_the_same_prompt_alone():
    """The counterpart that makes the law below able to fail: SGLang's iteration with the prompt has no decode."""
    eng, calls = _three_decodes_then_long_prompt("sglang")
    with_prompt = [out for _, out in calls if out[0]]
    assert with_prompt and all(not dec for _, dec, _, _ in with_prompt)


@pytest.mark.parametrize("engine, starved", [("vllm", False), ("sglang", True)])
def test_a_decode_is_never_starved_by_a_prefill(engine, starved):
    """Law: under vLLM every iteration in which requests are running decodes them, so their token gap is at most
    one (mixed) iteration; SGLang's prefill iterations pass them over."""
    eng, calls = _three_decodes_then_long_prompt(engine)
    skipped = [1 for before, (_, dec, _, _) in calls if before[0] and 0 not in dec]
    assert bool(skipped) == starved


def test_tbt_is_bounded_by_one_mixed_step():
    """The decodes' tokens while the 10K prompt is prefilled come one per iteration, and no iteration is longer
    than the mixed one that carries the full budget."""
    cfg = resolve(_pod(), "gpu")
    eng = open_engine(cfg, max_output=400)
    for _ in range(3):
        eng.submit(0.0, 100, 400)
    while eng.ranks.running[0] < 3:
        eng.step()
    steps, inner = [], eng.cost.iteration_time

    def timed(*a, **kw):
        out = inner(*a, **kw)
        steps.append((out[0], a[4]))       # (seconds per iteration, tokens)
        return out
    eng.cost.iteration_time = timed
    for k in range(3):
        eng.submit(eng.t, 10_000, 2)
    while eng.due() < math.inf:
        eng.step()
    full = max(T for T, n in steps if n == 8192)
    assert all(T <= full * (1 + 1e-9) for T, _ in steps)
    first, done = np.array(eng.client.first[:3]), np.array(eng.client.done[:3])
    assert np.all((done - first) / 399 <= full)


@pytest.mark.parametrize("prompt", [1000, 6000, 20_000])
def test_more_budget_never_raises_a_lone_requests_ttft(prompt):
    ttft = [sacmodel.predict(_pod(chunked_prefill=b), "gpu", context=prompt, output=4, concurrency=1,
                             requests=1).ttft_mean_ms for b in (2048, 4096, 8192, 16384)]
    assert all(b <= a * (1 + 1e-9) for a, b in zip(ttft, ttft[1:])), ttft


def test_preemption_puts_the_newest_back_at_the_head_of_the_queue():
    """A pool too small for every running request's output: the step that does not fit preempts the newest
    running requests (their KV freed), which go back to the head of the waiting queue, and every request still
    completes (recomputed)."""
    cfg = resolve(_pod(max_total_tokens=4096), "gpu")
    eng = open_engine(cfg, max_output=1500)
    for _ in range(4):
        eng.submit(0.0, 500, 1500)
    preempted = []
    inner = eng.ranks._retract

    def retract(r):
        before = set(eng.ranks.waiting[r])
        inner(r)
        preempted.append([i for i in eng.ranks.waiting[r] if i not in before])
    eng.ranks._retract = retract
    while eng.due() < math.inf:
        eng.step()
    res = eng.result()
    assert preempted and res.completed.all()
    # the first preemption takes the newest (the last admitted) first and keeps the oldest running
    assert 0 not in preempted[0] and 3 in preempted[0]


# ---- where a user describes a server ---------------------------------------------------------------------------
def test_a_cluster_files_instance_runs_vllm(tmp_path):
    import yaml

    from sacmodel.cluster.replay import Setup
    from sacmodel.hardware.scenarios import TOPOLOGY_DIR, load_topology
    from sacmodel.hardware.topology import TopologyError
    data = yaml.safe_load((TOPOLOGY_DIR / "sac-cluster-4x.yaml").read_text())
    data["cluster"]["instances"][0]["engine"] = "vllm"
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(data))
    spec = load_topology(p).cluster
    assert [i.engine for i in spec.instances] == ["vllm", "vllm", "vllm", "vllm"]     # one entry of count 4
    data["cluster"]["instances"][0]["engine"] = "trt"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(TopologyError, match=r"instances\[0\]\.engine: unknown engine 'trt'"):
        load_topology(p)
    rows = tmp_path / "t.jsonl"
    rows.write_text('{"timestamp": 0, "input_length": 1000, "output_length": 4, "hash_ids": [1, 2]}\n')
    s = Setup(_pod("sglang"), "gpu", rows, router="round_robin", instances=2, pd=None, time_scale=1.0,
              concurrency=None, cache="trace", slo=None, router_params=None, limit=None, resources={}, engine="vllm")
    assert all(s.cfg_of(k).engine == "vllm" and s.cfg_of(k).page == 16 for k in range(2))


def test_the_engine_flag_builds_a_vllm_machine(capsys):
    from sacmodel.cli.app import main
    args = ["predict", "--gpu", "h100", "--gpus", "2", "--model", "qwen3-32b", "--weights", "bf16", "--system",
            "gpu", "--context", "8K", "--output", "64", "--concurrency", "4", "--json"]
    import json
    main(args + ["--engine", "vllm"])
    v = json.loads(capsys.readouterr().out)
    main(args)
    s = json.loads(capsys.readouterr().out)
    assert v["config"]["max_running_requests"] == 1024 and s["config"]["max_running_requests"] != 1024
    assert main(args + ["--engine", "trt"]) == 2
    assert "invalid choice: 'trt'" in capsys.readouterr().err


def test_no_sglang_launch_command_for_a_vllm_server():
    from sacmodel.planning.emit import sglang_command
    from sacmodel.planning.common import SolverError
    with pytest.raises(SolverError, match="runs vLLM"):
        sglang_command(_pod(), "gpu")
    assert "sglang.launch_server" in sglang_command(_pod("sglang"), "gpu")


def test_a_preempted_request_resumes_over_the_blocks_the_prefix_cache_kept():
    """vLLM V1 frees a preempted request's blocks with their hashes, tail first, to the end of the free queue
    (``KVCacheManager.free``); new blocks come from the queue's head, so the blocks free before it go first, then
    its own from its last block back, and when it is scheduled again ``get_computed_blocks`` finds what is left.

    One rank of 4,096 slots (16-token blocks), four prompts of 500 tokens (512 slots each) admitted together;
    the first ends after 560 tokens, the others run on. After 512 decode steps the pool is full (4 x 512 +
    4 x 512 = 4,096): the newest request (3) is preempted with 500 + 512 = 1,012 tokens of KV, 63 full blocks
    = 1,008 tokens, and nothing was free before them. Request 0 ends 47 steps later (its 559th decode step),
    the three left having taken 3 x 47 = 141 slots, all from request 3's tail: 1,008 - 141 = 867 tokens kept,
    54 full blocks = 864. Request 3 resumes over 500 + 513 = 1,013 tokens (prompt and the tokens it generated)
    and prefills only 1,013 - 864 = 149 of them (recomputing them all would be 1,013)."""
    cfg = resolve(_pod(max_total_tokens=4096), "gpu")
    assert (cfg.dp, cfg.page) == (1, 16)
    eng = open_engine(cfg, max_output=1500)
    for out in (560, 1500, 1500, 1500):
        eng.submit(0.0, 500, out)
    resumed = []
    inner = eng.memory.take

    def take(r, i, now):
        ok = inner(r, i, now)
        if ok and i == 3:
            resumed.append((eng.table.L[i], eng.table.todo[i]))
        return ok
    eng.memory.take = take
    while eng.due() < math.inf:
        eng.step()
    assert eng.result().completed.all()
    assert resumed[:2] == [(500, 500), (1013, 149)]           # admitted, then resumed once preempted


def test_a_prompt_still_being_prefilled_is_preempted_first_and_the_pool_never_overfills():
    """vLLM preempts the tail of its running list, the request admitted last: here a prompt still being prefilled
    in chunks. One rank of 2,128 slots and a 64-token budget: request 0 (100-token prompt, 112 slots) decodes
    while request 1 (2,000-token prompt, 2,000 slots) prefills 63 tokens a step beside it; after 16 decode steps
    the pool is full (112 + 2,000 + 16) with 1,036 prompt tokens computed. Request 1 is preempted (not the
    decoding request 0, which could not be retracted at all: the rank kept decoding past its pool), its 64 full
    blocks (1,024 tokens) stay cached behind nothing free, and request 0's remaining 283 decode steps take 283 of
    them from the tail: when request 0 ends, request 1 resumes over 1,024 - 283 = 741 kept tokens, 46 blocks =
    736, and prefills 2,000 - 736 = 1,264; its first token comes after request 0's last. (The model admits a
    prompt once all its blocks fit; vLLM takes a chunk's blocks at a time and would resume it sooner, to be
    preempted again: its first token comes after request 0's last either way.)"""
    cfg = resolve(_pod(max_total_tokens=2128, chunked_prefill=64), "gpu")
    assert (cfg.dp, cfg.page, cfg.prefill_chunk) == (1, 16, 64)
    eng = open_engine(cfg, max_output=300)
    eng.submit(0.0, 100, 300)
    eng.submit(0.0, 2000, 10)
    fill, inner = [], eng.ranks.schedule

    def schedule(now):
        out = inner(now)
        fill.append(eng.memory.used[0] + eng.memory.decoded(0))
        return out
    eng.ranks.schedule = schedule
    while eng.due() < math.inf:
        eng.step()
    res = eng.result()
    assert res.completed.all()
    assert max(fill) <= 2128                                 # slots held never exceed the pool
    assert (eng.table.L[1], eng.table.todo[1]) == (2000, 1264)
    assert res.first[1] > res.done[0]
