"""GPU catalog: the numbers a cost model needs about a GPU, each with its source.

Throughputs are dense (no 2:4 sparsity); NVLink bandwidth is per GPU and per direction; ``memory_mib`` is what
``nvidia-smi`` reports as total memory (SGLang's default server settings are read from it); ``sms`` is the
streaming-multiprocessor count (a small in-graph kernel's floor does not shrink with it: it is a latency of the
GPU generation, see ``hardware/transfer.py`` and ``docs/model.md``).

Beyond one host: ``host_gpus`` GPUs share one NVLink domain (an HGX/DGX baseboard of 8); a server over more GPUs
spans hosts, and its collectives cross the hosts' network: ``nics_per_gpu`` NICs of ``nic_rate`` (B/s per
direction) each, all of a host's NICs carrying its share of a collective
(:func:`sacmodel.hardware.sizing.collective_rates`; their latency is NCCL's model,
:func:`sacmodel.hardware.sizing.nccl_latency`), and ``nic_latency`` (s), what a small exchange across hosts
takes, added to each of DeepEP's dispatch and combine calls that leaves a host
(:func:`sacmodel.hardware.sizing.a2a_groups`). A scenario file may add ``net_allreduce_time`` (s) to its GPUs:
nccl-tests' small all-reduce over two hosts of its fabric, which scales NCCL's model of every collective across
hosts (:func:`sacmodel.hardware.sizing.fabric_scale`); the catalog leaves it unset (NCCL's own model).
"""
from __future__ import annotations

from dataclasses import dataclass, field

GB, TB, TFLOPS = 1e9, 1e12, 1e12


class GPUError(ValueError):
    """An unknown GPU name."""


@dataclass(frozen=True)
class GPUSpec:
    name: str
    arch: str                 # "hopper" (SM90) or "blackwell" (SM100)
    sm_version: int
    sms: int
    memory_bytes: float
    memory_mib: int           # nvidia-smi memory.total
    hbm_bandwidth: float      # B/s
    flops_bf16: float         # FLOP/s, dense
    flops_fp8: float
    flops_fp4: float | None
    nvlink_bandwidth: float   # B/s per direction per GPU
    host_link_bandwidth: float    # B/s, pinned host <-> GPU copies over PCIe Gen5 x16
    sources: dict = field(default_factory=dict)
    host_gpus: int = 8            # GPUs of one host, joined by one NVLink domain
    nics_per_gpu: float = 1.0     # scale-out NICs per GPU (a fraction: GPUs share a NIC)
    nic_rate: float = 50 * GB     # B/s per direction of one NIC (400 Gb/s)
    nic_latency: float = 20e-6    # s, a small exchange across hosts (each DeepEP call that leaves the host)


_C4 = "constants.md §4"
_HOST = "[assumed] an HGX/DGX host of 8 GPUs on one NVLink switch domain (constants.md §4: DGX B200 1.44 TB / 8)"
_CX7 = ("constants.md 3: ConnectX-7 400 Gb/s; NCCL bus bandwidth across hosts 46-48 GB/s per 400 Gb/s NIC "
        "(NVIDIA/nccl-tests#290, NVIDIA's answer)")
_NET = {"host_gpus": _HOST, "nic_rate": _CX7,
        "nic_latency": "nccl-tests#150: an 8 B all-reduce between two hosts over InfiniBand takes 19-20 us",
        "nics_per_gpu": "[assumed] one ConnectX-7 per GPU as in DGX H100/H200/B200 (DeepEP README: one 400 Gb/s "
                        "CX7 per H800)"}
_PCIE = "constants.md 2c: pinned H2D/D2H over PCIe Gen5 x16, 53-55 GB/s (DeepSpeed PR #8283, H200)"
CATALOG: dict[str, GPUSpec] = {
    "h20": GPUSpec("h20", "hopper", 90, 78, 96 * GB, 97871, 4.0 * TB, 148 * TFLOPS, 296 * TFLOPS, None,
                   450 * GB, 55 * GB,
                   {"memory": f"{_C4} H20 96 GB HBM3", "hbm_bandwidth": f"{_C4} H20 4.0 TB/s",
                    "flops": f"{_C4} H20 148 / 296 TFLOPS BF16 / FP8", "nvlink": f"{_C4} H20 NVLink 900 GB/s "
                    "(both directions)", "sms": "NVIDIA H20 (GH100 with 78 SMs enabled)",
                    "memory_mib": "[assumed] nvidia-smi total of an H20 96 GB; the testbed's logs show 93.5 GiB "
                    "free after distributed init", "host_link": _PCIE,
                    **_NET, "nics_per_gpu": "constants.md 3: Mooncake's SGLang benchmark, 8 x H20-3e with 4 x "
                    "400 GbE ConnectX-7 per node"}, nics_per_gpu=0.5),
    "h100": GPUSpec("h100", "hopper", 90, 132, 80 * GB, 81559, 3.35 * TB, 989 * TFLOPS, 1979 * TFLOPS, None,
                    450 * GB, 55 * GB,
                    {"memory": f"{_C4} H100 SXM 80 GB HBM3", "hbm_bandwidth": f"{_C4} H100 SXM 3.35 TB/s",
                     "flops": f"{_C4} H100 SXM 989 / 1,979 TFLOPS", "nvlink": f"{_C4} 900 GB/s bidirectional",
                     "sms": "NVIDIA H100 SXM5 datasheet (132 SMs)", "memory_mib": "nvidia-smi, H100 SXM 80 GB",
                     "host_link": _PCIE, **_NET}),
    "h800": GPUSpec("h800", "hopper", 90, 132, 80 * GB, 81559, 3.35 * TB, 989 * TFLOPS, 1979 * TFLOPS, None,
                    200 * GB, 55 * GB,
                    {"memory": f"{_C4} H800 SXM 80 GB", "hbm_bandwidth": f"{_C4} H800 3.35 TB/s",
                     "flops": f"{_C4} H800 989 / 1,979 TFLOPS", "nvlink": f"{_C4} H800 NVLink 400 GB/s",
                     "sms": "as H100 SXM (132 SMs)", "memory_mib": "as H100 SXM", "host_link": _PCIE,
                     **_NET, "nics_per_gpu": "constants.md 3: 2 x 8 H800 with 8 x ConnectX-7 per node (Mooncake's "
                     "vLLM benchmark); DeepEP: one 400 Gb/s CX7 per GPU"}),
    "h200": GPUSpec("h200", "hopper", 90, 132, 141 * GB, 143771, 4.8 * TB, 989 * TFLOPS, 1979 * TFLOPS, None,
                    450 * GB, 55 * GB,
                    {"memory": f"{_C4} H200 SXM 141 GB HBM3e", "hbm_bandwidth": f"{_C4} H200 4.8 TB/s",
                     "flops": f"{_C4} H200 989 / 1,979 TFLOPS", "nvlink": f"{_C4} 900 GB/s bidirectional",
                     "sms": "NVIDIA H200 SXM (132 SMs)", "memory_mib": "nvidia-smi, H200 141 GB",
                     "host_link": f"{_C4} H200 measured pinned H2D about 55 GB/s", **_NET}),
    "b200": GPUSpec("b200", "blackwell", 100, 148, 180 * GB, 183359, 8.0 * TB, 2250 * TFLOPS, 4500 * TFLOPS,
                    9000 * TFLOPS, 900 * GB, 55 * GB,
                    {"memory": f"{_C4} B200 180 GB per GPU (DGX B200 1.44 TB / 8)",
                     "hbm_bandwidth": f"{_C4} B200 8 TB/s", "flops": f"{_C4} B200 2.25 / 4.5 PFLOPS dense "
                     "(FP4 [derived]: twice FP8)", "nvlink": f"{_C4} B200 NVLink 5 1.8 TB/s bidirectional",
                     "sms": "NVIDIA B200 (148 SMs)", "memory_mib": "nvidia-smi, B200 180 GB",
                     "host_link": "[assumed] PCIe Gen5 x16 as Hopper (constants.md §4: not verified)", **_NET,
                     "nics_per_gpu": "[assumed] DGX B200: 8 single-port ConnectX-7 400 Gb/s, one per GPU"}),
}
ALIASES = {"h200-sxm": "h200", "h100-sxm": "h100", "b200-sxm": "b200", "h20-96g": "h20"}


def get_gpu(name: str) -> GPUSpec:
    """A GPU of the catalog by name (case-insensitive)."""
    if not isinstance(name, str):
        raise GPUError(f"a GPU is named by a string (one of {', '.join(sorted(CATALOG))}), got {name!r}"[:300])
    key = name.lower()
    key = ALIASES.get(key, key)
    if key not in CATALOG:
        raise GPUError(f"unknown GPU {name!r}; known: {', '.join(sorted(CATALOG))}")
    return CATALOG[key]


def spans_hosts(name: str, gpus: int) -> bool:
    """Whether a server over ``gpus`` GPUs of catalog GPU ``name`` spans hosts: more than one host holds."""
    return gpus > get_gpu(name).host_gpus


def gpu_catalog() -> list[str]:
    return sorted(CATALOG)
