"""sacmodel: predict LLM serving speed when the KV cache lives in disaggregated (CXL / DRAM / RDMA) memory.

Public API (see README): scenarios and topology (:func:`load_topology`, :func:`route`...), the model catalog
(:func:`get_model`), cost primitives, the fetch micro-benchmark model (:func:`fetch_latency_us`), the numpy
reference (:mod:`sacmodel.reference`) and its analytic counterpart (:func:`access_counts`), the serving
model (:func:`predict`, :func:`compare`), the solvers (:func:`symbolic`, :func:`breakeven`, :func:`plan`,
:func:`sensitivity`, :func:`sweep`), trace replay through one instance or a cluster (:func:`load_trace`,
:func:`replay`, :func:`load_cluster`) and the prefix hit-rate fast path (:func:`prefix_hit_rate`).
"""
from . import reference
from .access import access_counts, steady_state_misses
from .costs import check_dimensions, compile_expr, dma_time, gather_time, lines_per_entry, rdma_time, \
    roofline_time, symbol_table
from .measured import compare_runs, load_microbench, load_run, load_runs, mape_table
from .models import ModelSpec, catalog, from_hf_config, get_model
from .serving import ConfigError, Prediction, compare, predict
from .systems import BACKENDS, SYSTEMS, as_topology, fetch_latency_us
from .solvers import breakeven, max_load, plan, sensitivity, sweep, symbolic
from .topology import Topology, TopologyError, builtin_scenarios, load_topology, max_min_share
from .traces import load_trace
from .cluster.hitrate import prefix_hit_rate
from .cluster.replay import ClusterPrediction, replay
from .cluster.schema import load_cluster
from .units import UnitError, parse_quantity, ureg

__version__ = "0.1.0"

__all__ = [
    "reference", "access_counts", "steady_state_misses", "check_dimensions", "compile_expr", "dma_time",
    "gather_time", "lines_per_entry", "rdma_time", "roofline_time", "symbol_table", "compare_runs",
    "load_microbench", "load_run", "load_runs", "mape_table", "ModelSpec", "catalog", "from_hf_config",
    "get_model", "ConfigError", "Prediction", "compare", "predict", "BACKENDS", "SYSTEMS", "as_topology",
    "fetch_latency_us", "Topology", "TopologyError", "builtin_scenarios", "load_topology", "max_min_share",
    "UnitError", "parse_quantity", "ureg", "__version__", "breakeven", "max_load", "plan", "sensitivity",
    "sweep", "symbolic", "load_trace", "replay", "load_cluster", "prefix_hit_rate", "ClusterPrediction",
]
