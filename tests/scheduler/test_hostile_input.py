"""Nothing a cluster or a user sends stops the scheduler, and the audit store loads exactly what it folded.

Targeted cases (a device the node lacks, a queue cycle, events out of order, a tick going back, a number
past every reader's range) and a fuzzer: contract-valid event streams with values at the contract's limits
(:data:`ingest.events.LIMITS`), mixed with events just past them, driven through the scheduler service, the
audit sink and ``replay --verify``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analytics.audit.store import AuditStore, sink_from_log
from analytics.rerun.replay import replay
from ingest import events as ev
from ingest.backends import open_log
from ingest.events import LIMITS, dump_event, parse_event
from ingest.log import DEFAULT_TOPICS, Log
from scheduler.engine.session import Session
from scheduler.engine.state import ClusterState, Job, Node, Pod, PodRequest, PodStatus, Queue, fold
from scheduler.engine.state import default_queue_resources as resources
from scheduler.service import Service

T = DEFAULT_TOPICS
CYCLE_BOUND_S = 10.0  # no step (fold + cycle) of the fuzzed streams may take longer, on a loaded CI machine


class Run:
    """A service run over a fresh FileLog (:func:`_run`)."""

    def __init__(self, path: Path, log: Log, svc: Service, dead: dict[int, dict[str, Any]], slowest: float):
        self.path, self.log, self.svc, self.dead, self.slowest = path, log, svc, dead, slowest


def _run(raws: list[bytes], batch_size: int = 5, root: str | None = None) -> Run:
    """Append ``raws`` to a fresh log (under ``root``) and run the service over it: the dead letters by
    events offset, and the slowest step in seconds. The caller closes ``run.log``."""
    d = tempfile.mkdtemp(prefix="hostile-", dir=root)
    log = open_log(d)
    log.append_many(T.events, [(b"k", r) for r in raws])
    svc = Service(log, T, batch_size=batch_size, sleep=lambda _s: None)
    slowest = 0.0
    svc.recover()
    while True:
        t0 = time.perf_counter()
        more = svc.step()
        slowest = max(slowest, time.perf_counter() - t0)
        if not more:
            break
    dead = {}
    for r in log.scan(T.deadletter):
        d_ = json.loads(r.value)
        dead[d_["source_offset"]] = d_
    return Run(Path(d), log, svc, dead, slowest)


def _node(name: str, gpus: int, at: int) -> bytes:
    return dump_event(
        ev.NodeUpserted(name=name, cpu_millicores=64_000, memory_bytes=2**38, gpus=gpus, at_ms=at)
    )


def _setup(at: int = 1) -> list[bytes]:
    return [
        _node("n1", 4, at),
        dump_event(ev.QueueUpserted(name="q", at_ms=at)),
        dump_event(ev.PodGroupUpserted(name="g", namespace="ns", queue="q", created_at_ms=at, at_ms=at)),
    ]


def _pod(name: str, gpus: int, at: int) -> bytes:
    return dump_event(
        ev.PodSubmitted(
            name=name,
            namespace="ns",
            pod_group="g",
            requests=ev.PodRequests(gpus=gpus),
            created_at_ms=at,
            at_ms=at,
        )
    )


def _bound(name: str, node: str, devices: list[int], at: int) -> bytes:
    return dump_event(ev.PodBound(name=name, namespace="ns", node=node, gpu_devices=devices, at_ms=at))


# --------------------------------------------------------------------------- targeted cases


def test_a_device_index_the_node_lacks_is_dropped_and_the_scheduler_keeps_running() -> None:
    """A bind naming device 7 of a 4-GPU node, and a node shrinking under its running pods."""
    raws = [
        *_setup(),
        _pod("a", 1, 2),
        _bound("a", "n1", [7], 3),  # a user-set or stale annotation
        _pod("b", 2, 4),
        _bound("b", "n1", [2, 3], 5),
        _node("n1", 1, 6),  # the node lost three GPUs under b
        _pod("c", 1, 7),
    ]
    run = _run(raws, batch_size=1)
    log, svc, dead = run.log, run.svc, run.dead
    try:
        assert dead == {}
        pods = {p.uid: p for p in svc.folder.snapshot().pods}
        assert pods["ns/a"].gpu_devices == () and pods["ns/b"].gpu_devices == ()
        assert svc.stats.cycles == len(raws)  # a cycle after every event: none crashed
        assert replay(run.path).mismatches == 0
    finally:
        log.close()


def test_a_session_never_indexes_past_a_node_s_devices() -> None:
    """The engine's guard for states not built by the fold (scenarios): devices are dropped there too."""
    node = Node("n", cpu=1000, memory=1000, gpus=2)
    queue = Queue("q", None, resources())
    job = Job("ns/g", "g", "q")
    pod = Pod("ns/p", "p", "ns/g", PodRequest(gpus=1), PodStatus.RUNNING, node="n", gpu_devices=(1,))
    state = ClusterState(nodes=(node,), queues=(queue,), jobs=(job,), pods=(pod,))
    Session(state)  # in range: fine
    # Queues naming each other as parent: dropped with their subtree, the session still opens.
    loop = (Queue("a", "b", resources()), Queue("b", "a", resources()), Queue("c", "a", resources()))
    ssn = Session(ClusterState(nodes=(node,), queues=(queue, *loop), jobs=(job,), pods=(pod,)))
    assert sorted(ssn.queues) == ["q"]


def test_a_queue_parent_cycle_is_dead_lettered() -> None:
    raws = [
        dump_event(ev.QueueUpserted(name="a", at_ms=1)),
        dump_event(ev.QueueUpserted(name="b", parent="a", at_ms=2)),
        dump_event(ev.QueueUpserted(name="a", parent="b", at_ms=3)),  # a -> b -> a
        _node("n1", 1, 4),
    ]
    run = _run(raws)
    log, svc, dead = run.log, run.svc, run.dead
    try:
        assert list(dead) == [2] and dead[2]["reason_code"] == "fold_rejected"
        assert "cycle in the queue hierarchy" in dead[2]["message"]
        assert {q.name: q.parent for q in svc.folder.snapshot().queues} == {"a": None, "b": "a"}
    finally:
        log.close()


def test_a_bind_before_its_pod_is_held_and_the_pod_is_never_bound_twice() -> None:
    raws = [*_setup(), _bound("a", "n1", [0], 2), _pod("a", 1, 3), _pod("b", 1, 4)]
    run = _run(raws, batch_size=1)
    log, svc, dead = run.log, run.svc, run.dead
    try:
        assert dead == {}
        a = {p.uid: p for p in svc.folder.snapshot().pods}["ns/a"]
        assert (a.status, a.node, a.gpu_devices) == (PodStatus.RUNNING, "n1", (0,))
        binds = [
            d
            for r in log.scan(T.decisions)
            for d in json.loads(r.value).get("decisions", [])
            if d.get("kind") == "Bind"
        ]
        assert "ns/a" not in {p for d in binds for p in d.get("pods", [d.get("pod")])}
        # b is bound onto a device a does not hold.
        assert replay(run.path).mismatches == 0
    finally:
        log.close()


def test_a_tick_that_goes_back_is_dead_lettered() -> None:
    raws = [*_setup(at=100), dump_event(ev.ClockTick(at_ms=50)), dump_event(ev.ClockTick(at_ms=150))]
    run = _run(raws)
    log, svc, dead = run.log, run.svc, run.dead
    try:
        assert list(dead) == [3] and "goes back" in dead[3]["message"]
        assert svc.folder.now_ms == 150
    finally:
        log.close()


@pytest.mark.parametrize(
    "raw",
    [
        b'{"type":"ClockTick","at_ms":' + b"9" * 4400 + b"}",  # past Python's int parsing limit
        b'{"type":"NodeUpserted","at_ms":1,"name":"n","cpu_millicores":1,"memory_bytes":1,"gpus":1000000}',
        b'{"type":"NodeUpserted","at_ms":1,"name":"n","cpu_millicores":1,"memory_bytes":1,"gpu_memory_mib":'
        + str(2**63 - 1).encode()
        + b"}",
        b'{"type":"ClockTick","at_ms":' + str(2**63 - 1).encode() + b"}",
        b'{"type":"PodGroupUpserted","at_ms":1,"name":"g","namespace":"ns","queue":"q","created_at_ms":1,'
        b'"priority":' + str(10**100).encode() + b"}",
        b'{"type":"NodeRemoved","at_ms":1,"name":"n\\u0000x"}',
        b'{"type":"PodDeleted","at_ms":1,"name":"p","namespace":"a/b"}',
        b'{"type":"NodeUpserted","at_ms":1,"name":"n","cpu_millicores":1,"memory_bytes":1,"labels":{"k":"'
        + b"v" * 100_000
        + b'"}}',
        b'{"type":"NodeRemoved","at_ms":1,"name":"a","name":"b"}',
    ],
    ids=["4400-digits", "gpus-1e6", "gpu-mem-int64", "at-int64", "priority-1e100", "nul", "slash-ns",
         "100k-label", "dup-key"],
)  # fmt: skip
def test_values_past_the_contract_are_dead_lettered_and_never_loaded(raw: bytes, tmp_path: Path) -> None:
    raws = [*_setup(), raw, dump_event(ev.ClockTick(at_ms=5))]
    run = _run(raws)
    log, dead = run.log, run.dead
    try:
        assert list(dead) == [3] and dead[3]["reason_code"] in ("bad_json", "schema")
        with AuditStore(tmp_path / "a.duckdb") as store:
            stats = sink_from_log(store, log, T)
            stored = {r[0] for r in store.con.execute('SELECT "offset" FROM events').fetchall()}
        assert stored == {0, 1, 2, 4} and [o for o, _ in stats.events_refused] == [3]
        assert replay(run.path).mismatches == 0
    finally:
        log.close()


def test_sigterm_abandons_a_running_cycle() -> None:
    """``interrupt`` (the SIGTERM handler) raises inside a cycle's computation, and nothing is written."""
    raws = [*_setup(), _pod("a", 1, 2)]
    d = tempfile.mkdtemp(prefix="hostile-")
    log = open_log(d)
    log.append_many(T.events, [(b"k", r) for r in raws])
    svc = Service(log, T, sleep=lambda _s: None)
    compute = svc._compute

    def slow(*a: Any) -> Any:
        svc.interrupt()  # the signal arrives mid-cycle
        return compute(*a)

    svc._compute = slow  # type: ignore[method-assign,assignment]
    try:
        with pytest.raises(KeyboardInterrupt):
            svc.run()
        assert log.end_offset(T.decisions) == 0
        again = Service(log, T, sleep=lambda _s: None).run(stop_when_idle=True)  # a restart redoes it
        assert again.cycles_appended == 1
    finally:
        log.close()


# --------------------------------------------------------------------------- the fuzzer

NODES = ("n0", "n1", "n2.rack-a")
QUEUES = ("q0", "q1", "q2")
NAMESPACES = ("ns", "team-b")
PODS = ("p0", "p1", "p2", "p3", "p4")
GROUPS = ("g0", "g1")


def _edge(hi: int, lo: int = 0) -> st.SearchStrategy[int]:
    """Integers in [lo, hi], often exactly at an end."""
    return st.one_of(
        st.sampled_from([lo, min(lo + 1, hi), hi - 1 if hi > lo else hi, hi]), st.integers(lo, hi)
    )


# Every strategy is built once, here: building one inside a draw costs hypothesis a validation each time,
# which made generating the streams slower than running them.
TIMES = _edge(LIMITS.TIME_MS)
PRIORITY = _edge(LIMITS.INT32_MAX, LIMITS.INT32_MIN)
OPT_PRIORITY = st.one_of(st.none(), PRIORITY)
CPU = _edge(LIMITS.CPU_MILLI)
MEMORY = _edge(LIMITS.MEMORY_BYTES)
GPUS = _edge(LIMITS.GPUS)
GPU_MEMORY = _edge(LIMITS.GPU_MEMORY_MIB, 1)
LABEL_KEYS = st.sampled_from(["kubernetes.io/hostname", "zone", "a" * 63, "x.example.com/" + "k" * 63])
LABEL_VALUES = st.sampled_from(["", "v", "A_b.c-9", "v" * 63])
LABELS = st.dictionaries(LABEL_KEYS, LABEL_VALUES, max_size=2)
OPT_QUOTA = st.one_of(st.none(), _edge(LIMITS.QUOTA))
WEIGHTS = st.sampled_from([0.0, 1.0, LIMITS.WEIGHT])
SHAPES = st.sampled_from(["whole", "fraction", "memory", "cpu"])
KINDS = st.sampled_from(
    ["node", "node", "queue", "queue", "group", "pod", "pod", "pod", "bound", "bound", "release", "finish",
     "delete", "tick", "node_removed", "queue_deleted", "group_deleted"]
)  # fmt: skip
PARENTS = {q: st.one_of(st.none(), st.sampled_from([p for p in QUEUES if p != q])) for q in QUEUES}
DEVICES = st.lists(_edge(LIMITS.GPUS - 1), max_size=3, unique=True)
S_NODES, S_QUEUES, S_NAMESPACES, S_PODS, S_GROUPS = map(
    st.sampled_from, (NODES, QUEUES, NAMESPACES, PODS, GROUPS)
)
PHASES: st.SearchStrategy[Literal["Succeeded", "Failed"]] = st.sampled_from(["Succeeded", "Failed"])
MILLI, FRACTION_DEVICES = _edge(1000, 1), _edge(LIMITS.GPUS, 1)
COUNT = _edge(LIMITS.INT32_MAX, 1)
OPT_TIMES = st.one_of(st.none(), TIMES)
OPT_GPU_MEMORY = st.one_of(st.none(), GPU_MEMORY)
MAX_PODS = _edge(LIMITS.MAX_PODS)


@st.composite
def _queue_resource(draw: st.DrawFn) -> ev.QueueResource:
    quota = draw(OPT_QUOTA)
    limit = draw(OPT_QUOTA)
    if quota is not None and limit is not None and quota > limit:
        quota, limit = limit, quota
    return ev.QueueResource(quota=quota, limit=limit, over_quota_weight=draw(WEIGHTS))


QUEUE_RESOURCE = _queue_resource()


@st.composite
def _requests(draw: st.DrawFn) -> ev.PodRequests:
    shape = draw(SHAPES)
    if shape == "whole":
        return ev.PodRequests(cpu_millicores=draw(CPU), memory_bytes=draw(MEMORY), gpus=draw(GPUS))
    if shape == "fraction":
        return ev.PodRequests(gpu_fraction_milli=draw(MILLI), gpu_fraction_devices=draw(FRACTION_DEVICES))
    if shape == "memory":
        return ev.PodRequests(gpu_memory_mib=draw(GPU_MEMORY))
    return ev.PodRequests(cpu_millicores=draw(CPU), memory_bytes=draw(MEMORY))


REQUESTS = _requests()


@st.composite
def _event(draw: st.DrawFn) -> ev.EventBase:
    """One contract-valid event about a small universe of objects, with values at the contract's limits."""
    at = draw(TIMES)
    kind = draw(KINDS)
    if kind == "node":
        return ev.NodeUpserted(
            name=draw(S_NODES),
            cpu_millicores=draw(CPU),
            memory_bytes=draw(MEMORY),
            gpus=draw(GPUS),
            gpu_memory_mib=draw(OPT_GPU_MEMORY),
            max_pods=draw(MAX_PODS),
            labels=draw(LABELS),
            at_ms=at,
        )
    if kind == "queue":
        return ev.QueueUpserted(
            name=(name := draw(S_QUEUES)),
            parent=draw(PARENTS[name]),
            priority=draw(PRIORITY),
            resources=ev.QueueResources(gpu=draw(QUEUE_RESOURCE), cpu=draw(QUEUE_RESOURCE)),
            preempt_min_runtime_ms=draw(OPT_TIMES),
            at_ms=at,
        )
    if kind == "tick":
        return ev.ClockTick(at_ms=at)
    if kind == "node_removed":
        return ev.NodeRemoved(name=draw(S_NODES), at_ms=at)
    if kind == "queue_deleted":
        return ev.QueueDeleted(name=draw(S_QUEUES), at_ms=at)
    ns = draw(S_NAMESPACES)
    if kind == "group":
        return ev.PodGroupUpserted(
            name=draw(S_GROUPS),
            namespace=ns,
            queue=draw(S_QUEUES),
            min_member=draw(COUNT),
            priority=draw(OPT_PRIORITY),
            created_at_ms=draw(TIMES),
            at_ms=at,
        )
    if kind == "group_deleted":
        return ev.PodGroupDeleted(name=draw(S_GROUPS), namespace=ns, at_ms=at)
    pod = draw(S_PODS)
    if kind == "pod":
        return ev.PodSubmitted(
            name=pod,
            namespace=ns,
            pod_group=draw(S_GROUPS),
            requests=draw(REQUESTS),
            task_priority=draw(PRIORITY),
            created_at_ms=draw(TIMES),
            at_ms=at,
        )
    if kind == "bound":
        return ev.PodBound(name=pod, namespace=ns, node=draw(S_NODES), gpu_devices=draw(DEVICES), at_ms=at)
    if kind == "release":
        return ev.PodReleasing(name=pod, namespace=ns, reason="evicted", at_ms=at)
    if kind == "finish":
        return ev.PodFinished(name=pod, namespace=ns, phase=draw(PHASES), at_ms=at)
    return ev.PodDeleted(name=pod, namespace=ns, at_ms=at)


# Just past the contract: each must be dead-lettered with a reason, never folded, never loaded.
PAST: list[bytes] = [
    b'{"type":"ClockTick","at_ms":' + str(LIMITS.TIME_MS + 1).encode() + b"}",
    b'{"type":"NodeUpserted","at_ms":1,"name":"n0","cpu_millicores":1,"memory_bytes":1,"gpus":'
    + str(LIMITS.GPUS + 1).encode()
    + b"}",
    b'{"type":"PodSubmitted","at_ms":1,"name":"p0","namespace":"ns","pod_group":"g0","created_at_ms":1,'
    b'"task_priority":' + str(LIMITS.INT32_MAX + 1).encode() + b"}",
    b'{"type":"QueueUpserted","at_ms":1,"name":"q0","resources":{"gpu":{"quota":' + str(LIMITS.QUOTA + 1).encode()
    + b"}}}",
    b'{"type":"PodBound","at_ms":1,"name":"p0","namespace":"ns","node":"n0","gpu_devices":[256]}',
    b'{"type":"NodeRemoved","at_ms":1,"name":"N0"}',
    b'{"type":"PodDeleted","at_ms":1,"name":"p0","namespace":"ns","namespace":"team-b"}',
    b'{"type":"ClockTick","at_ms":' + b"1" * 5000 + b"}",
]  # fmt: skip

# 8 examples of 250-300 events: at least 2,000 events through run, sink and replay per CI run.
EXAMPLES, MIN_EVENTS, MAX_EVENTS = 8, 250, 300
STREAM = st.lists(
    st.one_of(_event().map(dump_event), st.sampled_from(PAST)), min_size=MIN_EVENTS, max_size=MAX_EVENTS
)
# The fuzzer's logs live in memory where there is a tmpfs: it measures the product's work per event, not
# the disk's fsync latency (a cycle appends and commits with fsync, which the other tests cover).
SCRATCH = "/dev/shm" if Path("/dev/shm").is_dir() else None


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(STREAM)
def test_fuzzed_streams_never_stop_the_scheduler_and_the_store_equals_the_fold(raws: list[bytes]) -> None:
    run = _run(raws, root=SCRATCH)
    log, svc, dead, slowest = run.log, run.svc, run.dead, run.slowest
    try:
        assert slowest < CYCLE_BOUND_S
        # Every record is folded or dead-lettered (with a reason), exactly once.
        assert svc.stats.events_folded + len(dead) == len(raws)
        assert all(d["reason_code"] and d["message"] for d in dead.values())
        past = {i for i, r in enumerate(raws) if r in PAST}
        assert past <= set(dead)
        for i in set(dead) - past:  # a valid event refused: only by the fold's rules
            assert dead[i]["reason_code"] == "fold_rejected", dead[i]
        # The state the service holds is the fold of exactly the records it did not dead-letter.
        folded = [parse_event(r) for i, r in enumerate(raws) if i not in dead]
        assert svc.folder.snapshot().pods == fold(folded).pods
        # The store holds exactly the events the scheduler folded (up to its last cycle: all of them).
        with tempfile.TemporaryDirectory() as d, AuditStore(Path(d) / "a.duckdb") as store:
            sink_from_log(store, log, T)
            stored = {r[0] for r in store.con.execute('SELECT "offset" FROM events').fetchall()}
        last = svc.stats.last_cycle.events_offset if svc.stats.last_cycle is not None else -1
        assert stored == {i for i in range(len(raws)) if i not in dead and i <= last}
        assert last == max((i for i in range(len(raws)) if i not in dead), default=-1)
        assert replay(run.path).mismatches == 0
    finally:
        log.close()
        shutil.rmtree(run.path, ignore_errors=True)
