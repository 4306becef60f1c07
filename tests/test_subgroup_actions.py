"""Subgroups' own topology constraints in reclaim, preempt and consolidation (issue 15, item 4 for subgroups).

The solvers place a job whose subgroups carry constraints with allocate's subgroup walk, each PodSet within
its nested domain -- the preemptor and every re-placed victim. The behaviour is pinned by the conformance
scenarios ``sg-act-*`` (tests/conformance/hourglass/real-nodes/subgroups/, written by
tools/real_node_scenarios.py); here: each holds, and each fails once the subgroups' constraints are dropped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.conformance import run_doc

SCENARIOS = sorted((Path(__file__).parent / "conformance" / "hourglass" / "real-nodes" / "subgroups").glob("sg-act-*.json"))


def test_there_is_a_subgroup_scenario_for_each_action() -> None:
    phases = [json.loads(p.read_text())["run"]["phase"] for p in SCENARIOS]
    assert {"reclaim", "preempt", "consolidation"} <= set(phases)
    assert len(SCENARIOS) >= 4


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_scenario_holds_and_needs_the_subgroup_constraints(path: Path) -> None:
    doc = json.loads(path.read_text())
    assert run_doc(doc)[0] == []
    for j in doc["jobs"]:
        for sg in j.get("subgroups", []):
            for k in ("topology", "required_topology_level", "preferred_topology_level"):
                sg.pop(k, None)
    assert run_doc(doc)[0] != []
