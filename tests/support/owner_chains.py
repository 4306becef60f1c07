"""Pods and their owner objects as the API server returns them, for the pod-grouper tables."""

from __future__ import annotations

from typing import Any


def pod(name: str = "p", labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """A pod in namespace ``ns`` (uid ``NAME-uid``); ``extra`` goes into its spec, ``annotations`` into its metadata."""
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"{name}-uid", "labels": labels or {}}
    if "annotations" in extra:
        meta["annotations"] = extra.pop("annotations")
    return {"metadata": meta, "spec": {"containers": [{"name": "c"}], **extra}}


def owner(
    kind: str, api_version: str, name: str, spec: dict[str, Any] | None = None, **meta: Any
) -> dict[str, Any]:
    """An owner object of ``kind`` in namespace ``ns`` (uid ``NAME-uid``); ``meta`` goes into its metadata."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "uid": f"{name}-uid", **meta},
        "spec": spec or {},
    }
