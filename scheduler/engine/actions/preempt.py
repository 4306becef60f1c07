"""preempt: a pending job evicts lower-priority preemptible jobs of its own queue.

Jobs are tried in queue order. A non-preemptible job that would take its queue's non-preemptible allocation
over quota is skipped. Victims are preemptible jobs of the same queue with strictly lower priority that hold
active tasks and are not protected by min-runtime. The shared solver picks them and the min-runtime
validator judges each scenario; on success the victims are evicted and the preemptor is pipelined. A job with a
topology constraint is placed within its domains (docs/topology.md).
"""

from __future__ import annotations

from scheduler.engine import minruntime
from scheduler.engine.actions.budget import SearchBudget
from scheduler.engine.actions.common import non_preemptible_over_quota, tasks_vec
from scheduler.engine.actions.jobindex import JobIndex
from scheduler.engine.actions.signatures import run_per_job
from scheduler.engine.actions.solver import Scenario, Solver, Victims, finish
from scheduler.engine.session import JobInfo, Session, TaskInfo

NAME = "preempt"


def victims_for(ssn: Session, job: JobInfo) -> list[JobInfo]:
    """Jobs `job` may preempt: same queue, preemptible, strictly lower priority, running, not protected."""
    return [
        v
        for v in ssn.jobs
        if v is not job
        and v.queue is job.queue
        and v.preemptible
        and v.priority < job.priority
        and v.active_allocated() > 0
        and minruntime.preempt_victim_filter(ssn, v)
    ]


def victims(index: JobIndex, ssn: Session, job: JobInfo) -> Victims:
    """:func:`victims_for` as a lazy filter over the action's job index."""

    def skip(v: JobInfo) -> bool:
        return v is job or v.priority >= job.priority or not minruntime.preempt_victim_filter(ssn, v)

    return Victims((job.queue.name,) if job.queue is not None else (), skip)


def attempt(ssn: Session, job: JobInfo, index: JobIndex | None = None) -> bool:
    """Try to preempt for one job; commits and returns True on success, leaves no trace otherwise."""
    return within_quota(ssn, job) and _solve(ssn, job, index or JobIndex.of(ssn))


def _solve(ssn: Session, job: JobInfo, index: JobIndex) -> bool:
    def validate(s: Session, scenario: Scenario) -> bool:
        return minruntime.elastic_scenario_ok(
            scenario.victims(), scenario.victim_jobs(), lambda v: minruntime.preempt_protected(s, v)
        )

    def reason(t: TaskInfo) -> str:
        return f"Pod {t.name} was preempted by higher priority workload {job.name}"

    stmt = Solver(ssn, validate, NAME, reason, index).solve(job, victims(index, ssn, job))
    if stmt is None:
        return False
    finish(stmt, index)
    return True


def within_quota(ssn: Session, job: JobInfo) -> bool:
    """A non-preemptible preemptor must stay within its queues' non-preemptible quota."""
    return (
        job.preemptible
        or non_preemptible_over_quota(ssn, job, tasks_vec(ssn, job.tasks_to_allocate())) is None
    )


def run(ssn: Session) -> None:
    """The preempt action."""
    budget = SearchBudget.of(ssn, NAME)
    run_per_job(ssn, within_quota, lambda s, job: _solve(s, job, JobIndex.of(s)), budget, NAME)
