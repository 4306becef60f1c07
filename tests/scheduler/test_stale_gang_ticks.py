"""A gang that lost a member is evicted on a quiet cluster: while its stale-gang grace runs, the service
writes clock ticks (nothing else waits, no event arrives), so the grace can end and the eviction happen."""

from __future__ import annotations

from pathlib import Path

from ingest import events as ev
from ingest.events import dump_event
from ingest.filelog import FileLog
from ingest.log import Topics
from scheduler.service import Service

T1 = 1_000
GRACE_MS = 60_000  # the engine's default stale_grace_ms


def _gang() -> list[ev.Event]:
    out: list[ev.Event] = [
        ev.NodeUpserted(uid="", at_ms=0, name="n1", cpu_millicores=64_000, memory_bytes=2**36, gpus=8),
        ev.QueueUpserted(uid="", at_ms=0, name="qa"),
        ev.PodGroupUpserted(
            uid="", at_ms=T1, name="g", namespace="ns", queue="qa", min_member=2, created_at_ms=T1
        ),
    ]
    for i in range(2):
        out.append(
            ev.PodSubmitted(
                uid="",
                at_ms=T1,
                name=f"g-{i}",
                namespace="ns",
                pod_group="g",
                created_at_ms=T1,
                requests=ev.PodRequests(gpus=1),
            )
        )
    return out


def test_a_stale_gang_is_evicted_without_any_other_event(tmp_path: Path) -> None:
    topics = Topics()
    clock = [T1]
    with FileLog(tmp_path / "log") as log:
        log.append_many(topics.events, [(None, dump_event(e)) for e in _gang()])
        service = Service(log, topics, clock_ms=lambda: clock[0])
        service.run(stop_when_idle=True)
        rec = service.stats.last_cycle
        assert rec is not None and sorted(d.pod or "" for d in rec.decisions if d.kind == "Bind") == [
            "ns/g-0",
            "ns/g-1",
        ]
        bound = [
            ev.PodBound(uid="", at_ms=T1 + 10, name=f"g-{i}", namespace="ns", node="n1", gpu_devices=[i])
            for i in range(2)
        ]
        lost = ev.PodDeleted(uid="", at_ms=T1 + 20, name="g-1", namespace="ns")
        log.append_many(topics.events, [(None, dump_event(e)) for e in [*bound, lost]])
        clock[0] = T1 + 20
        service.run(stop_when_idle=True)  # the cycle that sees the gang short: its grace starts
        rec = service.stats.last_cycle
        assert rec is not None and not [
            d for d in rec.decisions if d.kind in ("Evict", "Unschedulable", "Pipeline")
        ]
        clock[0] = T1 + 20 + GRACE_MS
        assert service.tick()  # nothing waits, yet time alone will evict the gang
        service.run(stop_when_idle=True)
        rec = service.stats.last_cycle
    assert rec is not None
    assert [(d.kind, d.pod) for d in rec.decisions if d.kind == "Evict"] == [("Evict", "ns/g-0")]
