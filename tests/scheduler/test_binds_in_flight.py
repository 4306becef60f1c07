"""Binds in flight: a Bind whose PodBound has not been folded yet keeps its node's capacity.

Node n1 has 8 GPUs; queues qa and qb (qb priority 200). Cycle 1 binds ns/a-0 (8 GPUs) to n1. Then b (qb,
8 GPUs) is submitted before a's PodBound. Without the in-flight set, cycle 2 binds b to n1 as well: 16 GPUs
of pods on an 8-GPU node (the defect, docs/service.md). With it, a counts as placed on n1 (KAI's Binding),
so b is not bound there: qb's priority gives it the fair share, so b reclaims a (Evict a, Pipeline b).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from ingest import events as ev
from ingest.events import dump_event
from ingest.filelog import FileLog
from ingest.log import Topics
from scheduler.engine.cycle import run_cycle
from scheduler.engine.record.decisions import CycleRecord, InFlightBind
from scheduler.engine.record.delta import DeltaEncoder, expand_records
from scheduler.engine.record.inflight import DEFAULT_BIND_DEADLINE_MS, binds_in_flight, track
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


def _job(name: str, queue: str, at_ms: int, gpus: int = 8) -> list[ev.Event]:
    return [
        ev.PodGroupUpserted(uid="", at_ms=at_ms, name=name, namespace="ns", queue=queue, created_at_ms=at_ms),
        ev.PodSubmitted(
            uid="",
            at_ms=at_ms,
            name=f"{name}-0",
            namespace="ns",
            pod_group=name,
            created_at_ms=at_ms,
            requests=ev.PodRequests(gpus=gpus),
        ),
    ]


def _bound(name: str, at_ms: int) -> ev.PodBound:
    return ev.PodBound(
        uid="", at_ms=at_ms, name=f"{name}-0", namespace="ns", node="n1", gpu_devices=list(range(8))
    )


def _fold(events: list[ev.Event]) -> ClusterState:
    b = StateBuilder()
    for e in events:
        b.apply(e)
    return b.snapshot()


def _outcomes(rec: CycleRecord) -> list[tuple[str, str, str | None]]:
    return [(d.kind, d.pod or ",".join(d.pods), d.node) for d in rec.decisions]


def _cycle1() -> CycleRecord:
    rec, _ = run_cycle(_fold([*_cluster(), *_job("a", "qa", T1)]), now_ms=T1)
    assert _outcomes(rec) == [("Bind", "ns/a-0", "n1")]
    return rec


A_ON_N1 = InFlightBind(pod="ns/a-0", node="n1", gpu_devices=list(range(8)), decided_ms=T1)


@pytest.mark.parametrize(
    ("case", "later", "now_ms", "in_flight", "outcomes"),
    [
        (  # the defect, as it was: nothing in flight is counted, b lands on the full node
            "not counted",
            [],
            T2,
            None,
            [("Bind", "ns/b-0", "n1"), ("Unschedulable", "ns/a-0", None)],
        ),
        (  # a is in flight: it holds n1, b does not bind there (qb's fair share lets it reclaim a)
            "a in flight",
            [],
            T2,
            (A_ON_N1,),
            [("Evict", "ns/a-0", "n1"), ("Pipeline", "ns/b-0", "n1")],
        ),
        (  # PodBound folded: a is state, nothing in flight, the cycle is as before
            "a bound",
            [_bound("a", T2)],
            T2,
            (),
            [("Evict", "ns/a-0", "n1"), ("Pipeline", "ns/b-0", "n1")],
        ),
        (  # PodBound deleted, b alone: a's capacity is free again
            "a deleted",
            [ev.PodDeleted(uid="", at_ms=T2, name="a-0", namespace="ns")],
            T2,
            (),
            [("Bind", "ns/b-0", "n1")],
        ),
        (  # no PodBound within the deadline: the bind failed, a is pending again and n1 is free
            "deadline passed",
            [],
            T1 + DEFAULT_BIND_DEADLINE_MS,
            (),
            [("Bind", "ns/b-0", "n1"), ("Unschedulable", "ns/a-0", None)],
        ),
        (  # just before the deadline it still counts
            "just before the deadline",
            [],
            T1 + DEFAULT_BIND_DEADLINE_MS - 1,
            (A_ON_N1,),
            [("Evict", "ns/a-0", "n1"), ("Pipeline", "ns/b-0", "n1")],
        ),
    ],
)
def test_a_bind_in_flight_holds_its_node(
    case: str,
    later: list[ev.Event],
    now_ms: int,
    in_flight: tuple[InFlightBind, ...] | None,
    outcomes: list[tuple[str, str, str | None]],
) -> None:
    rec1 = _cycle1()
    state = _fold([*_cluster(), *_job("a", "qa", T1), *_job("b", "qb", T2), *later])
    found = binds_in_flight(track({}, rec1).values(), state, now_ms)
    if in_flight is not None:
        assert found == in_flight, case
    rec2, _ = run_cycle(state, now_ms=now_ms, in_flight=found if in_flight is not None else ())
    assert _outcomes(rec2) == outcomes, case
    assert rec2.in_flight == list(found if in_flight is not None else ())
    # The record carries the set only when non-empty: an empty one keeps the bytes records always had.
    assert (b'"in_flight"' in rec2.dumps()) == bool(rec2.in_flight)
    assert CycleRecord.loads(rec2.dumps()) == rec2


def test_an_evicted_bind_in_flight_keeps_counting_until_the_fold_answers() -> None:
    rec1 = _cycle1()
    state = _fold([*_cluster(), *_job("a", "qa", T1), *_job("b", "qb", T2)])
    rec2, _ = run_cycle(state, now_ms=T2, in_flight=binds_in_flight(track({}, rec1).values(), state, T2))
    tracked = track({}, rec2)  # the Evict does not end it: the binder may have bound a already
    assert list(tracked) == ["ns/a-0"]
    rec3, _ = run_cycle(state, now_ms=T2 + 1, in_flight=binds_in_flight(tracked.values(), state, T2 + 1))
    assert ("Bind", "ns/b-0", "n1") not in _outcomes(rec3)


def _records(events: list[ev.Event]) -> list[tuple[bytes | None, bytes]]:
    return [(None, dump_event(e)) for e in events]


def test_service_with_a_slow_binder_never_overcommits_a_node_and_replays(tmp_path: Path) -> None:
    """Arrivals keep coming while the binder answers late: the recorded Binds never over-commit n1."""
    topics = Topics()
    directory = tmp_path / "log"
    with FileLog(directory) as log:
        log.append_many(topics.events, _records(_cluster()))
        service = Service(log, topics, batch_size=1000, checkpoint_every=3)
        placed: dict[str, str] = {}  # pod -> node, as the binder has carried out
        pending_binds: list[tuple[int, str, str, list[int]]] = []  # (due cycle, pod, node, devices)
        t = 1_000
        for i in range(12):
            queue = "qa" if i % 2 == 0 else "qb"
            log.append_many(topics.events, _records(_job(f"j{i}", queue, t, gpus=4)))
            # the binder answers binds two cycles late
            due = [b for b in pending_binds if b[0] <= i]
            pending_binds = [b for b in pending_binds if b[0] > i]
            log.append_many(
                topics.events,
                _records(
                    [
                        ev.PodBound(
                            uid="", at_ms=t, name=pod.split("/")[1], namespace="ns", node=node, gpu_devices=devs
                        )
                        for _, pod, node, devs in due
                    ]
                ),
            )
            service.run(stop_when_idle=True)
            rec = service.stats.last_cycle
            assert rec is not None
            for d in rec.decisions:
                if d.kind == "Bind" and d.pod is not None and d.node is not None:
                    pending_binds.append((i + 2, d.pod, d.node, d.gpu_devices))
                    placed[d.pod] = d.node
            t += 1_000
            if i == 1:  # a restart: the new service tracks the same binds from the last record alone
                restarted = Service(log, topics, batch_size=1000, checkpoint_every=3)
                restarted.recover()
                assert restarted.tracked_binds == service.tracked_binds
                assert service.tracked_binds  # something was in flight to recover
                service = restarted
        service.stop()
        # every Bind decision ever recorded: at no time do the pods bound to n1 exceed its 8 GPUs
        recs = list(expand_records(CycleRecord.loads(r.value) for r in log.scan(topics.decisions)))
    assert any(r.in_flight for r in recs)
    live: dict[str, dict[str, int]] = defaultdict(dict)
    for r in recs:
        bound = dict(live["n1"])
        for d in r.decisions:
            if d.kind == "Bind" and d.node == "n1" and d.pod is not None:
                bound[d.pod] = 4
        assert sum(bound.values()) <= 8, (r.cycle_id, bound)
        live["n1"] = bound
    assert len(placed) == 2  # n1 holds two 4-GPU pods; nothing more was ever bound
    assert replay_verify(directory) == f"replay: {len(recs)} cycles, 0 mismatches"


def test_a_delta_record_carries_the_in_flight_set_whole() -> None:
    rec1 = _cycle1()
    state = _fold([*_cluster(), *_job("a", "qa", T1), *_job("b", "qb", T2)])
    rec2, _ = run_cycle(state, now_ms=T2, in_flight=binds_in_flight(track({}, rec1).values(), state, T2))
    encoder = DeltaEncoder()
    written = [encoder.encode(rec1), encoder.encode(rec2)]
    assert written[1].kind == "delta" and written[1].in_flight == [A_ON_N1]
    again = [CycleRecord.loads(w.dumps()) for w in written]
    assert [r.dumps() for r in expand_records(again)] == [rec1.dumps(), rec2.dumps()]
    assert track({}, again[1]) == track({}, rec2)  # what a restarted service tracks from the last record


def test_the_service_ticks_when_an_unanswered_bind_passes_its_deadline(tmp_path: Path) -> None:
    """Nothing else waits, but a Bind never answered: a tick at the deadline lets the pod be placed anew."""
    topics = Topics()
    clock = [T1]
    with FileLog(tmp_path / "log") as log:
        log.append_many(topics.events, _records([*_cluster(), *_job("a", "qa", T1)]))
        service = Service(log, topics, clock_ms=lambda: clock[0])
        service.run(stop_when_idle=True)
        assert service.stats.last_cycle is not None
        assert _outcomes(service.stats.last_cycle) == [("Bind", "ns/a-0", "n1")]
        clock[0] = T1 + DEFAULT_BIND_DEADLINE_MS - 1
        assert not service.tick()  # still in flight, nothing waits
        clock[0] = T1 + DEFAULT_BIND_DEADLINE_MS
        assert service.tick()
        service.run(stop_when_idle=True)
        rec = service.stats.last_cycle
    assert rec is not None and rec.in_flight == []
    assert _outcomes(rec) == [("Bind", "ns/a-0", "n1")]  # the failed bind's pod is decided again
