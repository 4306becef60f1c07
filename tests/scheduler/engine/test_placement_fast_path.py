"""The binpack fast path must choose exactly the node the full scoring scan chooses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.engine.placement as placement
from scheduler.engine.cycle import open_session, result_state, run_actions
from scheduler.engine.state import fold
from tests.support.synthetic import SyntheticSpec, synthetic_events


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


@st.composite
def cpu_clusters(draw: st.DrawFn) -> list[object]:
    """Nodes with and without GPUs and different CPU sizes, running and releasing CPU pods, pending CPU pods."""
    from ingest import events as ev

    out: list[object] = [
        ev.QueueUpserted(at_ms=0, name="q", resources=ev.QueueResources(gpu=ev.QueueResource(quota=8000)))
    ]
    n = draw(st.integers(1, 8))
    for i in range(n):
        out.append(
            ev.NodeUpserted(
                at_ms=0,
                name=f"n{i}",
                cpu_millicores=draw(st.sampled_from([4000, 8000, 16000])),
                memory_bytes=64 * 2**30,
                gpus=draw(st.sampled_from([0, 2])),
                max_pods=draw(st.sampled_from([3, 110])),
            )
        )
    for k in range(draw(st.integers(0, 12))):
        name = f"r{k}"
        req = ev.PodRequests(
            cpu_millicores=draw(st.sampled_from([500, 1000, 2000, 3000])), memory_bytes=2**30
        )
        out += [
            ev.PodGroupUpserted(at_ms=1, name=name, namespace="d", queue="q", created_at_ms=1, priority=50),
            ev.PodSubmitted(
                at_ms=1,
                name=f"{name}-0",
                namespace="d",
                pod_group=name,
                queue="q",
                requests=req,
                created_at_ms=1,
            ),
            ev.PodBound(at_ms=1, name=f"{name}-0", namespace="d", node=f"n{draw(st.integers(0, n - 1))}"),
        ]
        if draw(st.booleans()):
            out.append(ev.PodReleasing(at_ms=2, name=f"{name}-0", namespace="d", reason="deleted"))
    for k in range(draw(st.integers(1, 15))):
        name = f"p{k}"
        req = ev.PodRequests(
            cpu_millicores=draw(st.sampled_from([250, 1000, 2500, 4000])), memory_bytes=2**30
        )
        out += [
            ev.PodGroupUpserted(
                at_ms=3 + k, name=name, namespace="d", queue="q", created_at_ms=3 + k, priority=100
            ),
            ev.PodSubmitted(
                at_ms=3 + k,
                name=f"{name}-0",
                namespace="d",
                pod_group=name,
                queue="q",
                requests=req,
                created_at_ms=3 + k,
            ),
        ]
    return out


def _cycle_outcome(events: list[object]) -> list[tuple[str, str, str | None]]:
    ssn = run_actions(open_session(fold(events), now_ms=10**6))
    return [(p.uid, p.status.value, p.node) for p in result_state(ssn).pods]


@settings(max_examples=60, deadline=None)
@given(cpu_clusters())
def test_cpu_fast_path_matches_full_scan(events: list[object]) -> None:
    """CPU-only pods: idle capacity first, nodes without GPUs next, least free CPU, then name."""
    fast = _cycle_outcome(events)
    placement.FAST_PATH = False
    try:
        slow = _cycle_outcome(events)
    finally:
        placement.FAST_PATH = True
    assert fast == slow
