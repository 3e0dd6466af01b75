"""How sure: the error a prediction can be expected to have, from what the validation measured.

The figures are in ``sacmodel/data/error_bands.json`` (each set with its section of ``validation/report.md``;
``tests/serving/test_bands.py`` recomputes them from ``validation/report.json``):

- **testbed** (leave one category out, report section 5): the held-out mean absolute error of TTFT, TBT and
  throughput of each system, pooled, and of each held-out category of runs (a context, concurrency above 96,
  outputs above 1024, one CXL device, the larger buffer, GPU only). A prediction takes the largest of its
  system's pooled error and that of the categories it falls in (the nearest measured context; the others when
  its settings match). The what-if systems, never measured, take their nearest measured system's.
- **other machines** (report section 10): the error of predictions with the testbed's constants carried to
  another GPU, model or weight format by their transfer rules (:mod:`sacmodel.hardware.transfer`): the public
  checks fitted on nothing, the rules-only H200 runs, and the check groups of the same GPU and model; the
  largest that applies, and at least the error 80% of the public checks of the GPU's generation lie within
  (so the band holds at least 80% of them; a generation with no check takes the widest one's x 1.5).

A scenario whose constants were fitted on the testbed but which describes another GPU, weight format or model
(a scenario built by ``sacmodel.scenario(gpu=...)``, ``h200-cxl-large``) gets the testbed's band widened by the
external error, the two added in quadrature. Errors are relative (0.07 = 7%).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

BAND_FILE = Path(__file__).resolve().parents[1] / "data" / "error_bands.json"
METRICS = {"ttft": "ttft_mean_ms", "tbt": "tbt_mean_ms", "throughput": "output_throughput_tok_s"}
CONTEXTS = {16384: "context 16K", 32768: "context 32K", 65536: "context 64K", 131072: "context 128K"}


@lru_cache(maxsize=1)
def band_table() -> dict:
    """The error figures (%), as read from ``sacmodel/data/error_bands.json``."""
    return json.loads(BAND_FILE.read_text())


@dataclass(frozen=True)
class Provenance:
    """Where a scenario's constants were fitted, against the machine it describes."""
    gpu: str                   # catalog name of its GPU, or a description
    weights: str
    model: str
    testbed_class: bool        # the testbed's GPU, weight format and model
    from_testbed: tuple        # calibration constants fitted on the testbed (same value, or a transfer source)
    constants: int             # calibration constants of the scenario


def gpu_name(gpu: dict) -> str:
    """The catalog name of a GPU node by its HBM bandwidth and BF16 and FP8 FLOP/s (within 1%), else a
    description."""
    from ..hardware.gpus import CATALOG
    for name, g in CATALOG.items():
        if all(math.isclose(gpu.get(k, 0.0), getattr(g, k), rel_tol=0.01)
               for k in ("hbm_bandwidth", "flops_bf16", "flops_fp8")):
            return name
    return f"a GPU of {gpu['hbm_bandwidth'] / 1e12:g} TB/s and {gpu['flops_bf16'] / 1e12:g} BF16 TFLOP/s"


@lru_cache(maxsize=64)
def _provenance(key: tuple) -> Provenance:
    gpu, weights, model, cal = key
    fitted = band_table()["testbed"]["fitted_on"]
    testbed_class = (gpu, weights, model) == (fitted["gpu"], fitted["weights"], fitted["model"])
    if testbed_class:
        return Provenance(gpu, weights, model, True, tuple(n for n, _, _ in cal), len(cal))
    from ..hardware.transfer import _testbed_calibration
    ref = _testbed_calibration()

    def from_testbed(name, value, source):      # kernel efficiencies fitted on other machines' runs are not
        s = source.lower()
        if "fitted: kernel efficiencies" in s:
            return False
        return ("transferred" in s or "sac-testbed" in s or "sac testbed" in s
                or (name in ref and math.isclose(value, ref[name][0], rel_tol=1e-6)))
    return Provenance(gpu, weights, model, False, tuple(n for n, v, s in cal if from_testbed(n, v, s)), len(cal))


def provenance(topo) -> Provenance:
    """:class:`Provenance` of a loaded scenario."""
    from .config import weights_of
    cal = tuple((n, p.value, p.source) for n, p in sorted(topo.calibration.items()))
    return _provenance((gpu_name(topo.node(topo.gpus[0])), weights_of(topo), topo.model_name, cal))


def categories(system: str, *, context: int, output: int, concurrency: int, cxl_devices: int,
               device_buffer: int) -> list[str]:
    """The held-out categories of the testbed's runs a prediction falls in: the nearest context (by ratio) and
    whichever of concurrency > 96, output > 1024, one CXL device, a 6144-slot buffer, GPU only match."""
    near = min(CONTEXTS, key=lambda c: abs(math.log(context / c)))
    out = [CONTEXTS[near]]
    if concurrency > 96:
        out.append("concurrency > 96")
    if output > 1024:
        out.append("output > 1024")
    if system == "cxl" and cxl_devices == 1:
        out.append("one CXL device")
    if system != "gpu" and device_buffer >= 6144:
        out.append("buffer 6144 (dc_0502)")
    if system == "gpu":
        out.append("GPU only")
    return out


def testbed_band(system: str, cats: list[str]) -> tuple[dict[str, float], list[str]]:
    """(% per metric, the categories that widened it): the largest of ``system``'s pooled held-out error and
    its error in each of ``cats``."""
    tb = band_table()["testbed"]
    band = {m: tb["systems"][system][m] for m in METRICS}
    used = []
    for c in cats:
        cell = tb["categories"].get(c, {}).get(system)
        if cell is None:
            continue
        wider = False
        for m, x in zip(METRICS, cell):
            if x is not None and x > band[m]:
                band[m], wider = x, True
        if wider:
            used.append(c)
    return band, used


CROSS_HOST = "cross-host"


def generation_coverage(gpu: str, spans_hosts: bool = False) -> tuple[str, dict] | None:
    """(name, % per metric) that holds at least 80% of the public checks of ``gpu``'s generation on one host
    (report section 10); a generation with no check takes the widest generation's figures x
    ``no_check_factor``; a server across hosts (``spans_hosts``) the wider of that and the cross-host checks'.
    None for a GPU outside the catalog."""
    from ..hardware.gpus import CATALOG
    gens = band_table()["external"].get("generations")
    if not gens or gpu not in CATALOG:
        return None
    arch = CATALOG[gpu].arch
    if arch in gens:
        name, cov = f"80% of the {arch} checks", gens[arch]
    else:
        known = [v for k, v in gens.items() if isinstance(v, dict) and k != CROSS_HOST]
        wide = {m: max((v[m] for v in known if v.get(m) is not None), default=None) for m in METRICS}
        name, cov = (f"no {arch} check: the widest generation's x {gens['no_check_factor']:g}",
                     {m: (x * gens["no_check_factor"] if x is not None else None) for m, x in wide.items()})
    cross = gens.get(CROSS_HOST)
    if spans_hosts and isinstance(cross, dict):
        cov = {m: max((x for x in (cov.get(m), cross.get(m)) if x is not None), default=None) for m in METRICS}
        name += " and 80% of the checks across hosts"
    return name, cov


def external_band(gpu: str, model: str, spans_hosts: bool = False) -> tuple[dict[str, float], list[str]]:
    """(% per metric, the sets that set it): the largest external error that applies to ``gpu`` and
    ``model`` (the public checks always; the error 80% of its generation's checks lie within, with the
    cross-host checks' for a server across hosts; the rules-only runs and each check group of the same GPU
    and model, a cross-host group only for a server across hosts)."""
    ex = band_table()["external"]
    sets = [("public checks", ex["checks"])]
    cov = generation_coverage(gpu, spans_hosts)
    if cov:
        sets.append(cov)
    if (ex["rules_only"]["gpu"], ex["rules_only"]["model"]) == (gpu, model):
        sets.append(("rules-only H200 runs", ex["rules_only"]))
    sets += [(name, g) for name, g in ex["groups"].items() if name != "source" and (g["gpu"], g["model"]) == (gpu, model)
             and (spans_hosts or not g.get("spans_hosts", False))]
    band, used = {}, []
    for name, s in sets:
        if any(s.get(m) is not None and s[m] > band.get(m, -1.0) for m in METRICS):
            used.append(name)
        for m in METRICS:
            if s.get(m) is not None and s[m] > band.get(m, -1.0):
                band[m] = s[m]
    return band, used


def own_band(topo) -> tuple[dict[str, float], str] | None:
    """A scenario written by ``sacmodel calibrate`` from benchmark runs carries its own band, the calibration's
    leave-one-run-out error, in its calibrated constants' source (``calibrated: ...; leave-one-run-out error:
    TTFT 12.0%, TPOT 3.1%``; :mod:`sacmodel.fit.machine`): (% per metric, basis), or None. Throughput not
    measured takes TPOT's (in a closed loop it moves with TPOT)."""
    import re
    for p in topo.calibration.values():
        src = p.source or ""
        if src.startswith("calibrated:") and "leave-one-run-out error:" in src:
            found = dict(re.findall(r"(TTFT|TPOT|throughput) ([0-9.]+)%",
                                    src.split("leave-one-run-out error:", 1)[1].split(";")[0]))
            if "TTFT" in found and "TPOT" in found:
                band = {"ttft": float(found["TTFT"]), "tbt": float(found["TPOT"]),
                        "throughput": float(found.get("throughput", found["TPOT"]))}
                return band, ("the calibration's own leave-one-run-out error on the benchmark runs it was fitted "
                              "to (sacmodel calibrate)" + ("" if "throughput" in found else
                                                           "; throughput not measured: TPOT's"))
    return None


def error_band(cfg, *, context: int, output: int, concurrency: int) -> tuple[dict[str, float], str]:
    """The expected relative error of a prediction's TTFT, TBT and throughput (keyed by the
    :class:`Prediction` fields) and one sentence saying where it comes from."""
    own = own_band(cfg.topo)
    if own is not None:
        return {METRICS[m]: x / 100.0 for m, x in own[0].items()}, own[1]
    tb = band_table()["testbed"]
    system = tb["what_if"].get(cfg.system, cfg.system)
    cats = categories(system, context=context, output=output, concurrency=concurrency,
                      cxl_devices=cfg.cxl_devices, device_buffer=cfg.device_buffer)
    band, used = testbed_band(system, cats)
    who = system if system == cfg.system else f"{system}, the nearest measured system to the what-if {cfg.system}"
    basis = f"held-out testbed runs of {who}" + (f" (categories {', '.join(used)})" if used else "") + \
        ", validation/report.md section 5"
    prov = provenance(cfg.topo)
    if not prov.testbed_class and prov.from_testbed:
        ext, sets = external_band(prov.gpu, prov.model, _spans_hosts(cfg))
        band = {m: math.hypot(band[m], ext.get(m, 0.0)) for m in band}
        f = tb["fitted_on"]
        basis += (f"; {len(prov.from_testbed)} of {prov.constants} constants fitted on the testbed "
                  f"({f['gpu'].upper()}, {f['weights']}, {f['model']}) and carried to {_machine(prov)} by transfer "
                  f"rules: widened in quadrature by the error on other machines ({', '.join(sets)}; section 10)")
    elif not prov.testbed_class:
        basis += f"; constants fitted on {_machine(prov)} itself, as the testbed's were"
    return {METRICS[m]: x / 100.0 for m, x in band.items()}, basis


def _spans_hosts(cfg) -> bool:
    """Whether the server's GPUs span hosts: more than one NVLink domain."""
    t = cfg.topo
    return cfg.tp > int(t.node(t.gpus[0]).get("nvlink_domain", len(t.gpus)))


def _machine(prov: Provenance) -> str:
    """What differs from the testbed: ``H200, fp8`` (the GPU, the weight format, the model)."""
    f = band_table()["testbed"]["fitted_on"]
    parts = [prov.gpu.upper() if " " not in prov.gpu else prov.gpu] if prov.gpu != f["gpu"] else []
    parts += [x for x, y in ((prov.weights, f["weights"]), (prov.model, f["model"])) if x != y]
    return ", ".join(parts) or "this machine"
