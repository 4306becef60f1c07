"""Simulations the victim solver proves hopeless (issue 12): same decisions, same search, less work.

Before re-placing anything, the solver checks the bounds of exactly what one simulation evicts
(``Solver._hopeless``; for reclaim also the fair-share boundary, ``reclaimable.loss_refused_at_boundary``).
A simulation proved hopeless is counted as simulated and failed, so the search and its budget are unchanged.
A simulation also stops as soon as a victim the validator may not lose ends its turn with a task still
evicted (``Solver._loses_kept``). Each workload below runs the whole default cycle three ways: with the
proofs, with every proved simulation also really simulated (it must fail), and with both shortcuts
switched off. The records must be byte-identical and the work counters equal (but for ``proved``).
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.engine.actions import solver
from scheduler.engine.cycle import DEFAULT_ORDER, open_session, run_actions
from scheduler.engine.decisions import make_record
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import fold
from scheduler.synthetic import SyntheticSpec, synthetic_events

SMALL = dict(nodes=12, gpus_per_node=8, pending_pods=120, departments=3, queues_per_department=3)

# (workload, solver_job_budget, solver_action_budget): contended synthetic mixes where reclaim searches
# (each proves some of its simulations hopeless), with budgets that cut searches and budgets that do not.
CASES = [
    (SyntheticSpec(nodes=40, pending_pods=400, seed=0), 64, 256),
    (SyntheticSpec(nodes=40, pending_pods=400, seed=1), 64, 256),
    (SyntheticSpec(nodes=40, pending_pods=400, seed=2), 8, 32),
    (SyntheticSpec(**SMALL, seed=0), None, None),  # type: ignore[arg-type]
    (SyntheticSpec(**SMALL, seed=2), None, None),  # type: ignore[arg-type]
    (SyntheticSpec(**SMALL, seed=2), 4, 16),  # type: ignore[arg-type]
]


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

    checked: list[bool] = []
    orig = solver.Solver._simulate

    def simulate(s: solver.Solver, stmt: Any, scenario: Any, evicted: Any, hopeless: bool = False) -> bool:
        if hopeless:  # really simulate it too: it must fail (and leave the session as it was)
            checked.append(s._simulate_once(stmt, scenario, evicted))
            s.ssn.work[f"{s.action}.simulations"] -= 1
        return orig(s, stmt, scenario, evicted, hopeless)

    monkeypatch.setattr(solver.Solver, "_simulate", simulate)
    checking, checked_work = _cycle(spec, job_budget, action_budget)
    assert checked and not any(checked)
    assert checking == with_proofs and checked_work == work

    monkeypatch.setattr(solver.Solver, "_hopeless", lambda s, scenario, evicted: False)
    monkeypatch.setattr(solver.Solver, "_loses_kept", lambda s, scenario, victim, evicted: False)
    without, plain_work = _cycle(spec, job_budget, action_budget)
    assert without == with_proofs
    proved = {k for k in work if k.endswith(".proved")}
    assert {k: v for k, v in work.items() if k not in proved} == plain_work
