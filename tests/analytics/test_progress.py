"""The progress bars (analytics/progress.py) as a user at a terminal sees them, and the shared LOG argument."""

from __future__ import annotations

import argparse
import io
import re

import pytest
from rich.console import Console

from analytics.cli import build_parser
from analytics.progress import count_bar, day_bar

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _terminal() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=True, width=120), buf


def _shown(buf: io.StringIO) -> str:
    return _ANSI.sub("", buf.getvalue())


@pytest.mark.parametrize(
    ("title", "span_ms", "start_ms", "reports", "expected"),
    [
        # simulate / whatif on a run directory: days from 0
        ("simulating", 2 * 86_400_000, 0, [86_400_000], "simulating"),
        ("simulating", 2 * 86_400_000, 0, [86_400_000], "day 1.0 / 2.0"),
        # whatif on a service log: days from the log's first input
        ("what-if fairshare.k_value=0", 3 * 86_400_000, 5_000, [5_000 + 43_200_000], "day 0.5 / 3.0"),
        ("what-if fairshare.k_value=0", 3 * 86_400_000, 5_000, [0], "what-if fairshare.k_value=0"),
        # a report past the end is clamped to the end
        ("simulating", 86_400_000, 0, [10 * 86_400_000], "day 1.0 / 1.0"),
        # a label with braces or brackets is shown as it is, not formatted
        ("what-if x={'a': 1}", 86_400_000, 0, [0], "what-if x={'a': 1}"),
    ],
)
def test_day_bar_shows_simulated_days(
    title: str, span_ms: int, start_ms: int, reports: list[int], expected: str
) -> None:
    err, buf = _terminal()
    with day_bar(title, span_ms, start_ms=start_ms, err=err) as progress:
        for now in reports:
            progress(now)
    assert expected in _shown(buf)


@pytest.mark.parametrize(
    ("title", "unit", "total", "done", "expected"),
    [
        ("replaying", "cycles", 4, 3, "3/4 cycles"),
        ("backtesting", "pods", 10, 10, "10/10 pods"),
        ("what-if sweep of 2", "variants", 2, 1, "1/2 variants"),
    ],
)
def test_count_bar_shows_items_done_of_total(
    title: str, unit: str, total: int, done: int, expected: str
) -> None:
    err, buf = _terminal()
    with count_bar(title, unit, err=err) as bar:
        bar.set_total(total)
        for _ in range(done):
            bar.advance()
    shown = _shown(buf)
    assert title in shown
    assert expected in shown


def test_bars_draw_nothing_when_stderr_is_not_a_terminal() -> None:
    buf = io.StringIO()
    err = Console(file=buf, force_terminal=False)
    with day_bar("simulating", 86_400_000, err=err) as progress:
        progress(43_200_000)
    with count_bar("replaying", "cycles", total=2, err=err) as bar:
        bar.advance()
    assert buf.getvalue() == ""


def test_replay_and_whatif_take_the_same_log_argument() -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    choices = sub.choices
    logs = {}
    for name in ("replay", "whatif"):
        (log,) = [a for a in choices[name]._actions if a.dest == "log"]
        logs[name] = (log.metavar, log.help, log.type, log.nargs)
    assert logs["replay"] == logs["whatif"]
    assert logs["replay"][0] == "LOG"
    assert "kafka://HOST:PORT" in str(logs["replay"][1])
    assert build_parser().parse_args(["whatif", "some/dir", "--set", "fairshare.k_value=0"]).log == "some/dir"
