"""Topology-aware placement: where a gang with a KAI ``topologyConstraint`` may go, and in which order.

A :class:`~scheduler.engine.state.Topology` lists node-label keys from the widest level to the narrowest
(zone, block, rack, hostname). A node's *domain* at level *i* is its values of levels 0..i, so rack ``r1``
of block ``b1`` and rack ``r1`` of block ``b2`` are different domains; a node without one of those labels is
in no domain of that level.

A job's constraint turns into a :class:`Plan`, an ordered list of node sets the allocate action tries one
after the other, each all or nothing for the gang:

* **required level** R: each domain of level R, never anything else. If none takes the gang, the job waits
  with a message naming the level and the largest free domain (:meth:`Plan.unschedulable_message`).
* **preferred level** P: each domain of level P, then of each wider level up to R (or the top level), then,
  without a required level, every node.

Within one level the domains go in an order that keeps large free domains whole: the domain with the least
free capacity that can still hold the gang first, ties by domain name. Free capacity is counted in the
job's leading resource (GPUs, or CPU for a CPU-only gang) on idle capacity; a domain whose idle plus
releasing capacity is short of the gang's total is skipped without trying it. Pods the job already has
placed (elastic growth, a partly placed gang) pin it: only domains holding all of their nodes are tried.

Reclaim, preempt and consolidation use the same plan for their what-if placements (KAI calls the same
``SubsetNodes`` from its solvers): a *live* plan (:func:`plan` with ``live=True``) reads free capacity from
the session as it stands inside a simulation, and :class:`DomainRoom` is the solvers' cheap necessary
condition (KAI's topology-aware idle-GPU scenario filter). A job with subgroups is placed per PodSet, each
within its nested domain, by :mod:`scheduler.engine.actions.subgroup_allocate` (allocate and, for subgroups
with their own constraints, the solvers too), which reads the domains from here (:func:`domains`).
Everything here is deterministic: domains are sorted by their label values.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from scheduler.engine.session import GPU_MILLI, JobInfo, NodeInfo, Session, TaskInfo
from scheduler.engine.state import PodStatus, Topology

__all__ = ["Domain", "DomainRoom", "Plan", "constrained", "constraint_error", "domains", "landing", "plan"]

_PLACED = frozenset({PodStatus.RUNNING, PodStatus.ALLOCATED, PodStatus.PIPELINED, PodStatus.RELEASING})


@dataclass(frozen=True, slots=True)
class Domain:
    """The nodes that share the values of a topology's levels 0..depth."""

    levels: tuple[str, ...]  # label keys of levels 0..depth
    values: tuple[str, ...]  # the nodes' values of those labels
    nodes: tuple[NodeInfo, ...]

    @property
    def level(self) -> str:
        """The label key of the domain's own (narrowest) level."""
        return self.levels[-1]

    @property
    def name(self) -> str:
        """``block=b1/rack=r3``: unambiguous even when rack names repeat across blocks."""
        return "/".join(f"{k}={v}" for k, v in zip(self.levels, self.values, strict=True))

    def free(self, gpu: bool, future: bool = False) -> int:
        """Free milli-GPU (``gpu``) or CPU millicores; idle capacity, or idle + releasing (``future``)."""
        total = 0
        for n in self.nodes:
            if gpu:
                # sum(dev_future(d)) and sum(dev_idle(d)) over the devices, in C-level sums.
                held = sum(map(max, n.dev_rel, n.dev_pipe)) if not future else sum(n.dev_pipe)
                total += n.gpus * GPU_MILLI - sum(n.dev_alloc) - held
            else:
                total += n.future(0) if future else n.idle(0)
        return total


_DOMAINS: weakref.WeakKeyDictionary[Session, dict[tuple[tuple[str, ...], int], list[Domain]]] = (
    weakref.WeakKeyDictionary()
)


_FREES: weakref.WeakKeyDictionary[Session, dict[tuple[object, ...], tuple[int, list[int]]]] = (
    weakref.WeakKeyDictionary()
)


def domains(ssn: Session, levels: tuple[str, ...], depth: int) -> list[Domain]:
    """The domains of level ``depth`` of a topology with ``levels``, sorted by their label values.

    Node labels do not change within a cycle, so the grouping is computed once per session.
    """
    cache = _DOMAINS.setdefault(ssn, {})
    key = (levels, depth)
    found = cache.get(key)
    if found is None:
        keys = levels[: depth + 1]
        groups: dict[tuple[str, ...], list[NodeInfo]] = {}
        for n in ssn.nodes:
            labels = n.spec.labels
            if all(k in labels for k in keys):
                groups.setdefault(tuple(labels[k] for k in keys), []).append(n)
        found = cache[key] = [Domain(keys, v, tuple(groups[v])) for v in sorted(groups)]
    return found


def _amount(milli: int) -> str:
    """Milli-GPU or CPU millicores as a number of GPUs or cores."""
    return f"{milli / 1000:g}"


@dataclass(slots=True)
class Plan:
    """The node sets a constrained job may be placed on, in the order to try them (see module doc)."""

    topology: Topology
    required: int | None  # level index
    preferred: int | None
    tasks: Sequence[TaskInfo]
    gpu: bool  # the leading resource: GPUs, else CPU
    need: int  # of the leading resource, for the tasks to place now
    anchors: frozenset[str]  # nodes of pods the job already has placed
    tried: int = 0  # required-level domains with enough capacity that were tried and failed
    live: bool = False  # free capacity read afresh each time (inside a what-if simulation), never cached

    def frees(self, ssn: Session, depth: int, future: bool = False) -> list[int]:
        """Free capacity of each domain of level ``depth`` (in :func:`domains` order), in the leading resource.

        Cached per committed state (``ssn.commits``): call it only while the session holds no uncommitted
        placement, as :func:`scheduler.engine.actions.allocate.allocate_constrained` does (before trying a
        job, and after each failed try has been rolled back).
        """
        if self.live:
            return [d.free(self.gpu, future) for d in domains(ssn, self.topology.levels, depth)]
        cache = _FREES.setdefault(ssn, {})
        key = (self.topology.levels, depth, self.gpu, future)
        hit = cache.get(key)
        if hit is not None and hit[0] == ssn.commits:
            return hit[1]
        values = [d.free(self.gpu, future) for d in domains(ssn, self.topology.levels, depth)]
        cache[key] = (ssn.commits, values)
        return values

    def ordered(self, ssn: Session, depth: int) -> list[Domain]:
        """The domains of level ``depth`` that can hold the gang, least free first, then by name."""
        doms = domains(ssn, self.topology.levels, depth)
        idle, future = self.frees(ssn, depth), self.frees(ssn, depth, future=True)
        cands = [
            (idle[i], d.values, d)
            for i, d in enumerate(doms)
            if future[i] >= self.need and (not self.anchors or self.anchors <= {n.name for n in d.nodes})
        ]
        cands.sort(key=lambda c: (c[0], c[1]))
        return [c[2] for c in cands]

    def node_sets(self, ssn: Session) -> Iterator[tuple[Sequence[NodeInfo], Domain | None]]:
        """Node sets to try, each with its domain (None = every node, a preferred-only job's last resort)."""
        top = self.required if self.required is not None else 0
        start = self.preferred if self.preferred is not None else top
        seen: set[tuple[str, ...]] = set()
        for depth in range(start, top - 1, -1):
            for d in self.ordered(ssn, depth):
                if depth == self.required:
                    self.tried += 1
                names = tuple(n.name for n in d.nodes)
                if names in seen:
                    continue  # a domain with the same nodes as one already tried (a block of one rack)
                seen.add(names)
                yield d.nodes, d
        if self.required is None:
            yield ssn.nodes, None

    def unschedulable_message(self, ssn: Session) -> str:
        """Why no domain of the required level took the gang: the level, the largest free domain, and a
        wider domain that would have had room."""
        assert self.required is not None
        levels = self.topology.levels
        level = levels[self.required]
        what = "GPUs" if self.gpu else "CPU cores"
        head = (
            f"the job requires its {len(self.tasks)} pod{'' if len(self.tasks) == 1 else 's'} within one {level} "
            f"domain of topology "
            f"{self.topology.name!r}"
        )
        all_domains = domains(ssn, levels, self.required)
        if not all_domains:
            keys = ", ".join(levels[: self.required + 1])
            return f"{head}, and no node has the label(s) {keys}"
        free = self.frees(ssn, self.required)
        pinned = [i for i, d in enumerate(all_domains) if self.anchors <= {n.name for n in d.nodes}]
        if not pinned:
            return f"{head}, but its placed pods are on nodes of more than one {level} domain"
        i_best = max(pinned, key=lambda i: free[i])  # the first by name among equals
        best, best_free = all_domains[i_best], free[i_best]
        parts = [
            f"{head}: the largest free, {best.name}, has {_amount(best_free)} of the "
            f"{_amount(self.need)} {what} needed"
        ]
        if self.tried:
            parts.append(
                f"{self.tried} {level} domain(s) have the {what} free in total but not on nodes the pods fit"
            )
        if self.required > 0:
            # A wider domain worth naming: room for the gang, and more than the best domain of the level.
            floor = max(self.need, best_free + 1)
            wider, wider_free = domains(ssn, levels, self.required - 1), self.frees(ssn, self.required - 1)
            i_w = max(range(len(wider)), key=lambda i: wider_free[i], default=None)
            if i_w is not None and wider_free[i_w] >= floor:
                parts.append(
                    f"{wider[i_w].name} has {_amount(wider_free[i_w])} {what} free across its {level} domains, "
                    f"but the job requires one {level}"
                )
        return "; ".join(parts)


def constraint_error(ssn: Session, job: JobInfo) -> str | None:
    """Why the job's constraint cannot be read against the cluster's topologies (None when it can)."""
    spec = job.spec
    if spec.topology is None or (spec.required_level is None and spec.preferred_level is None):
        return None  # no level: nothing to keep, whatever the topology
    topo = next((t for t in ssn.state.topologies if t.name == spec.topology), None)
    if topo is None:
        known = ", ".join(t.name for t in ssn.state.topologies) or "none"
        return f"topology {spec.topology!r} of the job's topology constraint does not exist (known: {known})"
    for kind, lvl in (("required", spec.required_level), ("preferred", spec.preferred_level)):
        if lvl is not None and not topo.has(lvl):
            return (
                f"{kind} topology level {lvl!r} is not a level of topology {topo.name!r} "
                f"(levels: {', '.join(topo.levels)})"
            )
    req, pref = spec.required_level, spec.preferred_level
    if req is not None and pref is not None and topo.index(pref) < topo.index(req):
        return f"preferred topology level {pref!r} is wider than the required level {req!r} in topology {topo.name!r}"
    return None


def constrained(job: JobInfo) -> bool:
    """True when the job's PodGroup names a topology and a level (required or preferred)."""
    spec = job.spec
    return spec.topology is not None and (spec.required_level is not None or spec.preferred_level is not None)


def plan(ssn: Session, job: JobInfo, tasks: Sequence[TaskInfo], live: bool = False) -> Plan | None:
    """The placement plan of a job with a topology level, or None when it has none (place anywhere).

    Call :func:`constraint_error` first: a constraint it rejects gives no plan. ``live`` plans are for
    what-if simulations (reclaim, preempt, consolidation): free capacity is not cached, and tasks a
    simulation evicted (virtual, releasing) do not pin the job to their domain, as in KAI, where only
    active allocated pods do.
    """
    spec = job.spec
    if spec.topology is None or (spec.required_level is None and spec.preferred_level is None):
        return None
    topo = next(t for t in ssn.state.topologies if t.name == spec.topology)
    gpu_need = sum(t.gpu_milli() for t in tasks)
    gpu = gpu_need > 0
    return Plan(
        topology=topo,
        required=None if spec.required_level is None else topo.index(spec.required_level),
        preferred=None if spec.preferred_level is None else topo.index(spec.preferred_level),
        tasks=tasks,
        gpu=gpu,
        need=gpu_need if gpu else sum(t.request.cpu for t in tasks),
        anchors=frozenset(
            t.node.name
            for t in job.tasks
            if t.node is not None and t.status in _PLACED and not (t.virtual and t.status is PodStatus.RELEASING)
        ),
        live=live,
    )


class DomainRoom:
    """Idle + releasing capacity of each domain of a plan's required level, grown as a solver adds victims.

    KAI's topology-aware idle-GPU scenario filter: a scenario can only succeed if one domain the gang may
    use holds the gang's whole need once the victims so far are gone (victims re-placed elsewhere only take
    capacity). A necessary condition, checked before simulating; only for GPU gangs with a required level.
    """

    def __init__(self, ssn: Session, p: Plan) -> None:
        """Capacity of the domains of ``p``'s required level that hold every placed pod of the job."""
        assert p.required is not None and p.gpu
        doms = [
            d
            for d in domains(ssn, p.topology.levels, p.required)
            if not p.anchors or p.anchors <= {n.name for n in d.nodes}
        ]
        self.free = [d.free(True, future=True) for d in doms]
        self.where = {n.name: i for i, d in enumerate(doms) for n in d.nodes}
        self.need = p.need

    def add(self, node: str | None, milli_gpu: int) -> None:
        """A victim on ``node`` frees ``milli_gpu``."""
        i = self.where.get(node) if node is not None else None
        if i is not None:
            self.free[i] += milli_gpu

    def ok(self) -> bool:
        """Some domain may hold the gang."""
        return max(self.free, default=0) >= self.need


_LANDED = frozenset({PodStatus.RUNNING, PodStatus.ALLOCATED, PodStatus.PIPELINED})


def landing(ssn: Session, job: JobInfo) -> dict[str, object] | None:
    """Where a job with a topology constraint sits now: what its cycle record's Bind / Pipeline carry.

    ``{"topology", "domain", "required_level", "preferred_level", "domains", "within_preferred"}``:
    ``domain`` is the narrowest domain holding them all (``zone=z1/block=b2/rack=r3``), ``domains`` maps
    each level of the topology, widest first, to the label value all the job's placed pods (running,
    allocated, pipelined) share at that level and every wider one, or None where they span domains (or a
    node lacks the label); ``within_preferred`` says whether they share a preferred-level domain (None
    without a preferred level). None for a job without a usable constraint.
    """
    spec = job.spec
    if not constrained(job) or constraint_error(ssn, job) is not None:
        return None
    topo = next(t for t in ssn.state.topologies if t.name == spec.topology)
    nodes = {t.node.name: t.node for t in job.tasks if t.node is not None and t.status in _LANDED}
    out: dict[str, str | None] = {}
    same = bool(nodes)
    for level in topo.levels:
        values = {n.spec.labels.get(level) for n in nodes.values()}
        value = next(iter(values)) if len(values) == 1 else None
        same = same and value is not None
        out[level] = value if same else None
    within = None if spec.preferred_level is None else out.get(spec.preferred_level) is not None
    shared = [f"{k}={v}" for k, v in out.items() if v is not None]
    return {
        "topology": topo.name,
        "domain": "/".join(shared) or None,
        "required_level": spec.required_level,
        "preferred_level": spec.preferred_level,
        "domains": out,
        "within_preferred": within,
    }
