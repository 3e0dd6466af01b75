"""How the constants fitted on the SAC testbed carry over to another machine.

A constant fitted on the testbed (8 x H20, 4-bit AWQ weights, SGLang with DP attention) is a fact about one
kind of thing; :data:`RULES` says which, and so how it transfers:

- **host CPU** (Python launch of an eager kernel, HiSparse's per-step work, the tokenizer, the scheduler's
  copies): carried over unchanged; a host with a faster or slower CPU scales them by its single-thread speed.
- **GPU kernel floor** (``t_graph_kernel``, a small kernel's time inside a CUDA graph): scaled by the SM count
  (``sms`` of the testbed / ``sms`` of the GPU): a small kernel's waves shrink with more SMs at equal clocks.
- **kernel efficiency** (fractions of a peak: ``compute_eff``, ``prefill_eff``, ``moe_eff``): a property of the
  kernel class on a GPU generation. Within the testbed's generation and weight format it carries over; for
  another weight format or generation it comes from :data:`KERNEL_EFFICIENCY` when a measured machine of that
  class is known (fitted on ``shared/data/external``, reported before and after in the validation report),
  else it is carried over and the scenario says so.
- **published kernel** (``hbm_eff``: FlashMLA's dense decode against HBM; ``sparse_prefill_eff``: its sparse
  prefill against the BF16 peak): a vendor's measurement of the kernel, not fitted; carried over.
- **workload** (the score process of the top-k selection): carried over; it belongs to the model and prompts.
- **interconnect** (``t_collective``): carried over between NVLink generations (a small collective's latency is
  set by synchronisation, not bandwidth).
"""
from __future__ import annotations

from functools import lru_cache

from .gpus import GPUSpec, get_gpu

TESTBED = "sac-testbed"
TESTBED_GPU = "h20"
TESTBED_WEIGHTS = "awq-int4"

# constant -> (kind, rule in words)
RULES: dict[str, tuple[str, str]] = {
    "t_graph_kernel": ("GPU kernel floor", "x SMs of the testbed's H20 / SMs of the GPU"),
    "t_collective": ("interconnect", "carried over (NVLink synchronisation latency)"),
    "t_launch": ("host CPU", "carried over (Python and driver time per eager kernel)"),
    "compute_eff": ("kernel efficiency", "carried over within the kernel class (decode attention and GEMV)"),
    "prefill_eff": ("kernel efficiency", "per GPU generation and weight format: KERNEL_EFFICIENCY, else carried"),
    "moe_eff": ("kernel efficiency", "per GPU generation and weight format: KERNEL_EFFICIENCY, else carried"),
    "hbm_eff": ("published kernel", "carried over (a published kernel measurement, not fitted)"),
    "sparse_prefill_eff": ("published kernel", "carried over (a published kernel measurement, the same fraction of "
                                               "the BF16 peak on Hopper and Blackwell)"),
    "t_hs": ("host CPU", "carried over (HiSparse's per-step Python work)"),
    "t_hs_req": ("host CPU", "carried over (HiSparse's per-request work)"),
    "t_hs_admit": ("host CPU", "carried over (HiSparse's admission work per request)"),
    "t_token": ("host CPU", "carried over (the tokenizer's time per prompt token)"),
    "t_request": ("host CPU", "carried over (the serving path outside the engine)"),
    "stage_copy_bw": ("host CPU", "carried over (one CPU thread's copy bandwidth)"),
    "score_correlation": ("workload", "carried over (the model's top-k selection drift)"),
    "drift_settling": ("workload", "carried over"),
    "settling_steps": ("workload", "carried over"),
    "t_kernel": ("GPU kernel floor", "carried over (fixed cost of the gather/swap-in kernel: launch and sync)"),
    "outstanding_lines": ("GPU kernel floor", "carried over (loads in flight of the gather kernel)"),
}

# Kernel efficiencies of a GPU generation and weight format other than the testbed's, fitted on the measured
# runs of shared/data/external (the only constants fitted there; the report shows the predictions before and
# after). Keys: (architecture, weights) -> {constant: value}; "t_graph_kernel_scale" multiplies the SM rule.
KERNEL_EFFICIENCY: dict[tuple[str, str], dict[str, float]] = {
    ("hopper", "fp8"): {"prefill_eff": 0.319, "moe_eff": 0.881, "t_graph_kernel_scale": 1.051},
}
KERNEL_EFFICIENCY_SOURCE = ("fitted: kernel efficiencies of FP8 DeepSeek-R1 on 8 x H200 (SGLang 0.5.9, TP8), the 15 "
                            "runs of shared/data/external/h200-deepseek-r1-sglang-tp8.csv: their TPOT and what an 8K "
                            "prompt adds to the TTFT of a 1K one (sacmodel.fit.transfer.fit_kernel_efficiency)")


@lru_cache(maxsize=1)
def _testbed_calibration() -> dict:
    from .scenarios import as_topology
    t = as_topology(TESTBED)
    return {k: (p.value, p.raw, p.source) for k, p in t.calibration.items()}


def _testbed_sms() -> int:
    return get_gpu(TESTBED_GPU).sms


def transferred(gpu: GPUSpec, weights: str, *, fitted: bool = True) -> dict[str, tuple[float, str]]:
    """Each testbed constant's value (SI) on ``gpu`` with ``weights``, with the rule that gave it.

    ``fitted=False``: the rules alone (what the report calls "before"); True: with :data:`KERNEL_EFFICIENCY`."""
    cal = _testbed_calibration()
    same_class = gpu.arch == get_gpu(TESTBED_GPU).arch and weights == TESTBED_WEIGHTS
    eff, eff_source = {}, KERNEL_EFFICIENCY_SOURCE
    if fitted and not same_class:
        eff = KERNEL_EFFICIENCY.get((gpu.arch, weights), {})
        if not eff:             # another generation with these weights: its kernels are the nearest measured
            near = [(a, v) for (a, w), v in KERNEL_EFFICIENCY.items() if w == weights]
            if near:
                eff = near[0][1]
                eff_source = f"[assumed: the {near[0][0]} {weights} kernel efficiencies] " + KERNEL_EFFICIENCY_SOURCE
    out = {}
    for name, (value, _raw, _src) in cal.items():
        kind, rule = RULES.get(name, ("other", "carried over"))
        if name == "t_graph_kernel":
            value = value * _testbed_sms() / gpu.sms * eff.get("t_graph_kernel_scale", 1.0)
            rule = f"testbed x {_testbed_sms()}/{gpu.sms} SMs" + (" x fitted scale" if "t_graph_kernel_scale" in eff
                                                                 else "")
        elif name in eff:
            value, rule = eff[name], eff_source
        elif kind == "kernel efficiency" and not same_class:
            rule = f"carried over from the testbed ({TESTBED_GPU}, {TESTBED_WEIGHTS}) [no measured {gpu.arch} " \
                   f"{weights} machine]"
        out[name] = (value, rule)
    return out


def calibration_for(gpu: GPUSpec, model, *, weights: str, dp: int, fitted: bool = True) -> dict:
    """The ``calibration:`` section of a built scenario: every testbed constant transferred, with its source."""
    del model, dp            # the rules do not depend on them (kernel counts and collectives are structural)
    cal = _testbed_calibration()
    out = {}
    for name, (value, rule) in transferred(gpu, weights, fitted=fitted).items():
        raw_unit = cal[name][1].split()[1:] if cal[name][1] else []
        out[name] = {"value": _format(value, " ".join(raw_unit)),
                     "source": f"sac-testbed, transferred to {gpu.name.upper()} ({rule})"}
    return out


_SCALE = {"": 1.0, "us": 1e-6, "ms": 1e-3, "ns": 1e-9, "s": 1.0, "GB/s": 1e9, "steps": 1.0}


def _format(value: float, unit: str) -> str:
    scale = _SCALE.get(unit)
    if scale is None:
        return repr(float(value))
    return f"{value / scale:.6g} {unit}".strip()
