"""DRA (``resource.k8s.io/v1``) objects as plain dicts, and helpers to create them on a real API server.

Shapes follow kubernetes-sigs/dra-example-driver (driver ``gpu.example.com``, its DeviceClass selector
``device.driver == 'gpu.example.com'``, devices ``gpu-0``..) and Kubernetes' DRA docs.
"""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.example.com"
API = "/apis/resource.k8s.io/v1"


def device_class(name: str = DRIVER, expression: str | None = None, **spec: Any) -> dict[str, Any]:
    """A DeviceClass selecting ``expression`` (default: every device of the example driver)."""
    expr = expression if expression is not None else f"device.driver == '{DRIVER}'"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expr}}], **spec},
    }


def resource_slice(
    node: str, devices: list[str], driver: str = DRIVER, generation: int = 1, name: str | None = None
) -> dict[str, Any]:
    """A node-local ResourceSlice publishing ``devices`` in the pool named after the node (as drivers do)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [{"name": d, "attributes": {"index": {"int": i}}} for i, d in enumerate(devices)],
        },
    }


def gpu_claim(name: str, count: int | None = 1, cls: str = DRIVER, **exactly: Any) -> dict[str, Any]:
    """A ResourceClaim for ``count`` devices of class ``cls`` (``exactly`` adds or overrides fields; count
    None leaves it out, as ``allocationMode: All`` requires)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": cls,
                            "allocationMode": "ExactCount",
                            **({"count": count} if count is not None else {}),
                            **exactly,
                        },
                    }
                ]
            }
        },
    }


def dra_pod(
    name: str,
    queue: str,
    claim: str | None = None,
    template: str | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod for our scheduler whose container uses one claim entry ``gpu`` (a claim or a template)."""
    entry: dict[str, Any] = {"name": "gpu"}
    if claim is not None:
        entry["resourceClaimName"] = claim
    else:
        entry["resourceClaimTemplateName"] = template
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue}},
        "spec": {
            "schedulerName": "hourglass",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [entry],
            **({"nodeSelector": node_selector} if node_selector else {}),
        },
    }


def ensure(kapi: Any, path: str, body: dict[str, Any]) -> None:
    """POST ``body`` unless it exists already (cluster-scoped objects shared by the session's tests)."""
    from ingest.kube.client import KubeError

    try:
        kapi.request("POST", path, body=body)
    except KubeError as exc:
        if exc.status != 409:
            raise


def create(kapi: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` to ``path`` (a :class:`ingest.kube.client.KubeApi`), returning the created object."""
    got: dict[str, Any] = kapi.request("POST", path, body=body)
    return got
