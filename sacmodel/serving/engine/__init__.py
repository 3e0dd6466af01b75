"""The event engine: the SGLang server iteration by iteration, as a set of parts that follow the server
(client, front end, dispatch and schedulers, memory, staging, iteration cost, distinct tokens, miss curves,
token emission), wired together in :mod:`sacmodel.serving.engine.loop`."""
from .loop import EngineResult, run_engine
from .memory import Crash
from .misses import cumulative_misses, cumulative_misses_at
from .stepmodel import TRACE_CONTEXT_GRID, Model
from .workload import Requests

__all__ = ["TRACE_CONTEXT_GRID", "Crash", "EngineResult", "Model", "Requests", "cumulative_misses",
           "cumulative_misses_at", "run_engine"]
