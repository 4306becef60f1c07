"""Seeded synthetic clusters and workloads, as events, for benchmarks and property tests.

Randomness lives here, in building the *inputs*; the engine itself never draws a random number.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import cast

from ingest import events as ev


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    """Size of a synthetic cluster and workload."""

    nodes: int = 1000
    gpus_per_node: int = 8
    pending_pods: int = 10_000
    departments: int = 10
    queues_per_department: int = 10
    running_fraction: float = 0.0  # share of pods bound up front (spread over nodes)
    seed: int = 0
    # Real-node features (0 = none, the workload is then exactly the classic one):
    foreign_fraction: float = 0.0  # share of GPU and CPU capacity held by pods of other schedulers
    constrained_fraction: float = 0.0  # share of jobs whose pods carry hostname anti-affinity or zone spread
    zones: int = 10
    # Topology (issue 15): share of multi-pod gangs with a required or preferred rack / block constraint on
    # topology "dc" (topology/zone > topology/block > topology/rack > hostname). ``topology_shape`` is
    # (zones, blocks a zone, racks a block); the nodes are split evenly over the racks in name order.
    # 0 = no Topology and no labels: the workload is then exactly the classic one.
    topology_fraction: float = 0.0
    topology_shape: tuple[int, int, int] = (4, 8, 8)
    # Subgroups (issue 15 item 3): share of multi-pod gangs split into a leader PodSet (1 pod) and worker
    # PodSets (the rest, in one or two replicas), some with minSubGroup, some with a required rack on the
    # workers when there is a topology. 0 = no subgroups (the classic workload).
    subgroup_fraction: float = 0.0


TOPOLOGY_LEVELS = ("topology/zone", "topology/block", "topology/rack", "kubernetes.io/hostname")


def topology_labels(i: int, nodes: int, shape: tuple[int, int, int]) -> dict[str, str]:
    """The ``dc`` topology labels of node i of ``nodes``, for ``shape`` = (zones, blocks a zone, racks a
    block): rack ``r{k}`` holds nodes ``k * nodes // racks`` up to the next rack's first."""
    zones, blocks, racks = shape
    rack = i * zones * blocks * racks // max(nodes, 1)
    block = rack // racks
    return {
        "topology/zone": f"z{block // blocks}",
        "topology/block": f"b{block}",
        "topology/rack": f"r{rack}",
        "kubernetes.io/hostname": f"node-{i:05d}",
    }


SUBGROUP_LABEL = "kai.scheduler/subgroup-name"


def _subgroups(rng: random.Random, n: int, topo: bool) -> tuple[dict[str, object], list[str | None]]:
    """PodGroup fields and each pod's subgroup for a gang of n pods: a leader and one or two worker
    replicas (under a ``workers`` SubGroupSet, with a required rack or minSubGroup 1 now and then)."""
    replicas = 2 if n >= 5 and rng.random() < 0.5 else 1
    sizes = [(n - 1) // replicas + (1 if r < (n - 1) % replicas else 0) for r in range(replicas)]
    subs = [ev.SubGroup(name="leader", min_member=1)]
    workers: dict[str, object] = {"name": "workers"}
    if topo and rng.random() < 0.5:
        workers |= {"topology": "dc", "required_topology_level": "topology/rack"}
    if replicas > 1 and rng.random() < 0.5:
        workers["min_sub_group"] = 1
    subs.append(ev.SubGroup.model_validate(workers))
    pod_sub: list[str | None] = ["leader"]
    for r, size in enumerate(sizes):
        subs.append(ev.SubGroup(name=f"w{r}", parent="workers", min_member=rng.randint(1, size)))
        pod_sub += [f"w{r}"] * size
    return {"subgroups": subs}, pod_sub


def synthetic_events(spec: SyntheticSpec) -> list[ev.Event]:
    """Nodes, a 2-level queue tree, and jobs: whole-GPU pods, multi-GPU gangs and fractional pods."""
    rng = random.Random(spec.seed)
    out: list[ev.Event] = []
    t = 0
    real = spec.foreign_fraction > 0 or spec.constrained_fraction > 0
    topo = spec.topology_fraction > 0
    topo_rng = random.Random(spec.seed + 1)  # its own stream: the workload is the same with or without it
    sg_rng = random.Random(spec.seed + 2)  # the subgroups' own stream, likewise
    if topo:
        out.append(ev.TopologyUpserted(at_ms=t, name="dc", levels=list(TOPOLOGY_LEVELS)))
    for i in range(spec.nodes):
        name = f"node-{i:05d}"
        labels = {"kubernetes.io/hostname": name, "zone": f"zone-{i % spec.zones}"} if real else {}
        if topo:
            labels = labels | topology_labels(i, spec.nodes, spec.topology_shape)
        out.append(
            ev.NodeUpserted(
                uid=name,
                at_ms=t,
                name=name,
                cpu_millicores=128_000,
                memory_bytes=1024 * 2**30,
                gpus=spec.gpus_per_node,
                gpu_memory_mib=81920,
                gpu_model="A100",
                labels=labels,
            )
        )
    if spec.foreign_fraction > 0:
        # Foreign GPUs spread evenly: node i holds floor((i+1)·f·g) - floor(i·f·g) more, so the total is f of all.
        g = spec.gpus_per_node
        for i in range(spec.nodes):
            gpus = int((i + 1) * spec.foreign_fraction * g) - int(i * spec.foreign_fraction * g)
            out.append(
                ev.ForeignPodUpserted(
                    at_ms=t,
                    name=f"other-{i:05d}",
                    namespace="other",
                    node=f"node-{i:05d}",
                    requests=ev.PodRequests(
                        cpu_millicores=int(128_000 * spec.foreign_fraction),
                        memory_bytes=int(1024 * 2**30 * spec.foreign_fraction),
                        gpus=gpus,
                    ),
                    labels={"app": "other"},
                    host_ports=[ev.HostPort(port=9400)],
                )
            )
    leaf_names = []
    total_gpu_milli = spec.nodes * spec.gpus_per_node * 1000
    leaves = spec.departments * spec.queues_per_department
    for d in range(spec.departments):
        dname = f"dept-{d:02d}"
        out.append(
            ev.QueueUpserted(
                uid=dname,
                at_ms=t,
                name=dname,
                resources=ev.QueueResources(
                    gpu=ev.QueueResource(
                        quota=total_gpu_milli // spec.departments // 2000 * 1000, over_quota_weight=1
                    ),
                ),
            )
        )
        for q in range(spec.queues_per_department):
            qname = f"team-{d:02d}-{q:02d}"
            leaf_names.append(qname)
            out.append(
                ev.QueueUpserted(
                    uid=qname,
                    at_ms=t,
                    name=qname,
                    parent=dname,
                    priority=100 + rng.choice((0, 0, 0, 10)),
                    resources=ev.QueueResources(
                        gpu=ev.QueueResource(
                            quota=total_gpu_milli // leaves // 2000 * 1000,
                            limit=None
                            if rng.random() < 0.8
                            else total_gpu_milli // leaves * 3 // 1000 * 1000,
                            over_quota_weight=rng.choice((1, 1, 2, 3)),
                        )
                    ),
                )
            )
    pods = 0
    j = 0
    while pods < spec.pending_pods:
        kind = rng.random()
        queue = rng.choice(leaf_names)
        name = f"job-{j:06d}"
        t += 1
        if kind < 0.5:
            n, req = (
                1,
                ev.PodRequests(cpu_millicores=4000, memory_bytes=16 * 2**30, gpus=rng.choice((1, 1, 2))),
            )
        elif kind < 0.7:
            n = rng.choice((2, 4, 8))
            req = ev.PodRequests(cpu_millicores=16000, memory_bytes=64 * 2**30, gpus=rng.choice((4, 8)))
        else:
            n = 1
            req = ev.PodRequests(
                cpu_millicores=2000, memory_bytes=8 * 2**30, gpu_fraction_milli=rng.choice((250, 500, 300))
            )
        n = min(n, spec.pending_pods - pods)
        prio = rng.choice((50, 50, 50, 75, 100))
        extra: dict[str, object] = {}
        if spec.constrained_fraction > 0 and rng.random() < spec.constrained_fraction:
            sel = ev.LabelSelector(match_labels={"job": name})
            if rng.random() < 0.5:
                term = ev.PodAffinityTerm(label_selector=sel, topology_key="kubernetes.io/hostname")
                extra = {"labels": {"job": name}, "pod_anti_affinity": [term]}
            else:
                c = ev.TopologySpreadConstraint(max_skew=1, topology_key="zone", label_selector=sel)
                extra = {"labels": {"job": name}, "topology_spread": [c]}
        constraint: dict[str, str] = {}
        if topo and n > 1 and topo_rng.random() < spec.topology_fraction:
            level = topo_rng.choice(("topology/rack", "topology/block"))
            kind_key = topo_rng.choice(("required_topology_level", "preferred_topology_level"))
            constraint = {"topology": "dc", kind_key: level}
        groups: dict[str, object] = {}
        pod_sub: list[str | None] = [None] * n
        if spec.subgroup_fraction > 0 and n > 1 and sg_rng.random() < spec.subgroup_fraction:
            groups, pod_sub = _subgroups(sg_rng, n, topo)
        out.append(
            ev.PodGroupUpserted(
                uid=f"default/{name}",
                at_ms=t,
                name=name,
                namespace="default",
                queue=queue,
                min_member=n,
                priority=prio,
                created_at_ms=t,
                **constraint,  # type: ignore[arg-type]
                **groups,  # type: ignore[arg-type]
            )
        )
        for k in range(n):
            pod_extra = extra
            sub = pod_sub[k]
            if sub is not None:
                labels = {**cast(dict[str, str], extra.get("labels", {})), SUBGROUP_LABEL: sub}
                pod_extra = {**extra, "labels": labels}
            out.append(
                ev.PodSubmitted(
                    uid=f"default/{name}-{k}",
                    at_ms=t,
                    name=f"{name}-{k}",
                    namespace="default",
                    pod_group=name,
                    queue=queue,
                    requests=req,
                    created_at_ms=t,
                    **pod_extra,  # type: ignore[arg-type]
                )
            )
        pods += n
        j += 1
    return out


CONTENTION_SHAPES = ("reclaim", "preempt", "consolidation")


def a100_nodes(nodes: int, gpus_per_node: int = 8) -> list[ev.Event]:
    """``nodes`` identical 128-core, 1 TiB nodes of A100s (80 GB), named ``node-00000`` on: the benchmark
    shapes' cluster."""
    out: list[ev.Event] = []
    for i in range(nodes):
        name = f"node-{i:05d}"
        out.append(
            ev.NodeUpserted(
                uid=name,
                at_ms=0,
                name=name,
                cpu_millicores=128_000,
                memory_bytes=1024 * 2**30,
                gpus=gpus_per_node,
                gpu_memory_mib=81920,
                gpu_model="A100",
            )
        )
    return out


def one_pod_job(
    name: str,
    at_ms: int,
    queue: str,
    req: ev.PodRequests,
    priority: int,
    node: str | None = None,
    devices: list[int] | None = None,
) -> list[ev.Event]:
    """A preemptible one-pod job in ``default`` (its PodGroup and pod ``NAME-0``), bound to ``node`` on
    ``devices`` when a node is given."""
    out: list[ev.Event] = [
        ev.PodGroupUpserted(
            uid=f"default/{name}",
            at_ms=at_ms,
            name=name,
            namespace="default",
            queue=queue,
            priority=priority,
            preemptible=True,
            created_at_ms=at_ms,
        ),
        ev.PodSubmitted(
            uid=f"default/{name}-0",
            at_ms=at_ms,
            name=f"{name}-0",
            namespace="default",
            pod_group=name,
            queue=queue,
            requests=req,
            created_at_ms=at_ms,
        ),
    ]
    if node is not None:
        out.append(
            ev.PodBound(
                uid=f"default/{name}-0",
                at_ms=at_ms,
                name=f"{name}-0",
                namespace="default",
                node=node,
                gpu_devices=devices or [],
            )
        )
    return out


def _department(d: str, total_gpu_milli: int) -> ev.QueueUpserted:
    """KAI's benchmark department ``dept-<d>``: a parent queue deserving half the cluster's GPUs."""
    return ev.QueueUpserted(
        uid=f"dept-{d}",
        at_ms=0,
        name=f"dept-{d}",
        resources=ev.QueueResources(gpu=ev.QueueResource(quota=total_gpu_milli // 2)),
    )


def contention_events(nodes: int, shape: str, gpus_per_node: int = 8) -> list[ev.Event]:
    """KAI's action-benchmark shape: `nodes` x 8 GPUs, 4 leaf queues in 2 departments, 1-GPU jobs.

    ``reclaim``: every GPU is held by a running job of department A's queues (deserved 1/4 of the cluster
    each, so A is at twice its share); as many jobs pend in department B's queues, which reclaim up to
    their share. ``preempt``: each queue holds its deserved quarter with priority-50 jobs and has as many
    priority-100 jobs pending (preemption within the queue). ``consolidation``: each node holds 5 1-GPU
    jobs, and 4-GPU jobs pend in B's queues; none fits until pods are moved together.
    """
    if shape not in CONTENTION_SHAPES:
        raise ValueError(f"unknown shape {shape!r}: one of {', '.join(CONTENTION_SHAPES)}")
    g = gpus_per_node
    out: list[ev.Event] = list(a100_nodes(nodes, g))
    total = nodes * g * 1000
    for d in ("a", "b"):
        out.append(_department(d, total))
        for q in (1, 2):
            out.append(
                ev.QueueUpserted(
                    uid=f"{d}{q}",
                    at_ms=0,
                    name=f"{d}{q}",
                    parent=f"dept-{d}",
                    resources=ev.QueueResources(gpu=ev.QueueResource(quota=total // 4)),
                )
            )
    one = ev.PodRequests(cpu_millicores=1000, memory_bytes=4 * 2**30, gpus=1)
    four = ev.PodRequests(cpu_millicores=4000, memory_bytes=16 * 2**30, gpus=4)
    t = 1
    j = 0

    def job(
        queue: str, req: ev.PodRequests, prio: int, node: str | None = None, devices: list[int] | None = None
    ) -> None:
        nonlocal t, j
        name = f"job-{j:07d}"
        j += 1
        t += 1
        out.extend(one_pod_job(name, t, queue, req, prio, node, devices))

    per_node = {"reclaim": g, "preempt": g, "consolidation": 5}[shape]
    queues = ("a1", "a2") if shape == "reclaim" else ("a1", "a2", "b1", "b2")
    k = 0
    for i in range(nodes):
        for dev in range(per_node):
            job(queues[k % len(queues)], one, 50, f"node-{i:05d}", [dev])
            k += 1
    if shape == "reclaim":
        for n in range(nodes * g):
            job(("b1", "b2")[n % 2], one, 50)
    elif shape == "preempt":
        for n in range(nodes * g):
            job(("a1", "a2", "b1", "b2")[n % 4], one, 100)
    else:
        for n in range(nodes // 2):
            job(("b1", "b2")[n % 2], four, 50)
    return out


def reclaim_large_events(nodes: int, gpus_per_node: int = 8) -> list[ev.Event]:
    """KAI v0.17.0's ReclaimLargeJobs cluster, built like KAI's topology builder (the shape of
    ``benchmarks/bench_kai_shapes.py``): N nodes x `gpus_per_node` GPUs all held by 1-GPU jobs of queue
    ``a`` (deserves 0), and one pending gang of N/2 whole-node pods in queue ``b`` (deserves every GPU)."""
    out: list[ev.Event] = list(a100_nodes(nodes, gpus_per_node))
    total = nodes * gpus_per_node * 1000
    # reclaim_benchmark_test.go:194-195 (Queue0DeservedGPUs 0, Queue1DeservedGPUs N*8) and
    # reclaim_large_job_topology_test.go:42,47 (GPUOverQuotaWeight 0 on both queues).
    for q, quota in (("a", 0), ("b", total)):
        out.append(
            ev.QueueUpserted(
                uid=q,
                at_ms=0,
                name=q,
                resources=ev.QueueResources(gpu=ev.QueueResource(quota=quota, over_quota_weight=0)),
            )
        )
    one = ev.PodRequests(cpu_millicores=1000, memory_bytes=4 * 2**30, gpus=1)
    eight = ev.PodRequests(cpu_millicores=8000, memory_bytes=32 * 2**30, gpus=gpus_per_node)
    t = 1
    # reclaim_large_job_topology_test.go:72-84: running job i sits on node i mod N, created in index order.
    for i in range(nodes * gpus_per_node):
        node, dev = i % nodes, i // nodes
        t += 1
        out.extend(one_pod_job(f"run-{i:06d}", t, "a", one, 50, f"node-{node:05d}", [dev]))
    # reclaim_benchmark_test.go:193 (PendingJobTasks N/2); the gang's minimum is all its tasks.
    size = max(1, nodes // 2)
    t += 1
    out.append(
        ev.PodGroupUpserted(
            uid="default/large",
            at_ms=t,
            name="large",
            namespace="default",
            queue="b",
            min_member=size,
            priority=50,
            preemptible=True,
            created_at_ms=t,
        )
    )
    for k in range(size):
        out.append(
            ev.PodSubmitted(
                uid=f"default/large-{k}",
                at_ms=t,
                name=f"large-{k}",
                namespace="default",
                pod_group="large",
                queue="b",
                requests=eight,
                created_at_ms=t,
            )
        )
    return out


def mixed_jobs_events(nodes: int, jobs: int, gpus_per_node: int = 8) -> list[ev.Event]:
    """KAI's ``createBenchmarkTopologyWithMixedJobs`` (pkg/scheduler/actions/benchmark_test.go), the cluster of
    its consolidation benchmark: `nodes` x 8 GPUs; queues ``queue-0`` .. ``queue-3`` (deserved a quarter of
    the GPUs each, over-quota weight 1) under ``dept-a`` (0, 1) and ``dept-b`` (2, 3), each deserving half;
    `jobs` one-pod 1-GPU jobs of priority 50 (KAI's train priority), job i in ``queue-{i % 4}``, the even ones
    running on node i mod N (devices in job order), the odd ones pending."""
    g = gpus_per_node
    # KAI's names (node-0, node-1, ...): its tie-breaks between equal nodes follow them.
    out: list[ev.Event] = [
        n.model_copy(update={"uid": f"node-{k}", "name": f"node-{k}"})
        for k, n in enumerate(a100_nodes(nodes, g))
    ]
    total = nodes * g * 1000
    out += [_department("a", total), _department("b", total)]
    for q in range(4):
        out.append(
            ev.QueueUpserted(
                uid=f"queue-{q}",
                at_ms=0,
                name=f"queue-{q}",
                parent="dept-a" if q < 2 else "dept-b",
                resources=ev.QueueResources(gpu=ev.QueueResource(quota=total // 4, over_quota_weight=1)),
            )
        )
    one = ev.PodRequests(cpu_millicores=1000, memory_bytes=4 * 2**30, gpus=1)
    used = [0] * nodes
    for i in range(jobs):
        node = dev = None
        if i % 2 == 0:
            k = i % nodes
            node, dev = f"node-{k}", used[k]
            used[k] += 1
        out.extend(
            one_pod_job(
                f"job-{i:07d}", 2 + i, f"queue-{i % 4}", one, 50, node, None if dev is None else [dev]
            )
        )
    return out
