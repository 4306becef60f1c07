"""The binpack fast path must choose exactly the node the full scoring scan chooses."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.engine.placement as placement
from scheduler.engine.cycle import open_session, result_state, run_actions
from scheduler.engine.placement import Fit
from scheduler.engine.session import Session, TaskInfo
from scheduler.engine.state import PodStatus, fold
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


def _first_fit_in_scan_order(ssn: Session, task: TaskInfo, allow_idle: bool) -> Fit | None:
    """The binpack scan by its definition: every node in free-device bucket order from the task's GPU
    count, then name; the first idle fit, else the first fit."""
    idx = ssn.free_index
    first: Fit | None = None
    for k in range(task.request.gpus, len(idx.buckets)):
        for r in idx.buckets[k]:
            f = placement.fit(ssn, task, idx.by_rank[r], allow_idle)
            if isinstance(f, Fit):
                if f.idle:
                    return f
                first = first or f
    return first


def test_whole_gpu_scan_finds_the_first_idle_fit_past_a_waiting_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a fit that waits for releasing devices, the scan looks only at nodes with enough idle devices,
    read from the idle-level index when they are fewer than the nodes still to pass. Victims are evicted
    virtually at random (their devices release) and every pending whole-GPU task is scanned both ways."""
    seen: set[tuple[bool, bool]] = set()  # (read from the index, an idle fit found past the waiting one)
    real = placement._first_idle_after

    def noted(
        ssn: Session, task: TaskInfo, allow: bool, buckets: Any, need: int, after: Any, left: int
    ) -> Any:
        out = real(ssn, task, allow, buckets, need, after, left)
        seen.add((sum(len(b) for b in ssn.free_index.idle_buckets[need:]) < left, out is not None))
        return out

    monkeypatch.setattr(placement, "_first_idle_after", noted)
    for seed in range(24):
        nodes, per_node = ((6, 3), (40, 3), (40, 12))[seed % 3]  # spare room, or a full cluster
        spec = SyntheticSpec(
            nodes=nodes, pending_pods=per_node * nodes, departments=2, queues_per_department=2, seed=seed
        )
        ssn = run_actions(open_session(fold(synthetic_events(spec)), now_ms=10**6), ("allocate",))
        rng = random.Random(seed)
        running = [t for j in ssn.jobs for t in j.tasks if t.status is PodStatus.ALLOCATED]
        ssn.statement().evict_all(rng.sample(running, len(running) // 3), "test", lambda t: "", True)
        for t in (t for j in ssn.jobs for t in j.tasks if t.status is PodStatus.PENDING):
            if t.shared or t.request.gpus <= 0:
                continue
            for allow_idle in (True, False):
                want = _first_fit_in_scan_order(ssn, t, allow_idle)
                got = placement._fast_binpack_scan(ssn, t, allow_idle, ssn.free_index.buckets, t.request.gpus)
                assert (got and (got.node.name, got.idle, got.devices)) == (
                    want and (want.node.name, want.idle, want.devices)
                ), (seed, t.uid)
    assert {found for _, found in seen} == {True, False}
    assert {indexed for indexed, _ in seen} == {True, False}
