"""Builders of the scheduler's decisions and cycle records, as the binder reads them from the log."""

from __future__ import annotations

from scheduler.engine.record.decisions import CycleRecord, Decision, QueueRecord


def queue(
    name: str, *, gpu_alloc: int = 0, gpu_fair: int = 0, mem_alloc: int = 0, parent: str | None = None
) -> QueueRecord:
    """A queue's line in a cycle record: its GPU quota, allocation and fair share."""
    res = {"gpu": 0, "cpu": 0, "memory": 0}
    return QueueRecord(
        name=name,
        parent=parent,
        priority=100,
        deserved={"gpu": 2000, "cpu": None, "memory": None},
        limit={"gpu": None, "cpu": None, "memory": None},
        over_quota_weight={"gpu": "1", "cpu": "1", "memory": "1"},
        requested={**res, "gpu": gpu_alloc + 1000},
        allocated={**res, "gpu": gpu_alloc, "memory": mem_alloc},
        allocated_non_preemptible=res,
        fair_share={**res, "gpu": gpu_fair},
        fair_share_classic={**res, "gpu": gpu_fair},
        k_adjustment=res,
        usage={"gpu": 0.0, "cpu": 0.0, "memory": 0.0},
    )


def bind(
    pod: str, node: str, devices: tuple[int, ...] = (), milli: int = 0, job: str | None = None
) -> Decision:
    """A Bind decision of ``pod`` to ``node`` (whole devices, or ``milli`` of each for a shared GPU)."""
    return Decision(
        kind="Bind",
        job=job or pod,
        queue="team-a",
        pod=pod,
        node=node,
        gpu_devices=list(devices),
        gpu_milli_per_device=milli,
        action="allocate",
    )


def evict(
    pod: str, node: str, action: str = "reclaim", message: str = "Pod x was preempted by workload y."
) -> Decision:
    """An Evict decision of ``pod`` on ``node`` by ``action``, with the message the pod is told."""
    return Decision(
        kind="Evict",
        job=pod,
        queue="team-b",
        pod=pod,
        node=node,
        action=action,
        reason=action,
        message=message,
    )


def pending(
    pods: list[str],
    reason: str = "PodSchedulingErrors",
    message: str = "no nodes with enough GPUs",
    job: str | None = None,
) -> Decision:
    """An Unschedulable decision for ``pods`` of ``job`` (default: the first pod's) with its reason and
    message."""
    return Decision(
        kind="Unschedulable", job=job or pods[0], queue="team-a", pods=pods, reason=reason, message=message
    )


def record(decisions: list[Decision], queues: list[QueueRecord] | None = None, t: int = 1000) -> CycleRecord:
    """A cycle record of ``decisions`` (and ``queues``) at logical time ``t``."""
    return CycleRecord(
        cycle_id=f"cycle-{t}",
        events_offset=t,
        usage_snapshot_id=None,
        config_hash="h",
        logical_time_ms=t,
        queues=queues or [],
        decisions=decisions,
    )
