"""Outputs that cannot be written, and results with nothing to show, are one clear line and rc 2 — checked
before the run starts, so a bad path costs no simulated day."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from analytics.cli import main

_FILE = "a-file.txt"


def _case_root(tmp_path: Path) -> Path:
    (tmp_path / _FILE).write_text("not a directory\n")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "events.jsonl").write_text("{}\n")
    (tmp_path / "plots").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--out", _FILE], f"simulate: --out {{tmp}}/{_FILE}: is a file, not a directory"),
        (
            ["--out", f"{_FILE}/run"],
            f"simulate: --out {{tmp}}/{_FILE}/run: {{tmp}}/{_FILE} is not a directory",
        ),
        (["--out", "full"], "simulate: --out {tmp}/full: the directory is not empty (pass --force"),
        (["--plot", "missing/sim.png"], "simulate: --plot {tmp}/missing/sim.png: no directory {tmp}/missing"),
        (["--plot", "plots"], "simulate: --plot {tmp}/plots: is a directory, not a file"),
        (["--plot", "sim.xyz"], "simulate: --plot {tmp}/sim.xyz: unknown image format '.xyz' (one of "),
        (
            ["--plot", f"{_FILE}/sim.png"],
            f"simulate: --plot {{tmp}}/{_FILE}/sim.png: {{tmp}}/{_FILE} is not a directory",
        ),
    ],
)
def test_simulate_refuses_an_output_it_cannot_write_before_the_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    root = _case_root(tmp_path)

    def no_run(*_: object, **__: object) -> None:
        raise AssertionError("the simulation started before its outputs were checked")

    monkeypatch.setattr("analytics.simulation.cli.simulate", no_run)
    option, value = argv
    rc = main(["simulate", "--limit-tasks", "5", option, str(root / value)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1, err
    assert message.format(tmp=root) in err
    assert (root / "full" / "events.jsonl").read_text() == "{}\n"  # nothing overwritten


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in any directory")
def test_simulate_refuses_a_directory_it_may_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert main(["simulate", "--limit-tasks", "5", "--out", str(locked / "run")]) == 2
    assert f"cannot write in {locked} (permission denied)" in capsys.readouterr().err


def test_force_replaces_the_run_files_of_a_used_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _case_root(tmp_path) / "full"
    assert main(["simulate", "--limit-tasks", "5", "--json", "--out", str(out), "--force"]) == 0
    assert (out / "events.jsonl").read_text() != "{}\n"
    assert (out / "manifest.json").exists()
    # an empty directory needs no --force
    (tmp_path / "empty").mkdir()
    assert main(["simulate", "--limit-tasks", "5", "--json", "--out", str(tmp_path / "empty")]) == 0


def _scenario(tmp_path: Path, name: str, doc: dict[str, object]) -> Path:
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump({"version": 1, "name": name, "cycle_period": "60s", **doc}))
    out = tmp_path / name
    assert main(["simulate", "--config", str(cfg), "--out", str(out), "--json"]) == 0
    return out


# one 2-GPU node; "team" runs 1-hour jobs one after another, "huge" asks for a 4-GPU pod that never fits
_NODE = {"nodes": [{"count": 1, "gpus": 2, "cpu": 64, "memory": 256, "name_prefix": "n"}]}


def _jobs(queue: str, gpus: int, n: int) -> dict[str, object]:
    jobs = [{"at": "0s", "runtime": "1h"}] * n
    return {"queue": queue, "kind": "fixed", "gpus_per_pod": gpus, "name": queue, "jobs": jobs}


def test_eta_backtest_with_nothing_scored_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # cut before any job finished: every pod left pending waited with no finished run to learn from
    run = _scenario(
        tmp_path,
        "cut",
        {"duration": "30m", **_NODE, "queues": [{"name": "team", "gpu": {"quota": 2, "weight": 1}}],
         "workloads": [_jobs("team", 2, 3)]},
    )  # fmt: skip
    capsys.readouterr()
    assert main(["eta", "--backtest", str(run)]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.count("\n") == 1
    assert out.err.startswith(f"eta: --backtest {run}: nothing to score: 2 pods were left pending by a cycle")
    assert "coverage" not in out.err


def test_whatif_shows_no_wait_for_a_queue_that_started_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _scenario(
        tmp_path,
        "never",
        {"duration": "3h", **_NODE,
         "queues": [{"name": "team", "gpu": {"quota": 2, "weight": 1}}, {"name": "huge", "gpu": {"quota": 0, "weight": 1}}],
         "workloads": [_jobs("team", 2, 2), _jobs("huge", 4, 1)]},
    )  # fmt: skip
    capsys.readouterr()
    assert main(["whatif", str(run), "--set", "fairshare.k_value=0", "--json"]) == 0
    huge = json.loads(capsys.readouterr().out)["queues"]["huge"]
    for side in ("recorded", "whatif"):
        assert huge[side]["started"] == 0
        assert huge[side]["wait_p50_s"] is None and huge[side]["wait_p99_s"] is None
    assert main(["whatif", str(run), "--set", "fairshare.k_value=0"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "huge" in line]
    assert rows and "0s" not in rows[0] and " - " in rows[0]
