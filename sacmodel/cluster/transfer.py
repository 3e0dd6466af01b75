"""KV transfers between hosts: a Mooncake Transfer Engine model and max-min sharing of links over time.

Transfer Engine (RDMA): a transfer of S bytes is cut into slices of ``slice_bytes`` (Mooncake's
``MC_SLICE_SIZE``, 64 KiB by default) spread over the host's NICs; each NIC posts its slices one after another,
each costing ``op_cost`` plus its bytes at the NIC's rate times ``efficiency``; a transfer also pays a fixed
``setup`` (metadata exchange, completion notification). Alone on its NICs:

    t(S) = setup + S / R,   R = nics x slice / (op_cost + slice / (efficiency x nic_rate))

so the bandwidth grows with the slice (block) size and saturates at efficiency x line rate. Concurrent
transfers share NICs, CXL adapters and pool devices max-min fairly (:func:`share_links`).
"""
from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, replace

import numpy as np

from ..hardware.cluster import KiB, TransferEngine
from ..hardware.topology import water_fill

# Measured transfer times vs size (constants.md §3): (bytes, seconds); line rates as the sources state them.
TABLES = {
    "vllm-h800": {
        "points": [(20e6, 0.54e-3), (74e6, 0.92e-3), (290e6, 2.51e-3), (1.13e9, 8.84e-3), (4.50e9, 31.65e-3)],
        "nics": 8, "nic_rate": 25e9,
        "source": "constants.md §3: vLLM PD (MooncakeConnector) 1P1D, 2x8 H800, 8x CX-7 RoCE, '~200 GB/s'",
    },
    "sglang-h20": {
        "points": [(49e6, 2.07e-3), (197e6, 2.98e-3), (789e6, 6.43e-3), (3.15e9, 20.31e-3),
                   (12.62e9, 76.78e-3)],
        "nics": 4, "nic_rate": 50e9,
        "source": "constants.md §3: SGLang PD 1P1D, 2x8 H20-3e, 4x400GbE CX-7 per node (200 GB/s)",
    },
}
# Bandwidth vs block size, Mooncake TE over EFA, GPU->GPU write (constants.md §3): (block bytes, B/s)
BLOCK_TABLE = {
    "points": [(64 * KiB, 97e9), (128 * KiB, 191e9), (256 * KiB, 325e9), (512 * KiB, 358e9),
               (1024 * KiB, 353e9), (2048 * KiB, 367e9)],
    "nics": 16, "nic_rate": 25e9,
    "source": "constants.md §3: Mooncake TE over EFA, p5en.48xlarge, 16 x 200 Gbps (400 GB/s line), write",
}



def fit_table(name: str, free=("setup", "op_cost"), base: TransferEngine | None = None) -> tuple[TransferEngine, dict]:
    """Fit the free parameters to a measured table (least squares on log times); returns the model and errors.

    ``name``: a key of :data:`TABLES` (transfer time vs size) or ``"efa-blocks"`` (bandwidth vs block size).
    """
    from scipy.optimize import least_squares
    blocks = name == "efa-blocks"
    tab = BLOCK_TABLE if blocks else TABLES[name]
    x = np.array([p[0] for p in tab["points"]])
    y = np.array([p[1] for p in tab["points"]])
    te0 = base or TransferEngine(tab["nics"], tab["nic_rate"], op_cost=1e-6, setup=1e-3)
    te0 = replace(te0, nics=tab["nics"], nic_rate=tab["nic_rate"])

    def model(te):
        return np.array([replace(te, slice_bytes=b).rate for b in x]) if blocks else te.time(x)

    def make(p):
        return replace(te0, **{k: float(np.exp(v)) for k, v in zip(free, p)})

    p0 = np.log([max(getattr(te0, k), 1e-9) for k in free])
    sol = least_squares(lambda p: np.log(model(make(p))) - np.log(y), p0)
    te = make(sol.x)
    err = model(te) / y - 1
    return te, {"table": name, "source": tab["source"], "free": list(free),
                "params": {k: getattr(te, k) for k in free}, "measured": y.tolist(), "predicted": model(te).tolist(),
                "x": x.tolist(), "mape_pct": float(100 * np.mean(np.abs(err))),
                "max_err_pct": float(100 * np.max(np.abs(err)))}


def table_error(name: str, te: TransferEngine) -> dict:
    """Error of ``te`` (moved to the table's NICs) against a transfer-time table it was not fitted to."""
    tab = TABLES[name]
    te = replace(te, nics=tab["nics"], nic_rate=tab["nic_rate"])
    x = np.array([p[0] for p in tab["points"]])
    y = np.array([p[1] for p in tab["points"]])
    pred = te.time(x)
    err = pred / y - 1
    return {"table": name, "predicted": pred.tolist(), "measured": y.tolist(), "x": x.tolist(),
            "mape_pct": float(100 * np.mean(np.abs(err))), "max_err_pct": float(100 * np.max(np.abs(err)))}


# ---- sharing over time ----------------------------------------------------------------------------
@dataclass(slots=True)
class Flow:
    """``nbytes`` to move from ``start`` (s) after a fixed ``latency`` over the listed shared resources."""
    start: float
    nbytes: float
    latency: float
    resources: tuple


class FlowSet:
    """Many flows as columns (start, bytes, latency, resource set), the resource sets interned: a replay of
    a million requests holds a few arrays, not a million objects."""

    def __init__(self, flows=()):
        self.start, self.nbytes, self.latency, self.res = array("d"), array("d"), array("d"), array("l")
        self.sets: list[tuple] = []
        self._ids: dict[tuple, int] = {}
        for f in flows:
            self.add(f.start, f.nbytes, f.latency, f.resources)

    def add(self, start: float, nbytes: float, latency: float, resources: tuple) -> int:
        rid = self._ids.get(resources)
        if rid is None:
            rid = self._ids[resources] = len(self.sets)
            self.sets.append(resources)
        self.start.append(start)
        self.nbytes.append(nbytes)
        self.latency.append(latency)
        self.res.append(rid)
        return len(self.res) - 1

    def __len__(self) -> int:
        return len(self.res)

    def __getitem__(self, i: int) -> Flow:
        return Flow(self.start[i], self.nbytes[i], self.latency[i], self.sets[self.res[i]])


def share_links(flows, capacity: dict) -> np.ndarray:
    """Finish time (s) of every flow (a list of :class:`Flow` or a :class:`FlowSet`) when concurrent flows
    share ``capacity`` (resource -> B/s) max-min fairly.

    A flow pays its latency first, then streams its bytes at the max-min fair rate of the moment; rates are
    recomputed whenever a flow starts or ends (fluid model).
    """
    fs = flows if isinstance(flows, FlowSet) else FlowSet(flows)
    n = len(fs)
    done = np.full(n, math.nan)
    ready = np.frombuffer(fs.start, float) + np.frombuffer(fs.latency, float) if n else np.zeros(0)
    pending = np.argsort(ready, kind="stable")
    nbytes, res, sets = fs.nbytes, fs.res, fs.sets
    k, t = 0, 0.0
    left: dict[int, float] = {}
    cap = capacity.__getitem__
    while k < n or left:
        nxt = ready[pending[k]] if k < n else math.inf
        if not left:
            t = nxt
        else:
            act = list(left)
            if len(act) == 1:             # alone: its bottleneck
                rates = [min(capacity[r] for r in sets[res[act[0]]])]
            else:
                rates = water_fill([sets[res[i]] for i in act], [math.inf] * len(act), cap)
            dt_end = min(left[i] / r for i, r in zip(act, rates))
            dt = min(dt_end, nxt - t)
            for i, r in zip(act, rates):
                left[i] -= r * dt
            t += dt
            for i in act:
                if left[i] <= 1e-9 * max(1.0, nbytes[i]):
                    done[i] = t
                    del left[i]
        while k < n and ready[pending[k]] <= t + 1e-15:
            i = int(pending[k])
            k += 1
            if nbytes[i] <= 0 or not sets[res[i]]:
                done[i] = ready[i]
            else:
                left[i] = nbytes[i]
    return done


def link_bytes(flows) -> dict:
    """Bytes that crossed each resource (flows: a list of :class:`Flow` or a :class:`FlowSet`)."""
    fs = flows if isinstance(flows, FlowSet) else FlowSet(flows)
    per_set = np.bincount(np.frombuffer(fs.res, np.int64) if len(fs) else np.zeros(0, int),
                          weights=np.frombuffer(fs.nbytes, float) if len(fs) else None, minlength=len(fs.sets))
    out: dict = {}
    for rs, b in zip(fs.sets, per_set):
        for r in rs:
            out[r] = out.get(r, 0.0) + float(b)
    return out
