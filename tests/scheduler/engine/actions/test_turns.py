"""``ordering.turns`` with ``JobsByQueue.pop_alike`` gives the involved jobs their turns in the same order as
popping every pending job one by one (issue 12: a simulation skips, in one step, the jobs of a leaf that
would be popped next anyway).

The orderings are built as the solvers build them (pending runs of the job index, involved jobs pushed),
on the synthetic mix, for random sets of involved jobs; the session does not change in between, as in a
simulation's turns before a job is placed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.engine.actions.jobindex import JobIndex
from scheduler.engine.cycle import open_session
from scheduler.engine.ordering import JobsByQueue, Run, turns
from scheduler.engine.session import JobInfo, Session
from scheduler.engine.state import fold
from tests.support.synthetic import SyntheticSpec, synthetic_events


@cache
def _session(seed: int) -> tuple[Session, JobIndex, tuple[JobInfo, ...]]:
    ssn = open_session(fold(synthetic_events(SyntheticSpec(nodes=20, pending_pods=600, seed=seed))), now_ms=10**9)
    index = JobIndex.of(ssn)
    pending = tuple(j for name in sorted(index.pending) for _, j in index.pending[name])
    return ssn, index, pending


def _order(ssn: Session, index: JobIndex, involved: Sequence[JobInfo]) -> JobsByQueue:
    uids = {j.uid for j in involved}

    def skip(j: JobInfo) -> bool:
        return j.uid in uids

    runs: dict[str, Run] = {name: (entries, skip) for name, entries in sorted(index.pending.items()) if entries}
    return JobsByQueue(ssn, involved, include_virtual=True, runs=runs)


def _reference(order: JobsByQueue, involved: Sequence[JobInfo]) -> Iterator[JobInfo]:
    """turns() popping every job (no pop_alike)."""
    remaining = {j.uid: j for j in involved}
    while remaining:
        leaves = {j.queue.name for j in remaining.values() if j.queue is not None}
        if len(leaves) == 1:
            yield from order.leaf_order(leaves.pop(), set(remaining))
            return
        nxt = order.pop()
        if nxt is None:
            return
        if remaining.pop(nxt.uid, None) is not None:
            yield nxt


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2), data=st.data())
def test_turns_skip_alike_jobs_in_the_same_order(seed: int, data: st.DataObject) -> None:
    ssn, index, pending = _session(seed)
    picks = data.draw(st.lists(st.integers(0, len(pending) - 1), min_size=1, max_size=6, unique=True))
    involved = sorted((pending[i] for i in picks), key=lambda j: j.index)
    fast = [j.uid for j in turns(_order(ssn, index, involved), involved)]
    slow = [j.uid for j in _reference(_order(ssn, index, involved), involved)]
    assert fast == slow
    assert sorted(fast) == sorted(j.uid for j in involved)
