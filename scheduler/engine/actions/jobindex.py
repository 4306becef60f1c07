"""Sorted views of a session's jobs that reclaim and preempt keep across attempts.

Before this index every attempt of reclaim or preempt scanned all jobs for victims, heaped them in victim
order and heaped every pending job of the queues involved in each simulation: O(jobs · log jobs) per
attempt, so an action with thousands of attempts was quadratic (reclaim did not finish at 1,000 nodes).
The index sorts once per action and is told which jobs an attempt changed; orderings then read its lists
lazily (:data:`scheduler.engine.ordering.Run`), so an attempt pays for the jobs it actually looks at.

* ``victims[leaf]``: jobs that could be anybody's victim -- preemptible, holding an active task -- in
  ascending :meth:`~scheduler.engine.session.JobInfo.sort_key` (victim order reads it from the end).
  Who may take them (other queue, lower priority, min-runtime) is each action's filter, applied on read.
* ``pending[leaf]``: jobs an action may try (:func:`~scheduler.engine.actions.common.candidate_jobs`), in
  job order.
* ``gpu_held[queue]``: milli-GPUs the victim-eligible jobs of a queue hold: a cheap upper bound on what
  evicting them can free.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from scheduler.engine.session import ACTIVE_ALLOCATED, JobInfo, Session

Entry = tuple[tuple[object, ...], JobInfo]


def _victim_eligible(job: JobInfo) -> bool:
    return job.queue is not None and job.preemptible and job.active_allocated() > 0


def _pending_eligible(job: JobInfo) -> bool:
    q = job.queue
    return q is not None and q.is_leaf and job.has_tasks_to_allocate() and job.is_ready()


class JobIndex:
    """Victim and pending jobs per leaf queue, sorted, kept current through :meth:`refresh`."""

    @classmethod
    def of(cls, ssn: Session) -> JobIndex:
        """The session's index, built on first use and shared by the actions while it is current: any
        change it was not told about (another action placed or evicted something) makes a new one."""
        cached = ssn.action_cache.get("job-index")
        if isinstance(cached, JobIndex) and cached.commits == ssn.commits:
            return cached
        index = cls(ssn)
        ssn.action_cache["job-index"] = index
        return index

    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn
        self.commits = ssn.commits  # the committed state this index reflects
        self.victims: dict[str, list[Entry]] = {}
        self.pending: dict[str, list[Entry]] = {}
        self.gpu_held: dict[str, int] = {}
        # The key and GPUs each job was filed under, to find and remove it again.
        self._victim_at: dict[str, tuple[tuple[object, ...], int]] = {}
        self._pending_at: dict[str, tuple[object, ...]] = {}
        vic: dict[str, list[Entry]] = {}
        pen: dict[str, list[Entry]] = {}
        for job in ssn.jobs:
            if job.queue is None:
                continue
            key: tuple[object, ...] | None = None
            if _victim_eligible(job):
                key = job.sort_key()
                gpus = self._gpus(job)
                vic.setdefault(job.queue.name, []).append((key, job))
                self._victim_at[job.uid] = (key, gpus)
                self.gpu_held[job.queue.name] = self.gpu_held.get(job.queue.name, 0) + gpus
            if _pending_eligible(job):
                key = key or job.sort_key()
                pen.setdefault(job.queue.name, []).append((key, job))
                self._pending_at[job.uid] = key
        for name, entries in vic.items():
            self.victims[name] = sorted(entries, key=lambda e: e[0])
        for name, entries in pen.items():
            self.pending[name] = sorted(entries, key=lambda e: e[0])

    def _gpus(self, job: JobInfo) -> int:
        return sum(self.ssn.task_vec(t)[0] for t in job.tasks if t.status in ACTIVE_ALLOCATED)

    def refresh(self, jobs: Iterable[JobInfo]) -> None:
        """Re-file `jobs` after a committed change to their tasks (in a fixed order: by job index).

        The caller vouches that no other job changed since the index was current."""
        self.commits = self.ssn.commits
        for job in sorted({j.uid: j for j in jobs}.values(), key=lambda j: j.index):
            if job.queue is None:
                continue
            name = job.queue.name
            old = self._victim_at.pop(job.uid, None)
            if old is not None:
                _remove(self.victims[name], old[0])
                self.gpu_held[name] -= old[1]
            old_key = self._pending_at.pop(job.uid, None)
            if old_key is not None:
                _remove(self.pending[name], old_key)
            key: tuple[object, ...] | None = None
            if _victim_eligible(job):
                key = job.sort_key()
                gpus = self._gpus(job)
                bisect.insort(self.victims.setdefault(name, []), (key, job), key=lambda e: e[0])
                self._victim_at[job.uid] = (key, gpus)
                self.gpu_held[name] = self.gpu_held.get(name, 0) + gpus
            if _pending_eligible(job):
                key = key or job.sort_key()
                bisect.insort(self.pending.setdefault(name, []), (key, job), key=lambda e: e[0])
                self._pending_at[job.uid] = key


def _remove(entries: list[Entry], key: tuple[object, ...]) -> None:
    i = bisect.bisect_left(entries, key, key=lambda e: e[0])
    assert i < len(entries) and entries[i][0] == key, "job index out of step with the session"
    del entries[i]
