"""Topology in every action (issue 15 items 4 and 5): reclaim, preempt and consolidation keep a gang's
domain, and the audit store, ``report`` and ``explain`` say where each constrained gang landed.

The action behaviour is pinned by the conformance scenarios ``topo-27..29`` and ``topo-act-*``
(scheduler/conformance/scenarios/hourglass/real-nodes/topology/, written by tools/real_node_scenarios.py); here: they
run and each depends on the feature, unconstrained jobs keep their exact path, and the record / store /
report / explain side, run through the command line as a user would.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from scheduler.config import session_config
from scheduler.conformance import SCENARIOS_DIR
from scheduler.conformance.runner import run_doc
from scheduler.engine.cycle import result_state, run_cycle, settle
from scheduler.engine.record.decisions import make_record
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import fold
from tests.support.paths import REPO_ROOT
from tests.support.synthetic import SyntheticSpec, synthetic_events
from tests.support.topology_builders import (
    BLOCK,
    RACK,
    cli,
    constrained_spec,
    racks_scenario,
    simulate_json,
    sql_json,
    write_scenario,
)

SCENARIOS = SCENARIOS_DIR / "hourglass" / "real-nodes" / "topology"
ACTION_SCENARIOS = sorted(
    [*SCENARIOS.glob("topo-act-*.json"), *SCENARIOS.glob("topo-2[789]-*-frees-rack-*.json")]
)


def test_there_are_action_scenarios_for_each_action() -> None:
    phases = [json.loads(p.read_text())["run"]["phase"] for p in ACTION_SCENARIOS]
    assert len(phases) >= 9
    assert {"reclaim", "preempt", "consolidation"} <= set(phases)


@pytest.mark.parametrize("path", ACTION_SCENARIOS, ids=lambda p: p.stem)
def test_action_scenario_holds_and_needs_the_constraint(path: Path) -> None:
    """The scenario passes; with every job's constraint removed its expectation fails."""
    doc = json.loads(path.read_text())
    assert run_doc(doc)[0] == []
    for j in doc["jobs"]:
        for k in ("topology", "required_topology_level", "preferred_topology_level"):
            j.pop(k, None)
    assert run_doc(doc)[0] != []


def _cycle_bytes(topology_fraction: float) -> list[bytes]:
    spec = SyntheticSpec(
        nodes=24,
        pending_pods=160,
        departments=2,
        queues_per_department=2,
        running_fraction=0.6,
        seed=5,
        topology_fraction=topology_fraction,
        topology_shape=(1, 2, 3),
    )
    state = fold(synthetic_events(spec))
    out = []
    for c in range(2):
        rec, ssn = run_cycle(state, SessionConfig(), now_ms=1_000_000 + c * 1000)
        out.append(rec.dumps())
        state = settle(result_state(ssn))
    return out


def test_unconstrained_binds_carry_no_details_and_constrained_ones_say_where() -> None:
    """Records without topology keep their bytes (no ``details`` on a Bind); a constrained gang's Binds name
    its domain per level, consistent with the nodes its pods went to."""
    for raw in _cycle_bytes(0.0):
        for d in json.loads(raw)["decisions"]:
            if d["kind"] in ("Bind", "Pipeline"):
                assert d["details"] == {}
    seen = 0
    for raw in _cycle_bytes(1.0):
        for d in json.loads(raw)["decisions"]:
            if d["kind"] in ("Bind", "Pipeline") and d["details"]:
                where = d["details"]["topology"]
                assert where["topology"] == "dc"
                levels = list(where["domains"])
                assert set(levels) == {
                    "topology/zone",
                    "topology/block",
                    "topology/rack",
                    "kubernetes.io/hostname",
                }
                req = where["required_level"]
                if req is not None:
                    assert where["domains"][req] is not None, where  # a required level is always kept
                    assert f"{req}=" in where["domain"]
                seen += 1
    assert seen > 0


def test_v1_records_never_carry_the_domain() -> None:
    """A v1 replay writes what a v1 writer wrote: no details on Binds even for a constrained gang."""
    _, ssn = run_cycle(fold(synthetic_events(constrained_spec())), SessionConfig(), now_ms=1_000_000)
    rec = make_record(ssn, 0, version=1)
    assert any(d.kind == "Bind" for d in rec.decisions)
    assert all(d.details == {} for d in rec.decisions if d.kind in ("Bind", "Pipeline"))


# -- through the command line: simulate, then sql / report / explain ----------------------------------------
@pytest.fixture(scope="module")
def preferred_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("pref")
    path = write_scenario(tmp, racks_scenario({"topology": "dc", "preferred_level": RACK}, duration="6h"))
    out = tmp / "run"
    return out, simulate_json(path, out)


def test_store_records_the_domain_each_gang_landed_in(preferred_run: tuple[Path, dict[str, Any]]) -> None:
    out, summary = preferred_run
    rows = sql_json(
        out,
        "SELECT job, queue, domain, within_preferred, domains FROM gang_placements"
        " QUALIFY row_number() OVER (PARTITION BY job ORDER BY logical_time_ms) = 1 ORDER BY job",
    )
    assert rows and all(r["queue"] == "train" for r in rows)
    for r in rows:
        domains = json.loads(r["domains"])
        assert r["domain"].startswith(f"{BLOCK}=")  # every gang of 2 whole nodes fits one block here
        assert r["within_preferred"] == (domains[RACK] is not None)
    # The simulator's own count of gangs within one rack (from the event log) agrees with the store's.
    (topo,) = summary["topology"]
    by_level = {lv["level"]: {q["queue"]: q for q in lv["queues"]} for lv in topo["levels"]}
    sim = by_level[RACK]["train"]
    assert sim["gangs"] == len(rows)
    assert sim["within_one"] == sum(1 for r in rows if r["within_preferred"])


def test_report_shows_how_often_gangs_got_their_preferred_level(
    preferred_run: tuple[Path, dict[str, Any]],
) -> None:
    out, _ = preferred_run
    report = json.loads(cli("report", "--store", str(out), "--format", "json"))
    (row,) = report["placements"]
    assert row["queue"] == "train" and row["with_preferred_level"] == row["gangs"] > 0
    assert row["with_required_level"] == 0
    assert 0 < row["got_preferred_level"] <= row["gangs"]
    assert row["preferred_hit_rate"] == pytest.approx(row["got_preferred_level"] / row["gangs"])
    table = cli("report", "--store", str(out))
    assert "got preferred level" in table
    assert f"{row['got_preferred_level']} (" in table


def test_explain_names_the_domain_of_a_placed_gang(preferred_run: tuple[Path, dict[str, Any]]) -> None:
    out, _ = preferred_run
    (row,) = sql_json(
        out, "SELECT job, domain, within_preferred FROM gang_placements ORDER BY logical_time_ms LIMIT 1"
    )
    text = " ".join(cli("explain", "--store", str(out), f"{row['job']}-0").split())  # unfolded
    met = "met" if row["within_preferred"] else "not met"
    assert (
        f"Topology dc: the gang's placed pods are within {row['domain']}; it prefers one {RACK} ({met}"
        in text
    )


def test_the_topology_query_in_docs_report_md_rederives_the_report(
    preferred_run: tuple[Path, dict[str, Any]],
) -> None:
    out, _ = preferred_run
    text = (REPO_ROOT / "docs" / "report.md").read_text()
    sql = next(b for b in re.findall(r"```sql\n(.*?)```", text, re.S) if "gang_placements" in b)
    rows = sql_json(out, sql.strip().rstrip(";"))
    report = json.loads(cli("report", "--store", str(out), "--format", "json"))
    assert [(r["queue"], r["got"], r["wanted"]) for r in rows] == [
        (p["queue"], p["got_preferred_level"], p["with_preferred_level"]) for p in report["placements"]
    ]


# -- replay of logs recorded before Binds named the domain ---------------------------------------------------
def _recorded(config: SessionConfig) -> tuple[list[tuple[int, Any]], list[Any]]:
    """Events of a constrained synthetic cluster and two cycles recorded over them with `config`."""
    from scheduler.engine.state import StateBuilder

    events = list(enumerate(synthetic_events(constrained_spec())))
    builder = StateBuilder()
    for off, e in events:
        builder.apply(e, off)
    records = [run_cycle(builder.snapshot(), config, now_ms=1_000_000 + c * 1000)[0] for c in range(2)]
    return events, records


def test_a_log_recorded_before_binds_named_the_domain_replays_without_mismatches() -> None:
    """An old writer's records (no ``details.topology``; its config hashes as one without the field) replay
    with the default config: ``as_recorded`` picks the details-less config and the re-run matches."""
    from analytics.rerun.replay import as_recorded, diff_records, engine_config, replay_cycles
    from scheduler.engine.record.decisions import config_hash

    old_cfg = SessionConfig(topology_details=False)
    events, records = _recorded(old_cfg)
    assert all(not d.details for r in records for d in r.decisions if d.kind in ("Bind", "Pipeline"))
    assert any(d.kind == "Bind" for r in records for d in r.decisions)
    # The old config's hash is the one written before the field existed (a False switch is not hashed).
    fields = asdict(old_cfg)
    del fields["topology_details"], fields["workload_types"]  # the scoring rule (kai) does not read the latter
    del fields["node_pool"], fields["node_pool_label"]  # unsharded
    del fields["workload_half_life_s"], fields["workload_window_s"], fields["workload_refresh_s"]  # kai
    blob = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    assert records[0].config_hash == config_hash(old_cfg) == hashlib.sha256(blob).hexdigest()[:16]
    cfg = as_recorded(SessionConfig(), records[0].config_hash)
    assert cfg == old_cfg
    pairs = list(replay_cycles(events, records, cfg))
    assert len(pairs) == 2
    assert all(again is not None and diff_records(rec, again) == [] for rec, again in pairs)
    # With the new default the same cycles differ: the details are what changed.
    new = list(replay_cycles(events, records, SessionConfig()))
    assert any(again is not None and diff_records(rec, again) for rec, again in new)
    # A run directory's manifest without the field replays the old way too.
    assert engine_config({"engine_config": fields}).topology_details is False


def test_a_new_record_carries_the_domain_and_hashes_the_switch() -> None:
    from analytics.rerun.replay import as_recorded
    from scheduler.engine.record.decisions import config_hash

    _, records = _recorded(SessionConfig())
    assert any(d.details.get("topology") for r in records for d in r.decisions if d.kind == "Bind")
    assert (
        records[0].config_hash
        == config_hash(SessionConfig())
        != config_hash(SessionConfig(topology_details=False))
    )
    assert as_recorded(SessionConfig(), records[0].config_hash) == SessionConfig()
    # The oldest logs (before the search budget too) match the config with neither.
    oldest = SessionConfig(topology_details=False).unbudgeted()
    assert as_recorded(SessionConfig(), config_hash(oldest)) == oldest


def test_a_bad_topology_details_value_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="topology_details must be true or false"):
        SessionConfig(topology_details="yes")  # type: ignore[arg-type]


def test_a_scenario_files_engine_section_sets_topology_details() -> None:
    from ingest.tenants import EngineSpec

    assert session_config(EngineSpec()).topology_details is True
    assert session_config(EngineSpec(topology_details=False)).topology_details is False
    with pytest.raises(ValueError, match="topology_details"):
        EngineSpec(topology_details="yes")  # type: ignore[arg-type]
