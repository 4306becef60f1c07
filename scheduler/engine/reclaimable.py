"""The proportion plugin's side of reclaim: may a queue reclaim, and is a set of victims fair to take?

* :func:`can_reclaim` is the gate: the reclaimer's queue, with the job's next tasks, must stay within its
  fair share (and a non-preemptible job within its queue's deserved quota).
* :func:`reclaimable` judges a scenario against a snapshot of the queues taken when the job's solve began.
  Each victim job is split into chunks (each elastic task beyond minAvailable alone, the core tasks
  together). Before a chunk is taken, the queue on the victim's side where the two queue paths diverge must
  be reclaimable by one of two strategies: it holds more than its allocatable share (MaintainFairShare), or
  the reclaimer stays within deserved while the victim side is above deserved (GuaranteeDeservedQuota).
  After all chunks the reclaimer, at every level, may end above its fair share only while it stays strictly
  below the saturation ratio (allocated / fair share) of each sibling it took from.

Quantities are engine vectors (milli-GPU, millicores, bytes); ``None`` limits mean unlimited.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.engine.session import JobInfo, QueueInfo, Session, TaskInfo, Vec
from scheduler.engine.state import PodStatus

_INF = math.inf


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """Allocation counters of every queue at one moment (KAI's per-job copy of the queue attributes)."""

    allocated: dict[str, Vec]
    allocated_np: dict[str, Vec]


def snapshot(ssn: Session) -> QueueSnapshot:
    """Copy the live queue allocation counters."""
    return QueueSnapshot(
        {n: list(q.allocated) for n, q in ssn.queues.items()},
        {n: list(q.allocated_np) for n, q in ssn.queues.items()},
    )


def _add(a: Vec, b: Vec) -> Vec:
    return [x + y for x, y in zip(a, b, strict=True)]


def _le(a: Vec, b: Sequence[int | None]) -> bool:
    """a <= b in every resource; None in b is unlimited."""
    return all(y is None or x <= y for x, y in zip(a, b, strict=True))


def _deserved(q: QueueInfo) -> list[int | None]:
    return [q.deserved(r) for r in range(3)]


def non_preemptible_fits(q: QueueInfo, allocated_np: Vec, req: Vec) -> bool:
    """A non-preemptible job keeps its queue's non-preemptible allocation within deserved."""
    return _le(_add(allocated_np, req), _deserved(q))


def can_reclaim(ssn: Session, job: JobInfo, req: Vec) -> bool:
    """KAI's CanReclaimResources: reclaim is tried only while the queue stays within its fair share."""
    q = job.queue
    if q is None:
        return False
    if not _le(_add(q.allocated, req), q.fair_share):
        return False
    return job.preemptible or non_preemptible_fits(q, q.allocated_np, req)


def _path(q: QueueInfo) -> list[QueueInfo]:
    return list(q.ancestors())[::-1]


def leveled_queues(reclaimer: QueueInfo, reclaimee: QueueInfo) -> tuple[QueueInfo, QueueInfo]:
    """The two queues where the reclaimer's and the reclaimee's paths from the root first differ."""
    rp, vp = _path(reclaimer), _path(reclaimee)
    a, b = rp[0], vp[0]
    for i in range(min(len(rp), len(vp))):
        a, b = rp[i], vp[i]
        if a is not b:
            break
    return a, b


def maintain_fair_share(reclaimee: QueueInfo, remaining: Vec) -> bool:
    """The reclaimee side holds more than its allocatable share in some resource."""
    return not _le(remaining, [reclaimee.allocatable_share(r) for r in range(3)])


def guarantee_deserved_quota(
    reclaimer: QueueInfo, reclaimer_allocated: Vec, req: Vec, reclaimee: QueueInfo, remaining: Vec
) -> bool:
    """The reclaimer stays within deserved with the job, and the reclaimee side is above its deserved."""
    if not _le(_add(reclaimer_allocated, req), _deserved(reclaimer)):
        return False
    return not _le(remaining, _deserved(reclaimee))


def loss_always_refused(snap: QueueSnapshot, reclaimer: QueueInfo, req: Vec, victim: QueueInfo) -> bool:
    """True when :func:`reclaimable` refuses every scenario that loses a task of a job in `victim`.

    Each lost chunk is judged against the victim side's remaining allocation, which starts at the
    snapshot and only shrinks; both strategies ask for that side to be above a fixed line (allocatable
    share, or deserved with the reclaimer within its deserved). If neither holds at the snapshot, neither
    holds for any scenario. The solver uses it as a bound: such a victim frees nothing for good.
    """
    lr, lv = leveled_queues(reclaimer, victim)
    alloc = snap.allocated[lv.name]
    return not maintain_fair_share(lv, alloc) and not guarantee_deserved_quota(
        lr, snap.allocated[lr.name], req, lv, alloc
    )


class EvictedTotals:
    """What one list of evicted tasks holds, valued once: per victim job, and in total under a queue.

    :func:`loss_refused_at_boundary` is asked about many victims of one simulation, each time with the same
    `evicted`; these totals spare it a pass over every evicted task per victim. The tasks are valued as
    they are held when first read, which that function's argument allows.
    """

    def __init__(self, ssn: Session, evicted: Sequence[TaskInfo]) -> None:
        self.evicted = evicted
        self._vecs = [(t, ssn.task_vec(t)) for t in evicted]
        self._own: dict[int, list[Vec]] = {}
        for t, v in self._vecs:
            self._own.setdefault(id(t.job), []).append(v)
        self._under: dict[str, Vec] = {}

    def own(self, job: JobInfo) -> list[Vec]:
        """The vectors of `job`'s evicted tasks (by job object, as the evicted tasks refer to it)."""
        return self._own.get(id(job), [])

    def under(self, q: QueueInfo) -> Vec:
        """The total of the evicted tasks whose queue is `q` or below it."""
        out = self._under.get(q.name)
        if out is None:
            out = [0, 0, 0]
            for t, tv in self._vecs:
                tq = t.job.queue
                if tq is not None and any(a is q for a in tq.ancestors()):
                    for r in range(3):
                        out[r] += tv[r]
            self._under[q.name] = out
        return out


def loss_refused_at_boundary(
    ssn: Session,
    snap: QueueSnapshot,
    reclaimer_job: JobInfo,
    req: Vec,
    victim: JobInfo,
    evicted: Sequence[TaskInfo],
    totals: EvictedTotals | None = None,
) -> bool:
    """True when :func:`reclaimable` refuses every scenario that evicts at most `evicted` and loses a task
    of the job `victim`: the reclaimer's fair-share boundary (:func:`_within_boundaries`) fails whatever
    else is lost.

    Losing that task puts the victim side's leveled queue ``lv`` among the siblings the boundary checks at
    the reclaimer's level ``lr``, and takes at least the smallest of the victim's evicted tasks from it.
    There the reclaimer's allocation is at least its snapshot less everything `evicted` holds under ``lr``,
    plus the job; the victim side's is at most its snapshot less that smallest task. If even then, in a
    resource the job requests, the reclaimer is above its fair share and its saturation ratio times the
    multiplier reaches the victim side's, every such scenario is refused. A task of `evicted` is valued as
    it is held when this is called (the same where it was evicted from; one already re-placed may be valued
    where it went, which only weakens the bound), or when `totals` (:class:`EvictedTotals` of `evicted`)
    first read it.
    """
    rq, vq = reclaimer_job.queue, victim.queue
    if rq is None:
        return True
    if totals is not None and totals.evicted is not evicted:
        raise ValueError("loss_refused_at_boundary: totals were taken over another evicted list")
    own = totals.own(victim) if totals is not None else [ssn.task_vec(t) for t in evicted if t.job is victim]
    if vq is None or not own:
        return False
    lr, lv = leveled_queues(rq, vq)
    if lr is lv:
        return False
    mine = _add(snap.allocated[lr.name], req)
    if totals is not None:
        held = totals.under(lr)
        for r in range(3):
            mine[r] -= held[r]
    else:
        for t in evicted:
            q = t.job.queue
            if q is not None and any(a is lr for a in q.ancestors()):
                tv = ssn.task_vec(t)
                for r in range(3):
                    mine[r] -= tv[r]
    mult = max(ssn.config.saturation_multiplier, 1.0)
    theirs = snap.allocated[lv.name]
    for r in range(3):
        if req[r] <= 0:
            continue
        least = min(v[r] for v in own)
        ratio_mine = _ratio(mine[r], lr.fair_share[r])
        if (
            ratio_mine > 1
            and lv.fair_share[r] > 0
            and ratio_mine * mult >= _ratio(theirs[r] - least, lv.fair_share[r])
        ):
            return True
    return False


def loss_never_refused_at_boundary(
    snap: QueueSnapshot, reclaimer_job: JobInfo, req: Vec, victim: QueueInfo
) -> bool:
    """True when :func:`loss_refused_at_boundary` is False for every job of queue `victim` and every
    evicted list: in each resource the job requests, either the victim side's leveled queue has no fair
    share, or the reclaimer's level stays within its fair share even before anything evicted under it is
    taken off (which only lowers it)."""
    rq = reclaimer_job.queue
    if rq is None:
        return False
    lr, lv = leveled_queues(rq, victim)
    if lr is lv:
        return True
    alloc = snap.allocated[lr.name]
    return all(
        req[r] <= 0 or lv.fair_share[r] <= 0 or alloc[r] + req[r] <= lr.fair_share[r] for r in range(3)
    )


def refused_whatever_else(
    ssn: Session,
    snap: QueueSnapshot,
    reclaimer_job: JobInfo,
    req: Vec,
    lost: Sequence[tuple[JobInfo, Sequence[TaskInfo]]],
    evicted: Sequence[TaskInfo],
) -> bool:
    """True when :func:`reclaimable` refuses the scenario whatever else it loses: `lost` are the victims
    whose turn has passed, each with its evicted tasks as the validator will see them (final), in the
    order the validator will take them; every other loss is among the tasks of `evicted` still releasing.

    More losses only lower what the victim sides keep, so a chunk refused now stays refused (its check
    reads what its side kept before it), and the reclaimer's fair-share boundary, checked with what the
    victim sides keep now and the reclaimer's own levels lowered by every task still releasing under them,
    stays broken.
    """
    rq = reclaimer_job.queue
    if rq is None:
        return True
    kept = _kept_after(ssn, snap, rq, req, lost)
    if kept is None:
        return True
    remaining, involved = kept
    mult = max(ssn.config.saturation_multiplier, 1.0)
    # What is still releasing, summed per queue first: each level then reads a few queues, not every task.
    releasing: dict[str, tuple[QueueInfo, Vec]] = {}
    for t in evicted:
        tq = t.job.queue
        if t.status is PodStatus.RELEASING and tq is not None:
            acc = releasing.get(tq.name)
            if acc is None:
                acc = releasing[tq.name] = (tq, [0, 0, 0])
            tv = ssn.task_vec(t)
            for r in range(3):
                acc[1][r] += tv[r]
    for level in rq.ancestors():
        if not reclaimer_job.preemptible and not non_preemptible_fits(
            level, snap.allocated_np[level.name], req
        ):
            return True
        mine = _add(snap.allocated[level.name], req)
        for tq, held in releasing.values():
            if any(a is level for a in tq.ancestors()):
                for r in range(3):
                    mine[r] -= held[r]
        if _over_a_sibling(ssn, level, mine, remaining, involved, mult):
            return True
    return False


class LossTracker:
    """:func:`refused_whatever_else` for one simulation, kept up to date as victims' turns pass instead of
    recomputed over every lost victim at each question.

    Built right after the simulation evicted `evicted` (every victim still waiting for its turn); the
    solver then calls :meth:`lose` once per victim whose turn has passed, with its tasks as they stay.

    Chunk checks without an order: a chunk's check asks that its leveled queue ``lv`` keep, before the
    chunk, more than a fixed line in some resource, and only chunks of victims with the same ``lv`` lower
    what ``lv`` keeps (a victim queue below ``lv`` meets the reclaimer's path at ``lv`` too). What ``lv``
    keeps only falls along the validator's order, so every chunk of ``lv`` passes exactly when its last
    one does -- the last chunk of the lost victim latest in `evicted` order, checked against the snapshot
    less all of ``lv``'s lost chunks but that one. So only a total and the latest victim's last chunk are
    kept per ``lv``; a lost victim only lowers what is kept, so a refusal stands for the rest of the
    simulation. The boundary reads what each queue keeps and what is still releasing under each of the
    reclaimer's levels, both kept as sums."""

    def __init__(
        self, ssn: Session, snap: QueueSnapshot, reclaimer_job: JobInfo, req: Vec, evicted: Sequence[TaskInfo]
    ) -> None:
        self.ssn, self.snap, self.job, self.req = ssn, snap, reclaimer_job, req
        self.rq = reclaimer_job.queue
        self._position: dict[str, int] = {}  # victim job uid -> its place in the validator's order
        self._releasing: dict[str, TaskInfo] = {}  # evicted tasks releasing when the tracker was built
        self._release_under: dict[str, Vec] = {}  # releasing, summed under each queue
        for t in evicted:
            self._position.setdefault(t.job.uid, len(self._position))
            tq = t.job.queue
            if t.status is PodStatus.RELEASING and tq is not None and t.uid not in self._releasing:
                self._releasing[t.uid] = t
                self._shift(self._release_under, tq, ssn.task_vec(t), 1)
        self._lost_under: dict[str, Vec] = {}  # lost chunks, summed under each queue
        self._by_lv: dict[str, tuple[QueueInfo, QueueInfo, Vec, int, Vec]] = {}  # lr, lv, total, pos, last
        self._leveled: dict[str, tuple[QueueInfo, QueueInfo]] = {}
        self.involved = [req[r] > 0 for r in range(3)]
        self.lost_releasing = 0  # lost tasks still releasing
        self.chunk_refused = self.rq is None
        self._unchecked: set[str] = set()  # leveled queues whose entry changed since _check_chunks
        self._lost: list[tuple[int, JobInfo, list[TaskInfo]]] = []  # for the general computation
        self._exact = True  # False: refused() falls back to refused_whatever_else
        self._evicted = evicted

    @staticmethod
    def _shift(sums: dict[str, Vec], q: QueueInfo, v: Vec, sign: int) -> None:
        for a in q.ancestors():
            cur = sums.get(a.name)
            if cur is None:
                cur = sums[a.name] = [0, 0, 0]
            for r in range(3):
                cur[r] += sign * v[r]

    def lose(self, job: JobInfo, tasks: Sequence[TaskInfo]) -> None:
        """`job`'s turn has passed: `tasks` are its evicted tasks as they now stay (releasing, pipelined
        elsewhere, or put back where they were)."""
        ssn = self.ssn
        mine: list[TaskInfo] = []
        for t in tasks:
            if t.status is PodStatus.RELEASING:
                self.lost_releasing += 1
                mine.append(t)
                continue
            if t.status is PodStatus.PIPELINED:
                mine.append(t)
            if t.uid in self._releasing and t.job.queue is not None:
                del self._releasing[t.uid]
                self._shift(self._release_under, t.job.queue, ssn.task_vec(t), -1)
        if not mine:
            return  # put back: not a victim any more
        pos = self._position.get(job.uid, len(self._position))
        self._lost.append((pos, job, mine))
        vq, rq = job.queue, self.rq
        if vq is None or rq is None:
            return
        if len(mine) == 1:  # victim_chunks of one task: the task, if it is still releasing
            chunks = [ssn.task_vec(mine[0])] if mine[0].status is PodStatus.RELEASING else []
        else:
            chunks = victim_chunks(ssn, job, mine)
        if not chunks:
            return
        pair = self._leveled.get(vq.name)
        if pair is None:
            pair = self._leveled[vq.name] = leveled_queues(rq, vq)
        lr, lv = pair
        if lr is lv:
            self._exact = False  # paths that do not part: the order-free argument does not apply
        total = [0, 0, 0]
        for chunk in chunks:
            self._shift(self._lost_under, vq, chunk, 1)
            for r in range(3):
                total[r] += chunk[r]
                if chunk[r] > 0:
                    self.involved[r] = True
        had = self._by_lv.get(lv.name)
        if had is None:
            entry = (lr, lv, total, pos, chunks[-1])
        else:
            both = [had[2][r] + total[r] for r in range(3)]
            entry = (lr, lv, both, pos, chunks[-1]) if pos > had[3] else (lr, lv, both, had[3], had[4])
        self._by_lv[lv.name] = entry
        self._unchecked.add(lv.name)

    def _check_chunks(self) -> None:
        """The chunk check of each leveled queue that lost something since the last check. Checked only
        when asked (:meth:`refused`), on the latest entry: a refusal stands once it holds, so the latest
        entry refuses exactly when some earlier one did."""
        if not self.chunk_refused:
            snap = self.snap
            for name in sorted(self._unchecked):
                lr, lv, lost, _, last = self._by_lv[name]
                before = [snap.allocated[lv.name][r] - lost[r] + last[r] for r in range(3)]
                if not (
                    maintain_fair_share(lv, before)
                    or guarantee_deserved_quota(lr, snap.allocated[lr.name], self.req, lv, before)
                ):
                    self.chunk_refused = True
                    break
        self._unchecked.clear()

    def refused(self) -> bool:
        """:func:`refused_whatever_else` over the victims lost so far (False unless a lost task is still
        releasing, as the solver asks it)."""
        self._check_chunks()
        if self.lost_releasing == 0:
            return False
        if not self._exact:
            lost = [(job, mine) for _, job, mine in sorted(self._lost, key=lambda e: e[0])]
            return refused_whatever_else(self.ssn, self.snap, self.job, self.req, lost, self._evicted)
        if self.chunk_refused:
            return True
        rq = self.rq
        assert rq is not None
        snap, req, job = self.snap, self.req, self.job
        remaining = {
            name: [snap.allocated[name][r] - v[r] for r in range(3)] for name, v in self._lost_under.items()
        }
        mult = max(self.ssn.config.saturation_multiplier, 1.0)
        for level in rq.ancestors():
            if not job.preemptible and not non_preemptible_fits(level, snap.allocated_np[level.name], req):
                return True
            mine = _add(snap.allocated[level.name], req)
            held = self._release_under.get(level.name)
            if held is not None:
                for r in range(3):
                    mine[r] -= held[r]
            if _over_a_sibling(self.ssn, level, mine, remaining, self.involved, mult):
                return True
        return False


def victim_chunks(ssn: Session, job: JobInfo, tasks: Sequence[TaskInfo]) -> list[Vec]:
    """Resources a victim job loses, as chunks: each task beyond minAvailable alone, the rest together.

    Tasks that were re-placed elsewhere (active again) are not lost and are left out.
    """
    m = job.min_available
    elastic, core = (list(tasks[m:]), list(tasks[:m])) if m < len(tasks) else ([], list(tasks))
    out: list[Vec] = []
    for group in [*([t] for t in elastic), core]:
        lost = [t for t in group if t.status is PodStatus.RELEASING]
        if not lost:
            continue
        v = [0, 0, 0]
        for t in lost:
            tv = ssn.task_vec(t)
            for r in range(3):
                v[r] += tv[r]
        out.append(v)
    return out


def _over_a_sibling(
    ssn: Session, level: QueueInfo, mine: Vec, remaining: dict[str, Vec], involved: list[bool], mult: float
) -> bool:
    """KAI's boundary: on an involved resource, the reclaimer's side at ``level`` would hold ``mine`` over its
    fair share, at a ratio (times the saturation multiplier) at least that of a victim sibling keeping
    ``remaining``."""
    for name in sorted(remaining):
        sib = ssn.queues[name]
        if sib is level or sib.parent is not level.parent:
            continue
        theirs = remaining[name]
        for r in range(3):
            if not involved[r]:
                continue
            ratio_mine = _ratio(mine[r], level.fair_share[r])
            if (
                ratio_mine > 1
                and sib.fair_share[r] > 0
                and ratio_mine * mult >= _ratio(theirs[r], sib.fair_share[r])
            ):
                return True
    return False


def _ratio(alloc: int, fair: int) -> float:
    if fair == 0:
        return _INF if alloc > 0 else 0.0
    return alloc / fair


def reclaimable(
    ssn: Session,
    snap: QueueSnapshot,
    reclaimer_job: JobInfo,
    req: Vec,
    victims: Sequence[tuple[JobInfo, Sequence[TaskInfo]]],
) -> bool:
    """KAI's Reclaimable validator for one scenario (see the module docstring)."""
    rq = reclaimer_job.queue
    if rq is None:
        return False
    kept = _kept_after(ssn, snap, rq, req, victims)
    if kept is None:
        return False
    remaining, involved = kept
    return _within_boundaries(ssn, snap, reclaimer_job, rq, req, remaining, involved)


def _kept_after(
    ssn: Session,
    snap: QueueSnapshot,
    rq: QueueInfo,
    req: Vec,
    victims: Sequence[tuple[JobInfo, Sequence[TaskInfo]]],
) -> tuple[dict[str, Vec], list[bool]] | None:
    """The victims' losses chunk by chunk, each checked against its side's fair share or the reclaimer's
    deserved quota (KAI's per-victim check): None when a chunk is refused, else what each queue of the
    victims' sides keeps and which resources the scenario involves (the request's and any lost).

    Computed without the order when every victim side parts from the reclaimer's path (the argument of
    :class:`LossTracker`): a chunk's check asks its leveled queue ``lv`` to keep more than a fixed line in
    some resource, and only chunks of victims with that ``lv`` lower what it keeps, so every chunk of
    ``lv`` passes exactly when its last one does. The sums are the same in any order.
    """
    per_vq: dict[str, tuple[QueueInfo, Vec]] = {}  # lost chunks summed per victim queue, first seen first
    last: dict[str, tuple[QueueInfo, QueueInfo, Vec]] = {}  # per lv: lr, lv and its latest chunk
    leveled: dict[str, tuple[QueueInfo, QueueInfo]] = {}
    involved = [req[r] > 0 for r in range(3)]
    for job, tasks in victims:
        vq = job.queue
        if vq is None:
            continue
        if len(tasks) == 1:  # victim_chunks of one task: the task, if it is still releasing
            if tasks[0].status is not PodStatus.RELEASING:
                continue
            chunks = [ssn.task_vec(tasks[0])]
        else:
            chunks = victim_chunks(ssn, job, tasks)
            if not chunks:
                continue
        pair = leveled.get(vq.name)
        if pair is None:
            pair = leveled[vq.name] = leveled_queues(rq, vq)
            if pair[0] is pair[1]:
                return _kept_after_in_order(ssn, snap, rq, req, victims)
        acc = per_vq.get(vq.name)
        if acc is None:
            acc = per_vq[vq.name] = (vq, [0, 0, 0])
        total = acc[1]
        for chunk in chunks:
            for r in range(3):
                total[r] += chunk[r]
                if chunk[r] > 0:
                    involved[r] = True
        last[pair[1].name] = (pair[0], pair[1], chunks[-1])
    remaining: dict[str, Vec] = {}
    for vq, total in per_vq.values():
        lv = leveled[vq.name][1]
        if lv.name not in remaining:
            remaining[lv.name] = list(snap.allocated[lv.name])
        for q in vq.ancestors():
            cur = remaining.setdefault(q.name, list(snap.allocated[q.name]))
            for r in range(3):
                cur[r] -= total[r]
    for name in sorted(last):
        lr, lv, chunk = last[name]
        before = [remaining[name][r] + chunk[r] for r in range(3)]
        if not (
            maintain_fair_share(lv, before)
            or guarantee_deserved_quota(lr, snap.allocated[lr.name], req, lv, before)
        ):
            return None
    return remaining, involved


def _kept_after_in_order(
    ssn: Session,
    snap: QueueSnapshot,
    rq: QueueInfo,
    req: Vec,
    victims: Sequence[tuple[JobInfo, Sequence[TaskInfo]]],
) -> tuple[dict[str, Vec], list[bool]] | None:
    """:func:`_kept_after` chunk by chunk in the validator's order (KAI's loop)."""
    remaining: dict[str, Vec] = {}
    involved = [req[r] > 0 for r in range(3)]
    leveled: dict[str, tuple[QueueInfo, QueueInfo]] = {}  # per victim queue: many victims share one
    for job, tasks in victims:
        vq = job.queue
        if vq is None:
            continue
        chunks = victim_chunks(ssn, job, tasks)
        if not chunks:
            continue
        pair = leveled.get(vq.name)
        if pair is None:
            pair = leveled[vq.name] = leveled_queues(rq, vq)
        lr, lv = pair
        if lv.name not in remaining:
            remaining[lv.name] = list(snap.allocated[lv.name])
        for chunk in chunks:
            rem = remaining[lv.name]
            if not (
                maintain_fair_share(lv, rem)
                or guarantee_deserved_quota(lr, snap.allocated[lr.name], req, lv, rem)
            ):
                return None
            for q in vq.ancestors():
                cur = remaining.setdefault(q.name, list(snap.allocated[q.name]))
                for r in range(3):
                    cur[r] -= chunk[r]
                    if chunk[r] > 0:
                        involved[r] = True
    return remaining, involved


def _within_boundaries(
    ssn: Session,
    snap: QueueSnapshot,
    job: JobInfo,
    rq: QueueInfo,
    req: Vec,
    remaining: dict[str, Vec],
    involved: list[bool],
) -> bool:
    mult = max(ssn.config.saturation_multiplier, 1.0)
    for level in rq.ancestors():
        mine = _add(remaining.get(level.name, snap.allocated[level.name]), req)
        if _over_a_sibling(ssn, level, mine, remaining, involved, mult):
            return False
        if not job.preemptible and not non_preemptible_fits(level, snap.allocated_np[level.name], req):
            return False
    return True
