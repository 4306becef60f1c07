"""Time-based fairshare reads usage from Prometheus in production and from the event log by default: on the
same run, both must give the same decayed usage, within Prometheus' sampling error.

The run is the two-queue scenario (``examples/two-queue-oscillation.yaml``, one simulated day). The exact
side folds its ``events.jsonl`` into :class:`fairshare.ledger.EventLedger`. The Prometheus side is what the
scheduler exported during that run: each cycle record goes through :mod:`scheduler.metrics` (the real
exporter) and its ``hourglass_queue_allocated`` gauge is sampled every 30 s, as a scrape would, backfilled
into a real Prometheus and read back with :class:`fairshare.prometheus.PrometheusSource`.
"""

from __future__ import annotations

import time
from pathlib import Path

from analytics.cli import main
from analytics.rundir import read_cycles, read_events
from fairshare.config import FairshareConfig
from fairshare.decay import usage_at
from fairshare.ledger import EventLedger
from fairshare.prometheus import PrometheusSource, PrometheusSourceConfig
from scheduler.metrics import SchedulerMetrics, observe_cycle
from tests.support.paths import REPO_ROOT
from tests.support.promserver import PrometheusFactory, openmetrics_history

EXAMPLE = REPO_ROOT / "examples" / "two-queue-oscillation.yaml"
STEP_S = 30
GPUS = 16
HALF_LIFE_S = 7200


def test_prometheus_and_event_log_usage_agree_on_the_same_run(
    prometheus_server: PrometheusFactory, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    assert main(["simulate", "--config", str(EXAMPLE), "--set", "duration=1d", "--out", str(run)]) == 0
    cfg = FairshareConfig(window_s=86_400, half_life_s=HALF_LIFE_S, window_type="sliding")

    # Exact: the event log.
    ledger = EventLedger()
    for _, e in read_events(run):
        ledger.fold(e)
    end_ms = 86_400_000  # the run's end (its last event comes earlier; allocations hold until then)
    assert ledger.as_of_ms is not None and 0 < ledger.as_of_ms <= end_ms
    alloc = ledger.allocation(0, end_ms)
    exact = usage_at(alloc, ledger.capacity(0, end_ms), end_ms, cfg, kind="exact")

    # Sampled: the scheduler's exported gauges, scraped every STEP_S, on a real Prometheus. The run's logical
    # clock starts at 0; its history is shifted to end two hours ago (backfilled blocks must predate the head).
    shift_s = (int(time.time()) // 3600 - 2) * 3600 - end_ms // 1000
    steps: dict[str, list[tuple[int, float]]] = {"a": [], "b": []}
    metrics = SchedulerMetrics.create()
    for rec in read_cycles(run):
        observe_cycle(metrics, rec, {})
        for q, points in steps.items():
            v = metrics.registry.get_sample_value(
                "hourglass_queue_allocated", {"queue": q, "resource": "gpu"}
            )
            points.append((rec.logical_time_ms // 1000 + shift_s, float(v or 0.0)))
    history = openmetrics_history(
        tmp_path / "history.om",
        start_s=shift_s,
        end_s=end_ms // 1000 + shift_s,
        allocation={q: {"gpu": pts} for q, pts in steps.items()},
        capacity={"gpu": float(GPUS)},
        interval_s=STEP_S,
    )
    prom = prometheus_server(history=history)
    source = PrometheusSource(PrometheusSourceConfig(url=prom.url, step_s=STEP_S))
    lo, hi = shift_s * 1000, end_ms + shift_s * 1000
    sampled = usage_at(
        source.allocation(lo - source.step_ms, hi),
        source.capacity(lo - source.step_ms, hi),
        hi,
        cfg,
        kind=source.kind,
        step_ms=source.step_ms,
    )

    for q in ("a", "b"):
        e, s = exact.normalised[q]["gpu"], sampled.normalised[q]["gpu"]
        assert 0.2 < e < 0.8, (q, e)  # both queues really used the cluster during the day
        # Sampling error: each change of the queue's allocation can be misplaced by up to one scrape step,
        # plus one cycle period (the gauge moves at cycles, the event log at binds / finishes), the whole
        # cluster at a time, weighted by the decay at that moment.
        changes = alloc.filter((alloc["queue"] == q) & (alloc["resource"] == "gpu"))["ts_ms"].to_list()
        err = sum((STEP_S + 60) * GPUS * 1000 * 0.5 ** ((end_ms - t) / 1000 / HALF_LIFE_S) for t in changes)
        bound = err / exact.capacity["gpu"]
        assert abs(e - s) <= bound, (q, e, s, bound)
        assert bound < 0.1  # the bound is tight enough to catch a wrong decay or window on either side
