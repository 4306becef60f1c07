"""Records that carry the cluster's largest free GPUs once per record, not in every pending decision:
the same full records come back (replay), and the audit store and ``explain`` answer exactly as they did
on the records an older writer made (every pending decision restated whenever that number moved)."""

from __future__ import annotations

import shutil
from itertools import pairwise
from pathlib import Path

import pytest

from analytics.audit.store import query
from analytics.cli import main
from analytics.reports.explain import ExplainError, explain
from analytics.rerun.replay import replay
from analytics.rundir import CYCLES_FILE, DirLog, read_cycles, read_records
from analytics.simulation.simulate import simulate
from ingest.tenants import DEFAULT_TENANTS, load_tenants
from ingest.trace import DEFAULT_PODS, read_nodes, read_pods
from scheduler.engine.record.decisions import CycleRecord, Decision
from scheduler.engine.record.delta import (
    DeltaEncoder,
    compact,
    delta_of,
    expand_records,
    render,
    strip_pending,
)
from tests.support.paths import REPO_ROOT


def _old_delta(base: CycleRecord, full: CycleRecord) -> CycleRecord:
    """The delta the writer before this format made: every pending decision that differs in any field."""
    before = {d.job: d for d in base.decisions if d.kind == "Unschedulable"}
    changed = [d for d in full.decisions if d.kind != "Unschedulable" or before.get(d.job) != d]
    return render(delta_of(base, full)).model_copy(update={"decisions": changed})


def _old_records(fulls: list[CycleRecord], every: int) -> list[CycleRecord]:
    out = []
    for i, f in enumerate(fulls):
        out.append(f if i % every == 0 else _old_delta(fulls[i - 1], f))
    return out


def _write(run: Path, dest: Path, records: list[CycleRecord]) -> Path:
    shutil.copytree(run, dest)
    (dest / CYCLES_FILE).write_bytes(b"".join(r.dumps() + b"\n" for r in records))
    return dest


def _oscillation(base: Path) -> Path:
    out = base / "osc"
    args = ["simulate", "--config", str(REPO_ROOT / "examples" / "two-queue-oscillation.yaml")]
    assert main([*args, "--set", "duration=2d", "--out", str(out), "--checkpoint-every", "50"]) == 0
    return out


def _contended(base: Path) -> Path:
    """The shipped trace's first 800 tasks on the contended node list (11 nodes, 45 GPUs)."""
    tasks = read_pods(DEFAULT_PODS)
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i].creation_s or 0, i))
    nodes = read_nodes(REPO_ROOT / "examples" / "contended-nodes.csv")
    out = base / "contended"
    simulate([tasks[i] for i in order[:800]], nodes, load_tenants(DEFAULT_TENANTS), log=DirLog(out))
    return out


@pytest.fixture(scope="module", params=["oscillation", "contended"])
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the run as this writer records it, the same cycles as the older writer recorded them)."""
    base = tmp_path_factory.mktemp(request.param)
    run = _oscillation(base) if request.param == "oscillation" else _contended(base)
    fulls = list(read_cycles(run))
    return run, _write(run, base / "old", _old_records(fulls, 50))


def _free_values(run: Path) -> set[int]:
    return {r.largest_free_gpu_milli for r in read_records(run) if r.largest_free_gpu_milli is not None}


def test_records_expand_to_the_same_full_records_and_replay(runs: tuple[Path, Path]) -> None:
    new, old = runs
    assert [r.dumps() for r in read_cycles(new)] == [r.dumps() for r in expand_records(read_records(old))]
    assert replay(new).mismatches == 0


def test_the_contended_run_moves_the_largest_free_gpus(runs: tuple[Path, Path]) -> None:
    """The comparison below is only worth something if the number moved while jobs stayed pending."""
    new, old = runs
    if new.name == "contended":
        assert len(_free_values(new)) >= 3
        restated = sum(
            1 for r in read_records(old) if not r.is_full for d in r.decisions if d.kind == "Unschedulable"
        )
        listed = sum(
            1 for r in read_records(new) if not r.is_full for d in r.decisions if d.kind == "Unschedulable"
        )
        assert listed < restated
        assert (new / CYCLES_FILE).stat().st_size < (old / CYCLES_FILE).stat().st_size


_TABLES = {
    "pending_intervals": "SELECT * FROM pending_intervals ORDER BY ALL",
    "decisions": "SELECT * EXCLUDE (seq) FROM decisions ORDER BY ALL",
    "queue_cycles": "SELECT * FROM queue_cycles ORDER BY ALL",
    "cycles": "SELECT * EXCLUDE (kind, base, n_queues, n_decisions) FROM cycles ORDER BY ALL",
}


@pytest.mark.parametrize("table", sorted(_TABLES))
def test_the_store_holds_the_same_rows(runs: tuple[Path, Path], table: str) -> None:
    new, old = runs
    cols_new, rows_new = query(new, _TABLES[table])
    cols_old, rows_old = query(old, _TABLES[table])
    assert cols_new == cols_old
    assert rows_new == rows_old


def _answer(run: Path, pod: str, t: int | None) -> str:
    try:
        return explain(run, pod, t).text()
    except ExplainError as exc:
        return f"error: {exc}"


def test_explain_gives_the_same_answers(runs: tuple[Path, Path]) -> None:
    """``explain`` reads the tables compared above; a spread of pods and times (each answer opens the
    store, so not all of them) checks the answers themselves, the times where the number moved first."""
    new, old = runs
    _, pods = query(
        new, "SELECT DISTINCT unnest(pods) FROM decisions WHERE kind = 'Unschedulable' ORDER BY 1"
    )
    recs = list(read_records(new))
    moved = [
        b.logical_time_ms for a, b in pairwise(recs) if b.largest_free_gpu_milli != a.largest_free_gpu_milli
    ]
    times = sorted({r.logical_time_ms for r in recs})
    asked = 0
    for (pod,) in pods[:: max(1, len(pods) // 5)]:
        for t in [*moved[:4], *times[:: max(1, len(times) // 4)], None]:
            assert _answer(new, pod, t) == _answer(old, pod, t), (pod, t)
            asked += 1
    assert asked >= 20


def test_compact_keeps_a_record_it_cannot_render_back() -> None:
    note = " (the job needs 2 GPU(s) for its next pods; the most free whole GPUs on any node is 1)"
    d = Decision(
        kind="Unschedulable", job="a/j", queue="a", pods=["a/j-0"], reason="PodSchedulingErrors",
        message="no room" + note,
        details={"pending_pods": 1, "requested": {"gpu": 2000}, "largest_free_gpus_on_a_node": 1.0},
    )  # fmt: skip
    stripped = strip_pending(d)
    assert stripped is not None and stripped[1] == 1000 and stripped[0].message == "no room"
    rec = CycleRecord(
        cycle_id="c", events_offset=0, usage_snapshot_id=None, config_hash="h", logical_time_ms=0, queues=[],
        decisions=[d],
    )  # fmt: skip
    written = compact(rec)
    assert written.largest_free_gpu_milli == 1000 and render(written) == rec
    # two values in one cycle (not this engine's records): kept as they are
    other = d.model_copy(
        update={
            "job": "a/k",
            "message": "no room" + note.replace("is 1", "is 3"),
            "details": {**d.details, "largest_free_gpus_on_a_node": 3.0},
        }
    )
    odd = rec.model_copy(update={"decisions": [d, other]})
    assert compact(odd) is odd
    # a pending decision without the note that render would give one: kept as it is
    bare = d.model_copy(update={"message": "no room", "details": {"requested": {"gpu": 2000}}})
    plain = rec.model_copy(update={"decisions": [bare]})
    assert compact(plain) is plain
    mixed = rec.model_copy(update={"decisions": [d, bare.model_copy(update={"job": "a/z"})]})
    assert compact(mixed) is mixed


def test_the_encoder_writes_compact_records_that_read_back() -> None:
    note = " (the job needs 2 GPU(s) for its next pods; the most free whole GPUs on any node is {})"

    def rec(cid: str, free: int, jobs: list[str]) -> CycleRecord:
        ds = [
            Decision(
                kind="Unschedulable", job=j, queue="a", pods=[f"{j}-0"], reason="PodSchedulingErrors",
                message="no room" + note.format(free),
                details={"requested": {"gpu": 2000}, "largest_free_gpus_on_a_node": free / 1.0},
            )
            for j in jobs
        ]  # fmt: skip
        return CycleRecord(
            cycle_id=cid, events_offset=0, usage_snapshot_id=None, config_hash="h", logical_time_ms=0,
            queues=[], decisions=ds,
        )  # fmt: skip

    fulls = [rec("c0", 0, ["a/j", "a/k"]), rec("c1", 1, ["a/j", "a/k"]), rec("c2", 1, ["a/k", "a/m"])]
    enc = DeltaEncoder(checkpoint_every=10)
    written = [enc.encode(f) for f in fulls]
    assert [len(w.decisions) for w in written] == [2, 0, 1]  # the number moved: nobody restated
    assert [w.largest_free_gpu_milli for w in written] == [0, 1000, 1000]
    assert written[2].cleared == ["a/j"]
    assert list(expand_records(written)) == fulls


# ------------------------------------------------- v3 (the bytes a log holds now) against the v2 writer


@pytest.fixture(scope="module")
def as_v2(runs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same records as the v2 writer wrote them (every field, every message in full)."""
    new, _ = runs
    records = [r.model_copy(update={"v": 2}) for r in read_records(new)]
    return _write(new, tmp_path_factory.mktemp("v2") / new.name, records)


def test_v3_records_are_smaller_than_v2_and_expand_the_same(runs: tuple[Path, Path], as_v2: Path) -> None:
    new, _ = runs
    assert {r.v for r in read_records(new)} == {3} and {r.v for r in read_records(as_v2)} == {2}
    assert [r.dumps() for r in read_cycles(new)] == [r.dumps() for r in read_cycles(as_v2)]
    assert (new / CYCLES_FILE).stat().st_size < (as_v2 / CYCLES_FILE).stat().st_size


@pytest.mark.parametrize("table", sorted(_TABLES))
def test_the_store_holds_the_same_rows_as_from_v2(runs: tuple[Path, Path], as_v2: Path, table: str) -> None:
    new, _ = runs
    assert query(new, _TABLES[table]) == query(as_v2, _TABLES[table])


def test_explain_gives_the_same_answers_as_from_v2(runs: tuple[Path, Path], as_v2: Path) -> None:
    new, _ = runs
    _, pods = query(
        new, "SELECT DISTINCT unnest(pods) FROM decisions WHERE kind = 'Unschedulable' ORDER BY 1"
    )
    times = sorted({r.logical_time_ms for r in read_records(new)})
    asked = 0
    for (pod,) in pods[:: max(1, len(pods) // 4)]:
        for t in [*times[:: max(1, len(times) // 4)], None]:
            assert _answer(new, pod, t) == _answer(as_v2, pod, t), (pod, t)
            asked += 1
    assert asked >= 15
