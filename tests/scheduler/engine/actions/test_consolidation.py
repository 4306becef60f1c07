"""Unit cases for the consolidation action beyond the KAI scenario files (spec §5.2, rules 48-49)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from scheduler.conformance.runner import NOW_MS, load_state
from scheduler.engine.actions import consolidation
from scheduler.engine.cycle import open_session, result_state, run_actions
from scheduler.engine.session import Session, SessionConfig


def _job(
    name: str, tasks: list[tuple[str, str | None, int]], prio: int = 50, age: int = 1, **kw: Any
) -> dict[str, Any]:
    """A job of whole-GPU tasks given as (status, node, gpus)."""
    return {
        "name": name,
        "queue": "q",
        "priority": prio,
        "preemptible": kw.pop("preemptible", prio < 100),
        "min_available": kw.pop("min_available", 1),
        "age_minutes": age,
        "tasks": [{"status": s, "node": n, "gpus": g} for s, n, g in tasks],
        **kw,
    }


def _doc(nodes: dict[str, int], jobs: list[dict[str, Any]], **config: Any) -> dict[str, Any]:
    return {
        "run": {"mode": "single_pass", "phase": "consolidation"},
        "config": config,
        "cluster": {"nodes": [{"name": n, "gpus": g} for n, g in nodes.items()]},
        "queues": [{"name": "q", "gpu": {"quota": 8}}],
        "jobs": jobs,
    }


def _session(doc: dict[str, Any], **overrides: Any) -> Session:
    state, cfg = load_state(doc)
    return open_session(state, replace(cfg, **overrides), NOW_MS)


def _view(ssn: Session) -> dict[str, tuple[str, str | None, tuple[int, ...]]]:
    return {p.name: (p.status.value, p.node, p.gpu_devices) for p in result_state(ssn).pods}


def _accounting(ssn: Session) -> list[object]:
    nodes = [(n.name, n.alloc, n.rel, n.pipe, n.pods, n.dev_alloc, n.dev_rel, n.dev_pipe) for n in ssn.nodes]
    queues = [(q.name, q.allocated, q.allocated_np) for q in ssn.queues.values()]
    return [nodes, queues, [t.virtual for t in ssn.tasks]]


# A running victim `v` is moved to make room for the pending job `p`; used by the "disabled" cases.
MOVABLE = _doc(
    {"node0": 2, "node1": 2},
    [
        _job("keep", [("running", "node0", 1)], age=9),
        _job("v", [("running", "node1", 1)], age=5),
        _job("p", [("pending", None, 2)], age=1),
    ],
)

# (case id, scenario, expected per task: (status, node)); unlisted tasks are not checked.
CASES: list[tuple[str, dict[str, Any], dict[str, tuple[str, str | None]]]] = [
    (
        "moves-a-victim",
        MOVABLE,
        {"keep-0": ("running", "node0"), "v-0": ("pipelined", "node0"), "p-0": ("pipelined", "node1")},
    ),
    (
        "non-preemptible-job-is-never-moved",
        # Moving `np` would work just as well as moving `v`; only the preemptible one may go.
        _doc(
            {"node0": 2, "node1": 2},
            [
                _job("np", [("running", "node0", 1)], prio=100, age=9),
                _job("v", [("running", "node1", 1)], age=5),
                _job("p", [("pending", None, 2)], age=1),
            ],
        ),
        {"np-0": ("running", "node0"), "v-0": ("pipelined", "node0"), "p-0": ("pipelined", "node1")},
    ),
    (
        "only-non-preemptible-victims",
        _doc(
            {"node0": 2, "node1": 2},
            [
                _job("np0", [("running", "node0", 1)], prio=100, age=9),
                _job("np1", [("running", "node1", 1)], prio=100, age=5),
                _job("p", [("pending", None, 2)], age=1),
            ],
        ),
        {"np0-0": ("running", "node0"), "np1-0": ("running", "node1"), "p-0": ("pending", None)},
    ),
    (
        "non-preemptible-pending-job-is-not-a-preemptor",
        _doc(
            {"node0": 2, "node1": 2},
            [
                _job("v0", [("running", "node0", 1)], age=9),
                _job("v1", [("running", "node1", 1)], age=5),
                _job("p", [("pending", None, 2)], prio=100, age=1),
            ],
        ),
        {"v0-0": ("running", "node0"), "v1-0": ("running", "node1"), "p-0": ("pending", None)},
    ),
    (
        "gang-victim-moves-whole",
        # The 2-pod gang is evicted and re-placed as a whole; only then does node1 free up for p.
        _doc(
            {"node0": 3, "node1": 3},
            [
                _job("a", [("running", "node0", 1)], prio=100, age=9),
                _job("g", [("running", "node1", 1), ("running", "node1", 1)], min_available=2, age=5),
                _job("p", [("pending", None, 3)], age=1),
            ],
        ),
        {"g-0": ("pipelined", "node0"), "g-1": ("pipelined", "node0"), "p-0": ("pipelined", "node1")},
    ),
]


@pytest.mark.parametrize(("doc", "want"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_consolidation_outcome(doc: dict[str, Any], want: dict[str, tuple[str, str | None]]) -> None:
    ssn = run_actions(_session(doc), ("consolidation",))
    got = _view(ssn)
    assert {k: got[k][:2] for k in want} == want


def test_move_that_strands_a_victim_leaves_no_trace() -> None:
    # p (higher priority, still preemptible) is re-placed before the victim: it takes node0, which the
    # evicted `v` then cannot return to, and node1 has too little room -> `v` would be left releasing.
    doc = _doc(
        {"node0": 4, "node1": 2},
        [
            _job("x", [("running", "node1", 1)], prio=100, age=9),
            _job("v", [("running", "node0", 2)], age=5),
            _job("p", [("pending", None, 3)], prio=80, age=1),
        ],
    )
    fresh = _session(doc)
    ssn = _session(doc)
    consolidation.run(ssn)
    assert _view(ssn) == _view(fresh)
    assert _accounting(ssn) == _accounting(fresh)
    assert ssn.decisions == []


def test_victim_put_back_in_place_records_nothing() -> None:
    # KAI scenario consolidation-06: running_job2 is evicted in the winning scenario but lands back on
    # its own node, so it is un-evicted; only the moved job and the pending job have operations.
    doc = _doc(
        {"node0": 4, "node1": 4},
        [
            _job("j0", [("running", "node0", 3)], age=4),
            _job("j1", [("running", "node1", 1)], age=3),
            _job("j2", [("running", "node1", 2)], age=2),
            _job("p", [("pending", None, 2)], age=1),
        ],
    )
    ssn = run_actions(_session(doc), ("consolidation",))
    got = _view(ssn)
    assert got["j2-0"][:2] == ("running", "node1")
    assert got["j1-0"][:2] == ("pipelined", "node0")
    assert got["p-0"][:2] == ("pipelined", "node1")
    touched = {op.task.name for op in ssn.decisions}
    assert touched == {"j1-0", "p-0"}
    assert not any(t.virtual for t in ssn.tasks)


@pytest.mark.parametrize(
    ("overrides", "config"),
    [
        ({"max_consolidation_preemptees": 0}, {}),
        ({}, {"node_placement": {"gpu": "spread"}}),
        ({}, {"node_placement": {"cpu": "spread"}}),
    ],
    ids=["preemptee-limit-0", "gpu-spread", "cpu-spread"],
)
def test_disabled(overrides: dict[str, Any], config: dict[str, Any]) -> None:
    doc = {**MOVABLE, "config": config}
    fresh = _session(doc, **overrides)
    for run in (lambda s: run_actions(s, ("consolidation",)), consolidation.run):
        ssn = _session(doc, **overrides)
        run(ssn)
        assert _view(ssn) == _view(fresh)
        assert ssn.decisions == []


def test_deterministic() -> None:
    runs = []
    for _ in range(3):
        ssn = run_actions(_session(MOVABLE), ("consolidation",))
        runs.append(
            [(op.kind, op.task.name, op.task.node.name if op.task.node else None) for op in ssn.decisions]
        )
    assert runs[0] == runs[1] == runs[2]
    assert runs[0]


def test_default_config_allows_consolidation() -> None:
    assert SessionConfig().max_consolidation_preemptees == 16
    assert not consolidation.disabled(_session(MOVABLE))


def _random_doc(seed: int) -> dict[str, Any]:
    """A small random cluster: running jobs packed first-fit, then a few pending jobs."""
    import random

    rng = random.Random(seed)
    nodes = {f"node{i}": rng.choice([2, 4, 8]) for i in range(rng.randint(2, 4))}
    free = dict(nodes)
    jobs: list[dict[str, Any]] = []
    age = 100
    for j in range(rng.randint(2, 7)):
        size, width = rng.choice([1, 1, 2, 3]), rng.choice([1, 1, 2])
        tasks: list[tuple[str, str | None, int]] = []
        for _ in range(width):
            node = next((n for n in sorted(free) if free[n] >= size), None)
            if node is None:
                break
            free[node] -= size
            tasks.append(("running", node, size))
        if tasks:
            prio = rng.choice([50, 50, 80, 100])
            jobs.append(_job(f"r{j}", tasks, prio=prio, age=age, min_available=rng.randint(1, len(tasks))))
            age -= 1
    for j in range(rng.randint(1, 3)):
        width = rng.choice([1, 1, 2])
        pend: list[tuple[str, str | None, int]] = [("pending", None, rng.choice([1, 2, 3, 4]))] * width
        jobs.append(_job(f"p{j}", pend, prio=rng.choice([50, 80]), age=age, min_available=width))
        age -= 1
    return _doc(nodes, jobs)


def _check_invariants(ssn: Session, before: dict[str, tuple[str, str | None, tuple[int, ...]]]) -> None:
    after = _view(ssn)
    for name, (status, _, _) in before.items():
        if status == "running":
            # Consolidation never leaves a victim behind: moved, put back, or untouched.
            assert after[name][0] in ("running", "pipelined"), name
    # Node accounting matches the tasks placed on each node.
    for n in ssn.nodes:
        held = {"alloc": [0, 0], "rel": [0, 0], "pipe": [0, 0]}
        for t in ssn.tasks:
            if t.node is n and t.status.value != "pending":
                key = {"running": "alloc", "allocated": "alloc", "releasing": "rel"}.get(
                    t.status.value, "pipe"
                )
                held[key][0] += t.request.cpu
                held[key][1] += t.request.memory
        assert (n.alloc, n.rel, n.pipe) == (held["alloc"], held["rel"], held["pipe"]), n.name


@pytest.mark.parametrize("seed", range(40))
def test_random_clusters(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from scheduler.engine import placement

    doc = _random_doc(seed)
    outcomes = []
    for fast in (True, False):
        monkeypatch.setattr(placement, "FAST_PATH", fast)
        ssn = _session(doc)
        before = _view(ssn)
        consolidation.run(ssn)
        _check_invariants(ssn, before)
        outcomes.append(_view(ssn))
    assert outcomes[0] == outcomes[1]  # the binpack fast path picks what the full scoring scan picks
