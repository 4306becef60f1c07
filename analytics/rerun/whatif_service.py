"""``hourglass whatif`` on the log of a running deployment: an embedded log directory or ``kafka://…``.

The log is opened with :func:`analytics.rerun.replay.load_source`, the opener ``replay`` uses. A service log holds
what the cluster's users and nodes did *and* what came of the scheduler's decisions (the binder's binds,
evictions, the kubelets' ends of evicted pods), all as events; the what-if keeps the first and re-derives
the second (``docs/whatif.md``, "Service logs"):

* **taken from the log, at their recorded times and in their recorded order**: nodes, queues, topologies,
  pod groups, each pod's first submission, deletions of pods by their users (a ``PodDeleted`` that is not
  the clean-up after the pod ended), foreign pods, ungating, ``ClockTick`` s (the passage of time the
  service saw) and the usage snapshots of the usage topic (the fair-share service's, as recorded) — or,
  with usage recomputed (:func:`usage_config`), only their times: the real fair-share service then
  recomputes each from the what-if's own events, as of the snapshot's ``as_of_ms``;
* **taken from the log per pod, as durations**: how long each run its owner ended lasted (``PodBound`` to a
  ``PodFinished`` not caused by an eviction) and its phase; the bind delay (the cycle's ``Bind`` to the
  ``PodBound``), the eviction delay (``Evict`` to ``PodReleasing``), the eviction grace (``PodReleasing``
  to ``PodFinished``), the clean-up lags (``PodFinished`` to ``PodDeleted``, the last pod's ``PodDeleted`` to
  the ``PodGroupDeleted``) and the controller's re-submission lag of an evicted pod. The k-th bind of a
  pod takes the pod's k-th recorded bind delay, and so on; one the recording does not have takes the
  median of the log's (0 if it has none);
* **re-derived**: every cycle and decision. The driver runs the real :class:`scheduler.service.Service`
  over an in-memory log under the changed engine config: it folds what arrived, runs a cycle when the
  folded offset moved or a new usage snapshot arrived, at the later of the last event's ``at_ms`` and the
  snapshot's ``as_of_ms``. Each instant's inputs are appended together and the service steps until idle
  before the next instant (it keeps up with the log). A ``Bind`` becomes a ``PodBound`` after the bind
  delay (if the pod is still pending then), an ``Evict`` a ``PodReleasing``, then the end of the pod after
  the grace, its deletion and (if the recording re-submitted evicted pods) its re-submission; a bound pod
  ends after its recorded run, then is deleted, and its pod group after its last pod.

A pod that never ended by its owner in the recording runs for its recorded time so far (the longest run:
still running at the end, or evicted and never run to the end); one that never started runs to the end.
The re-run stops at the recording's end (or at TO of a ``--window``: see :class:`_Driver`).
"""

from __future__ import annotations

import bisect
import heapq
import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final, Protocol

from analytics.rerun.replay import ReplayError, load_source
from analytics.rundir import DirLog
from fairshare.config import FairshareConfig, FairshareConfigError
from fairshare.record import UsageInput, dump_usage_record
from fairshare.service import FairshareService
from fairshare.snapshot import SnapshotError, UsageSnapshot
from ingest import events as ev
from ingest.events import dump_event
from ingest.log import DEFAULT_TOPICS, Log, LogError, Record, Topics, check_read_args
from ingest.memlog import MemoryLog
from scheduler.engine.record.decisions import CycleRecord, config_hash
from scheduler.engine.record.delta import RecordChainError, expand_records
from scheduler.engine.session import SessionConfig
from scheduler.service import Service

__all__ = [
    "MemoryLog",
    "ServiceLogError",
    "ServiceRecording",
    "Setting",
    "load_service_recording",
    "log_window",
    "rerun",
    "service_config",
    "usage_config",
    "write_run_dir",
]

#: ``--set`` spellings of the engine config fields on a service log (besides the bare field name).
ALIASES: Final = {"fairshare.k_value": "k_value"}
_LAST: Final = 1 << 62  # order key of a generated event the recording has no twin of (after the recorded)


class ServiceLogError(ValueError):
    """The service log cannot be re-run as asked (unreadable log, config mismatch, bad setting)."""


class Setting(Protocol):
    """One ``--set KEY=VALUE`` (:class:`analytics.rerun.whatif.Change`): the key, its text and its value."""

    @property
    def key(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def value(self) -> Any: ...


class _AsOf(Log):
    """The what-if's log as the fair-share service sees it at a recorded snapshot: its events topic ends at
    the last event at or before the snapshot's ``as_of_ms`` (:meth:`until`); everything else is the log."""

    def __init__(self, log: MemoryLog, events: str) -> None:
        self.log = log
        self.events = events
        self.limit = 0

    def until(self, as_of_ms: int) -> None:
        """Show the events up to the last one at or before *as_of_ms* (they are appended in time order)."""
        recs = self.log.topics[self.events]
        while self.limit < len(recs) and json.loads(recs[self.limit].value)["at_ms"] <= as_of_ms:
            self.limit += 1

    def append(self, topic: str, key: bytes | None, value: bytes) -> int:
        """Append to the log (the fair-share service publishes to the usage topic)."""
        return self.log.append(topic, key, value)

    def append_many(self, topic: str, records: Iterable[tuple[bytes | None, bytes]]) -> list[int]:
        """Append records to the log in order."""
        return self.log.append_many(topic, records)

    def read(self, topic: str, from_offset: int, max_records: int = 1000) -> list[Record]:
        """The log's records; on the events topic none past the limit."""
        if topic == self.events:
            max_records = max(min(max_records, self.limit - from_offset), 0)
            check_read_args(from_offset, max(max_records, 1))
            return self.log.topics[topic][from_offset : from_offset + max_records]
        return self.log.read(topic, from_offset, max_records)

    def end_offset(self, topic: str) -> int:
        """The log's end; on the events topic the limit."""
        return self.limit if topic == self.events else self.log.end_offset(topic)

    def commit(self, group: str, topic: str, offset: int) -> None:
        """Remember *group*'s position."""
        self.log.commit(group, topic, offset)

    def committed(self, group: str, topic: str) -> int:
        """*group*'s position."""
        return self.log.committed(group, topic)

    def close(self) -> None:
        """Nothing to release."""


def _median(values: Sequence[int]) -> int:
    return int(statistics.median_low(values)) if values else 0


@dataclass(slots=True)
class _Lags:
    """One kind of recorded delay: per pod, in order of occurrence; the log's median for the rest."""

    per_pod: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    everyone: list[int] = field(default_factory=list)

    def add(self, uid: str, value: int) -> None:
        self.per_pod[uid].append(value)
        self.everyone.append(value)

    def of(self, uid: str, k: int) -> int:
        mine = self.per_pod.get(uid)
        if mine is not None and k < len(mine):
            return mine[k]
        return _median(self.everyone)


@dataclass(slots=True)
class ServiceRecording:
    """What a what-if takes from a service log (see the module doc)."""

    spec: str
    config: SessionConfig  # the engine config the recorded cycles were made with
    events: list[dict[str, Any]]  # the recording's valid events as dicts (its measured side)
    records: list[CycleRecord]  # the recorded cycles, full
    inputs: list[tuple[int, int, int, bytes]]  # (at, order, topic 0 events / 1 usage, bytes) kept as recorded
    twins: dict[tuple[str, str, int], list[int]]  # (type, uid, at) -> offsets of recorded events
    first_submit: dict[str, bytes]  # pod uid -> its first PodSubmitted
    runs: dict[str, tuple[int, str]]  # pod uid -> (run time, phase) of the run its owner ended
    released: dict[str, tuple[int, str]]  # pod uid -> (lead before that end, reason) of its PodReleasing
    longest: dict[str, int]  # pod uid -> longest run that was not ended by its owner (censored pods)
    bind: _Lags
    evict: _Lags
    grace: _Lags
    delete_after_finish: _Lags
    evict_delete: _Lags  # PodFinished to PodDeleted of an evicted pod
    resubmit: _Lags
    group_delete: _Lags
    deleted_after_finish: set[str]  # pods the recording deleted after they ended
    resubmits: bool  # the recording re-submitted evicted pods
    group_of: dict[str, str]  # pod uid -> group uid
    groups_deleted: set[str]  # groups deleted after their last pod (re-derived)
    censored: dict[str, int]  # running_at_end, evicted_unfinished, never_started
    end_ms: int
    # The recorded usage snapshots' window (fairshare.snapshot.WindowSpec fields) and source, from the last
    # snapshot of the usage topic (None: no snapshot recorded, e.g. a run without the fair-share service).
    usage_window: dict[str, Any] | None = None
    usage_source: str | None = None

    @property
    def path(self) -> str:
        """The log's spec (for messages and the report)."""
        return self.spec


def load_service_recording(
    spec: str, config: SessionConfig | None = None, topics: Topics = DEFAULT_TOPICS
) -> ServiceRecording:
    """Read a service log (``replay``'s opener) and split it into what was done and what was decided."""
    try:
        src = load_source(spec, config=config, topics=topics)
    except ReplayError as exc:
        raise ServiceLogError(str(exc)) from None
    try:
        records = list(expand_records(src.records))
        events = list(src.events())
        usage: list[UsageInput] = list(src.usage.values())
    except (RecordChainError, LogError) as exc:
        raise ServiceLogError(f"{spec}: {exc}") from None
    finally:
        src.close()
    rec = _split(spec, src.config, records, events, usage)
    rec.usage_window, rec.usage_source = _usage_settings(spec, topics)
    return rec


def _usage_settings(spec: str, topics: Topics) -> tuple[dict[str, Any] | None, str | None]:
    """The window and source the last recorded usage snapshot says it was computed with."""
    from ingest.backends import open_log

    try:
        log = open_log(spec, readonly=True)
    except LogError as exc:
        raise ServiceLogError(f"{spec}: {exc}") from None
    try:
        end = log.end_offset(topics.usage)
        last = log.read(topics.usage, end - 1, 1) if end > 0 else []
    except LogError as exc:
        raise ServiceLogError(f"{spec}: {exc}") from None
    finally:
        log.close()
    if not last:
        return None, None
    try:
        snap = UsageSnapshot.from_bytes(last[0].value)
    except SnapshotError:
        return None, None  # not a fair-share service's snapshot: its settings are unknown
    return snap.window.model_dump(), snap.source


def _split(
    spec: str,
    config: SessionConfig,
    records: list[CycleRecord],
    events: list[tuple[int, ev.Event]],
    usage: list[UsageInput],
) -> ServiceRecording:
    """A service log read into a recording: the recorded decisions' bind and evict times, then the events'
    runs, pods and groups. Long on purpose: one pass over the events with one branch per event type,
    tracking each pod's state across them.
    """
    binds: dict[str, list[int]] = defaultdict(list)  # pod -> cycle times of its Bind decisions
    evicts: dict[str, list[int]] = defaultdict(list)
    end_ms = 0
    for r in records:
        end_ms = max(end_ms, r.logical_time_ms)
        for d in r.decisions:
            if d.pod is not None and d.kind == "Bind":
                binds[d.pod].append(r.logical_time_ms)
            elif d.pod is not None and d.kind == "Evict":
                evicts[d.pod].append(r.logical_time_ms)

    rec = ServiceRecording(
        spec, config, [], records, [], defaultdict(list), {}, {}, {}, defaultdict(int),
        _Lags(), _Lags(), _Lags(), _Lags(), _Lags(), _Lags(), _Lags(), set(), False, {}, set(), Counter(), 0,
    )  # fmt: skip
    bound_at: dict[str, int] = {}
    state: dict[str, str] = {}  # pod -> running | evicting | ended | evicted | deleted
    ended_at: dict[str, int] = {}
    pending_since: dict[str, int] = {}
    released: dict[str, tuple[int, str]] = {}  # pod -> (time, reason) of a PodReleasing of no Evict
    evicted_at: dict[str, int] = {}  # pod -> when its evicted run ended
    pods_of: dict[str, set[str]] = defaultdict(set)
    live: dict[str, set[str]] = defaultdict(set)  # group -> pods not deleted
    last_delete: dict[str, int] = {}  # group -> when its last pod was deleted
    for offset, e in events:
        raw = dump_event(e)
        rec.events.append(json.loads(raw))
        at, uid, kind = e.at_ms, e.uid, e.type
        end_ms = max(end_ms, at)
        rec.twins[(kind, uid, at)].append(offset)
        keep = True
        if isinstance(e, ev.PodSubmitted):
            group = f"{e.namespace}/{e.pod_group}"
            rec.group_of[uid] = group
            pods_of[group].add(uid)
            live[group].add(uid)
            if uid in rec.first_submit and state.get(uid) == "evicted":
                rec.resubmit.add(uid, at - evicted_at.get(uid, at))
                rec.resubmits = True
                keep = False
            rec.first_submit.setdefault(uid, raw)
            state[uid] = "pending"
            pending_since[uid] = at
        elif isinstance(e, ev.PodBound):
            keep = False
            bound_at[uid] = at
            state[uid] = "running"
            # The first Bind since the pod became pending: later cycles re-decide a bind still in flight.
            times = binds.get(uid, [])
            i = bisect.bisect_left(times, pending_since.get(uid, 0))
            if i < len(times) and times[i] <= at:
                rec.bind.add(uid, at - times[i])
        elif isinstance(e, ev.PodReleasing):
            keep = False
            # The first Evict since the pod was bound: later cycles re-decide an eviction still in flight.
            times = evicts.get(uid, [])
            i = bisect.bisect_left(times, bound_at.get(uid, 0))
            if state.get(uid) == "running" and i < len(times) and times[i] <= at:
                state[uid] = "evicting"
                rec.evict.add(uid, at - times[i])
                evicted_at[uid] = at
            elif state.get(uid) == "running":
                released[uid] = (at, e.reason)  # not the scheduler's: its user or owner ends the run
        elif isinstance(e, ev.PodFinished):
            keep = False
            start = bound_at.pop(uid, None)
            if state.get(uid) == "evicting":
                rec.grace.add(uid, at - evicted_at[uid])
                if start is not None:
                    rec.longest[uid] = max(rec.longest[uid], at - start)
                state[uid] = "evicted"
                evicted_at[uid] = at
            elif start is not None:
                if uid not in rec.runs and uid in released:
                    rec.released[uid] = (at - released[uid][0], released[uid][1])
                released.pop(uid, None)
                rec.runs.setdefault(uid, (at - start, e.phase))
                state[uid] = "ended"
                ended_at[uid] = at
            else:
                keep = True  # a pending pod ended (its user's doing): kept as it happened
        elif isinstance(e, ev.PodDeleted):
            owner = rec.group_of.get(uid)
            if state.get(uid) == "ended":
                rec.delete_after_finish.add(uid, at - ended_at[uid])
                rec.deleted_after_finish.add(uid)
                keep = False
            elif state.get(uid) == "evicted":
                rec.evict_delete.add(uid, at - evicted_at[uid])
                evicted_at[uid] = at  # the re-submission lag counts from the deletion
                keep = False
            if owner is not None:
                live[owner].discard(uid)
                if not live[owner]:
                    last_delete[owner] = at
            if state.get(uid) != "evicted":
                state[uid] = "deleted"
        elif (
            isinstance(e, ev.PodGroupDeleted)
            and pods_of.get(uid)
            and not live.get(uid)
            and uid in last_delete
        ):
            rec.group_delete.add(uid, at - last_delete[uid])
            rec.groups_deleted.add(uid)
            keep = False
        if keep:
            rec.inputs.append((at, offset, 0, raw))
    # A snapshot arrives when the recorded service first used it (the fair-share service publishes on its
    # own clock, later than the snapshot's as_of_ms); one never used arrives at its as_of_ms.
    first_use: dict[str, int] = {}
    for r in records:
        if r.usage_snapshot_id is not None:
            first_use.setdefault(r.usage_snapshot_id, r.logical_time_ms)
    for u in usage:
        rec.inputs.append((max(u.as_of_ms, first_use.get(u.id, u.as_of_ms)), _LAST, 1, dump_usage_record(u)))
    rec.inputs.sort(key=lambda x: (x[0], x[2], x[1]))
    rec.end_ms = end_ms
    for uid in rec.first_submit:
        if uid in rec.runs:
            continue
        if uid in bound_at:  # still running at the end
            rec.longest[uid] = max(rec.longest[uid], end_ms - bound_at[uid])
            rec.censored["running_at_end"] += 1
        elif uid in rec.longest:
            rec.censored["evicted_unfinished"] += 1
        else:
            rec.censored["never_started"] += 1
    return rec


def service_config(base: SessionConfig, changes: Sequence[Setting]) -> SessionConfig:
    """*base* with *changes* applied: keys are engine config fields (``k_value``, ``engine.k_value``,
    ``fairshare.k_value``, ``gpu_placement`` …); anything else is refused, naming the known keys."""
    known = {f.name: f for f in fields(SessionConfig)}
    updates: dict[str, Any] = {}
    for c in changes:
        if c.key in USAGE_KEYS:
            continue  # the fair-share service's (usage_config)
        key = ALIASES.get(c.key, c.key.removeprefix("engine."))
        if key not in known:
            raise ServiceLogError(
                f"--set {c.text}: a service log's what-if changes the engine config; known keys:"
                f" {', '.join(sorted(known))} (also as engine.KEY, and fairshare.k_value); the usage computation's:"
                f" {', '.join(sorted(USAGE_KEYS))}"
            )
        value, want = c.value, type(getattr(base, key))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise ServiceLogError(f"--set {c.text}: {key} takes a {want.__name__}, got {value!r}")
        updates[key] = value
    return replace(base, **updates)


#: ``--set`` keys of the fair-share service's usage computation (fairshare/config.py): a change recomputes.
USAGE_KEYS: Final = {
    f"fairshare.{k}": k for k in ("half_life_s", "window_s", "window_type", "tumbling_anchor_ms")
}
USAGE_MODES: Final = ("auto", "recorded", "recompute")


def usage_config(
    rec: ServiceRecording, changes: Sequence[Setting], mode: str = "auto"
) -> FairshareConfig | None:
    """The fair-share settings to recompute usage with, or None to use the recorded snapshots.

    ``auto``: recompute when the recorded snapshots came from the ``eventlog`` source (the what-if's own
    events log is that source's input, so with no change the snapshots come back equal) or a usage setting
    (:data:`USAGE_KEYS`) is changed; otherwise (Prometheus snapshots, or none) the recorded ones.
    ``recompute`` always recomputes (from the what-if's events; the window of the recorded snapshots, else
    the fair-share defaults), ``recorded`` never (a usage setting change is then refused)."""
    if mode not in USAGE_MODES:
        raise ServiceLogError(f"--usage {mode!r}: expected one of {', '.join(USAGE_MODES)}")
    updates = {USAGE_KEYS[c.key]: c.value for c in changes if c.key in USAGE_KEYS}
    if mode == "recorded":
        if updates:
            keys = ", ".join(f"fairshare.{k}" for k in updates)
            raise ServiceLogError(f"--set {keys} changes how usage is computed: it needs --usage recompute")
        return None
    if mode == "auto" and rec.usage_source != "eventlog" and not updates:
        return None
    w = rec.usage_window
    base: dict[str, Any] = (
        {
            "window_type": w["type"],
            "window_s": w["size_s"],
            "half_life_s": w["half_life_s"],
            "tumbling_anchor_ms": w["anchor_ms"],
        }
        if w is not None
        else {}
    )
    try:
        return FairshareConfig(**{**base, **updates})
    except FairshareConfigError as exc:
        raise ServiceLogError(f"--set: {exc}") from None


# --------------------------------------------------------------------------- the re-run


@dataclass(slots=True)
class _Pod:
    state: str = "pending"  # pending | running | evicting | ended | deleted
    incarnation: int = 0
    binds: int = 0
    evictions: int = 0
    binding: bool = False  # a bind is in flight (later cycles decide it again until PodBound arrives)
    unbinding: bool = False  # an eviction is in flight (likewise until PodReleasing arrives)


class _Driver:
    """The cluster around the real service: users' inputs as recorded, the binder and kubelets re-derived.

    With a *window* ``(FROM, TO)`` (logical ms) the driver carries out the recorded cycles' decisions before
    FROM instead of the service's (the binder and kubelets react to them as to the service's), so at FROM
    the log holds the recorded state: the pods running then, with their recorded remaining time, binds and
    evictions in flight, pending pods. The service folds that state at once, its first cycle at or after
    FROM decides under the changed config, and the run stops at TO.
    """

    def __init__(
        self,
        rec: ServiceRecording,
        config: SessionConfig,
        window: tuple[int, int] | None = None,
        usage: FairshareConfig | None = None,
    ) -> None:
        self.rec = rec
        self.from_ms = window[0] if window is not None else None
        self.end_ms = min(window[1], rec.end_ms) if window is not None else rec.end_ms
        self.log = MemoryLog()
        self.topics = DEFAULT_TOPICS
        self.service = Service(self.log, self.topics, config, sleep=lambda _: None)
        self.heap: list[tuple[int, int, int, int, bytes | Callable[[], None]]] = []
        self.seq = 0
        self.pods: dict[str, _Pod] = {}
        self.live: dict[str, set[str]] = defaultdict(set)
        self.records: list[CycleRecord] = []
        self.twin_used: Counter[tuple[str, str, int]] = Counter()
        # Usage recomputed: the real fair-share service over this log, stepped at each recorded snapshot's
        # arrival, as of its recorded as_of_ms (it sees the events up to then).
        self.view = _AsOf(self.log, self.topics.events)
        self.fair = (
            FairshareService(self.view, usage, topics=self.topics, clock_ms=lambda: 0, sleep=lambda _: None)
            if usage is not None
            else None
        )

    def _recompute(self, as_of_ms: int) -> Callable[[], None]:
        def go() -> None:
            assert self.fair is not None
            self.view.until(as_of_ms)
            self.fair.step()

        return go

    def _unavailable(self, raw: bytes) -> Callable[[], None]:
        """A recorded snapshot that said usage was unavailable (the recorded fair-share service could not
        reach its source): it arrives as recorded, also with usage recomputed — the what-if changes the
        settings, not whether Prometheus answered. The fair-share service then publishes again at its next
        step, as the recorded one did once its source answered (it recomputes fully after a failure)."""

        def go() -> None:
            assert self.fair is not None
            self.log.append(self.topics.usage, b"cluster", raw)
            self.fair.state = None
            self.fair.last_published = None

        return go

    def _order(self, kind: str, uid: str, at: int) -> int:
        key = (kind, uid, at)
        offsets = self.rec.twins.get(key)
        if offsets is None:
            return _LAST
        k = self.twin_used[key]
        self.twin_used[key] += 1
        return offsets[k] if k < len(offsets) else _LAST

    def _push(self, at: int, order: int, topic: int, item: bytes | Callable[[], None]) -> None:
        heapq.heappush(self.heap, (at, order, topic, self.seq, item))
        self.seq += 1

    def _emit_at(self, at: int, event: ev.EventBase, then: Callable[[], None] | None = None) -> None:
        """Append *event* at *at* (ordered as its recorded twin, if any), then run *then*."""
        raw = dump_event(event)

        def go() -> None:
            self.log.append(self.topics.events, event.uid.encode(), raw)
            self._seen(event)
            if then is not None:
                then()

        self._push(at, self._order(str(getattr(event, "type", "")), event.uid, at), 0, go)

    def _seen(self, e: ev.EventBase) -> None:
        if isinstance(e, ev.PodSubmitted):
            self.pods.setdefault(e.uid, _Pod()).state = "pending"
            self.live[self.rec.group_of.get(e.uid, "")].add(e.uid)
        elif isinstance(e, ev.PodDeleted):
            p = self.pods.get(e.uid)
            if p is not None and p.state == "evicting":
                if self.rec.resubmits:
                    return  # the controller re-creates it: its pod group lives on
            elif p is not None:
                p.state = "deleted"
            group = self.rec.group_of.get(e.uid)
            if group is not None and e.uid in self.live[group]:
                self.live[group].discard(e.uid)
                if not self.live[group] and group in self.rec.groups_deleted:
                    ns, _, name = group.partition("/")
                    lag = self.rec.group_delete.of(group, 0)
                    self._emit_at(
                        e.at_ms + lag, ev.PodGroupDeleted(at_ms=e.at_ms + lag, name=name, namespace=ns)
                    )

    def _user(self, raw: bytes) -> Callable[[], None]:
        """A recorded input event; a user's deletion of a pod the what-if runs ends the run first."""

        def go() -> None:
            e = ev.parse_event(raw)
            p = self.pods.get(e.uid)
            if isinstance(e, ev.PodDeleted) and p is not None and p.state in ("running", "evicting"):
                p.incarnation += 1
                p.state = "ended"
                fin = ev.PodFinished(at_ms=e.at_ms, name=e.name, namespace=e.namespace, phase="Failed")
                self.log.append(self.topics.events, e.uid.encode(), dump_event(fin))
            self.log.append(self.topics.events, e.uid.encode(), raw)
            self._seen(e)

        return go

    def _react(self, record: CycleRecord) -> None:
        now = record.logical_time_ms
        evicted: set[str] = set()
        for d in record.decisions:
            if d.kind == "Evict" and d.pod is not None:
                evicted.add(d.pod)
                self._evict(d.pod, now)
        for d in record.decisions:
            if d.kind == "Bind" and d.pod is not None and d.node is not None and d.pod not in evicted:
                self._bind(d.pod, d.node, list(d.gpu_devices), now)

    def _bind(self, uid: str, node: str, devices: list[int], now: int) -> None:
        p = self.pods.setdefault(uid, _Pod())
        if p.binding:
            return  # the binder's second bind of the same pod is a no-op (409 on the same node)
        p.binding = True
        at = now + self.rec.bind.of(uid, p.binds)
        p.binds += 1
        ns, _, name = uid.partition("/")
        inc = p.incarnation

        def started() -> None:
            run = self.rec.runs.get(uid)
            if run is not None:
                length, phase = run
            elif uid in self.rec.longest:
                length, phase = self.rec.longest[uid], "Succeeded"
            else:
                return  # never ran by itself: runs to the end
            end = at + length
            if run is None and end >= self.rec.end_ms:
                return  # censored: still running at the recording's end
            self._finish(uid, end, phase, p.incarnation)

        def bound() -> None:
            p.binding = False
            if p.state != "pending" or p.incarnation != inc:
                return  # deleted or evicted meanwhile: the binder's bind answers 404
            e = ev.PodBound(at_ms=at, name=name, namespace=ns, node=node, gpu_devices=devices)
            self.log.append(self.topics.events, uid.encode(), dump_event(e))
            p.state = "running"
            started()

        self._push(at, self._order("PodBound", uid, at), 0, bound)

    def _finish(self, uid: str, at: int, phase: str, inc: int) -> None:
        p = self.pods[uid]
        ns, _, name = uid.partition("/")

        def ended() -> None:
            if p.incarnation != inc or p.state != "running":
                return
            p.state = "ended"
            e = ev.PodFinished(
                at_ms=at, name=name, namespace=ns, phase="Failed" if phase == "Failed" else "Succeeded"
            )
            self.log.append(self.topics.events, uid.encode(), dump_event(e))
            if uid in self.rec.deleted_after_finish or uid not in self.rec.runs:
                lag = self.rec.delete_after_finish.of(uid, 0)
                self._emit_at(at + lag, ev.PodDeleted(at_ms=at + lag, name=name, namespace=ns))

        self._push(at, self._order("PodFinished", uid, at), 0, ended)
        lead = self.rec.released.get(uid)
        if lead is not None and uid in self.rec.runs:
            rel = at - lead[0]
            e = ev.PodReleasing(at_ms=rel, name=name, namespace=ns, reason=lead[1])

            def releasing() -> None:
                if p.incarnation == inc and p.state == "running":
                    self.log.append(self.topics.events, uid.encode(), dump_event(e))

            self._push(rel, self._order("PodReleasing", uid, rel), 0, releasing)

    def _evict(self, uid: str, now: int) -> None:
        p = self.pods[uid]
        if p.unbinding:
            return  # decided again while the first eviction is in flight: the binder's delete is a no-op
        p.unbinding = True
        k = p.evictions
        p.evictions += 1
        at = now + self.rec.evict.of(uid, k)
        ns, _, name = uid.partition("/")
        inc = p.incarnation

        def releasing() -> None:
            p.unbinding = False
            if p.state != "running" or p.incarnation != inc:
                return
            p.state = "evicting"
            p.incarnation += 1
            e = ev.PodReleasing(at_ms=at, name=name, namespace=ns, reason="eviction")
            self.log.append(self.topics.events, uid.encode(), dump_event(e))
            gone = at + self.rec.grace.of(uid, k)
            fin = ev.PodFinished(at_ms=gone, name=name, namespace=ns, phase="Failed")
            lag = self.rec.evict_delete.of(uid, k)
            dele = ev.PodDeleted(at_ms=gone + lag, name=name, namespace=ns)

            def deleted() -> None:
                p.state = "deleted"
                if self.rec.resubmits:
                    back = gone + lag + self.rec.resubmit.of(uid, k)
                    self._emit_at(
                        back, ev.parse_event(self.rec.first_submit[uid]).model_copy(update={"at_ms": back})
                    )

            self._emit_at(gone, fin, lambda: self._emit_at(gone + lag, dele, deleted))

        self._push(at, self._order("PodReleasing", uid, at), 0, releasing)

    def _recorded(self, record: CycleRecord) -> Callable[[], None]:
        """A recorded cycle before FROM: its decisions are carried out as if the service had made them."""

        def go() -> None:
            self.records.append(record)
            self._react(record)

        return go

    def _fold_prefix(self) -> None:
        """At FROM: the service folds everything before it in one step; that step's cycle only catches the
        service up with the recorded state (the recording decided at those times), so it is not acted on."""
        before = self.service.batch_size
        self.service.batch_size = max(before, self.log.end_offset(self.topics.events) + 1)
        try:
            self.service.step()
        finally:
            self.service.batch_size = before

    def run(self, progress: Callable[[int], None] | None) -> None:
        for at, order, topic, raw in self.rec.inputs:
            if topic == 1 and self.fair is not None and json.loads(raw)["available"]:
                self._push(at, order, 1, self._recompute(int(json.loads(raw)["as_of_ms"])))
            elif topic == 1 and self.fair is not None:
                self._push(at, order, 1, self._unavailable(raw))
            elif topic == 1:
                self._push(at, order, 1, raw)
            else:
                self._push(at, order, 0, self._user(raw))
        # Before FROM the recorded cycles decide: each reacts after its instant's inputs.
        folded = self.from_ms is None
        if self.from_ms is not None:
            for r in self.rec.records:
                if r.logical_time_ms < self.from_ms:
                    self._push(r.logical_time_ms, _LAST + 1, 2, self._recorded(r))
        end = self.end_ms
        while self.heap and self.heap[0][0] <= end:
            now = self.heap[0][0]
            if not folded and self.from_ms is not None and now >= self.from_ms:
                self._fold_prefix()
                folded = True
            while self.heap and self.heap[0][0] == now:
                _, _, topic, _, item = heapq.heappop(self.heap)
                if isinstance(item, bytes):
                    self.log.append(self.topics.usage, b"cluster", item)
                else:
                    item()
            if not folded:
                if progress is not None:
                    progress(now)
                continue
            before = self.service.stats.cycles
            while self.service.step():
                if self.service.stats.cycles != before:
                    before = self.service.stats.cycles
                    last = self.service.stats.last_cycle
                    assert last is not None
                    self.records.append(last)
                    self._react(last)
            if progress is not None:
                progress(now)


def log_window(rec: ServiceRecording, window: tuple[int, int]) -> tuple[int, int]:
    """``--window FROM..TO`` on a service log, counted from the log's first event, as logical ms
    ``(start + FROM, start + min(TO, span))``; a window that starts at or after the log's end is refused."""
    start = min((int(e["at_ms"]) for e in rec.events), default=0)
    span = rec.end_ms - start
    lo, hi = window
    if lo >= span:
        raise ServiceLogError(
            f"--window {lo}..{hi} (ms from the log's first event): the log {rec.spec} spans only {span} ms"
            f" ({span / 3_600_000:.2f} h, logical time {start}..{rec.end_ms}); FROM must be before its end"
        )
    return start + lo, start + min(hi, span)


def rerun(
    rec: ServiceRecording,
    config: SessionConfig,
    progress: Callable[[int], None] | None = None,
    window: tuple[int, int] | None = None,
    usage: FairshareConfig | None = None,
    out: Path | None = None,
    inputs: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], list[CycleRecord]]:
    """Re-run the service log *rec* under the engine *config*: the what-if's events (as dicts, ending at
    the recording's end, or at TO) and its full cycle records, for :func:`analytics.rerun.whatif.measure`.

    With a *window* ``(FROM, TO)`` in logical ms (:func:`log_window`), the recorded decisions before FROM
    are carried out and the engine decides from FROM on (:class:`_Driver`); the records include the
    recorded ones before FROM (the fair share held at FROM is theirs). With *usage* (:func:`usage_config`)
    the usage snapshots are recomputed by the real fair-share service from the what-if's own events, at
    the recorded snapshots' times, instead of being the recorded ones (a recorded snapshot that was
    unavailable stays so). With *out* the what-if is also written there as a run directory
    (:func:`write_run_dir`; *inputs* goes into its manifest)."""
    d = _Driver(rec, config, window, usage)
    d.run(progress)
    raws = [r.value for r in d.log.topics[DEFAULT_TOPICS.events]]
    if not raws or json.loads(raws[-1])["at_ms"] < d.end_ms:
        raws.append(dump_event(ev.ClockTick(at_ms=d.end_ms)))
    if out is not None:
        usage_raws = [r.value for r in d.log.topics[DEFAULT_TOPICS.usage]]
        write_run_dir(out, raws, d.records, usage_raws, config, inputs or {})
    return [json.loads(r) for r in raws], d.records


def write_run_dir(
    out: Path,
    events: Sequence[bytes],
    records: Sequence[CycleRecord],
    usage: Sequence[bytes],
    config: SessionConfig,
    inputs: dict[str, Any],
) -> None:
    """Write a service log's what-if as a run directory (the ``simulate --out`` format,
    :mod:`analytics.rundir`): its events (line ``i`` is the what-if log's offset ``i``), its full cycle
    records (checkpoints and deltas), the usage snapshots its scheduler read, and a manifest with the engine
    config and *inputs*; ``replay``, ``report`` and ``sql`` read it as they read a simulated run."""
    log = DirLog(out)
    binds = evictions = 0
    try:
        for offset, raw in enumerate(events):
            log.append_event(offset, ev.parse_event(raw))
        for r in records:
            log.append_cycle(r)
            binds += sum(1 for d in r.decisions if d.kind == "Bind")
            evictions += sum(1 for d in r.decisions if d.kind == "Evict")
        for u in usage:
            log.append_usage(u)
    finally:
        log.close(
            {
                "inputs": inputs,
                "engine_config": asdict(config),
                "engine_config_hash": config_hash(config),
                "counts": {
                    "events": len(events),
                    "cycles": len(records),
                    "binds": binds,
                    "evictions": evictions,
                },
            }
        )
