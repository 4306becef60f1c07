"""The victim-scenario solver shared by reclaim and preempt (KAI's job solver and by-pod solver).

For one pending job (the preemptor) the solver looks for a set of victims whose eviction lets the job's next
tasks (to minAvailable, or one elastic extra) fit:

* It grows the preemptor one task at a time. Each partial job is solved on its own; the victims of the last
  solved partial job are *recorded* and every later scenario starts by evicting them. Only the scenario for
  the complete task list can succeed.
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

Everything runs inside one :class:`~scheduler.engine.session.Statement`. On failure the session is exactly as
before; on success the caller commits the returned statement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scheduler.engine.actions.allocate import allocate_job, task_signature
from scheduler.engine.actions.common import candidate_jobs, over_capacity, tasks_vec
from scheduler.engine.ordering import JobCache, JobsByQueue, task_order
from scheduler.engine.placement import allocate_task, best_fit, static_reason
from scheduler.engine.session import (
    ACTIVE_ALLOCATED,
    ACTIVE_USED,
    GPU_MILLI,
    JobInfo,
    NodeInfo,
    Op,
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


def tasks_to_evict(job: JobInfo) -> tuple[list[TaskInfo], bool]:
    """KAI's GetTasksToEvict on a (possibly partial) job view.

    Above minAvailable only the last active task in task order goes (elastic shrink) and the job has more to
    give; otherwise every active task goes, last first.
    """
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


class _VictimStream:
    """Feeds victim task groups in victim order, splitting elastic victims one task at a time."""

    def __init__(self, ssn: Session, victims: Sequence[JobInfo], recorded: set[str]) -> None:
        self.order = JobsByQueue(ssn, [job_view(j, j.tasks) for j in victims], victim=True)
        self.recorded = recorded

    def next_group(self) -> list[TaskInfo] | None:
        """The next group of victim tasks, or None when the victims are exhausted."""
        while (view := self.order.pop()) is not None:
            group, more = tasks_to_evict(view)
            if not group:
                continue
            if any(t.uid in self.recorded for t in group):
                # Already a victim through an earlier partial job: offer only what is left of it.
                rest = [t for t in view.tasks if t.uid not in self.recorded]
                if rest:
                    self.order.push(job_view(view, rest))
                continue
            if more:
                taken = {t.uid for t in group}
                self.order.push(job_view(view, [t for t in view.tasks if t.uid not in taken]))
            return group
        return None


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


class Solver:
    """Finds victims for one preemptor at a time (see the module docstring)."""

    def __init__(
        self, ssn: Session, validator: Validator, action: str, reason: Callable[[TaskInfo], str]
    ) -> None:
        self.ssn = ssn
        self.validator = validator
        self.action = action
        self.reason = reason
        self._pending: list[JobInfo] = []
        self._shared_nodes: dict[tuple[object, ...], list[NodeInfo]] = {}  # per partial job, see above
        # Per solve(): init resources of jobs the solve never touches, and the ordering peers per leaf set.
        self._shared_init = JobCache(set())
        self._by_leaf: dict[str, list[JobInfo]] = {}  # pending jobs by leaf queue
        self._by_parent: dict[str, list[JobInfo]] = {}  # pending jobs by each ancestor above the leaf
        self._memo: dict[tuple[object, ...], int] = {}  # queue comparisons, valid for one solve()

    def solve(self, job: JobInfo, victims: Sequence[JobInfo]) -> Statement | None:
        """A statement with the job's tasks pipelined and its victims evicted, or None (nothing changed)."""
        tasks = job.tasks_to_allocate()
        if not tasks:
            return None
        # Cheap pre-check: idle + releasing GPUs plus everything the victims hold must cover the whole job,
        # or no scenario for the complete task list (the only one that can succeed) passes the GPU bound.
        need = sum(_gpu_need(t) for t in tasks)
        if (
            need
            and self._idle_gpus()
            + sum(self.ssn.task_vec(t)[0] for v in victims for t in v.tasks if t.status in ACTIVE_ALLOCATED)
            < need
        ):
            return None
        before = job.count(ACTIVE_USED)
        self._pending = candidate_jobs(self.ssn)
        # Only the victims and the preemptor change while solving; every other job's init resources hold.
        self._shared_init = JobCache({v.uid for v in victims} | {job.uid})
        self._by_leaf, self._by_parent = {}, {}
        for j in self._pending:
            q = j.queue
            if q is None:
                continue
            self._by_leaf.setdefault(q.name, []).append(j)
            for a in q.ancestors():
                if a is not q:
                    self._by_parent.setdefault(a.name, []).append(j)
        self._memo = {}
        stmt = self.ssn.statement()
        recorded: list[TaskInfo] = []
        solved = False
        for k in range(1, len(tasks) + 1):
            scenario = self._solve_partial(stmt, job, tasks[:k], recorded, victims)
            if scenario is None:
                continue
            recorded = list(scenario.evicted)
            solved = k == len(tasks)
            if not solved:
                stmt.discard()
        if solved and job.active_allocated() >= job.min_available and job.count(ACTIVE_USED) > before:
            return stmt
        stmt.discard()
        return None

    # -- scenarios for one partial job -------------------------------------------------------------------
    def _solve_partial(
        self,
        stmt: Statement,
        job: JobInfo,
        pending: list[TaskInfo],
        recorded: list[TaskInfo],
        victims: Sequence[JobInfo],
    ) -> Scenario | None:
        scenario = Scenario(job, pending, tasks_vec(self.ssn, pending), list(recorded))
        # Nothing is evicted yet: the nodes where each shared-GPU task could go now (see _shared_may_fit).
        self._shared_nodes = {}
        for t in pending:
            if t.shared:
                sig = task_signature(t)
                if sig not in self._shared_nodes:
                    self._shared_nodes[sig] = [n for n in self.ssn.nodes if _shared_may_fit(t, n)]
        stream = _VictimStream(self.ssn, victims, {t.uid for t in recorded})
        need = sum(_gpu_need(t) for t in pending)
        have = self._idle_gpus()
        have += sum(self.ssn.task_vec(t)[0] for t in recorded)
        if recorded and have >= need and self._simulate_scenario(stmt, scenario):
            return scenario
        while (group := stream.next_group()) is not None:
            scenario.potential.extend(group)
            have += sum(self.ssn.task_vec(t)[0] for t in group)
            # Cheap bound (KAI's idle-GPU scenario filter): skip scenarios that cannot free enough GPUs.
            if have >= need and self._simulate_scenario(stmt, scenario):
                return scenario
        return None

    def _idle_gpus(self) -> int:
        """Idle + releasing milli-GPUs over Ready nodes."""
        return sum(
            GPU_MILLI * n.gpus - sum(n.dev_alloc) - sum(n.dev_pipe) for n in self.ssn.nodes if n.spec.ready
        )

    def _simulate_scenario(self, stmt: Statement, scenario: Scenario) -> bool:
        cp = stmt.checkpoint()
        self._evict(stmt, scenario.recorded)
        if not scenario.potential:
            if self._simulate(stmt, scenario, list(scenario.recorded)):
                return True
            stmt.rollback(cp)
            return False
        latest = scenario.potential[-1].job
        tried: set[tuple[str, ...]] = set()
        for node in sorted({t.node.name for t in latest.tasks if t.node is not None}):
            jobs_here = {t.job.uid for t in scenario.potential if t.node is not None and t.node.name == node}
            group = [t for t in scenario.potential if t.job.uid in jobs_here]
            key = tuple(sorted(t.uid for t in group))
            if not group or key in tried:
                continue
            tried.add(key)
            node_cp = stmt.checkpoint()
            self._evict(stmt, group)
            if self._simulate(stmt, scenario, [*scenario.recorded, *group]):
                return True
            stmt.rollback(node_cp)
        stmt.rollback(cp)
        return False

    def _evict(self, stmt: Statement, tasks: Sequence[TaskInfo]) -> None:
        for t in tasks:
            if t.status in ACTIVE_ALLOCATED:
                stmt.evict(t, self.action, self.reason(t), virtual=True)

    def _simulate(self, stmt: Statement, scenario: Scenario, evicted: list[TaskInfo]) -> bool:
        """Re-place victims and the preemptor (pipeline only, queue order); validate. Rolls back on failure."""
        ssn = self.ssn
        cp = stmt.checkpoint()
        victim_uids = {t.job.uid for t in evicted}
        victim_jobs = [ssn.job_by_uid[uid] for uid in sorted(victim_uids)]
        preemptor = scenario.preemptor
        pool = {j.uid: j for j in self._ordering_peers([*victim_jobs, preemptor])}
        for j in (*victim_jobs, preemptor):
            pool[j.uid] = j
        order = JobsByQueue(
            ssn,
            sorted(pool.values(), key=lambda p: p.index),
            include_virtual=True,
            shared_init=self._shared_init,
            memo=self._memo,
        )
        placed = False
        left = len(victim_uids) + 1
        freed = {t.node.name: t.node for t in evicted if t.node is not None}  # before anything moves
        while left and (nxt := order.pop()) is not None:
            if nxt is preemptor or nxt.uid in victim_uids:
                left -= 1  # once every relevant job had its turn the rest of the queue changes nothing
            if nxt is preemptor:
                if not self._place_preemptor(stmt, scenario):
                    stmt.rollback(cp)
                    return False
                placed = True
            elif nxt.uid in victim_uids and allocate_job(
                ssn, stmt, nxt, ssn.nodes, self.action, pipeline_only=True, record_errors=False
            ):
                self._restore_unmoved(stmt, nxt, cp)
                if not placed and self._preemptor_shut_out(scenario, freed):
                    stmt.rollback(cp)  # the preemptor's turn could only fail: skip the rest of the queue
                    return False
        # Victims put back where they were are no longer victims.
        scenario.evicted = [t for t in evicted if t.status in (PodStatus.RELEASING, PodStatus.PIPELINED)]
        if not placed or not self.validator(ssn, scenario):
            scenario.evicted = []
            stmt.rollback(cp)
            return False
        return True

    def _ordering_peers(self, involved: Sequence[JobInfo]) -> list[JobInfo]:
        """Pending jobs that can influence the order in which the preemptor and the victims are re-placed.

        KAI orders every pending job but places only the preemptor and the victims. Another job matters
        only through the queue comparator: as the head of a leaf involved in the simulation, or as the best
        job of a queue that shares a parent queue with one. Jobs elsewhere are left out to save time.
        """
        leaves = {j.queue.name for j in involved if j.queue is not None}
        parents = {
            a.name for j in involved if j.queue is not None for a in j.queue.ancestors() if a is not j.queue
        }
        out: dict[str, JobInfo] = {}
        for name in sorted(leaves):
            for j in self._by_leaf.get(name, ()):
                out[j.uid] = j
        for name in sorted(parents):
            for j in self._by_parent.get(name, ()):
                out[j.uid] = j
        return sorted(out.values(), key=lambda j: j.index)

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
                nodes = {n.name: n for n in self._shared_nodes.get(sig, ())}
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
        cp = stmt.checkpoint()
        for t in scenario.pending:
            if (
                allocate_task(ssn, stmt, t, ssn.nodes, self.action, pipeline_only=True, explain=False)
                is not None
            ):
                stmt.rollback(cp)
                return False
        return True


def finish(stmt: Statement) -> None:
    """Commit a solved statement; the evicted victims are now really leaving, no longer virtual.

    Tasks that ended exactly where they started (evicted, then un-evicted) leave no operation behind.
    """
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
