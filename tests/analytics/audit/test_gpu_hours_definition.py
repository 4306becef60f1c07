"""One number, one definition: every GPU-hours figure is the rule of :mod:`analytics.audit.gpuhours`.

On the two-queue example cut to two days (one reclaim eviction five minutes in, a pod still running at the
end), the simulate summary, ``hourglass report``, ``hourglass sql`` over ``pod_runs`` and
:func:`analytics.audit.gpuhours.held_gpu_ms` give each queue the same milli-GPU x ms, over the whole run and over
windows that cut the evicted run (in its grace period and before it) and the run still open at the end.
Floats are compared with a tolerance of half a GPU-millisecond, in hours.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from analytics.audit.gpuhours import MILLI_GPU_MS_PER_GPU_HOUR, held_gpu_ms
from analytics.cli import main
from tests.support.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "two-queue-oscillation.yaml"
DAY = 86_400_000
END = 2 * DAY
TOL_H = 0.5 / 3_600_000  # half a GPU-millisecond, in GPU-hours


class Run(NamedTuple):
    dir: Path
    summary: dict[str, Any]
    evicted: tuple[int, int, int]  # the evicted run: bound, PodReleasing, its end (the grace period's end)
    open_start: int  # the run still open at the end of the log starts here


def _cli(*args: str) -> Any:
    """Run the ``hourglass`` command line in-process; its stdout as JSON."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(args)) == 0
    return json.loads(out.getvalue())


def _sql(run: Path, query: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = _cli("sql", "--store", str(run), "--format", "json", query)
    return rows


def _simulate(out: Path, duration: str) -> dict[str, Any]:
    summary: dict[str, Any] = _cli(
        "simulate", "--config", str(EXAMPLE), "--set", f"duration={duration}", "--out", str(out), "--json"
    )
    return summary


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    out = tmp_path_factory.mktemp("gpuhours") / "run"
    summary = _simulate(out, "2d")
    evicted = _sql(
        out,
        """SELECT r.start_ms, min(e.at_ms) AS releasing_ms, r.end_ms FROM pod_runs r
           JOIN events e ON e.uid = r.uid AND e.type = 'PodReleasing' AND e.at_ms >= r.start_ms
           WHERE r.evicted GROUP BY ALL ORDER BY r.start_ms LIMIT 1""",
    )
    still = _sql(out, "SELECT start_ms FROM pod_runs WHERE end_ms IS NULL AND gpu_milli > 0")
    # The run must have what the definition is about: an eviction, and a pod still running at the end.
    assert summary["cluster"]["evictions"] >= 1 and evicted
    assert len(still) == 1
    ev = evicted[0]
    return Run(out, summary, (ev["start_ms"], ev["releasing_ms"], ev["end_ms"]), still[0]["start_ms"])


def _hours(ms: dict[str, int]) -> dict[str, float]:
    return {q: v / MILLI_GPU_MS_PER_GPU_HOUR for q, v in ms.items()}


def _assert_same(got: dict[str, float], want_ms: dict[str, int]) -> None:
    assert set(got) == set(want_ms)
    for q, v in _hours(want_ms).items():
        assert abs(got[q] - v) < TOL_H, (q, got[q], v)


# --------------------------------------------------------------------------- the sources


def _from_summary(run: Run, t1: int | None, t2: int | None) -> dict[str, float]:
    assert t1 is None and t2 is None
    return {q["name"]: q["gpu_hours"] for q in run.summary["queues"] if q["leaf"]}


def _from_report(run: Run, t1: int | None, t2: int | None) -> dict[str, float]:
    window = [
        *(["--from", str(t1)] if t1 is not None else []),
        *(["--to", str(t2)] if t2 is not None else []),
    ]
    rep = _cli("report", "--store", str(run.dir), "--format", "json", *window)
    return {q["name"]: q["gpu_hours"] for q in rep["queues"] if q["leaf"]}


def _from_sql(run: Run, t1: int | None, t2: int | None) -> dict[str, float]:
    # docs/report.md's queries: a still-running pod holds to the store's end, never past it.
    last = "(SELECT last_ms FROM run_span)"
    end = f"coalesce(end_ms, {last})" if t2 is None else f"least(coalesce(end_ms, {last}), {t2})"
    start = "start_ms" if t1 is None else f"greatest(start_ms, {t1})"
    rows = _sql(
        run.dir,
        f"SELECT queue, CAST(sum(gpu_milli * greatest(0, {end} - {start})) AS BIGINT) AS gpu_ms"
        " FROM pod_runs GROUP BY queue",
    )
    return {r["queue"]: r["gpu_ms"] / MILLI_GPU_MS_PER_GPU_HOUR for r in rows}


SOURCES: dict[str, Callable[[Run, int | None, int | None], dict[str, float]]] = {
    "summary": _from_summary,
    "report": _from_report,
    "sql": _from_sql,
}


@pytest.mark.parametrize("source", SOURCES)
def test_whole_run_agrees_to_the_gpu_millisecond(run: Run, source: str) -> None:
    _assert_same(SOURCES[source](run, None, None), held_gpu_ms(run.dir))


def test_cluster_total_and_log_end(run: Run) -> None:
    held = held_gpu_ms(run.dir)
    total = sum(held.values()) / MILLI_GPU_MS_PER_GPU_HOUR
    assert abs(run.summary["cluster"]["gpu_hours_allocated"] - total) < TOL_H
    rep = _cli("report", "--store", str(run.dir), "--format", "json")
    assert abs(rep["cluster"]["gpu_hours_allocated"] - total) < TOL_H
    # The log ends where the simulation does (a ClockTick there), so the pod still running at the end
    # holds until the same instant in the summary and in pod_runs.
    assert _sql(run.dir, "SELECT last_ms FROM run_span") == [{"last_ms": END}]
    assert run.summary["simulated_seconds"] * 1000 == END
    assert _sql(run.dir, 'SELECT type FROM events ORDER BY "offset" DESC LIMIT 1') == [{"type": "ClockTick"}]


# --------------------------------------------------------------------------- windows

# Each window as a function of (the evicted run's bound, releasing, end times; the open run's start).
WINDOWS: dict[str, Callable[[int, int, int, int], tuple[int, int]]] = {
    "to the middle of the grace period": lambda s, r, e, o: (0, (r + e) // 2),
    "inside the evicted run": lambda s, r, e, o: ((s + r) // 2, (r + e) // 2),
    "from the middle of the grace period": lambda s, r, e, o: ((r + e) // 2, DAY),
    "cutting the run still open at the end": lambda s, r, e, o: (o + 1_234, END),
    "past the end of the log": lambda s, r, e, o: (DAY + 5, END + DAY),
}


@pytest.mark.parametrize("source", ["report", "sql"])
@pytest.mark.parametrize("window", WINDOWS)
def test_a_window_agrees_to_the_gpu_millisecond(run: Run, window: str, source: str) -> None:
    t1, t2 = WINDOWS[window](*run.evicted, run.open_start)
    want = held_gpu_ms(run.dir, t1, t2)
    _assert_same(SOURCES[source](run, t1, t2), want)
    assert want["a"] > 0


def test_the_window_cuts_the_evicted_run_as_a_shorter_simulation_does(run: Run, tmp_path: Path) -> None:
    """The simulator's own accounting on a window: the same scenario ended in the evicted pod's grace
    period, when it is still releasing (an open run at the end of that log), holds what the window
    [0, end) of the two-day run holds."""
    s, r, e = run.evicted
    assert s < r < e
    cut = (r + e) // 2
    short = tmp_path / "short"
    summary = _simulate(short, f"{cut}ms")
    assert summary["cluster"]["evictions"] == 1
    want = held_gpu_ms(run.dir, 0, cut)
    assert held_gpu_ms(short) == want
    cut_run = Run(short, summary, run.evicted, cut)
    _assert_same(_from_summary(cut_run, None, None), want)
    _assert_same(_from_report(cut_run, None, None), want)
    assert _sql(short, "SELECT count(*) AS n FROM pod_runs WHERE end_ms IS NULL AND evicted") == [{"n": 1}]
