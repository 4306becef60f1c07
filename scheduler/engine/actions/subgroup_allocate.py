"""allocate for a job with subgroups: PodSets all or nothing, each inside its own topology constraint.

The tree (:mod:`scheduler.engine.subgroups`) is placed from the root down, as KAI's allocate recurses over
SubGroupSets and then PodSets, each level narrowing the node set:

* a group with a topology constraint tries the domains of its level *within its parent's node set* (so a
  subgroup's rack lies in the job's block), least free first among those with room for the subtree's pods,
  then by name; a preferred level falls back to wider levels and, without a required level, to the parent's
  whole node set (:func:`node_sets`);
* a PodSet places the tasks it lacks all or nothing (:func:`scheduler.engine.placement.allocate_task` per
  task, rolled back on the first that fits nowhere);
* a SubGroupSet places its children in KAI's PodSet order; a child that cannot be placed is rolled back,
  and the set succeeds when ``minSubGroup`` of its children (all by default) are satisfied.

The whole job succeeds when the root is satisfied and at least one pod was placed (elastic growth adds one
pod to one PodSet, in its domain: placed pods pin every group to the domains that hold them). On failure the
job's fit error names the subgroup: ``subgroup decode: 2 of 4 pods placeable; ...``.

Reclaim, preempt and consolidation place a job whose subgroups carry their own constraints with the same
tree walk (:func:`place_subgroups`; KAI's solvers call the same AllocateJob as allocate), each with its own
way of placing one task (pipeline only, what-if) and without recording fit errors. Tasks a simulation
evicted (virtual) do not pin a group to their domain; the job's other placed pods do, so a shrunk elastic
victim's evicted pod can only come back within its subgroup's domain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from scheduler.engine import topology
from scheduler.engine.actions.common import over_capacity
from scheduler.engine.placement import allocate_task
from scheduler.engine.session import GPU_MILLI, JobInfo, NodeInfo, Session, Statement, TaskInfo
from scheduler.engine.state import PodStatus, Topology
from scheduler.engine.subgroups import Group, Tree

_Group = Group[TaskInfo]

NAME = "allocate"
_PLACED = frozenset({PodStatus.RUNNING, PodStatus.ALLOCATED, PodStatus.PIPELINED, PodStatus.RELEASING})

__all__ = [
    "PlaceTask",
    "allocate_subgroups",
    "constraint_problem",
    "has_subgroup_constraints",
    "node_sets",
    "place_subgroups",
]

PlaceTask = Callable[[TaskInfo, Sequence[NodeInfo]], "str | None"]
"""Places one task on the best node of the given set: None, or why it fits none."""


@dataclass(slots=True)
class _Why:
    """The first reason each group failed, in the order they failed."""

    reasons: list[tuple[str, str, dict[str, object]]] = field(default_factory=list)

    def add(self, reason: str, message: str, **details: object) -> None:
        self.reasons.append((reason, message, details))


def constraint_problem(ssn: Session, group: _Group) -> str | None:
    """Why a group's constraint cannot be read against the cluster's topologies (None when it can)."""
    if not group.has_constraint:
        return None
    topo = next((t for t in ssn.state.topologies if t.name == group.topology), None)
    if topo is None:
        known = ", ".join(t.name for t in ssn.state.topologies) or "none"
        return f"topology {group.topology!r} of {group.label}'s topology constraint does not exist (known: {known})"
    for kind, lvl in (("required", group.required_level), ("preferred", group.preferred_level)):
        if lvl is not None and not topo.has(lvl):
            return (
                f"{kind} topology level {lvl!r} of {group.label} is not a level of topology {topo.name!r} "
                f"(levels: {', '.join(topo.levels)})"
            )
    req, pref = group.required_level, group.preferred_level
    if req is not None and pref is not None and topo.index(pref) < topo.index(req):
        return f"preferred topology level {pref!r} of {group.label} is wider than its required level {req!r}"
    return None


def _leading(tasks: Sequence[TaskInfo]) -> tuple[bool, int]:
    """(counted in GPUs?, amount needed) of the tasks: milli-GPU, or CPU millicores for CPU-only tasks."""
    gpu_need = sum(t.gpu_milli() for t in tasks)
    if gpu_need > 0:
        return True, gpu_need
    return False, sum(t.request.cpu for t in tasks)


def _free(nodes: Sequence[NodeInfo], gpu: bool, future: bool) -> int:
    return topology.Domain((), (), tuple(nodes)).free(gpu, future)


def node_sets(
    ssn: Session, group: _Group, nodes: Sequence[NodeInfo], tasks: Sequence[TaskInfo], anchors: frozenset[str]
) -> Iterator[tuple[Sequence[NodeInfo], str | None]]:
    """The node sets to try for a group, each with its domain name (None = the parent's whole set).

    Domains of the constraint's levels are cut down to ``nodes`` (the parent's set); those without room for
    the tasks (idle plus releasing) or not holding every ``anchors`` node are skipped; least idle first, then
    by name. A required level never yields anything else; a preferred level goes up to the required level
    (or the top), then, without a required level, yields ``nodes``.
    """
    if not group.has_constraint:
        yield nodes, None
        return
    topo: Topology = next(t for t in ssn.state.topologies if t.name == group.topology)
    req = None if group.required_level is None else topo.index(group.required_level)
    pref = None if group.preferred_level is None else topo.index(group.preferred_level)
    top = req if req is not None else 0
    start = pref if pref is not None else top
    allowed = {n.name for n in nodes}
    gpu, need = _leading(tasks)
    seen: set[tuple[str, ...]] = set()
    for depth in range(start, top - 1, -1):
        cands = []
        for d in topology.domains(ssn, topo.levels, depth):
            sub = tuple(n for n in d.nodes if n.name in allowed)
            names = frozenset(n.name for n in sub)
            if not sub or not anchors <= names or _free(sub, gpu, True) < need:
                continue
            cands.append((_free(sub, gpu, False), d.values, d.name, sub))
        cands.sort(key=lambda c: (c[0], c[1]))
        for _, _, name, sub in cands:
            key = tuple(n.name for n in sub)
            if key in seen:
                continue
            seen.add(key)
            yield sub, name
    if req is None:
        yield nodes, None


def _largest(
    ssn: Session, group: _Group, nodes: Sequence[NodeInfo], tasks: Sequence[TaskInfo], anchors: frozenset[str]
) -> tuple[str, int, int, bool] | None:
    """The required-level domain (within ``nodes``, holding every ``anchors`` node) with the most idle
    capacity: (name, free, need, gpu)."""
    topo = next(t for t in ssn.state.topologies if t.name == group.topology)
    assert group.required_level is not None
    depth = topo.index(group.required_level)
    allowed = {n.name for n in nodes}
    gpu, need = _leading(tasks)
    best: tuple[str, int, int, bool] | None = None
    for d in topology.domains(ssn, topo.levels, depth):
        sub = tuple(n for n in d.nodes if n.name in allowed)
        if sub and anchors <= {n.name for n in sub}:
            free = _free(sub, gpu, False)
            if best is None or free > best[1]:
                best = (d.name, free, need, gpu)
    return best


class _Placer:
    """One attempt to place a job's wanted tasks over its tree (module doc)."""

    def __init__(
        self,
        ssn: Session,
        stmt: Statement,
        job: JobInfo,
        tree: Tree[TaskInfo],
        wanted: list[TaskInfo],
        failed: dict[tuple[object, ...], str],
        place_task: PlaceTask | None = None,
        prefix: bool = False,
    ) -> None:
        self.ssn, self.stmt, self.job, self.tree, self.failed = ssn, stmt, job, tree, failed
        self.place_task = place_task
        self.prefix = prefix  # place every wanted task, each group within its domain; no gang rule
        ids = {id(t) for t in wanted}
        self.wanted = {
            ps.name: [t for t in sorted(ps.tasks, key=lambda t: t.sort_key()) if id(t) in ids]
            for ps in tree.podsets.values()
        }
        self.why = _Why()

    def subtree_wanted(self, g: _Group) -> list[TaskInfo]:
        return [t for ps in g.podsets() for t in self.wanted[ps.name]]

    def place(self, g: _Group, nodes: Sequence[NodeInfo], within: str | None) -> bool:
        """Place the group's wanted tasks within ``nodes``; True when it ends satisfied with them placed."""
        tasks = self.subtree_wanted(g)
        if not tasks:
            return g.satisfied()
        anchors = frozenset(
            t.node.name for t in g.all_tasks() if t.node is not None and t.status in _PLACED
            and not (t.virtual and t.status is PodStatus.RELEASING)
        )
        tried = 0
        for sub, domain in node_sets(self.ssn, g, nodes, tasks, anchors):
            tried += 1
            cp = self.stmt.checkpoint()
            if self.place_in(g, sub, domain or within):
                return True
            self.stmt.rollback(cp)
        if g.required_level is not None and g.has_constraint:
            self.topology_reason(g, nodes, tasks, tried, within, anchors)
        return False

    def place_in(self, g: _Group, nodes: Sequence[NodeInfo], within: str | None) -> bool:
        if g.is_podset:
            return self.place_podset(g, nodes, within)
        start = self.stmt.checkpoint()
        kids = sorted(
            (c for c in g.children if self.subtree_wanted(c)),
            key=lambda c: c.order_key() if c.is_podset else (0, 0, c.name),  # type: ignore[return-value,arg-type]
        )
        misses = 0
        allowed_misses = 0 if self.prefix else len(g.children) - g.needed_children()
        for c in kids:
            cp = self.stmt.checkpoint()
            if not self.place(c, nodes, within):
                self.stmt.rollback(cp)
                if not c.satisfied():
                    misses += 1
                    if misses > allowed_misses:
                        if g.min_sub_group is not None:
                            self.min_sub_group_reason(g, misses)
                        return False
        return (self.prefix or g.satisfied()) and self.stmt.checkpoint() > start

    def min_sub_group_reason(self, g: _Group, misses: int) -> None:
        """A set that cannot reach its minSubGroup: say so, with the last child's reason."""
        last = self.why.reasons[-1] if self.why.reasons else None
        n, need = len(g.children), g.needed_children()
        msg = (
            f"{g.label}: {misses} of its {n} subgroups cannot be placed, and minSubGroup needs {need} placed"
        )
        details: dict[str, object] = {"min_sub_group": need}
        if g.name:
            details["subgroup"] = g.name
        if last is not None:
            msg += f"; {last[1]}"
            details = {**last[2], **details}
        self.why.add(last[0] if last is not None else "PodSchedulingErrors", msg, **details)

    def place_podset(self, ps: _Group, nodes: Sequence[NodeInfo], within: str | None) -> bool:
        tasks = self.wanted[ps.name]
        cp = self.stmt.checkpoint()
        for placed, task in enumerate(tasks):
            self.ssn.last_why.clear()
            # A task without pod-level constraints that fitted on no node of the cluster while nothing was
            # tentatively placed fits nowhere for the rest of this allocate pass (capacity only shrinks): the
            # pass's memo answers instead of another scan of every node.
            key = _memo_key(task) if nodes is self.ssn.nodes and not task.constrained else None
            err = self.failed.get(key) if key is not None else None
            if err is None and self.place_task is not None:
                err = self.place_task(task, nodes)
            elif err is None:
                err = allocate_task(self.ssn, self.stmt, task, nodes, NAME, explain=True)
                if err is not None and key is not None and self.stmt.checkpoint() == 0:
                    self.failed[key] = err
            if err is not None:
                self.stmt.rollback(cp)
                have = ps.count(frozenset({PodStatus.RUNNING, PodStatus.ALLOCATED, PodStatus.PIPELINED}))
                where = f" in {within}" if within else ""
                self.why.add(
                    "PodSchedulingErrors",
                    f"subgroup {ps.name}: {have + placed} of {have + len(tasks)} pods placeable{where} while "
                    f"{ps.min_available} are required for the subgroup's gang. Additional pods cannot be "
                    f"scheduled due to: {err}",
                    task=task.name,
                    subgroup=ps.name,
                )
                return False
        return True

    def topology_reason(
        self,
        g: _Group,
        nodes: Sequence[NodeInfo],
        tasks: Sequence[TaskInfo],
        tried: int,
        within: str | None,
        anchors: frozenset[str],
    ) -> None:
        level = g.required_level
        head = (
            f"Topology constraint not met: {g.label} requires its {len(tasks)} pod{'' if len(tasks) == 1 else 's'} "
            f"within one {level} domain of topology {g.topology!r}" + (f" inside {within}" if within else "")
        )
        best = _largest(self.ssn, g, nodes, tasks, anchors)
        if best is None and anchors and _largest(self.ssn, g, nodes, tasks, frozenset()) is not None:
            msg = f"{head}, but its placed pods are on nodes of more than one {level} domain"
        elif best is None:
            msg = f"{head}, and no node{' of ' + within if within else ''} has the label {level}"
        else:
            name, free, need, gpu = best
            what = "GPUs" if gpu else "CPU cores"
            msg = (
                f"{head}: the largest free, {name}, has {free / GPU_MILLI if gpu else free / 1000:g} of the "
                + (f"{need / 1000:g} {what} needed")
            )
            if tried and g.is_podset:
                msg += (
                    f"; {tried} {level} domain(s) had the {what} free in total but not on nodes the pods fit"
                )
            elif tried:
                msg += f"; in the {tried} {level} domain(s) with the {what} free, its subgroups could not all be placed"
        self.why.add(
            "TopologyConstraint",
            msg,
            topology=g.topology,
            level=level,
            **({"subgroup": g.name} if g.name else {}),
        )


def _memo_key(task: TaskInfo) -> tuple[object, ...]:
    """What decides whether a task without pod-level constraints fits a node: its request and node terms."""
    p = task.pod
    return (
        "subgroup-task",
        task.request,
        tuple(sorted(p.node_selector.items())),
        p.allowed_nodes,
        p.affinity,
        p.tolerations,
    )


def allocate_subgroups(
    ssn: Session,
    stmt: Statement,
    job: JobInfo,
    tree: Tree[TaskInfo],
    failed: dict[tuple[object, ...], str] | None = None,
) -> bool:
    """Place a job with subgroups (module doc); records the job's fit error when it cannot.

    ``failed`` is the allocate pass's memo of tasks that fit nowhere (its own keys, see :func:`_memo_key`).
    """
    stack = [tree.root]
    while stack:
        g = stack.pop(0)
        problem = constraint_problem(ssn, g)
        if problem is not None:
            job.fit_error("TopologyConstraint", f"Topology constraint cannot be met: {problem}")
            return False
        stack.extend(g.children)
    tasks = tree.tasks_to_allocate()
    if not tasks:
        return False
    over = over_capacity(ssn, job, tasks)
    if over is not None:
        job.fit_error(over[0], over[1])
        return False
    placer = _Placer(ssn, stmt, job, tree, tasks, failed if failed is not None else {})
    cp = stmt.checkpoint()
    if placer.place(tree.root, ssn.nodes, None) and stmt.checkpoint() > cp:
        return True
    stmt.rollback(cp)
    reasons = placer.why.reasons
    if not reasons:
        job.fit_error("PodSchedulingErrors", "No subgroup of the job could be placed")
        return False
    # The outermost failure is the last one recorded (a group gives up after its children did); a job-level
    # topology reason also carries the reason of the subgroup that failed inside the last domain tried.
    reason, message, details = reasons[-1]
    if reason == "TopologyConstraint" and "subgroup" not in details and len(reasons) > 1:
        details = {**details, "subgroup_reason": reasons[-2][1]}
    shortfalls = ", ".join(f"{ps.name} {have}/{need}" for ps, have, need in tree.root.shortfalls(_ACTIVE_SET))
    if shortfalls:
        details = {**details, "subgroups_short": shortfalls}
    job.fit_error(reason, message, **details)
    return False


def has_subgroup_constraints(job: JobInfo) -> bool:
    """The job has subgroups and one of them (not the job itself) carries a topology constraint."""
    tree = job.subgroup_tree()
    if tree is None:
        return False
    stack = list(tree.root.children)
    while stack:
        g = stack.pop()
        if g.has_constraint:
            return True
        stack.extend(g.children)
    return False


def subgroup_constraint_problem(ssn: Session, job: JobInfo) -> str | None:
    """Why one of the job's constraints (its own or a subgroup's) cannot be read, or None."""
    tree = job.subgroup_tree()
    stack = [] if tree is None else [tree.root]
    while stack:
        g = stack.pop(0)
        problem = constraint_problem(ssn, g)
        if problem is not None:
            return problem
        stack.extend(g.children)
    return None


def place_subgroups(
    ssn: Session,
    stmt: Statement,
    job: JobInfo,
    tasks: Sequence[TaskInfo],
    place_task: PlaceTask,
    prefix: bool = False,
) -> bool:
    """Place ``tasks`` of a job with subgroups over its tree as allocate does, each task by ``place_task``
    (the what-if placements of reclaim, preempt and consolidation); all or nothing, no fit errors.

    True when the job's tree ends satisfied with something placed; on False the statement is as before.
    With ``prefix`` (the solvers' growing partial job, short of the gang by design) every task must be
    placed, each within its groups' domains, and the gang rule is not checked.
    """
    tree = job.subgroup_tree()
    if tree is None or not tasks or subgroup_constraint_problem(ssn, job) is not None:
        return False
    if over_capacity(ssn, job, tasks) is not None:
        return False
    placer = _Placer(ssn, stmt, job, tree, list(tasks), {}, place_task, prefix)
    cp = stmt.checkpoint()
    if placer.place(tree.root, ssn.nodes, None) and stmt.checkpoint() > cp:
        return True
    stmt.rollback(cp)
    return False


_ACTIVE_SET = frozenset({PodStatus.RUNNING, PodStatus.ALLOCATED, PodStatus.PIPELINED})
