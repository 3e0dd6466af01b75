"""Every size of machine (issue 32, item 3) and the machine's argument contract (issue 36): one GPU for every
model that fits, servers over several hosts whose collectives cross the NICs, refusals that name the rule, and
hand-computed sizes that catch realistic slips (a GiB taken for a GB, a bidirectional NVLink figure, a dense
model's page size, a kv_dtype dropped)."""
import json
import math

import numpy as np
import pytest

import sacmodel
from sacmodel.hardware.build import scenario, scenario_dict
from sacmodel.hardware.gpus import get_gpu, gpu_catalog
from sacmodel.hardware.models import CATALOG_CONFIGS, catalog, from_hf_config, get_model
from sacmodel.hardware.scenarios import load_topology
from sacmodel.hardware.sizing import (RUNTIME_RESERVE, collective_groups, collective_rates, kv_pool_tokens,
                                      mem_fraction_default, new_token_ratio_default, weights_per_gpu)
from sacmodel.hardware.topology import TopologyError
from sacmodel.serving.config import resolve, static_values

GIB = 2 ** 30


# ---- one GPU, every model ----------------------------------------------------------------------------------
@pytest.mark.parametrize("weights", ["fp8", "bf16"])
@pytest.mark.parametrize("gpu", gpu_catalog())
@pytest.mark.parametrize("model", catalog())
def test_one_gpu_serves_every_model_that_fits_and_refuses_the_rest_by_the_rule(gpu, model, weights):
    """Build ``scenario(gpu, gpus=1, model=m)``: a model whose weights fill less than half the GPU must build
    and answer with finite numbers; one whose weights alone exceed the GPU's memory must be refused naming the
    rule (weights + reserve above the static memory)."""
    g, m = get_gpu(gpu), get_model(model)
    per_param = {"fp8": 1 + 4 / 128 ** 2, "bf16": 2.0}[weights]    # FP8 with a scale per 128 x 128 block
    weights_bytes = m.params_total() * per_param
    try:
        t = scenario(gpu, gpus=1, model=model, weights=weights)
    except TopologyError as exc:
        assert weights_bytes > 0.5 * g.memory_bytes, (gpu, model, str(exc))
        assert "does not fit on 1 x" in str(exc) and "weights + reserve > the static memory" in str(exc)
        return
    assert weights_bytes < g.memory_bytes
    assert len(t.gpus) == 1 and t.gpus[0] == "gpu_s0"
    p = sacmodel.predict(t, "gpu", context=1024, output=16, concurrency=2)
    assert p.feasible, (gpu, model, p.limit)
    for v in (p.ttft_mean_ms, p.tbt_mean_ms, p.output_throughput_tok_s):
        assert math.isfinite(v) and v > 0
    assert resolve(t, "gpu").tp == 1 and static_values(resolve(t, "gpu"))["n_coll"] == 0   # no collective alone


@pytest.mark.parametrize("gpus", [8, 16])
@pytest.mark.parametrize("gpu", gpu_catalog())
@pytest.mark.parametrize("model", catalog())
def test_one_and_two_hosts_serve_every_model_that_fits(gpu, model, gpus):
    """The same law over 8 GPUs (one host) and 16 (two hosts, collectives over the NICs): FP8 weights split over
    the GPUs below half of one GPU's memory build and answer; above all of it, the build names the rule."""
    g, m = get_gpu(gpu), get_model(model)
    per_gpu = m.params_total() * (1 + 4 / 128 ** 2) / gpus
    try:
        t = scenario(gpu, gpus=gpus, model=model)
    except TopologyError as exc:
        assert per_gpu > 0.5 * g.memory_bytes and "weights + reserve > the static memory" in str(exc), str(exc)
        return
    assert per_gpu < g.memory_bytes and len(t.gpus) == gpus
    p = sacmodel.predict(t, "gpu", context=1024, output=16, concurrency=2)
    assert p.feasible and all(math.isfinite(v) and v > 0 for v in (p.ttft_mean_ms, p.tbt_mean_ms))


def test_a_small_model_on_one_gpu_by_hand():
    """Llama-3.1-8B in BF16 on one H100: 2 x 8.03e9 B of weights = 14.96 GiB, and the pool is what
    mem_fraction x (memory - 2.07 GiB) leaves, in cells of 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B."""
    t = scenario("h100", gpus=1, model="llama-3.1-8b", weights="bf16")
    m = get_model("llama-3.1-8b")
    assert m.params_total() == pytest.approx(8.03e9, rel=0.002)
    cfg = resolve(t, "gpu")
    mf = mem_fraction_default(81559, tp=1, dp=1, chunk=8192, cuda_graph_max_bs=256)
    assert mf == round((81559 - max(512 + 1.5 * 8192 + 2 * 256 + 1024 / 8, 10240)) / 81559, 3)
    cell = 32 * 8 * 128 * 2 * 2
    want = int(((81559 * 2 ** 20 - 2.07 * GIB) * mf - 2 * m.params_total()) // cell)
    assert cfg.max_total_tokens == want and cfg.page == 1


# ---- beyond one host ----------------------------------------------------------------------------------------
def test_collectives_across_hosts_are_priced_on_the_nics_by_hand():
    """Two collectives of a TP16 layer over two hosts of 8: NCCL's rings leave each host once and spread over its
    8 NICs of 50 GB/s (400 Gb/s), so the bus bandwidth is 8 x 50 = 400 GB/s, below NVLink's 450. Each takes
    NCCL's latency for the quickest algorithm (tuning.cc): a tree all-reduce with the LL protocol, 6.8 us base
    + 2 x (7 NVLink steps x 0.6 + 1 network level x 5.0) = 25.2 us (a ring: 6.6 + 28 x 1.0 + 2 x 2.7 = 40.0).
    With DP attention over 16 GPUs in groups of 8, the attention all-reduce stays on NVLink (SGLang's custom
    all-reduce, 10 us); the all-gather and reduce-scatter are rings: 6.6 + 14 x 1.0 + 1 x 2.7 = 23.3 us. Slower
    NICs bound the bandwidth lower (8 x 12.5 GB/s)."""
    m = get_model("deepseek-r1")
    kw = dict(domain=8, nvlink_bw=450e9, nic_bw=50e9, t_collective=10e-6)
    bw, lat = collective_rates(collective_groups(m, 16, 1), **kw)
    assert bw == pytest.approx(400e9) and lat == pytest.approx(25.2e-6)
    assert collective_rates(collective_groups(m, 16, 1), **{**kw, "nic_bw": 12.5e9})[0] == pytest.approx(100e9)
    assert collective_rates(collective_groups(m, 16, 1), **{**kw, "nic_bw": 100e9})[0] == pytest.approx(450e9)
    assert collective_rates(collective_groups(m, 8, 1), **kw) == (pytest.approx(450e9), pytest.approx(10e-6))
    groups = collective_groups(m, 16, 2)
    row = 2 * 7168
    assert groups == [(8, pytest.approx(2 * 7 / 8 * row), "allreduce"), (16, pytest.approx(15 / 16 * row), "allgather"),
                      (16, pytest.approx(15 / 16 * row), "reducescatter")]
    bw, lat = collective_rates(groups, **kw)
    total = 2 * 7 / 8 * row + 2 * 15 / 16 * row
    assert bw == pytest.approx(total / (2 * 7 / 8 * row / 450e9 + 2 * 15 / 16 * row / 400e9))
    assert lat == pytest.approx((10e-6 + 2 * 23.3e-6) / 3)
    # 64 GPUs: 8 hosts, a tree of 3 levels: 6.8 + 2 x (7 x 0.6 + 3 x 5.0) = 45.2 us
    assert collective_rates(collective_groups(m, 64, 1), **kw)[1] == pytest.approx(45.2e-6)


def test_nccl_latency_model_by_hand():
    """NCCL's tuning model (src/graph/tuning.cc): a ring all-reduce over n ranks takes 2 (n - 1) steps, an
    all-gather n - 1; a tree all-reduce 2 x (ranks per node - 1) NVLink steps and 2 log2(nodes) network levels.
    One GPU per host uses the tree's network latency for both. Two hosts of one GPU: a ring, 6.6 + 2 x 5.0 =
    16.6 us for a small all-reduce, below the tree's 6.8 + 2 x 5.0 (nccl-tests#150 measured 19-20 us). Inside
    one host (8 GPUs, ring LL): 6.6 + 14 x 0.6 = 15.0 us. A ring's step costs max(3.4 NVLink, 3 x 1.0 network
    overhead) with Simple once it leaves the host."""
    from sacmodel.hardware.sizing import nccl_latency, nccl_small_latency
    assert nccl_small_latency("allreduce", 2, 2) == pytest.approx(16.6e-6)
    assert nccl_latency("allreduce", "tree", "ll", 2, 2) == pytest.approx(16.8e-6)
    assert nccl_latency("allreduce", "ring", "ll", 8, 1) == pytest.approx(15.0e-6)
    assert nccl_latency("allreduce", "ring", "simple", 16, 2) == pytest.approx((8.4 + 28 * 3.4 + 2 * 14.0) * 1e-6)
    assert nccl_latency("allgather", "tree", "ll", 16, 2) == math.inf
    assert nccl_latency("allgather", "ring", "ll", 32, 4) == pytest.approx((6.6 + 28 * 1.0 + 3 * 2.7) * 1e-6)


@pytest.mark.parametrize("coll", ["allreduce", "allgather", "reducescatter"])
def test_more_hosts_never_make_a_collective_faster(coll):
    """A law: at a fixed number of GPUs per host, every added host adds NCCL latency (more ring steps, a deeper
    tree) and the per-GPU bytes of a ring, (n - 1) / n of the message, only grow."""
    from sacmodel.hardware.sizing import nccl_small_latency
    lats = [nccl_small_latency(coll, 8 * h, h) for h in range(1, 17)]
    assert all(b >= a for a, b in zip(lats, lats[1:]))
    m = get_model("deepseek-r1")
    kw = dict(domain=8, nvlink_bw=450e9, nic_bw=50e9, t_collective=10e-6)
    row = 2 * 7168
    times = []
    for h in (2, 3, 4, 8, 12):
        bw, lat = collective_rates([(8 * h, row, coll)], **kw)
        times.append(lat + 1e6 * row / bw)          # a million tokens' bytes at the same per-GPU size
    assert all(b >= a for a, b in zip(times, times[1:]))


def test_one_collective_time_at_one_message_size_by_hand():
    """One all-reduce of a decode step at batch 1 of DeepSeek-R1 (hidden 7,168, BF16: a 14,336 B message), each GPU
    moving 2 (n - 1) / n of it. TP16 over two hosts of 8: NCCL (SGLang's custom all-reduce is disabled across
    nodes), the tree with LL, 6.8 + 2 x (7 x 0.6 + 5.0) = 25.2 us, plus 26,880 B at 8 NICs x 50 GB/s = 400 GB/s:
    67.2 ns; 25.2672 us. TP8 inside one host: the custom all-reduce's 10 us plus 25,088 B at 450 GB/s: 10.0558 us.
    On a fabric whose two-host all-reduce nccl-tests measures at 138.6 us (GCP A3 Mega at 16 KB), NCCL's model x
    138.6 / 25.2 = 5.5: 138.6672 us. A fabric measured faster than NCCL's model stays above the in-host time."""
    from sacmodel.hardware.sizing import collective_time, fabric_scale
    row = 2 * 7168
    kw = dict(domain=8, nvlink_bw=450e9, nic_bw=50e9, t_collective=10e-6)
    assert collective_time("allreduce", 2 * 15 / 16 * row, ranks=16, **kw) == pytest.approx(25.2672e-6, rel=1e-9)
    assert collective_time("allreduce", 2 * 7 / 8 * row, ranks=8, **kw) == pytest.approx(10e-6 + 25088 / 450e9,
                                                                                        rel=1e-12)
    assert fabric_scale(None, 8) == 1.0 and fabric_scale(138.6e-6, 8) == pytest.approx(5.5)
    scaled = collective_time("allreduce", 2 * 15 / 16 * row, ranks=16, scale=fabric_scale(138.6e-6, 8), **kw)
    assert scaled == pytest.approx(138.6672e-6, rel=1e-9)
    fast = collective_time("allreduce", 0.0, ranks=16, scale=fabric_scale(2e-6, 8), **kw)
    assert fast == pytest.approx(10e-6)


@pytest.mark.parametrize("seed", range(6))
def test_a_collective_across_hosts_is_never_faster_than_inside_one_host(seed):
    """A law: at the same bytes per GPU, a collective over GPUs of two or more hosts takes at least as long as
    the same collective inside one host, whatever the scenario's rates: NVLink, NICs, the in-host latency
    (``t_collective``, a calibrated value may exceed NCCL's model) and the fabric's measured scale."""
    import random
    from sacmodel.hardware.sizing import collective_time
    rnd = random.Random(seed)
    for _ in range(200):
        domain = rnd.choice([2, 4, 8])
        kw = dict(domain=domain, nvlink_bw=rnd.uniform(50e9, 900e9), nic_bw=rnd.uniform(1e9, 400e9),
                  t_collective=rnd.uniform(1e-6, 80e-6), scale=rnd.uniform(0.1, 6.0))
        coll = rnd.choice(["allreduce", "allgather", "reducescatter"])
        nbytes = 10 ** rnd.uniform(1, 9)
        inside = collective_time(coll, nbytes, ranks=rnd.randint(2, domain), **kw)
        across = collective_time(coll, nbytes, ranks=domain * rnd.randint(2, 16), **kw)
        assert across >= inside, (coll, nbytes, kw)


def test_a_scenario_binds_its_fabrics_measured_allreduce(tmp_path):
    """``net_allreduce_time`` on the GPUs of a scenario file (nccl-tests' small all-reduce over two hosts of the
    fabric) scales NCCL's model of every collective across hosts; without it the model is NCCL's own. R1 TP16
    on two hosts of H100: 25.2 us per all-reduce, 61.6 us with NVIDIA/nccl#1453's measured fabric. Inside one
    host it changes nothing."""
    import yaml
    d = scenario_dict("h100", gpus=16, model="deepseek-r1")
    path = tmp_path / "plain.yaml"
    path.write_text(yaml.safe_dump(d))
    assert static_values(resolve(load_topology(path), "gpu"))["t_collective"] == pytest.approx(25.2e-6)
    for node in d["nodes"]:
        if node["kind"] == "gpu":
            node["net_allreduce_time"] = {"value": "61.58 us", "source": "NVIDIA/nccl#1453: all_reduce_perf, 128 B"}
    path = tmp_path / "measured.yaml"
    path.write_text(yaml.safe_dump(d))
    assert static_values(resolve(load_topology(path), "gpu"))["t_collective"] == pytest.approx(61.58e-6)
    d8 = scenario_dict("h200", gpus=8, model="deepseek-r1")
    plain8 = static_values(resolve(scenario("h200", gpus=8, model="deepseek-r1"), "gpu"))["t_collective"]
    for node in d8["nodes"]:
        if node["kind"] == "gpu":
            node["net_allreduce_time"] = {"value": "138.6 us", "source": "A3 Mega nccl-tests, 16 KB"}
    path = tmp_path / "one-host.yaml"
    path.write_text(yaml.safe_dump(d8))
    assert static_values(resolve(load_topology(path), "gpu"))["t_collective"] == pytest.approx(plain8)


def test_fp8_experts_are_split_into_whole_blocks_or_refused():
    """SGLang's FP8 linear method needs each GPU's share of an expert's gate/up columns to be whole 128-wide
    blocks. DeepSeek-R1's 2,048-wide experts: TP16 keeps 128 per GPU (the TP16 deployments load: one block, no
    fallback kernel), TP32 leaves 64 (refused), unless expert parallelism keeps experts over fewer GPUs (ep=2:
    16 per expert). BF16 weights have no blocks; a dense model's FP8 checkpoint is not checked."""
    from sacmodel.hardware.sizing import fp8_block_refusal
    r1 = get_model("deepseek-r1")
    assert fp8_block_refusal(r1, tp=16, ep=1, weights="fp8") is None
    assert "leave 64 per GPU" in fp8_block_refusal(r1, tp=32, ep=1, weights="fp8")
    assert "leave 170.667 per GPU" in fp8_block_refusal(r1, tp=12, ep=1, weights="fp8")
    assert fp8_block_refusal(r1, tp=32, ep=2, weights="fp8") is None
    assert fp8_block_refusal(r1, tp=72, ep=72, weights="fp8") is None
    assert fp8_block_refusal(r1, tp=32, ep=1, weights="bf16") is None
    assert fp8_block_refusal(get_model("llama-3.1-70b"), tp=64, ep=1, weights="fp8") is None
    assert scenario("h200", gpus=32, ep=2, model="deepseek-r1").param("ep") == 2


def test_a_server_over_two_hosts_uses_the_catalog_nics():
    """R1 on 16 x H200: two hosts of 8 (four sockets), collectives over 8 ConnectX-7 per host (8 x 50 GB/s =
    400 GB/s), each all-reduce NCCL's 25.2 us (a tree with LL: 6.8 + 2 x (7 x 0.6 + 5.0)); on 16 x H20, 4 NICs per
    8 GPUs: 200 GB/s. Inside one host, NVLink's 450 GB/s a direction and the scenario's t_collective."""
    t16 = scenario("h200", gpus=16, model="deepseek-r1")
    assert len(t16.gpus) == 16 and len(t16.pools["dram"]) == 4 and "2 hosts of 8" in t16.description
    v16 = static_values(resolve(t16, "gpu"))
    assert v16["link_bw"] == pytest.approx(400e9) and v16["t_collective"] == pytest.approx(25.2e-6)
    v8 = static_values(resolve(scenario("h200", gpus=8, model="deepseek-r1"), "gpu"))
    assert v8["link_bw"] == pytest.approx(450e9) and v8["t_collective"] == pytest.approx(t16.param("t_collective"))
    h20 = static_values(resolve(scenario("h20", gpus=16, model="deepseek-r1", weights="awq-int4"), "gpu"))
    assert h20["link_bw"] == pytest.approx(200e9)


def test_the_network_between_hosts_slows_decode_compared_with_one_nvlink_domain(tmp_path):
    """The same 16 GPUs as one NVLink domain (an edited scenario) decode faster than over two hosts' NICs, and a
    slower NIC is slower still: the hosts' network is on the step's path."""
    import yaml
    d = scenario_dict("h200", gpus=16, model="deepseek-r1")
    tbt = {}
    for label, domain, rate in (("one domain", 16, "400 Gbit/s"), ("two hosts", 8, "400 Gbit/s"),
                                ("slow nic", 8, "25 Gbit/s")):
        for node in d["nodes"]:
            if node["kind"] == "gpu":
                node["nvlink_domain"]["value"], node["nic_rate"]["value"] = domain, rate
        path = tmp_path / f"{domain}-{rate.split()[0]}.yaml"
        path.write_text(yaml.safe_dump(d))
        p = sacmodel.predict(load_topology(path), "gpu", context=2048, output=64, concurrency=16)
        tbt[label] = p.tbt_mean_ms
    assert tbt["one domain"] < tbt["two hosts"] < tbt["slow nic"]


def test_tp64_spans_eight_hosts_and_is_not_one_nvlink_domain():
    # ep=4: each expert over 16 GPUs, 128 columns each (SGLang refuses FP8 experts split over 64, 32 columns)
    t = scenario("h200", gpus=64, tp=64, ep=4, model="deepseek-r1")
    v = static_values(resolve(t, "gpu"))
    # NCCL's tree over 8 hosts with LL: 6.8 + 2 x (7 x 0.6 + 3 x 5.0) = 45.2 us
    assert v["link_bw"] == pytest.approx(400e9) and v["t_collective"] == pytest.approx(45.2e-6)
    p = sacmodel.predict(t, "gpu", context=1024, output=16, concurrency=4)
    assert p.feasible and math.isfinite(p.tbt_mean_ms)


@pytest.mark.parametrize("gpu,kw,msg", [
    ("h200", dict(gpus=12, model="deepseek-r1"), "gpus=12 spans hosts of 8 H200 GPUs .* give a multiple of 8"),
    ("h200", dict(gpus=16, model="deepseek-v3.2", pool="cxl"),
     "pool='cxl' with gpus=16: the built KV pools attach to one host"),
    ("h200", dict(gpus=64, dp=64, model="deepseek-r1"),
     r"dp=64: SGLang's default mem_fraction_static would be -0\.179: it reserves 169,472 MiB .* "
     r"147,456 MiB of it for DP attention with dp=64 \(3 x cuda_graph_max_bs 512 x dp, and 1.5 x more"),
    ("h100", dict(gpus=16, dp=16, model="deepseek-r1"),
     r"does not fit on 16 x H100.* 36,864 MiB of it for DP attention with dp=16"),
    ("h200", dict(gpus=32, model="deepseek-r1"),
     r"tp=32, ep=1, weights='fp8': SGLang refuses FP8 block-quantised experts .* 2048-wide experts over tp / ep = "
     r"32 GPUs leave 64 per GPU .*block_n = 128.* at most 16 GPUs"),
])
def test_sizes_that_cannot_be_built_name_the_rule(gpu, kw, msg):
    with pytest.raises(ValueError, match=msg):
        scenario(gpu, **kw)


def test_the_dp_reserve_by_hand():
    """H200 at DP64: SGLang reserves 3 x 512 x 64 + 1.5 x 512 x 64 = 147,456 MiB for DP attention alone, more
    than the GPU's 143,771 MiB, so its default mem_fraction_static is negative; the error says so."""
    mf = mem_fraction_default(143771, tp=64, dp=64, chunk=8192, cuda_graph_max_bs=512)
    base = 512 + 1.5 * 8192 + 2 * 512 + 1024 * 64 / 8
    assert mf == round((143771 - base - 147456) / 143771, 3) < 0


# ---- contradictory machines, and the types of the arguments ------------------------------------------------
@pytest.mark.parametrize("kw,msg", [
    (dict(model="llama-3.1-70b", ep=2), "ep=2 splits a model's experts .* llama-3.1-70b is dense"),
    (dict(model="deepseek-r1", ep=16, gpus=16), None),                       # 256 experts over 16: fine
    (dict(weights="fp4"), r"weights='fp4' needs FP4 tensor cores \(Blackwell, SM100\).* h200 \(SM90\)"),
    (dict(cxl_devices=0, pool="cxl"), "cxl_devices must be a whole number from 1 to 1024, got 0"),
    (dict(cxl_devices=4), "cxl_devices=4 sizes the cxl pool, but the machine has none"),
    (dict(rdma_nics=2), "rdma_nics=2 sizes the rdma pool, but the machine has none"),
    (dict(pool="rdma", cxl_devices=2), "cxl_devices=2 sizes the cxl pool, but the machine has none"),
    (dict(weights=["fp8"]), r"weights must be one of fp8, bf16, awq-int4, fp4, got \['fp8'\]"),
    (dict(pool=5), "pool must be 'cxl', 'rdma' or 'cxl,rdma', got 5"),
    (dict(kv_dtype=None), "kv_dtype must be one of auto, bf16, fp8, got None"),
    (dict(dp=True), "dp must be a whole number from 1 to 256, got True"),
    (dict(dp=np.bool_(True)), "dp must be a whole number from 1 to 256, got"),
    (dict(gpus=8.0), "gpus must be a whole number"),
    (dict(mem_fraction=float("nan")), r"mem_fraction must be in \(0, 1\)"),
    (dict(mem_fraction=True), r"mem_fraction must be in \(0, 1\)"),
    (dict(piecewise_cuda_graph=1, model="llama-3.1-70b"), "piecewise_cuda_graph must be True or False"),
    (dict(chunked_prefill=4, dp=8), "chunked_prefill=4 is below dp=8"),
    (dict(transfer=["rules"]), "transfer must be one of fitted, rules"),
    (dict(max_total_tokens="100000"), "max_total_tokens must be a whole number"),
])
def test_contradictory_or_mistyped_machines_raise_value_error_naming_argument_value_and_rule(kw, msg):
    if msg is None:
        scenario("h200", **kw)
        return
    with pytest.raises(ValueError, match=msg):
        scenario("h200", **kw)


@pytest.mark.parametrize("gpu", [5, None, ["h200"]])
def test_a_gpu_that_is_not_a_name_is_a_value_error(gpu):
    with pytest.raises(ValueError, match="a GPU is named by a string"):
        scenario(gpu)


def test_numpy_scalars_are_taken_like_python_numbers():
    a = scenario_dict("b200", gpus=np.int64(8), dp=np.int32(8), mem_fraction=np.float64(0.8), pool="cxl",
                      cxl_devices=np.int16(3), piecewise_cuda_graph=np.bool_(False))
    b = scenario_dict("b200", gpus=8, dp=8, mem_fraction=0.8, pool="cxl", cxl_devices=3)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_a_pool_size_given_with_its_pool_is_kept():
    t = scenario("h200", pool="cxl,rdma", cxl_devices=3, rdma_nics=4)
    assert t.param("cxl_devices") == 3 and t.param("rdma_nics") == 4
    t = scenario("h200", pool="cxl")
    assert t.param("cxl_devices") == 2 and not t.has_param("rdma_nics")      # the testbed's two devices


@pytest.mark.parametrize("field,value,msg", [
    ("moe_intermediate_size", 0, "'moe_intermediate_size' must be positive"),
    ("max_position_embeddings", 0, "'max_position_embeddings' must be positive"),
    ("num_experts_per_tok", 0, "'num_experts_per_tok' must be positive"),
    ("num_hidden_layers", -1, "'num_hidden_layers' must be a whole number"),
    ("hidden_size", True, "'hidden_size' must be a whole number"),
    ("hidden_size", np.bool_(True), "'hidden_size' must be a whole number"),
])
def test_a_config_with_a_non_positive_size_is_refused_naming_the_field(field, value, msg):
    with pytest.raises(ValueError, match=msg):
        from_hf_config({**CATALOG_CONFIGS["deepseek-v3"], field: value})


@pytest.mark.parametrize("change,msg", [
    ({"num_key_value_heads": 5}, "num_attention_heads 32 is not a multiple of num_key_value_heads 5"),
    ({"intermediate_size": 0}, "'intermediate_size' must be positive"),
    ({"intermediate_size": None}, "layer\\(s\\) have a dense MLP, but 'intermediate_size' is missing"),
    ({"head_dim": 0}, "'head_dim' must be positive"),
])
def test_an_incoherent_dense_config_is_refused(change, msg):
    with pytest.raises(ValueError, match=msg):
        from_hf_config({**CATALOG_CONFIGS["llama-3.1-8b"], **change})


def test_numpy_sizes_in_a_config_mapping_are_whole_numbers():
    cfg = {k: (np.int64(v) if isinstance(v, int) else v) for k, v in CATALOG_CONFIGS["llama-3.1-8b"].items()}
    assert from_hf_config(cfg, name="x").params_total() == get_model("llama-3.1-8b").params_total()


# ---- hand-computed sizes that catch realistic slips --------------------------------------------------------
def test_the_runtime_reserve_is_2_07_gib_as_the_testbed_logs_show():
    """The testbed's logs: 93.5 GiB free of an H20's 97,871 MiB after distributed init: the reserve is
    2.07 GiB = 2.07 x 2^30 B (not 2.07e9 B, not nothing)."""
    assert RUNTIME_RESERVE == pytest.approx(2.07 * GIB, rel=1e-12)
    assert (97871 * 2 ** 20 - RUNTIME_RESERVE) / GIB == pytest.approx(93.5, abs=0.02)


def test_kv_pool_tokens_by_hand():
    """100 GiB, mem_fraction 0.9, 50 GiB of weights, 1 MiB cells, pages of 64:
    (100 - 2.07) x 0.9 - 50 = 38.137 GiB = 39,052 cells, 39,040 in whole pages."""
    assert kv_pool_tokens(100 * GIB, 0.9, 50 * GIB, 2 ** 20, 64) == 39040
    assert kv_pool_tokens(100 * GIB, 0.9, 50 * GIB, 2 ** 20, 1) == 39052
    assert kv_pool_tokens(10 * GIB, 0.9, 50 * GIB, 2 ** 20, 1) == 0


def test_new_token_ratio_by_hand():
    """SGLang: init 0.7 x schedule_conservativeness, which DP attention scales by 0.3 (server_args.py
    _handle_data_parallelism); the minimum is 0.14 x init, reached over 600 decode steps."""
    assert new_token_ratio_default(False) == pytest.approx((0.7, 0.098, (0.7 - 0.098) / 600))
    assert new_token_ratio_default(True) == pytest.approx((0.21, 0.0294, (0.21 - 0.0294) / 600))
    assert new_token_ratio_default(False, 2.0)[0] == 1.0                        # capped at 1


def test_nvlink_is_per_direction():
    """NVLink 4 on H100/H200/H20: 900 GB/s both directions, 450 GB/s each; NVLink 5 on B200 1.8 TB/s, 900 each;
    H800 400 GB/s, 200 each. The built scenario and the collectives use the per-direction figure."""
    want = {"h100": 450e9, "h200": 450e9, "h20": 450e9, "b200": 900e9, "h800": 200e9}
    for name, bw in want.items():
        assert get_gpu(name).nvlink_bandwidth == bw
    t = scenario("h100", gpus=2, model="qwen3-32b", weights="bf16")
    assert t.node(t.gpus[0])["nvlink_bandwidth"] == 450e9
    assert static_values(resolve(t, "gpu"))["link_bw"] == 450e9


@pytest.mark.parametrize("model,page", [("deepseek-v3.2", 64), ("deepseek-v3", 1), ("deepseek-r1", 1),
                                        ("llama-3.1-70b", 1), ("qwen3-32b", 1)])
def test_page_size_is_64_only_for_deepseek_sparse_attention(model, page):
    """SGLang pages the KV by 64 for DSA (its NSA backend); a dense model, dense MLA included, has page size 1."""
    t = scenario("h200", model=model, weights="fp8")
    assert resolve(t, "gpu").page == page


@pytest.mark.parametrize("gpu,model,kv_dtype,entry", [
    ("h200", "deepseek-r1", "auto", 2 * (512 + 64)),             # BF16 latent + RoPE: 1,152 B
    ("h200", "deepseek-r1", "fp8", 512 + 4 * 4 + 2 * 64),        # FP8 latent, 4 fp32 scales, BF16 RoPE: 656 B
    ("b200", "deepseek-v3.2", "auto", 656),                      # SGLang's rule: FP8 for DSA on Blackwell
    ("b200", "deepseek-v3.2", "bf16", 1152),
    ("h200", "qwen3-32b", "fp8", 2 * 8 * 128),                   # K and V, 8 heads of 128, one byte each
])
def test_a_given_kv_dtype_sets_the_entry_bytes(gpu, model, kv_dtype, entry):
    t = scenario(gpu, model=model, kv_dtype=kv_dtype)
    assert resolve(t, "gpu").entry_bytes == entry


def test_weights_per_gpu_split_over_tp_by_hand():
    """A dense GQA model's weights split over tp (KV heads replicated once there are fewer than GPUs): Llama-8B
    BF16 on 1 GPU is 2 x params; on 2 GPUs half of it."""
    m = get_model("llama-3.1-8b")
    assert weights_per_gpu(m, 2.0, tp=1) == pytest.approx(2 * m.params_total())
    assert weights_per_gpu(m, 2.0, tp=2) == pytest.approx(m.params_total())


def test_given_server_settings_are_kept_and_size_the_reserve():
    """A given chunked_prefill sizes SGLang's activation reserve: H200 at TP8 with 32,768 tokens reserves
    512 + 1.5 x 32,768 + 2 x 512 + 1,024 = 51,712 MiB, mem_fraction_static (143,771 - 51,712) / 143,771 = 0.640;
    given request and token caps reach the configuration as given."""
    t = scenario("h200", model="deepseek-r1", chunked_prefill=32768, max_running_requests=64,
                 max_total_tokens=100_000)
    assert t.param("mem_fraction") == round((143771 - 51712) / 143771, 3) == 0.640
    cfg = resolve(t, "gpu")
    assert (cfg.prefill_chunk, cfg.max_running_requests, cfg.max_total_tokens) == (32768, 64, 100_000)


def test_the_gpu_catalog_by_hand():
    """Datasheet figures (constants.md section 4): HBM bandwidth, memory and generation of each GPU."""
    want = {"h20": (4.0e12, 96e9, 90), "h100": (3.35e12, 80e9, 90), "h800": (3.35e12, 80e9, 90),
            "h200": (4.8e12, 141e9, 90), "b200": (8.0e12, 180e9, 100)}
    for name, (bw, mem, sm) in want.items():
        g = get_gpu(name)
        assert (g.hbm_bandwidth, g.memory_bytes, g.sm_version) == (bw, mem, sm), name
        assert g.memory_mib * 2 ** 20 == pytest.approx(g.memory_bytes, rel=0.07)   # nvidia-smi shows a little more
        assert g.host_gpus == 8 and g.nic_rate == 50e9 and g.nic_latency == 20e-6
    assert get_gpu("h20").nics_per_gpu == 0.5 and get_gpu("h200").nics_per_gpu == 1.0
    assert get_gpu("b200").flops_fp4 == 2 * get_gpu("b200").flops_fp8 and get_gpu("h200").flops_fp4 is None


def test_a_large_gpu_reserves_at_least_10_gib():
    """SGLang keeps at least 10,240 MiB on a GPU of more than 60 GiB: an H200 at TP1 with a 2K chunk would reserve
    512 + 1.5 x 2,048 + 2 x 256 + 128 = 4,224 MiB, so 10,240 it is; an H20-sized 40 GiB GPU keeps its 4,224."""
    assert mem_fraction_default(143771, tp=1, dp=1, chunk=2048, cuda_graph_max_bs=256) == round(
        (143771 - 10240) / 143771, 3) == 0.929
    assert mem_fraction_default(40960, tp=1, dp=1, chunk=2048, cuda_graph_max_bs=256) == round(
        (40960 - 4224) / 40960, 3)


# ---- expert parallelism over DeepEP ----------------------------------------------------------------------------
def test_deepep_copies_and_rates_by_hand():
    """DeepSeek-V3 over EP72 (9 hosts of 8): a token's 8 experts lie on random GPUs. The low-latency kernels send
    one FP8 copy per expert (7,168 x (1 + 4/128) = 7,392 B), 8 x 8/9 of them to other hosts, at 43/50 of the GPU's
    50 GB/s NIC (DeepEP README, EP64 dispatch 43 GB/s), and combine BF16 copies (14,336 B) at 46/50. Each GPU
    sends 1/72 of the iteration's tokens; 58 of 61 layers are MoE layers."""
    from sacmodel.hardware.sizing import a2a_groups, deepep_bytes, remote_copies
    m = get_model("deepseek-v3")
    assert deepep_bytes(m) == (pytest.approx(7392.0), pytest.approx(14336.0))
    remote, local = remote_copies(m, 72, 8, "low_latency")
    assert remote == pytest.approx(8 * 8 / 9) and local == pytest.approx(8 * 7 / 72)
    calls = a2a_groups(m, tp=72, ep=72, domain=8, mode="low_latency", nvlink_bw=450e9, nic_bw=50e9,
                       nic_latency=20e-6, t_collective=10e-6)
    share = 58 / 61
    assert calls[0] == (pytest.approx(share), pytest.approx(share * 64 / 9 * 7392 / 43e9 / 72), 20e-6)
    assert calls[1][1] == pytest.approx(share * 64 / 9 * 14336 / 46e9 / 72)
    # the normal kernels send one copy per other host holding one of the token's experts: 8 x (1 - (7/8)^8)
    assert remote_copies(m, 64, 8, "normal")[0] == pytest.approx(7 * (1 - (7 / 8) ** 8))


def test_deepep_over_more_hosts_never_sends_less_per_token():
    """A law: at a fixed number of GPUs per host, more hosts put more of a token's copies on the network, in both
    modes."""
    from sacmodel.hardware.sizing import remote_copies
    m = get_model("deepseek-v3")
    for mode in ("normal", "low_latency"):
        r = [remote_copies(m, 8 * h, 8, mode)[0] for h in range(1, 33)]
        assert r[0] == 0.0 and all(b >= a for a, b in zip(r, r[1:]))


def test_expert_parallel_instances_across_hosts_build_or_name_sglangs_rule():
    """DP64 / EP64 on 8 hosts of H200: SGLang's default mem_fraction_static reserves 3 x cuda_graph_max_bs x dp
    (+1.5 x above a graph batch of 300) for DP attention, more than the GPU, so it is refused with that rule; with
    a smaller graph batch (LMSYS's decode servers ran --cuda-graph-bs up to 256) or a given mem_fraction it builds.
    EP72 needs EPLB's redundant experts (256 + 32 = 288 = 72 x 4); DeepEP needs DP attention and EP over all GPUs;
    two-batch overlap needs DeepEP."""
    with pytest.raises(TopologyError, match=r"dp=64: SGLang's default mem_fraction_static would be .* DP attention"):
        scenario("h200", gpus=64, dp=64, ep=64)
    t = scenario("h200", gpus=64, dp=64, ep=64, cuda_graph_max_bs=128, moe_a2a="deepep")
    assert len(t.gpus) == 64 and 0 < t.param("mem_fraction") < 1 and t.serving["moe_a2a"].raw == "deepep"
    with pytest.raises(TopologyError, match=r"ep=72 must divide the 256 routed experts"):
        scenario("h100", gpus=72, dp=72, ep=72, model="deepseek-v3", mem_fraction=0.8)
    t72 = scenario("h100", gpus=72, dp=72, ep=72, model="deepseek-v3", mem_fraction=0.8, ep_redundant=32,
                   moe_a2a="deepep", two_batch_overlap=True)
    v = static_values(resolve(t72, "gpu"))
    assert v["tbo"] == 1.0 and v["t_collective"] > 10e-6
    with pytest.raises(TopologyError, match=r"sets ep_size = tp_size"):
        scenario("h100", gpus=16, dp=16, ep=8, model="deepseek-v3", mem_fraction=0.8, moe_a2a="deepep")
    with pytest.raises(TopologyError, match=r"needs --moe-a2a-backend deepep"):
        scenario("h100", gpus=16, dp=16, ep=16, model="deepseek-v3", mem_fraction=0.8, two_batch_overlap=True)


def test_dense_layers_run_data_parallel_with_moe_dense_tp_one():
    """SGLang's --moe-dense-tp-size 1 (LMSYS 2025-05-05, 'Dense FFNs'): under DP attention over all GPUs the dense
    layers' MLP runs on each rank's own tokens (communicator.py, ScatterMode.SCATTERED), so DeepSeek-V3's 3 dense
    layers run no collective: with DeepEP all that is left is its dispatch and combine, without DeepEP the 58 MoE
    layers' gather and scatter. Each GPU reads the dense layers' whole weights; under DeepEP the shared experts'
    too (SGLang builds them with tp_size=1). SGLang takes 1 or None; the model prices 1 with dp = tp."""
    from sacmodel.hardware.sizing import layer_comm
    m = get_model("deepseek-v3")
    kw = dict(tp=16, dp=16, ep=16, domain=8, nvlink_bw=4.5e11, nic_bw=5e10, t_collective=1e-5, nic_latency=2e-5)
    plain = layer_comm(m, a2a="none", deepep_mode="auto", **kw)
    dense_dp = layer_comm(m, a2a="none", deepep_mode="auto", dense_dp=True, **kw)
    assert dense_dp["coll_bytes"] == pytest.approx(plain["coll_bytes"] * 58 / 61, rel=1e-12)
    assert dense_dp["n_coll"] == pytest.approx(plain["n_coll"] * 58 / 61, rel=1e-12)
    deepep = layer_comm(m, a2a="deepep", deepep_mode="low_latency", dense_dp=True, **kw)
    assert deepep["a2a_share"] == pytest.approx(1.0) and deepep["a2a_lat_share"] == pytest.approx(1.0)
    assert layer_comm(m, a2a="deepep", deepep_mode="low_latency", **kw)["a2a_share"] < 1.0
    base = dict(gpus=16, dp=16, ep=16, model="deepseek-v3", mem_fraction=0.85, moe_a2a="deepep")
    v = static_values(resolve(scenario("h100", moe_dense_tp=1, **base), "gpu"))
    assert v["dense_split"] == 1.0 and v["shared_split"] == 1.0
    v = static_values(resolve(scenario("h100", gpus=16, dp=16, ep=16, model="deepseek-v3", mem_fraction=0.85),
                              "gpu"))
    assert v["dense_split"] == v["shared_split"] == 16.0
    with pytest.raises(TopologyError, match=r"moe_dense_tp=2.*takes 1 or None"):
        scenario("h100", moe_dense_tp=2, **base)
    with pytest.raises(TopologyError, match=r"moe_dense_tp=1 with tp=16, dp=8.*give dp=16"):
        scenario("h100", gpus=16, dp=8, model="deepseek-v3", mem_fraction=0.85, moe_dense_tp=1)
    with pytest.raises(TopologyError, match=r"llama-3.1-8b is dense"):
        scenario("h100", gpus=2, dp=2, model="llama-3.1-8b", moe_dense_tp=1)


def test_redundant_experts_take_their_weights():
    """EPLB's 32 replicas of V3's experts add 58 layers x 32 x 3 x 7,168 x 2,048 FP8 params over the 72 GPUs."""
    m = get_model("deepseek-v3")
    wb = 1 + 4 / 128 ** 2
    extra = weights_per_gpu(m, wb, tp=72, dp=72, redundant=32) - weights_per_gpu(m, wb, tp=72, dp=72)
    assert extra == pytest.approx(wb * 58 * 32 * 3 * 7168 * 2048 / 72)


def test_deepep_and_two_batch_overlap_are_sglangs_settings():
    """DeepEP's backend, its mode, two-batch overlap and EPLB's replicas are SGLang's launch settings; the vLLM
    engine is refused with them, naming the first given."""
    for kw in (dict(moe_a2a="deepep"), dict(ep_redundant=32), dict(moe_a2a="deepep", two_batch_overlap=True)):
        with pytest.raises(TopologyError, match=r"is SGLang's setting .* use engine='sglang'"):
            scenario("h100", gpus=16, dp=16, ep=16, model="deepseek-v3", mem_fraction=0.85, engine="vllm", **kw)


@pytest.mark.parametrize("name,billions", [("qwen3-14b", 14.8), ("qwen3-8b", 8.2)])
def test_the_qwen3_catalog_entries_count_their_published_parameters(name, billions):
    """Qwen3-14B and Qwen3-8B (model cards: 14.8 B and 8.2 B parameters, embeddings untied). By hand for 14B:
    40 layers x (attention 5120 x (40 + 2 x 8 + 40) x 128 + MLP 3 x 5120 x 17408) + 2 x 151,936 x 5120 words."""
    m = get_model(name)
    assert m.params_total() / 1e9 == pytest.approx(billions, abs=0.1)
    if name == "qwen3-14b":
        by_hand = 40 * (5120 * (40 + 2 * 8 + 40) * 128 + 3 * 5120 * 17408) + 2 * 151936 * 5120
        assert m.params_total() == pytest.approx(by_hand, rel=0.005)            # norms are the rest


def test_a_14b_model_in_fp8_is_served_by_one_h100():
    t = scenario("h100", gpus=1, model="qwen3-14b", weights="fp8")
    cfg = resolve(t, "gpu")
    assert cfg.tp == 1 and cfg.max_total_tokens > 100_000         # ~15 GB of weights leave ~50 GB of KV
