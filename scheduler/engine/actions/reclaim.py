"""reclaim: a job whose queue is below its fair share takes resources back from queues above theirs.

Jobs are tried in queue order. A job is considered only if its queue, with the job's next tasks, stays within
its fair share (:func:`scheduler.engine.reclaimable.can_reclaim`). Victims are preemptible jobs of *other* queues
that hold active tasks and are not protected by min-runtime. The shared solver picks them; the proportion
validator (:func:`scheduler.engine.reclaimable.reclaimable`) and the min-runtime validator judge each scenario. On
success the victims are evicted and the reclaimer's tasks are pipelined onto the capacity they free. A job with
a topology constraint is placed within its domains, so a reclaim may free a whole rack for it (docs/topology.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from scheduler.engine import minruntime
from scheduler.engine.actions.budget import SearchBudget
from scheduler.engine.actions.jobindex import JobIndex
from scheduler.engine.actions.signatures import run_per_job
from scheduler.engine.actions.solver import Scenario, Solver, Victims, finish
from scheduler.engine.ordering import job_init_resources
from scheduler.engine.reclaimable import (
    EvictedTotals,
    LossTracker,
    QueueSnapshot,
    can_reclaim,
    loss_always_refused,
    loss_never_refused_at_boundary,
    loss_refused_at_boundary,
    reclaimable,
    snapshot,
)
from scheduler.engine.session import JobInfo, QueueInfo, Session, TaskInfo

NAME = "reclaim"


def victims_for(ssn: Session, job: JobInfo) -> list[JobInfo]:
    """Jobs `job` may reclaim from: other queues, preemptible, running something, not min-runtime protected."""
    return [
        v
        for v in ssn.jobs
        if v.queue is not None
        and v.queue is not job.queue
        and v.preemptible
        and v.active_allocated() > 0
        and minruntime.reclaim_victim_filter(ssn, job, v)
    ]


def victims(index: JobIndex, ssn: Session, job: JobInfo) -> Victims:
    """:func:`victims_for` as a lazy filter over the action's job index."""
    own = job.queue

    def skip(v: JobInfo) -> bool:
        return v.queue is own or not minruntime.reclaim_victim_filter(ssn, job, v)

    return Victims(tuple(n for n in sorted(index.victims) if own is None or n != own.name), skip)


def attempt(ssn: Session, job: JobInfo, index: JobIndex | None = None) -> bool:
    """Try to reclaim for one job; commits and returns True on success, leaves no trace otherwise.

    `index` is the action's :class:`JobIndex` (built here when the caller tries a single job).
    """
    index = index or JobIndex.of(ssn)
    snap = _snapshot(ssn)

    def validate(s: Session, scenario: Scenario) -> bool:
        victims = scenario.victims()
        jobs = scenario.victim_jobs()
        if not reclaimable(s, snap, job, scenario.requested, [(jobs[u], ts) for u, ts in victims.items()]):
            return False
        return minruntime.elastic_scenario_ok(
            victims, jobs, lambda v: minruntime.reclaim_protected(s, job, v)
        )

    def reason(t: TaskInfo) -> str:
        return f"Pod {t.name} was preempted by workload {job.name}."

    refused: dict[tuple[object, ...], bool] = {}

    def must_keep(vq: QueueInfo | None, req: list[int]) -> bool:
        if job.queue is None or vq is None:
            return False
        key = (vq.name, *req)
        out = refused.get(key)
        if out is None:
            out = refused[key] = loss_always_refused(snap, job.queue, req, vq)
        return out

    totals: list[EvictedTotals] = []  # of the evicted list asked about last (each simulation asks many times)
    # loss_refused_at_boundary reads of a victim only its queue and the least of its evicted tasks per
    # resource: its answers for one evicted list and request, by those.
    answers: dict[tuple[object, ...], bool] = {}
    per_job: dict[tuple[object, ...], bool] = {}  # the same answers by victim, for one evicted list

    # Per victim queue, for the request asked about last: whether no evicted list can make the boundary
    # refuse a loss there (the check below is then not worth its totals).
    never: dict[str, bool] = {}
    never_req: list[int] = []

    def keep_in(v: JobInfo, req: list[int], evicted: Sequence[TaskInfo]) -> bool:
        vq = v.queue
        if vq is not None:
            if req != never_req:
                never.clear()
                never_req[:] = req
            nv = never.get(vq.name)
            if nv is None:
                nv = never[vq.name] = loss_never_refused_at_boundary(snap, job, req, vq)
            if nv:
                return False
        if not totals or totals[0].evicted is not evicted:
            totals[:] = [EvictedTotals(ssn, evicted)]
            answers.clear()
            per_job.clear()
        mine = (v.uid, *req)
        known = per_job.get(mine)
        if known is not None:
            return known
        per_job[mine] = out = _keep_in(v, req, evicted)
        return out

    def _keep_in(v: JobInfo, req: list[int], evicted: Sequence[TaskInfo]) -> bool:
        own = totals[0].own(v)
        if v.queue is None or not own:
            return loss_refused_at_boundary(ssn, snap, job, req, v, evicted, totals[0])
        if len(own) == 1:
            least = own[0]
            key: tuple[object, ...] = (v.queue.name, *req, least[0], least[1], least[2])
        else:
            key = (v.queue.name, *req, *(min(x[r] for x in own) for r in range(3)))
        out = answers.get(key)
        if out is None:
            out = answers[key] = loss_refused_at_boundary(ssn, snap, job, req, v, evicted, totals[0])
        return out

    def doomed(evicted: list[TaskInfo], req: list[int]) -> LossTracker:
        return LossTracker(ssn, snap, job, req, evicted)

    def keeps_none(vq: QueueInfo | None, req: list[int]) -> bool:
        return (
            vq is not None and not must_keep(vq, req) and loss_never_refused_at_boundary(snap, job, req, vq)
        )

    solver = Solver(ssn, validate, NAME, reason, index, must_keep, keep_in, doomed, keeps_none)
    stmt = solver.solve(job, victims(index, ssn, job))
    if stmt is None:
        return False
    finish(stmt, index)
    return True


def _snapshot(ssn: Session) -> QueueSnapshot:
    """The queue allocation snapshot, shared by consecutive attempts while nothing moved (the session's
    version counts every move, virtual ones included), e.g. the many attempts a spent budget refuses."""
    found = ssn.action_cache.get("reclaim.snapshot")
    if isinstance(found, tuple) and found[0] == ssn.version:
        return cast(QueueSnapshot, found[1])
    snap = snapshot(ssn)
    ssn.action_cache["reclaim.snapshot"] = (ssn.version, snap)
    return snap


def run(ssn: Session) -> None:
    """The reclaim action."""
    budget = SearchBudget.of(ssn, NAME)
    run_per_job(
        ssn,
        lambda s, job: can_reclaim(s, job, job_init_resources(s, job)),
        lambda s, job: attempt(s, job, JobIndex.of(s)),
        budget,
        NAME,
    )
