"""KAI's scheduling signatures (``common/minimal_job_comparison.go``): skip jobs no easier than a failed one.

When a job fails in reclaim, preempt or consolidation it becomes the representative of its constraints
signature. A later job with the same signature is tried only if it is "easier": fewer pending pods, or
sorted per-pod requests that are ≤ element-wise and < somewhere. Reclaim and preempt keep one table per
queue; consolidation keeps one for the whole action. Signatures are plain tuples used as dict keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from scheduler.engine.actions.budget import SearchBudget
from scheduler.engine.actions.common import candidate_jobs
from scheduler.engine.ordering import JobsByQueue
from scheduler.engine.session import ACTIVE_ALLOCATED, JobInfo, Session, TaskInfo
from scheduler.engine.state import LabelSelector, PodStatus

Signature = tuple[str, ...]
ReqVec = tuple[int, ...]


OWN = "<own label value>"


def _shape(sel: LabelSelector, labels: Mapping[str, str]) -> LabelSelector:
    """A selector with the values the pod's own labels carry replaced by a marker: jobs whose terms select
    their own pods the same way (anti-affinity or spread among a job's replicas) share a signature, as
    their terms have the same shape; terms naming anything else stay apart."""

    def value(key: str, v: str) -> str:
        return OWN if labels.get(key) == v else v

    return LabelSelector(
        tuple((k, value(k, v)) for k, v in sel.match_labels),
        tuple(replace(e, values=tuple(value(e.key, v) for v in e.values)) for e in sel.match_expressions),
        sel.nothing,
    )


def _pod_signature(t: TaskInfo) -> str:
    p = t.pod
    base = (t.job.priority, sorted(p.node_selector.items()), p.allowed_nodes, p.affinity, p.tolerations)
    # Every other constraint KAI hashes (host ports, pod (anti-)affinity, spread, storage claims) and the
    # names of the resources compared in `_requests`: a job needing a port, a claim or an RDMA device must
    # not stand for one that needs none. Each is added only when present, so the keys of jobs without
    # them are unchanged.
    extra: list[object] = []
    if p.host_ports:
        extra.append(("ports", p.host_ports))
    if p.pod_affinity or p.pod_anti_affinity:
        own = p.labels
        extra.append(
            (
                "pod-affinity",
                tuple(replace(x, selector=_shape(x.selector, own)) for x in p.pod_affinity),
                tuple(replace(x, selector=_shape(x.selector, own)) for x in p.pod_anti_affinity),
            )
        )
    if p.topology_spread:
        extra.append(
            ("spread", tuple(replace(c, selector=_shape(c.selector, p.labels)) for c in p.topology_spread))
        )
    if p.volumes:
        extra.append(("volumes", p.volumes))
    if p.disks:
        extra.append(("disks", p.disks))
    r = t.request
    if r.extended or r.gpu_fraction_devices != 1:
        extra.append(("resources", tuple(k for k, _ in r.extended), r.gpu_fraction_devices))
    return repr((*base, *extra)) if extra else repr(base)


def signature(job: JobInfo) -> Signature:
    """The constraints of the job's not-yet-allocated pods (one entry per pod, sorted), then the job's
    topology constraint if it has one (KAI hashes the PodSet's topology constraint in too)."""
    pods = tuple(sorted(_pod_signature(t) for t in job.tasks if t.status not in ACTIVE_ALLOCATED))
    spec = job.spec
    nested = [
        (sg.name, sg.parent, sg.min_member, sg.topology, sg.required_level, sg.preferred_level)
        for sg in spec.subgroups
        if sg.topology is not None and (sg.required_level is not None or sg.preferred_level is not None)
    ]
    if nested:  # each PodSet's own constraint too (only jobs with such subgroups: others keep their keys)
        pods = (*pods, repr(("subgroups", sorted(nested, key=repr))))
    if spec.topology is None or (spec.required_level is None and spec.preferred_level is None):
        return pods
    return (*pods, repr(("topology", spec.topology, spec.required_level, spec.preferred_level)))


def _requests(ssn: Session, job: JobInfo) -> list[ReqVec]:
    out = []
    for t in job.tasks:
        if t.status is PodStatus.PENDING:
            r = t.request
            # The full resource vector: extended resources' names are in the signature, so jobs of one
            # signature have the same names in the same order and their amounts compare element-wise.
            base = (t.gpu_milli(None, ssn.min_gpu_memory), r.gpu_memory_mib or 0, r.cpu, r.memory)
            out.append((*base, *(v for _, v in r.extended)))
    return sorted(out)


def _le(a: ReqVec, b: ReqVec) -> bool:
    # Vectors of different lengths (pods of one job asking for different extended resources) compare as
    # neither smaller nor larger.
    return len(a) == len(b) and all(x <= y for x, y in zip(a, b, strict=True))


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
    """The smallest failed job per signature: a later job with that signature is tried only if easier.

    With ``per_queue`` (reclaim, preempt) each leaf queue has its own table; otherwise (consolidation)
    there is one table for the whole action.
    """

    def __init__(self, ssn: Session, per_queue: bool = False) -> None:
        self.ssn = ssn
        self.per_queue = per_queue
        self._reps: dict[tuple[str, Signature], JobInfo] = {}

    def _key(self, job: JobInfo) -> tuple[str, Signature]:
        scope = job.queue.name if self.per_queue and job.queue is not None else ""
        return (scope, signature(job))

    def __bool__(self) -> bool:
        """Whether any job was recorded (else no signature needs computing)."""
        return bool(self._reps)

    def worth_trying(self, job: JobInfo) -> bool:
        return self.representative(job) is None

    def representative(self, job: JobInfo) -> JobInfo | None:
        """The recorded job that makes `job` not worth trying (same signature, `job` not easier), if any."""
        rep = self._reps.get(self._key(job))
        return None if rep is None or easier(self.ssn, job, rep) else rep

    def record(self, job: JobInfo) -> None:
        key = self._key(job)
        rep = self._reps.get(key)
        if rep is None or smaller_footprint(self.ssn, job, rep):
            self._reps[key] = job


#: How a job's victim search ended, in KAI's words (its ``scenario_search_*`` metrics' ``result`` label):
#: the action scheduled the job; a search budget cut it; every scenario was tried and none passed.
SEARCH_RESULTS: tuple[str, str, str] = ("solved", "deadline_exhausted", "generators_exhausted")
SOLVED, CUT, EXHAUSTED = SEARCH_RESULTS


def run_per_job(
    ssn: Session,
    gate: Callable[[Session, JobInfo], bool],
    attempt: Callable[[Session, JobInfo], bool],
    budget: SearchBudget | None = None,
    action: str = "",
) -> None:
    """The reclaim / preempt loop: candidate jobs in queue order, each tried once.

    A job no easier than one that already failed in its queue is skipped (scheduling signatures). A job
    stopped by `gate` (a cheap pre-check) is not recorded as failed: only a solver failure says the
    signature is hopeless. Nor is a job whose search the `budget` cut: it was not proven hopeless. It is
    kept in a table of its own instead, and a later job of its queue no easier than it is not searched
    either (the budget would be spent on the same search) but told why, naming the job that was cut.

    The session's observer (``ssn.on_step``, :data:`scheduler.engine.cycle.StepHook`) is told, under
    `action`'s name, as each search begins and how it ended.
    """
    order = JobsByQueue(ssn, candidate_jobs(ssn, evicting=True))
    failed = FailedJobs(ssn, per_queue=True)
    cut = FailedJobs(ssn, per_queue=True)
    while (job := order.pop()) is not None:
        if (failed and not failed.worth_trying(job)) or not gate(ssn, job):
            continue
        if budget is not None and cut and (rep := cut.representative(job)) is not None:
            budget.explain_like(job, rep)
            continue
        observe = ssn.on_step if action else None
        if observe is not None:
            observe(f"{action}/search")
        solved = attempt(ssn, job)
        stopped = not solved and budget is not None and budget.stopped
        if observe is not None:
            result = SOLVED if solved else CUT if stopped else EXHAUSTED
            observe(f"{action}/search/{result}")
        if solved:
            continue
        if stopped:
            cut.record(job)
        else:
            failed.record(job)
