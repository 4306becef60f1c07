"""End to end against a real kube-apiserver: ingest → scheduler service → binder, then ``hourglass explain``.

Queues and nodes are applied to the API server, pods are submitted with ``schedulerName: hourglass`` (a whole-GPU
pod, a fractional pod through the ``gpu-fraction`` annotation, a gang through a PodGroup, a pod too big for any node),
all on an embedded FileLog. The pods end bound exactly as the engine decided. Then a second queue submits a job that
is owed its quota: the engine reclaims, the binder deletes the victims, ingest sees them go and the job is bound. The
pending pod carries its reason, and ``explain`` answers for every pod.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analytics.audit.store import AuditStore, sink_from_log
from analytics.reports.explain import explain
from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from scheduler.kube.binder import (
    ANNOTATION_GPU_DEVICES,
    ANNOTATION_GPU_PORTION,
    Binder,
    BinderApi,
    RetryPolicy,
)
from tests.support.kube_objects import (
    apply_crds,
    make_node,
    make_pod,
    make_podgroup,
    make_queue,
    pod_events,
    read_pod,
)
from tests.support.kube_pipeline import Pipeline, last_decisions


def test_ingest_schedule_bind_reclaim_and_explain(kube_api: Any, kube_namespace: str, tmp_path: Path) -> None:
    from kubernetes import client

    ns = kube_namespace
    sel = {"hourglass-e2e": ns}  # other tests' nodes share the API server: keep to ours
    org, qa, qb = f"{ns}-org", f"{ns}-a", f"{ns}-b"
    with kube_api.api_client() as api:
        apply_crds(api)
        for n in ("n1", "n2"):
            make_node(api, f"{ns}-{n}", gpus=2, labels=sel)
        make_queue(api, org, 4)
        make_queue(api, qa, 1, org)
        make_queue(api, qb, 3, org)
        make_pod(api, ns, "a-whole", gpus=1, queue=qa, node_selector=sel)
        make_pod(api, ns, "a-frac", queue=qa, node_selector=sel, annotations={"gpu-fraction": "0.5"})
        make_podgroup(api, ns, "a-gang", qa, 2)
        for i in range(2):
            make_pod(
                api,
                ns,
                f"a-gang-{i}",
                gpus=1,
                queue=qa,
                node_selector=sel,
                annotations={"pod-group-name": "a-gang"},
            )
        make_pod(api, ns, "a-big", gpus=3, queue=qa, node_selector=sel)

        log = FileLog(tmp_path / "log")
        p = Pipeline(api, ns, log)
        p.ingest.start()
        try:

            def phase1_done() -> bool:
                bound = all(
                    "nodeName" in read_pod(api, ns, n)["spec"]
                    for n in ("a-whole", "a-frac", "a-gang-0", "a-gang-1")
                )
                conds = read_pod(api, ns, "a-big").get("status", {}).get("conditions") or []
                return bound and any(c["type"] == "PodScheduled" for c in conds)

            p.settle(phase1_done)
            # Phase 1: queue A alone. Every placed pod is bound exactly where the engine decided.
            binds = last_decisions(log, "Bind")
            placed = {f"{ns}/{n}" for n in ("a-whole", "a-frac", "a-gang-0", "a-gang-1")}
            assert placed <= set(binds), sorted(binds)
            for uid in placed:
                pod = read_pod(api, ns, uid.split("/")[1])
                assert pod["spec"]["nodeName"] == binds[uid]["node"], uid
            frac = read_pod(api, ns, "a-frac")["metadata"]["annotations"]
            assert frac[ANNOTATION_GPU_PORTION] == "500"
            assert frac[ANNOTATION_GPU_DEVICES] == ",".join(map(str, binds[f"{ns}/a-frac"]["gpu_devices"]))
            gang_nodes = {binds[f"{ns}/a-gang-{i}"]["node"] for i in range(2)}
            assert gang_nodes <= {f"{ns}-n1", f"{ns}-n2"}
            # The pod too big for any node is pending, and says why on the pod.
            big = read_pod(api, ns, "a-big")
            assert "nodeName" not in big["spec"]
            cond = next(c for c in big["status"]["conditions"] if c["type"] == "PodScheduled")
            assert cond["status"] == "False" and cond["reason"] == "Unschedulable" and cond["message"]

            assert "Unschedulable" in [e["reason"] for e in pod_events(api, ns, "a-big")]
            # ... and on its PodGroup (made by ingest's pod-grouper), as KAI's status updater writes it.
            groups = client.CustomObjectsApi(api).list_namespaced_custom_object(
                "scheduling.run.ai", "v2alpha2", ns, "podgroups"
            )["items"]
            (big_pg,) = [g for g in groups if g["metadata"]["name"].startswith("pg-a-big-")]
            (sc,) = big_pg["status"]["schedulingConditions"]
            assert (sc["type"], sc["reason"], sc["status"]) == (
                "UnschedulableOnNodePool",
                "Unschedulable",
                "True",
            )
            assert sc["reasons"][0]["reason"] == cond["message"].split(":")[0]

            # Phase 2: queue B (deserved 3 GPUs, holding none) asks for 2 GPUs: reclaim from A. The binder
            # restarts first: it resumes after the records it applied, nothing is applied twice.
            p.binder = Binder(
                log, BinderApi(api), grace_seconds=0, retry=RetryPolicy(attempts=4, base_s=0.05), workers=4
            )
            make_pod(api, ns, "b-train", gpus=2, queue=qb, node_selector=sel)
            p.settle(lambda: "nodeName" in read_pod(api, ns, "b-train")["spec"])
            assert p.binder.stats.already_bound == 0
        finally:
            p.ingest.stop()

        evicts = last_decisions(log, "Evict")
        assert evicts and {d["action"] for d in evicts.values()} == {"reclaim"}
        from kubernetes.client.exceptions import ApiException

        for uid in evicts:
            with pytest.raises(ApiException) as gone:
                client.CoreV1Api(api).read_namespaced_pod(uid.split("/")[1], ns)
            assert gone.value.status == 404, uid
        b = read_pod(api, ns, "b-train")
        assert b["spec"]["nodeName"] == last_decisions(log, "Bind")[f"{ns}/b-train"]["node"]
        assert not [r for r in log.read(DEFAULT_TOPICS.deadletter, 0, 1000)]
        for uid in placed - set(evicts):  # one Scheduled Event each, never re-sent
            [scheduled] = [e for e in pod_events(api, ns, uid.split("/")[1]) if e["reason"] == "Scheduled"]
            assert scheduled["count"] == 1
        # Queue status written back: B holds the 2 GPUs it was owed.
        qstatus = client.CustomObjectsApi(api).get_cluster_custom_object(
            "scheduling.run.ai", "v2", "queues", qb
        )
        allocated, fair = qstatus["status"]["allocated"], qstatus["status"]["fairShare"]
        assert allocated["nvidia.com/gpu"] == "2" and fair["nvidia.com/gpu"] == "2"

    # explain answers for each pod, from an audit store sunk from the same log.
    db = tmp_path / "audit.duckdb"
    with AuditStore(db) as store:
        sink_from_log(store, log)
    victim = sorted(evicts)[0]
    e = explain(db, victim)
    assert e.state == "evicted" and "reclaim action on behalf of workload" in e.text()
    assert explain(db, f"{ns}/b-train").state == "bound"
    big_e = explain(db, f"{ns}/a-big")
    assert (
        big_e.state == "pending"
        and "How much is missing" in big_e.text()
        and "Who holds the GPUs" in big_e.text()
    )
    for uid in placed - set(evicts):
        assert explain(db, uid).state == "bound", uid


def test_a_sidecar_counts_against_the_node(kube_api: Any, kube_namespace: str, tmp_path: Path) -> None:
    """A pod whose main container asks for all of a node's CPU and whose sidecar (an init container with
    restartPolicy Always) asks for one more stays pending, as the kubelet would refuse it; the same pod
    without the sidecar binds there."""
    from kubernetes import client

    ns = kube_namespace
    sel = {"hourglass-e2e": ns}
    queue = f"{ns}-q"

    def pod(name: str, sidecar: bool) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "schedulerName": "hourglass",
            "nodeSelector": sel,
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "64"}}}],
        }
        if sidecar:
            spec["initContainers"] = [
                {
                    "name": "proxy",
                    "image": "busybox",
                    "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "1"}},
                }
            ]
        meta = {"name": name, "namespace": ns, "labels": {"kai.scheduler/queue": queue}}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    with kube_api.api_client() as api:
        apply_crds(api)
        make_node(api, f"{ns}-n1", gpus=0, labels=sel)  # 64 CPUs allocatable
        make_queue(api, queue, 0)
        core: Any = client.CoreV1Api(api)  # the client types a dict body as V1Pod
        core.create_namespaced_pod(ns, pod("with-sidecar", True))
        log = FileLog(tmp_path / "log")
        p = Pipeline(api, ns, log)
        p.ingest.start()
        try:

            def refused() -> bool:
                conds = read_pod(api, ns, "with-sidecar").get("status", {}).get("conditions") or []
                return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conds)

            p.settle(refused)
            assert "nodeName" not in read_pod(api, ns, "with-sidecar")["spec"]
            core.create_namespaced_pod(ns, pod("without-sidecar", False))
            p.settle(lambda: "nodeName" in read_pod(api, ns, "without-sidecar")["spec"])
            assert "nodeName" not in read_pod(api, ns, "with-sidecar")["spec"]
        finally:
            p.ingest.stop()


def _pending_message(api: Any, ns: str, name: str) -> str | None:
    """The PodScheduled=False condition's message of a pod, None while it has none."""
    conds = read_pod(api, ns, name).get("status", {}).get("conditions") or []
    return next(
        (c.get("message", "") for c in conds if c["type"] == "PodScheduled" and c["status"] == "False"), None
    )


def test_ephemeral_storage_counts_against_the_node(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    """A pod asking more ephemeral-storage than the node's allocatable stays pending with kube-scheduler's
    reason (``Insufficient ephemeral-storage``); one that fits binds there."""
    from kubernetes import client

    ns = kube_namespace
    sel = {"hourglass-e2e": ns}
    queue = f"{ns}-q"

    def pod(name: str, storage: str) -> dict[str, Any]:
        resources = {"requests": {"cpu": "1", "ephemeral-storage": storage}}
        spec = {
            "schedulerName": "hourglass",
            "nodeSelector": sel,
            "containers": [{"name": "main", "image": "busybox", "resources": resources}],
        }
        meta = {"name": name, "namespace": ns, "labels": {"kai.scheduler/queue": queue}}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    with kube_api.api_client() as api:
        apply_crds(api)
        node = f"{ns}-n1"
        make_node(api, node, gpus=0, labels=sel)
        core: Any = client.CoreV1Api(api)
        alloc = {"cpu": "64", "memory": "256Gi", "pods": "110", "ephemeral-storage": "10Gi"}
        core.patch_node_status(
            node,
            {"status": {"capacity": alloc, "allocatable": alloc}},
            _content_type="application/strategic-merge-patch+json",
        )
        make_queue(api, queue, 0)
        core.create_namespaced_pod(ns, pod("too-big", "20Gi"))
        log = FileLog(tmp_path / "log")
        p = Pipeline(api, ns, log)
        p.ingest.start()
        try:
            p.settle(lambda: _pending_message(api, ns, "too-big") is not None)
            assert "ephemeral-storage" in str(_pending_message(api, ns, "too-big"))
            assert "nodeName" not in read_pod(api, ns, "too-big")["spec"]
            core.create_namespaced_pod(ns, pod("fits", "1Gi"))
            p.settle(lambda: "nodeName" in read_pod(api, ns, "fits")["spec"])
            assert read_pod(api, ns, "fits")["spec"]["nodeName"] == node
            assert "nodeName" not in read_pod(api, ns, "too-big")["spec"]
        finally:
            p.ingest.stop()


def test_a_foreign_pods_anti_affinity_keeps_our_pod_off_its_node(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    """A pod of another scheduler with required anti-affinity against ``app=web`` (hostname) keeps our
    ``app=web`` pod off its node (kube-scheduler's existing pods' anti-affinity), while a pod it does not
    select binds there."""
    from kubernetes import client

    ns = kube_namespace
    queue = f"{ns}-q"
    node = f"{ns}-n1"
    sel = {"hourglass-e2e": ns}

    def pod(name: str, app: str) -> dict[str, Any]:
        spec = {
            "schedulerName": "hourglass",
            "nodeSelector": sel,
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
        }
        meta = {"name": name, "namespace": ns, "labels": {"kai.scheduler/queue": queue, "app": app}}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    foreign = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "agent", "namespace": ns, "labels": {"app": "agent"}},
        "spec": {
            "schedulerName": "default-scheduler",
            "nodeName": node,
            "containers": [{"name": "main", "image": "busybox"}],
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
        },
    }
    with kube_api.api_client() as api:
        apply_crds(api)
        make_node(api, node, gpus=0, labels=sel | {"kubernetes.io/hostname": node})
        make_queue(api, queue, 0)
        core: Any = client.CoreV1Api(api)
        core.create_namespaced_pod(ns, foreign)
        core.create_namespaced_pod(ns, pod("web", "web"))
        log = FileLog(tmp_path / "log")
        p = Pipeline(api, ns, log)
        p.ingest.start()
        try:
            p.settle(lambda: _pending_message(api, ns, "web") is not None)
            assert "anti-affinity" in str(_pending_message(api, ns, "web"))
            core.create_namespaced_pod(ns, pod("other", "other"))
            p.settle(lambda: "nodeName" in read_pod(api, ns, "other")["spec"])
            assert read_pod(api, ns, "other")["spec"]["nodeName"] == node
            assert "nodeName" not in read_pod(api, ns, "web")["spec"]
        finally:
            p.ingest.stop()
