"""``hourglass simulate``: replay a production trace, or a synthetic scenario, through the engine on a
simulated clock.

The workload is trace tasks (each a single-pod job in the queue the tenants' hash picks) and/or jobs from
a scenario's generators (:mod:`analytics.simulation.scenario`: gangs of identical pods already placed in a queue,
plus keep-pending rules that submit more while the run goes on, which is why such a run has a fixed end).

Everything the simulated cluster does is an event of the contract (:mod:`ingest.events`), folded with
:class:`~scheduler.engine.state.StateBuilder` and written to a :class:`~analytics.rundir.SimLog`, so a run leaves
the same event log and cycle records a real deployment would:

* t = 0: one ``NodeUpserted`` per node, one ``QueueUpserted`` per queue (parents first), one
  ``TopologyUpserted`` per topology (a scenario's; jobs may carry a topology constraint on their pod group);
* a task's ``creation_time`` (a job's arrival): ``PodGroupUpserted`` + one ``PodSubmitted`` per pod
  (namespace = the queue); a pod group is deleted when its last pod finishes;
* a cycle every ``period`` simulated seconds, at multiples of the period; its ``Bind`` decisions become
  ``PodBound`` events at the cycle's time; ``Pipeline`` decisions stay pending (the next cycle re-decides);
* a bound task runs for its trace runtime (``deletion_time - creation_time``), counted from when it
  started, then ``PodFinished`` + ``PodDeleted`` + ``PodGroupDeleted``;
* ``Evict``: ``PodReleasing`` at the cycle's time; the pod keeps its node for the eviction grace, then
  ``PodFinished(Failed)`` + ``PodDeleted`` and the pod is re-submitted pending (same name and creation
  time). A restarted task runs its full runtime again: the trace has no checkpoints.
* the end of the run, if no event or cycle is already there (a fixed-length run's last cycle comes before
  its end): a ``ClockTick``, so the log says where the run ends.

Cycle skipping. A cycle runs at a period boundary only if something that can change its outcome happened
since the previous cycle: (a) an event from outside the engine (arrival, finish, end of an eviction),
(b) the previous cycle changed the cluster (bound or evicted) and pods are still pending, or (c) pods are
pending and time alone can change the outcome: a min-runtime protection expired or, with ``k_value`` > 0,
a new usage snapshot is due. Otherwise the cycle would see the same snapshot and decide the same thing, so
it is skipped and not recorded. The run ends when no task is left to arrive or finish and the last cycle
changed nothing; whatever is pending then can never be placed (pending at end).

Accounting. A pod *holds* the GPUs it was bound with from its ``PodBound`` until its ``PodFinished``
(evicted pods hold them through the grace period), one still running until the end of the run: the rule
of :mod:`analytics.audit.gpuhours` and the ``pod_runs`` view, applied to the same events. GPU-hours received are
the integral of held GPUs, in exact milli-GPU x ms (hours only in the summary); fair-share GPU-hours are the
integral of the fair share each cycle record states, capped at the cluster (:mod:`analytics.fairness`, the
definition ``report`` and ``whatif`` use), held until the next recorded cycle. Fragmented GPUs:
idle GPU capacity on nodes where the workload's most common GPU request (by task count; one whole GPU on
the default trace) does not fit on the free devices (a whole-GPU request needs that many fully idle
devices, a fractional one a device with that much free).
"""

from __future__ import annotations

import hashlib
import heapq
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from analytics.fairness import capped_fair_shares, received_over_fair_share
from analytics.gctune import gc_tuned
from analytics.rundir import NullLog, SimLog, usage_record
from ingest import events as ev
from ingest.tenants import TenantsConfig
from ingest.trace import TraceTask, task_node_affinity, task_requests
from scheduler.config import session_config
from scheduler.engine import scoring
from scheduler.engine.kept import KeptRun, KeptSession
from scheduler.engine.record.decisions import CycleRecord, Decision, config_hash
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import SUBGROUP_LABEL, StateBuilder

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "SUMMARY_FORMAT",
    "JobSpec",
    "KeepPending",
    "SimulationResult",
    "Simulator",
    "UsageFn",
    "UsageHistory",
    "file_input",
    "simulate",
]

SUMMARY_FORMAT: Final = "hourglass-sim-summary/1"
GPU_MILLI: Final = 1000
MS_PER_HOUR: Final = 3_600_000
MAX_CYCLES: Final = 10_000_000  # a guard against an engine that never settles, not a tuning knob

# Heap entry kinds. Ties at the same time go by push order (a sequence number), never by object identity.
_ARRIVE, _FINISH, _TERMINATE, _WAKE, _RULE = 0, 1, 2, 3, 4
_RESOURCES: Final = ("gpu", "cpu", "memory")


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job to simulate: a gang of *pods* identical pods (one pod group, ``min_member`` = *pods*).

    A single-pod job's pod is named like the job; pod *i* of a larger gang is ``<name>-<i>``. Each pod runs
    *runtime_ms* from when it is bound, then finishes (``Failed`` if *fails*, else ``Succeeded``).
    """

    name: str
    queue: str
    created_ms: int
    runtime_ms: int
    requests: ev.PodRequests
    pods: int = 1
    priority: int = 50
    affinity: tuple[ev.NodeSelectorTerm, ...] = ()
    fails: bool = False
    topology: str | None = None  # KAI topologyConstraint of the pod group (levels need a topology)
    required_level: str | None = None
    preferred_level: str | None = None
    # KAI subGroups of the pod group, and the PodSet (a subgroup no other names as parent) of each pod in pod
    # order, which the pod joins with the kai.scheduler/subgroup-name label; () = no subgroups.
    subgroups: tuple[ev.SubGroup, ...] = ()
    min_sub_group: int | None = None
    pod_subgroups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class KeepPending:
    """A generator rule: from *start_ms* until *stop_ms*, keep *jobs* jobs of one shape pending in *queue*.

    Whenever fewer of the rule's jobs are pending (submitted, some pod not yet bound) than *jobs*, the
    simulator submits another at that moment, named ``<name>-<k>`` (k = 0, 1, ...).
    """

    name: str
    queue: str
    jobs: int
    runtime_ms: int
    requests: ev.PodRequests
    pods: int = 1
    priority: int = 50
    start_ms: int = 0
    stop_ms: int | None = None
    affinity: tuple[ev.NodeSelectorTerm, ...] = ()
    topology: str | None = None
    required_level: str | None = None
    preferred_level: str | None = None
    subgroups: tuple[ev.SubGroup, ...] = ()  # as JobSpec's
    min_sub_group: int | None = None
    pod_subgroups: tuple[str, ...] = ()


@dataclass(slots=True)
class _Group:
    """One job (pod group) through its simulated life."""

    name: str
    queue: str
    priority: int
    created_ms: int
    pods: list[int]  # task indices
    rule: int = -1  # the KeepPending rule that submitted it, -1 for none
    live: int = 0  # pods not done
    pending: int = 0  # pods pending right now
    topology: str | None = None
    required_level: str | None = None
    preferred_level: str | None = None
    subgroups: tuple[ev.SubGroup, ...] = ()
    min_sub_group: int | None = None


@dataclass(slots=True)
class _Task:
    """One pod through its simulated life."""

    name: str
    group: int
    queue: str
    created_ms: int
    runtime_ms: int
    requests: ev.PodRequests
    affinity: list[ev.NodeSelectorTerm]
    fails: bool = False
    subgroup: str | None = None  # the PodSet it joins (its kai.scheduler/subgroup-name label)
    state: str = "waiting"  # waiting -> pending -> running (-> releasing -> pending ...) -> done
    first_start_ms: int | None = None
    incarnation: int = 0  # bumped on eviction, so the evicted run's finish is ignored
    node: int = -1
    first_node: int = -1  # where its first run was placed
    devices: tuple[int, ...] = ()
    per_device: int = 0  # milli-GPU held on each device
    evictions: int = 0
    last_reason: str | None = None

    @property
    def uid(self) -> str:
        return f"{self.queue}/{self.name}"

    @property
    def held_gpu_milli(self) -> int:
        return self.per_device * len(self.devices)


@dataclass(slots=True)
class _NodeAcct:
    """Idle milli-GPU per device of one node, and how much of it is fragmented."""

    free: list[int]
    fragmented: int = 0


@dataclass(slots=True)
class SimulationResult:
    """What a run produced: the summary figures plus the series the plots need."""

    summary: dict[str, Any]
    capacity_gpu_milli: int
    leaf_queues: list[str]
    # (time ms, held milli-GPU, fragmented milli-GPU, held milli-GPU per leaf queue) at every change.
    timeline: list[tuple[int, int, int, tuple[int, ...]]] = field(default_factory=list)


class UsageHistory:
    """The exact allocation history of a run, as step functions: what each leaf queue held, by resource.

    One point per change (the value holds until the next point of the same queue and resource); several
    changes at the same instant keep only the last. The frames are those of :mod:`fairshare.source` for an
    *exact* source, so :func:`fairshare.decay.usage_at` reads them as it reads the event-log ledger.
    """

    def __init__(self, leaves: Sequence[str], capacity: Sequence[int]) -> None:
        self.leaves = list(leaves)
        self.capacity = list(capacity)  # constant over a run: nodes never change in the simulator
        # per leaf, per resource: change times (ms) and the value held from then on.
        self.times: list[list[list[int]]] = [[[0] for _ in _RESOURCES] for _ in self.leaves]
        self.values: list[list[list[int]]] = [[[0] for _ in _RESOURCES] for _ in self.leaves]

    def record(self, at_ms: int, leaf: int, held: Sequence[int]) -> None:
        """Leaf queue number *leaf* holds *held* (gpu, cpu, memory in engine units) from *at_ms* on."""
        for r, value in enumerate(held):
            ts, vs = self.times[leaf][r], self.values[leaf][r]
            if vs[-1] == value:
                continue
            if ts[-1] == at_ms:
                vs[-1] = value
            else:
                ts.append(at_ms)
                vs.append(value)

    def forget_before(self, at_ms: int) -> None:
        """Drop points wholly before *at_ms* (keeping the one in force then), e.g. outside a sliding window."""
        for leaf_t, leaf_v in zip(self.times, self.values, strict=True):
            for ts, vs in zip(leaf_t, leaf_v, strict=True):
                k = 0
                while k + 1 < len(ts) and ts[k + 1] <= at_ms:
                    k += 1
                if k:
                    del ts[:k]
                    del vs[:k]

    def allocation_frame(self) -> pl.DataFrame:
        """``ts_ms, queue, resource, value`` rows (:data:`fairshare.source.ALLOCATION_SCHEMA`)."""
        import polars as pl

        rows: dict[str, list[Any]] = {"ts_ms": [], "queue": [], "resource": [], "value": []}
        for name, leaf_t, leaf_v in zip(self.leaves, self.times, self.values, strict=True):
            for res, ts, vs in zip(_RESOURCES, leaf_t, leaf_v, strict=True):
                rows["ts_ms"].extend(ts)
                rows["queue"].extend([name] * len(ts))
                rows["resource"].extend([res] * len(ts))
                rows["value"].extend(float(v) for v in vs)
        schema = {"ts_ms": pl.Int64, "queue": pl.Utf8, "resource": pl.Utf8, "value": pl.Float64}
        return pl.DataFrame(rows, schema=schema)

    def capacity_frame(self) -> pl.DataFrame:
        """``ts_ms, resource, value`` rows (:data:`fairshare.source.CAPACITY_SCHEMA`): constant from 0."""
        import polars as pl

        schema = {"ts_ms": pl.Int64, "resource": pl.Utf8, "value": pl.Float64}
        return pl.DataFrame(
            {"ts_ms": [0] * 3, "resource": list(_RESOURCES), "value": [float(c) for c in self.capacity]},
            schema=schema,
        )


#: A usage computation: (history, snapshot time ms) -> leaf queue -> resource -> usage normalised to the
#: capacity integral over the same window (KAI's U').
UsageFn = Callable[[UsageHistory, int], dict[str, dict[str, float]]]


def _p95(values: Sequence[float]) -> float:
    """Nearest-rank 95th percentile (0.0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(math.ceil(0.95 * len(ordered)) - 1, 0)]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Simulator:
    """One simulation run. Build it, call :meth:`run`, read the :class:`SimulationResult`.

    *tasks* (trace rows, each a single-pod job in the queue the tenants' hash picks) and *jobs* (already
    placed in a queue, e.g. from a scenario's generators) are simulated in creation order (ties: trace
    tasks first, then input order); *keep_pending* rules submit more jobs while the run goes on; *nodes*
    are the cluster. *end_ms* stops the run at that simulated time (required with *keep_pending*, which
    never runs dry). *usage* replaces the built-in decayed-usage accumulator (``k_value`` > 0 only): it is
    called with the exact allocation history and the snapshot time, see :class:`UsageHistory`. *seed*
    salts the task -> queue hash (0 = the plain name), the only input the seed changes: the engine is
    deterministic, so the same inputs and seed give byte-identical logs. *topologies* are logged at t = 0;
    with them the summary has a ``topology`` section (gang placement per level and queue).
    """

    def __init__(
        self,
        tasks: Sequence[TraceTask],
        nodes: Sequence[ev.NodeUpserted],
        tenants: TenantsConfig,
        *,
        period_s: int | None = None,
        seed: int = 0,
        log: SimLog | None = None,
        progress: Callable[[int], None] | None = None,
        jobs: Sequence[JobSpec] = (),
        keep_pending: Sequence[KeepPending] = (),
        end_ms: int | None = None,
        usage: UsageFn | None = None,
        topologies: Sequence[ev.TopologyUpserted] = (),
    ) -> None:
        """Load and check the inputs before the first cycle: nodes, queues, jobs and the engine's config.

        Long on purpose: the checks run in the order the inputs depend on each other, each error naming its
        input.
        """
        self.tenants = tenants
        self.topologies = list(topologies)
        self.period_ms = (period_s if period_s is not None else tenants.cycle_period_s) * 1000
        if self.period_ms <= 0:
            raise ValueError(f"the cycle period must be positive, got {self.period_ms / 1000:g} s")
        self.config: SessionConfig = session_config(tenants.engine)
        _check_scoring(self.config.node_scoring)
        self.seed = seed
        self.log: SimLog = log if log is not None else NullLog()
        self.progress = progress
        self.grace_ms = tenants.eviction_grace_s * 1000
        self.min_runtimes = tenants.min_runtimes_ms()
        self.k_on = tenants.engine.k_value > 0

        self.nodes = list(nodes)
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}
        self.node_acct = [_NodeAcct(free=[GPU_MILLI] * n.gpus) for n in self.nodes]
        self.capacity_gpu_milli = sum(n.gpus for n in self.nodes) * GPU_MILLI

        self.queue_specs = tenants.ordered()
        self.leaves = [q.name for q in tenants.leaves()]
        self.leaf_index = {name: i for i, name in enumerate(self.leaves)}
        self.children: dict[str, list[str]] = {q.name: [] for q in self.queue_specs}
        for q in self.queue_specs:
            if q.parent is not None:
                self.children[q.parent].append(q.name)

        if keep_pending and end_ms is None:
            raise ValueError("keep_pending jobs never run dry: the run needs an end time")
        if end_ms is not None and end_ms <= 0:
            raise ValueError(f"the simulated duration must be positive, got {end_ms / 1000:g} s")
        self.end_ms = end_ms
        self.tasks: list[_Task] = []
        self.groups: list[_Group] = []
        self.by_uid: dict[str, int] = {}
        specs: list[JobSpec] = []
        for t in tasks:
            if t.creation_s is None or t.deletion_s is None:
                raise ValueError(f"task {t.name!r} has no creation_time / deletion_time; cannot simulate it")
            specs.append(
                JobSpec(
                    name=t.name,
                    queue=tenants.queue_for(t.name, seed),
                    created_ms=t.creation_s * 1000,
                    runtime_ms=(t.deletion_s - t.creation_s) * 1000,
                    priority=tenants.job_priority.of(t.qos),
                    requests=task_requests(t),
                    affinity=tuple(task_node_affinity(t)),
                    fails=t.pod_phase == "Failed",  # a task that failed in production fails here too
                )
            )
        specs.extend(jobs)
        self.rules = list(keep_pending)
        self.rule_pending = [0] * len(self.rules)
        self.rule_next = [0] * len(self.rules)
        leaf_names = {q.name for q in tenants.leaves()}
        everything: list[JobSpec | KeepPending] = [*specs, *self.rules]
        for spec in everything:
            if spec.queue not in leaf_names:
                raise ValueError(f"job {spec.name!r}: queue {spec.queue!r} is not a leaf queue")
        for spec in specs:
            self._add_job(spec)
        self.probe = (
            _fragmentation_probe(tasks)
            if not jobs and not keep_pending
            else _request_probe([(s.requests, s.pods) for s in everything])
        )

        self.builder = StateBuilder()
        self.offset = -1
        # The session is kept between cycles and patched from the pods the events since named, as the
        # service does (scheduler/engine/kept.py): a fresh session per cycle rebuilt every node's
        # bookkeeping (1,213 nodes x 6,599 cycles on the default trace). The records are those of a fresh
        # session (tests/scheduler/engine/test_kept_session.py); `hourglass replay --verify` rebuilds each afresh.
        self.engine = KeptRun(self.builder)
        self.logged_ms = 0  # the latest time the log records (an event's or a cycle's)
        self.heap: list[tuple[int, int, int, int, int]] = []
        self.seq = 0
        self.real_in_heap = 0  # heap entries other than wake-ups
        self.pending = 0

        # Integrals (exact ints: milli-GPU x ms) and the series for the plots.
        self.now = 0
        self.held = 0
        self.fragmented = 0
        self.leaf_held = [0] * len(self.leaves)
        self.leaf_held_ms = [0] * len(self.leaves)
        self.held_ms = 0
        self.fragmented_ms = 0
        self.peak_held = 0
        # The GPU fair share capped at the cluster (analytics.fairness), so a float: milli-GPU and milli-GPU x ms.
        self.fair_now: dict[str, float] = {}
        self.fair_ms: dict[str, float] = {q.name: 0.0 for q in self.queue_specs}
        for acct in self.node_acct:  # an idle node too small for the probe is fragmented from the start
            acct.fragmented = self._node_fragmented(acct)
            self.fragmented += acct.fragmented
        self.timeline: list[tuple[int, int, int, tuple[int, ...]]] = [
            (0, 0, self.fragmented, tuple(self.leaf_held))
        ]

        # Historical usage for the time-based fair share (only with k_value > 0).
        self.half_life_ms = tenants.engine.usage_half_life_s * 1000
        self.refresh_ms = tenants.engine.usage_refresh_s * 1000
        self.leaf_usage = [[0.0, 0.0, 0.0] for _ in self.leaves]
        self.leaf_res = [[0, 0, 0] for _ in self.leaves]  # held gpu / cpu / memory per leaf
        self.cap_usage = [0.0, 0.0, 0.0]
        self.capacity_vec = [
            self.capacity_gpu_milli,
            sum(n.cpu_millicores for n in self.nodes),
            sum(n.memory_bytes for n in self.nodes),
        ]
        self.usage: dict[str, dict[str, float]] | None = None
        self.usage_id: str | None = None
        self.usage_at: int | None = None
        # With a usage function: the exact allocation history it reads (recorded only when k_value > 0).
        self.usage_fn = usage
        self.history = UsageHistory(self.leaves, self.capacity_vec)

        self.cycles = 0
        self.slots_skipped = 0
        self.binds = 0
        self.evictions = 0
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self.cycle_wall_s = 0.0

    def _add_job(self, spec: JobSpec, rule: int = -1) -> int:
        """Register a job and its pods (no events yet); returns the group index."""
        if spec.pods < 1:
            raise ValueError(f"job {spec.name!r} needs at least one pod, got {spec.pods}")
        if spec.runtime_ms < 0:
            raise ValueError(f"job {spec.name!r} has a negative runtime ({spec.runtime_ms} ms)")
        _check_subgroups(spec)
        gi = len(self.groups)
        names = [spec.name] if spec.pods == 1 else [f"{spec.name}-{k}" for k in range(spec.pods)]
        group = _Group(
            name=spec.name,
            queue=spec.queue,
            priority=spec.priority,
            created_ms=spec.created_ms,
            pods=[],
            rule=rule,
            live=spec.pods,
            topology=spec.topology,
            required_level=spec.required_level,
            preferred_level=spec.preferred_level,
            subgroups=spec.subgroups,
            min_sub_group=spec.min_sub_group,
        )
        for k, name in enumerate(names):
            t = _Task(
                name=name,
                group=gi,
                queue=spec.queue,
                created_ms=spec.created_ms,
                runtime_ms=spec.runtime_ms,
                requests=spec.requests,
                affinity=list(spec.affinity),
                fails=spec.fails,
                subgroup=spec.pod_subgroups[k] if spec.pod_subgroups else None,
            )
            if t.uid in self.by_uid:
                raise ValueError(f"two pods are named {t.uid!r}; job and pod names must be unique per queue")
            self.by_uid[t.uid] = len(self.tasks)
            group.pods.append(len(self.tasks))
            self.tasks.append(t)
        self.groups.append(group)
        return gi

    # -- the event stream --------------------------------------------------------------------------------
    def _emit(self, event: ev.EventBase) -> None:
        """Append one event to the log and fold it: the only way the simulated cluster changes."""
        self.offset += 1
        self.engine.apply(event, self.offset)
        self.log.append_event(self.offset, event)
        self.logged_ms = max(self.logged_ms, event.at_ms)

    def _push(self, at_ms: int, kind: int, task: int = -1, incarnation: int = 0) -> None:
        heapq.heappush(self.heap, (at_ms, self.seq, kind, task, incarnation))
        self.seq += 1
        if kind != _WAKE:
            self.real_in_heap += 1

    def _submit(self, t: _Task, at_ms: int) -> None:
        g = self.groups[t.group]
        self._emit(
            ev.PodSubmitted(
                at_ms=at_ms,
                name=t.name,
                namespace=t.queue,
                pod_group=g.name,
                queue=t.queue,
                requests=t.requests,
                node_affinity=t.affinity,
                created_at_ms=t.created_ms,
                labels={SUBGROUP_LABEL: t.subgroup} if t.subgroup is not None else {},
            )
        )
        t.state = "pending"
        self.pending += 1
        g.pending += 1
        if g.pending == 1 and g.rule >= 0:
            self.rule_pending[g.rule] += 1

    # -- accounting --------------------------------------------------------------------------------------
    def _advance(self, t_ms: int) -> None:
        """Move the clock to *t_ms*, integrating everything held since the last change."""
        dt = t_ms - self.now
        if dt <= 0:
            return
        self.held_ms += self.held * dt
        self.fragmented_ms += self.fragmented * dt
        for i, h in enumerate(self.leaf_held):
            if h:
                self.leaf_held_ms[i] += h * dt
        for name, fs in self.fair_now.items():
            if fs:
                self.fair_ms[name] += fs * dt
        if self.k_on and self.usage_fn is None:
            # Exponentially decayed integrals: u <- u*d + a*(1-d)*h/ln2 with d = 2^(-dt/h).
            decay = 2.0 ** (-dt / self.half_life_ms)
            gain = (1.0 - decay) * self.half_life_ms / math.log(2)
            for u, a in zip(self.leaf_usage, self.leaf_res, strict=True):
                for r in range(3):
                    u[r] = u[r] * decay + a[r] * gain
            for r in range(3):
                self.cap_usage[r] = self.cap_usage[r] * decay + self.capacity_vec[r] * gain
        self.now = t_ms

    def _node_fragmented(self, acct: _NodeAcct) -> int:
        idle = sum(acct.free)
        if self.probe is None or idle == 0:
            return 0
        num_gpu, milli = self.probe
        if milli >= GPU_MILLI:
            fits = sum(1 for f in acct.free if f == GPU_MILLI) >= num_gpu
        else:
            fits = any(f >= milli for f in acct.free)
        return 0 if fits else idle

    def _hold(self, t: _Task, sign: int) -> None:
        """A bound pod starts (+1) or stops (-1) holding its node's devices."""
        acct = self.node_acct[t.node]
        for d in t.devices:
            acct.free[d] -= sign * t.per_device
            if not 0 <= acct.free[d] <= GPU_MILLI:
                node = self.nodes[t.node].name
                raise AssertionError(f"device {d} of node {node} over capacity ({acct.free[d]} milli free)")
        frag = self._node_fragmented(acct)
        self.fragmented += frag - acct.fragmented
        acct.fragmented = frag
        gpu = t.held_gpu_milli
        self.held += sign * gpu
        self.peak_held = max(self.peak_held, self.held)
        li = self.leaf_index[t.queue]
        self.leaf_held[li] += sign * gpu
        res = self.leaf_res[li]
        res[0] += sign * gpu
        res[1] += sign * t.requests.cpu_millicores
        res[2] += sign * t.requests.memory_bytes
        if self.k_on and self.usage_fn is not None:
            self.history.record(self.now, li, res)
        if gpu:
            point = (self.now, self.held, self.fragmented, tuple(self.leaf_held))
            if self.timeline[-1][0] == self.now:
                self.timeline[-1] = point
            else:
                self.timeline.append(point)

    # -- what happens outside the engine --------------------------------------------------------------
    def _arrive(self, gi: int, at_ms: int) -> None:
        """A job appears: its pod group, then each of its pods, pending."""
        g = self.groups[gi]
        self._emit(
            ev.PodGroupUpserted(
                at_ms=at_ms,
                name=g.name,
                namespace=g.queue,
                queue=g.queue,
                min_member=len(g.pods),
                priority=g.priority,
                created_at_ms=g.created_ms,
                topology=g.topology,
                required_topology_level=g.required_level,
                preferred_topology_level=g.preferred_level,
                subgroups=list(g.subgroups),
                min_sub_group=g.min_sub_group,
            )
        )
        for i in g.pods:
            self._submit(self.tasks[i], at_ms)

    def _handle(self, kind: int, i: int, incarnation: int, at_ms: int) -> bool:
        """Apply one due heap entry (*i*: a group for arrivals, a rule for rule starts, else a pod); True if
        it emitted events."""
        if kind == _ARRIVE:
            self._arrive(i, at_ms)
            return True
        if kind == _RULE:
            return self._top_up(at_ms)
        t = self.tasks[i]
        ns = t.queue
        if incarnation != t.incarnation:
            return False  # the run this entry belonged to was evicted
        if kind == _FINISH and t.state == "running":
            phase: Literal["Failed", "Succeeded"] = "Failed" if t.fails else "Succeeded"
            self._emit(ev.PodFinished(at_ms=at_ms, name=t.name, namespace=ns, phase=phase))
            self._hold(t, -1)
            self._emit(ev.PodDeleted(at_ms=at_ms, name=t.name, namespace=ns))
            t.state = "done"
            g = self.groups[t.group]
            g.live -= 1
            if g.live == 0:
                self._emit(ev.PodGroupDeleted(at_ms=at_ms, name=g.name, namespace=ns))
            return True
        if kind == _TERMINATE and t.state == "releasing":
            self._emit(ev.PodFinished(at_ms=at_ms, name=t.name, namespace=ns, phase="Failed"))
            self._hold(t, -1)
            self._emit(ev.PodDeleted(at_ms=at_ms, name=t.name, namespace=ns))
            t.node, t.devices, t.per_device = -1, (), 0
            self._submit(t, at_ms)  # the controller re-creates the evicted pod
            return True
        return False

    def _top_up(self, now_ms: int) -> bool:
        """Submit jobs for every active keep-pending rule below its count; True if any was submitted."""
        added = False
        for r, rule in enumerate(self.rules):
            if now_ms < rule.start_ms or (rule.stop_ms is not None and now_ms >= rule.stop_ms):
                continue
            while self.rule_pending[r] < rule.jobs:
                k = self.rule_next[r]
                self.rule_next[r] += 1
                spec = JobSpec(
                    name=f"{rule.name}-{k}",
                    queue=rule.queue,
                    created_ms=now_ms,
                    runtime_ms=rule.runtime_ms,
                    requests=rule.requests,
                    pods=rule.pods,
                    priority=rule.priority,
                    affinity=rule.affinity,
                    topology=rule.topology,
                    required_level=rule.required_level,
                    preferred_level=rule.preferred_level,
                    subgroups=rule.subgroups,
                    min_sub_group=rule.min_sub_group,
                    pod_subgroups=rule.pod_subgroups,
                )
                self._arrive(self._add_job(spec, r), now_ms)
                added = True
        return added

    @property
    def kept(self) -> KeptSession:
        """The session kept between cycles (``fresh`` / ``patched`` count how they were opened)."""
        return self.engine.kept

    # -- the engine -----------------------------------------------------------------------------------
    def refresh_usage(self, now_ms: int) -> None:
        """With k_value > 0: refresh the usage snapshot when one is due (every ``usage_refresh_s``); every
        :meth:`cycle` does this first. Public hook for a :meth:`cycle` override that decides not to run."""
        if not self.k_on or (self.usage_at is not None and now_ms - self.usage_at < self.refresh_ms):
            return
        if self.usage_fn is None:
            leaf_u = {name: self.leaf_usage[i] for i, name in enumerate(self.leaves)}
            cap_u = self.cap_usage
        else:
            # The function gives each leaf's usage already normalised to the capacity integral.
            norm = self.usage_fn(self.history, now_ms)
            leaf_u = {name: [norm.get(name, {}).get(r, 0.0) for r in _RESOURCES] for name in self.leaves}
            cap_u = [1.0, 1.0, 1.0]

        def subtree(name: str) -> list[float]:
            if name in leaf_u:
                return list(leaf_u[name])
            total = [0.0, 0.0, 0.0]
            for c in self.children[name]:
                for r, v in enumerate(subtree(c)):
                    total[r] += v
            return total

        usage: dict[str, dict[str, float]] = {}
        for q in self.queue_specs:
            u = subtree(q.name)
            usage[q.name] = {
                res: (round(u[r] / cap_u[r], 9) if cap_u[r] > 0 else 0.0) for r, res in enumerate(_RESOURCES)
            }
        self.usage, self.usage_at = usage, now_ms
        self.usage_id = f"sim-usage-{now_ms}"
        # Logged before the cycle that consumes it, so a replay re-runs that cycle with the same usage.
        self.log.append_usage(usage_record(self.usage_id, now_ms, usage))
        self._push(now_ms + self.refresh_ms, _WAKE)

    def wake_at(self, at_ms: int) -> None:
        """Make the loop visit *at_ms*: a wake-up, as a min-runtime protection expiring makes one (a cycle
        runs there if pods are pending, see the module doc). Public hook for drivers built on the simulator
        (``hourglass whatif`` visits every recorded cycle time before its window)."""
        self._push(at_ms, _WAKE)

    def cycle(self, now_ms: int, record: CycleRecord | None = None) -> bool:
        """Run one cycle at *now_ms*, record it and carry out its decisions; True if it changed anything.

        The loop calls this at every cycle it does not skip. Public hook: a subclass may override it, and
        *record* carries out a given record instead of running the engine (refreshing the usage snapshot
        when due, logging the record and applying its decisions exactly as for an engine cycle), which is
        how ``hourglass whatif --window FROM..TO`` replays the recorded cycles before FROM.
        """
        self.refresh_usage(now_ms)
        if record is None:
            w0 = time.perf_counter()
            record = self.engine.cycle(self.config, now_ms, self.usage, self.usage_id)
            self.cycle_wall_s += time.perf_counter() - w0
        self.log.append_cycle(record)
        self.logged_ms = max(self.logged_ms, now_ms)
        self.cycles += 1
        if self.cycles > MAX_CYCLES:
            raise RuntimeError(f"simulation did not settle after {MAX_CYCLES} cycles")
        self.fair_now = capped_fair_shares(
            {q.name: q.fair_share["gpu"] for q in record.queues},
            [q.name for q in record.queues if q.parent is None],
            self.capacity_gpu_milli,
        )
        return self._apply(record, now_ms)

    def _apply(self, record: CycleRecord, now_ms: int) -> bool:
        evicted: set[str] = set()
        changed = False
        for d in record.decisions:
            if d.kind == "Evict" and d.pod is not None:
                self._evict(d, now_ms)
                evicted.add(d.pod)
                changed = True
        for d in record.decisions:
            # A pod evicted in this cycle is re-created after its grace period; any new placement the
            # cycle gave it (consolidation moves) is re-decided then.
            if d.kind == "Bind" and d.pod is not None and d.pod not in evicted:
                self._bind(d, now_ms)
                changed = True
            elif d.kind == "Unschedulable":
                for uid in d.pods:
                    self.tasks[self.by_uid[uid]].last_reason = d.reason
        return changed

    def _bind(self, d: Decision, now_ms: int) -> None:
        assert d.pod is not None and d.node is not None
        t = self.tasks[self.by_uid[d.pod]]
        if t.state != "pending":
            raise AssertionError(f"cycle at {now_ms} ms bound {d.pod}, which is {t.state}, not pending")
        self._emit(
            ev.PodBound(at_ms=now_ms, name=t.name, namespace=t.queue, node=d.node, gpu_devices=d.gpu_devices)
        )
        t.state = "running"
        t.node = self.node_index[d.node]
        t.devices = tuple(d.gpu_devices)
        r = t.requests
        t.per_device = (
            r.gpu_fraction_milli if r.gpu_fraction_milli is not None else (GPU_MILLI if r.gpus else 0)
        )
        if r.gpus and len(t.devices) != r.gpus:
            raise AssertionError(f"{d.pod} asks for {r.gpus} GPUs but was bound to devices {d.gpu_devices}")
        self._hold(t, +1)
        self.pending -= 1
        g = self.groups[t.group]
        g.pending -= 1
        if g.pending == 0 and g.rule >= 0:
            self.rule_pending[g.rule] -= 1
        self.binds += 1
        t.last_reason = None
        if t.first_start_ms is None:
            t.first_start_ms = now_ms
            t.first_node = t.node
        self._push(now_ms + t.runtime_ms, _FINISH, self.by_uid[d.pod], t.incarnation)
        for v in self.min_runtimes:  # protection expiring can let a pending pod preempt / reclaim
            self._push(now_ms + v, _WAKE)

    def _evict(self, d: Decision, now_ms: int) -> None:
        assert d.pod is not None
        i = self.by_uid[d.pod]
        t = self.tasks[i]
        if t.state != "running":
            raise AssertionError(f"cycle at {now_ms} ms evicted {d.pod}, which is {t.state}, not running")
        self._emit(
            ev.PodReleasing(at_ms=now_ms, name=t.name, namespace=t.queue, reason=d.action or "eviction")
        )
        t.state = "releasing"
        t.incarnation += 1
        t.evictions += 1
        self.evictions += 1
        self._push(now_ms + self.grace_ms, _TERMINATE, i, t.incarnation)

    # -- the loop ---------------------------------------------------------------------------------------
    def run(self) -> SimulationResult:
        """Simulate every task to the end; returns the summary and plot series."""
        w0, c0 = time.perf_counter(), time.process_time()
        for n in self.nodes:
            self._emit(n if n.at_ms == 0 else n.model_copy(update={"at_ms": 0}))
        for q in self.tenants.queue_events():
            self._emit(q)
        for topo in self.topologies:
            self._emit(topo if topo.at_ms == 0 else topo.model_copy(update={"at_ms": 0}))
        order = sorted(range(len(self.groups)), key=lambda i: (self.groups[i].created_ms, i))
        for i in order:
            if self.end_ms is None or self.groups[i].created_ms < self.end_ms:
                self._push(self.groups[i].created_ms, _ARRIVE, i)
        for r, rule in enumerate(self.rules):
            if rule.start_ms < (self.end_ms or 0):
                self._push(rule.start_ms, _RULE, r)

        p = self.period_ms
        now = 0
        external = True  # the cluster and queues appeared
        while True:
            wake = False
            while self.heap and self.heap[0][0] <= now:
                at, _, kind, i, inc = heapq.heappop(self.heap)
                self._advance(at)
                if kind == _WAKE:
                    wake = True
                    continue
                self.real_in_heap -= 1
                external |= self._handle(kind, i, inc, at)
            self._advance(now)
            usage_due = self.k_on and self.usage_at is not None and now - self.usage_at >= self.refresh_ms
            changed = False
            if external or (self.pending and (wake or usage_due)):
                changed = self.cycle(now)
            external = False
            if changed and self.rules:
                external = self._top_up(now)  # binds emptied a keep-pending rule's queue: refill it now
            if self.progress is not None:
                self.progress(now)
            if (changed and self.pending) or external:
                nxt = now + p  # the new placements may let the next cycle decide something else
            elif self.real_in_heap:
                nxt = max(now + p, -(-self.heap[0][0] // p) * p)
            else:
                # Nothing runs and nothing is to come: a pending pod that did not fit an idle cluster never
                # will (limits are static), and min-runtime / usage wake-ups cannot change that.
                break
            if self.end_ms is not None and nxt >= self.end_ms:
                break  # the run covers [0, end): a cycle at the end itself would be cut off at once
            self.slots_skipped += (nxt - now) // p - 1
            now = nxt
        if self.end_ms is not None:
            # A fixed-length run: what happens between the last cycle and the end still counts.
            while self.heap and self.heap[0][0] <= self.end_ms:
                at, _, kind, i, inc = heapq.heappop(self.heap)
                self._advance(at)
                if kind != _WAKE:
                    self._handle(kind, i, inc, at)
            self._advance(self.end_ms)
        while self.heap:  # leftover wake-ups only (and, in a fixed-length run, what lies past the end)
            heapq.heappop(self.heap)
        if self.now > self.logged_ms:
            # The log must say where the run ends: a pod still running holds its GPUs until the end of the
            # log (the rule of analytics.audit.gpuhours and the pod_runs view), and the summary integrates to
            # self.now. Without this, a fixed-length run's log stops at its last event or cycle.
            self._emit(ev.ClockTick(at_ms=self.now))
        self.wall_s = time.perf_counter() - w0
        self.cpu_s = time.process_time() - c0
        return self._result()

    # -- results ----------------------------------------------------------------------------------------
    def _subtree_leaves(self, name: str) -> list[int]:
        if name in self.leaf_index:
            return [self.leaf_index[name]]
        return [i for c in self.children[name] for i in self._subtree_leaves(c)]

    def _result(self) -> SimulationResult:
        end = self.now
        hours = MS_PER_HOUR * GPU_MILLI
        by_leaf: dict[str, list[_Task]] = {name: [] for name in self.leaves}
        for t in self.tasks:
            by_leaf[t.queue].append(t)
        queue_rows = []
        for q in self.queue_specs:
            leaf_ids = self._subtree_leaves(q.name)
            tasks = [t for li in leaf_ids for t in by_leaf[self.leaves[li]]]
            waits = [(t.first_start_ms - t.created_ms) / 1000 for t in tasks if t.first_start_ms is not None]
            reasons = Counter(t.last_reason or "unknown" for t in tasks if t.state == "pending")
            queue_rows.append(
                {
                    "name": q.name,
                    "parent": q.parent,
                    "leaf": q.name in self.leaf_index,
                    "tasks": len(tasks),
                    "started": len(waits),
                    # Not rounded: the exact integral, so it matches analytics.audit.gpuhours to the GPU-ms.
                    "gpu_hours": sum(self.leaf_held_ms[li] for li in leaf_ids) / hours,
                    "fair_share_gpu_hours": round(self.fair_ms[q.name] / hours, 3),
                    "received_over_fair_share": received_over_fair_share(
                        sum(self.leaf_held_ms[li] for li in leaf_ids), self.fair_ms[q.name]
                    ),
                    "mean_wait_s": round(sum(waits) / len(waits), 3) if waits else 0.0,
                    "p95_wait_s": round(_p95(waits), 3),
                    "pending_at_end": sum(reasons.values()),
                    "pending_reasons": dict(sorted(reasons.items())),
                    "evictions": sum(t.evictions for t in tasks),
                }
            )
        cap = self.capacity_gpu_milli
        started = sum(1 for t in self.tasks if t.first_start_ms is not None)
        span = max(end, 1)
        cluster = {
            "nodes": len(self.nodes),
            "gpus": cap // GPU_MILLI,
            "gpu_hours_allocated": self.held_ms / hours,
            "gpu_hours_capacity": round(cap * end / hours, 3),
            "mean_allocation_ratio": round(self.held_ms / (cap * span), 6) if cap else 0.0,
            "peak_allocation_ratio": round(self.peak_held / cap, 6) if cap else 0.0,
            "peak_allocated_gpus": self.peak_held / GPU_MILLI,
            "mean_unallocated_gpus": round((cap * span - self.held_ms) / span / GPU_MILLI, 3),
            "unallocated_gpus_at_end": (cap - self.held) / GPU_MILLI,
            "mean_fragmented_gpus": round(self.fragmented_ms / span / GPU_MILLI, 3),
            "fragmented_gpus_at_end": self.fragmented / GPU_MILLI,
            "fragmentation_probe": (
                {"num_gpu": self.probe[0], "gpu_milli": self.probe[1]} if self.probe is not None else None
            ),
            "tasks": len(self.tasks),
            "tasks_started": started,
            "tasks_finished": sum(1 for t in self.tasks if t.state == "done"),
            "tasks_pending_at_end": sum(1 for t in self.tasks if t.state == "pending"),
            "binds": self.binds,
            "evictions": self.evictions,
        }
        summary: dict[str, Any] = {
            "format": SUMMARY_FORMAT,
            "simulated_seconds": end / 1000,
            "period_s": self.period_ms / 1000,
            "seed": self.seed,
            "engine_config_hash": config_hash(self.config),
            "events": self.offset + 1,
            "cycles": {"run": self.cycles, "skipped": self.slots_skipped},
            "queues": queue_rows,
            "cluster": cluster,
            "speed": {
                "wall_seconds": round(self.wall_s, 3),
                "cpu_seconds": round(self.cpu_s, 3),
                "engine_cycle_seconds": round(self.cycle_wall_s, 3),
                "events_per_second": round((self.offset + 1) / self.wall_s, 1) if self.wall_s > 0 else 0.0,
            },
        }
        if self.topologies:
            summary["topology"] = self._topology_summary()
        return SimulationResult(
            summary=summary, capacity_gpu_milli=cap, leaf_queues=list(self.leaves), timeline=self.timeline
        )

    def _topology_summary(self) -> list[dict[str, Any]]:
        """Per topology, level and leaf queue: how spread the gangs (jobs of 2 or more pods) were where their
        pods first ran, over the gangs all of whose pods started. A node without a level's labels counts
        as a domain of its own at that level."""
        out: list[dict[str, Any]] = []
        gangs = [
            g for g in self.groups if len(g.pods) > 1 and all(self.tasks[i].first_node >= 0 for i in g.pods)
        ]
        for topo in self.topologies:
            levels: list[dict[str, Any]] = []
            for depth, level in enumerate(topo.levels):
                keys = topo.levels[: depth + 1]
                per_queue: dict[str, list[int]] = {name: [] for name in self.leaves}
                for g in gangs:
                    seen: set[tuple[str, ...]] = set()
                    for i in g.pods:
                        node = self.nodes[self.tasks[i].first_node]
                        labels = node.labels
                        if all(k in labels for k in keys):
                            seen.add(tuple(labels[k] for k in keys))
                        else:
                            seen.add(("", node.name))
                    per_queue[g.queue].append(len(seen))
                queues = []
                for name in self.leaves:
                    counts = per_queue[name]
                    if not counts:
                        continue
                    queues.append(
                        {
                            "queue": name,
                            "gangs": len(counts),
                            "mean_domains": round(sum(counts) / len(counts), 3),
                            "max_domains": max(counts),
                            "within_one": sum(1 for c in counts if c == 1),
                        }
                    )
                levels.append({"level": level, "queues": queues})
            constrained = Counter(
                (g.queue, g.required_level, g.preferred_level) for g in self.groups if g.topology == topo.name
            )
            out.append(
                {
                    "name": topo.name,
                    "levels": levels,
                    "constrained_jobs": [
                        {"queue": q, "required_level": r, "preferred_level": p, "jobs": n}
                        for (q, r, p), n in sorted(
                            constrained.items(), key=lambda kv: (kv[0][0], str(kv[0][1:]))
                        )
                    ],
                }
            )
        return out

    def manifest(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The run manifest for :meth:`SimLog.close`: *inputs* plus config and counts (no wall times)."""
        return {
            "inputs": inputs,
            "tenants": self.tenants.model_dump(mode="json"),
            "period_s": self.period_ms / 1000,
            "seed": self.seed,
            "engine_config": asdict(self.config),
            "engine_config_hash": config_hash(self.config),
            "counts": {
                "events": self.offset + 1,
                "cycles": self.cycles,
                "tasks": len(self.tasks),
                "nodes": len(self.nodes),
                "binds": self.binds,
                "evictions": self.evictions,
            },
        }


def _check_subgroups(spec: JobSpec) -> None:
    """A job's subgroups make a valid KAI tree and each pod joins one of its PodSets; ValueError naming the
    job otherwise."""
    if not spec.subgroups:
        if spec.pod_subgroups or spec.min_sub_group is not None:
            raise ValueError(f"job {spec.name!r}: pods name subgroups, but the job declares none")
        return
    problem = ev.subgroup_problem(list(spec.subgroups), spec.min_sub_group)
    if problem is not None:
        raise ValueError(f"job {spec.name!r}: {problem}")
    if len(spec.pod_subgroups) != spec.pods:
        raise ValueError(
            f"job {spec.name!r}: {spec.pods} pods but {len(spec.pod_subgroups)} subgroup names, one per pod"
        )
    parents = {sg.parent for sg in spec.subgroups}
    pod_sets = {sg.name for sg in spec.subgroups if sg.name not in parents}
    for name in spec.pod_subgroups:
        if name not in pod_sets:
            raise ValueError(
                f"job {spec.name!r}: a pod joins subgroup {name!r}, which is not one of its PodSets"
                f" (subgroups without children: {sorted(pod_sets)})"
            )


def _fragmentation_probe(tasks: Sequence[TraceTask]) -> tuple[int, int] | None:
    """The most common GPU request (num_gpu, milli per GPU) by task count; ties go to the smaller one."""
    counts = Counter((t.num_gpu, t.gpu_milli) for t in tasks if t.num_gpu > 0)
    if not counts:
        return None
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def _request_probe(shapes: Sequence[tuple[ev.PodRequests, int]]) -> tuple[int, int] | None:
    """:func:`_fragmentation_probe` for jobs: the most common per-pod GPU request, by pod count."""
    counts: Counter[tuple[int, int]] = Counter()
    for r, pods in shapes:
        if r.gpus:
            counts[(r.gpus, GPU_MILLI)] += pods
        elif r.gpu_fraction_milli is not None:
            counts[(r.gpu_fraction_devices, r.gpu_fraction_milli)] += pods
    if not counts:
        return None
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def _check_scoring(name: str) -> None:
    """Fail early, with the known names, on a node-scoring rule the engine does not have."""
    scoring.check_name(name)


def simulate(
    tasks: Sequence[TraceTask],
    nodes: Sequence[ev.NodeUpserted],
    tenants: TenantsConfig,
    *,
    period_s: int | None = None,
    seed: int = 0,
    log: SimLog | None = None,
    progress: Callable[[int], None] | None = None,
    inputs: dict[str, Any] | None = None,
    jobs: Sequence[JobSpec] = (),
    keep_pending: Sequence[KeepPending] = (),
    end_ms: int | None = None,
    usage: UsageFn | None = None,
    topologies: Sequence[ev.TopologyUpserted] = (),
) -> SimulationResult:
    """Run a whole simulation (see the module doc and :class:`Simulator`); closes *log* with the manifest."""
    sim = Simulator(
        tasks,
        nodes,
        tenants,
        period_s=period_s,
        seed=seed,
        log=log,
        progress=progress,
        jobs=jobs,
        keep_pending=keep_pending,
        end_ms=end_ms,
        usage=usage,
        topologies=topologies,
    )
    with gc_tuned():
        result = sim.run()
    sim.log.close(sim.manifest(inputs or {}))
    return result


def file_input(path: Path) -> dict[str, str]:
    """How a manifest names an input file: its path as given and its sha256."""
    return {"path": str(path), "sha256": _sha256(path)}


# =============================================================================== command line
