"""allocate: place pending jobs on free capacity, gang by gang, in DRF queue order. Never evicts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from scheduler.engine import topology
from scheduler.engine.actions.common import candidate_jobs, over_capacity, should_pipeline_job
from scheduler.engine.actions.subgroup_allocate import allocate_subgroups
from scheduler.engine.ordering import JobsByQueue
from scheduler.engine.placement import allocate_task, exceeds_every_node
from scheduler.engine.predicates import filter_counts
from scheduler.engine.session import JobInfo, NodeInfo, Session, Statement, TaskInfo
from scheduler.engine.state import PodStatus

NAME = "allocate"
# Reason codes of plain capacity shortages: a record names its filter counts only when some other filter
# (ports, affinity, spread, volumes, extended resources, taints, ...) rejected a node.
_CAPACITY = frozenset({"InsufficientCPU", "Insufficientmemory", "InsufficientGPUs", "InsufficientGPUmemory"})


# Per-node reasons that depend only on a task's capacity signature (requests, node selector / affinity,
# tolerations) and on the node: a failure made only of these holds for every task with that signature,
# whatever pod-level constraints it adds (they only remove nodes).
_CAPACITY_ONLY = _CAPACITY | {
    "TooManyPods",
    "NodeAffinity",
    "TaintToleration",
    "NodeNotReady",
    "NodeUnschedulable",
}


def capacity_signature(task: TaskInfo) -> tuple[object, ...]:
    """What capacity and the node's own labels / taints decide for a task."""
    p = task.pod
    return (
        "capacity",
        task.request,
        tuple(sorted(p.node_selector.items())),
        p.allowed_nodes,
        p.affinity,
        p.tolerations,
    )


def task_signature(task: TaskInfo) -> tuple[object, ...]:
    """Everything placement depends on for a task, so identical tasks can share a failed attempt."""
    p = task.pod
    return (
        task.request,
        tuple(sorted(p.node_selector.items())),
        p.allowed_nodes,
        p.affinity,
        p.tolerations,
        p.namespace,
        tuple(sorted(p.labels.items())),
        p.host_ports,
        p.pod_anti_affinity,
        p.volumes,
    )


def memoisable(task: TaskInfo) -> bool:
    """Whether a task that fitted nowhere answers for identical ones while capacity only shrinks."""
    # Placing other pods can satisfy a required affinity or even out a spread: no "fits nowhere" memo.
    return not (task.pod.pod_affinity or task.pod.topology_spread)


def allocate_job(
    ssn: Session,
    stmt: Statement,
    job: JobInfo,
    nodes: Sequence[NodeInfo],
    action: str,
    pipeline_only: bool = False,
    record_errors: bool = True,
    failed: dict[tuple[object, ...], str] | None = None,
) -> bool:
    """Place the job's next tasks (to minAvailable, or one elastic extra) all or nothing.

    `failed` memoises tasks that fitted nowhere while nothing else was tentatively placed: within one
    allocate pass free capacity only shrinks, so an identical task cannot fit later either.
    """
    tasks = job.tasks_to_allocate(include_virtual=pipeline_only)
    if not tasks:
        return False
    over = over_capacity(ssn, job, tasks)
    if over is not None:
        if record_errors:
            job.fit_error(over[0], over[1])
        return False
    cp = stmt.checkpoint()
    for placed, task in enumerate(tasks):
        first = failed is not None and placed == 0
        sig = task_signature(task) if first and memoisable(task) else None
        cap = capacity_signature(task) if first else None
        err = None
        ssn.last_why = Counter()  # filled by allocate_task when the task fits nowhere
        if failed is not None:
            err = (failed.get(sig) if sig is not None else None) or (
                failed.get(cap) if cap is not None else None
            )
        if err is None:
            err = allocate_task(ssn, stmt, task, nodes, action, pipeline_only, explain=record_errors)
            if err is not None and failed is not None:
                if sig is not None:
                    failed[sig] = err
                if cap is not None and ssn.last_why and set(filter_counts(ssn.last_why)) <= _CAPACITY_ONLY:
                    failed[cap] = err
        if err is not None:
            stmt.rollback(cp)
            filters = filter_counts(ssn.last_why) if ssn.last_why else {}
            extra: dict[str, object] = (
                {"filters": filters} if any(k not in _CAPACITY for k in filters) else {}
            )
            ssn.last_why = Counter()
            if record_errors:
                too_big = exceeds_every_node(ssn, task)
                if too_big is not None:
                    extra["exceeds_every_node"] = too_big
                m = job.min_available
                running = sum(1 for t in job.tasks if t.status in (PodStatus.RUNNING, PodStatus.ALLOCATED))
                if m > 1 and running < m:
                    job.fit_error(
                        "PodSchedulingErrors",
                        f"Resources were found for {placed} pods while {m} are required for gang scheduling. "
                        f"Additional pods cannot be scheduled due to: {err}",
                        task=task.name,
                        **extra,
                    )
                else:
                    job.fit_error(
                        "PodSchedulingErrors",
                        f"Resources were not found for pod {task.name} due to: {err}",
                        task=task.name,
                        **extra,
                    )
            return False
    return True


def allocate_constrained(
    ssn: Session, stmt: Statement, job: JobInfo, failed: dict[tuple[object, ...], str] | None = None
) -> bool:
    """:func:`allocate_job` for the whole cluster, or domain by domain for a job with a topology constraint
    (:mod:`scheduler.engine.topology`): the first domain that takes the gang wins. A job with subgroups goes
    to :func:`scheduler.engine.actions.subgroup_allocate.allocate_subgroups`."""
    tree = job.subgroup_tree()
    if tree is not None:
        return allocate_subgroups(ssn, stmt, job, tree, failed)
    problem = topology.constraint_error(ssn, job)
    if problem is not None:
        job.fit_error("TopologyConstraint", f"Topology constraint cannot be met: {problem}")
        return False
    tasks = job.tasks_to_allocate()
    p = topology.plan(ssn, job, tasks) if tasks else None
    if p is None:
        return allocate_job(ssn, stmt, job, ssn.nodes, NAME, failed=failed)
    over = over_capacity(ssn, job, tasks)
    if over is not None:
        job.fit_error(over[0], over[1])
        return False
    for nodes, domain in p.node_sets(ssn):
        if domain is None:  # a preferred-only job's last resort: anywhere, with the usual reasons
            return allocate_job(ssn, stmt, job, nodes, NAME, failed=failed)
        if allocate_job(ssn, stmt, job, nodes, NAME, record_errors=False):
            return True
    job.fit_error(
        "TopologyConstraint",
        f"Topology constraint not met: {p.unschedulable_message(ssn)}",
        topology=p.topology.name,
        level=p.topology.levels[p.required or 0],
    )
    return False


def run(ssn: Session) -> None:
    """The allocate action."""
    order = JobsByQueue(ssn, candidate_jobs(ssn, topology_aware=True))
    failed: dict[tuple[object, ...], str] = {}
    while (job := order.pop()) is not None:
        stmt = ssn.statement()
        already = job.active_allocated() > 0
        if allocate_constrained(ssn, stmt, job, failed):
            pipelined = should_pipeline_job(job)
            if pipelined:
                stmt.convert_to_pipelined(job, NAME)
            stmt.commit()
            if not pipelined and not already:
                job.last_start_ms = ssn.now_ms
            if job.has_tasks_to_allocate():
                order.push(job)
        else:
            stmt.discard()
