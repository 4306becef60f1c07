"""A KAI Scheduler user's workload runs on Hourglass with only the scheduler name changed.

``examples/kai-workload/`` holds queues and workloads written for KAI (``schedulerName: kai-scheduler``):
a whole-GPU pod with the ``kai.scheduler/queue`` label, a half-GPU pod through the ``gpu-fraction``
annotation, and a PyTorchJob with a master and two workers. The test replaces the scheduler name and nothing
else, applies them to a real kube-apiserver, plays the training operator (it creates the job's pods from its
templates with an owner reference, as the operator would; no operator runs here), and runs ingest → scheduler
→ binder. Every pod must end bound where the engine decided, the job's pods as one gang.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from scheduler.kube.binder import ANNOTATION_GPU_PORTION
from tests.test_binder import apply_crds, make_node, read_pod
from tests.test_kube_e2e import Pipeline, _decisions

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "kai-workload"

PYTORCHJOB_CRD: dict[str, Any] = {  # the Kubeflow CRD's identity; its schema is not what this test is about
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "pytorchjobs.kubeflow.org"},
    "spec": {
        "group": "kubeflow.org",
        "scope": "Namespaced",
        "names": {
            "kind": "PyTorchJob",
            "plural": "pytorchjobs",
            "singular": "pytorchjob",
            "listKind": "PyTorchJobList",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


def _docs(name: str) -> list[dict[str, Any]]:
    text = (EXAMPLE / name).read_text()
    # The only change a KAI user makes:
    text = text.replace("schedulerName: kai-scheduler", "schedulerName: hourglass")
    return [d for d in yaml.safe_load_all(text) if d]


def _apply_cluster_object(api: Any, doc: dict[str, Any]) -> None:
    """Create a Queue, or replace it when it exists already (``kubectl apply`` for this test)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    co = client.CustomObjectsApi(api)
    try:
        co.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", doc)
    except ApiException as e:
        if e.status != 409:
            raise
        cur = co.get_cluster_custom_object("scheduling.run.ai", "v2", "queues", doc["metadata"]["name"])
        doc = {**doc, "metadata": {**doc["metadata"], "resourceVersion": cur["metadata"]["resourceVersion"]}}
        co.replace_cluster_custom_object("scheduling.run.ai", "v2", "queues", doc["metadata"]["name"], doc)


def _ensure_crd(api: Any, crd: dict[str, Any]) -> None:
    import time

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext = client.ApiextensionsV1Api(api)
    try:
        ext.create_custom_resource_definition(crd)
    except ApiException as e:
        if e.status != 409:
            raise
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = ext.read_custom_resource_definition(crd["metadata"]["name"])
        if any(c.type == "Established" and c.status == "True" for c in (got.status.conditions or [])):
            return
        time.sleep(0.2)
    raise AssertionError("the PyTorchJob CRD was not established")


def _operator_pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    """What the training operator creates for a PyTorchJob: one pod per replica, from its template."""
    out = []
    meta = job["metadata"]
    for rtype, spec in job["spec"]["pytorchReplicaSpecs"].items():
        for i in range(spec["replicas"]):
            pod = copy.deepcopy(spec["template"])
            pod.update({"apiVersion": "v1", "kind": "Pod"})
            pod["metadata"] = {
                "name": f"{meta['name']}-{rtype.lower()}-{i}",
                "namespace": meta["namespace"],
                "labels": {
                    "training.kubeflow.org/job-name": meta["name"],
                    "training.kubeflow.org/replica-type": rtype.lower(),
                    "training.kubeflow.org/replica-index": str(i),
                },
                "ownerReferences": [
                    {
                        "apiVersion": job["apiVersion"],
                        "kind": job["kind"],
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            }
            pod["spec"]["restartPolicy"] = "OnFailure"
            out.append(pod)
    return out


def test_kai_workload_runs_with_only_the_scheduler_name_changed(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kube_namespace
    with kube_api.api_client() as api:
        apply_crds(api)
        _ensure_crd(api, PYTORCHJOB_CRD)
        for n in ("n1", "n2"):
            make_node(api, f"{ns}-{n}", gpus=4)
        for q in _docs("queues.yaml"):
            _apply_cluster_object(api, q)
        core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
        pods: list[str] = []
        for doc in _docs("workloads.yaml"):
            doc["metadata"]["namespace"] = ns
            if doc["kind"] == "Pod":
                core.create_namespaced_pod(ns, doc)
                pods.append(doc["metadata"]["name"])
            else:
                job = co.create_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", doc)
                for pod in _operator_pods(job):
                    core.create_namespaced_pod(ns, pod)
                    pods.append(pod["metadata"]["name"])
        gang = [p for p in pods if p.startswith("demo-ddp-")]
        assert len(pods) == 5 and len(gang) == 3

        with FileLog(tmp_path / "log") as log:
            p = Pipeline(api, ns, log)
            p.ingest.start()
            try:
                p.settle(lambda: all("nodeName" in read_pod(api, ns, n)["spec"] for n in pods))
            finally:
                p.ingest.stop()

            binds: dict[str, tuple[str, int]] = {}
            for rec in _decisions(log):
                for d in rec["decisions"]:
                    if d["kind"] == "Bind":
                        binds[d["pod"]] = (d["node"], rec["logical_time_ms"])
            for name in pods:
                assert read_pod(api, ns, name)["spec"]["nodeName"] == binds[f"{ns}/{name}"][0], name
            # The job's three pods are one gang: placed together, in one cycle.
            assert len({binds[f"{ns}/{g}"][1] for g in gang}) == 1
            half = read_pod(api, ns, "demo-half-gpu-pod")["metadata"]["annotations"]
            assert half[ANNOTATION_GPU_PORTION] == "500"
            # The pod-grouper made the job's PodGroup, as KAI's does: minMember = all replicas, the job's queue.
            groups = co.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", ns, "podgroups")[
                "items"
            ]
            ddp = [g for g in groups if g["metadata"]["name"].startswith("pg-demo-ddp-")]
            assert len(ddp) == 1, [g["metadata"]["name"] for g in groups]
            assert ddp[0]["spec"]["minMember"] == 3 and ddp[0]["spec"]["queue"] == "demo-queue"
            dead = log.read(DEFAULT_TOPICS.deadletter, 0, 100)
            assert dead == [], [r.value for r in dead]
