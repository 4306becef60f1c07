"""Min-runtime protection: a job that started recently may not be preempted or reclaimed yet.

A job is protected while ``now < last_start + min_runtime``; a job that never started is never protected.
Where the min-runtime comes from:

* preempt: the first queue, walking up from the victim's leaf queue, that sets ``preempt_min_runtime_ms``;
  else the session default.
* reclaim, ``queue`` method: the same walk over ``reclaim_min_runtime_ms``.
* reclaim, ``lca`` method (the default): find the lowest common ancestor of the reclaimer's and the victim's
  queues, step one level down toward the victim and walk up from there. Queues above that step are shared
  with the reclaimer, so their settings describe the reclaimer's own side only from the LCA down.

A protected non-elastic victim is filtered out entirely. An elastic victim always passes the filter; the
scenario validator then refuses any scenario that would take a protected elastic victim below its minimum.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from scheduler.engine.session import ACTIVE_ALLOCATED, JobInfo, QueueInfo, Session, TaskInfo

LCA = "lca"
QUEUE = "queue"


def _preempt_value(q: QueueInfo) -> int | None:
    return q.spec.preempt_min_runtime_ms


def _reclaim_value(q: QueueInfo) -> int | None:
    return q.spec.reclaim_min_runtime_ms


def _walk_up(start: QueueInfo, value: Callable[[QueueInfo], int | None], default: int) -> int:
    for q in start.ancestors():
        v = value(q)
        if v is not None:
            return max(v, 0)
    return default


def _path(q: QueueInfo) -> list[QueueInfo]:
    """Root first, `q` last."""
    return list(q.ancestors())[::-1]


def preempt_min_runtime_ms(ssn: Session, victim_queue: QueueInfo) -> int:
    """The preempt min-runtime that protects jobs of `victim_queue`."""
    return _walk_up(victim_queue, _preempt_value, max(ssn.config.default_preempt_min_runtime_ms, 0))


def reclaim_min_runtime_ms(
    ssn: Session, reclaimer_queue: QueueInfo, victim_queue: QueueInfo, method: str = LCA
) -> int:
    """The reclaim min-runtime that protects jobs of `victim_queue` from a reclaimer in `reclaimer_queue`."""
    default = max(ssn.config.default_reclaim_min_runtime_ms, 0)
    if method == QUEUE:
        return _walk_up(victim_queue, _reclaim_value, default)
    rp, vp = _path(reclaimer_queue), _path(victim_queue)
    if rp[0] is not vp[0]:
        # Different trees: only the victim's top-level queue speaks for the victim side.
        v = _reclaim_value(vp[0])
        return default if v is None else max(v, 0)
    i = 0
    while i < len(rp) and i < len(vp) and rp[i] is vp[i]:
        i += 1
    start = vp[min(i, len(vp) - 1)]
    return _walk_up(start, _reclaim_value, default)


def is_protected(ssn: Session, job: JobInfo, min_runtime_ms: int) -> bool:
    """True while the job has run for less than `min_runtime_ms` since it last started."""
    return job.last_start_ms is not None and ssn.now_ms < job.last_start_ms + min_runtime_ms


def is_elastic(job: JobInfo) -> bool:
    """A job with more pods than its gang minimum."""
    return len(job.tasks) > job.min_available


def _resolve_method(ssn: Session) -> str:
    method = str(getattr(ssn.config, "reclaim_resolve_method", LCA))
    return method if method in (LCA, QUEUE) else LCA


def reclaim_protected(ssn: Session, reclaimer: JobInfo, victim: JobInfo) -> bool:
    """True when `victim` is still protected from being reclaimed by `reclaimer`."""
    if reclaimer.queue is None or victim.queue is None:
        return False
    mr = reclaim_min_runtime_ms(ssn, reclaimer.queue, victim.queue, _resolve_method(ssn))
    return is_protected(ssn, victim, mr)


def preempt_protected(ssn: Session, victim: JobInfo) -> bool:
    """True when `victim` is still protected from preemption."""
    if victim.queue is None:
        return False
    return is_protected(ssn, victim, preempt_min_runtime_ms(ssn, victim.queue))


def reclaim_victim_filter(ssn: Session, reclaimer: JobInfo, victim: JobInfo) -> bool:
    """May `victim` be considered for reclaim at all? Elastic victims always may (see the validator)."""
    return is_elastic(victim) or not reclaim_protected(ssn, reclaimer, victim)


def preempt_victim_filter(ssn: Session, victim: JobInfo) -> bool:
    """May `victim` be considered for preemption at all? Elastic victims always may (see the validator)."""
    return is_elastic(victim) or not preempt_protected(ssn, victim)


def _keeps_minimum(victim: JobInfo, evicted: Sequence[TaskInfo]) -> bool:
    # Count against the tasks the victim had before the simulation moved anything.
    before = sum(1 for t in victim.tasks if t.orig_status in ACTIVE_ALLOCATED)
    return before - len(evicted) >= victim.min_available


def elastic_scenario_ok(
    victims: Mapping[str, Sequence[TaskInfo]],
    jobs: Mapping[str, JobInfo],
    protected: Callable[[JobInfo], bool],
) -> bool:
    """False when a protected elastic victim would be left below its minimum."""
    for uid, tasks in victims.items():
        job = jobs[uid]
        if is_elastic(job) and protected(job) and not _keeps_minimum(job, tasks):
            return False
    return True
