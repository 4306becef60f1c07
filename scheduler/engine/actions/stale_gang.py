"""stale_gang_eviction: evict what is left of a gang that fell below its minimum for too long.

A job is stale when no pod has succeeded, at least one pod still holds capacity, and fewer than
minAvailable pods are active. The first cycle that sees it stale starts its clock; once the clock exceeds
the grace period every active pod of the job is evicted, so a half-dead gang stops holding GPUs. A
negative grace period disables the action.
"""

from __future__ import annotations

from scheduler.engine.session import ACTIVE_ALLOCATED, ACTIVE_USED, JobInfo, Session
from scheduler.engine.state import PodStatus

NAME = "stale_gang_eviction"


def is_stale(job: JobInfo) -> bool:
    """No succeeded pod, some pod active, fewer active pods than minAvailable (with subgroups: some
    required PodSet short of its minAvailable, as KAI checks the gang per PodSet)."""
    if job.spec.subgroups:
        if any(t.status is PodStatus.SUCCEEDED for t in job.tasks):
            return False
        return job.count(ACTIVE_USED) > 0 and not job.gang_satisfied(ACTIVE_USED)
    if job.min_available <= 1:
        return False  # 0 < active < 1 cannot hold: skip the task scans (most jobs)
    if any(t.status is PodStatus.SUCCEEDED for t in job.tasks):
        return False
    used = job.count(ACTIVE_USED)
    return 0 < used < job.min_available


def run(ssn: Session) -> None:
    """The stale-gang eviction action."""
    for job in ssn.jobs:
        if not is_stale(job):
            job.stale_since_ms = None
            continue
        if job.stale_since_ms is None:
            job.stale_since_ms = ssn.now_ms
        # The PodGroup's own stalenessGracePeriod, else the scheduler-wide default (KAI).
        own = job.spec.staleness_grace_ms
        grace = ssn.config.stale_grace_ms if own is None else own
        if grace < 0 or ssn.now_ms - job.stale_since_ms < grace:
            continue
        stmt = ssn.statement()
        reason = (
            f"Workload doesn't meet the minimum required number of pods ({job.min_available}), "
            "evicting remaining pod"
        )
        tree = job.subgroup_tree()
        if tree is not None:
            short = tree.root.shortfalls(ACTIVE_USED)
            detail = ", ".join(f"subgroup {ps.name} has {have} of {need}" for ps, have, need in short)
            reason = f"Workload doesn't meet the minimum required number of pods ({detail}), evicting remaining pod"
        for t in sorted(job.tasks, key=lambda t: t.sort_key(), reverse=True):
            if t.status in ACTIVE_ALLOCATED:
                stmt.evict(t, NAME, f"{reason}: {t.name}")
        stmt.commit()
