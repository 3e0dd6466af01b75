"""Sampled mutation testing with mutmut's own mutation operators (mutmut 2.5.1), one mutant at a time.

``mutmut run`` mutates every line of a file and runs the same test command for each mutant; on a 2-core
machine that is hours for the modules that matter. This driver enumerates the mutants with mutmut's engine
(``mutmut.list_mutations``), keeps those on chosen line ranges (the functions whose bugs matter), drops pure
string-literal mutants (``"XX...XX"``: messages, not behaviour), samples a fixed number with a fixed seed,
and runs a fast test subset per mutant with a timeout. ``--plant`` instead applies hand-written bugs
(``edits``: exact ``[old, new]`` text replacements) from a JSON file; a bug that gives a sampled mutant's
``line`` and ``new`` text (a mutant of a line since fixed: the mutant replaces the line whole, so it is the
same program) is recorded with them, and ``summary --recheck`` counts it as that mutant's recheck. The source file is always restored, and
bytecode is never written (``PYTHONDONTWRITEBYTECODE``: a restored file in the same second as its mutant
must not load the mutant's stale .pyc).

    python3 benchmarks/mutation_driver.py mutate sacmodel/serving/capacity.py --tests "tests/test_x.py ..." \
        [--lines 30-70,100-120] [--sample 40] [--out results.jsonl]
    python3 benchmarks/mutation_driver.py plant planted.json --out planted.jsonl [--tests "..."] [--only NAME ...]
    python3 benchmarks/mutation_driver.py recheck results.jsonl sacmodel/x.py --tests "..." --out recheck.jsonl
    python3 benchmarks/mutation_driver.py summary results.jsonl --recheck recheck.jsonl \
        [--equivalent equivalent.json] [--group engine='sacmodel/serving/engine/*.py' ...]

``summary`` prints the per-module (and per-group) table: mutants in range, run, killed, timeout, survived,
killed on recheck, still surviving, judged equivalent, and the score before / after (killed / non-equivalent;
timeouts count as killed). ``--equivalent`` is a JSON list of {"module", "line", "new", "why"} records.
The tests see the environment of the driver (e.g. ``SACMODEL_DATA`` for the measured data).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTEST = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]


def env() -> dict:
    e = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def run_tests(tests: str, timeout: float) -> tuple[str, str, float]:
    """('killed' | 'survived' | 'timeout', first failing test or '', seconds)."""
    t0 = time.monotonic()
    cmd = ["nice", "-n", "19"] + PYTEST + shlex.split(tests)
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", "", time.monotonic() - t0
    dt = time.monotonic() - t0
    if p.returncode == 0:
        return "survived", "", dt
    m = re.search(r"^(?:FAILED|ERROR) (\S+)", p.stdout, re.M)
    why = m.group(1) if m else (p.stdout.strip().splitlines() or ["rc=%d" % p.returncode])[-1][:160]
    return "killed", why, dt


def run_mutant(path: Path, source: str, original: str, tests: str, timeout: float) -> tuple[str, str, float]:
    """Write ``source`` into ``path``, run the tests, put ``original`` back (whatever happens)."""
    path.write_text(source)
    try:
        return run_tests(tests, timeout)
    finally:
        path.write_text(original)


def baseline(tests: str, factor: float) -> tuple[float, float]:
    """(seconds of the unmutated suite, the per-mutant timeout); exits when the suite fails unmutated."""
    status, why, base = run_tests(tests, 3600)
    if status != "survived":
        sys.exit(f"baseline fails ({why}): fix the suite first")
    return base, max(30.0, factor * base)


def emit(out, rec: dict) -> None:
    """Append one result record to the JSON-lines file ``out`` (if any), flushed at once."""
    if out:
        out.write(json.dumps(rec) + "\n")
        out.flush()


def mutants(path: Path, ranges=()):
    """(line_number (1-based), original line, mutated line, mutated source) of every mutmut mutant."""
    from mutmut import ALL, Context, list_mutations, mutate
    src = path.read_text()
    lines = src.split("\n")
    for mid in list_mutations(Context(source=src, mutation_id=ALL, filename=str(path))):
        if not in_ranges(mid.line_number + 1, ranges):
            continue
        ctx = Context(source=src, mutation_id=mid, filename=str(path))
        new, n = mutate(ctx)
        if n != 1:
            continue
        new_lines = new.split("\n")
        ln = mid.line_number
        yield ln + 1, lines[ln], new_lines[ln] if ln < len(new_lines) else "", new


def in_ranges(ln: int, ranges) -> bool:
    return not ranges or any(a <= ln <= b for a, b in ranges)


def parse_ranges(s: str | None):
    if not s:
        return []
    out = []
    for part in s.split(","):
        a, _, b = part.partition("-")
        out.append((int(a), int(b or a)))
    return out


def cmd_mutate(a) -> None:
    path = ROOT / a.module
    original = path.read_text()
    ranges = parse_ranges(a.lines)
    cands = [m for m in mutants(path, ranges) if not ('"XX' in m[2] or "'XX" in m[2] or 'XX"' in m[2] or "XX'" in m[2])]
    total = len(cands)
    rng = random.Random(a.seed)
    if a.sample and total > a.sample:
        cands = sorted(rng.sample(cands, a.sample), key=lambda m: m[0])
    base, timeout = baseline(a.tests, a.timeout_factor)
    print(f"{a.module}: {total} non-string mutants in range, running {len(cands)}; baseline {base:.1f}s, "
          f"timeout {timeout:.0f}s", flush=True)
    out = open(a.out, "a") if a.out else None
    t0 = time.monotonic()
    try:
        for k, (ln, old, new, src) in enumerate(cands, 1):
            st, w, dt = run_mutant(path, src, original, a.tests, timeout)
            print(f"[{k}/{len(cands)}] {st:8s} {a.module}:{ln}  {new.strip()[:100]}  {w}", flush=True)
            emit(out, {"module": a.module, "line": ln, "old": old.strip(), "new": new.strip(), "status": st,
                       "by": w, "seconds": round(dt, 1), "in_range": total, "seed": a.seed})
    finally:
        path.write_text(original)
        if out:
            out.close()
    print(f"wall {time.monotonic() - t0:.0f}s", flush=True)


def cmd_plant(a) -> None:
    bugs = json.loads(Path(a.file).read_text())
    out = open(a.out, "a") if a.out else None
    for b in bugs:
        if a.only and b["name"] not in a.only:
            continue
        path = ROOT / b["module"]
        original = path.read_text()
        mutated = original
        for old, new in b["edits"]:                  # exact text replacements, each occurring once
            if mutated.count(old) != 1:
                sys.exit(f"{b['name']}: {old!r} occurs {mutated.count(old)} times in {b['module']}")
            mutated = mutated.replace(old, new)
        st, w, dt = run_mutant(path, mutated, original, a.tests or b["tests"], b.get("timeout", 600))
        print(f"{st:8s} {b['name']}: {w} ({dt:.0f}s)", flush=True)
        emit(out, {"name": b["name"], "module": b["module"], "status": st, "by": w, "seconds": round(dt, 1),
                   "tests": a.tests or b["tests"], **{k: b[k] for k in ("line", "new") if k in b}})
    if out:
        out.close()


def cmd_recheck(a) -> None:
    """Run the survivors of ``results`` (for ``module``) again, against a broader ``--tests`` command."""
    recs = [json.loads(x) for x in open(a.results)]
    todo = [r for r in recs if r["module"] == a.module and r["status"] == "survived"]
    path = ROOT / a.module
    original = path.read_text()
    by_key = {(ln, new.strip()): src for ln, _, new, src in
              mutants(path, [(r["line"], r["line"]) for r in todo])}
    base, timeout = baseline(a.tests, a.timeout_factor)
    print(f"{a.module}: rechecking {len(todo)} survivors; baseline {base:.1f}s", flush=True)
    out = open(a.out, "a") if a.out else None
    try:
        for k, r in enumerate(todo, 1):
            src = by_key.get((r["line"], r["new"]))
            if src is None:
                print(f"[{k}] not found: {r['line']} {r['new']}", flush=True)
                continue
            st, w, dt = run_mutant(path, src, original, a.tests, timeout)
            print(f"[{k}/{len(todo)}] {st:8s} {a.module}:{r['line']}  {r['new'][:100]}  {w}", flush=True)
            emit(out, dict(r, status=st, by=w, seconds=round(dt, 1), phase=a.phase))
    finally:
        path.write_text(original)
        if out:
            out.close()


def cmd_summary(a) -> None:
    """The per-module table of a campaign (markdown), from its results and recheck files."""
    import fnmatch
    recs = [json.loads(x) for x in open(a.results) if x.strip()]
    later: dict = {}                         # (module, line, new) -> first killing recheck record
    for f in a.recheck or []:
        for x in open(f):
            if not x.strip():
                continue
            r = json.loads(x)
            key = (r["module"], r["line"], r["new"])
            if r["status"] in ("killed", "timeout") and key not in later:
                later[key] = r
    equiv = {(e["module"], e["line"], e["new"]) for e in json.loads(Path(a.equivalent).read_text())} \
        if a.equivalent else set()
    groups = [g.partition("=") for g in a.group or []]

    def row(name, rs):
        in_range = sum({r["module"]: r.get("in_range", 0) for r in rs}.values())
        n = len(rs)
        killed = sum(r["status"] == "killed" for r in rs)
        tmo = sum(r["status"] == "timeout" for r in rs)
        surv = [r for r in rs if r["status"] == "survived"]
        rek = [r for r in surv if (r["module"], r["line"], r["new"]) in later]
        left = [r for r in surv if (r["module"], r["line"], r["new"]) not in later]
        eq = [r for r in left if (r["module"], r["line"], r["new"]) in equiv]
        ne = n - len(eq)
        before = (killed + tmo) / ne if ne else float("nan")
        after = (killed + tmo + len(rek)) / ne if ne else float("nan")
        return (f"| {name} | {in_range} | {n} | {killed} | {tmo} | {len(surv)} | {len(rek)} | {len(left)} | "
                f"{len(eq)} | {before:.0%} | {after:.0%} |")
    print("| module | mutants in range | run | killed | timeout | survived (runner) | killed on recheck | "
          "still surviving | equivalent | score before | score after |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for m in dict.fromkeys(r["module"] for r in recs):
        print(row(f"`{m}`", [r for r in recs if r["module"] == m]))
    for name, _, pattern in groups:
        rs = [r for r in recs if any(fnmatch.fnmatch(r["module"], p) for p in pattern.split(","))]
        if rs:
            print(row(f"**{name}**", rs))
    print(row("**total**", recs))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("mutate")
    m.add_argument("module")
    m.add_argument("--tests", required=True, help="pytest arguments (files, -k, --deselect ...)")
    m.add_argument("--lines", help="1-based line ranges to mutate, e.g. 30-70,100-120")
    m.add_argument("--sample", type=int, default=0, help="at most this many mutants (0: all)")
    m.add_argument("--seed", type=int, default=9)
    m.add_argument("--timeout-factor", type=float, default=4.0)
    m.add_argument("--out")
    m.set_defaults(fn=cmd_mutate)
    pl = sub.add_parser("plant")
    pl.add_argument("file")
    pl.add_argument("--only", nargs="*")
    pl.add_argument("--tests", help="run these pytest arguments for every bug instead of each bug's own")
    pl.add_argument("--out")
    pl.set_defaults(fn=cmd_plant)
    rc = sub.add_parser("recheck", help="run the survivors of a results file again with other tests")
    rc.add_argument("results")
    rc.add_argument("module")
    rc.add_argument("--tests", required=True)
    rc.add_argument("--phase", default="recheck")
    rc.add_argument("--timeout-factor", type=float, default=4.0)
    rc.add_argument("--out")
    rc.set_defaults(fn=cmd_recheck)
    su = sub.add_parser("summary", help="per-module table of a results file and its rechecks")
    su.add_argument("results")
    su.add_argument("--recheck", nargs="*")
    su.add_argument("--equivalent")
    su.add_argument("--group", action="append", help="NAME=glob[,glob...] over module paths")
    su.set_defaults(fn=cmd_summary)
    a = p.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
