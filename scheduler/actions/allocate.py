"""allocate: place pending jobs on free capacity, gang by gang, in DRF queue order. Never evicts."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.actions.common import candidate_jobs, over_capacity, should_pipeline_job
from scheduler.ordering import JobsByQueue
from scheduler.placement import allocate_task
from scheduler.session import JobInfo, NodeInfo, Session, Statement
from scheduler.state import PodStatus

NAME = "allocate"


def allocate_job(
    ssn: Session,
    stmt: Statement,
    job: JobInfo,
    nodes: Sequence[NodeInfo],
    action: str,
    pipeline_only: bool = False,
    record_errors: bool = True,
) -> bool:
    """Place the job's next tasks (to minAvailable, or one elastic extra) all or nothing."""
    tasks = job.tasks_to_allocate(include_virtual=pipeline_only)
    if not tasks:
        return False
    over = over_capacity(ssn, job, tasks)
    if over is not None:
        if record_errors:
            job.fit_error(over[0], over[1])
        return False
    cp = stmt.checkpoint()
    for placed, task in enumerate(tasks):
        err = allocate_task(ssn, stmt, task, nodes, action, pipeline_only)
        if err is not None:
            stmt.rollback(cp)
            if record_errors:
                m = job.min_available
                running = sum(1 for t in job.tasks if t.status in (PodStatus.RUNNING, PodStatus.ALLOCATED))
                if m > 1 and running < m:
                    job.fit_error(
                        "PodSchedulingErrors",
                        f"Resources were found for {placed} pods while {m} are required for gang scheduling. "
                        f"Additional pods cannot be scheduled due to: {err}",
                        task=task.name,
                    )
                else:
                    job.fit_error(
                        "PodSchedulingErrors",
                        f"Resources were not found for pod {task.name} due to: {err}",
                        task=task.name,
                    )
            return False
    return True


def run(ssn: Session) -> None:
    """The allocate action."""
    order = JobsByQueue(ssn, candidate_jobs(ssn))
    while (job := order.pop()) is not None:
        stmt = ssn.statement()
        already = job.active_allocated() > 0
        if allocate_job(ssn, stmt, job, ssn.nodes, NAME):
            pipelined = should_pipeline_job(job)
            if pipelined:
                stmt.convert_to_pipelined(job, NAME)
            stmt.commit()
            if not pipelined and not already:
                job.last_start_ms = ssn.now_ms
            if job.has_tasks_to_allocate():
                order.push(job)
        else:
            stmt.discard()
