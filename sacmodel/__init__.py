"""sacmodel: predict LLM serving speed when the KV cache lives in disaggregated (CXL / DRAM / RDMA) memory.

Public API (see README): scenarios and topology (:func:`load_topology`, :func:`route`...), a machine in a few words
(:func:`scenario`: a GPU of :func:`gpu_catalog`, a model, weights and parallelism), the model catalog
(:func:`get_model`), cost primitives, the fetch micro-benchmark model (:func:`fetch_latency_us`), the numpy
reference (:mod:`sacmodel.serving.reference`) and its analytic counterpart (:func:`access_counts`), the serving
model (:func:`predict`, :func:`compare`), the solvers (:func:`symbolic`, :func:`breakeven`, :func:`plan`,
:func:`sensitivity`, :func:`sweep`), the throughput-per-GPU vs interactivity frontier (:func:`pareto`), the SGLang
launch command of a configuration (:func:`sglang_command`), trace replay through one instance or a cluster on
one clock (:func:`load_trace`, :func:`replay`, :func:`load_cluster`, generated workloads in
:mod:`sacmodel.workloads`), the prefix hit-rate fast path (:func:`prefix_hit_rate`) and the hosts-per-CXL-pool
study (:func:`hosts_per_pool`).

Names are imported on first use (PEP 562), so ``import sacmodel`` and the command line start fast: sympy,
pint and scipy load only when a function that needs them is called.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> submodule that defines it
_EXPORTS = {
    "hardware.models": ("ModelSpec", "catalog", "from_hf_config", "get_model"),
    "hardware.build": ("scenario", "scenario_yaml"),
    "hardware.gpus": ("GPUSpec", "get_gpu", "gpu_catalog"),
    "hardware.scenarios": ("as_topology", "builtin_scenarios", "load_cluster", "load_topology"),
    "hardware.topology": ("Topology", "TopologyError", "max_min_share"),
    "hardware.units": ("UnitError", "parse_quantity", "ureg"),
    "data.microbench": ("load_microbench",),
    "data.runs": ("load_run", "load_runs"),
    "data.server_logs": ("load_server_log",),
    "data.traces": ("load_trace",),
    "serving.access": ("access_counts", "steady_state", "miss_series", "top_k_overlap"),
    "serving.costs": ("check_dimensions", "compile_expr", "dma_time", "gather_time", "lines_per_entry", "rdma_time",
                      "roofline_time", "symbol_table"),
    "serving.systems": ("BACKENDS", "SYSTEMS", "fetch_latency_us"),
    "serving.predict": ("ConfigError", "Prediction", "compare", "predict", "Requests"),
    "fit.compare": ("compare_runs", "mape_table"),
    "planning.breakeven": ("breakeven",),
    "planning.closed_forms": ("symbolic",),
    "planning.plan": ("max_load", "plan"),
    "planning.pareto": ("ParetoPoint", "ParetoResult", "pareto", "pareto_front"),
    "planning.emit": ("sglang_command",),
    "planning.sensitivity": ("sensitivity",),
    "planning.sweep": ("sweep",),
    "cluster.hitrate": ("prefix_hit_rate",),
    "cluster.replay": ("ClusterPrediction", "replay"),
    "cluster.pool": ("hosts_per_pool",),
    "data.workloads": ("shared_prefix",),
}
_WHERE = {name: mod for mod, names in _EXPORTS.items() for name in names}
_SUBMODULES = {"reference": "serving.reference", "workloads": "workloads"}      # public name -> module

__all__ = ["__version__", *_SUBMODULES, *_WHERE]


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{_SUBMODULES[name]}", __name__)
    else:
        raise AttributeError(f"module 'sacmodel' has no attribute {name!r}")
    globals()[name] = value          # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
