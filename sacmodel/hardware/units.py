"""Quantities with units at the edge, SI floats inside.

A quantity string is one number and one unit ("26 GB/s", "750 ns", "96 GiB", "100 Gbit/s", "148 TFLOP/s"),
nothing else: the number is read by a regular expression and only the unit goes to pint, so no arithmetic
(``2**10``, ``9**9**9 B``) is ever evaluated. The registry is our own, small and strict: bytes are a real
dimension (``[information]``), so ``22.5 Hz`` is not a bandwidth and ``96`` is not a capacity. GB means
1e9 bytes, GiB 2**30 bytes. ``parse_quantity("26 GB/s", "bandwidth")`` returns 26e9 (bytes per second).
"""
from __future__ import annotations

import math
import re
from functools import lru_cache

from ..util.lazy import lazy_module

pint = lazy_module("pint")     # loads on the first unit parsed (a cached scenario needs none)

_DEFINITIONS = """
nano- = 1e-9 = n-
micro- = 1e-6 = u- = µ-
milli- = 1e-3 = m-
kilo- = 1e3 = k-
mega- = 1e6 = M-
giga- = 1e9 = G-
tera- = 1e12 = T-
peta- = 1e15 = P-
exa- = 1e18 = E-
kibi- = 2**10 = Ki-
mebi- = 2**20 = Mi-
gibi- = 2**30 = Gi-
tebi- = 2**40 = Ti-
pebi- = 2**50 = Pi-
second = [time] = s = sec
minute = 60 * second = min
hour = 60 * minute = h
hertz = 1 / second = Hz
byte = [information] = B
bit = byte / 8
bps = bit / second
FLOP = [flop] = flop
FLOPS = FLOP / second
token = [token] = tok
entry = [entry]
"""



@lru_cache(maxsize=1)
def registry():
    """The unit registry (built on first use from the definitions above)."""
    reg = pint.UnitRegistry(None)
    for line in _DEFINITIONS.strip().splitlines():
        reg.define(line)
    return reg


def __getattr__(name: str):      # ``units.ureg``: the registry, built when first asked for
    if name == "ureg":
        return registry()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# The SI unit each named dimension is returned in.
DIMENSIONS: dict[str, str] = {
    "bandwidth": "byte / second",
    "time": "second",
    "bytes": "byte",
    "rate": "1 / second",
    "flops": "FLOP / second",
    "dimensionless": "dimensionless",
    "tokens": "token",
}
BARE_OK = ("dimensionless", "tokens")          # dimensions where a plain number is allowed
MAX_QUANTITY_CHARS = 64                        # longer strings are refused before any parsing

_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,4})?"
_NAME = r"[A-Za-zµ]+"
_UNIT = rf"(?:1\s*)?/?\s*{_NAME}(?:\s*[/*]\s*{_NAME})*"
_QUANTITY = re.compile(rf"\s*({_NUMBER})\s*({_UNIT})?\s*")


class UnitError(ValueError):
    """A quantity string that is malformed or has the wrong dimension."""


def _finite(v, field: str, raw) -> float:
    try:
        x = float(v)
    except OverflowError:
        x = math.inf
    if not math.isfinite(x):
        raise UnitError(f"{field}: {_short(raw)} is not a finite number")
    return x


def _short(raw) -> str:
    text = repr(raw)
    return text if len(text) <= MAX_QUANTITY_CHARS else text[:MAX_QUANTITY_CHARS] + "..."


def parse_quantity(value: str | int | float, dimension: str, *, field: str = "value") -> float:
    """Parse ``value`` ("26 GB/s", "750 ns", "96 GiB", "100 Gbit/s") to a finite SI float of ``dimension``.

    Bare numbers are accepted only for the ``dimensionless`` and ``tokens`` dimensions. The sign is kept:
    range checks belong to the caller.
    """
    if dimension not in DIMENSIONS:
        raise UnitError(f"{field}: unknown dimension {dimension!r}")
    if isinstance(value, bool):
        raise UnitError(f"{field}: expected a quantity, got {value!r}")
    if isinstance(value, (int, float)):
        if dimension in BARE_OK:
            return _finite(value, field, value)
        raise UnitError(f"{field}: {_short(value)} has no unit; write it with one, e.g. '{_example(dimension)}'")
    if not isinstance(value, str) or not value.strip():
        raise UnitError(f"{field}: expected a quantity string, got {value!r}")
    m = _QUANTITY.fullmatch(value) if len(value) <= MAX_QUANTITY_CHARS else None
    if not m:
        raise UnitError(f"{field}: cannot parse {_short(value)} as a quantity (write a number and a unit, "
                        f"e.g. '26 {_example(dimension) or 'GB/s'}')")
    number, unit = m.group(1), m.group(2)
    x = _finite(number, field, value)
    if unit is None:
        if dimension in BARE_OK:
            return x
        raise UnitError(f"{field}: {value!r} has no unit; write it as e.g. '{number} {_example(dimension)}'")
    unit = unit.strip()
    if unit.startswith("/"):
        unit = "1" + unit
    try:
        units = registry().parse_units(unit)
    except (pint.errors.PintError, ValueError, TypeError, AttributeError) as exc:
        raise UnitError(f"{field}: unknown unit in {value!r} ({exc})") from None
    try:
        factor = registry().Quantity(1.0, units).to(DIMENSIONS[dimension]).magnitude
    except pint.DimensionalityError:
        if dimension == "dimensionless":
            raise UnitError(f"{field}: {value!r} must be a plain number (no unit)") from None
        raise UnitError(
            f"{field}: {value!r} is not a {dimension} (expected units like '{_example(dimension)}')"
        ) from None
    inverse = round(1 / factor) if factor < 1 else 0   # '5 us' -> 5 / 1e6 (exact), not 5 * 1e-6
    return _finite(x / inverse if inverse and abs(inverse * factor - 1) < 1e-9 else x * factor, field, value)


def _example(dimension: str) -> str:
    return {"bandwidth": "GB/s", "time": "ns", "bytes": "GiB", "rate": "1/s", "flops": "TFLOP/s",
            "dimensionless": "", "tokens": "token"}[dimension]


def fmt_bandwidth(x: float) -> str:
    return f"{x / 1e9:.3g} GB/s"


def fmt_time(x: float) -> str:
    if x < 1e-6:
        return f"{x * 1e9:.3g} ns"
    if x < 1e-3:
        return f"{x * 1e6:.3g} us"
    if x < 1:
        return f"{x * 1e3:.3g} ms"
    return f"{x:.3g} s"


_TOKENS = re.compile(r"\s*(\d{1,15}(?:\.\d{1,6})?)\s*([kKmM]?)\s*")


def parse_tokens(s: str | int) -> int:
    """'32768', '32K' (x 1024) or '1M' (x 1024^2) -> a positive whole number of tokens."""
    if isinstance(s, bool):
        raise UnitError(f"not a token count: {s!r} (use e.g. 32768 or 32K)")
    m = _TOKENS.fullmatch(str(s)) if len(str(s)) <= MAX_QUANTITY_CHARS else None
    if not m:
        raise UnitError(f"not a token count: {_short(s)} (use e.g. 32768 or 32K)")
    v = float(m.group(1)) * {"": 1, "k": 1024, "m": 1024 ** 2}[m.group(2).lower()]
    if v != int(v) or v < 1:
        raise UnitError(f"not a positive whole token count: {s!r}")
    return int(v)
