"""KAI Scheduler's metric names, exported alongside Hourglass's own (docs/metrics.md, "KAI's metrics").

A KAI user's dashboards and alerts query names like ``kai_queue_fair_share_gpu`` or
``kai_e2e_scheduling_latency_milliseconds``. This module renders those names, with KAI's labels and units,
from the same cycle records and timings as the ``hourglass_*`` metrics, so both sets always agree:

* per queue, from the latest cycle record (what KAI's scheduler sets each cycle, and what KAI's
  queue-controller exports from Queue status): fair share, normalised usage, quota, allocation;
* per cycle: KAI's latency gauges in whole milliseconds, its cumulative per-action counters, and the
  task scheduling latency histogram (pod creation to the binding cycle, KAI's 5..2560 ms buckets).

Names carry KAI's default ``--metrics-namespace`` prefix, ``kai_``. KAI's Go client exposes a counter under
exactly its declared name; the Python client would append ``_total``, so
``kai_podgroups_scheduled_by_action`` is exposed untyped with KAI's exact name (PromQL's ``rate`` and
``increase`` work on it as on KAI's); ``kai_pod_group_evicted_pods_total`` already ends in ``_total``
and is a counter.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    UnknownMetricFamily,
)

from scheduler.engine.decisions import CycleRecord

__all__ = [
    "KAI_LATENCY_BUCKETS_MS",
    "KAI_NAMESPACE",
    "KAI_QUEUE_LABELS",
    "KaiCycleMetrics",
    "kai_queue_families",
]

#: KAI's default ``--metrics-namespace``.
KAI_NAMESPACE = "kai"

#: Labels of KAI's per-queue metrics. ``queue_name`` and ``queue_metadata_name`` are the Queue's
#: metadata.name (KAI puts spec.displayName in ``queue_name`` when one is set; Hourglass does not ingest
#: display names, so ``queue_display_name`` is empty).
KAI_QUEUE_LABELS = ("queue_name", "queue_metadata_name", "queue_display_name")

#: KAI's latency histogram buckets: ``prometheus.ExponentialBuckets(5, 2, 10)``, 5 ms to 2560 ms.
KAI_LATENCY_BUCKETS_MS: tuple[float, ...] = tuple(5.0 * 2**i for i in range(10))

_MILLI = 1000  # engine milli-GPU / millicores per GPU / core
_BYTES_PER_GB = 1_000_000_000  # KAI's resource_info.MemoryToGB (decimal GB)


def _n(name: str) -> str:
    return f"{KAI_NAMESPACE}_{name}"


def _quota(value: int | None, per_unit: int) -> float:
    """A quota in KAI's metric unit; -1 means unlimited, as in KAI's Queue spec and queue-controller."""
    return -1.0 if value is None else value / per_unit


def kai_queue_families(record: CycleRecord | None) -> Iterator[Metric]:
    """KAI's per-queue gauges for the queues of ``record`` (none before the first cycle)."""
    queues = sorted(record.queues, key=lambda q: q.name) if record is not None else []
    labels = list(KAI_QUEUE_LABELS)

    def family(name: str, doc: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(_n(name), doc, labels=labels)

    info = family("queue_info", "Queue existence marker (always 1 when the queue exists)")
    deserved_gpu = family("queue_deserved_gpus", "Deserved GPU quota of the queue; -1 = unlimited")
    quota_cpu = family("queue_quota_cpu_cores", "CPU quota of the queue in cores; -1 = unlimited")
    quota_mem = family("queue_quota_memory_bytes", "Memory quota of the queue in bytes; -1 = unlimited")
    alloc_gpu = family("queue_allocated_gpus", "GPUs allocated to the queue's pods")
    alloc_cpu = family("queue_allocated_cpu_cores", "CPU allocated to the queue's pods, in cores")
    alloc_mem = family("queue_allocated_memory_bytes", "Memory allocated to the queue's pods, in bytes")
    fs_cpu = family("queue_fair_share_cpu_cores", "CPU Fair share of queue, as a gauge. Value is in Cores")
    fs_mem = family("queue_fair_share_memory_gb", "Memory Fair share of queue, as a gauge. Value is in GB")
    fs_gpu = family("queue_fair_share_gpu", "GPU Fair share of queue, as a gauge. Values in GPU devices")
    use_cpu = family("queue_cpu_usage", "CPU usage of queue, as a gauge (normalised historical usage U')")
    use_mem = family(
        "queue_memory_usage", "Memory usage of queue, as a gauge (normalised historical usage U')"
    )
    use_gpu = family("queue_gpu_usage", "GPU usage of queue, as a gauge (normalised historical usage U')")
    for q in queues:
        lv = [q.name, q.name, ""]
        info.add_metric(lv, 1.0)
        deserved_gpu.add_metric(lv, _quota(q.deserved.get("gpu"), _MILLI))
        quota_cpu.add_metric(lv, _quota(q.deserved.get("cpu"), _MILLI))
        quota_mem.add_metric(lv, _quota(q.deserved.get("memory"), 1))
        # The queue-controller rounds allocations to 4 decimals.
        alloc_gpu.add_metric(lv, round(q.allocated.get("gpu", 0) / _MILLI, 4))
        alloc_cpu.add_metric(lv, round(q.allocated.get("cpu", 0) / _MILLI, 4))
        alloc_mem.add_metric(lv, round(float(q.allocated.get("memory", 0)), 4))
        fs_cpu.add_metric(lv, q.fair_share.get("cpu", 0) / _MILLI)
        fs_mem.add_metric(lv, q.fair_share.get("memory", 0) / _BYTES_PER_GB)
        fs_gpu.add_metric(lv, q.fair_share.get("gpu", 0) / _MILLI)
        use_cpu.add_metric(lv, float(q.usage.get("cpu", 0.0)))
        use_mem.add_metric(lv, float(q.usage.get("memory", 0.0)))
        use_gpu.add_metric(lv, float(q.usage.get("gpu", 0.0)))
    yield from (info, deserved_gpu, quota_cpu, quota_mem, alloc_gpu, alloc_cpu, alloc_mem)
    yield from (fs_cpu, fs_mem, fs_gpu, use_cpu, use_mem, use_gpu)


def _ms(seconds: float) -> float:
    """Whole milliseconds, truncated, as KAI's ``Duration.Milliseconds()``."""
    return float(int(seconds * 1000))


@dataclass(eq=False)
class KaiCycleMetrics:
    """KAI's per-cycle latency gauges and cumulative counters; a collector on the scheduler's registry."""

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _e2e_ms: float | None = None
    _open_ms: float | None = None
    _close_ms: float | None = None
    _action_ms: dict[str, float] = field(default_factory=dict)
    _scheduled: dict[str, int] = field(default_factory=dict)
    _evicted: dict[tuple[str, str, str, str, str], int] = field(default_factory=dict)
    _task_buckets: list[int] = field(default_factory=lambda: [0] * len(KAI_LATENCY_BUCKETS_MS))
    _task_count: int = 0
    _task_sum: float = 0.0

    def observe(
        self,
        record: CycleRecord,
        durations: Mapping[str, float],
        total_s: float,
        open_session_key: str,
        cycle_key: str,
        task_latencies_ms: Sequence[float] = (),
    ) -> None:
        """Account one cycle: its timings (``durations`` as in :func:`scheduler.metrics.observe_cycle`,
        ``total_s`` the whole cycle), its decisions, and ``task_latencies_ms``, pod creation to bind per
        bound pod (KAI's task scheduling latency)."""
        actions = {k: v for k, v in durations.items() if k not in (open_session_key, cycle_key)}
        # The phases partition the cycle, so what is left after opening the session and running the
        # actions is closing it (building the cycle record), KAI's close-session step.
        close = total_s - durations.get(open_session_key, 0.0) - sum(actions.values())
        scheduled: dict[str, set[str]] = {}
        evicted: dict[tuple[str, str, str, str, str], int] = {}
        for d in record.decisions:
            action = d.action or ""
            if d.kind in ("Bind", "Pipeline"):
                scheduled.setdefault(action, set()).add(d.job)
            elif d.kind == "Evict":
                namespace, _, name = d.job.rpartition("/")
                key = (name, namespace, "", "", action)  # (podgroup, namespace, uid, nodepool, action)
                evicted[key] = evicted.get(key, 0) + 1  # one Evict decision per pod
        with self._lock:
            self._e2e_ms = _ms(total_s)
            if open_session_key in durations:
                self._open_ms = _ms(durations[open_session_key])
            self._close_ms = _ms(max(close, 0.0))
            for name in sorted(actions):
                self._action_ms[name] = _ms(actions[name])
            for action, jobs in scheduled.items():
                self._scheduled[action] = self._scheduled.get(action, 0) + len(jobs)
            for key, n in evicted.items():
                self._evicted[key] = self._evicted.get(key, 0) + n
            for ms in task_latencies_ms:
                self._task_count += 1
                self._task_sum += ms
                for i, bound in enumerate(KAI_LATENCY_BUCKETS_MS):
                    if ms <= bound:
                        self._task_buckets[i] += 1

    def collect(self) -> Iterator[Metric]:
        """The families, in KAI's names and units."""
        with self._lock:
            e2e, open_ms, close_ms = self._e2e_ms, self._open_ms, self._close_ms
            action_ms = dict(self._action_ms)
            scheduled = dict(self._scheduled)
            evicted = dict(self._evicted)
            task = (list(self._task_buckets), self._task_count, self._task_sum)
        for name, value, doc in (
            (
                "e2e_scheduling_latency_milliseconds",
                e2e,
                "E2e scheduling latency in milliseconds, as a gauge",
            ),
            (
                "open_session_latency_milliseconds",
                open_ms,
                "Open session latency in milliseconds, as a gauge",
            ),
            (
                "close_session_latency_milliseconds",
                close_ms,
                "Close session latency in milliseconds, as a gauge",
            ),
        ):
            g = GaugeMetricFamily(_n(name), doc)
            if value is not None:
                g.add_metric([], value)
            yield g
        act = GaugeMetricFamily(
            _n("action_scheduling_latency_milliseconds"),
            "Action scheduling latency in milliseconds, as a gauge",
            labels=["action"],
        )
        for name in sorted(action_ms):
            act.add_metric([name], action_ms[name])
        yield act
        sched = UnknownMetricFamily(
            _n("podgroups_scheduled_by_action"), "Count of podgroups scheduled per action", labels=["action"]
        )
        for action in sorted(scheduled):
            sched.add_metric([action], float(scheduled[action]))
        yield sched
        ev = CounterMetricFamily(
            _n("pod_group_evicted_pods_total"),
            "Total number of pods evicted per pod group",
            labels=["podgroup", "namespace", "uid", "nodepool", "action"],
        )
        for key in sorted(evicted):
            ev.add_metric(list(key), float(evicted[key]))
        yield ev
        buckets, count, total = task
        hist = HistogramMetricFamily(
            _n("task_scheduling_latency_milliseconds"), "Task scheduling latency in milliseconds"
        )
        hist.add_metric(
            [],
            [(_le(b), float(n)) for b, n in zip(KAI_LATENCY_BUCKETS_MS, buckets, strict=True)]
            + [("+Inf", float(count))],
            total,
        )
        yield hist


def _le(bound: float) -> str:
    """A bucket bound as Go's client writes it (``5``, ``10``, ..., ``2560``)."""
    return str(int(bound)) if bound == int(bound) else str(bound)
