"""The SGLang launch command of a configuration (:func:`sglang_command`), from the settings the model used.

Every flag comes from the resolved configuration (:func:`sacmodel.serving.config.resolve`) of the scenario and
system: parallelism, memory, chunking, paging, KV precision, CUDA graphs and, for the pool systems, HiSparse's
settings with the CXL or RDMA pool of the SAC testbed's SGLang fork (magicYang1573/sglang, branch
hisparse-cxl-prefix-cache-opt-rdma). The flag names and the ``--hisparse-config`` keys are those of that
fork's ``server_args.py`` and ``mem_cache/sparsity/factory.py``, and of the ``server_args`` lines of the
testbed's server logs, which the command reproduces (tests/planning/test_emit.py).

What the command leaves to the deployment: the model path when the weights are not a public checkpoint's
(``$MODEL_PATH``, with a comment saying which checkpoint), the device names (``/dev/daxN.0`` and ``mlx5_N`` as
on the testbed), host and port.
"""
from __future__ import annotations

import json
import shlex
import unicodedata

import numpy as np

from ..hardware.sizing import max_running_default, piecewise_graph_applies
from ..serving.config import resolve
from ..serving.systems import check_system
from .common import SolverError, _topology, _with_value
from .pareto import with_dp

LAUNCHER = "python3 -m sglang.launch_server"
HUGE_PAGE = 2 * 1024 * 1024                  # the fork maps CXL memory in 2 MiB pages
HISPARSE_DEFAULT_RATIO = 2                   # factory.py: host_to_device_ratio defaults to 2
# public checkpoints of the catalog models: name -> (Hugging Face repository, the weights' own precision)
CHECKPOINTS = {
    "deepseek-v3.2": ("deepseek-ai/DeepSeek-V3.2", "fp8"), "deepseek-v3.2-exp": ("deepseek-ai/DeepSeek-V3.2-Exp", "fp8"),
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3", "fp8"), "deepseek-v3-0324": ("deepseek-ai/DeepSeek-V3-0324", "fp8"),
    "deepseek-r1": ("deepseek-ai/DeepSeek-R1", "fp8"), "deepseek-r1-0528": ("deepseek-ai/DeepSeek-R1-0528", "fp8"),
    "llama-3.1-70b": ("meta-llama/Llama-3.1-70B-Instruct", "bf16"),
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B-Instruct", "bf16"), "qwen3-32b": ("Qwen/Qwen3-32B", "bf16"),
    "qwen3-14b": ("Qwen/Qwen3-14B", "bf16"), "qwen3-8b": ("Qwen/Qwen3-8B", "bf16"),
}
WEIGHTS_TEXT = {"fp8": "FP8", "bf16": "BF16", "awq-int4": "4-bit AWQ", "fp4": "NVFP4"}
KV_DTYPE = {"bf16": "bfloat16", "fp8": "fp8_e4m3"}
WHAT_IFS = ("cxl-prefetch", "rdma-topk")
SETTINGS = ("dp", "cxl_devices", "rdma_nics", "device_buffer", "max_total_tokens", "max_running_requests",
            "model_path", "disaggregation_mode", "transfer_backend")
ROLES = ("prefill", "decode")
# SGLang's --disaggregation-transfer-backend default (server_args.py: disaggregation_transfer_backend="mooncake")
TRANSFER_BACKENDS = ("mooncake", "nixl")


def sglang_command(scenario, system: str, **settings) -> str:
    """The SGLang launch command (text, comment lines first) serving ``system`` on ``scenario``.

    ``settings`` are the server's, as :func:`sacmodel.predict` and :func:`sacmodel.pareto` take them: ``dp``
    (attention groups on the same GPUs), ``cxl_devices``, ``rdma_nics``, ``device_buffer`` (slots per request
    and layer), ``max_total_tokens`` (KV pool tokens per rank), ``max_running_requests`` (per rank), and
    ``model_path`` (default: the public checkpoint of the model and weights, else ``$MODEL_PATH``).
    ``disaggregation_mode``: "prefill" or "decode" for one role of a disaggregated deployment (SGLang's
    ``--disaggregation-mode``, with ``--disaggregation-transfer-backend`` ``transfer_backend``, "mooncake" by
    default as in SGLang). A server over several hosts carries ``--nnodes``, ``--node-rank 0`` and
    ``--dist-init-addr "$DIST_INIT_ADDR"`` (host 0's address and port): the command of host 0; host ``i`` runs
    it with ``--node-rank i``.
    """
    args, notes = sglang_args(scenario, system, **settings)
    lines, cur = [], LAUNCHER
    for flag, value in args.items():
        word = flag if value is True else f"{flag} {_quote(value)}"
        if len(cur) + len(word) > 100:
            lines.append(cur + " \\")
            cur = "  "
        cur += ("" if cur == "  " else " ") + word
    lines.append(cur)
    return "\n".join([f"# {n}" for n in notes] + lines)


def _quote(value) -> str:
    """A shell word; ``$MODEL_PATH`` and ``$DIST_INIT_ADDR`` stay variables the shell expands."""
    v = str(value)
    return f'"{v}"' if v in ("$MODEL_PATH", "$DIST_INIT_ADDR") else shlex.quote(v)


# each integer setting's range: SGLang indexes the KV pool with int32 (req_to_token), the CLI's own bounds
RANGES = {"dp": 256, "cxl_devices": 1024, "rdma_nics": 1024, "device_buffer": 16 * 1024 ** 2,
          "max_total_tokens": 2 ** 31 - 1, "max_running_requests": 1 << 20}
FORK_NOTE = ("the {key} key of --hisparse-config exists only in the SAC fork of SGLang",
             "(magicYang1573/sglang, branch hisparse-cxl-prefix-cache-opt-rdma): upstream SGLang does not take it")


def check_settings(settings: dict) -> None:
    """Refuse what a pasted command must not carry: unknown settings, integers out of range, control
    characters in a model path (a line break would end the command and start another)."""
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise SolverError(f"sglang_command: unknown setting(s) {', '.join(unknown)}; known: {', '.join(SETTINGS)}")
    for k, hi in RANGES.items():
        v = settings.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= hi:
            raise SolverError(f"sglang_command: {k}={v!r}: must be a whole number from 1 to {hi:,}")
    path = settings.get("model_path")
    if path is not None:
        safe_text("model_path", path)
    for k, choices in (("disaggregation_mode", ROLES), ("transfer_backend", TRANSFER_BACKENDS)):
        v = settings.get(k)
        if v is not None and v not in choices:
            raise SolverError(f"sglang_command: {k}={str(v)[:40]!r}: must be one of {', '.join(choices)}")
    if settings.get("transfer_backend") is not None and settings.get("disaggregation_mode") is None:
        raise SolverError("sglang_command: transfer_backend moves the KV between a prefill and a decode server: "
                          "give disaggregation_mode too")


def safe_text(what: str, value) -> str:
    """``value`` as text if it has no control characters and a sane length, else a SolverError naming it."""
    v = str(value)
    bad = next((c for c in v if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")), None)
    if bad is not None or not v.strip() or len(v) > 1024:
        why = f"the control character {bad!r}" if bad is not None else "not a usable name (empty or too long)"
        raise SolverError(f"sglang_command: {what} {v[:80]!r}: {why}; a launch command cannot carry it")
    return v


def sglang_args(scenario, system: str, **settings) -> tuple[dict, list[str]]:
    """The launch flags (flag -> value, True for a switch), in the command's order, and the comment lines."""
    check_system(system)
    check_settings(settings)
    if system in WHAT_IFS:
        raise SolverError(f"{system} is a what-if that the SGLang fork does not implement: no launch command")
    t = _topology(scenario)
    if "engine" in t.serving and t.serving["engine"].raw == "vllm":
        raise SolverError(f"{t.name} runs vLLM (engine vllm): SGLang's launch command would describe another server")
    if settings.get("dp") is not None:
        t = with_dp(t, settings["dp"])
    for key, pool in (("cxl_devices", "cxl"), ("rdma_nics", "rdma")):   # a larger pool, grown as plan does
        n = settings.get(key)
        if isinstance(n, int) and not isinstance(n, bool) and len(t.pools.get(pool, [])) < n <= 1024:
            t, _ = _with_value(t, key, n)
    cfg = resolve(t, system, **{k: settings.get(k) for k in ("cxl_devices", "rdma_nics", "device_buffer",
                                                             "max_total_tokens", "max_running_requests")})
    path, notes = _model_path(t, cfg, settings.get("model_path"))
    args: dict = {"--model-path": path, "--trust-remote-code": True, "--tp-size": cfg.tp}
    if cfg.dp > 1:
        args.update({"--dp-size": cfg.dp, "--enable-dp-attention": True})
        if "load_balance" in t.serving:
            args["--load-balance-method"] = t.serving["load_balance"].raw
    args["--ep-size"] = cfg.ep
    args.update(_expert_args(t))
    args.update(_memory_args(t, cfg, settings))
    quant = _quantization(t, cfg)
    if quant:
        args["--quantization"] = quant
    if "fp8_gemm_backend" in t.serving and t.serving["fp8_gemm_backend"].raw != "auto":
        args["--fp8-gemm-backend"] = t.serving["fp8_gemm_backend"].raw
    if cfg.hisparse:
        args["--enable-hisparse"] = True
        args["--hisparse-config"] = json.dumps(hisparse_config(cfg), separators=(",", ":"))
    role = settings.get("disaggregation_mode")
    if role:
        args["--disaggregation-mode"] = role
        args["--disaggregation-transfer-backend"] = settings.get("transfer_backend") or "mooncake"
    hosts = -(-len(t.gpus) // int(t.node(t.gpus[0]).get("nvlink_domain", len(t.gpus))))
    if hosts > 1:
        args.update({"--nnodes": hosts, "--node-rank": 0, "--dist-init-addr": "$DIST_INIT_ADDR"})
        notes = [*notes, f"one server over {hosts} hosts: host 0's command; run it on each host with its own "
                         f"--node-rank 0..{hosts - 1}, DIST_INIT_ADDR=HOST0:PORT (host 0's address) on all"]
    head = (f"sacmodel: {system} on {safe_text('scenario name', t.name)} "
            f"({safe_text('model name', cfg.model.name)}, {cfg.weights} weights, {cfg.tp} GPUs, dp {cfg.dp})")
    pool = {"cxl": "cxl", "rdma": "rdma_pool"}.get(cfg.system) if cfg.hisparse else None
    fork = [FORK_NOTE[0].format(key=pool), FORK_NOTE[1]] if pool else []
    return args, [head, *notes, *fork]


def _expert_args(t) -> dict:
    """DeepEP, its mode, two-batch overlap and EPLB's redundant experts, as the scenario gives them."""
    out: dict = {}
    if "moe_a2a" in t.serving and t.serving["moe_a2a"].raw == "deepep":
        out["--moe-a2a-backend"] = "deepep"
        out["--deepep-mode"] = t.serving["deepep_mode"].raw if "deepep_mode" in t.serving else "auto"
    if t.has_param("two_batch_overlap") and t.param("two_batch_overlap"):
        out["--enable-two-batch-overlap"] = True
    if t.has_param("ep_redundant") and t.param("ep_redundant"):
        out["--ep-num-redundant-experts"] = int(t.param("ep_redundant"))
    if t.has_param("moe_dense_tp") and t.param("moe_dense_tp") == 1:
        out["--moe-dense-tp-size"] = 1
    return out


def _memory_args(t, cfg, settings) -> dict:
    """Memory, chunking, paging, KV precision and CUDA-graph flags (SGLang's launch values, not per rank)."""
    out = {"--mem-fraction-static": f"{t.param('mem_fraction'):g}",
           # SGLang divides the launch value by dp under DP attention; the model holds the per-rank value
           "--chunked-prefill-size": cfg.prefill_chunk * cfg.dp,
           "--page-size": cfg.page,
           "--kv-cache-dtype": KV_DTYPE[t.serving["kv_dtype"].raw if "kv_dtype" in t.serving else "fp8"],
           "--cuda-graph-max-bs": cfg.graph_bs}
    if cfg.limits.get("setting") is not None:            # max_total_tokens is per rank, as SGLang takes it
        out["--max-total-tokens"] = int(cfg.limits["setting"])
    default = max_running_default(cfg.max_total_tokens, cfg.model.max_position or 163840)
    if settings.get("max_running_requests") is not None or cfg.max_running_requests != default:
        out["--max-running-requests"] = cfg.max_running_requests * cfg.dp    # SGLang divides it by dp
    if cfg.recv_interval > 1:
        out["--scheduler-recv-interval"] = cfg.recv_interval
    # the fork runs short prefills as piecewise CUDA graphs by default where SGLang can (dp 1, dense attention)
    if cfg.pcg_tokens:
        out["--piecewise-cuda-graph-max-tokens"] = cfg.pcg_tokens
    elif piecewise_graph_applies(cfg.model, cfg.dp):
        out["--disable-piecewise-cuda-graph"] = True
    return out


def hisparse_config(cfg) -> dict:
    """``--hisparse-config`` of a pool system: top-k, device buffer, host ratio, the CXL or RDMA pool."""
    hc: dict = {"top_k": cfg.model.topk, "device_buffer_size": cfg.device_buffer}
    ratio = cfg.topo.param("host_to_device_ratio") if cfg.topo.has_param("host_to_device_ratio") else 2
    if ratio != HISPARSE_DEFAULT_RATIO:
        hc["host_to_device_ratio"] = int(ratio) if float(ratio).is_integer() else ratio
    if cfg.system == "cxl":
        t = cfg.topo
        devs = t.pools["cxl"][:cfg.cxl_devices]
        mapped = min(t.node(d)["capacity"] for d in devs)
        if t.has_param("cxl_map_bytes"):
            mapped = min(mapped, t.param("cxl_map_bytes"))
        mapped = int(mapped // HUGE_PAGE * HUGE_PAGE)
        if len(devs) == 1:
            hc["cxl"] = {"enabled": True, "dev_path": "/dev/dax0.0", "map_bytes": mapped}
        else:
            hc["cxl"] = {"enabled": True, "dev_paths": [f"/dev/dax{i}.0" for i in range(len(devs))],
                         "map_bytes_per_device": mapped}
    elif cfg.system == "rdma":
        hc["rdma_pool"] = {"enabled": True, "local_ratio": 0.0,
                           "ib_devs": [f"mlx5_{i}" for i in range(cfg.rdma_nics)]}
    return hc


def _model_path(t, cfg, given) -> tuple[str, list[str]]:
    """The checkpoint to load, and a comment when the command cannot name it."""
    if given:
        return str(given), []
    name = t.model_name
    if str(name).endswith("config.json"):
        import os
        return os.path.dirname(os.path.abspath(name)), []
    repo, native = CHECKPOINTS.get(str(name).lower(), (None, None))
    if repo and (cfg.weights == native or (cfg.weights == "fp8" and native == "bf16")):
        return repo, []
    what = WEIGHTS_TEXT.get(cfg.weights, cfg.weights)
    return "$MODEL_PATH", [f"MODEL_PATH: a {what} checkpoint of {cfg.model.name} (SGLang reads its quantization "
                           "from the checkpoint's config)"]


def _quantization(t, cfg) -> str | None:
    """``--quantization fp8`` where FP8 weights are quantized at load time from a BF16 checkpoint; None where
    the checkpoint carries its format (the testbed's AWQ checkpoint ran with quantization=None)."""
    _, native = CHECKPOINTS.get(str(t.model_name).lower(), (None, None))
    return "fp8" if cfg.weights == "fp8" and native == "bf16" else None


def point_command(result, point) -> str:
    """The launch command of a point of a :func:`sacmodel.pareto` result (its server settings)."""
    return sglang_command(result.topology, point.system, **point.settings)


def plan_command(scenario, result, workload: dict) -> str:
    """The launch command of a :func:`sacmodel.plan` answer: its scenario with the planned value."""
    if not result.found:
        raise SolverError("no configuration met the SLO: there is no launch command to print")
    t, kw = _with_value(_topology(scenario), result.vary, result.value)
    settings = {k: v for k, v in {**workload, **kw}.items() if k in SETTINGS and v is not None}
    return sglang_command(t, result.system, **settings)
