"""Node-scoring rules come from one explicit table (``scheduler.engine.scoring``), never from import order.

A service and a replay started from a bare ``python -c`` import (nothing but the service, the replay and the
log) must score with ``fgd`` exactly as the CLI does, and an unknown rule is refused when the config loads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.config import EngineConfigError, load_engine_config
from scheduler.engine import scoring
from tests.support.paths import REPO_ROOT

_BARE = """
import json, sys
from pathlib import Path
from ingest.events import dump_event
from ingest.filelog import FileLog
from ingest.log import Topics
from scheduler.engine.session import SessionConfig
from scheduler.service import Service
from analytics.rerun.replay import load_source, replay
from tests.support.synthetic import SyntheticSpec, synthetic_events

scoring_rule, directory = sys.argv[1], Path(sys.argv[2])
events = synthetic_events(SyntheticSpec(nodes=6, pending_pods=60, departments=2, queues_per_department=2, seed=3))
topics = Topics()
config = SessionConfig(node_scoring=scoring_rule)
with FileLog(directory) as log:
    log.append_many(topics.events, [(e.uid.encode(), dump_event(e)) for e in events])
    Service(log, topics, config).run(stop_when_idle=True)
summary = replay(load_source(directory, config=config), verify=True)
with FileLog(directory) as log:
    decisions = [r.value.decode() for r in log.read(topics.decisions, 0, 1000)]
print(json.dumps({"cycles": summary.cycles, "mismatches": summary.mismatches, "decisions": decisions}))
"""


def _run(rule: str, directory: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _BARE, rule, str(directory)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def test_service_and_replay_score_with_fgd_from_a_bare_import(tmp_path: Path) -> None:
    fgd = _run("fgd", tmp_path / "fgd")
    assert fgd["cycles"] and fgd["mismatches"] == 0
    kai = _run("kai", tmp_path / "kai")
    assert kai["mismatches"] == 0
    # The rule really ran: FGD places the fractional pods elsewhere than KAI's binpack does.
    assert fgd["decisions"] != kai["decisions"]


def test_the_table_lists_every_rule_and_refuses_unknown_names(tmp_path: Path) -> None:
    assert scoring.names() == ("bestfit", "fgd", "frag-aware", "frag-aware-models", "kai")
    with pytest.raises(scoring.UnknownScoring, match=r"'fdg'.*known: bestfit, fgd, frag-aware, frag-aware-models, kai"):
        scoring.lookup("fdg")
    bad = tmp_path / "engine.yaml"
    bad.write_text("node_scoring: fdg\n")
    with pytest.raises(EngineConfigError, match="unknown node_scoring 'fdg'"):
        load_engine_config(bad)


def test_a_swapped_distribution_is_back_after_the_block() -> None:
    before = scoring.lookup("fgd")
    with scoring.task_types_in_use([]) as (fgd, _aware):
        assert scoring.lookup("fgd") is fgd is not before
    assert scoring.lookup("fgd") is before


def test_the_shipped_prior_is_the_trace_s_own_distribution() -> None:
    from ingest.trace import read_pods
    from scheduler.engine.scoring.fragmentation import default_task_types, typical_task_types

    assert default_task_types() == typical_task_types(read_pods())
