"""Partial jobs that start reading victims where the earlier ones stopped (``Solver._skip_read``).

A gang is solved partial job by partial job, each reading the shared victim order from the top until its
bounds pass. Where the recorded victims lie in what was read before and the bounds fail on all of it, the
solver skips those reads. Each workload runs the default cycle with the skip and with it switched off:
the records must be byte-identical and the work counters equal (the skipped bounds checks are still
counted as filtered), and the skip must have fired.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ingest import events as ev
from scheduler.engine.actions import solver
from scheduler.engine.cycle import DEFAULT_ORDER, open_session, run_actions
from scheduler.engine.record.decisions import make_record
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import fold
from tests.support.solver_workloads import CASES, grouped_victims
from tests.support.synthetic import reclaim_large_events, synthetic_events


def _cycle(events: list[ev.Event], config: SessionConfig) -> tuple[bytes, dict[str, int]]:
    ssn = open_session(fold(events), config=config, now_ms=10**9)
    run_actions(ssn, DEFAULT_ORDER)
    return make_record(ssn, 0).dumps(), dict(ssn.work)


def _both(monkeypatch: pytest.MonkeyPatch, events: list[ev.Event], config: SessionConfig) -> int:
    """Run with and without the skip, assert they agree, and return how often the skip fired.

    Besides the records and counters, the victims each simulation could take from every node (what the
    skipped reads must still offer, less the recorded jobs) must be the same in both runs."""
    fired: list[int] = []
    offered: list[list[list[tuple[str, ...]]]] = [[], []]
    skip: Callable[..., Any] = solver.Solver._skip_read
    simulate: Callable[..., Any] = solver.Solver._simulate_scenario

    def counted(s: solver.Solver, *args: Any) -> Any:
        out = skip(s, *args)
        fired.append(out is not None)
        return out

    def noted(run: int) -> Callable[..., Any]:
        def note(s: solver.Solver, stmt: Any, scenario: solver.Scenario) -> Any:
            offered[run].append([tuple(t.uid for t in scenario.potential_on(n.name)) for n in s.ssn.nodes])
            return simulate(s, stmt, scenario)

        return note

    monkeypatch.setattr(solver.Solver, "_skip_read", counted)
    monkeypatch.setattr(solver.Solver, "_simulate_scenario", noted(0))
    with_skip = _cycle(events, config)
    monkeypatch.setattr(solver.Solver, "_skip_read", lambda s, *args: None)
    monkeypatch.setattr(solver.Solver, "_simulate_scenario", noted(1))
    without = _cycle(events, config)
    monkeypatch.undo()
    assert with_skip[0] == without[0]
    assert with_skip[1] == without[1]
    assert offered[0] == offered[1]
    return sum(fired)


@pytest.mark.parametrize("nodes", [4, 10, 24])
def test_kai_reclaim_large_decides_the_same_with_reads_skipped(
    monkeypatch: pytest.MonkeyPatch, nodes: int
) -> None:
    # Every partial job after the first skips (KAI's ReclaimLargeJobs: N/2 partial jobs).
    assert _both(monkeypatch, reclaim_large_events(nodes), SessionConfig()) == nodes // 2 - 1


@pytest.mark.parametrize(
    ("name", "elastic", "across", "fires"),
    [
        # whole groups of four tasks per entry: every partial job after the first skips
        ("gangs", lambda g: False, False, True),
        # pairs on neighbouring nodes: a pair that lost one node is partly put back, so a later partial
        # job's stream pushes the rest back and it reads from the top
        ("across", lambda g: False, True, False),
        # elastic victims give one task and are pushed back (they come first, being above their
        # minimum): nothing is plain enough to skip
        ("elastic", lambda g: True, False, False),
        ("mixed", lambda g: g % 3 == 0, False, False),
    ],
)
def test_grouped_victims_decide_the_same(
    monkeypatch: pytest.MonkeyPatch, name: str, elastic: Callable[[int], bool], across: bool, fires: bool
) -> None:
    fired = _both(monkeypatch, grouped_victims(8, elastic, across), SessionConfig())
    assert (fired > 0) is fires, name


@pytest.mark.parametrize(("spec", "job_budget", "action_budget"), CASES)
def test_contended_mixes_decide_the_same_with_reads_skipped(
    monkeypatch: pytest.MonkeyPatch, spec: Any, job_budget: int | None, action_budget: int | None
) -> None:
    config = SessionConfig(solver_job_budget=job_budget, solver_action_budget=action_budget)
    _both(monkeypatch, synthetic_events(spec), config)
