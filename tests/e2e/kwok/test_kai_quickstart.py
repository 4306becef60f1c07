"""KAI's quickstart (docs/quickstart/) on a KWOK cluster, scheduled by Hourglass run as a user runs it:
``hourglass ingest``, ``run`` and ``bind`` as processes, only ``schedulerName`` changed in KAI's manifests.

KAI's quickstart creates the default queues, then a GPU pod and a CPU-only pod in ``default-queue``; both
must run. Here they must also run where the scheduler decided, with the binder's ``Scheduled`` Event.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from tests.support.kai_docs import kai_example
from tests.support.kai_workload import apply_queue
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


def _binds(log_dir: Path) -> dict[str, str]:
    with FileLog(log_dir, readonly=True) as log:
        recs = decision_records(log)
    return {d["pod"]: d["node"] for r in recs for d in r["decisions"] if d["kind"] == "Bind"}


def test_kai_quickstart_pods_run_where_hourglass_bound_them(
    kwok_cluster: KwokCluster, kwok_namespace: str, tmp_path: Path
) -> None:
    ns = kwok_namespace
    with kwok_cluster.api_client() as api, HourglassStack(kwok_cluster, tmp_path / "log") as stack:
        for q in kai_example("quickstart/default-queues.yaml"):
            apply_queue(api, q)
        docs: list[dict[str, Any]] = kai_example("quickstart/pods/gpu-pod.yaml")
        docs += kai_example("quickstart/pods/cpu-only-pod.yaml")
        create_objects(api, docs, ns)
        names = ["gpu-pod", "cpu-only-pod"]
        wait_until(lambda: running(api, ns, names) or not stack.alive(), 90, "both quickstart pods Running")
        assert stack.alive(), stack.logs()
        got = pods(api, ns)
        binds = _binds(tmp_path / "log")
        for name in names:
            node = got[name].spec.node_name
            assert node.startswith("kwok-node-"), node
            assert binds[f"{ns}/{name}"] == node
            assert ("Scheduled", f"Successfully assigned {ns}/{name} to {node}") in pod_events(api, ns, name)
        with FileLog(tmp_path / "log", readonly=True) as log:
            dead = log.read(DEFAULT_TOPICS.deadletter, 0, 100)
        assert dead == [], [r.value for r in dead]
    assert stack.stop() == {"ingest": 0, "run": 0, "bind": 0}, stack.logs()
