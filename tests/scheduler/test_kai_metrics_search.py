"""KAI v0.17's ``scenario_search_*`` metrics on the scheduler's /metrics (scheduler/kai_metrics.py).

Names, types and labels are KAI's (``pkg/scheduler/metrics/metrics.go``, ``docs/metrics/METRICS.md``);
the values count what Hourglass's victim solver did in reclaim and preempt (``Session.work``): jobs by
search result, cycles whose ``solver_action_budget`` was used up, scenarios simulated; and each job's
search time (``scenario_search_duration_seconds``), observed through the cycle's step hook, which never
changes the record.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from scheduler.conformance.runner import NOW_MS, load_state
from scheduler.engine.cycle import run_cycle
from scheduler.engine.kept import KeptSession, run_kept_cycle
from scheduler.kai_metrics import SEARCH_DURATION_BUCKETS_S
from scheduler.metrics import (
    CycleTimer,
    SchedulerMetrics,
    observe_cycle,
    run_timed_cycle,
    timed_session_factory,
)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _job(name: str, gpus: int, node: str | None = None) -> dict[str, Any]:
    task: dict[str, Any] = {"gpus": gpus, "status": "running" if node else "pending"}
    if node:
        task["node"] = node
    return {"name": name, "queue": "b" if name[0] == "b" else "a", "priority": 50, "tasks": [task]}


def _queue(name: str, quota: int) -> dict[str, Any]:
    return {"name": name, "parent": None, "gpu": {"quota": quota, "limit": None, "over_quota_weight": 1}}


# Queue a is owed 3 GPUs that queue b's jobs hold: reclaim must evict b1 and b2 (one scenario simulated).
RECLAIM = {
    "run": {"mode": "single_pass", "phase": "reclaim"},
    "cluster": {"nodes": [{"name": "n0", "gpus": 4}]},
    "queues": [_queue("a", 3), _queue("b", 1)],
    "jobs": [_job("b1", 2, "n0"), _job("b2", 2, "n0"), _job("a1", 3)],
}


def _scrape(m: SchedulerMetrics) -> tuple[Samples, dict[str, str]]:
    samples: Samples = {}
    types: dict[str, str] = {}
    for fam in text_string_to_metric_families(generate_latest(m.registry).decode()):
        types[fam.name] = fam.type
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, types


def _cycle(m: SchedulerMetrics, **config: Any) -> None:
    state, cfg = load_state(RECLAIM)
    cfg = dataclasses.replace(cfg, **config)
    record, ssn, durations = run_timed_cycle(state, cfg, now_ms=NOW_MS)
    observe_cycle(m, record, durations, session=ssn)


def test_a_solved_reclaim_counts_one_job_solved_and_its_simulated_scenario() -> None:
    m = SchedulerMetrics.create()
    _cycle(m)
    samples, types = _scrape(m)
    assert types["kai_scenario_search_jobs"] == "counter"
    assert types["kai_scenario_search_scenarios"] == "counter"
    assert types["kai_scenario_search_action_budget_exhausted"] == "counter"
    solved = (("action", "reclaim"), ("reduced_budget", "false"), ("result", "solved"))
    assert samples[("kai_scenario_search_jobs_total", solved)] == 1
    sim = (("action", "reclaim"), ("generator", "solver"), ("state", "simulated"))
    assert samples[("kai_scenario_search_scenarios_total", sim)] == 1
    assert samples[("kai_scenario_search_action_budget_exhausted_total", (("action", "reclaim"),))] == 0
    _cycle(m)  # cumulative, as KAI's counters
    assert _scrape(m)[0][("kai_scenario_search_jobs_total", solved)] == 2


def test_a_search_the_budget_cuts_counts_as_exhausted() -> None:
    """With no scenario allowed the job's search is cut (KAI: its deadline) and the action's budget is
    used up for the cycle."""
    m = SchedulerMetrics.create()
    _cycle(m, solver_action_budget=0)
    samples, _ = _scrape(m)
    cut = (("action", "reclaim"), ("reduced_budget", "false"), ("result", "deadline_exhausted"))
    assert samples[("kai_scenario_search_jobs_total", cut)] == 1
    assert samples[("kai_scenario_search_action_budget_exhausted_total", (("action", "reclaim"),))] == 1
    assert (
        "kai_scenario_search_jobs_total",
        (("action", "reclaim"), ("reduced_budget", "false"), ("result", "solved")),
    ) not in samples


class Ticks:
    """A clock that moves 5 ms at each reading."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.005
        return self.now


@pytest.mark.parametrize(
    ("config", "searches"),
    [
        ({}, [("reclaim", "solved")]),
        # reclaim is cut; preempt then finds no victim in a1's own queue
        (
            {"solver_action_budget": 0},
            [("reclaim", "deadline_exhausted"), ("preempt", "generators_exhausted")],
        ),
    ],
    ids=["solved", "cut"],
)
def test_each_search_is_timed_by_its_result_without_changing_the_record(
    config: dict[str, Any], searches: list[tuple[str, str]]
) -> None:
    state, cfg = load_state(RECLAIM)
    cfg = dataclasses.replace(cfg, **config)
    clock = Ticks()
    timer = CycleTimer(clock)
    record, ssn = run_kept_cycle(
        KeptSession(timed_session_factory(clock)), state, cfg, NOW_MS, on_step=timer.step
    )
    assert record == run_cycle(state, cfg, now_ms=NOW_MS)[0]  # observed, never fed
    assert ssn.on_step is None  # the kept session does not keep this cycle's observer
    assert [(a, r) for a, r, _ in timer.searches] == searches
    m = SchedulerMetrics.create()
    observe_cycle(m, record, timer.durations, session=ssn, searches=timer.searches)
    samples, types = _scrape(m)
    assert types["kai_scenario_search_duration_seconds"] == "histogram"
    for action, result, seconds in timer.searches:
        labels = (("action", action), ("generator", "solver"), ("result", result))
        # one timed search per job the search counter counts
        jobs = (("action", action), ("reduced_budget", "false"), ("result", result))
        assert samples[("kai_scenario_search_duration_seconds_count", labels)] == 1
        assert samples[("kai_scenario_search_jobs_total", jobs)] == 1
        assert samples[("kai_scenario_search_duration_seconds_sum", labels)] == pytest.approx(seconds)
        first = next(b for b in SEARCH_DURATION_BUCKETS_S if seconds <= b)
        for bound in SEARCH_DURATION_BUCKETS_S:
            le = (*labels[:2], ("le", repr(bound)), labels[2])
            assert samples[("kai_scenario_search_duration_seconds_bucket", le)] == (bound >= first), bound
        # the action's own time still runs from the previous step to its end, searches included
        assert timer.durations[action] >= seconds


def test_the_configured_time_budgets_read_as_none_in_kais_terms() -> None:
    """KAI's budgets are durations with 0 for none; Hourglass's search has no time budget (it counts
    scenarios), so each configured-seconds gauge is 0 whatever the scenario budgets are."""
    for config in ({}, {"solver_action_budget": 0, "solver_job_budget": 3}):
        m = SchedulerMetrics.create()
        _cycle(m, **config)
        samples, types = _scrape(m)
        assert types["kai_scenario_search_job_budget_configured_seconds"] == "gauge"
        assert samples[("kai_scenario_search_job_budget_configured_seconds", ())] == 0
        for action in ("reclaim", "preempt"):
            key = ("kai_scenario_search_action_budget_configured_seconds", (("action", action),))
            assert samples[key] == 0
        key = ("kai_scenario_search_generator_budget_configured_seconds", (("generator", "solver"),))
        assert samples[key] == 0
