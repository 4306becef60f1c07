"""The progress bars of the long commands, on stderr and only when it is a terminal.

Two kinds, both transient (gone when the work ends) and both drawn by ``rich``:

* :func:`day_bar` — simulated days done of the total (``simulating ━━━━ day 3.2 / 30.0 0:00:04``):
  ``hourglass simulate`` and ``hourglass whatif`` (a run directory's and a service log's re-run);
* :func:`count_bar` — items done of a total learnt on the way (``replaying ━━━━ 12/40 cycles 0:00:01``):
  ``hourglass replay`` (cycles), ``hourglass eta --backtest`` (pods), a ``whatif`` sweep (variants).

and one for work with no count to show, :func:`status` — a spinner, what is being done, the elapsed time
(``⠋ building the audit store run/audit.duckdb: loading the run's files 0:00:04``): the first use of a run
directory as a store, ``hourglass report --html``.

Nothing here reads the clock the work runs on: the bars only show what the caller reports.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, ProgressColumn, TaskID

__all__ = ["MS_PER_DAY", "CountBar", "count_bar", "day_bar", "status"]

MS_PER_DAY = 86_400_000


def _progress(err: Console, *middle: ProgressColumn) -> Progress:
    """The title, the bar, ``middle``, the elapsed time; transient, drawn only on a terminal."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.fields[title]}"),
        BarColumn(),
        *middle,
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )


@contextlib.contextmanager
def day_bar(
    title: str, span_ms: int, *, start_ms: int = 0, err: Console | None = None
) -> Iterator[Callable[[int], None]]:
    """A bar over ``span_ms`` of simulated time from ``start_ms``; yields ``progress(now_ms)`` to move it.

    Shows ``day D / N`` (days since ``start_ms``, one decimal); ``now_ms`` outside the span is clamped.
    ``err`` is the console to draw on (default: a new one on stderr).
    """
    from rich.console import Console
    from rich.progress import TextColumn

    console = err if err is not None else Console(stderr=True)
    span = max(span_ms, 0)
    with _progress(console, TextColumn("day {task.fields[day]:.1f} / {task.fields[days]:.1f}")) as bar:
        job = bar.add_task("days", total=max(span, 1), title=title, day=0.0, days=span / MS_PER_DAY)

        def progress(now_ms: int) -> None:
            done = min(max(now_ms - start_ms, 0), span)
            bar.update(job, completed=done, day=done / MS_PER_DAY)

        yield progress


class CountBar:
    """The handle :func:`count_bar` yields: :meth:`advance` one item, :meth:`set_total` once it is known."""

    def __init__(self, bar: Progress, job: TaskID) -> None:
        self._bar = bar
        self._job = job

    def advance(self, n: int = 1) -> None:
        """``n`` more items done."""
        self._bar.update(self._job, advance=n)

    def set_total(self, total: int) -> None:
        """The number of items in all (until then the bar pulses)."""
        self._bar.update(self._job, total=total)

    def print(self, text: str, out: Console) -> None:
        """One line of results for ``out`` (stdout): above the bar when both share the terminal, else on
        ``out`` itself, so piped output gets every line and never a piece of the bar."""
        if out.is_terminal and not self._bar.disable:
            self._bar.console.print(text, highlight=False, soft_wrap=True)
        else:
            out.print(text, highlight=False, soft_wrap=True)


@contextlib.contextmanager
def count_bar(
    title: str, unit: str, *, total: int | None = None, err: Console | None = None
) -> Iterator[CountBar]:
    """A bar counting ``unit`` done of ``total`` (None: unknown yet, :meth:`CountBar.set_total` later).

    Shows ``M/N UNIT``; ``err`` is the console to draw on (default: a new one on stderr).
    """
    from rich.console import Console
    from rich.progress import MofNCompleteColumn, TextColumn

    console = err if err is not None else Console(stderr=True)
    with _progress(console, MofNCompleteColumn(), TextColumn("{task.fields[unit]}")) as bar:
        yield CountBar(bar, bar.add_task(unit, total=total, title=title, unit=unit))


@contextlib.contextmanager
def status(title: str, *, err: Console | None = None) -> Iterator[Callable[[str], None]]:
    """A spinner with ``title`` and the elapsed time; yields ``step(text)`` to say what is being done now.

    Transient and drawn only when ``err`` (default: a new console on stderr) is a terminal, like the bars.
    """
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = err if err is not None else Console(stderr=True)
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.fields[title]}{task.fields[step]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as bar:
        job = bar.add_task(title, total=None, title=title, step="")

        def step(text: str) -> None:
            bar.update(job, step=f": {text}")

        yield step
