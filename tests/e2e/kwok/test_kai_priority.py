"""KAI's priority example (docs/priority/) and the reclaim / preempt it describes, on a KWOK cluster through
``hourglass ingest``, ``run`` and ``bind`` processes.

* The example as KAI ships it (limited-queue.yaml, then train-priority-pod.yaml, then build-priority-pod.yaml,
  only ``schedulerName`` changed): its README says the ``test`` queue's 1-GPU limit leaves room for one pod
  and the build pod preempts the train pod, but both pods name ``default-queue`` (the quickstart's queue,
  quota 0), not ``test``. So the train pod runs over quota, and the build pod, non-preemptible (priority
  100), may not go over quota: it stays pending with KAI's ``NonPreemptibleOverQuota`` reason, as on KAI.
* Preempt, what the README means (the ``train`` / ``build`` priority classes, 50 and 100, given by the
  ``priorityClassName`` label as in the example): a queue entitled to the whole cluster is full of ``train``
  pods; a ``build`` pod in it preempts exactly one of them (a ``Preempted`` Event saying ``[preempt]``) and runs.
* Reclaim: queue ``ra`` (quota 16 GPUs) uses all 32 over its quota; queue ``rb`` (quota 16) submits 8 pods;
  8 of ``ra``'s pods are evicted (``[reclaim]``) and ``rb``'s 8 run; ``ra`` keeps 24 >= its quota.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.kai_docs import kai_example
from tests.support.kai_workload import apply_queue
from tests.support.kwok import (
    GPUS_PER_NODE,
    NODES,
    HourglassStack,
    KwokCluster,
    create_objects,
    gpu_pod,
    pod_events,
    pods,
    queue_manifest,
    running,
    wait_until,
)

GPUS = NODES * GPUS_PER_NODE


def _evicted_by(api: Any, ns: str, names: list[str], action: str) -> list[str]:
    return [
        n for n in names if any(r == "Preempted" and f"[{action}]" in m for r, m in pod_events(api, ns, n))
    ]


def test_kai_priority_example_as_shipped_keeps_the_build_pod_in_quota(
    kwok_cluster: KwokCluster, kwok_namespace: str, tmp_path: Path
) -> None:
    ns = kwok_namespace
    with kwok_cluster.api_client() as api, HourglassStack(kwok_cluster, tmp_path / "log") as stack:
        for q in kai_example("quickstart/default-queues.yaml") + kai_example(
            "priority/example/limited-queue.yaml"
        ):
            apply_queue(api, q)
        create_objects(api, kai_example("priority/example/train-priority-pod.yaml"), ns)
        wait_until(lambda: running(api, ns, ["train-pod"]) or not stack.alive(), 90, "train-pod Running")
        create_objects(api, kai_example("priority/example/build-priority-pod.yaml"), ns)
        unschedulable = lambda: [m for r, m in pod_events(api, ns, "build-pod") if r == "Unschedulable"]  # noqa: E731
        wait_until(lambda: bool(unschedulable()) or not stack.alive(), 90, "build-pod's Unschedulable Event")
        assert stack.alive(), stack.logs()
        (message,) = set(unschedulable())
        assert message.startswith("NonPreemptibleOverQuota: Non-preemptible workload is over quota."), message
        assert "default-queue quota is 0 GPUs" in message, message
        cond = {c.type: c for c in pods(api, ns)["build-pod"].status.conditions or []}["PodScheduled"]
        assert (cond.status, cond.reason) == ("False", "Unschedulable") and cond.message == message
        assert running(api, ns, ["train-pod"]) and not pods(api, ns)["build-pod"].spec.node_name
        assert _evicted_by(api, ns, ["train-pod"], "preempt") == []


def test_build_pod_preempts_one_train_pod_in_a_fullqueue_manifest(
    kwok_cluster: KwokCluster, kwok_namespace: str, tmp_path: Path
) -> None:
    ns = kwok_namespace
    with kwok_cluster.api_client() as api, HourglassStack(kwok_cluster, tmp_path / "log") as stack:
        apply_queue(api, queue_manifest("kwok-preempt", GPUS))
        train = [f"train-{i}" for i in range(GPUS)]
        create_objects(api, [gpu_pod(n, "kwok-preempt", "train") for n in train], ns)
        wait_until(lambda: running(api, ns, train) or not stack.alive(), 120, f"{GPUS} train pods Running")
        create_objects(api, [gpu_pod("build-pod", "kwok-preempt", "build")], ns)
        wait_until(lambda: running(api, ns, ["build-pod"]) or not stack.alive(), 120, "build-pod Running")
        assert stack.alive(), stack.logs()
        left = [n for n in train if n in pods(api, ns)]
        assert len(left) == GPUS - 1, left
        (victim,) = set(train) - set(left)
        assert _evicted_by(api, ns, [victim], "preempt") == [victim], pod_events(api, ns, victim)


def test_reclaim_gives_a_queue_its_quota_back(
    kwok_cluster: KwokCluster, kwok_namespace: str, tmp_path: Path
) -> None:
    ns = kwok_namespace
    with kwok_cluster.api_client() as api, HourglassStack(kwok_cluster, tmp_path / "log") as stack:
        apply_queue(api, queue_manifest("kwok-reclaim", 0))
        apply_queue(api, queue_manifest("kwok-ra", GPUS // 2, parent="kwok-reclaim"))
        apply_queue(api, queue_manifest("kwok-rb", GPUS // 2, parent="kwok-reclaim"))
        a = [f"a-{i}" for i in range(GPUS)]
        create_objects(api, [gpu_pod(n, "kwok-ra", "train") for n in a], ns)
        wait_until(lambda: running(api, ns, a) or not stack.alive(), 120, f"queue ra's {GPUS} pods Running")
        b = [f"b-{i}" for i in range(8)]
        create_objects(api, [gpu_pod(n, "kwok-rb", "train") for n in b], ns)
        wait_until(lambda: running(api, ns, b) or not stack.alive(), 120, "queue rb's 8 pods Running")
        assert stack.alive(), stack.logs()
        left = [n for n in a if n in pods(api, ns)]
        assert len(left) == GPUS - 8, left
        gone = sorted(set(a) - set(left))
        assert _evicted_by(api, ns, gone, "reclaim") == gone
