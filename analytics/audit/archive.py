"""Months of history: whole days move from the audit store's DuckDB file to Hive-partitioned Parquet.

Layout (documented in ``docs/sql.md``): next to the DuckDB file ``audit.duckdb`` (the catalog, the views,
the open intervals and the current day's rows) sits ``audit.history/``, one folder per table and one
partition per UTC day of logical time::

    audit.history/events/day=2026-11-24/part-<uuid>.parquet
    audit.history/pending/day=2026-11-24/part-<uuid>.parquet
    audit.history/queue_spans/…  cycles/…  decisions/…  usage_snapshots/…  usage/…

The store's views (``events``, ``decisions``, ``pending_intervals``, …) read the DuckDB rows and the
Parquet files together, so queries do not change when a day moves. Intervals are cut at midnight
(:mod:`analytics.audit.history`), so every partition stands alone.

:func:`archive` moves every day before the newest record's day, after adding its per-queue aggregates to
``daily_queue`` (GPU-ms held by the ``pod_runs`` definition, allocated and fair-share GPU-ms, job-ms
pending, binds, evictions). :func:`retain` deletes partitions older than a number of days; ``daily_queue``
is kept forever.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Final, Protocol

import duckdb

from analytics.audit.history import DAY_MS, Intervals


class AuditStore(Protocol):
    """What archiving needs of :class:`analytics.audit.store.AuditStore` (which imports this module)."""

    con: duckdb.DuckDBPyConnection
    history: Path | None
    intervals: Intervals

    def refresh_views(self) -> None: ...


__all__ = ["ArchiveStats", "archive", "retain"]

_EPOCH: Final = date(1970, 1, 1)
# (table, time column, history folder): what moves to Parquet.
_MOVED: Final = (
    ("recent_events", "at_ms", "events"),
    ("recent_cycles", "logical_time_ms", "cycles"),
    ("recent_decisions", "logical_time_ms", "decisions"),
    # An interval goes to the day of its last millisecond. Every interval lies within one day except one
    # spanning whole days without any cycle (analytics/audit/history.py); kept with its last day, retention
    # drops it only when it drops every day it covers.
    ("recent_pending", "(end_ms - 1)", "pending"),
    ("recent_queue_spans", "(end_ms - 1)", "queue_spans"),
    ("recent_usage_snapshots", "as_of_ms", "usage_snapshots"),
    ("recent_usage", "as_of_ms", "usage"),
)


@dataclass
class ArchiveStats:
    """What one archive / retain did."""

    days_archived: int = 0
    rows_moved: int = 0
    daily_rows: int = 0
    partitions_dropped: int = 0


def _newest_day(store: AuditStore) -> int | None:
    rows = store.con.execute(
        "SELECT greatest((SELECT max(logical_time_ms) FROM recent_cycles), (SELECT max(at_ms) FROM recent_events))"
    ).fetchall()
    last = rows[0][0]
    meta = store.intervals.last_ms
    if last is None and meta is None:
        return None
    return max(v for v in (last, meta) if v is not None) // DAY_MS


# What the days left in DuckDB still need of the days moving out (the live_* views, analytics/audit/views.py),
# from the moving rows and the previous carry: the last cycle; per pod alive at the cutoff its latest
# PodSubmitted (after its last end), its open PodBound with the submission before it and the PodReleasing
# after it; each pod group's latest PodGroupUpserted; per node its latest event before the carried cycle and
# every later one (capacity_changes' running sums are then exact from that cycle on).
_CARRY_CYCLE: Final = """
CREATE OR REPLACE TEMP TABLE _carry_cycle AS
SELECT * FROM (SELECT * FROM cycles_carry UNION ALL BY NAME SELECT * FROM recent_cycles WHERE logical_time_ms < $cutoff)
ORDER BY seq DESC LIMIT 1
"""
_CARRY_EVENTS: Final = """
CREATE OR REPLACE TEMP TABLE _carry_events AS
WITH m AS (
  SELECT * FROM events_carry UNION ALL BY NAME SELECT * FROM recent_events WHERE at_ms < $cutoff
), pod AS (
  SELECT "offset", uid, type FROM m
  WHERE type IN ('PodSubmitted', 'PodBound', 'PodFinished', 'PodDeleted', 'PodReleasing')
), last_end AS (
  SELECT uid, max("offset") AS end_o FROM pod WHERE type IN ('PodFinished', 'PodDeleted') GROUP BY uid
), open_bind AS (
  SELECT b.uid, b.bind_o FROM (SELECT uid, max("offset") AS bind_o FROM pod WHERE type = 'PodBound' GROUP BY uid) b
  LEFT JOIN last_end e USING (uid) WHERE e.end_o IS NULL OR e.end_o < b.bind_o
), node AS (
  SELECT "offset", json_extract_string(raw, '$.name') AS node FROM m WHERE type IN ('NodeUpserted', 'NodeRemoved')
), node_from AS (
  SELECT node, coalesce(max("offset") FILTER (WHERE "offset" < (SELECT coalesce(max(events_offset), -1) FROM _carry_cycle)),
                        min("offset")) AS from_o
  FROM node GROUP BY node
), keep AS (
  SELECT max(p."offset") AS o FROM pod p LEFT JOIN last_end e USING (uid)
  WHERE p.type = 'PodSubmitted' AND p."offset" > coalesce(e.end_o, -1) GROUP BY p.uid
  UNION ALL SELECT bind_o FROM open_bind
  UNION ALL SELECT max(p."offset") FROM pod p JOIN open_bind b USING (uid)
  WHERE p.type = 'PodSubmitted' AND p."offset" < b.bind_o GROUP BY p.uid
  UNION ALL SELECT p."offset" FROM pod p JOIN open_bind b USING (uid) WHERE p.type = 'PodReleasing' AND p."offset" > b.bind_o
  UNION ALL SELECT max("offset") FROM m WHERE type = 'PodGroupUpserted' GROUP BY uid
  UNION ALL SELECT n."offset" FROM node n JOIN node_from f USING (node) WHERE n."offset" >= f.from_o
)
SELECT * FROM m WHERE "offset" IN (SELECT o FROM keep)
"""


def _carry(con: duckdb.DuckDBPyConnection, cutoff: int) -> None:
    """Replace events_carry / cycles_carry with what the days from *cutoff* on need (see above)."""
    con.execute(_CARRY_CYCLE, {"cutoff": cutoff})
    con.execute(_CARRY_EVENTS, {"cutoff": cutoff})
    for table, temp in (("cycles_carry", "_carry_cycle"), ("events_carry", "_carry_events")):
        con.execute(f"DELETE FROM {table}")
        con.execute(f"INSERT INTO {table} SELECT * FROM {temp}")
        con.execute(f"DROP TABLE {temp}")


_SPAN: Final = """
CREATE OR REPLACE TEMP TABLE _span AS SELECT min(lo) AS lo, max(hi) AS hi FROM (
  SELECT first_ms AS lo, last_ms AS hi FROM archived_span
  UNION ALL SELECT min(at_ms), max(at_ms) FROM recent_events WHERE at_ms < $cutoff
  UNION ALL SELECT min(logical_time_ms), max(logical_time_ms) FROM recent_cycles WHERE logical_time_ms < $cutoff
)
"""


def _set_span(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("DELETE FROM archived_span")
    con.execute("INSERT INTO archived_span SELECT lo, hi FROM _span WHERE lo IS NOT NULL")
    con.execute("DROP TABLE _span")


def archive(store: AuditStore) -> ArchiveStats:
    """Move every day before the newest record's day to Parquet (see the module doc); idempotent."""
    stats = ArchiveStats()
    newest = _newest_day(store)
    if newest is None or store.history is None:
        return stats
    cutoff = newest * DAY_MS
    con = store.con
    con.execute("BEGIN TRANSACTION")
    try:
        # Aggregates first: they read the views, which still see every row of those days.
        before = int(con.execute("SELECT count(*) FROM daily_queue").fetchall()[0][0])
        con.execute(
            "INSERT INTO daily_queue SELECT * FROM queue_days_live WHERE day < ?",
            [_EPOCH + timedelta(days=newest)],
        )
        stats.daily_rows = int(con.execute("SELECT count(*) FROM daily_queue").fetchall()[0][0]) - before
        _carry(con, cutoff)
        con.execute(_SPAN, {"cutoff": cutoff})
        _set_span(con)
        days: set[int] = set()
        for table, col, folder in _MOVED:
            n = int(con.execute(f"SELECT count(*) FROM {table} WHERE {col} < ?", [cutoff]).fetchall()[0][0])
            if not n:
                continue
            days.update(
                int(r[0])
                for r in con.execute(
                    f"SELECT DISTINCT {col} // {DAY_MS} FROM {table} WHERE {col} < ?", [cutoff]
                ).fetchall()
            )
            target = store.history / folder
            target.mkdir(parents=True, exist_ok=True)
            con.execute(
                f"COPY (SELECT *, CAST(DATE '1970-01-01' + CAST({col} // {DAY_MS} AS INTEGER) AS VARCHAR) AS day"
                f" FROM {table} WHERE {col} < {cutoff}) TO '{target}'"
                " (FORMAT PARQUET, PARTITION_BY (day), APPEND, FILENAME_PATTERN 'part-{uuid}')"
            )
            con.execute(f"DELETE FROM {table} WHERE {col} < ?", [cutoff])
            stats.rows_moved += n
        stats.days_archived = len(days)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    if stats.rows_moved:
        store.refresh_views()
    return stats


def retain(store: AuditStore, days: int) -> ArchiveStats:
    """Delete the Parquet partitions more than *days* days older than the newest day (``daily_queue`` stays)."""
    stats = ArchiveStats()
    if days < 1:
        raise ValueError(f"retention must be at least one day, got {days}")
    newest = _newest_day(store)
    if newest is None or store.history is None or not store.history.is_dir():
        return stats
    oldest_kept = _EPOCH + timedelta(days=newest - days + 1)
    for part in sorted(store.history.glob("*/day=*")):
        try:
            day = date.fromisoformat(part.name.removeprefix("day="))
        except ValueError:
            continue
        if day < oldest_kept:
            shutil.rmtree(part)
            stats.partitions_dropped += 1
    if stats.partitions_dropped:
        store.refresh_views()
        # The history's first time moved on: recompute its span from what is left.
        store.con.execute(
            "CREATE OR REPLACE TEMP TABLE _span AS SELECT min(lo) AS lo, (SELECT max(last_ms) FROM archived_span) AS hi"
            " FROM (SELECT min(at_ms) AS lo FROM events UNION ALL SELECT min(logical_time_ms) FROM cycles)"
        )
        _set_span(store.con)
    return stats
