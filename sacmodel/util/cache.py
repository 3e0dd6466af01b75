"""A small on-disk cache of work that does not change between runs (validated scenarios).

Entries are pickles under ``$SACMODEL_CACHE_DIR`` (default ``$XDG_CACHE_HOME/sacmodel``, else
``~/.cache/sacmodel``), named by a SHA-256 of their inputs and of the sacmodel code that produced them, so an
edited file or an upgraded sacmodel never reads a stale entry. ``SACMODEL_CACHE_DIR=off`` turns the cache off.
The cache only saves time: an entry that cannot be read or written is ignored (and rebuilt), never an error.
It holds pickles that sacmodel wrote in your own cache folder; delete the folder at any time.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from .. import __version__

_PKG = Path(__file__).resolve().parents[1]        # the sacmodel package folder
MAX_ENTRIES = 512          # per kind; a store beyond it removes the least recently written quarter


def folder() -> Path | None:
    """The cache folder, or None when the cache is off."""
    env = os.environ.get("SACMODEL_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "none") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sacmodel"


@lru_cache(maxsize=None)
def _code_hash(sources: tuple[str, ...]) -> bytes:
    h = hashlib.sha256(__version__.encode())
    for name in sources:
        p = _PKG / name
        h.update(name.encode() + b"\0" + (p.read_bytes() if p.is_file() else b"") + b"\0")
    return h.digest()


def key(*parts: bytes | str, code: tuple[str, ...] = ()) -> str:
    """A hex key of ``parts`` and of the package modules ``code`` (paths relative to the package)."""
    h = hashlib.sha256(_code_hash(tuple(code)))
    for p in parts:
        b = p.encode() if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()


def _file(kind: str, k: str) -> Path | None:
    d = folder()
    return None if d is None else d / kind / f"{k}.pickle"


def load(kind: str, k: str, loader=pickle.load):
    """The entry ``k`` of ``kind``, or None (missing, unreadable, or the cache is off). ``loader``: reads the
    entry from its open file (default :func:`pickle.load`)."""
    f = _file(kind, k)
    if f is None:
        return None
    try:
        with open(f, "rb") as fh:
            return loader(fh)
    except Exception:       # missing, truncated or from another Python: rebuild it
        return None


@contextmanager
def lock(kind: str, k: str):
    """Hold an exclusive lock on entry ``k`` of ``kind`` while building it: another process that wants the same
    entry waits, then reads what this one stored (load again inside the lock). A no-op where the cache is off or
    file locks are not available; the lock file is removed once the entry is stored."""
    f = _file(kind, k)
    fh = None
    try:
        import fcntl
        if f is not None:
            f.parent.mkdir(parents=True, exist_ok=True)
            fh = open(f.with_suffix(".lock"), "a")
            fcntl.flock(fh, fcntl.LOCK_EX)
    except (ImportError, OSError):
        if fh is not None:
            fh.close()
        fh = None
    try:
        yield
    finally:
        if fh is not None:
            try:
                if f.exists():
                    os.unlink(f.with_suffix(".lock"))
            except OSError:
                pass
            fh.close()


def store(kind: str, k: str, obj) -> None:
    """Write ``obj`` as entry ``k`` (atomically: a temporary file beside it, then a rename); failures are ignored."""
    f = _file(kind, k)
    if f is None:
        return
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=f.parent, prefix=f.stem, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                pickle.dump(obj, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, f)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        _prune(f.parent)
    except Exception:       # read-only home, full disk, an object that does not pickle: run without the cache
        return


def _prune(d: Path) -> None:
    """Keep the cache bounded: above ``MAX_ENTRIES`` entries, remove the oldest until 3/4 of it remain."""
    entries = list(d.glob("*.pickle"))
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda p: p.stat().st_mtime)
    for p in entries[:len(entries) - MAX_ENTRIES * 3 // 4]:
        try:
            p.unlink()
        except OSError:
            pass
