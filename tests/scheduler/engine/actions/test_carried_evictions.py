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
from scheduler.engine.session import SessionConfig, Statement
from tests.support.solver_workloads import CASES, grouped_victims, same_with_and_without
from tests.support.synthetic import reclaim_large_events, synthetic_events


def _plain(s: solver.Solver, stmt: Statement, recorded: list[Any]) -> None:
    """Every solved partial job rolled back whole, as before carrying."""
    stmt.discard()
    s._carried = set()


def _both(monkeypatch: pytest.MonkeyPatch, events: list[ev.Event], config: SessionConfig) -> int:
    """Run with and without carrying (the same records, counters and victims offered per node); how many
    partial jobs began carried."""
    return same_with_and_without(
        monkeypatch, events, config, "_carry", lambda s, out: bool(s._carried), _plain
    )


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
