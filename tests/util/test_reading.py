"""The reading layer: regular files only (a FIFO, a device, a folder or a socket refused before a byte is read,
a dangling link named as one), the size limit held while reading whatever st_size says, gzip errors as one
line, a UTF-8 error naming its line."""
import gzip
import json
import os
import socket

import pytest

from sacmodel.util.reading import (
    check_input,
    iter_lines,
    open_input,
    read_bytes,
    read_json,
    read_text,
)


class Refused(ValueError):
    pass


def refused(fn, *args, match: str, **kw):
    with pytest.raises(Refused, match=match) as exc:
        fn(*args, err=Refused, **kw)
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_special_files_are_refused_by_name_before_reading(tmp_path):
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)                        # opening it for reading would block until a writer comes
    refused(open_input, fifo, "trace file", match=r"trace.jsonl: is a FIFO \(named pipe\), not a trace file")
    refused(read_bytes, "/dev/zero", limit=10, match="/dev/zero: is a character device")
    refused(read_text, tmp_path, limit=10, match="is a directory")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "s.yaml"))
        refused(read_text, tmp_path / "s.yaml", limit=10, match="s.yaml: is a socket")
    finally:
        sock.close()


def test_missing_dangling_too_long_and_empty_names(tmp_path):
    link = tmp_path / "run.json"
    link.symlink_to(tmp_path / "gone" / "x.json")
    refused(check_input, link, match=r"run.json: a dangling symbolic link \(to '.*gone/x.json'\)")
    refused(check_input, tmp_path / "none.json", match=r"none.json: cannot read \(no such file\)")
    msg = refused(check_input, tmp_path / ("x" * 300 + ".json"), match=r"cannot read \(File name too long\)")
    assert len(msg) < 300                  # the name is shortened in the message
    refused(check_input, "", "model config", match="no model config named: the path is empty")


def test_the_limit_holds_while_reading_not_from_st_size(tmp_path):
    # /proc files say st_size 0 and still hold bytes: a size check from stat would let any length through
    assert os.stat("/proc/self/status").st_size == 0
    refused(read_bytes, "/proc/self/status", limit=10, match="larger than the 10-byte limit")
    f = tmp_path / "a.json"
    f.write_bytes(b"x" * 11)
    refused(read_bytes, f, limit=10, match="a.json: larger than the 10-byte limit")
    assert read_bytes(f, limit=11) == b"x" * 11


def test_a_gzip_bomb_stops_at_the_limit(tmp_path):
    bomb = tmp_path / "server.log.gz"
    bomb.write_bytes(gzip.compress(b"\0" * (64 << 20)))        # 64 MB of zeros in about 64 kB
    assert bomb.stat().st_size < 1 << 20
    refused(read_bytes, bomb, limit=1 << 20, match="larger than the 1,048,576-byte limit")
    refused(lambda p, **kw: list(iter_lines(p, **kw)), bomb, line_bytes=1 << 20, limit=100 << 20,
            match=r"server.log.gz:1: line longer than 1,048,576 bytes")


def test_corrupt_and_truncated_gzip_are_one_line(tmp_path):
    data = gzip.compress(b"line one\nline two\n" * 1000)
    p = tmp_path / "s.log.gz"
    p.write_bytes(data[:len(data) // 2])
    refused(read_bytes, p, limit=1 << 20, match="s.log.gz: truncated gzip data")
    p.write_bytes(data[:20] + bytes(b ^ 0xFF for b in data[20:40]) + data[40:])
    refused(read_bytes, p, limit=1 << 20, match="s.log.gz: corrupt gzip data")
    p.write_bytes(b"plain text, not gzip\n")
    refused(read_bytes, p, limit=1 << 20, match="s.log.gz: corrupt gzip data")
    p.write_bytes(gzip.compress(b"a\n") + gzip.compress(b"b\n"))       # two members are one stream
    assert read_bytes(p, limit=10) == b"a\nb\n"


def test_lines_are_limited_and_numbered(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_bytes(b"short\n" + b"y" * 100 + b"\nz\n")
    refused(lambda q, **kw: list(iter_lines(q, **kw)), p, line_bytes=50, limit=1000, match=r"t.jsonl:2: line longer")
    refused(lambda q, **kw: list(iter_lines(q, **kw)), p, line_bytes=500, limit=50, match=r"t.jsonl:2: more than")
    assert [n for n, _ in iter_lines(p, line_bytes=500, limit=500)] == [1, 2, 3]


def test_text_and_json_errors_name_the_line(tmp_path):
    p = tmp_path / "c.json"
    p.write_bytes(b'{\n"a": 1,\n"b": "\xff"\n}')
    refused(read_text, p, limit=100, match="c.json: line 3: not UTF-8 text")
    p.write_text('{"a": NaN}')
    refused(read_json, p, limit=100, depth=5, items=10, match="NaN is not a number JSON allows")
    p.write_text(json.dumps({"a": [[[[[1]]]]]}))
    refused(read_json, p, limit=100, depth=3, items=100, match="nested deeper than 3 levels")
    p.write_text('{"a": 1,\n"b": }')
    refused(read_json, p, limit=100, depth=5, items=10, match="c.json: line 2: not valid JSON")
