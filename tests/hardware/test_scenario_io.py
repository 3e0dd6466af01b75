"""Never lose a user's file: calibrate writes a temporary file beside the scenario, checks it, then renames.

Regression tests for issue 9, "Data loss": a writer killed or out of disk space half-way leaves the original
intact; files with a Windows path as source or a flow-style calibration table load after writing; comments
and layout are kept; built-in scenarios and existing --out files are not overwritten without --force; no
write after a failed fit; --out equal to the scenario, a directory or a read-only file exits 2.
"""
import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from measured_data import needs_shared

import sacmodel.hardware.scenario_io as sio
from sacmodel.cli import main
from sacmodel.fit.calibrate import FitResult, write_params
from sacmodel.hardware.scenario_io import ScenarioWriteError, calibration_target, update_scenario
from sacmodel.hardware.scenarios import TOPOLOGY_DIR, load_topology

REPO = Path(__file__).resolve().parents[2]
TESTBED = TOPOLOGY_DIR / "sac-testbed.yaml"


def fit(**params):
    return FitResult(params, {}, 0.05, 20, "test")


@pytest.fixture
def scen(tmp_path):
    p = tmp_path / "mine.yaml"
    shutil.copyfile(TESTBED, p)
    return p


def run_cli(capsys, *args):
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


# ---- atomicity --------------------------------------------------------------------------------------
def test_data_loss_writer_killed_mid_write_leaves_original(scen):
    """A writer killed (SIGKILL) after writing half the new text: the scenario is byte-for-byte unchanged."""
    before = scen.read_bytes()
    script = textwrap.dedent(f"""
        import os, signal
        import sacmodel.hardware.scenario_io as sio
        from sacmodel.fit.calibrate import FitResult, write_params
        def half_then_die(fh, data):
            fh.write(data[: len(data) // 2]); fh.flush(); os.fsync(fh.fileno())
            os.kill(os.getpid(), signal.SIGKILL)
        sio._write = half_then_die
        write_params({str(scen)!r}, FitResult({{"t_kernel": 9e-6}}, {{}}, 0.05, 20, "x"), "killed")
    """)
    r = subprocess.run([sys.executable, "-c", script], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == -signal.SIGKILL
    assert scen.read_bytes() == before
    load_topology(scen)


def test_data_loss_killed_at_any_moment_file_is_old_or_new(scen):
    """A process rewriting the file in a loop, killed at arbitrary moments: the file always loads and is one
    of the versions written, never a mix or a truncation."""
    script = textwrap.dedent(f"""
        import sys
        from sacmodel.hardware.scenario_io import update_scenario
        i = 0
        while True:
            update_scenario({str(scen)!r}, {str(scen)!r}, {{"t_kernel": ("8 us" if i % 2 else "9 us", "loop")}})
            if i == 0:
                print("ready", flush=True)
            i += 1
    """)
    for delay in (0.0, 0.05, 0.13, 0.31):
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(delay)
        proc.kill()
        proc.wait()
        assert load_topology(scen).param("t_kernel") in (pytest.approx(8e-6), pytest.approx(9e-6))


def test_data_loss_disk_full_patched_writer(scen, monkeypatch):
    """ENOSPC half-way through the write: a clear error, the original intact, no temporary file left."""
    before = scen.read_bytes()

    def full(fh, data):
        fh.write(data[:100])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(sio, "_write", full)
    with pytest.raises(ScenarioWriteError, match="No space left on device.*unchanged"):
        write_params(scen, fit(t_kernel=9e-6), "full disk")
    assert scen.read_bytes() == before
    assert sorted(p.name for p in scen.parent.iterdir()) == ["mine.yaml"]


@pytest.fixture
def tiny_tmpfs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.decode().strip()})")
    yield mnt
    subprocess.run(["umount", str(mnt)], capture_output=True)


def test_data_loss_disk_full_real_tmpfs(tiny_tmpfs):
    """A real full file system (64 KiB tmpfs filled up): calibrate's write fails cleanly, nothing lost."""
    scen = tiny_tmpfs / "mine.yaml"
    shutil.copyfile(TESTBED, scen)
    before = scen.read_bytes()
    with open(tiny_tmpfs / "filler", "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 1024)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    with pytest.raises(ScenarioWriteError, match="unchanged|nothing written"):
        write_params(scen, fit(t_kernel=9e-6), "full tmpfs")
    assert scen.read_bytes() == before
    assert sorted(p.name for p in tiny_tmpfs.iterdir()) == ["filler", "mine.yaml"]


def test_a_new_text_that_would_not_load_is_not_written(scen):
    before = scen.read_bytes()
    with pytest.raises(ScenarioWriteError, match="would not load.*mine.yaml unchanged"):
        update_scenario(scen, scen, {"t_kernel": ("-5 us", "bad")})
    assert scen.read_bytes() == before


# ---- what is written ----------------------------------------------------------------------------------
def test_data_loss_windows_path_as_source_loads(scen):
    write_params(scen, fit(t_kernel=9e-6), r"C:\data\runs")
    t = load_topology(scen)
    assert t.calibration["t_kernel"].source == r"fitted: C:\data\runs" and t.param("t_kernel") == 9e-6


def test_data_loss_flow_style_calibration_table_loads(tmp_path):
    data = yaml.safe_load(TESTBED.read_text())
    text = TESTBED.read_text().split("\ncalibration:")[0]
    cal = ", ".join(f"{k}: {{value: {v['value']}, source: \"{v['source']}\"}}"
                    for k, v in data["calibration"].items())
    p = tmp_path / "flow.yaml"
    p.write_text(text + f"\ncalibration: {{{cal}}}\n")
    load_topology(p)
    write_params(p, fit(t_graph_kernel=6e-6, compute_eff=0.31, t_kernel=9e-6), "flow")
    t = load_topology(p)
    assert (t.param("t_graph_kernel"), t.param("compute_eff"), t.param("t_kernel")) == (6e-6, 0.31, 9e-6)
    before = load_topology(TESTBED)
    for k in set(data["calibration"]) - {"t_graph_kernel", "compute_eff", "t_kernel"}:   # the others are kept
        assert t.param(k) == before.param(k), k


def test_data_loss_comments_and_layout_kept(scen):
    """Only the lines of the fitted entries change (the old writer turned 125 lines into 287)."""
    before = scen.read_text().splitlines()
    write_params(scen, fit(**{"t_kernel": 9e-6, "node:rdma_nic.op_cost": 0.5e-6, "link:gpu.latency": 480e-9}),
                 "layout")
    after = scen.read_text().splitlines()
    assert len(after) == len(before)
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(changed) == 4      # t_kernel, the NIC's op_cost, the two GPU links' latency
    assert all(a.split(":")[0] == b.split(":")[0] for a, b in changed)
    assert [ln for ln in after if ln.lstrip().startswith("#")] == [ln for ln in before if ln.lstrip().startswith("#")]
    t = load_topology(scen)
    assert t.node("nic[0]")["op_cost"] == 0.5e-6 and t.graph.edges["gpu_s0[0]", "rc0"]["latency"] == 480e-9


def test_new_parameter_goes_under_calibration_in_flow_style(tmp_path):
    p = tmp_path / "nocal.yaml"
    p.write_text(TESTBED.read_text().replace("  prefill_eff:", "  # prefill_eff:"))
    write_params(p, fit(prefill_eff=0.5), "new")
    lines = p.read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("  prefill_eff:"))
    assert i > lines.index("calibration:") and lines[i].startswith("  prefill_eff: {value: 0.5, source: ")
    assert load_topology(p).param("prefill_eff") == 0.5


def test_data_loss_no_write_after_failed_fit(scen):
    before = scen.read_bytes()
    for bad in (FitResult({"t_kernel": 9e-6}, {}, float("nan"), 10, "x"),
                FitResult({"t_kernel": 9e-6}, {}, 0.1, 0, "no data"),
                FitResult({"t_kernel": float("nan")}, {}, 0.1, 10, "x")):
        with pytest.raises(ScenarioWriteError, match="the fit failed.*nothing written"):
            write_params(scen, bad, "fitted")
    assert scen.read_bytes() == before


def test_data_loss_calibrate_without_data_keeps_source(capsys, scen, tmp_path):
    """Every run failed, so the fit has no data: exit 2 and the 'source:' entries stay as they were."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "x_dram_ctx32k.json").write_text(
        '{"config": {"target_input_tokens": 32768, "max_concurrency": 8, "output_tokens": 64, '
        '"round2_num_requests": 8}, "round2": {"metrics": {"num_success": 0, "ttft_mean_ms": 1.0}}}')
    before = scen.read_bytes()
    rc, _, err = run_cli(capsys, "calibrate", "--scenario", str(scen), str(runs), "--params", "t_graph_kernel")
    assert rc == 2 and "Traceback" not in err and scen.read_bytes() == before


# ---- where calibrate may write --------------------------------------------------------------------------
def test_data_loss_builtin_scenario_needs_force(capsys):
    before = TESTBED.read_bytes()
    rc, _, err = run_cli(capsys, "calibrate", "--microbench", "--params", "t_kernel")
    assert rc == 2 and "built-in scenario" in err and "--force" in err and TESTBED.read_bytes() == before


@needs_shared          # the forced run fits the micro-benchmark in ../shared
def test_data_loss_existing_out_needs_force(capsys, scen, tmp_path):
    out = tmp_path / "out.yaml"
    out.write_text("my notes\n")
    rc, _, err = run_cli(capsys, "calibrate", "--microbench", "--params", "t_kernel", "--out", str(out))
    assert rc == 2 and "exists" in err and out.read_text() == "my notes\n"
    rc, _, _ = run_cli(capsys, "calibrate", "--microbench", "--params", "t_kernel", "--out", str(out), "--force")
    assert rc == 0 and load_topology(out).calibration["t_kernel"].source.startswith("fitted:")
    assert TESTBED.read_bytes() == (TOPOLOGY_DIR / "sac-testbed.yaml").read_bytes()


@pytest.mark.parametrize("case", ["same", "directory", "read-only", "no-folder"])
def test_data_loss_bad_out_exits_2(capsys, scen, tmp_path, case):
    out = {"same": scen, "directory": tmp_path, "read-only": tmp_path / "ro.yaml",
           "no-folder": tmp_path / "nowhere" / "x.yaml"}[case]
    if case == "read-only":
        shutil.copyfile(TESTBED, out)
        out.chmod(0o444)
    before = scen.read_bytes()
    rc, _, err = run_cli(capsys, "calibrate", "--scenario", str(scen), "--microbench", "--params", "t_kernel",
                         "--out", str(out), "--force")
    msg = {"same": ("is the scenario itself",), "directory": ("is a directory", "is a folder"),
           "read-only": ("read-only",), "no-folder": ("no folder", "does not exist")}[case]
    assert rc == 2 and any(m in err for m in msg) and "Traceback" not in err and scen.read_bytes() == before
    with pytest.raises(ScenarioWriteError, match=msg[0]):         # the writer refuses on its own too
        calibration_target(scen, out, force=True)


def test_data_loss_read_only_scenario_in_place(capsys, scen):
    scen.chmod(0o444)
    rc, _, err = run_cli(capsys, "calibrate", "--scenario", str(scen), "--microbench", "--params", "t_kernel")
    assert rc == 2 and "read-only" in err


def test_fitted_step_counts_are_written_as_bare_numbers(tmp_path):
    """settling_steps is displayed in steps, which is no unit of the registry: the file gets a bare number."""
    import shutil

    from sacmodel.fit.calibrate import FitResult, write_params
    from sacmodel.hardware.scenarios import load_topology, resolve_scenario_path
    path = tmp_path / "s.yaml"
    shutil.copy(resolve_scenario_path("sac-testbed"), path)
    write_params(path, FitResult({"settling_steps": 700.0}, {"settling_steps": "700 steps"}, 0.1, 10, "test"), "test")
    assert load_topology(path).param("settling_steps") == 700.0
