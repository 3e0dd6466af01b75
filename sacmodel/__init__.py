"""sacmodel: predict LLM serving speed when the KV cache lives in disaggregated (CXL / DRAM / RDMA) memory.

Public API (see README): scenarios and topology (:func:`load_topology`, :func:`route`...), the model catalog
(:func:`get_model`), cost primitives, the fetch micro-benchmark model (:func:`fetch_latency_us`), the numpy
reference (:mod:`sacmodel.reference`) and its analytic counterpart (:func:`access_counts`), the serving
model (:func:`predict`, :func:`compare`), the solvers (:func:`symbolic`, :func:`breakeven`, :func:`plan`,
:func:`sensitivity`, :func:`sweep`) and trace replay (:func:`load_trace`, :func:`replay`).

Names are imported on first use (PEP 562), so ``import sacmodel`` and the command line start fast: sympy,
pint and scipy load only when a function that needs them is called.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> submodule that defines it
_EXPORTS = {
    "access": ("access_counts", "steady_state", "miss_series", "top_k_overlap"),
    "costs": ("check_dimensions", "compile_expr", "dma_time", "gather_time", "lines_per_entry", "rdma_time",
              "roofline_time", "symbol_table"),
    "measured": ("compare_runs", "load_microbench", "load_run", "load_runs", "load_server_log", "mape_table"),
    "models": ("ModelSpec", "catalog", "from_hf_config", "get_model"),
    "serving": ("ConfigError", "Prediction", "compare", "predict", "Requests"),
    "systems": ("BACKENDS", "SYSTEMS", "as_topology", "fetch_latency_us"),
    "solvers": ("breakeven", "max_load", "plan", "sensitivity", "sweep", "symbolic"),
    "topology": ("Topology", "TopologyError", "builtin_scenarios", "load_topology", "max_min_share"),
    "traces": ("load_trace", "replay"),
    "units": ("UnitError", "parse_quantity", "ureg"),
}
_WHERE = {name: mod for mod, names in _EXPORTS.items() for name in names}
_SUBMODULES = ("reference",)

__all__ = ["__version__", *_SUBMODULES, *_WHERE]


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'sacmodel' has no attribute {name!r}")
    globals()[name] = value          # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
