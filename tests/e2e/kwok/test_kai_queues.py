"""KAI's hierarchical queue example (docs/queues/README.md: ``research-team`` with a 2-GPU limit and its
child ``ml-team``, both unchanged) on a KWOK cluster through ``hourglass ingest``, ``run`` and ``bind``.

``ml-team`` sets a GPU quota of 1 and no ``limit``. KAI reads an unset limit as 0 (its ``Limit float64``
field, and its README: "0 or unset: no additional resources allowed"), accepts the Queue (its webhook only
requires ``spec.resources``), and keeps a pod of ``ml-team`` pending with an "over max allowed" reason naming
the queue. Hourglass accepts it the same way (its quota read as the limit, with a warning) and holds the
pod at the limit.
"""

from __future__ import annotations

import copy
from pathlib import Path

from tests.support.kai_docs import kai_example
from tests.support.kai_workload import apply_queue
from tests.support.kwok import HourglassStack, KwokCluster, create_objects, pod_events, pods, wait_until


def test_kai_queue_example_ml_team_is_accepted_and_held_at_its_limit(
    kwok_cluster: KwokCluster, kwok_namespace: str, tmp_path: Path
) -> None:
    ns = kwok_namespace
    with kwok_cluster.api_client() as api, HourglassStack(kwok_cluster, tmp_path / "log") as stack:
        for q in kai_example("queues/research-team.yaml"):
            apply_queue(api, q)
        (doc,) = copy.deepcopy(kai_example("quickstart/pods/gpu-pod.yaml"))
        doc["metadata"]["labels"]["kai.scheduler/queue"] = "ml-team"
        create_objects(api, [doc], ns)

        def why() -> list[str]:
            return [m for r, m in pod_events(api, ns, "gpu-pod") if r == "Unschedulable"]

        wait_until(lambda: bool(why()) or not stack.alive(), 60, "gpu-pod's Unschedulable Event")
        assert stack.alive(), stack.logs()
        assert not pods(api, ns)["gpu-pod"].spec.node_name
        message = why()[-1]
        assert "does not exist" not in message, message
        assert "ml-team" in message, message
        assert "limit" in message.lower() or "max allowed" in message.lower(), message
