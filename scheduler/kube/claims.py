"""Allocating a pod's DRA ResourceClaims when it is bound, as kube-scheduler's dynamicresources plugin does in
PreBind (``bindClaim``): add the ``resource.kubernetes.io/delete-protection`` finalizer in a normal update, then
write ``status.allocation`` and add the pod to ``status.reservedFor`` through the status subresource, before
the pod's binding.

The devices are the node's free GPUs of the claim's driver, first in (pool, device name) order of the node's
ResourceSlices (newest pool generation), free meaning held by no claim's ``status.allocation`` — what the
structured allocator treats as in use. The engine has already counted the node's devices
(``dra.hourglass.dev/<driver>``), so a node it chose has that many free unless a pod Hourglass does not see
holds one (then the bind fails and is reported, never made without its devices).

Releasing is kube-controller-manager's: its resourceclaim controller removes a finished or deleted pod from
``reservedFor``, deallocates a claim nobody reserves any more (removing the finalizer) and deletes a claim
generated from a template with its pod. The binder undoes only its own allocation when the binding that
followed it failed (as the plugin's Unreserve / PostFilter deallocation do).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from ingest.kube import dra

__all__ = ["ClaimAllocator", "ClaimError"]

GROUP, VERSION = "resource.k8s.io", "v1"


class ClaimError(Exception):
    """A claim that cannot be allocated on the chosen node: dead-lettered with ``reason_code``."""

    def __init__(self, reason_code: str, message: str) -> None:
        super().__init__(message)
        self.reason_code = reason_code
        self.message = message


class ClaimAllocator:
    """Claim allocation over :class:`~scheduler.kube.binder.BinderApi`'s clients (``call``, ``core``,
    ``custom``). One lock: two binds choosing devices on one node at once must not pick the same device."""

    def __init__(self, call: Callable[..., Any], core: Any, custom: Any) -> None:
        self.call = call
        self.core = core
        self.custom = custom
        self._lock = threading.Lock()

    def _json(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        r = self.call(fn, *args, **kwargs)
        data = getattr(r, "data", r)
        out = json.loads(data) if isinstance(data, bytes | str) else data
        return out if isinstance(out, dict) else {}

    def _list(self, plural: str, **kwargs: Any) -> list[dict[str, Any]]:
        got = self._json(self.custom.list_cluster_custom_object, GROUP, VERSION, plural, **kwargs)
        return [i for i in got.get("items") or [] if isinstance(i, dict)]

    def _claim(self, ns: str, name: str) -> dict[str, Any]:
        return self._json(
            self.custom.get_namespaced_custom_object, GROUP, VERSION, ns, "resourceclaims", name
        )

    def _replace(self, fn: Callable[..., Any], ns: str, name: str, claim: dict[str, Any]) -> dict[str, Any]:
        """PUT a ResourceClaim (``fn``: the object or its status subresource); the object written."""
        return self._json(fn, GROUP, VERSION, ns, "resourceclaims", name, claim)

    def allocate(self, namespace: str, name: str, node: str) -> list[str]:
        """Allocate every ResourceClaim of the pod on ``node`` and reserve it for the pod; the claims
        written (a claim already allocated and reserved for this pod is left as it is: a retried bind)."""
        pod = self._json(self.core.read_namespaced_pod, name, namespace)
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        refs = dra.pod_claim_refs(pod)
        written: list[str] = []
        with self._lock:
            slices = self._list("resourceslices", field_selector=f"spec.nodeName={node}")
            node_gpus = dra.node_devices(s for s in map(dra.slice_devices, slices) if s is not None)
            in_use = dra.allocated_devices(self._list("resourceclaims"))
            for _, claim_name, field in refs:
                if claim_name is None:
                    raise ClaimError("dra_claim_missing", f"pod {namespace}/{name}: {field} has no claim yet")
                claim = self._claim(namespace, claim_name)
                status = claim.get("status") or {}
                if status.get("allocation") is not None:
                    if any((r or {}).get("uid") == uid for r in status.get("reservedFor") or []):
                        continue
                    raise ClaimError(
                        "dra_claim_taken",
                        f"ResourceClaim {namespace}/{claim_name} got allocated elsewhere in the meantime",
                    )
                classes: dict[str, dict[str, Any]] = {}
                for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
                    cls = str(((req or {}).get("exactly") or {}).get("deviceClassName") or "")
                    classes[cls] = self._json(
                        self.custom.get_cluster_custom_object, GROUP, VERSION, "deviceclasses", cls
                    )
                chosen = dra.choose_devices(claim, classes, node_gpus, in_use)
                if chosen is None:
                    raise ClaimError(
                        "dra_no_free_device",
                        f"ResourceClaim {namespace}/{claim_name}: node {node} has too few free devices"
                        f" ({len(node_gpus)} GPUs in its ResourceSlices, {len(in_use & set(node_gpus))} held)",
                    )
                in_use.update(d for _, d in chosen)
                if dra.FINALIZER not in ((claim.get("metadata") or {}).get("finalizers") or []):
                    claim["metadata"]["finalizers"] = [
                        *((claim["metadata"].get("finalizers")) or []),
                        dra.FINALIZER,
                    ]
                    claim = self._replace(
                        self.custom.replace_namespaced_custom_object, namespace, claim_name, claim
                    )
                claim["status"] = {
                    **(claim.get("status") or {}),
                    "allocation": dra.allocation(claim, classes, chosen, node),
                    "reservedFor": [
                        *((claim.get("status") or {}).get("reservedFor") or []),
                        {"resource": "pods", "name": name, "uid": uid},
                    ],
                }
                self._replace(
                    self.custom.replace_namespaced_custom_object_status, namespace, claim_name, claim
                )
                written.append(claim_name)
        return written

    def undo(self, namespace: str, name: str, claims: list[str]) -> None:
        """The binding after :meth:`allocate` failed: take the pod out of each claim's ``reservedFor`` and
        deallocate a claim nobody else reserves, so its devices are free for the next attempt."""
        for claim_name in claims:
            claim = self._claim(namespace, claim_name)
            status = claim.get("status") or {}
            rest = [r for r in status.get("reservedFor") or [] if (r or {}).get("name") != name]
            claim["status"] = {**status, "reservedFor": rest or None}
            if not rest:
                claim["status"]["allocation"] = None
            self._replace(self.custom.replace_namespaced_custom_object_status, namespace, claim_name, claim)
