"""Victim turns skipped once each is sure to fail (``Solver._covered``).

After the preemptor's turn a simulation waits only for the validator. Once every victim still waiting
would find its first task in the memo of tasks that fitted nowhere, the solver skips their turns. Each
workload runs the default cycle with the skip and with it switched off: the records must be
byte-identical, the work counters equal and the victims offered per node the same, and the skip must
have fired where victims cannot go back.
"""

from __future__ import annotations

from typing import Any

import pytest

from ingest import events as ev
from scheduler.engine.session import SessionConfig
from tests.support.solver_workloads import CASES, grouped_victims, same_with_and_without
from tests.support.synthetic import reclaim_large_events, synthetic_events


def _both(monkeypatch: pytest.MonkeyPatch, events: list[ev.Event], config: SessionConfig) -> int:
    """Run with and without the skip; how often it fired."""
    return same_with_and_without(
        monkeypatch,
        events,
        config,
        "_covered",
        lambda s, out: bool(out[1]),
        lambda s, jobs, start, waiting, failed: (start, False),
    )


@pytest.mark.parametrize("nodes", [4, 10, 24])
def test_kai_reclaim_large_skips_the_victims_turns(monkeypatch: pytest.MonkeyPatch, nodes: int) -> None:
    # The cluster is full once the gang is placed: in every simulation the first victim's failure covers
    # the rest (KAI's ReclaimLargeJobs, N/2 partial jobs, each simulated once).
    assert _both(monkeypatch, reclaim_large_events(nodes), SessionConfig()) == nodes // 2


@pytest.mark.parametrize("across", [False, True])
def test_grouped_victims_decide_the_same(monkeypatch: pytest.MonkeyPatch, across: bool) -> None:
    assert _both(monkeypatch, grouped_victims(8, lambda g: g % 3 == 0, across), SessionConfig()) > 0


@pytest.mark.parametrize(("spec", "job_budget", "action_budget"), CASES)
def test_contended_mixes_decide_the_same_with_turns_skipped(
    monkeypatch: pytest.MonkeyPatch, spec: Any, job_budget: int | None, action_budget: int | None
) -> None:
    config = SessionConfig(solver_job_budget=job_budget, solver_action_budget=action_budget)
    _both(monkeypatch, synthetic_events(spec), config)
