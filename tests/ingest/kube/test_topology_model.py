"""Topology model (issue 15): KAI's Topology CR and PodGroup topologyConstraint through ingest into state."""

from __future__ import annotations

from typing import Any

import pytest

from ingest.events import (
    NodeUpserted,
    PodGroupUpserted,
    TopologyDeleted,
    TopologyUpserted,
    dump_event,
    parse_event,
)
from ingest.kube import translate as kube
from ingest.kube.translate import InvalidObject
from scheduler.engine.state import Topology, fold

TOPOLOGY_CR = {
    "apiVersion": "kai.scheduler/v1alpha1",
    "kind": "Topology",
    "metadata": {"name": "cluster-topology"},
    "spec": {
        "levels": [
            {"nodeLabel": "cloud.provider.com/topology-block"},
            {"nodeLabel": "cloud.provider.com/topology-rack"},
            {"nodeLabel": "kubernetes.io/hostname"},
        ]
    },
}


def pg(spec: dict[str, Any] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "g", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"queue": "q", "minMember": 2, **(spec or {})}}


def test_topology_cr_translates_to_levels_widest_first() -> None:
    ev = kube.topology_upserted(TOPOLOGY_CR, 5)
    assert ev.name == "cluster-topology" and ev.at_ms == 5 and ev.v == 2
    assert ev.levels == [
        "cloud.provider.com/topology-block",
        "cloud.provider.com/topology-rack",
        "kubernetes.io/hostname",
    ]
    assert parse_event(dump_event(ev)) == ev
    assert kube.topology_deleted(TOPOLOGY_CR, 6) == TopologyDeleted(name="cluster-topology", at_ms=6)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({}, "spec.levels=None: must be a non-empty list"),
        ({"levels": []}, r"spec.levels='\[\]': must be a non-empty list"),
        ({"levels": [{"nodeLabel": ""}]}, r"spec.levels\[0\].nodeLabel='': must be a label key"),
        ({"levels": ["rack"]}, r"spec.levels\[0\].nodeLabel=None: must be a label key"),
        ({"levels": [{"nodeLabel": "rack"}, {"nodeLabel": "rack"}]}, "lists level 'rack' twice"),
    ],
)
def test_bad_topology_cr_is_a_clear_error(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidObject, match=message):
        kube.topology_upserted({"metadata": {"name": "t"}, "spec": spec}, 0)


# (id, spec.topologyConstraint, annotations, expected (topology, required, preferred))
CONSTRAINTS: list[tuple[str, dict[str, Any] | None, dict[str, str], tuple[str | None, ...]]] = [
    ("none", None, {}, (None, None, None)),
    ("spec-required", {"topology": "t", "requiredTopologyLevel": "rack"}, {}, ("t", "rack", None)),
    ("spec-preferred", {"topology": "t", "preferredTopologyLevel": "rack"}, {}, ("t", None, "rack")),
    (
        "spec-both",
        {"topology": "t", "requiredTopologyLevel": "block", "preferredTopologyLevel": "rack"},
        {},
        ("t", "block", "rack"),
    ),
    (
        "annotations",
        None,
        {"kai.scheduler/topology": "t", "kai.scheduler/topology-required-placement": "rack"},
        ("t", "rack", None),
    ),
    (
        "annotation-preferred",
        None,
        {"kai.scheduler/topology": "t", "kai.scheduler/topology-preferred-placement": "zone"},
        ("t", None, "zone"),
    ),
    (
        "spec-wins-over-annotation",
        {"topology": "t", "requiredTopologyLevel": "rack"},
        {"kai.scheduler/topology": "other", "kai.scheduler/topology-required-placement": "zone"},
        ("t", "rack", None),
    ),
    ("topology-only", {"topology": "t"}, {}, ("t", None, None)),
]


@pytest.mark.parametrize(
    ("spec", "annotations", "expected"), [c[1:] for c in CONSTRAINTS], ids=[c[0] for c in CONSTRAINTS]
)
def test_podgroup_topology_constraint_from_spec_or_kai_annotations(
    spec: dict[str, Any] | None, annotations: dict[str, str], expected: tuple[str | None, ...]
) -> None:
    ev = kube.podgroup_upserted(pg({"topologyConstraint": spec} if spec else None, annotations), 0)
    assert (ev.topology, ev.required_topology_level, ev.preferred_topology_level) == expected
    assert ev.v == (2 if expected[0] else 1)  # a group without a constraint stays a v1 event
    job = fold([parse_event(dump_event(ev))]).jobs[0]
    assert (job.topology, job.required_level, job.preferred_level) == expected


@pytest.mark.parametrize(
    ("spec", "annotations", "message"),
    [
        ({"topologyConstraint": "rack"}, {}, "spec.topologyConstraint='rack': must be an object"),
        (
            {"topologyConstraint": {"topology": "t", "requiredTopologyLevel": 3}},
            {},
            "spec.topologyConstraint.requiredTopologyLevel=3: must be a string",
        ),
        (
            {"topologyConstraint": {"requiredTopologyLevel": "rack"}},
            {},
            "spec.topologyConstraint.topology=None: is required with a topology level",
        ),
        (None, {"kai.scheduler/topology-preferred-placement": "rack"}, "kai.scheduler/topology annotation"),
    ],
)
def test_bad_podgroup_topology_constraint_names_the_field(
    spec: dict[str, Any] | None, annotations: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidObject, match=message):
        kube.podgroup_upserted(pg(spec, annotations), 0)


def test_fold_keeps_topologies_sorted_and_forgets_deleted_ones() -> None:
    state = fold(
        [
            TopologyUpserted(at_ms=0, name="zeta", levels=["zone"]),
            TopologyUpserted(at_ms=0, name="alpha", levels=["block", "rack"]),
            TopologyUpserted(at_ms=1, name="zeta", levels=["zone", "rack"]),
            TopologyUpserted(at_ms=1, name="gone", levels=["x"]),
            TopologyDeleted(at_ms=2, name="gone"),
            NodeUpserted(at_ms=0, name="n", cpu_millicores=1, memory_bytes=1),
        ]
    )
    assert state.topologies == (Topology("alpha", ("block", "rack")), Topology("zeta", ("zone", "rack")))


def test_podgroup_update_changes_the_constraint() -> None:
    base: dict[str, Any] = {"name": "g", "namespace": "ns", "queue": "q", "created_at_ms": 0}
    state = fold(
        [
            PodGroupUpserted(at_ms=0, **base, topology="t", required_topology_level="rack"),
            PodGroupUpserted(at_ms=1, **base),
        ]
    )
    assert (state.jobs[0].topology, state.jobs[0].required_level) == (None, None)


# --------------------------------------------------------------------------- the pod grouper

_RACK = {"kai.scheduler/topology": "dc", "kai.scheduler/topology-required-placement": "rack"}


def _owner(kind: str, api_version: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "w", "namespace": "ns", "uid": "w-uid", "annotations": annotations},
        "spec": {"parallelism": 2},
    }


def _pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": "p-uid", "annotations": annotations or {}}
    return {"metadata": meta, "spec": {"containers": [{"name": "c"}]}}


@pytest.mark.parametrize(
    ("owners", "pod_annotations", "expected"),
    [
        ([_owner("TrainingRun", "example.com/v1", _RACK)], {}, ("dc", "rack", None)),
        # The workload's annotations count, not the pod's (KAI reads the top owner).
        ([_owner("TrainingRun", "example.com/v1", {})], _RACK, (None, None, None)),
        ([], _RACK, ("dc", "rack", None)),  # a bare pod is its own workload
        (
            [
                _owner(
                    "RayCluster",
                    "ray.io/v1",
                    {"kai.scheduler/topology": "dc", "kai.scheduler/topology-preferred-placement": "block"},
                )
            ],
            {},
            ("dc", None, "block"),
        ),
    ],
    ids=["owner", "pod-of-owner-ignored", "bare-pod", "preferred"],
)
def test_pod_grouper_copies_workload_annotations_into_the_podgroup(
    owners: list[dict[str, Any]], pod_annotations: dict[str, str], expected: tuple[str | None, ...]
) -> None:
    from ingest.kube.podgrouper import plan_pod_group, podgroup_manifest, podgroup_patch

    plan = plan_pod_group(_pod(pod_annotations), owners)
    manifest = podgroup_manifest(plan)
    manifest["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    ev = kube.podgroup_upserted(manifest, 0)
    assert (ev.topology, ev.required_topology_level, ev.preferred_topology_level) == expected
    assert podgroup_patch(manifest, plan) is None
    if expected[0]:  # an existing group without the constraint is patched to get it
        stale = {**manifest, "spec": {k: v for k, v in manifest["spec"].items() if k != "topologyConstraint"}}
        assert podgroup_patch(stale, plan) == {
            "spec": {"topologyConstraint": manifest["spec"]["topologyConstraint"]}
        }


def test_topology_events_through_the_log_fold_and_cycle() -> None:
    """The JSON of the events, read as the service reads its log, places a rack-constrained gang in one rack."""
    from ingest.events import PodRequests, PodSubmitted, QueueUpserted
    from ingest.log import Record
    from scheduler.engine.cycle import run_cycle
    from scheduler.service import Folder

    def rack_node(name: str, rack: str) -> NodeUpserted:
        labels = {"rack": rack, "kubernetes.io/hostname": name}
        return NodeUpserted(
            at_ms=0, name=name, cpu_millicores=64_000, memory_bytes=2**36, gpus=8, labels=labels
        )

    events = [
        TopologyUpserted(at_ms=0, name="dc", levels=["rack", "kubernetes.io/hostname"]),
        rack_node("n1", "r1"),
        rack_node("n2", "r2"),
        rack_node("n3", "r2"),
        QueueUpserted(at_ms=0, name="q"),
        PodGroupUpserted(
            at_ms=1,
            name="g",
            namespace="ns",
            queue="q",
            min_member=2,
            created_at_ms=1,
            topology="dc",
            required_topology_level="rack",
        ),
        *(
            PodSubmitted(
                at_ms=1,
                name=f"g-{i}",
                namespace="ns",
                pod_group="g",
                requests=PodRequests(cpu_millicores=1000, gpus=8),
                created_at_ms=1,
            )
            for i in range(2)
        ),
    ]
    folder = Folder("t")
    for i, e in enumerate(events):
        assert folder.feed(Record(i, None, dump_event(e))) is None
    state = folder.snapshot()
    assert state.topologies == (Topology("dc", ("rack", "kubernetes.io/hostname")),)
    record, _ = run_cycle(state, now_ms=10)
    nodes = sorted(d.node for d in record.decisions if d.kind == "Bind" and d.node is not None)
    assert nodes == ["n2", "n3"]  # rack r2; plain binpack would have taken n1 and n2


@pytest.mark.parametrize(
    ("details", "expected"),
    [
        ({"topology": "dc", "level": "rack"}, "the whole gang must fit in one rack domain (topology dc)"),
        ({}, "fix the PodGroup's topologyConstraint"),
    ],
)
def test_explain_advice_for_a_gang_waiting_on_its_topology(details: dict[str, Any], expected: str) -> None:
    from analytics.reports.explain import advice

    assert expected in advice("TopologyConstraint", details, (0, 8000), 16000, [])
