"""The event engine: the SGLang server iteration by iteration (see :mod:`sacmodel.serving.engine.loop`)."""
from .loop import TRACE_CONTEXT_GRID, EngineResult, Model, Requests, cumulative_misses, cumulative_misses_at, run_engine

__all__ = ["TRACE_CONTEXT_GRID", "EngineResult", "Model", "Requests", "cumulative_misses", "cumulative_misses_at",
           "run_engine"]
