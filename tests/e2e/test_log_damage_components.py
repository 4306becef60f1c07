"""A damaged scheduler log stops every component with one clear error, or each recovers the same true tail.

The log is a real one (`hourglass run` over a synthetic workload). Its events or decisions file is
truncated, flipped, zeroed, cut by a few bytes or given an inflated length at its head, middle and tail; then the scheduler
(`run`), the audit sink (`sink`) and `replay` open it. Either all three refuse with a one-line
error, or the damage was a torn tail that all three read past consistently — never a partial history
read as a whole one.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from analytics.audit.store import AuditStore, sink_from_log
from analytics.cli import main
from analytics.rerun.replay import ReplayError, replay
from ingest.events import dump_event
from ingest.filelog import FILE_HEADER, FileLog
from ingest.log import LogError, Topics
from scheduler.service import Service
from tests.support.damage import damage_commit
from tests.support.synthetic import SyntheticSpec, synthetic_events

TOPICS = Topics()


@pytest.fixture(scope="module")
def base_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("base") / "log"
    events = synthetic_events(SyntheticSpec(nodes=4, pending_pods=30, departments=1, queues_per_department=2))
    with FileLog(d) as log:
        log.append_many(TOPICS.events, [(e.uid.encode(), dump_event(e)) for e in events])
        stats = Service(log, TOPICS, batch_size=10).run(stop_when_idle=True)
    assert stats.cycles >= 4
    return d


def _starts(path: Path) -> list[int]:
    data, pos, out = path.read_bytes(), len(FILE_HEADER), []
    while pos < len(data):
        out.append(pos)
        pos += 8 + struct.unpack_from(">I", data, pos)[0]
    return out


def _cycle_ids(directory: Path) -> list[bytes | None]:
    with FileLog(directory, readonly=True) as log:
        return [r.key for r in log.scan(TOPICS.decisions)]


def _damage(path: Path, kind: str, where: str) -> int:
    """Damage one record of ``path``; return where that record starts."""
    starts = _starts(path)
    data = bytearray(path.read_bytes())
    i = {"head": 0, "middle": len(starts) // 2, "tail": len(starts) - 1}[where]
    start = starts[i]
    end = starts[i + 1] if i + 1 < len(starts) else len(data)
    if kind == "truncate":
        data = data[:4] if where == "head" else data[: (start + end) // 2]
    elif kind == "flip":
        data[end - 5] ^= 0x20
    elif kind == "inflate":
        struct.pack_into(">I", data, start, end - start + 4096)
    elif kind == "zero":  # the whole record, header included, as a lost write leaves it
        data[start:end] = bytes(end - start)
    elif kind == "delete":  # three bytes out of the record's payload
        del data[(start + end) // 2 : (start + end) // 2 + 3]
    path.write_bytes(bytes(data))
    return min(start, len(data))


Outcome = str  # "error" or "ok"


def _run(d: Path) -> Outcome:
    try:
        with FileLog(d, role="scheduler") as log:
            Service(log, TOPICS, batch_size=10).run(stop_when_idle=True)  # as the base log was made
    except LogError as e:
        assert "\n" not in str(e)
        return "error"
    return "ok"


def _sink(d: Path, store: Path) -> Outcome:
    try:
        with FileLog(d, readonly=True) as log, AuditStore(store) as st:
            sink_from_log(st, log, TOPICS)
    except LogError as e:
        assert "\n" not in str(e)
        return "error"
    return "ok"


def _replay(d: Path) -> Outcome:
    try:
        summary = replay(str(d))
    except ReplayError as e:
        assert "\n" not in str(e).strip()
        return "error"
    assert summary.mismatches == 0
    return "ok"


# (file, damage, where) -> outcome. Every damage to the events file loses an event a recorded cycle
# folded (a torn tail too, once trimmed): every component refuses. Truncating the decisions file, or
# damage to its last record alone, is a torn tail: readers read the cycles before it, and the
# scheduler re-runs the lost cycles, deriving the same cycle ids.
CASES: dict[tuple[str, str, str], Outcome] = {
    **{
        (TOPICS.events, kind, where): "error"
        for kind in ("truncate", "flip", "inflate", "zero", "delete")
        for where in ("head", "middle", "tail")
    },
    # Zeros to the end of the file are a power loss, and a last payload short of its length a torn write.
    **{(TOPICS.decisions, kind, "tail"): "ok" for kind in ("zero", "delete")},
    **{
        (TOPICS.decisions, kind, where): "error"
        for kind in ("zero", "delete")
        for where in ("head", "middle")
    },
    **{(TOPICS.decisions, "truncate", where): "ok" for where in ("head", "middle", "tail")},
    (TOPICS.decisions, "flip", "head"): "error",
    (TOPICS.decisions, "flip", "middle"): "error",
    (TOPICS.decisions, "flip", "tail"): "ok",
    **{(TOPICS.decisions, "inflate", where): "error" for where in ("head", "middle", "tail")},
}


@pytest.mark.parametrize(("topic", "kind", "where"), sorted(CASES))
def test_damaged_log(base_log: Path, tmp_path: Path, topic: str, kind: str, where: str) -> None:
    d = tmp_path / "log"
    shutil.copytree(base_log, d)
    path = d / f"{topic}.log"
    at = _damage(path, kind, where)
    damaged = path.read_bytes()
    want = CASES[(topic, kind, where)]
    assert _sink(d, tmp_path / "a.duckdb") == want
    assert _replay(d) == want
    assert _run(d) == want
    if want == "error":
        # Nothing appended; at most a torn tail trimmed (the writer does that on open), never more.
        kept = path.read_bytes()
        if len(damaged) < len(FILE_HEADER):  # a header cut short is rewritten: an empty topic
            assert kept == FILE_HEADER
        else:
            assert damaged.startswith(kept) and len(kept) >= at
        return
    assert _cycle_ids(d) == _cycle_ids(base_log)  # the scheduler re-ran exactly the cycles lost
    assert _sink(d, tmp_path / "b.duckdb") == "ok"
    assert _replay(d) == "ok"


def test_sink_refuses_a_topic_shorter_than_its_commit(base_log: Path, tmp_path: Path) -> None:
    d = tmp_path / "log"
    shutil.copytree(base_log, d)
    assert _sink(d, tmp_path / "s.duckdb") == "ok"
    _damage(d / f"{TOPICS.decisions}.log", "truncate", "middle")
    with (
        FileLog(d, readonly=True) as log,
        AuditStore(tmp_path / "s.duckdb") as st,
        pytest.raises(LogError, match=r"the sink committed offset \d+ but the topic ends at"),
    ):
        sink_from_log(st, log, TOPICS)


@pytest.mark.timeout(120)
def test_commands_stop_with_one_line(
    base_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run`, `sink` and `replay` on mid-file damage: exit 2, one line on stderr naming the damage; and
    `run --once` on an intact log with nothing new exits."""
    d = tmp_path / "log"
    shutil.copytree(base_log, d)
    assert main(["run", "--log", str(d), "--once"]) == 0
    capsys.readouterr()
    _damage(d / f"{TOPICS.events}.log", "flip", "middle")
    for args in (
        ["run", "--log", str(d), "--once"],
        ["sink", "--log", str(d), "--store", str(tmp_path / "s.duckdb")],
        ["replay", str(d), "--verify"],
    ):
        rc = main(args)
        err = capsys.readouterr().err
        assert rc == 2, (args, err)
        assert len(err.splitlines()) == 1 and "CRC mismatch" in err, (args, err)


def _store_counts(path: Path) -> tuple[int, ...]:
    with AuditStore(path) as st:
        return tuple(st.count(t) for t in ("events", "cycles", "decisions"))


@pytest.mark.parametrize("kind", ["truncate", "flip", "zero", "delete", "inflate", "remove"])
def test_damaged_commit_files(base_log: Path, tmp_path: Path, kind: str) -> None:
    """The sink's commit files (events, decisions) damaged between two loads: the sink stops with one line,
    or (a removed file: nothing committed) reloads to the same store, with no duplicate. The scheduler's
    own commit file is written, never read (it recovers from its records): damage to it changes nothing."""
    d = tmp_path / "log"
    shutil.copytree(base_log, d)
    store = tmp_path / "s.duckdb"
    assert _sink(d, store) == "ok"
    want = _store_counts(store)
    commits = sorted((d / "_commits").glob("*/*"))
    sink_files = [p for p in commits if p.parent.name == "hourglass-audit"]
    own = [p for p in commits if p not in sink_files]
    assert {p.name for p in sink_files} >= {TOPICS.events, TOPICS.decisions} and own
    for path in sink_files:
        saved = path.read_bytes()
        if kind == "remove":
            path.unlink()
        else:
            path.write_bytes(damage_commit(saved, kind))
        assert _sink(d, store) == ("ok" if kind == "remove" else "error"), path
        assert _store_counts(store) == want  # nothing loaded twice, nothing lost
        path.write_bytes(saved)
    for path in own:
        if kind == "remove":
            path.unlink()
        else:
            path.write_bytes(damage_commit(path.read_bytes(), kind))
    assert _run(d) == "ok"
    assert _cycle_ids(d) == _cycle_ids(base_log)
