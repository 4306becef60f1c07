"""The fold: events -> snapshot."""

from __future__ import annotations

from unittest import mock

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ingest import events as ev
from scheduler.engine import state as state_mod
from scheduler.engine.state import Pod, PodStatus, StateBuilder, placement_fields


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


_names = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)


@settings(max_examples=150, deadline=None)
@given(
    name=_names,
    gpus=st.integers(0, 8),
    cpu=st.integers(0, 64_000),
    selector=st.dictionaries(_names, _names, max_size=2),
    allowed=st.none() | st.lists(_names, max_size=2),
    tolerate=st.booleans(),
    task_priority=st.integers(-5, 5),
)
@example(name="a", gpus=1, cpu=0, selector={}, allowed=None, tolerate=False, task_priority=0)
@example(name="a", gpus=1, cpu=0, selector={}, allowed=[], tolerate=False, task_priority=0)
@example(name="a", gpus=0, cpu=5, selector={"k": "v"}, allowed=["n"], tolerate=True, task_priority=1)
def test_the_fold_builds_the_same_pod_on_its_hot_path(
    name: str,
    gpus: int,
    cpu: int,
    selector: dict[str, str],
    allowed: list[str] | None,
    tolerate: bool,
    task_priority: int,
) -> None:
    """A submitted pod folds to the Pod the general path builds (placement_fields), whether the event
    was decoded by the compiled fast path or by pydantic, and whichever branch the fold takes."""
    e = ev.PodSubmitted(
        uid="",
        at_ms=1,
        name=name,
        namespace="ns",
        pod_group="g",
        created_at_ms=1,
        requests=ev.PodRequests(gpus=gpus, cpu_millicores=cpu),
        node_selector=selector,
        allowed_nodes=allowed,
        tolerations=[ev.Toleration(key="k", operator="Exists")] if tolerate else [],
        task_priority=task_priority,
    )
    raw = ev.dump_event(e)
    fast = ev.FAST_PATH.decode(raw)
    assert fast is not None
    b = StateBuilder()
    expected = Pod(
        uid=f"ns/{name}",
        name=name,
        job="ns/g",
        request=b._request(e.requests),
        task_priority=task_priority,
        index=0,
        created_ms=1,
        **placement_fields(e),
    )
    for decoded in (fast, ev.parse_event(raw)):
        b = StateBuilder()
        b.apply(decoded)
        assert b.pods[f"ns/{name}"] == expected


_step = st.tuples(
    st.sampled_from(["bind", "bind", "finish", "fail", "release", "delete", "submit"]),
    st.integers(0, 11),
)


@settings(max_examples=120, deadline=None)
@given(
    min_members=st.lists(st.integers(1, 3), min_size=3, max_size=3),
    steps=st.lists(_step, max_size=40),
)
def test_binding_a_pending_pod_folds_as_the_general_branch(
    min_members: list[int], steps: list[tuple[str, int]]
) -> None:
    """PodBound of a pending pod takes a one-pass path (state.FAST_BIND); any sequence of pod events
    folds to the same snapshot, job clocks included, with it switched off."""
    events: list[ev.Event] = []
    t = 0
    for g, m in enumerate(min_members):
        events.append(
            ev.PodGroupUpserted(
                uid="", at_ms=t, name=f"g{g}", namespace="ns", queue="q", min_member=m, created_at_ms=t
            )
        )
    for i in range(6):
        events.append(
            ev.PodSubmitted(
                uid="",
                at_ms=t,
                name=f"p{i}",
                namespace="ns",
                pod_group=f"g{i % 3}",
                created_at_ms=t,
                requests=ev.PodRequests(gpus=1),
            )
        )
    for kind, i in steps:
        t += 1
        name = f"p{i}"
        if kind == "bind":
            events.append(ev.PodBound(uid="", at_ms=t, name=name, namespace="ns", node="n1"))
        elif kind in ("finish", "fail"):
            phase = "Succeeded" if kind == "finish" else "Failed"
            events.append(ev.PodFinished(uid="", at_ms=t, name=name, namespace="ns", phase=phase))
        elif kind == "release":
            events.append(ev.PodReleasing(uid="", at_ms=t, name=name, namespace="ns", reason="evicted"))
        elif kind == "delete":
            events.append(ev.PodDeleted(uid="", at_ms=t, name=name, namespace="ns"))
        else:
            events.append(
                ev.PodSubmitted(
                    uid="",
                    at_ms=t,
                    name=name,
                    namespace="ns",
                    pod_group=f"g{i % 3}",
                    created_at_ms=t,
                    requests=ev.PodRequests(gpus=1),
                )
            )
    snaps = []
    for fast in (True, False):
        with mock.patch.object(state_mod, "FAST_BIND", fast):
            b = StateBuilder()
            for e in events:
                b.apply(e)
            snaps.append(b.snapshot())
    assert snaps[0] == snaps[1]
