"""JobSet and Ray PodGroups with KAI's subgroups, translated from KAI's own grouper tests.

Sources (facts translated: the owner objects, the pod's labels and the expected PodGroup):
- JobSet: ``pkg/podgrouper/podgrouper/plugins/jobset/jobset_grouper_test.go`` of KAI's two-level grouper
  (one PodGroup per JobSet, a parent subgroup per replicatedJob, a leaf per replica).
- Ray: ``pkg/podgrouper/podgrouper/plugins/ray/ray_grouper_test.go`` (``TestGetPodGroupMetadata_RayCluster*``,
  ``..._SubGroups_*``): ``headgroup`` plus one subgroup per worker group.

Every plan's manifest must also be a PodGroup the contract accepts (translated back through ingest).
"""

from __future__ import annotations

from typing import Any

import pytest

from ingest.kube import translate as kube
from ingest.kube.podgrouper import plan_pod_group, podgroup_manifest
from ingest.kube.translate import InvalidObject
from tests.support.owner_chains import owner, pod

RJ = "jobset.sigs.k8s.io/replicatedjob-name"
INDEX = "jobset.sigs.k8s.io/job-index"
MIN = "kai.scheduler/batch-min-member"
TOPOLOGY = "kai.scheduler/topology"
REQUIRED = "kai.scheduler/topology-required-placement"
PREFERRED = "kai.scheduler/topology-preferred-placement"


def _rj(
    name: str, replicas: int | None, parallelism: int, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    rj: dict[str, Any] = {"name": name, "template": {"spec": {"parallelism": parallelism}}}
    if replicas is not None:
        rj["replicas"] = replicas
    if annotations:
        rj["template"]["metadata"] = {"annotations": annotations}
    return rj


def _jobset(*rjs: dict[str, Any], order: str | None = None, annotations: dict[str, str] | None = None) -> Any:
    spec: dict[str, Any] = {"replicatedJobs": list(rjs)}
    if order:
        spec["startupPolicy"] = {"startupPolicyOrder": order}
    meta = {"annotations": annotations} if annotations else {}
    return owner("JobSet", "jobset.x-k8s.io/v1alpha2", "js", spec, **meta)


def _member(rj: str, index: str) -> dict[str, Any]:
    return pod(f"js-{rj}-{index}", {RJ: rj, INDEX: index})


def _accepted(plan: Any) -> Any:
    manifest = podgroup_manifest(plan)
    return kube.podgroup_upserted({**manifest, "metadata": {**manifest["metadata"], "uid": "u"}}, 0)


def _by_name(plan: Any) -> dict[str, dict[str, Any]]:
    return {sg["name"]: sg for sg in plan.subgroups}


# --------------------------------------------------------------------------------------------- JobSet

JOBSET_ROOT = [
    # (case in jobset_grouper_test.go, the JobSet, the pod's replicatedJob and index, root minSubGroup)
    ("TestSingleReplicatedJobSingleReplica", _jobset(_rj("worker", 1, 4)), ("worker", "0"), 1),
    ("TestMultipleReplicatedJobsAnyOrder", _jobset(_rj("leader", 1, 1), _rj("worker", 2, 4), order="AnyOrder"),
     ("worker", "0"), 2),
    # No startupPolicy is JobSet's default, AnyOrder: every replicatedJob.
    ("AnyOrder by default", _jobset(_rj("leader", 1, 1), _rj("worker", 2, 4)), ("worker", "1"), 2),
    ("TestStartupPolicyInOrderRootMinSubGroup",
     _jobset(_rj("leader", 1, 1), _rj("worker", 2, 4), order="InOrder"), ("leader", "0"), 1),
    ("TestJobSetAnnotationOverridesRoot",
     _jobset(_rj("a", 1, 1), _rj("b", 1, 1), _rj("c", 1, 1), order="AnyOrder", annotations={MIN: "2"}),
     ("a", "0"), 2),
    ("TestJobSetAnnotationClampedToReplicatedJobCount",
     _jobset(_rj("a", 1, 1), _rj("b", 1, 1), annotations={MIN: "9"}), ("a", "0"), 2),
    ("TestJobSetAnnotationWinsOverInOrder",
     _jobset(_rj("a", 1, 1), _rj("b", 1, 1), order="InOrder", annotations={MIN: "2"}), ("a", "0"), 2),
]  # fmt: skip


@pytest.mark.parametrize(("case", "js", "member", "root"), JOBSET_ROOT, ids=[c[0] for c in JOBSET_ROOT])
def test_jobset_root_needs_its_replicated_jobs(
    case: str, js: Any, member: tuple[str, str], root: int
) -> None:
    plan = plan_pod_group(_member(*member), [owner("Job", "batch/v1", f"js-{member[0]}-{member[1]}"), js])
    assert plan.name == "pg-js-js-uid"
    # KAI sets the root's minSubGroup, not its minMember (TestRootMinSubGroupNotMinAvailable).
    assert (plan.min_sub_group, plan.min_member) == (root, 0)
    spec = podgroup_manifest(plan)["spec"]
    # KAI's CRD holds minMember and minSubGroup mutually exclusive: the root has minSubGroup only.
    assert spec["minSubGroup"] == root and "minMember" not in spec
    ev = _accepted(plan)
    assert ev.min_sub_group == root and ev.min_member == 1  # the engine reads minMember as at least 1


def test_jobset_tree_parent_per_replicated_job_leaf_per_replica() -> None:
    """TestSingleReplicatedJobMultipleReplicas, TestPodRoutingFindsCorrectLeaf."""
    js = _jobset(_rj("leader", 1, 1), _rj("worker", 3, 4))
    plan = plan_pod_group(_member("worker", "1"), [js])
    assert list(plan.subgroups) == [
        {"name": "leader", "minSubGroup": 1},
        {"name": "leader-replica-0", "parent": "leader", "minMember": 1},
        {"name": "worker", "minSubGroup": 3},
        {"name": "worker-replica-0", "parent": "worker", "minMember": 4},
        {"name": "worker-replica-1", "parent": "worker", "minMember": 4},
        {"name": "worker-replica-2", "parent": "worker", "minMember": 4},
    ]
    assert plan.pod_subgroup == "worker-replica-1"
    assert plan_pod_group(_member("leader", "0"), [js]).pod_subgroup == "leader-replica-0"
    ev = _accepted(plan)
    assert [(s.name, s.parent, s.min_member, s.min_sub_group) for s in ev.subgroups][:3] == [
        ("leader", None, None, 1),
        ("leader-replica-0", "leader", 1, None),
        ("worker", None, None, 3),
    ]


@pytest.mark.parametrize(
    ("case", "rj", "leaf_min"),
    [
        ("TestTemplateAnnotationOverridesLeafMinMember", _rj("worker", 2, 8, {MIN: "5"}), 5),
        ("TestTemplateAnnotationGreaterThanParallelismAccepted", _rj("worker", 1, 2, {MIN: "10"}), 10),
        ("parallelism is the leaf's gang", _rj("worker", 1, 6), 6),
    ],
)
def test_jobset_leaf_min_member(case: str, rj: dict[str, Any], leaf_min: int) -> None:
    plan = plan_pod_group(_member("worker", "0"), [_jobset(rj)])
    assert _by_name(plan)["worker-replica-0"]["minMember"] == leaf_min


def test_jobset_replicas_default_to_one() -> None:
    """TestReplicasDefaultsToOne."""
    plan = plan_pod_group(_member("worker", "0"), [_jobset(_rj("worker", None, 2))])
    assert _by_name(plan)["worker"] == {"name": "worker", "minSubGroup": 1}


def test_jobset_topology_root_from_the_jobset_leaves_from_the_template() -> None:
    """TestDistinctTopologiesAtJobSetAndReplicatedJobLevels."""
    rj = _rj("worker", 2, 4, {TOPOLOGY: "leaf-topology", REQUIRED: "rack", PREFERRED: "zone"})
    js = _jobset(rj, annotations={TOPOLOGY: "root-topology", REQUIRED: "datacenter"})
    plan = plan_pod_group(_member("worker", "0"), [js])
    assert plan.topology_constraint == {"topology": "root-topology", "requiredTopologyLevel": "datacenter"}
    groups = _by_name(plan)
    assert "topologyConstraint" not in groups["worker"]
    for leaf in ("worker-replica-0", "worker-replica-1"):
        assert groups[leaf]["topologyConstraint"] == {
            "topology": "leaf-topology",
            "requiredTopologyLevel": "rack",
            "preferredTopologyLevel": "zone",
        }


@pytest.mark.parametrize(
    ("case", "js", "p", "names"),
    [
        ("TestJobSetAnnotationUnparseable", _jobset(_rj("a", 1, 1), annotations={MIN: "not-an-int"}),
         _member("a", "0"), MIN),
        ("TestJobSetAnnotationBelowOne", _jobset(_rj("a", 1, 1), annotations={MIN: "0"}), _member("a", "0"), MIN),
        ("TestTemplateAnnotationUnparseable", _jobset(_rj("worker", 1, 2, {MIN: "abc"})), _member("worker", "0"),
         MIN),
        ("TestTemplateAnnotationBelowOne", _jobset(_rj("worker", 1, 2, {MIN: "0"})), _member("worker", "0"), MIN),
        ("TestPodMissingReplicatedJobLabel", _jobset(_rj("worker", 1, 2)), pod("p", {INDEX: "0"}), RJ),
        ("TestPodMissingJobIndexLabel", _jobset(_rj("worker", 1, 2)), pod("p", {RJ: "worker"}), INDEX),
        ("TestEmptyReplicatedJobs", _jobset(), _member("worker", "0"), "no replicatedJobs"),
        ("a replica the JobSet does not have", _jobset(_rj("worker", 2, 2)), _member("worker", "5"), INDEX),
    ],
)  # fmt: skip
def test_jobset_bad_input_is_a_grouping_error_naming_it(case: str, js: Any, p: Any, names: str) -> None:
    with pytest.raises(InvalidObject) as e:
        plan_pod_group(p, [js])
    assert names in e.value.message


# ------------------------------------------------------------------------------------------------ Ray


def _ray(*groups: dict[str, Any], head: dict[str, Any] | None = None) -> dict[str, Any]:
    return owner(
        "RayCluster", "ray.io/v1", "rc", {"headGroupSpec": head or {}, "workerGroupSpecs": list(groups)}
    )


def _wg(replicas: int, minimum: int, **extra: Any) -> dict[str, Any]:
    return {"replicas": replicas, "minReplicas": minimum, **extra}


def _tpl(**annotations: str) -> dict[str, Any]:
    keys = {"topology": TOPOLOGY, "required": REQUIRED, "preferred": PREFERRED}
    return {"metadata": {"annotations": {keys[k]: v for k, v in annotations.items()}}}


RAY = [
    # (case in ray_grouper_test.go, cluster, gang, [(subgroup, minMember)])
    ("TestGetPodGroupMetadata_RayCluster_SubGroups_Default", _ray(_wg(3, 2), _wg(3, 1)), 4,
     [("headgroup", 1), ("worker-group-0", 2), ("worker-group-1", 1)]),
    ("TestGetPodGroupMetadata_RayCluster_SubGroups_NamedWorkerGroups",
     _ray(_wg(3, 2, groupName="gpu-workers"), _wg(3, 1, groupName="cpu-workers")), 4,
     [("headgroup", 1), ("gpu-workers", 2), ("cpu-workers", 1)]),
    ("TestGetPodGroupMetadata_RayCluster_SuspendedWorkers_SubGroups",
     _ray(_wg(3, 2), _wg(3, 1, suspended=True)), 3, [("headgroup", 1), ("worker-group-0", 2)]),
    ("TestGetPodGroupMetadata_RayCluster_NumOfHosts", _ray(_wg(3, 2, numOfHosts=2), _wg(3, 1, numOfHosts=3)), 8,
     [("headgroup", 1), ("worker-group-0", 4), ("worker-group-1", 3)]),
    # No minReplicas: the group's replicas; a group wanting no pods gets no subgroup.
    ("replicas without minReplicas", _ray(_wg(2, 0), _wg(0, 0)), 3, [("headgroup", 1), ("worker-group-0", 2)]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "cluster", "gang", "groups"), RAY, ids=[c[0] for c in RAY])
def test_ray_head_and_one_subgroup_per_worker_group(
    case: str, cluster: dict[str, Any], gang: int, groups: list[tuple[str, int]]
) -> None:
    plan = plan_pod_group(pod("rc-head", {"ray.io/group": "headgroup"}), [cluster])
    assert plan.min_member == gang
    assert [(sg["name"], sg["minMember"]) for sg in plan.subgroups] == groups
    assert plan.pod_subgroup == "headgroup"
    assert [s.name for s in _accepted(plan).subgroups] == [g for g, _ in groups]


def test_ray_pod_joins_its_group_and_an_unknown_group_joins_none() -> None:
    cluster = _ray(_wg(3, 2, groupName="gpu-workers"))
    assert plan_pod_group(pod("w", {"ray.io/group": "gpu-workers"}), [cluster]).pod_subgroup == "gpu-workers"
    assert plan_pod_group(pod("x", {"ray.io/group": "other"}), [cluster]).pod_subgroup is None
    assert plan_pod_group(pod("y"), [cluster]).pod_subgroup is None


def test_ray_subgroup_topology_from_each_template() -> None:
    """TestGetPodGroupMetadata_RayCluster_SubGroups_WithTopologyConstraints."""
    cluster = _ray(
        _wg(
            3,
            2,
            groupName="gpu-workers",
            template=_tpl(topology="test-topology", required="zone", preferred="rack"),
        ),
        _wg(1, 1, groupName="cpu-workers", template=_tpl(topology="test-topology", preferred="host")),
        _wg(1, 1, groupName="best-effort-workers", template=_tpl(topology="test-topology")),
        head={"template": _tpl(topology="test-topology", required="rack", preferred="node")},
    )
    groups = _by_name(plan_pod_group(pod("h", {"ray.io/group": "headgroup"}), [cluster]))
    assert groups["headgroup"]["topologyConstraint"] == {
        "topology": "test-topology",
        "requiredTopologyLevel": "rack",
        "preferredTopologyLevel": "node",
    }
    assert groups["gpu-workers"]["topologyConstraint"] == {
        "topology": "test-topology",
        "requiredTopologyLevel": "zone",
        "preferredTopologyLevel": "rack",
    }
    assert groups["cpu-workers"]["topologyConstraint"] == {
        "topology": "test-topology",
        "preferredTopologyLevel": "host",
    }
    assert "topologyConstraint" not in groups["best-effort-workers"]  # a topology alone constrains nothing


def test_ray_placement_level_without_topology_is_an_error_naming_it() -> None:
    cluster = _ray(_wg(1, 1, template=_tpl(required="rack")))
    with pytest.raises(InvalidObject) as e:
        plan_pod_group(pod("h", {"ray.io/group": "headgroup"}), [cluster])
    assert "workerGroupSpecs[0]" in e.value.message and TOPOLOGY in e.value.message


def test_a_podgroup_made_before_subgroups_is_patched_to_the_subgroup_form() -> None:
    """An existing JobSet PodGroup with minMember (the flat form) loses it when minSubGroup is set."""
    from ingest.kube.podgrouper import podgroup_patch

    plan = plan_pod_group(_member("worker", "0"), [_jobset(_rj("worker", 2, 2))])
    old = {"spec": {"minMember": 4, "queue": plan.queue, "priorityClassName": plan.priority_class}}
    patch = podgroup_patch(old, plan)
    assert patch is not None
    assert patch["spec"]["minMember"] is None and patch["spec"]["minSubGroup"] == 1
