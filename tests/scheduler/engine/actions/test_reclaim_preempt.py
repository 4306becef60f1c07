"""Reclaim, preempt and their shared machinery beyond the KAI scenario files (spec 5.3, 5.4, 5.6, 5.7)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from scheduler.conformance.runner import NOW_MS, load_state
from scheduler.engine import minruntime
from scheduler.engine.actions import preempt, reclaim
from scheduler.engine.actions.solver import tasks_to_evict
from scheduler.engine.session import Session
from scheduler.engine.state import evolve

MIN = 60_000  # one minute in ms


def _queue(name: str, quota: float, weight: float = 1, parent: str | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "parent": parent,
        "gpu": {"quota": quota, "limit": None, "over_quota_weight": weight},
    }


def _job(
    name: str,
    queue: str,
    tasks: int,
    *,
    status: str = "running",
    gpus: int = 1,
    prio: int = 50,
    min_available: int | None = None,
    age: float = 1,
    preemptible: bool | None = None,
) -> dict[str, Any]:
    task: dict[str, Any] = {"status": status, "gpus": gpus}
    if status != "pending":
        task["node"] = "n0"
    out: dict[str, Any] = {
        "name": name,
        "queue": queue,
        "priority": prio,
        "min_available": tasks if min_available is None else min_available,
        "age_minutes": age,
        "tasks": [dict(task, name=f"{name}-{i}") for i in range(tasks)],
    }
    if preemptible is not None:
        out["preemptible"] = preemptible
    return out


def _session(
    gpus: int,
    queues: list[dict[str, Any]],
    jobs: list[dict[str, Any]],
    *,
    multiplier: float = 1.0,
    started: Mapping[str, int] | None = None,
    min_runtime: Mapping[str, tuple[int | None, int | None]] | None = None,
    now_ms: int = NOW_MS,
) -> Session:
    """A session over one node; `started` sets job start times, `min_runtime` (preempt, reclaim) per queue."""
    doc = {
        "run": {"mode": "single_pass", "phase": "reclaim"},
        "cluster": {"nodes": [{"name": "n0", "gpus": gpus}]},
        "queues": queues,
        "jobs": jobs,
    }
    state, config = load_state(doc)
    config.saturation_multiplier = multiplier
    if started:
        state = replace(
            state,
            jobs=tuple(evolve(j, last_start_ms=started.get(j.uid, j.last_start_ms)) for j in state.jobs),
        )
    if min_runtime:
        state = replace(
            state,
            queues=tuple(
                replace(
                    q,
                    preempt_min_runtime_ms=min_runtime[q.name][0],
                    reclaim_min_runtime_ms=min_runtime[q.name][1],
                )
                if q.name in min_runtime
                else q
                for q in state.queues
            ),
        )
    return Session(state, config, now_ms)


def _fingerprint(ssn: Session) -> tuple[object, ...]:
    """Everything a failed attempt must leave untouched."""
    tasks = tuple((t.uid, t.status, t.node.name if t.node else None, t.devices, t.virtual) for t in ssn.tasks)
    nodes = tuple(
        (n.name, tuple(n.alloc), tuple(n.rel), tuple(n.pipe), tuple(n.dev_alloc), n.pods) for n in ssn.nodes
    )
    queues = tuple((q.name, tuple(q.allocated), tuple(q.allocated_np)) for q in ssn.queues.values())
    return tasks, nodes, queues, len(ssn.decisions)


def _statuses(ssn: Session) -> dict[str, str]:
    return {t.uid: t.status.value for t in ssn.tasks}


# -- min-runtime resolution (spec 5.6 design example) ---------------------------------------------------------


def _tree_session(method_default: int = 0) -> Session:
    queues = [
        _queue("A", 4),
        _queue("B", 4, parent="A"),
        _queue("C", 2, parent="B"),
        _queue("D", 2, parent="B"),
        _queue("leaf1", 1, parent="C"),
        _queue("leaf2", 1, parent="C"),
        _queue("leaf3", 2, parent="D"),
        _queue("other", 1),
    ]
    mr = {
        "B": (None, 600_000),
        "D": (None, 60_000),
        "leaf1": (None, 0),
        "leaf2": (None, 180_000),
        "other": (None, 30_000),
    }
    ssn = _session(4, queues, [], min_runtime=mr)
    ssn.config.default_reclaim_min_runtime_ms = method_default
    return ssn


@pytest.mark.parametrize(
    ("reclaimer", "victim", "method", "expected_ms"),
    [
        ("leaf1", "leaf3", minruntime.LCA, 60_000),  # LCA B, step to D (60s)
        ("leaf1", "leaf2", minruntime.LCA, 180_000),  # LCA C, step to leaf2 itself
        ("leaf3", "leaf1", minruntime.LCA, 600_000),  # LCA B, step to C (unset), inherits B
        ("other", "leaf1", minruntime.LCA, 7_000),  # different trees: A sets nothing -> default
        ("leaf1", "other", minruntime.LCA, 30_000),  # different trees: the victim's top-level value
        ("leaf3", "leaf1", minruntime.QUEUE, 0),  # queue method: the victim leaf's own value
        ("leaf1", "leaf3", minruntime.QUEUE, 60_000),  # queue method: walks up from leaf3 to D
    ],
)
def test_reclaim_min_runtime_resolution(reclaimer: str, victim: str, method: str, expected_ms: int) -> None:
    ssn = _tree_session(method_default=7_000)
    got = minruntime.reclaim_min_runtime_ms(ssn, ssn.queues[reclaimer], ssn.queues[victim], method)
    assert got == expected_ms


def test_preempt_min_runtime_walks_up_to_default() -> None:
    ssn = _session(
        2, [_queue("top", 2), _queue("leaf", 2, parent="top")], [], min_runtime={"top": (120_000, None)}
    )
    assert minruntime.preempt_min_runtime_ms(ssn, ssn.queues["leaf"]) == 120_000
    ssn.config.default_preempt_min_runtime_ms = 5_000
    assert minruntime.preempt_min_runtime_ms(ssn, ssn.queues["top"]) == 120_000
    bare = _session(2, [_queue("q", 2)], [])
    bare.config.default_preempt_min_runtime_ms = 5_000
    assert minruntime.preempt_min_runtime_ms(bare, bare.queues["q"]) == 5_000


# -- victim selection -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["reclaim", "preempt"])
def test_non_preemptible_victim_is_never_taken(action: str) -> None:
    # A build job (priority 100, non-preemptible) holds the whole node; the waiting job may take nothing.
    if action == "reclaim":
        queues = [_queue("q0", 0), _queue("q1", 2)]
        jobs = [
            _job("victim", "q0", 2, prio=100, preemptible=False),
            _job("waiting", "q1", 1, status="pending"),
        ]
    else:
        queues = [_queue("q0", 2)]
        jobs = [
            _job("victim", "q0", 2, prio=40, preemptible=False),
            _job("waiting", "q0", 1, status="pending", prio=100, preemptible=True),
        ]
    ssn = _session(2, queues, jobs)
    before = _fingerprint(ssn)
    waiting = ssn.job_by_uid["waiting"]
    finder = reclaim.victims_for if action == "reclaim" else preempt.victims_for
    assert finder(ssn, waiting) == []
    (reclaim if action == "reclaim" else preempt).run(ssn)
    assert _fingerprint(ssn) == before


def test_preempt_takes_only_strictly_lower_priority() -> None:
    queues = [_queue("q0", 2)]
    jobs = [
        _job("same", "q0", 1, prio=60),
        _job("lower", "q0", 1, prio=50),
        _job("waiting", "q0", 1, status="pending", prio=60),
    ]
    ssn = _session(2, queues, jobs)
    assert [v.name for v in preempt.victims_for(ssn, ssn.job_by_uid["waiting"])] == ["lower"]


def test_elastic_victim_loses_one_pod_at_a_time() -> None:
    # An elastic job (min 1, 4 pods) fills the node; a higher-priority job needs 2 GPUs.
    queues = [_queue("q0", 4)]
    jobs = [
        _job("elastic", "q0", 4, min_available=1, prio=50),
        _job("urgent", "q0", 2, status="pending", prio=100, preemptible=True),
    ]
    ssn = _session(4, queues, jobs)
    elastic = ssn.job_by_uid["elastic"]
    group, more = tasks_to_evict(elastic)
    assert [t.name for t in group] == ["elastic-3"] and more
    preempt.run(ssn)
    st = _statuses(ssn)
    # Exactly the two newest extras go; the job keeps its first two pods.
    assert [st[f"elastic-{i}"] for i in range(4)] == ["running", "running", "releasing", "releasing"]
    assert st["urgent-0"] == st["urgent-1"] == "pipelined"


def test_gang_victim_at_minimum_is_evicted_whole() -> None:
    queues = [_queue("q0", 4)]
    jobs = [
        _job("gang", "q0", 4, min_available=4, prio=50),
        _job("urgent", "q0", 1, status="pending", prio=100, preemptible=True),
    ]
    ssn = _session(4, queues, jobs)
    group, more = tasks_to_evict(ssn.job_by_uid["gang"])
    assert [t.name for t in group] == ["gang-3", "gang-2", "gang-1", "gang-0"] and not more
    preempt.run(ssn)
    st = _statuses(ssn)
    assert all(st[f"gang-{i}"] == "releasing" for i in range(4))
    assert st["urgent-0"] == "pipelined"


# -- min-runtime in the actions -----------------------------------------------------------------------------


def test_protected_gang_victim_is_filtered_out() -> None:
    queues = [_queue("q0", 2)]
    jobs = [
        _job("young", "q0", 2, prio=50),
        _job("urgent", "q0", 1, status="pending", prio=100, preemptible=True),
    ]
    started = {"young": NOW_MS - 1 * MIN}
    protected = _session(2, queues, jobs, started=started, min_runtime={"q0": (5 * MIN, None)})
    assert preempt.victims_for(protected, protected.job_by_uid["urgent"]) == []
    expired = _session(2, queues, jobs, started=started, min_runtime={"q0": (30_000, None)})
    assert [v.name for v in preempt.victims_for(expired, expired.job_by_uid["urgent"])] == ["young"]


def test_protected_elastic_victim_keeps_its_minimum() -> None:
    # Protected elastic victim (min 2 of 4): the extras may go, the core may not.
    queues = [_queue("q0", 4)]
    jobs = [
        _job("elastic", "q0", 4, min_available=2, prio=50),
        _job("small", "q0", 2, status="pending", prio=100, preemptible=True),
    ]
    mr = {"q0": (10 * MIN, None)}
    ssn = _session(4, queues, jobs, started={"elastic": NOW_MS - MIN}, min_runtime=mr)
    preempt.run(ssn)
    st = _statuses(ssn)
    assert [st[f"elastic-{i}"] for i in range(4)] == ["running", "running", "releasing", "releasing"]
    # Needing three GPUs would cut into the protected core: refused, nothing changes.
    jobs[1] = _job("big", "q0", 3, status="pending", prio=100, preemptible=True)
    ssn = _session(4, queues, jobs, started={"elastic": NOW_MS - MIN}, min_runtime=mr)
    before = _fingerprint(ssn)
    preempt.run(ssn)
    assert _fingerprint(ssn) == before


# -- reclaim fairness -----------------------------------------------------------------------------------------


def _saturation_session(multiplier: float) -> Session:
    """P1 (reclaimer side) ends at 4/3 of its fair share; the victim side P2 at 4/2 after one GPU goes."""
    queues = [
        _queue("P1", 2),
        _queue("P2", 2),
        _queue("Q3", 3),
        _queue("R", 1, parent="P1"),
        _queue("X", 1, parent="P1"),
        _queue("V", 2, parent="P2"),
    ]
    jobs = [_job("x", "X", 3), *(_job(f"v{i}", "V", 1, age=10 - i) for i in range(5))]
    jobs += [_job("r", "R", 1, status="pending"), _job("q3", "Q3", 3, status="pending")]
    return _session(8, queues, jobs, multiplier=multiplier)


def test_reclaim_refused_when_reclaimer_would_pass_sibling_saturation() -> None:
    ssn = _saturation_session(1.0)
    assert [ssn.queues[n].fair_share[0] for n in ("P1", "P2")] == [3000, 2000]
    # Ratio 4/3 stays below the sibling's 4/2: allowed.
    assert reclaim.attempt(ssn, ssn.job_by_uid["r"])
    assert _statuses(ssn)["r-0"] == "pipelined"
    assert sum(1 for t in ssn.tasks if t.status.value == "releasing") == 1
    # Scaled by 3 the reclaimer's ratio (4) reaches the sibling's (2): refused, and nothing moves.
    ssn = _saturation_session(3.0)
    before = _fingerprint(ssn)
    assert not reclaim.attempt(ssn, ssn.job_by_uid["r"])
    assert _fingerprint(ssn) == before


def test_reclaim_gate_requires_room_in_fair_share() -> None:
    queues = [_queue("q0", 1), _queue("q1", 1)]
    jobs = [_job("hog", "q0", 2), _job("big", "q1", 2, status="pending")]
    ssn = _session(2, queues, jobs)
    before = _fingerprint(ssn)
    reclaim.run(ssn)  # q1's fair share is 1 GPU, the job needs 2: reclaim is not even tried
    assert _fingerprint(ssn) == before


def test_failed_attempt_leaves_no_trace() -> None:
    # Victims exist and are tried, but the preemptor's gang can never fit the node.
    queues = [_queue("q0", 2)]
    jobs = [
        _job("a", "q0", 1, prio=10, age=3),
        _job("b", "q0", 1, prio=20, age=2),
        _job("huge", "q0", 3, status="pending", prio=100, preemptible=True),
    ]
    ssn = _session(2, queues, jobs)
    before = _fingerprint(ssn)
    assert not preempt.attempt(ssn, ssn.job_by_uid["huge"])
    assert _fingerprint(ssn) == before
    assert not any(t.virtual for t in ssn.tasks)


def test_actions_are_deterministic() -> None:
    def outcome() -> dict[str, str]:
        ssn = _saturation_session(1.0)
        reclaim.run(ssn)
        preempt.run(ssn)
        return _statuses(ssn)

    assert outcome() == outcome()
