"""Hypothesis generators of hostile inputs: nasty values, mutations of a parsed document, corrupted text."""
from __future__ import annotations

import copy

from hypothesis import strategies as st

UNITS = ["GB/s", "Gbit/s", "B/s", "TB/s", "B", "GB", "GiB", "KiB", "TB", "ns", "us", "ms", "s", "min", "Hz",
         "1/s", "TFLOP/s", "FLOP/s", "token", "entry", "bit", "furlong", "GB s", "%", "**2", "B*B"]
NASTY = ["", " ", "-5 GB/s", "0", "0 GB/s", "-0", "22.5 Hz", "96", "0.85 GB", "2**10", "9**9**9 B", "1e400 B",
         "nan", "NaN GB/s", "inf", "-inf", ".inf", "1e-300 B/s", "1e308 GB/s", "x" * 5000, "9" * 5000,
         "__import__('os')", "{{7*7}}", "${HOME}", "../../../etc/passwd", "\0", "\udcff", "é", "0x10 B",
         "1_000 B", "32K", "1M", "1.5", "-1", "1e9", True, False, None, [], {}, [1], {"value": 1}, 0, -1, 1,
         2.5, 10**30, -10**30, 9223372036854775808, float("nan"), float("inf"), -float("inf"), 1e-300, 1e300]

numbers = st.one_of(st.integers(-10**6, 10**12), st.floats(allow_nan=False, allow_infinity=False, width=32),
                    st.sampled_from(["1e400", "-0.0", "1e-400", ".5", "5.", "007"]))
quantities = st.builds(lambda n, u, sp: f"{n}{sp}{u}", numbers, st.sampled_from(UNITS), st.sampled_from(["", " "]))
nasty = st.one_of(st.sampled_from(NASTY), quantities, st.integers(), st.floats(),
                  st.text(max_size=20), st.booleans(), st.none())


def paths(doc, prefix=()) -> list[tuple]:
    """Every path into a parsed document (mappings and lists), containers included."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths(v, prefix + (i,))
    return out


def _get(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def apply(doc, mutation):
    """Apply one mutation (op, path, value) to a deep copy of ``doc``; paths gone by then are skipped."""
    doc = copy.deepcopy(doc)
    op, path, value = mutation
    try:
        parent = _get(doc, path[:-1]) if path else None
        key = path[-1] if path else None
        if op == "set" and path:
            parent[key] = value
        elif op == "delete" and path:
            del parent[key]
        elif op == "add":
            target = _get(doc, path)
            if isinstance(target, dict):
                target[f"unknown_{abs(hash(str(value))) % 97}"] = value
            elif isinstance(target, list):
                target.append(value)
        elif op == "duplicate" and path and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        elif op == "replace_root":
            return value
    except (KeyError, IndexError, TypeError):
        pass
    return doc


def mutations(doc, weights=None):
    """A strategy of one mutation of ``doc``: set a value, delete, add an unknown field, duplicate."""
    ps = paths(doc)
    return st.tuples(st.sampled_from(["set", "set", "set", "delete", "add", "duplicate", "replace_root"]),
                     st.sampled_from(ps), nasty)


@st.composite
def mutated(draw, doc, max_mutations=3):
    n = draw(st.integers(1, max_mutations))
    for _ in range(n):
        m = draw(mutations(doc))
        if m[0] == "replace_root" and draw(st.integers(0, 9)):   # rarely replace the whole document
            continue
        doc = apply(doc, m)
    return doc


@st.composite
def corrupted_text(draw, text: str):
    """``text`` unchanged (mostly), truncated, or with a few characters or bytes inserted."""
    kind = draw(st.sampled_from(["same", "same", "same", "truncate", "insert", "bytes"]))
    data = text.encode("utf-8")
    if kind == "same" or not data:
        return data
    pos = draw(st.integers(0, len(data)))
    if kind == "truncate":
        return data[:pos]
    if kind == "insert":
        junk = draw(st.sampled_from(["[", "{", "]", ":", "\n", "- ", "&a ", "*a", "!!python/object:os.system",
                                     "\t", '"', "'", "\\", "#", "%", "NaN", "Infinity", ",", "\x00"]))
        return data[:pos] + junk.encode() + data[pos:]
    return data[:pos] + draw(st.binary(min_size=1, max_size=4)) + data[pos:]
