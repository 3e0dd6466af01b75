"""SGLang's rules on a server's parallel and expert-parallel settings (its ``server_args.py`` checks), shared by
:func:`sacmodel.scenario` (:mod:`.build`) and the cluster file's instances (:mod:`.span`). Each refusal is a
:class:`~sacmodel.hardware.topology.TopologyError` starting ``scenario: <argument>=<value>``."""
from __future__ import annotations

import numbers

from .topology import TopologyError

CUDA_GRAPH_MAX_BS = 4096        # the largest --cuda-graph-max-bs sacmodel takes (scenario() and cluster files)


def _is_bool(v) -> bool:
    """A Python or numpy bool (refused where a number is meant, taken where a flag is)."""
    return isinstance(v, bool) or (type(v).__module__ == "numpy" and type(v).__name__ in ("bool", "bool_"))


def _check_int(name: str, v, lo: int = 1, hi: int = 256) -> int:
    """A whole number in [lo, hi] (numpy integers too; bools are not numbers here)."""
    if _is_bool(v) or not isinstance(v, numbers.Integral) or not lo <= int(v) <= hi:
        raise TopologyError(f"scenario: {name} must be a whole number from {lo} to {hi}, got {v!r}"[:300])
    return int(v)


def _check_choice(name: str, v, choices) -> str:
    if not isinstance(v, str) or v not in choices:
        raise TopologyError(f"scenario: {name} must be one of {', '.join(choices)}, got {v!r}"[:300])
    return v


def _check_flag(name: str, v) -> bool:
    if not _is_bool(v):
        raise TopologyError(f"scenario: {name} must be True or False, got {v!r}"[:300])
    return bool(v)


def check_parallel(m, *, gpus: int, tp: int, dp: int, ep: int, redundant: int = 0, where: str = "") -> None:
    """SGLang's rules on a server's parallel sizes: one server over all its GPUs (tp_size = the GPUs of all its
    nodes), dp_size and ep_size dividing tp_size, experts to split under EP, whole experts per GPU (routed +
    redundant divisible by ep_size). ``where`` describes the GPUs in the message."""
    if tp != gpus:
        more = (f"; {gpus // tp} servers of tp={tp} are {gpus // tp} instances: gpus={tp} here, or a cluster of "
                f"{gpus // tp} instances (replay --instances {gpus // tp})" if tp < gpus and gpus % tp == 0 else "")
        raise TopologyError(f"scenario: tp={tp} must equal gpus={gpus}" + (f" ({where})" if where else "")
                            + " (one server over all its GPUs: SGLang's tp_size spans every GPU of its --nnodes"
                            + more + ")")
    for name, v in (("dp", dp), ("ep", ep)):
        if tp % v:
            raise TopologyError(f"scenario: {name}={v} must divide tp={tp} (SGLang: {name}_size divides tp_size)")
    if ep > 1 and not m.routed_experts:
        raise TopologyError(f"scenario: ep={ep} splits a model's experts over GPUs, but {m.name} is dense (no "
                            "routed experts): use ep=1")
    if ep > 1 and (m.routed_experts + redundant) % ep:
        extra = f" + {redundant} redundant" if redundant else ""
        raise TopologyError(f"scenario: ep={ep} must divide the {m.routed_experts}{extra} routed experts of {m.name} "
                            "(SGLang places whole experts; ep_redundant, --ep-num-redundant-experts, adds EPLB "
                            "replicas to make them divide)")


def ep_settings(m, *, tp: int, dp: int, ep: int, moe_a2a, deepep_mode, two_batch_overlap, ep_redundant,
                moe_dense_tp=None) -> dict:
    """The expert-parallel settings checked against SGLang's rules (server_args.py): DeepEP needs expert
    parallelism over all GPUs (it sets ep_size = tp_size) and DP attention; two-batch overlap needs an
    all-to-all backend; redundant experts need expert parallelism; ``moe_dense_tp`` (``--moe-dense-tp-size``)
    is 1 or None ("moe_dense_tp_size only support 1 and None currently"), and 1 is modelled with DP attention
    over all GPUs (dp = tp), where the dense layers then need no collective."""
    a2a = _check_choice("moe_a2a", moe_a2a, ("none", "deepep"))
    mode = _check_choice("deepep_mode", deepep_mode, ("auto", "normal", "low_latency"))
    tbo = _check_flag("two_batch_overlap", two_batch_overlap)
    red = 0 if ep_redundant == 0 and not _is_bool(ep_redundant) else _check_int("ep_redundant", ep_redundant, 1, 1024)
    if a2a == "deepep":
        if not m.routed_experts:
            raise TopologyError(f"scenario: moe_a2a='deepep' dispatches tokens to experts, but {m.name} is dense")
        if ep != tp or dp != tp:
            raise TopologyError(f"scenario: moe_a2a='deepep' with tp={tp}, dp={dp}, ep={ep}: SGLang's DeepEP runs "
                                f"expert parallelism over all GPUs (it sets ep_size = tp_size) under DP attention; "
                                f"give dp={tp} and ep={tp}")
    elif mode != "auto":
        raise TopologyError(f"scenario: deepep_mode={mode!r} needs moe_a2a='deepep'")
    if tbo and a2a != "deepep":
        raise TopologyError("scenario: two_batch_overlap overlaps DeepEP's dispatch and combine with computation: "
                            "SGLang's --enable-two-batch-overlap needs --moe-a2a-backend deepep (moe_a2a='deepep')")
    if red and ep <= 1:
        raise TopologyError(f"scenario: ep_redundant={red} replicates experts over expert-parallel groups: give ep > 1")
    if moe_dense_tp is not None and (_is_bool(moe_dense_tp) or moe_dense_tp != 1):
        raise TopologyError(f"scenario: moe_dense_tp={moe_dense_tp!r:.20}: SGLang's --moe-dense-tp-size takes 1 "
                            "or None ('moe_dense_tp_size only support 1 and None currently', server_args.py)")
    if moe_dense_tp == 1 and not m.routed_experts:
        raise TopologyError(f"scenario: moe_dense_tp=1 sets the tensor parallelism of a mixture-of-experts model's "
                            f"dense layers (DeepSeek's first_k_dense_replace); {m.name} is dense")
    if moe_dense_tp == 1 and (dp != tp or tp <= 1):
        raise TopologyError(f"scenario: moe_dense_tp=1 with tp={tp}, dp={dp}: the dense layers run data-parallel on "
                            f"each rank's own tokens, modelled under DP attention over all GPUs: give dp={tp} (> 1)")
    return {"moe_a2a": a2a, "deepep_mode": mode, "two_batch_overlap": tbo, "ep_redundant": red,
            "moe_dense_tp": moe_dense_tp}
