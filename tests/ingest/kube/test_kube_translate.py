"""Kubernetes objects -> contract events (ingest/kube/translate.py) and pod grouping (ingest/kube/podgrouper.py).

Pure translation, no server: the objects are the JSON dicts the API server sends.
"""

from __future__ import annotations

from typing import Any

import pytest

from ingest.kube import translate as kube
from ingest.kube.podgrouper import plan_pod_group, podgroup_manifest, podgroup_patch, resolve_owners
from ingest.kube.translate import InvalidObject


def node(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "labels": {}}, "spec": {}, "status": status}


def queue(resources: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "team-a"}, "spec": {"resources": resources, **spec}}


UNLIMITED = {"quota": 0, "limit": -1, "overQuotaWeight": 1}


def pod(
    containers: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "pod-uid",
            "annotations": annotations or {},
            "labels": labels or {},
            "creationTimestamp": "2026-01-01T00:00:01Z",
        },
        "spec": {"schedulerName": "hourglass", "containers": containers or [], **spec},
        "status": {"phase": "Pending"},
    }


def req(**requests: str) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": requests}}


# --------------------------------------------------------------------------- nodes


def test_node_allocatable_is_exact_and_labels_give_gpu_memory_and_model() -> None:
    obj = node(allocatable={"cpu": "7800m", "memory": "30Gi", "nvidia.com/gpu": "8", "pods": "64"})
    obj["metadata"]["labels"] = {"nvidia.com/gpu.memory": "81920", "nvidia.com/gpu.product": "A100"}
    obj["spec"]["taints"] = [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]
    ev = kube.node_upserted(obj, 5)
    assert (ev.cpu_millicores, ev.memory_bytes, ev.gpus, ev.max_pods) == (7800, 30 * 2**30, 8, 64)
    assert (ev.gpu_memory_mib, ev.gpu_model, ev.ready) == (81920, "A100", True)
    assert [(t.key, t.effect) for t in ev.taints] == [("gpu", "NoSchedule")]


def test_node_gpu_memory_label_in_bytes_is_converted_and_not_ready_is_seen() -> None:
    obj = node(allocatable={"cpu": "1", "memory": "1Gi"}, conditions=[{"type": "Ready", "status": "False"}])
    obj["metadata"]["labels"] = {"nvidia.com/gpu.memory": str(40 * 2**30)}
    ev = kube.node_upserted(obj, 0)
    assert ev.gpu_memory_mib == 40 * 1024
    assert ev.ready is False


def test_node_bad_quantity_names_the_field_and_value() -> None:
    with pytest.raises(InvalidObject) as e:
        kube.node_upserted(node(allocatable={"cpu": "lots"}), 0)
    assert e.value.reason == "HourglassInvalidNode"
    assert "status.allocatable[cpu]='lots'" in e.value.message


# --------------------------------------------------------------------------- queues


def test_queue_kai_units_and_special_values() -> None:
    obj = queue(
        {
            "gpu": {"quota": 1.5, "limit": -1, "overQuotaWeight": 2},
            "cpu": {"quota": 4000, "limit": 8000, "overQuotaWeight": 1},
            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        },
        parentQueue="root",
        priority=200,
        preemptMinRuntime="1h30m",
        reclaimMinRuntime="90s",
    )
    ev, warnings = kube.queue_upserted(obj, 7)
    assert warnings == []
    assert (ev.resources.gpu.quota, ev.resources.gpu.limit, ev.resources.gpu.over_quota_weight) == (
        1500,
        None,
        2.0,
    )
    assert (ev.resources.cpu.quota, ev.resources.cpu.limit) == (4000, 8000)
    assert (ev.resources.memory.quota, ev.resources.memory.limit) == (None, None)
    assert (ev.parent, ev.priority) == ("root", 200)
    assert (ev.preempt_min_runtime_ms, ev.reclaim_min_runtime_ms) == (5_400_000, 90_000)


def test_queue_memory_is_megabytes_of_ten_to_the_six() -> None:
    ev, _ = kube.queue_upserted(
        queue({"gpu": UNLIMITED, "cpu": UNLIMITED, "memory": {"quota": 2048, "limit": -1}}), 0
    )
    assert ev.resources.memory.quota == 2048 * 10**6


def test_queue_unlimited_quota_under_a_limit_is_valid() -> None:
    ev, _ = kube.queue_upserted(
        queue({"gpu": {"quota": -1, "limit": 4}, "cpu": UNLIMITED, "memory": UNLIMITED}), 0
    )
    assert (ev.resources.gpu.quota, ev.resources.gpu.limit) == (None, 4000)


def test_queue_unset_limit_is_a_hard_cap_of_zero_with_a_warning() -> None:
    ev, warnings = kube.queue_upserted(queue({"gpu": UNLIMITED, "cpu": UNLIMITED}), 0)
    assert (ev.resources.memory.quota, ev.resources.memory.limit, ev.resources.memory.over_quota_weight) == (
        0,
        0,
        0.0,
    )
    assert len(warnings) == 1 and "memory.limit is unset" in warnings[0]


@pytest.mark.parametrize(
    ("gpu", "limit", "unset"),
    [({"quota": 4, "limit": 2}, 2000, False), ({"quota": 2}, 0, True)],
)
def test_a_quota_above_the_limit_is_accepted_and_held_at_the_limit(
    gpu: dict[str, Any], limit: int, unset: bool
) -> None:
    """KAI's docs/queues example ``ml-team`` (GPU quota 1, no limit) is a valid KAI queue: KAI's webhook
    accepts it and its limit wins. Hourglass accepts it too, reads the quota as the limit, and says so."""
    ev, warnings = kube.queue_upserted(queue({"gpu": gpu, "cpu": UNLIMITED, "memory": UNLIMITED}), 0)
    assert (ev.resources.gpu.quota, ev.resources.gpu.limit) == (limit, limit)
    (warning,) = [w for w in warnings if "gpu.quota" in w]
    assert "exceeds its limit" in warning and "read as the limit" in warning
    assert ("hard cap of 0" in warning) == unset


@pytest.mark.parametrize(
    ("resources", "field", "problem"),
    [
        ({"gpu": {"quota": -2, "limit": -1}}, "spec.resources.gpu.quota=-2", ">= 0, or -1"),
        ({"cpu": {"quota": 0.5, "limit": -1}}, "spec.resources.cpu.quota=0.5", "whole number of millicores"),
        ({"gpu": {"quota": "x", "limit": -1}}, "spec.resources.gpu.quota='x'", "must be a number"),
        ({"gpu": {"quota": 0, "limit": -1, "overQuotaWeight": -1}}, "overQuotaWeight=-1", ">= 0"),
    ],
)
def test_invalid_queue_values_are_specific_errors(
    resources: dict[str, Any], field: str, problem: str
) -> None:
    with pytest.raises(InvalidObject) as e:
        kube.queue_upserted(queue(resources), 0)
    assert e.value.reason == "HourglassInvalidQueue" and e.value.reason_code == "invalid_queue"
    assert field in e.value.message and problem in e.value.message


def test_queue_bad_duration_and_missing_resources() -> None:
    with pytest.raises(InvalidObject, match=r"spec.reclaimMinRuntime='ten minutes': must be a Go duration"):
        kube.queue_upserted(queue({"gpu": UNLIMITED}, reclaimMinRuntime="ten minutes"), 0)
    with pytest.raises(InvalidObject, match=r"spec.resources=None: is required"):
        kube.queue_upserted({"metadata": {"name": "q"}, "spec": {}}, 0)


# --------------------------------------------------------------------------- pod groups


def pg(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "g", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": spec,
    }


def test_podgroup_translation() -> None:
    ev = kube.podgroup_upserted(
        pg(queue="team-a", minMember=4, priorityClassName="build", preemptibility="preemptible"), 3
    )
    assert (ev.name, ev.namespace, ev.queue, ev.min_member) == ("g", "ns", "team-a", 4)
    assert (ev.priority_class, ev.preemptible, ev.created_at_ms) == ("build", True, 1767225600000)
    assert kube.podgroup_upserted(pg(queue="q"), 0).preemptible is None


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ({}, "spec.queue=None: is required"),
        ({"queue": "Team_A"}, "spec.queue='Team_A': not a valid queue name"),
        ({"queue": "q", "preemptibility": "maybe"}, "spec.preemptibility='maybe'"),
        ({"queue": "q", "minMember": "2"}, "spec.minMember='2'"),
        ({"queue": "q", "minMember": -1}, "spec.minMember=-1: must be an integer >= 0"),
        ({"queue": "q", "preemptibility": "semi-preemptible"}, "Hourglass does not implement yet"),
    ],
)
def test_invalid_podgroups(spec: dict[str, Any], text: str) -> None:
    with pytest.raises(InvalidObject) as e:
        kube.podgroup_upserted(pg(**spec), 0)
    assert e.value.reason == "HourglassInvalidPodGroup"
    assert text in e.value.message


# --------------------------------------------------------------------------- pods


def test_pod_requests_sum_containers_max_init_plus_overhead() -> None:
    obj = pod(
        [req(cpu="500m", memory="1Gi", **{"nvidia.com/gpu": "1"}), req(cpu="250m", memory="512Mi")],
        initContainers=[req(cpu="2", memory="256Mi")],
        overhead={"cpu": "100m"},
    )
    r = kube.pod_requests(obj)
    assert (r.cpu_millicores, r.memory_bytes, r.gpus) == (2100, 1536 * 2**20, 1)


def test_pod_limits_stand_in_for_missing_requests() -> None:
    r = kube.pod_requests(pod([{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 2, "cpu": "1"}}}]))
    assert (r.gpus, r.cpu_millicores) == (2, 1000)


def test_pod_gpu_sharing_annotations() -> None:
    r = kube.pod_requests(pod([req(cpu="1")], {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}))
    assert (r.gpu_fraction_milli, r.gpu_fraction_devices, r.gpus) == (500, 2, 0)
    r = kube.pod_requests(pod([req(cpu="1")], {"gpu-memory": "4000"}))
    assert (r.gpu_memory_mib, r.gpu_fraction_milli) == (4000, None)


@pytest.mark.parametrize(
    ("annotations", "gpus", "text"),
    [
        ({"gpu-fraction": "abc"}, None, "[gpu-fraction]='abc': invalid GPU fraction quantity"),
        ({"gpu-fraction": "1.5"}, None, "GPU fraction must be > 0 and <= 1"),
        ({"gpu-fraction": "0.5"}, "1", "cannot be combined with nvidia.com/gpu=1"),
        ({"gpu-memory": "-5"}, None, "[gpu-memory]='-5': must be a positive integer"),
        ({"gpu-memory": "100", "gpu-fraction": "0.5"}, None, "cannot be combined with gpu-fraction"),
        ({"gpu-fraction-num-devices": "2"}, None, "needs a gpu-fraction or gpu-memory"),
        ({}, "0.5", "must be a whole number of GPUs"),
    ],
)
def test_invalid_gpu_requests(annotations: dict[str, str], gpus: str | None, text: str) -> None:
    container = req(cpu="1", **({"nvidia.com/gpu": gpus} if gpus else {}))
    with pytest.raises(InvalidObject) as e:
        kube.pod_requests(pod([container], annotations))
    assert e.value.reason == "HourglassInvalidPod"
    assert text in e.value.message


def test_pod_submitted_carries_queue_label_placement_and_priority() -> None:
    obj = pod(
        [req(cpu="1")],
        labels={"kai.scheduler/queue": "team-a", "kai.scheduler/task-priority": "3"},
        nodeSelector={"zone": "a"},
        tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]},
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                    ]
                }
            }
        },
    )
    ev = kube.pod_submitted(obj, "pg-x", 9)
    assert (ev.queue, ev.pod_group, ev.task_priority, ev.uid) == ("team-a", "pg-x", 3, "ns/p")
    # The two terms are ORed (kube-scheduler): a gpu=a100 node, or node n1; not allowed nodes ANDed.
    assert ev.node_selector == {"zone": "a"} and ev.allowed_nodes is None
    assert ev.node_affinity[0].match_expressions[0].values == ["a100"]
    assert [(r.key, r.values) for r in ev.node_affinity[1].match_expressions] == [("@metadata.name", ["n1"])]
    assert ev.tolerations[0].operator == "Exists" and ev.created_at_ms == 1767225601000


def test_pod_bad_queue_label() -> None:
    with pytest.raises(InvalidObject, match=r"metadata.labels\[kai.scheduler/queue\]='Team A'"):
        kube.pod_submitted(pod([req(cpu="1")], labels={"kai.scheduler/queue": "Team A"}), "g", 0)


def test_pod_view_follows_kai_status_mapping() -> None:
    p = pod()
    assert kube.pod_view(p) == kube.PodView(None, False, None)
    p["spec"]["nodeName"] = "n1"
    assert kube.pod_view(p) == kube.PodView("n1", False, None)
    p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:09Z"
    assert kube.pod_view(p) == kube.PodView("n1", True, None)
    p["status"]["phase"] = "Failed"
    assert kube.pod_view(p) == kube.PodView("n1", False, "Failed")


# --------------------------------------------------------------------------- pod grouping


def owner(
    kind: str, api_version: str, name: str, spec: dict[str, Any] | None = None, **meta: Any
) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "uid": f"{name}-uid", **meta},
        "spec": spec or {},
    }


def test_bare_pod_gets_its_own_train_group_in_default_queue() -> None:
    plan = plan_pod_group(pod(), [])
    assert (plan.name, plan.min_member, plan.queue, plan.priority_class) == (
        "pg-p-pod-uid",
        1,
        "default-queue",
        "train",
    )
    manifest = podgroup_manifest(plan)
    assert manifest["spec"] == {"minMember": 1, "queue": "default-queue", "priorityClassName": "train"}
    assert manifest["metadata"]["ownerReferences"][0]["kind"] == "Pod"


def test_pytorchjob_gang_is_the_sum_of_replicas_and_queue_comes_from_the_owner() -> None:
    job = owner(
        "PyTorchJob",
        "kubeflow.org/v1",
        "train",
        {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}},
        labels={"kai.scheduler/queue": "team-a"},
    )
    plan = plan_pod_group(pod(labels={"kai.scheduler/queue": "team-b"}), [job])
    assert (plan.name, plan.min_member, plan.queue) == ("pg-train-train-uid", 4, "team-a")
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 2}}
    assert plan_pod_group(pod(), [job]).min_member == 2


def test_pytorchjob_with_zero_replicas_is_a_grouping_error() -> None:
    job = owner("PyTorchJob", "kubeflow.org/v1", "t", {"pytorchReplicaSpecs": {"Worker": {"replicas": 0}}})
    with pytest.raises(InvalidObject) as e:
        plan_pod_group(pod(), [job])
    assert e.value.reason == "HourglassPodGrouping" and "Worker.replicas" in e.value.message


def test_mpijob_and_raycluster_sizes() -> None:
    mpi = owner(
        "MPIJob",
        "kubeflow.org/v2beta1",
        "m",
        {"mpiReplicaSpecs": {"Launcher": {"replicas": 1}, "Worker": {"replicas": 4}}},
    )
    assert plan_pod_group(pod(), [mpi]).min_member == 5
    ray = owner(
        "RayCluster",
        "ray.io/v1",
        "r",
        {
            "workerGroupSpecs": [
                {"groupName": "a", "replicas": 4, "minReplicas": 2, "numOfHosts": 2},
                {"groupName": "b", "replicas": 3},
                {"groupName": "c", "replicas": 5, "suspended": True},
            ]
        },
    )
    assert plan_pod_group(pod(), [ray]).min_member == 1 + 2 * 2 + 3


def test_deployment_and_job_pods_get_a_group_each_with_kai_priorities() -> None:
    rs = owner("ReplicaSet", "apps/v1", "web-abc")
    dep = owner("Deployment", "apps/v1", "web")
    plan = plan_pod_group(pod(), [rs, dep])
    assert (plan.name, plan.priority_class, plan.top_owner_kind) == (
        "pg-p-pod-uid",
        "inference",
        "Deployment",
    )
    job = owner("Job", "batch/v1", "j", {"parallelism": 4})
    plan = plan_pod_group(pod(), [job])
    assert (plan.name, plan.min_member, plan.priority_class) == ("pg-p-j-uid", 1, "train")


def test_labels_override_priority_and_preemptibility_and_bad_values_are_errors() -> None:
    sts = owner("StatefulSet", "apps/v1", "db", labels={"priorityClassName": "build", "project": "team-c"})
    plan = plan_pod_group(pod(labels={"kai.scheduler/preemptibility": "non-preemptible"}), [sts])
    assert (plan.priority_class, plan.preemptibility, plan.queue, plan.min_member) == (
        "build",
        "non-preemptible",
        "team-c",
        1,
    )
    with pytest.raises(InvalidObject, match=r"kai\.scheduler/preemptibility"):
        plan_pod_group(pod(labels={"kai.scheduler/preemptibility": "sometimes"}), [])
    with pytest.raises(InvalidObject, match="not a valid queue name"):
        plan_pod_group(pod(labels={"kai.scheduler/queue": "UPPER"}), [])


def test_resolve_owners_walks_to_the_top_and_stubs_an_unreadable_owner() -> None:
    dep = owner("Deployment", "apps/v1", "web")
    rs = owner("ReplicaSet", "apps/v1", "web-abc")
    rs["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "web-uid", "controller": True}
    ]
    store = {("ReplicaSet", "web-abc"): rs, ("Deployment", "web"): dep}
    calls: list[tuple[str, str, str, str]] = []

    def get(api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        calls.append((api_version, kind, namespace, name))
        return store.get((kind, name))

    p = pod()
    p["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "web-abc",
            "uid": "web-abc-uid",
            "controller": True,
        }
    ]
    chain = resolve_owners(p, get)
    assert [o["kind"] for o in chain] == ["ReplicaSet", "Deployment"]
    assert calls[0] == ("apps/v1", "ReplicaSet", "ns", "web-abc")
    del store[("Deployment", "web")]
    chain = resolve_owners(p, get)
    assert chain[-1]["metadata"] == {"name": "web", "namespace": "ns", "uid": "web-uid"}


def test_podgroup_patch_only_when_managed_fields_differ() -> None:
    plan = plan_pod_group(pod(), [])
    existing = podgroup_manifest(plan)
    assert podgroup_patch(existing, plan) is None
    existing["spec"]["minMember"] = 3
    assert podgroup_patch(existing, plan) == {"spec": {"minMember": 1}}


# --------------------------------------------------------------------------- real nodes (contract v2)


def test_node_extended_allocatable_keeps_qualified_names_and_hugepages_bytes() -> None:
    obj = node(
        allocatable={
            "cpu": "8",
            "memory": "32Gi",
            "nvidia.com/mig-1g.10gb": "7",
            "amd.com/gpu": "0",
            "rdma/ib": "2",
            "hugepages-2Mi": "1Gi",
            "ephemeral-storage": "100Gi",
            "attachable-volumes-aws-ebs": "25",
        }
    )
    ev = kube.node_upserted(obj, 0)
    assert ev.extended == {
        "ephemeral-storage": 100 * 2**30,
        "hugepages-2Mi": 2**30,
        "nvidia.com/mig-1g.10gb": 7,
        "rdma/ib": 2,
    }
    assert ev.v == 2


def test_pod_extended_requests_sum_containers_and_init_max() -> None:
    obj = pod(
        [req(cpu="1", **{"nvidia.com/mig-1g.10gb": "1", "rdma/ib": "1"}), req(**{"rdma/ib": "1"})],
        initContainers=[req(**{"rdma/ib": "3"})],
    )
    assert kube.pod_requests(obj).extended == {"nvidia.com/mig-1g.10gb": 1, "rdma/ib": 3}
    # ephemeral-storage is carried (bytes); an unqualified unknown name is an error, never dropped.
    assert kube.pod_requests(pod([req(**{"ephemeral-storage": "1Gi"})])).extended == {"ephemeral-storage": 2**30}
    with pytest.raises(InvalidObject, match="not a resource Hourglass knows"):
        kube.pod_requests(pod([req(fpga="1")]))
    with pytest.raises(InvalidObject, match="whole numbers"):
        kube.pod_requests(pod([req(**{"rdma/ib": "500m"})]))


def test_pod_constraints_translate_to_contract_fields() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    obj = pod(
        [
            {
                "name": "c",
                "ports": [
                    {"containerPort": 80, "hostPort": 8080},
                    {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
                    {"containerPort": 9000},
                ],
            }
        ],
        labels={"app": "web"},
        affinity={
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]},
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 30, "podAffinityTerm": term}]
            },
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 5,
                        "preference": {
                            "matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]
                        },
                    }
                ]
            },
        },
        topologySpreadConstraints=[
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
                "minDomains": 2,
                "nodeTaintsPolicy": "Honor",
            }
        ],
        schedulingGates=[{"name": "example.com/quota"}],
    )
    ev = kube.pod_submitted(obj, "pg", 0, [kube.volume_claim("data", None, None, None)])
    assert ev.v == 2 and ev.labels == {"app": "web"}
    assert [(p.port, p.protocol, p.host_ip) for p in ev.host_ports] == [
        (8080, "TCP", ""),
        (53, "UDP", "10.0.0.1"),
    ]
    selector = ev.pod_affinity[0].label_selector
    assert ev.pod_affinity[0].weight == 0 and selector is not None and selector.match_labels == {"app": "web"}
    assert ev.pod_anti_affinity[0].weight == 30
    assert ev.preferred_node_affinity[0].weight == 5
    assert ev.topology_spread[0].min_domains == 2 and ev.topology_spread[0].node_taints_policy == "Honor"
    assert ev.scheduling_gates == ["example.com/quota"]
    assert ev.volumes[0].bound is False and ev.volumes[0].binding_mode == "Immediate"


def test_volume_claim_resolution() -> None:
    pvc = {
        "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"volumeName": "pv-1", "storageClassName": "zonal"},
    }
    pv = {
        "spec": {
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        }
    }
    bound = kube.volume_claim("data", pvc, pv, None)
    assert bound.bound and bound.node_affinity[0].match_expressions[0].values == ["a"]
    wffc = kube.volume_claim(
        "scratch",
        {"spec": {"storageClassName": "local"}},
        None,
        {"volumeBindingMode": "WaitForFirstConsumer"},
    )
    assert not wffc.bound and wffc.binding_mode == "WaitForFirstConsumer"


def test_foreign_pod_keeps_only_what_the_engine_needs() -> None:
    obj = pod(
        [
            req(cpu="500m", memory="1Gi", **{"nvidia.com/gpu": "2"}),
            {"name": "x", "ports": [{"containerPort": 9400, "hostPort": 9400}]},
        ],
        labels={"app": "dcgm"},
        nodeName="n1",
        schedulerName="default-scheduler",
    )
    obj["metadata"]["annotations"] = {"big": "x" * 1000}
    ev = kube.foreign_pod(obj, 3)
    assert (ev.node, ev.requests.gpus, ev.requests.cpu_millicores, ev.labels) == (
        "n1",
        2,
        500,
        {"app": "dcgm"},
    )
    assert [p.port for p in ev.host_ports] == [9400] and not ev.releasing
    assert set(ev.model_dump()) == {
        "v",
        "uid",
        "at_ms",
        "type",
        "name",
        "namespace",
        "node",
        "requests",
        "labels",
        "host_ports",
        "releasing",
        "pod_affinity",
        "pod_anti_affinity",
        "volumes",
        "disks",
    }


def test_kais_mps_pod_is_a_fractional_pod_its_host_path_volume_untouched() -> None:
    """KAI v0.17 docs/gpu-sharing/mps/gpu-sharing-with-mps.yaml, as written there (scheduler name changed)."""
    mps = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "gpu-sharing-with-mps",
            "namespace": "default",
            "uid": "u1",
            "labels": {"kai.scheduler/queue": "default-queue"},
            "annotations": {"gpu-fraction": "0.5"},
        },
        "spec": {
            "schedulerName": "hourglass",
            "containers": [
                {
                    "name": "gpu-workload",
                    "image": "nvidia/cuda:13.0.2-base-ubi8",
                    "volumeMounts": [{"name": "mps", "mountPath": "/tmp/nvidia-mps"}],
                }
            ],
            "volumes": [
                {"name": "mps", "hostPath": {"path": "/tmp/nvidia-mps", "type": "DirectoryOrCreate"}}
            ],
        },
    }
    ev = kube.pod_submitted(mps, "pg-gpu-sharing-with-mps-u1", 1000)
    r = ev.requests
    assert (r.gpu_fraction_milli, r.gpu_fraction_devices, r.gpus) == (500, 1, 0)
    assert ev.queue == "default-queue" and not ev.volumes
