"""KAI's batch examples (docs/batch/, docs/elastic/) on a KWOK cluster through ``hourglass ingest``, ``run``
and ``bind`` processes, only ``schedulerName`` changed.

* ``batch/batch-job.yaml``: a Job of two 1-GPU pods; kube-controller-manager creates the pods, Hourglass
  groups them as KAI's job grouper does (a PodGroup per pod, in ``default-queue``) and runs both.
* ``batch/pytorch-job.yaml``: a PyTorchJob (one master, two workers). No training operator runs here, so
  the test plays it (``operator_pods``: the pods it would create, with the owner reference); the three run
  as one gang, bound in one cycle, under one PodGroup of minMember 3.
* ``elastic/pytorch-elastic.yaml``: an elastic PyTorchJob of two CPU workers; both run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from tests.support.kai_docs import kai_example
from tests.support.kai_workload import PYTORCHJOB_CRD, apply_queue, ensure_crd, operator_pods
from tests.support.kube_pipeline import decision_records
from tests.support.kwok import (
    HourglassStack,
    KwokCluster,
    create_objects,
    pod_events,
    pods,
    running,
    wait_until,
)


def _bind_cycles(log_dir: Path) -> dict[str, tuple[str, str]]:
    """pod -> (node, cycle id) of its Bind decision."""
    with FileLog(log_dir, readonly=True) as log:
        recs = decision_records(log)
    return {d["pod"]: (d["node"], r["cycle_id"]) for r in recs for d in r["decisions"] if d["kind"] == "Bind"}


def _podgroups(api: Any, ns: str) -> list[dict[str, Any]]:
    from kubernetes import client

    co = client.CustomObjectsApi(api)
    items: list[dict[str, Any]] = co.list_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", ns, "podgroups"
    )["items"]
    return items


def test_kai_batch_job_pytorch_job_and_elastic_job_run(
    kwok_cluster: KwokCluster, kwok_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kwok_namespace
    log_dir = tmp_path / "log"
    with kwok_cluster.api_client() as api, HourglassStack(kwok_cluster, log_dir) as stack:
        ensure_crd(api, PYTORCHJOB_CRD)
        for q in kai_example("quickstart/default-queues.yaml"):
            apply_queue(api, q)

        # A batch Job: the controller-manager makes its two pods.
        create_objects(api, kai_example("batch/batch-job.yaml"), ns)
        job_pods = lambda: [n for n in pods(api, ns) if n.startswith("batch-job-")]  # noqa: E731
        wait_until(
            lambda: (len(job_pods()) == 2 and running(api, ns, job_pods())) or not stack.alive(),
            90,
            "the batch Job's two pods Running",
        )
        assert stack.alive(), stack.logs()

        # A distributed PyTorchJob: the operator's three pods, one gang.
        (job,) = create_objects(api, kai_example("batch/pytorch-job.yaml"), ns)
        gang = [p["metadata"]["name"] for p in create_objects(api, operator_pods(job), ns)]
        wait_until(lambda: running(api, ns, gang) or not stack.alive(), 90, "the PyTorchJob's pods Running")

        # An elastic PyTorchJob: two CPU workers.
        (elastic,) = create_objects(api, kai_example("elastic/pytorch-elastic.yaml"), ns)
        workers = [p["metadata"]["name"] for p in create_objects(api, operator_pods(elastic), ns)]
        wait_until(lambda: running(api, ns, workers) or not stack.alive(), 90, "the elastic workers Running")
        assert stack.alive(), stack.logs()

        binds = _bind_cycles(log_dir)
        got = pods(api, ns)
        for name in [*job_pods(), *gang, *workers]:
            node = got[name].spec.node_name
            assert binds[f"{ns}/{name}"][0] == node, name
            assert ("Scheduled", f"Successfully assigned {ns}/{name} to {node}") in pod_events(api, ns, name)
        # The PyTorchJob is one gang: bound in one cycle.
        assert len({binds[f"{ns}/{g}"][1] for g in gang}) == 1
        # PodGroups as KAI's pod-grouper makes them: one per PyTorchJob (minMember = its replicas), and for a
        # batch Job one per pod, named pg-<pod>-<job uid> (KAI's job_grouper.go); all in the label's queue.
        groups = {g["metadata"]["name"]: g["spec"] for g in _podgroups(api, ns)}
        job_uid = client.BatchV1Api(api).read_namespaced_job("batch-job", ns).metadata.uid
        assert {f"pg-{p}-{job_uid}" for p in job_pods()} <= set(groups), sorted(groups)
        ddp = [s for n, s in groups.items() if n.startswith("pg-pytorch-dist-mnist-nccl-")]
        assert len(ddp) == 1 and ddp[0]["minMember"] == 3, sorted(groups)
        assert [n for n in groups if n.startswith("pg-elastic-example-imagenet-")], sorted(groups)
        assert {s["queue"] for s in groups.values()} == {"default-queue"}
        with FileLog(log_dir, readonly=True) as log:
            dead = log.read(DEFAULT_TOPICS.deadletter, 0, 100)
        assert dead == [], [r.value for r in dead]
    assert stack.stop() == {"ingest": 0, "run": 0, "bind": 0}, stack.logs()
