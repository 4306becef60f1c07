"""Topology-constrained allocation (issue 15) on synthetic clusters: properties a user relies on.

The scenario tables are in scheduler/conformance/scenarios/hourglass/real-nodes/topology/ (tools/real_node_scenarios.py);
these check, over many seeded clusters, that a required level is never broken and that a job waiting on
its constraint says which level it needs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.conformance import SCENARIOS_DIR
from scheduler.conformance.runner import run_doc
from scheduler.engine.cycle import result_state, run_cycle, settle
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import ClusterState, PodStatus, fold
from tests.support.synthetic import SyntheticSpec, synthetic_events

_PLACED = (PodStatus.ALLOCATED, PodStatus.PIPELINED, PodStatus.RUNNING)


def _domains_of(state: ClusterState) -> dict[str, set[tuple[str, ...]]]:
    """Per job with a required level: the domains (label values of levels 0..required) its pods are on."""
    topo = {t.name: t.levels for t in state.topologies}
    labels = {n.name: n.labels for n in state.nodes}
    out: dict[str, set[tuple[str, ...]]] = {}
    for j in state.jobs:
        if j.topology is None or j.required_level is None:
            continue
        levels = topo[j.topology]
        keys = levels[: levels.index(j.required_level) + 1]
        out[j.uid] = {
            tuple(labels[p.node][k] for k in keys)
            for p in state.pods
            if p.job == j.uid and p.status in _PLACED and p.node is not None
        }
    return out


@settings(max_examples=15, deadline=None)
@given(
    nodes=st.integers(4, 40),
    gpus=st.sampled_from([4, 8]),
    pods=st.integers(10, 120),
    seed=st.integers(0, 10_000),
)
def test_required_level_is_never_broken(nodes: int, gpus: int, pods: int, seed: int) -> None:
    spec = SyntheticSpec(
        nodes=nodes,
        gpus_per_node=gpus,
        pending_pods=pods,
        departments=2,
        queues_per_department=2,
        seed=seed,
        topology_fraction=1.0,
        topology_shape=(2, 2, 2),  # 8 racks: several nodes a rack at these sizes
    )
    state = fold(synthetic_events(spec))
    for c in range(2):
        rec, ssn = run_cycle(state, SessionConfig(), now_ms=1_000_000 + c * 1000)
        state = settle(result_state(ssn))
        for job, domains in _domains_of(state).items():
            assert len(domains) <= 1, f"job {job} spans {sorted(domains)}"
        for j in ssn.job_by_uid.values():
            for e in j.fit_errors:
                if e.reason == "TopologyConstraint":
                    assert "within one topology/" in e.message, e.message
    assert rec.dumps()  # the cycle record serialises with topology errors in it


# Scenarios whose outcome is the same without the constraint, on purpose: baselines and fallbacks.
_CONTROLS = {
    "topo-02-no-constraint-crosses-racks",
    "topo-18-preferred-rack-falls-back-anywhere",
    "topo-19-preferred-nothing-fits-usual-message",
    "topo-36-topology-without-level",
}
_SCENARIOS = sorted(
    (SCENARIOS_DIR / "hourglass" / "real-nodes" / "topology").glob("topo-*.json")
)


def test_there_are_topology_scenarios() -> None:
    assert len(_SCENARIOS) >= 42


@pytest.mark.parametrize("path", _SCENARIOS, ids=lambda p: p.stem)
def test_each_topology_scenario_depends_on_its_constraint(path: Path) -> None:
    """Without the topology constraint the scenario's expectation fails (it really tests the constraint)."""
    doc = json.loads(path.read_text())
    assert not run_doc(doc)[0]
    for j in doc["jobs"]:
        for k in ("topology", "required_topology_level", "preferred_topology_level"):
            j.pop(k, None)
    assert bool(run_doc(doc)[0]) is (path.stem not in _CONTROLS)
