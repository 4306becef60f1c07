"""A KAI user's workloads (examples/kai-workload/) and the controllers that are not running in the tests:
the training operator's pods for a PyTorchJob, the LeaderWorkerSet and CronJob controllers' objects, and
the third-party CRDs they need.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tests.support.paths import REPO_ROOT

KAI_WORKLOAD_DIR = REPO_ROOT / "examples" / "kai-workload"


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


def kai_docs(name: str) -> list[dict[str, Any]]:
    """The documents of an examples/kai-workload file with the only change a KAI user makes: the scheduler name."""
    text = (KAI_WORKLOAD_DIR / name).read_text()
    # The only change a KAI user makes:
    text = text.replace("schedulerName: kai-scheduler", "schedulerName: hourglass")
    return [d for d in yaml.safe_load_all(text) if d]


def apply_queue(api: Any, doc: dict[str, Any]) -> None:
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


def ensure_crd(api: Any, crd: dict[str, Any]) -> None:
    """Create ``crd`` (409: already there) and wait until it is established."""
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


def operator_pods(job: dict[str, Any]) -> list[dict[str, Any]]:
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


LWS_CRD: dict[str, Any] = {  # the LWS CRD's identity; its schema is not what this test is about
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "leaderworkersets.leaderworkerset.x-k8s.io"},
    "spec": {
        "group": "leaderworkerset.x-k8s.io",
        "scope": "Namespaced",
        "names": {
            "kind": "LeaderWorkerSet",
            "plural": "leaderworkersets",
            "singular": "leaderworkerset",
            "listKind": "LeaderWorkerSetList",
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


def owner_ref(obj: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """A controller owner reference to ``obj``, as its controller sets it."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def statefulset_object(
    name: str, ns: str, replicas: int, template: dict[str, Any], owner: dict[str, Any]
) -> Any:
    """A StatefulSet owned by ``owner``, as the LWS controller creates it."""
    labels = {"app": name}
    tmpl = copy.deepcopy(template)
    tmpl.setdefault("metadata", {})["labels"] = labels
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns, "ownerReferences": [owner]},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": tmpl,
        },
    }


def owned_pod(
    name: str, ns: str, template: dict[str, Any], labels: dict[str, str], owner: dict[str, Any]
) -> Any:
    """A pod from ``template`` owned by ``owner``, as its controller creates it."""
    pod = copy.deepcopy(template)
    pod.update({"apiVersion": "v1", "kind": "Pod"})
    pod["metadata"] = {"name": name, "namespace": ns, "labels": labels, "ownerReferences": [owner]}
    return pod


def play_lws_controller(api: Any, ns: str, lws: dict[str, Any]) -> dict[int, list[str]]:
    """The LWS controller's objects; returns group index -> pod names (leader first)."""
    from kubernetes import client

    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    name, spec = lws["metadata"]["name"], lws["spec"]
    tmpl = spec["leaderWorkerTemplate"]
    leader_sts = apps.create_namespaced_stateful_set(
        ns,
        statefulset_object(
            name, ns, spec["replicas"], tmpl["leaderTemplate"], owner_ref(lws, lws["apiVersion"], lws["kind"])
        ),
    ).to_dict()
    groups: dict[int, list[str]] = {}
    for i in range(spec["replicas"]):
        common = {"leaderworkerset.sigs.k8s.io/name": name, "leaderworkerset.sigs.k8s.io/group-index": str(i)}
        leader = core.create_namespaced_pod(
            ns,
            owned_pod(
                f"{name}-{i}",
                ns,
                tmpl["leaderTemplate"],
                {**common, "leaderworkerset.sigs.k8s.io/worker-index": "0"},
                owner_ref(leader_sts, "apps/v1", "StatefulSet"),
            ),
        ).to_dict()
        worker_sts = apps.create_namespaced_stateful_set(
            ns,
            statefulset_object(
                f"{name}-{i}", ns, tmpl["size"] - 1, tmpl["workerTemplate"], owner_ref(leader, "v1", "Pod")
            ),
        ).to_dict()
        groups[i] = [f"{name}-{i}"]
        for j in range(1, tmpl["size"]):
            core.create_namespaced_pod(
                ns,
                owned_pod(
                    f"{name}-{i}-{j}",
                    ns,
                    tmpl["workerTemplate"],
                    {**common, "leaderworkerset.sigs.k8s.io/worker-index": str(j)},
                    owner_ref(worker_sts, "apps/v1", "StatefulSet"),
                ),
            )
            groups[i].append(f"{name}-{i}-{j}")
    return groups


def play_cronjob_controller(api: Any, ns: str, cron: dict[str, Any], runs: list[str]) -> dict[str, str]:
    """A Job per run, owned by the CronJob, and its pod; returns pod name -> its Job's name."""
    from kubernetes import client

    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    jt = cron["spec"]["jobTemplate"]
    out = {}
    for run in runs:
        job_name = f"{cron['metadata']['name']}-{run}"
        job_doc = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": job_name,
                "namespace": ns,
                "labels": dict(jt["metadata"]["labels"]),
                "ownerReferences": [owner_ref(cron, "batch/v1", "CronJob")],
            },
            "spec": copy.deepcopy(jt["spec"]),
        }
        job = batch.create_namespaced_job(ns, job_doc).to_dict()
        pod_name = f"{job_name}-x"
        core.create_namespaced_pod(
            ns,
            owned_pod(
                pod_name,
                ns,
                jt["spec"]["template"],
                {"job-name": job_name},
                owner_ref(job, "batch/v1", "Job"),
            ),
        )
        out[pod_name] = job_name
    return out
