"""DRA GPU claims on a real kube-apiserver (``resource.k8s.io/v1`` is served by default since Kubernetes 1.34).

A pod whose ResourceClaim asks for one GPU of the example driver's class binds only to a node whose
ResourceSlice has a free device (one held by another scheduler's pod's claim is not free), and the binder writes the claim's allocation (device, pool, node selector)
and reservation as kube-scheduler's dynamicresources plugin does; a node with device-plugin GPUs only does
not take it. A claim generated from a template (named in ``status.resourceClaimStatuses``, as the
resourceclaim controller does; no controller-manager runs here, so the test plays it) works the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ingest.filelog import FileLog
from ingest.kube.client import KubeApi
from tests.support.dra_objects import (
    API,
    DRIVER,
    create,
    device_class,
    dra_pod,
    ensure,
    gpu_claim,
    resource_slice,
)
from tests.support.kube_objects import apply_crds, make_node, make_queue, read_pod
from tests.support.kube_pipeline import Pipeline, last_decisions


def _claim(kapi: KubeApi, ns: str, name: str) -> dict[str, Any]:
    got = kapi.get(f"{API}/namespaces/{ns}/resourceclaims/{name}")
    assert got is not None
    return got


def test_a_gpu_claim_binds_only_where_a_device_is_free_and_shows_its_allocation(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns = kube_namespace
    sel = {"hourglass-e2e": ns}
    dra_node, plugin_node, queue = f"{ns}-dra", f"{ns}-plugin", f"{ns}-q"
    with kube_api.api_client() as api:
        kapi = KubeApi(api)
        apply_crds(api)
        ensure(kapi, f"{API}/deviceclasses", device_class())
        make_node(api, dra_node, gpus=0, labels=sel)
        make_node(api, plugin_node, gpus=8, labels=sel)  # device-plugin GPUs: no DRA device
        create(kapi, f"{API}/resourceslices", resource_slice(dra_node, ["gpu-0", "gpu-1"]))
        make_queue(api, queue, gpu_quota=8)
        for c in ("held", "first", "second"):
            create(kapi, f"{API}/namespaces/{ns}/resourceclaims", gpu_claim(c))
        pods = f"/api/v1/namespaces/{ns}/pods"
        # A pod of another scheduler holds gpu-0 of the DRA node (as kube-scheduler would have allocated it).
        foreign = dra_pod("foreign", queue, claim="held")
        foreign["spec"].update(schedulerName="default-scheduler", nodeName=dra_node)
        uid = create(kapi, pods, foreign)["metadata"]["uid"]
        held = _claim(kapi, ns, "held")
        held["status"] = {
            "allocation": {
                "devices": {
                    "results": [{"request": "gpu", "driver": DRIVER, "pool": dra_node, "device": "gpu-0"}]
                }
            },
            "reservedFor": [{"resource": "pods", "name": "foreign", "uid": uid}],
        }
        kapi.request("PUT", f"{API}/namespaces/{ns}/resourceclaims/held/status", body=held)
        create(kapi, pods, dra_pod("first", queue, claim="first", node_selector=sel))
        log = FileLog(tmp_path / "log")
        p = Pipeline(api, ns, log)
        p.ingest.start()
        try:
            p.settle(lambda: "nodeName" in read_pod(api, ns, "first")["spec"])
            first = read_pod(api, ns, "first")
            assert first["spec"]["nodeName"] == dra_node
            claim = _claim(kapi, ns, "first")
            assert claim["status"]["allocation"] == {
                "devices": {
                    "results": [{"request": "gpu", "driver": DRIVER, "pool": dra_node, "device": "gpu-1"}]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [dra_node]}]}
                    ]
                },
            }
            assert claim["status"]["reservedFor"] == [
                {"resource": "pods", "name": "first", "uid": first["metadata"]["uid"]}
            ]
            assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
            assert last_decisions(log, "Bind")[f"{ns}/first"]["details"] == {
                "dra": {f"dra.hourglass.dev/{DRIVER}": 1}
            }

            # The second claim comes from a template: the resourceclaim controller would create it and name it
            # in the pod's status. Both DRA devices are taken (one by the other scheduler's pod), and the plugin
            # node's GPUs are no DRA devices.
            create(kapi, pods, dra_pod("second", queue, template="one-gpu", node_selector=sel))
            kapi.request(
                "PATCH",
                f"{pods}/second/status",
                body={"status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "second"}]}},
                content_type="application/merge-patch+json",
            )

            def told() -> bool:
                conds = read_pod(api, ns, "second").get("status", {}).get("conditions") or []
                return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conds)

            p.settle(told)
            assert "nodeName" not in read_pod(api, ns, "second")["spec"]
            assert f"{ns}/second" not in last_decisions(log, "Bind")  # not even tried on the DRA node
            assert "allocation" not in (_claim(kapi, ns, "second").get("status") or {})

            # A device appears on the plugin node (its driver publishes a slice): the pod binds there.
            create(kapi, f"{API}/resourceslices", resource_slice(plugin_node, ["gpu-0", "gpu-1"]))
            p.settle(lambda: "nodeName" in read_pod(api, ns, "second")["spec"])
            assert read_pod(api, ns, "second")["spec"]["nodeName"] == plugin_node
            results = _claim(kapi, ns, "second")["status"]["allocation"]["devices"]["results"]
            assert results == [{"request": "gpu", "driver": DRIVER, "pool": plugin_node, "device": "gpu-0"}]
        finally:
            p.ingest.stop()
            log.close()
