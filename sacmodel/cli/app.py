"""The ``sacmodel`` parser and entry point: the command groups register their commands here (serving, data,
catalog, solvers, cluster). Bad input exits with status 2 and a one-line message.

Start-up is kept fast: the command modules import only the standard library and the light
:mod:`sacmodel.util.names` and :mod:`sacmodel.cli.types`; each command imports what it needs (sympy, pint,
scipy, rich) when it runs.
"""
from __future__ import annotations

import argparse
import sys

from .. import __version__
from . import catalog, data, serving
from .common import LIMITS_TEXT, Parser, _formatter, add_scenario, one_line, refuse_output_over_input



def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="sacmodel", formatter_class=_formatter,
        description="Predict LLM serving (TTFT, TBT, throughput, memory) with the KV cache in HBM or in DRAM / "
                    "CXL / RDMA memory pools (SAC and its baselines).",
        epilog="examples:\n"
               "  sacmodel compare                                   all systems, 16K-128K contexts\n"
               "  sacmodel predict --system cxl --context 128K       one system: metrics, memory, breakdown\n"
               "  sacmodel breakeven --a cxl --b dram --metric tbt --vary context --lo 8K --hi 256K\n"
               "  sacmodel plan --system cxl --context 128K --slo tbt_mean_ms=80\n"
               "  sacmodel <command> --help                          options and examples of a command\n\n"
               "Quantities take units (--lo '26 GB/s', --entry-bytes '1.125 KiB', contexts as 32K); arithmetic "
               "is never evaluated.\nBad input exits with status 2 and a one-line message. Every table "
               "command takes --json; those with one row per item take --csv.\n" + LIMITS_TEXT + ".")
    ap.add_argument("--version", action="version", version=f"sacmodel {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for register in (serving.register, data.register, catalog.register, serving.register_microbench):
        register(sub)
    from . import solvers as solvers_cli
    solvers_cli.register(sub)
    from . import cluster as cluster_cli  # replay, hitrate, and the cluster options of plan/sweep
    cluster_cli.register(sub, add_scenario)
    from .machine import add_machine
    for p in sub.choices.values():                 # every command that takes --scenario takes --gpu ... too
        if "--scenario" in p._option_string_actions:
            add_machine(p)
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    try:
        a = ap.parse_args(argv)
    except SystemExit as exc:          # --help, --version (0) and bad options (2), as a return value
        return exc.code if isinstance(exc.code, int) else 2
    try:
        refuse_output_over_input(ap, a)
        from .machine import apply_machine
        apply_machine(a)
        a.func(a)
    except BrokenPipeError:
        return 0
    except (ValueError, KeyError, OSError) as exc:
        # every user-facing error of the library is a ValueError subclass (TopologyError, UnitError, ...)
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"sacmodel: error: {one_line(str(msg))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sacmodel: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
