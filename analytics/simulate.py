"""``hourglass simulate``: replay a production trace through the engine on a simulated clock.

Everything the simulated cluster does is an event of the contract (:mod:`ingest.events`), folded with
:class:`~scheduler.state.StateBuilder` and written to a :class:`~analytics.simlog.SimLog`, so a run leaves
the same event log and cycle records a real deployment would:

* t = 0: one ``NodeUpserted`` per node, one ``QueueUpserted`` per queue (parents first);
* a task's ``creation_time``: ``PodGroupUpserted`` + ``PodSubmitted`` (one single-pod gang per task, in the
  leaf queue the tenants' hash rule picks, namespace = that queue);
* a cycle every ``period`` simulated seconds, at multiples of the period; its ``Bind`` decisions become
  ``PodBound`` events at the cycle's time; ``Pipeline`` decisions stay pending (the next cycle re-decides);
* a bound task runs for its trace runtime (``deletion_time - creation_time``), counted from when it
  started, then ``PodFinished`` + ``PodDeleted`` + ``PodGroupDeleted``;
* ``Evict``: ``PodReleasing`` at the cycle's time; the pod keeps its node for the eviction grace, then
  ``PodFinished(Failed)`` + ``PodDeleted`` and the pod is re-submitted pending (same name and creation
  time). A restarted task runs its full runtime again: the trace has no checkpoints.

Cycle skipping. A cycle runs at a period boundary only if something that can change its outcome happened
since the previous cycle: (a) an event from outside the engine (arrival, finish, end of an eviction),
(b) the previous cycle changed the cluster (bound or evicted) and pods are still pending, or (c) pods are
pending and time alone can change the outcome: a min-runtime protection expired or, with ``k_value`` > 0,
a new usage snapshot is due. Otherwise the cycle would see the same snapshot and decide the same thing, so
it is skipped and not recorded. The run ends when no task is left to arrive or finish and the last cycle
changed nothing; whatever is pending then can never be placed (pending at end).

Accounting. A pod *holds* GPUs from its ``PodBound`` until its ``PodFinished`` (evicted pods hold them
through the grace period). GPU-hours received are the integral of held GPUs; fair-share GPU-hours are the
integral of the fair share each cycle record states (held until the next recorded cycle). Fragmented GPUs:
idle GPU capacity on nodes where the workload's most common GPU request (by task count; one whole GPU on
the default trace) does not fit on the free devices (a whole-GPU request needs that many fully idle
devices, a fractional one a device with that much free).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import heapq
import importlib
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from analytics.simlog import NullLog, SimLog
from ingest import events as ev
from ingest.tenants import TenantsConfig
from ingest.trace import TraceTask, task_node_affinity, task_requests
from scheduler.cycle import run_cycle
from scheduler.decisions import CycleRecord, Decision, config_hash
from scheduler.session import SessionConfig
from scheduler.state import StateBuilder

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "SUMMARY_FORMAT",
    "SimulationResult",
    "Simulator",
    "add_arguments",
    "file_input",
    "render_summary",
    "run_cli",
    "simulate",
    "write_plot",
]

SUMMARY_FORMAT: Final = "hourglass-sim-summary/1"
GPU_MILLI: Final = 1000
MS_PER_HOUR: Final = 3_600_000
MAX_CYCLES: Final = 10_000_000  # a guard against an engine that never settles, not a tuning knob

# Heap entry kinds. Ties at the same time go by push order (a sequence number), never by object identity.
_ARRIVE, _FINISH, _TERMINATE, _WAKE = 0, 1, 2, 3


@dataclass(slots=True)
class _Task:
    """One trace task through its simulated life."""

    trace: TraceTask
    queue: str
    created_ms: int
    runtime_ms: int
    priority: int
    requests: ev.PodRequests
    affinity: list[ev.NodeSelectorTerm]
    state: str = "waiting"  # waiting -> pending -> running (-> releasing -> pending ...) -> done
    first_start_ms: int | None = None
    incarnation: int = 0  # bumped on eviction, so the evicted run's finish is ignored
    node: int = -1
    devices: tuple[int, ...] = ()
    per_device: int = 0  # milli-GPU held on each device
    evictions: int = 0
    last_reason: str | None = None

    @property
    def uid(self) -> str:
        return f"{self.queue}/{self.trace.name}"

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

    *tasks* are simulated in creation order (ties: input order); *nodes* are the cluster. *seed* salts
    the task -> queue hash (0 = the plain name), the only input the seed changes: the engine is
    deterministic, so the same inputs and seed give byte-identical logs.
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
    ) -> None:
        self.tenants = tenants
        self.period_ms = (period_s if period_s is not None else tenants.cycle_period_s) * 1000
        if self.period_ms <= 0:
            raise ValueError(f"the cycle period must be positive, got {self.period_ms / 1000:g} s")
        self.config: SessionConfig = tenants.session_config()
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

        self.tasks: list[_Task] = []
        for t in tasks:
            if t.creation_s is None or t.deletion_s is None:
                raise ValueError(f"task {t.name!r} has no creation_time / deletion_time; cannot simulate it")
            self.tasks.append(
                _Task(
                    trace=t,
                    queue=tenants.queue_for(t.name, seed),
                    created_ms=t.creation_s * 1000,
                    runtime_ms=(t.deletion_s - t.creation_s) * 1000,
                    priority=tenants.job_priority.of(t.qos),
                    requests=task_requests(t),
                    affinity=task_node_affinity(t),
                )
            )
        self.by_uid = {t.uid: i for i, t in enumerate(self.tasks)}
        self.probe = _fragmentation_probe(tasks)

        self.builder = StateBuilder()
        self.offset = -1
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
        self.fair_now: dict[str, int] = {}
        self.fair_ms: dict[str, int] = {q.name: 0 for q in self.queue_specs}
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

        self.cycles = 0
        self.slots_skipped = 0
        self.binds = 0
        self.evictions = 0
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self.cycle_wall_s = 0.0

    # -- the event stream --------------------------------------------------------------------------------
    def _emit(self, event: ev.EventBase) -> None:
        """Append one event to the log and fold it: the only way the simulated cluster changes."""
        self.offset += 1
        self.builder.apply(event, self.offset)
        self.log.append_event(self.offset, event)

    def _push(self, at_ms: int, kind: int, task: int = -1, incarnation: int = 0) -> None:
        heapq.heappush(self.heap, (at_ms, self.seq, kind, task, incarnation))
        self.seq += 1
        if kind != _WAKE:
            self.real_in_heap += 1

    def _submit(self, t: _Task, at_ms: int) -> None:
        tr = t.trace
        self._emit(
            ev.PodSubmitted(
                at_ms=at_ms,
                name=tr.name,
                namespace=t.queue,
                pod_group=tr.name,
                queue=t.queue,
                requests=t.requests,
                node_affinity=t.affinity,
                created_at_ms=t.created_ms,
            )
        )
        t.state = "pending"
        self.pending += 1

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
        if self.k_on:
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
        if gpu:
            point = (self.now, self.held, self.fragmented, tuple(self.leaf_held))
            if self.timeline[-1][0] == self.now:
                self.timeline[-1] = point
            else:
                self.timeline.append(point)

    # -- what happens outside the engine --------------------------------------------------------------
    def _handle(self, kind: int, i: int, incarnation: int, at_ms: int) -> bool:
        """Apply one due heap entry; True if it emitted events."""
        t = self.tasks[i]
        tr = t.trace
        ns = t.queue
        if kind == _ARRIVE:
            self._emit(
                ev.PodGroupUpserted(
                    at_ms=at_ms,
                    name=tr.name,
                    namespace=ns,
                    queue=t.queue,
                    priority=t.priority,
                    created_at_ms=t.created_ms,
                )
            )
            self._submit(t, at_ms)
            return True
        if incarnation != t.incarnation:
            return False  # the run this entry belonged to was evicted
        if kind == _FINISH and t.state == "running":
            # The trace's own outcome: a task that failed in production fails here too.
            if tr.pod_phase == "Failed":
                self._emit(ev.PodFinished(at_ms=at_ms, name=tr.name, namespace=ns, phase="Failed"))
            else:
                self._emit(ev.PodFinished(at_ms=at_ms, name=tr.name, namespace=ns, phase="Succeeded"))
            self._hold(t, -1)
            self._emit(ev.PodDeleted(at_ms=at_ms, name=tr.name, namespace=ns))
            self._emit(ev.PodGroupDeleted(at_ms=at_ms, name=tr.name, namespace=ns))
            t.state = "done"
            return True
        if kind == _TERMINATE and t.state == "releasing":
            self._emit(ev.PodFinished(at_ms=at_ms, name=tr.name, namespace=ns, phase="Failed"))
            self._hold(t, -1)
            self._emit(ev.PodDeleted(at_ms=at_ms, name=tr.name, namespace=ns))
            t.node, t.devices, t.per_device = -1, (), 0
            self._submit(t, at_ms)  # the controller re-creates the evicted pod
            return True
        return False

    # -- the engine -----------------------------------------------------------------------------------
    def _usage_snapshot(self, now_ms: int) -> None:
        """With k_value > 0: refresh the usage snapshot when one is due (every ``usage_refresh_s``)."""
        if not self.k_on or (self.usage_at is not None and now_ms - self.usage_at < self.refresh_ms):
            return
        leaf_u = {name: self.leaf_usage[i] for i, name in enumerate(self.leaves)}

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
                res: (round(u[r] / self.cap_usage[r], 9) if self.cap_usage[r] > 0 else 0.0)
                for r, res in enumerate(("gpu", "cpu", "memory"))
            }
        self.usage, self.usage_at = usage, now_ms
        self.usage_id = f"sim-usage-{now_ms}"
        self._push(now_ms + self.refresh_ms, _WAKE)

    def _cycle(self, now_ms: int) -> bool:
        """Run one cycle at *now_ms*, record it and carry out its decisions; True if it changed anything."""
        self._usage_snapshot(now_ms)
        state = self.builder.snapshot()
        w0 = time.perf_counter()
        record, _ = run_cycle(state, self.config, now_ms, self.usage, self.usage_id)
        self.cycle_wall_s += time.perf_counter() - w0
        self.log.append_cycle(record)
        self.cycles += 1
        if self.cycles > MAX_CYCLES:
            raise RuntimeError(f"simulation did not settle after {MAX_CYCLES} cycles")
        self.fair_now = {q.name: q.fair_share["gpu"] for q in record.queues}
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
            ev.PodBound(
                at_ms=now_ms, name=t.trace.name, namespace=t.queue, node=d.node, gpu_devices=d.gpu_devices
            )
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
        self.binds += 1
        t.last_reason = None
        if t.first_start_ms is None:
            t.first_start_ms = now_ms
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
            ev.PodReleasing(at_ms=now_ms, name=t.trace.name, namespace=t.queue, reason=d.action or "eviction")
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
        order = sorted(range(len(self.tasks)), key=lambda i: (self.tasks[i].created_ms, i))
        for i in order:
            self._push(self.tasks[i].created_ms, _ARRIVE, i)

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
                changed = self._cycle(now)
            external = False
            if self.progress is not None:
                self.progress(now)
            if changed and self.pending:
                nxt = now + p  # the new placements may let the next cycle decide something else
            elif self.real_in_heap:
                nxt = max(now + p, -(-self.heap[0][0] // p) * p)
            else:
                # Nothing runs and nothing is to come: a pending pod that did not fit an idle cluster never
                # will (limits are static), and min-runtime / usage wake-ups cannot change that.
                break
            self.slots_skipped += (nxt - now) // p - 1
            now = nxt
        while self.heap:  # leftover wake-ups only
            heapq.heappop(self.heap)
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
                    "gpu_hours": round(sum(self.leaf_held_ms[li] for li in leaf_ids) / hours, 3),
                    "fair_share_gpu_hours": round(self.fair_ms[q.name] / hours, 3),
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
            "gpu_hours_allocated": round(self.held_ms / hours, 3),
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
        return SimulationResult(
            summary=summary, capacity_gpu_milli=cap, leaf_queues=list(self.leaves), timeline=self.timeline
        )

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


@contextlib.contextmanager
def gc_tuned() -> Iterator[None]:
    """Fewer cyclic-GC passes while the simulation runs; restored afterwards.

    Every cycle builds a fresh session (a ``NodeInfo`` per node, ~1,200 on the default trace), so the
    young generation fills every few hundred microseconds and each collection re-traverses everything the
    run keeps alive: about 30-40% of the run's CPU time. Freezing what exists at the start (the loaded
    trace) and collecting the young generation less often removes most of it; output is unaffected.
    """
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def _fragmentation_probe(tasks: Sequence[TraceTask]) -> tuple[int, int] | None:
    """The most common GPU request (num_gpu, milli per GPU) by task count; ties go to the smaller one."""
    counts = Counter((t.num_gpu, t.gpu_milli) for t in tasks if t.num_gpu > 0)
    if not counts:
        return None
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def _check_scoring(name: str) -> None:
    """Fail early, with the known names, on a node-scoring rule the engine does not have."""
    from scheduler import placement

    if name not in placement.NODE_SCORERS:
        with contextlib.suppress(ImportError):  # registers the fragmentation-aware rules, if present
            importlib.import_module("scheduler.fragmentation")
    if name not in placement.NODE_SCORERS:
        known = ", ".join(sorted(placement.NODE_SCORERS))
        raise ValueError(f"unknown node_scoring {name!r} (known: {known})")


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
) -> SimulationResult:
    """Run a whole simulation (see the module doc); closes *log* with the run manifest."""
    sim = Simulator(tasks, nodes, tenants, period_s=period_s, seed=seed, log=log, progress=progress)
    with gc_tuned():
        result = sim.run()
    sim.log.close(sim.manifest(inputs or {}))
    return result


def file_input(path: Path) -> dict[str, str]:
    """How a manifest names an input file: its path as given and its sha256."""
    return {"path": str(path), "sha256": _sha256(path)}


# =============================================================================== command line


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``hourglass simulate`` options."""
    from ingest.tenants import DEFAULT_TENANTS
    from ingest.trace import DEFAULT_GPU_NODES, DEFAULT_PODS

    p.add_argument(
        "--trace-pods",
        type=Path,
        default=DEFAULT_PODS,
        help="pod list CSV (default: the shipped default list)",
    )
    p.add_argument(
        "--trace-nodes",
        type=Path,
        default=DEFAULT_GPU_NODES,
        help="node list CSV (default: the shipped GPU nodes)",
    )
    p.add_argument(
        "--tenants", type=Path, default=DEFAULT_TENANTS, help="tenants file, YAML or TOML (docs/simulate.md)"
    )
    p.add_argument(
        "--period",
        type=int,
        default=None,
        metavar="S",
        help="cycle period in simulated seconds (default: the tenants file's)",
    )
    p.add_argument(
        "--limit-tasks",
        type=int,
        default=None,
        metavar="N",
        help="simulate only the first N tasks by creation time",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="write events.jsonl, cycles.jsonl, manifest.json here",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON (nothing else on stdout)")
    p.add_argument(
        "--plot",
        type=Path,
        default=None,
        metavar="PNG",
        help="write allocation-over-time and GPU-hours plots",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="salt of the task -> queue hash (0 = the plain task name)"
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def render_summary(summary: dict[str, Any], console: Console) -> None:
    """The summary as two rich tables: per queue, then the cluster."""
    from rich.table import Table

    depth: dict[str, int] = {}
    qt = Table(title="Queues", title_justify="left")
    cols = (
        "queue",
        "tasks",
        "GPU-h",
        "fair GPU-h",
        "recv/fair",
        "wait mean",
        "wait p95",
        "pending",
        "evicted",
    )
    for col in cols:
        qt.add_column(col, justify="left" if col == "queue" else "right")
    for q in summary["queues"]:
        depth[q["name"]] = 0 if q["parent"] is None else depth.get(q["parent"], 0) + 1
        fair = q["fair_share_gpu_hours"]
        ratio = f"{q['gpu_hours'] / fair:.0%}" if fair > 0 else "-"
        style = None if q["leaf"] else "bold"
        qt.add_row(
            "  " * depth[q["name"]] + q["name"],
            f"{q['tasks']:,}",
            f"{q['gpu_hours']:,.1f}",
            f"{fair:,.1f}",
            ratio,
            _duration(q["mean_wait_s"]),
            _duration(q["p95_wait_s"]),
            f"{q['pending_at_end']:,}",
            f"{q['evictions']:,}",
            style=style,
        )
    console.print(qt)
    c = summary["cluster"]
    ct = Table(title="Cluster", title_justify="left", show_header=False)
    ct.add_column("figure")
    ct.add_column("value", justify="right")
    sp = summary["speed"]
    probe = c["fragmentation_probe"]
    probe_text = (
        "-"
        if probe is None
        else (
            f"{probe['num_gpu']} whole GPU(s)"
            if probe["gpu_milli"] >= GPU_MILLI
            else f"{probe['gpu_milli'] / 1000:g} GPU"
        )
    )
    rows = [
        ("nodes / GPUs", f"{c['nodes']:,} / {c['gpus']:,}"),
        ("simulated time", _duration(summary["simulated_seconds"])),
        (
            "tasks: started / finished / pending at end",
            f"{c['tasks_started']:,} / {c['tasks_finished']:,} / {c['tasks_pending_at_end']:,}",
        ),
        ("GPU-hours allocated", f"{c['gpu_hours_allocated']:,.1f}"),
        (
            "GPU allocation ratio: mean / peak",
            f"{c['mean_allocation_ratio']:.2%} / {c['peak_allocation_ratio']:.2%}",
        ),
        (
            "unallocated GPUs: mean / at end",
            f"{c['mean_unallocated_gpus']:,.1f} / {c['unallocated_gpus_at_end']:,.1f}",
        ),
        (
            f"fragmented GPUs (idle, cannot fit {probe_text}): mean / at end",
            f"{c['mean_fragmented_gpus']:,.2f} / {c['fragmented_gpus_at_end']:,.2f}",
        ),
        ("binds / evictions", f"{c['binds']:,} / {c['evictions']:,}"),
        ("cycles run / skipped", f"{summary['cycles']['run']:,} / {summary['cycles']['skipped']:,}"),
        ("events", f"{summary['events']:,}"),
        (
            "wall time / CPU time / in engine cycles",
            f"{sp['wall_seconds']:.1f} s / {sp['cpu_seconds']:.1f} s / {sp['engine_cycle_seconds']:.1f} s",
        ),
        ("simulated events / s", f"{summary['speed']['events_per_second']:,.0f}"),
    ]
    for k, v in rows:
        ct.add_row(k, v)
    console.print(ct)


def write_plot(result: SimulationResult, path: Path) -> None:
    """Allocation over time (stacked by leaf queue, with fragmented GPUs) and GPU-hours per leaf queue."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt

    tl = result.timeline
    end_s = result.summary["simulated_seconds"]
    days = [p[0] / 86_400_000 for p in tl] + [end_s / 86400]
    per_leaf = [[p[3][i] / GPU_MILLI for p in tl] for i in range(len(result.leaf_queues))]
    per_leaf = [series + series[-1:] for series in per_leaf]
    frag = [p[2] / GPU_MILLI for p in tl] + [tl[-1][2] / GPU_MILLI]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 8), gridspec_kw={"height_ratios": [3, 2]})
    ax1.stackplot(days, per_leaf, labels=result.leaf_queues, step="post", alpha=0.85)
    ax1.step(days, frag, where="post", color="black", linewidth=0.8, label="fragmented (idle)")
    cap = result.capacity_gpu_milli / GPU_MILLI
    ax1.set_title(f"GPUs allocated over time (capacity {cap:,.0f} GPUs)")
    ax1.set_xlabel("simulated days")
    ax1.set_ylabel("GPUs")
    ax1.legend(loc="upper left", fontsize="small")
    leaves = [q for q in result.summary["queues"] if q["leaf"]]
    xs = range(len(leaves))
    ax2.bar([x - 0.2 for x in xs], [q["gpu_hours"] for q in leaves], width=0.4, label="received")
    ax2.bar([x + 0.2 for x in xs], [q["fair_share_gpu_hours"] for q in leaves], width=0.4, label="fair share")
    ax2.set_xticks(list(xs), [q["name"] for q in leaves])
    ax2.set_ylabel("GPU-hours")
    ax2.set_title("GPU-hours per queue: received vs fair share")
    ax2.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_cli(args: argparse.Namespace) -> int:
    """``hourglass simulate``: load inputs, run with a progress bar, print / write the outputs."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from analytics.simlog import DirLog
    from ingest.tenants import TenantsError, load_tenants
    from ingest.trace import TraceError, read_nodes, read_pods

    err = Console(stderr=True)
    try:
        tenants = load_tenants(args.tenants)
        nodes = read_nodes(args.trace_nodes)
        all_tasks = read_pods(args.trace_pods)
    except (TenantsError, TraceError, OSError) as exc:
        err.print(f"simulate: {exc}", markup=False, highlight=False)
        return 2
    if args.period is not None and args.period < 1:
        err.print("simulate: --period must be at least 1 second")
        return 2
    if any(t.creation_s is None or t.deletion_s is None for t in all_tasks):
        err.print(f"simulate: {args.trace_pods} lacks creation_time / deletion_time for some tasks")
        return 2
    order = sorted(range(len(all_tasks)), key=lambda i: (all_tasks[i].creation_s or 0, i))
    if args.limit_tasks is not None:
        order = order[: max(args.limit_tasks, 0)]
    tasks = [all_tasks[i] for i in order]
    horizon_ms = max((t.deletion_s or 0 for t in tasks), default=0) * 1000

    inputs = {
        "trace_pods": file_input(args.trace_pods),
        "trace_nodes": file_input(args.trace_nodes),
        "tenants": file_input(args.tenants),
        "limit_tasks": args.limit_tasks,
    }
    log = DirLog(args.out) if args.out is not None else None
    with Progress(
        TextColumn("simulating"),
        BarColumn(),
        TextColumn("day {task.fields[day]:.1f} / {task.fields[days]:.1f}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    ) as bar:
        job = bar.add_task("sim", total=max(horizon_ms, 1), day=0.0, days=horizon_ms / 86_400_000)

        def progress(now_ms: int) -> None:
            bar.update(job, completed=min(now_ms, horizon_ms), day=now_ms / 86_400_000)

        try:
            result = simulate(
                tasks,
                nodes,
                tenants,
                period_s=args.period,
                seed=args.seed,
                log=log,
                progress=progress,
                inputs=inputs,
            )
        except ValueError as exc:
            err.print(f"simulate: {exc}", markup=False, highlight=False)
            return 2
    if args.plot is not None:
        write_plot(result, args.plot)
    if args.json:
        print(json.dumps(result.summary, indent=2))
    else:
        out = Console()
        if not out.is_terminal:
            out = Console(width=110)  # piped: rich would assume 80 columns and truncate the numbers
        render_summary(result.summary, out)
        if args.out is not None:
            out.print(f"event log and cycle records: {args.out}", highlight=False)
        if args.plot is not None:
            out.print(f"plots: {args.plot}", highlight=False)
    return 0
