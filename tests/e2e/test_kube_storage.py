"""Storage filters beyond binding on a real kube-apiserver: ReadWriteOncePod claims (VolumeRestrictions),
CSINode attach limits (NodeVolumeLimits), and volumes watched rather than read once.

- A ReadWriteOncePod claim mounted by a pod of another scheduler keeps our pod mounting it pending, with the
  reason code ``ReadWriteOncePodConflict``; once that pod is gone ours is bound.
- n1's CSINode allows one volume of the driver, and a pod of another scheduler already attaches one there:
  our pod mounting another volume of that driver goes to n2 once n2's CSINode (first allowing none) is
  raised to one and the VolumeAttachment holding n2's one slot is deleted — both changes reach the
  scheduler as events.
- A WaitForFirstConsumer claim with no volume to bind waits (``VolumeBindConflict``); the PersistentVolume
  created afterwards reaches the pending pod (``PodVolumesChanged``) and it is bound where the volume is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ingest.filelog import FileLog
from tests.support.kube_objects import apply_crds, make_node, make_queue, read_pod
from tests.support.kube_pipeline import Pipeline, decision_records
from tests.support.volume_controller import make_local_pv, volume_controller

HOSTNAME = "kubernetes.io/hostname"
DRIVER = "ebs.csi.aws.com"


def _pod(ns: str, name: str, claim: str, queue: str = "", node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "default-scheduler" if node else "hourglass",
        "nodeSelector": {"hourglass-storage": ns},
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            }
        ],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
    }
    if node:
        spec["nodeName"] = node
    labels = {"kai.scheduler/queue": queue} if queue else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": spec,
    }


def _bound_claim(core: Any, ns: str, claim: str, pv: str, handle: str, modes: list[str]) -> None:
    """A claim bound to a CSI volume, as the PersistentVolume controller (not running here) leaves them."""
    core.create_persistent_volume(
        {
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": modes,
                "csi": {"driver": DRIVER, "volumeHandle": handle},
                "claimRef": {"namespace": ns, "name": claim},
                "storageClassName": "",
            },
        }
    )
    core.create_namespaced_persistent_volume_claim(
        ns,
        {
            "metadata": {
                "name": claim,
                "namespace": ns,
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
            },
            "spec": {
                "accessModes": modes,
                "resources": {"requests": {"storage": "1Gi"}},
                "volumeName": pv,
                "storageClassName": "",
            },
        },
    )
    core.patch_namespaced_persistent_volume_claim_status(claim, ns, {"status": {"phase": "Bound"}})


def _csi_node(name: str, count: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"drivers": [{"name": DRIVER, "nodeID": name, "allocatable": {"count": count}}]},
    }


def _filters(log: FileLog, pod: str) -> dict[str, int]:
    """The reason codes of the latest Unschedulable decision naming ``pod`` (a job's decision lists its pods)."""
    got: dict[str, int] = {}
    for r in decision_records(log):
        for d in r["decisions"]:
            if d["kind"] == "Unschedulable" and pod in (d.get("pods") or [d.get("pod")]):
                got = dict(d.get("details", {}).get("filters") or {})
    return got


def test_read_write_once_pod_claim_in_use_keeps_the_pod_pending(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kube_namespace
    n1, n2, q = f"{ns}-n1", f"{ns}-n2", f"{ns}-q"
    with kube_api.api_client() as api:
        core = client.CoreV1Api(api)
        apply_crds(api)
        for n in (n1, n2):
            make_node(api, n, labels={"hourglass-storage": ns, HOSTNAME: n})
        make_queue(api, q, 8)
        _bound_claim(core, ns, "single", f"{ns}-pv-single", f"{ns}-h1", ["ReadWriteOncePod"])
        core.create_namespaced_pod(ns, _pod(ns, "holder", "single", node=n1))
        core.create_namespaced_pod(ns, _pod(ns, "wants-it", "single", queue=q))
        log = FileLog(tmp_path / "log")
        p = Pipeline(api, ns, log)
        p.ingest.start()
        try:
            p.settle(lambda: _filters(log, f"{ns}/wants-it").get("ReadWriteOncePodConflict") == 2)
            assert "nodeName" not in read_pod(api, ns, "wants-it")["spec"]
            core.delete_namespaced_pod("holder", ns, grace_period_seconds=0)
            p.settle(lambda: "nodeName" in read_pod(api, ns, "wants-it")["spec"])
        finally:
            p.ingest.stop()


def test_csinode_limits_and_volumes_are_watched(kube_api: Any, kube_namespace: str, tmp_path: Path) -> None:
    from kubernetes import client

    ns = kube_namespace
    n1, n2, q = f"{ns}-n1", f"{ns}-n2", f"{ns}-q"
    local = f"{ns}-local"
    with kube_api.api_client() as api:
        core, storage = client.CoreV1Api(api), client.StorageV1Api(api)
        apply_crds(api)
        for n in (n1, n2):
            make_node(api, n, labels={"hourglass-storage": ns, HOSTNAME: n})
        make_queue(api, q, 8)
        storage.create_csi_node(_csi_node(n1, 1))
        storage.create_csi_node(_csi_node(n2, 0))
        _bound_claim(core, ns, "one", f"{ns}-pv-one", f"{ns}-h1", ["ReadWriteOnce"])
        _bound_claim(core, ns, "two", f"{ns}-pv-two", f"{ns}-h2", ["ReadWriteOnce"])
        core.create_namespaced_pod(ns, _pod(ns, "attached", "one", node=n1))
        core.create_namespaced_pod(ns, _pod(ns, "limited", "two", queue=q))
        storage.create_storage_class(
            {
                "metadata": {"name": local},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            }
        )
        core.create_namespaced_persistent_volume_claim(
            ns,
            {
                "metadata": {"name": "later", "namespace": ns},
                "spec": {
                    "storageClassName": local,
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        )
        core.create_namespaced_pod(ns, _pod(ns, "waits-for-volume", "later", queue=q))
        # A volume attached to n2 outside any pod (a VolumeAttachment) counts toward n2's limit too.
        three, va = f"{ns}-pv-three", f"{ns}-va-three"
        core.create_persistent_volume(
            {
                "metadata": {"name": three},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "csi": {"driver": DRIVER, "volumeHandle": f"{ns}-h3"},
                },
            }
        )
        storage.create_volume_attachment(
            {
                "metadata": {"name": va},
                "spec": {"attacher": DRIVER, "nodeName": n2, "source": {"persistentVolumeName": three}},
            }
        )
        log = FileLog(tmp_path / "log")
        p = Pipeline(api, ns, log)
        p.ingest.start()
        try:
            p.settle(
                lambda: (
                    _filters(log, f"{ns}/limited").get("MaxVolumeCount") == 2
                    and _filters(log, f"{ns}/waits-for-volume").get("VolumeBindConflict") == 2
                )
            )
            # n2's driver may attach one volume now (the CSINode update reaches the scheduler), but the
            # VolumeAttachment holds it.
            storage.patch_csi_node(
                n2, {"spec": {"drivers": [{"name": DRIVER, "nodeID": n2, "allocatable": {"count": 1}}]}}
            )
            # The volume the waiting claim can bind to appears, on n1 only.
            pv = f"{ns}-pv-later"
            make_local_pv(core, pv, local, n1)
            with volume_controller(api, ns):  # the binder waits for the claim's binding before the pod's
                p.settle(lambda: "nodeName" in read_pod(api, ns, "waits-for-volume")["spec"])
            assert "nodeName" not in read_pod(api, ns, "limited")["spec"]
            assert _filters(log, f"{ns}/limited").get("MaxVolumeCount") == 2
            storage.delete_volume_attachment(va)
            p.settle(lambda: "nodeName" in read_pod(api, ns, "limited")["spec"])
        finally:
            p.ingest.stop()
        assert read_pod(api, ns, "limited")["spec"]["nodeName"] == n2
        assert read_pod(api, ns, "waits-for-volume")["spec"]["nodeName"] == n1
        assert core.read_persistent_volume(pv).spec.claim_ref.name == "later"
        binds = {
            d["pod"]: d["node"] for r in decision_records(log) for d in r["decisions"] if d["kind"] == "Bind"
        }
        assert binds == {f"{ns}/limited": n2, f"{ns}/waits-for-volume": n1}
