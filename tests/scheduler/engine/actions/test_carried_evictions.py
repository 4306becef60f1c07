"""Partial jobs that keep the previous one's victims evicted (``Solver._carry``) instead of rolling them back
and evicting them again.

Each workload runs the default cycle with the carry and with every carry replaced by the plain rollback:
the records must be byte-identical, the work counters equal (``proved`` included: the bounds read the base
state through copies), and the same victims offered per node to every simulation; and the carry must have
fired where the workload lets it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ingest import events as ev
from scheduler.engine.actions import solver
from scheduler.engine.cycle import DEFAULT_ORDER, open_session, run_actions
from scheduler.engine.record.decisions import make_record
from scheduler.engine.session import SessionConfig, Statement
from scheduler.engine.state import fold
from tests.support.solver_workloads import CASES, grouped_victims
from tests.support.synthetic import reclaim_large_events, synthetic_events


def _cycle(events: list[ev.Event], config: SessionConfig) -> tuple[bytes, dict[str, int]]:
    ssn = open_session(fold(events), config=config, now_ms=10**9)
    run_actions(ssn, DEFAULT_ORDER)
    return make_record(ssn, 0).dumps(), dict(ssn.work)


def _both(monkeypatch: pytest.MonkeyPatch, events: list[ev.Event], config: SessionConfig) -> int:
    """Run with and without carrying, assert they agree, and return how many partial jobs began carried."""
    carried: list[bool] = []
    offered: list[list[list[tuple[str, ...]]]] = [[], []]
    carry: Callable[..., Any] = solver.Solver._carry
    simulate: Callable[..., Any] = solver.Solver._simulate_scenario

    def counted(s: solver.Solver, stmt: Statement, recorded: list[Any]) -> None:
        carry(s, stmt, recorded)
        carried.append(bool(s._carried))

    def plain(s: solver.Solver, stmt: Statement, recorded: list[Any]) -> None:
        stmt.discard()
        s._carried = set()

    def noted(run: int) -> Callable[..., Any]:
        def note(s: solver.Solver, stmt: Any, scenario: solver.Scenario) -> Any:
            offered[run].append([tuple(t.uid for t in scenario.potential_on(n.name)) for n in s.ssn.nodes])
            return simulate(s, stmt, scenario)

        return note

    monkeypatch.setattr(solver.Solver, "_carry", counted)
    monkeypatch.setattr(solver.Solver, "_simulate_scenario", noted(0))
    with_carry = _cycle(events, config)
    monkeypatch.setattr(solver.Solver, "_carry", plain)
    monkeypatch.setattr(solver.Solver, "_simulate_scenario", noted(1))
    without = _cycle(events, config)
    monkeypatch.undo()
    assert with_carry[0] == without[0]
    assert with_carry[1] == without[1]
    assert offered[0] == offered[1]
    return sum(carried)


@pytest.mark.parametrize("nodes", [4, 10, 24])
def test_kai_reclaim_large_decides_the_same_with_evictions_carried(
    monkeypatch: pytest.MonkeyPatch, nodes: int
) -> None:
    # Every partial job but the last hands its victims on (KAI's ReclaimLargeJobs: N/2 partial jobs).
    assert _both(monkeypatch, reclaim_large_events(nodes), SessionConfig()) == nodes // 2 - 1


@pytest.mark.parametrize(
    ("name", "elastic", "across", "carries"),
    [
        ("gangs", lambda g: False, False, True),
        # a pair partly put back leaves the recorded victims short of the simulation's evictions
        ("across", lambda g: False, True, None),
        ("elastic", lambda g: True, False, None),
        ("mixed", lambda g: g % 3 == 0, False, None),
    ],
)
def test_grouped_victims_decide_the_same_with_evictions_carried(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    elastic: Callable[[int], bool],
    across: bool,
    carries: bool | None,
) -> None:
    carried = _both(monkeypatch, grouped_victims(8, elastic, across), SessionConfig())
    if carries is not None:
        assert (carried > 0) is carries, name


@pytest.mark.parametrize(("spec", "job_budget", "action_budget"), CASES)
def test_contended_mixes_decide_the_same_with_evictions_carried(
    monkeypatch: pytest.MonkeyPatch, spec: Any, job_budget: int | None, action_budget: int | None
) -> None:
    config = SessionConfig(solver_job_budget=job_budget, solver_action_budget=action_budget)
    _both(monkeypatch, synthetic_events(spec), config)
