"""Contended workloads on which the victim solver's proofs and shortcuts fire, shared by the solver tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ingest import events as ev
from scheduler.engine.actions import solver
from scheduler.engine.cycle import DEFAULT_ORDER, open_session, run_actions
from scheduler.engine.record.decisions import make_record
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import fold
from tests.support.synthetic import SyntheticSpec, reclaim_large_events

SMALL = dict(nodes=12, gpus_per_node=8, pending_pods=120, departments=3, queues_per_department=3)

# (workload, solver_job_budget, solver_action_budget): contended synthetic mixes where reclaim searches
# (each proves some of its simulations hopeless), with budgets that cut searches and budgets that do not.
CASES = [
    (SyntheticSpec(nodes=40, pending_pods=400, seed=0), 64, 256),
    (SyntheticSpec(nodes=40, pending_pods=400, seed=1), 64, 256),
    (SyntheticSpec(nodes=40, pending_pods=400, seed=2), 8, 32),
    (SyntheticSpec(**SMALL, seed=0), None, None),  # type: ignore[arg-type]
    (SyntheticSpec(**SMALL, seed=2), None, None),  # type: ignore[arg-type]
    (SyntheticSpec(**SMALL, seed=2), 4, 16),  # type: ignore[arg-type]
    # victims the validator may not lose stranded or lost during simulations (the shortcuts fire)
    (SyntheticSpec(nodes=100, pending_pods=1000, seed=0), 64, 256),
    (SyntheticSpec(nodes=40, pending_pods=400, departments=4, queues_per_department=4, seed=2), 64, 256),
]


def grouped_victims(nodes: int, elastic: Callable[[int], bool], across: bool = False) -> list[ev.Event]:
    """reclaim-large with the running 1-GPU jobs grouped into jobs: four by four on one node (devices 0-3
    or 4-7), or with `across` two by two on neighbouring nodes. Group g is elastic (minimum 1: it gives
    one task at a time and goes back into the order, so the stream pushes it back) when `elastic(g)`,
    else a gang (all its tasks go together)."""
    out: list[ev.Event] = []
    made: set[str] = set()
    for e in reclaim_large_events(nodes):
        if isinstance(e, ev.PodGroupUpserted) and e.queue == "a":
            continue
        if isinstance(e, ev.PodSubmitted) and e.queue == "a":
            i = int(e.name.split("-")[1])
            g = i // 2 if across else 2 * (i % nodes) + (i // nodes) // 4
            name = f"group-{g:06d}"
            if name not in made:
                made.add(name)
                out.append(
                    ev.PodGroupUpserted(
                        uid=f"default/{name}",
                        at_ms=e.at_ms,
                        name=name,
                        namespace="default",
                        queue="a",
                        min_member=1 if elastic(g) else 2 if across else 4,
                        priority=50,
                        preemptible=True,
                        created_at_ms=e.at_ms,
                    )
                )
            e = e.model_copy(update={"pod_group": name})
        out.append(e)
    return out


def _cycle(events: list[ev.Event], config: SessionConfig) -> tuple[bytes, dict[str, int]]:
    """The default cycle on the events: its record's bytes and its work counters."""
    ssn = open_session(fold(events), config=config, now_ms=10**9)
    run_actions(ssn, DEFAULT_ORDER)
    return make_record(ssn, 0).dumps(), dict(ssn.work)


def same_with_and_without(
    monkeypatch: pytest.MonkeyPatch,
    events: list[ev.Event],
    config: SessionConfig,
    method: str,
    fired: Callable[[solver.Solver, Any], bool],
    off: Callable[..., Any],
) -> int:
    """Run the default cycle with the solver's `method` and with it replaced by `off`; assert the records
    are byte-identical, the work counters equal and the victims offered per node to every simulation the
    same; return how often `fired(solver, result)` said the method took its shortcut."""
    count: list[bool] = []
    offered: list[list[list[tuple[str, ...]]]] = [[], []]
    real: Callable[..., Any] = getattr(solver.Solver, method)
    simulate: Callable[..., Any] = solver.Solver._simulate_scenario

    def counted(s: solver.Solver, *args: Any) -> Any:
        out = real(s, *args)
        count.append(fired(s, out))
        return out

    def noted(run: int) -> Callable[..., Any]:
        def note(s: solver.Solver, stmt: Any, scenario: solver.Scenario) -> Any:
            offered[run].append([tuple(t.uid for t in scenario.potential_on(n.name)) for n in s.ssn.nodes])
            return simulate(s, stmt, scenario)

        return note

    monkeypatch.setattr(solver.Solver, method, counted)
    monkeypatch.setattr(solver.Solver, "_simulate_scenario", noted(0))
    with_it = _cycle(events, config)
    monkeypatch.setattr(solver.Solver, method, off)
    monkeypatch.setattr(solver.Solver, "_simulate_scenario", noted(1))
    without = _cycle(events, config)
    monkeypatch.undo()
    assert with_it[0] == without[0]
    assert with_it[1] == without[1]
    assert offered[0] == offered[1]
    return sum(count)
