"""The audit store: events and cycle records in a DuckDB file, for SQL over what the scheduler decided.

Tables (schema and ready queries in ``docs/sql.md``):

* ``events``: one row per event (``"offset"``, ``type``, ``uid``, ``at_ms``, ``raw`` JSON);
* ``cycles``: one row per cycle record (its inputs: events offset, usage snapshot id, config hash, time);
* ``queue_cycles``: one row per queue per cycle (the fair-share division, per resource);
* ``decisions``: one row per decision (Bind, Evict, Pipeline, Unschedulable).

Loading is columnar and set-based, never row by row: each batch of records becomes one polars frame (the
records' ids and raw JSON), handed to DuckDB through the Arrow C stream interface; DuckDB parses it with
its JSON reader (``from_json`` with the record's structure) and fills each table with one
``INSERT … SELECT`` (``unnest`` of the queues and decisions lists), in one transaction per batch.
Duplicates are dropped: a cycle whose ``cycle_id`` is already stored is skipped (with its queue and decision
rows), and so is an event whose offset is already stored, so loading the same input twice, or resuming
after a crash between the store's commit and the log commit, is idempotent.

Sources: a run directory written by ``hourglass simulate --out`` (:func:`load_run_dir`) or a live log
(:func:`sink_from_log`, resuming from the consumer group's committed offsets and committing after each
batch). Malformed events (not JSON, or missing ``type`` / ``at_ms``) are skipped and counted: the scheduler
service routes them to the dead-letter topic. A malformed cycle record is an error (:class:`StoreError`).
"""

from __future__ import annotations

import csv
import json
import logging
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import duckdb
import polars as pl

from analytics.audit.history import Intervals
from analytics.audit.views import TABLE_VIEWS, create_table_views, create_views, history_dir
from analytics.rundir import CYCLES_FILE, EVENTS_FILE, USAGE_FILE
from fairshare.record import UsageRecordError, parse_usage_record
from ingest.events import parse_event
from ingest.log import DEFAULT_TOPICS, Log, LogError, Topics
from scheduler.engine.record.decisions import CycleRecord

__all__ = [
    "DEFAULT_GROUP",
    "RUN_DIR_STORE",
    "AuditStore",
    "LoadStats",
    "QueryLimits",
    "QueryResult",
    "StoreError",
    "bind_history",
    "check_select",
    "connect_readonly",
    "load_cycles",
    "load_events",
    "load_run_dir",
    "open_readonly",
    "query",
    "render",
    "resolve_store",
    "run_query",
    "sink_from_log",
]

log = logging.getLogger(__name__)

DEFAULT_GROUP: Final = "hourglass-audit"
RUN_DIR_STORE: Final = "audit.duckdb"
RESOURCES: Final = ("gpu", "cpu", "memory")
_QUEUE_FIELDS: Final = ("deserved", "fair_share", "fair_share_classic", "allocated", "requested", "limit")

# 2: interval tables and Parquet history; 3: events_carry / cycles_carry / archived_span. Another version
# is rebuilt.
STORE_VERSION: Final = "3"

_QUEUE_COLS: Final = (
    "queue VARCHAR, parent VARCHAR, priority INTEGER, "
    + ", ".join(f"{r}_{f} BIGINT" for f in _QUEUE_FIELDS for r in RESOURCES)
    + ", "
    + ", ".join(f"{r}_usage DOUBLE" for r in RESOURCES)
)
_PENDING_COLS: Final = (
    "job VARCHAR, queue VARCHAR, pods VARCHAR[], reason VARCHAR, message VARCHAR, details JSON,"
    " start_cycle VARCHAR, start_ms BIGINT, start_seq BIGINT, end_ms BIGINT, end_seq BIGINT"
)
_SPAN_COLS: Final = "start_cycle VARCHAR, start_ms BIGINT, start_seq BIGINT, end_ms BIGINT, end_seq BIGINT"

# recent_* tables hold the days not yet moved to Parquet (analytics/audit/archive.py); the public names
# (events, cycles, decisions, ...) are views over recent rows and the Parquet history together.
SCHEMA: Final = f"""
CREATE TABLE IF NOT EXISTS store_meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS recent_events (
    "offset" BIGINT NOT NULL,
    type VARCHAR,
    uid VARCHAR,
    at_ms BIGINT,
    raw JSON
);
-- The archived events the not-yet-archived days still need (pods alive at the last archived midnight,
-- pod groups, nodes: analytics/audit/archive.py), so the live views never read the Parquet history.
CREATE TABLE IF NOT EXISTS events_carry (
    "offset" BIGINT NOT NULL,
    type VARCHAR,
    uid VARCHAR,
    at_ms BIGINT,
    raw JSON
);
CREATE TABLE IF NOT EXISTS recent_cycles (
    cycle_id VARCHAR NOT NULL,
    seq BIGINT,
    kind VARCHAR,
    base VARCHAR,
    events_offset BIGINT,
    usage_snapshot_id VARCHAR,
    config_hash VARCHAR,
    logical_time_ms BIGINT,
    usage_available BOOLEAN,
    n_queues INTEGER,
    n_decisions INTEGER,
    top_gpu_fair_share BIGINT,
    top_gpu_allocated BIGINT,
    top_gpu_requested BIGINT
);
-- The last archived cycle: its division holds from its time into the first day not archived.
CREATE TABLE IF NOT EXISTS cycles_carry AS SELECT * FROM recent_cycles WITH NO DATA;
CREATE TABLE IF NOT EXISTS recent_decisions (
    cycle_id VARCHAR NOT NULL,
    logical_time_ms BIGINT,
    seq INTEGER,
    kind VARCHAR,
    job VARCHAR,
    queue VARCHAR,
    pod VARCHAR,
    pods VARCHAR[],
    node VARCHAR,
    gpu_devices INTEGER[],
    gpu_milli_per_device INTEGER,
    action VARCHAR,
    reason VARCHAR,
    message VARCHAR,
    details JSON,
    record_seq BIGINT
);
CREATE TABLE IF NOT EXISTS recent_pending ({_PENDING_COLS});
CREATE TABLE IF NOT EXISTS pending_open ({_PENDING_COLS}, decision VARCHAR);
CREATE TABLE IF NOT EXISTS recent_queue_spans ({_QUEUE_COLS}, {_SPAN_COLS});
CREATE TABLE IF NOT EXISTS queue_open ({_QUEUE_COLS}, {_SPAN_COLS}, raw VARCHAR);
CREATE TABLE IF NOT EXISTS recent_usage_snapshots (
    snapshot_id VARCHAR NOT NULL,
    "offset" BIGINT,
    as_of_ms BIGINT,
    available BOOLEAN,
    reason VARCHAR,
    raw JSON
);
CREATE TABLE IF NOT EXISTS recent_usage (
    snapshot_id VARCHAR NOT NULL,
    as_of_ms BIGINT,
    queue VARCHAR,
    resource VARCHAR,
    usage DOUBLE
);
-- The time span of the rows archived to Parquet (first / last event or cycle time), kept by
-- analytics/audit/archive.py so run_span never scans the history.
CREATE TABLE IF NOT EXISTS archived_span (first_ms BIGINT, last_ms BIGINT);
CREATE TABLE IF NOT EXISTS daily_queue (
    day DATE NOT NULL,
    queue VARCHAR NOT NULL,
    gpu_held_ms HUGEINT,
    gpu_allocated_ms HUGEINT,
    gpu_fair_share_ms DOUBLE,
    pending_job_ms HUGEINT,
    binds BIGINT,
    evictions BIGINT
);
"""


_POLARS: Final[dict[str, Any]] = {
    "VARCHAR": pl.Utf8,
    "BIGINT": pl.Int64,
    "INTEGER": pl.Int32,
    "DOUBLE": pl.Float64,
    "BOOLEAN": pl.Boolean,
    "JSON": pl.Utf8,
    "VARCHAR[]": pl.List(pl.Utf8),
    "INTEGER[]": pl.List(pl.Int32),
}
_CYCLE_ID = re.compile(rb'"cycle_id":"([^"]*)"')


class StoreError(RuntimeError):
    """Bad input for the store (a malformed cycle record) or a rejected / failed query."""


class _ArrowStream:
    """Exposes only the Arrow PyCapsule stream of a polars frame, so DuckDB scans it without pyarrow."""

    def __init__(self, df: pl.DataFrame) -> None:
        self._df = df

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self._df.__arrow_c_stream__(requested_schema)


@dataclass
class LoadStats:
    """What one load did."""

    events: int = 0
    events_skipped_malformed: int = 0
    # Events the scheduler did not fold (they do not parse as it parses them, or it dead-lettered them):
    # skipped, with (offset, reason) here and in the log, never loaded as if they had happened.
    events_refused: list[tuple[int, str]] = field(default_factory=list)
    events_duplicate: int = 0
    cycles: int = 0
    cycles_duplicate: int = 0
    cycles_orphaned: int = 0  # delta records whose base was never loaded (skipped to the next checkpoint)
    queue_rows: int = 0  # closed queue spans written
    pending_rows: int = 0  # closed pending intervals written
    decision_rows: int = 0
    usage_snapshots: int = 0
    usage_skipped: int = 0  # malformed or already stored
    batches: int = 0

    def add(self, other: LoadStats) -> None:
        for k in vars(self):
            setattr(self, k, getattr(self, k) + getattr(other, k))


class AuditStore:
    """A read-write DuckDB audit store (created with its schema if missing). Use as a context manager.

    Its Parquet history (days moved out of DuckDB, :mod:`analytics.audit.archive`) lives in :attr:`history`,
    the directory next to the DuckDB file named after it (``audit.duckdb`` → ``audit.history/``).
    """

    def __init__(self, path: Path | str = ":memory:") -> None:
        self.path = str(path)
        self.history: Path | None = None if self.path == ":memory:" else history_dir(self.path)
        self.con = duckdb.connect(self.path)
        self._schemas: dict[str, dict[str, Any]] = {}
        self._check_version()
        self.con.execute(SCHEMA)
        self.con.execute("INSERT OR REPLACE INTO store_meta VALUES ('version', ?)", [STORE_VERSION])
        self.refresh_views()
        self.intervals = self._resume()

    def _check_version(self) -> None:
        have = {r[0] for r in self.con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        if not have:
            return
        version = None
        if "store_meta" in have:
            rows = self.con.execute("SELECT value FROM store_meta WHERE key = 'version'").fetchall()
            version = rows[0][0] if rows else None
        if version != STORE_VERSION:
            raise StoreError(
                f"{self.path}: an audit store of version {version or 1}, this is version {STORE_VERSION};"
                " rebuild it from the log (`hourglass sink` into a new file) — a run directory's store is"
                " rebuilt automatically"
            )

    def refresh_views(self) -> None:
        """(Re)create the public views over recent rows and the Parquet history (after an archive)."""
        create_table_views(self.con, self.history)
        create_views(self.con)  # the report's views (analytics/audit/views.py, docs/report.md)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> AuditStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _scalar(self, sql: str) -> int:
        rows = self.con.execute(sql).fetchall()
        return int(rows[0][0] or 0)

    def count(self, table: str) -> int:
        if table not in (
            "events", "cycles", "decisions", "usage_snapshots", "usage", "pending_intervals", "queue_spans",
            "queue_cycles",
        ):  # fmt: skip
            raise StoreError(f"unknown table {table!r}")
        return self._scalar(f"SELECT count(*) FROM {table}")

    def cycle_ids(self) -> set[str]:
        return {r[0] for r in self.con.execute("SELECT cycle_id FROM cycles").fetchall()}

    def max_event_offset(self) -> int:
        return self._scalar('SELECT coalesce(max("offset"), -1) FROM events')

    # -- the interval state between loads -------------------------------------------------------------

    def _meta(self, key: str) -> str | None:
        rows = self.con.execute("SELECT value FROM store_meta WHERE key = ?", [key]).fetchall()
        return rows[0][0] if rows else None

    def _resume(self) -> Intervals:
        def rows(table: str) -> list[dict[str, Any]]:
            cur = self.con.execute(f"SELECT * FROM {table}")
            cols = [d[0] for d in cur.description or []]
            return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]

        last_ms = self._meta("last_ms")
        return Intervals.resume(
            self._meta("last_cycle"),
            int(last_ms) if last_ms is not None else None,
            int(self._meta("seq") or -1),
            rows("pending_open"),
            rows("queue_open"),
        )

    def _insert(self, table: str, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        schema = self._schema(table)
        # Column-wise: much cheaper than a frame built from row dicts on the large batches a long
        # clock jump cuts into per-day spans.
        df = pl.DataFrame({c: [r.get(c) for r in rows] for c in schema}, schema=schema)
        self.con.register("_rows", _ArrowStream(df))
        try:
            self.con.execute(f"INSERT INTO {table} SELECT * FROM _rows")
        finally:
            self.con.unregister("_rows")

    def _schema(self, table: str) -> dict[str, Any]:
        """The table's columns in order, as polars types (read once per table: the schema is fixed)."""
        if table not in self._schemas:
            cols = self.con.execute(
                "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? ORDER BY column_index",
                [table],
            ).fetchall()
            self._schemas[table] = {c: _POLARS.get(t, pl.Utf8) for c, t in cols}
        return self._schemas[table]

    def write_intervals(self, stats: LoadStats) -> None:
        """Write what the interval state produced, and the state itself, in one transaction."""
        cycles, decisions, pending, queues = self.intervals.drain()
        con = self.con
        con.execute("BEGIN TRANSACTION")
        try:
            self._insert("recent_cycles", cycles)
            self._insert("recent_decisions", decisions)
            self._insert("recent_pending", pending)
            self._insert("recent_queue_spans", queues)
            con.execute("DELETE FROM pending_open")
            self._insert("pending_open", list(self.intervals.open_pending_rows()))
            con.execute("DELETE FROM queue_open")
            self._insert("queue_open", list(self.intervals.open_queue_rows()))
            st = self.intervals
            for key, value in (("last_cycle", st.last_cycle), ("last_ms", st.last_ms), ("seq", st.seq)):
                if value is not None:
                    con.execute("INSERT OR REPLACE INTO store_meta VALUES (?, ?)", [key, str(value)])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        stats.cycles += len(cycles)
        stats.decision_rows += len(decisions)
        stats.queue_rows += len(queues)
        stats.pending_rows += len(pending)

    def _write_events(self, offsets: list[int], raws: list[str], stats: LoadStats) -> None:
        if not offsets:
            return
        df = pl.DataFrame({"offset": offsets, "raw": raws}, schema={"offset": pl.Int64, "raw": pl.Utf8})
        lo, hi = min(offsets), max(offsets)
        con = self.con
        con.register("_batch_events", _ArrowStream(df))
        try:
            con.execute(
                'CREATE OR REPLACE TEMP TABLE _ev AS SELECT b."offset", b.raw,'
                " CASE WHEN json_valid(b.raw) THEN json_extract_string(b.raw, '$.type') END AS type,"
                " CASE WHEN json_valid(b.raw) THEN json_extract_string(b.raw, '$.uid') END AS uid,"
                " CASE WHEN json_valid(b.raw) THEN TRY_CAST(json_extract(b.raw, '$.at_ms') AS BIGINT) END"
                " AS at_ms FROM _batch_events b"
            )
            bad = self._scalar("SELECT count(*) FROM _ev WHERE type IS NULL OR at_ms IS NULL")
            before = self.count("events")
            con.execute(
                'INSERT INTO recent_events SELECT "offset", type, uid, at_ms, CAST(raw AS JSON) FROM _ev'
                ' WHERE type IS NOT NULL AND at_ms IS NOT NULL AND "offset" NOT IN'
                f' (SELECT "offset" FROM events WHERE "offset" BETWEEN {lo} AND {hi})'
            )
            added = self.count("events") - before
            con.execute("DROP TABLE _ev")
        finally:
            con.unregister("_batch_events")
        stats.events += added
        stats.events_skipped_malformed += bad
        stats.events_duplicate += len(offsets) - bad - added


# --------------------------------------------------------------------------- loaders


def _record_id(raw: bytes) -> str:
    m = _CYCLE_ID.search(raw)  # canonical JSON: the record's own key comes before any nested one
    if m is not None:
        return m.group(1).decode()
    try:
        cid = json.loads(raw)["cycle_id"]
    except (ValueError, KeyError, TypeError) as e:
        raise StoreError(f"malformed cycle record (no cycle_id): {e}") from e
    if not isinstance(cid, str):
        raise StoreError(f"malformed cycle record: cycle_id {cid!r} is not a string")
    return cid


def load_cycles(store: AuditStore, raws: Iterable[bytes], batch_size: int = 500) -> LoadStats:
    """Load canonical cycle-record JSON lines (``CycleRecord.dumps()``: v1, checkpoints and deltas).

    Records become interval rows (:mod:`analytics.audit.history`), written every ``batch_size`` records with
    the interval state, so a later load continues where this one stopped. A delta whose base was never
    loaded is skipped (``cycles_orphaned``) until the next checkpoint. Records whose ``cycle_id`` is
    already stored (or earlier in the input) are dropped.
    """
    stats = LoadStats()
    known = store.cycle_ids()
    st = store.intervals
    pending = 0
    for raw in raws:
        cid = _record_id(raw)
        if cid in known:
            stats.cycles_duplicate += 1
            continue
        try:
            record = CycleRecord.loads(raw)
        except ValueError as e:
            raise StoreError(f"malformed cycle record {cid!r}: {str(e)[:300]}") from e
        if not st.feed(record):
            stats.cycles_orphaned += 1
            continue
        known.add(cid)
        pending += 1
        if pending >= batch_size:
            store.write_intervals(stats)
            stats.batches += 1
            pending = 0
    if pending:
        store.write_intervals(stats)
        stats.batches += 1
    return stats


def load_usage(store: AuditStore, items: Iterable[tuple[int, bytes]]) -> LoadStats:
    """Load usage snapshot records (``(offset, bytes)``): one ``usage_snapshots`` row per snapshot and one
    ``usage`` row per queue and resource. Malformed records (dead-lettered by the scheduler) and snapshot
    ids already stored are skipped. One transaction."""
    stats = LoadStats()
    known = {r[0] for r in store.con.execute("SELECT snapshot_id FROM usage_snapshots").fetchall()}
    snaps: list[tuple[str, int, int, bool, str | None, str]] = []
    rows: list[tuple[str, int, str, str, float]] = []
    for offset, raw in items:
        try:
            u = parse_usage_record(raw)
        except UsageRecordError:
            stats.usage_skipped += 1
            continue
        if u.id in known:
            stats.usage_skipped += 1
            continue
        known.add(u.id)
        snaps.append((u.id, offset, u.as_of_ms, u.usage is not None, u.reason, raw.decode()))
        for q, vec in (u.usage or {}).items():
            rows.extend((u.id, u.as_of_ms, q, r, v) for r, v in vec.items())
    if not snaps:
        return stats
    con = store.con
    con.execute("BEGIN TRANSACTION")
    try:
        con.executemany("INSERT INTO recent_usage_snapshots VALUES (?, ?, ?, ?, ?, ?)", snaps)
        if rows:
            df = pl.DataFrame(
                rows,
                schema={
                    "snapshot_id": pl.Utf8,
                    "as_of_ms": pl.Int64,
                    "queue": pl.Utf8,
                    "resource": pl.Utf8,
                    "usage": pl.Float64,
                },
                orient="row",
            )
            con.register("_batch_usage", _ArrowStream(df))
            try:
                con.execute("INSERT INTO recent_usage SELECT * FROM _batch_usage")
            finally:
                con.unregister("_batch_usage")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    stats.usage_snapshots += len(snaps)
    stats.batches += 1
    return stats


def load_events(
    store: AuditStore,
    items: Iterable[tuple[int, bytes]],
    batch_size: int = 50_000,
    refused: Mapping[int, str] | None = None,
) -> LoadStats:
    """Load ``(offset, dump_event bytes)`` pairs, ``batch_size`` a batch; offsets already stored are skipped.

    Only what the scheduler folds is loaded: each event is parsed as the scheduler parses it
    (:func:`ingest.events.parse_event`), and an event that does not parse, or whose offset is in
    ``refused`` (the scheduler's dead letters, by offset, with their reason), is skipped and listed in
    ``LoadStats.events_refused``. One bad event never stops the load.
    """
    stats = LoadStats()
    refused = refused or {}
    offsets: list[int] = []
    texts: list[str] = []

    def flush() -> None:
        store._write_events(offsets, texts, stats)
        stats.batches += 1
        offsets.clear()
        texts.clear()

    for offset, raw in items:
        reason = refused.get(offset)
        if reason is None:
            try:
                parse_event(raw)
            except Exception as e:
                reason = str(e)[:300]
        if reason is not None:
            stats.events_refused.append((offset, reason))
            log.warning("events offset %d not loaded: the scheduler refuses it (%s)", offset, reason)
            continue
        offsets.append(offset)
        texts.append(raw.decode(errors="replace").rstrip("\n"))
        if len(offsets) >= batch_size:
            flush()
    if offsets:
        flush()
    return stats


# --------------------------------------------------------------------------- sources


def _lines(path: Path) -> Iterator[bytes]:
    with path.open("rb") as fh:
        for line in fh:
            if line.strip():
                yield line


def load_run_dir(store: AuditStore, directory: Path | str, batch_size: int = 500) -> LoadStats:
    """Load a ``hourglass simulate --out`` directory (line ``i`` of ``events.jsonl`` is offset ``i``)."""
    d = Path(directory)
    if not (d / CYCLES_FILE).is_file():
        raise StoreError(f"{d}: not a run directory (no {CYCLES_FILE})")
    stats = LoadStats()
    if (d / EVENTS_FILE).is_file():
        start = store.max_event_offset() + 1
        with (d / EVENTS_FILE).open("rb") as fh:
            items = ((i, line) for i, line in enumerate(fh) if i >= start)
            stats.add(load_events(store, items))
    stats.add(load_cycles(store, _lines(d / CYCLES_FILE), batch_size))
    if (d / USAGE_FILE).is_file():
        stats.add(load_usage(store, enumerate(_lines(d / USAGE_FILE))))
    return stats


def sink_from_log(
    store: AuditStore,
    log: Log,
    topics: Topics = DEFAULT_TOPICS,
    group: str = DEFAULT_GROUP,
    batch_size: int = 1000,
) -> LoadStats:
    """Load everything new on the events, usage and decisions topics, from ``group``'s committed offsets.

    Each batch is written to the store in one transaction, then its offsets are committed; a crash between
    the two re-reads the batch next time and the duplicates are dropped. A log that lost records raises
    :class:`~ingest.log.LogError` rather than loading part of the history: a committed offset past the end
    of its topic, or a last cycle that folded events the events topic no longer holds.

    Events are loaded only up to the last cycle recorded on the decisions topic: the scheduler writes its
    dead letters before that cycle's record, so every event the store loads is one the scheduler folded
    (the dead-lettered ones are skipped, :func:`load_events`); the events after it wait for the next cycle.
    """
    stats = LoadStats()
    folded_to = _last_cycle_offset(log, topics)
    refused = _dead_lettered(log, topics)
    for topic in (topics.events, topics.usage, topics.decisions):
        pos = log.committed(group, topic)
        end = log.end_offset(topic)
        if pos > end:
            raise LogError(
                f"{topic}: the sink committed offset {pos} but the topic ends at {end}: the log has lost"
                " records the store already holds (restore the log, or load it into a new store)"
            )
        while True:
            records = log.read(topic, pos, batch_size)
            if topic == topics.events:
                records = [r for r in records if r.offset <= folded_to]
            if not records:
                break
            if topic == topics.events:
                items = ((r.offset, r.value) for r in records)
                stats.add(load_events(store, items, batch_size=len(records), refused=refused))
            elif topic == topics.usage:
                stats.add(load_usage(store, ((r.offset, r.value) for r in records)))
            else:
                stats.add(load_cycles(store, (r.value for r in records), batch_size=len(records)))
            pos = records[-1].offset + 1
            log.commit(group, topic, pos)
    _check_events_cover_cycles(log, topics)
    return stats


def _check_events_cover_cycles(log: Log, topics: Topics) -> None:
    """LogError when the last cycle record folded an events offset the events topic no longer holds."""
    end = log.end_offset(topics.decisions)
    if end == 0:
        return
    last = log.read(topics.decisions, end - 1, 1)
    try:
        offset = json.loads(last[0].value)["events_offset"] if last else None
    except (ValueError, KeyError, TypeError):
        return  # not a cycle record: load_cycles already counted it as malformed
    events_end = log.end_offset(topics.events)
    if isinstance(offset, int) and offset >= events_end:
        raise LogError(
            f"{topics.events} ends at offset {events_end}, but the last cycle in {topics.decisions} folded"
            f" it through offset {offset}: the events log has lost records"
        )


def _last_cycle_offset(log_: Log, topics: Topics) -> int:
    """The highest ``events_offset`` of the cycle records on the decisions topic (-1: none)."""
    out = -1
    for r in log_.scan(topics.decisions, batch=5000):
        try:
            offset = json.loads(r.value)["events_offset"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(offset, int):
            out = max(out, offset)
    return out


def _dead_lettered(log_: Log, topics: Topics) -> dict[int, str]:
    """The events offsets the scheduler dead-lettered, with their reason."""
    out: dict[int, str] = {}
    for r in log_.scan(topics.deadletter, batch=5000):
        try:
            d = json.loads(r.value)
            if d["source_topic"] == topics.events:
                out[int(d["source_offset"])] = f"{d['reason_code']}: {d['message']}"
        except (ValueError, KeyError, TypeError):
            continue
    return out


# --------------------------------------------------------------------------- read-only queries


def check_select(sql: str) -> str:
    """The single SELECT (or WITH … SELECT) statement in ``sql``; StoreError for anything else."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise StoreError(f"cannot parse the query: {e}") from e
    if len(statements) != 1:
        raise StoreError(f"expected exactly one SELECT statement, got {len(statements)} statements")
    st = statements[0]
    if st.type != duckdb.StatementType.SELECT:
        kind = str(st.type).rsplit(".", 1)[-1]
        raise StoreError(f"only read-only SELECT / WITH queries are allowed, not {kind} statements")
    return str(st.query)


@dataclass(frozen=True, slots=True)
class QueryLimits:
    """What one read-only query may cost: its time, the rows it hands back, DuckDB's memory and threads."""

    timeout_s: float = 60.0
    max_rows: int | None = None  # rows fetched; None: all of them
    memory_limit: str = "1GB"  # DuckDB's own buffer memory (the rows fetched into Python come on top)
    threads: int = 2


_SANDBOX_MEMORY: Final = QueryLimits().memory_limit
_SANDBOX_THREADS: Final = QueryLimits().threads


@dataclass(frozen=True, slots=True)
class QueryResult:
    """Column names, the rows fetched, and whether the query had more rows than ``max_rows``."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool


def connect_readonly(path: Path | str) -> duckdb.DuckDBPyConnection:
    """A plain read-only connection to the DuckDB file at *path*; StoreError naming it if it is not one."""
    try:
        return duckdb.connect(str(path), read_only=True)
    except duckdb.Error as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise StoreError(f"{path}: not a DuckDB audit store ({first})") from None


def bind_history(con: duckdb.DuckDBPyConnection, path: Path | str) -> None:
    """Point *con*'s public tables at the Parquet history next to the store file where it is now.

    The views stored in the file name the history where the store was last written; a store that was
    moved or copied since, or is opened from another directory, must read the history beside it. Temporary
    views of the same names shadow the stored ones (also inside the report's views) for this connection.
    A store whose archived days are gone (the ``.duckdb`` file copied without its history folder) is
    refused rather than read as if those days were empty.
    """
    have = {
        r[0]
        for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'").fetchall()
    }
    if not {"archived_span", *(t for _, t, _, _, _ in TABLE_VIEWS)} <= have:
        return  # not an audit store (or an older one): nothing to rebind
    history = history_dir(path)
    archived = con.execute("SELECT count(*) FROM archived_span").fetchall()[0][0]
    if archived and not history.is_dir():
        raise StoreError(
            f"{path}: its Parquet history {history.name}/ is missing (copy or move it together with the"
            " .duckdb file)"
        )
    create_table_views(con, history, temporary=True)


def open_readonly(
    path: Path | str, *, memory_limit: str = _SANDBOX_MEMORY, threads: int = _SANDBOX_THREADS
) -> duckdb.DuckDBPyConnection:
    """Open a store read-only, with file and network access from SQL disabled (but for reading its own
    Parquet history), DuckDB's memory and threads bounded, and the settings locked."""
    con = connect_readonly(path)
    try:
        con.execute("SET memory_limit = ?", [memory_limit])
        con.execute("SET threads = ?", [threads])
    except duckdb.Error as e:
        con.close()
        raise StoreError(f"bad memory limit {memory_limit!r} or threads {threads}: {e}") from None
    try:
        bind_history(con, path)
    except StoreError:
        con.close()
        raise
    history = history_dir(path)
    if history.is_dir():
        con.execute("SET allowed_directories = ?", [[str(history) + "/"]])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def _current(db: Path) -> bool:
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error:
        return False
    try:
        rows = con.execute("SELECT value FROM store_meta WHERE key = 'version'").fetchall()
    except duckdb.Error:
        return False
    finally:
        con.close()
    return bool(rows) and rows[0][0] == STORE_VERSION


def resolve_store(path: Path | str) -> Path:
    """The DuckDB file for ``--store PATH``: a .duckdb file as is, or ``DIR/audit.duckdb`` for a run dir.

    A run directory's store is built on first use and refreshed when the run's files are newer.
    """
    p = Path(path)
    if p.is_dir():
        db = p / RUN_DIR_STORE
        if not db.exists() and not (p / CYCLES_FILE).is_file():
            # Refused before anything is written: an empty audit.duckdb here would pass for a store.
            raise StoreError(
                f"{p}: not a run directory (no {CYCLES_FILE} or {RUN_DIR_STORE}; pass the directory"
                " `hourglass simulate --out` wrote, or a .duckdb file)"
            )
        sources = [p / CYCLES_FILE, p / EVENTS_FILE, p / USAGE_FILE]
        newest = max((s.stat().st_mtime for s in sources if s.exists()), default=0.0)
        if db.exists() and db.stat().st_mtime >= newest and not _current(db):
            db.unlink()  # built by an older version: rebuilt from the run's files below
            shutil.rmtree(history_dir(db), ignore_errors=True)
        if not db.exists() or db.stat().st_mtime < newest:
            from analytics.audit.archive import archive
            from analytics.progress import status

            # Seconds on a long run: the user sees what is being built rather than a silent pause.
            with status(f"building the audit store {db}") as step, AuditStore(db) as store:
                step("loading the run's files")
                load_run_dir(store, p)
                step("archiving the history")
                archive(store)  # a run of days is kept as a months-long store would be
            db.touch()
        return db
    if not p.is_file():
        raise StoreError(f"{p}: no such store (a run directory or a .duckdb file)")
    return p


def query(path: Path | str, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one read-only SELECT on the store at ``path``: (column names, rows), under the default limits."""
    result = run_query(path, sql, QueryLimits())
    return result.columns, result.rows


def run_query(path: Path | str, sql: str, limits: QueryLimits) -> QueryResult:
    """Run one read-only SELECT on the store at ``path`` under ``limits``.

    The query runs on a worker thread while this one waits: past ``timeout_s``, or on Ctrl-C
    (KeyboardInterrupt), DuckDB is told to interrupt it and :class:`StoreError` says why. Rows are fetched
    as DuckDB streams them, so a limited result never materialises the rest.
    """
    stmt = check_select(sql)
    db = resolve_store(path)
    con = open_readonly(db, memory_limit=limits.memory_limit, threads=limits.threads)
    box: dict[str, Any] = {}
    # An Event, not Thread.join/is_alive: a join interrupted by Ctrl-C can leave is_alive() wrong.
    finished = threading.Event()

    def work() -> None:
        try:
            cur = con.execute(stmt)
            n = limits.max_rows
            rows = cur.fetchall() if n is None else cur.fetchmany(n + 1)
            columns = [d[0] for d in cur.description or []]
            truncated = n is not None and len(rows) > n
            box["result"] = QueryResult(columns, rows[:n] if truncated else rows, truncated)
        except BaseException as e:  # handed to the waiting thread
            box["error"] = e
        finally:
            finished.set()

    worker = threading.Thread(target=work, name="hourglass-sql", daemon=True)
    deadline = time.monotonic() + limits.timeout_s
    cancelled: str | None = None
    worker.start()
    try:
        while not finished.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                cancelled = f"it ran past the {limits.timeout_s:g} s time limit"
                con.interrupt()
                break
            finished.wait(min(left, 0.1))
    except KeyboardInterrupt:
        cancelled = "interrupted"
        con.interrupt()
    if not finished.wait(10.0):  # DuckDB did not stop: leave the connection to the daemon thread
        raise StoreError(f"query cancelled ({cancelled}), but DuckDB did not stop")
    con.close()
    if cancelled is not None:
        raise StoreError(f"query cancelled: {cancelled}")
    error = box.get("error")
    if isinstance(error, duckdb.Error):
        raise StoreError(f"query failed: {error}") from error
    if error is not None:
        raise error
    result: QueryResult = box["result"]
    return result


def render(
    columns: list[str], rows: list[tuple[Any, ...]], fmt: str = "table", out: IO[str] | None = None
) -> None:
    """Print query results as a rich table, CSV (with a header) or JSON (a list of objects)."""
    out = out if out is not None else sys.stdout
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(columns)
        w.writerows(["" if v is None else v for v in row] for row in rows)
    elif fmt == "json":
        json.dump([dict(zip(columns, row, strict=True)) for row in rows], out, default=str, indent=1)
        out.write("\n")
    elif fmt == "table":
        from rich.cells import cell_len
        from rich.table import Table

        from analytics.terminal import console

        con = console(out)
        cells = [["NULL" if v is None else str(v) for v in row] for row in rows]
        widths = [
            max([cell_len(line) for r in cells for line in r[i].splitlines() or [""]] + [cell_len(c), 1])
            for i, c in enumerate(columns)
        ]
        if 1 + sum(w + 3 for w in widths) <= con.width:
            table = Table(*columns, show_lines=False)
            for col in table.columns:
                col.no_wrap = True
            for r in cells:
                table.add_row(*r)
            con.print(table)
        else:  # too wide to show whole: one record at a time, every value whole (psql's expanded display)
            out.write("".join(_expanded(columns, cells, int(con.width))))
        out.write(f"({len(rows)} row{'s' if len(rows) != 1 else ''})\n")
    else:
        raise StoreError(f"unknown format {fmt!r} (table, csv or json)")


def _expanded(columns: list[str], cells: list[list[str]], width: int) -> Iterator[str]:
    """Rows as ``-[ row N ]`` blocks of ``column | value`` lines, values folded at word boundaries to
    *width* under their own start (words longer than the room, such as ids, kept whole)."""
    import textwrap

    name_w = max(len(c) for c in columns)
    room = max(width - name_w - 3, 20)
    for n, row in enumerate(cells, 1):
        head = f"-[ row {n} ]"
        yield head + "-" * max(width - len(head), 0) + "\n"
        for name, value in zip(columns, row, strict=True):
            lines: list[str] = []
            for part in value.splitlines() or [""]:
                lines.extend(
                    textwrap.wrap(part, room, break_long_words=False, break_on_hyphens=False) or [""]
                )
            yield f"{name:<{name_w}} | {lines[0]}\n"
            for more in lines[1:]:
                yield f"{'':<{name_w}} | {more}\n"
