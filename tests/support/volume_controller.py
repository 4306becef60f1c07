"""The PersistentVolume controller's binding and a provisioner, as much as tests on a bare kube-apiserver
need (no controller-manager runs there): a volume whose ``claimRef`` names a claim of the namespace binds to
it, and a claim annotated ``volume.kubernetes.io/selected-node`` gets a volume on that node and binds to it.
Binding is what the controller writes: the claim's ``spec.volumeName`` with the ``pv.kubernetes.io/
bind-completed`` and ``bound-by-controller`` annotations, both objects' phase Bound."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

SELECTED_NODE = "volume.kubernetes.io/selected-node"
HOSTNAME = "kubernetes.io/hostname"


def make_local_pv(core: Any, name: str, storage_class: str, node: str) -> None:
    """A 10Gi local PersistentVolume of *storage_class* reachable only from *node*, made Available as the
    controller would (the test is the controller here)."""
    affinity = [{"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]}]
    core.create_persistent_volume(
        {
            "metadata": {"name": name},
            "spec": {
                "storageClassName": storage_class,
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "local": {"path": "/mnt/disk"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": affinity}},
            },
        }
    )
    core.patch_persistent_volume_status(name, {"status": {"phase": "Available"}})


def sync(api: Any, namespace: str) -> int:
    """One pass over the namespace's unbound claims; how many it bound."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    volumes = core.list_persistent_volume().items
    bound = 0
    for pvc in core.list_namespaced_persistent_volume_claim(namespace).items:
        if pvc.spec.volume_name:
            continue
        name = pvc.metadata.name
        pv = next(
            (
                v
                for v in volumes
                if v.spec.claim_ref is not None
                and (v.spec.claim_ref.namespace, v.spec.claim_ref.name) == (namespace, name)
            ),
            None,
        )
        node = (pvc.metadata.annotations or {}).get(SELECTED_NODE)
        if pv is None and node:
            terms = [{"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]}]
            pv = core.create_persistent_volume(
                {
                    "metadata": {"name": f"pvc-{pvc.metadata.uid}"},
                    "spec": {
                        "storageClassName": pvc.spec.storage_class_name,
                        "capacity": {"storage": pvc.spec.resources.requests["storage"]},
                        "accessModes": pvc.spec.access_modes,
                        "csi": {"driver": "provisioner.example.com", "volumeHandle": str(pvc.metadata.uid)},
                        "claimRef": {"namespace": namespace, "name": name, "uid": pvc.metadata.uid},
                        "nodeAffinity": {"required": {"nodeSelectorTerms": terms}},
                    },
                }
            )
        if pv is None:
            continue
        annotations = {
            "pv.kubernetes.io/bind-completed": "yes",
            "pv.kubernetes.io/bound-by-controller": "yes",
        }
        core.patch_namespaced_persistent_volume_claim(
            name,
            namespace,
            {"metadata": {"annotations": annotations}, "spec": {"volumeName": pv.metadata.name}},
        )
        core.patch_namespaced_persistent_volume_claim_status(name, namespace, {"status": {"phase": "Bound"}})
        core.patch_persistent_volume_status(pv.metadata.name, {"status": {"phase": "Bound"}})
        bound += 1
    return bound


@contextlib.contextmanager
def volume_controller(api: Any, namespace: str, interval_s: float = 0.2) -> Iterator[None]:
    """Run :func:`sync` in a thread while the block runs."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):  # a conflict with a concurrent write: the next pass retries
                sync(api, namespace)
            stop.wait(interval_s)

    thread = threading.Thread(target=loop, name="volume-controller", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
