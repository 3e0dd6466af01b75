"""Progress on standard error for work that can take more than a couple of seconds.

:func:`track` wraps a loop with a rich bar (count, elapsed time and ETA); :func:`status` shows a spinner
with the elapsed time for work of unknown length. Both draw only when standard error is a terminal and
``SACMODEL_PROGRESS`` is not ``0``, so pipes, files, JSON/CSV output and tests stay clean. Nested uses share
one display (rich allows one live display at a time), and the bars vanish when done.
"""
from __future__ import annotations

import contextlib
import os
import sys

_live = None        # the active rich Progress, shared by nested uses


def enabled() -> bool:
    if os.environ.get("SACMODEL_PROGRESS", "").strip() == "0":
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def _display():
    global _live
    if _live is not None:
        yield _live
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("elapsed"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                   console=Console(stderr=True), transient=True)
    with bar:
        _live = bar
        try:
            yield bar
        finally:
            _live = None


def track(iterable, description: str, total: int | None = None):
    """Iterate over ``iterable`` with a progress bar and ETA (``total`` defaults to ``len(iterable)``)."""
    if not enabled():
        yield from iterable
        return
    if total is None:
        total = len(iterable) if hasattr(iterable, "__len__") else None
    with _display() as bar:
        task = bar.add_task(description, total=total)
        try:
            for x in iterable:
                yield x
                bar.advance(task)
        finally:
            bar.remove_task(task)


@contextlib.contextmanager
def status(description: str):
    """A spinner with the elapsed time around work of unknown length."""
    if not enabled():
        yield
        return
    with _display() as bar:
        task = bar.add_task(description, total=None)
        try:
            yield
        finally:
            bar.remove_task(task)
