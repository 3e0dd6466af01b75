"""The writing layer: regular files replaced atomically, symbolic links followed, special files written
through, directories refused, a failure leaving the old file (tests never write to device nodes)."""
import os
import stat
import threading
from pathlib import Path

import pytest
import yaml

from sacmodel.cli import main
from sacmodel.util.files import OutputError, atomic_path, write_text


def read_fifo_in_background(path: Path) -> tuple[threading.Thread, list]:
    got: list = []

    def reader():
        with open(path, "rb") as fh:
            got.append(fh.read())
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    return t, got


def test_regular_file_replaced_with_its_permissions(tmp_path):
    f = tmp_path / "out.csv"
    f.write_text("old")
    os.chmod(f, 0o640)
    write_text(f, "new")
    assert f.read_text() == "new" and stat.S_IMODE(f.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]       # no temporary file left


def test_a_failure_leaves_the_old_file(tmp_path):
    f = tmp_path / "out.csv"
    f.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(f) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    with pytest.raises(ValueError):
        write_text(f, "new", check=lambda p: (_ for _ in ()).throw(ValueError("bad")))
    assert f.read_text() == "old" and len(list(tmp_path.iterdir())) == 1


def test_symlink_is_followed_and_stays_a_link(tmp_path):
    real = tmp_path / "real.csv"
    real.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_dangling_symlink_creates_the_file_it_names(tmp_path):
    link = tmp_path / "link.csv"
    link.symlink_to(tmp_path / "target.csv")
    write_text(link, "x")
    assert link.is_symlink() and (tmp_path / "target.csv").read_text() == "x"


def test_dangling_symlink_into_a_missing_folder_names_the_link(tmp_path):
    link = tmp_path / "link.csv"
    link.symlink_to(tmp_path / "nowhere" / "target.csv")
    with pytest.raises(OutputError, match="link.csv.*no folder"):
        write_text(link, "x")


def test_fifo_is_written_through_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    t, got = read_fifo_in_background(fifo)
    write_text(fifo, "a,b\n1,2\n")
    t.join(5)
    assert got == [b"a,b\n1,2\n"] and stat.S_ISFIFO(fifo.stat().st_mode)


def test_directory_is_refused(tmp_path):
    with pytest.raises(OutputError, match="is a directory"):
        write_text(tmp_path, "x")


def test_standard_output(capsys):
    write_text("-", "hello\n")
    assert capsys.readouterr().out == "hello\n"


def test_cli_csv_into_a_fifo_and_through_a_symlink(tmp_path, capsys):
    fifo = tmp_path / "map.fifo"
    os.mkfifo(fifo)
    t, got = read_fifo_in_background(fifo)
    assert main(["compare", "--contexts", "8K", "--concurrency", "2", "--systems", "gpu", "--csv", str(fifo)]) == 0
    t.join(10)
    assert got and got[0].startswith(b"context,system") and stat.S_ISFIFO(fifo.stat().st_mode)
    real = tmp_path / "real.csv"
    real.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    assert main(["compare", "--contexts", "8K", "--concurrency", "2", "--systems", "gpu", "--csv", str(link)]) == 0
    assert link.is_symlink() and real.read_text().startswith("context,system")


def test_plot_through_a_symlink_keeps_the_link(tmp_path, capsys):
    real = tmp_path / "real.png"
    real.write_bytes(b"old")
    link = tmp_path / "curves.png"
    link.symlink_to(real)
    assert main(["compare", "--contexts", "8K,16K", "--concurrency", "2", "--systems", "gpu",
                 "--plot", str(link)]) == 0
    assert link.is_symlink() and real.read_bytes()[:4] == b"\x89PNG"


def test_calibrate_through_a_symlinked_scenario_updates_the_real_file(tmp_path, capsys):
    from sacmodel.hardware.scenarios import TOPOLOGY_DIR
    real = tmp_path / "mine.yaml"
    real.write_text((TOPOLOGY_DIR / "sac-testbed.yaml").read_text())
    link = tmp_path / "mylink.yaml"
    link.symlink_to(real)
    from sacmodel.fit.calibrate import FitResult, write_params
    write_params(str(link), FitResult({"t_kernel": 9e-6}, {}, 0.05, 20, "x"), "test fit")
    assert link.is_symlink()
    assert yaml.safe_load(real.read_text())["calibration"]["t_kernel"]["value"] in ("9 us", "9.0 us", 9e-6)


def test_a_fit_does_not_spread_through_a_yaml_alias(tmp_path, capsys):
    """t_kernel written as an alias of the CXL devices' latency: fitting t_kernel must not move the latency."""
    from sacmodel.fit.calibrate import FitResult, write_params
    from sacmodel.hardware.scenarios import TOPOLOGY_DIR, load_topology
    text = (TOPOLOGY_DIR / "sac-testbed.yaml").read_text()
    data = yaml.safe_load(text)
    dev = next(n for n in data["nodes"] if n["kind"] == "cxl_device")
    lat = dev["latency"]
    assert isinstance(lat, dict)
    # rewrite the file with an anchor on the device latency and t_kernel as its alias
    first = text.index("kind: cxl_device")
    lat_at = text.index("latency:", first)
    line_end = text.index("\n", lat_at)
    text = text[:lat_at] + "latency: &lat " + text[lat_at + len("latency:"):line_end].strip() + text[line_end:]
    k0 = text.index("t_kernel:")
    k1 = text.index("\n", k0)
    text = text[:k0] + "t_kernel: *lat" + text[k1:]
    f = tmp_path / "alias.yaml"
    f.write_text(text)
    before = load_topology(f)
    dev_ids = before.nodes_of("cxl_device")
    lat_before = [before.node(n)["latency"] for n in dev_ids]
    assert before.param("t_kernel") == lat_before[0]              # the alias is live
    write_params(str(f), FitResult({"t_kernel": 8.53e-6}, {}, 0.05, 20, "x"), "test fit")
    after = load_topology(f)
    assert after.param("t_kernel") == pytest.approx(8.53e-6)
    assert [after.node(n)["latency"] for n in dev_ids] == lat_before
    assert "YAML alias" in capsys.readouterr().err


# issue 36 (Data): a write-protected target is never replaced; a loop of links is one clear line


def test_read_only_file_is_refused_and_kept(tmp_path):
    f = tmp_path / "keep.csv"
    f.write_text("mine")
    os.chmod(f, 0o444)
    with pytest.raises(OutputError, match="read-only"):
        write_text(f, "new")
    assert f.read_text() == "mine" and stat.S_IMODE(f.stat().st_mode) == 0o444


def test_read_only_file_through_a_link_is_refused(tmp_path):
    f = tmp_path / "keep.csv"
    f.write_text("mine")
    os.chmod(f, 0o400)
    link = tmp_path / "link.csv"
    link.symlink_to(f)
    with pytest.raises(OutputError, match="read-only"):
        write_text(link, "new")
    assert f.read_text() == "mine"


def test_symlink_loop_is_a_clear_error_in_the_api(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(OutputError, match="a.csv"):
        write_text(a, "x")


@pytest.mark.parametrize("flag,name", [("--csv", "out.csv"), ("--plot", "out.png")])
def test_cli_refuses_read_only_and_looping_outputs(tmp_path, capsys, flag, name):
    f = tmp_path / name
    f.write_bytes(b"mine")
    os.chmod(f, 0o444)
    args = ["compare", "--contexts", "8K", "--concurrency", "2", "--systems", "gpu", flag]
    assert main(args + [str(f)]) == 2
    err = capsys.readouterr().err
    assert "read-only" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f.read_bytes() == b"mine"
    a, b = tmp_path / ("a" + name), tmp_path / ("b" + name)
    a.symlink_to(b)
    b.symlink_to(a)
    assert main(args + [str(a)]) == 2
    err = capsys.readouterr().err
    assert "loop" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
