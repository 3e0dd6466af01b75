"""Reader of the testbed's single-layer fetch micro-benchmark (``sparse_kv_bench_*.json``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from .records import DataError, FetchStats, MicrobenchFile, first_error
from .runs import _files, _json, shared_data_dir


@dataclass(frozen=True)
class FetchPoint:
    file: str
    backend: str          # dram | cxl | rdma (rdma = rdma_total)
    context: int
    topk: int
    entry_bytes: int
    mean_us: float
    p50_us: float
    p99_us: float


def load_microbench(paths=None) -> list[FetchPoint]:
    """Points of ``sparse_kv_bench_*.json`` files (default: all in the shared micro-benchmark folder).

    Every file is validated (:class:`~sacmodel.data.records.MicrobenchFile`): positive finite latencies, whole
    positive contexts and top-k sizes, at least one result.
    """
    if paths is None:
        d = shared_data_dir() / "sac-testbed" / "microbench"
        paths = sorted(d.glob("sparse_kv_bench_*.json"))
        if not paths:
            raise DataError(f"{d}: no sparse_kv_bench_*.json files")
    out = []
    for p in _files(paths, "sparse_kv_bench_*.json"):
        d = _json(p)
        if not isinstance(d, dict):
            raise DataError(f"{p}: expected a JSON object at the top level, got {type(d).__name__}")
        try:
            mb = MicrobenchFile.model_validate(d)
            for ctx, by_k in mb.results.items():
                for k, by_b in by_k.items():
                    for b, m in by_b.items():
                        name = {"rdma_total": "rdma"}.get(b, b)
                        if name not in ("dram", "cxl", "rdma"):
                            continue
                        try:
                            st = FetchStats.model_validate(m)
                        except ValidationError as exc:
                            raise DataError(f"{p}: results.{ctx}.{k}.{b}.{first_error(exc)}") from None
                        out.append(FetchPoint(Path(p).name, name, int(ctx), int(k), mb.config.item_size,
                                              st.mean_us, st.p50_us, st.p99_us))
        except ValidationError as exc:
            raise DataError(f"{p}: {first_error(exc)}") from None
    if not out:
        raise DataError(f"{', '.join(map(str, paths))[:200]}: no dram, cxl or rdma_total results")
    return out


def latest_per_backend(points: list[FetchPoint]) -> list[FetchPoint]:
    """For each backend, the points of the newest file that measured it (file names carry the time)."""
    newest = {}
    for pt in points:
        newest[pt.backend] = max(newest.get(pt.backend, ""), pt.file)
    return [pt for pt in points if pt.file == newest[pt.backend]]
