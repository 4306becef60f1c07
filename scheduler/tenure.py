"""What ``hourglass run`` and ``hourglass bind`` hold while they work: a ``/metrics`` endpoint and, with
``--leader-elect``, the Lease; and the order in which both are let go.

Both commands start the same way: serve metrics first (so a standby's pod is ready while it waits), wait
as a standby for the Lease before opening the log (a FileLog admits one writer; a binder must bind
nothing until it leads), and on any exit release the Lease after the last API call, so a successor never
overlaps this instance's work.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ingest.kube.lease import LeaseElector
    from scheduler.metrics import BinderMetrics, MetricsServer, SchedulerMetrics

__all__ = ["Tenure"]


class Tenure:
    """One command's endpoint and Lease; messages name *command* (``run``, ``bind``)."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.server: MetricsServer | None = None
        self.elector: LeaseElector | None = None

    def serve_metrics(self, metrics: SchedulerMetrics | BinderMetrics, host: str, port: int) -> bool:
        """Serve *metrics* on *host*:*port*; False (the reason on stderr) when the address is unusable."""
        from scheduler.metrics import serve

        try:
            self.server = serve(metrics, host, port)
        except OSError as e:
            print(f"{self.command}: cannot serve metrics on {host}:{port}: {e}", file=sys.stderr)
            return False
        logging.getLogger(f"hourglass.{self.command}").info("metrics on %s", self.server.url)
        return True

    def lead(self, args: argparse.Namespace, default_lease: str) -> bool:
        """Block as a standby until this instance holds the Lease (at once without ``--leader-elect``).
        False when stopped while standby: the endpoint is closed and the command exits 0 without working.
        Bad settings raise :class:`~ingest.backends.StartupError`."""
        from ingest.kube.lease import elect

        self.elector = elect(self.command, args, default_lease)
        if self.elector is not None and not self.elector.is_leader:
            self.close()
            print(f"{self.command}: stopped while standby", file=sys.stderr)
            return False
        return True

    def close(self) -> None:
        """Release the Lease, then close the endpoint; safe to call more than once."""
        if self.elector is not None:
            self.elector.release()
        if self.server is not None:
            self.server.close()
            self.server = None

    def lost(self) -> bool:
        """Whether leadership was lost while working (said on stderr): the command exits 1 so that it
        restarts as a standby."""
        if self.elector is None or not self.elector.lost:
            return False
        print(
            f"{self.command}: lost the lease {self.elector.path}; exiting so that a standby takes over",
            file=sys.stderr,
        )
        return True
