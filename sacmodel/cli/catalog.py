"""Commands that list what is built in: ``scenarios`` (and the scenario template) and ``models``."""
from __future__ import annotations

import sys

from .common import _parser, add_json, console, print_json, table, write_csv


def cmd_scenarios(a):
    if a.build:
        _build(a)
        return
    if a.template:
        from ..hardware.template import TEMPLATE
        sys.stdout.write(TEMPLATE)
        return
    from ..hardware.scenarios import builtin_scenarios, load_topology, resolve_scenario_path
    from ..util.names import PRICE_FILE
    rows = []
    for n in builtin_scenarios():
        path = resolve_scenario_path(n)
        if path.resolve() == PRICE_FILE:          # the price table shares the package data folder
            continue
        t = load_topology(path)
        rows.append({"name": n, "model": t.model_name, "gpus": len(t.gpus), "path": str(path),
                     "description": t.description})
    if a.csv:
        write_csv(a.csv, list(rows[0]) if rows else ["name"], [list(r.values()) for r in rows])
    if a.json:
        print_json(rows)
    elif a.csv != "-":
        for r in rows:
            print(f"{r['name']}: {r['description']}")
        print("\nGive --scenario NAME or a YAML path; `sacmodel scenarios --template > mine.yaml` starts your own.")


def _build(a) -> None:
    """``scenarios --build --gpu ...``: the YAML of the machine the flags describe, on standard output."""
    from .machine import FLAGS
    if getattr(a, "gpu", None) is None:
        raise ValueError("--build needs --gpu (and optionally --gpus, --model, --weights, --dp, ...)")
    from ..hardware.build import scenario_yaml
    kw = {k: getattr(a, k) for k in FLAGS.values() if getattr(a, k, None) is not None}
    sys.stdout.write(scenario_yaml(**kw))


def cmd_gpus(a):
    from ..hardware.gpus import get_gpu, gpu_catalog
    rows = []
    for n in gpu_catalog():
        g = get_gpu(n)
        rows.append({"name": n, "arch": g.arch, "sms": g.sms, "memory_gb": g.memory_bytes / 1e9,
                     "hbm_tb_s": g.hbm_bandwidth / 1e12, "bf16_tflops": g.flops_bf16 / 1e12,
                     "fp8_tflops": g.flops_fp8 / 1e12, "nvlink_gb_s": g.nvlink_bandwidth / 1e9})
    if a.csv:
        write_csv(a.csv, list(rows[0]), [list(r.values()) for r in rows])
    if a.json:
        print_json(rows)
        return
    if a.csv == "-":
        return
    cols = ("name", "arch", "SMs", "HBM GB", "HBM TB/s", "BF16 TF/s", "FP8 TF/s", "NVLink GB/s")
    t = table("GPU catalog (dense FLOP/s; NVLink per direction)", cols, right=cols[2:])
    for r in rows:
        t.add_row(r["name"], r["arch"], str(r["sms"]), f"{r['memory_gb']:g}", f"{r['hbm_tb_s']:g}",
                  f"{r['bf16_tflops']:g}", f"{r['fp8_tflops']:g}", f"{r['nvlink_gb_s']:g}")
    con = console()
    con.print(t)
    con.print("Use one with --gpu NAME on any command that takes --scenario, or sacmodel.scenario(NAME, ...).")


def cmd_models(a):
    from ..hardware.models import catalog, get_model
    rows = []
    for n in catalog():
        m = get_model(n)
        rows.append({"name": n, "attention": m.kind + (" + DSA" if m.sparse else ""), "layers": m.layers,
                     "params_b": round(m.params_total() / 1e9, 1), "active_b": round(m.params_active() / 1e9, 1),
                     "kv_bytes_fp8": m.kv_bytes("fp8"), "kv_bytes_bf16": m.kv_bytes("bf16"), "topk": m.topk or None})
    if a.csv:
        write_csv(a.csv, list(rows[0]), [list(r.values()) for r in rows])
    if a.json:
        print_json(rows)
        return
    if a.csv == "-":
        return
    t = table("model catalog (KV: bytes per token per layer)",
              ("name", "attention", "layers", "params B", "active B", "KV fp8", "KV bf16", "top-k"),
              right=("layers", "params B", "active B", "KV fp8", "KV bf16", "top-k"))
    for r in rows:
        t.add_row(r["name"], r["attention"], str(r["layers"]), f"{r['params_b']:.0f}", f"{r['active_b']:.1f}",
                  f"{r['kv_bytes_fp8']:g}", f"{r['kv_bytes_bf16']:g}", str(r["topk"] or "-"))
    con = console()
    con.print(t)
    con.print("Any Hugging Face config.json works too, e.g. --model examples/deepseek-v3.2/config.json")


# ---- command-line options -----------------------------------------------------------------------
def register(sub) -> None:
    """Add ``scenarios``, ``models`` and ``gpus``."""
    _register_scenarios(sub)
    _register_models(sub)
    _register_gpus(sub)


def _register_scenarios(sub) -> None:
    p = _parser(sub, "scenarios", "list the built-in scenarios, print a scenario template, or build one",
                ["sacmodel scenarios", "sacmodel scenarios --template > mine.yaml   # edit, then --scenario mine.yaml",
                 "sacmodel scenarios --build --gpu h200 --dp 8 --weights fp8 > h200.yaml"])
    p.add_argument("--template", action="store_true",
                   help="print a documented scenario YAML (every field explained) to start your own hardware")
    p.add_argument("--build", action="store_true",
                   help="print the scenario the machine options below describe (--gpu ...), with every number's "
                        "source, to edit and use with --scenario")
    add_json(p)
    from .machine import add_machine
    add_machine(p)
    p.set_defaults(func=cmd_scenarios)


def _register_gpus(sub) -> None:
    p = _parser(sub, "gpus", "list the GPU catalog", ["sacmodel gpus", "sacmodel gpus --json"])
    add_json(p)
    p.set_defaults(func=cmd_gpus)


def _register_models(sub) -> None:
    p = _parser(sub, "models", "list the model catalog", ["sacmodel models", "sacmodel models --json"])
    add_json(p)
    p.set_defaults(func=cmd_models)
