"""Deferred imports: a module object that loads on first attribute access (the importlib recipe).

sympy and pint cost about 0.8 s each to import; the numeric path of a prediction needs neither (it runs the
generated step code, :mod:`sacmodel.serving.step_generated`, and reads cached scenarios), so the modules that build
expressions or parse units bind them with :func:`lazy_module` and pay only when they use them.
"""
from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """``name`` as a module that is imported on first attribute access (at once if already imported)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module named {name!r}")
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
