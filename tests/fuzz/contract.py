"""The contract every fuzz case must meet: exit 0 with finite, sane output, or exit 2 with one line naming
the file and field or line; never a traceback, never past the sandbox's time and memory budget; the special
files a case is given (FIFOs, symbolic links, folders) still what they were afterwards."""
from __future__ import annotations

import json
import math

from .sandbox import Result

SANE_MAX = 1e12     # no time (ms), rate or size in a successful answer is beyond this


def _walk(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk(v, f"{path}[{i}]")
    else:
        yield path, obj


def check_numbers(data, allow_nan=()) -> None:
    """Every number of a JSON answer finite and within SANE_MAX (``allow_nan``: paths that may be NaN)."""
    for path, v in _walk(data):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if isinstance(v, float) and math.isnan(v) and path.split(".")[-1] in allow_nan:
            continue
        assert math.isfinite(v), f"non-finite {path} = {v}"
        assert abs(v) <= SANE_MAX or path.endswith(("capacity", "used", "bytes", "_bytes")), f"{path} = {v}"


def check_prediction(p: dict) -> None:
    """A feasible prediction has positive finite latencies and throughput."""
    if not p.get("feasible"):
        assert p.get("limit"), f"an infeasible prediction must name its limit: {p}"
        return
    for k in ("ttft_mean_ms", "tbt_mean_ms", "output_throughput_tok_s", "e2e_mean_ms"):
        v = p.get(k)
        if v is None and k == "tbt_mean_ms":      # no decode step (every output one token): no TBT
            continue
        assert v is not None and math.isfinite(v) and v > 0, f"feasible prediction with {k} = {v}"


def check(r: Result, names=(), json_out=True, allow_nan=()) -> str:
    """Assert the contract for one case; returns 'ok' or 'refused'. ``names``: the error line must mention
    one of them (the input file)."""
    assert r.status == "exited", f"ran out of budget ({r.status})\n{r.describe()}"
    assert r.traceback is None and "Traceback" not in r.err, f"traceback\n{r.describe()}"
    assert r.rc in (0, 2), f"exit status {r.rc}\n{r.describe()}"
    if r.rc == 2:
        lines = [ln for ln in r.err.splitlines() if ln.strip()]
        assert lines and "error:" in lines[-1], f"no error line\n{r.describe()}"
        if lines[-1].startswith("sacmodel: error:"):          # ours: exactly one line
            assert len(lines) == 1, f"more than one line\n{r.describe()}"
        if names:
            assert any(n in lines[-1] for n in names), f"error names none of {names}\n{r.describe()}"
        return "refused"
    if json_out:
        try:
            data = json.loads(r.out)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"exit 0 without JSON output ({exc})\n{r.describe()}") from None
        check_numbers(data, allow_nan)
        for p in (data if isinstance(data, list) else [data]):
            if isinstance(p, dict) and "feasible" in p and "system" in p:
                check_prediction(p)
    return "ok"


def check_quantities(data, allow_negative=()) -> None:
    """Every number of an answer finite and non-negative (a size, a time, a count); no bound on its size."""
    for path, v in _walk(data):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        assert math.isfinite(v), f"non-finite {path} = {v}"
        assert v >= 0 or path.split(".")[-1] in allow_negative, f"negative {path} = {v}"


def file_kind(path) -> str:
    """What ``path`` is, without following a final symbolic link: 'link -> TARGET', 'fifo', 'dir', 'file',
    'missing' or 'other'."""
    import os
    import stat
    try:
        st = os.lstat(path)
    except OSError:
        return "missing"
    if stat.S_ISLNK(st.st_mode):
        return f"link -> {os.readlink(path)}"
    return {stat.S_ISFIFO: "fifo", stat.S_ISDIR: "dir", stat.S_ISREG: "file"}.get(
        next((f for f in (stat.S_ISFIFO, stat.S_ISDIR, stat.S_ISREG) if f(st.st_mode)), None), "other")
