"""Start-up time of the command line: wall and CPU seconds of `sacmodel --help`, `--version` and `predict`
(first run of a scenario and later runs), and where the time of a later `predict` goes.

    python benchmarks/startup.py [--repeat 5] [--baseline PATH_TO_AN_OLDER_CHECKOUT]

Each command runs in a fresh interpreter (``python -m sacmodel ...`` with the checkout first on the path); the
best of ``--repeat`` runs is reported, CPU time (user + sys of the child) next to wall time because the machine
may be shared. Bytecode is written and used, as in an installed package (this machine sets
PYTHONDONTWRITEBYTECODE, which would make every run compile sacmodel from source). "first run" uses an
empty scenario cache each time; "later runs" one that holds the validated scenario. Results are written up in
benchmarks/startup.md. Not a test.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREDICT = ["predict", "--system", "cxl", "--context", "32K"]
COMMANDS = {"sacmodel --help": (["--help"], "warm"), "sacmodel --version": (["--version"], "warm"),
            "sacmodel predict --system cxl --context 32K (first run)": (PREDICT, "cold"),
            "sacmodel predict --system cxl --context 32K (later runs)": (PREDICT, "warm")}
# what a later `predict` costs, cumulatively: each line imports one more layer in a fresh interpreter
LAYERS = [("python itself", "pass"), ("+ numpy", "import numpy"),
          ("+ rich (tables)", "import numpy, rich.console, rich.table"),
          ("+ sacmodel.serving", "import numpy, rich.console, rich.table, sacmodel.serving"),
          ("+ one predict (cached scenario, generated step code, engine)",
           "import rich.console, rich.table, sacmodel.serving as s; s.predict('sac-testbed', 'cxl', context=32768, "
           "output=1024, concurrency=64)"),
          ("for comparison: numpy + sympy + pint + scipy + pydantic + networkx (not imported by predict)",
           "import numpy, sympy, pint, scipy.special, scipy.interpolate, pydantic, networkx")]


def timed(argv: list[str], root: Path, cache: str) -> tuple[float, float]:
    """(wall, cpu) seconds of one child process running with ``root`` as its folder and first on the path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(root), SACMODEL_PROGRESS="0", SACMODEL_CACHE_DIR=cache)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def best(argv, root, repeat, mode="warm"):
    """Best (wall, cpu) of ``repeat`` runs, or None when the command fails there (e.g. no --version yet).

    ``warm``: one untimed run first fills the bytecode and scenario caches; ``cold``: a new, empty scenario
    cache for every run."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            timed(argv, root, tmp)
            runs = []
            for i in range(repeat):
                runs.append(timed(argv, root, tmp if mode == "warm" else os.path.join(tmp, f"cold{i}")))
        except subprocess.CalledProcessError:
            return None
    return min(r[0] for r in runs), min(r[1] for r in runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline", type=Path, default=None, help="an older checkout to compare with (e.g. "
                                                                "`git archive 13a1686 | tar -x -C /tmp/base`)")
    a = ap.parse_args()
    trees = [("this checkout", ROOT)] + ([("baseline", a.baseline)] if a.baseline else [])
    print(f"best of {a.repeat}; wall / CPU seconds; load average {os.getloadavg()[0]:.1f}\n")
    print(f"{'command':58s}" + "".join(f"{name:>22s}" for name, _ in trees))
    for label, (args, mode) in COMMANDS.items():
        cells = []
        for _, root in trees:
            module = "sacmodel" if (root / "sacmodel" / "__main__.py").exists() else "sacmodel.cli"
            r = best([sys.executable, "-m", module, *args], root, a.repeat, mode)
            cells.append(f"{r[0]:7.2f} / {r[1]:5.2f}" if r else "n/a")
        print(f"{label:58s}" + "".join(f"{x:>22s}" for x in cells))
    print("\nwhere a later predict's start-up goes (this checkout, cumulative imports, wall / CPU seconds):")
    for label, code in LAYERS:
        w, c = best([sys.executable, "-c", code], ROOT, a.repeat)
        print(f"  {label:92s} {w:5.2f} / {c:5.2f}")


if __name__ == "__main__":
    main()
