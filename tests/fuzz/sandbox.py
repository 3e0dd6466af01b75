"""Run CLI cases in forked children with a time and memory budget (the fuzz suite's sandbox).

A server process (this file run as a script) imports sacmodel once and warms its caches; for every case it
forks a child that sets ``RLIMIT_AS`` (its current size plus the memory budget) and ``RLIMIT_CPU``, runs
``sacmodel.cli.main(argv)`` (or, for :meth:`Sandbox.call`, one function of the Python API: a ``ValueError`` is
exit status 2 with its message, a return is status 0 with the result as JSON) with stdout/stderr captured, and
sends back the exit status, the output and any traceback. The server kills a child that outlives the wall-clock budget. Forking from a warm process keeps
a case at a few milliseconds of overhead instead of a fresh interpreter's seconds.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# wall clock per case: 30 s; SACMODEL_FUZZ_WALL_S raises it on a machine too loaded for a child to get its CPU in
# time (the CPU limit, 20 s, is what catches a case that never ends)
BUDGET = {"wall_s": float(os.environ.get("SACMODEL_FUZZ_WALL_S", "30")), "cpu_s": 20, "memory_bytes": 1 << 30}


@dataclass
class Result:
    argv: list
    rc: int | None          # exit status; None when the case died or ran out of budget
    out: str
    err: str
    traceback: str | None
    status: str             # 'exited', 'timeout', 'cpu', 'memory', 'signal N'
    seconds: float
    target: str = ""        # the test that ran the case (per-generator counts in the report)

    def describe(self) -> str:
        return (f"argv={self.argv!r}\nstatus={self.status} rc={self.rc} ({self.seconds:.1f} s)\n"
                f"stderr={self.err[-2000:]!r}\nstdout={self.out[:2000]!r}\n{self.traceback or ''}")


class Sandbox:
    """Client of the server: ``run(argv)`` returns a :class:`Result`."""

    def __init__(self, budget: dict | None = None):
        self.budget = {**BUDGET, **(budget or {})}
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg",
               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        self.proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, cwd=str(REPO), text=True, bufsize=1)
        ready = self.proc.stdout.readline()
        if ready.strip() != "ready":
            raise RuntimeError(f"fuzz sandbox did not start: {ready!r}")
        self.results: list[Result] = []

    def run(self, argv: list[str]) -> Result:
        """Run ``sacmodel argv`` in a child."""
        return self._send({"argv": argv})

    def call(self, target: str, *args, **kwargs) -> Result:
        """Call ``target`` ('module:function') with JSON-able arguments in a child (NaN and inf allowed)."""
        return self._send({"argv": [target, list(args), kwargs], "call": target, "args": list(args),
                           "kwargs": kwargs})

    def _send(self, req: dict) -> Result:
        self.proc.stdin.write(json.dumps({**req, **self.budget}, default=repr) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("fuzz sandbox server died")
        test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0].split("::")[-1].split("[")[0]
        r = Result(**json.loads(line), target=test)
        self.results.append(r)
        return r

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# ---- server side ------------------------------------------------------------------------------------------
def _vm_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _child(req: dict, w: int) -> None:
    import contextlib
    import io
    import resource
    import traceback
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    limit = _vm_bytes() + int(req["memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    cpu = int(req["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    from sacmodel.cli import main
    out, err = io.StringIO(), io.StringIO()
    rc, tb = None, None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = _call(req) if "call" in req else main(req["argv"])
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except MemoryError:
        tb = "MemoryError (memory budget exceeded)"
    except BaseException:                       # noqa: BLE001 - every escape is a finding
        tb = traceback.format_exc()
    try:
        data = json.dumps({"rc": rc, "out": out.getvalue()[:200_000], "err": err.getvalue()[-20_000:],
                           "traceback": tb}).encode()
    except MemoryError:
        data = json.dumps({"rc": None, "out": "", "err": "", "traceback": "MemoryError"}).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(w, view):]
    os._exit(0)


def _call(req: dict) -> int:
    """One function of the Python API: 0 and its result as JSON, or 2 and the message of a ValueError (every
    user-facing error of the library is one); anything else escapes (a finding)."""
    import importlib
    mod, _, name = req["call"].partition(":")
    fn = getattr(importlib.import_module(mod), name)
    try:
        res = fn(*req["args"], **req["kwargs"])
    except ValueError as exc:
        print(f"sacmodel: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(json.dumps(_plain(res), allow_nan=True, default=repr))
    return 0


def _plain(x, depth: int = 0):
    """A result as JSON-able data: ``to_dict()`` of a prediction, arrays summarised (size, min, max per field)."""
    import dataclasses

    import numpy as np
    if depth > 6:
        return repr(x)[:100]
    if hasattr(x, "to_dict"):
        return _plain(x.to_dict(), depth + 1)
    if isinstance(x, np.ndarray):
        if x.dtype.names:
            return {f: _plain(x[f], depth + 1) for f in x.dtype.names}
        v = x.astype(float) if x.dtype.kind in "biuf" else None
        return {"size": int(x.size), **({"min": float(v.min()), "max": float(v.max())} if v is not None and v.size
                                       else {})}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name), depth + 1) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {str(k): _plain(v, depth + 1) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v, depth + 1) for v in x[:1000]]
    if isinstance(x, np.generic):
        return x.item()
    return x if isinstance(x, (int, float, str, bool)) or x is None else repr(x)[:100]


def _run_case(req: dict) -> dict:
    r, w = os.pipe()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            _child(req, w)
        finally:
            os._exit(3)
    os.close(w)
    chunks, status, deadline = [], "exited", t0 + float(req["wall_s"])
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            status = "timeout"
            break
        ready, _, _ = select.select([r], [], [], left)
        if ready:
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(r)
    _, wstatus = os.waitpid(pid, 0)
    if status == "exited" and os.WIFSIGNALED(wstatus):
        sig = os.WTERMSIG(wstatus)
        status = "cpu" if sig == signal.SIGXCPU else f"signal {sig}"
    res = {"argv": req["argv"], "rc": None, "out": "", "err": "", "traceback": None, "status": status,
           "seconds": time.monotonic() - t0}
    if status == "exited" and chunks:
        res.update(json.loads(b"".join(chunks)))
        if res["traceback"] and res["traceback"].startswith("MemoryError"):
            res["status"] = "memory"
    elif status == "exited":
        res["status"] = "no result"
    return res


def _warm() -> None:
    """Import and compile what the cases use, once, so that every forked child starts warm."""
    from sacmodel.serving.predict import predict
    from sacmodel.serving.systems import SYSTEMS, fetch_latency_us
    for s in SYSTEMS:
        predict("sac-testbed", s, context=8192, output=16, concurrency=2, requests=2)
    for b in ("dram", "cxl", "rdma"):
        fetch_latency_us("sac-testbed", b, topk=64)
    import sacmodel.cluster.hitrate  # noqa: F401
    import sacmodel.cluster.replay  # noqa: F401
    import sacmodel.data.runs  # noqa: F401
    import sacmodel.data.server_logs  # noqa: F401
    import sacmodel.data.traces  # noqa: F401
    from sacmodel.hardware.scenarios import load_cluster
    load_cluster("sac-cluster-4x")
    # the CLI's command modules and what calibrate and compare import (scipy.optimize, the YAML round-trip
    # writer): otherwise every child imports them again (0.2 s a case, 1 s and more for calibrate)
    import sacmodel.cli.app  # noqa: F401
    import sacmodel.data.microbench  # noqa: F401
    import sacmodel.fit.calibrate  # noqa: F401
    import sacmodel.fit.compare  # noqa: F401
    import sacmodel.hardware.scenario_io  # noqa: F401
    import sacmodel.util.progress  # noqa: F401


def serve() -> None:
    import sacmodel.cli  # noqa: F401
    _warm()
    print("ready", flush=True)
    for line in sys.stdin:
        print(json.dumps(_run_case(json.loads(line))), flush=True)


if __name__ == "__main__":
    serve()
