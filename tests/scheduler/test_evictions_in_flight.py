"""Evictions in flight: an Evict whose pod's deletion has not come back through the fold yet. The next cycle
sees the victim releasing (as KAI's evicted pods are), so it is not evicted again in every cycle until the
watcher reports it; the record carries the set, so a replay re-runs the cycle exactly.

Scenario as in ``test_binds_in_flight.py``: a (queue qa) holds n1's 8 GPUs, b (queue qb, higher priority)
arrives and reclaims it.
"""

from __future__ import annotations

from pathlib import Path

from ingest import events as ev
from ingest.events import dump_event
from ingest.filelog import FileLog
from ingest.log import Topics
from scheduler.engine.cycle import run_cycle
from scheduler.engine.record.decisions import CycleRecord, InFlightEvict
from scheduler.engine.record.delta import expand_records
from scheduler.engine.record.inflight import DEFAULT_BIND_DEADLINE_MS, evictions_in_flight, track_evictions
from scheduler.engine.state import ClusterState, StateBuilder
from scheduler.service import Service
from tests.support.replay_cli import replay_verify

T1, T2 = 1_000, 2_000


def _cluster() -> list[ev.Event]:
    return [
        ev.NodeUpserted(uid="", at_ms=0, name="n1", cpu_millicores=64_000, memory_bytes=2**36, gpus=8),
        ev.QueueUpserted(uid="", at_ms=0, name="qa"),
        ev.QueueUpserted(uid="", at_ms=0, name="qb", priority=200),
    ]


def _job(name: str, queue: str, at_ms: int) -> list[ev.Event]:
    return [
        ev.PodGroupUpserted(uid="", at_ms=at_ms, name=name, namespace="ns", queue=queue, created_at_ms=at_ms),
        ev.PodSubmitted(
            uid="",
            at_ms=at_ms,
            name=f"{name}-0",
            namespace="ns",
            pod_group=name,
            created_at_ms=at_ms,
            requests=ev.PodRequests(gpus=8),
        ),
    ]


def _a_running_b_waiting() -> list[ev.Event]:
    bound = ev.PodBound(uid="", at_ms=T1, name="a-0", namespace="ns", node="n1", gpu_devices=list(range(8)))
    return [*_cluster(), *_job("a", "qa", T1), bound, *_job("b", "qb", T2)]


def _fold(events: list[ev.Event]) -> ClusterState:
    b = StateBuilder()
    for e in events:
        b.apply(e)
    return b.snapshot()


def _outcomes(rec: CycleRecord) -> list[tuple[str, str, str | None]]:
    return [(d.kind, d.pod or ",".join(d.pods), d.node) for d in rec.decisions]


def test_a_victim_whose_deletion_is_not_seen_is_not_evicted_again() -> None:
    state = _fold(_a_running_b_waiting())
    rec1, _ = run_cycle(state, now_ms=T2)
    assert _outcomes(rec1) == [("Evict", "ns/a-0", "n1"), ("Pipeline", "ns/b-0", "n1")]
    # The defect: the fold still shows a running, and a cycle without the in-flight set evicts it again.
    again, _ = run_cycle(state, now_ms=T2 + 1)
    assert ("Evict", "ns/a-0", "n1") in _outcomes(again)
    evicting = evictions_in_flight(track_evictions({}, rec1).values(), state, T2 + 1)
    assert evicting == (InFlightEvict(pod="ns/a-0", decided_ms=T2),)
    rec2, _ = run_cycle(state, now_ms=T2 + 1, evicting=evicting)
    assert _outcomes(rec2) == [("Pipeline", "ns/b-0", "n1")]  # b waits for a's GPUs; a is not evicted twice
    assert rec2.evicting == list(evicting)
    assert CycleRecord.loads(rec2.dumps()) == rec2
    assert b'"evicting"' not in rec1.dumps()  # an empty set keeps the bytes records always had


def test_an_eviction_leaves_the_set_once_the_fold_answers_or_the_deadline_passes() -> None:
    rec1, _ = run_cycle(_fold(_a_running_b_waiting()), now_ms=T2)
    tracked = track_evictions({}, rec1).values()
    releasing = _fold(
        [
            *_a_running_b_waiting(),
            ev.PodReleasing(uid="", at_ms=T2, name="a-0", namespace="ns", reason="reclaim"),
        ]
    )
    assert evictions_in_flight(tracked, releasing, T2 + 1) == ()
    deleted = _fold([*_a_running_b_waiting(), ev.PodDeleted(uid="", at_ms=T2, name="a-0", namespace="ns")])
    assert evictions_in_flight(tracked, deleted, T2 + 1) == ()
    state = _fold(_a_running_b_waiting())
    assert evictions_in_flight(tracked, state, T2 + DEFAULT_BIND_DEADLINE_MS) == ()  # the binder failed
    assert len(evictions_in_flight(tracked, state, T2 + DEFAULT_BIND_DEADLINE_MS - 1)) == 1


def test_the_service_evicts_once_recovers_the_set_and_replays(tmp_path: Path) -> None:
    topics = Topics()
    directory = tmp_path / "log"
    clock = [T2]
    with FileLog(directory) as log:
        log.append_many(topics.events, [(None, dump_event(e)) for e in _a_running_b_waiting()])
        service = Service(log, topics, clock_ms=lambda: clock[0])
        service.run(stop_when_idle=True)
        evicts = 0
        for step in range(1, 4):  # quiet cycles (ticks) before the watcher reports a's deletion
            clock[0] = T2 + step * 1_000
            assert service.tick()
            service.run(stop_when_idle=True)
            if step == 2:  # a restart tracks the same evictions from the last record alone
                restarted = Service(log, topics, clock_ms=lambda: clock[0])
                restarted.recover()
                assert restarted.tracked_evicts == service.tracked_evicts != {}
                service = restarted
        service.stop()
        recs = list(expand_records(CycleRecord.loads(r.value) for r in log.scan(topics.decisions)))
    evicts = sum(1 for r in recs for d in r.decisions if d.kind == "Evict")
    assert len(recs) >= 2 and evicts == 1
    assert replay_verify(directory) == f"replay: {len(recs)} cycles, 0 mismatches"
