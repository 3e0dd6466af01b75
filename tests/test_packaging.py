"""Packaging: the built-in scenarios are package data, every subpackage is listed (a normal install of the
package is exercised by .ci/run in a fresh venv)."""
import subprocess
import sys
import tomllib
from pathlib import Path

from sacmodel.cli import main
from sacmodel.hardware.scenarios import TOPOLOGY_DIR, builtin_scenarios, is_builtin, resolve_scenario_path

REPO = Path(__file__).resolve().parent.parent


def test_every_subpackage_is_installed():
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "sacmodel").rglob("__init__.py")}
    assert found | {"sacmodel.topologies"} == set(cfg["packages"])
    assert cfg["package-dir"]["sacmodel.topologies"] == "topologies"
    assert "*.yaml" in cfg["package-data"]["sacmodel.topologies"]


def test_every_data_file_is_package_data():
    """A file the library reads from sacmodel/data (the price table, the access table) must install too."""
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["sacmodel"]
    for f in (REPO / "sacmodel" / "data").iterdir():
        if f.is_file() and f.suffix != ".py":          # the readers of measured data live beside them
            assert any(f.relative_to(REPO / "sacmodel").match(p) for p in patterns), f


def test_builtin_scenarios_are_the_topologies_folder_only(capsys):
    names = {p.stem for p in (REPO / "topologies").glob("*.yaml")}
    assert set(builtin_scenarios()) == names and "prices" not in names
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    assert all(n in out for n in names) and "prices" not in out
    assert is_builtin(resolve_scenario_path("sac-testbed")) and TOPOLOGY_DIR.samefile(REPO / "topologies")


def test_python_dash_m_runs_the_cli():
    r = subprocess.run([sys.executable, "-m", "sacmodel", "scenarios"], capture_output=True, text=True,
                       cwd=REPO)
    assert r.returncode == 0 and "sac-testbed" in r.stdout
