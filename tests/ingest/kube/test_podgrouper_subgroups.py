"""Subgroups the pod-grouper builds, as KAI's plugins build them (issue 15 item 3, ingest/kube/podgrouper.py).

One table per kind: the pod and its owner chain -> the PodGroup's ``spec.subGroups`` and the subgroup the pod
joins. LeaderWorkerSet: ``leader`` (1) + ``workers`` (size - 1). Grove: the PodGang's podgroups (one per
PodClique), their parents (topologyConstraintGroupConfigs) and pack constraints. JobSet and Ray: see
test_podgrouper_jobset_ray.py. Bad PodGangs are grouping errors naming the field, never a crash.
"""

from __future__ import annotations

from typing import Any

import pytest

from ingest.kube import translate as kube
from ingest.kube.podgrouper import plan_pod_group, podgroup_manifest
from ingest.kube.translate import InvalidObject
from tests.support.owner_chains import owner, pod

LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER = "leaderworkerset.sigs.k8s.io/worker-index"


def _lws(size: int = 4, policy: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": 2, "leaderWorkerTemplate": {"size": size}}
    if policy:
        spec["startupPolicy"] = policy
    return owner("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", "lws", spec)


@pytest.mark.parametrize(
    ("lws", "worker", "node", "subgroups", "joins"),
    [
        (
            _lws(),
            "0",
            None,
            [{"name": "leader", "minMember": 1}, {"name": "workers", "minMember": 3}],
            "leader",
        ),
        (
            _lws(),
            "2",
            None,
            [{"name": "leader", "minMember": 1}, {"name": "workers", "minMember": 3}],
            "workers",
        ),
        # size 1: a leader alone, no workers subgroup
        (_lws(size=1), "0", None, [{"name": "leader", "minMember": 1}], "leader"),
        # LeaderReady, leader not bound yet: a gang of 1, so only the leader subgroup (KAI sizes by minMember)
        (_lws(policy="LeaderReady"), "0", None, [{"name": "leader", "minMember": 1}], "leader"),
        (
            _lws(policy="LeaderReady"),
            "0",
            "node-1",
            [{"name": "leader", "minMember": 1}, {"name": "workers", "minMember": 3}],
            "leader",
        ),
    ],
)
def test_leaderworkerset_leader_and_workers(
    lws: dict[str, Any], worker: str, node: str | None, subgroups: list[dict[str, Any]], joins: str
) -> None:
    extra = {"nodeName": node} if node else {}
    p = pod("lws-1-" + worker, {LWS_GROUP: "1", LWS_WORKER: worker}, **extra)
    sts = owner("StatefulSet", "apps/v1", "lws-1")
    plan = plan_pod_group(p, [sts, lws])
    assert plan.name == "pg-lws-lws-uid-group-1"
    assert list(plan.subgroups) == subgroups
    assert plan.pod_subgroup == joins
    manifest = podgroup_manifest(plan)
    assert manifest["spec"]["subGroups"] == subgroups
    # The manifest is a PodGroup the contract accepts, with the gang rule over subgroups.
    ev = kube.podgroup_upserted({**manifest, "metadata": {**manifest["metadata"], "uid": "u"}}, 0)
    assert [s.name for s in ev.subgroups] == [s["name"] for s in subgroups]


# --------------------------------------------------------------------------------- Grove


def _gang(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "svc-0",
        "namespace": "ns",
        "uid": "gang-uid",
        "labels": {"kai.scheduler/queue": "inf"},
    }
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec}


def _refs(*names: str) -> list[dict[str, str]]:
    return [{"namespace": "ns", "name": n} for n in names]


_DISAGG = {
    "priorityClassName": "inference",
    "topologyConstraint": {"packConstraint": {"required": "rack"}},
    "podgroups": [
        {"name": "svc-0-prefill", "minReplicas": 2, "podReferences": _refs("prefill-0", "prefill-1")},
        {
            "name": "svc-0-decode",
            "minReplicas": 1,
            "podReferences": _refs("decode-0", "decode-1"),
            "topologyConstraint": {"packConstraint": {"preferred": "kubernetes.io/hostname"}},
        },
    ],
}


def _grove_pod(name: str, gang: str = "svc-0") -> dict[str, Any]:
    return pod(name, {"grove.io/podgang": gang})


def _grove_owners() -> list[dict[str, Any]]:
    return [
        owner("PodClique", "grove.io/v1alpha1", "svc-0-prefill"),
        owner("PodCliqueSet", "grove.io/v1alpha1", "svc"),
    ]


def _getter(gang: dict[str, Any] | None) -> Any:
    def get(api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert (api_version, kind, namespace) == ("scheduler.grove.io/v1alpha1", "PodGang", "ns")
        return gang if gang is not None and name == gang["metadata"]["name"] else None

    return get


@pytest.mark.parametrize(
    ("pod_name", "joins"),
    [("prefill-1", "svc-0-prefill"), ("decode-0", "svc-0-decode"), ("stray", None)],
)
def test_grove_podgang_cliques_become_subgroups(pod_name: str, joins: str | None) -> None:
    gang = _gang(_DISAGG, {"grove.io/topology-name": "dc"})
    plan = plan_pod_group(_grove_pod(pod_name), _grove_owners(), _getter(gang))
    assert (plan.name, plan.min_member, plan.priority_class, plan.queue) == (
        "pg-svc-0-gang-uid",
        3,
        "inference",
        "inf",
    )
    assert plan.owner["kind"] == "PodGang"
    assert plan.topology_constraint == {"topology": "dc", "requiredTopologyLevel": "rack"}
    assert list(plan.subgroups) == [
        {"name": "svc-0-prefill", "minMember": 2},
        {
            "name": "svc-0-decode",
            "minMember": 1,
            "topologyConstraint": {"topology": "dc", "preferredTopologyLevel": "kubernetes.io/hostname"},
        },
    ]
    assert plan.pod_subgroup == joins


def test_grove_group_configs_are_parents_and_kai_topology_annotation_is_read() -> None:
    spec = {
        **_DISAGG,
        "topologyConstraint": {},
        "topologyConstraintGroupConfigs": [
            {
                "name": "pd",
                "podGroupNames": ["svc-0-prefill", "svc-0-decode"],
                "topologyConstraint": {"packConstraint": {"required": "block"}},
            },
            {"name": "unused", "podGroupNames": []},
        ],
    }
    plan = plan_pod_group(
        _grove_pod("prefill-0"), _grove_owners(), _getter(_gang(spec, {"kai.scheduler/topology": "t2"}))
    )
    assert plan.topology_constraint == {}
    assert plan.subgroups[0] == {
        "name": "pd",
        "topologyConstraint": {"topology": "t2", "requiredTopologyLevel": "block"},
    }
    assert [s.get("parent") for s in plan.subgroups[1:]] == ["pd", "pd"]
    assert (
        kube.podgroup_upserted({**podgroup_manifest(plan), "metadata": {"name": "g", "namespace": "ns"}}, 0)
        .subgroups[1]
        .parent
        == "pd"
    )


@pytest.mark.parametrize(
    ("gang", "labels", "text"),
    [
        (None, {"grove.io/podgang": "svc-0"}, "no readable PodGang yet"),
        (_gang(_DISAGG), {}, "metadata.labels[grove.io/podgang]=None: is required on a Grove pod"),
        (_gang(_DISAGG), {"grove.io/podgang": "svc-0"}, "needs a topology name"),
        (
            _gang({"podgroups": [{"name": "a", "minReplicas": 0, "podReferences": []}]}),
            {"grove.io/podgang": "svc-0"},
            "podgroups[0].minReplicas=0: must be an integer > 0",
        ),
        (_gang({"podgroups": [{"minReplicas": 1}]}), {"grove.io/podgang": "svc-0"}, "podgroups[0].name"),
    ],
)
def test_bad_grove_podgang_is_a_grouping_error(
    gang: dict[str, Any] | None, labels: dict[str, str], text: str
) -> None:
    with pytest.raises(InvalidObject) as e:
        plan_pod_group(pod("prefill-0", labels), _grove_owners(), _getter(gang))
    assert e.value.reason == "HourglassPodGrouping"
    assert text in e.value.message
