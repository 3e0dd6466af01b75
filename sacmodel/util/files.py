"""Writing a user's file without ever losing it: the one writing layer of the library.

Every file the library writes (CSV, JSON, plots, scenarios, generated traces) goes through :func:`atomic_path`
or the helpers on top of it:

- a **regular file** (or a name that does not exist yet) is written to a temporary file beside it, flushed to
  disk, checked if the caller asks, and renamed over it, keeping its permissions: a crash, a kill or a full
  disk leaves the old file as it was;
- a **symbolic link** is followed to the file it names, which is replaced the same way (the link stays a link;
  a dangling link creates the file it names);
- a **FIFO, device, socket or standard output** (``-``) cannot be replaced: the bytes are written through to
  it once they are complete, and the special file stays what it was;
- a **directory**, a **read-only file** (no write permission bit, or not writable by this user) and a **loop
  of symbolic links** are refused with a message naming them; nothing is written.
"""
from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from pathlib import Path

STDOUT = "-"


class OutputError(OSError):
    """An output that cannot be written; the message names it. Nothing was changed."""


def resolve_output(path: str | Path) -> tuple[Path, bool]:
    """The file a write to ``path`` lands in (symbolic links followed) and whether it is a regular file (or
    does not exist yet) that may be replaced; refuses a directory or a link into a missing folder."""
    p = Path(path)
    real = Path(os.path.realpath(p))
    try:
        st = os.stat(real)
    except FileNotFoundError:
        if not real.parent.is_dir():
            via = f" (the link {p} points there)" if real != p.absolute() else ""
            raise OutputError(f"{p}: no folder {real.parent}{via}; nothing written") from None
        return real, True
    except OSError as exc:
        raise OutputError(f"{p}: cannot write ({exc.strerror}); nothing written") from None
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{p}: is a directory; give a file name")
    if stat.S_ISREG(st.st_mode) and not (st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
                                         and os.access(real, os.W_OK)):
        # a rename would replace a file its owner protected (the folder's permission is not the file's)
        raise OutputError(f"{p}: read-only file; nothing written")
    return real, stat.S_ISREG(st.st_mode)


@contextlib.contextmanager
def atomic_path(path: str | Path, check=None):
    """Yield a temporary path to write the whole output to; on success it lands in ``path`` as the module
    docstring says (``check(tmp)``, if given, may raise to keep the old file). If the body raises, nothing is
    written and the temporary file is removed."""
    if str(path) == STDOUT:
        dst, replace = None, False
    else:
        dst, replace = resolve_output(path)
    folder = dst.parent if (dst is not None and replace) else None
    try:
        # the temporary file keeps the name's suffix: a plot's format follows it
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{dst.name if dst else 'stdout'}.",
                                   suffix=".tmp" + Path(str(path)).suffix)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write in {folder or tempfile.gettempdir()} ({exc.strerror}); "
                          "nothing written") from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if not tmp_path.exists() or tmp_path.stat().st_size == 0:
            raise OutputError(f"{path}: nothing was written")
        if check is not None:
            check(tmp_path)
        if dst is None:
            _copy_into_stdout(tmp_path)
        elif replace:
            _replace(tmp_path, dst)
        else:
            _write_through(tmp_path, dst)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()


def _replace(tmp: Path, dst: Path) -> None:
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    if dst.exists():
        os.chmod(tmp, stat.S_IMODE(dst.stat().st_mode))
    else:
        os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, dst)
    _fsync_dir(dst.parent)


def _write_through(tmp: Path, dst: Path) -> None:
    """Copy the finished output into a special file (FIFO, device, socket) without replacing it."""
    with open(tmp, "rb") as src, open(dst, "wb") as out:
        while chunk := src.read(1 << 20):
            out.write(chunk)


def _copy_into_stdout(tmp: Path) -> None:
    data = tmp.read_bytes()
    buf = getattr(sys.stdout, "buffer", None)
    if buf is not None:
        sys.stdout.flush()
        buf.write(data)
        buf.flush()
    else:                                     # a captured or replaced sys.stdout (tests)
        sys.stdout.write(data.decode("utf-8", "replace"))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_text(path: str | Path, text: str, check=None) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_path` (``-``: standard output)."""
    if str(path) == STDOUT:
        sys.stdout.write(text)
        return
    with atomic_path(path, check) as tmp:
        tmp.write_bytes(text.encode("utf-8"))
