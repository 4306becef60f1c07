"""KAI's per-PodGroup timings and minimums, from the PodGroup object through the event contract to a cycle.

Each case starts from a ``scheduling.run.ai/v2alpha2`` PodGroup as a KAI user writes it (spec field or
``kai.scheduler/...`` annotation), translates it (ingest/kube/translate.py), round-trips the event through
the log encoding (``dump_event`` / ``parse_event``, so a field lost on the way fails here), folds it and
runs a cycle: ``preemptionDelay`` holds a pending group back from evicting others until it has waited that
long; ``stalenessGracePeriod`` replaces the scheduler's default grace before a gang below its minimum is
evicted; ``minMember: 0`` is no gang; root ``minSubGroup: 0`` makes each subgroup a gang of its own.
"""

from __future__ import annotations

from typing import Any

import pytest

from ingest import events as ev
from ingest.kube import translate as kube
from scheduler.engine.cycle import run_cycle
from scheduler.engine.record.decisions import CycleRecord
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import StateBuilder

MIN = 60_000


def _podgroup(
    name: str, queue: str = "q", *, annotations: dict[str, str] | None = None, **spec: Any
) -> ev.PodGroupUpserted:
    obj = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"{name}-uid",
            "creationTimestamp": "1970-01-01T00:00:00Z",
            "annotations": annotations or {},
        },
        "spec": {"queue": queue, **spec},
    }
    event = kube.podgroup_upserted(obj, 0)
    parsed = ev.parse_event(ev.dump_event(event))  # the log's encoding must keep every field
    assert isinstance(parsed, ev.PodGroupUpserted)
    return parsed


def _pod(group: str, i: int, gpus: int = 1, subgroup: str | None = None) -> ev.Event:
    labels = {"kai.scheduler/subgroup-name": subgroup} if subgroup else {}
    return ev.PodSubmitted(
        uid="",
        at_ms=0,
        name=f"{group}-{i}",
        namespace="ns",
        pod_group=group,
        created_at_ms=0,
        requests=ev.PodRequests(gpus=gpus),
        labels=labels,
    )


def _cycle(events: list[ev.Event], now_ms: int, config: SessionConfig | None = None) -> CycleRecord:
    b = StateBuilder()
    for e in [
        ev.NodeUpserted(uid="", at_ms=0, name="n1", cpu_millicores=64_000, memory_bytes=2**36, gpus=2),
        ev.QueueUpserted(uid="", at_ms=0, name="q"),
        *events,
    ]:
        b.apply(e)
    record, _ = run_cycle(b.snapshot(), config or SessionConfig(), now_ms)
    return record


def _running(group: str, n: int, devices: list[int]) -> list[ev.Event]:
    return [
        *(_pod(group, i) for i in range(n)),
        *(
            ev.PodBound(uid="", at_ms=0, name=f"{group}-{i}", namespace="ns", node="n1", gpu_devices=[d])
            for i, d in zip(range(n), devices, strict=False)
        ),
    ]


def _kinds(record: CycleRecord) -> list[tuple[str, str | None]]:
    return sorted((d.kind, d.pod) for d in record.decisions if d.kind != "Unschedulable")


@pytest.mark.parametrize(
    ("spec", "annotations"),
    [({"preemptionDelay": "5m"}, None), ({}, {"kai.scheduler/preemption-delay": "5m"})],
    ids=["spec-field", "annotation"],
)
def test_preemption_delay_holds_a_pending_group_back_from_evicting_until_it_has_waited(
    spec: dict[str, Any], annotations: dict[str, str] | None
) -> None:
    # `low` (train, 50) fills the node; `high` (build-preemptible, 75, same queue) would preempt it at once.
    high = _podgroup("high", priorityClassName="build-preemptible", annotations=annotations, **spec)
    assert high.preemption_delay_ms == 5 * MIN
    events = [
        _podgroup("low", priorityClassName="train"),
        *_running("low", 2, [0, 1]),
        high,
        _pod("high", 0, gpus=2),
    ]
    assert not [d for d in _cycle(events, 4 * MIN).decisions if d.kind == "Evict"]
    evicted = [d.pod or "" for d in _cycle(events, 5 * MIN).decisions if d.kind == "Evict"]
    assert sorted(evicted) == ["ns/low-0", "ns/low-1"]


def test_without_preemption_delay_the_same_group_preempts_at_once() -> None:
    events = [
        _podgroup("low", priorityClassName="train"),
        *_running("low", 2, [0, 1]),
        _podgroup("high", priorityClassName="build-preemptible"),
        _pod("high", 0, gpus=2),
    ]
    assert [d.kind for d in _cycle(events, MIN).decisions].count("Evict") == 2


def _stale_gang(**podgroup: Any) -> list[ev.Event]:
    # A gang of 2 with one pod left running (the other finished Failed): stale from t=0.
    return [
        _podgroup("g", minMember=2, **podgroup),
        *_running("g", 2, [0, 1]),
        ev.PodFinished(uid="", at_ms=0, name="g-1", namespace="ns", phase="Failed"),
    ]


def _stale_evictions(events: list[ev.Event], at_ms: int) -> list[str | None]:
    # The fold starts the gang's stale clock when it loses its member (t=0).
    record = _cycle(events, at_ms)
    return [d.pod for d in record.decisions if d.kind == "Evict" and d.action == "stale_gang_eviction"]


@pytest.mark.parametrize(
    ("podgroup", "at_ms", "evicted"),
    [
        ({}, 30_000, []),  # the scheduler's default grace (60 s) has not passed
        ({}, 60_000, ["ns/g-0"]),
        ({"stalenessGracePeriod": "10s"}, 10_000, ["ns/g-0"]),  # its own, shorter grace
        ({"annotations": {"kai.scheduler/staleness-grace-period": "10s"}}, 10_000, ["ns/g-0"]),
        ({"stalenessGracePeriod": "5m"}, 60_000, []),  # its own, longer grace
        ({"stalenessGracePeriod": "-1s"}, 10 * 24 * 3600_000, []),  # negative: never
    ],
    ids=["default-not-yet", "default-passed", "own-10s", "own-10s-annotation", "own-5m", "negative-never"],
)
def test_staleness_grace_period_per_podgroup(
    podgroup: dict[str, Any], at_ms: int, evicted: list[str]
) -> None:
    assert _stale_evictions(_stale_gang(**podgroup), at_ms) == evicted


def test_min_member_zero_is_no_gang_each_pod_starts_alone() -> None:
    # Three 1-GPU pods on a 2-GPU node: with minMember 0 two start; with minMember 3 none does.
    no_gang = [_podgroup("g", minMember=0), *(_pod("g", i) for i in range(3))]
    assert [k for k, _ in _kinds(_cycle(no_gang, 0))] == ["Bind", "Bind"]
    gang = [_podgroup("g", minMember=3), *(_pod("g", i) for i in range(3))]
    assert _kinds(_cycle(gang, 0)) == []


def test_root_min_sub_group_zero_is_accepted_and_each_subgroup_is_its_own_gang() -> None:
    # Subgroups a (2 pods) and b (2 pods) on a 2-GPU node. All children required (no minSubGroup): nothing
    # fits. minSubGroup 0: subgroup a starts on its own.
    subgroups = [{"name": "a", "minMember": 2}, {"name": "b", "minMember": 2}]
    pods = [
        _pod("g", 0, subgroup="a"),
        _pod("g", 1, subgroup="a"),
        _pod("g", 2, subgroup="b"),
        _pod("g", 3, subgroup="b"),
    ]
    assert _kinds(_cycle([_podgroup("g", subGroups=subgroups), *pods], 0)) == []
    elastic = _podgroup("g", subGroups=subgroups, minSubGroup=0)
    assert elastic.min_sub_group == 0
    bound = [p for k, p in _kinds(_cycle([elastic, *pods], 0)) if k == "Bind"]
    assert bound in (["ns/g-0", "ns/g-1"], ["ns/g-2", "ns/g-3"])  # one whole subgroup, not a mix


def test_bad_timings_are_errors_naming_the_field() -> None:
    with pytest.raises(kube.InvalidObject, match=r"spec\.preemptionDelay.*must not be negative"):
        _podgroup("g", preemptionDelay="-5m")
    with pytest.raises(kube.InvalidObject, match=r"staleness-grace-period\].*Go duration"):
        _podgroup("g", annotations={"kai.scheduler/staleness-grace-period": "soon"})
