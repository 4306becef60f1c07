"""WaitForFirstConsumer claims in a whole cycle: the Bind decision names the volume each claim takes, two
pods never take the same volume (in one cycle, or after one was placed in an earlier cycle), and a pod
without such claims gets no ``details.volumes``."""

from __future__ import annotations

import json
from typing import Any

from scheduler.conformance.runner import load_state
from scheduler.engine.cycle import open_session, run_cycle
from scheduler.engine.predicates.volumes import reason
from scheduler.engine.state import PodStatus, evolve
from tests.support.paths import REPO_ROOT

SCENARIO = (
    REPO_ROOT
    / "scheduler/conformance/scenarios/hourglass/real-nodes/volumes/volumes-08-two-claims-one-local-volume-each.json"
)


def _binds(rec: Any) -> dict[str, tuple[str | None, Any]]:
    return {d.pod: (d.node, d.details.get("volumes")) for d in rec.decisions if d.kind == "Bind"}


def test_each_claim_takes_its_own_volume_and_the_bind_names_it() -> None:
    state, config = load_state(json.loads(SCENARIO.read_text()))
    binds = _binds(run_cycle(state, config, now_ms=1000)[0])
    assert binds == {
        "db-0-0": ("n1", {"data-0": "pv-n1"}),
        "db-1-0": ("n2", {"data-1": "pv-n2"}),
    }


def test_a_volume_taken_by_a_pod_placed_earlier_is_not_offered_again() -> None:
    state, config = load_state(json.loads(SCENARIO.read_text()))
    # db-0 was bound to n1 in an earlier cycle (its claim then took pv-n1); db-1 is still pending.
    pods = tuple(
        evolve(p, status=PodStatus.RUNNING, node="n1") if p.name == "db-0-0" else p for p in state.pods
    )
    state = evolve(state, pods=pods)
    binds = _binds(run_cycle(state, config, now_ms=1000)[0])
    assert binds == {"db-1-0": ("n2", {"data-1": "pv-n2"})}
    ssn = open_session(state, config, 1000)
    task = next(t for t in ssn.tasks if t.pod.name == "db-1-0")
    n1 = ssn.node_by_name["n1"]
    assert (
        reason(task.pod.volumes, n1, {"pv-n1"}) == "node(s) didn't find available persistent volumes to bind"
    )
    assert reason(task.pod.volumes, n1) is None


def test_pods_without_claims_get_no_volume_details() -> None:
    state, config = load_state(json.loads(SCENARIO.read_text()))
    state = evolve(state, pods=tuple(evolve(p, volumes=()) for p in state.pods))
    rec = run_cycle(state, config, now_ms=1000)[0]
    assert all("volumes" not in d.details for d in rec.decisions)
