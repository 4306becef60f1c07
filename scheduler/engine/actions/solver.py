"""The victim-scenario solver shared by reclaim and preempt (KAI's job solver and by-pod solver).

For one pending job (the preemptor) the solver looks for a set of victims whose eviction lets the job's next
tasks (to minAvailable, or one elastic extra) fit:

* It grows the preemptor one task at a time. Each partial job is solved on its own; the victims of the last
  solved partial job are *recorded* and every later scenario starts by evicting them. Only the scenario for
  the complete task list can succeed. Two shortcuts keep the partial jobs from repeating each other's work
  and change nothing else: a partial job starts reading victims where the earlier ones stopped when its
  bounds provably fail before that (:meth:`Solver._skip_read`), and the recorded victims stay evicted from
  one partial job to the next when the statement holds exactly their evictions (:meth:`Solver._carry`).
* For one partial job, scenarios are built by taking victim jobs one at a time in victim order (the most
  over-share queue first, the lowest-ranked job first). A gang victim at or below minAvailable gives all of
  its active tasks; an elastic victim above its minimum gives one task (the last in task order) and goes back
  into the victim queue with the rest.
* Simulating a scenario: evict the recorded victims; then, for each node of the newest victim job, evict the
  scenario's victim jobs that have a task on that node and virtually re-place, with pipeline-only placement
  and in queue order, the victim jobs and the preemptor. The preemptor must fit. Victims that found no new
  place stay evicted (releasing); re-placed ones become pipelined on their new node, except that a victim
  re-placed on the node it came from (same devices, for shared GPUs) is simply un-evicted, as KAI does.
* The action's validator judges the scenario; a refused scenario is rolled back and the search goes on.
* Topology (KAI's solvers call the same ``SubsetNodes`` as allocate): a job with a topology constraint --
  the preemptor or a victim being re-placed -- is placed domain by domain as allocate places it
  (:mod:`scheduler.engine.topology`, a live plan), so a rack-constrained gang is only ever pipelined within
  one rack and a reclaim may free a whole rack for it. For a GPU gang with a required level, a scenario is
  simulated only if one domain of that level would hold the gang once its victims are gone
  (:class:`~scheduler.engine.topology.DomainRoom`). Jobs without a constraint take the same path as before.
* Subgroups with their own constraints: such a job -- preemptor or re-placed victim -- is placed with
  allocate's subgroup walk (:func:`~scheduler.engine.actions.subgroup_allocate.place_subgroups`), each PodSet
  within its nested domain, on live capacity. A partial preemptor (the growing prefix) places each of its
  tasks within its groups' domains without the gang rule; the complete one must satisfy the tree.

Everything runs inside one :class:`~scheduler.engine.session.Statement`. On failure the session is exactly as
before; on success the caller commits the returned statement.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from scheduler.engine import topology
from scheduler.engine.actions.allocate import allocate_job, memoisable, task_signature
from scheduler.engine.actions.budget import SearchBudget
from scheduler.engine.actions.common import over_capacity, tasks_vec
from scheduler.engine.actions.jobindex import JobIndex
from scheduler.engine.actions.subgroup_allocate import (
    has_subgroup_constraints,
    place_subgroups,
    subgroup_constraint_problem,
)
from scheduler.engine.ordering import JobCache, JobsByQueue, KeyMemo, Run, task_order, turns
from scheduler.engine.placement import allocate_task, best_fit, static_reason
from scheduler.engine.session import (
    ACTIVE_ALLOCATED,
    ACTIVE_USED,
    GPU_MILLI,
    FreeIndex,
    JobInfo,
    NodeInfo,
    Op,
    QueueInfo,
    Session,
    Statement,
    TaskInfo,
    Vec,
)
from scheduler.engine.state import PodStatus


@dataclass
class Scenario:
    """One candidate solution: the preemptor's tasks and the victim tasks evicted for them."""

    preemptor: JobInfo
    pending: list[TaskInfo]
    requested: Vec  # the pending tasks' resources, valued before they were placed
    recorded: list[TaskInfo]  # victims of the previous (smaller) solved partial job: always evicted
    potential: list[TaskInfo] = field(default_factory=list)  # victims added for this partial job
    evicted: list[TaskInfo] = field(default_factory=list)  # what the current simulation evicted
    # Kept as victims are added (add_potential), so that a simulation gathers one node's victims from the
    # few jobs there instead of scanning every potential victim (the scan made a search quadratic in the
    # victims it reached): node -> uids of potential victim jobs with a task on it; job uid -> (position
    # in `potential`, task) of its potential tasks.
    node_jobs: dict[str, set[str]] = field(default_factory=dict)
    job_tasks: dict[str, list[tuple[int, TaskInfo]]] = field(default_factory=dict)
    # Victims read before the partial job's own reads, when it skipped them (Solver._skip_read): the
    # solve's read prefix up to `base_end`, less the jobs of `recorded` (`base_skip`); they come before
    # every task of `potential`.
    base: _ReadPrefix | None = None
    base_end: int = 0
    base_skip: frozenset[str] = frozenset()

    def add_potential(self, group: Sequence[TaskInfo]) -> None:
        """Add victim tasks to :attr:`potential` (read while the session is in its base state)."""
        for t in group:
            self.job_tasks.setdefault(t.job.uid, []).append((len(self.potential), t))
            self.potential.append(t)
            if t.node is not None:
                self.node_jobs.setdefault(t.node.name, set()).add(t.job.uid)

    def potential_on(self, node: str) -> list[TaskInfo]:
        """The potential victim tasks, on any node, of the jobs with a potential victim task on `node`, in
        the order they were added."""
        out = [] if self.base is None else self.base.on(node, self.base_end, self.base_skip)
        jobs = self.node_jobs.get(node)
        if jobs:
            out.extend(t for _, t in sorted(e for uid in jobs for e in self.job_tasks[uid]))
        return out

    def victims(self) -> dict[str, list[TaskInfo]]:
        """Evicted tasks grouped by job uid, in the order they were taken (a job's first task first)."""
        out: dict[str, list[TaskInfo]] = {}
        for t in self.evicted:
            out.setdefault(t.job.uid, []).append(t)
        return out

    def victim_jobs(self) -> dict[str, JobInfo]:
        """The jobs behind :meth:`victims`."""
        return {t.job.uid: t.job for t in self.evicted}


Validator = Callable[[Session, Scenario], bool]


class Doom(Protocol):
    """What one simulation's victims lose, told as their turns pass: whether the validator must refuse
    the simulation whatever the victims still to come lose."""

    def lose(self, job: JobInfo, tasks: Sequence[TaskInfo]) -> None:
        """`job`'s turn has passed; `tasks` are its evicted tasks as they now stay."""

    def refused(self) -> bool:
        """True when the validator refuses the simulation whatever else is lost."""


@dataclass(frozen=True)
class Victims:
    """Who a preemptor may take from: the index's victim jobs of `leaves`, less those `skip` rejects.

    The filter runs only on the victims the search reaches, in victim order.
    """

    leaves: tuple[str, ...]
    skip: Callable[[JobInfo], bool]


def tasks_to_evict(job: JobInfo) -> tuple[list[TaskInfo], bool]:
    """KAI's GetTasksToEvict on a (possibly partial) job view.

    Above minAvailable only the last active task in task order goes (elastic shrink) and the job has more to
    give; otherwise every active task goes, last first.
    """
    tree = job.subgroup_tree()
    if tree is not None:  # elastic shrink per PodSet (KAI)
        return tree.tasks_to_evict(ACTIVE_ALLOCATED)
    active = [t for t in reversed(task_order(job.tasks)) if t.status in ACTIVE_ALLOCATED]
    if not active:
        return [], False
    if job.min_available < len(active):
        return [active[0]], True
    return active, False


def job_view(job: JobInfo, tasks: Sequence[TaskInfo]) -> JobInfo:
    """A stand-in for `job` holding only `tasks` (KAI's CloneWithTasks); the tasks themselves are shared."""
    view = JobInfo(job.spec, job.queue, job.index)
    view.tasks = list(tasks)
    view.last_start_ms = job.last_start_ms
    return view


class _VictimOrder:
    """The victim order of one solve, popped once and shared by its partial jobs.

    Each partial job reads the victims from the top of an ordering over the solve's base state (every
    simulation is rolled back before the next read), and pops them in the same order until it first pushes
    a job back (a victim it offers only part of, see :class:`_VictimStream`): a pop changes the ordering
    the same way whichever partial job makes it. So the popped jobs are kept, each with what
    :func:`tasks_to_evict` says of it, for every partial job to replay instead of popping them again.
    """

    def __init__(self, ssn: Session, index: JobIndex, victims: Victims) -> None:
        self._runs = {n: (index.victims[n], victims.skip) for n in victims.leaves if index.victims.get(n)}
        self.leaves = tuple(self._runs)  # the leaf queues with victims
        self._ssn = ssn
        self._order = self.fresh()
        self.popped: list[tuple[JobInfo, list[TaskInfo], bool]] = []
        self._done = False

    def fresh(self) -> JobsByQueue:
        """A new ordering over the same victims, at the top."""
        # Read only between simulations, each rolled back first: victims' allocations stay as built.
        return JobsByQueue(self._ssn, (), victim=True, runs=self._runs, fixed_victims=True)

    def at(self, i: int) -> tuple[JobInfo, list[TaskInfo], bool] | None:
        """The `i`-th job popped from the top, with its tasks to evict and whether it has more to give; None
        past the last victim."""
        while len(self.popped) <= i:
            view = None if self._done else self._order.pop()
            if view is None:
                self._done = True
                return None
            group, more = tasks_to_evict(view)
            self.popped.append((view, group, more))
        return self.popped[i]


class _ReadPrefix:
    """The victims of a solve's shared order, counted once for all its partial jobs.

    Every partial job reads the shared order from the top, adding each victim to its bounds until they
    pass; with recorded victims that all lie in what earlier partial jobs read, its state after reading
    that far is the state of the whole prefix (sums and sets of devices, whatever the order). This keeps
    that state as the prefix grows -- the milli-GPUs, the device slots for the complete task list, and
    where each job's tasks lie -- so a partial job can start where the earlier ones stopped
    (:meth:`Solver._skip_read`). It absorbs entries while they are plain (no job pushed back) and every
    victim counts as freeing its devices (none kept).
    """

    def __init__(
        self,
        ssn: Session,
        shared: _VictimOrder,
        tasks: Sequence[TaskInfo],
        busy: dict[str, tuple[str, tuple[int, ...]]],
        levels: _Levels,
    ) -> None:
        self._ssn = ssn
        self._shared = shared
        self.slots = _Slots(ssn, tasks, busy, levels)
        self.gpu = 0  # milli-GPUs the absorbed victims hold
        self.end = 0  # shared entries absorbed
        self.groups = 0  # of which with tasks to evict
        self.open = True  # False once an entry could not be absorbed
        self.entry_of: dict[str, int] = {}  # task uid -> its entry
        self.queues: dict[str, QueueInfo | None] = {}  # the absorbed victims' queues, by name
        self._node_entries: dict[str, list[int]] = {}  # node -> entries with a task on it, ascending

    def extend(self) -> None:
        """Absorb every entry popped so far (the victims' devices as they hold them, which a carry leaves
        alone; the free-device levels from the solve's copy)."""
        popped = self._shared.popped
        task_vec = self._ssn.task_vec
        while self.open and self.end < len(popped):
            i = self.end
            view, group, more = popped[i]
            if more:
                self.open = False
                return
            self.end = i + 1
            if not group:
                continue
            self.groups += 1
            q = view.queue
            self.queues.setdefault("" if q is None else q.name, q)
            seen: set[str] = set()
            for t in group:
                self.entry_of[t.uid] = i
                self.gpu += task_vec(t)[0]
                if t.node is not None and t.node.name not in seen:
                    seen.add(t.node.name)
                    self._node_entries.setdefault(t.node.name, []).append(i)
            self.slots.add(group, False)

    def on(self, node: str, end: int, skip: frozenset[str]) -> list[TaskInfo]:
        """The tasks of the entries before `end` with a task on `node`, less the jobs in `skip`, in the
        order a stream reads them."""
        out: list[TaskInfo] = []
        popped = self._shared.popped
        for i in self._node_entries.get(node, ()):
            if i >= end:
                break
            group = popped[i][1]
            if group[0].job.uid not in skip:
                out.extend(group)
        return out


class _VictimStream:
    """Feeds victim task groups in victim order, splitting elastic victims one task at a time.

    It replays the solve's shared :class:`_VictimOrder` until it has to push a job back, then goes on with
    an ordering of its own, brought to the same point by popping as many jobs."""

    def __init__(
        self, shared: _VictimOrder, recorded: set[str], before_own: Callable[[], None] | None = None
    ) -> None:
        self.shared = shared
        self.pos = 0  # jobs read from the shared order
        self.order: JobsByQueue | None = None  # own ordering, once a job was pushed back
        self.recorded = recorded
        self.before_own = before_own  # called before an own ordering is built (it reads the session)

    def _own(self) -> JobsByQueue:
        if self.before_own is not None:
            self.before_own()
        order = self.shared.fresh()
        for i in range(self.pos):
            view = order.pop()
            entry = self.shared.at(i)
            assert entry is not None and view is entry[0], "victim order diverged from the shared one"
        self.order = order
        return order

    def _pushing(self) -> JobsByQueue:
        return self.order if self.order is not None else self._own()

    def _offer(self, view: JobInfo, group: list[TaskInfo], more: bool) -> list[TaskInfo] | None:
        """What one popped victim offers (None: nothing, read on); may push the rest of it back."""
        if not group:
            return None
        if any(t.uid in self.recorded for t in group):
            # Already a victim through an earlier partial job: offer only what is left of it.
            rest = [t for t in view.tasks if t.uid not in self.recorded]
            if rest:
                self._pushing().push(job_view(view, rest))
            return None
        if more:
            taken = {t.uid for t in group}
            self._pushing().push(job_view(view, [t for t in view.tasks if t.uid not in taken]))
        return group

    def next_group(self) -> list[TaskInfo] | None:
        """The next group of victim tasks, or None when the victims are exhausted."""
        shared, recorded = self.shared, self.recorded
        popped = shared.popped
        while self.order is None:
            pos = self.pos
            entry = popped[pos] if pos < len(popped) else shared.at(pos)
            if entry is None:
                return None
            self.pos = pos + 1
            group = entry[1]
            if len(group) == 1 and not entry[2] and group[0].uid not in recorded:
                return group  # the common case of _offer: one task, nothing to push back
            offered = self._offer(*entry)
            if offered is not None:
                return offered
        while (view := self.order.pop()) is not None:
            offered = self._offer(view, *tasks_to_evict(view))
            if offered is not None:
                return offered
        return None


def _remembered(skip: Callable[[JobInfo], bool]) -> Callable[[JobInfo], bool]:
    """`skip` answered once per job uid (for one solve, whose victim stream reads only its base state)."""
    seen: dict[str, bool] = {}

    def remembered(job: JobInfo) -> bool:
        out = seen.get(job.uid)
        if out is None:
            out = seen[job.uid] = skip(job)
        return out

    return remembered


def _gpu_need(t: TaskInfo) -> int:
    """A lower bound on the milli-GPUs a pending task needs (GPU-memory requests count as 0)."""
    r = t.request
    if r.gpus:
        return r.gpus * GPU_MILLI
    if r.gpu_fraction_milli is not None:
        return r.gpu_fraction_milli * r.gpu_fraction_devices
    return 0


def _shared_may_fit(t: TaskInfo, node: NodeInfo) -> bool:
    """A necessary condition for placing shared-GPU task `t` on `node` (pipeline or not).

    The node passes the static checks, has the CPU and memory in its future capacity, and enough devices
    with the task's portion left in their future capacity. It only turns false as the node fills up.
    """
    if static_reason(t, node) is not None:
        return False
    req = t.request
    if node.future(0) < req.cpu or node.future(1) < req.memory:
        return False
    if req.gpu_fraction_milli is not None:
        portion: int | None = req.gpu_fraction_milli
    else:
        assert req.gpu_memory_mib is not None
        portion = node.memory_portion(req.gpu_memory_mib)
    if portion is None or portion > GPU_MILLI:
        return False
    return sum(1 for d in range(node.gpus) if node.dev_future(d) >= portion) >= req.gpu_fraction_devices


@dataclass(frozen=True)
class _Levels:
    """The free index's whole free devices per node as a solve found them (what :class:`_Slots` reads), so
    that the slot bounds read the solve's base state while evictions carried between partial jobs stand."""

    level: dict[str, int]
    buckets: list[list[int]]

    @staticmethod
    def of(idx: FreeIndex) -> _Levels:
        """A copy of what `idx` holds now."""
        return _Levels(dict(idx.level), [list(b) for b in idx.buckets])


class _Slots:
    """Necessary conditions for a scenario, kept as victims are added: room for the whole-GPU tasks.

    A whole-GPU task goes on one node, onto devices free of allocated and pipelined pods.

    * Per node: for each GPU count g among the preemptor's tasks, the tasks asking for g or more need as
      many disjoint g-device slots; a node whose free devices (now, plus those the victims so far hold
      there) number f offers at most f // g. Victims re-placed elsewhere and every other filter only take
      room away, so a scenario that fails this fails its simulation too.
    * In total: free whole devices plus those victims free for good must cover the whole-GPU tasks. A
      victim that must be re-placed (``kept``) with whole-GPU tasks takes as many whole devices as it
      frees; a kept shared-GPU victim may free a device and squeeze into others, so its devices count.

    Shared-GPU tasks of the preemptor are not counted (no bound for them).
    """

    def __init__(
        self,
        ssn: Session,
        tasks: Sequence[TaskInfo],
        busy: dict[str, tuple[str, tuple[int, ...]]] | None = None,
        levels: _Levels | None = None,
    ) -> None:
        self.demand, self.whole_need = _Slots._demand(tasks)
        self.idx: _Levels | FreeIndex = ssn.free_index if levels is None else levels
        buckets = self.idx.buckets
        self.slots = {g: sum(len(b) * (k // g) for k, b in enumerate(buckets)) for g in self.demand}
        self.short = sum(1 for g, k in self.demand.items() if self.slots[g] < k)  # GPU counts short of slots
        self.whole = sum(len(b) * k for k, b in enumerate(buckets))
        self.extra: dict[str, set[int]] = {}  # node -> its devices the victims would free
        self.freed: set[tuple[str, int]] = set()  # devices counted in `whole`
        # Per victim task, its node and the devices it holds there (allocated or pipelined), as read in
        # the base state; the solver passes one dict per solve (the base state does not change in it).
        self.busy: dict[str, tuple[str, tuple[int, ...]]] = {} if busy is None else busy

    @staticmethod
    def _demand(tasks: Sequence[TaskInfo]) -> tuple[dict[int, int], int]:
        """Per GPU count g among the whole-GPU tasks, how many ask for g or more; and their GPUs in all."""
        sizes = [t.request.gpus for t in tasks if not t.shared and t.request.gpus > 0]
        return {g: sum(1 for x in sizes if x >= g) for g in sorted(set(sizes))}, sum(sizes)

    @staticmethod
    def _busy_devices(t: TaskInfo) -> tuple[str, tuple[int, ...]]:
        n = t.node
        if n is None or not t.devices or t.status not in ACTIVE_ALLOCATED:
            return ("", ())
        return (n.name, tuple(d for d in t.devices if n.dev_alloc[d] or n.dev_pipe[d]))

    def add(self, tasks: Sequence[TaskInfo], kept: bool = False) -> None:
        """Count the devices of these victim tasks (called while the session is in its base state)."""
        if not self.demand:
            return
        busy = self.busy
        for t in tasks:
            held = busy.get(t.uid)
            if held is None:
                held = busy[t.uid] = self._busy_devices(t)
            name, devs = held
            if not name:
                continue
            if devs and (t.shared or not kept):
                freed = self.freed
                for d in devs:
                    if (name, d) not in freed:
                        freed.add((name, d))
                        self.whole += 1
            got = self.extra.get(name)
            if got is None:
                got = self.extra[name] = set()
            old = self.idx.level[name] + len(got)
            got.update(devs)
            new = self.idx.level[name] + len(got)
            if new != old:
                slots = self.slots
                for g, k in self.demand.items():
                    before = slots[g]
                    after = slots[g] = before + new // g - old // g
                    self.short += (after < k) - (before < k)

    def ok(self) -> bool:
        return self.whole >= self.whole_need and self.short == 0

    def copy_for(self, tasks: Sequence[TaskInfo]) -> _Slots | None:
        """A copy counting the same victims for other tasks, or None when they ask for a GPU count this
        was not built for (its slots were not kept)."""
        demand, whole_need = _Slots._demand(tasks)
        if any(g not in self.slots for g in demand):
            return None
        out = _Slots.__new__(_Slots)
        out.demand, out.whole_need = demand, whole_need
        out.idx = self.idx
        out.slots = {g: self.slots[g] for g in out.demand}
        out.short = sum(1 for g, k in out.demand.items() if out.slots[g] < k)
        out.whole = self.whole
        out.extra = {n: set(d) for n, d in self.extra.items()}
        out.freed = set(self.freed)
        out.busy = self.busy
        return out


class Solver:
    """Finds victims for one preemptor at a time (see the module docstring)."""

    def __init__(
        self,
        ssn: Session,
        validator: Validator,
        action: str,
        reason: Callable[[TaskInfo], str],
        index: JobIndex,
        must_keep: Callable[[QueueInfo | None, Vec], bool] | None = None,
        keep_in: Callable[[JobInfo, Vec, Sequence[TaskInfo]], bool] | None = None,
        doomed: Callable[[list[TaskInfo], Vec], Doom] | None = None,
        keeps_none: Callable[[QueueInfo | None, Vec], bool] | None = None,
    ) -> None:
        """`must_keep(queue, requested)` may say that the validator refuses any scenario in which a victim
        of `queue` loses a task (it must then be re-placed): such victims free no capacity for good, which
        tightens the bounds checked before simulating. It is asked per queue, so that the victims read
        before a partial job's own reads can be cleared for it a queue at a time (:class:`_ReadPrefix`).

        `keep_in(victim, requested, evicted)` may say the same for one simulation that evicts exactly
        `evicted` (read in the session's state before they are evicted): it is used only to prove a
        simulation's failure before re-placing anything (see :meth:`_hopeless`).

        `doomed(evicted, requested)` gives, as a simulation that evicted `evicted` begins, a :class:`Doom`
        told of each victim whose turn has passed; it may then say that the validator will refuse the
        simulation whatever else is lost (see :meth:`_doomed`).

        `keeps_none(queue, requested)` may say that neither `must_keep` nor `keep_in` (for any evicted
        list) holds for any victim of `queue`: a simulation whose victims all sit in such queues has no
        loss the checks that foresee a refusal could prove (:meth:`_nothing_kept`)."""
        self.ssn = ssn
        self.must_keep = must_keep
        self.keep_in = keep_in
        self.keeps_none = keeps_none
        self.doomed = doomed
        self.validator = validator
        self.action = action
        self.reason = reason
        self.index = index
        self._shared_nodes: dict[tuple[object, ...], list[NodeInfo]] | None = None  # per partial job
        # Per solve(): init resources and sort keys of jobs the solve has not touched (see JobCache).
        self._shared_init = JobCache(set())
        self._memo: dict[tuple[object, ...], int] = {}  # queue comparisons, valid for one solve()
        self._keys = KeyMemo()  # queue keys, valid for one solve() as well
        self._under: dict[str, tuple[str, ...]] = {}  # leaf queues below each queue (the tree is fixed)
        self.budget = SearchBudget.of(ssn, action)  # scenarios this attempt and the action may simulate
        self._complete = 0  # tasks of the current preemptor's complete list (solve())
        # Free milli-GPU of Ready devices, each >= 0 (_hopeless), per solve().
        self._free_gpus: int | None = None
        # _hopeless_unkept's counts over the last evicted list it wholly counted, per solve().
        self._unkept: tuple[list[TaskInfo], int, _Slots] | None = None
        self._signatures: dict[str, tuple[object, ...]] = {}  # task_signature per task uid (fixed per task)
        self._plain: dict[str, bool] = {}  # per victim job uid: re-placed on the plain path (_memo_fails)
        self._busy: dict[str, tuple[str, tuple[int, ...]]] = {}  # _Slots' device reads, per solve()
        # Evictions carried from one partial job to the next (see _carry): the uids of the recorded victims
        # the statement holds evicted, and what the partial jobs read of the solve's base state meanwhile.
        self._carried: set[str] = set()
        self._may_carry = False
        self._turns_from = 0  # where the last successful simulation's turns began in the statement
        self._levels: _Levels | None = None
        self._base_idle: int | None = None

    def solve(self, job: JobInfo, victims: Victims) -> Statement | None:
        """A statement with the job's tasks pipelined and its victims evicted, or None (nothing changed)."""
        self.budget.begin_job()
        self._free_gpus = None
        self._unkept = None
        self._busy = {}
        self._carried = set()
        self._levels = _Levels.of(self.ssn.free_index)
        self._base_idle = None
        tasks = job.tasks_to_allocate()
        if not tasks:
            return None
        if topology.constrained(job) and topology.constraint_error(self.ssn, job) is not None:
            return None  # allocate told the job why; no domain can take it, whoever is evicted
        if has_subgroup_constraints(job) and subgroup_constraint_problem(self.ssn, job) is not None:
            return None
        self._complete = len(tasks)
        self.ssn.work[f"{self.action}.attempts"] += 1
        # Cheap pre-check: idle + releasing GPUs plus everything the victims could hold must cover the whole
        # job, or no scenario for the complete task list (the only one that can succeed) passes the GPU bound.
        need = sum(_gpu_need(t) for t in tasks)
        held = sum(self.index.gpu_held.get(n, 0) for n in victims.leaves)
        if need and self._idle_gpus() + held < need:
            return None
        if self.budget.spent():
            # Nothing may be simulated any more this cycle: say so rather than search in vain.
            self.budget.stopped = True
            self.budget.explain(job)
            return None
        before = job.count(ACTIVE_USED)
        # Only the victims the search reaches and the preemptor change while solving (see _VictimStream).
        self._shared_init = JobCache({job.uid})
        self._memo = {}
        self._keys = KeyMemo()
        stmt = self.ssn.statement()
        recorded: list[TaskInfo] = []
        solved = False
        # Every partial job reads the victims again from the top, always in the state the solve began in:
        # the filter's answer for a victim is asked once.
        victims = Victims(victims.leaves, _remembered(victims.skip))
        order = _VictimOrder(self.ssn, self.index, victims)
        prefix = _ReadPrefix(self.ssn, order, tasks, self._busy, self._levels)
        # Carrying reads a few things of the base state from copies; the rest (shared-GPU node lists,
        # topology rooms, orderings over several victim queues) it is not used with.
        self._may_carry = (
            not any(t.shared for t in tasks)
            and (job.spec.required_level is None or not topology.constrained(job))
            and len(order.leaves) <= 1
        )
        for k in range(1, len(tasks) + 1):
            scenario = self._solve_partial(stmt, job, tasks[:k], recorded, order, prefix)
            if self.budget.stopped:
                break  # the search budget ran out (the statement holds only discarded work)
            if scenario is None:
                continue
            recorded = list(scenario.evicted)
            solved = k == len(tasks)
            if not solved:
                self._carry(stmt, recorded)
        if solved and job.active_allocated() >= job.min_available and job.count(ACTIVE_USED) > before:
            return stmt
        stmt.discard()
        if self.budget.stopped:
            self.budget.explain(job)
        return None

    def _carry(self, stmt: Statement, recorded: list[TaskInfo]) -> None:
        """Between two partial jobs: keep the solved one's victims evicted for the next, or discard.

        Every partial job begins by evicting the victims the previous one recorded, in their order. When
        the statement, once the solved simulation's turns are rolled back, holds exactly those evictions
        in that order, they are kept instead of rolled back and made again (the state and the statement
        are the same either way). The partial jobs read the solve's base state only through copies taken
        when it began (:class:`_Levels`, the idle and free milli-GPUs) or of victims the carry did not
        move; :meth:`_uncarry` rolls back first where they would read more."""
        if self._may_carry and self._free_gpus is not None and self._base_idle is not None:
            stmt.rollback(self._turns_from)
            ops = stmt.ops
            if len(ops) == len(recorded) and all(
                op.kind == "evict" and op.task is t for op, t in zip(ops, recorded, strict=True)
            ):
                self._carried = {t.uid for t in recorded}
                return
        stmt.discard()
        self._carried = set()

    def _uncarry(self, stmt: Statement) -> None:
        """Back to the base state (between simulations): the recorded victims are evicted again as usual."""
        if self._carried:
            stmt.discard()
            self._carried = set()

    # -- scenarios for one partial job -------------------------------------------------------------------
    def _solve_partial(
        self,
        stmt: Statement,
        job: JobInfo,
        pending: list[TaskInfo],
        recorded: list[TaskInfo],
        shared: _VictimOrder,
        prefix: _ReadPrefix,
    ) -> Scenario | None:
        scenario = Scenario(job, pending, tasks_vec(self.ssn, pending), list(recorded))
        self._shared_nodes = None  # computed before the first simulation (see _simulate_scenario)
        stream = _VictimStream(shared, {t.uid for t in recorded}, lambda: self._uncarry(stmt))
        need = sum(_gpu_need(t) for t in pending)
        if self._base_idle is None:
            self._base_idle = self._idle_gpus()  # nothing is carried before the first partial job is solved
        have = self._base_idle
        room = self._domain_room(job, pending)
        skipped = None if room is not None else self._skip_read(scenario, stream, prefix, need, have)
        if skipped is not None:
            have, slots = skipped
        else:
            slots = _Slots(self.ssn, pending, self._busy, self._levels)
            # Slots count a set of devices: the recorded victims are added in two batches, by `kept`.
            batches: tuple[list[TaskInfo], list[TaskInfo]] = ([], [])
            for t in recorded:
                kept = self._kept(t, scenario.requested)
                have += 0 if kept else self.ssn.task_vec(t)[0]
                batches[kept].append(t)
                if room is not None and not kept:
                    room.add(t.node.name if t.node is not None else None, self.ssn.task_vec(t)[0])
            slots.add(batches[False], False)
            slots.add(batches[True], True)
            if (
                recorded
                and self._bounds_ok(have, need, slots, room)
                and self._simulate_scenario(stmt, scenario)
            ):
                return scenario
            if self.budget.stopped:
                return None
        must: dict[str, bool] = {}  # must_keep per victim job, for this partial job's request
        while (group := stream.next_group()) is not None:
            self._shared_init.mark(group[0].job.uid)
            scenario.add_potential(group)
            kept = self._kept_group(group, scenario.requested, must)
            have += 0 if kept else sum(self.ssn.task_vec(t)[0] for t in group)
            slots.add(group, kept)
            if room is not None and not kept:
                for t in group:
                    room.add(t.node.name if t.node is not None else None, self.ssn.task_vec(t)[0])
            # Cheap bounds, checked before any re-placement: enough GPUs in total (KAI's idle-GPU scenario
            # filter), enough whole free devices per node for the whole-GPU tasks, and for a gang with a
            # required topology level enough in one domain (KAI's topology-aware idle-GPU filter).
            if self._bounds_ok(have, need, slots, room) and self._simulate_scenario(stmt, scenario):
                return scenario
            if self.budget.stopped:
                return None
        return None

    def _skip_read(
        self, scenario: Scenario, stream: _VictimStream, prefix: _ReadPrefix, need: int, have: int
    ) -> tuple[int, _Slots] | None:
        """Start the partial job's reads where the earlier partial jobs stopped, when that is exact.

        A partial job reads the shared order from the top with its recorded victims added, and checks its
        bounds after each read; nothing but the bounds is asked until they first pass, and they only
        grow with the victims. When every recorded victim lies in the prefix read so far (its jobs wholly
        recorded, so the stream skips them without pushing anything back), no victim there is kept for
        this request, and the bounds fail on the whole prefix, every check up to its end fails: the
        partial job takes the prefix's state, counts those checks as filtered, and reads on from its end.
        Returns the milli-GPUs and slots there, or None to read from the top as usual."""
        prefix.extend()
        if prefix.end == 0:
            return None
        req = scenario.requested
        if self.must_keep is not None and any(self.must_keep(q, req) for q in prefix.queues.values()):
            return None
        recorded = stream.recorded
        entries: set[int] = set()
        for t in scenario.recorded:
            i = prefix.entry_of.get(t.uid)
            if i is None:
                return None
            entries.add(i)
        popped = stream.shared.popped
        for i in entries:
            if any(t.uid not in recorded for t in popped[i][0].tasks):
                return None  # the stream would push the rest of this job back
        have += prefix.gpu
        slots = prefix.slots.copy_for(scenario.pending)
        assert slots is not None  # the prefix's slots were built for the complete task list
        if have >= need and slots.ok():
            return None  # the bounds may first pass inside the prefix
        self.ssn.work[f"{self.action}.filtered"] += (
            (1 if scenario.recorded else 0) + prefix.groups - len(entries)
        )
        stream.pos = prefix.end
        scenario.base = prefix
        scenario.base_end = prefix.end
        scenario.base_skip = frozenset(t.job.uid for t in scenario.recorded)
        return have, slots

    def _bounds_ok(self, have: int, need: int, slots: _Slots, room: topology.DomainRoom | None) -> bool:
        """The cheap bounds of a scenario; a scenario they refuse is counted as filtered (KAI's
        ``scenarios_filtered_by_action``, in ``ssn.work``: no decision reads it)."""
        if have >= need and slots.ok() and (room is None or room.ok()):
            return True
        self.ssn.work[f"{self.action}.filtered"] += 1
        return False

    def _domain_room(self, job: JobInfo, pending: list[TaskInfo]) -> topology.DomainRoom | None:
        """The per-domain bound for a GPU gang with a required topology level (None: no such bound)."""
        if job.spec.required_level is None or not topology.constrained(job):
            return None
        p = topology.plan(self.ssn, job, pending, live=True)
        if p is None or p.required is None or not p.gpu:
            return None
        return topology.DomainRoom(self.ssn, p)

    def _kept_group(self, group: Sequence[TaskInfo], requested: Vec, must: dict[str, bool]) -> bool:
        """Whether every task of `group` is :meth:`_kept`, with `must_keep` asked once per job (`must`)."""
        if self.must_keep is None:
            return False
        for t in group:
            r = t.request
            if r.gpu_fraction_milli is None and r.gpu_memory_mib is not None:
                return False
            answer = must.get(t.job.uid)
            if answer is None:
                answer = must[t.job.uid] = self.must_keep(t.job.queue, requested)
            if not answer:
                return False
        return True

    def _kept(self, t: TaskInfo, requested: Vec) -> bool:
        """The victim task must be re-placed for the scenario to pass, with the same milli-GPU wherever it
        goes (a GPU-memory request's share depends on the node, so it never counts as kept)."""
        r = t.request
        if self.must_keep is None or (r.gpu_fraction_milli is None and r.gpu_memory_mib is not None):
            return False
        return self.must_keep(t.job.queue, requested)

    def _idle_gpus(self) -> int:
        """Idle + releasing milli-GPUs over Ready nodes."""
        return self.ssn.unclaimed_gpu_milli()

    def _simulate_scenario(self, stmt: Statement, scenario: Scenario) -> bool:
        if self._shared_nodes is None:
            # Nothing is evicted yet: the nodes where each shared-GPU task could go now (_shared_may_fit).
            # Computed here, not per partial job, since most partial jobs never reach a simulation.
            self._shared_nodes = {}
            for t in scenario.pending:
                if t.shared:
                    sig = task_signature(t)
                    if sig not in self._shared_nodes:
                        self._shared_nodes[sig] = [n for n in self.ssn.nodes if _shared_may_fit(t, n)]
        # Each simulation's evicted list is one object, read by _hopeless and by the simulation: the action's
        # keep_in remembers what it worked out for the list it was last asked about.
        if not scenario.potential:
            evicted = list(scenario.recorded)
            hopeless = self._hopeless(scenario, evicted)
            cp = stmt.checkpoint()
            if not self._carried:
                self._evict(stmt, scenario.recorded)
            if self._simulate(stmt, scenario, evicted, hopeless):
                return True
            stmt.rollback(cp)
            return False
        # The simulations, one per node of the newest victim job, planned while nothing is evicted yet so
        # that each can first be tested against the bounds of exactly what it evicts (_hopeless).
        latest = scenario.potential[-1].job
        tried: set[tuple[str, ...]] = set()
        plan: list[tuple[list[TaskInfo], list[TaskInfo], bool]] = []
        for node in sorted({t.node.name for t in latest.tasks if t.node is not None}):
            group = scenario.potential_on(node)
            key = tuple(sorted(t.uid for t in group))
            if not group or key in tried:
                continue
            tried.add(key)
            evicted = [*scenario.recorded, *group]
            plan.append((group, evicted, self._hopeless(scenario, evicted)))
        cp = stmt.checkpoint()
        if not self._carried:
            self._evict(stmt, scenario.recorded)
        for group, evicted, hopeless in plan:
            node_cp = stmt.checkpoint()
            self._evict(stmt, group)
            if self._simulate(stmt, scenario, evicted, hopeless):
                return True
            stmt.rollback(node_cp)
            if self.budget.stopped:
                break
        stmt.rollback(cp)
        return False

    def _hopeless(self, scenario: Scenario, evicted: Sequence[TaskInfo]) -> bool:
        """True when the simulation that evicts exactly `evicted` must fail: the GPU bounds of
        :meth:`_bounds_ok` (the total and the whole devices per node), applied to those victims only rather
        than to the whole scenario (a simulation evicts the recorded victims and one node's group of the
        newest ones), with `keep_in` naming more victims that must be re-placed. Called in the state before
        the simulation evicts anything, which is the state the solve began in (:attr:`_free_gpus`).

        The total counts each device's free milli-GPU, never below zero: a device claimed beyond its
        capacity (a pod bound behind the scheduler's back) takes nothing from the others, whereas
        :meth:`_idle_gpus` nets it against them.

        Such a simulation is still counted as simulated (search budget, ``simulations``): only its
        re-placement is saved, so the search and its budget stay those of the full simulation.
        """
        pending = scenario.pending
        need = sum(_gpu_need(t) for t in pending)
        if not need:
            return False
        ssn = self.ssn
        if self._free_gpus is None:
            self._free_gpus = self._idle_gpus() + sum(
                max(0, n.dev_alloc[d] + n.dev_pipe[d] - GPU_MILLI)
                for n in ssn.nodes
                if n.spec.ready
                for d in range(n.gpus)
            )
        have = self._free_gpus
        if self._nothing_kept({id(t.job): t.job for t in evicted}.values(), scenario.requested):
            return self._hopeless_unkept(pending, need, have, evicted)
        slots = _Slots(ssn, pending, self._busy, self._levels)
        keep_in = self.keep_in
        kept_in: dict[str, bool] = {}  # keep_in's answer per victim job (the same for each of its tasks)
        batches: tuple[list[TaskInfo], list[TaskInfo]] = ([], [])  # by kept: slots count a set of devices
        carried = self._carried
        for t in evicted:
            if t.status not in ACTIVE_ALLOCATED and t.uid not in carried:
                continue  # (a carried victim was active in the base state: only the carry evicted it)
            kept = self._kept(t, scenario.requested)
            if (
                not kept
                and keep_in is not None
                and not (t.request.gpu_fraction_milli is None and t.request.gpu_memory_mib is not None)
            ):
                answer = kept_in.get(t.job.uid)
                if answer is None:
                    answer = kept_in[t.job.uid] = keep_in(t.job, scenario.requested, evicted)
                kept = answer
            have += 0 if kept else ssn.task_vec(t)[0]
            batches[kept].append(t)
        slots.add(batches[False], False)
        slots.add(batches[True], True)
        return not (have >= need and slots.ok())

    def _hopeless_unkept(
        self, pending: Sequence[TaskInfo], need: int, have: int, evicted: Sequence[TaskInfo]
    ) -> bool:
        """:meth:`_hopeless` when no victim is kept: every counted task frees what it holds.

        The counts then depend on nothing but the evicted tasks, so those over the last evicted list that
        was wholly counted are reused when this list extends it (a gang's partial jobs evict what the
        previous one recorded and more): only the tasks beyond it are added. The levels the slots read are
        the solve's copy of its base state, and a reused task must still be counted (active, or carried)."""
        ssn = self.ssn
        carried = self._carried
        hit = self._unkept
        base: Sequence[TaskInfo] = ()
        freed = 0
        slots: _Slots | None = None
        if hit is not None:
            done, got, old = hit
            n = len(done)
            if (
                n <= len(evicted)
                and evicted[:n] == done
                and all(t.status in ACTIVE_ALLOCATED or t.uid in carried for t in done)
            ):
                slots = old.copy_for(pending)
                if slots is not None:
                    base, freed = done, got
        if slots is None:
            slots = _Slots(ssn, pending, self._busy, self._levels)
        counted: list[TaskInfo] = []
        whole = True  # every task of `evicted` counted (else the result is not kept for reuse)
        for t in evicted[len(base) :]:
            if t.status not in ACTIVE_ALLOCATED and t.uid not in carried:
                whole = False
                continue  # (a carried victim was active in the base state: only the carry evicted it)
            freed += ssn.task_vec(t)[0]
            counted.append(t)
        slots.add(counted, False)
        if whole and slots.demand:
            self._unkept = (list(evicted), freed, slots)
        return not (have + freed >= need and slots.ok())

    def _evict(self, stmt: Statement, tasks: Sequence[TaskInfo]) -> None:
        # A task listed twice is evicted once: the filter reads each status as the batch goes.
        stmt.evict_all((t for t in tasks if t.status in ACTIVE_ALLOCATED), self.action, self.reason, True)

    def _simulate(
        self, stmt: Statement, scenario: Scenario, evicted: list[TaskInfo], hopeless: bool = False
    ) -> bool:
        """Re-place victims and the preemptor (pipeline only, queue order); validate. Rolls back on failure.

        Refused, with nothing done, when the search budget is used up (see :mod:`.budget`). A `hopeless`
        simulation (:meth:`_hopeless`) is counted as one that failed, without re-placing anything."""
        if not self.budget.allow():
            return False
        if hopeless:
            self.ssn.work[f"{self.action}.simulations"] += 1
            self.ssn.work[f"{self.action}.proved"] += 1
        elif self._simulate_once(stmt, scenario, evicted):
            return True
        self.budget.failed()
        return False

    def _simulate_once(self, stmt: Statement, scenario: Scenario, evicted: list[TaskInfo]) -> bool:
        ssn = self.ssn
        ssn.work[f"{self.action}.simulations"] += 1
        cp = stmt.checkpoint()
        victim_uids = {t.job.uid for t in evicted}
        victim_jobs = [ssn.job_by_uid[uid] for uid in sorted(victim_uids)]
        preemptor = scenario.preemptor
        freed = {t.node.name: t.node for t in evicted if t.node is not None}  # before anything moves
        # A pod whose fit depends on other pods (required pod affinity, spread) can start to fit when a victim
        # is put back, so the monotone shut-out checks do not hold for it.
        monotone = not any(t.pod.has_pod_constraints for t in scenario.pending)
        if monotone and self._preemptor_shut_out(scenario, freed):
            # The preemptor cannot be placed even now, before any victim is re-placed: whoever takes the
            # first turn, its own turn can only fail (the monotone checks of _preemptor_shut_out; a pod
            # whose fit depends on other pods is left to them).
            return False
        waiting = {j.uid: j for j in victim_jobs}  # victims still to take their turn
        # The waiting victims the stranded checks must still read: one they found they can skip for good
        # (its loss is allowed, or its tasks are of a kind they do not test) is dropped, so each turn reads
        # only the victims it can prove something about rather than every waiting one. Empty when no
        # victim's loss can be refused (_nothing_kept).
        nothing_kept = self._nothing_kept(victim_jobs, scenario.requested)
        watch = {} if nothing_kept else dict(waiting)
        keeps: dict[str, bool] = {}
        # The evicted tasks of each victim, in `evicted` order: the checks after each turn read one victim's
        # tasks at a time, which would otherwise scan every evicted task per victim per turn.
        by_job: dict[str, list[TaskInfo]] = {}
        for t in evicted:
            by_job.setdefault(t.job.uid, []).append(t)
        if watch and self._pair_stranded(scenario, watch.values(), by_job, keeps, evicted):
            return False  # nothing moved yet
        involved = sorted([*victim_jobs, preemptor], key=lambda p: p.index)
        order = JobsByQueue(
            ssn,
            involved,
            include_virtual=True,
            shared_init=self._shared_init,
            memo=self._memo,
            runs=self._ordering_peers(involved),
            keys=self._keys,
        )
        placed = False
        # Until the simulation ends capacity only shrinks (the preemptor and victims are placed, never
        # removed), so a victim task that fitted nowhere answers for every identical one after it.
        failed: dict[tuple[object, ...], str] = {}
        # What the victims whose turn has passed lose, kept as they pass (see `doomed`). `_doomed` is asked
        # only as their number grows by a quarter: what it proves, it proves at any turn (the simulation
        # fails either way), so this changes no outcome, only how late a doomed simulation stops. It is fed
        # only until the preemptor's turn: after it a doomed simulation costs the victims' remaining turns,
        # about what telling the tracker of each of them costs, so the tracker is built at the first victim
        # turn before the preemptor's, if there is one.
        doom: Doom | None = None
        passed = 0
        next_doomed = 1
        # After the preemptor's turn nothing waits on the victims' turns but the validator: once every
        # waiting victim would find its first task in `failed` (_memo_fails), each remaining turn fails and
        # moves nothing, so they are skipped. The checks after each turn only foresee the validator's
        # refusal, so the outcome is the same. `failed` only grows and `waiting` only shrinks, so victims
        # before `covered` (in `victim_jobs` order) stay covered; it is advanced as `failed` grows.
        covered = 0
        known_failed = 0
        for nxt in turns(order, involved):
            if nxt is preemptor:
                if not self._place_preemptor(stmt, scenario):
                    stmt.rollback(cp)
                    return False
                placed = True
            else:
                waiting.pop(nxt.uid, None)
                watch.pop(nxt.uid, None)
                if doom is None and not placed and self.doomed is not None:
                    doom = self.doomed(evicted, scenario.requested)  # before any victim has moved
                if self._replace_victim(stmt, nxt, failed):
                    self._restore_unmoved(stmt, nxt, cp)
                    if not placed and monotone and self._preemptor_shut_out(scenario, freed):
                        stmt.rollback(cp)  # the preemptor's turn could only fail: skip the rest of the queue
                        return False
                elif placed and len(failed) > known_failed:
                    known_failed = len(failed)
                    covered, rest_fail = self._covered(victim_jobs, covered, waiting, failed)
                    if rest_fail:
                        break  # every turn still to come fails and moves nothing (see `covered`)
                if doom is not None and not placed:
                    doom.lose(nxt, by_job.get(nxt.uid, ()))
                passed += 1
                if not nothing_kept and self._loses_kept(scenario, nxt, by_job, evicted, keeps):
                    stmt.rollback(cp)  # the validator refuses the scenario: skip the rest of the queue
                    return False
            if watch and self._kept_stranded(scenario, watch, by_job, keeps, evicted):
                stmt.rollback(cp)  # a victim the validator may not lose can no longer be re-placed
                return False
            if watch and not placed and self._pair_stranded(scenario, watch.values(), by_job, keeps, evicted):
                stmt.rollback(cp)  # the preemptor and a victim it may not lose no longer fit together
                return False
            if waiting and not placed and nxt is not preemptor and passed >= next_doomed:
                next_doomed = passed + max(1, passed // 4)
                if self._doomed(doom):
                    stmt.rollback(cp)  # what is lost already makes the validator refuse
                    return False
        # Victims put back where they were are no longer victims.
        scenario.evicted = [t for t in evicted if t.status in (PodStatus.RELEASING, PodStatus.PIPELINED)]
        if not placed or not self.validator(ssn, scenario):
            scenario.evicted = []
            stmt.rollback(cp)
            return False
        self._turns_from = cp
        return True

    def _nothing_kept(self, victims: Iterable[JobInfo], requested: Vec) -> bool:
        """True when `keeps_none` holds for every victim's queue: the validator refuses no scenario for
        losing one of them, so :meth:`_keeps` is False for each and the checks built on it prove nothing."""
        if self.must_keep is None and self.keep_in is None:
            return True
        if self.keeps_none is None:
            return False
        queues = {id(j.queue): j.queue for j in victims}
        return all(self.keeps_none(q, requested) for q in queues.values())

    def _loses_kept(
        self,
        scenario: Scenario,
        victim: JobInfo,
        by_job: dict[str, list[TaskInfo]],
        evicted: list[TaskInfo],
        keeps: dict[str, bool],
    ) -> bool:
        """True when `victim`, whose turn just ended, keeps a task evicted (lost: no later turn moves it) and
        the validator refuses every scenario that loses a task of it (`must_keep`, or `keep_in` with what
        this simulation evicted, grouped by job in `by_job`; cached in `keeps`): the simulation can only
        fail."""
        if self.must_keep is None and self.keep_in is None:
            return False
        if not any(t.status is PodStatus.RELEASING for t in by_job.get(victim.uid, ())):
            return False
        return self._keeps(victim, scenario.requested, evicted, keeps)

    def _doomed(self, doom: Doom | None) -> bool:
        """True when the tracker of this simulation's losses (`doomed`) says the validator refuses it
        whatever the victims still waiting for their turn lose: the victims whose turn has passed are
        final (no later turn moves them)."""
        return doom is not None and doom.refused()

    def _pair_stranded(
        self,
        scenario: Scenario,
        waiting: Iterable[JobInfo],
        by_job: dict[str, list[TaskInfo]],
        keeps: dict[str, bool],
        evicted: list[TaskInfo],
    ) -> bool:
        """True, before the preemptor's turn, when its one whole-GPU task and an evicted whole-GPU task of a
        victim still waiting for its turn, whose loss the validator refuses, cannot both get whole free
        devices now (on two nodes, or together on one): whichever goes first, the preemptor fails or the
        victim is lost. Counts of whole free devices per node only shrink until then (re-placed victims
        take devices; one put back takes as many on its node as it leaves), and the count ignores every
        other check, so it only errs towards "fits". Tasks whose fit depends on other pods are not tested.
        """
        if (self.must_keep is None and self.keep_in is None) or len(scenario.pending) != 1:
            return False
        p = scenario.pending[0]
        gp = p.request.gpus
        if gp <= 0 or p.shared or p.pod.has_pod_constraints:
            return False
        buckets = self.ssn.free_index.buckets
        top = len(buckets) - 1

        def nodes_with(k: int) -> int:  # nodes with at least k whole free devices
            return sum(len(buckets[j]) for j in range(k, top + 1)) if k <= top else 0

        req = scenario.requested
        for v in waiting:
            tasks = [t for t in by_job.get(v.uid, ()) if t.status is PodStatus.RELEASING]
            if not tasks or any(t.shared or t.pod.has_pod_constraints or t.request.gpus <= 0 for t in tasks):
                continue
            if not self._keeps(v, req, evicted, keeps):
                continue
            for t in tasks:
                gv = t.request.gpus
                a, b, both = nodes_with(gp), nodes_with(gv), nodes_with(max(gp, gv))
                apart = a > 0 and b > 0 and not (a == 1 and b == 1 and both == 1)
                if not apart and nodes_with(gp + gv) == 0:
                    return True
        return False

    def _kept_stranded(
        self,
        scenario: Scenario,
        watch: dict[str, JobInfo],
        by_job: dict[str, list[TaskInfo]],
        keeps: dict[str, bool],
        evicted: list[TaskInfo],
    ) -> bool:
        """True when a victim still waiting for its turn, whose loss the validator refuses, has an evicted
        task that fits no node now: it will be lost, so the simulation can only fail.

        Until its turn only the preemptor and other victims are placed (victims maybe put back where they
        were), so capacity only shrinks: a task that fits nowhere now fits nowhere then (the argument of
        :meth:`_preemptor_shut_out`). Only whole-GPU and CPU tasks whose fit does not depend on other pods'
        placement of their own (affinity, spread, ports, volumes) are tested. `keeps` caches, per victim,
        whether its loss is refused.

        `watch` holds the waiting victims still worth reading. A victim's evicted tasks do not change
        before its turn and `keeps` is fixed for the simulation, so one skipped here for its loss being
        allowed or for the kind of its tasks would be skipped at every later turn: it is removed from
        `watch`. :meth:`_pair_stranded` skips every victim removed so (its skips include these).
        """
        if self.must_keep is None and self.keep_in is None:
            return False
        ssn = self.ssn
        req = scenario.requested
        done: list[str] = []
        stranded = False
        for uid, v in watch.items():
            if not self._keeps(v, req, evicted, keeps):
                done.append(uid)  # its loss is allowed: nothing to prove (cheaper than gathering its tasks)
                continue
            tasks = [t for t in by_job.get(uid, ()) if t.status is PodStatus.RELEASING]
            if not tasks or any(t.shared or t.pod.has_pod_constraints for t in tasks):
                done.append(uid)
                continue
            if any(best_fit(ssn, t, ssn.nodes, allow_idle=False) is None for t in tasks):
                stranded = True
                break
        for uid in done:
            del watch[uid]
        return stranded

    def _keeps(self, v: JobInfo, req: Vec, evicted: list[TaskInfo], keeps: dict[str, bool]) -> bool:
        """Whether the validator refuses every scenario that loses a task of victim `v` (`must_keep`, or
        `keep_in` with what this simulation evicted); cached per victim in `keeps`."""
        keep = keeps.get(v.uid)
        if keep is None:
            keep = keeps[v.uid] = (self.must_keep is not None and self.must_keep(v.queue, req)) or (
                self.keep_in is not None and self.keep_in(v, req, evicted)
            )
        return keep

    def _replace_victim(self, stmt: Statement, job: JobInfo, failed: dict[tuple[object, ...], str]) -> bool:
        """Re-place a victim job, pipeline only; a job with a topology constraint domain by domain.

        `failed` is :func:`allocate_job`'s memo of tasks that fitted nowhere, valid while capacity only
        shrinks (one simulation); it is used on the plain path only."""
        ssn = self.ssn
        if has_subgroup_constraints(job):
            return place_subgroups(
                ssn,
                stmt,
                job,
                job.tasks_to_allocate(include_virtual=True),
                lambda t, nodes: allocate_task(
                    ssn, stmt, t, nodes, self.action, pipeline_only=True, explain=False
                ),
            )
        if not topology.constrained(job) or topology.constraint_error(ssn, job) is not None:
            if failed and self._memo_fails(job, failed):
                return False
            return allocate_job(
                ssn, stmt, job, ssn.nodes, self.action, pipeline_only=True, record_errors=False, failed=failed
            )
        tasks = job.tasks_to_allocate(include_virtual=True)
        p = topology.plan(ssn, job, tasks, live=True) if tasks else None
        if p is None:
            return allocate_job(
                ssn, stmt, job, ssn.nodes, self.action, pipeline_only=True, record_errors=False
            )
        for nodes, _domain in p.node_sets(ssn):
            if allocate_job(ssn, stmt, job, nodes, self.action, pipeline_only=True, record_errors=False):
                return True
        return False

    def _covered(
        self,
        jobs: Sequence[JobInfo],
        start: int,
        waiting: Mapping[str, JobInfo],
        failed: dict[tuple[object, ...], str],
    ) -> tuple[int, bool]:
        """From `start`, the first of `jobs` still `waiting` whose re-placement :meth:`_memo_fails` does not
        rule out, and whether there is none (every turn still to come fails and moves nothing)."""
        i = start
        while i < len(jobs) and (jobs[i].uid not in waiting or self._memo_fails(jobs[i], failed)):
            i += 1
        return i, i == len(jobs)

    def _memo_fails(self, job: JobInfo, failed: dict[tuple[object, ...], str]) -> bool:
        """True when re-placing victim `job` must fail and move nothing: it takes the plain path of
        :meth:`_replace_victim` and :func:`allocate_job` would find its first task in the memo `failed`
        of tasks that fitted nowhere. The task's signature is taken once per solve."""
        plain = self._plain.get(job.uid)
        if plain is None:  # fixed by the job's spec and the session's topologies
            plain = self._plain[job.uid] = not has_subgroup_constraints(job) and (
                not topology.constrained(job) or topology.constraint_error(self.ssn, job) is not None
            )
        if not plain:
            return False
        first = job.first_to_allocate(include_virtual=True)
        if first is None:
            return False
        sig = self._signatures.get(first.uid)
        if sig is None:
            if not memoisable(first):  # (fixed by the pod's spec: a memoisable task's signature is kept)
                return False
            sig = self._signatures[first.uid] = task_signature(first)
        return sig in failed

    def _ordering_peers(self, involved: Sequence[JobInfo]) -> dict[str, Run]:
        """Pending jobs that can influence the order in which the preemptor and the victims are re-placed.

        KAI orders every pending job but places only the preemptor and the victims. Another job matters
        only through the queue comparator: as the head of a leaf involved in the simulation, or as the best
        job of a queue that shares a parent queue with one. Jobs elsewhere are left out to save time. The
        involved jobs themselves are pushed with their live state, so their index entries are skipped.
        """
        uids = {j.uid for j in involved}
        leaves: set[str] = set()
        for j in involved:
            q = j.queue
            if q is None:
                continue
            leaves.add(q.name)
            for a in q.ancestors():
                if a is not q:
                    leaves.update(self._leaves_under(a))
        pending = self.index.pending

        def skip(j: JobInfo) -> bool:
            return j.uid in uids

        return {name: (pending[name], skip) for name in sorted(leaves) if pending.get(name)}

    def _leaves_under(self, q: QueueInfo) -> tuple[str, ...]:
        out = self._under.get(q.name)
        if out is None:
            found: list[str] = []
            stack = [q]
            while stack:
                x = stack.pop()
                if x.is_leaf:
                    found.append(x.name)
                stack.extend(x.children)
            out = self._under[q.name] = tuple(sorted(found))
        return out

    def _restore_unmoved(self, stmt: Statement, job: JobInfo, since: int) -> None:
        """A victim re-placed on the node it was evicted from is un-evicted rather than moved (as KAI does).

        A shared-GPU task counts as moved when it lands on other devices of that node.
        """
        evicts = {op.task.uid: op for op in stmt.ops[:since] if op.kind == "evict" and op.task.job is job}
        for t in job.tasks:
            op = evicts.get(t.uid)
            if (
                op is None
                or t.status is not PodStatus.PIPELINED
                or t.node is None
                or t.node is not op.prev_node
            ):
                continue
            if t.shared and t.devices != op.prev_devices:
                continue
            node = t.node
            devices = t.devices
            if not t.shared and all(
                node.dev_alloc[d] == 0 and node.dev_pipe[d] == 0 and node.dev_rel[d] == 0
                for d in op.prev_devices
            ):
                devices = op.prev_devices  # its own devices are still free: keep the original layout
            stmt.restore(t, op.prev_status, node, devices, op.prev_portion, self.action)

    def _preemptor_shut_out(self, scenario: Scenario, freed: dict[str, NodeInfo]) -> bool:
        """True when placing the preemptor must fail now and at any later point of this simulation.

        Until the preemptor's turn a simulation only places and restores victims, so queue allocations only
        grow and node capacity only shrinks. Both checks are monotone under that: the queue capacity check,
        and a task that fits no node on its own -- for a shared-GPU task, the relaxation of
        :func:`_shared_may_fit` (the exact check is not monotone: a device that gains a shared pod can start
        to accept it). `freed` are the nodes the simulation evicted victims from.
        """
        ssn = self.ssn
        if over_capacity(ssn, scenario.preemptor, scenario.pending) is not None:
            return True
        seen: set[tuple[object, ...]] = set()
        for t in scenario.pending:
            sig = task_signature(t)
            if sig in seen:
                continue
            seen.add(sig)
            if t.shared:
                # Candidates: where it could go before the evictions, or a node an evicted victim ran on.
                nodes = {n.name: n for n in (self._shared_nodes or {}).get(sig, ())}
                nodes.update(freed)
                if not any(_shared_may_fit(t, n) for n in nodes.values()):
                    return True
            elif best_fit(ssn, t, ssn.nodes, allow_idle=False) is None:
                return True
        return False

    def _place_preemptor(self, stmt: Statement, scenario: Scenario) -> bool:
        ssn = self.ssn
        if over_capacity(ssn, scenario.preemptor, scenario.pending) is not None:
            return False
        if has_subgroup_constraints(scenario.preemptor):
            # Each PodSet within its nested domain, as allocate places it; then the job waits: pipelined.
            if place_subgroups(
                ssn,
                stmt,
                scenario.preemptor,
                scenario.pending,
                lambda t, nodes: allocate_task(ssn, stmt, t, nodes, self.action, explain=False),
                prefix=len(scenario.pending) < self._complete,
            ):
                stmt.convert_to_pipelined(scenario.preemptor, self.action)
                return True
            return False
        p = (
            topology.plan(ssn, scenario.preemptor, scenario.pending, live=True)
            if topology.constrained(scenario.preemptor)
            else None
        )
        node_sets = [ssn.nodes] if p is None else (nodes for nodes, _domain in p.node_sets(ssn))
        cp = stmt.checkpoint()
        for nodes in node_sets:
            # Scored like any placement (a node where the task fits on idle capacity gets the idle bonus, as
            # in KAI's what-if allocation), then the whole job waits for the victims: pipelined.
            if all(
                allocate_task(ssn, stmt, t, nodes, self.action, explain=False) is None
                for t in scenario.pending
            ):
                stmt.convert_to_pipelined(scenario.preemptor, self.action)
                return True
            stmt.rollback(cp)
        return False


def finish(stmt: Statement, index: JobIndex) -> None:
    """Commit a solved statement; the evicted victims are now really leaving, no longer virtual.

    Tasks that ended exactly where they started (evicted, then un-evicted) leave no operation behind. The
    jobs the statement touched are re-filed in `index`.
    """
    touched: Iterable[JobInfo] = {op.task.job.uid: op.task.job for op in stmt.ops}.values()
    tasks = [op.task for op in stmt.ops if op.kind == "evict"]
    first: dict[str, Op] = {}
    for op in stmt.ops:
        first.setdefault(op.task.uid, op)
    unchanged = {
        uid
        for uid, op in first.items()
        if op.task.status is op.prev_status
        and op.task.node is op.prev_node
        and op.task.devices == op.prev_devices
    }
    stmt.ops = [op for op in stmt.ops if op.task.uid not in unchanged]
    stmt.commit()
    for t in tasks:
        t.virtual = False
    index.refresh(touched)
