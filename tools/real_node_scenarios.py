"""Writes the real-nodes conformance scenarios (scheduler/conformance/scenarios/hourglass/real-nodes/).

The scenarios are data, checked in; this script is how they were written, kept so a change to the table is
one edit here and a re-run: ``python3 tools/real_node_scenarios.py``. Each entry states a cluster, queues,
jobs and the outcome a user would notice (scheduler/conformance/scenarios/hourglass/SCHEMA.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "scheduler" / "conformance" / "scenarios" / "hourglass" / "real-nodes"
GB = 1_000_000_000


def node(name: str, gpus: int = 8, cpu: int = 64_000, **kw: Any) -> dict[str, Any]:
    return {
        "name": name,
        "gpus": gpus,
        "cpu_millicores": cpu,
        "memory_bytes": 256 * GB,
        "gpu_memory_mib": 100,
        "max_pods": 110,
    } | kw


def queue(
    name: str, quota: float | None = 100, limit: float | None = None, weight: float = 1
) -> dict[str, Any]:
    return {
        "name": name,
        "parent": None,
        "priority": 100,
        "gpu": {"quota": quota, "limit": limit, "over_quota_weight": weight},
    }


def task(
    name: str, gpus: int = 0, cpu: int = 1000, status: str = "pending", node: str | None = None, **kw: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "gpus": gpus,
        "cpu_millicores": cpu,
        "memory_bytes": GB,
        "status": status,
    }
    if node is not None:
        out["node"] = node
    return out | kw


def job(
    name: str, tasks: list[dict[str, Any]], queue: str = "q", priority: int = 50, **kw: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "queue": queue,
        "priority": priority,
        "min_available": len(tasks),
        "tasks": tasks,
    } | kw


def foreign(name: str, node: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "node": node} | kw


def sel(**labels: str) -> dict[str, Any]:
    return {"match_labels": labels}


def term(topology_key: str = "kubernetes.io/hostname", **labels: str) -> dict[str, Any]:
    return {"label_selector": sel(**labels), "topology_key": topology_key}


def host(name: str, **labels: str) -> dict[str, str]:
    return {"kubernetes.io/hostname": name} | labels


S: list[dict[str, Any]] = []


def scenario(
    name: str,
    category: str,
    intent: str,
    nodes: list[dict[str, Any]],
    jobs: list[dict[str, Any]],
    expect: dict[str, Any],
    *,
    phase: str = "allocate",
    queues: list[dict[str, Any]] | None = None,
    foreign_pods: list[dict[str, Any]] | None = None,
    tags: list[str] | None = None,
    topologies: list[dict[str, Any]] | None = None,
) -> None:
    cluster: dict[str, Any] = {"nodes": nodes, "foreign_pods": foreign_pods or []}
    if topologies:
        cluster["topologies"] = topologies
    S.append(
        {
            "name": name,
            "category": category,
            "intent": intent,
            "strict": True,
            "tags": tags or [category],
            "run": {"mode": "single_pass", "phase": phase},
            "config": {
                "node_placement": {"gpu": "binpack", "cpu": "binpack"},
                "gpu_sharing_placement": "binpack",
                "queue_fair_share_enabled": True,
            },
            "cluster": cluster,
            "queues": queues or [queue("q")],
            "jobs": jobs,
            "expect": expect,
        }
    )


def on(node: str, status: str = "allocated") -> dict[str, Any]:
    return {"status": status, "node": node}


PENDING = {"status": "pending"}

# ---------------------------------------------------------------- foreign pods
scenario(
    "foreign-01-full-node-skipped",
    "foreign-pods",
    "A DaemonSet-like pod of another scheduler holds all 8 GPUs of n1: the 8-GPU job goes to n2.",
    [node("n1"), node("n2")],
    [job("j", [task("j-0", gpus=8)])],
    {"tasks": {"j-0": on("n2")}},
    foreign_pods=[foreign("other-0", "n1", gpus=8)],
)
scenario(
    "foreign-02-gpus-held-message",
    "foreign-pods",
    "Pods of the default scheduler hold 6 of n1's 8 GPUs: a 4-GPU job stays pending and the message names "
    "the node and what other schedulers hold there.",
    [node("n1")],
    [job("j", [task("j-0", gpus=4)])],
    {
        "tasks": {"j-0": PENDING},
        "message_contains": {"j": "node n1: 6 GPUs held by pods of other schedulers"},
    },
    foreign_pods=[foreign("other-0", "n1", gpus=4), foreign("other-1", "n1", gpus=2)],
)
scenario(
    "foreign-03-cpu-held",
    "foreign-pods",
    "A foreign pod holds 6 of 8 cores: a 4-core CPU job does not fit and is told why.",
    [node("n1", gpus=0, cpu=8000)],
    [job("j", [task("j-0", cpu=4000)])],
    {
        "tasks": {"j-0": PENDING},
        "message_contains": {"j": "node n1: 6 CPU cores held by pods of other schedulers"},
    },
    foreign_pods=[foreign("other-0", "n1", cpu_millicores=6000)],
)
scenario(
    "foreign-04-never-reclaimed",
    "foreign-pods",
    "n1 has 8 GPUs: 4 held by a foreign pod, 4 by queue a (above its share). Queue b needs 8: evicting a's "
    "pod would free only 4, foreign pods are never victims, so reclaim evicts nothing and b waits.",
    [node("n1")],
    [
        job("a1", [task("a1-0", gpus=4, status="running", node="n1")], queue="a"),
        job("b1", [task("b1-0", gpus=8)], queue="b"),
    ],
    {"tasks": {"b1-0": PENDING, "a1-0": on("n1", "running")}},
    phase="reclaim",
    queues=[queue("a", quota=0), queue("b", quota=8)],
    foreign_pods=[foreign("other-0", "n1", gpus=4)],
)
scenario(
    "foreign-05-not-in-fair-share",
    "foreign-pods",
    "Foreign pods hold n1's 8 GPUs, so only 8 GPUs are divided. Queue a (quota 0) runs 8 on n2, queue b "
    "(quota 0, same weight) asks 4: b's fair share is 4 of 8, so reclaim takes 4 from a. Were foreign GPUs "
    "divided too, a would be at its share and nothing would move.",
    [node("n1"), node("n2")],
    [
        job("a1", [task("a1-0", gpus=4, status="running", node="n2")], queue="a"),
        job("a2", [task("a2-0", gpus=4, status="running", node="n2")], queue="a"),
        job("b1", [task("b1-0", gpus=4)], queue="b"),
    ],
    {
        "tasks": {"b1-0": on("n2", "pipelined")},
        "task_sets": [{"tasks": ["a1-0", "a2-0"], "status_counts": {"running": 1, "releasing": 1}}],
    },
    phase="reclaim",
    queues=[queue("a", quota=0), queue("b", quota=0)],
    foreign_pods=[foreign("other-0", "n1", gpus=8)],
)
scenario(
    "foreign-06-pod-slots",
    "foreign-pods",
    "Three foreign pods fill a node that allows 3 pods: a CPU job has no pod slot there.",
    [node("n1", gpus=0, max_pods=3)],
    [job("j", [task("j-0")])],
    {"tasks": {"j-0": PENDING}, "filter_reasons": {"j": ["TooManyPods"]}},
    foreign_pods=[foreign(f"ds-{i}", "n1", cpu_millicores=100) for i in range(3)],
)
scenario(
    "foreign-07-releasing-capacity-pipelines",
    "foreign-pods",
    "A foreign pod that is terminating still holds n1's GPUs: the job is pipelined there, not bound.",
    [node("n1")],
    [job("j", [task("j-0", gpus=8)])],
    {"tasks": {"j-0": on("n1", "pipelined")}},
    foreign_pods=[foreign("other-0", "n1", gpus=8, releasing=True)],
)

# ---------------------------------------------------------------- extended resources
scenario(
    "extended-01-mig-profile",
    "extended-resources",
    "A pod asking for one nvidia.com/mig-3g.40gb lands on the node that advertises that profile, not on the "
    "node with only 1g.10gb instances.",
    [
        node("n1", gpus=0, extended={"nvidia.com/mig-1g.10gb": 7}),
        node("n2", gpus=0, extended={"nvidia.com/mig-3g.40gb": 2}),
    ],
    [job("j", [task("j-0", extended={"nvidia.com/mig-3g.40gb": 1})])],
    {"tasks": {"j-0": on("n2")}},
    tags=["extended-resources", "mig"],
)
scenario(
    "extended-02-mig-not-enough",
    "extended-resources",
    "Eight 1g.10gb instances asked, seven advertised: pending, with the extended-resource reason.",
    [node("n1", gpus=0, extended={"nvidia.com/mig-1g.10gb": 7})],
    [job("j", [task("j-0", extended={"nvidia.com/mig-1g.10gb": 8})])],
    {"tasks": {"j-0": PENDING}, "filter_reasons": {"j": ["InsufficientExtendedResource"]}},
    tags=["extended-resources", "mig"],
)
scenario(
    "extended-03-mig-charged-as-kai",
    "extended-resources",
    "KAI charges a MIG instance as its compute slices: 3g.40gb counts 3 GPUs against a queue limited to 2 "
    "(pending), two 1g.10gb count 2 (bound).",
    [node("n1", gpus=0, extended={"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-3g.40gb": 1})],
    [
        job("big", [task("big-0", extended={"nvidia.com/mig-3g.40gb": 1})]),
        job("small", [task("small-0", extended={"nvidia.com/mig-1g.10gb": 2})]),
    ],
    {"tasks": {"big-0": PENDING, "small-0": on("n1")}},
    queues=[queue("q", quota=2, limit=2)],
    tags=["extended-resources", "mig", "queue-limit"],
)
scenario(
    "extended-04-amd-gpu-node",
    "extended-resources",
    "amd.com/gpu goes to the AMD node, never to the NVIDIA one.",
    [node("n1"), node("n2", gpus=0, extended={"amd.com/gpu": 8})],
    [job("j", [task("j-0", extended={"amd.com/gpu": 2})])],
    {"tasks": {"j-0": on("n2")}},
    tags=["extended-resources", "amd"],
)
scenario(
    "extended-05-amd-gpu-quota",
    "extended-resources",
    "amd.com/gpu counts as whole GPUs for quota: 2 AMD GPUs exceed a queue limit of 1 GPU.",
    [node("n1", gpus=0, extended={"amd.com/gpu": 8})],
    [job("j", [task("j-0", extended={"amd.com/gpu": 2})])],
    {"tasks": {"j-0": PENDING}},
    queues=[queue("q", quota=1, limit=1)],
    tags=["extended-resources", "amd", "queue-limit"],
)
scenario(
    "extended-06-rdma-beats-binpack",
    "extended-resources",
    "A 4-GPU pod that needs rdma/ib goes to n2 (the only node with RDMA) although bin-packing prefers the "
    "busier n1.",
    [node("n1"), node("n2", extended={"rdma/ib": 1})],
    [
        job("busy", [task("busy-0", gpus=4, status="running", node="n1")]),
        job("j", [task("j-0", gpus=4, extended={"rdma/ib": 1})]),
    ],
    {"tasks": {"j-0": on("n2")}},
)
scenario(
    "extended-07-hugepages",
    "extended-resources",
    "2 GiB of hugepages-2Mi asked on a node with 1 GiB: pending.",
    [node("n1", gpus=0, extended={"hugepages-2Mi": 1 << 30})],
    [job("j", [task("j-0", extended={"hugepages-2Mi": 2 << 30})])],
    {"tasks": {"j-0": PENDING}, "filter_reasons": {"j": ["InsufficientExtendedResource"]}},
)
scenario(
    "extended-08-held-by-running-pod",
    "extended-resources",
    "A running pod holds both rdma/ib devices of the node: the next pod asking one waits.",
    [node("n1", extended={"rdma/ib": 2})],
    [
        job("r", [task("r-0", gpus=1, status="running", node="n1", extended={"rdma/ib": 2})]),
        job("j", [task("j-0", gpus=1, extended={"rdma/ib": 1})]),
    ],
    {"tasks": {"j-0": PENDING}},
)
scenario(
    "extended-09-held-by-foreign-pod",
    "extended-resources",
    "A foreign pod holds all 4 AMD GPUs: our AMD pod waits.",
    [node("n1", gpus=0, extended={"amd.com/gpu": 4})],
    [job("j", [task("j-0", extended={"amd.com/gpu": 1})])],
    {"tasks": {"j-0": PENDING}},
    foreign_pods=[foreign("other-0", "n1", extended={"amd.com/gpu": 4})],
)
scenario(
    "extended-10-missing-resource",
    "extended-resources",
    "No node advertises the FPGA resource: pending with ExtendedResourceMissing, never bound.",
    [node("n1"), node("n2")],
    [job("j", [task("j-0", extended={"xilinx.com/fpga": 1})])],
    {"tasks": {"j-0": PENDING}, "filter_reasons": {"j": ["ExtendedResourceMissing"]}},
)

# ---------------------------------------------------------------- host ports
scenario(
    "ports-01-conflict-moves-pod",
    "host-ports",
    "n1 already runs a pod on host port 8080: the new 8080 pod goes to n2 although bin-packing prefers n1.",
    [node("n1", gpus=0), node("n2", gpus=0)],
    [
        job("r", [task("r-0", cpu=8000, status="running", node="n1", host_ports=[{"port": 8080}])]),
        job("j", [task("j-0", host_ports=[{"port": 8080}])]),
    ],
    {"tasks": {"j-0": on("n2")}},
)
scenario(
    "ports-02-foreign-holds-port",
    "host-ports",
    "A foreign exporter binds 9400 on the only node: a pod wanting 9400 waits with reason HostPorts.",
    [node("n1", gpus=0)],
    [job("j", [task("j-0", host_ports=[{"port": 9400}])])],
    {"tasks": {"j-0": PENDING}, "filter_reasons": {"j": ["HostPorts"]}},
    foreign_pods=[foreign("dcgm", "n1", host_ports=[{"port": 9400}])],
)
scenario(
    "ports-03-other-protocol",
    "host-ports",
    "53/UDP held by a foreign DNS pod does not block 53/TCP.",
    [node("n1", gpus=0)],
    [job("j", [task("j-0", host_ports=[{"port": 53, "protocol": "TCP"}])])],
    {"tasks": {"j-0": on("n1")}},
    foreign_pods=[foreign("dns", "n1", host_ports=[{"port": 53, "protocol": "UDP"}])],
)
scenario(
    "ports-04-distinct-host-ips",
    "host-ports",
    "8080 bound on 10.0.0.1 leaves 8080 on 10.0.0.2 free, but not 8080 on every address.",
    [node("n1", gpus=0)],
    [
        job("ip2", [task("ip2-0", host_ports=[{"port": 8080, "host_ip": "10.0.0.2"}])]),
        job("any", [task("any-0", host_ports=[{"port": 8080}])]),
    ],
    {"tasks": {"ip2-0": on("n1"), "any-0": PENDING}},
    foreign_pods=[foreign("web", "n1", host_ports=[{"port": 8080, "host_ip": "10.0.0.1"}])],
)
scenario(
    "ports-05-gang-one-per-node",
    "host-ports",
    "A gang of two pods both binding 8080 spreads one per node.",
    [node("n1", gpus=0), node("n2", gpus=0)],
    [job("g", [task("g-0", host_ports=[{"port": 8080}]), task("g-1", host_ports=[{"port": 8080}])])],
    {
        "task_sets": [
            {"tasks": ["g-0", "g-1"], "status_counts": {"allocated": 2}, "node_counts": {"n1": 1, "n2": 1}}
        ]
    },
    tags=["host-ports", "gang"],
)
scenario(
    "ports-06-gang-too-big",
    "host-ports",
    "A gang of three 8080 pods on two nodes cannot start as a whole: nothing is bound.",
    [node("n1", gpus=0), node("n2", gpus=0)],
    [job("g", [task(f"g-{i}", host_ports=[{"port": 8080}]) for i in range(3)])],
    {"jobs": {"g": PENDING}},
    tags=["host-ports", "gang"],
)
scenario(
    "ports-07-releasing-holder-pipelines",
    "host-ports",
    "The pod holding 8080 is being evicted: the new 8080 pod is pipelined behind it, not bound.",
    [node("n1", gpus=0)],
    [
        job("r", [task("r-0", status="releasing", node="n1", host_ports=[{"port": 8080}])], deleting=True),
        job("j", [task("j-0", host_ports=[{"port": 8080}])]),
    ],
    {"tasks": {"j-0": on("n1", "pipelined")}},
)

# ---------------------------------------------------------------- inter-pod affinity
scenario(
    "affinity-01-same-node",
    "pod-affinity",
    "Required affinity to app=db by hostname: the pod joins the db pod on n2.",
    [node("n1", gpus=0, labels=host("n1")), node("n2", gpus=0, labels=host("n2"))],
    [
        job("busy", [task("busy-0", cpu=8000, status="running", node="n1")]),
        job("db", [task("db-0", status="running", node="n2", labels={"app": "db"})]),
        job("j", [task("j-0", pod_affinity=[term(app="db")])]),
    ],
    {"tasks": {"j-0": on("n2")}},
)
scenario(
    "affinity-02-same-zone",
    "pod-affinity",
    "Affinity to app=db by zone: n1 (zone a, holds db) is full, so the pod goes to n2 in zone a, not n3 in b.",
    [
        node("n1", gpus=0, cpu=2000, labels=host("n1", zone="a")),
        node("n2", gpus=0, labels=host("n2", zone="a")),
        node("n3", gpus=0, labels=host("n3", zone="b")),
    ],
    [
        job("db", [task("db-0", cpu=2000, status="running", node="n1", labels={"app": "db"})]),
        job("busy", [task("busy-0", cpu=32000, status="running", node="n3")]),
        job("j", [task("j-0", pod_affinity=[term("zone", app="db")])]),
    ],
    {"tasks": {"j-0": on("n2")}},
)
scenario(
    "affinity-03-nothing-to-join",
    "pod-affinity",
    "Affinity to app=db with no db pod anywhere (and the pod is not a db itself): pending, InterPodAffinity.",
    [node("n1", gpus=0, labels=host("n1"))],
    [job("j", [task("j-0", pod_affinity=[term(app="db")])])],
    {"tasks": {"j-0": PENDING}, "filter_reasons": {"j": ["InterPodAffinity"]}},
)
scenario(
    "affinity-04-first-of-its-group",
    "pod-affinity",
    "Affinity to its own label with no such pod yet: the first pod of the group may go anywhere (Kubernetes "
    "rule).",
    [node("n1", gpus=0, labels=host("n1"))],
    [job("j", [task("j-0", labels={"app": "web"}, pod_affinity=[term(app="web")])])],
    {"tasks": {"j-0": on("n1")}},
)
scenario(
    "affinity-05-gang-same-zone",
    "pod-affinity",
    "A gang with zone self-affinity: the first pod lands on n1 (zone a); the second follows to n2 in zone a "
    "although bin-packing alone would pick n3 (zone b).",
    [
        node("n1", labels=host("n1", zone="a")),
        node("n2", gpus=16, labels=host("n2", zone="a")),
        node("n3", labels=host("n3", zone="b")),
    ],
    [
        job(
            "g",
            [
                task("g-0", gpus=8, labels={"app": "g"}, pod_affinity=[term("zone", app="g")]),
                task("g-1", gpus=8, labels={"app": "g"}, pod_affinity=[term("zone", app="g")]),
            ],
        )
    ],
    {"tasks": {"g-0": on("n1"), "g-1": on("n2")}},
    tags=["pod-affinity", "gang"],
)
scenario(
    "affinity-06-anti-hostname",
    "pod-anti-affinity",
    "Anti-affinity to app=web by hostname: a web pod runs on the busier n1, so the new one goes to n2.",
    [node("n1", gpus=0, labels=host("n1")), node("n2", gpus=0, labels=host("n2"))],
    [
        job("w", [task("w-0", cpu=8000, status="running", node="n1", labels={"app": "web"})]),
        job("j", [task("j-0", labels={"app": "web"}, pod_anti_affinity=[term(app="web")])]),
    ],
    {"tasks": {"j-0": on("n2")}},
)
scenario(
    "affinity-07-anti-gang-too-big",
    "pod-anti-affinity",
    "Three web pods with hostname anti-affinity among themselves, two nodes: the gang cannot start.",
    [node("n1", gpus=0, labels=host("n1")), node("n2", gpus=0, labels=host("n2"))],
    [
        job(
            "g",
            [task(f"g-{i}", labels={"app": "web"}, pod_anti_affinity=[term(app="web")]) for i in range(3)],
        )
    ],
    {"jobs": {"g": PENDING}, "filter_reasons": {"g": ["InterPodAntiAffinity"]}},
    tags=["pod-anti-affinity", "gang"],
)
scenario(
    "affinity-08-anti-gang-spreads",
    "pod-anti-affinity",
    "Two gang members with hostname anti-affinity land on different nodes.",
    [node("n1", gpus=0, labels=host("n1")), node("n2", gpus=0, labels=host("n2"))],
    [
        job(
            "g",
            [task(f"g-{i}", labels={"app": "web"}, pod_anti_affinity=[term(app="web")]) for i in range(2)],
        )
    ],
    {
        "task_sets": [
            {"tasks": ["g-0", "g-1"], "status_counts": {"allocated": 2}, "node_counts": {"n1": 1, "n2": 1}}
        ]
    },
    tags=["pod-anti-affinity", "gang"],
)
scenario(
    "affinity-09-existing-anti-affinity",
    "pod-anti-affinity",
    "A running pod on n1 refuses app=batch next to it: a plain batch pod goes to n2 (symmetry).",
    [node("n1", gpus=0, labels=host("n1")), node("n2", gpus=0, labels=host("n2"))],
    [
        job(
            "lat",
            [
                task(
                    "lat-0",
                    cpu=8000,
                    status="running",
                    node="n1",
                    labels={"app": "latency"},
                    pod_anti_affinity=[term(app="batch")],
                )
            ],
        ),
        job("j", [task("j-0", labels={"app": "batch"})]),
    ],
    {"tasks": {"j-0": on("n2")}},
)
scenario(
    "affinity-10-existing-anti-affinity-blocks",
    "pod-anti-affinity",
    "The only node runs a pod that refuses app=batch: the batch pod waits with ExistingPodsAntiAffinity.",
    [node("n1", gpus=0, labels=host("n1"))],
    [
        job(
            "lat",
            [
                task(
                    "lat-0",
                    status="running",
                    node="n1",
                    labels={"app": "latency"},
                    pod_anti_affinity=[term(app="batch")],
                )
            ],
        ),
        job("j", [task("j-0", labels={"app": "batch"})]),
    ],
    {"tasks": {"j-0": PENDING}, "filter_reasons": {"j": ["ExistingPodsAntiAffinity"]}},
)
scenario(
    "affinity-11-anti-foreign",
    "pod-anti-affinity",
    "Anti-affinity to a noisy foreign pod on n1: the pod goes to n2.",
    [node("n1", gpus=0, labels=host("n1")), node("n2", gpus=0, labels=host("n2"))],
    [job("j", [task("j-0", pod_anti_affinity=[term(app="noisy")])])],
    {"tasks": {"j-0": on("n2")}},
    foreign_pods=[foreign("noisy-0", "n1", cpu_millicores=8000, labels={"app": "noisy"})],
)
scenario(
    "affinity-12-foreign-target",
    "pod-affinity",
    "Affinity to a cache pod of another scheduler on n2: the pod joins it.",
    [node("n1", gpus=0, labels=host("n1")), node("n2", gpus=0, labels=host("n2"))],
    [
        job("busy", [task("busy-0", cpu=8000, status="running", node="n1")]),
        job("j", [task("j-0", pod_affinity=[term(app="cache")])]),
    ],
    {"tasks": {"j-0": on("n2")}},
    foreign_pods=[foreign("cache-0", "n2", labels={"app": "cache"})],
)
scenario(
    "affinity-13-anti-zone",
    "pod-anti-affinity",
    "Zone anti-affinity to app=web: zone a holds one, so the pod goes to zone b (n3), not n2.",
    [
        node("n1", gpus=0, labels=host("n1", zone="a")),
        node("n2", gpus=0, labels=host("n2", zone="a")),
        node("n3", gpus=0, labels=host("n3", zone="b")),
    ],
    [
        job("w", [task("w-0", status="running", node="n1", labels={"app": "web"})]),
        job("busy", [task("busy-0", cpu=8000, status="running", node="n2")]),
        job("j", [task("j-0", pod_anti_affinity=[term("zone", app="web")])]),
    ],
    {"tasks": {"j-0": on("n3")}},
)
scenario(
    "affinity-14-other-namespace",
    "pod-anti-affinity",
    "Anti-affinity to app=web in namespace other does not see the web pod of namespace default: n1 is fine.",
    [node("n1", gpus=0, labels=host("n1")), node("n2", gpus=0, labels=host("n2"))],
    [
        job("w", [task("w-0", cpu=8000, status="running", node="n1", labels={"app": "web"})]),
        job("j", [task("j-0", pod_anti_affinity=[term(app="web") | {"namespaces": ["other"]}])]),
    ],
    {"tasks": {"j-0": on("n1")}},
)
scenario(
    "affinity-15-releasing-holder",
    "pod-anti-affinity",
    "The conflicting web pod is being evicted: the new pod is pipelined behind it on the only node.",
    [node("n1", gpus=0, labels=host("n1"))],
    [
        job("w", [task("w-0", status="releasing", node="n1", labels={"app": "web"})], deleting=True),
        job("j", [task("j-0", pod_anti_affinity=[term(app="web")])]),
    ],
    {"tasks": {"j-0": on("n1", "pipelined")}},
)

# ---------------------------------------------------------------- topology spread
ZONES = [node("n1", gpus=0, labels=host("n1", zone="a")), node("n2", gpus=0, labels=host("n2", zone="b"))]


def spread(max_skew: int = 1, key: str = "zone", **kw: Any) -> dict[str, Any]:
    return {"max_skew": max_skew, "topology_key": key, "label_selector": sel(app="web")} | kw


def web(name: str, status: str = "running", node: str | None = None, **kw: Any) -> dict[str, Any]:
    return task(name, status=status, node=node, labels={"app": "web"}, **kw)


scenario(
    "spread-01-skew",
    "topology-spread",
    "Zone a has 2 web pods, zone b 1: maxSkew 1 sends the next one to zone b.",
    ZONES,
    [
        job("w", [web("w-0", node="n1"), web("w-1", node="n1"), web("w-2", node="n2")]),
        job("j", [web("j-0", status="pending", topology_spread=[spread()])]),
    ],
    {"tasks": {"j-0": on("n2")}},
)
scenario(
    "spread-02-min-domains",
    "topology-spread",
    "minDomains 3 with 2 zones counts the minimum as 0: with one web pod per zone no placement keeps skew 1.",
    ZONES,
    [
        job("w", [web("w-0", node="n1"), web("w-1", node="n2")]),
        job("j", [web("j-0", status="pending", topology_spread=[spread(min_domains=3)])]),
    ],
    {"tasks": {"j-0": PENDING}, "filter_reasons": {"j": ["PodTopologySpread"]}},
)
scenario(
    "spread-03-missing-label",
    "topology-spread",
    "The only node has no zone label: a DoNotSchedule zone constraint cannot be met there.",
    [node("n1", gpus=0, labels=host("n1"))],
    [job("j", [web("j-0", status="pending", topology_spread=[spread()])])],
    {"tasks": {"j-0": PENDING}, "filter_reasons": {"j": ["PodTopologySpreadMissingLabel"]}},
)
scenario(
    "spread-04-node-affinity-policy",
    "topology-spread",
    "Zone c (pool cpu, no web pods) is outside the pods' nodeSelector. Honor (default) leaves it out of the "
    "count, so minimum 1 and the pod fits in zone a or b; Ignore counts it, minimum 0, and nothing fits.",
    [*ZONES[0:1], node("n2", gpus=0, labels=host("n2", zone="b", pool="gpu")), node("n3", gpus=0, labels=host("n3", zone="c", pool="cpu"))],
    [
        job("w", [web("w-0", node="n1"), web("w-1", node="n2")]),
        job(
            "honor",
            [web("honor-0", status="pending", node_selector={"pool": "gpu"}, topology_spread=[spread()])],
        ),
        job(
            "ignore",
            [
                web(
                    "ignore-0",
                    status="pending",
                    node_selector={"pool": "gpu"},
                    topology_spread=[spread(node_affinity_policy="Ignore")],
                )
            ],
        ),
    ],
    {"tasks": {"honor-0": on("n2"), "ignore-0": PENDING}},
)
scenario(
    "spread-05-node-taints-policy",
    "topology-spread",
    "Zone c's node is tainted. Ignore (default) counts its empty zone, minimum 0: no fit. Honor leaves it "
    "out: minimum 1 and the pod fits.",
    [*ZONES, node("n3", gpus=0, labels=host("n3", zone="c"), taints=[{"key": "dedicated", "effect": "NoSchedule"}])],
    [
        job("w", [web("w-0", node="n1"), web("w-1", node="n2")]),
        job(
            "honor", [web("honor-0", status="pending", topology_spread=[spread(node_taints_policy="Honor")])]
        ),
        job("ignore", [web("ignore-0", status="pending", topology_spread=[spread()])]),
    ],
    {"tasks": {"honor-0": {"status": "allocated", "node_any_of": ["n1", "n2"]}, "ignore-0": PENDING}},
)
scenario(
    "spread-06-gang-evenly",
    "topology-spread",
    "Four gang members with zone skew 1 split 2 and 2, although bin-packing would stack them on one node.",
    [node("n1", gpus=16, labels=host("n1", zone="a")), node("n2", gpus=16, labels=host("n2", zone="b"))],
    [job("g", [web(f"g-{i}", status="pending", gpus=2, topology_spread=[spread()]) for i in range(4)])],
    {
        "task_sets": [
            {
                "tasks": [f"g-{i}" for i in range(4)],
                "status_counts": {"allocated": 4},
                "node_counts": {"n1": 2, "n2": 2},
            }
        ]
    },
    tags=["topology-spread", "gang"],
)
scenario(
    "spread-07-schedule-anyway-scores",
    "topology-spread",
    "ScheduleAnyway is a preference: bin-packing likes the busy n1, but zone a already has web pods, so the "
    "pod goes to n2.",
    ZONES,
    [
        job("w", [web("w-0", cpu=8000, node="n1")]),
        job(
            "j", [web("j-0", status="pending", topology_spread=[spread(when_unsatisfiable="ScheduleAnyway")])]
        ),
    ],
    {"tasks": {"j-0": on("n2")}},
    tags=["topology-spread", "scores"],
)
scenario(
    "spread-08-counts-foreign",
    "topology-spread",
    "Two foreign web pods in zone a count for the spread: the pod goes to zone b.",
    ZONES,
    [job("j", [web("j-0", status="pending", topology_spread=[spread()])])],
    {"tasks": {"j-0": on("n2")}},
    foreign_pods=[foreign("fw-0", "n1", labels={"app": "web"}), foreign("fw-1", "n1", labels={"app": "web"})],
)
scenario(
    "spread-09-releasing-not-counted",
    "topology-spread",
    "Zone a's two web pods are being deleted and no longer count: the pod may join zone a (n1, busier).",
    ZONES,
    [
        job(
            "old",
            [
                web("old-0", status="releasing", node="n1", cpu=8000),
                web("old-1", status="releasing", node="n1", cpu=8000),
            ],
            deleting=True,
        ),
        job("w", [web("w-0", node="n2")]),
        job("j", [web("j-0", status="pending", topology_spread=[spread()])]),
    ],
    {"tasks": {"j-0": on("n1")}},
)

# ---------------------------------------------------------------- volumes
ZONE_A = [{"match_expressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
scenario(
    "volumes-01-zonal-disk",
    "volumes",
    "The pod's bound volume lives in zone a: it goes to n1 although bin-packing prefers n2.",
    ZONES,
    [
        job("busy", [task("busy-0", cpu=8000, status="running", node="n2")]),
        job("j", [task("j-0", volumes=[{"claim": "data", "node_affinity": ZONE_A}])]),
    ],
    {"tasks": {"j-0": on("n1")}},
)
scenario(
    "volumes-02-zone-missing",
    "volumes",
    "The volume's zone has no node: pending, VolumeNodeAffinity.",
    [ZONES[1]],
    [job("j", [task("j-0", volumes=[{"claim": "data", "node_affinity": ZONE_A}])])],
    {"tasks": {"j-0": PENDING}, "filter_reasons": {"j": ["VolumeNodeAffinity"]}},
)
scenario(
    "volumes-03-wait-for-first-consumer",
    "volumes",
    "An unbound WaitForFirstConsumer claim with no available volume and a class that cannot provision: "
    "pending, VolumeBindConflict (kube-scheduler's VolumeBinding filter).",
    ZONES,
    [
        job(
            "j",
            [
                task(
                    "j-0",
                    volumes=[{"claim": "scratch", "bound": False, "binding_mode": "WaitForFirstConsumer"}],
                )
            ],
        )
    ],
    {"tasks": {"j-0": PENDING}, "filter_reasons": {"j": ["VolumeBindConflict"]}},
)
scenario(
    "volumes-04-unbound-immediate",
    "volumes",
    "An Immediate claim not bound yet: pending until it is.",
    ZONES,
    [job("j", [task("j-0", volumes=[{"claim": "data", "bound": False}])])],
    {"tasks": {"j-0": PENDING}, "filter_reasons": {"j": ["VolumeUnboundImmediate"]}},
)

WFFC = {"claim": "scratch", "bound": False, "binding_mode": "WaitForFirstConsumer"}
scenario(
    "volumes-05-wait-for-first-consumer-local-volume",
    "volumes",
    "An unbound WaitForFirstConsumer claim whose only available volume lives in zone a: the pod goes to "
    "n1, where the claim can bind, although bin-packing prefers n2.",
    ZONES,
    [
        job("busy", [task("busy-0", cpu=8000, status="running", node="n2")]),
        job("j", [task("j-0", volumes=[WFFC | {"candidates": [{"name": "pv-a", "node_affinity": ZONE_A}]}])]),
    ],
    {"tasks": {"j-0": on("n1")}},
)
scenario(
    "volumes-06-wait-for-first-consumer-allowed-topologies",
    "volumes",
    "An unbound WaitForFirstConsumer claim with no volume: its class provisions only in zone a "
    "(allowedTopologies), so the pod goes to n1.",
    ZONES,
    [
        job("busy", [task("busy-0", cpu=8000, status="running", node="n2")]),
        job("j", [task("j-0", volumes=[WFFC | {"provision": True, "allowed_topologies": ZONE_A}])]),
    ],
    {"tasks": {"j-0": on("n1")}},
)
HOST_N1 = [{"match_expressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]
HOST_N2 = [{"match_expressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]
LOCAL_PVS = [{"name": "pv-n1", "node_affinity": HOST_N1}, {"name": "pv-n2", "node_affinity": HOST_N2}]
scenario(
    "volumes-08-two-claims-one-local-volume-each",
    "volumes",
    "Two pods of one cycle (a StatefulSet's replicas), each with a WaitForFirstConsumer claim that could "
    "bind to either local volume (one on n1, one on n2): they take one volume each, so one pod goes to n2 "
    "although bin-packing prefers n1 for both.",
    ZONES,
    [
        job("busy", [task("busy-0", cpu=8000, status="running", node="n1")]),
        job("db-0", [task("db-0-0", volumes=[WFFC | {"claim": "data-0", "candidates": LOCAL_PVS}])]),
        job("db-1", [task("db-1-0", volumes=[WFFC | {"claim": "data-1", "candidates": LOCAL_PVS}])]),
    ],
    {"task_sets": [{"tasks": ["db-0-0", "db-1-0"], "status_counts": {"allocated": 2}, "node_counts": {"n1": 1, "n2": 1}}]},
)
scenario(
    "volumes-07-volume-zone-label",
    "volumes",
    "The bound volume carries topology.kubernetes.io/zone=b__c (VolumeZone): the pod goes to z2, whose "
    "zone is one of them, although bin-packing prefers z1.",
    [
        node("z1", gpus=0, labels={"topology.kubernetes.io/zone": "a"}),
        node("z2", gpus=0, labels={"topology.kubernetes.io/zone": "b"}),
    ],
    [
        job("busy", [task("busy-0", cpu=8000, status="running", node="z1")]),
        job("j", [task("j-0", volumes=[{"claim": "data", "zone_labels": {"topology.kubernetes.io/zone": "b__c"}}])]),
    ],
    {"tasks": {"j-0": on("z2")}},
)

# ---------------------------------------------------------------- scheduling gates
scenario(
    "gates-01-gated-no-decision",
    "scheduling-gates",
    "A gated pod is not pending yet: no bind and no Unschedulable decision.",
    [node("n1")],
    [job("j", [task("j-0", gpus=1, scheduling_gates=["example.com/quota"])])],
    {"tasks": {"j-0": PENDING}, "no_decision": ["j"]},
)
scenario(
    "gates-02-gated-frees-capacity",
    "scheduling-gates",
    "The older job's pod is gated: the younger job takes the GPUs.",
    [node("n1")],
    [
        job("a", [task("a-0", gpus=8, scheduling_gates=["example.com/quota"])], age_minutes=10),
        job("b", [task("b-0", gpus=8)]),
    ],
    {"tasks": {"a-0": PENDING, "b-0": on("n1")}},
)
scenario(
    "gates-03-gang-member-gated",
    "scheduling-gates",
    "One member of a 2-pod gang is gated: the gang waits as a whole (not ready), nothing is bound.",
    [node("n1")],
    [job("g", [task("g-0", gpus=1), task("g-1", gpus=1, scheduling_gates=["x.io/g"])])],
    {"jobs": {"g": PENDING}},
    tags=["scheduling-gates", "gang"],
)

# ---------------------------------------------------------------- node state
scenario(
    "nodes-01-not-ready",
    "node-state",
    "n1 is NotReady: the pod goes to n2.",
    [node("n1", ready=False), node("n2")],
    [job("j", [task("j-0", gpus=1)])],
    {"tasks": {"j-0": on("n2")}},
)
scenario(
    "nodes-02-cordoned",
    "node-state",
    "n1 is cordoned (unschedulable): the pod goes to n2.",
    [node("n1", unschedulable=True), node("n2")],
    [job("j", [task("j-0", gpus=1)])],
    {"tasks": {"j-0": on("n2")}},
)
scenario(
    "nodes-03-no-execute",
    "node-state",
    "A NoExecute taint keeps the plain pod off the busier n1; the pod tolerating it may use n1.",
    [node("n1", taints=[{"key": "maint", "effect": "NoExecute"}]), node("n2")],
    [
        job(
            "busy",
            [
                task(
                    "busy-0",
                    gpus=4,
                    status="running",
                    node="n1",
                    tolerations=[{"key": "maint", "operator": "Exists"}],
                )
            ],
        ),
        job("plain", [task("plain-0", gpus=1)]),
        job("tol", [task("tol-0", gpus=1, tolerations=[{"key": "maint", "operator": "Exists"}])]),
    ],
    {"tasks": {"plain-0": on("n2"), "tol-0": on("n1")}},
)
scenario(
    "nodes-04-prefer-no-schedule",
    "node-state",
    "PreferNoSchedule is not a filter: bin-packing still picks the busier n1.",
    [node("n1", taints=[{"key": "soft", "effect": "PreferNoSchedule"}]), node("n2")],
    [
        job(
            "busy",
            [
                task(
                    "busy-0",
                    gpus=4,
                    status="running",
                    node="n1",
                    tolerations=[{"key": "soft", "operator": "Exists"}],
                )
            ],
        ),
        job("j", [task("j-0", gpus=1)]),
    ],
    {"tasks": {"j-0": on("n1")}},
)

# ---------------------------------------------------------------- scores
scenario(
    "scores-01-preferred-node-affinity",
    "scores",
    "Preferred node affinity (pool fast) outweighs bin-packing, which prefers the busier n1.",
    [node("n1", labels=host("n1", pool="slow")), node("n2", labels=host("n2", pool="fast"))],
    [
        job("busy", [task("busy-0", gpus=4, status="running", node="n1")]),
        job(
            "j",
            [
                task(
                    "j-0",
                    gpus=1,
                    preferred_node_affinity=[
                        {
                            "weight": 50,
                            "match_expressions": [{"key": "pool", "operator": "In", "values": ["fast"]}],
                        }
                    ],
                )
            ],
        ),
    ],
    {"tasks": {"j-0": on("n2")}},
)
scenario(
    "scores-02-preferred-pod-affinity",
    "scores",
    "Preferred affinity to the cache pod on n2 outweighs bin-packing.",
    [node("n1", labels=host("n1")), node("n2", labels=host("n2"))],
    [
        job("busy", [task("busy-0", gpus=4, status="running", node="n1")]),
        job("cache", [task("cache-0", status="running", node="n2", labels={"app": "cache"})]),
        job("j", [task("j-0", gpus=1, pod_affinity=[term(app="cache") | {"weight": 100}])]),
    ],
    {"tasks": {"j-0": on("n2")}},
)
scenario(
    "scores-03-preferred-anti-affinity",
    "scores",
    "Preferred anti-affinity to the web pod on the busier n1 sends the pod to n2.",
    [node("n1", labels=host("n1")), node("n2", labels=host("n2"))],
    [
        job("w", [task("w-0", gpus=4, status="running", node="n1", labels={"app": "web"})]),
        job("j", [task("j-0", gpus=1, pod_anti_affinity=[term(app="web") | {"weight": 100}])]),
    ],
    {"tasks": {"j-0": on("n2")}},
)
scenario(
    "scores-04-idle-beats-preference",
    "scores",
    "A preference never trades idle capacity for capacity still held by a releasing pod: the pod is bound on "
    "idle n1 rather than pipelined on preferred n2.",
    [node("n1", gpus=1, labels=host("n1", pool="slow")), node("n2", gpus=1, labels=host("n2", pool="fast"))],
    [
        job("old", [task("old-0", gpus=1, status="releasing", node="n2")], deleting=True),
        job(
            "j",
            [
                task(
                    "j-0",
                    gpus=1,
                    preferred_node_affinity=[
                        {
                            "weight": 100,
                            "match_expressions": [{"key": "pool", "operator": "In", "values": ["fast"]}],
                        }
                    ],
                )
            ],
        ),
    ],
    {"tasks": {"j-0": on("n1")}},
)

# ---------------------------------------------------------------- with reclaim, preempt, consolidation
scenario(
    "evict-01-reclaim-frees-anti-affinity",
    "with-eviction",
    "Queue b's pod refuses app=web next to it; the only node runs queue a's web pod above a's share. Reclaim "
    "evicts it, and b's pod is pipelined there.",
    [node("n1", labels=host("n1"))],
    [
        job("web", [task("web-0", gpus=4, status="running", node="n1", labels={"app": "web"})], queue="a"),
        job("b1", [task("b1-0", gpus=4, pod_anti_affinity=[term(app="web")])], queue="b"),
    ],
    {"tasks": {"web-0": {"status": "releasing", "node": "n1"}, "b1-0": on("n1", "pipelined")}},
    phase="reclaim",
    queues=[queue("a", quota=0), queue("b", quota=4)],
    tags=["with-eviction", "reclaim"],
)
scenario(
    "evict-02-preempt-frees-port",
    "with-eviction",
    "A high-priority pod needs host port 8080, held on the only node by a low-priority pod of the same "
    "queue: preempt evicts it and the pod is pipelined there.",
    [node("n1", gpus=0)],
    [
        job("low", [task("low-0", status="running", node="n1", host_ports=[{"port": 8080}])], priority=50),
        job("high", [task("high-0", host_ports=[{"port": 8080}])], priority=100, preemptible=False),
    ],
    {"tasks": {"low-0": {"status": "releasing", "node": "n1"}, "high-0": on("n1", "pipelined")}},
    phase="preempt",
    tags=["with-eviction", "preempt"],
)
scenario(
    "evict-03-consolidation-control",
    "with-eviction",
    "Control for the next two: two 4-GPU pods on two 8-GPU nodes and an 8-GPU job; consolidation moves one "
    "pod so the job fits.",
    [node("n1", labels=host("n1")), node("n2", labels=host("n2"))],
    [
        job("r1", [task("r1-0", gpus=4, status="running", node="n1", labels={"app": "web"})]),
        job("r2", [task("r2-0", gpus=4, status="running", node="n2", labels={"app": "web"})]),
        job("p", [task("p-0", gpus=8)]),
    ],
    {"tasks": {"p-0": {"status": "pipelined", "node_any_of": ["n1", "n2"]}}},
    phase="consolidation",
    tags=["with-eviction", "consolidation"],
)
scenario(
    "evict-04-consolidation-respects-anti-affinity",
    "with-eviction",
    "The same cluster, but the two pods refuse each other by hostname: no move is possible, nothing is "
    "evicted and the job waits.",
    [node("n1", labels=host("n1")), node("n2", labels=host("n2"))],
    [
        job(
            "r1",
            [
                task(
                    "r1-0",
                    gpus=4,
                    status="running",
                    node="n1",
                    labels={"app": "web"},
                    pod_anti_affinity=[term(app="web")],
                )
            ],
        ),
        job(
            "r2",
            [
                task(
                    "r2-0",
                    gpus=4,
                    status="running",
                    node="n2",
                    labels={"app": "web"},
                    pod_anti_affinity=[term(app="web")],
                )
            ],
        ),
        job("p", [task("p-0", gpus=8)]),
    ],
    {"tasks": {"p-0": PENDING, "r1-0": on("n1", "running"), "r2-0": on("n2", "running")}},
    phase="consolidation",
    tags=["with-eviction", "consolidation"],
)
scenario(
    "evict-05-consolidation-respects-ports",
    "with-eviction",
    "The same cluster, but both pods bind host port 8080: neither can move onto the other's node.",
    [node("n1"), node("n2")],
    [
        job("r1", [task("r1-0", gpus=4, status="running", node="n1", host_ports=[{"port": 8080}])]),
        job("r2", [task("r2-0", gpus=4, status="running", node="n2", host_ports=[{"port": 8080}])]),
        job("p", [task("p-0", gpus=8)]),
    ],
    {"tasks": {"p-0": PENDING, "r1-0": on("n1", "running"), "r2-0": on("n2", "running")}},
    phase="consolidation",
    tags=["with-eviction", "consolidation"],
)

# ---------------------------------------------------------------- topology (issue 15)
HOSTNAME = "kubernetes.io/hostname"
LEVELS = ["zone", "block", "rack", HOSTNAME]
TOPO = [{"name": "dc", "levels": LEVELS}]


def tnode(name: str, zone: str, block: str, rack: str, gpus: int = 8, **kw: Any) -> dict[str, Any]:
    """A node labelled with its place in the ``dc`` topology (zone > block > rack > hostname)."""
    return node(name, gpus=gpus, labels={"zone": zone, "block": block, "rack": rack, HOSTNAME: name}, **kw)


def gang(name: str, n: int, gpus: int = 8, **constraint: Any) -> dict[str, Any]:
    """A pending gang of n pods with a topology constraint on the ``dc`` topology (unless it names one)."""
    constraint.setdefault("topology", "dc")
    return job(name, [task(f"{name}-{i}", gpus=gpus) for i in range(n)], **constraint)


def busy(name: str, node_name: str, gpus: int = 8) -> dict[str, Any]:
    """A running, non-preemptible pod holding GPUs on a node (a filler for the scenario's free capacity)."""
    return job(name, [task(f"{name}-0", gpus=gpus, status="running", node=node_name)], priority=100)


def topology(name: str, intent: str, nodes: list[dict[str, Any]], jobs: list[dict[str, Any]],
             expect: dict[str, Any], **kw: Any) -> None:
    scenario(name, "topology", intent, nodes, jobs, expect, topologies=kw.pop("topologies", TOPO),
             tags=["topology", *kw.pop("tags", [])], **kw)


def nodes_of(job_name: str, n: int, counts: dict[str, int]) -> dict[str, Any]:
    """Every pod of the gang allocated, so many on each node."""
    return {"tasks": [f"{job_name}-{i}" for i in range(n)], "status_counts": {"allocated": n},
            "node_counts": counts}


# Two racks of two nodes in one block; n2 is full, so plain binpack would put a 2-node gang on n1 and n3.
_RACKS = [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r1"),
          tnode("n3", "z1", "b1", "r2"), tnode("n4", "z1", "b1", "r2")]
topology(
    "topo-01-required-rack-one-rack",
    "Rack r1 has one free node, r2 two: a 2-pod gang that requires one rack goes to r2, not across racks.",
    _RACKS,
    [busy("f", "n2"), gang("j", 2, required_topology_level="rack")],
    {"task_sets": [nodes_of("j", 2, {"n3": 1, "n4": 1})]},
)
topology(
    "topo-02-no-constraint-crosses-racks",
    "The same cluster without a constraint: binpack takes n1 then n3, across racks (the baseline of topo-01).",
    _RACKS,
    [busy("f", "n2"), gang("j", 2)],
    {"task_sets": [nodes_of("j", 2, {"n1": 1, "n3": 1})]},
)
topology(
    "topo-03-required-rack-least-free-first",
    "Rack r1 has 4 free nodes, r2 has 2: a 2-node gang takes r2, the smallest rack it fits, keeping r1 whole.",
    [tnode(f"n{i}", "z1", "b1", "r1") for i in range(1, 5)]
    + [tnode("n5", "z1", "b1", "r2"), tnode("n6", "z1", "b1", "r2")],
    [gang("j", 2, required_topology_level="rack")],
    {"task_sets": [nodes_of("j", 2, {"n5": 1, "n6": 1})]},
)
topology(
    "topo-04-required-rack-tie-by-name",
    "Two racks with the same free capacity: the gang takes the first by name (b1/r1), every run.",
    [tnode("n1", "z1", "b2", "r1"), tnode("n2", "z1", "b2", "r1"),
     tnode("n3", "z1", "b1", "r9"), tnode("n4", "z1", "b1", "r9")],
    [gang("j", 2, required_topology_level="rack")],
    {"task_sets": [nodes_of("j", 2, {"n3": 1, "n4": 1})]},
)
topology(
    "topo-05-required-rack-too-small-message",
    "Each rack has 6 free GPUs, the gang needs 8: it waits, and the message names the level and the "
    "largest free rack.",
    [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z2", "b2", "r2")],
    [busy("f1", "n1", 2), busy("f2", "n2", 2), gang("j", 2, gpus=4, required_topology_level="rack")],
    {"jobs": {"j": PENDING},
     "message_contains": {"j": "the largest free, zone=z1/block=b1/rack=r1, has 6 of the 8 GPUs needed"}},
)
topology(
    "topo-06-required-rack-wider-domain-named",
    "Block b1 has 12 free GPUs over two racks of 6: the gang of 8 requiring one rack waits, and the message "
    "says the block has room but the job requires one rack.",
    [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r2")],
    [busy("f1", "n1", 2), busy("f2", "n2", 2), gang("j", 2, gpus=4, required_topology_level="rack")],
    {"jobs": {"j": PENDING},
     "message_contains": {"j": "zone=z1/block=b1 has 12 GPUs free across its rack domains, but the job "
                               "requires one rack"}},
)
topology(
    "topo-07-required-rack-fragmented",
    "Rack r1 has 8 free GPUs, 4 on each node, but each pod needs 8 on one node: the gang waits and the "
    "message says the rack has the GPUs in total but not on nodes the pods fit.",
    [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r1")],
    [busy("f1", "n1", 4), busy("f2", "n2", 4), gang("j", 1, required_topology_level="rack")],
    {"jobs": {"j": PENDING},
     "message_contains": {"j": "1 rack domain(s) have the GPUs free in total but not on nodes the pods fit"}},
)
topology(
    "topo-08-required-block-spans-racks",
    "A 4-node gang requiring one block spans the two racks of block b2 (b1 has only 2 nodes).",
    [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r1"),
     tnode("n3", "z1", "b2", "r2"), tnode("n4", "z1", "b2", "r2"),
     tnode("n5", "z1", "b2", "r3"), tnode("n6", "z1", "b2", "r3")],
    [gang("j", 4, required_topology_level="block")],
    {"task_sets": [nodes_of("j", 4, {"n3": 1, "n4": 1, "n5": 1, "n6": 1})]},
)
topology(
    "topo-09-required-zone",
    "Zone z1 has one free node, z2 two: a 2-node gang requiring one zone goes to z2.",
    [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r1"),
     tnode("n3", "z2", "b2", "r2"), tnode("n4", "z2", "b3", "r3")],
    [busy("f", "n2"), gang("j", 2, required_topology_level="zone")],
    {"task_sets": [nodes_of("j", 2, {"n3": 1, "n4": 1})]},
)
topology(
    "topo-10-required-hostname",
    "A gang of two 4-GPU pods requiring one host: n1 and n2 have 4 free GPUs each (binpack alone would use "
    "them), n3 has 8 and n4 16; the gang lands on n3, the least free node that holds it whole.",
    [
        tnode("n1", "z1", "b1", "r1"),
        tnode("n2", "z1", "b1", "r1"),
        tnode("n3", "z1", "b1", "r1"),
        tnode("n4", "z1", "b1", "r1", gpus=16),
    ],
    [busy("f1", "n1", 4), busy("f2", "n2", 4), gang("j", 2, gpus=4, required_topology_level=HOSTNAME)],
    {"task_sets": [nodes_of("j", 2, {"n3": 2})]},
)
topology(
    "topo-11-required-unlabelled-nodes-excluded",
    "n0 has no topology labels and would win binpack by name: a gang requiring a rack goes to rack r1.",
    [node("n0"), tnode("n1", "z1", "b1", "r1")],
    [gang("j", 1, required_topology_level="rack")],
    {"task_sets": [nodes_of("j", 1, {"n1": 1})]},
)
topology(
    "topo-12-required-no-labelled-node",
    "No node carries the rack label: the gang waits and the message says so.",
    [node("n0"), node("n1")],
    [gang("j", 1, required_topology_level="rack")],
    {"jobs": {"j": PENDING}, "message_contains": {"j": "no node has the label(s) zone, block, rack"}},
)
topology(
    "topo-13-required-elastic-follows-placed-pods",
    "An elastic job has one pod running in rack r2: its next pod joins it in r2 although n1 (r1) would win "
    "binpack by name.",
    [tnode("n1", "z1", "b1", "r1"), tnode("n3", "z1", "b1", "r2")],
    [busy("f", "n1", 4),
     job("j", [task("j-0", gpus=4, status="running", node="n3"), task("j-1", gpus=4)], min_available=1,
         topology="dc", required_topology_level="rack")],
    {"tasks": {"j-1": on("n3")}},
)
topology(
    "topo-14-unknown-topology",
    "The job names a topology that does not exist: it waits with a message naming it and the known ones.",
    _RACKS,
    [gang("j", 1, topology="nope", required_topology_level="rack")],
    {"jobs": {"j": PENDING},
     "message_contains": {"j": "topology 'nope' of the job's topology constraint does not exist (known: dc)"}},
)
topology(
    "topo-15-unknown-level",
    "The required level is not a level of the topology: the job waits, the message lists the levels.",
    _RACKS,
    [gang("j", 1, required_topology_level="row")],
    {"jobs": {"j": PENDING},
     "message_contains": {"j": "required topology level 'row' is not a level of topology 'dc' (levels: "
                               "zone, block, rack, kubernetes.io/hostname)"}},
)
topology(
    "topo-16-preferred-rack-fits",
    "Preferred rack, and rack r2 has room: the gang lands in r2, as with a required rack.",
    _RACKS,
    [busy("f", "n2"), gang("j", 2, preferred_topology_level="rack")],
    {"task_sets": [nodes_of("j", 2, {"n3": 1, "n4": 1})]},
)
_BLOCKS = [tnode("n1", "z1", "b2", "r3"), tnode("n2", "z1", "b2", "r4"),
           tnode("n3", "z1", "b1", "r1"), tnode("n4", "z1", "b1", "r2")]
topology(
    "topo-17-preferred-rack-falls-back-to-block",
    "No rack has room for 2 nodes; block b1 has (r1 and r2), b2 has one free node: the gang prefers a rack, "
    "falls back to one block, and lands in b1, not n1 + n3 as binpack alone would.",
    _BLOCKS,
    [busy("f", "n2"), gang("j", 2, preferred_topology_level="rack")],
    {"task_sets": [nodes_of("j", 2, {"n3": 1, "n4": 1})]},
)
topology(
    "topo-18-preferred-rack-falls-back-anywhere",
    "One free node in each zone: no rack, block or zone has room, so a preferred-rack gang goes anywhere.",
    [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r1"),
     tnode("n3", "z2", "b2", "r2"), tnode("n4", "z2", "b2", "r2")],
    [busy("f1", "n2"), busy("f2", "n4"), gang("j", 2, preferred_topology_level="rack")],
    {"task_sets": [nodes_of("j", 2, {"n1": 1, "n3": 1})]},
)
topology(
    "topo-19-preferred-nothing-fits-usual-message",
    "A preferred-rack gang that fits nowhere at all waits with the usual gang message, not a topology one.",
    [tnode("n1", "z1", "b1", "r1")],
    [gang("j", 2, preferred_topology_level="rack")],
    {"jobs": {"j": PENDING},
     "message_contains": {"j": "Resources were found for 1 pods while 2 are required for gang scheduling"}},
)
topology(
    "topo-20-required-block-preferred-rack",
    "Required block, preferred rack: rack r2 of block b1 has room, so the gang stays in one rack.",
    _RACKS,
    [busy("f", "n2"), gang("j", 2, required_topology_level="block", preferred_topology_level="rack")],
    {"task_sets": [nodes_of("j", 2, {"n3": 1, "n4": 1})]},
)
topology(
    "topo-21-required-block-preferred-rack-falls-back",
    "Required block, preferred rack, no rack with room: the gang spans the racks of block b1 but never "
    "leaves it for b2, which has a free node too.",
    _BLOCKS,
    [busy("f", "n2"), gang("j", 2, required_topology_level="block", preferred_topology_level="rack")],
    {"task_sets": [nodes_of("j", 2, {"n3": 1, "n4": 1})]},
)
topology(
    "topo-22-preferred-wider-than-required",
    "A preferred level wider than the required one is a contradiction: the job waits and is told why.",
    _RACKS,
    [gang("j", 1, required_topology_level="rack", preferred_topology_level="zone")],
    {"jobs": {"j": PENDING},
     "message_contains": {"j": "preferred topology level 'zone' is wider than the required level 'rack'"}},
)
topology(
    "topo-23-two-gangs-keep-large-rack-whole",
    "Rack r1 has 2 free nodes, r2 one: the 1-node gang (older) takes r2, the smallest rack that fits, so the "
    "2-node gang still finds a whole rack in r1.",
    [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r1"), tnode("n3", "z1", "b1", "r2")],
    [gang("small", 1, required_topology_level="rack", age_minutes=10),
     gang("big", 2, required_topology_level="rack")],
    {"task_sets": [nodes_of("small", 1, {"n3": 1}), nodes_of("big", 2, {"n1": 1, "n2": 1})]},
)
topology(
    "topo-24-cpu-gang-required-rack",
    "A CPU-only gang of two 40-core pods requiring a rack: r1 has 64 free cores, r2 128; it goes to r2 "
    "because r1 cannot hold 80 cores.",
    [tnode("n1", "z1", "b1", "r1", gpus=0), tnode("n2", "z1", "b1", "r2", gpus=0),
     tnode("n3", "z1", "b1", "r2", gpus=0)],
    [job("j", [task(f"j-{i}", cpu=40_000) for i in range(2)], topology="dc", required_topology_level="rack")],
    {"task_sets": [nodes_of("j", 2, {"n2": 1, "n3": 1})]},
)
topology(
    "topo-25-second-topology",
    "Two topologies: the job names 'nvl' (one level, nvlink domain) and lands within one domain of it: "
    "domain a has 4 free GPUs (binpack alone would start there), b has 12.",
    [node("n1", labels={"nvlink": "a"}), node("n2", labels={"nvlink": "b"}), node("n3", labels={"nvlink": "b"})],
    [busy("f1", "n1", 4), busy("f", "n2", 4), gang("j", 2, gpus=4, topology="nvl", required_topology_level="nvlink")],
    {"task_sets": [nodes_of("j", 2, {"n2": 1, "n3": 1})]},
    topologies=[*TOPO, {"name": "nvl", "levels": ["nvlink"]}],
)
topology(
    "topo-26-same-rack-name-in-two-blocks",
    "Rack names repeat across blocks (b1/r1, b2/r1): they are different domains, so a 2-node gang requiring "
    "a rack does not take n1 (b1/r1) with n3 (b2/r1).",
    [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r1"),
     tnode("n3", "z1", "b2", "r1"), tnode("n4", "z1", "b2", "r1")],
    [busy("f1", "n2"), busy("f2", "n4"), gang("j", 2, required_topology_level="rack")],
    {"jobs": {"j": PENDING}, "message_contains": {"j": "has 8 of the 16 GPUs needed"}},
)

_TWO_RACKS = [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r2")]
_HALF_FULL = [
    job("a1", [task("a1-0", gpus=4, status="running", node="n1")], queue="a"),
    job("a2", [task("a2-0", gpus=4, status="running", node="n2")], queue="a"),
]
_FREES_RACK = {
    "reclaim": "the reclaim evicts a2 (queue a is over its share, b under) and, as KAI's consolidating "
    "reclaim, re-places it on n1 beside a1",
    "preempt": "the higher-priority gang preempts a2 (same queue, lower priority), which is re-placed on n1 "
    "beside a1",
    "consolidation": "consolidation moves a2 onto n1 beside a1",
}
for _phase in ("reclaim", "preempt", "consolidation"):
    topology(
        f"topo-{ {'reclaim': 27, 'preempt': 28, 'consolidation': 29}[_phase] }-{_phase}-frees-rack-for-required-gang",
        f"Each rack has 4 free GPUs and the 2x4-GPU gang requires one rack: {_FREES_RACK[_phase]}, so rack r2 "
        "is free and the gang is pipelined there, both pods on n2 (without the constraint nothing moves and "
        "the gang is pipelined across n1 + n2).",
        _TWO_RACKS,
        [
            *_HALF_FULL,
            gang(
                "j",
                2,
                gpus=4,
                queue="a" if _phase == "preempt" else "b",  # preempt: within the queue, over lower priority
                required_topology_level="rack",
                priority=50 if _phase == "consolidation" else 100,  # consolidation: preemptible jobs only
            ),
        ],
        {
            "task_sets": [
                {"tasks": ["j-0", "j-1"], "status_counts": {"pipelined": 2}, "node_counts": {"n2": 2}}
            ],
            "tasks": {"a1-0": on("n1", "running"), "a2-0": on("n1", "pipelined")},
        },
        phase=_phase,
        queues=[queue("a", quota=16 if _phase == "preempt" else 0), queue("b", quota=16)],
        tags=["with-eviction", _phase],
    )

# Two racks of two 8-GPU nodes, each node running one single-pod job of queue a; the victims come in the
# order a4, a3, a2, a1 (the lowest-ranked job first), which alternates between the racks.
_FOUR = [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r1"),
         tnode("n3", "z1", "b1", "r2"), tnode("n4", "z1", "b1", "r2")]
_FULL = [
    job("a1", [task("a1-0", gpus=8, status="running", node="n1")], queue="a"),
    job("a2", [task("a2-0", gpus=8, status="running", node="n3")], queue="a"),
    job("a3", [task("a3-0", gpus=8, status="running", node="n2")], queue="a"),
    job("a4", [task("a4-0", gpus=8, status="running", node="n4")], queue="a"),
]
_EVICTED = {"status": "releasing"}
_RUNNING = {"status": "running"}
for _n, _phase in ((1, "reclaim"), (2, "preempt")):
    topology(
        f"topo-act-{_n:02d}-{_phase}-evicts-one-rack",
        f"Every node is busy and the 2x8-GPU gang requires one rack: {_phase} takes victims in its order "
        "(a4 on n4, a3 on n2, a2 on n3) but evicts only those of one rack, a4 and a2, freeing r2 for the gang; "
        "a3 keeps running. Without the constraint it evicts the first two victims, a4 and a3, across racks.",
        _FOUR,
        [
            *_FULL,
            gang("j", 2, queue="a" if _phase == "preempt" else "b", required_topology_level="rack", priority=100),
        ],
        {
            "task_sets": [
                {"tasks": ["j-0", "j-1"], "status_counts": {"pipelined": 2}, "node_counts": {"n3": 1, "n4": 1}}
            ],
            "tasks": {"a1-0": _RUNNING, "a2-0": _EVICTED, "a3-0": _RUNNING, "a4-0": _EVICTED},
        },
        phase=_phase,
        queues=[queue("a", quota=32 if _phase == "preempt" else 0), queue("b", quota=32)],
        tags=["with-eviction", _phase],
    )
topology(
    "topo-act-03-reclaim-no-rack-can-be-freed",
    "Each rack has one node held by a non-preemptible job, so no rack can be freed for the 2x8-GPU gang that "
    "requires one: reclaim evicts nothing (without the constraint it evicts a3 and a4, one in each rack).",
    _FOUR,
    [
        busy("f1", "n1"),
        busy("f2", "n3"),
        job("a3", [task("a3-0", gpus=8, status="running", node="n2")], queue="a"),
        job("a4", [task("a4-0", gpus=8, status="running", node="n4")], queue="a"),
        gang("j", 2, queue="b", required_topology_level="rack", priority=100),
    ],
    {"jobs": {"j": PENDING}, "tasks": {"a3-0": _RUNNING, "a4-0": _RUNNING}},
    phase="reclaim",
    queues=[queue("q", quota=16), queue("a", quota=0), queue("b", quota=16)],
    tags=["with-eviction", "reclaim"],
)
topology(
    "topo-act-07-reclaim-failed-required-gang-does-not-block-twin",
    "KAI's scheduling signatures include the topology constraint: j1 (2x8 GPUs, requires one rack) fails to "
    "reclaim since no rack can be freed, yet the same gang without a constraint, j2, is still tried and "
    "reclaims a3 and a4 across racks. (Without j1's constraint j1 reclaims them and j2 waits.)",
    _FOUR,
    [
        busy("f1", "n1"),
        busy("f2", "n3"),
        job("a3", [task("a3-0", gpus=8, status="running", node="n2")], queue="a"),
        job("a4", [task("a4-0", gpus=8, status="running", node="n4")], queue="a"),
        gang("j1", 2, queue="b", required_topology_level="rack", priority=100),
        job("j2", [task(f"j2-{i}", gpus=8) for i in range(2)], queue="b", priority=100),
    ],
    {
        "jobs": {"j1": PENDING},
        "task_sets": [{"tasks": ["j2-0", "j2-1"], "status_counts": {"pipelined": 2}, "node_counts": {"n2": 1, "n4": 1}}],
        "tasks": {"a3-0": _EVICTED, "a4-0": _EVICTED},
    },
    phase="reclaim",
    queues=[queue("q", quota=16), queue("a", quota=0), queue("b", quota=32)],
    tags=["with-eviction", "reclaim"],
)
topology(
    "topo-act-04-reclaim-preferred-rack-lands-in-freed-rack",
    "Only 4 GPUs are idle (n1, rack r1) and the 2x4-GPU gang prefers one rack: reclaim evicts a3 on n3 and "
    "places both pods there, in rack r2. Without the preference binpack puts one pod on n1's idle GPUs and "
    "one on n3, across racks.",
    _FOUR,
    [
        busy("f1", "n1", gpus=4),
        busy("f2", "n2"),
        busy("f4", "n4"),
        job("a3", [task("a3-0", gpus=8, status="running", node="n3")], queue="a"),
        gang("j", 2, gpus=4, queue="b", preferred_topology_level="rack", priority=100),
    ],
    {
        "task_sets": [{"tasks": ["j-0", "j-1"], "status_counts": {"pipelined": 2}, "node_counts": {"n3": 2}}],
        "tasks": {"a3-0": _EVICTED},
    },
    phase="reclaim",
    queues=[queue("q", quota=32), queue("a", quota=0), queue("b", quota=16)],
    tags=["with-eviction", "reclaim"],
)
topology(
    "topo-act-05-consolidation-moves-required-victim-within-rack",
    "Consolidation moves the rack-constrained gang v (4 GPUs on n1 and on n2, rack r1) to make room for an "
    "8-GPU pod: v is re-placed within one rack, both pods on n1, and p takes n2. Without v's constraint "
    "binpack re-places one of v's pods on n3 (rack r2, 4 GPUs free) and p still takes n2.",
    [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r1"),
     tnode("n3", "z1", "b1", "r2"), tnode("n4", "z1", "b1", "r2")],
    [
        busy("f3", "n3", gpus=4),
        busy("f4", "n4"),
        job(
            "v",
            [task("v-0", gpus=4, status="running", node="n1"), task("v-1", gpus=4, status="running", node="n2")],
            topology="dc",
            required_topology_level="rack",
        ),
        job("p", [task("p-0", gpus=8)]),
    ],
    {"tasks": {"v-0": on("n1", "running"), "v-1": on("n1", "pipelined"), "p-0": on("n2", "pipelined")}},
    phase="consolidation",
    tags=["with-eviction", "consolidation"],
)
topology(
    "topo-act-06-preempt-required-block-frees-block",
    "The 4x8-GPU gang requires one block; block b1 (racks r1, r2) holds two lower-priority jobs, block b2 "
    "(3 nodes) one non-preemptible job: preempt moves both of b1's jobs to b2's free nodes and pipelines "
    "the gang on all of b1. Without the constraint the gang is spread over both blocks.",
    [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r1"),
     tnode("n3", "z1", "b1", "r2"), tnode("n4", "z1", "b1", "r2"),
     tnode("n5", "z1", "b2", "r3"), tnode("n6", "z1", "b2", "r3"),
     tnode("n7", "z1", "b2", "r4")],
    [
        busy("f7", "n7"),
        job("a2", [task("a2-0", gpus=8, status="running", node="n2")]),
        job("a4", [task("a4-0", gpus=8, status="running", node="n4")]),
        gang("j", 4, required_topology_level="block", priority=100),
    ],
    {
        "task_sets": [
            {"tasks": [f"j-{i}" for i in range(4)], "status_counts": {"pipelined": 4},
             "node_counts": {"n1": 1, "n2": 1, "n3": 1, "n4": 1}}
        ],
        "tasks": {"a2-0": on("n5", "pipelined"), "a4-0": on("n6", "pipelined")},
    },
    phase="preempt",
    tags=["with-eviction", "preempt"],
)

topology(
    "topo-30-placed-pods-span-racks",
    "An elastic job got a rack constraint after its pods ran in two racks: its next pod cannot join one "
    "rack with all of them, so it waits and is told why.",
    _TWO_RACKS,
    [
        job(
            "j",
            [
                task("j-0", gpus=2, status="running", node="n1"),
                task("j-1", gpus=2, status="running", node="n2"),
                task("j-2", gpus=2),
            ],
            min_available=2,
            topology="dc",
            required_topology_level="rack",
        )
    ],
    {"tasks": {"j-2": PENDING}, "message_contains": {"j": "its placed pods are on nodes of more than one rack"}},
)
topology(
    "topo-31-required-rack-pipelines-in-one-rack",
    "Rack r1 is full of running pods, r2 has an idle node and a releasing one, r3 one idle node: binpack "
    "alone would allocate n4 + n5 across racks; the rack-constrained gang is pipelined onto "
    "r2: one pod on n4's idle GPUs, one on n3's releasing ones, and the gang is pipelined as a whole (KAI).",
    [*_RACKS, tnode("n5", "z1", "b1", "r3")],
    [
        busy("f1", "n1"),
        busy("f2", "n2"),
        job("old", [task("old-0", gpus=8, status="releasing", node="n3")], priority=100),
        gang("j", 2, required_topology_level="rack"),
    ],
    {
        "task_sets": [
            {"tasks": ["j-0", "j-1"], "status_counts": {"pipelined": 2}, "node_counts": {"n3": 1, "n4": 1}}
        ]
    },
)
topology(
    "topo-32-preferred-block",
    "Preferred block: block b2 has room for the whole gang, so it is kept there rather than split between "
    "b1's free node and b2.",
    [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r1"),
     tnode("n3", "z1", "b2", "r2"), tnode("n4", "z1", "b2", "r3")],
    [busy("f", "n2"), gang("j", 2, preferred_topology_level="block")],
    {"task_sets": [nodes_of("j", 2, {"n3": 1, "n4": 1})]},
)
topology(
    "topo-33-preferred-zone",
    "Preferred zone: z1 has one free node, z2 two: the gang goes to z2.",
    [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r1"),
     tnode("n3", "z2", "b2", "r2"), tnode("n4", "z2", "b3", "r3")],
    [busy("f", "n2"), gang("j", 2, preferred_topology_level="zone")],
    {"task_sets": [nodes_of("j", 2, {"n3": 1, "n4": 1})]},
)
topology(
    "topo-34-preferred-hostname-falls-back-to-rack",
    "Preferred host for two 6-GPU pods: no node has 12 free, so the gang falls back to one rack (r2, with two "
    "free nodes) rather than n1 (r1) + n3.",
    [tnode("n1", "z1", "b1", "r1"), tnode("n3", "z1", "b1", "r2"), tnode("n4", "z1", "b1", "r2")],
    [gang("j", 2, gpus=6, preferred_topology_level=HOSTNAME)],
    {"task_sets": [nodes_of("j", 2, {"n3": 1, "n4": 1})]},
)
topology(
    "topo-35-preferred-hostname-packs-one-node",
    "Preferred host for two 4-GPU pods: n1 has 4 free GPUs, n2 8; binpack alone would take n1 then n2, the "
    "preference puts both on n2.",
    [tnode("n1", "z1", "b1", "r1", gpus=16), tnode("n2", "z1", "b1", "r2")],
    [busy("f", "n1", 12), gang("j", 2, gpus=4, preferred_topology_level=HOSTNAME)],
    {"task_sets": [nodes_of("j", 2, {"n2": 2})]},
)

topology(
    "topo-36-topology-without-level",
    "A PodGroup that names a topology (even an unknown one) but no level has no constraint: it is placed "
    "as any other gang.",
    _RACKS,
    [busy("f", "n2"), gang("j", 2, topology="nope")],
    {"task_sets": [nodes_of("j", 2, {"n1": 1, "n3": 1})]},
)


# ---------------------------------------------------------------- subgroups (issue 15 item 3)
# KAI's hierarchical PodGroups (kai-spec §2.2): PodSets with their own minMember, SubGroupSets with
# minSubGroup, per-subgroup topology. Each scenario is written so that dropping the subgroups (one gang of
# the job's min_available) gives a different outcome.


def sg(name: str, min_member: int | None = None, parent: str | None = None, **kw: Any) -> dict[str, Any]:
    """A ``subgroups[]`` entry; topology keys as in the contract (topology defaults to ``dc`` with a level)."""
    out: dict[str, Any] = {"name": name}
    if min_member is not None:
        out["min_member"] = min_member
    if parent is not None:
        out["parent"] = parent
    if ("required_topology_level" in kw or "preferred_topology_level" in kw) and "topology" not in kw:
        kw["topology"] = "dc"
    return out | kw


def sgtasks(job_name: str, sub: str, n: int, gpus: int = 8, **kw: Any) -> list[dict[str, Any]]:
    """n pods of a subgroup, named ``<job>-<sub>-<i>``."""
    return [task(f"{job_name}-{sub}-{i}", gpus=gpus, subgroup=sub, **kw) for i in range(n)]


def subgroups(name: str, intent: str, nodes: list[dict[str, Any]], jobs: list[dict[str, Any]],
              expect: dict[str, Any], **kw: Any) -> None:
    run = kw.pop("run", None)
    scenario(name, "subgroups", intent, nodes, jobs, expect, topologies=kw.pop("topologies", TOPO),
             tags=["subgroups", *kw.pop("tags", [])], **kw)
    if run:
        S[-1]["run"] |= run


def placed(*names: str, node: str | None = None, status: str = "allocated") -> dict[str, Any]:
    return {n: ({"status": status, "node": node} if node else {"status": status}) for n in names}


_FOUR = [tnode(f"n{i}", "z1", "b1", "r1" if i <= 2 else "r2") for i in range(1, 5)]
subgroups(
    "sg-01-every-podset-minimum-before-extras",
    "prefill (minMember 1, 2 pods) and decode (minMember 2): with room for 3 pods, decode gets both of its "
    "pods and prefill one; one gang of 3 would have taken the first three pods in task order (both prefill).",
    _FOUR[:3],
    [job("j", sgtasks("j", "prefill", 2) + sgtasks("j", "decode", 2), min_available=3,
         subgroups=[sg("prefill", 1), sg("decode", 2)])],
    {"tasks": placed("j-prefill-0", "j-decode-0", "j-decode-1") | placed("j-prefill-1", status="pending")},
)
subgroups(
    "sg-02-subgroup-that-cannot-fit-holds-the-gang",
    "decode's two pods ask for 16 GPUs each, more than any node has: the whole job waits, prefill too, even "
    "though the PodGroup's own minMember is 1 (unused with subgroups); the message names the subgroup.",
    _FOUR,
    [job("j", sgtasks("j", "prefill", 2) + sgtasks("j", "decode", 2, gpus=16), min_available=1,
         subgroups=[sg("prefill", 2), sg("decode", 2)])],
    {"jobs": {"j": PENDING}, "message_contains": {"j": "subgroup decode: 0 of 2 pods placeable"}},
)
subgroups(
    "sg-03-podgroup-min-member-unused",
    "Two PodSets of minMember 1 with two pods each and a PodGroup minMember of 4: with room for two pods the "
    "job starts with one pod of each subgroup (KAI ignores the PodGroup's minMember when it has subgroups).",
    _FOUR[:2],
    [job("j", sgtasks("j", "a", 2) + sgtasks("j", "b", 2), min_available=4,
         subgroups=[sg("a", 1), sg("b", 1)])],
    {"tasks": placed("j-a-0", "j-b-0") | placed("j-a-1", "j-b-1", status="pending")},
)
_B1 = [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r1"), tnode("n3", "z1", "b1", "r1"),
       tnode("n4", "z1", "b1", "r2"), tnode("n5", "z1", "b1", "r2"),
       tnode("n6", "z1", "b2", "r3"), tnode("n7", "z1", "b2", "r3")]
subgroups(
    "sg-04-subgroup-racks-nested-in-job-block",
    "The job requires one block, prefill and decode one rack each: decode (first by name) takes r2, the "
    "rack with the least room that fits, prefill r1, both in block b1; the job's block alone would put the "
    "four pods on n1..n4, prefill across racks.",
    _B1,
    [job("j", sgtasks("j", "decode", 2) + sgtasks("j", "prefill", 2), topology="dc",
         required_topology_level="block",
         subgroups=[sg("decode", 2, required_topology_level="rack"),
                    sg("prefill", 2, required_topology_level="rack")])],
    {"task_sets": [{"tasks": ["j-decode-0", "j-decode-1"], "status_counts": {"allocated": 2},
                    "node_counts": {"n4": 1, "n5": 1}},
                   {"tasks": ["j-prefill-0", "j-prefill-1"], "status_counts": {"allocated": 2},
                    "node_counts": {"n1": 1, "n2": 1}}]},
)
subgroups(
    "sg-05-subgroup-required-rack-too-small",
    "prefill requires one rack for its 3 pods of 8 GPUs, but every rack has 2 nodes: the job waits, naming "
    "the subgroup and its level, though the cluster has room for the pods across racks.",
    _FOUR,
    [job("j", sgtasks("j", "prefill", 3) + sgtasks("j", "decode", 1),
         subgroups=[sg("prefill", 3, required_topology_level="rack"), sg("decode", 1)])],
    {"jobs": {"j": PENDING},
     "message_contains": {"j": "subgroup prefill requires its 3 pods within one rack domain of topology 'dc'"}},
)
_SIX = [tnode(f"n{i}", "z1", "b1", f"r{(i + 1) // 2}") for i in range(1, 6)]
subgroups(
    "sg-06-min-sub-group-two-of-three",
    "Three replicas of 2 pods under a PodGroup with minSubGroup 2 and room for 5 pods: two replicas start "
    "and the third, which cannot be whole, is not placed at all; one gang of 6 would wait.",
    _SIX,
    [job("j", sgtasks("j", "r0", 2) + sgtasks("j", "r1", 2) + sgtasks("j", "r2", 2), min_sub_group=2,
         subgroups=[sg("r0", 2), sg("r1", 2), sg("r2", 2)])],
    {"tasks": placed("j-r0-0", "j-r0-1", "j-r1-0", "j-r1-1") | placed("j-r2-0", "j-r2-1", status="pending")},
)
subgroups(
    "sg-07-min-sub-group-not-met-waits",
    "The same job with room for 3 pods: only one replica can be whole, minSubGroup 2 is not met and nothing "
    "starts (a PodGroup minMember of 2 would have started two pods).",
    _SIX[:3],
    [job("j", sgtasks("j", "r0", 2) + sgtasks("j", "r1", 2) + sgtasks("j", "r2", 2), min_sub_group=2,
         min_available=2, subgroups=[sg("r0", 2), sg("r1", 2), sg("r2", 2)])],
    {"jobs": {"j": PENDING}, "message_contains": {"j": "3 subgroups cannot be placed, and minSubGroup needs 2 placed"}},
)
subgroups(
    "sg-08-elastic-growth-by-subgroup-order",
    "Both subgroups have their minimum running (prefill 2 of min 1, decode 1 of min 1) and one node is "
    "free: the elastic extra goes to decode, the subgroup with the lower running/minMember ratio, not to "
    "the next prefill pod in task order.",
    _FOUR[:4],
    [job("j", [task("j-prefill-0", gpus=8, subgroup="prefill", status="running", node="n1"),
               task("j-prefill-1", gpus=8, subgroup="prefill", status="running", node="n2"),
               task("j-prefill-2", gpus=8, subgroup="prefill"),
               task("j-decode-0", gpus=8, subgroup="decode", status="running", node="n3"),
               task("j-decode-1", gpus=8, subgroup="decode")],
         subgroups=[sg("prefill", 1), sg("decode", 1)])],
    {"tasks": placed("j-decode-1", node="n4") | placed("j-prefill-2", status="pending")},
)
subgroups(
    "sg-09-stale-gang-per-subgroup",
    "Subgroup a (minMember 2) lost a pod, b (minMember 1) runs 2: 3 pods run, as many as the job's total "
    "minimum, but a is below its own, so after the grace period every running pod is evicted.",
    _FOUR,
    [job("j", [task("j-a-0", gpus=8, subgroup="a", status="running", node="n1"),
               task("j-a-1", gpus=8, subgroup="a", status="failed", node="n2"),
               task("j-b-0", gpus=8, subgroup="b", status="running", node="n3"),
               task("j-b-1", gpus=8, subgroup="b", status="running", node="n4")],
         min_available=3, stale_for_seconds=61, subgroups=[sg("a", 2), sg("b", 1)])],
    {"tasks": placed("j-a-0", node="n1", status="releasing") | placed("j-b-0", node="n3", status="releasing")
     | placed("j-b-1", node="n4", status="releasing")},
    phase="stale_gang_eviction",
    run={"stale_grace_period_seconds": 60},
)
_SEVEN = [tnode(f"n{i}", "z1", "b1", "r1" if i <= 3 else "r2") for i in range(1, 8)]
subgroups(
    "sg-10-subgroupset-constraint-leader-free",
    "A leader (minMember 1, no constraint) and a SubGroupSet `workers` requiring one rack over its two "
    "PodSets of 2: the leader binpacks onto n1 and the four workers go to r2, the only rack with 4 free "
    "nodes; without subgroups the five pods take n1..n5.",
    _SEVEN,
    [job("j", sgtasks("j", "leader", 1) + sgtasks("j", "w0", 2) + sgtasks("j", "w1", 2),
         subgroups=[sg("leader", 1), sg("workers", required_topology_level="rack"),
                    sg("w0", 2, parent="workers"), sg("w1", 2, parent="workers")])],
    {"tasks": placed("j-leader-0", node="n1"),
     "task_sets": [{"tasks": ["j-w0-0", "j-w0-1", "j-w1-0", "j-w1-1"], "status_counts": {"allocated": 4},
                    "node_counts": {"n4": 1, "n5": 1, "n6": 1, "n7": 1}}]},
)
subgroups(
    "sg-11-pod-of-unknown-subgroup-dropped",
    "A pod labelled with a subgroup the PodGroup does not declare is left out (KAI drops it with a "
    "warning): the declared subgroup's pod starts, the stray one stays pending although there is room.",
    _FOUR,
    [job("j", [*sgtasks("j", "a", 1), task("j-stray-0", gpus=8, subgroup="stray")], subgroups=[sg("a", 1)])],
    {"tasks": placed("j-a-0") | placed("j-stray-0", status="pending")},
)
subgroups(
    "sg-12-subgroup-preferred-rack",
    "decode prefers one rack: r1 has one free node (n1), r2 two (n3, n4); binpack alone would take n1 and "
    "n3, the preference keeps decode in r2.",
    [tnode("n1", "z1", "b1", "r1"), tnode("n3", "z1", "b1", "r2"), tnode("n4", "z1", "b1", "r2")],
    [job("j", sgtasks("j", "decode", 2), subgroups=[sg("decode", 2, preferred_topology_level="rack")])],
    {"task_sets": [{"tasks": ["j-decode-0", "j-decode-1"], "status_counts": {"allocated": 2},
                    "node_counts": {"n3": 1, "n4": 1}}]},
)
subgroups(
    "sg-13-subgroup-default-podset",
    "Pods without the subgroup label join the PodSet `default` when the PodGroup declares one: default "
    "(minMember 1) and b (minMember 2) with room for 3 pods start one unlabelled pod and b's two; one gang "
    "of 3 would have taken both unlabelled pods first.",
    _FOUR[:3],
    [job("j", [task("j-x-0", gpus=8), task("j-x-1", gpus=8), *sgtasks("j", "b", 2)], min_available=3,
         subgroups=[sg("default", 1), sg("b", 2)])],
    {"tasks": placed("j-x-0", "j-b-0", "j-b-1") | placed("j-x-1", status="pending")},
)
subgroups(
    "sg-14-podset-short-of-pods-not-ready",
    "Subgroup a needs 2 pods but only 1 exists: the job is not ready and waits, naming the subgroup, though "
    "its 2 pods would fit (one gang of the job's 2 pods would start).",
    _FOUR,
    [job("j", sgtasks("j", "a", 1) + sgtasks("j", "b", 1), subgroups=[sg("a", 2), sg("b", 1)])],
    {"jobs": {"j": PENDING}},  # its NotReady message: tests/scheduler/engine/test_subgroups.py
)

subgroups(
    "sg-15-preempt-shrinks-the-subgroup-above-its-minimum",
    "A running job of two subgroups, a (minMember 1, 2 pods) and b (minMember 2, 2 pods), and a higher-"
    "priority pod that needs a whole node: preempt takes a's second pod, the only one above its subgroup's "
    "minimum, not b's last pod (task order), which would break b's gang.",
    _FOUR,
    [job("v", [task("v-a-0", gpus=8, subgroup="a", status="running", node="n1"),
               task("v-a-1", gpus=8, subgroup="a", status="running", node="n2"),
               task("v-b-0", gpus=8, subgroup="b", status="running", node="n3"),
               task("v-b-1", gpus=8, subgroup="b", status="running", node="n4")],
         min_available=3, subgroups=[sg("a", 1), sg("b", 2)]),
     job("high", [task("high-0", gpus=8)], priority=100, preemptible=False)],
    {"tasks": placed("v-a-1", node="n2", status="releasing") | placed("high-0", node="n2", status="pipelined")
     | placed("v-b-1", node="n4", status="running")},
    phase="preempt",
    tags=["with-eviction", "preempt"],
)


# ---------------------------------------------------------------- subgroups in reclaim / preempt / consolidation
# The solvers place a job whose subgroups carry their own constraints as allocate does: each PodSet within
# its nested domain, the preemptor and every re-placed victim (KAI's solvers call the same AllocateJob).
_SG_ACT = [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r1"),
           tnode("n3", "z1", "b1", "r2"), tnode("n4", "z1", "b1", "r2"), tnode("n5", "z1", "b1", "r3")]
subgroups(
    "sg-act-01-reclaim-frees-a-rack-for-a-subgroup",
    "Racks r1 and r2 are full of queue a's single-node jobs (victim order a4 on n4, a3 on n2, a2 on n3); "
    "job j of queue b has a leader (1 pod, no constraint) and workers (2 pods that require one rack). "
    "Reclaim puts the leader on idle n5 (rack r3) and frees rack r2 for the workers by evicting a4 and a2; "
    "a3 keeps running. Without the workers' constraint it evicts a4 and a3, one node in each rack.",
    _SG_ACT,
    [job("a1", [task("a1-0", gpus=8, status="running", node="n1")], queue="a"),
     job("a2", [task("a2-0", gpus=8, status="running", node="n3")], queue="a"),
     job("a3", [task("a3-0", gpus=8, status="running", node="n2")], queue="a"),
     job("a4", [task("a4-0", gpus=8, status="running", node="n4")], queue="a"),
     job("j", sgtasks("j", "leader", 1) + sgtasks("j", "workers", 2), queue="b", priority=100,
         subgroups=[sg("leader", 1), sg("workers", 2, required_topology_level="rack")])],
    {"task_sets": [{"tasks": ["j-workers-0", "j-workers-1"], "status_counts": {"pipelined": 2},
                    "node_counts": {"n3": 1, "n4": 1}}],
     "tasks": placed("j-leader-0", node="n5", status="pipelined") | placed("a2-0", "a4-0", status="releasing")
     | placed("a1-0", "a3-0", status="running")},
    phase="reclaim",
    queues=[queue("a", quota=0), queue("b", quota=32)],
    tags=["with-eviction", "reclaim"],
)

_BLOCKS = [tnode("n1", "z1", "b1", "r1"), tnode("n2", "z1", "b1", "r1"),
           tnode("n3", "z1", "b1", "r2"), tnode("n4", "z1", "b1", "r2"),
           tnode("n5", "z1", "b2", "r3"), tnode("n6", "z1", "b2", "r3"),
           tnode("n7", "z1", "b2", "r4"), tnode("n8", "z1", "b2", "r4")]
subgroups(
    "sg-act-02-preempt-grove-prefill-decode-in-one-block",
    "A Grove-like PodCliqueSet (required block; prefill and decode cliques of 2 pods, each requiring one "
    "rack) outranks the single-node jobs filling the cluster; block b2 holds a non-preemptible pod on n8, "
    "so preempt frees block b1 (x1, x2, x3; n4 is idle): decode takes rack r1, prefill rack r2, each clique "
    "within its rack. With only the block constraint the cliques are spread over both racks.",
    _BLOCKS,
    [busy("f8", "n8"),
     *(job(f"y{i}", [task(f"y{i}-0", gpus=8, status="running", node=f"n{i}")]) for i in (5, 6, 7)),
     *(job(f"x{i}", [task(f"x{i}-0", gpus=8, status="running", node=f"n{i}")]) for i in (1, 2, 3)),
     job("pcs", sgtasks("pcs", "decode", 2) + sgtasks("pcs", "prefill", 2), priority=100, topology="dc",
         required_topology_level="block",
         subgroups=[sg("decode", 2, required_topology_level="rack"),
                    sg("prefill", 2, required_topology_level="rack")])],
    {"task_sets": [{"tasks": ["pcs-decode-0", "pcs-decode-1"], "status_counts": {"pipelined": 2},
                    "node_counts": {"n1": 1, "n2": 1}},
                   {"tasks": ["pcs-prefill-0", "pcs-prefill-1"], "status_counts": {"pipelined": 2},
                    "node_counts": {"n3": 1, "n4": 1}}],
     "tasks": placed("x1-0", "x2-0", "x3-0", status="releasing") | placed("y5-0", "y6-0", "y7-0", status="running")},
    phase="preempt",
    tags=["with-eviction", "preempt"],
)

subgroups(
    "sg-act-03-consolidation-moves-pods-so-a-subgroups-rack-fits",
    "Job j's decode clique (2 pods of 8 GPUs) requires one rack, its prefill pod (4 GPUs) goes anywhere. "
    "Rack r1's nodes each run a movable 4-GPU pod (m1, m2); rack r2 has n4 idle and a non-preemptible pod "
    "on half of n3. Consolidation moves m1 and m2 to n4 and decode takes rack r1; prefill fills n3's free "
    "half. Without decode's constraint decode goes across racks (n2 and n4), moving only m2.",
    _FOUR,
    [job("m1", [task("m1-0", gpus=4, status="running", node="n1")]),
     job("m2", [task("m2-0", gpus=4, status="running", node="n2")]),
     busy("f3", "n3", gpus=4),
     job("j", sgtasks("j", "decode", 2) + sgtasks("j", "prefill", 1, gpus=4), priority=75,
         subgroups=[sg("decode", 2, required_topology_level="rack"), sg("prefill", 1)])],
    {"task_sets": [{"tasks": ["j-decode-0", "j-decode-1"], "status_counts": {"pipelined": 2},
                    "node_counts": {"n1": 1, "n2": 1}}],
     "tasks": placed("j-prefill-0", node="n3", status="pipelined") | placed("m1-0", "m2-0", node="n4", status="pipelined")},
    phase="consolidation",
    tags=["with-eviction", "consolidation"],
)

subgroups(
    "sg-act-04-shrunk-elastic-subgroup-victim-stays-in-its-rack",
    "Victim v's workers (minMember 2, 3 pods of 4 GPUs, required rack) run in rack r1; reclaim shrinks "
    "them by their last pod (on n2) to give job j the whole of n2. The evicted pod could be re-placed on "
    "n4's free half, but that is rack r2: it stays evicted and the two workers left keep their rack. "
    "Without the workers' constraint it is moved to n4.",
    _FOUR,
    [busy("f3", "n3"), busy("f4", "n4", gpus=4),
     job("v", [task("v-workers-0", gpus=4, subgroup="workers", status="running", node="n1"),
               task("v-workers-1", gpus=4, subgroup="workers", status="running", node="n1"),
               task("v-workers-2", gpus=4, subgroup="workers", status="running", node="n2")],
         queue="a", min_available=2, subgroups=[sg("workers", 2, required_topology_level="rack")]),
     job("j", [task("j-0", gpus=8)], queue="b", priority=100)],
    {"tasks": placed("j-0", node="n2", status="pipelined") | placed("v-workers-2", node="n2", status="releasing")
     | placed("v-workers-0", "v-workers-1", node="n1", status="running")},
    phase="reclaim",
    queues=[queue("q", quota=16), queue("a", quota=0), queue("b", quota=8)],
    tags=["with-eviction", "reclaim"],
)

subgroups(
    "sg-act-05-reclaim-preferred-subgroup-rack-lands-in-freed-rack",
    "Only n1's 4 GPUs (rack r1) and n5 (rack r3) are idle; job j's leader (8 GPUs) goes anywhere and its "
    "workers (2 pods of 4 GPUs) prefer one rack: reclaim evicts a3 on n3 and puts both workers there, in "
    "rack r2, the leader on n5. Without the preference one worker takes n1's idle GPUs, across racks.",
    _SG_ACT,
    [busy("f1", "n1", gpus=4), busy("f2", "n2"), busy("f4", "n4"),
     job("a3", [task("a3-0", gpus=8, status="running", node="n3")], queue="a"),
     job("j", sgtasks("j", "leader", 1) + sgtasks("j", "workers", 2, gpus=4), queue="b", priority=100,
         subgroups=[sg("leader", 1), sg("workers", 2, preferred_topology_level="rack")])],
    {"task_sets": [{"tasks": ["j-workers-0", "j-workers-1"], "status_counts": {"pipelined": 2},
                    "node_counts": {"n3": 2}}],
     "tasks": placed("j-leader-0", node="n5", status="pipelined") | placed("a3-0", status="releasing")},
    phase="reclaim",
    queues=[queue("q", quota=32), queue("a", quota=0), queue("b", quota=16)],
    tags=["with-eviction", "reclaim"],
)

def main() -> None:
    """(Re)write every scenario file."""
    for s in S:
        path = OUT / s["category"] / f"{s['name']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(s, indent=2) + "\n")
    print(f"wrote {len(S)} scenarios under {OUT}")


if __name__ == "__main__":
    main()
