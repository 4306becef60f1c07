"""A KAI Scheduler user's workload runs on Hourglass with only the scheduler name changed.

``examples/kai-workload/`` holds queues and workloads written for KAI (``schedulerName: kai-scheduler``):
a whole-GPU pod with the ``kai.scheduler/queue`` label, a half-GPU pod through the ``gpu-fraction``
annotation, and a PyTorchJob with a master and two workers. The test replaces the scheduler name and nothing
else, applies them to a real kube-apiserver, plays the training operator (it creates the job's pods from its
templates with an owner reference, as the operator would; no operator runs here), and runs ingest → scheduler
→ binder. Every pod must end bound where the engine decided, the job's pods as one gang.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from scheduler.kube.binder import ANNOTATION_GPU_PORTION
from tests.support.kai_workload import (
    PYTORCHJOB_CRD,
    apply_queue,
    ensure_crd,
    kai_docs,
    operator_pods,
)
from tests.support.kube_objects import apply_crds, make_node, read_pod
from tests.support.kube_pipeline import Pipeline, decision_records


def test_kai_workload_runs_with_only_the_scheduler_name_changed(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kube_namespace
    with kube_api.api_client() as api:
        apply_crds(api)
        ensure_crd(api, PYTORCHJOB_CRD)
        for n in ("n1", "n2"):
            make_node(api, f"{ns}-{n}", gpus=4)
        for q in kai_docs("queues.yaml"):
            apply_queue(api, q)
        core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
        pods: list[str] = []
        for doc in kai_docs("workloads.yaml"):
            doc["metadata"]["namespace"] = ns
            if doc["kind"] == "Pod":
                core.create_namespaced_pod(ns, doc)
                pods.append(doc["metadata"]["name"])
            else:
                job = co.create_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", doc)
                for pod in operator_pods(job):
                    core.create_namespaced_pod(ns, pod)
                    pods.append(pod["metadata"]["name"])
        gang = [p for p in pods if p.startswith("demo-ddp-")]
        assert len(pods) == 5 and len(gang) == 3

        with FileLog(tmp_path / "log") as log:
            p = Pipeline(api, ns, log)
            p.ingest.start()
            try:
                p.settle(lambda: all("nodeName" in read_pod(api, ns, n)["spec"] for n in pods))
            finally:
                p.ingest.stop()

            binds: dict[str, tuple[str, int]] = {}
            for rec in decision_records(log):
                for d in rec["decisions"]:
                    if d["kind"] == "Bind":
                        binds[d["pod"]] = (d["node"], rec["logical_time_ms"])
            for name in pods:
                assert read_pod(api, ns, name)["spec"]["nodeName"] == binds[f"{ns}/{name}"][0], name
            # The job's three pods are one gang: placed together, in one cycle.
            assert len({binds[f"{ns}/{g}"][1] for g in gang}) == 1
            half = read_pod(api, ns, "demo-half-gpu-pod")["metadata"]["annotations"]
            assert half[ANNOTATION_GPU_PORTION] == "500"
            # The pod-grouper made the job's PodGroup, as KAI's does: minMember = all replicas, the job's queue.
            groups = co.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", ns, "podgroups")[
                "items"
            ]
            ddp = [g for g in groups if g["metadata"]["name"].startswith("pg-demo-ddp-")]
            assert len(ddp) == 1, [g["metadata"]["name"] for g in groups]
            assert ddp[0]["spec"]["minMember"] == 3 and ddp[0]["spec"]["queue"] == "demo-queue"
            dead = log.read(DEFAULT_TOPICS.deadletter, 0, 100)
            assert dead == [], [r.value for r in dead]
