"""The what-if search behind consolidation (KAI's job solver with the ``allPodsReallocated`` validator).

For one pending preemptible job (the preemptor) the search looks for running preemptible jobs that can be
*moved* -- evicted and at once re-placed elsewhere -- so that the preemptor's next tasks fit:

* The preemptor grows one task at a time (``tasks[:1]``, ``tasks[:2]``, ...). The victims of the last solved
  prefix are *recorded* and every scenario of the next prefix starts by evicting them again.
* For one prefix, scenarios accumulate victim jobs one at a time in victim order (the most over-share queue
  first, the lowest-ranked job first). A gang victim gives all its active tasks; an elastic victim above
  its minimum gives one task (the last in task order) and goes back into the victim queue with the rest.
* Simulating a scenario: evict the recorded victims; then, for each node of the newest victim job (by node
  name), evict every potential victim job with a task on that node, and re-place -- pipeline only, in queue
  order -- the victim jobs and the preemptor's prefix. A victim re-placed on the node it was evicted from is
  un-evicted (it keeps running there), unless it is a shared-GPU task that lands on another GPU group.
* The scenario holds only if the preemptor's prefix fits and no victim task is left releasing.
* Topology: the preemptor and every re-placed victim with a topology constraint are pipelined domain by
  domain, as allocate places them (:func:`scheduler.engine.topology.plan`, live), so consolidation may move
  pods out of a rack to free it for a rack-constrained gang and never spreads such a gang (or a moved
  victim with a required level) across domains. A job whose subgroups carry their own constraints is
  pipelined with allocate's subgroup walk (:func:`~scheduler.engine.actions.subgroup_allocate.place_subgroups`),
  each PodSet within its nested domain (a prefix short of the complete list without the gang rule).

Everything happens inside one :class:`~scheduler.engine.session.Statement`: a failed search leaves the session
exactly as it was, a successful one returns the statement for the caller to commit.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from scheduler.engine import topology
from scheduler.engine.actions.common import over_capacity
from scheduler.engine.actions.jobindex import JobIndex
from scheduler.engine.actions.subgroup_allocate import (
    has_subgroup_constraints,
    place_subgroups,
    subgroup_constraint_problem,
)
from scheduler.engine.ordering import JobsByQueue, Run, turns
from scheduler.engine.placement import best_fit, max_node_resources_error
from scheduler.engine.session import (
    ACTIVE_ALLOCATED,
    ACTIVE_USED,
    JobInfo,
    NodeInfo,
    Session,
    Statement,
    TaskInfo,
)
from scheduler.engine.state import PodRequest, PodStatus

ACTION = "consolidation"
UNLIMITED = -1  # max_consolidation_preemptees value meaning "no cap"


def eviction_message(t: TaskInfo) -> str:
    """KAI's message for a pod moved by consolidation."""
    return f"Pod {t.uid} was preempted and rescheduled due to bin packing (resource consolidation) procedure"


# -- placement ---------------------------------------------------------------------------------------------
def _unevict_devices(node: NodeInfo, t: TaskInfo, devices: tuple[int, ...]) -> tuple[int, ...] | None:
    """Devices `t` keeps when it is put back on its own node; None when KAI would move it instead.

    A whole-GPU task is always un-evicted: it keeps its original devices if nothing else claimed them,
    else the free ones the fit chose. A shared-GPU task is un-evicted only when it goes back into its own
    GPU group, i.e. onto its original devices while they still host other live pods; a device it held
    alone is offered as a fresh whole-GPU slot, which in KAI means a new group, hence a move.
    """
    if not t.shared:
        if all(node.dev_alloc[d] == 0 and node.dev_pipe[d] == 0 for d in t.devices):
            return t.devices
        return devices
    if devices == t.devices and all(node.dev_alloc[d] + node.dev_pipe[d] > 0 for d in devices):
        return devices
    return None


# Whether a request passes KAI's max-node-resources pre-predicate depends only on the (static) node specs.
_PRE_OK: weakref.WeakKeyDictionary[Session, dict[PodRequest, bool]] = weakref.WeakKeyDictionary()


def _pre_predicate_ok(ssn: Session, t: TaskInfo) -> bool:
    memo = _PRE_OK.setdefault(ssn, {})
    ok = memo.get(t.request)
    if ok is None:
        ok = memo[t.request] = max_node_resources_error(ssn, t) is None
    return ok


def pipeline_task(
    ssn: Session,
    stmt: Statement,
    t: TaskInfo,
    nodes: Sequence[NodeInfo],
    domain: Sequence[NodeInfo] | None = None,
) -> bool:
    """Pipeline `t` onto the best node among `nodes` (idle + releasing capacity); False when none fits.

    Nodes are scored as in a real allocation -- including the bonus for fitting on idle capacity, which KAI
    computes whatever the pipeline-only mode -- but the task is always pipelined, never bound. `domain`
    (a topology domain's nodes) narrows the choice further.
    """
    if not _pre_predicate_ok(ssn, t):
        return False
    # A GPU task can only go where GPU capacity is idle or releasing: a node that had some when the
    # search began (feasible) or one a victim was evicted from -- all in `nodes`. Offering it every node
    # is therefore the same choice, and lets the binpack fast path answer without scoring each node.
    if domain is None:
        candidates = nodes if t.is_cpu_only() else ssn.nodes
    elif t.is_cpu_only():
        names = {n.name for n in nodes}
        candidates = [n for n in domain if n.name in names]
    else:
        candidates = domain
    best = best_fit(ssn, t, candidates, allow_idle=True)
    if best is None:
        return False
    if t.virtual and t.status is PodStatus.RELEASING and best.node is t.node:
        keep = _unevict_devices(best.node, t, best.devices)
        if keep is not None:
            ev = next(op for op in reversed(stmt.ops) if op.kind == "evict" and op.task is t)
            stmt.restore(t, ev.prev_status, best.node, keep, ev.prev_portion, ACTION)
            return True
    stmt.place(t, best.node, best.devices, best.portion, pipelined=True, action=ACTION)
    return True


def pipeline_job(
    ssn: Session,
    stmt: Statement,
    job: JobInfo,
    tasks: Sequence[TaskInfo],
    nodes: Sequence[NodeInfo],
    prefix: bool = False,
) -> bool:
    """Pipeline all of `tasks` (of `job`) or none, after the queue capacity check; a job with a topology
    constraint within the first of its domains (in allocate's order) that takes them all."""
    if not tasks or over_capacity(ssn, job, tasks) is not None:
        return False
    if has_subgroup_constraints(job):

        def place(t: TaskInfo, sub: Sequence[NodeInfo]) -> str | None:
            ok = pipeline_task(ssn, stmt, t, nodes, None if sub is ssn.nodes else sub)
            return None if ok else f"pod {t.name} fits no node"

        return place_subgroups(ssn, stmt, job, tasks, place, prefix)
    p = None
    if topology.constrained(job) and topology.constraint_error(ssn, job) is None:
        p = topology.plan(ssn, job, tasks, live=True)
    domains: Iterable[Sequence[NodeInfo] | None] = (
        [None] if p is None else (None if d is None else d.nodes for _nodes, d in p.node_sets(ssn))
    )
    cp = stmt.checkpoint()
    for domain in domains:
        if all(pipeline_task(ssn, stmt, t, nodes, domain) for t in tasks):
            return True
        stmt.rollback(cp)
    return False


# -- victims ----------------------------------------------------------------------------------------------
def job_view(job: JobInfo, tasks: Sequence[TaskInfo]) -> JobInfo:
    """A stand-in for `job` holding only `tasks` (KAI's CloneWithTasks); the tasks are shared, not copied."""
    v = JobInfo(job.spec, job.queue, job.index)
    v.tasks = list(tasks)
    return v


def tasks_to_evict(view: JobInfo) -> tuple[list[TaskInfo], bool]:
    """KAI's GetTasksToEvict: one task of an elastic job above its minimum, else all active tasks.

    Tasks are taken in reverse task order. The flag says whether the job has more to give later.
    """
    tree = view.subgroup_tree()
    if tree is not None:  # elastic shrink per PodSet (KAI)
        return tree.tasks_to_evict(ACTIVE_ALLOCATED)
    active = sorted((t for t in view.tasks if t.status in ACTIVE_ALLOCATED), key=TaskInfo.sort_key)
    if len(active) > view.min_available:
        return [active[-1]], True
    return active[::-1], False


def victim_queue(
    ssn: Session, preemptor: JobInfo, limit: int, runs: dict[str, Run] | None = None
) -> JobsByQueue:
    """Preemptible jobs with an active task, other than the preemptor, in victim order.

    KAI admits jobs while its counter is not yet *above* the limit, so up to limit + 1 jobs get in.
    Without a limit every such job gets in: `runs` (:meth:`ConsolidationIndex.victim_runs`) then give them
    presorted, read lazily, instead of heaping a view of every job for each prefix of each preemptor.
    """
    # The caller pops only while the session is as the preemptor's search found it (each scenario is rolled
    # back first), so each victim's allocation is summed once (`fixed_victims`).
    if limit == UNLIMITED and runs is not None:
        return JobsByQueue(ssn, (), victim=True, runs=runs, fixed_victims=True)
    admitted = 0
    views: list[JobInfo] = []
    for job in ssn.jobs:
        if job.queue is None or not job.queue.is_leaf or not job.preemptible or job is preemptor:
            continue
        if limit != UNLIMITED and admitted > limit:
            break  # no later job is admitted
        if job.active_allocated() == 0:
            continue
        admitted += 1
        views.append(job_view(job, job.tasks))
    return JobsByQueue(ssn, views, victim=True, fixed_victims=True)


class ConsolidationIndex:
    """What consolidation's searches read of the jobs they do not move, kept across the action's pending
    jobs and told about each commit (:meth:`refresh`) instead of rescanned per prefix and per simulation.

    * ``victims``: the session's :class:`JobIndex` (victim-eligible jobs per leaf, sorted by job order).
    * ``pending[leaf]``: the jobs of the leaf with a pending task, by job index. Only a commit changes
      that: a search evicts tasks (releasing, never pending) and places the preemptor's, and jobs it moves
      are added to a simulation's ordering whatever their pending tasks.
    """

    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn
        self.victims = JobIndex.of(ssn)
        self.pending: dict[str, dict[str, JobInfo]] = {}
        for j in ssn.jobs:
            if j.queue is not None and j.has_tasks_to_allocate():
                self.pending.setdefault(j.queue.name, {})[j.uid] = j

    def refresh(self, jobs: Iterable[JobInfo]) -> None:
        """Re-file `jobs` after a committed statement changed their tasks (no other job changed)."""
        jobs = list({j.uid: j for j in jobs}.values())
        self.victims.refresh(jobs)
        for j in jobs:
            if j.queue is None:
                continue
            leaf = self.pending.setdefault(j.queue.name, {})
            if j.has_tasks_to_allocate():
                leaf[j.uid] = j
            else:
                leaf.pop(j.uid, None)

    def victim_runs(self, preemptor: JobInfo) -> dict[str, Run]:
        """The victim runs of every leaf queue, less `preemptor`, leaves in the order their first victim
        comes in session job order (the order a heap of views would have created them in)."""
        first: list[tuple[int, str]] = []
        for name, entries in self.victims.victims.items():
            q = self.ssn.queues[name]
            if not q.is_leaf:
                continue
            idx = [j.index for _, j in entries if j is not preemptor and j.preemptible]
            if idx:
                first.append((min(idx), name))

        def skip(j: JobInfo) -> bool:
            return j is preemptor

        return {name: (self.victims.victims[name], skip) for _, name in sorted(first)}


# -- one prefix of the preemptor --------------------------------------------------------------------------
@dataclass
class _Scenario:
    """Victim groups of one scenario: recorded (from the previous prefix) and potential (added here).

    A group is the task list one victim pop gave (a whole gang, or one elastic task). ``node_jobs`` maps a
    node name to the uids of the potential victim jobs with a group task on it, in order of arrival.
    """

    recorded: list[list[TaskInfo]]
    potential: list[list[TaskInfo]] = field(default_factory=list)
    node_jobs: dict[str, list[str]] = field(default_factory=dict)
    latest: JobInfo | None = None
    # Each potential victim job's groups with their arrival number, so that a node's tasks are gathered
    # from its few jobs rather than from every potential group.
    job_groups: dict[str, list[tuple[int, list[TaskInfo]]]] = field(default_factory=dict)

    def add(self, group: list[TaskInfo]) -> None:
        seq = len(self.potential)
        self.potential.append(group)
        for uid in dict.fromkeys(t.job.uid for t in group):
            self.job_groups.setdefault(uid, []).append((seq, group))
        for t in group:
            if t.node is not None:
                uids = self.node_jobs.setdefault(t.node.name, [])
                if t.job.uid not in uids:
                    uids.append(t.job.uid)
        self.latest = group[0].job

    def recorded_tasks(self) -> list[TaskInfo]:
        return [t for g in self.recorded for t in g]

    def potential_on(self, node: str) -> list[TaskInfo]:
        """Potential victim tasks, on any node, of the jobs that have a potential victim on `node`."""
        jobs = set(self.node_jobs.get(node, ()))
        # The groups holding a task of those jobs, in arrival order (each group once), then their tasks.
        groups = sorted({seq: g for uid in jobs for seq, g in self.job_groups.get(uid, ())}.items())
        return [t for _, g in groups for t in g if t.job.uid in jobs]

    def groups(self) -> list[list[TaskInfo]]:
        return [*self.recorded, *self.potential]


@dataclass
class _Solver:
    """Search state for one preemptor."""

    ssn: Session
    preemptor: JobInfo
    limit: int
    base_nodes: list[NodeInfo]
    complete: int = 0  # tasks of the preemptor's complete list
    index: ConsolidationIndex | None = None
    _runs: dict[str, Run] | None = None  # victim runs for this preemptor, built on first use
    _base_names: set[str] | None = None  # names of base_nodes, and every node's session position (_nodes)
    _position: dict[str, int] = field(default_factory=dict)

    def _nodes(self, *extra: Sequence[TaskInfo]) -> list[NodeInfo]:
        """Feasible nodes plus the nodes the given victims sit on, in session order."""
        if self._base_names is None:
            self._base_names = {n.name for n in self.base_nodes}
            self._position = {n.name: i for i, n in enumerate(self.ssn.nodes)}
        more: dict[str, NodeInfo] = {}
        for tasks in extra:
            for t in tasks:
                if t.node is not None and t.node.name not in self._base_names:
                    more[t.node.name] = t.node
        if not more:
            return list(self.base_nodes)
        pos = self._position
        return sorted([*self.base_nodes, *more.values()], key=lambda n: pos[n.name])

    def _evict(self, stmt: Statement, tasks: Sequence[TaskInfo]) -> None:
        for t in tasks:
            if t.status in ACTIVE_ALLOCATED:
                stmt.evict(t, ACTION, eviction_message(t), virtual=True)

    def _jobs_by_queue(self) -> dict[str, list[JobInfo]]:
        """Every job by its queue's name (membership is fixed within a session), built on first use."""
        found = self.ssn.action_cache.get("jobs-by-queue")
        if isinstance(found, dict):
            return found
        cache: dict[str, list[JobInfo]] = {}
        for j in self.ssn.jobs:
            if j.queue is not None:
                cache.setdefault(j.queue.name, []).append(j)
        self.ssn.action_cache["jobs-by-queue"] = cache
        return cache

    def _simulate(
        self, stmt: Statement, pending: Sequence[TaskInfo], victims: Sequence[TaskInfo], nodes: list[NodeInfo]
    ) -> bool:
        """Re-place the victims' jobs and the preemptor's prefix in queue order; True if the prefix fits.

        KAI orders every job with a pending task too, but places only the victims' jobs and the preemptor.
        Skipped jobs change nothing, so only those sharing a leaf queue with a placed job are kept: they
        decide when that queue's turn comes. A victim job that cannot be re-placed ends the simulation:
        KAI would go on, but the scenario is refused all the same since that victim stays releasing.
        """
        ssn = self.ssn
        if self._hopeless(pending, victims, nodes):
            return False
        victim_uids = {t.job.uid for t in victims}
        queues = {t.job.queue.name for t in victims if t.job.queue is not None}
        assert self.preemptor.queue is not None
        queues.add(self.preemptor.queue.name)
        if self.index is not None:
            found = {j.uid: j for name in queues for j in self.index.pending.get(name, {}).values()}
            for uid in victim_uids:
                found[uid] = ssn.job_by_uid[uid]
            found[self.preemptor.uid] = self.preemptor
            jobs = sorted(found.values(), key=lambda j: j.index)
        else:
            by_leaf = self._jobs_by_queue()
            jobs = sorted(
                (
                    j
                    for name in queues
                    for j in by_leaf.get(name, ())
                    if j.uid in victim_uids or j is self.preemptor or j.has_tasks_to_allocate()
                ),
                key=lambda j: j.index,
            )
        order = JobsByQueue(ssn, jobs, include_virtual=True)
        involved = [j for j in jobs if j.uid in victim_uids or j is self.preemptor]
        placed = False
        for job in turns(order, involved):
            if job is self.preemptor:
                if not pipeline_job(ssn, stmt, job, pending, nodes, len(pending) < self.complete):
                    return False
                placed = True
            elif not pipeline_job(ssn, stmt, job, job.tasks_to_allocate(include_virtual=True), nodes):
                return False  # its evicted tasks stay releasing: the validator would refuse anyway
        return placed

    def _hopeless(self, pending: Sequence[TaskInfo], victims: Sequence[TaskInfo], nodes: list[NodeInfo]) -> bool:
        """True when the simulation must fail (:meth:`_simulate` false, or a victim left releasing, which
        :meth:`_run` refuses), checked with the victims evicted and nothing re-placed.

        Every victim job must be re-placed whole and the preemptor's tasks placed, and until then
        placements only take capacity (a victim put back takes as many devices as it left). So (a) the
        whole free devices must cover the whole-GPU tasks of the preemptor and of the evicted victims
        (shared-GPU tasks are left out of the count), and (b) each of the preemptor's tasks must fit some
        node on its own now (not tested for pods whose fit depends on other pods' placement).
        """
        ssn = self.ssn
        need = sum(t.request.gpus for t in pending if not t.shared)
        need += sum(
            t.request.gpus for t in victims if not t.shared and t.virtual and t.status is PodStatus.RELEASING
        )
        buckets = ssn.free_index.buckets
        if need > sum(k * len(b) for k, b in enumerate(buckets)):
            return True
        for t in pending:
            if t.pod.has_pod_constraints:
                continue
            if best_fit(ssn, t, nodes if t.is_cpu_only() else ssn.nodes, allow_idle=True) is None:
                return True
        return False

    def _run(
        self, stmt: Statement, sc: _Scenario, pending: Sequence[TaskInfo], victims: list[TaskInfo]
    ) -> list[list[TaskInfo]] | None:
        """Simulate with `victims` evicted; on success, the victim groups to record for the next prefix."""
        # KAI's scenarios_simulation_by_action; no decision reads it.
        self.ssn.work[f"{ACTION}.simulations"] += 1
        if not self._simulate(stmt, pending, victims, self._nodes(victims)):
            return None
        # allPodsReallocated: no victim of the scenario may be left releasing.
        if any(t.status is PodStatus.RELEASING for g in sc.groups() for t in g):
            return None
        moved = [t for t in victims if t.status is PodStatus.PIPELINED]
        out: list[list[TaskInfo]] = []
        for t in moved:
            g = next(g for g in sc.groups() if any(x is t for x in g))
            if not any(g is o for o in out):
                out.append(g)
        return out

    def _solve_scenario(
        self, sc: _Scenario, pending: Sequence[TaskInfo]
    ) -> tuple[Statement, list[list[TaskInfo]]] | None:
        stmt = self.ssn.statement()
        recorded = sc.recorded_tasks()
        self._evict(stmt, recorded)
        if sc.latest is None:
            if recorded:
                res = self._run(stmt, sc, pending, recorded)
                if res is not None:
                    return stmt, res
        else:
            # Go iterates the newest victim's nodes in map order; node-name order keeps this deterministic.
            for name in sorted({t.node.name for t in sc.latest.tasks if t.node is not None}):
                cp = stmt.checkpoint()
                pot = sc.potential_on(name)
                self._evict(stmt, pot)
                res = self._run(stmt, sc, pending, [*recorded, *(t for t in pot if t not in recorded)])
                if res is not None:
                    return stmt, res
                stmt.rollback(cp)
        stmt.discard()
        return None

    def solve_prefix(
        self, pending: Sequence[TaskInfo], recorded: list[list[TaskInfo]]
    ) -> tuple[Statement, list[list[TaskInfo]]] | None:
        """Find victims for the preemptor's tasks `pending`; the statement holds the solution."""
        sc = _Scenario(recorded=recorded)
        rec_ids = {t.uid for t in sc.recorded_tasks()}
        if recorded:
            res = self._solve_scenario(sc, pending)
            if res is not None:
                return res
        if self.index is not None and self.limit == UNLIMITED and self._runs is None:
            self._runs = self.index.victim_runs(self.preemptor)
        queue = victim_queue(self.ssn, self.preemptor, self.limit, self._runs)
        while (view := queue.pop()) is not None:
            group, more = tasks_to_evict(view)
            if any(t.uid in rec_ids for t in group):
                # Already evicted as a recorded victim: offer only the job's other tasks.
                rest = [t for t in view.tasks if t.uid not in rec_ids]
                if rest:
                    queue.push(job_view(view, rest))
                continue
            if more:
                queue.push(job_view(view, [t for t in view.tasks if not any(t is g for g in group)]))
            if not group:
                continue  # nothing new to evict: the scenario would repeat the previous one
            sc.add(group)
            res = self._solve_scenario(sc, pending)
            if res is not None:
                return res
        return None


# -- entry point ------------------------------------------------------------------------------------------
def feasible_nodes(ssn: Session, job: JobInfo) -> list[NodeInfo]:
    """KAI's FeasibleNodesForJob: if every task of the job needs a GPU, only nodes with idle or releasing GPU."""
    if any(t.is_cpu_only() for t in job.tasks):
        return list(ssn.nodes)
    return [n for n in ssn.nodes if any(n.dev_future(d) > 0 for d in range(n.gpus))]


def solve(
    ssn: Session, preemptor: JobInfo, limit: int, index: ConsolidationIndex | None = None
) -> Statement | None:
    """Search a consolidation for `preemptor`; the statement to commit, or None (session untouched).

    `index`: the action's :class:`ConsolidationIndex`, current with the session (built here if None)."""
    tasks = preemptor.tasks_to_allocate()
    if not tasks:
        return None
    if topology.constrained(preemptor) and topology.constraint_error(ssn, preemptor) is not None:
        return None  # allocate told the job why; moving pods cannot help
    if has_subgroup_constraints(preemptor) and subgroup_constraint_problem(ssn, preemptor) is not None:
        return None
    ssn.work[f"{ACTION}.attempts"] += 1  # KAI's podgroups_acted_on_by_action; no decision reads it
    before = preemptor.count(ACTIVE_USED)
    solver = _Solver(ssn, preemptor, limit, feasible_nodes(ssn, preemptor), len(tasks), index)
    recorded: list[list[TaskInfo]] = []
    final: Statement | None = None
    for k in range(1, len(tasks) + 1):
        res = solver.solve_prefix(tasks[:k], recorded)
        if res is None:
            continue  # as KAI: a larger prefix may still be solved with the victims recorded so far
        stmt, recorded = res
        if k < len(tasks):
            stmt.discard()
        else:
            final = stmt
    if final is None:
        return None
    after = preemptor.count(ACTIVE_USED)
    if after <= before or after < preemptor.min_available:
        final.discard()
        return None
    return final
