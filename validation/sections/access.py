"""Section 2: the access process, the numpy reference against the closed forms."""
from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

import numpy as np

from common import fmt, table


def _reference_case(args):
    from sacmodel.serving.reference import simulate
    c, steps, seed = args
    return simulate(**c, steps=steps, seed=seed, dims=256, per_step=True)["misses_per_step"]


CASES = [dict(context=16384, topk=1024, buffer_slots=2048, correlation=0.99),
         dict(context=16384, topk=1024, buffer_slots=3072, correlation=0.995),
         dict(context=32768, topk=2048, buffer_slots=4096, correlation=0.98),
         dict(context=8192, topk=512, buffer_slots=1024, correlation=0.95)]
STEPS_OF = [300 if c["correlation"] >= 0.995 else 120 for c in CASES]
SEEDS = 6


def reference_jobs(seeds: int = SEEDS) -> list[tuple]:
    """The reference simulations, each the argument of :func:`_reference_case` (any order, any process)."""
    return [(c, n, s) for c, n in zip(CASES, STEPS_OF) for s in range(seeds)]


def reference_vs_closed_form(seeds: int = SEEDS, workers: int = 1, sims_all: list | None = None):
    """Mean misses per step of the numpy reference (drifting query, real top-k, LRU) vs the closed forms;
    ``sims_all``: the results of :func:`reference_jobs` (in their order), computed here when not given."""
    from sacmodel.serving.access import exact_steady_state, miss_series
    jobs = reference_jobs(seeds)
    if sims_all is None and workers > 1:
        with ProcessPoolExecutor(workers) as ex:
            sims_all = list(ex.map(_reference_case, jobs))
    elif sims_all is None:
        sims_all = [_reference_case(j) for j in jobs]
    rows = []
    for i, (c, steps) in enumerate(zip(CASES, STEPS_OF)):
        sims = np.mean(sims_all[i * seeds:(i + 1) * seeds], axis=0)
        closed = miss_series(**c, steps=steps, exact=True)
        m_ss, t_c = exact_steady_state(**c)
        tail = slice(int(max(2 * t_c, 40)), steps)
        rows.append({"case": c, "fill_steps": t_c,
                     "total_pct": 100 * (closed.sum() / sims.sum() - 1),
                     "first_steps_pct": 100 * (closed[1:6].sum() / sims[1:6].sum() - 1),
                     "steady_pct": 100 * (m_ss / sims[tail].mean() - 1)})
    return rows


def render(rep) -> list[str]:
    """The report's section 2 section (markdown lines)."""
    L: list[str] = []
    L += ["## 2. Access process: numpy reference vs closed forms", "",
          "The reference (`sacmodel.serving.reference.simulate`) draws random keys, lets the query drift (AR(1) with the "
          "given correlation), selects the real top-k every step and runs the LRU buffer from empty, as the server "
          "admits a request on a cached prefix; mean of 6 seeds. The closed forms (`sacmodel.serving.access`) give the "
          "buffer fill (first steps) and the steady state from the AR(1) exceedance spectrum (difference in %):", "",
          table([[f"L={r['case']['context']} k={r['case']['topk']} B={r['case']['buffer_slots']} "
                  f"phi={r['case']['correlation']}", fmt(r["fill_steps"]), f"{r['first_steps_pct']:+.1f}",
                  f"{r['steady_pct']:+.1f}", f"{r['total_pct']:+.1f}"] for r in rep["reference"]],
                ["case", "fill steps T_C", "steps 1-5 %", "steady state %", "total %"]), ""]
    return L
