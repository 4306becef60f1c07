"""Kubernetes objects for the tests against the real kube-apiserver: the shipped CRDs, nodes, pods,
queues, PodGroups and KAI Topologies created as API objects, and what the tests read back.
"""

from __future__ import annotations

import json
import time
from typing import Any

import yaml

from scheduler.kube.binder import (
    RetryPolicy,
)
from tests.support.paths import REPO_ROOT

CRDS = REPO_ROOT / "deploy" / "crds"


FAST = RetryPolicy(attempts=3, base_s=0.01, max_s=0.05)


def apply_crds(api: Any) -> None:
    """Create the CRDs from deploy/crds (409: already there) and wait until they serve."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted(CRDS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            names.append(doc["metadata"]["name"])
            try:
                ext.create_custom_resource_definition(doc)
            except ApiException as e:
                if e.status != 409:
                    raise
    deadline = time.monotonic() + 30
    for name in names:
        while True:
            crd = ext.read_custom_resource_definition(name)
            conds = {c.type: c.status for c in (crd.status.conditions or [])} if crd.status else {}
            if conds.get("Established") == "True":
                break
            assert time.monotonic() < deadline, f"CRD {name} not established"
            time.sleep(0.2)


def make_node(api: Any, name: str, gpus: int = 8, labels: dict[str, str] | None = None) -> None:
    """A ready GPU node as an API object, without the not-ready taint the API server puts on new nodes."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"gpu-model": "A100", **(labels or {})}},
        }
    )
    core.patch_node(name, {"spec": {"taints": None}}, _content_type="application/merge-patch+json")
    alloc = {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}
    status = {
        "status": {
            "capacity": alloc,
            "allocatable": alloc,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "test node",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
    }
    core.patch_node_status(name, status, _content_type="application/strategic-merge-patch+json")


def make_pod(
    api: Any,
    ns: str,
    name: str,
    *,
    gpus: int = 0,
    queue: str = "team-a",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> None:
    """A pending pod for our scheduler in ``queue`` (label ``kai.scheduler/queue``)."""
    from kubernetes import client

    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "128Mi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"kai.scheduler/queue": queue, **(labels or {})},
            "annotations": annotations or {},
        },
        "spec": {
            "schedulerName": "hourglass",
            "containers": [{"name": "main", "image": "busybox", "resources": resources}],
            **({"nodeSelector": node_selector} if node_selector else {}),
        },
    }
    client.CoreV1Api(api).create_namespaced_pod(ns, body)


def make_queue(api: Any, name: str, gpu_quota: float = 2, parent: str | None = None) -> None:
    """A KAI Queue with a GPU quota (CPU and memory unlimited), under ``parent`` if given."""
    from kubernetes import client

    spec: dict[str, Any] = {
        "resources": {
            "gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
            "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        }
    }
    if parent:
        spec["parentQueue"] = parent
    client.CustomObjectsApi(api).create_cluster_custom_object(
        "scheduling.run.ai",
        "v2",
        "queues",
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec},
    )


def read_pod(api: Any, ns: str, name: str) -> dict[str, Any]:
    """The pod as the API server holds it, as a dict."""
    from kubernetes import client

    r = client.CoreV1Api(api).read_namespaced_pod(name, ns, _preload_content=False)
    return dict(json.loads(r.data))


def pod_events(api: Any, ns: str, name: str) -> list[dict[str, Any]]:
    """The Events whose involved object is the pod."""
    from kubernetes import client

    r = client.CoreV1Api(api).list_namespaced_event(
        ns, field_selector=f"involvedObject.name={name}", _preload_content=False
    )
    return list(json.loads(r.data)["items"])


def make_podgroup(api: Any, ns: str, name: str, queue: str, min_member: int, **spec: Any) -> None:
    """A PodGroup with *spec* fields beyond minMember and queue (e.g. ``topologyConstraint``)."""
    from kubernetes import client

    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "scheduling.run.ai",
        "v2alpha2",
        ns,
        "podgroups",
        {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"minMember": min_member, "queue": queue, **spec},
        },
    )


TOPOLOGY_GROUP, TOPOLOGY_VERSION, TOPOLOGY_PLURAL = "kai.scheduler", "v1alpha1", "topologies"


def topology_object(name: str, levels: list[str] | None) -> dict[str, Any]:
    """A KAI Topology with these node-label levels (``None``: no spec at all)."""
    spec = {} if levels is None else {"levels": [{"nodeLabel": label} for label in levels]}
    return {
        "apiVersion": f"{TOPOLOGY_GROUP}/{TOPOLOGY_VERSION}",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": spec,
    }


def create_topology(api: Any, name: str, levels: list[str] | None) -> None:
    """Create a KAI Topology with these node-label levels."""
    from kubernetes import client

    client.CustomObjectsApi(api).create_cluster_custom_object(
        TOPOLOGY_GROUP, TOPOLOGY_VERSION, TOPOLOGY_PLURAL, topology_object(name, levels)
    )
