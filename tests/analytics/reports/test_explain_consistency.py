"""``explain`` on a pod no node can hold, and on a cycle that opened with a Bind still in flight.

A pod larger than every node never starts, so advice about waiting or reclaim is wrong for it; and the free
GPUs ``explain`` counts must be the engine's (in-flight Binds hold their node), or it contradicts itself.
"""

from __future__ import annotations

from pathlib import Path

from analytics.audit.store import AuditStore, load_cycles, load_events
from analytics.reports.explain import advice, explain
from ingest import events as ev
from ingest.events import dump_event
from scheduler.engine.cycle import run_cycle
from scheduler.engine.record.decisions import CycleRecord
from scheduler.engine.record.inflight import binds_in_flight, track
from scheduler.engine.state import fold


def _store(tmp_path: Path, events: list[ev.EventBase], records: list[CycleRecord]) -> Path:
    db = tmp_path / "audit.duckdb"
    with AuditStore(db) as store:
        load_events(store, [(i, dump_event(e)) for i, e in enumerate(events)])
        load_cycles(store, [r.dumps() for r in records])
    return db


def _node(name: str, gpus: int = 8) -> ev.NodeUpserted:
    return ev.NodeUpserted(at_ms=0, name=name, cpu_millicores=64_000, memory_bytes=2**38, gpus=gpus)


def _pod(name: str, gpus: int, at_ms: int) -> list[ev.EventBase]:
    return [
        ev.PodGroupUpserted(at_ms=at_ms, name=name, namespace="ml", queue="team", created_at_ms=at_ms),
        ev.PodSubmitted(
            at_ms=at_ms,
            name=f"{name}-0",
            namespace="ml",
            pod_group=name,
            requests=ev.PodRequests(gpus=gpus),
            created_at_ms=at_ms,
        ),
    ]


_QUEUE = ev.QueueUpserted(at_ms=0, name="team", resources=ev.QueueResources(gpu=ev.QueueResource(quota=8000)))


def test_a_pod_larger_than_every_node_is_told_it_never_starts_as_is(tmp_path: Path) -> None:
    """16 GPUs asked of two idle 8-GPU nodes: 16 GPUs are free in total, yet no node can ever hold it."""
    events = [_node("gpu-1"), _node("gpu-2"), _QUEUE, *_pod("big", 16, 2)]
    rec, _ = run_cycle(fold(events), now_ms=3)
    [d] = rec.decisions
    assert d.details["exceeds_every_node"] == {"resource": "gpu", "requested": 16000, "largest_node": 8000}
    text = explain(_store(tmp_path, events, [rec]), "ml/big-0").text()
    assert "no node can ever hold this pod: it requests 16 GPU and the largest node has 8 GPU in all" in text
    todo = next(line for line in text.splitlines() if line.startswith("What to do:"))
    assert "will never start as it is" in todo and "at most 8 GPU per pod" in todo
    # Neither "wait for a node to drain" (fragmentation) nor "starts when that much is free" (reclaim).
    assert "drain" not in todo and "starts when" not in todo


def test_advice_for_an_oversized_pod_wins_over_the_queue_standing() -> None:
    """Under its fair share with a need above it (the reclaim sentence's case), or over it: still never."""
    details = {
        "requested": {"gpu": 16000},
        "exceeds_every_node": {"resource": "gpu", "requested": 16000, "largest_node": 8000},
    }
    for standing in ((0, 8000), (12000, 8000), None):
        text = advice("PodSchedulingErrors", details, standing, 16000, [("other", 4000)])
        assert "will never start as it is" in text, standing
    cpu = {"exceeds_every_node": {"resource": "cpu", "requested": 96_000, "largest_node": 64_000}}
    assert "at most 64 cores per pod" in advice("PodSchedulingErrors", cpu, (0, 0), 0, [])


def test_a_bind_in_flight_holds_its_gpus_in_explain_as_in_the_engine(tmp_path: Path) -> None:
    """a-0 (6 GPUs) was bound a cycle ago and its PodBound has not come back: the engine counts it on gpu-1
    (2 free there), so explain must too, not report 8 free and call the shortfall fragmentation."""
    first = [_node("gpu-1"), _QUEUE, *_pod("a", 6, 1)]
    rec1, _ = run_cycle(fold(first), now_ms=2)
    assert [d.kind for d in rec1.decisions] == ["Bind"]
    events = [*first, *_pod("b", 4, 3)]
    state = fold(events)
    rec2, _ = run_cycle(state, now_ms=1000, in_flight=binds_in_flight(track({}, rec1).values(), state, 1000))
    assert [b.pod for b in rec2.in_flight] == ["ml/a-0"]
    [d] = rec2.decisions
    assert d.details["largest_free_gpus_on_a_node"] == 2.0
    text = explain(_store(tmp_path, events, [rec1, rec2]), "ml/b-0").text()
    assert "(1 node(s), 8 GPUs, 6 held, 2 free)" in text
    assert "node gpu-1: 8 GPUs, free 2; held by team 6" in text
    assert "fragmentation" not in text
