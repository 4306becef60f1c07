"""The scheduler service loop (``hourglass run``): events in, one cycle record per cycle out.

Exactly-once by an idempotent scheme (no Kafka transactions), documented in ``docs/service.md``:

* A cycle is a pure function of (fold of the events log up to ``events_offset``, config, logical time),
  and its ``cycle_id`` is derived from those inputs (:func:`scheduler.engine.record.decisions.cycle_id`). Logical time
  is the ``at_ms`` of the last folded event, never the wall clock. The service keeps its session between
  cycles and patches it from the pods and pod groups the new events name (:mod:`scheduler.engine.kept`);
  the patched session equals the one built from the snapshot, so replays (which build afresh) verify.
* The **decisions topic is the source of truth** for progress. On start, :meth:`Service.recover` reads
  the tail of the decisions topic, takes the last recorded cycle's ``events_offset`` ``E`` and refolds
  the events log from 0 through ``E`` (the fold is deterministic, so this rebuilds exactly the state that
  cycle saw); processing resumes at ``E + 1``.
* Before appending a record the service checks its id against the ids read on start (and those it
  appended since): a cycle that is re-run after a crash produces the same id and is not appended twice.
* Dead letters are made idempotent the same way: on start the dead-letter topic is read and the
  ``(source_topic, source_offset)`` pairs already present are never dead-lettered again.
* Records are written as deltas (:mod:`scheduler.engine.record.delta`): the first record a service writes after
  it starts is a full checkpoint, then one every ``checkpoint_every`` records; every other record carries
  what changed since the record the service wrote just before it. A re-run cycle whose id is already
  recorded is not written, and the chain is unaffected: after a start nothing is written before the first
  checkpoint.
* Order of writes in a step: dead letters, then the cycle record, then the consumer commit of the events
  position. The commit is informational (monitoring, other tools); resumption does not depend on it.

Input is never trusted: a record that does not parse (bad JSON, schema, unknown version or type) or
that the fold rejects goes to the dead-letter topic as JSON ``{source_topic, source_offset,
reason_code, message, raw}`` and is skipped; the service keeps running.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from fairshare.record import UsageInput, UsageRecordError, parse_usage_record
from ingest.events import FAST_PATH, ClockTick, Event, EventError, FastEvent, dump_event, parse_event
from ingest.log import DEFAULT_TOPICS, Log, LogError, Record, Topics
from scheduler.engine.kept import Changes, KeptSession, run_kept_cycle
from scheduler.engine.record.decisions import CycleRecord
from scheduler.engine.record.delta import DEFAULT_CHECKPOINT_EVERY, DeltaEncoder
from scheduler.engine.record.inflight import (
    DEFAULT_BIND_DEADLINE_MS,
    InFlightBind,
    InFlightEvict,
    binds_in_flight,
    evictions_in_flight,
    track,
    track_evictions,
)
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import ClusterState, StateBuilder
from scheduler.metrics import (
    CycleTimer,
    SchedulerMetrics,
    capacity_of,
    observe_cycle,
    observe_dead_letters,
    proportion_seconds,
    timed_session_factory,
)

__all__ = [
    "DEFAULT_GROUP",
    "FOLD_REJECTED",
    "DeadLetter",
    "Folder",
    "RunStats",
    "Service",
    "dead_letter_bytes",
]

log = logging.getLogger(__name__)

DEFAULT_GROUP: Final = "hourglass-scheduler"
FOLD_REJECTED: Final = "fold_rejected"
UNPARSEABLE: Final = "unparseable"
BAD_USAGE: Final = "bad_usage_record"
_WAITING: Final = ("Unschedulable", "Pipeline")  # decisions that time alone may change
DECISIONS_TAIL: Final = 1000  # decision records read on start to find the last cycle and recorded ids


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Why one source record was not folded."""

    source_topic: str
    source_offset: int
    reason_code: str
    message: str
    raw: str  # the record's value as text (undecodable bytes backslash-escaped)

    def to_json(self) -> dict[str, Any]:
        return {
            "source_topic": self.source_topic,
            "source_offset": self.source_offset,
            "reason_code": self.reason_code,
            "message": self.message,
            "raw": self.raw,
        }


def dead_letter_bytes(d: DeadLetter) -> bytes:
    """Canonical JSON of a dead letter."""
    return json.dumps(d.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class Folder:
    """Parses and folds event records in offset order; the one fold used by the service and by replays.

    ``offset`` is the offset of the last *folded* (valid) event, ``-1`` before any; ``now_ms`` is that
    event's ``at_ms`` (the cycle's logical time).
    """

    def __init__(self, topic: str = DEFAULT_TOPICS.events, track_changes: bool = False) -> None:
        self.topic = topic
        self.builder = StateBuilder()
        self.now_ms = 0
        self.folded = 0
        # What was folded since take_changes, for the service's kept session (off for replays: it costs
        # ~0.2 us an event).
        self.changes = Changes(self.builder.offset) if track_changes else None

    @property
    def offset(self) -> int:
        return self.builder.offset

    def feed(self, record: Record) -> DeadLetter | None:
        """Fold one record; return a dead letter instead when it is invalid (never raises on input)."""
        try:
            # The compiled fast path decides valid events; pydantic decides (and explains) the rest.
            event: Event | FastEvent | None = FAST_PATH.decode(record.value)
            if event is None:
                event = parse_event(record.value)
        except EventError as exc:
            return self._dead(record, exc.reason_code, exc.message)
        except Exception as exc:  # parse_event promises EventError only; be safe anyway
            return self._dead(record, UNPARSEABLE, f"{type(exc).__name__}: {exc}")
        previous = self.builder.offset
        if self.changes is not None:
            self.changes.note(event)
        try:
            self.builder.apply(event, record.offset)
        except Exception as exc:
            self.builder.offset = previous
            return self._dead(record, FOLD_REJECTED, f"{type(exc).__name__}: {exc}")
        self.now_ms = event.at_ms
        self.folded += 1
        return None

    def snapshot(self) -> ClusterState:
        return self.builder.snapshot()

    def take_changes(self) -> Changes | None:
        """What was folded since the last call (or since the start), and start noting afresh; None when
        the folder does not track changes."""
        out = self.changes
        if out is not None:
            self.changes = Changes(self.builder.offset)
        return out

    def _dead(self, record: Record, reason: str, message: str) -> DeadLetter:
        raw = record.value.decode("utf-8", errors="backslashreplace")
        return DeadLetter(self.topic, record.offset, reason, message, raw)


@dataclass(slots=True)
class RunStats:
    """Counters of one :meth:`Service.run` (or of the service's lifetime, see ``Service.stats``)."""

    steps: int = 0
    records_read: int = 0
    events_folded: int = 0
    dead_letters: int = 0
    dead_letters_skipped: int = 0  # already in the dead-letter topic (re-read after a restart)
    cycles: int = 0
    cycles_appended: int = 0
    cycles_skipped: int = 0  # cycle_id already recorded
    usage_snapshots: int = 0  # valid usage snapshots read
    ticks: int = 0  # ClockTick events appended (periodic cycles)
    recovered_offset: int = -1  # events offset of the last recorded cycle found on start
    refolded: int = 0  # records refolded on start
    cycle_seconds: float = 0.0
    fold_seconds: float = 0.0
    sessions_patched: int = 0  # cycles run on the last cycle's session, patched (engine/kept.py)
    last_cycle: CycleRecord | None = field(default=None, repr=False)


class Service:
    """The scheduler loop over a :class:`~ingest.log.Log`. Single instance per topic set.

    ``Service(log, topics, config).run()`` recovers (see the module doc), then repeats :meth:`step`:
    read up to ``batch_size`` events, fold / dead-letter them, run a cycle if the folded offset
    advanced, append its record unless its id is already recorded, commit the events position.
    """

    def __init__(
        self,
        log: Log,
        topics: Topics = DEFAULT_TOPICS,
        config: SessionConfig | None = None,
        *,
        group: str = DEFAULT_GROUP,
        batch_size: int = 1000,
        poll_interval_s: float = 0.05,
        sleep: Callable[[float], None] = time.sleep,
        metrics: SchedulerMetrics | None = None,
        period_s: float | None = None,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        monotonic: Callable[[], float] = time.monotonic,
        checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
        bind_deadline_ms: int = DEFAULT_BIND_DEADLINE_MS,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if bind_deadline_ms < 1:
            raise ValueError(f"bind_deadline_ms must be >= 1, got {bind_deadline_ms}")
        # A Bind whose PodBound has not been folded counts as placed for this much logical time.
        self.bind_deadline_ms = bind_deadline_ms
        self._stale_timed = False  # the last cycle timed a stale gang's grace (stale_gang.py)
        self.tracked_evicts: dict[str, InFlightEvict] = {}  # Evicts whose deletion is not folded yet
        self.tracked_binds: dict[str, InFlightBind] = {}  # after the last cycle (scheduler/engine/record/inflight.py)
        self.log = log
        self.topics = topics
        self.config = config or SessionConfig()
        self.group = group
        self.batch_size = batch_size
        self.poll_interval_s = poll_interval_s
        self._sleep = sleep
        self.metrics = metrics  # Prometheus metrics (scheduler/metrics.py), observed after each cycle
        # Periodic cycles: when idle for period_s with something waiting, append a ClockTick (see tick()).
        self.period_s = period_s
        self._clock_ms = clock_ms
        self._monotonic = monotonic
        self._last_cycle_at = monotonic()
        self._waiting = False  # the last cycle (run or recovered) left an Unschedulable / Pipeline decision
        self.folder = Folder(topics.events, track_changes=True)
        self.position = 0  # next events offset to read
        self.cycled_offset = -1  # events offset of the last cycle run (or found recorded)
        self.usage_position = 0  # next usage-topic offset to read
        self.usage: UsageInput | None = None  # the latest usage snapshot read
        self.cycled_usage: str | None = None  # usage snapshot id of the last cycle run (or found recorded)
        self.recorded_ids: set[str] = set()
        self.dead_seen: set[tuple[str, int]] = set()
        self.stats = RunStats()
        self.encoder = DeltaEncoder(checkpoint_every)  # a fresh encoder: the first record is a checkpoint
        # The last cycle's session, patched for the next one; with metrics, its division is timed.
        self.kept = (
            KeptSession()
            if metrics is None
            else KeptSession(timed_session_factory(time.perf_counter), clock=time.perf_counter)
        )
        self._recovered = False
        self._stop = False
        self._computing = False  # inside a cycle's pure computation, which writes nothing (see interrupt)

    # -- start-up ----------------------------------------------------------------------------

    def recover(self) -> None:
        """Find the last recorded cycle and refold the events log through its offset."""
        self._read_dead_letters()
        last = self._read_decisions_tail()
        if last is not None:
            target = int(last["events_offset"])
            self.stats.recovered_offset = target
            while self.position <= target:
                records = self.log.read(self.topics.events, self.position, self.batch_size)
                if not records:
                    break
                records = [r for r in records if r.offset <= target]
                self._fold(records)
                self.stats.refolded += len(records)
                self.position = records[-1].offset + 1
            if self.folder.offset != target:
                # The events log is shorter than the history already decided on (truncated, deleted,
                # or a different log): resuming would hand new events offsets that cycles already
                # cover, and they would never be folded.
                raise LogError(
                    f"{self.topics.events} ends at offset {self.folder.offset}, but the last recorded"
                    f" cycle folded it through offset {target}: the events log has lost records;"
                    " refusing to start (restore the log, or start a new log directory)"
                )
            if self.folder.now_ms != last.get("logical_time_ms"):
                log.warning(
                    "recovery: the last cycle ran at logical time %s, the refold gives %d",
                    last.get("logical_time_ms"),
                    self.folder.now_ms,
                )
            self.cycled_offset = self.folder.offset
            self.position = max(self.position, target + 1)
            self._recover_usage(last.get("usage_snapshot_id"))
            self._recover_binds(last)
            decisions = last.get("decisions")
            # A delta lists only changed pending jobs: assume something waits (a tick re-decides it).
            self._waiting = last.get("kind") == "delta" or (
                isinstance(decisions, list)
                and any(isinstance(d, dict) and d.get("kind") in _WAITING for d in decisions)
            )
        self._recovered = True
        log.info(
            "recovered: %d recorded cycle ids, resuming at events offset %d",
            len(self.recorded_ids),
            self.position,
        )

    def _recover_binds(self, last: dict[str, Any]) -> None:
        """Track the Binds the last recorded cycle left in flight (its record alone tells them)."""
        try:
            record = CycleRecord.model_validate(last)
        except ValueError as exc:
            log.warning("recovery: the last cycle record does not parse (%s); no binds tracked", exc)
            return
        self.tracked_binds = track({}, record)
        self.tracked_evicts = track_evictions({}, record)

    def _recover_usage(self, snapshot_id: Any) -> None:
        """Position the usage topic just after the snapshot the last recorded cycle used."""
        self.cycled_usage = snapshot_id if isinstance(snapshot_id, str) else None
        if self.cycled_usage is None:
            return
        found = False
        end = self.log.end_offset(self.topics.usage)
        for r in self.log.scan(self.topics.usage):
            if r.offset >= end:
                break
            try:
                u = parse_usage_record(r.value)
            except UsageRecordError:
                continue
            if u.id == self.cycled_usage:
                self.usage, self.usage_position, found = u, r.offset + 1, True
        if not found:
            log.warning(
                "recovery: usage snapshot %s of the last cycle is not in %s; reading usage from its end",
                self.cycled_usage,
                self.topics.usage,
            )
            self.usage_position = end

    def _read_usage(self) -> list[DeadLetter]:
        """Read new usage snapshots; the latest valid one becomes the input of the next cycle."""
        dead: list[DeadLetter] = []
        while True:
            records = self.log.read(self.topics.usage, self.usage_position, 1000)
            if not records:
                return dead
            for r in records:
                try:
                    self.usage = parse_usage_record(r.value)
                    self.stats.usage_snapshots += 1
                except UsageRecordError as exc:
                    raw = r.value.decode("utf-8", errors="backslashreplace")
                    dead.append(DeadLetter(self.topics.usage, r.offset, BAD_USAGE, str(exc), raw))
            self.usage_position = records[-1].offset + 1

    def _read_dead_letters(self) -> None:
        for r in self.log.scan(self.topics.deadletter, batch=5000):
            try:
                d = json.loads(r.value)
                self.dead_seen.add((str(d["source_topic"]), int(d["source_offset"])))
            except (ValueError, KeyError, TypeError):
                continue

    def _read_decisions_tail(self) -> dict[str, Any] | None:
        end = self.log.end_offset(self.topics.decisions)
        at = max(0, end - DECISIONS_TAIL)
        last: dict[str, Any] | None = None
        while at < end:
            records = self.log.read(self.topics.decisions, at, 100)
            if not records:
                break
            for r in records:
                try:
                    d = json.loads(r.value)
                    cid, offset = d["cycle_id"], d["events_offset"]
                except (ValueError, KeyError, TypeError):
                    log.warning("decisions offset %d is not a cycle record; ignored", r.offset)
                    continue
                if isinstance(cid, str) and isinstance(offset, int):
                    self.recorded_ids.add(cid)
                    if last is None or offset >= int(last["events_offset"]):
                        last = d
            at = records[-1].offset + 1
        return last

    # -- the loop ----------------------------------------------------------------------------

    def _fold(self, records: list[Record]) -> list[DeadLetter]:
        dead = []
        for r in records:
            d = self.folder.feed(r)
            if d is not None:
                dead.append(d)
        return dead

    def step(self) -> bool:
        """Process one batch of events and any new usage snapshots; False when there was nothing new.

        A cycle runs when the folded events offset moved or a new usage snapshot arrived. Its logical
        time is the later of the last folded event's ``at_ms`` and the snapshot's ``as_of_ms``.
        """
        if not self._recovered:
            self.recover()
        records = self.log.read(self.topics.events, self.position, self.batch_size)
        usage_before = self.usage_position
        dead = self._read_usage()
        st = self.stats
        usage_id = self.usage.id if self.usage is not None else None
        if not records and self.usage_position == usage_before:
            return False
        st.steps += 1
        if records:
            st.records_read += len(records)
            t0 = time.perf_counter()
            folded_before = self.folder.folded
            dead += self._fold(records)
            st.events_folded += self.folder.folded - folded_before
            st.fold_seconds += time.perf_counter() - t0
            self.position = records[-1].offset + 1
        fresh = [d for d in dead if (d.source_topic, d.source_offset) not in self.dead_seen]
        st.dead_letters_skipped += len(dead) - len(fresh)
        if fresh:
            self.log.append_many(
                self.topics.deadletter,
                [(f"{d.source_topic}:{d.source_offset}".encode(), dead_letter_bytes(d)) for d in fresh],
            )
            self.dead_seen.update((d.source_topic, d.source_offset) for d in fresh)
            st.dead_letters += len(fresh)
            if self.metrics is not None:
                observe_dead_letters(self.metrics, [d.reason_code for d in fresh])
        moved = self.folder.offset > self.cycled_offset
        if self.folder.offset >= 0 and (moved or usage_id != self.cycled_usage):
            self._cycle()
        if records:
            self.log.commit(self.group, self.topics.events, self.position)
        return True

    def _cycle(self) -> None:
        st = self.stats
        u = self.usage
        now_ms = max(self.folder.now_ms, u.as_of_ms) if u is not None else self.folder.now_ms
        t1 = time.perf_counter()
        usage = u.usage if u is not None else None
        usage_id = u.id if u is not None else None
        # The session is kept between cycles and patched from the new snapshot (scheduler/engine/kept.py):
        # it equals the one run_cycle opens afresh, so the record is run_cycle's.
        self._computing = True
        try:
            record = self._compute(now_ms, usage, usage_id)
        finally:
            self._computing = False
        st.cycle_seconds += time.perf_counter() - t1
        st.cycles += 1
        st.sessions_patched = self.kept.patched
        st.last_cycle = record
        self.tracked_binds = track({}, record)
        self.tracked_evicts = track_evictions({}, record)
        if record.cycle_id in self.recorded_ids:
            st.cycles_skipped += 1
        else:
            written = self.encoder.encode(record)
            self.log.append(self.topics.decisions, record.cycle_id.encode(), written.dumps())
            self.recorded_ids.add(record.cycle_id)
            st.cycles_appended += 1
        self.cycled_offset = self.folder.offset
        self.cycled_usage = u.id if u is not None else None
        self._last_cycle_at = self._monotonic()
        # A stale gang's grace ends with time alone: keep ticking while one is being timed, too.
        self._waiting = any(d.kind in _WAITING for d in record.decisions) or self._stale_timed

    def _compute(
        self, now_ms: int, usage: dict[str, dict[str, float]] | None, usage_id: str | None
    ) -> CycleRecord:
        """The cycle's record: pure, nothing written (so :meth:`interrupt` may abandon it)."""
        state, builder, changes = self.folder.snapshot(), self.folder.builder, self.folder.take_changes()
        # Binds of earlier cycles whose PodBound has not been folded yet count as placed (inflight.py).
        in_flight = binds_in_flight(self.tracked_binds.values(), state, now_ms, self.bind_deadline_ms)
        # Evicts whose deletion has not been folded yet: the victims count as releasing, not evicted again.
        evicting = evictions_in_flight(self.tracked_evicts.values(), state, now_ms, self.bind_deadline_ms)
        timer = CycleTimer() if self.metrics is not None else None
        record, ssn = run_kept_cycle(
            self.kept,
            state,
            self.config,
            now_ms,
            usage,
            usage_id,
            builder=builder,
            changes=changes,
            in_flight=in_flight,
            evicting=evicting,
            on_step=timer.step if timer is not None else None,
        )
        self._stale_timed = any(j.stale_since_ms is not None for j in ssn.jobs)
        if self.metrics is not None and timer is not None:
            if "divide" in self.kept.timings:  # patched: time the division as a fresh timed session does
                ssn.plugin_seconds = proportion_seconds(self.kept.timings["divide"])  # type: ignore[attr-defined]
            observe_cycle(
                self.metrics,
                record,
                timer.durations,
                capacity=capacity_of(ssn),
                session=ssn,
                searches=timer.searches,
            )
        return record

    def tick(self) -> bool:
        """Append a :class:`~ingest.events.ClockTick` at the wall clock when time alone can change a decision.

        Only when the last cycle left something waiting (an ``Unschedulable`` or ``Pipeline`` decision, or a
        stale gang whose grace is being timed) and the clock is past the logical time: a pending job may become placeable because a min-runtime
        protection ran out or a stale gang's grace ended; or when a tracked bind in flight has passed its
        deadline (its pod is pending again). The tick goes through the events log like any
        other input, so the cycle it triggers is recorded with its time and replays exactly. True if
        appended.
        """
        now = self._clock_ms()
        # A bind in flight past its deadline frees its node only in a cycle: tick for it too.
        expired = any(now - b.decided_ms >= self.bind_deadline_ms for b in self.tracked_binds.values())
        if not (self._waiting or expired) or now <= self.folder.builder.latest_ms:
            return False
        self.log.append(self.topics.events, b"clock", dump_event(ClockTick(at_ms=now)))
        self.stats.ticks += 1
        return True

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current step."""
        self._stop = True

    def interrupt(self) -> None:
        """Stop now (a SIGTERM handler): :meth:`stop`, and if a cycle is being computed, abandon it by
        raising :class:`KeyboardInterrupt` there. A cycle writes nothing until its record is made, and a
        restart recovers from the records written (exactly-once), so nothing is lost or doubled."""
        self._stop = True
        if self._computing:
            raise KeyboardInterrupt("SIGTERM during a cycle")

    def run(self, max_steps: int | None = None, stop_when_idle: bool = False) -> RunStats:
        """Recover, then step until ``max_steps`` batches were processed, or idle (``stop_when_idle``),
        or :meth:`stop`. Idle polls sleep ``poll_interval_s``. Returns the lifetime counters."""
        if not self._recovered:
            self.recover()
        done = 0
        while not self._stop and (max_steps is None or done < max_steps):
            if self.step():
                done += 1
                continue
            if stop_when_idle:
                break
            if self.period_s is not None and self._monotonic() - self._last_cycle_at >= self.period_s:
                self._last_cycle_at = self._monotonic()  # at most one tick per period, appended or not
                if self.tick():
                    continue
            self._sleep(self.poll_interval_s)
        return self.stats
