"""What every command shares: output (JSON, CSV, tables), the argument parser with one-line errors, and the
option groups (scenario, workload, resources, systems, JSON/CSV, plots).

Imports only the standard library and the light :mod:`sacmodel.util.names` and :mod:`sacmodel.cli.types`, so
``sacmodel --help`` starts fast; the commands import what they need when they run.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys

from ..util.names import SYSTEMS
from .types import (LIMITS, RATE_RANGE, arg, count, number, out_file, output_range, path_text, plot_file, system_list,
                    tokens)

DEFAULT_CONTEXTS = "16K,32K,64K,128K"


DEFAULT_CONCURRENCY = 64


def _fmt(v, nd=1):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:,.{nd}f}"


def plain(v) -> str:
    """A table cell: whole numbers with separators, others with 0-3 decimals by size, never 1e+06."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return "-" if v is None else str(v)
    if isinstance(v, int) or (isinstance(v, float) and math.isfinite(v) and v.is_integer() and abs(v) >= 1):
        return f"{int(v):,}"
    if not math.isfinite(v):
        return "-"
    a = abs(v)
    return f"{v:,.{0 if a >= 1000 else 1 if a >= 100 else 2 if a >= 1 else 3}f}"


def jsonable(obj, inf_as_text: bool = False):
    """``obj`` with numpy values as Python ones and non-finite floats as None (valid JSON); with
    ``inf_as_text`` an unbounded quantity stays visible as "inf" / "-inf"."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v, inf_as_text) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v, inf_as_text) for v in obj]
    if hasattr(obj, "tolist"):                       # numpy arrays and scalars
        return jsonable(obj.tolist(), inf_as_text)
    if isinstance(obj, float) and not math.isfinite(obj):
        return ("inf" if obj > 0 else "-inf") if inf_as_text and not math.isnan(obj) else None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def print_json(obj, inf_as_text: bool = False):
    print(json.dumps(jsonable(obj, inf_as_text), indent=2, allow_nan=False))


def write_csv(path: str, header: list[str], rows) -> None:
    """Rows as CSV to ``path`` (``-``: standard output), written atomically."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow(["" if v is None or (isinstance(v, float) and not math.isfinite(v)) else v for v in r])
    if path == "-":
        sys.stdout.write(buf.getvalue())
    else:
        from ..util.files import write_text
        write_text(path, buf.getvalue())
        print(f"wrote {path}", file=sys.stderr)


def table(title: str | None, columns, right=()):
    """A compact rich table (one space between columns, a rule under the header) that fits 80 columns."""
    from rich import box
    from rich.table import Table
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for i, c in enumerate(columns):
        t.add_column(c, justify="right" if c in right else "left", no_wrap=i == 0, overflow="fold",
                     min_width=len(c))          # a header is never cut
    return t


def console():
    """Rich console on standard output; piped or redirected, 120 columns (not rich's 80) so wide tables keep
    their headers whole."""
    import os

    from rich.console import Console
    c = Console()
    return c if c.is_terminal or os.environ.get("COLUMNS") else Console(width=120)


def _scenario(a):
    """The scenario the command runs on: the --scenario, with the --model in place of its own when given."""
    if not getattr(a, "model", None):
        return a.scenario
    from dataclasses import replace

    from ..hardware.models import get_model
    from ..hardware.scenarios import as_topology
    new = get_model(a.model)                # a clear error now for an unknown name or a broken config.json
    t = as_topology(a.scenario)
    out = replace(t, model_name=a.model, model_overrides={}, _routes={})
    if "page_tokens" in t.serving and get_model(t.model_name).sparse != new.sparse:
        # SGLang's page size follows the attention (64 for DeepSeek DSA, else 1), not the scenario's old model
        import copy
        out.serving = copy.deepcopy(t.serving)
        out.serving["page_tokens"].value = 64 if new.sparse else 1
    return out


def _model_name(a) -> str:
    from ..hardware.scenarios import as_topology
    return getattr(a, "model", None) or as_topology(a.scenario).model_name


def _workload(a):
    """predict() keyword arguments from the workload options (``prompts`` only when given)."""
    kw = dict(context=getattr(a, "context", None), output=a.output, concurrency=a.concurrency,
              requests=a.requests, cxl_devices=a.cxl_devices, device_buffer=a.device_buffer, rdma_nics=a.rdma_nics,
              rate=a.rate, prefix_cached=cache_flag(a), method=a.method, **server_limits(a))
    if not getattr(a, "cold_staging", True):
        kw["cold_staging"] = False
    if getattr(a, "prompts", None):
        kw["prompts"] = a.prompts
    if getattr(a, "start", None):
        kw["start"] = a.start
    if getattr(a, "draws", None):
        kw["draws"] = a.draws
    if getattr(a, "drawn_tail", False):
        kw["exact_prompt"] = False
    return kw


def _builtin_names() -> str:
    """The shipped scenarios (``topologies/*.yaml``, found as :mod:`sacmodel.hardware.scenarios` finds them,
    without importing it: ``--help`` starts fast)."""
    from pathlib import Path
    pkg = Path(__file__).resolve().parents[1]
    d = next((d for d in (pkg / "topologies", pkg.parent / "topologies") if d.is_dir()), None)
    return ", ".join(sorted(p.stem for p in d.glob("*.yaml"))) if d else "sac-testbed"


SCENARIO_HELP = (f"built-in scenario name ({_builtin_names()}; see `sacmodel scenarios`) or a path to a "
                 "scenario YAML (start one with `sacmodel scenarios --template`); default: sac-testbed")


LIMITS_TEXT = (f"limits: contexts and outputs up to 16M tokens, concurrency up to {LIMITS['concurrency']:,}, "
               f"{LIMITS['requests']:,} requests per prediction, --rate {RATE_RANGE[0]:g} to {RATE_RANGE[1]:g} "
               "requests/s")


def one_line(text: str) -> str:
    """``text`` on one line: control characters and line separators that came from the user's input (a node
    named '\\r', a path with a newline) shown escaped, as Python writes them."""
    return "".join(c if " " <= c != "\x7f" and c not in "\x85\u2028\u2029" else repr(c)[1:-1] for c in text)


OUTPUT_TYPES = ("out_file", "plot_file")        # the argparse types of the options a command writes to


def refuse_output_over_input(parser: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Refuse (ValueError) an output option (--csv, --plot, --out) naming a file the same command reads (a
    trace, a scenario, a benchmark file, a config.json): the output would replace the user's input, even with
    --force, which is for overwriting an earlier output."""
    import os
    sub = next((x.choices.get(getattr(a, "command", None)) for x in parser._actions
                if isinstance(x, argparse._SubParsersAction)), None)
    if sub is None:
        return
    outs, ins = [], []
    for act in sub._actions:
        v = getattr(a, act.dest, None)
        vals = [x for x in (v if isinstance(v, (list, tuple)) else [v]) if isinstance(x, str) and x != "-"]
        name = act.option_strings[0] if act.option_strings else (act.metavar or act.dest).upper()
        is_out = getattr(act.type, "__name__", "") in OUTPUT_TYPES
        (outs if is_out else ins).extend((name, x) for x in vals)
    for oname, o in outs:
        for iname, i in ins:
            if (oname, iname) == ("--out", "--scenario"):
                continue        # calibrate's own refusal says more: leave out --out to update it in place
            try:
                same = os.path.isfile(i) and os.path.exists(o) and os.path.samefile(o, i)
            except OSError:
                continue
            if same:
                raise ValueError(f"{oname} {o}: is the file {iname} reads ({i}); nothing written: write the "
                                 "output to another file")


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: 'sacmodel predict: error: ... (see sacmodel predict --help)', status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but an unknown option is reported by the sub-command it was given to, pointing to
        that command's --help (argparse leaves it to the top-level parser)."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            sub = next((a for a in self._actions if isinstance(a, argparse._SubParsersAction)), None)
            cmd = getattr(ns, "command", None)
            owner = sub.choices.get(cmd, self) if sub is not None and cmd else self
            owner.error(f"unrecognized arguments: {' '.join(extras)}")
        return ns


class _Formatter(argparse.HelpFormatter):
    """Wraps descriptions; keeps indented lines (the examples of an epilog) as written."""

    def _fill_text(self, text, width, indent):
        import textwrap
        return "\n".join(line if line.startswith("  ") or not line else
                         textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent)
                         for line in text.splitlines())


def _formatter(prog):
    return _Formatter(prog, max_help_position=32)


def _parser(sub, name, help_, examples, description=None):
    """A sub-command with a help line, a description and an epilog of examples."""
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
    return sub.add_parser(name, help=help_, description=description or help_, epilog=epilog,
                          formatter_class=_formatter)


def add_scenario(p):
    p.add_argument("--scenario", default="sac-testbed", type=arg(path_text), metavar="NAME|YAML", help=SCENARIO_HELP)


def add_json(p, csv_=True):
    p.add_argument("--json", action="store_true", help="print the results as JSON (machine-readable, no table)")
    if csv_:
        p.add_argument("--csv", type=arg(out_file), default=None, metavar="FILE",
                       help="write one row per item as CSV to FILE ('-' = standard output instead of the table)")


def add_plot(p, what: str):
    p.add_argument("--plot", type=plot_file, default=None, metavar="FILE",
                   help=f"{what} into FILE (.png, .pdf, .svg); without it no file is written")


def add_systems(p, default: str):
    p.add_argument("--systems", type=arg(system_list), default=default, metavar="LIST",
                   help=f"comma-separated systems from {', '.join(SYSTEMS)} (default {default})")


def add_resources(p):
    """CXL devices, RDMA NICs and GPU buffer slots, defaulting to the scenario's values."""
    p.add_argument("--cxl-devices", type=arg(count, hi=1024), default=None, metavar="N",
                   help="CXL memory devices in the pool (cxl, cxl-prefetch; default: the scenario's cxl_devices)")
    p.add_argument("--rdma-nics", type=arg(count, hi=1024), default=None, metavar="N",
                   help="RDMA NICs used (rdma, rdma-topk; default: the scenario's rdma_nics)")
    p.add_argument("--device-buffer", type=arg(tokens), default=None, metavar="SLOTS",
                   help="GPU buffer slots per request and layer for pool systems, e.g. 4096 or 6K "
                        "(default: the scenario's device_buffer)")


def add_output(p):
    p.add_argument("--output", type=arg(output_range), default=1024, metavar="TOKENS|MIN:MAX",
                   help="output tokens per request, or MIN:MAX drawn uniformly per request (e.g. 0:1024); "
                        "default 1024")


def add_server_limits(p):
    """The server's own caps (SGLang --max-total-tokens, --max-running-requests), in place of the scenario's."""
    p.add_argument("--max-total-tokens", type=arg(tokens), default=None, metavar="TOKENS",
                   help="token slots per rank the server may hold (SGLang --max-total-tokens; default: from memory)")
    p.add_argument("--max-running-requests", type=arg(count, hi=LIMITS["concurrency"]), default=None, metavar="N",
                   help="requests running at once per server (SGLang --max-running-requests; default: the "
                        "scenario's)")
    p.set_defaults(_server_limits=True)


def server_limits(a) -> dict:
    """The given --max-total-tokens / --max-running-requests as predict() keywords."""
    return {k: getattr(a, k) for k in ("max_total_tokens", "max_running_requests") if getattr(a, k, None)}


def add_workload(p, context=True, concurrency_help=None):
    if context:
        p.add_argument("--context", type=arg(tokens), required=True, metavar="TOKENS",
                       help="prompt tokens per request, e.g. 32768 or 32K (K = 1024)")
    add_output(p)
    p.add_argument("--concurrency", type=arg(count, hi=LIMITS["concurrency"]), default=DEFAULT_CONCURRENCY,
                   metavar="N", help=concurrency_help or f"requests in flight at most (default {DEFAULT_CONCURRENCY})")
    p.add_argument("--requests", type=arg(count, hi=LIMITS["requests"]), default=None, metavar="N",
                   help=f"requests in total (default 8 x concurrency, as the testbed benchmark; at most "
                        f"{LIMITS['requests']:,})")
    p.add_argument("--rate", type=arg(number, lo=RATE_RANGE[0], hi=RATE_RANGE[1], lo_open=False), default=None,
                   metavar="REQ/S", help="open loop: Poisson arrivals at this many requests/s (default: all "
                                         "requests released at once, closed loop); overload is reported")
    add_resources(p)
    add_server_limits(p)
    add_cache_flags(p)
    p.add_argument("--no-cold-staging", dest="cold_staging", action="store_false",
                   help="the shared prompt's host-pool entry exists already (steady state): no rank backs the "
                        "prompt up again on its first hit (default: as in the testbed's second round, where "
                        "each rank's first hit does)")
    p.add_argument("--drawn-tail", action="store_true",
                   help="prompts whose lengths vary by up to a page: a cached prompt's uncached tail is drawn per "
                        "request (default: exact prompts of --context tokens, whose tail SGLang's page-aligned "
                        "prefix match fixes)")
    p.add_argument("--draws", type=arg(count, hi=64), default=None, metavar="N",
                   help="draws of the requests' randomness a prediction averages, reporting their range (default "
                        "4; only drawn tails are random: an exact prompt takes one run)")
    p.add_argument("--method", choices=("engine", "analytic"), default="engine",
                   help="engine (default): event-driven run of the benchmark, with waves and percentiles; "
                        "analytic: the engine's long-run limit under steady load, without the event loop (no "
                        "first wave or end of run, no percentiles; identical outputs released at once move in "
                        "waves, as in the engine)")


def add_model_options(p):
    p.add_argument("--model", type=arg(path_text), default=None, metavar="NAME|CONFIG",
                   help="catalog model (see `sacmodel models`) or a Hugging Face config.json path, in place of "
                        "the scenario's model (default: the scenario's)")
    add_prompts(p)


PROMPTS_HELP = ("distinct: independent users, each request with its own prompt and its own output tokens (capacity "
                "counts every prompt); shared: every request reuses one cached prompt and, decoding greedily, "
                "generates the same tokens (the SAC testbed's benchmark: a MoE layer reads the experts of one "
                "token; capacity counts the prompt once). Default: the scenario's workload: field (sac-testbed: "
                "shared), else distinct")


START_HELP = ("closed loop: together: every user sends its first request at once (a benchmark client, bench_serving: "
              "with fixed outputs each wave ends on one step and the next arrives as one burst); staggered: "
              "independent users, each joining at its own phase over one request's lifetime, metrics over the "
              "steady state (each user's first request and the ramp excluded). Default: staggered for distinct "
              "prompts, together for a shared prompt")


def add_prompts(p) -> None:
    p.add_argument("--prompts", choices=("shared", "distinct"), default=None, help=PROMPTS_HELP)
    p.add_argument("--start", choices=("together", "staggered"), default=None, help=START_HELP)


def default_start(prompts: str) -> str:
    """:func:`sacmodel.serving.predict.default_start` (imported when asked: the CLI starts without numpy)."""
    from ..serving.predict import default_start as start
    return start(prompts)


def start_of(a, prompts: str) -> str:
    """How a command's users start: ``--start``, else the workload's default (:func:`default_start`)."""
    return getattr(a, "start", None) or default_start(prompts)


def prompts_of(a, scenario=None) -> str:
    """The prompts a command's predictions use: ``--prompts``, else the scenario's workload (else distinct)."""
    if getattr(a, "prompts", None):
        return a.prompts
    from ..hardware.scenarios import as_topology
    from ..serving.predict import default_prompts
    return default_prompts(as_topology(scenario if scenario is not None else a.scenario))


def add_cache_flags(p) -> None:
    """--cold and --cached: whether the prompts' KV is in the prefix cache (default: the workload's)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--cold", action="store_true",
                   help="uncached prompts: every request is prefilled (default for distinct prompts: independent "
                        "users' prompts were never sent before)")
    g.add_argument("--cached", action="store_true",
                   help="cached prompts: every prompt's KV is in the prefix cache (default for one shared prompt: "
                        "every request after the first hits it)")


def cache_flag(a) -> bool | None:
    """predict()'s ``prefix_cached`` from --cold / --cached: False, True, or None (the workload's default)."""
    if getattr(a, "cold", False):
        return False
    return True if getattr(a, "cached", False) else None


START_TEXT = {"together": "users start together", "staggered": "users staggered, steady state"}


def workload_text(prompts: str, prefix_cached: bool | None = None, start: str | None = None) -> str:
    """The workload in a header: who the users are, whether their prompts are cached (None: the default of
    the workload, :func:`sacmodel.serving.predict.default_cached`) and how they start (None: not said, as for
    an open loop)."""
    if prefix_cached is None:
        prefix_cached = prompts == "shared"
    if prompts == "shared":
        text = ("one shared cached prompt" if prefix_cached else "one shared prompt prefilled by every request") \
            + " and identical outputs: the testbed benchmark"
    else:
        text = f"independent users: distinct prompts (each {'cached' if prefix_cached else 'prefilled'}) and outputs"
    return text + (f"; {START_TEXT[start]}" if start else "")


def closed_start(a, prompts: str) -> str | None:
    """The start a command's closed loop uses (None for an open loop, whose arrivals are Poisson)."""
    return None if getattr(a, "rate", None) else start_of(a, prompts)
