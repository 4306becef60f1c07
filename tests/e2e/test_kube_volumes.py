"""WaitForFirstConsumer claims on a real kube-apiserver: the pod goes where its claim can bind, and the claim
is bound there as kube-scheduler's VolumeBinding PreBind does it.

Two nodes. A local volume exists only on n2 (class without a provisioner): the pod mounting a claim of that
class is bound to n2, and the volume gets a ``claimRef`` to the claim (the PersistentVolume controller, not
running here, then completes the binding). A second claim's class provisions only on n1
(``allowedTopologies``): its pod is bound to n1 and the claim carries ``volume.kubernetes.io/selected-node``
for the provisioner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ingest.filelog import FileLog
from tests.support.kube_objects import apply_crds, make_node, make_queue, read_pod
from tests.support.kube_pipeline import Pipeline, decision_records
from tests.support.volume_controller import make_local_pv, volume_controller

HOSTNAME = "kubernetes.io/hostname"


def _pod(ns: str, name: str, queue: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"kai.scheduler/queue": queue}},
        "spec": {
            "schedulerName": "hourglass",
            "nodeSelector": {"hourglass-volumes": ns},
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


def _claim(ns: str, name: str, cls: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "storageClassName": cls,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def test_wait_for_first_consumer_claims_bind_where_the_pod_goes(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kube_namespace
    n1, n2, q = f"{ns}-n1", f"{ns}-n2", f"{ns}-q"
    local, prov, pv = f"{ns}-local", f"{ns}-prov", f"{ns}-pv"
    with kube_api.api_client() as api:
        core, storage = client.CoreV1Api(api), client.StorageV1Api(api)
        apply_crds(api)
        for n in (n1, n2):
            make_node(api, n, labels={"hourglass-volumes": ns, HOSTNAME: n})
        make_queue(api, q, 8)
        storage.create_storage_class(
            {
                "metadata": {"name": local},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            }
        )
        storage.create_storage_class(
            {
                "metadata": {"name": prov},
                "provisioner": "example.com/csi",
                "volumeBindingMode": "WaitForFirstConsumer",
                "allowedTopologies": [{"matchLabelExpressions": [{"key": HOSTNAME, "values": [n1]}]}],
            }
        )
        # No PersistentVolume controller runs here: the volume is made Available as it would.
        make_local_pv(core, pv, local, n2)
        core.create_namespaced_persistent_volume_claim(ns, _claim(ns, "data", local))
        core.create_namespaced_persistent_volume_claim(ns, _claim(ns, "scratch", prov))
        core.create_namespaced_pod(ns, _pod(ns, "uses-local", q, "data"))
        core.create_namespaced_pod(ns, _pod(ns, "uses-provisioned", q, "scratch"))

        log = FileLog(tmp_path / "log")
        p = Pipeline(api, ns, log)
        p.ingest.start()
        try:
            ours = ("uses-local", "uses-provisioned")
            with volume_controller(api, ns):  # the binder waits for the claims' binding before the pod's
                p.settle(lambda: all("nodeName" in read_pod(api, ns, n)["spec"] for n in ours))
        finally:
            p.ingest.stop()
        assert read_pod(api, ns, "uses-local")["spec"]["nodeName"] == n2
        assert read_pod(api, ns, "uses-provisioned")["spec"]["nodeName"] == n1
        ref = core.read_persistent_volume(pv).spec.claim_ref
        assert (ref.namespace, ref.name) == (ns, "data")
        scratch = core.read_namespaced_persistent_volume_claim("scratch", ns)
        assert scratch.metadata.annotations["volume.kubernetes.io/selected-node"] == n1
        data = core.read_namespaced_persistent_volume_claim("data", ns)
        assert "volume.kubernetes.io/selected-node" not in (data.metadata.annotations or {})
        # The cycle recorded the choice it made, so the binder (and a replay) need not guess it.
        binds = {
            d["pod"]: d.get("details", {}).get("volumes")
            for r in decision_records(log)
            for d in r["decisions"]
            if d["kind"] == "Bind"
        }
        assert binds == {f"{ns}/uses-local": {"data": pv}, f"{ns}/uses-provisioned": {"scratch": ""}}
