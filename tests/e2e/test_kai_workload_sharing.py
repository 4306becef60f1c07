"""A KAI user's fractional pair shares one device on Hourglass, end to end on a real kube-apiserver.

``examples/kai-workload/fractional-pair.yaml`` holds two ``gpu-fraction: "0.5"`` pods written for KAI. The
test changes the scheduler name (and, because the API server is shared with other tests, confines the pods
to this test's one-GPU node with a node selector), registers the Hourglass admission webhook (TLS, caBundle,
the chart's matchConditions), and runs ingest → scheduler → binder with GPU sharing on. A stand-in node agent
reports the GPU each reservation pod was given, as the device plugin and ``hourglass reserve`` would.

Both pods must end on the node, on the same device, held by exactly one reservation pod that names both as
sharers, with each container wired to a ConfigMap that says which GPU and what portion, as KAI's would.
The reservation pod holds the whole device through the device plugin, yet the engine does not count it
against the node (no evictions, nothing pending).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import yaml

from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from scheduler.kube.binder import Binder, BinderApi, RetryPolicy
from scheduler.kube.reservation import (
    ANNOTATION_SHARERS,
    GpuSharing,
    SharingConfig,
    gpu_group,
    reservation_pod_name,
)
from tests.support.gpu_sharing import NodeAgent, register_webhook, start_webhook, wait_registered
from tests.support.kai_workload import apply_queue
from tests.support.kube_objects import apply_crds, make_node, read_pod
from tests.support.kube_pipeline import Pipeline, decision_records
from tests.support.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "kai-workload"


def _docs(name: str) -> list[dict[str, Any]]:
    text = (EXAMPLE / name).read_text().replace("schedulerName: kai-scheduler", "schedulerName: hourglass")
    return [d for d in yaml.safe_load_all(text) if d]


def test_fractional_pair_shares_one_device_wired_as_kai(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kube_namespace
    node = f"{ns}-n1"
    sel = {"hourglass-sharing": ns}
    hook = start_webhook(tmp_path)
    with kube_api.api_client() as api:
        core: Any = client.CoreV1Api(api)
        admission: Any = client.AdmissionregistrationV1Api(api)
        webhook_config = register_webhook(api, hook, ns)
        reservations = f"hg-resv-{uuid.uuid4().hex[:8]}"
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": reservations}})
        try:
            wait_registered(api, ns)
            apply_crds(api)
            make_node(api, node, gpus=1, labels=sel)
            for q in _docs("queues.yaml"):
                apply_queue(api, q)
            pods = []
            for doc in _docs("fractional-pair.yaml"):
                doc["metadata"]["namespace"] = ns
                doc["spec"]["nodeSelector"] = sel  # keep to this test's node on the shared API server
                core.create_namespaced_pod(ns, doc)
                pods.append(doc["metadata"]["name"])

            kube = BinderApi(api)
            agent = NodeAgent(api, reservations)
            cfg = SharingConfig(namespace=reservations, timeout_s=10, poll_s=0.05, sync_interval_s=0)
            with FileLog(tmp_path / "log") as log:
                p = Pipeline(api, ns, log)
                p.binder = Binder(
                    log,
                    kube,
                    grace_seconds=0,
                    retry=RetryPolicy(attempts=4, base_s=0.05),
                    sharing=GpuSharing(kube.core, kube.call, cfg, sleep=agent.tick),
                )
                p.ingest.start()
                try:
                    p.settle(lambda: all("nodeName" in read_pod(api, ns, n)["spec"] for n in pods))
                    for _ in range(3):  # more cycles with the reservation pod on the node: nothing moves
                        p.step()
                finally:
                    p.ingest.stop()

                decisions = [d for rec in decision_records(log) for d in rec["decisions"]]
                binds = {d["pod"]: d for d in decisions if d["kind"] == "Bind"}
                assert {binds[f"{ns}/{n}"]["gpu_devices"][0] for n in pods} == {0}
                assert not [d for d in decisions if d["kind"] == "Evict"]
                dead = log.read(DEFAULT_TOPICS.deadletter, 0, 100)
                assert dead == [], [r.value for r in dead]

            seen = []
            for name in pods:
                pod = read_pod(api, ns, name)
                ann = pod["metadata"]["annotations"]
                assert pod["spec"]["nodeName"] == node
                assert ann["hourglass.io/gpu-groups"] == gpu_group(node, 0)
                (main,) = pod["spec"]["containers"]
                wired = {e["name"]: e["valueFrom"]["configMapKeyRef"]["name"] for e in main["env"]}
                assert wired == dict.fromkeys(
                    ("NVIDIA_VISIBLE_DEVICES", "GPU_PORTION", "RUNAI_NUM_OF_GPUS"),
                    ann["hourglass.io/gpu-configmap"],
                )
                seen.append(core.read_namespaced_config_map(ann["hourglass.io/gpu-configmap"], ns).data)
            assert (
                seen[0]
                == seen[1]
                == {
                    "NVIDIA_VISIBLE_DEVICES": f"GPU-{node}-0",
                    "GPU_PORTION": "0.5",
                    "RUNAI_NUM_OF_GPUS": "0.5",
                }
            )
            r: Any = core.list_namespaced_pod(reservations, _preload_content=False)
            (resv,) = json.loads(r.data)["items"]
            assert resv["metadata"]["name"] == reservation_pod_name(gpu_group(node, 0))
            assert resv["metadata"]["annotations"][ANNOTATION_SHARERS] == ",".join(
                f"{ns}/{n}" for n in sorted(pods)
            )
            assert resv["spec"]["nodeName"] == node
        finally:
            admission.delete_mutating_webhook_configuration(webhook_config)
            hook.stop()
