"""Simulations in which no victim must be kept (``Solver._nothing_kept``, ``Solver._hopeless_unkept``).

When the action says that no victim's loss can be refused in any of the simulation's victim queues, the
solver skips the checks that foresee such a refusal, and its hopeless bound counts every victim as freed,
reusing its counts over the previous evicted list when the new one extends it. Each workload runs the
default cycle with each shortcut and with it switched off (the checks run, or the counts are made from
scratch): the records must be byte-identical, the work counters equal (a wrong bound would change the
count of simulations proved hopeless) and the victims offered per node the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ingest import events as ev
from scheduler.engine.actions import solver
from scheduler.engine.session import SessionConfig
from tests.support.solver_workloads import CASES, grouped_victims, same_with_and_without
from tests.support.synthetic import reclaim_large_events, synthetic_events

_unkept: Callable[..., bool] = solver.Solver._hopeless_unkept


def _from_scratch(s: solver.Solver, *args: Any) -> bool:
    s._unkept = None
    return _unkept(s, *args)


def _both(monkeypatch: pytest.MonkeyPatch, events: list[ev.Event], config: SessionConfig) -> tuple[int, int]:
    """Run each shortcut with and without; how often no victim was kept, and how often counts were
    reused."""
    nothing = same_with_and_without(
        monkeypatch, events, config, "_nothing_kept", lambda s, out: bool(out), lambda s, *args: False
    )
    reused: list[int] = []
    inside = [False]  # within _hopeless_unkept: a copy of the slots there is a reuse
    copy_for = solver._Slots.copy_for

    def marked(s: solver.Solver, *args: Any) -> bool:
        inside[0] = True
        try:
            return _unkept(s, *args)
        finally:
            inside[0] = False

    def counted(slots: solver._Slots, tasks: Any) -> solver._Slots:
        if inside[0]:
            reused.append(1)
        return copy_for(slots, tasks)

    monkeypatch.setattr(solver.Solver, "_hopeless_unkept", marked)
    monkeypatch.setattr(solver._Slots, "copy_for", counted)
    same_with_and_without(monkeypatch, events, config, "_hopeless_unkept", lambda s, out: True, _from_scratch)
    return nothing, len(reused)


@pytest.mark.parametrize("nodes", [4, 10, 24])
def test_kai_reclaim_large_keeps_no_victim(monkeypatch: pytest.MonkeyPatch, nodes: int) -> None:
    # Queue a deserves nothing: no loss is refused. Every simulation after the first reuses the counts.
    nothing, reused = _both(monkeypatch, reclaim_large_events(nodes), SessionConfig())
    assert nothing >= nodes // 2
    assert reused == nodes // 2 - 1


@pytest.mark.parametrize("across", [False, True])
def test_grouped_victims_decide_the_same(monkeypatch: pytest.MonkeyPatch, across: bool) -> None:
    nothing, _ = _both(monkeypatch, grouped_victims(8, lambda g: g % 3 == 0, across), SessionConfig())
    assert nothing > 0


@pytest.mark.parametrize(("spec", "job_budget", "action_budget"), CASES)
def test_contended_mixes_decide_the_same(
    monkeypatch: pytest.MonkeyPatch, spec: Any, job_budget: int | None, action_budget: int | None
) -> None:
    config = SessionConfig(solver_job_budget=job_budget, solver_action_budget=action_budget)
    _both(monkeypatch, synthetic_events(spec), config)
