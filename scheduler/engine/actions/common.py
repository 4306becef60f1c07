"""Machinery shared by the actions: which jobs an action considers, and the queue capacity checks."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.engine.session import G, JobInfo, Session, TaskInfo

RESOURCE_WORDS = ("GPUs", "CPU cores", "memory (GB)")


def human(r: int, v: int) -> str:
    """An engine quantity in the units people read: GPUs, cores, GB."""
    if r == G:
        return f"{v / 1000:g}"
    if r == 1:
        return f"{v / 1000:g}"
    return f"{v / 1e9:g}"


def preemption_delay_left(ssn: Session, job: JobInfo) -> int:
    """Milliseconds until ``job`` may evict others (0 = now): KAI's per-PodGroup ``preemptionDelay``,
    counted from the group's creation or, once it has run, from its last start."""
    delay = job.spec.preemption_delay_ms
    if not delay:
        return 0
    since = max(job.spec.created_ms, job.last_start_ms or 0)
    return max(since + delay - ssn.now_ms, 0)


def candidate_jobs(
    ssn: Session, *, preemptible_only: bool = False, topology_aware: bool = False, evicting: bool = False
) -> list[JobInfo]:
    """Jobs an action may try: queue exists and is a leaf, job is ready and has pending tasks.

    ``evicting``: the action makes room by evicting others (reclaim, preempt, consolidation), so a job
    still inside its preemption delay is left out.

    Every action keeps a job's topology constraints, its own and its subgroups' (docs/topology.md);
    ``topology_aware`` is kept for callers and no longer filters anything.
    """
    out = []
    for job in ssn.jobs:
        if job.queue is None or not job.queue.is_leaf:
            continue
        if not job.has_tasks_to_allocate() or not job.is_ready():
            continue
        if preemptible_only and not job.preemptible:
            continue
        if evicting and preemption_delay_left(ssn, job):
            continue
        out.append(job)
    return out


def tasks_vec(ssn: Session, tasks: Sequence[TaskInfo]) -> list[int]:
    out = [0, 0, 0]
    for t in tasks:
        v = ssn.task_vec(t)
        for r in range(3):
            out[r] += v[r]
    return out


def over_capacity(ssn: Session, job: JobInfo, tasks: Sequence[TaskInfo]) -> tuple[str, str] | None:
    """KAI's IsJobOverQueueCapacity: limit at every ancestor, and in-quota only for non-preemptible jobs.

    Returns (reason code, message) when the job must not be placed, else None.
    """
    if not ssn.config.fair_share_enabled or job.queue is None:
        return None
    req = tasks_vec(ssn, tasks)
    for q in job.queue.ancestors():
        for r in range(3):
            if req[r] <= 0:
                continue
            lim = q.limit(r)
            if lim is not None and q.allocated[r] + req[r] > lim:
                return (
                    "OverLimit",
                    f"{q.name} quota has reached the allowable limit of {RESOURCE_WORDS[r]}. "
                    f"Limit is {human(r, lim)} {RESOURCE_WORDS[r]}, currently {human(r, q.allocated[r])} "
                    f"{RESOURCE_WORDS[r]} allocated and workload requested {human(r, req[r])} {RESOURCE_WORDS[r]}",
                )
    if not job.preemptible:
        np = non_preemptible_over_quota(ssn, job, req)
        if np is not None:
            return np
    return None


def non_preemptible_over_quota(ssn: Session, job: JobInfo, req: list[int]) -> tuple[str, str] | None:
    """A non-preemptible job may only use in-quota resources at every ancestor."""
    if not ssn.config.fair_share_enabled or job.queue is None:
        return None
    for q in job.queue.ancestors():
        for r in range(3):
            d = q.deserved(r)
            if req[r] <= 0 or d is None:
                continue
            if q.allocated_np[r] + req[r] > d:
                return (
                    "NonPreemptibleOverQuota",
                    f"Non-preemptible workload is over quota. Workload requested {human(r, req[r])} "
                    f"{RESOURCE_WORDS[r]}, but {q.name} quota is {human(r, d)} {RESOURCE_WORDS[r]}, while "
                    f"{human(r, q.allocated_np[r])} {RESOURCE_WORDS[r]} are already allocated for "
                    "non-preemptible pods. Use a preemptible workload to go over quota.",
                )
    return None


def should_pipeline_job(job: JobInfo) -> bool:
    """A job with a pipelined task that is still short of minAvailable on bound tasks pipelines entirely."""
    from scheduler.engine.state import PodStatus

    has_pipe = any(t.status is PodStatus.PIPELINED for t in job.tasks)
    if not has_pipe:
        return False
    if job.spec.subgroups:
        return not job.gang_satisfied(frozenset({PodStatus.ALLOCATED, PodStatus.RUNNING}))
    active = sum(1 for t in job.tasks if t.status in (PodStatus.ALLOCATED, PodStatus.RUNNING))
    return active < job.min_available
