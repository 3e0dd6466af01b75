"""Typed values of the command line, in one place.

Each parser reads a number with its unit (``26 GB/s``, ``750 ns``, ``1.125 KiB``, ``32K`` tokens) by a
regular expression and never evaluates arithmetic (``2**10`` is refused, not computed); checks the range and
the documented size limits (:data:`LIMITS`); and raises ``argparse.ArgumentTypeError``, which argparse turns
into a one-line message and exit status 2.
"""
from __future__ import annotations

import argparse
import math
import os
import re
from pathlib import Path

from ..util.names import CLUSTER_SLO, LIMITS, LOADED, RATE_RANGE, SHORT_METRICS, SYSTEMS, TIME_SCALE_RANGE, kind_of  # noqa: F401

PLOT_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff")

_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_QUANTITY = re.compile(rf"\s*({_NUMBER})\s*([A-Za-zµμ]+(?:\s*/\s*[A-Za-zµμ]+)?)?\s*")
_UNITS = {"bandwidth": "bandwidth", "time": "time", "bytes": "bytes", "flops": "flops"}
_EXAMPLE = {"bandwidth": "26 GB/s", "time": "750 ns", "bytes": "1.125 KiB", "flops": "148 TFLOP/s",
            "rate": "2.5", "number": "0.9", "count": "4", "tokens": "32K"}


class Bad(argparse.ArgumentTypeError, ValueError):
    """A command-line value that cannot be used; the message names it and says what to write."""


def _bad(what: str | None, msg: str) -> Bad:
    """``what: msg``; argparse names the option itself, so its type functions pass ``what=None``."""
    return Bad(f"{what}: {msg}" if what else msg)


def _number(s: str, what: str | None) -> float:
    m = re.fullmatch(_NUMBER, str(s).strip())
    if not m:
        raise _bad(what, f"not a number: {s!r}")
    v = float(m.group(0))
    if not math.isfinite(v):
        raise _bad(what, f"not a finite number: {s!r}")
    return v


def number(s: str, what: str | None = None, lo: float | None = None, hi: float | None = None,
           lo_open: bool = True) -> float:
    """A plain finite number in (lo, hi] (or [lo, hi] with ``lo_open=False``)."""
    v = _number(s, what)
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise _bad(what, f"must be {'>' if lo_open else '>='} {lo:g}, got {s!r}")
    if hi is not None and v > hi:
        raise _bad(what, f"at most {hi:g}, got {s!r}")
    return v


def count(s: str, what: str | None = None, lo: int = 1, hi: int | None = None) -> int:
    """A whole number in [lo, hi] ('64', '1e3'); the limit is named in the message."""
    v = _number(s, what)
    if v != int(v):
        raise _bad(what, f"not a whole number: {s!r}")
    if v < lo:
        raise _bad(what, f"must be >= {lo}, got {s!r}")
    if hi is not None and v > hi:
        raise _bad(what, f"at most {hi:,} (a documented limit), got {s!r}")
    return int(v)


def tokens(s: str, what: str | None = None) -> int:
    """'32768', '32K' (x 1024) or '1M' (x 1024^2): a positive whole number of tokens, at most 16M."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*", str(s))
    if not m:
        raise _bad(what, f"not a token count: {s!r} (write e.g. 32768 or 32K)")
    v = float(m.group(1)) * {"": 1, "k": 1024, "m": 1024 ** 2}[m.group(2).lower()]
    if v != int(v) or v < 1:
        raise _bad(what, f"not a positive whole token count: {s!r}")
    if v > LIMITS["tokens"]:
        raise _bad(what, f"at most {LIMITS['tokens']:,} tokens (16M, a documented limit), got {s!r}")
    return int(v)


def output_range(s: str, what: str | None = None):
    """Output tokens: one length ('1024', '1K') or 'MIN:MAX', lengths drawn uniformly per request ('0:1024';
    MIN may be 0, MAX at least 1)."""
    text = str(s).strip()
    if ":" not in text:
        return tokens(text, what)
    lo_s, _, hi_s = text.partition(":")
    lo = 0 if lo_s.strip() == "0" else tokens(lo_s, what)
    hi = tokens(hi_s, what)
    if lo > hi:
        raise _bad(what, f"MIN:MAX needs MIN <= MAX, got {s!r}")
    return (lo, hi)


def value_of(s: str, name: str, what: str | None = None) -> float:
    """A value of the named quantity (see :func:`sacmodel.util.names.kind_of`) as an SI float.

    Tokens as '32K'; counts as whole numbers; bandwidths, times and FLOP/s with a unit ('26 GB/s', '750 ns');
    bytes with a unit or plain; everything else a plain number.
    """
    what = what or name
    kind = kind_of(name)
    if kind == "tokens":
        return float(tokens(s, what))
    if kind == "count":
        return float(count(s, what))
    m = _QUANTITY.fullmatch(str(s))
    if not m:
        raise _bad(what, f"not a number with a unit: {s!r} (write e.g. '{_EXAMPLE[kind]}'; "
                  "arithmetic is not evaluated)")
    num, unit = m.group(1), m.group(2)
    if unit is None:
        if kind in _UNITS and kind != "bytes":
            raise _bad(what, f"{s!r} needs a unit, e.g. '{_EXAMPLE[kind]}'")
        return _number(num, what)
    if kind not in _UNITS:
        raise _bad(what, f"takes a plain number, got {s!r}")
    from ..hardware.units import UnitError, parse_quantity
    try:
        v = parse_quantity(f"{num} {unit}", _UNITS[kind], field=what)
    except UnitError as exc:
        raise Bad(str(exc)) from None
    if not math.isfinite(v):
        raise _bad(what, f"not a finite quantity: {s!r}")
    return v


def positive_value(s: str, name: str, what: str | None = None) -> float:
    """:func:`value_of`, required to be > 0 (bandwidths, sizes, counts) or >= 0 (times, plain numbers)."""
    v = value_of(s, name, what)
    if v < 0 or (v == 0 and kind_of(name) not in ("time", "number")):
        raise _bad(what or name, f"must be {'> 0' if kind_of(name) not in ('time', 'number') else '>= 0'}, "
                  f"got {s!r}")
    return v


def grid_axis(spec: str, what: str = "--grid", limit: int | None = None):
    """'NAME=LO:HI:N' (N points, geometric when HI/LO > 20) or 'NAME=V1,V2,...' -> (NAME, values).

    Token counts are rounded to whole tokens (duplicates dropped), counts likewise.
    """
    import numpy as np
    name, eq, rng = str(spec).partition("=")
    name = name.strip()
    parts = rng.split(":")
    if not name or not eq or not rng.strip() or len(parts) not in (1, 3):
        raise Bad(f"{what} {spec!r}: write NAME=LO:HI:N or NAME=V1,V2,...")
    limit = limit or LIMITS["points"]
    if len(parts) == 3:
        lo, hi = positive_value(parts[0], name, f"{what} {name} low end"), positive_value(parts[1], name,
                                                                                         f"{what} {name} high end")
        n = count(parts[2], f"{what} {name} points", lo=1, hi=limit)
        if hi < lo:
            raise Bad(f"{what} {name}: the low end {parts[0]!r} is above the high end {parts[1]!r}")
        vals = np.geomspace(lo, hi, n) if lo > 0 and hi / lo > 20 else np.linspace(lo, hi, n)
    else:
        items = [x for x in parts[0].split(",") if x.strip()]
        if not items or len(items) > limit:
            raise Bad(f"{what} {name}: give 1 to {limit:,} values")
        vals = np.array([positive_value(x, name, f"{what} {name}") for x in items])
    if kind_of(name) in ("tokens", "count"):
        vals = np.unique(np.round(vals).astype(int))
    return name, vals


# ---- argparse type functions ----------------------------------------------------------------------
def arg(fn, *args, **kw):
    """An argparse ``type=`` calling ``fn(s, *args, **kw)`` (named for argparse's messages)."""
    f = lambda s: fn(s, *args, **kw)  # noqa: E731
    f.__name__ = getattr(fn, "__name__", "value")
    return f


def token_list(s: str, what: str | None = None) -> list[int]:
    items = [x for x in str(s).split(",") if x.strip()]
    if not items:
        raise _bad(what, "give at least one token count, e.g. 16K,32K")
    if len(items) > LIMITS["contexts"]:
        raise _bad(what, f"at most {LIMITS['contexts']} values (a documented limit), got {len(items)}")
    return [tokens(x, what) for x in items]


def system_list(s: str, what: str | None = None) -> list[str]:
    out = list(dict.fromkeys(x.strip() for x in str(s).split(",") if x.strip()))
    if not out:
        raise _bad(what, f"give at least one system ({', '.join(SYSTEMS)})")
    for x in out:
        if x not in SYSTEMS:
            raise _bad(what, f"unknown system {x!r}; known: {', '.join(SYSTEMS)}")
    return out


def byte_size(s: str, what: str | None = None) -> float:
    """A positive number of bytes, plain ('656') or with a unit ('1.125 KiB'), at most 1 GiB."""
    v = positive_value(s, "entry_bytes", what)
    if v > 2 ** 30:
        raise _bad(what, f"at most 1 GiB, got {s!r}")
    return v


def path_text(s: str, what: str | None = None) -> str:
    """A name or path of sane length (no NUL, at most 1,024 characters)."""
    s = str(s)
    if not s.strip():
        raise _bad(what, "empty")
    if "\0" in s or len(s) > LIMITS["path_chars"]:
        raise _bad(what, f"not a usable name or path ({len(s):,} characters; at most "
                  f"{LIMITS['path_chars']:,})")
    return s


def out_file(s: str, what: str | None = None, suffixes: tuple[str, ...] | None = None) -> str:
    """A file to write: not a folder, in an existing folder; ``-`` is standard output where allowed."""
    path_text(s, what)
    if s == "-" and suffixes is None:
        return s
    p = Path(s)
    try:
        if p.is_dir() or s.endswith(("/", "\\")):
            raise _bad(what, f"{s!r} is a folder; give a file name")
        target = p.resolve()
        if not target.parent.is_dir():
            if p.is_symlink():
                raise _bad(what, f"{s!r} is a symbolic link to {os.readlink(p)!r}, whose folder "
                                 f"{str(target.parent)!r} does not exist")
            raise _bad(what, f"{s!r}: the folder {str(p.parent)!r} does not exist")
        from ..util.files import OutputError, resolve_output
        try:
            resolve_output(p)             # a read-only file is refused before the command runs
        except OutputError as exc:
            raise _bad(what, str(exc)) from None
    except OSError as exc:               # a name too long for the file system, a loop of links
        raise _bad(what, f"{s[:200]!r}: cannot write there ({exc.strerror})") from None
    except RuntimeError:                 # Path.resolve on a loop of symbolic links (Python < 3.13)
        raise _bad(what, f"{s[:200]!r}: a loop of symbolic links; cannot write there") from None
    if suffixes and p.suffix.lower() not in suffixes:
        raise _bad(what, f"{s!r}: give a file name ending in one of {', '.join(suffixes)}")
    return s


def plot_file(s: str) -> str:
    return out_file(s, None, PLOT_SUFFIXES)


def in_file(s: str, what: str | None = None) -> str:
    """An existing file (not a folder)."""
    path_text(s, what)
    p = Path(s)
    try:
        if not p.exists():
            if p.is_symlink():
                raise _bad(what, f"{s!r} is a dangling symbolic link (to {os.readlink(p)!r}); no such file")
            raise _bad(what, f"{s!r}: no such file")
        if p.is_dir():
            raise _bad(what, f"{s!r} is a folder; give a file")
    except OSError as exc:               # a name too long for the file system, a loop of links
        raise _bad(what, f"{s[:200]!r}: cannot read ({exc.strerror})") from None
    return s


def metric(s: str, loaded: bool = True) -> str:
    """A metric name: a short name (ttft, tbt, e2e, throughput) or a Prediction field; checked later."""
    s = str(s).strip()
    if not re.fullmatch(r"[a-z_0-9]{1,64}", s):
        raise Bad(f"--metric: not a metric name: {s!r}")
    return SHORT_METRICS.get(s, s) if loaded else s


def slo(s: str) -> tuple[str, float]:
    """'METRIC=VALUE' (e.g. tbt_mean_ms=80): a loaded metric and a positive target."""
    name, eq, v = str(s).partition("=")
    name = SHORT_METRICS.get(name.strip(), name.strip())
    if not eq:
        raise Bad(f"--slo {s!r}: write METRIC=VALUE, e.g. tbt_mean_ms=80")
    if name not in LOADED and name not in CLUSTER_SLO:
        raise Bad(f"--slo {s!r}: unknown SLO metric {name!r}; known: {', '.join(LOADED)} (and with --trace: "
                  f"{', '.join(CLUSTER_SLO)})")
    return name, number(v, f"--slo {name}", lo=0)


def names_list(s: str, what: str | None = None) -> list[str]:
    out = [x.strip() for x in str(s).split(",") if x.strip()]
    if not out:
        raise _bad(what, "give at least one name")
    for x in out:
        if not re.fullmatch(r"[A-Za-z_][\w.:-]{0,99}", x):
            raise _bad(what, f"not a parameter name: {x!r}")
    return out


def setting(s: str) -> tuple[str, str]:
    """NAME=VALUE of ``predict --set``: a quantity ``plan --vary`` sizes (dp, topk, a scenario parameter,
    node:KIND.FIELD) and its value with a unit where it has one; the value is read once the name is known."""
    name, eq, value = str(s).partition("=")
    if not eq or not value.strip():
        raise Bad(f"--set: write NAME=VALUE, e.g. dp=4 or node:cxl_device.bandwidth='36 GB/s', not {s!r}")
    return vary_name(name.strip()), value.strip()


def vary_name(s: str) -> str:
    """A quantity to vary: a workload name, a scenario parameter, ``node:KIND.FIELD``/``link:KIND.FIELD`` or one
    element's ``node@ID.FIELD``/``link@FROM->TO.FIELD``."""
    s = str(s).strip()
    if not re.fullmatch(r"(?:(?:node|link):[a-z_0-9]+\.[a-z_0-9]+|(?:node|link)@\S{1,400}\.[a-z_0-9]+"
                        r"|[A-Za-z_][A-Za-z_0-9]{0,63})", s):
        raise Bad(f"--vary: not a quantity name: {s!r} (e.g. context, cxl_devices, t_graph_kernel, "
                  "node:cxl_device.bandwidth)")
    return s
