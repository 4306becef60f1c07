"""Seeded synthetic clusters and workloads, as events, for benchmarks and property tests.

Randomness lives here, in building the *inputs*; the engine itself never draws a random number.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

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


def synthetic_events(spec: SyntheticSpec) -> list[ev.Event]:
    """Nodes, a 2-level queue tree, and jobs: whole-GPU pods, multi-GPU gangs and fractional pods."""
    rng = random.Random(spec.seed)
    out: list[ev.Event] = []
    t = 0
    real = spec.foreign_fraction > 0 or spec.constrained_fraction > 0
    for i in range(spec.nodes):
        name = f"node-{i:05d}"
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
                labels={"kubernetes.io/hostname": name, "zone": f"zone-{i % spec.zones}"} if real else {},
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
            )
        )
        for k in range(n):
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
                    **extra,  # type: ignore[arg-type]
                )
            )
        pods += n
        j += 1
    return out
