"""PyTorchJob and MPIJob grouping as KAI's Kubeflow groupers do it (ingest/kube/podgrouper.py).

Cases translated from KAI's ``pkg/podgrouper/podgrouper/plugins/kubeflow/pytorch/pytorch_grouper_test.go``
(2 masters + 4 workers, elastic ``minReplicas`` 66, ``minAvailable`` 33, segments of 2) and
``pkg/podgrouper/podgrouper/plugins/kubeflow/mpi/mpi-grouper_test.go`` (1 launcher + 2 workers, with and
without ``launcherCreationPolicy: WaitForWorkersReady``).
"""

from __future__ import annotations

from typing import Any

import pytest

from ingest.kube import translate as kube
from ingest.kube.podgrouper import plan_pod_group, podgroup_manifest
from ingest.kube.translate import InvalidObject
from tests.support.owner_chains import owner, pod

ROLE = "training.kubeflow.org/replica-type"
INDEX = "training.kubeflow.org/replica-index"


def _pytorch(master: int | None = 2, worker: int | None = 4, **spec: Any) -> dict[str, Any]:
    specs: dict[str, Any] = {}
    if master is not None:
        specs["Master"] = {"replicas": master}
    if worker is not None:
        specs["Worker"] = {"replicas": worker}
    return owner("PyTorchJob", "kubeflow.org/v1", "pt", {"pytorchReplicaSpecs": specs, **spec})


ELASTIC: dict[str, Any] = {"elasticPolicy": {"minReplicas": 66}}
MIN_AVAILABLE: dict[str, Any] = {"runPolicy": {"schedulingPolicy": {"minAvailable": 33}}}


@pytest.mark.parametrize(
    ("job", "min_member"),
    [
        (_pytorch(), 6),  # TestGetPodGroupMetadata_OnlyReplicas
        (_pytorch(**ELASTIC), 66),  # _OnlyMinReplicas
        (_pytorch(**MIN_AVAILABLE), 33),  # _OnlyMinAvailable
        (_pytorch(**ELASTIC, **MIN_AVAILABLE), 33),  # _MinAvailableAndMinReplicas: minAvailable wins
        (_pytorch(worker=None), 2),  # _OnlyMasterReplicas
        (_pytorch(master=None), 4),  # _OnlyWorkerReplicas
        (_pytorch(worker=None, **ELASTIC), 66),  # _OnlyMasterWithMinReplicas
        (_pytorch(master=None, **ELASTIC), 66),  # _OnlyWorkerWithMinReplicas
    ],
    ids=[
        "replicas",
        "elastic-min-replicas",
        "min-available",
        "min-available-beats-min-replicas",
        "only-master",
        "only-worker",
        "only-master-elastic",
        "only-worker-elastic",
    ],
)
def test_pytorchjob_gang_size(job: dict[str, Any], min_member: int) -> None:
    assert plan_pod_group(pod("pt-master-0", {ROLE: "master"}), [job]).min_member == min_member


def test_elastic_pytorchjob_starts_with_room_for_one_worker() -> None:
    """An elastic job of 4 workers with minReplicas 1 is a gang of 1 (one worker subgroup of 1), not of 4."""
    job = _pytorch(master=None, worker=4, elasticPolicy={"minReplicas": 1, "maxReplicas": 4})
    plan = plan_pod_group(pod("pt-worker-0", {ROLE: "worker", INDEX: "0"}), [job])
    assert plan.min_member == 1
    assert list(plan.subgroups) == [{"name": "worker", "minMember": 1}]
    assert plan.pod_subgroup == "worker"


@pytest.mark.parametrize(
    ("labels", "joins"),
    [({ROLE: "master"}, "master"), ({ROLE: "worker"}, "worker"), ({}, None)],
    ids=["master-pod", "worker-pod", "pod-without-replica-type"],
)
def test_pytorchjob_master_and_worker_subgroups(labels: dict[str, str], joins: str | None) -> None:
    """TestGetPodGroupMetadata_SubGroups_MasterAndWorker / _WorkerPod / _PodWithoutReplicaTypeLabel."""
    plan = plan_pod_group(pod("pt-0", labels), [_pytorch()])
    assert list(plan.subgroups) == [{"name": "master", "minMember": 2}, {"name": "worker", "minMember": 4}]
    assert plan.pod_subgroup == joins
    manifest = podgroup_manifest(plan)
    ev = kube.podgroup_upserted({**manifest, "metadata": {**manifest["metadata"], "uid": "u"}}, 0)
    assert [(s.name, s.min_member) for s in ev.subgroups] == [("master", 2), ("worker", 4)]


def test_pytorchjob_only_master_or_only_worker_has_one_subgroup() -> None:
    """TestGetPodGroupMetadata_SubGroups_OnlyMaster / _OnlyWorker."""
    assert list(plan_pod_group(pod("m", {ROLE: "master"}), [_pytorch(worker=None)]).subgroups) == [
        {"name": "master", "minMember": 2}
    ]
    assert list(plan_pod_group(pod("w", {ROLE: "worker"}), [_pytorch(master=None)]).subgroups) == [
        {"name": "worker", "minMember": 4}
    ]


@pytest.mark.parametrize(
    ("workers", "index", "segments", "joins"),
    [(4, "0", [2, 2], "worker-0"), (4, "2", [2, 2], "worker-1"), (5, "4", [2, 2, 1], "worker-2")],
    ids=["4-workers-first", "4-workers-second", "5-workers-partial-last"],
)
def test_pytorchjob_worker_segments(workers: int, index: str, segments: list[int], joins: str) -> None:
    """TestGetPodGroupMetadata_Segments_HappyFlow_4Workers_2PerSegment / _5Workers_2PerSegment."""
    job = _pytorch(master=1, worker=workers)
    p = pod(
        f"pt-worker-{index}", {ROLE: "worker", INDEX: index}, annotations={"kai.scheduler/segment-size": "2"}
    )
    plan = plan_pod_group(p, [job])
    assert plan.min_member == 1 + workers
    assert list(plan.subgroups) == [
        {"name": "master", "minMember": 1},
        {"name": "worker", "minMember": workers},
        *({"name": f"worker-{i}", "parent": "worker", "minMember": n} for i, n in enumerate(segments)),
    ]
    assert plan.pod_subgroup == joins


def test_pytorchjob_segment_size_from_worker_template_and_malformed_is_an_error() -> None:
    """TestGetPodGroupMetadata_Segments_SegmentSizeFromPodTemplate / _MalformedAnnotation."""
    job = _pytorch(master=1, worker=4)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"] = {
        "metadata": {"annotations": {"kai.scheduler/segment-size": "2"}}
    }
    plan = plan_pod_group(pod("w1", {ROLE: "worker", INDEX: "1"}), [job])
    assert plan.pod_subgroup == "worker-0"
    bad = pod("w1", {ROLE: "worker", INDEX: "1"}, annotations={"kai.scheduler/segment-size": "two"})
    with pytest.raises(InvalidObject, match="segment-size"):
        plan_pod_group(bad, [_pytorch(master=1, worker=4)])


# --------------------------------------------------------------------------------- MPIJob


def _mpi(policy: str | None = None, launcher: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "mpiReplicaSpecs": {"Launcher": {"replicas": launcher}, "Worker": {"replicas": 2}},
    }
    if policy is not None:
        spec["launcherCreationPolicy"] = policy
    return owner("MPIJob", "kubeflow.org/v2beta1", "test-job", spec)


WORKER = {"training.kubeflow.org/job-name": "test-job", "training.kubeflow.org/job-role": "worker"}
LAUNCHER = {"training.kubeflow.org/job-name": "test-job", "training.kubeflow.org/job-role": "launcher"}


def _launcher_job(api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    if (kind, namespace, name) == ("Job", "ns", "test-job-launcher"):
        return {"metadata": {"name": name, "namespace": namespace, "uid": "lj"}}
    return None


@pytest.mark.parametrize(
    ("job", "labels", "get", "min_member"),
    [
        (_mpi(), WORKER, None, 3),  # "Basic pod group metadata": 1 launcher + 2 workers
        (_mpi("WaitForWorkersReady"), WORKER, None, 2),  # "Delayed launcher policy with no launcher"
        (_mpi("WaitForWorkersReady"), WORKER, _launcher_job, 3),  # "... with existing launcher"
        (_mpi("WaitForWorkersReady"), LAUNCHER, None, 3),  # the launcher pod itself exists
        (_mpi("AtStartup"), WORKER, None, 3),
    ],
    ids=["basic", "wait-no-launcher", "wait-launcher-job-exists", "wait-launcher-pod", "at-startup"],
)
def test_mpijob_wait_for_workers_ready_leaves_the_launcher_out(
    job: dict[str, Any], labels: dict[str, str], get: Any, min_member: int
) -> None:
    plan = plan_pod_group(pod("p", labels), [job], get)
    assert (plan.name, plan.min_member) == ("pg-test-job-test-job-uid", min_member)
