"""A KAI user's LeaderWorkerSet and CronJob (examples/kai-workload/groups.yaml) on a real kube-apiserver.

Only the scheduler name is changed. No LWS or CronJob controller runs here, so the test plays them: it
creates what they create (the LWS leader StatefulSet, leader pods, a worker StatefulSet per leader and its
pods; a Job per CronJob run and its pod), with the owner references they set. Then ingest -> scheduler ->
binder run, and the pod-grouper's PodGroups and the bindings must be KAI's: one gang of ``size`` per LWS
group replica, one PodGroup per CronJob run. KAI's external-PodGroup contract rides along: a pod with
``kai.scheduler/skip-podgrouper`` joins the PodGroup it names, and one naming none is refused with a reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from tests.support.kai_workload import (
    LWS_CRD,
    apply_queue,
    ensure_crd,
    kai_docs,
    play_cronjob_controller,
    play_lws_controller,
)
from tests.support.kube_objects import apply_crds, make_node, make_podgroup, pod_events, read_pod
from tests.support.kube_pipeline import Pipeline, decision_records

SKIP = "kai.scheduler/skip-podgrouper"


def _cpu_pod(name: str, ns: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {
            "schedulerName": "hourglass",
            "containers": [
                {"name": "c", "image": "ubuntu:24.04", "resources": {"requests": {"cpu": "100m"}}}
            ],
        },
    }


def test_lws_and_cronjob_are_grouped_and_placed_as_kai_would(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kube_namespace
    with kube_api.api_client() as api:
        apply_crds(api)
        ensure_crd(api, LWS_CRD)
        for n in ("n1", "n2"):
            make_node(api, f"{ns}-{n}", gpus=4)
        for q in kai_docs("queues.yaml"):
            apply_queue(api, q)
        co, batch = client.CustomObjectsApi(api), client.BatchV1Api(api)
        lws_doc, cron_doc = kai_docs("groups.yaml")
        for doc in (lws_doc, cron_doc):
            doc["metadata"]["namespace"] = ns
        lws = co.create_namespaced_custom_object(
            "leaderworkerset.x-k8s.io", "v1", ns, "leaderworkersets", lws_doc
        )
        cron = api.sanitize_for_serialization(batch.create_namespaced_cron_job(ns, cron_doc))
        groups = play_lws_controller(api, ns, lws)
        runs = play_cronjob_controller(api, ns, cron, ["1000", "2000"])
        # KAI's external-PodGroup contract: skip-podgrouper plus pod-group-name joins a PodGroup made by
        # someone else; skip-podgrouper alone names none, so the pod is refused with a reason.
        make_podgroup(api, ns, "demo-external", "demo-queue", 1)
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(
            ns, _cpu_pod("demo-external-0", ns, {SKIP: "true", "pod-group-name": "demo-external"})
        )
        core.create_namespaced_pod(ns, _cpu_pod("demo-skip-only", ns, {SKIP: "true"}))
        pods = [p for g in groups.values() for p in g] + list(runs) + ["demo-external-0"]
        assert len(pods) == 9

        with FileLog(tmp_path / "log") as log:
            p = Pipeline(api, ns, log)
            p.ingest.start()
            try:
                p.settle(lambda: all("nodeName" in read_pod(api, ns, n)["spec"] for n in pods))
            finally:
                p.ingest.stop()
            binds: dict[str, tuple[str, int]] = {}
            jobs: dict[str, str] = {}  # pod -> the job (PodGroup) the scheduler bound it as part of
            for rec in decision_records(log):
                for d in rec["decisions"]:
                    if d["kind"] == "Bind":
                        binds[d["pod"]] = (d["node"], rec["logical_time_ms"])
                        jobs[d["pod"]] = d["job"]
            dead = [json.loads(r.value) for r in log.read(DEFAULT_TOPICS.deadletter, 0, 100)]
        # Only the pod that skips the pod-grouper without naming a PodGroup is refused, saying why.
        assert [d["source_topic"] for d in dead] == ["kube:Pod"], dead
        assert SKIP in dead[0]["message"] and "pod-group-name" in dead[0]["message"]
        assert "nodeName" not in read_pod(api, ns, "demo-skip-only")["spec"]
        warnings = [e for e in pod_events(api, ns, "demo-skip-only") if e["type"] == "Warning"]
        assert warnings and SKIP in warnings[0]["message"]
        assert jobs[f"{ns}/demo-external-0"] == f"{ns}/demo-external"
        for name in pods:
            assert read_pod(api, ns, name)["spec"]["nodeName"] == binds[f"{ns}/{name}"][0], name

        pgs = {
            g["metadata"]["name"]: g
            for g in co.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", ns, "podgroups")[
                "items"
            ]
        }
        uid = lws["metadata"]["uid"]
        for i, members in groups.items():
            # Each LWS group replica is a gang of leaderWorkerTemplate.size, owned by the LWS, in its queue.
            pg = pgs[f"pg-demo-lws-{uid}-group-{i}"]
            assert (pg["spec"]["minMember"], pg["spec"]["queue"]) == (3, "demo-queue")
            assert pg["metadata"]["ownerReferences"][0]["kind"] == "LeaderWorkerSet"
            assert {jobs[f"{ns}/{m}"] for m in members} == {f"{ns}/{pg['metadata']['name']}"}
            assert len({binds[f"{ns}/{m}"][1] for m in members}) == 1  # placed together, in one cycle
        # One PodGroup per CronJob run, owned by that run's Job; none for the CronJob as a whole.
        for pod_name, job_name in runs.items():
            job_uid = batch.read_namespaced_job(job_name, ns).metadata.uid
            pg = pgs[f"pg-{job_name}-{job_uid}"]
            assert (pg["spec"]["minMember"], pg["spec"]["queue"]) == (1, "demo-queue")
            assert jobs[f"{ns}/{pod_name}"] == f"{ns}/{pg['metadata']['name']}"
            assert pg["metadata"]["ownerReferences"][0] == {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": job_name,
                "uid": job_uid,
                "blockOwnerDeletion": False,
                "controller": False,
            }
        assert not [n for n in pgs if n.startswith("pg-demo-nightly-" + cron["metadata"]["uid"])]
        # Nothing else was grouped: the two LWS gangs, the two runs and the external PodGroup.
        assert len(pgs) == 5, sorted(pgs)
