"""v3 cycle records (the bytes a log holds): no field at its default, a message shared by several decisions
written once. They read back as the records they stand for, and logs written as v2 still load and replay."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from analytics.audit.store import query
from analytics.rerun.replay import replay
from analytics.rundir import CYCLES_FILE, read_cycles, read_records
from scheduler.engine.record.decisions import CycleRecord, Decision
from scheduler.engine.record.delta import DeltaEncoder, expand_records, render
from scheduler.engine.record.written import TASK, TEMPLATES
from tests.support.paths import FIXTURES

V2_RUN = FIXTURES / "v2-run"  # benchmarks/history-churn.yaml for 20 s, written by the v2 writer (aa5aea1)

_NOTE = "no nodes with enough resources were found: 10 node(s) didn't have enough resources: GPUs."


def _pending(job: str, message: str | None, task: str | None = None) -> Decision:
    details: dict[str, object] = {"pending_pods": 1, "requested": {"gpu": 2000, "cpu": 8000, "memory": 1}}
    if task is not None:
        details["task"] = task
    return Decision(
        kind="Unschedulable", job=job, queue=job.split("/")[0], pods=[f"{job}-0"], reason="PodSchedulingErrors",
        message=message, details=details,
    )  # fmt: skip


def _record(decisions: list[Decision], v: int = 2) -> CycleRecord:
    return CycleRecord(
        v=v, cycle_id="c1", events_offset=7, usage_snapshot_id=None, config_hash="h", logical_time_ms=1000,
        queues=[], decisions=decisions,
    )  # fmt: skip


def _decisions() -> list[Decision]:
    return [
        Decision(kind="Bind", job="a/j", queue="a", pod="a/j-0", node="n1", gpu_devices=[0, 1], action="allocate"),
        Decision(kind="Evict", job="b/k", queue="b", pod="b/k-0", node="n2", action="reclaim", reason="reclaim",
                 message="reclaimed for queue a"),
        Decision(kind="Evict", job="b/l", queue="b", pod="b/l-0", node="n2", action="reclaim", reason="reclaim",
                 message="reclaimed for queue a"),
        _pending("a/p1", f"Resources were not found for pod p1-0 due to: {_NOTE}", "p1-0"),
        _pending("a/p2", f"Resources were not found for pod p2-0 due to: {_NOTE}", "p2-0"),
        _pending("a/p3", f"pod p3-0 says {TASK} literally", "p3-0"),  # cannot be templated exactly
        _pending("a/p4", f"pod p4-0 says {TASK} literally", "p4-0"),
        _pending("a/p5", "a message of its own", "p5-0"),
        _pending("a/p6", None),
        _pending("x/p7", "The job was not reached in this cycle"),  # no task: the same words
        _pending("x/p8", "The job was not reached in this cycle").model_copy(update={"queue": None}),
    ]  # fmt: skip


def test_a_v3_record_reads_back_as_the_record_it_stands_for() -> None:
    v2 = _record(_decisions())
    v3 = v2.model_copy(update={"v": 3})
    raw = v3.dumps()
    back = CycleRecord.loads(raw)
    assert back == v3
    assert render(back) == v2 and render(back).dumps() == v2.dumps()
    assert len(raw) < len(v2.dumps()) * 0.7


def test_a_v3_record_writes_no_default_and_a_shared_message_once() -> None:
    data = json.loads(_record(_decisions(), v=3).dumps())
    assert data[TEMPLATES] == [
        "reclaimed for queue a",
        f"Resources were not found for pod {TASK} due to: {_NOTE}",
        "The job was not reached in this cycle",
    ]
    bind, evict, _, p1, p2, p3, p4, p5, p6, p7, p8 = data["decisions"]
    assert bind == {
        "action": "allocate", "gpu_devices": [0, 1], "job": "a/j", "kind": "Bind", "node": "n1", "pod": "a/j-0",
        "queue": "a",
    }  # fmt: skip
    assert (evict["message"], p1["message"], p2["message"], p7["message"], p8["message"]) == (0, 1, 1, 2, 2)
    assert (
        p3["message"] == f"pod p3-0 says {TASK} literally"
        and p4["message"] == f"pod p4-0 says {TASK} literally"
    )
    assert p5["message"] == "a message of its own" and "message" not in p6 and "queue" not in p8
    assert sorted(data) == [
        "config_hash", "cycle_id", "decisions", "events_offset", "kind", "logical_time_ms", TEMPLATES, "v",
    ]  # fmt: skip


def test_a_message_index_without_its_template_is_refused() -> None:
    data = json.loads(_record(_decisions(), v=3).dumps())
    data[TEMPLATES] = data[TEMPLATES][:1]
    with pytest.raises(ValidationError, match="refers to template 1; the record has 1"):
        CycleRecord.loads(json.dumps(data))


def test_v2_records_keep_their_bytes() -> None:
    rec = _record(_decisions())
    assert b'"v":2' in rec.dumps() and b'"pod":null' in rec.dumps()
    assert CycleRecord.loads(rec.dumps()).dumps() == rec.dumps()
    for line in (V2_RUN / CYCLES_FILE).read_bytes().splitlines():
        old = CycleRecord.loads(line)
        assert old.v == 2 and old.dumps() == line


def test_the_encoder_writes_v3_that_expands_to_the_v2_full_records() -> None:
    fulls = list(read_cycles(V2_RUN))
    assert {f.v for f in fulls} == {2}
    enc = DeltaEncoder(checkpoint_every=8)
    written = [enc.encode(f) for f in fulls]
    assert {w.v for w in written} == {3} and any(not w.is_full for w in written)
    raws = [w.dumps() for w in written]
    back = [CycleRecord.loads(r) for r in raws]
    assert back == written
    assert [r.dumps() for r in expand_records(back)] == [f.dumps() for f in fulls]
    # the same records as the v2 writer wrote them are larger: they repeat defaults and messages
    old = (V2_RUN / CYCLES_FILE).read_bytes().splitlines()
    assert [CycleRecord.loads(o).cycle_id for o in old] == [w.cycle_id for w in written]
    assert sum(map(len, raws)) < sum(map(len, old)) * 0.7


def test_a_v2_log_still_replays_and_loads(tmp_path: Path) -> None:
    run = tmp_path / "v2"
    shutil.copytree(V2_RUN, run)
    assert {r.v for r in read_records(run)} == {2}
    summary = replay(run)
    assert summary.cycles == 13 and summary.mismatches == 0
    _, rows = query(run, "SELECT count(*) FROM pending_intervals WHERE reason = 'PodSchedulingErrors'")
    assert rows[0][0] > 80
