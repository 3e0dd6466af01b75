"""Describe a machine in a few words: :func:`scenario` builds a scenario from the GPU and model catalogs and
SGLang's defaults, with every number's source, and carries the testbed's fitted constants over by their
transfer rules (:mod:`sacmodel.hardware.transfer`).

The result is a :class:`~sacmodel.hardware.topology.Topology` that every function taking a scenario accepts;
:func:`scenario_yaml` writes the same scenario as a YAML file a user can edit.
"""
from __future__ import annotations

from typing import Any

from .gpus import GPUSpec, get_gpu
from .models import ModelError, get_model
from .sizing import (WEIGHT_BYTES, chunked_prefill_default, cuda_graph_max_bs_default, kv_dtype_default,
                     mem_fraction_default, sglang_refusal)
from .topology import Topology, TopologyError

SGLANG = "SGLang 0.5.9 default"
POOLS = ("cxl", "rdma")
TESTBED = "sac-testbed"


def _num(value: str, source: str) -> dict:
    """A number with its source (a bare count stays a number in the YAML)."""
    try:
        v: Any = int(value)
    except ValueError:
        v = value
    return {"value": v, "source": source}


def _check_int(name: str, v, lo: int = 1, hi: int = 256):
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise TopologyError(f"scenario: {name} must be a whole number from {lo} to {hi}, got {v!r}")
    return v


def scenario(gpu: str, *, gpus: int = 8, model: str = "deepseek-v3.2", weights: str = "fp8",
             kv_dtype: str = "auto", dp: int = 1, tp: int | None = None, ep: int = 1,
             mem_fraction: float | None = None, chunked_prefill: int | None = None,
             max_total_tokens: int | None = None, max_running_requests: int | None = None,
             scheduler_recv_interval: int | None = None, piecewise_cuda_graph: bool = False,
             pool: str | None = None, cxl_devices: int | None = None, rdma_nics: int | None = None,
             transfer: str = "fitted") -> Topology:
    """A scenario of ``gpus`` x ``gpu`` serving ``model`` with SGLang.

    ``weights``: fp8, bf16, awq-int4 or fp4; ``kv_dtype``: auto (SGLang's rule: BF16 on Hopper, FP8 for
    DeepSeek sparse attention on Blackwell), bf16 or fp8; ``dp``: data-parallel attention groups (1: tensor-
    parallel attention over all GPUs); ``tp``: tensor-parallel size (default ``gpus``); ``ep``: expert-parallel
    size. ``scheduler_recv_interval``: SGLang's ``--scheduler-recv-interval`` (the scheduler takes in new
    requests after that many decode iterations; 1, the default, every iteration). ``piecewise_cuda_graph``: run
    prefill batches of up to SGLang's ``piecewise_cuda_graph_max_tokens`` as piecewise CUDA graphs (SGLang's
    default from v0.5.10 on where it applies; off in v0.5.9, whose defaults the rest follows). Unset server settings take
    SGLang's defaults for the machine. ``pool``: ``cxl`` and/or ``rdma``
    (comma-separated) to add a KV pool like the testbed's, with ``cxl_devices`` / ``rdma_nics`` members.
    ``transfer``: how the testbed's constants carry over (:mod:`sacmodel.hardware.transfer`): "fitted" (the
    kernel efficiencies measured for the GPU generation and weights, where known) or "rules" (the rules alone).
    """
    from .scenarios import load_topology
    return load_topology(scenario_dict(gpu, gpus=gpus, model=model, weights=weights, kv_dtype=kv_dtype, dp=dp,
                                       tp=tp, ep=ep, mem_fraction=mem_fraction, chunked_prefill=chunked_prefill,
                                       max_total_tokens=max_total_tokens,
                                       max_running_requests=max_running_requests,
                                       scheduler_recv_interval=scheduler_recv_interval,
                                       piecewise_cuda_graph=piecewise_cuda_graph, pool=pool,
                                       cxl_devices=cxl_devices, rdma_nics=rdma_nics, transfer=transfer))


def scenario_dict(gpu: str, *, gpus: int = 8, model: str = "deepseek-v3.2", weights: str = "fp8",
                  kv_dtype: str = "auto", dp: int = 1, tp: int | None = None, ep: int = 1,
                  mem_fraction: float | None = None, chunked_prefill: int | None = None,
                  max_total_tokens: int | None = None, max_running_requests: int | None = None,
                  scheduler_recv_interval: int | None = None, piecewise_cuda_graph: bool = False,
                  pool: str | None = None, cxl_devices: int | None = None, rdma_nics: int | None = None,
                  transfer: str = "fitted") -> dict:
    """The scenario of :func:`scenario` as a schema-version-1 mapping (what :func:`scenario_yaml` writes)."""
    g = get_gpu(gpu)
    try:
        m = get_model(model)
    except ModelError as exc:
        raise TopologyError(f"scenario: model: {exc}") from None
    _check_int("gpus", gpus)
    tp = _check_int("tp", gpus if tp is None else tp)
    if tp != gpus:
        raise TopologyError(f"scenario: tp={tp} must equal gpus={gpus} (one server over all its GPUs)")
    dp, ep = _check_int("dp", dp), _check_int("ep", ep)
    for name, v in (("dp", dp), ("ep", ep)):
        if tp % v:
            raise TopologyError(f"scenario: {name}={v} must divide tp={tp}")
    if not isinstance(weights, str) or weights not in WEIGHT_BYTES:
        raise TopologyError(f"scenario: weights must be one of {', '.join(WEIGHT_BYTES)}, got {weights!r}")
    if not isinstance(kv_dtype, str) or kv_dtype not in ("auto", "bf16", "fp8"):
        raise TopologyError(f"scenario: kv_dtype must be auto, bf16 or fp8, got {kv_dtype!r}")
    pools = _pools(pool)
    kv = kv_dtype_default(m, g.sm_version) if kv_dtype == "auto" else kv_dtype
    name = f"{g.name}x{gpus}-{m.name}-{weights}" + (f"-dp{dp}" if dp > 1 else "") + (f"-ep{ep}" if ep > 1 else "")
    data: dict[str, Any] = {
        "schema_version": 1, "name": name, "model": model,
        "description": f"{gpus} x {g.name.upper()} serving {m.name} ({weights} weights, {kv} KV, TP{tp}"
                       + (f", DP{dp} attention" if dp > 1 else "") + (f", EP{ep}" if ep > 1 else "")
                       + ") with SGLang; built by sacmodel.scenario()",
        "nodes": _nodes(g, gpus, pools, cxl_devices or 2, rdma_nics or 2),
        "links": _links(g, pools),
        "pools": {"dram": ["dram0", "dram1"], **({"cxl": ["cxl_dev"]} if "cxl" in pools else {}),
                  **({"rdma": ["nic"]} if "rdma" in pools else {})},
        "serving": _serving(g, m, weights, kv, tp=tp, dp=dp, ep=ep, kv_dtype_given=kv_dtype != "auto",
                            mem_fraction=mem_fraction, chunked_prefill=chunked_prefill,
                            max_total_tokens=max_total_tokens, max_running_requests=max_running_requests,
                            scheduler_recv_interval=scheduler_recv_interval,
                            piecewise_cuda_graph=piecewise_cuda_graph,
                            cxl_devices=cxl_devices or 2 if "cxl" in pools else None,
                            rdma_nics=rdma_nics or 2 if "rdma" in pools else None),
    }
    from .transfer import calibration_for
    if transfer not in ("fitted", "rules"):
        raise TopologyError(f"scenario: transfer must be 'fitted' or 'rules', got {transfer!r}")
    data["calibration"] = calibration_for(g, m, weights=weights, dp=dp, fitted=transfer == "fitted")
    return data


def _pools(pool) -> tuple[str, ...]:
    if pool is None or pool == "":
        return ()
    if not isinstance(pool, (str, list, tuple)) or not all(isinstance(p, str) for p in pool):
        raise TopologyError(f"scenario: pool must be cxl and/or rdma (a name, 'cxl,rdma' or a list), got {pool!r}")
    names = tuple(p.strip() for p in (pool.split(",") if isinstance(pool, str) else pool))
    bad = [p for p in names if p not in POOLS]
    if bad:
        raise TopologyError(f"scenario: pool must be cxl and/or rdma, got {bad[0]!r}")
    return names


def _nodes(g: GPUSpec, gpus: int, pools, cxl_devices: int, rdma_nics: int) -> list[dict]:
    src = g.sources
    gpu_fields = {
        "hbm_capacity": _num(f"{g.memory_bytes / 1e9:g} GB", src["memory"]),
        "hbm_bandwidth": _num(f"{g.hbm_bandwidth / 1e12:g} TB/s", src["hbm_bandwidth"]),
        "flops_bf16": _num(f"{g.flops_bf16 / 1e12:g} TFLOP/s", src["flops"]),
        "flops_fp8": _num(f"{g.flops_fp8 / 1e12:g} TFLOP/s", src["flops"]),
        "nvlink_bandwidth": _num(f"{g.nvlink_bandwidth / 1e9:g} GB/s", src["nvlink"] + " [derived: per direction]"),
        "memory_reported": _num(f"{g.memory_mib} MiB", src["memory_mib"]),
        "sms": _num(str(g.sms), src["sms"]),
    }
    if g.flops_fp4:
        gpu_fields["flops_fp4"] = _num(f"{g.flops_fp4 / 1e12:g} TFLOP/s", src["flops"])
    half = max(1, gpus // 2)
    nodes = [{"id": "gpu_s0", "kind": "gpu", "count": half, **gpu_fields}]
    if gpus > half:
        nodes.append({"id": "gpu_s1", "kind": "gpu", "count": gpus - half, **gpu_fields})
    host = "[assumed] a two-socket host like the SAC testbed's (sac-system.md): "
    for i in (0, 1):
        nodes.append({"id": f"rc{i}", "kind": "cpu_root_complex"})
        nodes.append({"id": f"dram{i}", "kind": "host_dram",
                      "capacity": _num("1 TB", host + "2 TB DDR5 over two sockets"),
                      "bandwidth": _num("358 GB/s", host + "8 x DDR5-5600 channels per socket [derived]"),
                      "latency": _num("100 ns", "constants.md 2b local DDR round trip 'sub-100 ns'")})
    if "cxl" in pools:
        nodes += [{"id": "cxl_adapter0", "kind": "cxl_adapter"}, {"id": "cxl_adapter1", "kind": "cxl_adapter"},
                  {"id": "cxl_switch", "kind": "cxl_switch"},
                  {"id": "cxl_dev", "kind": "cxl_device", "count": cxl_devices,
                   "capacity": _num("1 TB", "constants.md 2a: CXL 2.0 memory modules up to 512 GB-1 TB"),
                   "bandwidth": _num("22.5 GB/s", "sac-system.md (Beluga arXiv 2511.20172): about 22.5 GB/s per "
                                                  "device"),
                   "latency": _num("750 ns", "sac-system.md (Beluga): 64 B access about 750 ns")}]
    if "rdma" in pools:
        nodes += [{"id": "nic", "kind": "rdma_nic", "count": rdma_nics,
                   "rate": _num("100 Gbit/s", "sac-system.md: ConnectX-7 100 Gb/s NICs as on the testbed"),
                   "op_cost": _num("0.446 us", "fitted on the sac-testbed micro-benchmark (rdma_total), carried "
                                               "over: a property of the NIC")},
                  {"id": "remote_pool", "kind": "remote_memory",
                   "capacity": _num("1 TB", "sac-system.md RDMA baseline: loopback into host memory")}]
    return nodes


def _links(g: GPUSpec, pools) -> list[dict]:
    pcie = _num(f"{g.host_link_bandwidth / 1e9:g} GB/s", g.sources["host_link"])
    lat = _num("473 ns", "fitted on the sac-testbed micro-benchmark (one-way GPU <-> root complex over PCIe 5.0), "
                         "carried over: PCIe Gen5 as on the testbed")
    links = [{"from": f"gpu_s{i}", "to": f"rc{i}", "protocol": "pcie5", "bandwidth": pcie, "latency": lat}
             for i in (0, 1)]
    ddr = _num("358 GB/s", "[derived] 8 x DDR5-5600 channels")
    links += [{"from": f"rc{i}", "to": f"dram{i}", "protocol": "ddr5", "bandwidth": ddr} for i in (0, 1)]
    links.append({"from": "rc0", "to": "rc1", "protocol": "upi",
                  "bandwidth": _num("160 GB/s", "[assumed] 4 x UPI 2.0 at 20 GT/s, as the testbed's Xeon 8575C"),
                  "latency": _num("60 ns", "constants.md 2b: remote-socket hop of the order of the CXL adder")})
    if "cxl" in pools:
        for i in (0, 1):
            links.append({"from": f"rc{i}", "to": f"cxl_adapter{i}", "protocol": "pcie5",
                          "bandwidth": _num("33 GB/s", "sac-system.md (Beluga): CPU to CXL per adapter 33 GB/s write"),
                          "bandwidth_reverse": _num("46 GB/s", "sac-system.md (Beluga): 46 GB/s read"),
                          "per_flow_bandwidth": _num("26 GB/s", "sac-system.md (Beluga): GPU to CXL about 26 GB/s")})
            links.append({"from": f"cxl_adapter{i}", "to": "cxl_switch", "protocol": "cxl2",
                          "bandwidth": _num("63 GB/s", "constants.md 2a PCIe 5.0 x16 raw per direction")})
        links.append({"from": "cxl_switch", "to": "cxl_dev", "protocol": "cxl2",
                      "bandwidth": _num("31.5 GB/s", "constants.md 2a PCIe 5.0 x8 raw per direction")})
    if "rdma" in pools:
        links.append({"from": "rc0", "to": "nic", "protocol": "pcie5",
                      "bandwidth": _num("63 GB/s", "constants.md 3 ConnectX-7 host interface PCIe Gen5 x16")})
        links.append({"from": "nic", "to": "remote_pool", "protocol": "rdma",
                      "bandwidth": _num("100 Gbit/s", "sac-system.md: 100 Gb/s NICs"),
                      "latency": _num("2 us", "constants.md 3 (RDMA READ round trip order)")})
    return links


def _serving(g: GPUSpec, m, weights: str, kv: str, *, tp: int, dp: int, ep: int, kv_dtype_given: bool,
             mem_fraction, chunked_prefill, max_total_tokens, max_running_requests, cxl_devices,
             rdma_nics, scheduler_recv_interval=None, piecewise_cuda_graph=False) -> dict:
    chunk0 = chunked_prefill_default(g.memory_mib)
    cgmb = cuda_graph_max_bs_default(g.memory_mib, tp)
    s = {
        "tp": _num(str(tp), "given" if tp else SGLANG),
        "dp": _num(str(dp), "given: DP attention groups" if dp > 1 else "given: tensor-parallel attention"),
        "ep": _num(str(ep), "given" if ep > 1 else f"{SGLANG} (ep_size=1)"),
        "weights": _num(weights, "given"),
        "weight_bytes_per_param": _num(f"{WEIGHT_BYTES[weights]:.6g}", f"[derived] {weights} weights with "
                                                                       "their scales (sacmodel.hardware.sizing)"),
        "kv_dtype": _num(kv, "given" if kv_dtype_given else f"{SGLANG}: kv_cache_dtype=auto for {m.name} on SM"
                                                              f"{g.sm_version}"),
        "page_tokens": _num("64" if m.sparse else "1", f"{SGLANG}: page size 64 for DeepSeek DSA, else 1"),
        "cuda_graph_max_bs": _num(str(cgmb), f"{SGLANG} for {g.memory_mib} MiB and tp={tp}"),
        "max_prefill_tokens": _num("16384", f"{SGLANG} (max_prefill_tokens)"),
    }
    if chunked_prefill is None:
        per_rank = chunk0 // dp
        s["prefill_chunk"] = _num(str(per_rank), f"{SGLANG}: chunked_prefill_size {chunk0} for {g.memory_mib} MiB"
                                  + (f", divided by dp={dp} under DP attention" if dp > 1 else ""))
    else:
        s["prefill_chunk"] = _num(str(_check_int("chunked_prefill", chunked_prefill, 1, 1 << 24) // dp),
                                  "given" + (f" (chunked_prefill_size {chunked_prefill} / dp={dp})" if dp > 1 else ""))
    if mem_fraction is None:
        mf = mem_fraction_default(g.memory_mib, tp=tp, dp=dp, chunk=chunked_prefill or chunk0,
                                  cuda_graph_max_bs=cgmb)
        s["mem_fraction"] = _num(f"{mf:g}", f"{SGLANG}: mem_fraction_static for {g.memory_mib} MiB, tp={tp}, dp={dp}")
    else:
        if not (isinstance(mem_fraction, (int, float)) and 0 < mem_fraction < 1):
            raise TopologyError(f"scenario: mem_fraction must be in (0, 1), got {mem_fraction!r}")
        s["mem_fraction"] = _num(f"{mem_fraction:g}", "given")
    if max_total_tokens is not None:
        s["max_total_tokens"] = _num(str(_check_int("max_total_tokens", max_total_tokens, 1, 1 << 31)), "given")
    if max_running_requests is not None:
        s["max_running_requests"] = _num(str(_check_int("max_running_requests", max_running_requests, 1, 1 << 20)),
                                         "given (per data-parallel rank)")
    if scheduler_recv_interval is not None:
        n = _check_int("scheduler_recv_interval", scheduler_recv_interval, 1, 1 << 16)
        why = sglang_refusal(m, dp, recv_interval=n)
        if why:
            raise TopologyError(f"scenario: scheduler_recv_interval={n} {why}")
        s["scheduler_recv_interval"] = _num(str(n), "given (SGLang --scheduler-recv-interval)")
    if piecewise_cuda_graph is not False:
        if piecewise_cuda_graph is not True:
            raise TopologyError(f"scenario: piecewise_cuda_graph must be True or False, got {piecewise_cuda_graph!r}")
        why = sglang_refusal(m, dp, piecewise_graph=True)
        if why:
            raise TopologyError(f"scenario: piecewise_cuda_graph: {why}")
        n, why = (2048, "2048 for an MLA backend") if m.kind == "mla" else (
            int(s["prefill_chunk"]["value"]), "chunked_prefill_size")
        s["piecewise_cuda_graph_max_tokens"] = _num(str(n), f"given: piecewise CUDA graph on; SGLang v0.5.12's "
                                                            f"piecewise_cuda_graph_max_tokens default ({why})")
    if cxl_devices:
        s["cxl_devices"] = _num(str(cxl_devices), "given" if cxl_devices else "as the testbed")
    if rdma_nics:
        s["rdma_nics"] = _num(str(rdma_nics), "given" if rdma_nics else "as the testbed")
    if m.sparse:                                     # HiSparse settings of the testbed's fork
        for k, v, why in (("device_buffer", "4096", "hisparse_config device_buffer_size=4096"),
                          ("buffer_extra_slots", "64", "one page of newest-token slots"),
                          ("host_to_device_ratio", "2", "host pool = 2 x device pool")):
            s[k] = _num(v, f"as on the SAC testbed (server logs: {why})")
    return s


def scenario_yaml(**kw) -> str:
    """:func:`scenario_dict` as YAML text, every number with its unit and source."""
    import copy

    import yaml

    class _Dumper(yaml.SafeDumper):          # every entry written out in full (no &anchors / *aliases)
        def ignore_aliases(self, data):
            return True
    data = copy.deepcopy(scenario_dict(**kw))
    head = ("# Built by sacmodel.scenario(" + ", ".join(f"{k}={v!r}" for k, v in kw.items()) + ").\n"
            "# Edit any number; keep its source up to date. Load with --scenario FILE.\n")
    return head + yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)
