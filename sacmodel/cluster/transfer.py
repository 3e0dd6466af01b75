"""KV transfers between hosts: a Mooncake Transfer Engine model and max-min sharing of links over time.

Transfer Engine (RDMA): a transfer of S bytes is cut into slices of ``slice_bytes`` (Mooncake's
``MC_SLICE_SIZE``, 64 KiB by default) spread over the host's NICs; each NIC posts its slices one after another,
each costing ``op_cost`` plus its bytes at the NIC's rate times ``efficiency``; a transfer also pays a fixed
``setup`` (metadata exchange, completion notification). Alone on its NICs:

    t(S) = setup + S / R,   R = nics x slice / (op_cost + slice / (efficiency x nic_rate))

so the bandwidth grows with the slice (block) size and saturates at efficiency x line rate. Concurrent
transfers share NICs, CXL adapters and pool devices max-min fairly (:mod:`~sacmodel.cluster.fabric`).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..hardware.cluster import KiB, TransferEngine

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
