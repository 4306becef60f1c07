"""``hourglass whatif`` on the log of a running service: an embedded log directory and real Kafka topics.

The recordings are made by the real scheduler service (:class:`scheduler.service.Service`) and the real
fair-share service (:class:`fairshare.service.FairshareService`) on a real log (a FileLog directory, or a
real Kafka broker); the cluster around them (users submitting, the binder binding after a delay, kubelets
ending pods, the controller re-creating evicted pods) is played by :class:`Cluster` below, on logical time,
independently of the what-if's own driver.
"""

from __future__ import annotations

import functools
import heapq
import json
import random
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from analytics.cli import main
from analytics.rerun.whatif import parse_change, rerun_service
from analytics.rerun.whatif import service_outcomes as recorded_outcomes
from analytics.rerun.whatif_service import ServiceLogError, load_service_recording
from fairshare.config import FairshareConfig
from fairshare.service import FairshareService
from ingest import events as ev
from ingest.backends import open_log
from ingest.events import dump_event
from ingest.log import Log, Topics
from scheduler.engine.record.decisions import CycleRecord
from scheduler.engine.record.delta import DeltaReader
from scheduler.engine.session import SessionConfig
from scheduler.service import Service

MIN = 60_000
H = 3_600_000


@dataclass(frozen=True)
class Job:
    queue: str
    name: str
    at_ms: int
    runtime_ms: int
    gpus: int
    pods: int = 1


class Cluster:
    """Users, binder, kubelets and controllers around the real services, on logical time: each instant's
    events are appended, the fair-share service publishes when a refresh is due, the scheduler steps until
    idle; a Bind becomes PodBound after ``bind_ms`` (if the pod is still pending), an Evict a PodReleasing
    after ``evict_ms``, the evicted pod ends ``grace_ms`` later and is re-created pending."""

    def __init__(
        self,
        log: Log,
        topics: Topics,
        config: SessionConfig,
        fairshare: FairshareConfig | None,
        *,
        bind_ms: int = 2_000,
        evict_ms: int = 1_000,
        grace_ms: int = 30_000,
    ) -> None:
        self.log, self.topics = log, topics
        self.service = Service(log, topics, config, batch_size=1000)
        self.fair = FairshareService(log, fairshare, topics=topics) if fairshare is not None else None
        self.refresh_ms = fairshare.refresh_s * 1000 if fairshare is not None else 0
        self.next_refresh = 0
        self.bind_ms, self.evict_ms, self.grace_ms = bind_ms, evict_ms, grace_ms
        self.heap: list[tuple[int, int, Callable[[], None]]] = []
        self.seq = 0
        self.reader = DeltaReader()
        self.read_at = 0
        self.state: dict[str, str] = {}
        self.incarnation: dict[str, int] = defaultdict(int)
        self.spec: dict[str, ev.PodSubmitted] = {}
        self.runtime: dict[str, int] = {}
        self.live: dict[str, set[str]] = defaultdict(set)

    def at(self, t: int, fn: Callable[[], None]) -> None:
        heapq.heappush(self.heap, (t, self.seq, fn))
        self.seq += 1

    def emit(self, e: ev.EventBase) -> None:
        self.log.append(self.topics.events, e.uid.encode(), dump_event(e))

    def submit(self, job: Job) -> None:
        def arrive() -> None:
            self.emit(
                ev.PodGroupUpserted(
                    at_ms=job.at_ms, name=job.name, namespace=job.queue, queue=job.queue,
                    min_member=job.pods, created_at_ms=job.at_ms,
                )
            )  # fmt: skip
            for k in range(job.pods):
                name = job.name if job.pods == 1 else f"{job.name}-{k}"
                pod = ev.PodSubmitted(
                    at_ms=job.at_ms, name=name, namespace=job.queue, pod_group=job.name, queue=job.queue,
                    requests=ev.PodRequests(gpus=job.gpus, cpu_millicores=1000, memory_bytes=2**30),
                    created_at_ms=job.at_ms,
                )  # fmt: skip
                self.spec[pod.uid] = pod
                self.runtime[pod.uid] = job.runtime_ms
                self.live[f"{job.queue}/{job.name}"].add(pod.uid)
                self.state[pod.uid] = "pending"
                self.emit(pod)

        self.at(job.at_ms, arrive)

    def bind(self, uid: str, node: str, devices: list[int], t: int) -> None:
        inc = self.incarnation[uid]
        ns, _, name = uid.partition("/")

        def bound() -> None:
            if self.state[uid] != "pending" or self.incarnation[uid] != inc:
                return
            self.state[uid] = "running"
            self.emit(
                ev.PodBound(at_ms=t + self.bind_ms, name=name, namespace=ns, node=node, gpu_devices=devices)
            )
            end = t + self.bind_ms + self.runtime[uid]
            self.at(end, functools.partial(self.finish, uid, end, self.incarnation[uid]))

        self.at(t + self.bind_ms, bound)

    def finish(self, uid: str, t: int, inc: int) -> None:
        if self.state[uid] != "running" or self.incarnation[uid] != inc:
            return
        ns, _, name = uid.partition("/")
        self.state[uid] = "done"
        self.emit(ev.PodFinished(at_ms=t, name=name, namespace=ns, phase="Succeeded"))
        self.emit(ev.PodDeleted(at_ms=t, name=name, namespace=ns))
        group = f"{ns}/{self.spec[uid].pod_group}"
        self.live[group].discard(uid)
        if not self.live[group]:
            self.emit(ev.PodGroupDeleted(at_ms=t, name=self.spec[uid].pod_group, namespace=ns))

    def evict(self, uid: str, t: int) -> None:
        ns, _, name = uid.partition("/")
        inc = self.incarnation[uid]

        def releasing() -> None:
            if self.state[uid] != "running" or self.incarnation[uid] != inc:
                return
            self.incarnation[uid] += 1
            self.state[uid] = "releasing"
            at = t + self.evict_ms
            self.emit(ev.PodReleasing(at_ms=at, name=name, namespace=ns, reason="eviction"))

            def gone() -> None:
                end = at + self.grace_ms
                self.emit(ev.PodFinished(at_ms=end, name=name, namespace=ns, phase="Failed"))
                self.emit(ev.PodDeleted(at_ms=end, name=name, namespace=ns))
                self.state[uid] = "pending"  # the controller re-creates it, same name and creation time
                self.emit(self.spec[uid].model_copy(update={"at_ms": end}))

            self.at(at + self.grace_ms, gone)

        self.at(t + self.evict_ms, releasing)

    def delete(self, uid: str, t: int) -> None:
        """The pod's user deletes it at *t*: gone at once if pending, else it terminates for ``grace_ms``."""
        ns, _, name = uid.partition("/")

        def go() -> None:
            group = f"{ns}/{self.spec[uid].pod_group}"
            if self.state[uid] == "pending":
                self.state[uid] = "deleted"
                self.live[group].discard(uid)
                self.emit(ev.PodDeleted(at_ms=t, name=name, namespace=ns))
            elif self.state[uid] == "running":
                self.incarnation[uid] += 1
                self.state[uid] = "deleted"
                self.emit(ev.PodReleasing(at_ms=t, name=name, namespace=ns, reason="deletionTimestamp set"))

                def gone() -> None:
                    end = t + self.grace_ms
                    self.emit(ev.PodFinished(at_ms=end, name=name, namespace=ns, phase="Failed"))
                    self.emit(ev.PodDeleted(at_ms=end, name=name, namespace=ns))
                    self.live[group].discard(uid)

                self.at(t + self.grace_ms, gone)

        self.at(t, go)

    def decisions(self) -> list[CycleRecord]:
        out = []
        while self.read_at < self.log.end_offset(self.topics.decisions):
            for r in self.log.read(self.topics.decisions, self.read_at, 100_000):
                self.read_at = r.offset + 1
                full = self.reader.feed(CycleRecord.loads(r.value))
                if full is not None:
                    out.append(full)
        return out

    def run(
        self, nodes: list[ev.NodeUpserted], queues: list[ev.QueueUpserted], jobs: list[Job], end: int
    ) -> None:
        for e in [*nodes, *queues]:
            self.at(0, functools.partial(self.emit, e))
        for job in jobs:
            self.submit(job)
        while self.heap and self.heap[0][0] <= end:
            now = self.heap[0][0]
            while self.heap and self.heap[0][0] == now:
                heapq.heappop(self.heap)[2]()
            if self.fair is not None and now >= self.next_refresh:
                self.fair.step()
                self.next_refresh = now + self.refresh_ms
            # On Kafka a read may stop at a stale cached end: step until the service has read everything.
            svc, topics = self.service, self.topics
            while svc.step() or svc.position < self.log.end_offset(topics.events):
                pass
            for rec in self.decisions():
                evicted = {d.pod for d in rec.decisions if d.kind == "Evict" and d.pod is not None}
                for p in sorted(evicted):
                    self.evict(p, rec.logical_time_ms)
                for d in rec.decisions:
                    if d.kind == "Bind" and d.pod is not None and d.node is not None and d.pod not in evicted:
                        self.bind(d.pod, d.node, list(d.gpu_devices), rec.logical_time_ms)


def _two_queues(backlog: int) -> tuple[list[ev.NodeUpserted], list[ev.QueueUpserted], list[Job]]:
    """One 16-GPU node, two zero-quota equal-weight queues with a backlog of whole-node 1-hour jobs each,
    and small 4-GPU jobs of b arriving later (they reclaim from a under time-based fair share)."""
    nodes = [ev.NodeUpserted(at_ms=0, name="gpu-0", gpus=16, cpu_millicores=128_000, memory_bytes=2**40)]
    queues = [
        ev.QueueUpserted(
            at_ms=0, name=q, resources=ev.QueueResources(gpu=ev.QueueResource(quota=0, over_quota_weight=1))
        )
        for q in ("a", "b")
    ]
    jobs = [Job("a", f"a-{i}", i * 1000, H, 16) for i in range(backlog)]
    jobs += [Job("b", f"b-{i}", 5 * MIN + i * 1000, H, 16) for i in range(backlog)]
    jobs += [Job("b", f"small-{i}", 3 * H + 7 * MIN + i * 20 * MIN, 30 * MIN, 4) for i in range(3)]
    return nodes, queues, jobs


FAIR = FairshareConfig(k_value=1.0, half_life_s=7200, window_s=86_400, refresh_s=300)
ENGINE = SessionConfig(k_value=1.0)


def _record(log: Log, topics: Topics, backlog: int, end: int) -> None:
    nodes, queues, jobs = _two_queues(backlog)
    Cluster(log, topics, ENGINE, FAIR).run(nodes, queues, jobs, end)


def _starts(events: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    return [(e["type"], e["uid"], e["at_ms"]) for e in events if e["type"] in ("PodBound", "PodReleasing")]


def _mixed(jobs: int) -> tuple[list[ev.NodeUpserted], list[ev.QueueUpserted], list[Job]]:
    """Six 8-GPU nodes, two queues with a quota of 16 GPUs and one without, jobs of 1-8 GPUs and 20 min to
    3 h arriving every ~6 min (a fixed seed): placement across nodes and many reclaims."""
    rng = random.Random(7)
    nodes = [
        ev.NodeUpserted(at_ms=0, name=f"gpu-{i}", gpus=8, cpu_millicores=128_000, memory_bytes=2**40)
        for i in range(6)
    ]
    queues = [
        ev.QueueUpserted(
            at_ms=0,
            name=q,
            resources=ev.QueueResources(gpu=ev.QueueResource(quota=quota, over_quota_weight=1)),
        )
        for q, quota in (("a", 16_000), ("b", 16_000), ("c", 0))
    ]
    work = [
        Job(
            rng.choice("abc"),
            f"j{i}",
            i * 400_000 + rng.randrange(0, 300_000),
            rng.choice([20, 40, 90, 180]) * MIN,
            rng.choice([1, 2, 4, 8]),
        )
        for i in range(jobs)
    ]
    return nodes, queues, work


@dataclass(frozen=True)
class Case:
    name: str
    cluster: dict[str, int]  # the Cluster's delays
    deletes: tuple[tuple[int, str], ...] = ()  # (time, pod) its user deletes
    backlog: int = 6
    mixed: int = 0  # if > 0: this many jobs of :func:`_mixed` instead of the two-queue backlog


CASES = [
    Case("binder and kubelets without delay", {"bind_ms": 0, "evict_ms": 0, "grace_ms": 0}),
    Case(
        "slow binder, long grace, users deleting a pending and a running pod",
        {"bind_ms": 7_000, "evict_ms": 3_000, "grace_ms": 60_000},
        ((2 * H, "b/b-5"), (4 * H + 10 * MIN, "b/b-2")),
    ),
    Case("three queues, mixed jobs on six nodes, many reclaims", {}, mixed=80),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_no_change_reproduces_each_pods_binds_evictions_and_starts(case: Case, tmp_path: Path) -> None:
    from analytics.rerun.whatif_service import rerun

    nodes, queues, jobs = _mixed(case.mixed) if case.mixed else _two_queues(case.backlog)
    with open_log(str(tmp_path / "log")) as log:
        cluster = Cluster(log, Topics(), ENGINE, FAIR, **case.cluster)
        for when, pod in case.deletes:
            cluster.delete(pod, when)
        cluster.run(nodes, queues, jobs, 10 * H)
    rec = load_service_recording(str(tmp_path / "log"))
    assert set(rec.bind.everyone) == {case.cluster.get("bind_ms", 2_000)}
    events, _ = rerun(rec, rec.config)
    assert _starts(events) == _starts(rec.events)
    # Not only the starts: every event of the recording comes back, at its time and in its order.
    assert [(e["type"], e["uid"], e["at_ms"]) for e in events] == [
        (e["type"], e["uid"], e["at_ms"]) for e in rec.events
    ]
    recorded, again = recorded_outcomes(rec), rerun_service(rec, [])
    assert recorded.cluster["evictions"] > 0
    assert (again.queues, again.cluster, again.timeline) == (
        recorded.queues,
        recorded.cluster,
        recorded.timeline,
    )


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("svc") / "log"
    with open_log(str(d)) as log:
        _record(log, Topics(), backlog=8, end=14 * H)
    return d


def test_a_no_change_whatif_of_an_embedded_service_log_reproduces_it(embedded: Path) -> None:
    rec = load_service_recording(str(embedded))
    recorded = recorded_outcomes(rec)
    assert recorded.cluster["evictions"] > 0  # the history has reclaims in it, not only binds
    assert rec.bind.everyone and set(rec.bind.everyone) == {2_000}  # the bind delay measured from the log
    again = rerun_service(rec, [])
    assert again.queues == recorded.queues
    assert again.cluster == recorded.cluster
    assert again.timeline == recorded.timeline


def test_the_per_pod_outcomes_match_too(embedded: Path) -> None:
    """Binds, evictions and start times per pod, not only the aggregates."""
    from analytics.rerun.whatif_service import _Driver

    rec = load_service_recording(str(embedded))
    d = _Driver(rec, rec.config)
    d.run(None)
    mine = [json.loads(r.value) for r in d.log.topics["hourglass.events"]]
    assert _starts(mine) == _starts(rec.events)

    def acted(records: list[CycleRecord]) -> list[tuple[int, list[tuple[Any, ...]]]]:
        out: list[tuple[int, list[tuple[Any, ...]]]] = []
        for x in records:
            moves = [(y.kind, y.pod, y.node) for y in x.decisions if y.kind in ("Bind", "Evict")]
            if moves:
                out.append((x.logical_time_ms, moves))
        return out

    # The cycles that bound or evicted, with what they did (a usage snapshot may add a cycle that decides
    # nothing new: it arrives with its instant's events in the re-run, after a cycle in the recording).
    assert acted(d.records) == acted(rec.records)


def test_k_value_zero_on_a_service_log_gives_queue_a_the_cluster(
    embedded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Recorded at kValue 1 (the queues take turns), re-run at kValue 0: the tie goes to a, which then keeps
    the cluster (b can never reclaim 16 GPUs with a fair share of 8) — what `simulate` says of the
    two-queue oscillation."""
    rc = main(["whatif", str(embedded), "--set", "fairshare.k_value=0", "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    body = json.loads(out)
    a, b = body["queues"]["a"], body["queues"]["b"]
    assert body["changed"] == {"fairshare.k_value": 0}
    assert b["recorded"]["gpu_hours"] > 0 and a["recorded"]["gpu_hours"] > 0
    assert a["whatif"]["gpu_hours"] > a["recorded"]["gpu_hours"]
    assert b["whatif"]["gpu_hours"] < b["recorded"]["gpu_hours"]
    assert b["whatif"]["evictions"] == 0 and a["whatif"]["evictions"] == 0
    # a keeps the cluster from the first cycle to the end of the log: every GPU-hour is a's.
    assert b["whatif"]["gpu_hours"] == 0 and b["whatif"]["started"] == 0
    assert a["whatif"]["gpu_hours"] == body["cluster"]["whatif"]["gpu_hours"]
    assert body["cluster"]["whatif"]["allocation_ratio"] > 0.99


def test_bad_settings_for_a_service_log_are_refused_clearly(
    embedded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["whatif", str(embedded), "--set", "queues.0.gpu.weight=2"])
    err = capsys.readouterr().err
    assert rc == 2 and "engine config" in err and "k_value" in err
    rc = main(["whatif", str(embedded), "--set", "k_value=fast"])
    assert rc == 2 and "k_value takes a float" in capsys.readouterr().err
    other = embedded.parent / "engine.yaml"
    other.write_text("k_value: 0\n")  # not what the recorded service ran with
    rc = main(["whatif", str(embedded), "--recorded-config", str(other)])
    assert rc == 2 and "--engine-config" in capsys.readouterr().err  # replay's opener names the mismatch
    with pytest.raises(ServiceLogError):
        from analytics.rerun.whatif_service import service_config

        service_config(ENGINE, parse_change("nodes=3"))


def test_a_no_change_whatif_of_a_service_run_on_a_real_kafka_broker(kafka_bootstrap: str) -> None:
    prefix = f"whatif-{uuid.uuid4().hex[:8]}"
    topics = Topics.with_prefix(prefix)
    spec = f"kafka://{kafka_bootstrap}"
    with open_log(spec, topics=topics.all()) as log:
        _record(log, topics, backlog=3, end=6 * H)
    rec = load_service_recording(spec, topics=topics)
    recorded = recorded_outcomes(rec)
    assert recorded.cluster["started"] > 0
    # The service on Kafka may read an instant's events in two batches (a stale cached end offset) and then
    # cycles twice at that instant; the re-run folds each instant at once. Here the extra cycles only
    # re-decide a bind or an eviction already in flight, so the outcomes are the same.
    again = rerun_service(rec, [])
    assert again.queues == recorded.queues
    assert again.cluster == recorded.cluster
    assert again.timeline == recorded.timeline


def test_a_sweep_on_a_service_log_runs_each_value(embedded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--set k_value=0,1``: one what-if per value, each in its own process; the recorded value (1)
    reproduces the recording."""
    rc = main(["whatif", str(embedded), "--set", "k_value=0,1", "--json", "--jobs", "2"])
    body = json.loads(capsys.readouterr().out)
    assert rc == 0
    zero, one = body["sweep"]
    assert zero["changed"] == {"k_value": 0} and one["changed"] == {"k_value": 1}
    for q in ("a", "b"):
        assert one["queues"][q]["whatif"] == one["queues"][q]["recorded"]
    assert zero["queues"]["b"]["whatif"]["gpu_hours"] == 0


def test_a_log_recorded_with_another_engine_config_needs_that_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`hourglass run --engine-config F` at kValue 0 and no fair-share service: `whatif --recorded-config F`
    re-runs it (no change: the recording; `--set gpu_placement=spread`: a what-if of that run)."""
    nodes, queues, jobs = _mixed(30)
    with open_log(str(tmp_path / "log")) as log:
        Cluster(log, Topics(), SessionConfig(k_value=0.0), None).run(nodes, queues, jobs, 6 * H)
    engine = tmp_path / "engine.yaml"
    engine.write_text("k_value: 0.0\n")
    assert main(["whatif", str(tmp_path / "log"), "--json"]) == 2  # the defaults (kValue 1) do not match
    assert "engine config hash" in capsys.readouterr().err
    rc = main(["whatif", str(tmp_path / "log"), "--recorded-config", str(engine), "--json"])
    body = json.loads(capsys.readouterr().out)
    assert rc == 0 and body["changed"] == {}
    assert all(q["recorded"] == q["whatif"] for q in body["queues"].values())
    assert body["cluster"]["recorded"] == body["cluster"]["whatif"]
    rc = main(
        ["whatif", str(tmp_path / "log"), "--recorded-config", str(engine), "--set", "gpu_placement=spread"]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "gpu_placement=spread" in out


# --------------------------------------------------------------------------- --window on a service log


def _in_flight_froms(records: list[CycleRecord]) -> list[int]:
    """Window starts 1 ms after the first cycle that bound and after the first that evicted (a bind and an
    eviction in flight at FROM), and after the middle cycle."""

    def first(kind: str) -> int:
        return next(r.logical_time_ms for r in records if any(d.kind == kind for d in r.decisions))

    return [first("Bind") + 1, first("Evict") + 1, records[len(records) // 2].logical_time_ms + 1]


@pytest.mark.parametrize("case", CASES[1:], ids=[c.name for c in CASES[1:]])
def test_a_no_change_windowed_whatif_equals_the_recording_inside_the_window(
    case: Case, tmp_path: Path
) -> None:
    """`--window FROM..TO` starts from the recorded state at FROM (pods running, binds and evictions in
    flight, pending pods) and re-runs to TO: with no change, every event up to TO comes back at its time and
    in its order, and the window's figures are the recording's."""
    from analytics.rerun.whatif_service import log_window, rerun

    nodes, queues, jobs = _mixed(case.mixed) if case.mixed else _two_queues(case.backlog)
    with open_log(str(tmp_path / "log")) as log:
        cluster = Cluster(log, Topics(), ENGINE, FAIR, **case.cluster)
        for when, pod in case.deletes:
            cluster.delete(pod, when)
        cluster.run(nodes, queues, jobs, 10 * H)
    rec = load_service_recording(str(tmp_path / "log"))

    def seq(events: list[dict[str, Any]], to: int) -> list[tuple[str, str, int]]:
        return [(e["type"], e["uid"], e["at_ms"]) for e in events if e["at_ms"] < to]

    for start in _in_flight_froms(rec.records):
        window = log_window(rec, (start, start + 4 * H))
        events, _ = rerun(rec, rec.config, None, window)
        assert seq(events, window[1]) == seq(rec.events, window[1])
        recorded, again = recorded_outcomes(rec, window), rerun_service(rec, [], None, window)
        assert recorded.cluster["window_ms"] == list(window)
        assert recorded.cluster["started"] > 0
        assert (again.queues, again.cluster, again.timeline) == (
            recorded.queues,
            recorded.cluster,
            recorded.timeline,
        )


def test_a_windowed_whatif_keeps_the_recording_before_from_and_changes_it_after(embedded: Path) -> None:
    """At kValue 0 from 3 h on: before FROM the log is the recording's; from FROM the engine decides under
    kValue 0. b's job running at FROM runs its recorded remaining time (nothing reclaims it), then the tie
    goes to a, which keeps the cluster to TO: b starts nothing in the window."""
    from analytics.rerun.whatif_service import log_window, rerun, service_config

    rec = load_service_recording(str(embedded))
    window = log_window(rec, (3 * H, 10 * H))
    changed = parse_change("k_value=0")
    events, _ = rerun(rec, service_config(rec.config, changed), None, window)
    before = [(e["type"], e["uid"], e["at_ms"]) for e in events if e["at_ms"] < window[0]]
    assert before == [(e["type"], e["uid"], e["at_ms"]) for e in rec.events if e["at_ms"] < window[0]]
    recorded = recorded_outcomes(rec, window)
    whatif = rerun_service(rec, changed, None, window)
    assert whatif.queues != recorded.queues
    assert whatif.cluster["window_ms"] == recorded.cluster["window_ms"] == [3 * H, 10 * H]
    assert whatif.queues["a"]["evictions"] == whatif.queues["b"]["evictions"] == 0
    running = [e for e in rec.events if e["type"] == "PodBound" and e["at_ms"] < window[0]][-1]
    assert running["uid"].startswith("b/")  # b holds the cluster at FROM
    ends = [e["at_ms"] for e in events if e["type"] == "PodFinished" and e["uid"] == running["uid"]]
    recorded_end = [
        e["at_ms"] for e in rec.events if e["type"] == "PodFinished" and e["uid"] == running["uid"]
    ]
    assert ends == recorded_end  # its recorded remaining time
    assert whatif.queues["b"]["started"] == 0
    assert whatif.queues["b"]["gpu_hours"] == pytest.approx(16 * (recorded_end[0] - window[0]) / H)
    assert whatif.queues["a"]["gpu_hours"] > recorded.queues["a"]["gpu_hours"]


def test_windows_outside_a_service_log_are_refused(
    embedded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["whatif", str(embedded), "--window", "20h..30h"])
    err = capsys.readouterr().err
    assert rc == 2 and "--window" in err and "spans only" in err and "FROM must be before its end" in err
    rc = main(["whatif", str(embedded), "--window", "5h..2h"])
    assert rc == 2 and "TO must be after FROM" in capsys.readouterr().err
    rc = main(["whatif", str(embedded), "--window", "2h..30h", "--json"])  # TO past the end: to the end
    body = json.loads(capsys.readouterr().out)
    end = load_service_recording(str(embedded)).end_ms
    assert rc == 0 and body["cluster"]["whatif"]["window_ms"] == [2 * H, end]
    assert body["queues"]["a"]["whatif"] == body["queues"]["a"]["recorded"]


# --------------------------------------------------------------------------- usage recomputed under the change


@pytest.fixture(scope="module")
def two_backlogs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Queue a alone on a 16-GPU node for 2 h, then b: both with backlogs of 2-GPU half-hour jobs to the
    end (6 h), at kValue 1 with the fair-share service (eventlog source, half-life 2 h). Binder and
    kubelets without delay: the split follows each cycle's fair share."""
    d = tmp_path_factory.mktemp("usage") / "log"
    with open_log(str(d)) as log:
        Cluster(log, Topics(), ENGINE, FAIR, bind_ms=0, evict_ms=0, grace_ms=0).run(*_a_then_b(), 6 * H)
    return d


def _a_then_b() -> tuple[list[ev.NodeUpserted], list[ev.QueueUpserted], list[Job]]:
    """One 16-GPU node; queue a alone with a backlog of 2-GPU half-hour jobs, then b with one from 2 h."""
    nodes = [ev.NodeUpserted(at_ms=0, name="gpu-0", gpus=16, cpu_millicores=128_000, memory_bytes=2**40)]
    queues = [
        ev.QueueUpserted(
            at_ms=0, name=q, resources=ev.QueueResources(gpu=ev.QueueResource(quota=0, over_quota_weight=1))
        )
        for q in ("a", "b")
    ]
    jobs = [Job("a", f"a-{i}", i, 30 * MIN, 2) for i in range(100)]
    jobs += [Job("b", f"b-{i}", 2 * H + i, 30 * MIN, 2) for i in range(100)]
    return nodes, queues, jobs


def test_recomputed_usage_with_no_change_reproduces_the_recording(two_backlogs: Path) -> None:
    """The fair-share service recomputes each recorded snapshot, as of its time, from the re-run's own
    events: with no change they are the recorded snapshots (same ids), and the run is the recording."""
    from analytics.rerun.whatif_service import rerun, usage_config

    rec = load_service_recording(str(two_backlogs))
    assert rec.usage_source == "eventlog"
    assert rec.usage_window == {"type": "sliding", "size_s": 86_400, "half_life_s": 7200, "anchor_ms": 0}
    fair = usage_config(rec, [])
    assert fair is not None and fair.half_life_s == 7200  # auto: eventlog snapshots are recomputed
    events, records = rerun(rec, rec.config, None, None, fair)
    assert [(e["type"], e["uid"], e["at_ms"]) for e in events] == [
        (e["type"], e["uid"], e["at_ms"]) for e in rec.events
    ]
    used = {r.usage_snapshot_id for r in records}
    assert used == {r.usage_snapshot_id for r in rec.records} and len(used) > 10
    recorded, again = recorded_outcomes(rec), rerun_service(rec, [], usage="recompute")
    assert (again.queues, again.cluster, again.timeline) == (
        recorded.queues,
        recorded.cluster,
        recorded.timeline,
    )


def test_recomputed_usage_feeds_the_changed_allocations_back(two_backlogs: Path) -> None:
    """Time-based fair share is a feedback loop: at kValue 2 b (which used less) gets more than in the
    recording, and counting that extra use against it (usage recomputed) leaves it less than the recorded
    usage (from the kValue 1 allocations) does; at kValue 0.5 the other way round."""
    rec = load_service_recording(str(two_backlogs))
    recorded = recorded_outcomes(rec).queues["b"]["gpu_hours"]
    for k, more in (("2", True), ("0.5", False)):
        change = parse_change(f"fairshare.k_value={k}")
        old = rerun_service(rec, change, usage="recorded").queues["b"]["gpu_hours"]
        new = rerun_service(rec, change, usage="recompute").queues["b"]["gpu_hours"]
        if more:
            assert recorded < new < old
        else:
            assert old < new < recorded


def test_a_half_life_change_recomputes_usage(two_backlogs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A longer half-life remembers a's two hours alone for longer: b gets more; a shorter one, less."""
    rec = load_service_recording(str(two_backlogs))
    recorded = recorded_outcomes(rec).queues["b"]["gpu_hours"]
    rc = main(
        ["whatif", str(two_backlogs), "--set", "fairshare.half_life_s=600,28800", "--json", "--jobs", "2"]
    )
    body = json.loads(capsys.readouterr().out)
    assert rc == 0
    short, long = (v["queues"]["b"]["whatif"]["gpu_hours"] for v in body["sweep"])
    assert short < recorded < long
    assert all("recomputed" in v["usage"] and "half-life" in v["usage"] for v in body["sweep"])
    rc = main(["whatif", str(two_backlogs), "--set", "fairshare.half_life_s=600", "--usage", "recorded"])
    assert rc == 2 and "needs --usage recompute" in capsys.readouterr().err
    rc = main(["whatif", str(two_backlogs), "--set", "fairshare.half_life_s=-5"])
    assert rc == 2 and "half_life_s" in capsys.readouterr().err


def test_usage_is_refused_on_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A simulated run's what-if computes usage under its own settings: ``--usage`` is for service logs."""
    (tmp_path / "manifest.json").write_text("{}")  # a run directory, as far as the dispatch can tell
    rc = main(["whatif", str(tmp_path), "--usage", "recorded"])
    assert rc == 2 and "--usage is for service logs" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # argparse names the choices
        main(["whatif", str(tmp_path), "--usage", "sometimes"])
    assert exit_.value.code == 2 and "recompute" in capsys.readouterr().err


def test_prometheus_snapshots_are_kept_unless_recompute_is_asked(two_backlogs: Path) -> None:
    """Snapshots the fair-share service computed from Prometheus cannot be recomputed from the what-if's
    log without changing them: ``auto`` keeps them and says so; ``--usage recompute`` uses the eventlog
    source with the recorded window; a usage setting change recomputes."""
    from dataclasses import replace

    from analytics.rerun.whatif import usage_text
    from analytics.rerun.whatif_service import usage_config

    rec = replace(load_service_recording(str(two_backlogs)), usage_source="prometheus")
    assert usage_config(rec, []) is None
    assert usage_text(rec, []).startswith("recorded snapshots (source prometheus")
    fair = usage_config(rec, [], "recompute")
    assert fair is not None and (fair.half_life_s, fair.window_s) == (7200, 86_400)
    assert "recomputed" in usage_text(rec, [], "recompute")
    changed = usage_config(rec, parse_change("fairshare.window_s=3600"))
    assert changed is not None and changed.window_s == 3600
    none = replace(rec, usage_source=None, usage_window=None)  # no snapshot recorded: the defaults
    assert usage_config(none, []) is None
    default = usage_config(none, [], "recompute")
    assert default is not None and default.window_s == 7 * 24 * 3600


# --------------------------------------------------------------------------- --out on a service log


def test_out_keeps_a_service_logs_whatif_as_a_run_directory(
    embedded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--out DIR`` writes the what-if's own events, cycle records and usage snapshots as a run directory:
    measured again it gives the what-if's figures, ``replay --verify`` re-runs every cycle to the same
    record, and ``report`` / ``sql`` read it; a sweep writes DIR/0, DIR/1."""
    from analytics.audit.store import query
    from analytics.rerun.replay import replay
    from analytics.rerun.whatif import outcomes

    out = tmp_path / "kzero"
    rc = main(["whatif", str(embedded), "--set", "fairshare.k_value=0", "--out", str(out), "--json"])
    body = json.loads(capsys.readouterr().out)
    assert rc == 0 and body["run_dir"] == str(out)
    kept = outcomes(out)
    assert {q: kept.queues[q]["gpu_hours"] for q in kept.queues} == {
        q: v["whatif"]["gpu_hours"] for q, v in body["queues"].items()
    }
    assert kept.cluster == body["cluster"]["whatif"]
    summary = replay(out)
    assert summary.cycles > 0 and summary.mismatches == 0
    _, rows = query(
        out, "SELECT queue, count(*) FROM decisions WHERE kind = 'Bind' GROUP BY queue ORDER BY 1"
    )
    assert [r[0] for r in rows] == ["a"]  # at kValue 0 a keeps the cluster: b is never bound
    assert main(["report", "--store", str(out), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {q["name"] for q in report["queues"]} >= {"a", "b"}
    # It holds no users' inputs to re-run: a what-if of it is refused, naming the log to re-run instead.
    assert main(["whatif", str(out), "--set", "k_value=1"]) == 2
    assert f"a what-if of the service log {embedded}" in capsys.readouterr().err
    rc = main(
        ["whatif", str(embedded), "--set", "k_value=0,1", "--out", str(tmp_path / "sweep"), "--jobs", "2"]
    )
    capsys.readouterr()
    assert rc == 0
    assert replay(tmp_path / "sweep" / "1").mismatches == 0
    # the recorded value re-run and kept: the recording's figures
    again = outcomes(tmp_path / "sweep" / "1")
    recorded = recorded_outcomes(load_service_recording(str(embedded)))
    assert (again.queues, again.cluster) == (recorded.queues, recorded.cluster)


# --------------------------------------------------------------------------- unavailable usage stays so


class _Outage:
    """A usage source standing for Prometheus: the fair-share service's own events ledger, answering as of
    the latest event it folded, except during ``down`` (logical ms) when it cannot be reached."""

    kind = "exact"
    step_ms = 0

    def __init__(self, down: tuple[int, int]) -> None:
        self.down = down
        self.service: FairshareService | None = None

    def now(self) -> int:
        assert self.service is not None
        return self.service.ledger.as_of_ms or 0

    def _check(self) -> None:
        from fairshare.source import SourceUnavailable

        if self.down[0] <= self.now() < self.down[1]:
            raise SourceUnavailable("http://127.0.0.1:9090: connection refused")

    def allocation(self, start_ms: int, end_ms: int) -> Any:
        self._check()
        assert self.service is not None
        return self.service.ledger.allocation(start_ms, end_ms)

    def capacity(self, start_ms: int, end_ms: int) -> Any:
        self._check()
        assert self.service is not None
        return self.service.ledger.capacity(start_ms, end_ms)


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two-backlog cluster with the fair-share service on "Prometheus", unreachable from 3 h to 4 h:
    it publishes an unavailable snapshot (staleness 60 s) and the cycles of that hour run without usage."""
    d = tmp_path_factory.mktemp("outage") / "log"
    fair = FAIR.model_copy(update={"staleness_s": 60})
    with open_log(str(d)) as log:
        cluster = Cluster(log, Topics(), ENGINE, fair, bind_ms=0, evict_ms=0, grace_ms=0)
        source = _Outage((3 * H, 4 * H))
        cluster.fair = source.service = FairshareService(
            log, fair, topics=Topics(), source_name="prometheus", source=source, clock_ms=source.now
        )
        cluster.run(*_a_then_b(), 6 * H)
    return d


def test_a_recorded_unavailable_snapshot_stays_unavailable_with_usage_recomputed(outage: Path) -> None:
    """What if the settings differed, not what if Prometheus had been up: with ``--usage recompute`` the
    cycles that ran without usage in the recording run without usage in the what-if, and with no change the
    what-if is the recording."""
    from analytics.rerun.whatif_service import rerun, usage_config

    rec = load_service_recording(str(outage))
    blind = [r.logical_time_ms for r in rec.records if not r.usage_available]
    assert blind and all(3 * H <= t < 4 * H + FAIR.refresh_s * 1000 for t in blind)
    assert any(r.usage_available for r in rec.records if r.logical_time_ms >= 4 * H + FAIR.refresh_s * 1000)
    fair = usage_config(rec, [], "recompute")
    assert fair is not None
    events, records = rerun(rec, rec.config, None, None, fair)
    assert [r.logical_time_ms for r in records if not r.usage_available] == blind
    assert [(e["type"], e["uid"], e["at_ms"]) for e in events] == [
        (e["type"], e["uid"], e["at_ms"]) for e in rec.events
    ]
    # A change recomputes the available snapshots under it (its cycles fall at other times); the cycles
    # from the unavailable snapshot's arrival to the next available one's still run without usage.
    back = min(r.logical_time_ms for r in rec.records if r.logical_time_ms > blind[-1])
    changed = usage_config(rec, parse_change("fairshare.half_life_s=600"), "recompute")
    assert changed is not None and changed.half_life_s == 600
    _, records = rerun(rec, rec.config, None, None, changed)
    assert {r.usage_available for r in records if blind[0] <= r.logical_time_ms < back} == {False}
    assert {r.usage_available for r in records if not blind[0] <= r.logical_time_ms < back} == {True}
    assert {r.usage_snapshot_id for r in records} != {r.usage_snapshot_id for r in rec.records}
