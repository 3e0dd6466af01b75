"""Progress on standard error for work that can take more than a couple of seconds.

:func:`track` wraps a loop with a rich bar (count, elapsed time and ETA); :func:`status` shows a spinner
with the elapsed time for work of unknown length; :func:`counter` counts finished items of a loop the caller
drives. On a terminal they draw rich bars that vanish when done (nested uses share one display: rich allows
one live display at a time). When standard error is not a terminal (piped, logged) they print one plain line
every ``LINE_EVERY_S`` seconds of work, so a long run is never silent and a short one prints nothing.
``SACMODEL_PROGRESS=0`` turns both off (the test suite does).
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

_live = None        # the active rich Progress, shared by nested uses
LINE_EVERY_S = 5.0  # seconds between progress lines when standard error is not a terminal


def _off() -> bool:
    return os.environ.get("SACMODEL_PROGRESS", "").strip() == "0"


class _Lines:
    """Progress as a plain line on standard error every LINE_EVERY_S seconds (from a timer thread, so that
    one long item still reports)."""

    def __init__(self, description: str, total: int | None):
        self.description, self.total, self.done = description, total, 0
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(LINE_EVERY_S):
            of = f"{self.done:,}/{self.total:,}" if self.total else f"{self.done:,}" if self.done else "working"
            print(f"{self.description}: {of}, {time.monotonic() - self.t0:,.0f} s", file=sys.stderr, flush=True)

    def update(self, done: int) -> None:
        self.done = done

    def stop(self) -> None:
        self._stop.set()


def enabled() -> bool:
    """True when rich bars can draw (standard error is a terminal and progress is not turned off)."""
    if _off():
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
    if total is None:
        total = len(iterable) if hasattr(iterable, "__len__") else None
    if not enabled():
        if _off() or _live is not None:
            yield from iterable
            return
        c = counter(total, description)
        try:
            for i, x in enumerate(iterable, 1):
                yield x
                c.update(i)
        finally:
            c.stop()
        return
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
        c = None if _off() else _Lines(description, None)
        try:
            yield
        finally:
            if c:
                c.stop()
        return
    with _display() as bar:
        task = bar.add_task(description, total=None)
        try:
            yield
        finally:
            bar.remove_task(task)


class _Bar:
    """A rich bar of finished items (on a terminal)."""

    def __init__(self, description: str, total: int | None):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        self.p = Progress(TextColumn(description), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          transient=True, console=Console(stderr=True))
        self.task = self.p.add_task(description, total=total)
        self.p.start()

    def update(self, done: int) -> None:
        self.p.update(self.task, completed=done)

    def stop(self) -> None:
        self.p.stop()


class _Nothing:
    def update(self, done: int) -> None:
        pass

    def stop(self) -> None:
        pass


def counter(total: int | None, description: str, on: bool = True):
    """An object with ``update(done)`` and ``stop()``: a bar on a terminal, a line every few seconds otherwise,
    nothing when ``on`` is False or progress is turned off."""
    if not on or _off():
        return _Nothing()
    return _Bar(description, total) if enabled() and _live is None else _Lines(description, total)
