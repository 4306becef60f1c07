"""A scenario's ``config.node_scoring`` picks the engine's node-scoring rule, and the scenarios shipped under
``hourglass/frag-aware/`` are the rule-forced ones run with ``frag-aware`` (tools/frag_aware_scenarios.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.conformance import SCENARIOS_DIR
from scheduler.conformance.runner import load_state, run_doc, run_file
from scheduler.engine.scoring import fragmentation

FRAG = SCENARIOS_DIR / "hourglass" / "frag-aware"
SUBGROUP_RECLAIM = (
    FRAG / "hourglass-real-nodes-subgroups" / "sg-act-01-reclaim-frees-a-rack-for-a-subgroup.json"
)


def test_the_config_names_the_rule_and_an_unknown_one_fails_the_scenario(tmp_path: Path) -> None:
    doc = json.loads(SUBGROUP_RECLAIM.read_text())
    assert load_state(doc)[1].node_scoring == "frag-aware"
    doc["config"].pop("node_scoring")
    assert load_state(doc)[1].node_scoring == "kai"
    doc["config"]["node_scoring"] = "tetris"
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    res = run_file(path)
    assert (
        res.error is not None and "unknown node_scoring 'tetris'" in res.error and "frag-aware" in res.error
    )


def test_every_frag_aware_scenario_is_a_shipped_one_with_only_the_rule_changed() -> None:
    files = sorted(FRAG.rglob("*.json"))
    assert len(files) == 171
    for path in files:
        doc = json.loads(path.read_text())
        folder = path.parent.name.split("-", 1)
        source_dir = SCENARIOS_DIR / folder[0] / folder[1].replace("real-nodes-", "real-nodes/")
        source = json.loads((source_dir / path.name).read_text())
        assert doc["config"] == {**source.get("config", {}), "node_scoring": "frag-aware"}
        for key in ("cluster", "queues", "jobs", "run", "expect"):
            assert doc.get(key) == source.get(key), (path, key)


def test_idle_capacity_beats_a_victims_node_inside_a_reclaim(monkeypatch: pytest.MonkeyPatch) -> None:
    """The subgroup's leader goes to the idle node, so the reclaim frees a whole rack for its workers;
    ranking the victims' node alike (no idle-first term) leaves the whole job pending."""
    doc = json.loads(SUBGROUP_RECLAIM.read_text())
    assert run_doc(doc)[0] == []
    monkeypatch.setattr(fragmentation, "IDLE_FIRST", 0.0)
    diffs = run_doc(json.loads(SUBGROUP_RECLAIM.read_text()))[0]
    assert "task j-leader-0: status pending, expected pipelined" in diffs
