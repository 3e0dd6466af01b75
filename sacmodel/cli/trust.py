"""What binds and how sure: the "what binds" table and the expected-error line of ``predict`` and ``compare``
(the fields ``binding``, ``band`` and ``band_basis`` of a prediction)."""
from __future__ import annotations

from .common import table

PARTS = {"step": "decode step", "ttft": "first token"}
SHOWN_SHARE = 0.02          # terms under this share of their part's time are left out of the table (not the JSON)
BAND_LABELS = (("ttft_mean_ms", "TTFT"), ("tbt_mean_ms", "TBT"), ("output_throughput_tok_s", "throughput"))


def _resource(e: dict) -> str:
    nxt = f"; next {e['next']} at +{e['headroom']:.0%}" if e.get("next") and e.get("headroom", 0) < 10 else ""
    return e["resource"] + nxt


def print_binding(con, p) -> None:
    """The table of what binds each term of the decode step and of one request's first token (ms, resource,
    kind, utilisation), largest first; terms under 2% of their part left out."""
    if not p.binding:
        return
    t = table("what binds (the busiest rank's decode step; one request's way to its first token)",
              ("part", "term", "ms", "binding resource", "kind", "use"), right=("ms", "use"))
    left, notes = 0, set()
    for part, label in PARTS.items():
        rows = sorted(((k, e) for k, e in p.binding.items() if e["part"] == part), key=lambda r: -r[1]["seconds"])
        total = sum(e["seconds"] for _, e in rows)
        for i, (k, e) in enumerate(rows):
            if e["seconds"] < SHOWN_SHARE * total:
                left += 1
                continue
            use = "-" if e["utilisation"] is None else f"{e['utilisation']:.0%}"
            name = (k[5:] if k.startswith("ttft_") else k) + ("*" if e.get("when") else "")
            notes.update({f"*{name[:-1]}: {e['when']}"} if e.get("when") else set())
            t.add_row(label if i == 0 else "", name, f"{e['seconds'] * 1e3:,.1f}", _resource(e), e["kind"], use,
                      end_section=i == len(rows) - 1)
    con.print(t)
    for n in sorted(notes):
        con.print(n, highlight=False)
    if notes:
        con.print("(* overlapping: not added to the first token; the other first-token rows add up to the mean "
                  "TTFT)", highlight=False)
    con.print("use: the share of the resource's capacity the term uses while it runs"
              + (f"; {left} terms under 2% of their part left out (--json has them)" if left else ""), highlight=False)


def band_text(band: dict) -> str:
    """``TTFT ±7%, TBT ±6%, throughput ±6%`` of a band (relative errors)."""
    return ", ".join(f"{lab} ±{band[k]:.0%}" for k, lab in BAND_LABELS if band.get(k) is not None)


def print_band(con, p) -> None:
    """One line: the prediction's expected error and where it comes from."""
    if p.band:
        con.print(f"expected error: {band_text(p.band)}, from {p.band_basis}", highlight=False)


def print_compare_bands(con, rows) -> None:
    """One line for ``compare``: each system's expected error (the widest over the contexts) and its basis."""
    widest: dict[str, dict] = {}
    basis: dict[str, str] = {}
    for _, res in rows:
        for s, p in res.items():
            if not p.band:
                continue
            w = widest.setdefault(s, {})
            for k, v in p.band.items():
                if v is not None and v > w.get(k, -1.0):
                    w[k] = v
            basis[s] = p.band_basis
    if not widest:
        return
    parts = [f"{s} ±" + "/".join(f"{w[k] * 100:.0f}" for k, _ in BAND_LABELS if w.get(k) is not None) + "%"
             for s, w in widest.items()]
    rest = sorted({b.split("; ", 1)[1] for b in basis.values() if "; " in b})
    con.print("expected error (TTFT/TBT/throughput, the widest over the contexts): " + ", ".join(parts)
              + ", from held-out testbed runs of each system and its nearest categories, validation/report.md section 5"
              + "".join(f"; {r}" for r in rest), highlight=False)
