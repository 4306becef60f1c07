"""``hourglass run``: the scheduler service's flags, its configuration checks, and its start."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scheduler.engine.record.delta import DEFAULT_CHECKPOINT_EVERY

#: The scheduler's default Lease (``--leader-elect``); a node-pool shard's carries its pool.
LEASE_NAME = "hourglass-scheduler"


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (a count where 0 or less is a mistake, not "none")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The command's flags (the fair-share settings' among them)."""
    p.add_argument("--log", required=True, help="a FileLog directory or kafka://HOST:PORT")
    p.add_argument(
        "--once",
        action="store_true",
        help="process one batch of events (at most one cycle) and exit, also when there is nothing new",
    )
    p.add_argument("--stop-when-idle", action="store_true", help="exit when no new events are left")
    p.add_argument("--batch-size", type=int, default=1000, help="events read per step (default 1000)")
    p.add_argument(
        "--poll-interval", type=float, default=0.05, help="seconds between polls when idle (default 0.05)"
    )
    p.add_argument("--topic-prefix", default=None, help="use PREFIX.events, PREFIX.decisions, ... as topics")
    p.add_argument(
        "--node-pool",
        default=None,
        metavar="POOL",
        help='the node pool this instance is the shard of (label kai.scheduler/node-pool; "" = the default shard, nodes without it): its own decisions topic; docs/deploy.md',
    )
    p.add_argument(
        "--engine-config",
        metavar="FILE",
        help="JSON/YAML mapping of engine settings (scheduler.engine.session.SessionConfig fields); replay needs"
        " the same file",
    )
    p.add_argument(
        "--stuck-in-releasing-threshold",
        default=None,
        metavar="DURATION",
        help="KAI's flag: how long (e.g. 2m, 90s) after a Running pod's deletion started its resources stop"
        " being releasing capacity pending pods may be pipelined onto; overrides the engine config's"
        " stuck_in_releasing_ms (default 2m, as KAI)",
    )
    p.add_argument(
        "--period",
        type=float,
        default=10.0,
        help="when idle this many seconds with jobs waiting, append a ClockTick (wall clock) so time-driven"
        " decisions (min-runtime, stale gangs) are taken and recorded; 0 = only on change (default 10)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=positive_int,
        default=DEFAULT_CHECKPOINT_EVERY,
        metavar="K",
        help="write a full cycle record every K records (and on start); the others carry only what changed"
        f" (default {DEFAULT_CHECKPOINT_EVERY}; 1 = every record full)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics on this port (docs/metrics.md); default: no endpoint",
    )
    p.add_argument(
        "--metrics-host", default="127.0.0.1", help="address for --metrics-port (default 127.0.0.1)"
    )
    from fairshare.settings import add_settings_arguments
    from ingest.kube.client import add_kubeconfig_argument
    from ingest.kube.lease import add_leader_election_arguments

    add_settings_arguments(p)
    add_leader_election_arguments(p, LEASE_NAME)
    add_kubeconfig_argument(p)  # only the Lease is read or written through it


def stuck_threshold_ms(text: str) -> int:
    """``--stuck-in-releasing-threshold`` (a Go duration such as ``2m``) in milliseconds; ValueError if not
    a positive duration (KAI keeps its default for <= 0, which a flag given on purpose should not hide)."""
    from ingest.kube.kai_shard import ShardError, _seconds

    try:
        ms = round(_seconds("--stuck-in-releasing-threshold", text) * 1000)
    except ShardError as e:
        raise ValueError(str(e)) from None
    if ms <= 0:
        raise ValueError(f"--stuck-in-releasing-threshold: {text!r} must be a positive duration such as 2m")
    return ms


def _engine_config_sets(path: str, name: str) -> bool:
    """Whether the engine config file names ``name`` explicitly (it was readable: load_engine_config passed)."""
    import yaml

    data = yaml.safe_load(Path(path).read_text())
    return isinstance(data, dict) and name in data


def run_cli(args: argparse.Namespace) -> int:
    """``hourglass run``: load the engine and fair-share settings, open the log, run the service."""
    import dataclasses
    import logging
    import signal

    from fairshare.config import FairshareConfigError
    from fairshare.settings import cli_overrides, load_settings
    from ingest.backends import StartupError, open_log_for
    from ingest.log import LogError, Topics
    from scheduler.config import EngineConfigError, load_engine_config
    from scheduler.engine.record.decisions import config_hash
    from scheduler.engine.session import SessionConfig
    from scheduler.service import Service

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    topics = Topics.from_prefix(args.topic_prefix).for_pool(args.node_pool)
    try:
        config = load_engine_config(args.engine_config) if args.engine_config else SessionConfig()
        if args.node_pool is not None:
            config = dataclasses.replace(config, node_pool=args.node_pool)
        if args.stuck_in_releasing_threshold is not None:
            config = dataclasses.replace(
                config, stuck_in_releasing_ms=stuck_threshold_ms(args.stuck_in_releasing_threshold)
            )
    except (EngineConfigError, ValueError) as e:
        print(f"run: {e}", file=sys.stderr)
        return 2
    # The fair-share settings (fairshare/settings.py) are the one source of k_value, shared with `fairshare`.
    try:
        fair = load_settings(args.fairshare_config, cli_overrides(args))
    except FairshareConfigError as e:
        print(f"run: {e}", file=sys.stderr)
        return 2
    k_value = fair.settings.k_value
    if (
        args.engine_config
        and _engine_config_sets(args.engine_config, "k_value")
        and config.k_value != k_value
    ):
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
    from scheduler.tenure import Tenure

    tenure = Tenure("run")
    metrics = None
    if args.metrics_port is not None:
        from scheduler.metrics import SchedulerMetrics

        metrics = SchedulerMetrics.create()
        if not tenure.serve_metrics(metrics, args.metrics_host, args.metrics_port):
            return 2
    try:
        if not tenure.lead(args, LEASE_NAME):
            return 0
        log = open_log_for(
            "run", args.log, topics=topics.all(), role=Topics.pool_role("scheduler", args.node_pool)
        )
    except StartupError as e:
        tenure.close()
        print(e, file=sys.stderr)
        return 2
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
            st = service.run(
                max_steps=1 if args.once else None, stop_when_idle=args.stop_when_idle or args.once
            )
        except KeyboardInterrupt:
            st = service.stats
        except LogError as e:  # a damaged or shrunken log: stop with the reason, never resume past it
            print(f"run: {e}", file=sys.stderr)
            return 2
        finally:
            tenure.close()
    print(
        f"run: {st.records_read} records read, {st.events_folded} events folded, {st.dead_letters} dead"
        f" letters, {st.cycles_appended} cycles appended ({st.cycles_skipped} already recorded),"
        f" events position {service.position}"
    )
    return 1 if tenure.lost() else 0
