"""Wall and CPU time of the everyday commands (issue 10): start-up, a prediction, a loaded break-even over
concurrency, a replay of the 12,031-request Mooncake conversation trace, calibration of every serving
constant (dry run) and the quick validation report.

    python benchmarks/timings.py [--skip-slow] [--suite] [--before REV]

Each command runs once in a fresh interpreter (this checkout first on the path, no progress bars, bytecode
written as in an installed package, the scenario cache warmed by one untimed prediction: the times a user sees
from the second command on); CPU is user + sys of the child and its children. ``--suite`` adds the README's
test command and the full validation report, each in a fresh clone of the checkout (beside a link to
../shared, so nothing here is rewritten; bytecode and caches cold, as on CI). ``--before REV`` times every
command a second time in a fresh clone of git revision REV and gives both (before / after columns). Results go
to benchmarks/timings.md. Not a test.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from startup import ROOT, timed  # noqa: E402

TRACE = ROOT.parent / "shared" / "data" / "traces" / "mooncake_conversation_trace.jsonl"
SAC = [sys.executable, "-m", "sacmodel"]
COMMANDS = [
    ("sacmodel --help", SAC + ["--help"], False),
    ("sacmodel predict --system cxl --context 32K", SAC + ["predict", "--system", "cxl", "--context", "32K"], False),
    ("sacmodel predict --system cxl --context 128K", SAC + ["predict", "--system", "cxl", "--context", "128K"], False),
    ("sacmodel breakeven --a cxl --b rdma --metric throughput --vary concurrency --lo 8 --hi 256 --context 64K",
     SAC + ["breakeven", "--a", "cxl", "--b", "rdma", "--metric", "throughput", "--vary", "concurrency",
            "--lo", "8", "--hi", "256", "--context", "64K"], False),
    ("sacmodel replay mooncake_conversation_trace.jsonl --system cxl (12,031 requests, one instance)",
     SAC + ["replay", str(TRACE), "--systems", "cxl"], True),
    ("sacmodel pareto --system cxl,dram,rdma --context 64K --csv - (issue 22: under 30 s)",
     SAC + ["pareto", "--system", "cxl,dram,rdma", "--context", "64K", "--csv", "-"], False),
    ("sacmodel replay mooncake_conversation_trace.jsonl --scenario sac-cluster-4x --system gpu --instances 8 "
     "--router kv (issue 21: under 20 s)",
     SAC + ["replay", str(TRACE), "--scenario", "sac-cluster-4x", "--systems", "gpu", "--instances", "8",
            "--router", "kv"], True),
    ("sacmodel calibrate --dry-run (stages 2 and 3 on the 66 runs)", SAC + ["calibrate", "--dry-run"], True),
    ("python validation/run.py --quick", [sys.executable, str(ROOT / "validation" / "run.py"), "--quick"], True),
]
SUITE = [
    ("python3 -m pytest (the README's test command, a fresh clone)", [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]),
    ("python3 validation/run.py (the full report, a fresh clone)", [sys.executable, "validation/run.py"]),
]


def clone(rev: str, into: Path) -> Path:
    """A fresh clone of this repository at ``rev`` in ``into``/repo, with ../shared linked beside it."""
    repo = into / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", rev], check=True)
    (into / "shared").symlink_to(ROOT.parent / "shared")
    return repo


def measure(root: Path, a) -> list[tuple[str, float, float]]:
    """(label, wall, cpu) of every command with ``root`` as the checkout."""
    rows = []
    cache = tempfile.mkdtemp(prefix="sacmodel-timings-cache-")
    here = str(ROOT)
    timed([x.replace(here, str(root)) for x in COMMANDS[1][1]], root, cache)   # validates the scenario once
    for label, argv, slow in COMMANDS:
        if slow and a.skip_slow:
            continue
        wall, cpu = timed([x.replace(here, str(root)) for x in argv], root, cache)
        rows.append((label, wall, cpu))
        print(f"{root.name}: {label}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
    for label, argv in SUITE if a.suite else []:
        with tempfile.TemporaryDirectory() as tmp:
            repo = clone(subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                        text=True, check=True).stdout.strip(), Path(tmp))
            wall, cpu = timed(argv, repo, tempfile.mkdtemp(prefix="sacmodel-timings-cache-", dir=tmp))
        rows.append((label, wall, cpu))
        print(f"{root.name}: {label}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-slow", action="store_true", help="only the commands that take seconds")
    ap.add_argument("--suite", action="store_true", help="also the README's test command and the full validation "
                                                         "report, each in a fresh clone (minutes)")
    ap.add_argument("--before", metavar="REV", help="also time a fresh clone of git revision REV (before / after)")
    a = ap.parse_args()
    rows = measure(ROOT, a)
    before = {}
    if a.before:
        tmp = Path(tempfile.mkdtemp(prefix="sacmodel-timings-before-"))
        try:
            before = {lbl: (w, c) for lbl, w, c in measure(clone(a.before, tmp), a)}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    load = os.getloadavg()[0]
    md = ["# Timings of the everyday commands", "",
          f"`python3 benchmarks/timings.py{' --suite' if a.suite else ''}"
          f"{f' --before {a.before}' if a.before else ''}`, {datetime.date.today()}, {platform.machine()}, Python "
          f"{platform.python_version()}, {os.cpu_count()} cores (load average {load:.1f} at the end: the "
          "machine is shared, so CPU time is the steadier figure). Scenario cache warm, bytecode compiled (the first "
          "command on a new scenario also validates it: about 1.5 s more). The full validation report's time is "
          "in `validation/report.md` (first paragraph); start-up in detail in `startup.md`.", ""]
    if before:
        md += [f"Before: a fresh clone of `{a.before}`; after: this checkout.", "",
               "| command | wall before (s) | CPU before (s) | wall after (s) | CPU after (s) |", "|---|---|---|---|---|"]
        md += [f"| `{lbl}` | " + (" | ".join(f"{x:.1f}" for x in before[lbl]) if lbl in before else "- | -")
               + f" | {w:.1f} | {c:.1f} |" for lbl, w, c in rows]
    else:
        md += ["| command | wall (s) | CPU (s) |", "|---|---|---|"]
        md += [f"| `{lbl}` | {w:.1f} | {c:.1f} |" for lbl, w, c in rows]
    (Path(__file__).resolve().parent / "timings.md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
