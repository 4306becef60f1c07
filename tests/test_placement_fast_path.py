"""The binpack fast path must choose exactly the node the full scoring scan chooses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.engine.placement as placement
from scheduler.engine.cycle import open_session, result_state, run_actions
from scheduler.engine.state import fold
from scheduler.synthetic import SyntheticSpec, synthetic_events


def _placements(spec: SyntheticSpec) -> list[tuple[str, str, str | None, tuple[int, ...]]]:
    ssn = run_actions(open_session(fold(synthetic_events(spec)), now_ms=10**6), ("allocate",))
    return [(p.uid, p.status.value, p.node, p.gpu_devices) for p in result_state(ssn).pods]


@settings(max_examples=30, deadline=None)
@given(
    st.builds(
        SyntheticSpec,
        nodes=st.integers(1, 15),
        gpus_per_node=st.sampled_from([1, 2, 4, 8]),
        pending_pods=st.integers(1, 80),
        departments=st.integers(1, 2),
        queues_per_department=st.integers(1, 3),
        seed=st.integers(0, 10_000),
    )
)
def test_fast_path_matches_full_scan(spec: SyntheticSpec) -> None:
    fast = _placements(spec)
    placement.FAST_PATH = False
    try:
        slow = _placements(spec)
    finally:
        placement.FAST_PATH = True
    assert fast == slow


@pytest.fixture(autouse=True)
def _restore() -> None:
    placement.FAST_PATH = True
