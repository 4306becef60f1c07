"""The ``hourglass`` command line: one entry point, one subcommand per job."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from scheduler.engine.delta import DEFAULT_CHECKPOINT_EVERY


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _days(text: str) -> int:
    t = text.strip().lower().removesuffix("d")
    try:
        value = int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r} (e.g. 90d)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 day, got {text!r}")
    return value


DEFAULT_CONFORMANCE_DIR = Path(__file__).resolve().parent.parent / "tests" / "conformance"


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
    from analytics.simulate_cli import run_cli

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


def _cmd_fairshare(args: argparse.Namespace) -> int:
    from fairshare.service import cli_main

    return cli_main(args)


def _cmd_report(args: argparse.Namespace) -> int:
    """``hourglass report``: build, print, and optionally write the HTML page."""
    from analytics.report import ReportError, connect, render, report_from
    from analytics.report_html import write_html

    try:
        con, db = connect(args.store)
        try:
            report = report_from(con, str(db), args.from_, args.to, args.queue)
            render(report, args.format)
            if args.html:
                write_html(report, Path(args.html), con)
                print(f"report: wrote {args.html}", file=sys.stderr)
        finally:
            con.close()
    except ReportError as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    return 0


def _cmd_sink(args: argparse.Namespace) -> int:
    import time

    from analytics.archive import archive, retain
    from analytics.store import AuditStore, StoreError, sink_from_log
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


def _engine_config_sets(path: str, name: str) -> bool:
    """Whether the engine config file names ``name`` explicitly (it was readable: load_engine_config passed)."""
    import yaml

    data = yaml.safe_load(Path(path).read_text())
    return isinstance(data, dict) and name in data


def _cmd_run(args: argparse.Namespace) -> int:
    import dataclasses
    import logging
    import signal

    from analytics.replay import ReplayError, load_engine_config
    from fairshare.config import FairshareConfigError
    from fairshare.settings import cli_overrides, load_settings
    from ingest.backends import open_log
    from ingest.log import LogError, Topics
    from scheduler.engine.decisions import config_hash
    from scheduler.engine.session import SessionConfig
    from scheduler.service import Service

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    topics = Topics.from_prefix(args.topic_prefix)
    try:
        config = load_engine_config(args.engine_config) if args.engine_config else SessionConfig()
    except ReplayError as e:
        print(f"run: {e}", file=sys.stderr)
        return 2
    # The fair-share settings (fairshare/settings.py) are the one source of k_value, shared with `fairshare`.
    try:
        fair = load_settings(args.fairshare_config, cli_overrides(args))
    except FairshareConfigError as e:
        print(f"run: {e}", file=sys.stderr)
        return 2
    k_value = fair.settings.k_value
    if args.engine_config and _engine_config_sets(args.engine_config, "k_value") and config.k_value != k_value:
        print(
            f"run: {args.engine_config} sets k_value {config.k_value}, but the fair-share settings give"
            f" {k_value} ({fair.origins.get('k_value', 'default')}): k_value is one setting for `run` and"
            " `fairshare`; set it with --k-value, HOURGLASS_FAIRSHARE_K_VALUE or --fairshare-config",
            file=sys.stderr,
        )
        return 2
    config = dataclasses.replace(config, k_value=k_value)
    logging.getLogger("hourglass.run").info("fair-share settings: %s", fair.describe())
    logging.getLogger("hourglass.run").info(
        "engine config %s (hash %s)", dataclasses.asdict(config), config_hash(config)
    )
    try:
        log = open_log(args.log, topics=topics.all(), role="scheduler")
    except LogError as e:
        print(f"run: {e}", file=sys.stderr)
        return 2
    metrics = server = None
    if args.metrics_port is not None:
        from scheduler.metrics import SchedulerMetrics, serve

        metrics = SchedulerMetrics.create()
        try:
            server = serve(metrics, args.metrics_host, args.metrics_port)
        except OSError as e:
            log.close()
            print(
                f"run: cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {e}", file=sys.stderr
            )
            return 2
        logging.getLogger("hourglass.run").info("metrics on %s", server.url)
    with log:
        service = Service(
            log,
            topics,
            config,
            batch_size=args.batch_size,
            poll_interval_s=args.poll_interval,
            metrics=metrics,
            period_s=args.period if args.period > 0 else None,
            checkpoint_every=args.checkpoint_every,
        )
        # Prompt even in a long cycle: the cycle is abandoned (it has written nothing) and recovery redoes it.
        signal.signal(signal.SIGTERM, lambda *_: service.interrupt())
        try:
            st = service.run(max_steps=1 if args.once else None, stop_when_idle=args.stop_when_idle)
        except KeyboardInterrupt:
            st = service.stats
    if server is not None:
        server.close()
    print(
        f"run: {st.records_read} records read, {st.events_folded} events folded, {st.dead_letters} dead"
        f" letters, {st.cycles_appended} cycles appended ({st.cycles_skipped} already recorded),"
        f" events position {service.position}"
    )
    return 0


def _cmd_bind(args: argparse.Namespace) -> int:
    from scheduler.binder import run_cli

    return run_cli(args)


def _cmd_webhook(args: argparse.Namespace) -> int:
    from scheduler.webhook import run_cli

    return run_cli(args)


def _cmd_apply_crds(args: argparse.Namespace) -> int:
    from ingest.crds import run_cli

    return run_cli(args)


def _cmd_reserve(args: argparse.Namespace) -> int:
    from scheduler.reservation import reserve_cli

    return reserve_cli(args)


def _cmd_explain(args: argparse.Namespace) -> int:
    from analytics.explain import run_cli

    return run_cli(args)


def _cmd_ingest(args: argparse.Namespace) -> int:
    from ingest.watcher import run_cli

    return run_cli(args)


# --- issue 16 items 3-4: eta and check (analytics/eta.py, analytics/check.py) ---
def _cmd_eta(args: argparse.Namespace) -> int:
    from analytics.eta import run_cli

    return run_cli(args)


def _cmd_check(args: argparse.Namespace) -> int:
    from analytics.check import run_cli

    return run_cli(args)


def _add_eta_check(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from analytics.check import add_arguments as check_arguments
    from analytics.eta import add_arguments as eta_arguments

    et = sub.add_parser(
        "eta",
        help="when will this pending pod start: a range from forward simulations with learnt run times;"
        " --backtest LOG scores it (docs/eta.md)",
    )
    eta_arguments(et)
    et.set_defaults(func=_cmd_eta)
    ck = sub.add_parser(
        "check",
        help="would this pod / pod group be scheduled right now, where, and if not why (nothing is submitted;"
        " docs/eta.md)",
    )
    check_arguments(ck)
    ck.set_defaults(func=_cmd_check)


# --- end of eta and check ---


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hourglass", description="Hourglass: an event-sourced GPU scheduler.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser(
        "conformance", help="run the conformance scenario files (KAI's and Hourglass's real-node ones)"
    )
    c.add_argument("dir", nargs="?", default=str(DEFAULT_CONFORMANCE_DIR), help="directory of scenario files")
    c.set_defaults(func=_cmd_conformance)
    from analytics.simulate_cli import add_arguments as simulate_arguments

    s = sub.add_parser(
        "simulate",
        help="replay the Alibaba GPU trace, or a --config scenario, through the engine on a simulated clock"
        " (docs/simulate.md)",
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
        help="re-run the recorded cycles of a run dir, a log dir or kafka://HOST:PORT from the event log;"
        " --verify compares (docs/replay.md)",
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
    f = sub.add_parser("report", help="fairness usage report per queue over a time window (docs/report.md)")
    f.add_argument(
        "--store", required=True, help="a run directory (hourglass simulate --out) or an audit .duckdb file"
    )
    f.add_argument(
        "--from",
        dest="from_",
        metavar="T",
        default=None,
        help="window start: ms, offset (36h, 2d) or ISO time",
    )
    f.add_argument(
        "--to", metavar="T", default=None, help="window end (exclusive), same forms; default: the store's end"
    )
    f.add_argument("--queue", default=None, help="focus on one queue, its ancestors and siblings, in words")
    f.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format")
    f.add_argument(
        "--html", default=None, metavar="FILE", help="also write a self-contained offline HTML page"
    )
    f.set_defaults(func=_cmd_report)
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
    u.add_argument(
        "--engine-config",
        metavar="FILE",
        help="JSON/YAML mapping of engine settings (scheduler.engine.session.SessionConfig fields); replay needs"
        " the same file",
    )
    u.add_argument(
        "--period",
        type=float,
        default=10.0,
        help="when idle this many seconds with jobs waiting, append a ClockTick (wall clock) so time-driven"
        " decisions (min-runtime, stale gangs) are taken and recorded; 0 = only on change (default 10)",
    )
    u.add_argument(
        "--checkpoint-every",
        type=_positive_int,
        default=DEFAULT_CHECKPOINT_EVERY,
        metavar="K",
        help="write a full cycle record every K records (and on start); the others carry only what changed"
        f" (default {DEFAULT_CHECKPOINT_EVERY}; 1 = every record full)",
    )
    u.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics on this port (docs/metrics.md); default: no endpoint",
    )
    u.add_argument(
        "--metrics-host", default="127.0.0.1", help="address for --metrics-port (default 127.0.0.1)"
    )
    from fairshare.settings import add_settings_arguments

    add_settings_arguments(u)
    u.set_defaults(func=_cmd_run)
    k = sub.add_parser(
        "sink", help="load the log's events, usage snapshots and cycle records into a DuckDB audit store"
    )
    k.add_argument("--log", required=True, help="a FileLog directory or kafka://HOST:PORT")
    k.add_argument(
        "--store", required=True, help="the audit store file (created if missing), e.g. audit.duckdb"
    )
    k.add_argument("--topic-prefix", default=None, help="use PREFIX.events, PREFIX.decisions, ... as topics")
    k.add_argument("--follow", action="store_true", help="keep loading new records every --interval seconds")
    k.add_argument("--interval", type=float, default=2.0, help="seconds between loads with --follow")
    k.add_argument(
        "--retain",
        type=_days,
        default=None,
        metavar="DAYS",
        help="keep this many days of history (e.g. 90d); older Parquet partitions are deleted, the daily"
        " per-queue aggregates (queue_days) are kept forever. Default: keep everything",
    )
    k.set_defaults(func=_cmd_sink)
    from fairshare.service import add_arguments as fairshare_arguments

    f = sub.add_parser(
        "fairshare", help="publish decayed per-queue usage snapshots to the usage topic (docs/fairshare.md)"
    )
    fairshare_arguments(f)
    f.set_defaults(func=_cmd_fairshare)
    from scheduler.binder import add_arguments as bind_arguments

    bd = sub.add_parser(
        "bind", help="apply cycle records to Kubernetes: bind, evict, pending reasons (docs/binder.md)"
    )
    bind_arguments(bd)
    bd.set_defaults(func=_cmd_bind)
    from scheduler.webhook import add_arguments as webhook_arguments

    wh = sub.add_parser(
        "webhook",
        help="the admission webhook that wires GPU-sharing pods to their devices (docs/gpu-sharing.md)",
    )
    webhook_arguments(wh)
    wh.set_defaults(func=_cmd_webhook)
    rs = sub.add_parser(
        "reserve",
        help="run inside a GPU reservation pod: report the reserved GPU, then hold it (docs/gpu-sharing.md)",
    )
    rs.add_argument(
        "--kubeconfig", default=None, help="kubeconfig file (default: in-cluster service account)"
    )
    rs.set_defaults(func=_cmd_reserve)
    from ingest.crds import add_arguments as crds_arguments

    ac = sub.add_parser(
        "apply-crds",
        help="install or upgrade the Queue / PodGroup / Topology CRDs with server-side apply (docs/deploy.md)",
    )
    crds_arguments(ac)
    ac.set_defaults(func=_cmd_apply_crds)
    from analytics.explain import add_arguments as explain_arguments

    ex = sub.add_parser("explain", help="why a pod is pending, bound or was evicted (docs/explain.md)")
    explain_arguments(ex)
    ex.set_defaults(func=_cmd_explain)
    _add_eta_check(sub)  # issue 16 items 3-4: eta and check
    from ingest.watcher import add_arguments as ingest_arguments

    ig = sub.add_parser(
        "ingest",
        help="watch Kubernetes (nodes, pods, queues, podgroups) into the events log (docs/ingest.md)",
    )
    ingest_arguments(ig)
    ig.set_defaults(func=_cmd_ingest)
    # -- hourglass whatif (issue 16 items 1-2): one block, so merges stay easy
    from analytics.whatif import add_arguments as whatif_arguments
    from analytics.whatif import run_cli as whatif_run

    wi = sub.add_parser(
        "whatif",
        help="re-run a recorded simulation under changed settings, recorded vs what-if per queue (docs/whatif.md)",
    )
    whatif_arguments(wi)
    wi.set_defaults(func=whatif_run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hourglass`` console script."""
    args = build_parser().parse_args(argv)
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
