"""The reclaim solver's running account of what a simulation's victims lose (``reclaimable.LossTracker``)
answers as the from-scratch check does (``reclaimable.refused_whatever_else``) at every turn.

The tracker keeps sums and, per leveled victim queue, only the last chunk in the validator's order, on
the argument that every chunk of a queue passes exactly when its last one does. Here each real
simulation of contended workloads (the solver-proof workloads, some with victims the validator may not
lose) asks both after every victim's turn, the reference with the lost victims in ``evicted`` order and
their tasks as they stand then, and the answers must agree, refusals included.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from scheduler.engine import reclaimable
from scheduler.engine.actions import reclaim
from scheduler.engine.cycle import ACTIONS, DEFAULT_ORDER, open_session, run_actions
from scheduler.engine.session import ACTIVE_ALLOCATED, JobInfo, SessionConfig, TaskInfo
from scheduler.engine.state import PodStatus, fold
from tests.support.solver_workloads import CASES
from tests.support.synthetic import SyntheticSpec, synthetic_events


def test_loss_tracker_answers_as_the_full_check_at_every_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[bool] = []

    class Checked(reclaimable.LossTracker):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.passed: list[str] = []

        def lose(self, job: JobInfo, tasks: Sequence[TaskInfo]) -> None:
            super().lose(job, tasks)
            self.passed.append(job.uid)
            want = self.reference()
            assert self.refused() == want
            answers.append(want)

        def reference(self) -> bool:
            by_job: dict[str, list[TaskInfo]] = {}
            for t in self._evicted:
                by_job.setdefault(t.job.uid, []).append(t)
            lost = []
            for uid, tasks in by_job.items():
                if uid not in self.passed:
                    continue
                mine = [t for t in tasks if t.status in (PodStatus.RELEASING, PodStatus.PIPELINED)]
                if mine:
                    lost.append((mine[0].job, mine))
            if not any(t.status is PodStatus.RELEASING for _, ts in lost for t in ts):
                return False
            return reclaimable.refused_whatever_else(
                self.ssn, self.snap, self.job, self.req, lost, self._evicted
            )

    monkeypatch.setattr(reclaim, "LossTracker", Checked)
    for spec, job_budget, action_budget in CASES:
        before = len(answers)
        _cycle(spec, job_budget, action_budget)
        assert len(answers) > before, spec  # reclaim simulated with victims taking turns
    # Both answers occurred, so the comparison covered refusals as well as passes.
    assert set(answers) == {True, False}


def _cycle(spec: SyntheticSpec, job_budget: int | None, action_budget: int | None) -> None:
    config = SessionConfig(solver_job_budget=job_budget, solver_action_budget=action_budget)
    run_actions(open_session(fold(synthetic_events(spec)), config=config, now_ms=10**9), DEFAULT_ORDER)


def test_loss_tracker_answers_as_the_full_check_on_random_losses() -> None:
    """Random losses in any order against random queue snapshots, so that chunk checks sit near their
    lines: victims of several queues, elastic and gang victims, tasks lost, re-placed or put back."""
    spec = SyntheticSpec(nodes=40, pending_pods=400, departments=3, queues_per_department=3, seed=3)
    ssn = open_session(fold(synthetic_events(spec)), now_ms=10**9)
    ACTIONS["allocate"](ssn)  # victims to lose: what allocate placed
    running = [
        j for j in ssn.jobs if j.queue is not None and any(t.status in ACTIVE_ALLOCATED for t in j.tasks)
    ]
    pending = [j for j in ssn.jobs if j.queue is not None and j.tasks_to_allocate()]
    outcomes: set[tuple[bool, bool]] = set()
    for seed in range(300):
        rng = random.Random(seed)
        job = rng.choice(pending)
        victims = [v for v in running if v.queue is not job.queue]
        chosen = rng.sample(victims, min(len(victims), rng.randint(2, 12)))
        evicted = [t for v in chosen for t in v.tasks if t.status in ACTIVE_ALLOCATED]
        rng.shuffle(evicted)
        base = reclaimable.snapshot(ssn)
        snap = reclaimable.QueueSnapshot(
            {n: [x * rng.choice((1, 1, 2, 3)) // 2 for x in v] for n, v in base.allocated.items()},
            base.allocated_np,
        )
        req = [rng.choice((0, 1000, 8000)), rng.choice((0, 4000)), 0]
        statuses = {t.uid: t.status for t in evicted}
        for t in evicted:
            t.status = PodStatus.RELEASING
        tracker = reclaimable.LossTracker(ssn, snap, job, req, evicted)
        passed: set[str] = set()
        try:
            for v in rng.sample(chosen, len(chosen)):
                mine = [t for t in evicted if t.job is v]
                for t in mine:
                    t.status = rng.choice(
                        (PodStatus.RELEASING, PodStatus.RELEASING, PodStatus.PIPELINED, PodStatus.RUNNING)
                    )
                tracker.lose(v, mine)
                passed.add(v.uid)
                lost = _lost_in_order(evicted, passed)
                want = any(t.status is PodStatus.RELEASING for _, ts in lost for t in ts) and (
                    reclaimable.refused_whatever_else(ssn, snap, job, req, lost, evicted)
                )
                assert tracker.refused() == want, (seed, v.uid)
                outcomes.add((want, tracker.chunk_refused))
        finally:
            for t in evicted:
                t.status = statuses[t.uid]
    # Refusals by a chunk check and by the boundary alone both occurred, and passes.
    assert outcomes >= {(True, True), (True, False), (False, False)}


def _lost_in_order(evicted: list[TaskInfo], passed: set[str]) -> list[tuple[JobInfo, list[TaskInfo]]]:
    """The victims whose turn has passed, in the validator's order, with the tasks it sees lost."""
    by_job: dict[str, list[TaskInfo]] = {}
    for t in evicted:
        by_job.setdefault(t.job.uid, []).append(t)
    out = []
    for uid, tasks in by_job.items():
        mine = [t for t in tasks if t.status in (PodStatus.RELEASING, PodStatus.PIPELINED)]
        if uid in passed and mine:
            out.append((mine[0].job, mine))
    return out
