"""The reclaim validator's shortcuts answer as its plain definitions do (``scheduler.engine.reclaimable``).

* ``_kept_after`` sums the victims' losses per queue and checks only each leveled queue's last chunk;
  ``_kept_after_in_order`` is KAI's loop, chunk by chunk in the validator's order. Both must give the
  same refusal, the same kept allocations (in the same key order) and the same involved resources.
* ``loss_never_refused_at_boundary`` lets the action skip ``loss_refused_at_boundary`` for a whole victim
  queue: whenever it says so, the full check must say False for every victim of that queue.

Random victims (several queues in three departments, elastic and gang jobs, now and then one moved
onto the reclaimer's own path so that paths that never part are covered), random statuses and random
queue snapshots near their lines, on an allocated synthetic mix.
"""

from __future__ import annotations

import random
from functools import cache

from scheduler.engine import reclaimable
from scheduler.engine.cycle import ACTIONS, open_session
from scheduler.engine.session import ACTIVE_ALLOCATED, JobInfo, Session, TaskInfo
from scheduler.engine.state import PodStatus, fold
from tests.support.synthetic import SyntheticSpec, synthetic_events


@cache
def _allocated() -> tuple[Session, tuple[JobInfo, ...], tuple[JobInfo, ...]]:
    spec = SyntheticSpec(nodes=40, pending_pods=400, departments=3, queues_per_department=3, seed=3)
    ssn = open_session(fold(synthetic_events(spec)), now_ms=10**9)
    ACTIONS["allocate"](ssn)
    running = tuple(
        j for j in ssn.jobs if j.queue is not None and any(t.status in ACTIVE_ALLOCATED for t in j.tasks)
    )
    pending = tuple(j for j in ssn.jobs if j.queue is not None and j.tasks_to_allocate())
    return ssn, running, pending


def _scene(
    seed: int,
) -> tuple[Session, reclaimable.QueueSnapshot, JobInfo, list[int], list[tuple[JobInfo, list[TaskInfo]]]]:
    ssn, running, pending = _allocated()
    rng = random.Random(seed)
    job = rng.choice(pending)
    chosen = rng.sample(running, min(len(running), rng.randint(1, 16)))
    base = reclaimable.snapshot(ssn)
    snap = reclaimable.QueueSnapshot(
        {n: [x * rng.choice((1, 1, 2, 3)) // 2 for x in v] for n, v in base.allocated.items()},
        base.allocated_np,
    )
    req = [rng.choice((0, 1000, 8000)), rng.choice((0, 4000)), 0]
    victims = [(v, [t for t in v.tasks if t.status in ACTIVE_ALLOCATED]) for v in chosen]
    return ssn, snap, job, req, victims


def test_kept_after_answers_as_the_in_order_loop() -> None:
    outcomes: set[tuple[bool, bool]] = set()
    for seed in range(600):
        ssn, snap, job, req, victims = _scene(seed)
        rng = random.Random(-seed)
        tasks = [t for _, ts in victims for t in ts]
        statuses = {t.uid: t.status for t in tasks}
        assert job.queue is not None
        # Now and then a victim sits on the reclaimer's path (its department): that path never parts from
        # the reclaimer's, and the victims under it lower what it keeps whatever their own leveled queue.
        moved = victims[0][0] if seed % 4 == 0 and job.queue.parent is not None else None
        home = moved.queue if moved is not None else None
        try:
            if moved is not None:
                moved.queue = job.queue.parent
            for t in tasks:
                t.status = rng.choice((PodStatus.RELEASING, PodStatus.RELEASING, PodStatus.PIPELINED))
            fast = reclaimable._kept_after(ssn, snap, job.queue, req, victims)
            slow = reclaimable._kept_after_in_order(ssn, snap, job.queue, req, victims)
            if fast is None or slow is None:
                assert fast is slow, seed
            else:
                assert list(fast[0].items()) == list(slow[0].items()), seed
                assert fast[1] == slow[1], seed
            outcomes.add((slow is None, moved is not None))
        finally:
            if moved is not None:
                moved.queue = home
            for t in tasks:
                t.status = statuses[t.uid]
    # Refusals and passes both occurred, with and without a victim on the reclaimer's path.
    assert outcomes == {(True, True), (True, False), (False, True), (False, False)}


def test_a_queue_never_refused_at_the_boundary_refuses_none_of_its_victims() -> None:
    seen: set[tuple[bool, bool]] = set()
    for seed in range(600):
        ssn, snap, job, req, victims = _scene(seed)
        evicted = [t for _, ts in victims for t in ts]
        for v, _ in victims:
            assert v.queue is not None
            never = reclaimable.loss_never_refused_at_boundary(snap, job, req, v.queue)
            refused = reclaimable.loss_refused_at_boundary(ssn, snap, job, req, v, evicted)
            assert not (never and refused), seed
            seen.add((never, refused))
    # The bound answered both ways, and the full check refused some losses it could not rule out.
    assert seen >= {(True, False), (False, True), (False, False)}
