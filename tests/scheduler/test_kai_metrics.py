"""KAI's metric names on the scheduler's /metrics (scheduler/kai_metrics.py), and KAI's queries over them.

A KAI user's dashboards and alerts keep working: the names, labels and units are KAI's
(``pkg/scheduler/metrics/metrics.go``, ``pkg/queuecontroller/metrics/metrics.go``, kai-spec §7.4), the
values agree with Hourglass's own metrics, and the queries of KAI's Grafana dashboard
(``docs/metrics/grafana-dashboard.json`` in KAI's repository) and of its time-based fair-share docs return
data from a real Prometheus scraping the endpoint.
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.parse
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fairshare.metrics import FairshareMetrics, serve_registry
from scheduler.engine.cycle import run_cycle
from scheduler.engine.record.decisions import CycleRecord, Decision
from scheduler.engine.state import evolve
from scheduler.metrics import (
    CYCLE_KEY,
    BinderMetrics,
    SchedulerMetrics,
    capacity_of,
    observe_cycle,
    run_timed_cycle,
    serve,
)
from tests.support.cluster_states import NOW_MS, two_team_state
from tests.support.promserver import PrometheusFactory

Labels = tuple[tuple[str, str], ...]


def _scrape(m: SchedulerMetrics) -> tuple[dict[tuple[str, Labels], float], dict[str, str], str]:
    """Samples by (name, labels), family types by name, and the raw text, over real HTTP."""
    with serve(m) as server, urllib.request.urlopen(f"{server.url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    samples, types = {}, {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, types, text


def _q(queue: str) -> Labels:
    return (("queue_display_name", ""), ("queue_metadata_name", queue), ("queue_name", queue))


def _one_cycle(
    usage: dict[str, dict[str, float]] | None = None, m: SchedulerMetrics | None = None
) -> SchedulerMetrics:
    """One cycle of tests.test_metrics' cluster (observed into ``m``, or new metrics); its pods were created
    7 ms before the cycle."""
    state = two_team_state()
    state = dataclasses.replace(state, pods=tuple(evolve(p, created_ms=NOW_MS - 7) for p in state.pods))
    m = m if m is not None else SchedulerMetrics.create()
    record, ssn = run_cycle(state, now_ms=NOW_MS, usage=usage)
    durations = {"allocate": 0.002, "reclaim": 0.001, CYCLE_KEY: 0.004}
    observe_cycle(m, record, durations, capacity=capacity_of(ssn), session=ssn)
    return m


@pytest.mark.parametrize(
    ("name", "queue", "value"),
    [
        # Queue-controller gauges: GPUs, cores, bytes; -1 = unlimited quota.
        ("kai_queue_info", "team-a", 1.0),
        ("kai_queue_deserved_gpus", "team-a", 2.0),
        ("kai_queue_deserved_gpus", "org", 4.0),
        ("kai_queue_quota_cpu_cores", "team-a", -1.0),
        ("kai_queue_quota_memory_bytes", "team-a", -1.0),
        ("kai_queue_allocated_gpus", "team-a", 1.0),
        ("kai_queue_allocated_gpus", "team-b", 0.5),
        ("kai_queue_allocated_gpus", "org", 1.5),
        ("kai_queue_allocated_cpu_cores", "team-a", 2.0),
        ("kai_queue_allocated_memory_bytes", "team-a", 8e9),
        # Scheduler gauges: fair share in devices, cores and decimal GB; usage is U'.
        ("kai_queue_fair_share_gpu", "team-a", 1.0),
        ("kai_queue_fair_share_gpu", "team-b", 0.5),
        ("kai_queue_fair_share_cpu_cores", "team-a", 2.0),
        ("kai_queue_fair_share_memory_gb", "team-a", 8.0),
        ("kai_queue_gpu_usage", "team-a", 0.25),
        ("kai_queue_cpu_usage", "team-a", 0.0),
        ("kai_queue_memory_usage", "team-b", 0.0),
    ],
)
def test_queue_metrics_have_kais_names_labels_and_units(name: str, queue: str, value: float) -> None:
    samples, types, _ = _scrape(_one_cycle(usage={"team-a": {"gpu": 0.25}}))
    assert samples[(name, _q(queue))] == pytest.approx(value)
    assert types[name] == "gauge"


def test_kai_values_agree_with_hourglass_values() -> None:
    samples, _, _ = _scrape(_one_cycle())
    for queue in ("org", "team-a", "team-b"):
        hg = (("queue", queue), ("resource", "gpu"))
        assert samples[("kai_queue_fair_share_gpu", _q(queue))] == samples[("hourglass_queue_fair_share", hg)]
        assert samples[("kai_queue_allocated_gpus", _q(queue))] == samples[("hourglass_queue_allocated", hg)]


def test_latency_gauges_are_whole_milliseconds_of_the_last_cycle() -> None:
    # clock reads: start, proportion starts and ends (within opening the session), session opened, after
    # each of the 5 actions, record built.
    ticks = iter([0.0, 0.0002, 0.0013, 0.0015, 0.0035, 0.0045, 0.0050, 0.0059, 0.0071, 0.0099])
    m = SchedulerMetrics.create()
    record, ssn, durations = run_timed_cycle(two_team_state(), now_ms=NOW_MS, clock=lambda: next(ticks))
    observe_cycle(m, record, durations, capacity=capacity_of(ssn), session=ssn)
    samples, types, _ = _scrape(m)
    # open 1.5 ms -> 1; the whole cycle 9.9 ms -> 9; close = whole - open - actions = 9.9 - 1.5 - 5.6 = 2.8 -> 2.
    assert samples[("kai_e2e_scheduling_latency_milliseconds", ())] == 9.0
    assert samples[("kai_open_session_latency_milliseconds", ())] == 1.0
    assert samples[("kai_close_session_latency_milliseconds", ())] == 2.0
    assert samples[("kai_action_scheduling_latency_milliseconds", (("action", "allocate"),))] == 2.0
    # KAI's proportion plugin opening the session is the fair-share division: 1.1 ms -> 1.
    plugin = (("OnSession", "OnSessionOpen"), ("plugin", "proportion"))
    assert samples[("kai_plugin_scheduling_latency_milliseconds", plugin)] == 1.0
    assert types["kai_plugin_scheduling_latency_milliseconds"] == "gauge"
    assert {
        types[n]
        for n in ("kai_e2e_scheduling_latency_milliseconds", "kai_action_scheduling_latency_milliseconds")
    } == {"gauge"}


def test_task_scheduling_latency_is_creation_to_bind_in_kais_buckets() -> None:
    """Each bound pod's wait, from its creation to the cycle that bound it, in KAI's 5..2560 ms buckets."""
    state = two_team_state()
    waits = {"ja-0": 7, "jb-0": 3000}  # ms before the cycle's logical time; 3000 falls past 2560 (+Inf)
    pods = tuple(evolve(p, created_ms=NOW_MS - waits[p.uid]) for p in state.pods)
    record, ssn = run_cycle(dataclasses.replace(state, pods=pods), now_ms=NOW_MS)
    m = SchedulerMetrics.create()
    observe_cycle(m, record, {CYCLE_KEY: 0.001}, session=ssn)
    samples, types, text = _scrape(m)
    name = "kai_task_scheduling_latency_milliseconds"
    assert types[name] == "histogram"
    bucket = {le: samples[(f"{name}_bucket", (("le", le),))] for le in ("5", "10", "2560", "+Inf")}
    assert bucket == {"5": 0.0, "10": 1.0, "2560": 1.0, "+Inf": 2.0}
    assert samples[(f"{name}_count", ())] == 2.0 and samples[(f"{name}_sum", ())] == 3007.0
    assert 'le="2560"' in text  # bounds written as KAI's Go client writes them
    # Without the session (or with unknown creation times) nothing is observed.
    m2 = SchedulerMetrics.create()
    observe_cycle(m2, record, {CYCLE_KEY: 0.001})
    assert _scrape(m2)[0][(f"{name}_count", ())] == 0.0


def _record(decisions: list[Decision]) -> CycleRecord:
    return CycleRecord(
        cycle_id="c",
        events_offset=1,
        usage_snapshot_id=None,
        config_hash="h",
        logical_time_ms=1,
        queues=[],
        decisions=decisions,
    )


def test_per_action_counters_accumulate_over_cycles_under_kais_exact_names() -> None:
    m = SchedulerMetrics.create()
    binds = [
        Decision(kind="Bind", job="ns/train-1", queue="a", pod="ns/train-1-0", action="allocate"),
        Decision(kind="Bind", job="ns/train-1", queue="a", pod="ns/train-1-1", action="allocate"),
        Decision(kind="Pipeline", job="ns/train-2", queue="a", pod="ns/train-2-0", action="reclaim"),
        Decision(kind="Evict", job="ns/old", queue="b", pod="ns/old-0", action="reclaim"),
        Decision(kind="Evict", job="ns/old", queue="b", pod="ns/old-1", action="reclaim"),
        Decision(kind="Unschedulable", job="ns/big", queue="a", reason="x"),
    ]
    observe_cycle(m, _record(binds), {CYCLE_KEY: 0.001})
    observe_cycle(m, _record(binds[:1]), {CYCLE_KEY: 0.001})
    samples, types, text = _scrape(m)
    # A gang counts once per cycle (KAI counts podgroups), pipelined ones too.
    assert samples[("kai_podgroups_scheduled_by_action", (("action", "allocate"),))] == 2.0
    assert samples[("kai_podgroups_scheduled_by_action", (("action", "reclaim"),))] == 1.0
    assert "kai_podgroups_scheduled_by_action_total" not in text  # KAI's name, no suffix added
    evicted = (
        ("action", "reclaim"),
        ("namespace", "ns"),
        ("nodepool", "default"),
        ("podgroup", "old"),
        ("uid", ""),
    )
    assert samples[("kai_pod_group_evicted_pods_total", evicted)] == 2.0
    assert types["kai_pod_group_evicted_pods"] == "counter"


def _job(name: str, gpus: int, node: str | None = None, prio: int = 50) -> dict[str, Any]:
    task: dict[str, Any] = {"name": f"{name}-0", "status": "running" if node else "pending", "gpus": gpus}
    if node:
        task["node"] = node
    return {"name": name, "queue": "a" if name[0] != "b" else "b", "priority": prio, "tasks": [task]}


def _queue(name: str, quota: int) -> dict[str, Any]:
    return {"name": name, "parent": None, "gpu": {"quota": quota, "limit": None, "over_quota_weight": 1}}


#: (case, nodes' GPUs, queues' GPU quotas, jobs, KAI's counters after one cycle: {(name, action): value}).
#: Jobs named b* are in queue b, the others in queue a; a job with a node is running there.
SOLVER_CASES: tuple[
    tuple[str, list[int], dict[str, int], list[dict[str, Any]], dict[tuple[str, str], float]], ...
] = (
    (
        # a is owed 3 GPUs held by b: the scenario with b1 alone (2 GPUs) is filtered by the GPU bound,
        # the one with b1 and b2 is simulated and passes.
        "reclaim",
        [4],
        {"a": 3, "b": 1},
        [_job("b1", 2, "n0"), _job("b2", 2, "n0"), _job("a1", 3)],
        {
            ("podgroups_acted_on_by_action", "reclaim"): 1,
            ("scenarios_filtered_by_action", "reclaim"): 1,
            ("scenarios_simulation_by_action", "reclaim"): 1,
            ("podgroups_scheduled_by_action", "reclaim"): 1,
            ("total_preemption_attempts", ""): 0,
        },
    ),
    (
        # A higher-priority job of the same queue preempts the running one: KAI counts the attempt when it
        # succeeds.
        "preempt",
        [2],
        {"a": 2},
        [_job("low", 2, "n0"), _job("high", 2, prio=80)],
        {
            ("podgroups_acted_on_by_action", "preempt"): 1,
            ("scenarios_simulation_by_action", "preempt"): 1,
            ("scenarios_filtered_by_action", "preempt"): 0,
            ("podgroups_scheduled_by_action", "preempt"): 1,
            ("total_preemption_attempts", ""): 1,
        },
    ),
    (
        # Two 1-GPU jobs on two nodes leave no node for a 2-GPU job: consolidation moves one. The moved job
        # (evicted and re-placed) is not counted as scheduled, the 2-GPU job is.
        "consolidation",
        [2, 2],
        {"a": 4},
        [_job("x", 1, "n0"), _job("y", 1, "n1"), _job("wide", 2)],
        {
            ("podgroups_acted_on_by_action", "consolidation"): 1,
            ("scenarios_simulation_by_action", "consolidation"): 1,
            ("podgroups_scheduled_by_action", "consolidation"): 1,
            ("total_preemption_attempts", ""): 0,
        },
    ),
)


def _observe_solver_case(
    m: SchedulerMetrics, case: str, podgroups: dict[str, dict[str, Any]] | None = None
) -> None:
    """Run one cycle of the SOLVER_CASES row ``case`` (timed, as the service does) and observe it into ``m``.

    ``podgroups`` maps job names to PodGroup objects' ``metadata`` extras (uid, labels): each goes through
    the real path, Kubernetes object -> PodGroupUpserted -> its JSON -> the state fold's Job."""
    from scheduler.conformance.runner import NOW_MS as CONFORMANCE_NOW_MS
    from scheduler.conformance.runner import load_state

    _, gpus, quotas, jobs, _ = next(c for c in SOLVER_CASES if c[0] == case)
    doc = {
        "run": {"mode": "single_pass", "phase": "reclaim"},
        "cluster": {"nodes": [{"name": f"n{i}", "gpus": g} for i, g in enumerate(gpus)]},
        "queues": [_queue(q, quota) for q, quota in quotas.items()],
        "jobs": jobs,
    }
    state, config = load_state(doc)
    if podgroups:
        state = dataclasses.replace(
            state,
            jobs=tuple(
                _with_podgroup(j, podgroups[j.name]) if j.name in podgroups else j for j in state.jobs
            ),
        )
    record, ssn, durations = run_timed_cycle(state, config, now_ms=CONFORMANCE_NOW_MS)
    # The timed cycle is the plain one: timing and counting never change the record.
    assert record.dumps() == run_cycle(state, config, now_ms=CONFORMANCE_NOW_MS)[0].dumps()
    observe_cycle(m, record, durations, session=ssn)


def _with_podgroup(job: Any, meta: Any) -> Any:
    """``job`` as the fold makes it from a PodGroup object with ``meta`` merged into its metadata."""
    from ingest.events import dump_event, parse_event
    from ingest.kube.translate import podgroup_upserted
    from scheduler.engine.state import StateBuilder

    obj = {
        "metadata": {
            "name": job.name,
            "namespace": "ns",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            **meta,
        },
        "spec": {"queue": job.queue},
    }
    b = StateBuilder()
    b.apply(parse_event(dump_event(podgroup_upserted(obj, 0))))
    (folded,) = b.snapshot().jobs
    return evolve(job, k8s_uid=folded.k8s_uid, node_pool=folded.node_pool)


#: (PodGroup metadata extras of the evicted jobs b1, b2 -> the uid and nodepool labels of their series).
EVICTED_LABEL_CASES = (
    ({}, {"b1": ("", "default"), "b2": ("", "default")}),
    (
        {"b1": {"uid": "1f0e-b1"}, "b2": {"uid": "2a7c-b2", "labels": {"kai.scheduler/node-pool": "pool-a"}}},
        {"b1": ("1f0e-b1", "default"), "b2": ("2a7c-b2", "pool-a")},
    ),
    (
        {"b1": {"labels": {"kai.scheduler/node-pool": ""}}},  # an empty label is KAI's default pool
        {"b1": ("", "default"), "b2": ("", "default")},
    ),
)


@pytest.mark.parametrize(("meta", "expected"), EVICTED_LABEL_CASES)
def test_evicted_pods_carry_the_podgroups_uid_and_node_pool(
    meta: dict[str, dict[str, Any]], expected: dict[str, tuple[str, str]]
) -> None:
    m = SchedulerMetrics.create()
    _observe_solver_case(m, "reclaim", podgroups=meta)
    samples, _, _ = _scrape(m)
    got = {
        dict(labels)["podgroup"]: (dict(labels)["uid"], dict(labels)["nodepool"])
        for (name, labels), value in samples.items()
        if name == "kai_pod_group_evicted_pods_total" and value == 1.0
    }
    assert got == expected


def test_the_metric_labels_are_contract_v2_fields_old_events_keep_their_bytes() -> None:
    from ingest.events import dump_event
    from ingest.kube.translate import podgroup_upserted

    base = {"name": "g", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"}
    plain = podgroup_upserted({"metadata": base, "spec": {"queue": "q"}}, 0)
    assert plain.v == 1 and b"k8s_uid" not in dump_event(plain) and b"node_pool" not in dump_event(plain)
    labelled = podgroup_upserted(
        {
            "metadata": {**base, "uid": "u-1", "labels": {"kai.scheduler/node-pool": "p"}},
            "spec": {"queue": "q"},
        },
        0,
    )
    assert (labelled.v, labelled.k8s_uid, labelled.node_pool) == (2, "u-1", "p")


@pytest.mark.parametrize(
    ("case", "expected"), [(c[0], c[4]) for c in SOLVER_CASES], ids=[c[0] for c in SOLVER_CASES]
)
def test_solver_work_is_counted_under_kais_names(case: str, expected: dict[tuple[str, str], float]) -> None:
    m = SchedulerMetrics.create()
    _observe_solver_case(m, case)
    samples, types, text = _scrape(m)
    got = {
        (name, action): samples.get((f"kai_{name}", (("action", action),) if action else ()), 0.0)
        for name, action in expected
    }
    assert got == expected
    for name in (
        "podgroups_acted_on_by_action",
        "scenarios_simulation_by_action",
        "scenarios_filtered_by_action",
        "total_preemption_attempts",
    ):
        assert types[f"kai_{name}"] == "unknown"  # untyped: KAI's exact name, no _total appended
        assert f"kai_{name}_total" not in text
    # Cumulative: a second identical cycle doubles every counter.
    _observe_solver_case(m, case)
    again, _, _ = _scrape(m)
    for (name, action), value in expected.items():
        assert again.get((f"kai_{name}", (("action", action),) if action else ()), 0.0) == 2 * value


# ----------------------------------------------------------------------------- a real Prometheus

#: (where KAI uses it, PromQL). KAI's Grafana dashboard panels "Fair share" and "Allocated"; the
#: queue-controller gauges its time-based fair-share docs read (usageDBConfig.extraParams defaults) in
#: the sliding-window shape KAI's usage client builds (kai-spec §4.3); the scheduler latency and action
#: gauges and counters of KAI's METRICS.md.
KAI_QUERIES: tuple[tuple[str, str], ...] = (
    ("dashboard: Fair share", "kai_queue_fair_share_gpu"),
    ("dashboard: Allocated", "kai_queue_allocated_gpus"),
    ("time-based fair share: gpu allocation", "sum_over_time((kai_queue_allocated_gpus)[1m:1s])"),
    ("time-based fair share: cpu allocation", "sum_over_time((kai_queue_allocated_cpu_cores)[1m:1s])"),
    ("time-based fair share: memory allocation", "sum_over_time((kai_queue_allocated_memory_bytes)[1m:1s])"),
    ("scheduler usage gauge", "kai_queue_gpu_usage"),
    ("latency", "kai_e2e_scheduling_latency_milliseconds"),
    ("latency per action", 'max by (action) (kai_action_scheduling_latency_milliseconds{action="allocate"})'),
    ("podgroups scheduled", "sum by (action) (increase(kai_podgroups_scheduled_by_action[1m]))"),
    (
        "task scheduling latency p99",
        "histogram_quantile(0.99, sum by (le) (kai_task_scheduling_latency_milliseconds_bucket))",
    ),
    ("queue fair share vs allocated", "kai_queue_allocated_gpus / on (queue_name) kai_queue_fair_share_gpu"),
    (
        "plugin latency",
        'max by (plugin) (kai_plugin_scheduling_latency_milliseconds{OnSession="OnSessionOpen"})',
    ),
    ("podgroups acted on", "sum by (action) (increase(kai_podgroups_acted_on_by_action[1m]))"),
    ("scenarios simulated", "sum by (action) (kai_scenarios_simulation_by_action)"),
    ("scenarios filtered", 'kai_scenarios_filtered_by_action{action="reclaim"}'),
    ("preemption attempts", "increase(kai_total_preemption_attempts[1m])"),
    ("evicted pods per node pool", "sum by (nodepool, action) (kai_pod_group_evicted_pods_total)"),
    # The binder's and the fairshare service's own endpoints.
    (
        "task bind latency p99",
        "histogram_quantile(0.99, sum by (le) (kai_task_bind_latency_milliseconds_bucket))",
    ),
    (
        "usage query latency p50",
        "histogram_quantile(0.5, sum by (le) (kai_usage_query_latency_milliseconds_bucket))",
    ),
)


def _query(prom_url: str, expr: str) -> list[Any]:
    url = f"{prom_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    result: list[Any] = body["data"]["result"]
    return result


def test_kais_dashboard_and_doc_queries_return_data_from_a_real_prometheus(
    prometheus_server: PrometheusFactory,
) -> None:
    # A reclaim cycle first (solver counters, an eviction, the proportion plugin's gauge), then the
    # dashboard's cluster, whose queues the per-queue gauges show.
    m = SchedulerMetrics.create()
    _observe_solver_case(m, "reclaim")
    m = _one_cycle(usage={"team-a": {"gpu": 0.25}}, m=m)
    binder, fairshare = BinderMetrics.create(), FairshareMetrics.create()
    for seconds in (0.0071, 0.0079):  # two binds of 7 ms (whole ms, as KAI's)
        binder.task_bind_latency.observe_seconds(seconds)
    fairshare.usage_query_latency.observe_seconds(0.030)
    with serve(m) as endpoint, serve(binder) as bind_ep, serve_registry(fairshare.registry) as fs_ep:
        targets = [f"127.0.0.1:{e.port}" for e in (endpoint, bind_ep, fs_ep)]
        prom = prometheus_server(scrape_targets=targets, scrape_interval_s=1.0)
        deadline = time.monotonic() + 30
        while not _query(prom.url, "count(count_over_time(up[1m]) >= 3) == 3"):
            assert time.monotonic() < deadline, "Prometheus did not scrape the 3 endpoints 3 times in 30 s"
            time.sleep(0.5)
        results = {where: _query(prom.url, expr) for where, expr in KAI_QUERIES}
    empty = [where for where, res in results.items() if not res]
    assert not empty, f"KAI queries with no data: {empty}"
    # The dashboard's legend is {{queue_name}}: every queue is there under that label.
    fair = {r["metric"]["queue_name"]: float(r["value"][1]) for r in results["dashboard: Fair share"]}
    assert fair == {"org": 1.5, "team-a": 1.0, "team-b": 0.5}
    ratio = {
        r["metric"]["queue_name"]: float(r["value"][1]) for r in results["queue fair share vs allocated"]
    }
    assert ratio == {"org": 1.0, "team-a": 1.0, "team-b": 1.0}
    (p99,) = results["task scheduling latency p99"]
    assert 5.0 < float(p99["value"][1]) <= 10.0  # both pods waited 7 ms: the 5..10 ms bucket
    (bind99,) = results["task bind latency p99"]
    assert 5.0 < float(bind99["value"][1]) <= 10.0
    (usage50,) = results["usage query latency p50"]
    assert 20.0 < float(usage50["value"][1]) <= 40.0
    plugins = {r["metric"]["plugin"] for r in results["plugin latency"]}
    assert plugins == {"proportion"}
    simulated = {r["metric"]["action"]: float(r["value"][1]) for r in results["scenarios simulated"]}
    assert simulated == {"reclaim": 1.0}
