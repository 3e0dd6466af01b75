"""Smoke test: every example script runs to completion (each in under a minute) in a scratch folder."""
import subprocess
import sys
from pathlib import Path

import pytest
from measured_data import SHARED

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(script, tmp_path):
    if script.stem == "validate_testbed" and not (SHARED / "sac-testbed").is_dir():
        pytest.skip("needs ../shared/data/sac-testbed")
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip()
    # files only where asked: figures go into out/, nothing else lands in the folder the script runs in
    assert {p.name for p in tmp_path.iterdir()} <= {"out"}
