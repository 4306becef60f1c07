"""The scheduler's /metrics endpoint: values a dashboard or Prometheus reads, served over real HTTP.

The last test runs a real Prometheus scraping the endpoint and reads the series back through
``fairshare.prometheus.PrometheusSource``, the same path time-based fair share uses in production.
"""

from __future__ import annotations

import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fairshare.prometheus import PrometheusSource, PrometheusSourceConfig
from fairshare.source import SourceUnavailable
from scheduler.engine.cycle import run_cycle
from scheduler.engine.record.decisions import CycleRecord
from scheduler.engine.state import ClusterState, Job, Pod, PodRequest
from scheduler.metrics import (
    CYCLE_KEY,
    SchedulerMetrics,
    capacity_of,
    observe_cycle,
    observe_dead_letters,
    run_timed_cycle,
    serve,
)
from tests.support.cluster_states import GB, NOW_MS, two_team_state
from tests.support.promserver import PrometheusFactory, wait_for


def _cycle(
    metrics: SchedulerMetrics, state: ClusterState, usage: dict[str, dict[str, float]] | None = None
) -> CycleRecord:
    record, ssn = run_cycle(state, now_ms=NOW_MS, usage=usage)
    observe_cycle(
        metrics, record, {"allocate": 0.002, "reclaim": 0.001, CYCLE_KEY: 0.004}, capacity=capacity_of(ssn)
    )
    return record


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics over HTTP and index every sample by (name, sorted labels)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _q(name: str, queue: str, resource: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (name, (("queue", queue), ("resource", resource)))


def test_endpoint_exports_queue_division_in_base_units() -> None:
    m = SchedulerMetrics.create()
    _cycle(m, two_team_state())
    with serve(m) as server:
        got = _scrape(server.url)
    # GPUs as floats, CPU in cores, memory in bytes
    assert got[_q("hourglass_queue_allocated", "team-a", "gpu")] == 1.0
    assert got[_q("hourglass_queue_allocated", "team-b", "gpu")] == 0.5
    assert got[_q("hourglass_queue_allocated", "org", "gpu")] == 1.5
    assert got[_q("hourglass_queue_allocated", "team-a", "cpu")] == 2.0
    assert got[_q("hourglass_queue_allocated", "team-a", "memory")] == 8e9
    assert got[_q("hourglass_queue_requested", "team-b", "cpu")] == 0.5
    assert got[_q("hourglass_queue_deserved", "team-a", "gpu")] == 2.0
    assert got[_q("hourglass_queue_fair_share", "team-a", "gpu")] == 1.0
    assert got[_q("hourglass_queue_fair_share_classic", "team-a", "gpu")] == 1.0
    assert got[_q("hourglass_queue_usage", "team-a", "gpu")] == 0.0
    # an unlimited quota has no series rather than a magic number
    assert _q("hourglass_queue_deserved", "team-a", "cpu") not in got
    assert got[("hourglass_cluster_capacity", (("resource", "gpu"),))] == 4.0
    assert got[("hourglass_cluster_capacity", (("resource", "cpu"),))] == 32.0
    assert got[("hourglass_cluster_capacity", (("resource", "memory"),))] == 256e9
    info = ("hourglass_queue_info", (("leaf", "true"), ("parent", "org"), ("queue", "team-a")))
    assert got[info] == 1.0
    assert got[("hourglass_queue_info", (("leaf", "false"), ("parent", ""), ("queue", "org")))] == 1.0
    assert got[("hourglass_binds_total", (("action", "allocate"),))] == 2.0
    assert got[("hourglass_cycles_total", ())] == 1.0
    assert got[("hourglass_cycle_duration_seconds_count", ())] == 1.0
    assert got[("hourglass_cycle_duration_seconds_sum", ())] == pytest.approx(0.004)
    assert got[("hourglass_action_duration_seconds_count", (("action", "allocate"),))] == 1.0
    assert got[("hourglass_last_cycle_events_offset", ())] == 7.0
    assert got[("hourglass_last_cycle_logical_time_seconds", ())] == NOW_MS / 1000


def test_usage_available_shows_the_degraded_state() -> None:
    m = SchedulerMetrics.create()
    with serve(m) as server:
        _cycle(m, two_team_state(), usage=None)
        assert _scrape(server.url)[("hourglass_usage_available", ())] == 0.0
        usage = {"team-a": {"gpu": 0.25}, "team-b": {"gpu": 0.0}, "org": {"gpu": 0.25}}
        _cycle(m, two_team_state(), usage=usage)
        got = _scrape(server.url)
    assert got[("hourglass_usage_available", ())] == 1.0
    assert got[_q("hourglass_queue_usage", "team-a", "gpu")] == 0.25


def test_a_queue_that_disappears_from_the_record_disappears_from_the_metrics() -> None:
    m = SchedulerMetrics.create()
    with serve(m) as server:
        _cycle(m, two_team_state(with_team_b=True))
        before = _scrape(server.url)
        _cycle(m, two_team_state(with_team_b=False))
        after = _scrape(server.url)
    assert _q("hourglass_queue_allocated", "team-b", "gpu") in before
    assert not [k for k in after if ("queue", "team-b") in k[1]]
    assert after[_q("hourglass_queue_allocated", "team-a", "gpu")] == 1.0
    # counters keep counting across cycles
    assert after[("hourglass_cycles_total", ())] == 2.0


def test_unschedulable_jobs_and_dead_letters_are_counted() -> None:
    m = SchedulerMetrics.create()
    state = two_team_state()
    big = Pod(uid="big-0", name="big-0", job="big", request=PodRequest(cpu=1000, memory=GB, gpus=8))
    state = ClusterState(
        nodes=state.nodes,
        queues=state.queues,
        jobs=(*state.jobs, Job(uid="big", name="big", queue="team-a")),
        pods=(*state.pods, big),
        events_offset=state.events_offset,
    )
    record = _cycle(m, state)
    reasons = {d.reason or "" for d in record.decisions if d.kind == "Unschedulable"}
    assert len(reasons) == 1
    observe_dead_letters(m, ["Unparseable", "Unparseable", "FoldRejected"])
    with serve(m) as server:
        got = _scrape(server.url)
    assert got[("hourglass_unschedulable_jobs", (("reason", reasons.pop()),))] == 1.0
    assert got[("hourglass_dead_letters_total", (("reason", "Unparseable"),))] == 2.0
    assert got[("hourglass_dead_letters_total", (("reason", "FoldRejected"),))] == 1.0


def test_registries_are_private_and_servers_release_their_port() -> None:
    a, b = SchedulerMetrics.create(), SchedulerMetrics.create()
    _cycle(a, two_team_state())
    with serve(a) as sa, serve(b) as sb:
        assert _scrape(sa.url)[("hourglass_cycles_total", ())] == 1.0
        assert _scrape(sb.url)[("hourglass_cycles_total", ())] == 0.0
        port = sa.port
    # a restarted endpoint can take the same port again
    with serve(a, port=port) as again:
        assert _scrape(again.url)[("hourglass_cycles_total", ())] == 1.0


def test_timed_cycle_records_the_same_decisions_and_times_every_action() -> None:
    plain, _ = run_cycle(two_team_state(), now_ms=NOW_MS)
    timed, ssn, durations = run_timed_cycle(two_team_state(), now_ms=NOW_MS)
    assert timed.dumps() == plain.dumps()
    assert set(durations) == {
        "open_session",
        "allocate",
        "consolidation",
        "reclaim",
        "preempt",
        "stale_gang_eviction",
        CYCLE_KEY,
    }
    assert all(v >= 0 for v in durations.values())
    assert durations[CYCLE_KEY] >= sum(v for k, v in durations.items() if k != CYCLE_KEY) * 0.999
    m = SchedulerMetrics.create()
    observe_cycle(m, timed, durations, capacity=capacity_of(ssn))
    with serve(m) as server:
        got = _scrape(server.url)
    assert got[("hourglass_action_duration_seconds_count", (("action", "reclaim"),))] == 1.0
    assert got[("hourglass_cycle_duration_seconds_sum", ())] == pytest.approx(durations[CYCLE_KEY])


def test_negative_duration_is_rejected() -> None:
    m = SchedulerMetrics.create()
    record, _ = run_cycle(two_team_state(), now_ms=NOW_MS)
    with pytest.raises(ValueError, match="'allocate' is negative"):
        observe_cycle(m, record, {"allocate": -1.0})


def test_prometheus_scrapes_the_endpoint_and_fairshare_reads_it_back(
    prometheus_server: PrometheusFactory,
) -> None:
    m = SchedulerMetrics.create()
    _cycle(m, two_team_state())
    with serve(m) as server:
        prom = prometheus_server(scrape_targets=[f"127.0.0.1:{server.port}"], scrape_interval_s=1.0)
        source = PrometheusSource(PrometheusSourceConfig(url=prom.url, step_s=1, retries=0))
        begin_ms = int(time.time() * 1000) - 5_000

        def allocation_seen() -> bool:
            frame = source.allocation(begin_ms, int(time.time() * 1000) + 1_000)
            return frame.filter(frame["resource"] == "gpu")["queue"].n_unique() == 2

        wait_for(allocation_seen, timeout_s=30, what="the scraped hourglass_queue_allocated series")
        now_ms = int(time.time() * 1000) + 1_000
        frame = source.allocation(begin_ms, now_ms)
        cap = source.capacity(begin_ms, now_ms)
    gpu = frame.filter(frame["resource"] == "gpu")
    # leaf queues only, back in engine units (milli-GPU)
    assert sorted(gpu["queue"].unique().to_list()) == ["team-a", "team-b"]
    last = {q: gpu.filter(gpu["queue"] == q)["value"][-1] for q in ("team-a", "team-b")}
    assert last == {"team-a": 1000.0, "team-b": 500.0}
    mem = frame.filter((frame["resource"] == "memory") & (frame["queue"] == "team-a"))
    assert mem["value"][-1] == 8e9
    assert cap.filter(cap["resource"] == "gpu")["value"][-1] == 4000.0
    assert cap.filter(cap["resource"] == "cpu")["value"][-1] == 32_000.0

    # Prometheus goes away: the source says so, naming the server
    prom.stop()
    with pytest.raises(SourceUnavailable, match=prom.url):
        source.allocation(begin_ms, now_ms)
    source.close()
