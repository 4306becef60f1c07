"""KAI Scheduler's metric names, exported alongside Hourglass's own (docs/metrics.md, "KAI's metrics").

A KAI user's dashboards and alerts query names like ``kai_queue_fair_share_gpu`` or
``kai_e2e_scheduling_latency_milliseconds``. This module renders those names, with KAI's labels and units,
from the same cycle records and timings as the ``hourglass_*`` metrics, so both sets always agree:

* per queue, from the latest cycle record (what KAI's scheduler sets each cycle, and what KAI's
  queue-controller exports from Queue status): fair share, normalised usage, quota, allocation;
* per cycle: KAI's latency gauges in whole milliseconds (the cycle, opening and closing the session, each
  action, and the proportion plugin's session opening: the fair-share division), its cumulative per-action
  counters (podgroups scheduled and acted on, scenarios simulated and filtered, from the cycle's decisions
  and ``Session.work``), and the task scheduling latency histogram (pod creation to the binding cycle,
  KAI's 5..2560 ms buckets).

The binder's ``kai_task_bind_latency_milliseconds`` and the fairshare service's
``kai_usage_query_latency_milliseconds`` are served by those processes (``scheduler/metrics.py``
``BinderMetrics``, ``fairshare/metrics.py``).

Names carry KAI's default ``--metrics-namespace`` prefix, ``kai_``. KAI's Go client exposes a counter under
exactly its declared name; the Python client would append ``_total``, so
``kai_podgroups_scheduled_by_action`` (and the other counters whose names do not end in ``_total``) is
exposed untyped with KAI's exact name (PromQL's ``rate`` and
``increase`` work on it as on KAI's); ``kai_pod_group_evicted_pods_total`` already ends in ``_total``
and is a counter.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, UnknownMetricFamily

from fairshare.metrics import KAI_LATENCY_BUCKETS_MS, KaiLatencyHistogram, whole_ms
from scheduler.engine.record.decisions import CycleRecord

__all__ = [
    "KAI_LATENCY_BUCKETS_MS",  # re-exported from fairshare.metrics
    "KAI_NAMESPACE",
    "KAI_QUEUE_LABELS",
    "SOLVER_ACTIONS",
    "KaiCycleMetrics",
    "kai_queue_families",
]

#: KAI's default ``--metrics-namespace``.
KAI_NAMESPACE = "kai"

#: Labels of KAI's per-queue metrics: ``queue_name`` is the Queue's spec.displayName when one is set, else
#: its metadata.name; ``queue_metadata_name`` is always metadata.name; ``queue_display_name`` is
#: spec.displayName (empty without one).
KAI_QUEUE_LABELS = ("queue_name", "queue_metadata_name", "queue_display_name")


#: The actions that search victims scenario by scenario (KAI's solver): their attempts, simulated and
#: filtered scenarios are counted in ``Session.work`` as ``"<action>.attempts"`` / ``.simulations`` /
#: ``.filtered``.
SOLVER_ACTIONS: tuple[str, ...] = ("consolidation", "reclaim", "preempt")

#: The actions whose victim search is bounded by ``solver_job_budget`` / ``solver_action_budget``
#: (scheduler/engine/actions/budget.py): KAI's ``scenario_search_*`` metrics are reported for these.
SEARCH_ACTIONS: tuple[str, ...] = ("reclaim", "preempt")

#: The ``generator`` label of ``scenario_search_scenarios_total``: Hourglass's solver has one scenario
#: generator (KAI v0.17 runs several, each with its own budget).
SEARCH_GENERATOR = "solver"

#: Upper bounds of ``scenario_search_duration_seconds``: KAI's ``ExponentialBuckets(0.001, 2, 16)``.
SEARCH_DURATION_BUCKETS_S: tuple[float, ...] = tuple(0.001 * 2**i for i in range(16))

#: KAI's node pool of a PodGroup without the ``kai.scheduler/node-pool`` label.
DEFAULT_NODE_POOL = "default"

#: KAI's ``OnSession`` label values of ``plugin_scheduling_latency_milliseconds``.
ON_SESSION_OPEN = "OnSessionOpen"
ON_SESSION_CLOSE = "OnSessionClose"

_MILLI = 1000  # engine milli-GPU / millicores per GPU / core
_BYTES_PER_GB = 1_000_000_000  # KAI's resource_info.MemoryToGB (decimal GB)


def _n(name: str) -> str:
    return f"{KAI_NAMESPACE}_{name}"


def _quota(value: int | None, per_unit: int) -> float:
    """A quota in KAI's metric unit; -1 means unlimited, as in KAI's Queue spec and queue-controller."""
    return -1.0 if value is None else value / per_unit


def kai_queue_families(
    record: CycleRecord | None, display_names: Mapping[str, str] | None = None
) -> Iterator[Metric]:
    """KAI's per-queue gauges for the queues of ``record`` (none before the first cycle); ``display_names``
    maps a queue to its spec.displayName (the snapshot's, see :data:`KAI_QUEUE_LABELS`)."""
    names = display_names or {}
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
        display = names.get(q.name, "")
        lv = [display or q.name, q.name, display]
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
    _task: KaiLatencyHistogram = field(
        default_factory=lambda: KaiLatencyHistogram(
            _n("task_scheduling_latency_milliseconds"), "Task scheduling latency in milliseconds"
        )
    )
    _plugin_ms: dict[tuple[str, str], float] = field(default_factory=dict)
    _acted_on: dict[str, int] = field(default_factory=dict)
    _simulated: dict[str, int] = field(default_factory=dict)
    _filtered: dict[str, int] = field(default_factory=dict)
    _preemption_attempts: int = 0
    # KAI's scenario_search_* counters (pkg/scheduler/metrics/metrics.go), by (action, result) / action.
    _search_jobs: dict[tuple[str, str], int] = field(default_factory=dict)
    _search_exhausted: dict[str, int] = field(default_factory=dict)
    _search_simulated: dict[str, int] = field(default_factory=dict)
    _search_seconds: Histogram = field(
        default_factory=lambda: Histogram(
            _n("scenario_search_duration_seconds"),
            "Elapsed generator-search duration in seconds.",
            ["action", "generator", "result"],
            buckets=SEARCH_DURATION_BUCKETS_S,
            registry=None,  # collected with this collector's families
        )
    )

    def observe_searches(self, searches: Sequence[tuple[str, str, float]]) -> None:
        """Count each job's victim search of a cycle, ``(action, result, wall seconds)``, in KAI's
        ``scenario_search_duration_seconds`` (Hourglass's one generator: ``solver``)."""
        for action, result, seconds in searches:
            if seconds < 0:
                raise ValueError(f"search of {action!r} took a negative {seconds} s")
            self._search_seconds.labels(action, SEARCH_GENERATOR, result).observe(seconds)

    def observe(
        self,
        record: CycleRecord,
        durations: Mapping[str, float],
        total_s: float,
        open_session_key: str,
        cycle_key: str,
        task_latencies_ms: Sequence[float] = (),
        *,
        work: Mapping[str, int] | None = None,
        plugin_s: Mapping[tuple[str, str], float] | None = None,
        podgroups: Mapping[str, tuple[str, str]] | None = None,
        action_budget: int | None = None,
    ) -> None:
        """Account one cycle: its timings (``durations`` as in :func:`scheduler.metrics.observe_cycle`,
        ``total_s`` the whole cycle), its decisions, and ``task_latencies_ms``, pod creation to bind per
        bound pod (KAI's task scheduling latency). ``work`` is the cycle's ``Session.work`` (solver
        attempts, simulated and filtered scenarios per action); ``plugin_s`` maps (KAI plugin name, ``OnSession``
        label) to seconds. ``podgroups`` maps a job (``namespace/name``) to its PodGroup's ``metadata.uid`` and
        node pool, the ``uid`` and ``nodepool`` labels of ``pod_group_evicted_pods_total`` (unknown jobs:
        empty uid, KAI's default pool). ``action_budget`` is the cycle's ``solver_action_budget`` (an
        action whose failed simulations reached it exhausted its budget this cycle)."""
        actions = {k: v for k, v in durations.items() if k not in (open_session_key, cycle_key)}
        # The phases partition the cycle, so what is left after opening the session and running the
        # actions is closing it (building the cycle record), KAI's close-session step.
        close = total_s - durations.get(open_session_key, 0.0) - sum(actions.values())
        placed: dict[str, set[str]] = {}
        victims: dict[str, set[str]] = {}
        evicted: dict[tuple[str, str, str, str, str], int] = {}
        for d in record.decisions:
            action = d.action or ""
            if d.kind in ("Bind", "Pipeline"):
                placed.setdefault(action, set()).add(d.job)
            elif d.kind == "Evict":
                victims.setdefault(action, set()).add(d.job)
                namespace, _, name = d.job.rpartition("/")
                uid, pool = (podgroups or {}).get(d.job, ("", DEFAULT_NODE_POOL))
                key = (name, namespace, uid, pool, action)  # (podgroup, namespace, uid, nodepool, action)
                evicted[key] = evicted.get(key, 0) + 1  # one Evict decision per pod
        # KAI counts the job an action scheduled, not the victims it moved elsewhere (a victim re-placed by
        # consolidation, reclaim or preempt has both an Evict and a Pipeline decision of that action).
        scheduled = {a: jobs - victims.get(a, set()) for a, jobs in placed.items()}
        scheduled = {a: jobs for a, jobs in scheduled.items() if jobs}
        preempted = scheduled.get("preempt", set())
        work = work or {}
        with self._lock:
            for (plugin, on), seconds in sorted((plugin_s or {}).items()):
                self._plugin_ms[(plugin, on)] = whole_ms(seconds)
            for action in SOLVER_ACTIONS:
                for into, kind in (
                    (self._acted_on, "attempts"),
                    (self._simulated, "simulations"),
                    (self._filtered, "filtered"),
                ):
                    n = int(work.get(f"{action}.{kind}", 0))
                    if n or action in into:
                        into[action] = into.get(action, 0) + n
            for action in SEARCH_ACTIONS:
                attempts = int(work.get(f"{action}.attempts", 0))
                cut = int(work.get(f"{action}.cut", 0))
                solved = min(len(scheduled.get(action, ())), attempts)
                results = (
                    ("solved", solved),
                    ("deadline_exhausted", cut),  # stopped by a budget (KAI's are deadlines)
                    ("generators_exhausted", max(attempts - solved - cut, 0)),
                )
                for result, n in results:
                    if n or (action, result) in self._search_jobs:
                        self._search_jobs[(action, result)] = self._search_jobs.get((action, result), 0) + n
                wasted = int(work.get(f"{action}.wasted", 0))
                spent = action_budget is not None and attempts > 0 and wasted >= action_budget
                if spent or attempts or action in self._search_exhausted:
                    self._search_exhausted[action] = self._search_exhausted.get(action, 0) + int(spent)
                sims = int(work.get(f"{action}.simulations", 0))
                if sims or action in self._search_simulated:
                    self._search_simulated[action] = self._search_simulated.get(action, 0) + sims
            # KAI counts a preemption attempt only when the preempt action found victims for a job.
            self._preemption_attempts += len(preempted)
            self._e2e_ms = whole_ms(total_s)
            if open_session_key in durations:
                self._open_ms = whole_ms(durations[open_session_key])
            self._close_ms = whole_ms(max(close, 0.0))
            for name in sorted(actions):
                self._action_ms[name] = whole_ms(actions[name])
            for action, jobs in scheduled.items():
                self._scheduled[action] = self._scheduled.get(action, 0) + len(jobs)
            for key, n in evicted.items():
                self._evicted[key] = self._evicted.get(key, 0) + n
        for ms in task_latencies_ms:
            self._task.observe_ms(ms)

    def collect(self) -> Iterator[Metric]:
        """The families, in KAI's names and units."""
        with self._lock:
            e2e, open_ms, close_ms = self._e2e_ms, self._open_ms, self._close_ms
            action_ms = dict(self._action_ms)
            scheduled = dict(self._scheduled)
            evicted = dict(self._evicted)
            plugin_ms = dict(self._plugin_ms)
            per_action = (
                ("podgroups_acted_on_by_action", "Count of podgroups tried per action", dict(self._acted_on)),
                (
                    "scenarios_simulation_by_action",
                    "Count of scenarios simulated per action",
                    dict(self._simulated),
                ),
                (
                    "scenarios_filtered_by_action",
                    "Count of scenarios filtered per action",
                    dict(self._filtered),
                ),
            )
            preemption_attempts = self._preemption_attempts
            search_jobs = dict(self._search_jobs)
            search_exhausted = dict(self._search_exhausted)
            search_simulated = dict(self._search_simulated)
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
        plug = GaugeMetricFamily(
            _n("plugin_scheduling_latency_milliseconds"),
            "Plugin scheduling latency in milliseconds, as a gauge",
            labels=["plugin", "OnSession"],
        )
        for plugin_on in sorted(plugin_ms):
            plug.add_metric(list(plugin_on), plugin_ms[plugin_on])
        yield plug
        for name, doc, counts in per_action:
            # Untyped under KAI's exact name, as podgroups_scheduled_by_action (see the module docstring).
            fam = UnknownMetricFamily(_n(name), doc, labels=["action"])
            for action in sorted(counts):
                fam.add_metric([action], float(counts[action]))
            yield fam
        attempts = UnknownMetricFamily(
            _n("total_preemption_attempts"), "Total preemption attempts in the cluster till now"
        )
        attempts.add_metric([], float(preemption_attempts))
        yield attempts
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
        jobs = CounterMetricFamily(
            _n("scenario_search_jobs_total"),
            "Count of jobs considered by bounded scenario search.",
            labels=["action", "result", "reduced_budget"],
        )
        for (action, result), n in sorted(search_jobs.items()):
            # Hourglass's budgets never shrink within a cycle: no job runs on a reduced budget.
            jobs.add_metric([action, result, "false"], float(n))
        yield jobs
        exhausted = CounterMetricFamily(
            _n("scenario_search_action_budget_exhausted_total"),
            "Count of action-level scenario search budget exhaustion events.",
            labels=["action"],
        )
        for action in sorted(search_exhausted):
            exhausted.add_metric([action], float(search_exhausted[action]))
        yield exhausted
        scenarios = CounterMetricFamily(
            _n("scenario_search_scenarios_total"),
            "Count of bounded-search scenarios by state.",
            labels=["action", "generator", "state"],
        )
        for action in sorted(search_simulated):
            scenarios.add_metric([action, SEARCH_GENERATOR, "simulated"], float(search_simulated[action]))
        yield scenarios
        yield from self._search_seconds.collect()
        # KAI's search budgets are durations, 0 meaning none ("unlimited"). Hourglass's search has no time
        # budget (a cycle reads no clock): it is bounded by counts of scenarios (solver_job_budget,
        # solver_action_budget), so in KAI's terms each configured time budget is 0.
        action_budget = GaugeMetricFamily(
            _n("scenario_search_action_budget_configured_seconds"),
            "Configured action scenario search budget in seconds.",
            labels=["action"],
        )
        for action in SEARCH_ACTIONS:
            action_budget.add_metric([action], 0.0)
        yield action_budget
        yield GaugeMetricFamily(
            _n("scenario_search_job_budget_configured_seconds"),
            "Configured per-job scenario search budget in seconds.",
            value=0.0,
        )
        generator_budget = GaugeMetricFamily(
            _n("scenario_search_generator_budget_configured_seconds"),
            "Configured generator scenario search budget in seconds.",
            labels=["generator"],
        )
        generator_budget.add_metric([SEARCH_GENERATOR], 0.0)
        yield generator_budget
        yield from self._task.collect()
