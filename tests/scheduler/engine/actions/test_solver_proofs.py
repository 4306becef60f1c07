"""Simulations the victim solver proves hopeless (issue 12): same decisions, same search, less work.

Before re-placing anything, the solver checks the bounds of exactly what one simulation evicts
(``Solver._hopeless``; for reclaim also the fair-share boundary, ``reclaimable.loss_refused_at_boundary``).
A simulation proved hopeless is counted as simulated and failed, so the search and its budget are unchanged.
A simulation also stops as soon as a victim the validator may not lose ends its turn with a task still
evicted (``Solver._loses_kept``) or has a task that fits no node any more, alone or beside the preemptor
still to come (``Solver._kept_stranded``, ``Solver._pair_stranded``), and as
soon as what the victims whose turn has passed lose makes the validator refuse whatever else is lost
(``Solver._doomed``). Each workload below runs the whole default cycle three ways: with the
proofs; with every proved simulation also really simulated and every shortcut only noted while the
simulation goes on in full (each must then fail); and with the proofs and shortcuts switched off. The records must be byte-identical and the work counters equal (but for ``proved``).
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.engine.actions import consolidation_sim, solver
from scheduler.engine.cycle import DEFAULT_ORDER, open_session, run_actions
from scheduler.engine.record.decisions import make_record
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import fold
from tests.support.solver_workloads import CASES
from tests.support.synthetic import SyntheticSpec, synthetic_events


def _cycle(spec: SyntheticSpec, job_budget: int | None, action_budget: int | None) -> tuple[bytes, dict[str, int]]:
    """The default cycle on the workload: its record's bytes and its work counters."""
    config = SessionConfig(solver_job_budget=job_budget, solver_action_budget=action_budget)
    ssn = open_session(fold(synthetic_events(spec)), config=config, now_ms=10**9)
    run_actions(ssn, DEFAULT_ORDER)
    return make_record(ssn, 0).dumps(), dict(ssn.work)


@pytest.mark.parametrize(("spec", "job_budget", "action_budget"), CASES)
def test_proved_simulations_change_nothing(
    monkeypatch: pytest.MonkeyPatch, spec: SyntheticSpec, job_budget: int | None, action_budget: int | None
) -> None:
    with_proofs, work = _cycle(spec, job_budget, action_budget)
    assert work.get("reclaim.proved", 0) > 0  # the workload exercises the proofs

    # Checking run: every shortcut is only noted, the simulation goes on in full, and must then fail.
    checked: list[bool] = []
    fired: list[str] = []
    for name in ("_loses_kept", "_kept_stranded", "_pair_stranded", "_doomed"):
        shortcut = getattr(solver.Solver, name)

        def note(s: solver.Solver, *args: Any, _shortcut: Any = shortcut, _name: str = name) -> bool:
            if _shortcut(s, *args):
                fired.append(_name)
            return False

        monkeypatch.setattr(solver.Solver, name, note)
    orig = solver.Solver._simulate
    once = solver.Solver._simulate_once

    def simulate_once(s: solver.Solver, stmt: Any, scenario: Any, evicted: Any) -> bool:
        fired.clear()
        ok = once(s, stmt, scenario, evicted)
        if fired:
            checked.append(ok)
        return ok

    def simulate(s: solver.Solver, stmt: Any, scenario: Any, evicted: Any, hopeless: bool = False) -> bool:
        if hopeless:  # really simulate it too: it must fail (and leave the session as it was)
            checked.append(s._simulate_once(stmt, scenario, evicted))
            s.ssn.work[f"{s.action}.simulations"] -= 1
        return orig(s, stmt, scenario, evicted, hopeless)

    monkeypatch.setattr(solver.Solver, "_simulate_once", simulate_once)
    monkeypatch.setattr(solver.Solver, "_simulate", simulate)
    checking, checked_work = _cycle(spec, job_budget, action_budget)
    assert checked and not any(checked)
    assert checking == with_proofs and checked_work == work
    monkeypatch.undo()

    monkeypatch.setattr(solver.Solver, "_hopeless", lambda s, scenario, evicted: False)
    monkeypatch.setattr(solver.Solver, "_loses_kept", lambda s, *args: False)
    monkeypatch.setattr(solver.Solver, "_kept_stranded", lambda s, *args: False)
    monkeypatch.setattr(solver.Solver, "_doomed", lambda s, *args: False)
    monkeypatch.setattr(solver.Solver, "_pair_stranded", lambda s, *args: False)
    without, plain_work = _cycle(spec, job_budget, action_budget)
    assert without == with_proofs
    proved = {k for k in work if k.endswith(".proved")}
    assert {k: v for k, v in work.items() if k not in proved} == plain_work


@pytest.mark.parametrize(("spec", "job_budget", "action_budget"), CASES[:3] + CASES[-2:])
def test_hopeless_consolidation_simulations_change_nothing(
    monkeypatch: pytest.MonkeyPatch, spec: SyntheticSpec, job_budget: int | None, action_budget: int | None
) -> None:
    """Consolidation's own pre-check (``consolidation_sim._Solver._hopeless``): each simulation it ends
    would have failed in full, and switching it off changes no byte of the record."""
    with_check, work = _cycle(spec, job_budget, action_budget)
    assert work.get("consolidation.simulations", 0) > 0

    hopeless = consolidation_sim._Solver._hopeless
    simulate = consolidation_sim._Solver._simulate
    outcomes: list[bool] = []

    def noted(s: Any, stmt: Any, pending: Any, victims: Any, nodes: Any) -> bool:
        doomed = hopeless(s, pending, victims, nodes)
        ok = simulate(s, stmt, pending, victims, nodes)
        if doomed:
            outcomes.append(ok)
        return ok

    monkeypatch.setattr(consolidation_sim._Solver, "_hopeless", lambda s, pending, victims, nodes: False)
    monkeypatch.setattr(consolidation_sim._Solver, "_simulate", noted)
    without, plain_work = _cycle(spec, job_budget, action_budget)
    assert outcomes and not any(outcomes)
    assert without == with_check and plain_work == work
