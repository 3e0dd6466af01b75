"""The price table: USD per hour of each part a configuration uses, read and checked once.

Parts (``sacmodel/data/prices.yaml`` has each with its source or marked ``[assumed]``):

- ``gpu_<name>`` per GPU of a catalog model (``gpu_h20``, ``gpu_h100``, ``gpu_h800``, ``gpu_h200``,
  ``gpu_b200``), or ``gpu`` for every GPU (a user's one-row table; a scenario whose GPU is not in the
  catalog needs it);
- ``dram_gb`` per GB of the host DRAM a KV pool uses (the ``dram`` system's host pool, the ``rdma`` system's
  remote pool), ``cxl_gb`` per GB of CXL memory (``cxl_device`` per device instead, in older tables);
- ``cxl_adapter``, ``cxl_switch``, ``rdma_nic`` per part.

A table is refused, naming the file and the key, for an unknown key, a key given twice, a price that is not a
finite number above 0 and at most ``MAX_USD_PER_HOUR``, or (:func:`check_parts`) a part the plan prices but the
table does not have; all the missing parts are named at once.
"""
from __future__ import annotations

import math
from pathlib import Path

from ..util.names import PRICE_FILE
from .common import SolverError

GB = 1e9
GPU_MODELS = ("h20", "h100", "h800", "h200", "b200")
KNOWN = ("gpu", *(f"gpu_{g}" for g in GPU_MODELS), "dram_gb", "cxl_gb", "cxl_device", "cxl_adapter", "cxl_switch",
         "rdma_nic")
MAX_USD_PER_HOUR = 1e6           # one part; a price above this is a typo (1e308 printed 'inf USD/hour')


class PriceError(SolverError):
    """A price table that cannot price the plan: the message names the file and the key."""


def prices(path: str | Path | None = None) -> dict[str, dict]:
    """The price table (part -> {usd_per_hour, source}), checked: known keys, no key twice, finite positive
    prices (a key given twice: :func:`~sacmodel.hardware.schema.read_yaml`). ``path`` None: the built-in table."""
    from ..hardware.schema import read_yaml
    p = Path(path) if path else PRICE_FILE
    data = read_yaml(p, err=PriceError, what="price table")     # regular file, size and depth limits
    parts = data.get("parts") if isinstance(data, dict) else None
    if not isinstance(parts, dict) or not parts:
        raise PriceError(f"{p}: a price table maps 'parts:' to entries like 'gpu: {{usd_per_hour: 2.0}}'")
    for k, v in parts.items():
        if k not in KNOWN:
            raise PriceError(f"{p}: parts.{k}: unknown part; known: {', '.join(KNOWN)}")
        usd = v.get("usd_per_hour") if isinstance(v, dict) else None
        if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not (
                math.isfinite(usd) and 0 < usd <= MAX_USD_PER_HOUR):
            raise PriceError(f"{p}: parts.{k}.usd_per_hour must be a number above 0 and at most "
                             f"{MAX_USD_PER_HOUR:g}, got {usd!r}")
    return parts


def gpu_model(topo) -> str | None:
    """The catalog name of the scenario's GPU (matched on memory, HBM bandwidth, BF16 FLOP/s and NVLink), or
    None for a GPU the catalog does not have."""
    from ..hardware.gpus import CATALOG
    d = topo.node(topo.gpus[0])
    for name, g in CATALOG.items():
        if all(math.isclose(d.get(f, -1.0), v, rel_tol=1e-3) for f, v in (
                ("hbm_capacity", g.memory_bytes), ("hbm_bandwidth", g.hbm_bandwidth),
                ("flops_bf16", g.flops_bf16), ("nvlink_bandwidth", g.nvlink_bandwidth))):
            return name
    return None


def gpu_part(topo, table: dict) -> str:
    """The row that prices the scenario's GPUs: ``gpu_<model>`` if the table has it, else ``gpu``."""
    model = gpu_model(topo)
    if model and f"gpu_{model}" in table:
        return f"gpu_{model}"
    if "gpu" in table:
        return "gpu"
    return f"gpu_{model}" if model else "gpu"


def check_parts(table: dict, needed, path=None) -> None:
    """Every part the plan prices is in the table; else one error naming them all."""
    missing = [k for k in needed if k not in table]
    if missing:
        where = path or PRICE_FILE
        raise PriceError(f"{where}: the plan prices {', '.join(needed)}; the table has no "
                         f"{', '.join(missing)} (add {'it' if len(missing) == 1 else 'them'} under parts:)")


def usd(table: dict, part: str) -> float:
    return float(table[part]["usd_per_hour"])


def per_gb_or_device(table: dict, gb: float, devices: int) -> tuple[str, float]:
    """CXL memory: by the GB (``cxl_gb``) or, in an older table, by the device (``cxl_device``)."""
    if "cxl_gb" in table or "cxl_device" not in table:
        return "cxl_gb", gb
    return "cxl_device", devices
