"""The event-sourced pipeline end to end: events and usage snapshots in, cycle records out, audit store,
SQL and replay, on the embedded log and through a real Kafka broker."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import duckdb
import pytest

from analytics.audit.store import AuditStore, sink_from_log
from analytics.rerun.replay import load_source, replay
from analytics.rundir import usage_record
from ingest import events as ev
from ingest.backends import open_log
from ingest.filelog import FileLog
from ingest.log import Log, Topics
from scheduler.engine.record.decisions import CycleRecord
from scheduler.engine.record.delta import expand_records
from scheduler.engine.session import SessionConfig
from scheduler.metrics import SchedulerMetrics
from scheduler.service import Service
from tests.support.synthetic import SyntheticSpec, synthetic_events

GPU = 1000


def _two_queues() -> list[ev.Event]:
    """One 8-GPU node, two zero-quota queues of equal weight, each with four pending 2-GPU jobs."""
    out: list[ev.Event] = [
        ev.NodeUpserted(
            uid="n1", at_ms=0, name="n1", cpu_millicores=64_000, memory_bytes=512 * 2**30, gpus=8
        ),
    ]
    for q in ("a", "b"):
        out.append(
            ev.QueueUpserted(
                uid=f"q-{q}",
                at_ms=0,
                name=q,
                resources=ev.QueueResources(gpu=ev.QueueResource(quota=0, over_quota_weight=1)),
            )
        )
    t = 1
    for i in range(4):
        for q in ("a", "b"):
            name = f"{q}-job-{i}"
            out.append(
                ev.PodGroupUpserted(at_ms=t, name=name, namespace=q, queue=q, min_member=1, created_at_ms=t)
            )
            out.append(
                ev.PodSubmitted(
                    at_ms=t,
                    name=name,
                    namespace=q,
                    pod_group=name,
                    queue=q,
                    requests=ev.PodRequests(gpus=2),
                    created_at_ms=t,
                )
            )
            t += 1
    return out


def _append(log: Log, topics: Topics, events: list[ev.Event]) -> None:
    log.append_many(topics.events, [(e.uid.encode(), ev.dump_event(e)) for e in events])


def _cycles(log: Log, topic: str) -> list[CycleRecord]:
    """The full record of every cycle on the decisions topic (deltas expanded)."""
    return list(expand_records(CycleRecord.loads(v) for v in _records(log, topic)))


def _records(log: Log, topic: str) -> list[bytes]:
    out: list[bytes] = []
    at = 0
    while batch := log.read(topic, at, 1000):
        out += [r.value for r in batch]
        at = batch[-1].offset + 1
    return out


def _sample(metrics: SchedulerMetrics, name: str, **labels: str) -> float | None:
    value = metrics.registry.get_sample_value(name, labels)
    return None if value is None else float(value)


def _queue(rec: CycleRecord, name: str) -> dict[str, object]:
    return next(q for q in rec.model_dump(mode="json")["queues"] if q["name"] == name)


def test_usage_snapshots_drive_the_division_and_replay(tmp_path: Path) -> None:
    topics = Topics()
    config = SessionConfig(k_value=1.0)
    with FileLog(tmp_path / "log") as log:
        _append(log, topics, _two_queues())
        # Queue a used most of the cluster recently: the time-based term moves spare GPUs to b.
        log.append(
            topics.usage, b"cluster", usage_record("snap-1", 100, {"a": {"gpu": 0.9}, "b": {"gpu": 0.0}})
        )
        log.append(topics.usage, b"cluster", b'{"id": "snap-bad", "as_of_ms": "yesterday"}')
        metrics = SchedulerMetrics.create()
        svc = Service(log, topics, config, batch_size=100, metrics=metrics)
        svc.run(stop_when_idle=True)
        assert _sample(metrics, "hourglass_usage_available") == 1.0
        assert _sample(metrics, "hourglass_queue_usage", queue="a", resource="gpu") == pytest.approx(0.9)
        assert _sample(metrics, "hourglass_dead_letters_total", reason="bad_usage_record") == 1.0
        first = _cycles(log, topics.decisions)
        assert first[-1].usage_snapshot_id == "snap-1" and first[-1].usage_available
        a, b = _queue(first[-1], "a"), _queue(first[-1], "b")
        assert a["usage"]["gpu"] == pytest.approx(0.9)  # type: ignore[index]
        assert a["fair_share"]["gpu"] < a["fair_share_classic"]["gpu"]  # type: ignore[index,operator]
        assert b["fair_share"]["gpu"] > b["fair_share_classic"]["gpu"]  # type: ignore[index,operator]
        binds = [d for d in first[-1].decisions if d.kind == "Bind"]
        assert sum(1 for d in binds if d.queue == "b") > sum(1 for d in binds if d.queue == "a")

        # The bad record is dead-lettered with the field named; nothing else is lost.
        dead = [json.loads(v) for v in _records(log, topics.deadletter)]
        assert [(d["source_topic"], d["reason_code"]) for d in dead] == [(topics.usage, "bad_usage_record")]
        assert "as_of_ms" in dead[0]["message"]

        # Usage becomes unavailable: a new cycle falls back to classic fair share and says so.
        log.append(topics.usage, b"cluster", usage_record("snap-2", 200, None))
        svc.run(stop_when_idle=True)
        last = _cycles(log, topics.decisions)[-1]
        assert last.usage_snapshot_id == "snap-2" and not last.usage_available
        for q in ("a", "b"):
            assert _queue(last, q)["fair_share"] == _queue(last, q)["fair_share_classic"]
        assert last.logical_time_ms == 200  # the snapshot's as-of time moved the logical clock
        assert _sample(metrics, "hourglass_usage_available") == 0.0  # the degraded state is visible
        n = len(_records(log, topics.decisions))

        # A restarted service resumes after snap-2 and records nothing twice.
        again = Service(log, topics, config, batch_size=100)
        again.run(stop_when_idle=True)
        assert again.stats.cycles_appended == 0
        assert len(_records(log, topics.decisions)) == n

    # Replay from the log directory re-runs every cycle with the snapshot it used.
    summary = replay(load_source(tmp_path / "log", config=config))
    assert summary.cycles == n and summary.mismatches == 0
    # The wrong config is refused with the hashes named, not silently mismatched.
    with pytest.raises(Exception, match="config hash"):
        load_source(tmp_path / "log", config=SessionConfig(k_value=0.0))

    # The audit store holds the snapshots and their per-queue values.
    with FileLog(tmp_path / "log", readonly=True) as ro, AuditStore(tmp_path / "audit.duckdb") as store:
        stats = sink_from_log(store, ro)
        assert stats.usage_snapshots == 2 and stats.cycles == n
    con = duckdb.connect(str(tmp_path / "audit.duckdb"), read_only=True)
    rows = con.execute(
        "SELECT s.snapshot_id, s.available, u.queue, u.usage FROM usage_snapshots s"
        " LEFT JOIN usage u USING (snapshot_id) WHERE u.resource = 'gpu' OR u.resource IS NULL"
        " ORDER BY s.as_of_ms, u.queue"
    ).fetchall()
    con.close()
    assert rows == [("snap-1", True, "a", 0.9), ("snap-1", True, "b", 0.0), ("snap-2", False, None, None)]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "analytics.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_kafka_ingest_scheduler_decisions_store(kafka_bootstrap: str, tmp_path: Path) -> None:
    """ingest -> hourglass run -> decisions -> hourglass sink -> hourglass sql / replay, all on Kafka."""
    prefix = f"e2e-{uuid.uuid4().hex[:8]}"
    topics = Topics.with_prefix(prefix)
    url = f"kafka://{kafka_bootstrap}"
    events = synthetic_events(
        SyntheticSpec(nodes=6, pending_pods=120, departments=2, queues_per_department=2)
    )
    with open_log(url, topics=topics.all()) as log:
        _append(log, topics, events[: len(events) // 2])
        log.append(topics.events, None, b'{"type": "PodSubmitted", "v": 1, "name": ')  # malformed, mid-stream
        _append(log, topics, events[len(events) // 2 :])

    run = _cli("run", "--log", url, "--topic-prefix", prefix, "--stop-when-idle", "--batch-size", "50")
    assert run.returncode == 0, run.stderr
    assert f"{len(events)} events folded, 1 dead letters" in run.stdout

    store = tmp_path / "audit.duckdb"
    sink = _cli("sink", "--log", url, "--topic-prefix", prefix, "--store", str(store))
    assert sink.returncode == 0, sink.stderr
    with open_log(url) as log:
        decisions = _cycles(log, topics.decisions)
        dead = [json.loads(v) for v in _records(log, topics.deadletter)]
    assert len(decisions) >= 3
    assert [d["reason_code"] for d in dead] == ["bad_json"]
    assert dead[0]["source_offset"] == len(events) // 2

    sql = _cli(
        "sql",
        "--store",
        str(store),
        "--format",
        "json",
        "SELECT count(*) AS cycles, (SELECT count(*) FROM events) AS events,"
        " (SELECT count(*) FROM decisions WHERE kind = 'Bind') AS binds FROM cycles",
    )
    assert sql.returncode == 0, sql.stderr
    got = json.loads(sql.stdout)[0]
    assert got["cycles"] == len(decisions)
    assert got["events"] == len(events)  # the malformed record is not an event
    assert got["binds"] == sum(1 for r in decisions for d in r.decisions if d.kind == "Bind") > 0

    rep = _cli("replay", url, "--topic-prefix", prefix, "--verify")
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert rep.stdout.strip().splitlines()[-1] == f"replay: {len(decisions)} cycles, 0 mismatches"

    # Running the sink again loads nothing twice (it resumes from its committed offsets).
    sink2 = _cli("sink", "--log", url, "--topic-prefix", prefix, "--store", str(store))
    assert sink2.returncode == 0 and "0 events, 0 usage snapshots, 0 cycles" in sink2.stdout


def test_a_quiet_cluster_still_reclaims_when_min_runtime_runs_out(tmp_path: Path) -> None:
    """No event arrives after the reclaimer: only time passes. The service's ClockTick brings the time in
    through the log, the reclaim happens, and the replay reproduces it."""
    topics = Topics()
    config = SessionConfig(default_reclaim_min_runtime_ms=60_000)
    events: list[ev.Event] = [
        ev.NodeUpserted(uid="n1", at_ms=0, name="n1", cpu_millicores=64_000, memory_bytes=2**35, gpus=8),
        ev.QueueUpserted(at_ms=0, name="a", resources=ev.QueueResources(gpu=ev.QueueResource(quota=0))),
        ev.QueueUpserted(at_ms=0, name="b", resources=ev.QueueResources(gpu=ev.QueueResource(quota=8000))),
    ]
    for q, t in (("a", 0), ("b", 2)):
        events += [
            ev.PodGroupUpserted(
                at_ms=t, name=f"{q}-job", namespace=q, queue=q, min_member=1, created_at_ms=t
            ),
            ev.PodSubmitted(
                at_ms=t,
                name=f"{q}-job",
                namespace=q,
                pod_group=f"{q}-job",
                queue=q,
                requests=ev.PodRequests(gpus=8),
                created_at_ms=t,
            ),
        ]
        if q == "a":
            events.append(
                ev.PodBound(at_ms=1, name="a-job", namespace="a", node="n1", gpu_devices=list(range(8)))
            )
    clock = [30_000]
    with FileLog(tmp_path / "log") as log:
        _append(log, topics, events)
        svc = Service(
            log, topics, config, period_s=0.0, clock_ms=lambda: clock[0], sleep=lambda _: svc.stop()
        )
        svc.run()  # folds, cycles once; idle: tick at 30 s (a's job is still protected), cycles; stops
        recs = _cycles(log, topics.decisions)
        assert [r.logical_time_ms for r in recs] == [2, 30_000]
        assert all(d.kind != "Evict" for r in recs for d in r.decisions)
        assert any(d.kind == "Unschedulable" and d.job == "b/b-job" for d in recs[-1].decisions)

        clock[0] = 61_000  # a's job has now run past its reclaim min-runtime
        svc._stop = False
        svc.run()
        last = _cycles(log, topics.decisions)[-1]
        assert last.logical_time_ms == 61_000
        kinds = {(d.kind, d.pod) for d in last.decisions}
        assert ("Evict", "a/a-job") in kinds and ("Pipeline", "b/b-job") in kinds, [(d.reason, d.message) for d in last.decisions]
        ticks = [v for v in _records(log, topics.events) if b'"ClockTick"' in v]
        assert len(ticks) == 2 and svc.stats.ticks == 2

        # Nothing waits once b is placed and a is evicted... until the cluster settles; no tick without a
        # clock past the logical time either.
        assert not svc.tick()
    summary = replay(load_source(tmp_path / "log", config=config))
    assert summary.cycles == 3 and summary.mismatches == 0
