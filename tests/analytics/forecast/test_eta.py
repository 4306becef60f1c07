"""``hourglass eta``: when a pending pod will start, and the backtest that measures how honest that is.

Small scenarios whose answer is known: each is simulated (``hourglass simulate --config``) twice, cut at
``cut`` (the log ``eta`` reads) and run longer (what really happened). Every job of a scenario runs for the
same time as the finished runs the cut log holds, so the estimate must equal the real start exactly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from analytics.cli import main
from analytics.forecast.eta import EtaError, RuntimeModel, job_stem
from analytics.rundir import read_events
from tests.support.paths import REPO_ROOT

H = 3_600_000
MIN = 60_000


def _scenario(
    nodes_gpus: int, queues: list[dict[str, Any]], workloads: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "version": 1,
        "name": "eta",
        "duration": "10h",
        "cycle_period": "60s",
        "eviction_grace": "30s",
        "nodes": [{"count": 1, "gpus": nodes_gpus, "cpu": 64, "memory": 256, "name_prefix": "n"}],
        "queues": queues,
        "workloads": workloads,
    }


def _fixed(queue: str, name: str, gpus: int, jobs: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "queue": queue,
        "kind": "fixed",
        "gpus_per_pod": gpus,
        "name": name,
        "jobs": [{"at": at, "runtime": rt} for at, rt in jobs],
    }


ONE_QUEUE = _scenario(
    2,
    [{"name": "team", "gpu": {"quota": 2, "weight": 1}}],
    [_fixed("team", "train", 2, [("0s", "1h")] * 6)],
)
# Queue b takes the whole 4-GPU node while a is idle; a's 2-GPU job arrives at 3h10 and has to wait until
# b's pods pass their 30-minute reclaim protection (3h30), then for the evicted pods' grace.
RECLAIM = _scenario(
    4,
    [
        {"name": "a", "gpu": {"quota": 2, "weight": 1}},
        {"name": "b", "gpu": {"quota": 2, "weight": 1}, "reclaim_min_runtime_s": 1800},
    ],
    [
        _fixed("b", "warm", 4, [("0s", "1h")] * 3),
        _fixed("b", "long", 1, [("3h", "5h")] * 4),
        _fixed("a", "eval", 2, [("190m", "1h")]),
    ],
)
TOO_BIG = _scenario(
    2,
    [{"name": "team", "gpu": {"quota": 2, "weight": 1}}],
    [_fixed("team", "train", 2, [("0s", "1h")] * 4), _fixed("team", "huge", 4, [("0s", "1h")])],
)


@dataclass(frozen=True)
class Case:
    name: str
    scenario: dict[str, Any]
    cut: str  # where the log eta reads ends
    pod: str
    ahead: list[str]
    says: str  # a phrase of the text answer
    start_ms: int | None  # the known start (None: never)


CASES = [
    Case("running job ends at a known time", ONE_QUEUE, "200m", "team/train-4", [], "at 04:00", 4 * H),
    Case("second in line", ONE_QUEUE, "200m", "team/train-5", ["team/train-4"], "1 job of your queue", 5 * H),
    Case(
        "reclaim after min-runtime",
        RECLAIM,
        "200m",
        "a/eval-0",
        [],
        "queue b holds over its fair share",
        3 * H + 31 * MIN,
    ),
    Case(
        "never fits",
        TOO_BIG,
        "90m",
        "team/huge-0",
        ["team/train-2", "team/train-3"],
        "not expected to start within a year",
        None,
    ),
]


def _run(tmp: Path, scenario: dict[str, Any], duration: str, tag: str) -> Path:
    cfg = tmp / f"{tag}.yaml"
    cfg.write_text(yaml.safe_dump({**scenario, "duration": duration}))
    out = tmp / tag
    assert main(["simulate", "--config", str(cfg), "--out", str(out), "--json"]) == 0
    return out


def _real_start(run: Path, pod: str) -> int | None:
    return next((e.at_ms for _, e in read_events(run) if e.type == "PodBound" and e.uid == pod), None)


def _eta(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["eta", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_eta_matches_what_happened(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cut = _run(tmp_path, case.scenario, case.cut, "cut")
    assert _real_start(cut, case.pod) is None, "the pod must still be pending where the log is cut"
    rc, out, err = _eta(capsys, case.pod, "--log", str(cut), "--json")
    assert rc == 0, err
    answer = json.loads(out)
    assert answer["state"] == "pending"
    assert answer["most_likely_ms"] == case.start_ms
    assert answer["earliest_ms"] == case.start_ms
    assert answer["ahead"] == case.ahead
    if case.start_ms is not None:
        full = _run(tmp_path, case.scenario, "10h", "full")
        assert _real_start(full, case.pod) == case.start_ms
    rc, text, _ = _eta(capsys, case.pod, "--log", str(cut))
    assert rc == 0
    assert case.says in text


def test_running_pod_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cut = _run(tmp_path, ONE_QUEUE, "200m", "cut")
    rc, out, _ = _eta(capsys, "train-3", "--log", str(cut))
    assert rc == 0
    assert "already running on node n-0 since 03:00" in out
    for args, message in [
        (["nope", "--log", str(cut)], "unknown pod 'nope'"),
        (["team/train-0", "--log", str(cut)], "not in the log's current state"),
        (["team/train-4"], "give a pod and --log LOG"),
        (["team/train-4", "--log", str(cut), "--step", "0"], "--step must be a positive number"),
        (["team/train-4", "--backtest", str(cut)], "--backtest LOG takes no pod"),
        (["team/train-4", "--log", str(tmp_path / "missing")], "neither a run directory"),
    ]:
        rc, _, err = _eta(capsys, *args)
        assert rc == 2, args
        assert message in err, (args, err)


def test_no_history_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cut = _run(tmp_path, ONE_QUEUE, "30m", "cut")
    rc, _, err = _eta(capsys, "team/train-1", "--log", str(cut))
    assert rc == 2
    assert "no pod has finished in the log yet" in err


def test_backtest_exact_when_run_times_are(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every job runs 1 h; the pods left pending after the history exists are predicted to the second."""
    scenario = _scenario(
        2,
        [{"name": "team", "gpu": {"quota": 2, "weight": 1}}],
        [_fixed("team", "train", 2, [("0s", "1h")] * 4 + [("185m", "1h"), ("190m", "1h")])],
    )
    run = _run(tmp_path, scenario, "10h", "full")
    rc, out, err = _eta(capsys, "--backtest", str(run))
    assert rc == 0, err
    assert out.splitlines()[-1] == "eta: 2 pods, coverage 100.0 % within p10-p90, median abs error 0 s"
    rc, out, _ = _eta(capsys, "--backtest", str(run), "--json")
    body = json.loads(out)
    assert (body["pods"], body["coverage_pct"], body["median_abs_error_s"]) == (2, 100.0, 0.0)
    assert body["never_started"] == 0 and body["no_history"] == 3  # train-1..3 waited before any run ended
    assert body["line"] == "eta: 2 pods, coverage 100.0 % within p10-p90, median abs error 0 s"


@pytest.mark.parametrize(
    ("name", "stem"),
    [
        ("train-7", "train"),
        ("pg-train-12-0f3c2a1b-1111-2222-3333-444455556666", "train"),
        ("a-w0-3", "a-w0"),
        ("x", "x"),
    ],
)
def test_job_stem(name: str, stem: str) -> None:
    assert job_stem(name) == stem


def test_runtime_model_levels_and_conditioning() -> None:
    m = RuntimeModel()
    for rt in (10, 20, 30, 40, 50, 60, 70, 80, 90, 100):
        m.add("q", "job", rt * 1000)
    m.add("q", "other", 500_000)
    assert m.remaining("q", "job", 50) == (50_000, "job")
    assert m.remaining("q", "job", 90, elapsed_ms=75_000) == (25_000, "job")  # of 80, 90, 100: p90 = 100
    assert m.remaining("q", "unseen", 10) == (20_000, "queue")  # 11 runs, nearest rank 2
    assert m.remaining("elsewhere", "job", 50) == (60_000, "cluster")
    assert m.remaining("q", "job", 50, elapsed_ms=1_000_000) == (1_000_000, "beyond history")


def test_backtest_on_the_shipped_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A recorded simulation of the shipped trace (its first 400 tasks) on the contended node list of
    examples/ (11 nodes, 45 GPUs): the backtest runs and ends with the line other tools parse."""
    import re

    from analytics.rundir import DirLog
    from analytics.simulation.simulate import simulate
    from ingest.tenants import DEFAULT_TENANTS, load_tenants
    from ingest.trace import DEFAULT_PODS, read_nodes, read_pods

    tasks = read_pods(DEFAULT_PODS)
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i].creation_s or 0, i))
    nodes = read_nodes(REPO_ROOT / "examples" / "contended-nodes.csv")
    run = tmp_path / "run"
    simulate([tasks[i] for i in order[:400]], nodes, load_tenants(DEFAULT_TENANTS), log=DirLog(run))
    rc, out, err = _eta(capsys, "--backtest", str(run), "--sample", "12")
    assert rc == 0, err
    last = out.splitlines()[-1]
    m = re.fullmatch(r"eta: (\d+) pods, coverage (\d+\.\d) % within p10-p90, median abs error (\d+) s", last)
    assert m is not None, last
    assert 1 <= int(m.group(1)) <= 12
    assert 0.0 <= float(m.group(2)) <= 100.0


@pytest.mark.parametrize("backend", ["filelog", "kafka"])
def test_eta_and_check_on_a_service_log(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    """The same history in a log the scheduler service ran on — an embedded FileLog, or topics of a real
    Kafka broker — gives the same answer as the run directory: eta and check read any log `replay` reads."""
    import uuid

    from ingest.backends import open_log
    from ingest.events import dump_event
    from ingest.log import Topics
    from scheduler.service import Service

    cut = _run(tmp_path, ONE_QUEUE, "200m", "cut")
    if backend == "kafka":
        prefix = f"eta-{uuid.uuid4().hex[:8]}"
        topics = Topics.with_prefix(prefix)
        spec = f"kafka://{request.getfixturevalue('kafka_bootstrap')}"
        extra = ["--topic-prefix", prefix]
    else:
        topics, spec, extra = Topics(), str(tmp_path / "log"), []
    with open_log(spec, topics=topics.all()) as log:
        log.append_many(topics.events, [(e.uid.encode(), dump_event(e)) for _, e in read_events(cut)])
        assert Service(log, topics, batch_size=50).run(stop_when_idle=True).cycles_appended >= 1
    rc, out, err = _eta(capsys, "team/train-5", "--log", spec, "--json", *extra)
    assert rc == 0, err
    answer = json.loads(out)
    assert (answer["earliest_ms"], answer["most_likely_ms"], answer["latest_ms"]) == (5 * H, 5 * H, 5 * H)
    assert answer["ahead"] == ["team/train-4"]
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "kind: Pod\nmetadata: {name: probe, namespace: team, labels: {kai.scheduler/queue: team}}\n"
        "spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 2}}}]}\n"
    )
    capsys.readouterr()
    rc = main(["check", "-f", str(pod), "--log", spec, *extra])
    out = capsys.readouterr().out
    assert rc == 1
    assert "would NOT be scheduled now" in out
    assert "When (hourglass eta on the same state): at 06:00" in out  # after train-4 and train-5


def test_fork_leaves_the_original_untouched(tmp_path: Path) -> None:
    """The forward runs fold hypothetical events into StateBuilder.fork(); the log's state must not move."""
    from ingest import events as ev
    from scheduler.engine.state import StateBuilder

    cut = _run(tmp_path, ONE_QUEUE, "200m", "cut")
    b = StateBuilder()
    for offset, e in read_events(cut):
        b.apply(e, offset)
    before = b.snapshot()
    f = b.fork()
    f.apply(ev.PodFinished(at_ms=4 * H, name="train-3", namespace="team", phase="Succeeded"))
    f.apply(ev.PodDeleted(at_ms=4 * H, name="train-3", namespace="team"))
    f.apply(ev.PodBound(at_ms=4 * H, name="train-4", namespace="team", node="n-0", gpu_devices=[0, 1]))
    assert b.snapshot() == before
    assert f.snapshot() != before
    assert "team/train-3" not in f.pods and "team/train-3" in b.pods


@pytest.mark.parametrize(
    ("ms", "now", "text"),
    [
        (4 * H, 3 * H, "04:00"),
        (26 * H + 5 * MIN, 3 * H, "day 1 02:05"),
        (1_767_225_600_000 + 14 * H + 10 * MIN, 1_767_225_600_000, "14:10 UTC"),  # 2026-01-01
        (1_767_225_600_000 + 38 * H, 1_767_225_600_000, "2026-01-02 14:00 UTC"),
    ],
)
def test_times_read_as_the_log_clock(ms: int, now: int, text: str) -> None:
    from analytics.forecast.eta import format_time

    assert format_time(ms, now) == text


def test_step_coarsens_the_forward_cycles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With --step 420 the forward cycles run every 7 minutes: train-3 ends at 4h00, the next cycle at
    4h05 (a multiple of 420 s) binds train-4."""
    cut = _run(tmp_path, ONE_QUEUE, "200m", "cut")
    rc, out, err = _eta(capsys, "team/train-4", "--log", str(cut), "--json", "--step", "420")
    assert rc == 0, err
    assert json.loads(out)["most_likely_ms"] == 4 * H + 5 * MIN


def test_a_gated_pod_is_not_pending_yet(tmp_path: Path) -> None:
    from analytics.forecast.eta import Setting, Tracker, estimate
    from ingest import events as ev
    from scheduler.engine.session import SessionConfig

    cut = _run(tmp_path, ONE_QUEUE, "200m", "cut")
    tr = Tracker()
    for offset, e in read_events(cut):
        tr.apply(offset, e)
    at = 200 * MIN
    tr.apply(
        tr.builder.offset + 1,
        ev.PodGroupUpserted(at_ms=at, name="g", namespace="team", queue="team", created_at_ms=at),
    )
    tr.apply(
        tr.builder.offset + 1,
        ev.PodSubmitted(
            at_ms=at, name="g-0", namespace="team", pod_group="g", created_at_ms=at, scheduling_gates=["wait"]
        ),
    )
    setting = Setting(SessionConfig(), None, None, 60_000, 30_000)
    answer = estimate(tr, "team/g-0", at, setting)
    assert answer.state == "gated"
    assert "scheduling gates" in answer.text()
    # A pod whose pod group never arrived is invisible to the engine: a clear error, not "never".
    tr.apply(
        tr.builder.offset + 1,
        ev.PodSubmitted(at_ms=at, name="orphan", namespace="team", pod_group="nogroup", created_at_ms=at),
    )
    with pytest.raises(EtaError, match="pod group team/nogroup is not in the log"):
        estimate(tr, "team/orphan", at, setting)


def test_the_examples_in_docs_are_what_the_commands_print(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/eta.md shows the output of `eta` and `check` on examples/eta-one-queue.yaml at 80 columns: it
    must be exactly what they print, and fit."""
    monkeypatch.setenv("COLUMNS", "80")
    root = REPO_ROOT
    docs = (root / "docs" / "eta.md").read_text()

    def shown(command: str) -> str:
        start = docs.index(command)
        start = docs.index("\n", start) + 1
        return docs[start : docs.index("```", start)]

    run = tmp_path / "run"
    assert (
        main(
            [
                "simulate",
                "--config",
                str(root / "examples" / "eta-one-queue.yaml"),
                "--out",
                str(run),
                "--json",
            ]
        )
        == 0
    )
    rc, out, _ = _eta(capsys, "team/train-5", "--log", str(run))
    assert rc == 0
    assert out == shown("$ hourglass eta team/train-5 --log run/")
    capsys.readouterr()
    # The pod file the docs name is the one shipped in examples/.
    assert main(["check", "-f", str(root / "examples" / "probe.yaml"), "--log", str(run)]) == 1
    checked = capsys.readouterr().out
    assert checked == shown("$ hourglass check -f examples/probe.yaml --log run/")
    assert all(len(line) <= 80 for line in (out + checked).splitlines())


def test_time_based_fair_share_evolves_in_the_forward_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """examples/two-queue-oscillation.yaml (kValue 1): the queues take turns because usage moves. Forward
    runs that recompute usage every refresh_s from the allocation history (as `hourglass fairshare` does)
    foresee every turn: on one simulated day each of the 20 scored starts is exact."""
    root = REPO_ROOT
    run = tmp_path / "run"
    example = str(root / "examples" / "two-queue-oscillation.yaml")
    assert main(["simulate", "--config", example, "--set", "duration=1d", "--out", str(run), "--json"]) == 0
    rc, out, err = _eta(capsys, "--backtest", str(run), "--sample", "0")
    assert rc == 0, err
    assert out.splitlines()[-1] == "eta: 20 pods, coverage 100.0 % within p10-p90, median abs error 0 s"


def test_time_based_fair_share_on_a_service_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A service log does not say how usage was computed: with --fairshare-config (the file `hourglass
    fairshare` used) the forward runs recompute it, and the answer is the run directory's, which is what
    really happened (queue b's next turn at 8h06, a's at 7h06)."""
    from ingest.events import dump_event
    from ingest.filelog import FileLog
    from ingest.log import Topics
    from scheduler.config import load_engine_config
    from scheduler.service import Service

    root = REPO_ROOT
    example = str(root / "examples" / "two-queue-oscillation.yaml")
    run = tmp_path / "run"
    assert main(["simulate", "--config", example, "--set", "duration=400m", "--out", str(run), "--json"]) == 0
    manifest = json.loads((run / "manifest.json").read_text())
    engine = tmp_path / "engine.json"
    engine.write_text(json.dumps(manifest["engine_config"]))
    fairshare = tmp_path / "fairshare.yaml"
    fairshare.write_text(yaml.safe_dump(manifest["inputs"]["scenario_config"]["fairshare"]))
    topics = Topics()
    with FileLog(tmp_path / "log") as log:
        log.append_many(topics.events, [(e.uid.encode(), dump_event(e)) for _, e in read_events(run)])
        log.append_many(
            topics.usage, [(b"cluster", line) for line in (run / "usage.jsonl").read_bytes().splitlines()]
        )
        Service(log, topics, load_engine_config(engine)).run(stop_when_idle=True)
    expected = {"b/b-w1-4": 29_160_000, "a/a-w0-3": 25_560_000}
    for pod, start in expected.items():
        for where, extra in [
            (str(run), []),
            (str(tmp_path / "log"), ["--engine-config", str(engine), "--fairshare-config", str(fairshare)]),
        ]:
            rc, out, err = _eta(capsys, pod, "--log", where, "--json", *extra)
            assert rc == 0, err
            assert json.loads(out)["by_percentile"] == {"p10": start, "p50": start, "p90": start}, (
                pod,
                where,
            )
