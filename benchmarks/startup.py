"""Start-up time of the command line: wall and CPU seconds of `sacmodel --help`, `--version` and a `predict`,
and what the remaining time of `predict` is spent importing.

    python benchmarks/startup.py [--repeat 5] [--baseline PATH_TO_AN_OLDER_CHECKOUT]

Each command runs in a fresh interpreter (``python -m sacmodel ...`` with this checkout first on the path);
the best of ``--repeat`` runs is reported, CPU time (user + sys of the child) next to wall time because the
machine may be shared. Results are written up in benchmarks/startup.md. Not a test.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {"sacmodel --help": ["--help"], "sacmodel --version": ["--version"],
            "sacmodel predict --system cxl --context 32K": ["predict", "--system", "cxl", "--context", "32K"]}
# what `predict` needs, cumulatively: each line imports one more layer in a fresh interpreter
LAYERS = [("python itself", "pass"), ("numpy", "import numpy"),
          ("+ scipy.special (access.py)", "import numpy, scipy.special"),
          ("+ sympy (costs.py, serving.py)", "import numpy, scipy.special, sympy"),
          ("+ pint and its registry (units.py)", "import numpy, scipy.special, sympy, sacmodel.units"),
          ("+ pydantic, networkx (topology.py)", "import numpy, scipy.special, sympy, sacmodel.units, "
                                                  "sacmodel.topology"),
          ("sacmodel.serving (all of the above)", "import sacmodel.serving"),
          ("+ one predict (build + lambdify expressions, load scenario, run engine)",
           "import sacmodel.serving as s; s.predict('sac-testbed', 'cxl', context=32768, output=1024, "
           "concurrency=64)")]


def timed(argv: list[str], root: Path) -> tuple[float, float]:
    """(wall, cpu) seconds of one child process running with ``root`` as its folder and first on the path."""
    env = {**os.environ, "PYTHONPATH": str(root), "SACMODEL_PROGRESS": "0"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def best(argv, root, repeat):
    """Best (wall, cpu) of ``repeat`` runs, or None when the command fails there (e.g. no --version yet)."""
    try:
        runs = [timed(argv, root) for _ in range(repeat)]
    except subprocess.CalledProcessError:
        return None
    return min(r[0] for r in runs), min(r[1] for r in runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline", type=Path, default=None, help="an older checkout to compare with (e.g. "
                                                                "`git archive 48b41c2 | tar -x -C /tmp/base`)")
    a = ap.parse_args()
    trees = [("this checkout", ROOT)] + ([("baseline", a.baseline)] if a.baseline else [])
    print(f"best of {a.repeat}; wall / CPU seconds; load average {os.getloadavg()[0]:.1f}\n")
    print(f"{'command':48s}" + "".join(f"{name:>24s}" for name, _ in trees))
    for label, args in COMMANDS.items():
        cells = []
        for _, root in trees:
            module = "sacmodel" if (root / "sacmodel" / "__main__.py").exists() else "sacmodel.cli"
            r = best([sys.executable, "-m", module, *args], root, a.repeat)
            cells.append(f"{r[0]:9.2f} / {r[1]:5.2f}" if r else "n/a")
        print(f"{label:48s}" + "".join(f"{x:>24s}" for x in cells))
    print("\nwhere predict's start-up goes (this checkout, cumulative imports, CPU seconds):")
    for label, code in LAYERS:
        print(f"  {label:72s} {best([sys.executable, '-c', code], ROOT, a.repeat)[1]:5.2f}")


if __name__ == "__main__":
    main()
