"""``hourglass sql`` and ``hourglass sink``: querying the audit store and loading the log into it."""

from __future__ import annotations

import argparse
import sys


def days(text: str) -> int:
    """An argparse type: a whole number of days, ``90`` or ``90d``."""
    t = text.strip().lower().removesuffix("d")
    try:
        value = int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r} (e.g. 90d)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 day, got {text!r}")
    return value


def add_sql_arguments(p: argparse.ArgumentParser) -> None:
    """``sql``'s flags."""
    p.add_argument(
        "--store", required=True, help="a run directory (hourglass simulate --out) or an audit .duckdb file"
    )
    p.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format")
    p.add_argument("query", help="one SELECT (or WITH … SELECT) statement")


def run_sql(args: argparse.Namespace) -> int:
    """``hourglass sql``: one read-only statement over the audit store, printed."""
    from analytics.audit.store import StoreError, query
    from analytics.audit.store import render as render_rows

    try:
        columns, rows = query(args.store, args.query)
    except StoreError as e:
        print(f"sql: {e}", file=sys.stderr)
        return 2
    render_rows(columns, rows, args.format)
    return 0


def add_sink_arguments(p: argparse.ArgumentParser) -> None:
    """``sink``'s flags."""
    p.add_argument("--log", required=True, help="a FileLog directory or kafka://HOST:PORT")
    p.add_argument(
        "--store", required=True, help="the audit store file (created if missing), e.g. audit.duckdb"
    )
    p.add_argument("--topic-prefix", default=None, help="use PREFIX.events, PREFIX.decisions, ... as topics")
    p.add_argument("--follow", action="store_true", help="keep loading new records every --interval seconds")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between loads with --follow")
    p.add_argument(
        "--retain",
        type=days,
        default=None,
        metavar="DAYS",
        help="keep this many days of history (e.g. 90d); older Parquet partitions are deleted, the daily"
        " per-queue aggregates (queue_days) are kept forever. Default: keep everything",
    )


def run_sink(args: argparse.Namespace) -> int:
    """``hourglass sink``: load the log into the audit store (once, or every --interval with --follow)."""
    import time

    from analytics.audit.archive import archive, retain
    from analytics.audit.store import AuditStore, StoreError, sink_from_log
    from ingest.backends import open_log
    from ingest.log import LogError, Topics

    topics = Topics.from_prefix(args.topic_prefix)
    try:
        log = open_log(args.log, topics=topics.all(), readonly=True)
    except LogError as e:
        print(f"sink: {e}", file=sys.stderr)
        return 2
    total = None
    days_archived = dropped = 0
    try:
        with log, AuditStore(args.store) as store:
            while True:
                st = sink_from_log(store, log, topics)
                if total is None:
                    total = st
                else:
                    total.add(st)
                # Whole days before the newest one move to Parquet; with --retain, old days are dropped.
                moved = archive(store)
                days_archived += moved.days_archived
                if args.retain is not None:
                    dropped += retain(store, args.retain).partitions_dropped
                if not args.follow:
                    break
                time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    except StoreError as e:
        print(f"sink: {e}", file=sys.stderr)
        return 2
    if total is not None:
        print(
            f"sink: {total.events} events, {total.usage_snapshots} usage snapshots, {total.cycles} cycles"
            f" ({total.decision_rows} decisions, {total.pending_rows} pending intervals, {total.queue_rows}"
            f" queue spans) loaded into {args.store}; {total.cycles_duplicate} duplicate cycles,"
            f" {total.cycles_orphaned} deltas without their checkpoint and {total.events_skipped_malformed}"
            f" malformed events skipped; {days_archived} day(s) moved to Parquet, {dropped} partition(s)"
            " past retention dropped"
        )
    return 0
