"""Behaviours the mutation campaign (benchmarks/mutation.md) found unpinned, each with an independent
expectation: a hand-computed case or a law (lock-step ranks, shared capacity split evenly).

Every test names the planted bug or surviving mutant it kills.
"""
import math

import numpy as np
import pytest

from sacmodel.serving.capacity import static_check
from sacmodel.serving.config import fetch_bandwidth, resolve, swap_route
from sacmodel.serving.engine.workload import Requests
from sacmodel.serving.engine.loop import run_engine

GB = 1e9


# ---- capacity: requests per rank ---------------------------------------------------------------------
def test_static_check_rounds_requests_per_rank_up():
    """Bug caught: ``per_rank = concurrency // dp`` (rounded down). By hand, GPU-only, distinct prompts of
    4000 tokens and 96 output tokens on 64-token pages: one request holds ceil((4000 + 64 + 96) / 64) x 64 =
    4160 slots; 9 requests over dp = 8 ranks put 2 on rank 0, i.e. 8320 slots. A pool of 8320 slots holds
    them at once, one of 8319 does not (they queue: the run is still served); 16 requests (2 per rank) still fit
    8320, 17 (3 on rank 0) do not."""
    def check(slots, concurrency):
        cfg = resolve("sac-testbed", "gpu", max_total_tokens=slots)
        assert cfg.dp == 8 and cfg.page == 64 and cfg.max_total_tokens == slots
        return static_check(cfg, context=4000, output=96, concurrency=concurrency, prompts="distinct")

    ok = check(8320, 9)
    assert ok["requests_per_rank"] == 2 and ok["fits_at_once"] and ok["feasible"]
    assert ok["usage"]["max_total_tokens"]["used"] == 8320
    tight = check(8319, 9)
    assert not tight["fits_at_once"] and tight["feasible"] and tight["limit"] is None
    assert check(8320, 16)["fits_at_once"] and check(8320, 8)["requests_per_rank"] == 1
    three = check(8320, 17)
    assert three["requests_per_rank"] == 3 and not three["fits_at_once"]
    alone = check(4159, 1)                              # one request alone does not fit: no queueing helps
    assert not alone["feasible"] and alone["limit"].startswith("max_total_tokens (one request alone needs 4,160")
    assert "host_pool" not in ok["usage"]              # the GPU-only system keeps no host pool


def test_static_check_hisparse_device_and_host_pools_by_hand():
    """The HiSparse (dram) usage, by hand from the scenario's settings: 64-token pages, 4096-slot buffers
    plus 64 extra slots, host pool = 2 x device pool, 1024-token prefill chunks, dp = 8; 9 requests put 2 on
    rank 0. A prompt that fits the buffer (3000 tokens, 100 out) holds ceil(3100 / 64) x 64 = 3136 slots; one
    exactly the buffer's size (4096) still holds its whole KV, ceil(4196 / 64) x 64 = 4224; a longer one
    (10000) holds buffer + extra = 4160. The host pool holds a request's prompt (staged after its prefill) and its
    decode tokens backed up a step late (output - 2); a shared prompt once, plus each request's recomputed last
    page. The shared prompt's device pages: context - chunk + page."""
    cfg = resolve("sac-testbed", "dram", max_total_tokens=100000)
    assert (cfg.page, cfg.device_buffer, cfg.buffer_alloc, cfg.prefill_chunk, cfg.dp) == (64, 4096, 4160, 1024, 8)

    def use(context, prompts, key="max_total_tokens"):
        r = static_check(cfg, context=context, output=100, concurrency=9, prompts=prompts)
        assert r["requests_per_rank"] == 2
        return r["usage"][key]

    assert use(3000, "distinct") == {"used": 2 * 3136, "capacity": 100000}
    assert use(4096, "distinct")["used"] == 2 * 4224
    assert use(10000, "distinct")["used"] == 2 * 4160
    assert use(10000, "shared")["used"] == (10000 - 1024 + 64) + 2 * 4160
    assert use(3000, "distinct", "host_pool") == {"used": 2 * (3000 + 100 - 2), "capacity": 2 * 100000}
    assert use(3000, "shared", "host_pool")["used"] == 3000 + 2 * (64 + 100 - 2)
    assert "host_pool" not in static_check(resolve("sac-testbed", "rdma-topk"), context=3000, output=100,
                                           concurrency=9)["usage"]


def test_static_check_pool_bytes_by_hand():
    """Bytes in the pools, by hand (a token is 1152 B x 61 layers = 70272 B; 9 requests of 3000 tokens):
    the DRAM host pools of the 8 ranks hold 2 x 100000 slots each; the CXL-prefetch pool and the RDMA remote
    pool hold the prompt once when shared, 9 times when distinct."""
    tb = 1152 * 61

    def usage(system, prompts, key):
        cfg = resolve("sac-testbed", system, max_total_tokens=100000)
        return static_check(cfg, context=3000, output=100, concurrency=9, prompts=prompts)["usage"][key]

    assert usage("dram", "distinct", "host_dram") == pytest.approx({"used": 2 * 100000 * tb * 8, "capacity": 2e12})
    assert usage("cxl-prefetch", "distinct", "cxl_pool") == pytest.approx({"used": 9 * 3000 * tb, "capacity": 2e12})
    assert usage("cxl-prefetch", "shared", "cxl_pool")["used"] == pytest.approx(3000 * tb)
    assert usage("rdma", "distinct", "remote_pool") == pytest.approx({"used": 9 * 3000 * tb, "capacity": 1e12})
    assert usage("rdma", "shared", "remote_pool")["used"] == pytest.approx(3000 * tb)


def test_weights_and_slot_bytes_add_up():
    """Conservation: over the tp GPUs of DP attention (one GPU per attention group) the quantised weights are
    every parameter once plus tp - 1 extra copies of the attention; the LM head and router gates stay BF16 (once
    over all GPUs), every GPU keeps the whole BF16 token embedding (each rank embeds its own tokens: SGLang's
    ``enable_tp=not is_dp_attention_enabled()``) and a BF16 copy of MLA's kv_b (w_kc, w_vc). A device-pool slot
    is one main entry plus one indexer key in every layer."""
    from sacmodel.serving.capacity import device_token_bytes, weights_per_gpu
    cfg = resolve("sac-testbed", "dram")
    m, t = cfg.model, cfg.topo
    tp, wb = t.param("tp"), t.param("weight_bytes_per_param")
    assert tp == 8 and cfg.attn_tp == 1
    attn = m.layers * m.attn_params()
    gates = m.moe_layers * m.hidden * m.routed_experts
    head = 2 * m.vocab * m.hidden                  # the embedding and the LM head
    embed = m.vocab * m.hidden
    kvb = m.layers * m.kv_lora_rank * m.heads * (m.qk_nope_dim + m.v_head_dim)
    quantised = m.params_total() - head - gates + (tp - 1) * attn
    assert tp * weights_per_gpu(cfg) == pytest.approx(wb * quantised + 2 * (head - embed + gates) + tp * 2 * embed
                                                      + tp * 2 * kvb, rel=1e-12)
    assert device_token_bytes(cfg) == pytest.approx(61 * (cfg.entry_bytes + m.index_key_bytes), rel=1e-12)


# ---- RDMA fetch: NIC sharing -------------------------------------------------------------------------
def test_rdma_fetch_bandwidth_splits_each_nic_among_its_ranks():
    """Bugs caught: NIC sharing among ranks ignored (every fetch gets its NIC's full rate), and every rank
    reading through one NIC (rank interleaving ignored). Testbed: 2 NICs of 100 Gbit/s = 12.5 GB/s, rank r
    on NIC r mod 2, every other hop far faster. By hand: one rank alone 12.5 GB/s; ranks 0 and 1 (two NICs)
    12.5 each; ranks 0 and 2 (one NIC) 6.25 each; all 8 ranks, 4 per NIC, 3.125 GB/s each."""
    cfg = resolve("sac-testbed", "rdma")
    assert cfg.rdma_nics == 2
    assert fetch_bandwidth(cfg, (0,)) == pytest.approx({0: 12.5 * GB})
    assert fetch_bandwidth(cfg, (0, 1)) == pytest.approx({0: 12.5 * GB, 1: 12.5 * GB})
    assert fetch_bandwidth(cfg, (0, 2)) == pytest.approx({0: 6.25 * GB, 2: 6.25 * GB})
    everyone = fetch_bandwidth(cfg, tuple(range(8)))
    assert everyone == pytest.approx({r: 3.125 * GB for r in range(8)})
    # conservation: what the ranks of one NIC get adds up to that NIC's rate
    assert sum(everyone[r] for r in range(0, 8, 2)) == pytest.approx(12.5 * GB)
    one_nic = fetch_bandwidth(resolve("sac-testbed", "rdma", rdma_nics=1), tuple(range(8)))
    assert one_nic == pytest.approx({r: 12.5 * GB / 8 for r in range(8)})


# ---- swap-in: concurrent ranks share the pool device ---------------------------------------------------
def test_swap_route_shares_the_cxl_devices_among_gathering_ranks():
    """Bug caught: each rank's swap-in lane sized as if it were alone on the route. Testbed: CXL devices of
    22.5 GB/s (the tightest hop; per-flow cap 26 GB/s). One rank alone gets 22.5 GB/s; all 8 ranks over
    2 devices, 4 per device, 22.5 / 4; over 1 device, 22.5 / 8."""
    two = resolve("sac-testbed", "cxl", cxl_devices=2)
    one = resolve("sac-testbed", "cxl", cxl_devices=1)
    assert swap_route(two, 1)[0] == pytest.approx(22.5 * GB)
    assert swap_route(two, 8)[0] == pytest.approx(22.5 * GB / 4)
    assert swap_route(one, 8)[0] == pytest.approx(22.5 * GB / 8)
    assert swap_route(one, 100)[0] == swap_route(one, 8)[0]          # active ranks capped at dp


# ---- engine: the iteration waits for the slowest rank --------------------------------------------------
def test_iteration_is_paced_by_the_busiest_rank():
    """Bug caught: the iteration time taken from the least busy rank instead of the busiest. Data-parallel
    ranks step in lock-step, so a 128K-context request on rank 0 decodes no faster next to 7 short requests
    (2K context, still decoding throughout) than alone: the other ranks only add shared work."""
    cfg = resolve("sac-testbed", "dram")

    def tbt(contexts, outputs):
        n = len(contexts)
        res = run_engine(cfg, Requests(np.zeros(n), np.array(contexts), np.array(outputs), np.zeros(n)), n)
        assert res.crash is None and res.completed.all()
        return (res.done - res.first) / (np.array(outputs) - 1)

    alone_long, alone_short = tbt([131072], [64])[0], tbt([2048], [64])[0]
    assert alone_long > 1.05 * alone_short           # the case separates the two paces
    mixed = tbt([131072] + [2048] * 7, [64] + [1000] * 7)    # round robin: request i on rank i
    assert mixed[0] >= alone_long * (1 - 1e-9)


# ---- topology: water filling at small scale -------------------------------------------------------------
def test_water_fill_hand_computed_on_unit_capacities():
    """Max-min rates on capacities of a few B/s, where an error of 1 B/s shows (at GB/s it hides under the
    relative tolerance): two flows on a 4 B/s resource get 2 each; with a third flow also crossing a 1 B/s
    resource, that one gets 1 and the other two share the remaining 3; a demand of 0.5 is met exactly."""
    from sacmodel.hardware.topology import water_fill
    cap = {"r": 4.0, "s": 1.0}.__getitem__
    assert water_fill([["r"], ["r"]], [math.inf] * 2, cap) == pytest.approx([2.0, 2.0], abs=1e-12)
    assert water_fill([["r"], ["r"], ["r", "s"]], [math.inf] * 3, cap) == pytest.approx([1.5, 1.5, 1.0], abs=1e-12)
    assert water_fill([["r"], ["r"]], [0.5, math.inf], cap) == pytest.approx([0.5, 3.5], abs=1e-12)


# ---- CXL: the server's device pool is capped by the rank's partition ------------------------------------
def test_cxl_partition_caps_the_device_pool_by_hand():
    """By hand: each CXL device maps 256 GiB (the server's map_bytes, below its 1 TB), 8 ranks over 2 devices
    (4 per device), host pool 2 x device pool, a token is 1152 B x 61 layers: the partition holds
    floor(2^38 / 4 / (2 x 1152 x 61)) slots. A setting up to that is kept as it is (when the GPU's memory holds
    it); one slot more is cut to the partition rounded down to whole 64-token pages. A setting above what the
    memory holds is cut to that (SGLang takes the smaller)."""
    from sacmodel.hardware.params import with_params
    cap = math.floor(2 ** 38 / 4 / (2 * 1152 * 61))
    cfg = resolve("sac-testbed", "cxl")
    assert cfg.token_bytes == 1152 * 61 and cfg.limits["cxl_partition"] == cap
    assert cfg.max_total_tokens == 200000                      # the setting, well inside the partition
    big = with_params("sac-testbed", {"mem_fraction": 0.95})   # memory for more than the partition
    assert resolve(big, "cxl").limits["profiled"] > cap
    assert resolve(big, "cxl", max_total_tokens=cap).max_total_tokens == cap
    assert resolve(big, "cxl", max_total_tokens=cap + 1).max_total_tokens == cap // 64 * 64
    profiled = cfg.limits["profiled"]
    assert cap > profiled and resolve("sac-testbed", "cxl", max_total_tokens=cap).max_total_tokens == profiled


# ---- cost primitives -----------------------------------------------------------------------------------
def test_roofline_time_hand_computed():
    """max(FLOPs / (peak x efficiency), bytes / (bandwidth x efficiency)): 1e12 FLOP at 1e15 x 0.5 is 2 ms;
    1e9 B at 4e12 x 0.8 is 0.3125 ms; the compute side wins, and with 1e10 B (3.125 ms) the memory side."""
    from sacmodel.serving.costs import compile_expr, roofline_time
    f = compile_expr(roofline_time("mt_"))
    kw = dict(peak_bf16=1e15, compute_eff=0.5, hbm_bw=4e12, hbm_eff=0.8, mt_flops=1e12)
    assert f(mt_hbm_bytes=1e9, **kw) == pytest.approx(2e-3, rel=1e-12)
    assert f(mt_hbm_bytes=1e10, **kw) == pytest.approx(3.125e-3, rel=1e-12)


def test_lines_per_entry_is_the_known_mean():
    """Entries of s bytes packed back to back over lines of l bytes touch on average (s - g) / l + 1 lines,
    g = gcd(s, l) (a known result, here checked by hand): 656 B -> 11, 100 B -> 2.5, 65 B -> 2, 64 B -> 1;
    a 64 B entry starting mid-line touches 2."""
    from sacmodel.serving.costs import lines_per_entry
    assert lines_per_entry(656) == 11.0 and lines_per_entry(100) == 2.5
    assert lines_per_entry(65) == 2.0 and lines_per_entry(64) == 1.0
    assert lines_per_entry(64, first_offset=32) == 2.0
    for bad in (dict(entry_bytes=0), dict(entry_bytes=64, line=0)):
        with pytest.raises(ValueError, match="positive"):
            lines_per_entry(**bad)


def test_a_symbol_first_registered_without_a_description_gets_the_later_one(monkeypatch):
    import sacmodel.serving.costs as costs
    from sacmodel.serving.costs import sym, symbol_table
    monkeypatch.setattr(costs, "SYMBOLS", dict(costs.SYMBOLS))      # the probe symbol leaves no trace
    s = sym("zz_mutation_probe", "second")
    assert sym("zz_mutation_probe", "second", "a probe symbol") is s
    assert ("zz_mutation_probe", "second", "a probe symbol") in symbol_table()
    sym("zz_mutation_probe", "second", "another text")            # a description, once given, stays
    assert ("zz_mutation_probe", "second", "a probe symbol") in symbol_table()


# ---- reference -----------------------------------------------------------------------------------------
def test_lru_buffer_that_holds_the_whole_context_loads_it_once():
    """A buffer at least as large as the context loads the whole context at the first step and then never
    misses, whatever is selected."""
    from sacmodel.serving.reference import LRUBuffer
    b = LRUBuffer(100, 128)
    hits, missed = b.access(np.arange(10))
    assert hits == 0 and missed.tolist() == list(range(100)) and b.resident.all()
    hits, missed = b.access(np.arange(50, 70))
    assert hits == 20 and len(missed) == 0
    assert b.access(np.arange(90, 100))[0] == 10


def test_lines_touched_by_unaligned_entries_by_hand():
    """Entry 1 of 656 B spans bytes 656..1311: lines 10..20, 11 lines; entries 1 and 2 of 100 B span bytes
    100..199 (lines 1..3) and 200..299 (lines 3..4): 3 + 2 = 5."""
    from sacmodel.serving.reference import lines_touched
    assert lines_touched(np.array([1]), 656) == 11
    assert lines_touched(np.array([1, 2]), 100) == 5


@pytest.mark.parametrize("kw", [dict(context=1, topk=1, buffer_slots=1), dict(topk=1), dict(steps=1)])
def test_simulate_accepts_the_smallest_valid_arguments(kw):
    from sacmodel.serving.reference import simulate
    args = {**dict(context=100, topk=20, steps=3, buffer_slots=50, correlation=0.5), **kw}
    r = simulate(**args)
    assert r["misses"] + r["hits"] == args["steps"] * min(args["topk"], args["context"])


def test_simulate_rejects_zero_steps():
    from sacmodel.serving.reference import simulate
    with pytest.raises(ValueError, match="positive"):
        simulate(context=100, topk=20, steps=0, buffer_slots=50, correlation=0.5)


def test_simulated_overlap_matches_the_bivariate_normal_closed_form():
    """With a buffer of exactly the top-k, a step misses what the previous step did not select: the mean
    misses per step after the first are k x (1 - overlap), with the overlap P(s' > theta | s > theta) of
    scores of correlation phi (sacmodel.serving.access, an independent closed form). Monte Carlo, 3 sigma wide."""
    from sacmodel.serving.access import top_k_overlap
    from sacmodel.serving.reference import simulate
    L, k, phi, steps = 4096, 256, 0.95, 120
    r = simulate(context=L, topk=k, steps=steps, buffer_slots=k, correlation=phi, dims=512, seed=5,
                 per_step=True)
    mean = r["misses_per_step"][1:].mean()
    expect = k * (1 - top_k_overlap(context=L, topk=k, correlation=phi))
    assert mean == pytest.approx(expect, rel=0.15)


def test_decode_step_counts_buffer_hits():
    """The same query twice: the second step finds its whole top-k in the buffer."""
    from sacmodel.serving.reference import KVPool, LRUBuffer, decode_step
    rng = np.random.default_rng(0)
    L, k, d = 64, 8, 16
    pool = KVPool(layers=1, context=L, entry_bytes=4 * d)
    pool.write(0, np.arange(L), rng.standard_normal((L, d)).astype(np.float32))
    buf = LRUBuffer(L, 16)
    kw = dict(q_index=rng.standard_normal((2, 4)), index_weights=np.ones(2), index_keys=rng.standard_normal((L, 4)),
              q_attn=rng.standard_normal((2, d)), topk=k, v_dim=8)
    first = decode_step(pool, buf, 0, **kw)
    second = decode_step(pool, buf, 0, **kw)
    assert first["counts"]["hits"] == 0 and first["counts"]["misses"] == k
    assert second["counts"]["hits"] == k and second["counts"]["misses"] == 0


def test_rdma_static_values_spread_over_the_nics_by_hand():
    """The RDMA prefetch of a prompt runs over all NICs: 2 x 100 Gbit/s = 25 GB/s, and the per-operation
    cost (0.446 us per READ on one NIC) halves with two NICs posting in parallel."""
    from sacmodel.serving.config import static_values
    v = static_values(resolve("sac-testbed", "rdma"))
    assert v["pf_rate"] == pytest.approx(25 * GB, rel=1e-12)
    assert v["rdma_op_cost"] == pytest.approx(0.446e-6 / 2, rel=1e-12)
    one = static_values(resolve("sac-testbed", "rdma", rdma_nics=1))
    assert one["pf_rate"] == pytest.approx(12.5 * GB, rel=1e-12) and one["rdma_op_cost"] == pytest.approx(0.446e-6)


# ---- breakeven: which side wins for a higher-is-better metric --------------------------------------------
def test_breakeven_winner_of_a_throughput_metric(monkeypatch):
    """Throughput is better when higher. Stub loaded metric: a(n) = n tok/s, b = 10.5 tok/s: a first beats
    b at n = 11, so b wins below and a above; against b = 100 (never reached on [1, 40]) b wins throughout,
    and against 0.105 x b = 10.5 tok/s a crosses at 11 again."""
    import sacmodel.planning.breakeven as solvers
    level = {"dram": 10.5}

    def fake_evaluate(topo, system, metric, vary, value, **fixed):
        return float(value) if system == "cxl" else level["dram"]
    monkeypatch.setattr(solvers, "evaluate", fake_evaluate)
    kw = dict(metric="output_throughput_tok_s", vary="concurrency", lo=1, hi=40, context=32768, output=64)
    be = solvers.breakeven("sac-testbed", "cxl", "dram", curve=True, **kw)
    assert be.found and be.values == [11.0] and (be.winner_below, be.winner_above) == ("dram", "cxl")
    assert be.residual == pytest.approx(0.5 / 10.5)            # |a - b| / b at the root n = 11
    assert be.curve["x"] == [float(n) for n in range(1, 41)]   # 48 points over 40 integers: each once
    assert be.curve["cxl"] == be.curve["x"] and be.curve["dram"] == [10.5] * 40
    level["dram"] = 100.0
    never = solvers.breakeven("sac-testbed", "cxl", "dram", **kw)
    assert not never.found and never.winner == "dram"
    scaled = solvers.breakeven("sac-testbed", "cxl", "dram", ratio=0.105, **kw)
    assert scaled.values == [11.0] and (scaled.winner_below, scaled.winner_above) == ("dram", "cxl")


# ---- units ---------------------------------------------------------------------------------------------
def test_quantities_in_small_units_are_exact_decimals():
    """'3 ns' is the float nearest 3e-9 (3 / 1e9, correctly rounded), not 3 x 1e-9, which is one ulp off;
    likewise '5 us' and '750 ns'. A unit written '/s' means 1/s."""
    from sacmodel.hardware.units import parse_quantity
    assert 3 * 1e-9 != 3e-9                                   # the trap the parser avoids
    assert parse_quantity("3 ns", "time") == 3e-9
    assert parse_quantity("5 us", "time") == 5e-6 and parse_quantity("750 ns", "time") == 7.5e-7
    assert parse_quantity("5 /s", "rate") == 5.0 and parse_quantity("2 1/s", "rate") == 2.0


def test_quantity_length_limit_is_inclusive_and_long_input_is_shortened():
    """The limit is 64 characters: a 64-character quantity (padded with spaces) parses, 65 do not; the
    message of a very long input quotes only its first 64 characters and '...'."""
    from sacmodel.hardware.units import MAX_QUANTITY_CHARS, UnitError, parse_quantity, parse_tokens
    assert MAX_QUANTITY_CHARS == 64
    assert parse_quantity("26 GB/s".ljust(64), "bandwidth") == 26e9
    assert parse_tokens("32K".ljust(64)) == 32768
    with pytest.raises(UnitError):
        parse_quantity("26 GB/s".ljust(65), "bandwidth")
    with pytest.raises(UnitError, match=r"\.\.\.") as e:
        parse_quantity("9" * 5000 + " GB/s", "bandwidth")
    assert len(str(e.value)) < 300
    with pytest.raises(UnitError, match=r"\.\.\."):
        parse_quantity(10 ** 100, "bandwidth")                 # a bare number: no unit, quoted short
    for bad in (None, "", "   ", ["1 ns"]):
        with pytest.raises(UnitError):
            parse_quantity(bad, "time")


def test_token_counts_by_hand():
    from sacmodel.hardware.units import UnitError, parse_tokens
    assert parse_tokens("32K") == 32768 and parse_tokens("1M") == 1048576 and parse_tokens(" 7 ") == 7
    assert parse_tokens("0.5K") == 512 and parse_tokens(1) == 1
    for bad in ("0", "1.5", "0.0001K", True):
        with pytest.raises(UnitError):
            parse_tokens(bad)


def test_fmt_time_picks_the_unit_at_each_boundary():
    from sacmodel.hardware.units import fmt_bandwidth, fmt_time
    assert [fmt_time(x) for x in (5e-7, 1e-6, 2.5e-3, 0.5, 1.0, 12.0)] == \
        ["500 ns", "1 us", "2.5 ms", "500 ms", "1 s", "12 s"]
    assert fmt_time(9.99e-7) == "999 ns" and fmt_time(1e-3) == "1 ms"
    assert fmt_bandwidth(22.5e9) == "22.5 GB/s"


def test_breakeven_finds_a_crossing_in_the_last_grid_interval(monkeypatch):
    """f_a - f_b = x - 9.95 on [1, 10] with 40 points: the only root lies in the last interval of the grid."""
    import sympy as sp

    import sacmodel.planning.breakeven as solvers
    x = sp.Symbol("t_graph_kernel", positive=True)
    monkeypatch.setattr(solvers, "_free_form",
                        lambda system, metric, topo, name, fx, res: {"cxl": x, "dram": sp.Float(9.95)}[system])
    monkeypatch.setattr(solvers, "_symbolic_roots", lambda *args: None)     # the numeric path (brentq)
    be = solvers.breakeven("sac-testbed", "cxl", "dram", metric="tbt", vary="t_graph_kernel", lo=1.0, hi=10.0,
                           points=40, context=32768, output=64)
    assert be.method == "numeric" and be.values == pytest.approx([9.95], abs=1e-9)


def test_loaded_sensitivity_is_sorted_by_the_size_of_the_elasticity(monkeypatch):
    """TBT = t_graph_kernel^0.2 x t_kernel^-1.5 x t_hs_admit^0 (a power law): elasticities 0.2, -1.5 and 0, listed by
    magnitude: t_kernel, t_graph_kernel, t_hs_admit, whatever the parameters' own values."""
    import sacmodel.planning.sensitivity as solvers
    from sacmodel.hardware.scenarios import load_topology

    class P:
        feasible = True

        def __init__(self, tbt):
            self.tbt_mean_ms = tbt

    def fake_predict(topo, system, **kw):
        return P(topo.param("t_graph_kernel") ** 0.2 * topo.param("t_kernel") ** -1.5)
    monkeypatch.setattr(solvers, "predict", fake_predict)
    t = load_topology("sac-testbed")
    rows = solvers.sensitivity_loaded(t, "cxl", "tbt_mean_ms", params=["t_hs_admit", "t_graph_kernel", "t_kernel"],
                                      context=32768)
    assert [r[0] for r in rows] == ["t_kernel", "t_graph_kernel", "t_hs_admit"]
    assert [r[1] for r in rows] == pytest.approx([-1.5, 0.2, 0.0], abs=1e-9)


def test_winner_map_never_picks_an_infeasible_system_for_throughput(monkeypatch):
    """A system with nan (infeasible) at a point must lose there, for a throughput as for a latency; a point
    where every system is infeasible gets -1."""
    import sacmodel.planning.sweep as solvers
    nan = float("nan")
    table = {"cxl": np.array([[nan, 5.0], [nan, 2.0]]), "dram": np.array([[2.0, 4.0], [nan, 6.0]])}
    monkeypatch.setattr(solvers, "sweep", lambda scenario, system, grid, metric, **fixed:
                        {metric: table[system].ravel()})
    monkeypatch.setattr(solvers, "HIGHER_IS_BETTER", solvers.HIGHER_IS_BETTER | {"tbt"})
    r = solvers.winner_map("sac-testbed", ["cxl", "dram"], "tbt", ("context", [8192, 16384]), ("output", [64, 128]))
    assert r["winner"].tolist() == [[1, 0], [-1, 1]]


# ---- cluster transfer ------------------------------------------------------------------------------------
def test_cross_table_error_is_taken_at_the_table_sizes():
    """The error of a fitted transfer model against another table is evaluated at that table's transfer sizes
    (its first column, 20 MB .. 4.5 GB for vllm-h800), against its measured times (the second)."""
    from sacmodel.cluster.transfer import TABLES, fit_table, table_error
    fitted, _ = fit_table("sglang-h20")
    r = table_error("vllm-h800", fitted)
    assert r["x"] == [20e6, 74e6, 290e6, 1.13e9, 4.50e9]
    assert r["measured"] == [t for _, t in TABLES["vllm-h800"]["points"]]
