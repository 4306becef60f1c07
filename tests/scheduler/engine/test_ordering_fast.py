"""The queue ordering's fast re-insertion (``JobsByQueue.fast``) pops exactly what the reference path pops.

The fast path looks a re-inserted queue's key up by its inputs and decides a tie of keys by the comparator's
rules 7-8 alone; the reference (``fast = False``) computes the key afresh and asks the whole comparator on a
tie. Property: for random synthetic clusters (flat and nested queue trees; idle, or busy after allocate), popping every
pending job -- each popped job sometimes "placed" (its init resources charged to its queue and ancestors, as
a commit does), sometimes pushed back -- gives the same sequence both ways; so does popping every victim of
a victim ordering built as the reclaim / preempt solvers build it (fixed victims, the job index's runs,
the rest of an elastic victim pushed back as a view); orderings that share their queue keys (a
:class:`KeyMemo`, as one solve's simulations do) pop what orderings asking the comparator itself pop; whole cycles give the same record byte for byte; and
every conformance scenario (hand-made ties: identical queues and jobs) ends in the same state.
"""

from __future__ import annotations

import json
from functools import cache
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.conformance import SCENARIOS_DIR
from scheduler.conformance.runner import run_doc, scenario_files
from scheduler.engine.actions.jobindex import JobIndex
from scheduler.engine.actions.solver import job_view, tasks_to_evict
from scheduler.engine.cycle import ACTIONS, DEFAULT_ORDER, open_session
from scheduler.engine.ordering import JobsByQueue, KeyMemo, job_init_resources
from scheduler.engine.record.decisions import make_record
from scheduler.engine.session import JobInfo, Session
from scheduler.engine.state import ClusterState, fold
from tests.support.synthetic import SyntheticSpec, synthetic_events


@cache
def _state(seed: int, depts: int, per: int) -> ClusterState:
    spec = SyntheticSpec(
        nodes=12,
        gpus_per_node=8,
        pending_pods=150,
        departments=depts,
        queues_per_department=per,
        seed=seed,
    )
    return fold(synthetic_events(spec))


def _pops(state: ClusterState, fast: bool, busy: bool, steps: list[int]) -> list[tuple[str, int]]:
    """Pop every job (`busy`: of a session after allocate, queues holding resources); after the i-th pop, steps[i] % 4 says: 0 nothing, 1 charge it, 2 push it back, 3 both
    (a partly placed gang goes back in). Returns (uid, step) per pop."""
    ssn = open_session(state, now_ms=10**9)
    if busy:
        ACTIONS["allocate"](ssn)
    out: list[tuple[str, int]] = []
    with mock.patch.object(JobsByQueue, "fast", fast):
        order = JobsByQueue(ssn, [j for j in ssn.jobs if j.has_tasks_to_allocate()])
        pushed: dict[str, int] = {}
        i = 0
        while (job := order.pop()) is not None:
            step = steps[i % len(steps)] % 4 if steps else 0
            i += 1
            out.append((job.uid, step))
            if step & 1:
                _charge(ssn, job)
            if step & 2 and pushed.get(job.uid, 0) < 2:  # each job back at most twice: the loop ends
                pushed[job.uid] = pushed.get(job.uid, 0) + 1
                order.push(job)
    return out


def _charge(ssn: Session, job: JobInfo) -> None:
    """Account the job's init resources to its queue and ancestors, as placing it would."""
    assert job.queue is not None
    v = job_init_resources(ssn, job)
    for q in job.queue.ancestors():
        for r in range(3):
            q.allocated[r] += v[r]


trees = st.sampled_from([(1, 5), (1, 20), (3, 3), (4, 2), (2, 6)])


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 5),
    tree=trees,
    busy=st.booleans(),
    steps=st.lists(st.integers(0, 3), max_size=12),
)
def test_fast_reinsertion_pops_the_same_sequence_as_the_reference(
    seed: int, tree: tuple[int, int], busy: bool, steps: list[int]
) -> None:
    state = _state(seed, tree[0], tree[1])
    fast = _pops(state, True, busy, steps)
    assert fast == _pops(state, False, busy, steps)
    assert fast


def _shared_pops(state: ClusterState, busy: bool, steps: list[int], keys: bool) -> list[tuple[str, int]]:
    """Three orderings in a row over one session, as one solve's simulations build them: one memo of
    comparisons, and (`keys`) one KeyMemo; what each pops is charged as `steps` says and stays charged for
    the next. Without `keys` every re-insertion asks the comparator (through the memo)."""
    ssn = open_session(state, now_ms=10**9)
    if busy:
        ACTIONS["allocate"](ssn)
    memo: dict[tuple[object, ...], int] = {}
    shared = KeyMemo() if keys else None
    out: list[tuple[str, int]] = []
    i = 0
    for _ in range(3):
        order = JobsByQueue(ssn, [j for j in ssn.jobs if j.has_tasks_to_allocate()], memo=memo, keys=shared)
        while (job := order.pop()) is not None:
            step = steps[i % len(steps)] % 2 if steps else 0
            i += 1
            out.append((job.uid, step))
            if step:
                _charge(ssn, job)
    return out


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 5),
    tree=trees,
    busy=st.booleans(),
    steps=st.lists(st.integers(0, 1), max_size=12),
)
def test_orderings_sharing_their_queue_keys_pop_what_the_comparator_pops(
    seed: int, tree: tuple[int, int], busy: bool, steps: list[int]
) -> None:
    state = _state(seed, tree[0], tree[1])
    shared = _shared_pops(state, busy, steps, keys=True)
    assert shared == _shared_pops(state, busy, steps, keys=False)
    assert len({uid for uid, _ in shared}) < len(shared)  # each ordering popped the jobs again


def _victim_pops(state: ClusterState, fast: bool, steps: list[int]) -> list[tuple[str, int, int]]:
    """Pop every victim (of a session after allocate) as solver._VictimStream does; after the i-th pop, an odd steps[i] pushes the rest
    of an elastic victim back. Returns (uid, tasks offered, step) per pop."""
    ssn = open_session(state, now_ms=10**9)
    ACTIONS["allocate"](ssn)  # jobs holding tasks: the victims
    index = JobIndex.of(ssn)
    out: list[tuple[str, int, int]] = []
    with mock.patch.object(JobsByQueue, "fast", fast):
        runs = {n: (entries, lambda j: False) for n, entries in sorted(index.victims.items()) if entries}
        order = JobsByQueue(ssn, (), victim=True, runs=runs, fixed_victims=True)
        i = 0
        while (view := order.pop()) is not None:
            step = steps[i % len(steps)] % 2 if steps else 0
            i += 1
            group, more = tasks_to_evict(view)
            out.append((view.uid, len(group), step))
            if more and step:
                taken = {t.uid for t in group}
                order.push(job_view(view, [t for t in view.tasks if t.uid not in taken]))
    return out


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 5),
    tree=trees,
    steps=st.lists(st.integers(0, 1), max_size=12),
)
def test_fast_victim_reinsertion_pops_the_same_sequence_as_the_reference(
    seed: int, tree: tuple[int, int], steps: list[int]
) -> None:
    state = _state(seed, tree[0], tree[1])
    fast = _victim_pops(state, True, steps)
    assert fast == _victim_pops(state, False, steps)
    assert fast  # there were victims to order


def _record(state: ClusterState, fast: bool) -> bytes:
    with mock.patch.object(JobsByQueue, "fast", fast):
        ssn = open_session(state, now_ms=10**9)
        for name in DEFAULT_ORDER:
            ACTIONS[name](ssn)
        return make_record(ssn, state.events_offset).dumps()


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 5), tree=trees)
def test_a_cycle_decides_the_same_with_the_fast_reinsertion(seed: int, tree: tuple[int, int]) -> None:
    state = _state(seed, tree[0], tree[1])
    assert _record(state, True) == _record(state, False)


def test_every_conformance_scenario_ends_the_same_with_the_fast_reinsertion() -> None:
    root = SCENARIOS_DIR
    docs = [
        json.loads(p.read_text())
        for p in [*scenario_files(root / "kai"), *scenario_files(root / "hourglass")]
    ]
    docs = [d for d in docs if d["run"]["mode"] != "fair_share"]
    assert len(docs) > 300
    for doc in docs:
        fast = repr(run_doc(json.loads(json.dumps(doc))))
        with mock.patch.object(JobsByQueue, "fast", False):
            assert fast == repr(run_doc(json.loads(json.dumps(doc)))), doc.get("name")
