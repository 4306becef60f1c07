"""Hierarchical PodGroups: KAI's subgroup tree of a job, and the gang rule over it.

A PodGroup with ``subGroups`` becomes a tree (KAI's ``subgroup_info``): the PodGroup is the root; a subgroup
that another one names as parent is a *SubGroupSet* (structural, it may carry a topology constraint); every
other subgroup is a *PodSet*, the gang its pods join through the pod label ``kai.scheduler/subgroup-name``,
with ``minAvailable = max(minMember, 1)``. A pod without the label belongs to the PodSet ``default`` if the
PodGroup declares one; a pod naming an unknown subgroup is left out (KAI drops it with a warning): it is never
placed and counts for nothing.

The gang rule, checked per PodSet as KAI checks it: a PodSet is *satisfied* when its active pods reach its
minAvailable; a SubGroupSet (and the root) when ``minSubGroup`` of its direct children are (all of them when
it is not set; ``minSubGroup`` follows KAI's min-subgroups design). The same rule over alive pods (active or
pending) says whether the job is *ready* to be considered at all.

The next tasks to place follow KAI's ``GetTasksToAllocate``: PodSets below their minimum first, then the lower
``active / minAvailable``, then by name; every PodSet below its minimum gives the tasks it lacks; when none is,
the first PodSet gives one task (elastic growth, one PodSet at a time).

Everything is deterministic: children are kept in name order and tasks in task order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Generic, Protocol, TypeVar

from scheduler.engine.state import SUBGROUP_LABEL, Job, Pod, PodStatus


class TaskLike(Protocol):
    """What the tree reads of a :class:`scheduler.engine.session.TaskInfo` (no import: session uses this
    module)."""

    pod: Pod
    status: PodStatus
    node: Any
    virtual: bool

    def sort_key(self) -> tuple[int, int, int, str]: ...


T = TypeVar("T", bound=TaskLike)
T_co = TypeVar("T_co", bound=TaskLike, covariant=True)


class JobLike(Protocol[T_co]):
    """What :func:`build` reads of a :class:`scheduler.engine.session.JobInfo`."""

    @property
    def spec(self) -> Job: ...

    @property
    def tasks(self) -> Sequence[T_co]: ...


__all__ = ["DEFAULT_SUBGROUP", "SUBGROUP_LABEL", "Group", "JobLike", "TaskLike", "Tree", "build"]

DEFAULT_SUBGROUP = "default"

_ACTIVE = frozenset({PodStatus.ALLOCATED, PodStatus.PIPELINED, PodStatus.RUNNING})
_USED = _ACTIVE | {PodStatus.RELEASING}


@dataclass(slots=True)
class Group(Generic[T]):
    """A node of the tree: the root (name ""), a SubGroupSet (``children``) or a PodSet (``tasks``)."""

    name: str
    topology: str | None = None
    required_level: str | None = None
    preferred_level: str | None = None
    min_available: int = 1  # PodSet only
    min_sub_group: int | None = None  # SubGroupSet / root only; None = every child
    children: list[Group[T]] = field(default_factory=list)
    tasks: list[T] = field(default_factory=list)
    is_podset: bool = False

    @property
    def label(self) -> str:
        """How messages name it: ``subgroup decode``, or ``the job`` for the root."""
        return f"subgroup {self.name}" if self.name else "the job"

    @property
    def has_constraint(self) -> bool:
        """A topology with at least one level to keep."""
        return self.topology is not None and (
            self.required_level is not None or self.preferred_level is not None
        )

    def needed_children(self) -> int:
        """How many direct children must be satisfied."""
        n = len(self.children)
        return n if self.min_sub_group is None else min(self.min_sub_group, n)

    def count(self, statuses: frozenset[PodStatus]) -> int:
        """Pods of this PodSet in ``statuses``."""
        return sum(1 for t in self.tasks if t.status in statuses)

    def podsets(self) -> Iterator[Group[T]]:
        """The PodSets of this subtree, depth first in name order."""
        if self.is_podset:
            yield self
        for c in self.children:
            yield from c.podsets()

    def all_tasks(self) -> Iterator[T]:
        """Every task of this subtree."""
        for ps in self.podsets():
            yield from ps.tasks

    def satisfied(self, statuses: frozenset[PodStatus] = _ACTIVE) -> bool:
        """The gang rule over the pods in ``statuses`` (active pods by default)."""
        if self.is_podset:
            return self.count(statuses) >= self.min_available
        return sum(1 for c in self.children if c.satisfied(statuses)) >= self.needed_children()

    def alive_ready(self) -> bool:
        """Enough pods exist (active or pending) to satisfy the gang: the job may be considered."""
        if self.is_podset:
            alive = sum(1 for t in self.tasks if t.status in _ACTIVE or t.status is PodStatus.PENDING)
            return alive >= self.min_available
        return sum(1 for c in self.children if c.alive_ready()) >= self.needed_children()

    def shortfalls(
        self, statuses: frozenset[PodStatus], alive: bool = False
    ) -> list[tuple[Group[T], int, int]]:
        """The PodSets that keep this subtree from being satisfied: (PodSet, have, need)."""
        out: list[tuple[Group[T], int, int]] = []
        for ps in self.podsets():
            have = (
                sum(1 for t in ps.tasks if t.status in _ACTIVE or t.status is PodStatus.PENDING)
                if alive
                else ps.count(statuses)
            )
            if have < ps.min_available:
                out.append((ps, have, ps.min_available))
        return out

    def order_key(self) -> tuple[int, Fraction, str]:
        """KAI's subgrouporder for a PodSet: below minAvailable first, lower active/min ratio, then name."""
        active = self.count(_ACTIVE)
        m = self.min_available
        return (0 if active < m else 1, Fraction(active, m), self.name)


@dataclass(slots=True)
class Tree(Generic[T]):
    """A job's subgroup tree, with the tasks sorted into its PodSets."""

    root: Group[T]
    podsets: dict[str, Group[T]]
    dropped: list[T]  # pods of unknown subgroups: never placed

    def tasks_to_allocate(self, include_virtual: bool = False) -> list[T]:
        """KAI's GetTasksToAllocate over the PodSets (module doc)."""
        order = sorted(self.podsets.values(), key=Group.order_key)
        below = [ps for ps in order if ps.count(_ACTIVE) < ps.min_available]
        out: list[T] = []
        for ps in below or order:
            pending = sorted(
                (
                    t
                    for t in ps.tasks
                    if t.status is PodStatus.PENDING
                    or (include_virtual and t.virtual and t.status is PodStatus.RELEASING)
                ),
                key=lambda t: t.sort_key(),
            )
            if not pending:
                continue
            if below:
                out.extend(pending[: ps.min_available - ps.count(_ACTIVE)])
            else:
                return pending[:1]
        return out

    def has_tasks_to_allocate(self) -> bool:
        """Some pod of a known PodSet is pending."""
        return any(t.status is PodStatus.PENDING for ps in self.podsets.values() for t in ps.tasks)

    def tasks_to_evict(self, statuses: frozenset[PodStatus] = _ACTIVE) -> tuple[list[T], bool]:
        """KAI's GetTasksToEvict over the PodSets: one task (the last in task order) of the last PodSet in
        PodSet order that is above its minimum, and True (the job has more to give); else every task in
        ``statuses``, last first, and False (the whole gang goes)."""
        for ps in sorted(self.podsets.values(), key=Group.order_key, reverse=True):
            active = sorted((t for t in ps.tasks if t.status in statuses), key=lambda t: t.sort_key())
            if len(active) > ps.min_available:
                return [active[-1]], True
        every = sorted(
            (t for ps in self.podsets.values() for t in ps.tasks if t.status in statuses),
            key=lambda t: t.sort_key(),
        )
        return every[::-1], False

    def podset_of(self, task: T) -> Group[T] | None:
        """The PodSet a task belongs to (None for a dropped pod)."""
        return self.podsets.get(subgroup_name(task))


def subgroup_name(task: TaskLike) -> str:
    """The subgroup a pod names with its label, ``default`` without one."""
    return task.pod.labels.get(SUBGROUP_LABEL, DEFAULT_SUBGROUP)


def build(job: JobLike[T]) -> Tree[T]:
    """The subgroup tree of a job whose spec has subgroups (call only then)."""
    spec: Job = job.spec
    root: Group[T] = Group(
        name="",
        topology=spec.topology,
        required_level=spec.required_level,
        preferred_level=spec.preferred_level,
        min_sub_group=spec.min_sub_group,
    )
    parents = {sg.parent for sg in spec.subgroups if sg.parent is not None}
    groups: dict[str, Group[T]] = {}
    for sg in spec.subgroups:
        groups[sg.name] = Group(
            name=sg.name,
            topology=sg.topology,
            required_level=sg.required_level,
            preferred_level=sg.preferred_level,
            min_available=max(sg.min_member or 0, 1),
            min_sub_group=sg.min_sub_group,
            is_podset=sg.name not in parents,
        )
    for sg in sorted(spec.subgroups, key=lambda s: s.name):
        parent = root if sg.parent is None else groups.get(sg.parent, root)
        parent.children.append(groups[sg.name])
    podsets = {name: g for name, g in sorted(groups.items()) if g.is_podset}
    dropped: list[T] = []
    for t in job.tasks:
        ps = podsets.get(subgroup_name(t))
        if ps is None:
            dropped.append(t)
        else:
            ps.tasks.append(t)
    return Tree(root=root, podsets=podsets, dropped=dropped)


def groups_with_constraints(tree: Tree[T]) -> Iterator[Group[T]]:
    """Every group (root first) whose topology constraint must be checked."""
    stack = [tree.root]
    while stack:
        g = stack.pop(0)
        if g.has_constraint:
            yield g
        stack.extend(g.children)
