"""The DuckDB audit store and ``hourglass sql``: loading a simulation run, idempotence, the log sink,
the ready queries of ``docs/sql.md`` and the read-only guard.

The run is the 5-node, 16-GPU slice of ``tests/support/trace_slices.py`` (first 300 tasks), where tasks wait,
get evicted and some never fit, so every ready query has something to find.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from analytics.audit.archive import archive, retain
from analytics.audit.gpuhours import held_gpu_ms
from analytics.audit.store import (
    AuditStore,
    StoreError,
    check_select,
    load_cycles,
    load_events,
    load_run_dir,
    query,
    sink_from_log,
)
from analytics.audit.views import history_dir
from analytics.cli import main
from analytics.rundir import CYCLES_FILE, EVENTS_FILE, DirLog, read_cycles
from analytics.simulation.simulate import simulate
from ingest.backends import open_log
from ingest.log import Topics
from ingest.tenants import DEFAULT_TENANTS, load_tenants
from ingest.trace import read_nodes
from tests.support.paths import REPO_ROOT
from tests.support.trace_slices import SLICE, first_tasks, small_nodes_csv

DOC_POD = "research/openb-pod-0042"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("store")
    out = base / "run"
    nodes = read_nodes(small_nodes_csv(base / "nodes.csv"))
    simulate(first_tasks(SLICE), nodes, load_tenants(DEFAULT_TENANTS), log=DirLog(out))
    return out


@pytest.fixture(scope="module")
def db(run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("db") / "audit.duckdb"
    with AuditStore(path) as store:
        load_run_dir(store, run)
        archive(store)  # whole days to Parquet: every query below reads both
    return path


def _expected(run: Path) -> dict[str, int]:
    cycles = list(read_cycles(run))
    events = sum(1 for _ in (run / EVENTS_FILE).open("rb"))
    # An Unschedulable decision is stored when it starts or changes, every other decision always.
    stored, before = 0, {}
    for c in cycles:
        now = {d.job: d for d in c.decisions if d.kind == "Unschedulable"}
        stored += sum(1 for d in c.decisions if d.kind != "Unschedulable" or before.get(d.job) != d)
        before = now
    return {
        "events": events,
        "cycles": len(cycles),
        "queue_cycles": sum(len(c.queues) for c in cycles),
        "decisions": stored,
    }


def _counts(path: Path) -> dict[str, int]:
    with AuditStore(path) as store:
        return {t: store.count(t) for t in ("events", "cycles", "queue_cycles", "decisions")}


def _ready_queries() -> dict[str, str]:
    text = (REPO_ROOT / "docs" / "sql.md").read_text(encoding="utf-8")
    out: dict[str, str] = {}
    for section in text.split("## Ready queries", 1)[1].split("\n### ")[1:]:
        title, _, body = section.partition("\n")
        m = re.search(r"```sql\n(.*?)```", body, re.S)
        assert m, f"no sql block under {title!r}"
        out[title.strip()] = m.group(1)
    return out


# --------------------------------------------------------------------------- loading


def test_row_counts_match_the_run(run: Path, db: Path) -> None:
    expected = _expected(run)
    assert expected["decisions"] > 1000 and expected["queue_cycles"] > 100
    assert _counts(db) == expected


def test_columns_carry_the_record(run: Path, db: Path) -> None:
    first = next(read_cycles(run))
    cols, rows = query(db, f"SELECT * FROM cycles WHERE cycle_id = '{first.cycle_id}'")
    row = dict(zip(cols, rows[0], strict=True))
    assert row["events_offset"] == first.events_offset
    assert row["config_hash"] == first.config_hash
    assert row["logical_time_ms"] == first.logical_time_ms
    assert row["n_decisions"] == len(first.decisions)
    q = first.queues[0]
    cols, rows = query(
        db, f"SELECT * FROM queue_cycles WHERE cycle_id = '{first.cycle_id}' AND queue = '{q.name}'"
    )
    qrow = dict(zip(cols, rows[0], strict=True))
    assert qrow["parent"] == q.parent
    assert qrow["gpu_fair_share"] == q.fair_share["gpu"]
    assert qrow["memory_requested"] == q.requested["memory"]
    assert qrow["gpu_deserved"] == q.deserved["gpu"]


def test_reload_is_idempotent(run: Path, db: Path) -> None:
    before = _counts(db)
    with AuditStore(db) as store:
        stats = load_run_dir(store, run)
    assert stats.cycles == 0 and stats.events == 0 and stats.decision_rows == 0
    assert stats.cycles_duplicate == before["cycles"]
    assert _counts(db) == before


def test_sink_from_log_resumes_and_drops_duplicates(run: Path, tmp_path: Path) -> None:
    topics = Topics.with_prefix("t")
    log = open_log(str(tmp_path / "log"))
    events = (run / EVENTS_FILE).read_bytes().splitlines()
    cycles = (run / CYCLES_FILE).read_bytes().splitlines()
    half = len(cycles) // 2
    log.append_many(topics.events, [(None, e) for e in events])
    log.append_many(topics.decisions, [(None, c) for c in cycles[:half]])
    path = tmp_path / "sink.duckdb"
    with AuditStore(path) as store:
        s1 = sink_from_log(store, log, topics, group="audit", batch_size=100)
    # Events are loaded up to the last recorded cycle: the scheduler has folded (or dead-lettered) them.
    upto = max(json.loads(c)["events_offset"] for c in cycles[:half])
    assert s1.events == upto + 1 < len(events) and s1.cycles == half
    assert log.committed("audit", topics.decisions) == half
    # A crash after the store committed but before the log commit: the batch is read again.
    log.commit("audit", topics.decisions, half - 30)
    log.append_many(topics.decisions, [(None, c) for c in cycles[half:]])
    log.append(topics.decisions, None, cycles[0])  # a duplicate record (e.g. a re-run cycle)
    with AuditStore(path) as store:
        s2 = sink_from_log(store, log, topics, group="audit", batch_size=100)
        s3 = sink_from_log(store, log, topics, group="audit")
    assert s2.cycles == len(cycles) - half and s2.cycles_duplicate == 31
    assert s2.events == len(events) - upto - 1
    assert s3.cycles == s3.events == 0
    assert log.committed("audit", topics.decisions) == len(cycles) + 1
    log.close()
    assert _counts(path) == _expected(run)


def test_malformed_input(tmp_path: Path) -> None:
    with AuditStore(tmp_path / "m.duckdb") as store:
        stats = load_events(
            store,
            [(0, b'{"type":"NodeRemoved","name":"n","at_ms":5}'), (1, b"{not json"), (2, b"{}")],
        )
        assert (stats.events, [o for o, _ in stats.events_refused]) == (1, [1, 2])
        assert store.count("events") == 1
        with pytest.raises(StoreError, match="malformed cycle record"):
            load_cycles(store, [b'{"config_hash":"x","cycle_id":"c1","v":1,"decisions":"oops"}'])
        with pytest.raises(StoreError, match="malformed cycle record"):
            load_cycles(store, [b"not json at all"])
        assert store.count("cycles") == store.count("decisions") == 0


def test_details_round_trip(run: Path, db: Path) -> None:
    rec = next(c for c in read_cycles(run) if any(d.details for d in c.decisions))
    i, d = next((i, d) for i, d in enumerate(rec.decisions) if d.details)
    _, rows = query(
        db, f"SELECT details, pods FROM decisions WHERE cycle_id = '{rec.cycle_id}' AND seq = {i}"
    )
    assert json.loads(rows[0][0]) == d.details
    assert rows[0][1] == d.pods


def test_run_dir_store_is_built_on_first_use(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sql", "--store", str(run), "--format", "csv", "SELECT count(*) AS n FROM decisions"]) == 0
    assert (run / "audit.duckdb").is_file()
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert int(rows[0]["n"]) == _expected(run)["decisions"]


# --------------------------------------------------------------------------- ready queries


def test_docs_have_the_ready_queries() -> None:
    assert set(_ready_queries()) == {
        "Why was pod X pending?",
        "Who evicted whom?",
        "GPU-hours per queue per day",
    }


def test_why_was_pod_pending(run: Path, db: Path) -> None:
    # The latest decision listing each pod, and the cycle where that same decision began for its job.
    latest: dict[str, tuple[str, str | None]] = {}
    began: dict[str, tuple[Any, str]] = {}
    for c in read_cycles(run):
        for d in c.decisions:
            if d.kind == "Unschedulable":
                if d.job not in began or began[d.job][0] != d:
                    began[d.job] = (d, c.cycle_id)
                for p in d.pods:
                    latest[p] = (began[d.job][1], d.reason)
        pending = {d.job for d in c.decisions if d.kind == "Unschedulable"}
        began = {j: v for j, v in began.items() if j in pending}
    assert latest
    sql = _ready_queries()["Why was pod X pending?"]
    assert DOC_POD in sql
    for pod in sorted(latest)[:: max(1, len(latest) // 5)]:
        cols, rows = query(db, sql.replace(DOC_POD, pod))
        assert len(rows) == 1
        row = dict(zip(cols, rows[0], strict=True))
        assert (row["cycle_id"], row["reason"]) == latest[pod]
        assert row["start_ms"] < row["end_ms"] or row["start_ms"] == row["end_ms"]
        assert row["message"]
        assert isinstance(json.loads(row["details"]), dict)
    assert query(db, sql.replace(DOC_POD, "no/such-pod"))[1] == []


def test_who_evicted_whom(run: Path, db: Path) -> None:
    evicts = [(c.logical_time_ms, d) for c in read_cycles(run) for d in c.decisions if d.kind == "Evict"]
    assert evicts, "the small cluster slice evicts"
    cols, rows = query(db, _ready_queries()["Who evicted whom?"])
    assert len(rows) == len(evicts)
    got = [dict(zip(cols, r, strict=True)) for r in rows]
    assert sorted((r["logical_time_ms"], r["evicted_pod"]) for r in got) == sorted(
        (t, d.pod) for t, d in evicts
    )
    for r in got:
        assert r["node"] and r["action"]
        if "workload" in (r["message"] or ""):
            assert r["evictor"] and r["evictor"] in r["message"]


def test_gpu_hours_per_queue_per_day(run: Path, db: Path) -> None:
    # The ready query over queue_days (daily_queue for archived days) against the Python definition of
    # held GPU time (analytics.audit.gpuhours), day by day.
    _, rows = query(db, _ready_queries()["GPU-hours per queue per day"])
    got = {(r[0], str(r[1])): float(r[2]) for r in rows}
    assert len({d for d, _ in got}) > 1 and sum(got.values()) > 0
    archived = query(db, "SELECT count(DISTINCT day) FROM daily_queue")[1][0][0]
    assert archived >= 1  # whole days were moved to Parquet and their figures kept
    for day in sorted({d for d, _ in got}):
        lo = (day - dt.date(1970, 1, 1)).days * 86_400_000
        want = held_gpu_ms(run, lo, lo + 86_400_000)
        for q, ms in want.items():
            assert got.get((day, q), 0.0) == pytest.approx(ms / 3.6e9, abs=1e-3), (day, q)


def _load_in_steps(path: Path, run: Path, steps: int, *, archive_each: bool) -> None:
    """Load *run* as a sink would over its life: a slice of cycles (and the events they read) at a time."""
    events = (run / EVENTS_FILE).read_bytes().splitlines(keepends=True)
    cycles = (run / CYCLES_FILE).read_bytes().splitlines()
    loaded = 0
    with AuditStore(path) as store:
        for k in range(1, steps + 1):
            part = cycles[(k - 1) * len(cycles) // steps : k * len(cycles) // steps]
            upto = len(events) if k == steps else max(json.loads(c)["events_offset"] for c in part) + 1
            load_events(store, ((i, events[i]) for i in range(loaded, upto)))
            loaded = max(loaded, upto)
            load_cycles(store, part)
            if archive_each:
                archive(store)


def test_archiving_day_by_day_keeps_every_daily_figure(run: Path, tmp_path: Path) -> None:
    # queue_days_live reads only the days not yet archived plus what archive carries over (pods alive at
    # the last archived midnight, nodes, pod groups, the last cycle): archiving after every slice of a
    # multi-day run must give the figures of a store that never archived, day by day.
    never, daily = tmp_path / "never.duckdb", tmp_path / "daily.duckdb"
    _load_in_steps(never, run, 12, archive_each=False)
    _load_in_steps(daily, run, 12, archive_each=True)
    sql = "SELECT * FROM queue_days ORDER BY day, queue"
    want, got = query(never, sql)[1], query(daily, sql)[1]
    assert len({r[0] for r in want}) > 2 and query(daily, "SELECT count(*) FROM daily_queue")[1][0][0] > 0
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):  # float sums may differ in the last bit (summation order)
        assert g[:2] == w[:2] and g[2:] == pytest.approx(w[2:], rel=1e-12), (g, w)


def test_retention_drops_old_days_and_keeps_their_daily_figures(run: Path, tmp_path: Path) -> None:
    # `hourglass sink --retain 2d`: partitions more than 2 days older than the newest day go, daily_queue
    # (and so queue_days) keeps every day, and the store's span starts at the oldest day kept.
    path = tmp_path / "kept.duckdb"
    _load_in_steps(path, run, 6, archive_each=True)
    sql = "SELECT * FROM queue_days ORDER BY day, queue"
    before, events_before = query(path, sql)[1], query(path, "SELECT count(*) FROM events")[1][0][0]
    newest = max(r[0] for r in before)
    with AuditStore(path) as store:
        assert retain(store, 2).partitions_dropped > 0
        with pytest.raises(ValueError, match="at least one day"):
            retain(store, 0)
    oldest_kept = newest - dt.timedelta(days=1)
    days = {date.fromisoformat(p.name.removeprefix("day=")) for p in history_dir(path).glob("*/day=*")}
    assert days and min(days) == oldest_kept
    assert query(path, "SELECT count(*) FROM events")[1][0][0] < events_before
    first_ms = query(path, "SELECT first_ms FROM run_span")[1][0][0]
    assert first_ms >= (oldest_kept - dt.date(1970, 1, 1)).days * 86_400_000
    after = query(path, sql)[1]
    assert [r[:2] for r in after] == [r[:2] for r in before]
    for g, w in zip(after, before, strict=True):
        assert g[2:] == pytest.approx(w[2:], rel=1e-12), (g, w)


# --------------------------------------------------------------------------- read-only guard


@pytest.mark.parametrize(
    ("sql", "needle"),
    [
        ("CREATE TABLE x (a INT)", "CREATE"),
        ("DROP TABLE decisions", "DROP"),
        ("INSERT INTO cycles (cycle_id) VALUES ('x')", "INSERT"),
        ("DELETE FROM events", "DELETE"),
        ("UPDATE decisions SET kind = 'Bind'", "UPDATE"),
        ("COPY decisions TO '/tmp/leak.csv'", "COPY"),
        ("ATTACH '/tmp/other.duckdb'", "ATTACH"),
        ("SET enable_external_access = true", "SET"),
        ("SELECT 1; SELECT 2", "exactly one"),
        ("SELEC 1", "cannot parse"),
    ],
)
def test_rejects_non_select(db: Path, sql: str, needle: str) -> None:
    with pytest.raises(StoreError, match=needle):
        query(db, sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_text('/etc/passwd')",
        "WITH x AS (SELECT * FROM read_csv_auto('/etc/passwd')) SELECT * FROM x",
    ],
)
def test_no_file_access_from_sql(db: Path, sql: str) -> None:
    assert check_select(sql)  # a SELECT: let through by the parser check, stopped by DuckDB
    with pytest.raises(StoreError, match="disabled by configuration"):
        query(db, sql)


def test_cli_errors_and_formats(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _counts(db)
    assert main(["sql", "--store", str(db), "COPY decisions TO '/tmp/leak.csv'"]) == 2
    assert "only read-only SELECT" in capsys.readouterr().err
    assert main(["sql", "--store", str(db), "SELECT * FROM read_csv('/etc/passwd')"]) == 2
    assert "file system operations are disabled" in capsys.readouterr().err
    assert main(["sql", "--store", str(db / "missing.duckdb"), "SELECT 1"]) == 2
    assert "no such store" in capsys.readouterr().err
    assert _counts(db) == before

    sql = "SELECT kind, count(*) AS n FROM decisions GROUP BY kind ORDER BY kind"
    assert main(["sql", "--store", str(db), "--format", "json", sql]) == 0
    data: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    assert sum(r["n"] for r in data) == before["decisions"]
    assert main(["sql", "--store", str(db), sql]) == 0
    out = capsys.readouterr().out
    assert "Unschedulable" in out and f"({len(data)} rows)" in out
