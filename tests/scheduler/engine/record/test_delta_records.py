"""Delta cycle records (issue 13): what a delta holds, that expanding gives back the full record byte for
byte, that chains break loudly, and that logs written before delta records (v1) still load and replay."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analytics.audit.store import query
from analytics.cli import main
from analytics.rerun.replay import ReplayError, replay
from analytics.rundir import CYCLES_FILE, read_cycles, read_records
from scheduler.engine.record.decisions import CycleRecord, Decision, QueueRecord
from scheduler.engine.record.delta import (
    DeltaEncoder,
    DeltaReader,
    RecordChainError,
    delta_of,
    expand,
    expand_records,
    render,
)
from scheduler.kube.binder import MarkPending, Memory, PendingMark, plan
from tests.support.paths import FIXTURES, REPO_ROOT

V1_RUN = FIXTURES / "v1-run"  # written by the v1 writer (commit 23c5df9)
EXAMPLE = REPO_ROOT / "examples" / "two-queue-oscillation.yaml"


def _queue(name: str, allocated: int) -> QueueRecord:
    res = {"gpu": allocated, "cpu": 0, "memory": 0}
    zero = {"gpu": 0, "cpu": 0, "memory": 0}
    return QueueRecord(
        name=name, parent=None, priority=0, deserved={"gpu": None, "cpu": None, "memory": None},
        limit={"gpu": None, "cpu": None, "memory": None}, over_quota_weight={"gpu": "1", "cpu": "1", "memory": "1"},
        requested=res, allocated=res, allocated_non_preemptible=zero, fair_share=res, fair_share_classic=res,
        k_adjustment=zero, usage={"gpu": 0.0, "cpu": 0.0, "memory": 0.0},
    )  # fmt: skip


def _pending(job: str, reason: str = "PodSchedulingErrors", pods: int = 1) -> Decision:
    return Decision(
        kind="Unschedulable", job=job, queue=job.split("/")[0], pods=[f"{job}-{i}" for i in range(pods)],
        reason=reason, message=f"{reason} for {job}",
    )  # fmt: skip


def _bind(pod: str) -> Decision:
    return Decision(kind="Bind", job=pod, queue=pod.split("/")[0], pod=pod, node="n1", gpu_devices=[0])


def _full(cid: str, t: int, queues: list[QueueRecord], decisions: list[Decision]) -> CycleRecord:
    return CycleRecord(
        cycle_id=cid, events_offset=t, usage_snapshot_id=None, config_hash="h", logical_time_ms=t,
        queues=sorted(queues, key=lambda q: q.name),
        decisions=[d for d in decisions if d.kind != "Unschedulable"]
        + sorted((d for d in decisions if d.kind == "Unschedulable"), key=lambda d: d.job),
    )  # fmt: skip


# --------------------------------------------------------------------------- what a delta holds

MOVED = ["allocated", "fair_share", "fair_share_classic", "requested"]  # the fields _queue() derives from the allocation

CASES = [
    # (name, before, after, (new queues, changed queues with their changed fields) in the delta,
    #  decisions in the delta, cleared)
    (
        "an unchanged pending job and an unchanged queue are not repeated",
        ([_queue("a", 1000), _queue("b", 0)], [_pending("a/j1"), _pending("b/j2")]),
        ([_queue("a", 1000), _queue("b", 0)], [_pending("a/j1"), _pending("b/j2")]),
        ([], []),
        [],
        [],
    ),
    (
        "a new reason is repeated, a bound job is cleared, binds are always there",
        ([_queue("a", 1000), _queue("b", 0)], [_pending("a/j1"), _pending("b/j2")]),
        ([_queue("a", 1000), _queue("b", 1000)], [_bind("b/j2-0"), _pending("a/j1", "NotAttempted")]),
        ([], [("b", MOVED)]),
        [("Bind", "b/j2-0"), ("Unschedulable", "a/j1")],
        ["b/j2"],
    ),
    (
        "a job whose pending pods changed is repeated with its new pods",
        ([_queue("a", 0)], [_pending("a/j1", pods=2)]),
        ([_queue("a", 1000)], [_bind("a/j1-0"), _pending("a/j1", pods=1)]),
        ([], [("a", MOVED)]),
        [("Bind", "a/j1-0"), ("Unschedulable", "a/j1")],
        [],
    ),
    (
        "a new queue is carried whole, a queue whose priority alone changed carries only its priority",
        ([_queue("a", 0)], []),
        ([_queue("a", 0).model_copy(update={"priority": 5}), _queue("new", 0)], []),
        (["new"], [("a", ["priority"])]),
        [],
        [],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_delta_holds_what_changed(case: tuple) -> None:  # type: ignore[type-arg]
    _, (q0, d0), (q1, d1), want_queues, want_decisions, want_cleared = case
    base, full = _full("c0", 0, q0, d0), _full("c1", 1, q1, d1)
    delta = delta_of(base, full)
    assert (delta.kind, delta.base) == ("delta", "c0")
    assert ([q.name for q in delta.queues], [(c["name"], sorted(set(c) - {"name"})) for c in delta.queue_changes]) == (
        want_queues
    )
    assert [(d.kind, d.pod or d.job) for d in delta.decisions] == want_decisions
    assert delta.cleared == want_cleared
    assert expand(base, delta).dumps() == full.dumps()
    assert CycleRecord.loads(delta.dumps()) == delta


def test_a_removed_queue_is_named_and_expands_away() -> None:
    base = _full("c0", 0, [_queue("a", 0), _queue("old", 0)], [])
    full = _full("c1", 1, [_queue("a", 0)], [])
    delta = delta_of(base, full)
    assert delta.queues_removed == ["old"] and delta.queues == []
    assert expand(base, delta).dumps() == full.dumps()


def test_the_encoder_checkpoints_first_every_k_and_after_reset() -> None:
    enc = DeltaEncoder(checkpoint_every=3)
    fulls = [_full(f"c{i}", i, [_queue("a", i)], [_pending("a/j")]) for i in range(7)]
    kinds = [enc.encode(f).kind for f in fulls[:5]]
    enc.reset()
    kinds += [enc.encode(f).kind for f in fulls[5:]]
    assert kinds == ["full", "delta", "delta", "full", "delta", "full", "delta"]


def test_a_broken_chain_is_an_error_or_skipped_to_the_next_checkpoint() -> None:
    enc = DeltaEncoder(checkpoint_every=3)
    fulls = [_full(f"c{i}", i, [_queue("a", i)], [_pending("a/j")]) for i in range(6)]
    written = [enc.encode(f) for f in fulls]  # full, delta, delta, full, delta, delta
    with pytest.raises(RecordChainError, match="c2 builds on c1"):
        list(expand_records([written[0], written[2]]))
    reader = DeltaReader(strict=False)
    got = [reader.feed(r) for r in written[1:]]  # begins mid-chain
    assert [g.cycle_id if g else None for g in got] == [None, None, "c3", "c4", "c5"]
    assert reader.orphans == 2
    assert [g.dumps() for g in got if g] == [f.dumps() for f in fulls[3:]]
    # a record written twice (a crash between the append and the bookkeeping) is read once
    assert [r.cycle_id for r in expand_records([written[0], written[0], written[1]])] == ["c0", "c1"]


def test_record_invariants_are_checked() -> None:
    with pytest.raises(ValueError, match="needs base"):
        CycleRecord.model_validate({**_full("c", 0, [], []).model_dump(), "kind": "delta"})
    with pytest.raises(ValueError, match="v1 cycle record is always full"):
        CycleRecord.model_validate({**_full("c", 0, [], []).model_dump(), "v": 1, "cleared": ["x"]})


# --------------------------------------------------------------------------- on a simulated run


def _run(out: Path, k: int) -> Path:
    args = ["simulate", "--config", str(EXAMPLE), "--set", "duration=2d", "--out", str(out)]
    assert main([*args, "--checkpoint-every", str(k)]) == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("delta")
    return _run(base / "full", 1), _run(base / "k7", 7)


def test_expanding_a_delta_run_gives_the_full_records_byte_for_byte(runs: tuple[Path, Path]) -> None:
    full, k7 = runs
    written = list(read_records(k7))
    assert [r.kind for r in written[:8]] == ["full"] + ["delta"] * 6 + ["full"]
    assert all(r.kind == "full" for r in read_records(full))
    # checkpoints are written compact (the largest free GPUs once per record) and rendered when read
    assert [r.dumps() for r in read_cycles(k7)] == [render(r).dumps() for r in read_records(full)]
    assert (k7 / CYCLES_FILE).stat().st_size < 0.8 * (full / CYCLES_FILE).stat().st_size


def test_replay_verifies_a_delta_run_and_starts_from_any_cycle(runs: tuple[Path, Path]) -> None:
    _, k7 = runs
    written = list(read_records(k7))
    assert replay(k7).mismatches == 0
    mid = written[10]
    assert mid.kind == "delta"  # rebuilt from the checkpoint at #7, re-run from #10
    summary = replay(k7, from_cycle=mid.cycle_id[:12])
    assert (summary.cycles, summary.mismatches) == (len(written) - 10, 0)
    assert replay(k7, cycle=mid.cycle_id).cycles == 1
    with pytest.raises(ReplayError, match="no recorded cycle"):
        replay(k7, from_cycle="zzzz")


def test_replay_names_a_delta_without_a_checkpoint(runs: tuple[Path, Path], tmp_path: Path) -> None:
    _, k7 = runs
    run = tmp_path / "cut"
    shutil.copytree(k7, run)
    lines = (run / CYCLES_FILE).read_bytes().splitlines()
    (run / CYCLES_FILE).write_bytes(b"\n".join(lines[1:]) + b"\n")  # the first checkpoint is lost
    with pytest.raises(ReplayError, match="no checkpoint"):
        replay(run)


# --------------------------------------------------------------------------- logs written before deltas


def test_a_v1_record_keeps_its_bytes() -> None:
    for line in (V1_RUN / CYCLES_FILE).read_bytes().splitlines():
        rec = CycleRecord.loads(line)
        assert rec.v == 1 and rec.kind == "full"
        assert rec.dumps() == line


def test_a_v1_run_still_replays_reports_and_answers_sql(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "v1"
    shutil.copytree(V1_RUN, run)
    summary = replay(run)
    assert summary.cycles == len((run / CYCLES_FILE).read_bytes().splitlines()) and summary.mismatches == 0
    _, rows = query(
        run, "SELECT queue, count(*) FROM decisions WHERE kind = 'Bind' GROUP BY queue ORDER BY 1"
    )
    assert [r[0] for r in rows] == ["a", "b"]
    assert main(["report", "--store", str(run), "--format", "json"]) == 0
    assert '"queues"' in capsys.readouterr().out


# --------------------------------------------------------------------------- the binder on deltas


def test_the_binder_keeps_unlisted_pending_pods_and_their_events() -> None:
    base = _full("c0", 0, [_queue("a", 0)], [_pending("a/j1"), _pending("a/j2")])
    p0 = plan(base, Memory(), now=0.0, event_interval_s=60.0)
    assert sorted(p0.memory.pending) == ["a/j1-0", "a/j2-0"]
    # nothing changed: the delta lists no pending job, both pods stay remembered, no call is made
    same = delta_of(base, _full("c1", 1, [_queue("a", 0)], [_pending("a/j1"), _pending("a/j2")]))
    p1 = plan(same, p0.memory, now=10.0, event_interval_s=60.0)
    assert sorted(p1.memory.pending) == ["a/j1-0", "a/j2-0"] and not p1.actions
    # a minute on, each still-pending pod gets its periodic Warning Event (no condition rewrite)
    p2 = plan(same.model_copy(update={"cycle_id": "c2"}), p1.memory, now=70.0, event_interval_s=60.0)
    assert sorted((a.name, a.condition, a.event) for a in p2.actions if isinstance(a, MarkPending)) == [
        ("j1-0", False, True),
        ("j2-0", False, True),
    ]
    # j2 is bound: cleared from pending, its pod forgotten
    bound = delta_of(base, _full("c3", 3, [_queue("a", 1000)], [_bind("a/j2-0"), _pending("a/j1")]))
    p3 = plan(bound, p2.memory, now=80.0, event_interval_s=60.0)
    assert list(p3.memory.pending) == ["a/j1-0"]
    assert p3.memory.pending["a/j1-0"] == PendingMark(
        "PodSchedulingErrors", "PodSchedulingErrors for a/j1", 70.0, "a/j1"
    )
