"""``hourglass sql`` and ``hourglass sink``: querying the audit store and loading the log into it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


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
    p.add_argument(
        "--timeout", type=_bounded(float, 0), default=60.0, help="cancel the query after SECONDS (default 60)"
    )
    p.add_argument(
        "--max-rows",
        type=_bounded(int, -1),
        default=1000,
        help="print at most N rows, with a note when there were more (default 1000; 0: all)",
    )
    p.add_argument("--memory-limit", default="1GB", help="DuckDB's memory limit for the query (default 1GB)")
    p.add_argument("--threads", type=_bounded(int, 0), default=2, help="DuckDB threads (default 2)")
    p.add_argument("query", help="one SELECT (or WITH … SELECT) statement")


def run_sql(args: argparse.Namespace) -> int:
    """``hourglass sql``: one read-only statement over the audit store, printed within its limits."""
    from analytics.audit.store import QueryLimits, StoreError, run_query
    from analytics.audit.store import render as render_rows

    limits = QueryLimits(
        timeout_s=args.timeout,
        max_rows=args.max_rows or None,
        memory_limit=args.memory_limit,
        threads=args.threads,
    )
    try:
        result = run_query(args.store, args.query, limits)
    except StoreError as e:
        print(f"sql: {e}", file=sys.stderr)
        return 2
    render_rows(result.columns, result.rows, args.format)
    if result.truncated:
        print(
            f"sql: showing the first {len(result.rows)} rows; the query returned more (add LIMIT or"
            " aggregate, or raise --max-rows; 0 prints all)",
            file=sys.stderr,
        )
    return 0


def _bounded(kind: type[int] | type[float], low: float) -> Callable[[str], int | float]:
    """An argparse type: a number of ``kind`` in ``(low, 10^9)`` (``[0, 10^9)`` when ``low`` is -1)."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not low < value < 10**9:
            raise argparse.ArgumentTypeError(f"expected a number above {max(low, 0):g}, below 10^9, got {text}")
        return value

    return parse


def add_sink_arguments(p: argparse.ArgumentParser) -> None:
    """``sink``'s flags."""
    p.add_argument("--log", required=True, help="a FileLog directory or kafka://HOST:PORT")
    p.add_argument(
        "--store", required=True, help="the audit store file (created if missing), e.g. audit.duckdb"
    )
    p.add_argument("--topic-prefix", default=None, help="use PREFIX.events, PREFIX.decisions, ... as topics")
    p.add_argument(
        "--node-pool",
        default=None,
        metavar="POOL",
        help='load the records of the shard of node pool POOL ("" = the default shard) into a store of its'
        " own: its decisions topic, with its own consumer group (docs/deploy.md)",
    )
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
    from analytics.audit.store import DEFAULT_GROUP, AuditStore, StoreError, sink_from_log
    from ingest.backends import StartupError, open_log_for
    from ingest.log import LogError, Topics

    topics = Topics.from_prefix(args.topic_prefix).for_pool(args.node_pool)
    # The events topic is shared by every shard: each shard's store keeps its own position on it.
    group = Topics.pool_role(DEFAULT_GROUP, args.node_pool)
    try:
        log = open_log_for("sink", args.log, topics=topics.all(), readonly=True)
    except StartupError as e:
        print(e, file=sys.stderr)
        return 2
    total = None
    days_archived = dropped = 0
    try:
        with log, AuditStore(args.store) as store:
            while True:
                st = sink_from_log(store, log, topics, group)
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
    except (StoreError, LogError) as e:
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
