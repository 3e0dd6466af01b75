"""``--gpu h200 --gpus 8 --weights fp8 --dp 8 ...``: a machine described in a few words, on every command that
takes ``--scenario`` (:func:`sacmodel.hardware.build.scenario` builds it; the command then runs on it as on a
scenario file).
"""
from __future__ import annotations

import argparse

from ..util.names import ENGINES, FP8_GEMM_BACKENDS
from .types import arg, count, number, tokens

# flag -> keyword of sacmodel.scenario(); the flags a command already has for itself keep their meaning and
# also size the built scenario's pools (--cxl-devices, --rdma-nics) or choose its model (--model)
FLAGS = {
    "--gpu": "gpu", "--gpus": "gpus", "--model": "model", "--weights": "weights", "--kv-dtype": "kv_dtype",
    "--dp": "dp", "--tp": "tp", "--ep": "ep", "--mem-fraction": "mem_fraction",
    "--chunked-prefill": "chunked_prefill", "--max-total-tokens": "max_total_tokens",
    "--max-running-requests": "max_running_requests",
    "--scheduler-recv-interval": "scheduler_recv_interval", "--piecewise-cuda-graph": "piecewise_cuda_graph",
    "--pool": "pool", "--cxl-devices": "cxl_devices",
    "--rdma-nics": "rdma_nics", "--engine": "engine", "--moe-a2a": "moe_a2a", "--deepep-mode": "deepep_mode",
    "--two-batch-overlap": "two_batch_overlap", "--ep-redundant": "ep_redundant",
    "--cuda-graph-max-bs": "cuda_graph_max_bs", "--fp8-gemm-backend": "fp8_gemm_backend",
    "--moe-dense-tp": "moe_dense_tp", "--engine-version": "engine_version",
}


def _fraction(s: str) -> float:
    """A fraction in (0, 1) (``mem_fraction_static``)."""
    v = number(s, lo=0.0, hi=1.0, lo_open=True)
    if v >= 1.0:
        raise argparse.ArgumentTypeError(f"must be below 1, got {s!r}")
    return v


def add_machine(p: argparse.ArgumentParser) -> None:
    """The machine options, on a command that takes ``--scenario`` (those it has already are left as they are)."""
    have = set(p._option_string_actions)
    g = p.add_argument_group("machine (instead of --scenario: build one from the GPU and model catalogs)")

    def add(flag, **kw):
        if flag not in have:
            g.add_argument(flag, default=None, **kw)
    add("--gpu", metavar="NAME", help="GPU of the catalog (h20, h100, h800, h200, b200; see `sacmodel gpus`): "
                                      "build the scenario from it and SGLang's defaults")
    add("--gpus", type=arg(count, hi=256), metavar="N",
        help="GPUs of the server (default 8; more than a host's 8 span hosts, their collectives over the hosts' NICs)")
    add("--model", metavar="NAME|CONFIG", help="catalog model or a Hugging Face config.json (default deepseek-v3.2)")
    add("--weights", choices=("fp8", "bf16", "awq-int4", "fp4"), help="precision of the weights (default fp8; fp4 "
                                                                       "on Blackwell only)")
    add("--kv-dtype", choices=("auto", "bf16", "fp8"), help="KV cache precision (default auto: SGLang's rule)")
    add("--dp", type=arg(count, hi=256), metavar="N", help="data-parallel attention groups (default 1: "
                                                              "tensor-parallel attention)")
    add("--tp", type=arg(count, hi=256), metavar="N", help="tensor-parallel size (default: --gpus)")
    add("--ep", type=arg(count, hi=256), metavar="N",
        help="expert-parallel size (default 1; a mixture-of-experts model only)")
    add("--mem-fraction", type=arg(_fraction), metavar="F",
        help="SGLang's mem_fraction_static (default: SGLang's rule for the GPU)")
    add("--chunked-prefill", type=arg(tokens), metavar="TOKENS", help="SGLang's chunked_prefill_size (default: "
                                                                      "SGLang's rule for the GPU)")
    add("--max-total-tokens", type=arg(tokens), metavar="TOKENS", help="cap on the KV pool per rank (default: "
                                                                       "what the memory holds)")
    add("--max-running-requests", type=arg(count, hi=1 << 20), metavar="N", help="requests per rank at most")
    add("--scheduler-recv-interval", type=arg(count, hi=1 << 16), metavar="N",
        help="SGLang's scheduler_recv_interval: new requests are taken in after N decode iterations (default 1)")
    add("--piecewise-cuda-graph", action="store_true",
        help="run short prefills as SGLang's piecewise CUDA graphs (its default from v0.5.10 on; needs --dp 1 and a "
             "dense-attention model)")
    add("--moe-a2a", choices=("none", "deepep"),
        help="SGLang's --moe-a2a-backend: deepep dispatches tokens to their experts with DeepEP over NVLink and "
             "the hosts' NICs (needs --dp and --ep equal to --gpus; default none)")
    add("--deepep-mode", choices=("auto", "normal", "low_latency"),
        help="DeepEP's kernels with --moe-a2a deepep: normal (a prefill server; no CUDA graph), low_latency (a "
             "decode server), auto (SGLang's default: normal for batches that prefill, low_latency for decode)")
    add("--two-batch-overlap", action="store_true",
        help="SGLang's --enable-two-batch-overlap: two micro-batches overlap communication with computation "
             "(needs --moe-a2a deepep)")
    add("--ep-redundant", type=arg(count, hi=1024), metavar="N",
        help="SGLang's --ep-num-redundant-experts: EPLB replicas, so that experts + replicas divide by --ep")
    add("--moe-dense-tp", type=int, choices=(1,),
        help="SGLang's --moe-dense-tp-size 1: the dense layers run data-parallel on each rank's tokens and need no "
             "collective (needs --dp equal to --gpus)")
    add("--cuda-graph-max-bs", type=arg(count, hi=4096), metavar="N",
        help="SGLang's --cuda-graph-max-bs (default: SGLang's rule for the GPU; it sizes DP attention's reserve)")
    add("--fp8-gemm-backend", choices=FP8_GEMM_BACKENDS,
        help="SGLang's --fp8-gemm-backend for FP8 block-scale GEMMs (default auto: DeepGEMM); flashinfer_trtllm "
             "(Blackwell; what SGLang runs with SGLANG_ENABLE_JIT_DEEPGEMM=0) prefills at FlashInfer's published rate")
    add("--engine-version", metavar="RELEASE",
        help="the SGLang release the server runs, such as 0.5.3 (default: a present one); it selects the kernels "
             "a release ran (the Triton fused MoE's before 0.5.9 on Hopper with FP8 weights)")
    add("--engine", choices=ENGINES, help="the server's engine (default sglang): vllm runs vLLM V1's scheduler, "
                                          "prefill chunks and decodes mixed under max_num_batched_tokens "
                                          "(--chunked-prefill sets it), with vLLM's defaults for the GPU")
    add("--pool", metavar="LIST", help="KV pools to add: cxl and/or rdma, comma-separated (default: none)")
    add("--cxl-devices", type=arg(count, hi=1024), metavar="N", help="CXL devices of the pool (default 2; with --gpu, "
                                                                              "needs --pool cxl)")
    add("--rdma-nics", type=arg(count, hi=1024), metavar="N", help="RDMA NICs of the pool (default 2; with --gpu, "
                                                                            "needs --pool rdma)")


def wants_machine(a) -> bool:
    return getattr(a, "gpu", None) is not None


def apply_machine(a) -> None:
    """With ``--gpu``, build the scenario from the machine flags and run the command on it (by name)."""
    if getattr(a, "command", None) == "scenarios":      # --build prints the machine instead of running on it
        return
    shared = ("--model", "--cxl-devices", "--rdma-nics") + (      # workload commands take these on any scenario
        ("--max-total-tokens", "--max-running-requests") if getattr(a, "_server_limits", False) else ())
    machine_only = [f for f, k in FLAGS.items() if f not in shared and getattr(a, k, None) is not None]
    if not wants_machine(a):
        if machine_only:
            raise ValueError(f"{machine_only[0]} describes a machine: give --gpu too (or use --scenario)")
        return
    from ..hardware.build import scenario
    from ..hardware.scenarios import register_scenario
    kw = {k: getattr(a, k) for f, k in FLAGS.items() if getattr(a, k, None) is not None}
    a.machine_flags = dict(kw)            # what the user gave (calibrate builds its scenario from them)
    # kept to print a command that builds the same machine again (the model is cleared below)
    a.machine_given = {f: getattr(a, k) for f, k in FLAGS.items() if getattr(a, k, None) is not None}
    if getattr(a, "scenario", "sac-testbed") not in (None, "sac-testbed"):
        topo = _carried(a.scenario, kw)
    else:
        topo = scenario(kw.pop("gpu"), **kw)
    a.scenario = register_scenario(topo)
    if hasattr(a, "model"):            # the built scenario holds the model; no second override
        a.model = None


def _carried(spec, kw: dict):
    """``--scenario mine.yaml --gpu b200``: a scenario calibrated by ``sacmodel calibrate`` carried to another
    GPU (:func:`sacmodel.fit.machine.carry`); any other scenario with --gpu is refused."""
    from pathlib import Path

    from ..fit.machine import carry, is_calibrated, machine_of
    from ..hardware.scenarios import as_topology
    refuse = ValueError("give either --scenario or --gpu, not both (--gpu with --scenario carries a scenario "
                        "written by `sacmodel calibrate` to another GPU)")
    if not Path(str(spec)).is_file():
        raise refuse
    topo = as_topology(spec)
    if not is_calibrated(topo):
        raise refuse
    machine = {**machine_of(topo), **{k: v for k, v in kw.items() if k != "gpu"}}
    return carry(topo, kw["gpu"], machine)


def machine_words(a, skip=("--cxl-devices", "--rdma-nics")) -> list[str]:
    """The machine flags as given (``--gpu h100 --gpus 4 --model ...``), except those in ``skip``."""
    given = getattr(a, "machine_given", None)
    if given is None:
        given = {f: getattr(a, k) for f, k in FLAGS.items() if getattr(a, k, None) is not None}
    out = []
    for f, v in given.items():
        if v is False or f in skip:
            continue
        out += [f] if v is True else [f, str(v)]
    return out
