"""``hourglass replay`` on a small simulated run: verify, tampering, narrowing, usage-fed cycles."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from analytics.cli import main
from analytics.rerun.replay import NO_USAGE, replay
from analytics.rundir import CYCLES_FILE, DirLog, read_cycles, read_manifest
from analytics.simulation.simulate import simulate
from ingest.tenants import DEFAULT_TENANTS, load_tenants, parse_tenants
from ingest.trace import read_nodes
from tests.support.trace_slices import first_tasks, small_nodes_csv

TASKS = 120


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first tasks of the trace on a 5-node, 16-GPU cluster: waits, evictions, Unschedulable."""
    base = tmp_path_factory.mktemp("replay")
    out = base / "run"
    nodes = read_nodes(small_nodes_csv(base / "nodes.csv"))
    simulate(first_tasks(TASKS), nodes, load_tenants(DEFAULT_TENANTS), log=DirLog(out))
    return out


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    rc = main(["replay", *argv])
    return rc, capsys.readouterr().out.splitlines()


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / CYCLES_FILE).read_bytes().splitlines()]


def _tampered(run: Path, tmp_path: Path) -> tuple[Path, int, str, str]:
    """A copy of *run* with the node of one Bind decision changed: (dir, cycle index, cycle id, pod)."""
    out = tmp_path / "tampered"
    shutil.copytree(run, out)
    recs = _records(out)
    # a v3 record leaves out fields at their default (scheduler/engine/record/written.py)
    nodes = sorted({d["node"] for r in recs for d in r.get("decisions", []) if d.get("node")})
    binds = [i for i, r in enumerate(recs) if any(d["kind"] == "Bind" for d in r.get("decisions", []))]
    k = binds[len(binds) // 2]
    d = next(d for d in recs[k]["decisions"] if d["kind"] == "Bind")
    d["node"] = next(n for n in nodes if n != d["node"])
    lines = [json.dumps(r, sort_keys=True, separators=(",", ":")) for r in recs]
    (out / CYCLES_FILE).write_text("\n".join(lines) + "\n")
    return out, k, recs[k]["cycle_id"], d["pod"]


def test_verify_reproduces_every_cycle(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n = read_manifest(run)["counts"]["cycles"]
    assert n > 20
    rc, lines = _cli(capsys, str(run), "--verify")
    assert rc == 0
    assert lines == [f"replay: {n} cycles, 0 mismatches"]


def test_a_tampered_decision_is_reported_with_its_field(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, k, cid, pod = _tampered(run, tmp_path)
    n = read_manifest(run)["counts"]["cycles"]
    rc, lines = _cli(capsys, str(out), "--verify")
    assert rc == 1
    assert lines[-1] == f"replay: {n} cycles, 1 mismatches"
    reported = [line for line in lines if line.startswith("MISMATCH")]
    assert len(reported) == 1
    assert reported[0].startswith(f"MISMATCH cycle #{k} {cid} ")
    assert f"decisions[pod={pod}].node" in reported[0]
    detail = [line for line in lines if line.startswith("  ")]
    assert detail and detail[0].startswith(f"  decisions[pod={pod}].node: recorded '")
    assert ", re-run '" in detail[0]

    summary = replay(out)
    assert summary.mismatches == 1 and summary.first_mismatch is not None
    assert summary.first_mismatch.index == k
    assert [d.path for d in summary.first_mismatch.diffs] == [f"decisions[pod={pod}].node"]

    # --pod narrows the comparison: another pod's decisions all match, this pod's do not.
    other = next(
        d["pod"]
        for r in _records(run)
        for d in r.get("decisions", [])
        if d["kind"] == "Bind" and d.get("pod") not in (None, pod)
    )
    assert _cli(capsys, str(out), "--verify", "--pod", other)[0] == 0
    rc, lines = _cli(capsys, str(out), "--verify", "--pod", pod)
    assert rc == 1 and lines[-1] == f"replay: {n} cycles, 1 mismatches"


def test_cycle_replays_just_one(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, k, cid, _ = _tampered(run, tmp_path)
    rc, lines = _cli(capsys, str(out), "--verify", "--cycle", cid)
    assert rc == 1 and lines[-1] == "replay: 1 cycles, 1 mismatches"
    assert lines[0].startswith(f"MISMATCH cycle #{k} {cid} ")
    assert _cli(capsys, str(out), "--verify", "--cycle", cid[:10]) == (rc, lines)  # a unique prefix
    other = _records(run)[k + 1]["cycle_id"]
    rc, lines = _cli(capsys, str(out), "--verify", "--cycle", other)
    assert (rc, lines) == (0, ["replay: 1 cycles, 0 mismatches"])
    assert main(["replay", str(out), "--verify", "--cycle", "no-such-cycle"]) == 2
    assert "no recorded cycle" in capsys.readouterr().err


def test_until_narrows(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recs = list(read_cycles(run))
    mid = recs[len(recs) // 2]
    want = sum(1 for r in recs if r.events_offset <= mid.events_offset)
    assert 0 < want < len(recs)
    rc, lines = _cli(capsys, str(run), "--verify", "--until", str(mid.events_offset))
    assert (rc, lines) == (0, [f"replay: {want} cycles, 0 mismatches"])
    want_ms = sum(1 for r in recs if r.logical_time_ms <= mid.logical_time_ms)
    rc, lines = _cli(capsys, str(run), "--verify", "--until-ms", str(mid.logical_time_ms))
    assert (rc, lines) == (0, [f"replay: {want_ms} cycles, 0 mismatches"])
    # The tampered cycle lies after the bound: the narrowed replay does not reach it.
    out, k, _, _ = _tampered(run, tmp_path)
    before = recs[k - 1].events_offset
    if before < recs[k].events_offset:
        assert _cli(capsys, str(out), "--verify", "--until", str(before))[0] == 0


def test_without_verify_prints_each_cycle(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recs = list(read_cycles(run))
    rc, lines = _cli(capsys, str(run), "--until-ms", str(recs[2].logical_time_ms))
    assert rc == 0
    assert lines[-1].startswith("replay: 3 cycles")
    assert len(lines) == 4 and lines[0].startswith(f"cycle #0 {recs[0].cycle_id} ")
    pod = next(d.pod for d in recs[0].decisions if d.kind == "Bind")
    assert pod is not None
    rc, lines = _cli(capsys, str(run), "--cycle", recs[0].cycle_id, "--pod", pod)
    assert rc == 0 and len(lines) == 2 and f"{pod}: Bind node=" in lines[0]


def test_usage_fed_cycles_are_reported_not_crashed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = load_tenants().model_dump(mode="json")
    doc["engine"] |= {"k_value": 1.0, "usage_refresh_s": 600}
    out = tmp_path / "k"
    nodes = read_nodes(small_nodes_csv(tmp_path / "nodes.csv"))
    simulate(first_tasks(15), nodes, parse_tenants(doc), log=DirLog(out))
    n = read_manifest(out)["counts"]["cycles"]
    rc, lines = _cli(capsys, str(out), "--verify")  # the simulator logs its usage snapshots: exact replay
    assert rc == 0 and lines[-1] == f"replay: {n} cycles, 0 mismatches"
    (out / "usage.jsonl").unlink()  # a run dir without them (older runs): reported, not crashed
    rc, lines = _cli(capsys, str(out), "--verify")
    assert rc == 1
    assert lines[-1] == f"replay: {n} cycles, {n} mismatches"
    assert all(NO_USAGE in line for line in lines[:-1])
    assert "sim-usage-0" in lines[0]


def test_bad_run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path), "--verify"]) == 2
    assert capsys.readouterr().err.startswith("replay: ")
