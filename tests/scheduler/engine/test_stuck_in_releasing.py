"""A pod releasing for longer than the threshold is stuck in releasing: nothing is pipelined onto it.

Translated from KAI v0.17 ``pkg/scheduler/actions/allocate/allocate_stuck_in_releasing_test.go``
(``TestHandleAllocationStuckInReleasing``): one 1-GPU node held by a releasing 1-GPU pod and a pending
1-GPU pod of the same queue. Freshly releasing, the pending pod is pipelined onto the node; releasing for
longer than the threshold (KAI's ``getTaskStatus`` in ``pkg/scheduler/api/pod_info/pod_info.go``), it
stays pending. The deletion time is the PodReleasing event's ``at_ms`` and "now" the cycle's logical time.
"""

from __future__ import annotations

import pytest

import ingest.events as ev
from scheduler.engine.cycle import run_cycle
from scheduler.engine.kept import KeptRun
from scheduler.engine.record.decisions import config_hash
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import ClusterState, StateBuilder

RELEASED_AT = 10_000
GPU = ev.PodRequests(cpu_millicores=100, memory_bytes=2**20, gpus=1)


def _events(foreign: bool = False) -> list[ev.Event]:
    out: list[ev.Event] = [
        ev.QueueUpserted(
            at_ms=0, name="queue0", resources=ev.QueueResources(gpu=ev.QueueResource(quota=1000))
        ),
        ev.NodeUpserted(at_ms=0, name="node0", cpu_millicores=8000, memory_bytes=2**34, gpus=1),
    ]
    if foreign:
        out.append(ev.ForeignPodUpserted(at_ms=1, name="other", namespace="d", node="node0", requests=GPU))
    else:
        out += [
            ev.PodGroupUpserted(at_ms=1, name="victim", namespace="d", queue="queue0", created_at_ms=1),
            ev.PodSubmitted(
                at_ms=1,
                name="victim-0",
                namespace="d",
                pod_group="victim",
                queue="queue0",
                requests=GPU,
                created_at_ms=1,
            ),
            ev.PodBound(at_ms=1, name="victim-0", namespace="d", node="node0"),
        ]
    released = "other" if foreign else "victim-0"
    out += [
        ev.PodReleasing(at_ms=RELEASED_AT, name=released, namespace="d", reason="deletionTimestamp set"),
        ev.PodGroupUpserted(
            at_ms=RELEASED_AT, name="pending", namespace="d", queue="queue0", created_at_ms=5
        ),
        ev.PodSubmitted(
            at_ms=RELEASED_AT,
            name="pending-0",
            namespace="d",
            pod_group="pending",
            queue="queue0",
            requests=GPU,
            created_at_ms=5,
        ),
    ]
    return out


def _state(foreign: bool = False) -> ClusterState:
    b = StateBuilder()
    for i, e in enumerate(_events(foreign)):
        b.apply(e, i)
    return b.snapshot()


def _kinds(
    now_ms: int, config: SessionConfig | None = None, foreign: bool = False
) -> list[tuple[str, str | None]]:
    record, _ = run_cycle(_state(foreign), config or SessionConfig(), now_ms)
    return [(d.kind, d.node) for d in record.decisions]


def test_a_freshly_releasing_pod_is_pipelined_onto() -> None:
    assert _kinds(RELEASED_AT + 120_000) == [("Pipeline", "node0")]


def test_a_pod_releasing_longer_than_the_default_two_minutes_is_not_pipelined_onto() -> None:
    kinds = _kinds(RELEASED_AT + 120_001)
    assert ("Pipeline", "node0") not in kinds
    assert [k for k, _ in kinds] == ["Unschedulable"]


def test_the_threshold_is_the_configs() -> None:
    short = SessionConfig(stuck_in_releasing_ms=1_000)
    assert [k for k, _ in _kinds(RELEASED_AT + 1_001, short)] == ["Unschedulable"]
    assert _kinds(RELEASED_AT + 1_000, short) == [("Pipeline", "node0")]
    assert _kinds(RELEASED_AT + 10**9, SessionConfig(stuck_in_releasing_ms=None)) == [("Pipeline", "node0")]


def test_a_foreign_pod_stuck_in_releasing_is_not_pipelined_onto() -> None:
    assert _kinds(RELEASED_AT + 5_000, foreign=True) == [("Pipeline", "node0")]
    assert [k for k, _ in _kinds(RELEASED_AT + 120_001, foreign=True)] == ["Unschedulable"]


def test_a_repeated_podreleasing_does_not_restart_the_clock() -> None:
    b = StateBuilder()
    events = _events()
    events.append(
        ev.PodReleasing(at_ms=RELEASED_AT + 100_000, name="victim-0", namespace="d", reason="again")
    )
    for i, e in enumerate(events):
        b.apply(e, i)
    record, _ = run_cycle(b.snapshot(), SessionConfig(), RELEASED_AT + 120_001)
    assert [d.kind for d in record.decisions] == ["Unschedulable"]


def test_a_kept_session_sees_the_pod_turn_stuck_between_cycles() -> None:
    """The kept session caches each node's releasing capacity: a cycle after the threshold passes must not
    reuse the charge of the cycle before it (it writes the record a session built afresh writes)."""
    run = KeptRun(StateBuilder())
    for i, e in enumerate(_events()):
        run.apply(e, i)
    config = SessionConfig()
    first = run.cycle(config, RELEASED_AT + 1_000)
    assert [(d.kind, d.node) for d in first.decisions] == [("Pipeline", "node0")]
    later = RELEASED_AT + 120_001
    kept = run.cycle(config, later)
    fresh, _ = run_cycle(run.builder.snapshot(), config, later)
    assert [d.kind for d in kept.decisions] == [d.kind for d in fresh.decisions] == ["Unschedulable"]


def test_config_hash_leaves_an_absent_threshold_out() -> None:
    """A config recorded before the field existed (None: never stuck) keeps the hash it had (the default
    config's hash before the field, computed on the commit before it)."""
    old = SessionConfig(stuck_in_releasing_ms=None).counting_every_scenario()  # a field added later
    assert config_hash(old) == "a083284ccfc2f752"
    assert config_hash(SessionConfig()) != "a083284ccfc2f752"


def test_the_run_flag_reads_a_go_duration() -> None:
    """``hourglass run --stuck-in-releasing-threshold`` takes KAI's flag value (a Go duration)."""
    from scheduler.command import stuck_threshold_ms

    assert stuck_threshold_ms("2m") == 120_000
    assert stuck_threshold_ms("1m30s") == 90_000
    for bad in ("0", "-1m", "soon"):
        with pytest.raises(ValueError, match="stuck-in-releasing-threshold"):
            stuck_threshold_ms(bad)


def test_another_pools_pod_stuck_in_releasing_is_not_pipelined_onto_in_a_shard() -> None:
    """In a shard, a pod of another pool on this pool's nodes is held as a pod of another scheduler; its
    release keeps its date, so it turns stuck there too."""
    from scheduler.engine.state import NODE_POOL_LABEL

    events: list[ev.Event] = [
        ev.QueueUpserted(at_ms=0, name="queue0"),
        ev.NodeUpserted(
            at_ms=0,
            name="node0",
            cpu_millicores=8000,
            memory_bytes=2**34,
            gpus=1,
            labels={NODE_POOL_LABEL: "a"},
        ),
    ]
    for name, pool in (("victim", "b"), ("pending", "a")):
        events += [
            ev.PodGroupUpserted(
                v=2, at_ms=1, name=name, namespace="d", queue="queue0", created_at_ms=1, node_pool=pool
            ),
            ev.PodSubmitted(
                at_ms=1,
                name=f"{name}-0",
                namespace="d",
                pod_group=name,
                queue="queue0",
                requests=GPU,
                created_at_ms=1,
            ),
        ]
    events += [
        ev.PodBound(at_ms=1, name="victim-0", namespace="d", node="node0"),
        ev.PodReleasing(at_ms=RELEASED_AT, name="victim-0", namespace="d", reason="deletionTimestamp set"),
    ]
    b = StateBuilder()
    for i, e in enumerate(events):
        b.apply(e, i)
    shard = SessionConfig(node_pool="a")
    fresh, _ = run_cycle(b.snapshot(), shard, RELEASED_AT + 1_000)
    assert [(d.kind, d.node) for d in fresh.decisions] == [("Pipeline", "node0")]
    stuck, _ = run_cycle(b.snapshot(), shard, RELEASED_AT + 120_001)
    assert [d.kind for d in stuck.decisions] == ["Unschedulable"]
