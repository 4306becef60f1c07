"""The queue order's rules 1-6 as keys (ordering.QueueComparator.key) decide exactly as the comparator.

JobsByQueue re-inserts a queue by comparing keys and asks the comparator only when two keys tie, so the
key must put first whichever queue the comparator puts first, for any allocation and best job; and whole
cycles must decide the same with and without the keys.
"""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.engine.cycle import ACTIONS, DEFAULT_ORDER, open_session
from scheduler.engine.ordering import JobsByQueue, QueueComparator
from scheduler.engine.record.decisions import make_record
from scheduler.engine.session import Session
from scheduler.engine.state import ClusterState, fold
from tests.support.synthetic import SyntheticSpec, synthetic_events

sizes = {
    "seed": st.integers(0, 10_000),
    "nodes": st.integers(4, 24),
    "depts": st.integers(1, 4),
    "per": st.integers(1, 4),
}


def _state(seed: int, nodes: int, depts: int, per: int) -> ClusterState:
    spec = SyntheticSpec(
        nodes=nodes,
        gpus_per_node=8,
        pending_pods=nodes * 10,
        departments=depts,
        queues_per_department=per,
        seed=seed,
    )
    return fold(synthetic_events(spec))


def _cycle(state: ClusterState) -> tuple[Session, bytes]:
    ssn = open_session(state, now_ms=10**9)
    for name in DEFAULT_ORDER:
        ACTIONS[name](ssn)
    return ssn, make_record(ssn, state.events_offset).dumps()


@settings(max_examples=25, deadline=None)
@given(**sizes, virtual=st.booleans())
def test_keys_order_queues_as_the_comparator_does(
    seed: int, nodes: int, depts: int, per: int, virtual: bool
) -> None:
    """For sibling queues and best jobs, in a session after a whole cycle: differing keys put first the
    queue the comparator puts first."""
    ssn, _ = _cycle(_state(seed, nodes, depts, per))
    cmp = QueueComparator(ssn, include_virtual=virtual)
    jobs = [None, *ssn.jobs[:3]]
    queues = sorted(ssn.queues.values(), key=lambda q: q.name)
    for a in queues:
        for b in queues:
            if a is b or a.parent is not b.parent:
                continue
            for ja in jobs:
                for jb in jobs:
                    ka, kb = cmp.key(a, ja), cmp.key(b, jb)
                    if ka != kb:
                        assert (ka < kb) == (cmp.compare(a, b, ja, jb) < 0), (a.name, b.name, ka, kb)


@settings(max_examples=15, deadline=None)
@given(**sizes)
def test_a_cycle_decides_the_same_without_the_keys(seed: int, nodes: int, depts: int, per: int) -> None:
    """Every ordering of every action, keys or plain comparator calls: the same cycle record."""
    state = _state(seed, nodes, depts, per)
    _, keyed = _cycle(state)
    # Every key equal: each re-insertion falls back to the comparator, as before the keys.
    # (and fast re-insertion off: it decides a tie of keys by rules 7-8 alone, see test_ordering_fast.py).
    with (
        mock.patch.object(JobsByQueue, "_key_of", lambda self, q, fresh=False: ()),
        mock.patch.object(JobsByQueue, "fast", False),
    ):
        _, plain = _cycle(state)
    assert keyed == plain
