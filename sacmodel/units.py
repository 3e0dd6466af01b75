"""One pint registry for the package: quantities with units at the edge, SI floats inside.

GB means 1e9 bytes and GiB 2**30 bytes (pint's defaults). ``parse_quantity("26 GB/s", "bandwidth")``
returns 26e9 (bytes per second).
"""
from __future__ import annotations

import pint

ureg = pint.UnitRegistry()
ureg.define("token = [token]")
ureg.define("FLOP = [flop] = flop")
ureg.define("entry = [entry]")

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


class UnitError(ValueError):
    """A quantity string that is malformed or has the wrong dimension."""


def parse_quantity(value: str | int | float, dimension: str, *, field: str = "value") -> float:
    """Parse ``value`` ("26 GB/s", "750 ns", "96 GiB", "100 Gbit/s") to an SI float of ``dimension``.

    Bare numbers are accepted only for the ``dimensionless`` and ``tokens`` dimensions.
    """
    if dimension not in DIMENSIONS:
        raise UnitError(f"{field}: unknown dimension {dimension!r}")
    target = ureg(DIMENSIONS[dimension])
    if isinstance(value, bool):
        raise UnitError(f"{field}: expected a quantity, got {value!r}")
    if isinstance(value, (int, float)):
        if dimension in ("dimensionless", "tokens"):
            return float(value)
        raise UnitError(f"{field}: {value!r} has no unit; write it as e.g. '{value} {_example(dimension)}'")
    if not isinstance(value, str) or not value.strip():
        raise UnitError(f"{field}: expected a quantity string, got {value!r}")
    try:
        q = ureg.Quantity(value.strip())
    except Exception as exc:  # pint raises several kinds; report them uniformly
        raise UnitError(f"{field}: cannot parse {value!r} as a quantity ({exc})") from None
    if not isinstance(q, pint.Quantity):
        q = q * ureg.dimensionless
    try:
        return float(q.to(target).magnitude)
    except pint.DimensionalityError:
        raise UnitError(
            f"{field}: {value!r} is not a {dimension} (expected units like '{_example(dimension)}')"
        ) from None


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


def parse_tokens(s: str | int) -> int:
    """'32768', '32K' (x 1024) or '1M' (x 1024^2) -> a positive whole number of tokens."""
    import re
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*", str(s))
    if not m:
        raise UnitError(f"not a token count: {s!r} (use e.g. 32768 or 32K)")
    v = float(m.group(1)) * {"": 1, "k": 1024, "m": 1024 ** 2}[m.group(2).lower()]
    if v != int(v) or v < 1:
        raise UnitError(f"not a positive whole token count: {s!r}")
    return int(v)
