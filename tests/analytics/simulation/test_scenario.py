"""``hourglass simulate --config FILE``: synthetic scenarios, run through the command line as a user would.

The two-queue oscillation (``examples/two-queue-oscillation.yaml``, KAI's time-based fairshare
demonstration): with k_value > 0 and a half-life the cluster alternates between the queues and their
GPU-hours over a week differ by at most 2 %; with k_value 0 (same file, overridden) the first queue keeps the
cluster. Then the generators, the file format's errors, and replaying a run.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from analytics.cli import main
from analytics.rundir import DirLog, read_cycles, read_events
from analytics.simulation.scenario import ScenarioError, load_scenario, parse_duration_ms
from analytics.simulation.simulate import simulate
from ingest import events as ev
from tests.support.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "two-queue-oscillation.yaml"


def _simulate(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    capsys.readouterr()
    rc = main(["simulate", "--json", *args])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    summary: dict[str, Any] = json.loads(captured.out)
    return summary


def _gpu_hours(summary: dict[str, Any]) -> dict[str, float]:
    return {q["name"]: q["gpu_hours"] for q in summary["queues"]}


def _binds(run: Path) -> list[tuple[int, str]]:
    """(time ms, queue) of every PodBound in the run's event log."""
    return [(e.at_ms, e.namespace) for _, e in read_events(run) if isinstance(e, ev.PodBound)]


def _write(tmp_path: Path, doc: dict[str, Any], name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def _base(**extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "version": 1,
        "duration": "6h",
        "cycle_period": "60s",
        "nodes": [{"count": 2, "gpus": 8}],
        "queues": [{"name": "a", "gpu": {"quota": 0}}, {"name": "b", "gpu": {"quota": 0}}],
        "workloads": [{"queue": "a", "kind": "keep_pending", "gpus_per_pod": 8, "runtime": "1h"}],
    }
    doc.update(extra)
    return doc


# --------------------------------------------------------------------------- the oscillation


@pytest.fixture(scope="module")
def oscillation(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """The shipped example as is (a simulated week): run dir, manifest, JSON summary."""
    out = tmp_path_factory.mktemp("osc") / "run"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        rc = main(["simulate", "--config", str(EXAMPLE), "--out", str(out), "--json"])
    assert rc == 0
    return out, json.loads((out / "manifest.json").read_text()), json.loads(stdout.getvalue())


def test_time_based_fairshare_alternates_the_cluster_between_the_queues(
    oscillation: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    out, manifest, summary = oscillation
    binds = _binds(out)
    days = manifest["inputs"]["scenario_config"]["duration"] / 86_400_000
    assert days >= 7 and manifest["engine_config"]["k_value"] > 0
    queues = [q for _, q in binds]
    switches = sum(1 for x, y in itertools.pairwise(queues) if x != y)
    # Hour-long jobs on a cluster each job fills: about one bind an hour, and the queue changes every time
    # (the queue that just ran has the larger recent usage, so the other one's job goes first).
    assert len(binds) >= 24 * days * 0.9
    assert switches >= 0.9 * (len(binds) - 1)
    # Neither queue holds the cluster for long stretches: no three binds in a row for one queue.
    assert all(len(set(queues[i : i + 3])) == 2 for i in range(len(queues) - 2))
    hours = _gpu_hours(summary)
    assert summary["scenario"]["name"] == "two-queue-oscillation"
    assert hours["a"] > 0 and abs(hours["a"] - hours["b"]) <= 0.02 * max(hours["a"], hours["b"])
    # The cluster is never idle: 16 GPUs x the whole run.
    assert sum(hours.values()) == pytest.approx(16 * 24 * days, rel=0.01)


def test_without_k_value_the_first_queue_keeps_the_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    summary = _simulate(capsys, "--config", str(EXAMPLE), "--set", "fairshare.k_value=0")
    hours = _gpu_hours(summary)
    total = summary["cluster"]["gpu_hours_capacity"]
    assert hours["a"] >= 0.99 * total
    assert hours["b"] <= 0.01 * total
    assert summary["scenario"]["overrides"] == ["fairshare.k_value=0"]


def test_replay_verifies_every_cycle_of_a_scenario_run(
    oscillation: tuple[Path, dict[str, Any], dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    out, manifest, _ = oscillation
    records = list(read_cycles(out))
    assert records and all(r.usage_snapshot_id is not None for r in records)
    capsys.readouterr()
    rc = main(["replay", str(out), "--verify"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 0
    assert lines[-1] == f"replay: {manifest['counts']['cycles']} cycles, 0 mismatches"


def test_usage_comes_from_the_fairshare_maths_and_respects_the_window(tmp_path: Path) -> None:
    """A tumbling window of 6 h: the snapshot taken on a boundary has an empty window (usage 0); the one
    five minutes before it does not. And over an unbounded window, the fairshare maths agrees with the
    simulator's own decayed accumulator to the recorded 9 digits."""
    tumbling = load_scenario(
        EXAMPLE, ["duration=7h", "fairshare.window_type=tumbling", "fairshare.window_s=21600"]
    ).build()
    run = tmp_path / "tumbling"
    simulate(
        [],
        tumbling.nodes,
        tumbling.tenants,
        jobs=tumbling.jobs,
        keep_pending=tumbling.keep_pending,
        end_ms=tumbling.end_ms,
        usage=tumbling.usage,
        log=DirLog(run),
    )
    by_id = {r.usage_snapshot_id: r for r in read_cycles(run)}
    before, on = by_id["sim-usage-21300000"], by_id["sim-usage-21600000"]
    assert max(q.usage["gpu"] for q in before.queues) > 0.4
    assert all(q.usage == {"gpu": 0.0, "cpu": 0.0, "memory": 0.0} for q in on.queues)

    unbounded = load_scenario(EXAMPLE, ["duration=12h", "fairshare.window_s=316224000"]).build()
    usage: dict[str, list[Any]] = {}
    for name, fn in (("decay", unbounded.usage), ("accumulator", None)):
        simulate(
            [],
            unbounded.nodes,
            unbounded.tenants,
            jobs=unbounded.jobs,
            keep_pending=unbounded.keep_pending,
            end_ms=unbounded.end_ms,
            usage=fn,
            log=DirLog(tmp_path / name),
        )
        usage[name] = [[q.usage for q in r.queues] for r in read_cycles(tmp_path / name)]
    assert len(usage["decay"]) > 100
    assert usage["decay"] == usage["accumulator"]


# --------------------------------------------------------------------------- generators


def test_poisson_and_fixed_workloads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # b's quota covers its gangs, so a's over-quota jobs never push them out (reclaim goes the other way).
    doc = _base(
        duration="2d",
        nodes=[{"count": 3, "gpus": 8}],
        queues=[{"name": "a", "gpu": {"quota": 8}}, {"name": "b", "gpu": {"quota": 16}}],
        workloads=[
            {
                "queue": "a",
                "kind": "poisson",
                "name": "p",
                "arrivals_per_hour": 3,
                "gpus_per_pod": 1,
                "runtime": {"dist": "exponential", "mean": "30m"},
                "seed": 7,
            },
            {
                "queue": "b",
                "kind": "fixed",
                "name": "f",
                "gpus_per_pod": 8,
                "pods": 2,
                "jobs": [{"at": "10m", "runtime": "1h"}, {"at": "3h", "runtime": "2h", "gpus_per_pod": 4}],
            },
        ],
    )
    path = _write(tmp_path, doc)
    out = tmp_path / "run"
    summary = _simulate(capsys, "--config", str(path), "--out", str(out))
    events = [e for _, e in read_events(out)]
    groups = {e.name: e for e in events if isinstance(e, ev.PodGroupUpserted)}
    poisson = [g for n, g in groups.items() if n.startswith("p-")]
    # 3 an hour for 48 h: 144 expected; a Poisson count is within +-4 sigma (48) of that.
    assert 96 <= len(poisson) <= 192
    assert all(0 <= g.created_at_ms < 2 * 86_400_000 for g in poisson)
    # The fixed jobs: 2-pod gangs arriving when the file says, both pods bound in the same cycle.
    assert groups["f-0"].created_at_ms == 600_000 and groups["f-0"].min_member == 2
    assert groups["f-1"].created_at_ms == 3 * 3_600_000
    bound = {e.name: e for e in events if isinstance(e, ev.PodBound)}
    assert bound["f-0-0"].at_ms == bound["f-0-1"].at_ms
    assert len(bound["f-1-0"].gpu_devices) == 4
    deleted = [e for e in events if isinstance(e, ev.PodGroupDeleted) and e.name == "f-0"]
    finished = [e for e in events if isinstance(e, ev.PodFinished) and e.name.startswith("f-0-")]
    assert len(deleted) == 1 and len(finished) == 2 and deleted[0].at_ms >= max(e.at_ms for e in finished)
    hours = _gpu_hours(summary)
    assert hours["b"] == pytest.approx(16 * 1 + 8 * 2, abs=0.5)  # 16 GPUs for 1 h, then 8 for 2 h

    # The same file gives the same log; another seed another one.
    again = tmp_path / "again"
    _simulate(capsys, "--config", str(path), "--out", str(again))
    assert (again / "events.jsonl").read_bytes() == (out / "events.jsonl").read_bytes()
    doc["workloads"][0]["seed"] = 8
    other = tmp_path / "other"
    _simulate(capsys, "--config", str(_write(tmp_path, doc, "o.yaml")), "--out", str(other))
    assert (other / "events.jsonl").read_bytes() != (out / "events.jsonl").read_bytes()


def test_keep_pending_keeps_its_count_pending(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _base(
        workloads=[
            {
                "queue": "a",
                "kind": "keep_pending",
                "name": "k",
                "jobs": 3,
                "gpus_per_pod": 4,
                "runtime": "1h",
            },
        ]
    )
    out = tmp_path / "run"
    summary = _simulate(capsys, "--config", str(_write(tmp_path, doc)), "--out", str(out))
    a = next(q for q in summary["queues"] if q["name"] == "a")
    # 16 GPUs take four 4-GPU jobs at a time; three more always wait. 6 h: 4 x 6 jobs ran, 3 pending.
    assert a["pending_at_end"] == 3
    assert a["started"] == 24
    assert a["gpu_hours"] == pytest.approx(16 * 6, rel=0.01)
    # After everything that happens at one instant (a cycle's binds, then the top-up), 3 are pending.
    waiting: dict[int, int] = {}
    for _, e in read_events(out):
        if isinstance(e, ev.PodSubmitted | ev.PodBound):
            waiting[e.at_ms] = waiting.get(e.at_ms, 0) + (1 if isinstance(e, ev.PodSubmitted) else -1)
    running_total = list(itertools.accumulate(waiting[t] for t in sorted(waiting)))
    assert len(running_total) > 6 and set(running_total) == {3}


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"nodes": [{"count": 1, "gpus": 8, "colour": "red"}]},
            "nodes[0].colour: Extra inputs are not permitted",
        ),
        ({"duration": "3 fortnights"}, "duration: Value error, expected a duration"),
        (
            {"fairshare": {"window_type": "cron"}},
            "fairshare.window_type: Input should be 'sliding' or 'tumbling'",
        ),
        (
            {"workloads": [{"queue": "zz", "kind": "keep_pending", "runtime": "1h"}]},
            "workloads[0].queue: 'zz' is not a leaf queue",
        ),
        (
            {
                "workloads": [
                    {"queue": "a", "kind": "poisson", "arrivals_per_hour": 1, "runtime": "1h", "pods": 0}
                ]
            },
            "workloads[0].poisson.pods: Input should be greater than or equal to 1",
        ),
        (
            {"workloads": [{"queue": "a", "kind": "keep_pending", "runtime": "1h", "gpus_per_pod": 1.5}]},
            "gpus_per_pod 1.5: whole GPUs, or a fraction below 1",
        ),
        (
            {"engine": {"k_value": 1}},
            "engine.k_value: set k_value, half_life_s and refresh_s under fairshare",
        ),
    ],
)
def test_errors_name_the_file_and_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], message: str
) -> None:
    path = _write(tmp_path, _base(**change))
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    assert str(exc.value).startswith(f"{path}: ")
    assert message.replace("Value error, ", "") in str(exc.value)
    assert main(["simulate", "--config", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"simulate: {path}: ")


def test_command_line_conflicts_and_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _base())
    assert main(["simulate", "--config", str(path), "--trace-pods", "x.csv", "--tenants", "t.yaml"]) == 2
    assert "--config cannot be combined with --trace-pods, --tenants" in capsys.readouterr().err
    assert main(["simulate", "--set", "duration=1h"]) == 2
    assert "--set needs --config" in capsys.readouterr().err
    assert main(["simulate", "--config", str(path), "--set", "queues.9.name=x"]) == 2
    assert "queues.9 is not an index of a 2-item list" in capsys.readouterr().err
    assert main(["simulate", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read scenario file" in capsys.readouterr().err
    summary = _simulate(capsys, "--config", str(path), "--set", "duration=2h", "--period", "600")
    assert summary["simulated_seconds"] == 7200 and summary["period_s"] == 600


def test_durations() -> None:
    assert parse_duration_ms("90s") == 90_000
    assert parse_duration_ms("1.5h") == 5_400_000
    assert parse_duration_ms(30) == 30_000
    assert parse_duration_ms("2w") == 14 * 86_400_000
    for bad in ("-1s", "1.0001ms", "soon", True, -5):
        with pytest.raises(ValueError):
            parse_duration_ms(bad)
