"""Reading users' files safely: the one reading layer of the library, and limits on parsed documents.

Every file the library reads from a user (scenario and cluster YAML, traces, run and micro-benchmark JSON, the
runs' manifest, server logs, ``config.json``) goes through :func:`open_input` or the helpers on top of it:

- only a **regular file** is read (symbolic links followed): a directory, FIFO, device or socket is refused
  before anything is read, with a message naming it (a FIFO would block, ``/dev/zero`` never ends); a dangling
  symbolic link is named as one;
- the **size limit holds while reading**: at most ``limit`` bytes (after decompression) are read, whatever
  ``st_size`` says, and a trace or log line longer than its limit stops the reading there;
- a name ending in ``.gz`` is **gzip**: corrupt or truncated data is a one-line error, not ``zlib.error``;
- text is **UTF-8**: an error names the line.

Errors are raised as the caller's exception type (``err``, a ``ValueError`` subclass) and name the file.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import stat
import zlib
from typing import IO, Any, Iterator

CHUNK = 1 << 16          # bytes read at a time
NAME_CHARS = 200         # characters of a path shown in a message

_KINDS = ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"),
          (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))


def shown(path) -> str:
    """``path`` as a message shows it: at most :data:`NAME_CHARS` characters."""
    s = str(path)
    return s if len(s) <= NAME_CHARS else s[:NAME_CHARS] + "..."


def special_kind(mode: int) -> str | None:
    """What a file that is not a regular file is ('directory', 'FIFO (named pipe)', ...); None for a regular one."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "special file"


def check_input(path, what: str = "file", err: type[Exception] = ValueError) -> os.stat_result:
    """The ``stat`` of an existing regular file (links followed), or ``err`` naming the file and saying what it
    is instead: missing, a dangling link, a directory, a FIFO, a device, unreadable, a name too long."""
    where = shown(path)
    if not str(path).strip():
        raise err(f"no {what} named: the path is empty")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise err(f"{where}: a dangling symbolic link (to {shown(os.readlink(path))!r}); no {what} to "
                      "read") from None
        raise err(f"{where}: cannot read (no such file)") from None
    except (OSError, ValueError) as exc:         # too long a name, a loop of links, a NUL in the name
        reason = getattr(exc, "strerror", None) or str(exc)
        raise err(f"{where}: cannot read ({reason})") from None
    kind = special_kind(st.st_mode)
    if kind is not None:
        raise err(f"{where}: is a {kind}, not a {what}; give a regular file")
    return st


def open_input(path, what: str = "file", err: type[Exception] = ValueError) -> IO[bytes]:
    """A regular file opened for reading in binary (see :func:`check_input`). The file is opened without
    blocking and checked again once open, so a FIFO put in its place meanwhile is refused, not waited on."""
    check_input(path, what, err)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise err(f"{shown(path)}: cannot read ({exc.strerror})") from None
    kind = special_kind(os.fstat(fd).st_mode)
    if kind is not None:
        os.close(fd)
        raise err(f"{shown(path)}: is a {kind}, not a {what}; give a regular file")
    return os.fdopen(fd, "rb")


def _is_gzip(path) -> bool:
    return str(path).endswith(".gz")


@contextlib.contextmanager
def _stream(path, what: str, err):
    """The file's bytes as a stream (decompressed for ``.gz``); gzip and read errors become ``err``."""
    fh = open_input(path, what, err)
    where = shown(path)
    try:
        with fh, (gzip.GzipFile(fileobj=fh, mode="rb") if _is_gzip(path) else contextlib.nullcontext(fh)) as s:
            yield s
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise err(f"{where}: corrupt gzip data ({str(exc)[:80]})") from None
    except EOFError:
        raise err(f"{where}: truncated gzip data (the file ends before its last block)") from None
    except OSError as exc:
        raise err(f"{where}: cannot read ({exc.strerror or exc})") from None


def read_bytes(path, *, limit: int, what: str = "file", err: type[Exception] = ValueError) -> bytes:
    """The bytes of a regular file (gunzipped if its name ends in ``.gz``), refused once more than ``limit``
    bytes have been read."""
    parts, n = [], 0
    with _stream(path, what, err) as s:
        while chunk := s.read(min(CHUNK, limit + 1 - n)):
            parts.append(chunk)
            n += len(chunk)
            if n > limit:
                raise err(f"{shown(path)}: larger than the {limit:,}-byte limit of a {what}")
    return b"".join(parts)


def decode(raw: bytes, where: str, err: type[Exception] = ValueError, first_line: int = 1) -> str:
    """UTF-8 text of ``raw``; an error names the line (counted from ``first_line``)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + raw[:exc.start].count(b"\n")
        raise err(f"{where}: line {line}: not UTF-8 text") from None


def read_text(path, *, limit: int, what: str = "file", err: type[Exception] = ValueError) -> str:
    """:func:`read_bytes` decoded as UTF-8 (an error names the line)."""
    return decode(read_bytes(path, limit=limit, what=what, err=err), shown(path), err)


def iter_lines(path, *, line_bytes: int, limit: int, what: str = "file",
               err: type[Exception] = ValueError) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each line of a regular file (gunzipped for ``.gz``), streamed: a line longer than
    ``line_bytes`` or more than ``limit`` bytes in all stop the reading with ``err`` naming the line."""
    where, n = shown(path), 0
    with _stream(path, what, err) as s:
        ln = 0
        while raw := s.readline(line_bytes + 1):
            ln += 1
            n += len(raw)
            if len(raw) > line_bytes:
                raise err(f"{where}:{ln}: line longer than {line_bytes:,} bytes")
            if n > limit:
                raise err(f"{where}:{ln}: more than the {limit:,}-byte limit of a {what}")
            yield ln, raw


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def read_json(path, *, limit: int, depth: int, items: int, what: str = "JSON file",
              err: type[Exception] = ValueError) -> Any:
    """A JSON document from a regular file within ``limit`` bytes, ``depth`` levels and ``items`` values;
    ``NaN`` and ``Infinity`` refused; errors name the file and line."""
    where = shown(path)
    text = read_text(path, limit=limit, what=what, err=err)
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise err(f"{where}: line {exc.lineno}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise err(f"{where}: nested deeper than {depth} levels") from None
    except ValueError as exc:      # a constant (NaN, Infinity) or an integer of more than 4300 digits
        raise err(f"{where}: not valid JSON ({str(exc)[:100]})") from None
    check_tree(data, where, depth=depth, items=items, err=err)
    return data


def check_tree(data: Any, where: str, *, depth: int, items: int, err: type[Exception] = ValueError) -> None:
    """Refuse a parsed YAML/JSON document nested deeper than ``depth``, larger than ``items`` values (aliases
    expanded, so recursive or exponential YAML aliases stop here) or with a mapping key that is not a
    string. Raises ``err`` naming ``where`` and the path."""
    stack = [(data, 0, "")]
    seen = 0
    while stack:
        node, level, path = stack.pop()
        seen += 1
        if seen > items:
            raise err(f"{where}: more than {items} values (aliases expanded); limit {items}")
        if isinstance(node, (dict, list)):
            if level >= depth:
                raise err(f"{where}: {path or 'document'}: nested deeper than {depth} levels")
            if isinstance(node, dict):
                for k, v in node.items():
                    if not isinstance(k, str):
                        raise err(f"{where}: {path or 'document'}: key {k!r} is not a string")
                    stack.append((v, level + 1, f"{path}.{k}" if path else k))
            else:
                stack.extend((v, level + 1, f"{path}[{i}]") for i, v in enumerate(node))
