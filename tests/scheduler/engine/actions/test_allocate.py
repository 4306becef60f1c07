"""allocate edge cases beyond the KAI scenario files, table-driven: a cluster, queues, jobs, what must happen."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from scheduler.engine.cycle import open_session, result_state, run_actions
from scheduler.engine.proportion import ResourceQuota
from scheduler.engine.record.decisions import make_record
from scheduler.engine.state import ClusterState, Job, Node, Pod, PodRequest, PodStatus, Queue

GB = 10**9


def queue(
    name: str, parent: str | None = None, gpu_quota: int = 0, gpu_limit: int | None = None, order: int = 0
) -> Queue:
    res = {r: ResourceQuota.of(None, None, 1) for r in ("cpu", "memory")}
    res["gpu"] = ResourceQuota.of(gpu_quota * 1000, None if gpu_limit is None else gpu_limit * 1000, 1)
    return Queue(name=name, parent=parent, resources=res, order=order)


@dataclass
class JobSpec:
    name: str
    queue: str
    tasks: list[dict[str, object]]
    min_available: int | None = None
    priority: int = 50
    preemptible: bool = True


@dataclass
class Case:
    name: str
    nodes: list[tuple[str, int]]  # (name, gpus)
    queues: list[Queue]
    jobs: list[JobSpec]
    expect: dict[str, str]  # pod name -> status (node optional as "status@node")
    reasons: dict[str, str] = field(default_factory=dict)  # job -> Unschedulable reason code


def build(case: Case) -> ClusterState:
    nodes = tuple(
        Node(name=n, cpu=64_000, memory=512 * GB, gpus=g, gpu_memory_mib=40_000) for n, g in case.nodes
    )
    jobs, pods = [], []
    for i, j in enumerate(case.jobs):
        jobs.append(
            Job(
                uid=j.name,
                name=j.name,
                queue=j.queue,
                min_available=j.min_available or len(j.tasks),
                priority=j.priority,
                preemptible=j.preemptible,
                created_ms=i,
            )
        )
        for k, t in enumerate(j.tasks):
            status = PodStatus(str(t.get("status", "pending")))
            frac = t.get("frac")
            pods.append(
                Pod(
                    uid=f"{j.name}-{k}",
                    name=f"{j.name}-{k}",
                    job=j.name,
                    request=PodRequest(
                        cpu=1000,
                        memory=GB,
                        gpus=int(t.get("gpus", 0)),  # type: ignore[call-overload]
                        gpu_fraction_milli=None if frac is None else int(frac),
                    ),  # type: ignore[call-overload]
                    status=status,
                    node=t.get("node") if status is not PodStatus.PENDING else None,  # type: ignore[arg-type]
                    gpu_devices=tuple(t.get("devices", ())),  # type: ignore[arg-type]
                    gpu_milli_per_device=0 if frac is None else int(frac),  # type: ignore[call-overload]
                    index=k,
                    created_ms=i,
                )
            )
    return ClusterState(nodes=nodes, queues=tuple(case.queues), jobs=tuple(jobs), pods=tuple(pods))


CASES = [
    Case(
        "limit 0 blocks any GPU request with OverLimit",
        [("n1", 4)],
        [queue("q", gpu_quota=0, gpu_limit=0)],
        [JobSpec("j", "q", [{"gpus": 1}])],
        {"j-0": "pending"},
        {"j": "OverLimit"},
    ),
    Case(
        "unlimited limit lets a preemptible job borrow the whole idle cluster",
        [("n1", 4)],
        [queue("q", gpu_quota=0, gpu_limit=None)],
        [JobSpec("j", "q", [{"gpus": 4}])],
        {"j-0": "allocated@n1"},
    ),
    Case(
        "a limit at a grand-parent caps a leaf three levels down",
        [("n1", 8)],
        [
            queue("org", gpu_quota=8, gpu_limit=2),
            queue("dept", "org", 8, order=1),
            queue("team", "dept", 8, order=2),
            queue("leaf", "team", 8, order=3),
        ],
        [JobSpec("a", "leaf", [{"gpus": 2}]), JobSpec("b", "leaf", [{"gpus": 1}])],
        {"a-0": "allocated@n1", "b-0": "pending"},
        {"b": "OverLimit"},
    ),
    Case(
        "a gang that fits only partly places nothing",
        [("n1", 2), ("n2", 1)],
        [queue("q", gpu_quota=4)],
        [JobSpec("g", "q", [{"gpus": 2}, {"gpus": 2}])],
        {"g-0": "pending", "g-1": "pending"},
        {"g": "PodSchedulingErrors"},
    ),
    Case(
        "an elastic job places its minimum and then extras while capacity lasts",
        [("n1", 3)],
        [queue("q", gpu_quota=4)],
        [JobSpec("e", "q", [{"gpus": 1}] * 4, min_available=2)],
        {"e-0": "allocated@n1", "e-1": "allocated@n1", "e-2": "allocated@n1", "e-3": "pending"},
    ),
    Case(
        "a fraction that fits only on the partly used GPU goes there",
        [("n1", 1)],
        [queue("q", gpu_quota=1)],
        [
            JobSpec("run", "q", [{"frac": 600, "status": "running", "node": "n1", "devices": (0,)}]),
            JobSpec("f", "q", [{"frac": 400}]),
        ],
        {"f-0": "allocated@n1"},
    ),
    Case(
        "a fraction larger than what is left on the shared GPU stays pending",
        [("n1", 1)],
        [queue("q", gpu_quota=1)],
        [
            JobSpec("run", "q", [{"frac": 600, "status": "running", "node": "n1", "devices": (0,)}]),
            JobSpec("f", "q", [{"frac": 500}]),
        ],
        {"f-0": "pending"},
        {"f": "PodSchedulingErrors"},
    ),
    Case(
        "a non-preemptible job is admitted only within quota",
        [("n1", 4)],
        [queue("q", gpu_quota=1)],
        [JobSpec("np", "q", [{"gpus": 2}], priority=100, preemptible=False)],
        {"np-0": "pending"},
        {"np": "NonPreemptibleOverQuota"},
    ),
    Case(
        "a job in a queue that does not exist is reported, not dropped",
        [("n1", 4)],
        [queue("q", gpu_quota=1)],
        [JobSpec("lost", "nope", [{"gpus": 1}])],
        {"lost-0": "pending"},
        {"lost": "QueueDoesNotExist"},
    ),
    Case(
        "binpack puts a 1-GPU pod on the fuller node",
        [("a", 4), ("b", 4)],
        [queue("q", gpu_quota=8)],
        [
            JobSpec("run", "q", [{"gpus": 2, "status": "running", "node": "b", "devices": (0, 1)}]),
            JobSpec("p", "q", [{"gpus": 1}]),
        ],
        {"p-0": "allocated@b"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_allocate(case: Case) -> None:
    ssn = run_actions(open_session(build(case), now_ms=1000), ("allocate",))
    out = {p.name: p for p in result_state(ssn).pods}
    for pod, want in case.expect.items():
        status, _, node = want.partition("@")
        assert out[pod].status.value == status, pod
        if node:
            assert out[pod].node == node, pod
    rec = make_record(ssn, 0)
    unsched = {d.job: d for d in rec.decisions if d.kind == "Unschedulable"}
    for job, reason in case.reasons.items():
        assert unsched[job].reason == reason
        assert unsched[job].message  # a sentence a person can act on
    # Every job with a pending pod gets exactly one Unschedulable decision.
    pending_jobs = {p.job for p in out.values() if p.status is PodStatus.PENDING}
    assert set(unsched) == pending_jobs


def test_rollback_leaves_no_trace() -> None:
    case = CASES[3]  # the gang that fits only partly
    state = build(case)
    ssn = run_actions(open_session(state, now_ms=1000), ("allocate",))
    assert [n.idle_gpu_count() for n in ssn.nodes] == [2, 1]
    assert all(q.allocated == [0, 0, 0] for q in ssn.queues.values())
