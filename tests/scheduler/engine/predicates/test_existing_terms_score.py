"""Placed pods' own inter-pod terms score an incoming pod they select, as kube-scheduler's InterPodAffinity
score does (interpodaffinity/scoring.go ``processExistingPod``): their preferred affinity adds its weight,
their preferred anti-affinity subtracts it, their required affinity adds ``hardPodAffinityWeight`` (1), on
every node of the holder's topology domain. Cases from interpodaffinity/scoring_test.go
``TestPreferredAffinity``; kube normalises to 0..100 (max - min), Hourglass to 0..20 the same way. Each case
runs with the existing pods ours and with them bound by another scheduler."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.conformance.runner import NOW_MS, load_state
from scheduler.engine.cycle import open_session
from scheduler.engine.predicates import PREFERRED_POD_AFFINITY_WEIGHT, preference_scores


def _term(values: list[str], key: str, op: str = "In", weight: int = 0) -> dict[str, Any]:
    return {
        "label_selector": {"match_expressions": [{"key": "security", "operator": op, "values": values}]},
        "topology_key": key,
        "weight": weight,
    }


STAY_WITH_S1_IN_REGION = {"pod_affinity": [_term(["S1"], "region", weight=5)]}
STAY_WITH_S2_IN_REGION = {"pod_affinity": [_term(["S2"], "region", weight=6)]}
AWAY_FROM_S1_IN_AZ = {"pod_anti_affinity": [_term(["S1"], "az", weight=5)]}
AWAY_FROM_S2_IN_AZ = {"pod_anti_affinity": [_term(["S2"], "az", weight=5)]}
HARD_AFFINITY = {
    "pod_affinity": [
        _term(["S1", "value2"], "region"),
        {
            "label_selector": {
                "match_expressions": [
                    {"key": "security", "operator": "Exists"},
                    {"key": "wrongkey", "operator": "DoesNotExist"},
                ]
            },
            "topology_key": "region",
        },
    ]
}
CHINA, INDIA, AZ1, AZ2 = {"region": "China"}, {"region": "India"}, {"az": "az1"}, {"az": "az2"}

# (case, incoming pod's security label, existing pods (node, security label, terms), nodes, kube's scores)
CASES = [
    (
        "Affinity symmetry: considered only the preferredDuringSchedulingIgnoredDuringExecution in pod "
        "affinity symmetry",
        "S2",
        [("node1", "S1", STAY_WITH_S1_IN_REGION), ("node2", "S2", STAY_WITH_S2_IN_REGION)],
        {"node1": CHINA, "node2": INDIA, "node3": AZ1},
        [0, 100, 0],
    ),
    (
        "Affinity symmetry: considered RequiredDuringSchedulingIgnoredDuringExecution in pod affinity symmetry",
        "S1",
        [("node1", "S1", HARD_AFFINITY), ("node2", "S2", HARD_AFFINITY)],
        {"node1": CHINA, "node2": INDIA, "node3": AZ1},
        [100, 100, 0],
    ),
    (
        "Anti Affinity symmetry: the existing pods in node which has anti affinity match will get high score",
        "S2",
        [("node1", "S1", AWAY_FROM_S2_IN_AZ), ("node2", "S2", AWAY_FROM_S1_IN_AZ)],
        {"node1": AZ1, "node2": AZ2},
        [0, 100],
    ),
]


def _doc(
    incoming: str,
    existing: list[tuple[str, str, dict[str, Any]]],
    nodes: dict[str, dict[str, str]],
    foreign: bool,
) -> dict[str, Any]:
    pods = [
        {"name": f"e{i}", "node": node, "labels": {"security": label}} | terms
        for i, (node, label, terms) in enumerate(existing)
    ]
    doc: dict[str, Any] = {
        "run": {"mode": "filter", "task": "p"},
        "cluster": {"nodes": [{"name": n, "labels": labels} for n, labels in nodes.items()]},
        "queues": [{"name": "q"}],
        "jobs": [{"name": "p", "queue": "q", "tasks": [{"name": "p", "labels": {"security": incoming}}]}],
    }
    if foreign:
        doc["cluster"]["foreign_pods"] = pods
    else:
        doc["jobs"] += [{"name": p["name"], "queue": "q", "tasks": [p | {"status": "running"}]} for p in pods]
    return doc


@pytest.mark.parametrize("foreign", [False, True], ids=["ours", "foreign"])
@pytest.mark.parametrize("case", CASES, ids=[c[0][:40] for c in CASES])
def test_existing_pods_terms_score_the_incoming_pod(case: tuple[Any, ...], foreign: bool) -> None:
    _, incoming, existing, nodes, kube = case
    state, config = load_state(_doc(incoming, existing, nodes, foreign))
    ssn = open_session(state, config, NOW_MS)
    assert ssn.soft_present
    task = next(t for t in ssn.tasks if t.pod.name == "p")
    got = preference_scores(ssn, task, ssn.nodes)
    assert got == [PREFERRED_POD_AFFINITY_WEIGHT * k / 100 for k in kube]


def test_without_placed_terms_a_pod_without_preferences_is_not_scored() -> None:
    state, config = load_state(_doc("S1", [("node1", "S1", {})], {"node1": CHINA, "node2": INDIA}, False))
    ssn = open_session(state, config, NOW_MS)
    task = next(t for t in ssn.tasks if t.pod.name == "p")
    assert not ssn.soft_present and preference_scores(ssn, task, ssn.nodes) is None
