"""consolidation: move running preemptible jobs so that a pending preemptible job fits (KAI's bin packing).

For each ready, pending, preemptible job in queue order:

* skip it when the cluster's idle + releasing GPUs cannot cover its next tasks at all (KAI's
  ``IsEnoughGPUsAllocatableForJob``), or when a job with the same scheduling constraints already failed and
  this one is not easier (KAI's scheduling signatures, one table for the whole action);
* otherwise search (:mod:`scheduler.engine.actions.consolidation_sim`) for preemptible jobs to move. The move is
  committed only if every victim task found a new place and the job's gang is satisfied: moved victims are
  evicted and show as ``pipelined`` on their new node, the job itself is ``pipelined``. Anything else is
  rolled back and leaves no trace.
* the job and every moved victim with a topology constraint are placed within their domains
  (docs/topology.md): consolidation may move pods out of a rack to free it for a rack-constrained gang.

The action is off when ``max_consolidation_preemptees`` is 0 or a placement strategy is ``spread``.
"""

from __future__ import annotations

from scheduler.engine.actions.common import candidate_jobs
from scheduler.engine.actions.consolidation_sim import ConsolidationIndex, solve
from scheduler.engine.actions.signatures import FailedJobs
from scheduler.engine.ordering import JobsByQueue
from scheduler.engine.session import JobInfo, Session

NAME = "consolidation"


def disabled(ssn: Session) -> bool:
    """KAI skips consolidation with a zero preemptee budget; its operator turns it off under spread."""
    c = ssn.config
    return c.max_consolidation_preemptees == 0 or "spread" in (c.gpu_placement, c.cpu_placement)


def allocatable_gpus(ssn: Session) -> int:
    """Idle + releasing GPU capacity over Ready nodes, in milli-GPU."""
    return sum(max(n.dev_future(d), 0) for n in ssn.nodes if n.spec.ready for d in range(n.gpus))


def enough_gpus(ssn: Session, job: JobInfo, have: int | None = None) -> bool:
    """True when idle + releasing GPU capacity (`have`, computed if not given) covers the job's next tasks."""
    need = sum(t.gpu_milli(None, ssn.min_gpu_memory) for t in job.tasks_to_allocate())
    return (allocatable_gpus(ssn) if have is None else have) >= need


# -- the action -------------------------------------------------------------------------------------------
def run(ssn: Session) -> None:
    """The consolidation action."""
    if disabled(ssn):
        return
    limit = ssn.config.max_consolidation_preemptees
    order = JobsByQueue(ssn, candidate_jobs(ssn, preemptible_only=True, evicting=True))
    # Built at the first search: nothing is committed before it, so it is the index of the session as
    # opened, and a cycle whose pending jobs all found room (most live cycles) never scans the running jobs.
    index: ConsolidationIndex | None = None
    failed = FailedJobs(ssn)
    have: int | None = None  # scanned on first need; only a committed consolidation changes it
    while (job := order.pop()) is not None:
        if not failed.worth_trying(job):
            continue
        if have is None:
            have = allocatable_gpus(ssn)
        if not enough_gpus(ssn, job, have):
            failed.record(job)
            continue
        if index is None:
            index = ConsolidationIndex(ssn)
        stmt = solve(ssn, job, limit, index)
        if stmt is None:
            failed.record(job)
            continue
        # Victims put back where they were (evicted, then un-evicted) leave no operation behind.
        ops = stmt.ops
        touched = {op.task.job.uid: op.task.job for op in ops}.values()
        undone = {op.task.uid for op in ops if op.kind == "unevict"}
        evicted = [op.task for op in ops if op.kind == "evict"]
        stmt.ops = [op for op in ops if op.task.uid not in undone]
        stmt.commit()
        for t in evicted:
            t.virtual = False  # moved for real now (or back where it was), no longer a what-if
        index.refresh(touched)
        have = None
