"""consolidation: move running preemptible jobs so that a pending preemptible job fits (KAI's bin packing).

For each ready, pending, preemptible job in queue order:

* skip it when the cluster's idle + releasing GPUs cannot cover its next tasks at all (KAI's
  ``IsEnoughGPUsAllocatableForJob``), or when a job with the same scheduling constraints already failed and
  this one is not easier (KAI's scheduling signatures, one table for the whole action);
* otherwise search (:mod:`scheduler.actions.consolidation_sim`) for preemptible jobs to move. The move is
  committed only if every victim task found a new place and the job's gang is satisfied: moved victims are
  evicted and show as ``pipelined`` on their new node, the job itself is ``pipelined``. Anything else is
  rolled back and leaves no trace.

The action is off when ``max_consolidation_preemptees`` is 0 or a placement strategy is ``spread``.
"""

from __future__ import annotations

from scheduler.actions.common import candidate_jobs
from scheduler.actions.consolidation_sim import solve
from scheduler.ordering import JobsByQueue
from scheduler.session import ACTIVE_ALLOCATED, JobInfo, Session, TaskInfo
from scheduler.state import PodStatus

NAME = "consolidation"


def disabled(ssn: Session) -> bool:
    """KAI skips consolidation with a zero preemptee budget; its operator turns it off under spread."""
    c = ssn.config
    return c.max_consolidation_preemptees == 0 or "spread" in (c.gpu_placement, c.cpu_placement)


def enough_gpus(ssn: Session, job: JobInfo) -> bool:
    """True when idle + releasing GPU capacity over Ready nodes covers the job's next tasks."""
    need = sum(t.gpu_milli(None, ssn.min_gpu_memory) for t in job.tasks_to_allocate())
    have = sum(max(n.dev_future(d), 0) for n in ssn.nodes if n.spec.ready for d in range(n.gpus))
    return have >= need


# -- scheduling signatures --------------------------------------------------------------------------------
Signature = tuple[str, ...]
ReqVec = tuple[int, int, int, int]


def _pod_signature(t: TaskInfo) -> str:
    p = t.pod
    return repr((t.job.priority, sorted(p.node_selector.items()), p.allowed_nodes, p.affinity, p.tolerations))


def signature(job: JobInfo) -> Signature:
    """The constraints of the job's not-yet-allocated pods (one entry per pod, sorted)."""
    return tuple(sorted(_pod_signature(t) for t in job.tasks if t.status not in ACTIVE_ALLOCATED))


def _requests(ssn: Session, job: JobInfo) -> list[ReqVec]:
    out = []
    for t in job.tasks:
        if t.status is PodStatus.PENDING:
            r = t.request
            out.append((t.gpu_milli(None, ssn.min_gpu_memory), r.gpu_memory_mib or 0, r.cpu, r.memory))
    return sorted(out)


def _le(a: ReqVec, b: ReqVec) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True))


def easier(ssn: Session, job: JobInfo, rep: JobInfo) -> bool:
    """KAI's jobEasierToScheduleComparison(job, representative)."""
    mine, theirs = _requests(ssn, job), _requests(ssn, rep)
    if not mine or not theirs:
        return False
    if len(theirs) > len(mine):
        return True
    for i, a in enumerate(mine):
        if i >= len(theirs):
            return False
        if _le(a, theirs[i]) and not _le(theirs[i], a):
            return True
    return False


def smaller_footprint(ssn: Session, job: JobInfo, rep: JobInfo) -> bool:
    """KAI's isPodGroupFootprintSmaller: every pod of `job` fits under the matching pod of `rep`."""
    mine, theirs = _requests(ssn, job), _requests(ssn, rep)
    if not mine or not theirs or len(mine) > len(theirs):
        return False
    return all(_le(a, b) for a, b in zip(mine, theirs, strict=False))


class FailedJobs:
    """The smallest failed job per signature: a later job with that signature is tried only if easier."""

    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn
        self._reps: dict[Signature, JobInfo] = {}

    def worth_trying(self, job: JobInfo) -> bool:
        rep = self._reps.get(signature(job))
        return rep is None or easier(self.ssn, job, rep)

    def record(self, job: JobInfo) -> None:
        key = signature(job)
        rep = self._reps.get(key)
        if rep is None or smaller_footprint(self.ssn, job, rep):
            self._reps[key] = job


# -- the action -------------------------------------------------------------------------------------------
def run(ssn: Session) -> None:
    """The consolidation action."""
    if disabled(ssn):
        return
    limit = ssn.config.max_consolidation_preemptees
    order = JobsByQueue(ssn, candidate_jobs(ssn, preemptible_only=True))
    failed = FailedJobs(ssn)
    while (job := order.pop()) is not None:
        if not failed.worth_trying(job):
            continue
        stmt = solve(ssn, job, limit) if enough_gpus(ssn, job) else None
        if stmt is None:
            failed.record(job)
            continue
        # Victims put back where they were (evicted, then un-evicted) leave no operation behind.
        ops = stmt.ops
        undone = {op.task.uid for op in ops if op.kind == "unevict"}
        evicted = [op.task for op in ops if op.kind == "evict"]
        stmt.ops = [op for op in ops if op.task.uid not in undone]
        stmt.commit()
        for t in evicted:
            t.virtual = False  # moved for real now (or back where it was), no longer a what-if
