"""The fold: events -> snapshot."""

from __future__ import annotations

from ingest import events as ev
from scheduler.engine.state import PodStatus, StateBuilder


def _group(name: str, t: int) -> list[ev.Event]:
    return [
        ev.PodGroupUpserted(uid="", at_ms=t, name=name, namespace="ns", queue="q", created_at_ms=t),
        ev.PodSubmitted(
            uid="",
            at_ms=t,
            name=f"{name}-0",
            namespace="ns",
            pod_group=name,
            created_at_ms=t,
            requests=ev.PodRequests(gpus=1),
        ),
    ]


def test_deleted_pod_group_is_forgotten_once_its_pods_are_gone() -> None:
    b = StateBuilder()
    for e in [*_group("a", 0), *_group("b", 1)]:
        b.apply(e)
    b.apply(ev.PodBound(uid="", at_ms=2, name="a-0", namespace="ns", node="n1"))
    b.apply(ev.PodGroupDeleted(uid="", at_ms=3, name="a", namespace="ns"))
    # Still has a pod: kept, marked deleting.
    assert [(j.uid, j.deleting) for j in b.snapshot().jobs] == [("ns/a", True), ("ns/b", False)]
    b.apply(ev.PodFinished(uid="", at_ms=4, name="a-0", namespace="ns", phase="Succeeded"))
    b.apply(ev.PodDeleted(uid="", at_ms=5, name="a-0", namespace="ns"))
    snap = b.snapshot()
    assert [j.uid for j in snap.jobs] == ["ns/b"]
    assert [(p.uid, p.status) for p in snap.pods] == [("ns/b-0", PodStatus.PENDING)]
    # A group deleted with no pods left goes at once.
    b.apply(ev.PodDeleted(uid="", at_ms=6, name="b-0", namespace="ns"))
    b.apply(ev.PodGroupDeleted(uid="", at_ms=7, name="b", namespace="ns"))
    assert b.snapshot().jobs == ()
