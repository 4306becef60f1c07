"""Small hand-made cluster states for the metrics tests."""

from __future__ import annotations

from scheduler.engine.proportion import ResourceQuota
from scheduler.engine.state import ClusterState, Job, Node, Pod, PodRequest, Queue

GB = 10**9


NOW_MS = 1_700_000_000_000


def quota_queue(name: str, parent: str | None = None, gpu_quota: int = 0, order: int = 0) -> Queue:
    """A queue with a GPU quota in whole GPUs; CPU and memory unlimited."""
    res = {r: ResourceQuota.of(None, None, 1) for r in ("cpu", "memory")}
    res["gpu"] = ResourceQuota.of(gpu_quota * 1000, None, 1)
    return Queue(name=name, parent=parent, resources=res, order=order)


def two_team_state(with_team_b: bool = True) -> ClusterState:
    """org -> team-a (1 GPU pod), team-b (a half-GPU pod) on one 4-GPU node."""
    queues = [quota_queue("org", gpu_quota=4), quota_queue("team-a", "org", 2, 1)]
    jobs = [Job(uid="ja", name="ja", queue="team-a")]
    pods = [Pod(uid="ja-0", name="ja-0", job="ja", request=PodRequest(cpu=2000, memory=8 * GB, gpus=1))]
    if with_team_b:
        queues.append(quota_queue("team-b", "org", 2, 2))
        jobs.append(Job(uid="jb", name="jb", queue="team-b"))
        pods.append(
            Pod(
                uid="jb-0",
                name="jb-0",
                job="jb",
                request=PodRequest(cpu=500, memory=GB, gpu_fraction_milli=500),
            )
        )
    return ClusterState(
        nodes=(Node(name="n1", cpu=32_000, memory=256 * GB, gpus=4),),
        queues=tuple(queues),
        jobs=tuple(jobs),
        pods=tuple(pods),
        events_offset=7,
    )
