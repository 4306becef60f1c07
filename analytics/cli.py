"""The ``hourglass`` command line: one entry point, one subcommand per job, each owned by its component.

:data:`COMMANDS` is the table: a subcommand's name, its one-line help and the module that owns it, which
provides the flags (``add_arguments``) and the handler (``run_cli``) under the names the row gives. A new
subcommand is a new row, not an edit of a long parser function.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: where its flags and its handler live."""

    name: str
    help: str
    module: str
    add: str = "add_arguments"
    run: str = "run_cli"

    def attach(self, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        """Add this subcommand's parser to `sub`, its handler as ``func``."""
        owner = importlib.import_module(self.module)
        parser = sub.add_parser(self.name, help=self.help)
        add: Callable[[argparse.ArgumentParser], None] = getattr(owner, self.add)
        add(parser)
        parser.set_defaults(func=getattr(owner, self.run))


COMMANDS: tuple[Command, ...] = (
    Command(
        "conformance",
        "run the conformance scenario files (KAI's and Hourglass's real-node ones)",
        "scheduler.conformance.command",
    ),
    Command(
        "simulate",
        "replay the Alibaba GPU trace, or a --config scenario, through the engine on a simulated clock"
        " (docs/simulate.md)",
        "analytics.simulation.cli",
    ),
    Command(
        "placement-benchmark",
        "FGD-paper placement benchmark on the Alibaba GPU trace (docs/placement-benchmark.md)",
        "analytics.simulation.placement_benchmark",
    ),
    Command(
        "replay",
        "re-run the recorded cycles of a run dir, a log dir or kafka://HOST:PORT from the event log;"
        " --verify compares (docs/replay.md)",
        "analytics.rerun.replay",
    ),
    Command(
        "sql",
        "read-only SQL over the audit store (docs/sql.md)",
        "analytics.audit.commands",
        add="add_sql_arguments",
        run="run_sql",
    ),
    Command(
        "report",
        "fairness usage report per queue over a time window (docs/report.md)",
        "analytics.reports.commands",
    ),
    Command(
        "run",
        "the scheduler service: events -> cycle records, exactly once (docs/service.md)",
        "scheduler.command",
    ),
    Command(
        "sink",
        "load the log's events, usage snapshots and cycle records into a DuckDB audit store",
        "analytics.audit.commands",
        add="add_sink_arguments",
        run="run_sink",
    ),
    Command(
        "fairshare",
        "publish decayed per-queue usage snapshots to the usage topic (docs/fairshare.md)",
        "fairshare.service",
        run="cli_main",
    ),
    Command(
        "bind",
        "apply cycle records to Kubernetes: bind, evict, pending reasons (docs/binder.md)",
        "scheduler.kube.binder",
    ),
    Command(
        "webhook",
        "the admission webhook that wires GPU-sharing pods to their devices (docs/gpu-sharing.md)",
        "scheduler.kube.webhook",
    ),
    Command(
        "reserve",
        "run inside a GPU reservation pod: report the reserved GPU, then hold it (docs/gpu-sharing.md)",
        "scheduler.kube.reservation",
        add="add_reserve_arguments",
        run="reserve_cli",
    ),
    Command(
        "apply-crds",
        "install or upgrade the Queue / PodGroup / Topology CRDs with server-side apply (docs/deploy.md)",
        "ingest.kube.crds",
    ),
    Command(
        "explain",
        "why a pod is pending, bound or was evicted (docs/explain.md)",
        "analytics.reports.explain",
    ),
    Command(
        "eta",
        "when will this pending pod start: a range from forward simulations with learnt run times;"
        " --backtest LOG scores it (docs/eta.md)",
        "analytics.forecast.eta",
    ),
    Command(
        "check",
        "would this pod / pod group be scheduled right now, where, and if not why (nothing is submitted;"
        " docs/eta.md)",
        "analytics.forecast.check",
    ),
    Command(
        "ingest",
        "watch Kubernetes (nodes, pods, queues, podgroups) into the events log (docs/ingest.md)",
        "ingest.kube.watcher",
    ),
    Command(
        "whatif",
        "re-run a recorded simulation under changed settings, recorded vs what-if per queue (docs/whatif.md)",
        "analytics.rerun.whatif",
    ),
)


def _version() -> str:
    try:
        return version("hourglass")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The ``hourglass`` parser with every row of :data:`COMMANDS`."""
    p = argparse.ArgumentParser(prog="hourglass", description="Hourglass: an event-sourced GPU scheduler.")
    p.add_argument("--version", action="version", version=f"hourglass {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.attach(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hourglass`` console script."""
    args = build_parser().parse_args(argv)
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
