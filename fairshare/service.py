"""``hourglass fairshare``: recompute decayed usage on an interval and publish :class:`UsageSnapshot` records.

Each :meth:`FairshareService.step`:

1. reads the new records of the events topic into an :class:`~fairshare.ledger.EventLedger` (from the
   offset it remembers; bad records are counted and skipped, dead-lettering them is the scheduler's job,
   so one bad event does not get two dead letters). The ledger is the usage source for
   ``--source eventlog`` and gives the queue tree for both sources;
2. picks the as-of time: the ``at_ms`` of the last folded event for the event log (logical time, no wall
   clock), the wall clock for Prometheus (its input is wall-clock samples; the time is recorded in the
   snapshot);
3. advances the decayed usage incrementally from the previous as-of (a full recomputation every
   ``full_every`` steps and after any failure, so rounding cannot drift), rolls leaf usage up to parents,
   and publishes the snapshot, unless its id equals the last published one (no duplicates, also across a
   restart: the last record of the usage topic is read at start).

When the source raises :class:`~fairshare.source.SourceUnavailable`, nothing is published while the last
good snapshot is younger than ``staleness_s`` (the scheduler keeps using it, as KAI does); after that one
explicit ``available=False`` snapshot with the reason is published, and the next successful computation
publishes a normal snapshot again.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from fairshare.config import FairshareConfig, FairshareConfigError, describe_errors
from fairshare.decay import DecayedUsage, roll_up
from fairshare.ledger import EventLedger
from fairshare.metrics import FairshareMetrics
from fairshare.settings import add_settings_arguments, cli_overrides, load_settings
from fairshare.snapshot import SNAPSHOT_KEY, SnapshotError, UsageSnapshot, WindowSpec
from fairshare.source import SourceUnavailable, UsageSource
from ingest.log import DEFAULT_TOPICS, Log, LogError, Topics

__all__ = ["FairshareService", "ServiceStats", "SourceName", "add_arguments", "cli_main", "load_config"]

_log = logging.getLogger(__name__)

SourceName = Literal["eventlog", "prometheus"]


def _round(x: float) -> float:
    # 12 significant digits: far below anything the division can see, far above the ~1e-15 relative
    # difference between an incremental and a full computation, so both give the same snapshot id.
    return float(f"{x:.12g}")


def _round_nested(v: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {q: {r: _round(x) for r, x in per.items()} for q, per in v.items()}


def wall_clock_ms() -> int:
    """Milliseconds since the epoch (the Prometheus source's as-of time)."""
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class ServiceStats:
    """Counters over the service's lifetime."""

    steps: int = 0
    events_read: int = 0
    bad_records: int = 0
    computed: int = 0
    full_recomputes: int = 0
    published: int = 0
    duplicates_skipped: int = 0
    failures: int = 0
    unavailable_published: int = 0
    last_compute_seconds: float = 0.0


#: How soon a waiting service notices stop() (a SIGTERM).
STOP_POLL_S = 0.1


class FairshareService:
    """The fairshare loop over a :class:`~ingest.log.Log`: events in, usage snapshots out."""

    def __init__(
        self,
        log: Log,
        cfg: FairshareConfig,
        *,
        topics: Topics = DEFAULT_TOPICS,
        source_name: SourceName = "eventlog",
        source: UsageSource | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        batch_size: int = 5000,
        full_every: int = 100,
        sleep: Callable[[float], None] | None = None,
        metrics: FairshareMetrics | None = None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        if source_name == "prometheus" and source is None:
            raise ValueError("the prometheus source needs a UsageSource instance")
        if batch_size < 1 or full_every < 1:
            raise ValueError(f"batch_size and full_every must be >= 1, got {batch_size}, {full_every}")
        self.log = log
        self.cfg = cfg
        self.topics = topics
        self.source_name: SourceName = source_name
        self.ledger = EventLedger()
        self.source: UsageSource = source if source is not None else self.ledger
        self._clock = clock_ms
        self.batch_size = batch_size
        self.full_every = full_every
        # The default sleep wakes on stop(): a plain time.sleep resumes after the SIGTERM handler and would
        # hold the process for the rest of refresh_s (a minute by default).
        self._sleep = sleep if sleep is not None else self._sleep_unless_stopped
        # KAI's usage_query_latency_milliseconds (``--metrics-port``): each successful usage computation.
        self.metrics = metrics
        self._timer = timer
        self.position = 0  # next events offset to read
        self.state: DecayedUsage | None = None
        self._since_full = 0
        self.last_good: UsageSnapshot | None = None
        self.last_published: UsageSnapshot | None = None
        self.stats = ServiceStats()
        self._stop = False
        self._read_last_published()

    # -- start-up -----------------------------------------------------------------------------

    def _read_last_published(self) -> None:
        end = self.log.end_offset(self.topics.usage)
        if end == 0:
            return
        records = self.log.read(self.topics.usage, end - 1, 1)
        if not records:
            return
        try:
            self.last_published = UsageSnapshot.from_bytes(records[0].value)
        except SnapshotError as err:
            _log.warning("fairshare: ignoring the last usage record (offset %d): %s", records[0].offset, err)
            return
        if self.last_published.available:
            self.last_good = self.last_published

    # -- one step -----------------------------------------------------------------------------

    def _read_events(self) -> None:
        while True:
            records = self.log.read(self.topics.events, self.position, self.batch_size)
            if not records:
                return
            for rec in records:
                if not self.ledger.fold_record(rec.value):
                    self.stats.bad_records += 1
                self.position = rec.offset + 1
            self.stats.events_read += len(records)

    def _as_of(self) -> int | None:
        if self.source_name == "eventlog":
            return self.ledger.as_of_ms
        return self._clock()

    def _compute(self, as_of: int) -> UsageSnapshot:
        started = time.perf_counter()
        if self.state is None or self._since_full >= self.full_every or as_of < self.state.as_of_ms:
            self.state = DecayedUsage.compute(self.source, as_of, self.cfg)
            self._since_full = 0
            self.stats.full_recomputes += 1
        else:
            self.state = self.state.advance(self.source, as_of, self.cfg)
            self._since_full += 1
        if self._since_full == 0:
            # Nothing before the window start can be needed again (the next advance subtracts from it);
            # pruning only on full recomputations keeps the cost of a step proportional to new history.
            horizon = self.state.window_start_ms if self.source is self.ledger else None
            if horizon is None and self.ledger.as_of_ms is not None:
                horizon = self.ledger.as_of_ms - self.cfg.window_ms  # tree only: keep a window of rows
            if horizon is not None:
                self.ledger.prune(horizon)
        vectors = roll_up(self.state.vectors(), self.ledger.parents())
        self.stats.computed += 1
        self.stats.last_compute_seconds = time.perf_counter() - started
        return UsageSnapshot(
            as_of_ms=as_of,
            window=WindowSpec.of(self.cfg),
            source=self.source_name,
            queues=_round_nested(vectors.normalised),
            raw=_round_nested(vectors.raw),
            capacity={r: _round(v) for r, v in vectors.capacity.items()},
        )

    def _publish(self, snap: UsageSnapshot) -> bool:
        if self.last_published is not None and self.last_published.id == snap.id:
            self.stats.duplicates_skipped += 1
            return False
        self.log.append(self.topics.usage, SNAPSHOT_KEY, snap.to_bytes())
        self.last_published = snap
        self.stats.published += 1
        return True

    def _unavailable(self, reason: str) -> UsageSnapshot | None:
        self.stats.failures += 1
        self.state = None  # recompute fully once the source answers again
        now = self._as_of()
        now = now if now is not None else 0
        if self.last_published is not None and not self.last_published.available:
            _log.warning("fairshare: usage still unavailable: %s", reason)
            return None
        if self.last_good is not None and now - self.last_good.as_of_ms <= self.cfg.staleness_s * 1000:
            age_s = (now - self.last_good.as_of_ms) / 1000
            _log.warning(
                "fairshare: %s; serving the last snapshot %s (%.0f s old, stale after %d s)",
                reason,
                self.last_good.id,
                age_s,
                self.cfg.staleness_s,
            )
            return None
        if self.last_good is not None:
            why = f"{reason} (last good snapshot {self.last_good.id} at {self.last_good.as_of_ms} is older than {self.cfg.staleness_s} s)"
        else:
            why = f"{reason} (no usage computed yet)"
        snap = UsageSnapshot(
            as_of_ms=now, window=WindowSpec.of(self.cfg), source=self.source_name, available=False, reason=why
        )
        _log.error("fairshare: publishing an unavailable snapshot: %s", why)
        self._publish(snap)
        self.stats.unavailable_published += 1
        return snap

    def step(self) -> UsageSnapshot | None:
        """One refresh. Returns the snapshot published by this step, or ``None`` if nothing was published."""
        self.stats.steps += 1
        try:
            self._read_events()
        except LogError as err:
            if self.source is self.ledger:
                return self._unavailable(f"cannot read {self.topics.events}: {err}")
            # Prometheus does not need the events, only the queue tree from them: keep the one we have.
            _log.warning(
                "fairshare: cannot read %s, using the queue tree read so far: %s", self.topics.events, err
            )
        as_of = self._as_of()
        if as_of is None:
            _log.info("fairshare: no events yet, nothing to compute")
            return None
        if self.state is not None and as_of == self.state.as_of_ms and self.source is self.ledger:
            return None  # no new event: the logical time and the usage are unchanged
        started = self._timer()
        try:
            snap = self._compute(as_of)
        except SourceUnavailable as err:
            return self._unavailable(f"{self.source_name} source unavailable: {err}")
        except Exception as err:  # whatever the data did, the scheduler gets a reason rather than silence
            _log.exception("fairshare: computing usage failed")
            return self._unavailable(
                f"computing usage from the {self.source_name} source failed: {type(err).__name__}: {err}"
            )
        if self.metrics is not None:  # as KAI: only a fetch that returned usage is observed
            self.metrics.usage_query_latency.observe_seconds(self._timer() - started)
        self.last_good = snap
        return snap if self._publish(snap) else None

    # -- the loop -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current step (at once when it is waiting between steps)."""
        self._stop = True

    def _sleep_unless_stopped(self, seconds: float) -> None:
        # Short slices rather than a threading.Event: stop() runs in a signal handler, and Event.set there
        # can deadlock on the lock the interrupted wait holds.
        deadline = time.monotonic() + seconds
        while not self._stop:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, STOP_POLL_S))

    def run(self, *, interval_s: float | None = None, max_steps: int | None = None) -> ServiceStats:
        """Repeat :meth:`step` every ``interval_s`` (default ``refresh_s``) until :meth:`stop` or
        ``max_steps``. Returns the lifetime counters."""
        interval = self.cfg.refresh_s if interval_s is None else interval_s
        done = 0
        while not self._stop and (max_steps is None or done < max_steps):
            snap = self.step()
            done += 1
            if snap is not None:
                _log.info(
                    "fairshare: published %s as of %d (%s, %d queues, %.3f s)",
                    snap.id,
                    snap.as_of_ms,
                    "available" if snap.available else "unavailable",
                    len(snap.queues),
                    self.stats.last_compute_seconds,
                )
            if self._stop or (max_steps is not None and done >= max_steps):
                break
            self._sleep(interval)
        return self.stats


# -- command line ------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``hourglass fairshare`` (the fair-share settings flags are shared with ``run``)."""
    p.add_argument("--log", required=True, help="a FileLog directory or kafka://HOST:PORT (as for `run`)")
    p.add_argument("--source", choices=("eventlog", "prometheus"), default="eventlog", help="usage history")
    p.add_argument(
        "--interval", type=float, default=None, help="seconds between refreshes (default refresh_s)"
    )
    p.add_argument("--once", action="store_true", help="compute and publish once, then exit")
    p.add_argument("--topic-prefix", default=None, help="use PREFIX.events, PREFIX.usage, ... as topics")
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus /metrics (KAI's kai_usage_query_latency_milliseconds) on this port",
    )
    p.add_argument(
        "--metrics-host", default="127.0.0.1", help="address for --metrics-port (default 127.0.0.1)"
    )
    add_settings_arguments(p, config_aliases=("--config",))


def load_config(path: str | None) -> tuple[FairshareConfig, dict[str, Any] | None]:
    """The fairshare settings and the raw ``prometheus:`` mapping of a config file alone (defaults without
    one); no environment or flags (:func:`fairshare.settings.load_settings` layers those)."""
    loaded = load_settings(path, environ={})
    return loaded.settings, loaded.prometheus


def cli_main(args: argparse.Namespace) -> int:
    """Run ``hourglass fairshare`` with parsed arguments; returns the exit code."""
    import signal

    from ingest.backends import StartupError, open_log_for

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        loaded = load_settings(args.fairshare_config, cli_overrides(args))
    except FairshareConfigError as err:
        print(f"fairshare: {err}", file=sys.stderr)
        return 2
    cfg, prom = loaded.settings, loaded.prometheus
    logging.getLogger("hourglass.fairshare").info("fair-share settings: %s", loaded.describe())
    source: UsageSource | None = None
    if args.source == "prometheus":
        from pydantic import ValidationError

        from fairshare.prometheus import PrometheusSource, PrometheusSourceConfig

        try:
            source = PrometheusSource(PrometheusSourceConfig.model_validate(prom or {}))
        except ValidationError as err:
            where = f" in {args.fairshare_config}" if args.fairshare_config else ""
            why = describe_errors(
                err,
                what=f"prometheus settings{where}",
                fields=PrometheusSourceConfig.model_fields,
                prefix="prometheus.",
            )
            print(f"fairshare: {why}", file=sys.stderr)
            return 2
    elif prom is not None:
        print("fairshare: the config has prometheus settings but --source is eventlog", file=sys.stderr)
        return 2
    topics = Topics.from_prefix(args.topic_prefix)
    try:
        log = open_log_for("fairshare", args.log, topics=topics.all(), role="fairshare")
    except StartupError as err:
        print(err, file=sys.stderr)
        return 2
    metrics = server = None
    if args.metrics_port is not None:
        from fairshare.metrics import serve_registry

        metrics = FairshareMetrics.create()
        try:
            server = serve_registry(metrics.registry, args.metrics_host, args.metrics_port)
        except OSError as err:
            log.close()
            print(
                f"fairshare: cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {err}",
                file=sys.stderr,
            )
            return 2
        _log.info("fairshare: metrics on %s", server.url)
    with log:
        try:
            service = FairshareService(
                log, cfg, topics=topics, source_name=args.source, source=source, metrics=metrics
            )
            signal.signal(signal.SIGTERM, lambda *_: service.stop())
            try:
                st = service.run(interval_s=args.interval, max_steps=1 if args.once else None)
            except KeyboardInterrupt:
                st = service.stats
        except LogError as err:  # the usage topic cannot be read or written: nothing sensible to serve
            print(f"fairshare: {err}", file=sys.stderr)
            return 2
        finally:
            if server is not None:
                server.close()
    last = service.last_published
    print(
        f"fairshare: {st.events_read} events read ({st.bad_records} bad), {st.computed} computations,"
        f" {st.published} snapshots published ({st.duplicates_skipped} duplicates skipped,"
        f" {st.unavailable_published} unavailable), last {last.id if last else '-'}"
        f" as of {last.as_of_ms if last else '-'}"
    )
    return 0
