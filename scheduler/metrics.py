"""The scheduler's Prometheus metrics: per-queue fair-share gauges, cluster capacity, cycle latency, counters.

Everything lives on a private :class:`~prometheus_client.CollectorRegistry` owned by a
:class:`SchedulerMetrics`, never on the global registry, so a process (or a test) can hold several.

Per-queue and cluster gauges are rendered at scrape time from the latest :class:`CycleRecord` by a custom
collector. That gives every scrape one consistent cycle (no half-updated label sets while a cycle is being
applied) and makes a queue that vanished from the record vanish from the metrics without bookkeeping.

Values are in Prometheus base units: GPUs as a float (500 milli-GPU -> 0.5), CPU in cores, memory in bytes.
The engine keeps exact integers; the conversion happens only here, at the edge. Every metric is documented
in ``docs/metrics.md``; :mod:`fairshare.prometheus` reads ``hourglass_queue_allocated`` and
``hourglass_cluster_capacity`` back by default. KAI's own metric names (``kai_queue_fair_share_gpu``,
``kai_e2e_scheduling_latency_milliseconds``, ...) are exported alongside, from the same records
(:mod:`scheduler.kai_metrics`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter as TallyCounter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from fairshare.metrics import KaiLatencyHistogram, RegistryServer, latency_registry, serve_registry
from scheduler.engine.cycle import DEFAULT_ORDER
from scheduler.engine.kept import KeptSession, run_kept_cycle
from scheduler.engine.proportion import RESOURCES, QueueShare
from scheduler.engine.record.decisions import CycleRecord
from scheduler.engine.session import Session, SessionConfig
from scheduler.engine.state import ClusterState
from scheduler.kai_metrics import DEFAULT_NODE_POOL, ON_SESSION_OPEN, KaiCycleMetrics, kai_queue_families

__all__ = [
    "CYCLE_KEY",
    "ENGINE_PER_BASE_UNIT",
    "LATENCY_BUCKETS",
    "BinderMetrics",
    "CycleTimer",
    "MetricsServer",
    "SchedulerMetrics",
    "capacity_of",
    "observe_cycle",
    "observe_dead_letters",
    "run_timed_cycle",
    "serve",
    "to_base_unit",
]

#: Key of ``durations`` (in :func:`observe_cycle`) that holds the whole cycle's duration; other keys are
#: action names.
CYCLE_KEY = "cycle"

#: Engine units per Prometheus base unit: milli-GPU per GPU, millicores per core, bytes per byte.
ENGINE_PER_BASE_UNIT: Mapping[str, int] = {"gpu": 1000, "cpu": 1000, "memory": 1}

#: Seconds. Cycles range from sub-millisecond (tiny clusters) to tens of seconds (reclaim on large ones).
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)

# (metric name, QueueRecord field, help text). All are gauges with labels (queue, resource).
_QUEUE_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("hourglass_queue_allocated", "allocated", "Resources held by the queue's allocated and running pods"),
    (
        "hourglass_queue_allocated_non_preemptible",
        "allocated_non_preemptible",
        "Resources held by the queue's non-preemptible pods",
    ),
    ("hourglass_queue_requested", "requested", "Resources requested by the queue's pods, held or pending"),
    (
        "hourglass_queue_deserved",
        "deserved",
        "The queue's deserved quota; absent when the quota is unlimited",
    ),
    ("hourglass_queue_limit", "limit", "The queue's limit; absent when the queue has no limit"),
    ("hourglass_queue_fair_share", "fair_share", "The queue's fair share, with the kValue usage term"),
    (
        "hourglass_queue_fair_share_classic",
        "fair_share_classic",
        "The queue's fair share without the kValue usage term (classic DRF division)",
    ),
)


def to_base_unit(resource: str, engine_value: int | float) -> float:
    """Engine units -> Prometheus base units (GPUs, cores, bytes)."""
    return float(engine_value) / ENGINE_PER_BASE_UNIT[resource]


def capacity_of(ssn: Session) -> dict[str, int]:
    """The cluster's allocatable total (ready nodes) in engine units, as the cycle's division saw it."""
    return {RESOURCES[r]: ssn.total[r] for r in range(3)}


@dataclass(frozen=True, slots=True)
class _Latest:
    record: CycleRecord | None = None
    capacity: Mapping[str, int] | None = None
    display_names: Mapping[str, str] | None = None  # queue -> spec.displayName, for KAI's labels


class _RecordCollector:
    """Renders the per-queue and cluster gauges from the latest cycle record at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest = _Latest()

    def update(
        self,
        record: CycleRecord,
        capacity: Mapping[str, int] | None,
        display_names: Mapping[str, str] | None = None,
    ) -> None:
        with self._lock:
            # Keep the last known capacity when a caller does not pass one: capacity changes rarely and a
            # missing series would break the capacity-normalised usage read back by fairshare.
            cap = dict(capacity) if capacity is not None else self._latest.capacity
            names = dict(display_names) if display_names is not None else self._latest.display_names
            self._latest = _Latest(record, cap, names)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            latest = self._latest
        record = latest.record
        queues = sorted(record.queues, key=lambda q: q.name) if record is not None else []

        info = GaugeMetricFamily(
            "hourglass_queue_info",
            "1 for every queue in the last cycle; labels give its parent and whether it is a leaf",
            labels=["queue", "parent", "leaf"],
        )
        parents = {q.parent for q in queues if q.parent is not None}
        for q in queues:
            info.add_metric([q.name, q.parent or "", "true" if q.name not in parents else "false"], 1.0)
        yield info

        for name, attr, doc in _QUEUE_GAUGES:
            fam = GaugeMetricFamily(name, f"{doc} (GPUs, CPU cores, bytes)", labels=["queue", "resource"])
            for q in queues:
                values: Mapping[str, int | None] = getattr(q, attr)
                for res in RESOURCES:
                    v = values.get(res)
                    if v is not None:
                        fam.add_metric([q.name, res], to_base_unit(res, v))
            yield fam

        usage = GaugeMetricFamily(
            "hourglass_queue_usage",
            "The queue's normalised historical usage U' (decayed resource-seconds / capacity-seconds, 0..1)",
            labels=["queue", "resource"],
        )
        for q in queues:
            for res in RESOURCES:
                usage.add_metric([q.name, res], float(q.usage.get(res, 0.0)))
        yield usage

        cap = GaugeMetricFamily(
            "hourglass_cluster_capacity",
            "Allocatable total of the ready nodes (GPUs, CPU cores, bytes)",
            labels=["resource"],
        )
        if latest.capacity is not None:
            for res in RESOURCES:
                if res in latest.capacity:
                    cap.add_metric([res], to_base_unit(res, latest.capacity[res]))
        yield cap

        if record is not None:
            avail = GaugeMetricFamily(
                "hourglass_usage_available",
                "1 when the last cycle had a usage snapshot, 0 when it fell back to classic fair share",
            )
            avail.add_metric([], 1.0 if record.usage_available else 0.0)
            yield avail
            t = GaugeMetricFamily(
                "hourglass_last_cycle_logical_time_seconds", "Logical time of the last cycle (Unix seconds)"
            )
            t.add_metric([], record.logical_time_ms / 1000.0)
            yield t
            off = GaugeMetricFamily(
                "hourglass_last_cycle_events_offset", "Events-log offset the last cycle saw"
            )
            off.add_metric([], float(record.events_offset))
            yield off
            pending = GaugeMetricFamily(
                "hourglass_unschedulable_jobs",
                "Jobs left pending by the last cycle, by machine-readable reason",
                labels=["reason"],
            )
            tally = TallyCounter(d.reason or "" for d in record.decisions if d.kind == "Unschedulable")
            for reason in sorted(tally):
                pending.add_metric([reason], float(tally[reason]))
            yield pending

        # KAI's names for the same per-queue values (scheduler/kai_metrics.py).
        yield from kai_queue_families(record, latest.display_names)


@dataclass(eq=False)
class SchedulerMetrics:
    """All scheduler metrics on one private registry. Create with :meth:`create`."""

    registry: CollectorRegistry
    cycles: Counter
    binds: Counter
    pipelined: Counter
    evictions: Counter
    dead_letters: Counter
    cycle_seconds: Histogram
    action_seconds: Histogram
    _records: _RecordCollector = field(repr=False)
    #: KAI's per-cycle latency gauges and counters, under KAI's names (scheduler/kai_metrics.py).
    kai: KaiCycleMetrics = field(default_factory=KaiCycleMetrics, repr=False)

    @classmethod
    def create(cls) -> SchedulerMetrics:
        """A fresh registry with every metric registered."""
        reg = CollectorRegistry(auto_describe=True)
        records = _RecordCollector()
        reg.register(records)
        kai = KaiCycleMetrics()
        reg.register(kai)
        return cls(
            registry=reg,
            cycles=Counter("hourglass_cycles", "Scheduling cycles completed", registry=reg),
            binds=Counter(
                "hourglass_binds", "Bind decisions (pods placed)", labelnames=["action"], registry=reg
            ),
            pipelined=Counter(
                "hourglass_pipelined",
                "Pipeline decisions (pods placed onto capacity still being released)",
                labelnames=["action"],
                registry=reg,
            ),
            evictions=Counter(
                "hourglass_evictions", "Evict decisions (pods evicted)", labelnames=["action"], registry=reg
            ),
            dead_letters=Counter(
                "hourglass_dead_letters",
                "Input records rejected to the dead-letter topic",
                labelnames=["reason"],
                registry=reg,
            ),
            cycle_seconds=Histogram(
                "hourglass_cycle_duration_seconds",
                "Wall-clock duration of a whole scheduling cycle",
                buckets=LATENCY_BUCKETS,
                registry=reg,
            ),
            action_seconds=Histogram(
                "hourglass_action_duration_seconds",
                "Wall-clock duration of one action within a cycle",
                labelnames=["action"],
                buckets=LATENCY_BUCKETS,
                registry=reg,
            ),
            _records=records,
            kai=kai,
        )


def observe_cycle(
    metrics: SchedulerMetrics,
    record: CycleRecord,
    durations: Mapping[str, float],
    *,
    capacity: Mapping[str, int] | None = None,
    session: Session | None = None,
    searches: Sequence[tuple[str, str, float]] = (),
) -> None:
    """Update the metrics from one finished cycle.

    ``durations`` maps action names to seconds; the key :data:`CYCLE_KEY` (``"cycle"``) is the whole
    cycle (when absent, the sum of the actions is used). ``capacity`` is the cluster total in engine units
    (see :func:`capacity_of`); when omitted the last known capacity stays exported. Queues missing from
    ``record`` disappear from the per-queue gauges. With ``session`` (the cycle's), each bound pod's wait
    from its creation to the cycle's logical time feeds KAI's ``kai_task_scheduling_latency_milliseconds``.
    ``searches`` (a :class:`CycleTimer`'s) feed KAI's ``kai_scenario_search_duration_seconds``.
    """
    for name, seconds in durations.items():
        if seconds < 0:
            raise ValueError(f"duration of {name!r} is negative ({seconds} s)")
    names = (
        {q.name: q.display_name for q in session.state.queues if q.display_name}
        if session is not None
        else None
    )
    metrics._records.update(record, capacity, names)
    metrics.cycles.inc()
    total = durations.get(CYCLE_KEY)
    if total is None:
        total = sum(durations.values())
    metrics.cycle_seconds.observe(total)
    for name in sorted(durations):
        if name != CYCLE_KEY:
            metrics.action_seconds.labels(action=name).observe(durations[name])
    metrics.kai.observe(
        record,
        durations,
        total,
        "open_session",
        CYCLE_KEY,
        _task_latencies_ms(record, session),
        work=session.work if session is not None else None,
        plugin_s=getattr(session, "plugin_seconds", None),  # a _TimedSession's, or what its opener set
        podgroups=_evicted_podgroups(record, session),
        action_budget=session.config.solver_action_budget if session is not None else None,
    )
    metrics.kai.observe_searches(searches)
    for d in record.decisions:
        action = d.action or ""
        if d.kind == "Bind":
            metrics.binds.labels(action=action).inc()
        elif d.kind == "Pipeline":
            metrics.pipelined.labels(action=action).inc()
        elif d.kind == "Evict":
            metrics.evictions.labels(action=action).inc()


def _evicted_podgroups(record: CycleRecord, session: Session | None) -> dict[str, tuple[str, str]]:
    """Per job with an Evict decision: its PodGroup's metadata.uid ("" when unknown) and node pool (KAI's
    ``default`` without the label), from the cycle's session."""
    if session is None:
        return {}
    out = {}
    for d in record.decisions:
        if d.kind == "Evict" and d.job not in out and (job := session.job_by_uid.get(d.job)) is not None:
            out[d.job] = (job.spec.k8s_uid or "", job.spec.node_pool or DEFAULT_NODE_POOL)
    return out


def _task_latencies_ms(record: CycleRecord, session: Session | None) -> list[float]:
    """Per Bind decision: the cycle's logical time minus the pod's creation time, in ms (pods with an
    unknown creation time are left out)."""
    if session is None:
        return []
    created: dict[str, dict[str, int]] = {}
    out = []
    for d in record.decisions:
        if d.kind != "Bind" or d.pod is None:
            continue
        if d.job not in created:
            job = session.job_by_uid.get(d.job)
            created[d.job] = {t.pod.uid: t.pod.created_ms for t in job.tasks} if job is not None else {}
        at = created[d.job].get(d.pod, 0)
        if at > 0 and record.logical_time_ms >= at:
            out.append(float(record.logical_time_ms - at))
    return out


class _TimedSession(Session):
    """A :class:`Session` that notes when its fair-share division (KAI's proportion plugin) starts and ends.

    The clock is read at the edge, around the session's own steps; nothing read here feeds a decision, so
    the session and its record are those of a plain :class:`Session`.
    """

    def __init__(
        self,
        state: ClusterState,
        config: SessionConfig | None,
        now_ms: int,
        usage: dict[str, dict[str, float]],
        clock: Callable[[], float],
    ) -> None:
        self._clock = clock
        self._proportion_start: float | None = None
        #: (KAI plugin name, ``OnSession`` label) -> seconds.
        self.plugin_seconds: dict[tuple[str, str], float] = {}
        super().__init__(state, config, now_ms, usage)

    def _account_queues(self) -> None:
        # KAI's proportion plugin opens by summing each queue's allocated and requested resources ...
        self._proportion_start = self._clock()
        super()._account_queues()

    def _divide(self, usage: dict[str, dict[str, float]]) -> dict[str, QueueShare]:
        # ... and then divides the cluster into fair shares.
        shares = super()._divide(usage)
        if self._proportion_start is not None:
            self.plugin_seconds[("proportion", ON_SESSION_OPEN)] = max(
                self._clock() - self._proportion_start, 0.0
            )
        return shares


def timed_session_factory(
    clock: Callable[[], float] = time.perf_counter,
) -> Callable[[ClusterState, SessionConfig, int, dict[str, dict[str, float]]], Session]:
    """Sessions built as :func:`run_timed_cycle` builds them (fair-share division timed), for a kept
    session's fresh builds (:class:`scheduler.engine.kept.KeptSession`)."""

    def build(
        state: ClusterState, config: SessionConfig, now_ms: int, usage: dict[str, dict[str, float]]
    ) -> Session:
        return _TimedSession(state, config, now_ms, usage, clock)

    return build


def proportion_seconds(seconds: float) -> dict[tuple[str, str], float]:
    """``plugin_seconds`` of a session whose fair-share division took ``seconds`` (KAI's proportion plugin)."""
    return {("proportion", ON_SESSION_OPEN): seconds}


class CycleTimer:
    """Wall-clock seconds of each step of one cycle, as :func:`observe_cycle` reads them.

    Pass :meth:`step` as the cycle's ``on_step`` hook (:data:`scheduler.engine.cycle.StepHook`); timing
    only observes the cycle, it never feeds it. ``durations`` then has ``open_session``, one key per action
    and :data:`CYCLE_KEY` for the whole cycle (from the timer's creation to the record).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._start = self._last = clock()
        self._search_start = self._start
        self.durations: dict[str, float] = {}
        #: Each job's victim search: ``(action, result, seconds)``, in the order they ran.
        self.searches: list[tuple[str, str, float]] = []

    def step(self, name: str) -> None:
        """One step of the cycle ended (see :data:`scheduler.engine.cycle.StepHook`)."""
        now = self._clock()
        if "/" in name:  # a victim search inside an action: timed on its own, the action's time unchanged
            action, _, result = name.partition("/search")
            if result:
                self.searches.append((action, result.lstrip("/"), max(now - self._search_start, 0.0)))
            else:
                self._search_start = now
            return
        if name == "record":
            self.durations[CYCLE_KEY] = now - self._start
            return
        self.durations[name] = now - self._last
        self._last = now


def run_timed_cycle(
    state: ClusterState,
    config: SessionConfig | None = None,
    now_ms: int = 0,
    usage: Mapping[str, Mapping[str, float]] | None = None,
    usage_snapshot_id: str | None = None,
    actions: tuple[str, ...] = DEFAULT_ORDER,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[CycleRecord, Session, dict[str, float]]:
    """One cycle on a fresh session, timed as the service times its cycles: the record is ``run_cycle``'s,
    plus the durations :func:`observe_cycle` reads and the fair-share division's ``plugin_seconds``."""
    timer = CycleTimer(clock)
    kept = KeptSession(timed_session_factory(clock))
    record, ssn = run_kept_cycle(
        kept, state, config, now_ms, usage, usage_snapshot_id, actions, on_step=timer.step
    )
    return record, ssn, timer.durations


def observe_dead_letters(metrics: SchedulerMetrics, reasons: Iterable[str]) -> None:
    """Count dead letters, one per element of ``reasons`` (their machine-readable reason codes)."""
    for reason, n in sorted(TallyCounter(reasons).items()):
        metrics.dead_letters.labels(reason=reason).inc(n)


@dataclass(eq=False)
class BinderMetrics:
    """The binder's metrics (``hourglass bind --metrics-port``) on a private registry; :meth:`create`."""

    registry: CollectorRegistry
    #: KAI's ``task_bind_latency_milliseconds``: each bind of a pod, from the start of its API calls
    #: (GPU-sharing preparation included, as KAI's includes creating the BindRequest) to their end.
    task_bind_latency: KaiLatencyHistogram

    @classmethod
    def create(cls) -> BinderMetrics:
        """A fresh registry with ``kai_task_bind_latency_milliseconds`` registered."""
        reg, hist = latency_registry(
            "kai_task_bind_latency_milliseconds", "Task bind latency histogram in milliseconds"
        )
        return cls(registry=reg, task_bind_latency=hist)


#: A running ``/metrics`` endpoint (``.url``, ``.port``, ``.close()``); the scheduler's, the binder's and the
#: fairshare service's are the same kind (:class:`fairshare.metrics.RegistryServer`).
MetricsServer = RegistryServer


def serve(metrics: SchedulerMetrics | BinderMetrics, host: str = "127.0.0.1", port: int = 0) -> MetricsServer:
    """Serve ``metrics`` over HTTP on ``host:port`` (port 0 picks a free port) in a daemon thread.

    Loopback by default: exposing the endpoint beyond the machine is an explicit choice (``0.0.0.0`` in a
    pod, where Prometheus scrapes it through the Service).
    """
    return serve_registry(metrics.registry, host, port)
