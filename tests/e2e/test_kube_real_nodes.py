"""A real node on a real kube-apiserver: pods of other schedulers, host ports, anti-affinity, gates.

Two nodes; on n1 a DaemonSet-like pod (host port 9400) and a default-scheduler pod holding 2 of its 4 GPUs,
both bound by someone else. Hourglass must place its own pods on what is left: a 4-GPU pod (only n2 has 4
free), a pod wanting host port 9400 (taken on n1), two web pods refusing each other by hostname, and a
gated pod that must get no decision until its gate is removed. At the end no node holds more than its
allocatable in any resource, counting every pod bound to it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from ingest.filelog import FileLog
from ingest.kube.translate import pod_requests
from tests.support.kube_objects import apply_crds, make_node, make_queue, read_pod
from tests.support.kube_pipeline import Pipeline, decision_records


def _pod(
    ns: str,
    name: str,
    *,
    gpus: int = 0,
    queue: str | None = None,
    node: str | None = None,
    scheduler: str = "hourglass",
    labels: dict[str, str] | None = None,
    host_port: int | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    res: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "128Mi"}}
    if gpus:
        res["requests"]["nvidia.com/gpu"] = str(gpus)
        res["limits"] = {"nvidia.com/gpu": str(gpus)}
    container: dict[str, Any] = {"name": "main", "image": "busybox", "resources": res}
    if host_port:
        container["ports"] = [{"containerPort": host_port, "hostPort": host_port}]
    meta_labels = dict(labels or {})
    if queue:
        meta_labels["kai.scheduler/queue"] = queue
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": meta_labels},
        "spec": {
            "schedulerName": scheduler,
            "containers": [container],
            **({"nodeName": node} if node else {}),
            **(spec or {}),
        },
    }


def test_foreign_pods_ports_anti_affinity_and_gates(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kube_namespace
    n1, n2, q = f"{ns}-n1", f"{ns}-n2", f"{ns}-q"
    sel = {"hourglass-real": ns}
    with kube_api.api_client() as api:
        core = client.CoreV1Api(api)
        apply_crds(api)
        make_node(api, n1, gpus=4, labels=sel)
        make_node(api, n2, gpus=8, labels=sel)
        make_queue(api, q, 12)
        # Bound by other schedulers (no kubelet here: nodeName set directly, as a DaemonSet controller does).
        core.create_namespaced_pod(
            ns,
            _pod(ns, "dcgm", node=n1, scheduler="default-scheduler", labels={"app": "dcgm"}, host_port=9400),
        )
        core.create_namespaced_pod(ns, _pod(ns, "other-gpu", gpus=2, node=n1, scheduler="default-scheduler"))
        mine = {"nodeSelector": sel}
        anti = {
            "nodeSelector": sel,
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"app": "web"}},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            },
        }
        for body in (
            _pod(ns, "big", gpus=4, queue=q, spec=mine),
            _pod(ns, "exporter", queue=q, host_port=9400, spec=mine),
            _pod(ns, "web-0", gpus=1, queue=q, labels={"app": "web"}, spec=anti),
            _pod(ns, "web-1", gpus=1, queue=q, labels={"app": "web"}, spec=anti),
            _pod(
                ns, "gated", gpus=1, queue=q, spec={**mine, "schedulingGates": [{"name": "example.com/wait"}]}
            ),
        ):
            core.create_namespaced_pod(ns, body)
        # make_node does not set the hostname label the anti-affinity term uses.
        for n in (n1, n2):
            core.patch_node(n, {"metadata": {"labels": {"kubernetes.io/hostname": n}}})

        log = FileLog(tmp_path / "log")
        p = Pipeline(api, ns, log)
        p.ingest.start()
        try:
            ours = ("big", "exporter", "web-0", "web-1")
            p.settle(lambda: all("nodeName" in read_pod(api, ns, n)["spec"] for n in ours))
            nodes = {n: read_pod(api, ns, n)["spec"]["nodeName"] for n in ours}
            assert nodes["big"] == n2  # n1 has 2 free GPUs: the default-scheduler pod holds the others
            assert nodes["exporter"] == n2  # host port 9400 is the DaemonSet pod's on n1
            assert {nodes["web-0"], nodes["web-1"]} == {n1, n2}  # hostname anti-affinity
            # The gated pod is not pending yet: no decision at all names it, and it is not bound.
            gated_uid = f"{ns}/gated"
            assert not [
                d for r in decision_records(log) for d in r["decisions"] if gated_uid in (d.get("pods") or [])
            ]
            assert not [d for r in decision_records(log) for d in r["decisions"] if d.get("pod") == gated_uid]
            assert "nodeName" not in read_pod(api, ns, "gated")["spec"]
            # Removing the gate makes it pending: it is scheduled.
            core.patch_namespaced_pod(
                "gated", ns, {"spec": {"schedulingGates": None}}, _content_type="application/merge-patch+json"
            )
            p.settle(lambda: "nodeName" in read_pod(api, ns, "gated")["spec"])
        finally:
            p.ingest.stop()

        # Every pod bound to our nodes, whoever bound it, fits the node's allocatable in every resource.
        for node in (n1, n2):
            alloc = core.read_node(node).status.allocatable
            pods = core.list_namespaced_pod(
                ns, field_selector=f"spec.nodeName={node}", _preload_content=False
            )
            items = json.loads(pods.data)["items"]
            reqs = [pod_requests(o) for o in items]
            assert sum(r.gpus for r in reqs) <= int(alloc["nvidia.com/gpu"]), node
            assert sum(r.cpu_millicores for r in reqs) <= int(alloc["cpu"]) * 1000, node
            assert len(items) <= int(alloc["pods"]), node
            ports = Counter(
                pt["hostPort"]
                for o in items
                for c in o["spec"]["containers"]
                for pt in c.get("ports", [])
                if pt.get("hostPort")
            )
            assert all(n == 1 for n in ports.values()), (node, ports)
        # Ingest saw the foreign pods, and the scheduler never decided anything about them.
        assert not [
            d
            for r in decision_records(log)
            for d in r["decisions"]
            if d.get("pod") in (f"{ns}/dcgm", f"{ns}/other-gpu")
        ]
