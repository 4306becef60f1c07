"""The binder: the pure decision-to-action plan, then the executor against a real kube-apiserver.

The plan tests need no server. The API tests use the ``kube_api`` fixture (``tests/support/kubeapi.py``): nodes and
pods are created as API objects (no kubelet is needed to bind), the Queue CRD from ``deploy/crds``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS, Log
from scheduler.engine.record.decisions import Decision
from scheduler.engine.record.delta import delta_of
from scheduler.kube.binder import (
    ANNOTATION_CYCLE,
    ANNOTATION_GPU_DEVICES,
    ANNOTATION_GPU_PORTION,
    DEFAULT_GROUP,
    Binder,
    BinderApi,
    BindPod,
    EventSpec,
    EvictPod,
    MarkNotReady,
    MarkPending,
    Memory,
    RetryPolicy,
    WriteQueueStatus,
    event_name,
    plan,
    quantity,
    queue_status,
)
from tests.support.cycle_records import bind, evict, pending, queue, record
from tests.support.kube_objects import (
    FAST,
    apply_crds,
    make_node,
    make_pod,
    make_podgroup,
    make_queue,
    pod_events,
    read_pod,
)

# --------------------------------------------------------------------------- builders


# --------------------------------------------------------------------------- the pure plan


def test_plan_orders_evictions_first_and_carries_gpu_placement() -> None:
    rec = record(
        [
            bind("ns/whole", "n1", (0, 1), 1000),
            bind("ns/frac", "n1", (2,), 500),
            bind("ns/cpu", "n2"),
            Decision(kind="Pipeline", job="ns/p", queue="team-a", pod="ns/p", node="n3", action="reclaim"),
            evict("ns/victim", "n3"),
            pending(["ns/a", "ns/b"]),
        ],
        [queue("team-a", gpu_alloc=2500, gpu_fair=3000)],
    )
    p = plan(rec, Memory(), now=0.0, grace_seconds=5)
    kinds = [type(a).__name__ for a in p.actions]
    assert kinds == [
        "EvictPod",
        "BindPod",
        "BindPod",
        "BindPod",
        "MarkPending",
        "MarkPending",
        "WriteQueueStatus",
    ]
    ev = p.actions[0]
    assert isinstance(ev, EvictPod) and (ev.namespace, ev.name, ev.grace_seconds, ev.action) == (
        "ns",
        "victim",
        5,
        "reclaim",
    )
    whole, frac, cpu = p.actions[1:4]
    assert isinstance(whole, BindPod) and isinstance(frac, BindPod) and isinstance(cpu, BindPod)
    assert dict(whole.annotations) == {
        ANNOTATION_CYCLE: "cycle-1000",
        ANNOTATION_GPU_DEVICES: "0,1",
        ANNOTATION_GPU_PORTION: "1000",
    }
    assert dict(frac.annotations)[ANNOTATION_GPU_DEVICES] == "2"
    assert dict(frac.annotations)[ANNOTATION_GPU_PORTION] == "500"
    assert dict(cpu.annotations) == {ANNOTATION_CYCLE: "cycle-1000"}  # no GPU: no device annotations
    assert not p.invalid


def test_pending_pods_are_told_once_per_interval_and_at_once_when_the_reason_changes() -> None:
    def step(
        mem: Memory, now: float, reason: str = "PodSchedulingErrors", msg: str = "m1"
    ) -> tuple[Memory, list[MarkPending]]:
        p = plan(record([pending(["ns/a"], reason, msg)]), mem, now, event_interval_s=60)
        return p.memory, [a for a in p.actions if isinstance(a, MarkPending)]

    mem, acts = step(Memory(), 0)
    assert [(a.condition, a.event) for a in acts] == [(True, True)]
    mem, acts = step(mem, 10)
    assert acts == []  # same reason and message within the interval: no call at all
    mem, acts = step(mem, 20, msg="m2")
    assert acts == []  # only the message changed: the condition waits for the interval
    mem, acts = step(mem, 61, msg="m2")
    assert [(a.condition, a.event, a.message) for a in acts] == [(True, True, "m2")]  # interval elapsed
    mem, acts = step(mem, 70, msg="m2")
    assert acts == []
    mem, acts = step(mem, 62, reason="OverLimit", msg="m2")
    assert [(a.condition, a.event, a.reason) for a in acts] == [(True, True, "OverLimit")]
    # The pod is bound (no longer pending): its state is dropped, so pending again is told at once.
    p = plan(record([bind("ns/a", "n1")]), mem, 63)
    assert "ns/a" not in p.memory.pending
    mem, acts = step(p.memory, 64, reason="OverLimit", msg="m2")
    assert [(a.condition, a.event) for a in acts] == [(True, True)]


def test_a_gang_waiting_for_members_is_told_on_its_podgroup_not_on_its_pods() -> None:
    # KAI's default_status_updater_test.go, TestRecordJobStatusEvent: "No ready job" (minMember 2, one pod)
    # records only "Normal NotReady Job is not ready for scheduling. ..." on the PodGroup; "Unscheduleable
    # job" records "Warning Unschedulable" on its pod (default_status_updater.go returns before any pod
    # write while the job is not ready).
    gang = [f"ns/w{i}" for i in range(50)]

    def step(mem: Memory, now: float, reason: str, msg: str) -> tuple[Memory, list[Any]]:
        p = plan(record([pending(gang, reason, msg, job="ns/pg")]), mem, now, event_interval_s=60)
        return p.memory, list(p.actions)

    mem, acts = step(Memory(), 1.0, "NotReady", "Waiting for 300 pods, currently 1 exist")
    assert acts == [MarkNotReady("ns", "pg", "Waiting for 300 pods, currently 1 exist")]
    told = 1
    for k in range(2, 31):  # one cycle a second, one more member each time: nothing more within the interval
        mem, acts = step(mem, float(k), "NotReady", f"Waiting for 300 pods, currently {k} exist")
        told += len(acts)
    assert told == 1
    mem, acts = step(mem, 61.0, "NotReady", "Waiting for 300 pods, currently 40 exist")
    assert acts == [MarkNotReady("ns", "pg", "Waiting for 300 pods, currently 40 exist")]  # interval up
    # Complete but without room: every pod is told at once, condition and Warning Event.
    mem, acts = step(mem, 62.0, "PodSchedulingErrors", "no node")
    assert [(type(a).__name__, a.condition, a.event) for a in acts] == [("MarkPending", True, True)] * len(
        gang
    )
    assert mem.not_ready == {}


def test_a_delta_that_leaves_a_waiting_gang_out_repeats_its_podgroup_event_per_interval() -> None:
    gang = ["ns/w0", "ns/w1"]
    full = record([pending(gang, "NotReady", "Waiting for 3 pods, currently 2 exist", job="ns/pg")], t=1)
    p1 = plan(full, Memory(), 0.0, event_interval_s=60)
    assert [type(a).__name__ for a in p1.actions] == ["MarkNotReady"]
    delta = delta_of(full, record(full.decisions, t=2))  # the same pending job: not listed again
    assert delta.decisions == []
    p2 = plan(delta, p1.memory, 30.0, event_interval_s=60)
    assert p2.actions == () and set(p2.memory.pending) == set(gang) and "ns/pg" in p2.memory.not_ready
    p3 = plan(delta, p2.memory, 61.0, event_interval_s=60)
    assert p3.actions == (MarkNotReady("ns", "pg", "Waiting for 3 pods, currently 2 exist"),)
    # the gang is bound: nothing more is told, and its memory goes
    p4 = plan(delta_of(full, record([bind(u, "n1", job="ns/pg") for u in gang], t=3)), p3.memory, 200.0)
    assert not any(isinstance(a, MarkNotReady | MarkPending) for a in p4.actions)
    assert p4.memory.not_ready == {} and p4.memory.pending == {}


def test_queue_status_as_kai_quantities_written_only_when_changed() -> None:
    # KAI's QueueStatus fields are v1.ResourceLists: cpu, memory, nvidia.com/gpu as canonical quantities.
    q = queue("team-a", gpu_alloc=1500, gpu_fair=2250, mem_alloc=1_234_567)
    st = queue_status(q)
    assert st["allocated"] == {"nvidia.com/gpu": "1500m", "cpu": "0", "memory": "1234567"}
    assert st["fairShare"]["nvidia.com/gpu"] == "2250m"
    assert st["requested"]["nvidia.com/gpu"] == "2500m"
    assert queue_status(queue("x", gpu_alloc=3000, mem_alloc=2 * 10**9))["allocated"] == {
        "nvidia.com/gpu": "3",
        "cpu": "0",
        "memory": "2G",
    }
    assert [quantity(v, milli=True) for v in (0, 500, 1000, 4000, 2_000_000)] == ["0", "500m", "1", "4", "2k"]
    assert [quantity(v) for v in (1536, 2_500_000, 1073741824)] == ["1536", "2500k", "1073741824"]
    p1 = plan(record([], [q, queue("team-b")]), Memory(), 0)
    assert [a.name for a in p1.actions if isinstance(a, WriteQueueStatus)] == ["team-a", "team-b"]
    p2 = plan(record([], [q, queue("team-b", gpu_alloc=1000)]), p1.memory, 1)
    assert [a.name for a in p2.actions if isinstance(a, WriteQueueStatus)] == ["team-b"]


def test_a_delta_writes_only_the_changed_status_fields_of_a_queue() -> None:
    base = record([], [queue("team-a", gpu_alloc=1000), queue("team-b")], t=1)
    full = record([], [queue("team-a", gpu_alloc=2000), queue("team-b")], t=2)
    delta = delta_of(base, full)
    assert [c["name"] for c in delta.queue_changes] == ["team-a"] and delta.queues == []
    # a binder that applied the base writes team-a's changed fields and remembers its whole status
    p1 = plan(base, Memory(), 0)
    p2 = plan(delta, p1.memory, 1)
    writes = [a for a in p2.actions if isinstance(a, WriteQueueStatus)]
    assert [(w.name, sorted(w.status)) for w in writes] == [("team-a", ["allocated", "requested"])]
    assert writes[0].status["allocated"]["nvidia.com/gpu"] == "2"
    assert json.loads(p2.memory.queues["team-a"]) == queue_status(full.queues[0])
    # one restarted mid-chain (no memory) still merge-patches exactly the changed fields
    fresh = [a for a in plan(delta, Memory(), 1).actions if isinstance(a, WriteQueueStatus)]
    assert [(w.name, dict(w.status)) for w in fresh] == [(w.name, dict(w.status)) for w in writes]
    # the same delta again changes nothing
    assert not [a for a in plan(delta, p2.memory, 2).actions if isinstance(a, WriteQueueStatus)]


def test_bad_pod_references_become_invalid_not_calls() -> None:
    p = plan(record([bind("no-namespace", "n1"), pending(["ns/ok", "a/b/c"])]), Memory(), 0)
    assert [(i.target, i.reason_code) for i in p.invalid] == [
        ("no-namespace", "bad_pod_ref"),
        ("a/b/c", "bad_pod_ref"),
    ]
    assert [type(a).__name__ for a in p.actions] == ["MarkPending"]
    assert "namespace/name" in p.invalid[0].message


def test_retry_policy_backs_off_exponentially_with_a_cap() -> None:
    r = RetryPolicy(attempts=6, base_s=0.5, max_s=3.0)
    assert [r.delay(i) for i in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_event_names_are_stable_per_object_and_reason() -> None:
    a = EventSpec("Pod", "ns", "p", "Warning", "Unschedulable", "m1")
    b = EventSpec("Pod", "ns", "p", "Warning", "Unschedulable", "m2")
    c = EventSpec("Pod", "ns", "p", "Normal", "Scheduled", "m")
    assert event_name(a) == event_name(b) != event_name(c)
    assert len(event_name(EventSpec("Pod", "ns", "x" * 253, "Warning", "R", "m"))) <= 253


# --------------------------------------------------------------------------- against a real kube-apiserver


def dead_letters(log: Log) -> list[dict[str, Any]]:
    return [json.loads(r.value) for r in log.read(DEFAULT_TOPICS.deadletter, 0, 1000)]


@pytest.fixture
def api(kube_api: Any) -> Iterator[Any]:
    with kube_api.api_client() as client_:
        apply_crds(client_)
        yield client_


def test_bind_is_idempotent_annotates_devices_marks_pending_and_writes_queue_status(
    api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns = kube_namespace
    n1, n2, qa = f"{ns}-n1", f"{ns}-n2", f"{ns}-team-a"
    for n in (n1, n2):
        make_node(api, n)
    for p in ("whole", "frac", "waiting"):
        make_pod(api, ns, p, queue=qa)
    make_queue(api, qa)
    log = FileLog(tmp_path / "log")
    rec1 = record(
        [
            bind(f"{ns}/whole", n1, (0, 1), 1000),
            bind(f"{ns}/frac", n2, (3,), 500),
            pending([f"{ns}/waiting"], "PodSchedulingErrors", "no node has 4 free GPUs"),
        ],
        [queue(qa, gpu_alloc=2500, gpu_fair=3000, mem_alloc=1_500_000_000)],
        t=1000,
    )
    log.append(DEFAULT_TOPICS.decisions, b"c1", rec1.dumps())
    b = Binder(log, BinderApi(api), grace_seconds=0, retry=FAST)
    st = b.run(stop_when_idle=True)
    assert (st.records, st.bound, st.already_bound, st.dead_letters) == (1, 2, 0, 0)
    assert log.committed(DEFAULT_GROUP, DEFAULT_TOPICS.decisions) == 1
    whole, frac = read_pod(api, ns, "whole"), read_pod(api, ns, "frac")
    assert whole["spec"]["nodeName"] == n1 and frac["spec"]["nodeName"] == n2
    ann = frac["metadata"]["annotations"]
    assert (ann[ANNOTATION_GPU_DEVICES], ann[ANNOTATION_GPU_PORTION], ann[ANNOTATION_CYCLE]) == (
        "3",
        "500",
        "cycle-1000",
    )
    assert whole["metadata"]["annotations"][ANNOTATION_GPU_DEVICES] == "0,1"
    assert [e["reason"] for e in pod_events(api, ns, "whole")] == ["Scheduled"]
    waiting = read_pod(api, ns, "waiting")
    cond = next(c for c in waiting["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert cond["message"] == "PodSchedulingErrors: no node has 4 free GPUs"
    [ev] = pod_events(api, ns, "waiting")
    assert (ev["type"], ev["reason"], ev["count"]) == ("Warning", "Unschedulable", 1)
    assert "no node has 4 free GPUs" in ev["message"]
    from kubernetes import client

    q = client.CustomObjectsApi(api).get_cluster_custom_object("scheduling.run.ai", "v2", "queues", qa)
    assert q["status"]["allocated"] == {"nvidia.com/gpu": "2500m", "cpu": "0", "memory": "1500M"}
    assert q["status"]["fairShare"]["nvidia.com/gpu"] == "3"

    # Re-applying the same record (another consumer group, e.g. after a crash before the commit): no
    # error, no duplicate binding, the pending pod's one Event is updated rather than duplicated.
    again = Binder(log, BinderApi(api), group="replay", grace_seconds=0, retry=FAST).run(stop_when_idle=True)
    assert (again.bound, again.already_bound, again.conflicts, again.dead_letters) == (0, 2, 0, 0)
    [ev] = pod_events(api, ns, "waiting")
    assert ev["count"] == 2

    # The engine now wants "whole" on the other node: a conflict, reported, the pod stays where it is.
    log.append(DEFAULT_TOPICS.decisions, b"c2", record([bind(f"{ns}/whole", n2, (0,), 1000)], t=2000).dumps())
    resumed = Binder(log, BinderApi(api), grace_seconds=0, retry=FAST)  # restart: resumes at offset 1
    st2 = resumed.run(stop_when_idle=True)
    assert (st2.records, st2.conflicts, st2.dead_letters) == (1, 1, 1)
    [dl] = dead_letters(log)
    assert (dl["reason_code"], dl["source_offset"], dl["target"]) == ("bind_conflict", 1, f"{ns}/whole")
    assert f"already bound to node {n1}" in dl["message"]
    assert read_pod(api, ns, "whole")["spec"]["nodeName"] == n1
    assert "FailedBinding" in [e["reason"] for e in pod_events(api, ns, "whole")]
    # Applying the conflicting record once more does not dead-letter it twice.
    Binder(log, BinderApi(api), group="replay2", grace_seconds=0, retry=FAST).run(stop_when_idle=True)
    assert len(dead_letters(log)) == 1


def test_evict_deletes_and_a_gone_pod_is_success(api: Any, kube_namespace: str, tmp_path: Path) -> None:
    ns = kube_namespace
    node = f"{ns}-n1"
    make_node(api, node)
    make_pod(api, ns, "victim", queue=f"{ns}-b")
    log = FileLog(tmp_path / "log")
    log.append(DEFAULT_TOPICS.decisions, None, record([bind(f"{ns}/victim", node, (0,), 1000)], t=1).dumps())
    msg = f"Pod {ns}/victim was preempted by workload {ns}/big."
    log.append(
        DEFAULT_TOPICS.decisions, None, record([evict(f"{ns}/victim", node, "reclaim", msg)], t=2).dumps()
    )
    log.append(
        DEFAULT_TOPICS.decisions,
        None,
        record([evict(f"{ns}/victim", node), evict(f"{ns}/never-was", node)], t=3).dumps(),
    )
    st = Binder(log, BinderApi(api), grace_seconds=0, retry=FAST).run(stop_when_idle=True)
    assert (st.records, st.bound, st.evicted, st.already_gone, st.dead_letters) == (3, 1, 1, 2, 0)
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as gone:
        client.CoreV1Api(api).read_namespaced_pod("victim", ns)
    assert gone.value.status == 404
    reasons = {e["reason"]: e for e in pod_events(api, ns, "victim")}
    assert "preempted by workload" in reasons["Preempted"]["message"]


def test_pending_events_are_rate_limited_and_updated_when_the_reason_changes(
    api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns = kube_namespace
    make_pod(api, ns, "p", queue=f"{ns}-a")
    log = FileLog(tmp_path / "log")
    clock = [0.0]
    b = Binder(log, BinderApi(api), event_interval_s=60, retry=FAST, clock=lambda: clock[0])
    for t, (reason, msg) in enumerate(
        [
            ("PodSchedulingErrors", "m1"),
            ("PodSchedulingErrors", "m1"),
            ("PodSchedulingErrors", "m2"),
            ("OverLimit", "over"),
        ]
    ):
        clock[0] = float(t)
        log.append(
            DEFAULT_TOPICS.decisions, None, record([pending([f"{ns}/p"], reason, msg)], t=t + 1).dumps()
        )
        b.run(stop_when_idle=True)
    st = b.stats
    # conditions m1 and over (m2 changed only the message, within the interval); events: first + reason change
    assert (st.pending_conditions, st.pending_events) == (2, 2)
    [ev] = pod_events(api, ns, "p")
    assert (ev["count"], ev["message"]) == (2, "OverLimit: over")
    cond = next(c for c in read_pod(api, ns, "p")["status"]["conditions"] if c["type"] == "PodScheduled")
    assert cond["message"] == "OverLimit: over"


def test_a_waiting_gang_gets_one_notready_event_on_its_podgroup_and_its_pods_none(
    api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kube_namespace
    apply_crds(api)
    make_podgroup(api, ns, "pg", f"{ns}-a", 3)
    for i in range(2):
        make_pod(api, ns, f"w{i}", queue=f"{ns}-a")
    gang = [f"{ns}/w0", f"{ns}/w1"]
    log = FileLog(tmp_path / "log")
    clock = [0.0]
    b = Binder(log, BinderApi(api), event_interval_s=60, retry=FAST, clock=lambda: clock[0])
    for t, msg in enumerate(["currently 1 exist", "currently 2 exist"]):
        clock[0] = float(t)
        rec = record(
            [
                pending(
                    gang,
                    "NotReady",
                    f"Job is not ready for scheduling. Waiting for 3 pods, {msg}",
                    job=f"{ns}/pg",
                )
            ],
            t=t + 1,
        )
        log.append(DEFAULT_TOPICS.decisions, None, rec.dumps())
        b.run(stop_when_idle=True)
    assert (b.stats.not_ready_events, b.stats.pending_conditions, b.stats.pending_events) == (1, 0, 0)
    [ev] = pod_events(api, ns, "pg")
    pg = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", ns, "podgroups", "pg"
    )
    assert ev["involvedObject"] == {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "name": "pg",
        "namespace": ns,
        "uid": pg["metadata"]["uid"],
    }
    assert (ev["type"], ev["reason"]) == ("Normal", "NotReady")
    assert ev["message"] == "Job is not ready for scheduling. Waiting for 3 pods, currently 1 exist"
    for i in range(2):
        assert pod_events(api, ns, f"w{i}") == []
        conds = read_pod(api, ns, f"w{i}").get("status", {}).get("conditions") or []
        assert not [c for c in conds if c["type"] == "PodScheduled"]


def test_permanent_failures_are_dead_lettered_and_an_unreachable_server_blocks_the_commit(
    kube_api: Any, api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kube_namespace
    node = f"{ns}-n1"
    make_node(api, node)
    make_pod(api, ns, "p", queue=f"{ns}-a")
    log = FileLog(tmp_path / "log")
    log.append(DEFAULT_TOPICS.decisions, None, b"{not a cycle record")
    log.append(DEFAULT_TOPICS.decisions, None, record([bind(f"{ns}/p", node)], t=1).dumps())

    # The API server cannot be reached: retried with backoff, then left uncommitted.
    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # discard port: connection refused
    slept: list[float] = []
    with client.ApiClient(cfg) as down:
        st = Binder(log, BinderApi(down, timeout_s=2), retry=FAST, sleep=slept.append).run(
            stop_when_idle=True
        )
    assert st.unavailable == 1 and st.records == 1  # the bad record was dead-lettered and committed
    assert log.committed(DEFAULT_GROUP, DEFAULT_TOPICS.decisions) == 1
    assert slept[:2] == [0.01, 0.02]  # exponential backoff
    [bad] = dead_letters(log)
    assert (bad["reason_code"], bad["source_offset"]) == ("bad_record", 0)

    # A user without RBAC rights: 403 is permanent, dead-lettered once, and the record is committed.
    with kube_api.api_client(token=kube_api.user_token) as forbidden:
        st = Binder(log, BinderApi(forbidden), retry=FAST).run(stop_when_idle=True)
    assert (st.records, st.bound, st.dead_letters, st.events_failed) == (1, 0, 1, 1)
    dl = dead_letters(log)[-1]
    assert dl["reason_code"] == "bind_rejected" and "403" in dl["message"]
    assert log.committed(DEFAULT_GROUP, DEFAULT_TOPICS.decisions) == 2
    assert "nodeName" not in read_pod(api, ns, "p")["spec"]


def test_cli_reports_a_bad_kubeconfig(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from analytics.cli import main

    rc = main(
        [
            "bind",
            "--log",
            str(tmp_path / "log"),
            "--kubeconfig",
            str(tmp_path / "missing"),
            "--stop-when-idle",
        ]
    )
    assert rc == 2
    assert capsys.readouterr().err.strip() == f"bind: no kubeconfig file at {tmp_path / 'missing'}"
    garbled = tmp_path / "garbled"
    garbled.write_text("clusters: [")
    assert (
        main(["bind", "--log", str(tmp_path / "log"), "--kubeconfig", str(garbled), "--stop-when-idle"]) == 2
    )
    assert "bind: cannot load a Kubernetes configuration" in capsys.readouterr().err


def test_cli_applies_the_log_and_exits_when_idle(
    kube_api: Any, api: Any, kube_namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from analytics.cli import main

    ns = kube_namespace
    make_node(api, f"{ns}-n1")
    make_pod(api, ns, "p", gpus=1)
    with FileLog(tmp_path / "log") as log:
        log.append(DEFAULT_TOPICS.decisions, None, record([bind(f"{ns}/p", f"{ns}-n1", (4,), 1000)]).dumps())
    argv = [
        "bind",
        "--log",
        str(tmp_path / "log"),
        "--kubeconfig",
        str(kube_api.kubeconfig),
        "--stop-when-idle",
    ]
    assert main(argv) == 0
    assert "1 records applied, 1 bound" in capsys.readouterr().out
    pod = read_pod(api, ns, "p")
    assert (
        pod["spec"]["nodeName"] == f"{ns}-n1"
        and pod["metadata"]["annotations"][ANNOTATION_GPU_DEVICES] == "4"
    )
    assert main(argv) == 0  # a second run resumes after the committed record: nothing to do
    assert "0 records applied" in capsys.readouterr().out


class _Crash(BaseException):
    """The process dies (SIGKILL-like): nothing in the binder catches it."""


class _CrashAfterBinds:
    """The real client, with the process dying right after the ``n``-th successful bind."""

    def __init__(self, inner: BinderApi, n: int) -> None:
        self.inner, self.n = inner, n

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def bind(self, namespace: str, name: str, node: str, annotations: Any) -> None:
        self.inner.bind(namespace, name, node, annotations)
        self.n -= 1
        if self.n == 0:
            raise _Crash


def test_crash_mid_record_then_restart_loses_and_duplicates_nothing(
    api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns = kube_namespace
    node = f"{ns}-n1"
    make_node(api, node)
    for p in ("p0", "p1", "p2"):
        make_pod(api, ns, p, gpus=1)
    log = FileLog(tmp_path / "log")
    log.append(
        DEFAULT_TOPICS.decisions,
        None,
        record([bind(f"{ns}/p{i}", node, (i,), 1000) for i in range(3)], t=1).dumps(),
    )
    with pytest.raises(_Crash):
        Binder(log, _CrashAfterBinds(BinderApi(api), 2), retry=FAST).run(stop_when_idle=True)  # type: ignore[arg-type]
    assert log.committed(DEFAULT_GROUP, DEFAULT_TOPICS.decisions) == 0  # the record was not fully applied
    assert [("nodeName" in read_pod(api, ns, p)["spec"]) for p in ("p0", "p1", "p2")] == [True, True, False]
    st = Binder(log, BinderApi(api), retry=FAST).run(stop_when_idle=True)
    assert (st.records, st.bound, st.already_bound, st.conflicts, st.dead_letters) == (1, 1, 2, 0, 0)
    assert [read_pod(api, ns, p)["spec"]["nodeName"] for p in ("p0", "p1", "p2")] == [node] * 3
    assert log.committed(DEFAULT_GROUP, DEFAULT_TOPICS.decisions) == 1
