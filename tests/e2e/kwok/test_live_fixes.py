"""What a user reads on a live cluster after Hourglass acted, on the KWOK cluster through ``hourglass ingest``,
``run`` and ``bind`` processes with their default flags.

* ``kubectl describe pod`` lists the binder's Events: they carry the pod's uid in ``involvedObject``.
* A Queue's status holds Kubernetes quantities (``nvidia.com/gpu``, ``cpu``, ``memory``), as KAI writes them.
* An evicted pod gets the ``DisruptionTarget`` condition (reason ``PreemptionByScheduler``) before it goes,
  so a Job's ``podFailurePolicy`` can ignore the eviction; each victim is evicted once (one ``Preempted``
  Event, count 1), not again every cycle until its deletion is seen.
* A gang that lost a member on a quiet cluster (nothing else arriving) is evicted once its staleness grace
  period has passed.
* A gang waiting for members gets one Normal ``NotReady`` Event on its PodGroup and nothing on its pods
  (KAI's ``RecordJobStatusEvent``); once complete it runs.
* A misspelt PodGroup field (KAI's docs' own ``subgroups`` for ``subGroups``) gets a Warning Event naming it.
* An elastic PyTorchJob starts with ``elasticPolicy.minReplicas`` pods when not all of its replicas fit.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tests.support.kai_workload import PYTORCHJOB_CRD, apply_queue, ensure_crd, operator_pods
from tests.support.kwok import (
    GPUS_PER_NODE,
    NODES,
    HourglassStack,
    KwokCluster,
    create_objects,
    gpu_pod,
    pods,
    queue_manifest,
    running,
    wait_until,
)

GPUS = NODES * GPUS_PER_NODE


def _events(api: Any, ns: str, kind: str, name: str) -> list[Any]:
    from kubernetes import client

    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    return list(client.CoreV1Api(api).list_namespaced_event(ns, field_selector=selector).items)


def _gang(group: str, queue: str, names: list[str], **annotations: str) -> tuple[dict[str, Any], list[Any]]:
    """A PodGroup of ``len(names)`` members (minMember all of them) in `queue`, and its 1-GPU pods."""
    pg = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": group, **({"annotations": dict(annotations)} if annotations else {})},
        "spec": {"minMember": len(names), "queue": queue},
    }
    members = []
    for n in names:
        p = gpu_pod(n, queue, "train")
        p["metadata"]["annotations"] = {"pod-group-name": group}
        members.append(p)
    return pg, members


def test_events_name_the_pod_uid_and_queue_status_is_quantities(
    kwok_cluster: KwokCluster, kwok_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kwok_namespace
    with kwok_cluster.api_client() as api, HourglassStack(kwok_cluster, tmp_path / "log") as stack:
        apply_queue(api, queue_manifest("kwok-status", GPUS))
        names = ["s-0", "s-1", "s-2"]
        create_objects(api, [gpu_pod(n, "kwok-status", "train") for n in names], ns)
        wait_until(lambda: running(api, ns, names) or not stack.alive(), 90, "three pods Running")
        assert stack.alive(), stack.logs()
        for n in names:
            uid = pods(api, ns)[n].metadata.uid
            scheduled = [e for e in _events(api, ns, "Pod", n) if e.reason == "Scheduled"]
            assert scheduled, f"no Scheduled Event for {n}"
            # kubectl describe selects Events by involvedObject.uid as well as name.
            assert all(e.involved_object.uid == uid for e in scheduled), [
                e.involved_object for e in scheduled
            ]

        def allocated() -> dict[str, str]:
            q = client.CustomObjectsApi(api).get_cluster_custom_object(
                "scheduling.run.ai", "v2", "queues", "kwok-status"
            )
            return dict((q.get("status") or {}).get("allocated") or {})

        wait_until(lambda: allocated().get("nvidia.com/gpu") == "3", 60, "Queue status.allocated 3 GPUs")
        status = allocated()
        # Quantities, as KAI's queue controller reads them: whole GPUs, CPU and memory as quantity strings.
        assert set(status) == {"nvidia.com/gpu", "cpu", "memory"}, status
        assert all(isinstance(v, str) for v in status.values()), status


def test_victims_get_disruption_target_and_are_evicted_once(
    kwok_cluster: KwokCluster, kwok_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client, watch

    ns = kwok_namespace
    conditions: dict[str, set[tuple[str, str, str]]] = {}
    stop = threading.Event()

    def record_conditions() -> None:
        with kwok_cluster.api_client() as wapi:
            w = watch.Watch()
            for ev in w.stream(client.CoreV1Api(wapi).list_namespaced_pod, ns, timeout_seconds=240):
                p = ev["object"]
                for c in p.status.conditions or []:
                    conditions.setdefault(p.metadata.name, set()).add((c.type, c.status, c.reason or ""))
                if stop.is_set():
                    w.stop()

    watcher = threading.Thread(target=record_conditions, daemon=True)
    watcher.start()
    with kwok_cluster.api_client() as api, HourglassStack(kwok_cluster, tmp_path / "log") as stack:
        apply_queue(api, queue_manifest("kwok-evict", 0))
        apply_queue(api, queue_manifest("kwok-ea", GPUS // 2, parent="kwok-evict"))
        apply_queue(api, queue_manifest("kwok-eb", GPUS // 2, parent="kwok-evict"))
        a = [f"a-{i}" for i in range(GPUS)]
        create_objects(api, [gpu_pod(n, "kwok-ea", "train") for n in a], ns)
        wait_until(lambda: running(api, ns, a) or not stack.alive(), 120, f"queue ea's {GPUS} pods Running")
        b = [f"b-{i}" for i in range(4)]
        create_objects(api, [gpu_pod(n, "kwok-eb", "train") for n in b], ns)
        wait_until(lambda: running(api, ns, b) or not stack.alive(), 120, "queue eb's 4 pods Running")
        assert stack.alive(), stack.logs()
        gone = sorted(set(a) - set(pods(api, ns)))
        assert len(gone) == 4, gone
        stop.set()
        for victim in gone:
            preempted = [e for e in _events(api, ns, "Pod", victim) if e.reason == "Preempted"]
            assert len(preempted) == 1 and (preempted[0].count or 1) == 1, [
                (e.reason, e.count, e.message) for e in preempted
            ]
            assert ("DisruptionTarget", "True", "PreemptionByScheduler") in conditions.get(victim, set()), (
                victim,
                conditions.get(victim),
            )
        # Nobody else was disrupted.
        assert not any(
            ("DisruptionTarget", "True", "PreemptionByScheduler") in conditions.get(n, set())
            for n in set(a) - set(gone)
        )
    watcher.join(timeout=5)


def test_a_gang_that_lost_a_member_is_evicted_on_a_quiet_cluster(
    kwok_cluster: KwokCluster, kwok_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kwok_namespace
    group, members = _gang(
        "pair", "kwok-stale", ["m-0", "m-1"], **{"kai.scheduler/staleness-grace-period": "2s"}
    )
    with kwok_cluster.api_client() as api, HourglassStack(kwok_cluster, tmp_path / "log") as stack:
        apply_queue(api, queue_manifest("kwok-stale", GPUS))
        create_objects(api, [group, *members], ns)
        wait_until(lambda: running(api, ns, ["m-0", "m-1"]) or not stack.alive(), 90, "the gang Running")
        client.CoreV1Api(api).delete_namespaced_pod("m-1", ns, grace_period_seconds=0)
        # Nothing else happens on the cluster: the survivor must still go once the grace period is over.
        wait_until(
            lambda: "m-0" not in pods(api, ns) or not stack.alive(), 60, "the stale gang's survivor evicted"
        )
        assert stack.alive(), stack.logs()
        reasons = [e.reason for e in _events(api, ns, "Pod", "m-0")]
        assert "Evicted" in reasons or "Preempted" in reasons, reasons


def test_a_gang_waiting_for_members_is_told_on_its_podgroup_then_runs(
    kwok_cluster: KwokCluster, kwok_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kwok_namespace
    group, members = _gang("trio", "kwok-trio", ["t-0", "t-1", "t-2"])
    with kwok_cluster.api_client() as api, HourglassStack(kwok_cluster, tmp_path / "log") as stack:
        apply_queue(api, queue_manifest("kwok-trio", GPUS))
        create_objects(api, [group, *members[:2]], ns)

        def not_ready() -> list[Any]:
            return [e for e in _events(api, ns, "PodGroup", "trio") if e.reason == "NotReady"]

        wait_until(lambda: not_ready() or not stack.alive(), 60, "a NotReady Event on the PodGroup")
        assert stack.alive(), stack.logs()
        [ev] = not_ready()
        pg = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "scheduling.run.ai", "v2alpha2", ns, "podgroups", "trio"
        )
        assert (ev.type, ev.involved_object.uid) == ("Normal", pg["metadata"]["uid"])
        assert "Waiting for 3 pods, currently 2 exist" in ev.message, ev.message
        for n in ("t-0", "t-1"):  # nothing on the pods: no condition, no Event
            assert not [e for e in _events(api, ns, "Pod", n) if e.reason == "Unschedulable"]
            conditions = pods(api, ns)[n].status.conditions or []
            assert not [c for c in conditions if c.type == "PodScheduled" and c.status == "False"], conditions
        create_objects(api, members[2:], ns)
        names = ["t-0", "t-1", "t-2"]
        wait_until(lambda: running(api, ns, names) or not stack.alive(), 90, "the complete gang Running")
        assert stack.alive(), stack.logs()


def test_a_misspelt_podgroup_field_gets_a_warning_event(
    kwok_cluster: KwokCluster, kwok_namespace: str, tmp_path: Path
) -> None:
    ns = kwok_namespace
    group = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "typo"},
        # KAI's docs spell it this way once; the CRD field is subGroups.
        "spec": {"minMember": 1, "queue": "kwok-typo", "subgroups": [{"name": "a", "minMember": 1}]},
    }
    with kwok_cluster.api_client() as api, HourglassStack(kwok_cluster, tmp_path / "log") as stack:
        apply_queue(api, queue_manifest("kwok-typo", GPUS))
        create_objects(api, [group], ns)

        def warnings() -> list[str]:
            return [
                e.message for e in _events(api, ns, "PodGroup", "typo") if e.reason == "HourglassUnknownField"
            ]

        wait_until(lambda: bool(warnings()) or not stack.alive(), 60, "HourglassUnknownField Event")
        assert stack.alive(), stack.logs()
        assert any("subgroups" in m for m in warnings()), warnings()


def test_an_elastic_pytorchjob_starts_with_its_minimum(
    kwok_cluster: KwokCluster, kwok_namespace: str, tmp_path: Path
) -> None:
    """KAI's PyTorch grouper: an elastic job's gang is ``elasticPolicy.minReplicas``, not every replica. Here
    the master and five 8-GPU workers need 48 GPUs of the cluster's 32; with a gang of 2 the job starts."""
    from kubernetes import client

    ns = kwok_namespace

    def replica(n: int) -> dict[str, Any]:
        container = {"name": "pytorch", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
        return {
            "replicas": n,
            "template": {"spec": {"schedulerName": "hourglass", "containers": [container]}},
        }

    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "elastic", "namespace": ns, "labels": {"kai.scheduler/queue": "kwok-elastic"}},
        "spec": {
            "elasticPolicy": {"minReplicas": 2, "maxReplicas": 6},
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(5)},
        },
    }
    with kwok_cluster.api_client() as api, HourglassStack(kwok_cluster, tmp_path / "log") as stack:
        ensure_crd(api, PYTORCHJOB_CRD)
        apply_queue(api, queue_manifest("kwok-elastic", GPUS))
        created = client.CustomObjectsApi(api).create_namespaced_custom_object(
            "kubeflow.org", "v1", ns, "pytorchjobs", job
        )
        create_objects(api, operator_pods(created), ns)
        started = lambda: sum(1 for p in pods(api, ns).values() if p.status.phase == "Running")  # noqa: E731
        # The binder binds the gang's pods in parallel, so they reach Running one by one.
        wait_until(lambda: started() >= NODES or not stack.alive(), 90, "the elastic job's pods Running")
        assert stack.alive(), stack.logs()
        assert started() == NODES  # as many 8-GPU pods as there are nodes, the rest wait
        group = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "scheduling.run.ai", "v2alpha2", ns, "podgroups"
        )["items"]
        assert [g["spec"]["minMember"] for g in group] == [2]
