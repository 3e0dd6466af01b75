"""Symbolic cost primitives (sympy) over named symbols, and their lambdified numeric forms.

Each primitive returns a sympy expression in seconds. Symbols are created once through :func:`sym`, which
records the unit of each name so that every expression can be checked for dimensional consistency
(:func:`check_dimensions`). Build an expression once, ``lambdify`` it (:func:`compile_expr`) for numbers.
"""
from __future__ import annotations

import math
from functools import lru_cache

from ..hardware.units import registry
from ..util.lazy import lazy_module

sp = lazy_module("sympy")      # loads when an expression is first built (not on the generated numeric path)

# name -> (Symbol, unit string, description)
SYMBOLS: dict[str, tuple[sp.Symbol, str, str]] = {}


def sym(name: str, unit: str = "dimensionless", desc: str = "") -> sp.Symbol:
    """The positive sympy symbol ``name``; its unit is registered on first use."""
    if name in SYMBOLS:
        s, u, _ = SYMBOLS[name]
        if unit != "dimensionless" and u != unit:
            raise ValueError(f"symbol {name!r} already registered with unit {u!r}, not {unit!r}")
        if desc and not SYMBOLS[name][2]:
            SYMBOLS[name] = (s, u, desc)
        return s
    s = sp.Symbol(name, positive=True)
    SYMBOLS[name] = (s, unit, desc)
    return s


def symbol_table() -> list[tuple[str, str, str]]:
    """(name, unit, description) of every registered symbol, sorted by name."""
    return sorted((n, u, d) for n, (_, u, d) in SYMBOLS.items())


# ---- primitives ----------------------------------------------------------------------------------
def gather_time(prefix: str = "") -> sp.Expr:
    """GPU load/store gather of ``n`` entries of ``lines`` cache lines each from memory over a route (s).

    Achieved bandwidth = min(route bandwidth, outstanding lines x line / latency) (latency-bound when
    few loads are in flight); time = kernel fixed cost + one latency + bytes on the wire / achieved.
    """
    n = sym(f"{prefix}n", "dimensionless", "entries gathered")
    lines = sym("lines_per_entry", "dimensionless", "cache lines one entry touches (alignment included)")
    line = sym("cacheline", "byte", "cache-line size")
    bw = sym(f"{prefix}bw", "byte/second", "route bandwidth available to this gather")
    lat = sym(f"{prefix}lat", "second", "load round-trip latency over the route")
    nout = sym("outstanding_lines", "dimensionless", "cache-line loads a gather kernel keeps in flight")
    tk = sym("t_kernel", "second", "fixed cost of one gather kernel")
    achieved = sp.Min(bw, nout * line / lat)
    return tk + lat + n * lines * line / achieved


def swap_in_time(prefix: str = "sw_") -> sp.Expr:
    """One launch of the HiSparse swap-in kernel for ``{prefix}ctas`` requests of one layer (s).

    One thread block per request hashes the top-k and scans the buffer's LRU slots (no cost the measured
    step times resolve), then copies the misses from the pool with one 8-byte load in flight per thread:
    ``inflight`` bytes per block per round trip. The copy runs at min(route bandwidth share, blocks x
    inflight / latency), after the kernel's fixed cost and one latency, and lasts at least as long as the block
    with the most to copy (a newly admitted request misses its whole top-k: ``{prefix}max_bytes``).
    """
    ctas = sym(f"{prefix}ctas", "dimensionless", "requests (thread blocks) of the swap-in kernel")
    nbytes = sym(f"{prefix}bytes", "byte", "bytes the swap-in copies for all requests of one layer")
    most = sym(f"{prefix}max_bytes", "byte", "bytes the swap-in copies for its busiest request of one layer")
    inflight = sym("swap_inflight", "byte", "bytes one swap-in thread block keeps in flight")
    bw = sym(f"{prefix}bw", "byte/second", "route bandwidth available to this rank")
    lat = sym(f"{prefix}lat", "second", "load round-trip latency over the route")
    return sym("t_kernel", "second", "fixed cost of one gather kernel") + lat + sp.Max(
        nbytes / sp.Min(bw, ctas * inflight / lat), most * lat / inflight)


def dma_time(prefix: str = "") -> sp.Expr:
    """Bulk DMA copy: setup + bytes / bandwidth (s)."""
    return (sym("dma_setup", "second", "DMA setup per copy")
            + sym(f"{prefix}bytes", "byte", "bytes copied") / sym(f"{prefix}bw", "byte/second", "copy bandwidth"))


def rdma_time(prefix: str = "") -> sp.Expr:
    """RDMA transfer: operations x per-operation cost + bytes / NIC rate (s)."""
    ops = sym(f"{prefix}ops", "dimensionless", "RDMA operations (set by granularity and layout)")
    t_op = sym("rdma_op_cost", "second", "NIC per-operation cost")
    nbytes = sym(f"{prefix}bytes", "byte", "bytes transferred")
    rate = sym(f"{prefix}rate", "byte/second", "NIC rate available")
    return ops * t_op + nbytes / rate


def roofline_time(prefix: str, flops_dtype: str = "bf16") -> sp.Expr:
    """max(compute time, memory time) of a kernel with ``{prefix}flops`` FLOPs and ``{prefix}hbm_bytes`` (s)."""
    fl = sym(f"{prefix}flops", "FLOP", f"FLOPs of {prefix.rstrip('_')}")
    by = sym(f"{prefix}hbm_bytes", "byte", f"HBM bytes of {prefix.rstrip('_')}")
    peak = sym(f"peak_{flops_dtype}", "FLOP/second", f"GPU peak {flops_dtype} FLOP/s")
    eff = sym("compute_eff", "dimensionless", "achieved fraction of peak FLOP/s")
    hbm = sym("hbm_bw", "byte/second", "GPU HBM bandwidth")
    heff = sym("hbm_eff", "dimensionless", "achieved fraction of HBM bandwidth")
    return sp.Max(fl / (peak * eff), by / (hbm * heff))


# ---- numeric helpers -----------------------------------------------------------------------------
def lines_per_entry(entry_bytes: float, line: float = 64, first_offset: float = 0) -> float:
    """Mean cache lines one entry touches when entries are packed back to back from ``first_offset``."""
    s, line = int(entry_bytes), int(line)
    if s <= 0 or line <= 0:
        raise ValueError("entry and line sizes must be positive")
    period = line // math.gcd(s, line)
    total = 0
    for i in range(period):
        o = (int(first_offset) + i * s) % line
        total += (o + s - 1) // line + 1
    return total / period


def fair_share_finish(demands, unit_at) -> list[float]:
    """Seconds until each of several copies over one shared route ends, the route serving the copies still
    running in fair shares (progressive filling): with ``k`` copies running each moves one unit of its demand in
    ``unit_at(k)`` seconds, so with demands sorted D_(1) <= ... <= D_(n) the i-th ends at
    sum_{j <= i} (D_(j) - D_(j-1)) unit_at(n - j + 1): a copy that ends early hands its share to the others.
    Times come back in the order of ``demands``."""
    order = sorted(range(len(demands)), key=demands.__getitem__)
    out = [0.0] * len(demands)
    n, t, prev = len(order), 0.0, 0.0
    for j, i in enumerate(order):
        d = demands[i]
        if d > prev:
            t += (d - prev) * unit_at(n - j)
            prev = d
        out[i] = t
    return out


def free_symbols_sorted(expr: sp.Expr) -> list[sp.Symbol]:
    return sorted(expr.free_symbols, key=lambda s: s.name)


@lru_cache(maxsize=None)
def _compile(expr: sp.Expr, names: tuple[str, ...]):
    syms = [sp.Symbol(n, positive=True) for n in names]
    return sp.lambdify(syms, expr, modules="numpy")


def compile_expr(expr: sp.Expr):
    """Lambdify ``expr`` once; returns ``f(**values)`` taking numbers or numpy arrays by symbol name."""
    names = tuple(s.name for s in free_symbols_sorted(expr))
    f = _compile(expr, names)

    def call(**values):
        missing = [n for n in names if n not in values]
        if missing:
            raise KeyError(f"missing value(s) for symbol(s): {', '.join(missing)}")
        return f(*(values[n] for n in names))

    call.names = names
    call.expr = expr
    return call


def check_dimensions(expr: sp.Expr, expect: str = "second") -> None:
    """Raise if ``expr`` is not dimensionally consistent or not of unit ``expect``.

    Each registered symbol is replaced by 1 of its unit (pint); Min/Max require equal dimensions.
    """
    # a sum has the dimension of its terms: check its first term
    expr = expr.replace(lambda e: isinstance(e, sp.Sum), lambda e: e.function.subs(e.limits[0][0], 0))
    names = [s.name for s in free_symbols_sorted(expr)]
    unknown = [n for n in names if n not in SYMBOLS]
    if unknown:
        raise ValueError(f"symbols without a registered unit: {unknown}")

    def _mm(pick):
        def f(*args):
            out = args[0]
            for a in args[1:]:
                out = pick(out, a)  # pint compares only equal dimensions
            return out
        return f
    mods = [{"Min": _mm(lambda a, b: a if a <= b else b), "Max": _mm(lambda a, b: a if a >= b else b),
             "ceiling": lambda x: x, "floor": lambda x: x}, "math"]
    f = sp.lambdify([sp.Symbol(n, positive=True) for n in names], expr, modules=mods)
    ureg = registry()
    q = f(*(ureg.Quantity(1.0, SYMBOLS[n][1]) for n in names))
    if not hasattr(q, "to"):
        q = ureg.Quantity(q, "dimensionless")
    q.to(expect)  # raises pint.DimensionalityError

