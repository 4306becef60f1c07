"""``hourglass simulate --compare-scoring``: the same run once per node-scoring rule, unallocated GPUs over
time per rule (analytics/simulation/compare.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analytics.cli import main
from analytics.simulation.compare import series_over_time
from analytics.simulation.simulate import SimulationResult
from ingest.tenants import DEFAULT_TENANTS
from tests.support.trace_slices import SLICE, small_nodes_csv


def _result(timeline: list[tuple[int, int, int]], end_s: float, cap: int) -> SimulationResult:
    return SimulationResult(
        summary={"simulated_seconds": end_s},
        capacity_gpu_milli=cap,
        leaf_queues=[],
        timeline=[(t, held, frag, ()) for t, held, frag in timeline],
    )


def test_each_slice_is_the_exact_time_weighted_mean() -> None:
    # 8 GPUs: nothing held for 10 s, 4 held (1 fragmented) for 10 s, all 8 held for the last 20 s.
    r = _result([(0, 0, 0), (10_000, 4000, 1000), (20_000, 8000, 0)], 40.0, 8000)
    first, second = series_over_time(r, 2)
    assert (first["start_s"], first["end_s"], second["end_s"]) == (0.0, 20.0, 40.0)
    assert (first["unallocated_gpus"], first["fragmented_gpus"]) == (6.0, 0.5)
    assert (second["unallocated_gpus"], second["fragmented_gpus"]) == (0.0, 0.0)
    # One slice is the whole run's mean: (8*40 - 4*10 - 8*20) GPU-s / 40 s.
    assert series_over_time(r, 1)[0]["unallocated_gpus"] == 3.0
    with pytest.raises(ValueError, match="slices"):
        series_over_time(r, 0)


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(list(argv)) == 0
    doc = json.loads(capsys.readouterr().out)
    assert isinstance(doc, dict)
    return doc


def test_one_series_per_rule_matching_that_rules_own_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = str(small_nodes_csv(tmp_path / "nodes.csv"))
    base = ["simulate", "--trace-nodes", nodes, "--limit-tasks", str(SLICE), "--json"]
    doc = _json(capsys, *base, "--compare-scoring", "kai,frag-aware")
    assert doc["format"] == "hourglass-sim-compare/1"
    policies = doc["policies"]
    assert isinstance(policies, dict) and list(policies) == ["kai", "frag-aware"]
    for rule, got in policies.items():
        assert len(got["over_time"]) == 10
        # The same figures a plain run with that rule reports: only node_scoring differs between the runs.
        tenants = tmp_path / f"{rule}.yaml"
        src = DEFAULT_TENANTS.read_text()
        assert "node_scoring: kai" in src
        tenants.write_text(src.replace("node_scoring: kai", f"node_scoring: {rule}"))
        alone = _json(capsys, *base, "--tenants", str(tenants))
        assert alone["engine_config_hash"] == got["engine_config_hash"]
        cluster = alone["cluster"]
        assert isinstance(cluster, dict)
        assert got["mean_unallocated_gpus"] == cluster["mean_unallocated_gpus"]
        assert got["mean_fragmented_gpus"] == cluster["mean_fragmented_gpus"]
        slices = got["over_time"]
        weighted = (
            sum(s["unallocated_gpus"] * (s["end_s"] - s["start_s"]) for s in slices) / slices[-1]["end_s"]
        )
        assert weighted == pytest.approx(got["mean_unallocated_gpus"], abs=0.01)
    assert policies["kai"]["engine_config_hash"] != policies["frag-aware"]["engine_config_hash"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--compare-scoring", "kai,nope"], "unknown node_scoring 'nope'"),
        (["--compare-scoring", "kai,kai"], "distinct rule names"),
        (["--compare-scoring", "kai,fgd", "--plot", "x.png"], "cannot be combined with --out or --plot"),
    ],
)
def test_bad_comparisons_are_one_line_and_exit_2(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--limit-tasks", "5", *extra]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("rule", ["frag-aware", "frag-aware-models"])
def test_a_frag_aware_simulation_with_the_learnt_distribution_replays_with_0_mismatches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rule: str
) -> None:
    # The contended 5-node slice: the decayed distribution moves as tasks arrive (its refresh every 128
    # pods and every 10 simulated minutes), and `hourglass replay --verify` re-derives it cycle by cycle
    # (frag-aware-models at its own coverage of the shapes).
    nodes = str(small_nodes_csv(tmp_path / "nodes.csv"))
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(DEFAULT_TENANTS.read_text().replace("node_scoring: kai", f"node_scoring: {rule}"))
    run = tmp_path / "run"
    argv = ["simulate", "--trace-nodes", nodes, "--limit-tasks", str(SLICE), "--tenants", str(tenants)]
    assert main([*argv, "--out", str(run), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["engine_config"]["workload_types"] == "decayed"
    assert summary["cycles"]["run"] > 10
    assert main(["replay", str(run), "--verify"]) == 0
    out = capsys.readouterr().out
    assert f"{summary['cycles']['run']} cycles" in out and "0 mismatches" in out, out
