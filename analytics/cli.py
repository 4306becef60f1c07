"""The ``hourglass`` command line: one entry point, one subcommand per job."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

DEFAULT_CONFORMANCE_DIR = Path(__file__).resolve().parent.parent / "tests" / "conformance" / "kai"


def _cmd_conformance(args: argparse.Namespace) -> int:
    from scheduler.conformance import run_file, scenario_files

    root = Path(args.dir)
    if not root.exists():
        print(f"conformance: no such directory: {root}", file=sys.stderr)
        return 2
    passed = failed = soft = 0
    for path in scenario_files(root):
        res = run_file(path)
        if res.passed:
            passed += 1
            continue
        detail = res.error or "; ".join(res.diffs[:3]) + (
            f" (+{len(res.diffs) - 3} more)" if len(res.diffs) > 3 else ""
        )
        if res.strict:
            failed += 1
            print(f"FAIL {path.relative_to(root)}: {detail}")
        else:
            soft += 1
            print(f"non-strict mismatch {path.relative_to(root)}: {detail}")
    if soft:
        print(f"non-strict mismatches (not counted as failures): {soft}")
    print(f"conformance: {passed} passed, {failed} failed")
    return 1 if failed else 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from analytics.simulate import run_cli

    return run_cli(args)


def _cmd_placement_benchmark(args: argparse.Namespace) -> int:
    from analytics.placement_benchmark import run_cli

    return run_cli(args)


def _cmd_replay(args: argparse.Namespace) -> int:
    from analytics.replay import run_cli

    return run_cli(args)


def _cmd_sql(args: argparse.Namespace) -> int:
    from analytics.store import StoreError, query
    from analytics.store import render as render_rows

    try:
        columns, rows = query(args.store, args.query)
    except StoreError as e:
        print(f"sql: {e}", file=sys.stderr)
        return 2
    render_rows(columns, rows, args.format)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    import logging
    import signal

    from ingest.log import DEFAULT_TOPICS, LogError, Topics, open_log
    from scheduler.service import Service

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    topics = Topics.with_prefix(args.topic_prefix) if args.topic_prefix else DEFAULT_TOPICS
    try:
        log = open_log(args.log, topics=topics.all())
    except LogError as e:
        print(f"run: {e}", file=sys.stderr)
        return 2
    with log:
        service = Service(log, topics, batch_size=args.batch_size, poll_interval_s=args.poll_interval)
        signal.signal(signal.SIGTERM, lambda *_: service.stop())
        try:
            st = service.run(max_steps=1 if args.once else None, stop_when_idle=args.stop_when_idle)
        except KeyboardInterrupt:
            st = service.stats
    print(
        f"run: {st.records_read} records read, {st.events_folded} events folded, {st.dead_letters} dead"
        f" letters, {st.cycles_appended} cycles appended ({st.cycles_skipped} already recorded),"
        f" events position {service.position}"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hourglass", description="Hourglass: an event-sourced GPU scheduler.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("conformance", help="run KAI conformance scenario files")
    c.add_argument("dir", nargs="?", default=str(DEFAULT_CONFORMANCE_DIR), help="directory of scenario files")
    c.set_defaults(func=_cmd_conformance)
    from analytics.simulate import add_arguments as simulate_arguments

    s = sub.add_parser(
        "simulate", help="replay the Alibaba GPU trace through the engine on a simulated clock (docs/simulate.md)"
    )
    simulate_arguments(s)
    s.set_defaults(func=_cmd_simulate)
    from analytics.placement_benchmark import add_arguments as placement_benchmark_arguments

    b = sub.add_parser(
        "placement-benchmark",
        help="FGD-paper placement benchmark on the Alibaba GPU trace (docs/placement-benchmark.md)",
    )
    placement_benchmark_arguments(b)
    b.set_defaults(func=_cmd_placement_benchmark)
    from analytics.replay import add_arguments as replay_arguments

    r = sub.add_parser(
        "replay",
        help="re-run the recorded cycles of a `simulate --out` run dir from its event log, --verify compares"
        " (docs/replay.md; reading from a Kafka bootstrap is not supported yet)",
    )
    replay_arguments(r)
    r.set_defaults(func=_cmd_replay)
    q = sub.add_parser("sql", help="read-only SQL over the audit store (docs/sql.md)")
    q.add_argument(
        "--store", required=True, help="a run directory (hourglass simulate --out) or an audit .duckdb file"
    )
    q.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format")
    q.add_argument("query", help="one SELECT (or WITH … SELECT) statement")
    q.set_defaults(func=_cmd_sql)
    u = sub.add_parser(
        "run", help="the scheduler service: events -> cycle records, exactly once (docs/service.md)"
    )
    u.add_argument("--log", required=True, help="a FileLog directory or kafka://HOST:PORT")
    u.add_argument(
        "--once", action="store_true", help="process one batch of events (at most one cycle) and exit"
    )
    u.add_argument("--stop-when-idle", action="store_true", help="exit when no new events are left")
    u.add_argument("--batch-size", type=int, default=1000, help="events read per step (default 1000)")
    u.add_argument("--poll-interval", type=float, default=0.2, help="seconds between polls when idle")
    u.add_argument("--topic-prefix", default=None, help="use PREFIX.events, PREFIX.decisions, ... as topics")
    u.set_defaults(func=_cmd_run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hourglass`` console script."""
    args = build_parser().parse_args(argv)
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
