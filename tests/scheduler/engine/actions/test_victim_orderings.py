"""Victim orderings and consolidation's kept indexes decide exactly as the plain rebuilt ones do.

* A victim ordering with ``fixed_victims`` keeps each leaf's popped victims as a running sum and keys its
  queues by it; the plain ordering (no ``fixed_victims``, a heap of job views) asks the comparator with the
  popped victims summed afresh at every comparison. Both must pop the same victims in the same order,
  elastic rests pushed back included.
* Consolidation keeps its victim runs and its jobs with pending tasks across the action's pending jobs
  (:class:`~scheduler.engine.actions.consolidation_sim.ConsolidationIndex`); rebuilt per prefix and per
  simulation as before, the record must be the same bytes.
* The reclaim boundary bound read from :class:`~scheduler.engine.reclaimable.EvictedTotals` answers as the
  bound summed over the evicted tasks.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.engine import reclaimable
from scheduler.engine.actions import consolidation, consolidation_sim, reclaim
from scheduler.engine.actions.consolidation_sim import UNLIMITED, job_view, tasks_to_evict
from scheduler.engine.actions.jobindex import JobIndex
from scheduler.engine.cycle import ACTIONS, DEFAULT_ORDER, open_session
from scheduler.engine.ordering import JobsByQueue
from scheduler.engine.record.decisions import make_record
from scheduler.engine.session import JobInfo, Session, SessionConfig
from scheduler.engine.state import ClusterState, fold
from tests.support.synthetic import SyntheticSpec, contention_events, synthetic_events


@cache
def _state(seed: int, depts: int, per: int) -> ClusterState:
    spec = SyntheticSpec(
        nodes=12, gpus_per_node=8, pending_pods=150, departments=depts, queues_per_department=per, seed=seed
    )
    return fold(synthetic_events(spec))


def _victim_pops(state: ClusterState, kept: bool, steps: list[int]) -> list[tuple[str, int, int]]:
    """Pop every victim of a session after allocate; an odd steps[i] pushes an elastic victim's rest back.

    `kept`: the job index's runs with fixed victims (running sums); else a heap of views, summed afresh."""
    ssn = open_session(state, now_ms=10**9)
    ACTIONS["allocate"](ssn)
    if kept:
        index = JobIndex.of(ssn)
        runs = {n: (entries, lambda j: False) for n, entries in sorted(index.victims.items()) if entries}
        order = JobsByQueue(ssn, (), victim=True, runs=runs, fixed_victims=True)
    else:
        views = [
            job_view(j, j.tasks)
            for j in sorted(ssn.jobs, key=lambda j: j.index)
            if j.queue is not None and j.preemptible and j.active_allocated() > 0
        ]
        order = JobsByQueue(ssn, views, victim=True)
    out: list[tuple[str, int, int]] = []
    i = 0
    while (view := order.pop()) is not None:
        step = steps[i % len(steps)] % 2 if steps else 0
        i += 1
        group, more = tasks_to_evict(view)
        out.append((view.uid, len(group), step))
        if more and step:
            order.push(job_view(view, [t for t in view.tasks if not any(t is g for g in group)]))
    return out


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 5),
    tree=st.sampled_from([(1, 5), (3, 3), (4, 2), (2, 6)]),
    steps=st.lists(st.integers(0, 1), max_size=12),
)
def test_running_victim_sums_pop_what_the_plain_comparator_pops(
    seed: int, tree: tuple[int, int], steps: list[int]
) -> None:
    state = _state(seed, *tree)
    kept = _victim_pops(state, True, steps)
    assert kept == _victim_pops(state, False, steps)
    assert len(kept) > 1


def _plain_victim_queue(ssn: Session, preemptor: JobInfo, limit: int, runs: Any = None) -> JobsByQueue:
    """Consolidation's victim ordering rebuilt from views of every job, compared afresh (the reference)."""
    views = [
        job_view(j, j.tasks)
        for j in ssn.jobs
        if j.queue is not None
        and j.queue.is_leaf
        and j.preemptible
        and j is not preemptor
        and j.active_allocated() > 0
    ]
    if limit != UNLIMITED:
        views = views[: limit + 1]
    return JobsByQueue(ssn, views, victim=True)


def _consolidation_record(events: list[Any], limit: int, plain: bool, mp: pytest.MonkeyPatch) -> bytes:
    state = fold(events)
    ssn = open_session(state, config=SessionConfig(max_consolidation_preemptees=limit), now_ms=10**9)
    with mp.context() as m:
        if plain:
            solve = consolidation_sim.solve
            m.setattr(consolidation, "solve", lambda s, job, lim, index=None: solve(s, job, lim))
            m.setattr(consolidation_sim, "victim_queue", _plain_victim_queue)
        for name in DEFAULT_ORDER:
            ACTIONS[name](ssn)
        assert ssn.work.get("consolidation.simulations", 0) > 0
    return make_record(ssn, state.events_offset).dumps()


@pytest.mark.parametrize(
    ("events", "limit"),
    [
        (contention_events(16, "consolidation"), UNLIMITED),
        (contention_events(16, "consolidation"), 3),
        (synthetic_events(SyntheticSpec(nodes=40, pending_pods=400, seed=1)), UNLIMITED),
        (synthetic_events(SyntheticSpec(nodes=40, pending_pods=400, seed=2)), 16),
    ],
)
def test_consolidation_index_decides_as_the_rebuilt_orderings(
    monkeypatch: pytest.MonkeyPatch, events: list[Any], limit: int
) -> None:
    kept = _consolidation_record(events, limit, False, monkeypatch)
    assert kept == _consolidation_record(events, limit, True, monkeypatch)


def test_boundary_bound_from_totals_answers_as_the_summed_one(monkeypatch: pytest.MonkeyPatch) -> None:
    bound = reclaimable.loss_refused_at_boundary
    answers: list[bool] = []

    def both(
        ssn: Session, snap: Any, job: JobInfo, req: Any, v: JobInfo, evicted: Any, totals: Any = None
    ) -> bool:
        fresh = bound(ssn, snap, job, req, v, evicted, reclaimable.EvictedTotals(ssn, evicted))
        assert fresh == bound(ssn, snap, job, req, v, evicted)
        answers.append(fresh)
        return bound(ssn, snap, job, req, v, evicted, totals)

    monkeypatch.setattr(reclaim, "loss_refused_at_boundary", both)
    spec = SyntheticSpec(nodes=40, pending_pods=400, departments=4, queues_per_department=4, seed=2)
    ssn = open_session(fold(synthetic_events(spec)), config=SessionConfig(), now_ms=10**9)
    for name in DEFAULT_ORDER:
        ACTIONS[name](ssn)
    assert True in answers and False in answers


def test_totals_refuse_another_evicted_list() -> None:
    spec = SyntheticSpec(nodes=4, pending_pods=20, seed=0)
    ssn = open_session(fold(synthetic_events(spec)), now_ms=10**9)
    ACTIONS["allocate"](ssn)
    job = next(j for j in ssn.jobs if j.queue is not None)
    tasks = list(job.tasks)
    totals = reclaimable.EvictedTotals(ssn, tasks)
    snap = reclaimable.snapshot(ssn)
    with pytest.raises(ValueError, match="another evicted list"):
        reclaimable.loss_refused_at_boundary(ssn, snap, job, [0, 0, 0], job, list(tasks), totals)
