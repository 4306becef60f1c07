"""``hourglass whatif``: the fidelity check (no change reproduces the recording exactly), the kValue answer
on the two-queue oscillation scenario, sweeps, windows, the JSON interface, the HTML page and bad input.

Recordings are real ``hourglass simulate --out`` runs: a contended slice of the shipped trace (300 tasks on
5 nodes / 16 GPUs: waits, evictions) and ``examples/two-queue-oscillation.yaml`` at kValue 1 (keep-pending
generators, usage snapshots).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest

from analytics.cli import main
from analytics.rerun.whatif import (
    WhatIfError,
    expand_sweeps,
    load_recording,
    outcomes,
    parse_window,
    run_whatif,
)
from ingest.trace import DEFAULT_GPU_NODES
from tests.support.paths import REPO_ROOT

OSCILLATION = REPO_ROOT / "examples" / "two-queue-oscillation.yaml"
SMALL_NODES = ("openb-node-0000", "openb-node-0001", "openb-node-0002", "openb-node-0003", "openb-node-0022")
LOG_FILES = ("events.jsonl", "cycles.jsonl", "usage.jsonl")


def _simulate(capsys: pytest.CaptureFixture[str] | None, *argv: str) -> dict[str, Any]:
    assert main(["simulate", *argv, "--json"]) == 0
    if capsys is None:
        return {}
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


@pytest.fixture(scope="module")
def trace_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """300 trace tasks on a 16-GPU cluster: tasks wait, some are evicted and re-run."""
    base = tmp_path_factory.mktemp("trace")
    nodes = base / "nodes.csv"
    with DEFAULT_GPU_NODES.open(newline="") as src, nodes.open("w", newline="") as dst:
        reader = csv.DictReader(src)
        writer = csv.DictWriter(dst, fieldnames=list(reader.fieldnames or []))
        writer.writeheader()
        writer.writerows(row for row in reader if row["sn"] in SMALL_NODES)
    out = base / "run"
    _simulate(None, "--limit-tasks", "300", "--trace-nodes", str(nodes), "--out", str(out))
    return out


@pytest.fixture(scope="module")
def oscillation_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two-queue oscillation scenario recorded at its kValue 1 (7 simulated days)."""
    out = tmp_path_factory.mktemp("osc") / "run"
    _simulate(None, "--config", str(OSCILLATION), "--out", str(out))
    return out


def _whatif_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["whatif", *argv, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


# --------------------------------------------------------------------------- fidelity


@pytest.mark.parametrize("run", ["trace_run", "oscillation_run"])
def test_a_no_change_whatif_reproduces_the_recording_byte_for_byte(
    run: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    recording: Path = request.getfixturevalue(run)
    result = run_whatif(recording, [], out=tmp_path / "again")
    for name in LOG_FILES:
        assert (tmp_path / "again" / name).read_bytes() == (recording / name).read_bytes(), name
    doc = result.as_json()
    for name, sides in doc["queues"].items():
        assert sides["recorded"] == sides["whatif"], name
    assert doc["cluster"]["recorded"] == doc["cluster"]["whatif"]
    assert doc["changed"] == {}


def test_the_contended_trace_slice_has_outcomes_worth_reproducing(trace_run: Path) -> None:
    """The fidelity test above compares something: waits and evictions happened in the recording."""
    o = outcomes(trace_run)
    assert o.cluster["evictions"] > 0
    assert o.cluster["wait_p90_s"] > 3600
    assert o.cluster["started"] == 300
    leaves = [q for q in o.queues if q not in set(o.parents.values())]
    assert sum(o.queues[q]["gpu_hours"] for q in leaves) == pytest.approx(o.cluster["gpu_hours"], abs=1e-9)


def test_a_no_change_whatif_over_a_window_equals_the_recording_over_it(
    oscillation_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _whatif_json(capsys, str(oscillation_run), "--window", "0..2d")
    assert doc["cluster"]["recorded"] == doc["cluster"]["whatif"]
    assert doc["cluster"]["whatif"]["window_ms"] == [0, 2 * 86_400_000]
    for sides in doc["queues"].values():
        assert sides["recorded"] == sides["whatif"]
    assert doc["queues"]["a"]["whatif"]["gpu_hours"] + doc["queues"]["b"]["whatif"]["gpu_hours"] <= 48 * 16


def test_a_window_from_a_mid_run_state_starts_from_the_recorded_state(
    oscillation_run: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """FROM > 0: the recorded decisions are carried out up to FROM, the engine decides from FROM on."""
    same = _whatif_json(capsys, str(oscillation_run), "--window", "2d..4d", "--out", str(tmp_path / "same"))
    assert same["cluster"]["recorded"] == same["cluster"]["whatif"]
    assert same["cluster"]["whatif"]["window_ms"] == [2 * 86_400_000, 4 * 86_400_000]
    for sides in same["queues"].values():
        assert sides["recorded"] == sides["whatif"]
    # Up to TO the no-change run wrote exactly the recording's events.
    recorded = [json.loads(x) for x in (oscillation_run / "events.jsonl").read_text().splitlines()]
    again = [json.loads(x) for x in (tmp_path / "same" / "events.jsonl").read_text().splitlines()]
    before_to = [e for e in recorded if e["at_ms"] < 4 * 86_400_000]
    assert again[: len(before_to)] == before_to
    # kValue 0 from day 2 on: queue a holds the node at day 2 and keeps it for the two days.
    k0 = _whatif_json(capsys, str(oscillation_run), "--window", "2d..4d", "--set", "fairshare.k_value=0")
    assert k0["queues"]["a"]["whatif"]["gpu_hours"] == 48 * 16
    assert k0["queues"]["b"]["whatif"]["gpu_hours"] == 0
    assert k0["queues"]["a"]["recorded"]["gpu_hours"] == k0["queues"]["b"]["recorded"]["gpu_hours"] == 384


# --------------------------------------------------------------------------- changed settings


def test_kvalue_zero_gives_what_simulating_at_kvalue_zero_gives(
    oscillation_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    simulated = _simulate(capsys, "--config", str(OSCILLATION), "--set", "fairshare.k_value=0")
    doc = _whatif_json(capsys, str(oscillation_run), "--set", "fairshare.k_value=0")
    assert doc["changed"] == {"fairshare.k_value": 0}
    for q in simulated["queues"]:
        assert doc["queues"][q["name"]]["whatif"]["gpu_hours"] == q["gpu_hours"], q["name"]
    # What a user reads: at kValue 1 the queues alternate; at 0 queue a keeps the cluster.
    assert doc["queues"]["a"]["recorded"]["gpu_hours"] == pytest.approx(1344, abs=1)
    assert doc["queues"]["b"]["whatif"]["gpu_hours"] == 0
    assert doc["queues"]["b"]["whatif"]["pending_at_end"] == 1
    assert doc["keep_pending_jobs_rerun_by_rule"] > 0


def test_the_json_interface(oscillation_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _whatif_json(capsys, str(oscillation_run), "--set", "fairshare.k_value=0")
    assert set(doc) >= {"queues", "cluster", "changed"}
    for sides in doc["queues"].values():
        for side in ("recorded", "whatif"):
            assert {"gpu_hours", "wait_p50_s", "evictions"} <= set(sides[side])
    for side in ("recorded", "whatif"):
        assert {"gpu_hours", "allocation_ratio", "fragmented_gpus", "pending_at_end"} <= set(
            doc["cluster"][side]
        )
    assert doc["censored_pods"] == {"running_at_end": 0, "evicted_unfinished": 0, "never_started": 0}


def test_a_sweep_runs_every_value(oscillation_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _whatif_json(capsys, str(oscillation_run), "--set", "fairshare.k_value=0,1", "--window", "0..1d")
    runs = doc["sweep"]
    assert [r["changed"] for r in runs] == [{"fairshare.k_value": 0}, {"fairshare.k_value": 1}]
    same = runs[1]  # kValue 1 is the recording's own setting
    assert same["cluster"]["recorded"] == same["cluster"]["whatif"]
    assert runs[0]["queues"]["b"]["whatif"]["gpu_hours"] == 0


def test_trace_runs_take_tenants_keys_and_the_fairshare_aliases(trace_run: Path) -> None:
    rec = load_recording(trace_run)
    assert rec.scenario is None and len(rec.jobs) == 300
    a = run_whatif(trace_run, ["fairshare.k_value=1"], window=(0, 86_400_000)).as_json()
    b = run_whatif(trace_run, ["engine.k_value=1"], window=(0, 86_400_000)).as_json()
    assert a["changed"] == {"fairshare.k_value": 1}
    assert a["queues"] == b["queues"]


def test_the_table_shows_both_runs_and_the_censored_count(
    trace_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["whatif", str(trace_run), "--set", "cycle_period_s=600", "--window", "0..3d"]) == 0
    out = capsys.readouterr().out
    assert "recorded vs what-if (cycle_period_s=600)" in out
    assert out.count("what-if ") >= 6 and "GPU allocation ratio" in out
    assert "never finished by themselves" in out


def test_html_page_is_offline_with_every_plot(oscillation_run: Path, tmp_path: Path) -> None:
    page = tmp_path / "w.html"
    assert (
        main(
            [
                "whatif",
                str(oscillation_run),
                "--set",
                "fairshare.k_value=0",
                "--window",
                "0..1d",
                "--html",
                str(page),
            ]
        )
        == 0
    )
    text = page.read_text()
    for pid in ("gpu-hours", "waits", "allocation"):
        assert f'id="plot-{pid}-0"' in text
    assert text.count("<svg") == 3
    assert not re.search(r"""(?:src|href|xlink:href|action)\s*=\s*["']?\s*(?:https?:|//)""", text, re.I)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--set", "fairshare.nope=1"], "fairshare.nope"),
        (["--set", "fairshare.k_value=-1"], "k_value"),
        (["--set", "k_value"], "expected KEY=VALUE"),
        (["--window", "1d..2d", "--set", "cycle_period=7m"], "must divide the recording's"),
        (["--window", "3d..1d"], "TO must be after FROM"),
        (["--window", "soon"], "expected FROM..TO"),
    ],
)
def test_bad_settings_are_named(
    oscillation_run: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["whatif", str(oscillation_run), *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


def test_logs_that_cannot_be_read_are_refused_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unreachable broker, a directory that is neither a run nor a log directory, a missing path."""
    for spec in ("kafka://127.0.0.1:9", str(tmp_path), str(tmp_path / "missing")):
        assert main(["whatif", spec]) == 2
        err = capsys.readouterr().err
        assert "whatif:" in err and "Traceback" not in err


def test_sweep_and_window_parsing() -> None:
    runs = expand_sweeps(["a=0,0.5", "b=[1, 2]", "c=x"])
    assert [[c.value for c in r] for r in runs] == [[0, [1, 2], "x"], [0.5, [1, 2], "x"]]
    assert parse_window("0..30d") == (0, 30 * 86_400_000)
    assert parse_window("90m..2h") == (5_400_000, 7_200_000)
    with pytest.raises(WhatIfError):
        expand_sweeps(["a=0,,1"])


CENSORED = """
version: 1
name: censored
duration: 2h
cycle_period: 60s
nodes:
  - {count: 1, gpus: 8, cpu: 64, memory: 512}
queues:
  - {name: a, gpu: {quota: 8, weight: 1}}
  - {name: b, gpu: {quota: 0, weight: 1}}
workloads:
  - kind: fixed
    queue: a
    gpus_per_pod: 8
    jobs:
      - {at: 0, runtime: 10h, name: long}
      - {at: 1m, runtime: 1h, name: huge, gpus_per_pod: 16}
  - {kind: poisson, queue: b, arrivals_per_hour: 2, runtime: 30m, gpus_per_pod: 2}
"""


def test_pods_that_never_finished_are_counted_and_run_their_time_so_far(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 10 h job still running at the 2 h end, a 16-GPU job and b's jobs that never start on 8 GPUs."""
    scenario = tmp_path / "censored.yaml"
    scenario.write_text(CENSORED)
    _simulate(None, "--config", str(scenario), "--out", str(tmp_path / "run"))
    rec = load_recording(tmp_path / "run")
    long = next(j for j in rec.jobs if j.name == "long")
    assert long.runtime_ms == 2 * 3_600_000  # its recorded time so far: the whole run
    doc = _whatif_json(capsys, str(tmp_path / "run"), "--set", "nodes.0.gpus=16")
    assert doc["censored_pods"] == {"running_at_end": 1, "evicted_unfinished": 0, "never_started": 5}
    b = doc["queues"]["b"]
    assert b["recorded"]["gpu_hours"] == 0 and b["recorded"]["pending_at_end"] == 4
    assert b["whatif"]["gpu_hours"] > 0 and b["whatif"]["pending_at_end"] == 0
    assert doc["queues"]["a"]["whatif"]["gpu_hours"] == 16  # long holds 8 GPUs for the 2 h either way


def test_engine_config_file_changes_settings(
    oscillation_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "k0.yaml"
    cfg.write_text("fairshare:\n  k_value: 0\n")
    doc = _whatif_json(capsys, str(oscillation_run), "--engine-config", str(cfg), "--window", "0..1d")
    assert doc["changed"] == {"fairshare.k_value": 0}
    assert doc["queues"]["b"]["whatif"]["gpu_hours"] == 0
