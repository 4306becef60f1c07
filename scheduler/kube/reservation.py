"""GPU sharing at run time: reservation pods and the per-pod visibility ConfigMap (docs/gpu-sharing.md).

A device shared by fractional pods (``gpu-fraction``, ``gpu-memory``) is held through the device plugin by
one **reservation pod** that requests the whole ``nvidia.com/gpu``, as KAI's binder does. The reservation
pod lives in the binder's namespace (``hourglass-reservation``), is placed directly on the node
(``spec.nodeName``), and names its sharers in an annotation. Its container reads which physical GPU the
device plugin gave it (``NVIDIA_VISIBLE_DEVICES``) and writes it to its own ``hourglass.io/reserved-gpu``
annotation (``hourglass reserve``). Before binding a sharing pod, the binder:

1. creates the reservation pod of each device the engine chose (first sharer) or adds the pod to its
   sharers, and waits until the reservation pod reports its GPU;
2. writes the pod's ConfigMap (named by the admission webhook in ``hourglass.io/gpu-configmap``) with
   ``NVIDIA_VISIBLE_DEVICES`` (the reserved GPUs), ``GPU_PORTION`` and ``RUNAI_NUM_OF_GPUS`` (the portion per
   device, KAI's keys). The ConfigMap is owned by the pod, so it goes when the pod goes;
3. binds (``scheduler/kube/binder.py``), so the container can only start once its value is set.

:meth:`GpuSharing.reconcile` keeps reservation pods in step with their sharers: a sharer that is gone,
finished, or not bound to the reservation's node is dropped, and a reservation pod with no sharer left is
deleted. The binder runs it at start (no orphans survive a restart), after records that evict pods, and
when idle every ``sync_interval_s``.

Naming is deterministic: the group of device ``d`` on node ``n`` is ``hg-`` + 16 hex digits of
``sha256("n/d")``, and its reservation pod is ``hourglass-reservation-<hex>``, so a retried or restarted
binder finds the pod it created instead of making a second one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ingest.kube.names import (
    ANNOTATION_GPU_CONFIGMAP,
    ANNOTATION_GPU_GROUPS,
    GPU_RESOURCE,
    LABEL_GPU_RESERVATION,
)
from ingest.kube.units import decimal_text

__all__ = [
    "ANNOTATION_DEVICE",
    "ANNOTATION_NODE",
    "ANNOTATION_RESERVED_GPU",
    "ANNOTATION_SHARERS",
    "DEFAULT_NAMESPACE",
    "LABEL_GPU_GROUP",
    "GpuSharing",
    "SharingConfig",
    "SharingError",
    "configmap_body",
    "gpu_group",
    "reservation_pod",
    "reservation_pod_name",
    "visibility_data",
]

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE: Final = "hourglass-reservation"
DEFAULT_IMAGE: Final = "hourglass:latest"
APP_LABEL: Final = "app.kubernetes.io/name"
APP_VALUE: Final = "hourglass-gpu-reservation"
LABEL_GPU_GROUP: Final = "hourglass.io/gpu-group"
ANNOTATION_SHARERS: Final = "hourglass.io/sharers"  # "ns/a,ns/b", sorted
ANNOTATION_NODE: Final = "hourglass.io/gpu-node"
ANNOTATION_DEVICE: Final = "hourglass.io/gpu-device"  # the engine's device index on the node
ANNOTATION_RESERVED_GPU: Final = "hourglass.io/reserved-gpu"  # the GPU the device plugin gave (UUID or index)
ENV_VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"
ENV_GPU_PORTION: Final = "GPU_PORTION"
ENV_NUM_OF_GPUS: Final = "RUNAI_NUM_OF_GPUS"  # KAI's older name for GPU_PORTION, still injected by KAI
VISIBILITY_KEYS: Final = (ENV_VISIBLE_DEVICES, ENV_GPU_PORTION, ENV_NUM_OF_GPUS)


class SharingError(Exception):
    """A sharing pod cannot be bound for a reason a retry does not fix (dead-lettered with ``reason_code``)."""

    def __init__(self, reason_code: str, message: str) -> None:
        super().__init__(message)
        self.reason_code = reason_code
        self.message = message


@dataclass(frozen=True, slots=True)
class SharingConfig:
    """Where reservation pods live, what they run, and how long the binder waits for their GPU."""

    namespace: str = DEFAULT_NAMESPACE
    image: str = DEFAULT_IMAGE
    command: tuple[str, ...] = ("hourglass", "reserve")
    service_account: str | None = None
    runtime_class: str | None = None
    timeout_s: float = 60.0
    poll_s: float = 0.2
    sync_interval_s: float = 30.0


# --------------------------------------------------------------------------- pure shapes


def gpu_group(node: str, device: int) -> str:
    """The deterministic group id of device ``device`` on ``node`` (a valid label value)."""
    return "hg-" + hashlib.sha256(f"{node}/{device}".encode()).hexdigest()[:16]


def reservation_pod_name(group: str) -> str:
    """The reservation pod's name for ``group``."""
    return "hourglass-reservation-" + group.removeprefix("hg-")


def visibility_data(gpus: Sequence[str], milli_per_device: int) -> dict[str, str]:
    """The ConfigMap data a sharing container reads: its GPUs and its portion of each (KAI's keys)."""
    portion = decimal_text(milli_per_device, 1000)
    return {ENV_VISIBLE_DEVICES: ",".join(gpus), ENV_GPU_PORTION: portion, ENV_NUM_OF_GPUS: portion}


def reservation_pod(
    cfg: SharingConfig, node: str, device: int, sharers: Sequence[str], tolerations: Sequence[Any] = ()
) -> dict[str, Any]:
    """The reservation pod holding device ``device`` of ``node`` for ``sharers`` (``ns/name``)."""
    group = gpu_group(node, device)
    container: dict[str, Any] = {
        "name": "reservation",
        "image": cfg.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(cfg.command),
        "resources": {
            "limits": {GPU_RESOURCE: "1", "cpu": "20m", "memory": "64Mi"},
            "requests": {GPU_RESOURCE: "1", "cpu": "2m", "memory": "32Mi"},
        },
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    spec: dict[str, Any] = {
        "nodeName": node,
        "containers": [container],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 0,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if tolerations:
        spec["tolerations"] = list(tolerations)
    if cfg.service_account:
        spec["serviceAccountName"] = cfg.service_account
    if cfg.runtime_class:
        spec["runtimeClassName"] = cfg.runtime_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": reservation_pod_name(group),
            "namespace": cfg.namespace,
            "labels": {APP_LABEL: APP_VALUE, LABEL_GPU_RESERVATION: "true", LABEL_GPU_GROUP: group},
            "annotations": {
                ANNOTATION_NODE: node,
                ANNOTATION_DEVICE: str(device),
                ANNOTATION_SHARERS: ",".join(sorted(set(sharers))),
                "karpenter.sh/do-not-disrupt": "true",
            },
        },
        "spec": spec,
    }


def configmap_body(
    name: str, namespace: str, pod: str, pod_uid: str, data: Mapping[str, str]
) -> dict[str, Any]:
    """The sharing pod's visibility ConfigMap, owned by the pod (garbage-collected with it)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {APP_LABEL: "hourglass-gpu-sharing"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": pod_uid}],
        },
        "data": dict(data),
    }


def _sharers(pod: Mapping[str, Any]) -> list[str]:
    raw = str(((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_SHARERS) or "")
    return [s for s in raw.split(",") if s]


# --------------------------------------------------------------------------- against the API


class GpuSharing:
    """Reservation pods and visibility ConfigMaps through the official client.

    ``call(fn, *args, **kwargs)`` runs one client call with ``_preload_content=False`` and raises the
    ``ingest.kube.client.KubeError`` (``ingest.kube.client.call``); the binder retries transient failures.
    """

    def __init__(
        self,
        core: Any,
        call: Callable[..., Any],
        cfg: SharingConfig | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.core = core
        self.call = call
        self.cfg = cfg or SharingConfig()
        self._sleep = sleep
        self._clock = clock

    def _json(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        r = self.call(fn, *args, **kwargs)
        out: dict[str, Any] = json.loads(r.data)
        return out

    def _status(self, e: Exception) -> int | None:
        return getattr(e, "status", None)

    # -- binding a sharer ------------------------------------------------------------------

    def prepare(
        self, namespace: str, name: str, node: str, devices: Sequence[int], milli_per_device: int
    ) -> dict[str, str]:
        """Reserve the devices and fill in the pod's visibility ConfigMap; the annotations for its Binding.

        Raises :class:`SharingError` when the pod was not wired by the webhook or a reservation pod never
        reports its GPU within ``timeout_s``; ``ingest.kube.client.KubeError`` for API failures (404: pod gone).
        """
        pod = self._json(self.core.read_namespaced_pod, name, namespace)
        meta = pod.get("metadata") or {}
        cm_name = (meta.get("annotations") or {}).get(ANNOTATION_GPU_CONFIGMAP)
        uid = f"{namespace}/{name}"
        if not cm_name:
            raise SharingError(
                "gpu_sharing_not_wired",
                f"pod {uid} shares a GPU but has no {ANNOTATION_GPU_CONFIGMAP} annotation: it was created while"
                " the Hourglass admission webhook was not serving (or GPU sharing is disabled in the chart);"
                " delete and re-create the pod so the webhook wires its containers",
            )
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        gpus = [self._reserve(node, d, uid, tolerations) for d in devices]
        data = visibility_data(gpus, milli_per_device)
        body = configmap_body(str(cm_name), namespace, name, str(meta.get("uid") or ""), data)
        try:
            self.call(self.core.create_namespaced_config_map, namespace, body)
        except Exception as e:
            if self._status(e) != 409:
                raise
            patch = {"data": data}
            self.call(
                self.core.patch_namespaced_config_map,
                cm_name,
                namespace,
                patch,
                _content_type="application/merge-patch+json",
            )
        return {ANNOTATION_GPU_GROUPS: ",".join(gpu_group(node, d) for d in devices)}

    def _reserve(self, node: str, device: int, sharer: str, tolerations: Sequence[Any]) -> str:
        """Make sure device ``device`` of ``node`` is reserved with ``sharer`` among its sharers; its GPU id.

        A reservation pod that is being deleted is waited out (then created anew); a concurrent change of
        its sharers (409 on the write) is read again and retried.
        """
        cfg = self.cfg
        name = reservation_pod_name(gpu_group(node, device))
        deadline = self._clock() + cfg.timeout_s
        for attempt in itertools.count():
            if attempt and self._clock() >= deadline:
                raise SharingError(
                    "gpu_reservation_timeout",
                    f"reservation pod {cfg.namespace}/{name} kept changing for {cfg.timeout_s:g} s; retry later",
                )
            try:
                self.call(
                    self.core.create_namespaced_pod,
                    cfg.namespace,
                    reservation_pod(cfg, node, device, [sharer], tolerations),
                )
                log.info(
                    "reservation pod %s/%s created for device %d of %s (%s)",
                    cfg.namespace,
                    name,
                    device,
                    node,
                    sharer,
                )
                break
            except Exception as e:
                if self._status(e) != 409:
                    raise
            try:
                current = self._json(self.core.read_namespaced_pod, name, cfg.namespace)
            except Exception as e:
                if self._status(e) == 404:
                    continue  # deleted in between: create it again
                raise
            if (current.get("metadata") or {}).get("deletionTimestamp"):
                self._sleep(cfg.poll_s)  # being deleted: wait it out, then create it anew
                continue
            sharers = _sharers(current)
            if sharer in sharers:
                break
            try:
                self._set_sharers(current, [*sharers, sharer])
                break
            except Exception as e:
                if self._status(e) not in (404, 409):
                    raise
        deadline = self._clock() + cfg.timeout_s
        while True:
            current = self._json(self.core.read_namespaced_pod, name, cfg.namespace)
            gpu = ((current.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RESERVED_GPU)
            if gpu:
                return str(gpu)
            if self._clock() >= deadline:
                raise SharingError(
                    "gpu_reservation_timeout",
                    f"reservation pod {cfg.namespace}/{name} for device {device} of node {node} did not report its"
                    f" GPU ({ANNOTATION_RESERVED_GPU}) within {cfg.timeout_s:g} s; is it running on the node?",
                )
            self._sleep(cfg.poll_s)

    def _set_sharers(self, pod: Mapping[str, Any], sharers: Sequence[str]) -> None:
        meta = pod.get("metadata") or {}
        patch = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "annotations": {ANNOTATION_SHARERS: ",".join(sorted(set(sharers)))},
            }
        }
        self.call(
            self.core.patch_namespaced_pod,
            meta.get("name"),
            meta.get("namespace"),
            patch,
            _content_type="application/merge-patch+json",
        )

    # -- keeping reservations in step ------------------------------------------------------

    def _live(self, sharer: str, node: str) -> bool:
        ns, _, name = sharer.partition("/")
        try:
            pod = self._json(self.core.read_namespaced_pod, name, ns)
        except Exception as e:
            if self._status(e) == 404:
                return False
            raise
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return False
        return (pod.get("spec") or {}).get("nodeName") == node

    def reconcile(self, nodes: Collection[str] | None = None) -> int:
        """Drop sharers that left; delete reservation pods nobody shares (on ``nodes``, or everywhere).

        One list of the reservation namespace plus one read per sharer. Returns the number of pods deleted.
        """
        cfg = self.cfg
        listed = self._json(
            self.core.list_namespaced_pod, cfg.namespace, label_selector=LABEL_GPU_RESERVATION
        )
        deleted = 0
        for pod in sorted(listed.get("items") or [], key=lambda p: str(p["metadata"]["name"])):
            meta = pod.get("metadata") or {}
            node = str(
                (meta.get("annotations") or {}).get(ANNOTATION_NODE)
                or (pod.get("spec") or {}).get("nodeName")
            )
            if nodes is not None and node not in nodes:
                continue
            sharers = _sharers(pod)
            live = [s for s in sharers if self._live(s, node)]
            if not live:
                try:
                    self.call(
                        self.core.delete_namespaced_pod, meta["name"], cfg.namespace, grace_period_seconds=0
                    )
                except Exception as e:
                    if self._status(e) != 404:
                        raise
                deleted += 1
                log.info(
                    "reservation pod %s/%s deleted: no sharer left (was %s)",
                    cfg.namespace,
                    meta["name"],
                    sharers,
                )
            elif live != sharers:
                self._set_sharers(pod, live)
        return deleted


# --------------------------------------------------------------------------- the reservation container


def add_reserve_arguments(p: Any) -> None:
    """``hourglass reserve``'s flags (``p`` is an ``argparse.ArgumentParser``)."""
    p.add_argument(
        "--kubeconfig", default=None, help="kubeconfig file (default: in-cluster service account)"
    )


def reserve_cli(args: Any) -> int:
    """``hourglass reserve``: run in a reservation pod; report the GPU the device plugin gave, then wait.

    The device plugin sets ``NVIDIA_VISIBLE_DEVICES`` (GPU UUIDs or indices) in a container that requests
    ``nvidia.com/gpu``; this writes it to the pod's ``hourglass.io/reserved-gpu`` annotation and sleeps until
    SIGTERM, holding the device for the sharers.
    """
    import os
    import signal
    import sys
    import threading

    from ingest.kube.client import api_client

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    gpu = os.environ.get(ENV_VISIBLE_DEVICES, "")
    name, namespace = os.environ.get("POD_NAME", ""), os.environ.get("POD_NAMESPACE", "")
    if not gpu or gpu in ("all", "none", "void") or not name or not namespace:
        print(
            f"reserve: need {ENV_VISIBLE_DEVICES} (one GPU from the device plugin, got {gpu!r}), POD_NAME and"
            " POD_NAMESPACE",
            file=sys.stderr,
        )
        return 2
    from kubernetes import client

    with api_client(args.kubeconfig) as api:
        patch = {"metadata": {"annotations": {ANNOTATION_RESERVED_GPU: gpu}}}
        client.CoreV1Api(api).patch_namespaced_pod(
            name, namespace, patch, _content_type="application/merge-patch+json"
        )
    log.info("reserve: %s/%s holds GPU %s", namespace, name, gpu)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    return 0
