"""`hourglass fairshare` end to end on the embedded FileLog: events in, usage snapshots out; stale path."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairshare.config import FairshareConfig
from fairshare.decay import DecayedUsage
from fairshare.prometheus import PrometheusSource, PrometheusSourceConfig
from fairshare.record import parse_usage_record
from fairshare.service import FairshareService
from fairshare.snapshot import SNAPSHOT_KEY, UsageSnapshot
from ingest import events as ev
from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS, Log
from scheduler.engine.record.decisions import CycleRecord
from scheduler.engine.session import SessionConfig
from scheduler.metrics import SchedulerMetrics
from scheduler.service import Service
from tests.support.fairshare_inputs import FlakySource, S, append_events, one_pod_cluster
from tests.support.paths import REPO_ROOT
from tests.support.promserver import PrometheusFactory, openmetrics_history

USAGE = DEFAULT_TOPICS.usage


def usage_records(log: Log) -> list[UsageSnapshot]:
    recs = log.read(USAGE, 0, 1000)
    assert all(r.key == SNAPSHOT_KEY for r in recs)
    return [UsageSnapshot.from_bytes(r.value) for r in recs]


def test_events_in_snapshot_out_and_the_scheduler_can_read_it(tmp_path: Path) -> None:
    cfg = FairshareConfig(window_s=3600, half_life_s=None)
    with FileLog(tmp_path / "log") as log:
        append_events(log, one_pod_cluster())
        svc = FairshareService(log, cfg)
        snap = svc.step()
        assert snap is not None and snap.available and snap.source == "eventlog"
        assert snap.as_of_ms == 40 * S  # the last event's time, not the wall clock
        # 2000 milli-GPU over [10 s, 40 s) against 4000 over [0, 40): U' = 60000 / 160000.
        assert snap.raw["a"]["gpu"] == 60_000.0
        assert snap.queues["a"]["gpu"] == pytest.approx(0.375)
        assert snap.queues["org"]["gpu"] == pytest.approx(0.375)  # the parent's own series
        [record] = log.read(USAGE, 0, 10)
        parsed = parse_usage_record(record.value)
        assert parsed.id == snap.id and parsed.usage is not None
        assert parsed.usage["a"]["gpu"] == pytest.approx(0.375)

        # No new event: logical time did not move, nothing is published twice.
        assert svc.step() is None
        assert log.end_offset(USAGE) == 1

        # New events: the state advances incrementally and matches a full recomputation.
        append_events(log, [ev.PodFinished(at_ms=50 * S, name="p", namespace="ns", phase="Succeeded")])
        append_events(log, [ev.QueueUpserted(at_ms=70 * S, name="org")])
        second = svc.step()
        assert second is not None and second.as_of_ms == 70 * S
        assert svc.stats.full_recomputes == 1  # the second computation was incremental
        full = DecayedUsage.compute(svc.ledger, 70 * S, cfg).vectors()
        assert second.raw["a"]["gpu"] == pytest.approx(full.raw["a"]["gpu"], rel=1e-12)
        assert second.raw["a"]["gpu"] == 2000 * 40.0
        assert [s.id for s in usage_records(log)] == [snap.id, second.id]


def test_a_restarted_service_does_not_publish_the_same_snapshot_again(tmp_path: Path) -> None:
    cfg = FairshareConfig(window_s=20, half_life_s=30)
    with FileLog(tmp_path / "log") as log:
        append_events(log, one_pod_cluster())
        first = FairshareService(log, cfg).step()
        assert first is not None
        again = FairshareService(log, cfg)
        assert again.step() is None
        assert again.stats.duplicates_skipped == 1
        assert log.end_offset(USAGE) == 1
        # The same inputs give the same id, whoever computes it.
        assert UsageSnapshot.from_bytes(log.read(USAGE, 0, 1)[0].value).id == first.id


def test_without_events_nothing_is_published(tmp_path: Path) -> None:
    with FileLog(tmp_path / "log") as log:
        assert FairshareService(log, FairshareConfig()).step() is None
        assert log.end_offset(USAGE) == 0


def test_the_cli_publishes_once_and_rejects_a_bad_config(tmp_path: Path) -> None:
    logdir = tmp_path / "log"
    with FileLog(logdir) as log:
        append_events(log, one_pod_cluster())
    good = tmp_path / "fs.yaml"
    good.write_text("window_s: 3600\nhalf_life_s: 600\nk_value: 2\n")
    cmd = [sys.executable, "-m", "analytics.cli", "fairshare", "--log", str(logdir), "--once"]
    out = subprocess.run(
        [*cmd, "--config", str(good)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "1 snapshots published" in out.stdout
    with FileLog(logdir) as log:
        [snap] = usage_records(log)
    assert snap.window.half_life_s == 600 and snap.window.size_s == 3600
    assert 0 < snap.queues["a"]["gpu"] < 0.5

    bad = tmp_path / "bad.yaml"
    bad.write_text("window_s: 0\nwindow_type: cron\n")
    out = subprocess.run(
        [*cmd, "--config", str(bad)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2
    assert "window_s = 0" in out.stderr and "window_type = 'cron'" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_failing_source_serves_the_last_snapshot_until_stale_then_says_unavailable(tmp_path: Path) -> None:
    cfg = FairshareConfig(window_s=600, staleness_s=120, refresh_s=30)
    now = [1000 * S]
    src = FlakySource()
    with FileLog(tmp_path / "log") as log:
        svc = FairshareService(log, cfg, source_name="prometheus", source=src, clock_ms=lambda: now[0])
        good = svc.step()
        assert good is not None and good.available and good.as_of_ms == 1000 * S
        assert good.queues["a"]["gpu"] == pytest.approx(0.25)

        src.down = "connection refused by 127.0.0.1:9"
        now[0] = 1100 * S  # 100 s after the last good one: still fresh enough, nothing new is published
        assert svc.step() is None
        assert log.end_offset(USAGE) == 1

        now[0] = 1121 * S  # 121 s > staleness 120 s: one explicit unavailable snapshot with the reason
        gone = svc.step()
        assert gone is not None and not gone.available and gone.queues == {}
        assert gone.reason is not None and "connection refused by 127.0.0.1:9" in gone.reason
        assert good.id in gone.reason
        assert parse_usage_record(log.read(USAGE, 1, 1)[0].value).usage is None

        now[0] = 1200 * S  # still down: not repeated
        assert svc.step() is None
        assert log.end_offset(USAGE) == 2

        src.down = None
        now[0] = 1230 * S  # the source answers again: usage is back without a restart
        back = svc.step()
        assert back is not None and back.available and back.as_of_ms == 1230 * S
        assert back.queues["a"]["gpu"] == pytest.approx(0.25)
        assert [s.available for s in usage_records(log)] == [True, False, True]
        assert svc.stats.failures == 3


def test_a_source_that_never_answered_is_unavailable_at_once(tmp_path: Path) -> None:
    src = FlakySource()
    src.down = "timeout after 10 s"
    with FileLog(tmp_path / "log") as log:
        svc = FairshareService(
            log, FairshareConfig(), source_name="prometheus", source=src, clock_ms=lambda: 5 * S
        )
        snap = svc.step()
        assert snap is not None and not snap.available
        assert snap.reason is not None and "no usage computed yet" in snap.reason


def test_the_scheduler_cycle_uses_the_published_usage(tmp_path: Path) -> None:
    """Queue `a` held the whole 4-GPU cluster for 100 s; then `a` and `b` each want all 4 GPUs. With the
    snapshot and kValue 1, `b` has the larger fair share and its job is bound first."""
    from scheduler.engine.record.decisions import CycleRecord
    from scheduler.engine.session import SessionConfig
    from scheduler.service import Service

    def job(queue: str, name: str, at: int) -> list[ev.EventBase]:
        return [
            ev.PodGroupUpserted(at_ms=at, name=name, namespace="ns", queue=queue, created_at_ms=at),
            ev.PodSubmitted(
                at_ms=at,
                name=name,
                namespace="ns",
                pod_group=name,
                requests=ev.PodRequests(gpus=4),
                created_at_ms=at,
            ),
        ]

    history: list[ev.EventBase] = [
        ev.NodeUpserted(at_ms=0, name="n1", cpu_millicores=8000, memory_bytes=2**34, gpus=4),
        ev.QueueUpserted(at_ms=0, name="a"),
        ev.QueueUpserted(at_ms=0, name="b"),
        *job("a", "old", 0),
        ev.PodBound(at_ms=0, name="old", namespace="ns", node="n1"),
        ev.PodFinished(at_ms=100 * S, name="old", namespace="ns", phase="Succeeded"),
        *job("a", "a2", 100 * S),
        *job("b", "b2", 100 * S),
    ]
    with FileLog(tmp_path / "log") as log:
        append_events(log, history)
        snap = FairshareService(log, FairshareConfig(window_s=3600, half_life_s=600)).step()
        assert (
            snap is not None
            and snap.queues["a"]["gpu"] == pytest.approx(1.0)
            and snap.queues["b"]["gpu"] == 0
        )
        Service(log, DEFAULT_TOPICS, SessionConfig(k_value=1.0)).run(stop_when_idle=True)
        records = [
            CycleRecord.model_validate_json(r.value) for r in log.read(DEFAULT_TOPICS.decisions, 0, 1000)
        ]
    last = records[-1]
    assert last.usage_snapshot_id == snap.id and last.usage_available
    usage = {q.name: q.usage["gpu"] for q in last.queues}
    assert usage == {"a": pytest.approx(1.0), "b": 0.0}
    binds = [d for r in records for d in r.decisions if d.kind == "Bind"]
    assert [d.queue for d in binds] == ["b"]


def test_real_prometheus_stopped_then_restarted(prometheus_server: PrometheusFactory, tmp_path: Path) -> None:
    """The stale / unavailable / recovered path against a real Prometheus process (tests/support/promserver.py), with
    the scheduler service consuming the snapshots: it keeps scheduling, says when usage is unavailable (cycle
    records and the ``hourglass_usage_available`` metric) and picks the usage up again by itself.

    The as-of time is the service's clock, pinned to the end of the backfilled history and moved by hand, so
    the staleness arithmetic does not depend on how long the server takes to stop and start.
    """
    end = (int(time.time()) // 3600 - 2) * 3600
    om = openmetrics_history(
        tmp_path / "h.om",
        start_s=end - 7200,
        end_s=end,
        allocation={"q": {"gpu": 3.0}},
        capacity={"gpu": 4.0},
    )
    prom = prometheus_server(history=om)
    source = PrometheusSource(PrometheusSourceConfig(url=prom.url, retries=0, step_s=60))
    cfg = FairshareConfig(window_s=3600, staleness_s=300)
    now = [end * S]
    with FileLog(tmp_path / "log") as log:
        append_events(log, one_pod_cluster())
        metrics = SchedulerMetrics.create()
        scheduler = Service(log, config=SessionConfig(k_value=1.0), metrics=metrics)

        def schedule() -> CycleRecord:
            scheduler.run(stop_when_idle=True)
            assert scheduler.stats.last_cycle is not None
            return scheduler.stats.last_cycle

        svc = FairshareService(log, cfg, source_name="prometheus", source=source, clock_ms=lambda: now[0])
        first = svc.step()
        assert first is not None and first.available and first.source == "prometheus"
        assert first.queues["q"]["gpu"] == pytest.approx(0.75, rel=1e-9)  # 3 of 4 GPUs all hour long
        rec = schedule()
        assert rec.usage_snapshot_id == first.id and rec.usage_available
        assert metrics.registry.get_sample_value("hourglass_usage_available") == 1.0

        prom.stop()
        now[0] = end * S + 60 * S
        assert svc.step() is None  # within staleness: the scheduler keeps the last snapshot
        now[0] = end * S + 301 * S
        gone = svc.step()
        assert gone is not None and not gone.available
        assert gone.reason is not None and prom.url in gone.reason and "cannot connect" in gone.reason
        cycles_before = scheduler.stats.cycles_appended
        append_events(log, [ev.PodDeleted(at_ms=50 * S, name="p", namespace="ns")])  # the cluster moves on
        rec = schedule()
        assert scheduler.stats.cycles_appended > cycles_before  # scheduling continues
        assert rec.usage_snapshot_id == gone.id and not rec.usage_available  # classic fair share, and says so
        assert metrics.registry.get_sample_value("hourglass_usage_available") == 0.0

        prom.start()
        now[0] = end * S + 360 * S
        back = svc.step()
        assert back is not None and back.available
        assert back.as_of_ms == end * S + 360 * S and back.id != first.id
        assert back.queues["q"]["gpu"] == pytest.approx(0.75, rel=1e-9)
        assert [s.available for s in usage_records(log)] == [True, False, True]
        rec = schedule()
        assert rec.usage_snapshot_id == back.id and rec.usage_available  # recovered without a restart
        assert metrics.registry.get_sample_value("hourglass_usage_available") == 1.0
