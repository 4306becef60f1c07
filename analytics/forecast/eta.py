"""``hourglass eta NS/POD --log LOG``: when will this pending pod start? And ``--backtest``: how honest is it?

The answer is a forward simulation from the state at the end of the log (the event log folded with
:class:`~scheduler.engine.state.StateBuilder`, exactly as the service and ``replay`` fold it): the engine
runs cycle after cycle on a copy of that state, pods it binds run for an *estimated* time and finish, pods
it evicts release after the eviction grace and come back pending, until the asked pod is bound.

Run times are learnt from the log's history (:class:`RuntimeModel`): every finished run (``PodBound`` to
``PodFinished``, not ended by an eviction or a deletion) is a sample under three keys, most specific first:
the pod's queue and job name (its pod group's name without trailing numbers and ids, so ``train-7`` and
``train-12`` share ``train``), the queue, the cluster. A level with fewer than :data:`MIN_SAMPLES` samples
defers to the next. A running pod's remaining time is read from the samples longer than what it has already
run (the distribution conditioned on its elapsed time).

Deterministic by construction: three forward runs, with every run time at the 10th, 50th and 90th
percentile of its distribution (nearest rank), give the range and the most likely start (docs/eta.md says
why this instead of a Monte Carlo). Jobs that are not in the log yet are not simulated. With a time-based
fair share the forward runs recompute usage every ``refresh_s`` from the log's allocation history plus
what they run (:class:`_ForwardUsage`), when the fairshare settings are known (a run directory's manifest,
or ``--fairshare-config``); otherwise they keep the usage snapshot of the last recorded cycle.

:func:`backtest` replays the log and, for a sample of the pods that were ever left pending, asks the same
question at the first cycle that left them pending, using only the log before that cycle, then compares
with when they really started.
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import itertools
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import polars as pl

from analytics.gctune import gc_tuned
from analytics.reports.explain import advice
from analytics.rerun.replay import ReplayError, ReplaySource, load_source
from analytics.rundir import read_manifest
from fairshare.config import FairshareConfig, FairshareConfigError
from fairshare.decay import roll_up, usage_at
from fairshare.ledger import EventLedger
from fairshare.source import ALLOCATION_SCHEMA
from fairshare.source import RESOURCES as FAIRSHARE_RESOURCES
from ingest import events as ev
from ingest.log import Topics
from scheduler.config import EngineConfigError, load_engine_config
from scheduler.engine.cycle import result_state, run_cycle
from scheduler.engine.kept import KeptRun
from scheduler.engine.record.decisions import CycleRecord, Decision
from scheduler.engine.record.delta import RecordChainError, expand_records
from scheduler.engine.session import Session, SessionConfig
from scheduler.engine.state import ClusterState, Pod, PodStatus, StateBuilder

__all__ = [
    "MIN_SAMPLES",
    "PERCENTILES",
    "Backtest",
    "Eta",
    "EtaError",
    "RuntimeModel",
    "Setting",
    "Tracker",
    "add_arguments",
    "add_step_argument",
    "backtest",
    "estimate",
    "eta",
    "fairshare_config",
    "fold_log",
    "format_time",
    "free_gpu_milli",
    "gpu_holders",
    "next_cycle_ms",
    "queue_standing",
    "run_cli",
    "step_ms",
]

PERCENTILES: Final = (10, 50, 90)
MIN_SAMPLES: Final = 3  # a job-name or queue distribution needs this many runs to be used
DEFAULT_PERIOD_MS: Final = 10_000  # a service log: `hourglass run --period` default
DEFAULT_GRACE_MS: Final = 30_000
HORIZON_MS: Final = 365 * 86_400_000  # the forward run gives up this far ahead ("not within a year")
MAX_CYCLES: Final = 200_000
# A running pod that already ran longer than every recorded run: it is assumed to run this many times its
# elapsed time in all, per percentile (the "Lindy" rule: the longer it ran, the longer it will).
BEYOND_HISTORY: Final = {10: 1.1, 50: 2.0, 90: 5.0}
_STEM = re.compile(
    r"(?:[-_.](?:\d+|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-z]{5}))+$"
)
_FINISH, _TERMINATE, _WAKE = 0, 1, 2


class EtaError(Exception):
    """Unknown pod, bad arguments, or a log with nothing to learn from."""


# --------------------------------------------------------------------------- run-time estimates


def job_stem(pod_group: str) -> str:
    """The job name runs are grouped by: the pod group's name without KAI's ``pg-`` prefix and trailing
    numbers, uids and generated suffixes (``pg-train-7-0f3c…`` and ``train-12`` both give ``train``)."""
    name = pod_group[3:] if pod_group.startswith("pg-") else pod_group
    stem = _STEM.sub("", name)
    return stem or name


def _nearest_rank(values: list[int], pct: int) -> int:
    return values[max(math.ceil(pct / 100 * len(values)) - 1, 0)]


class RuntimeModel:
    """Finished run times (ms) by (queue, job name), by queue and for the cluster, kept sorted."""

    def __init__(self) -> None:
        self.by_job: dict[tuple[str, str], list[int]] = {}
        self.by_queue: dict[str, list[int]] = {}
        self.cluster: list[int] = []

    def add(self, queue: str, stem: str, runtime_ms: int) -> None:
        """One finished run."""
        bisect.insort(self.by_job.setdefault((queue, stem), []), runtime_ms)
        bisect.insort(self.by_queue.setdefault(queue, []), runtime_ms)
        bisect.insort(self.cluster, runtime_ms)

    def __len__(self) -> int:
        return len(self.cluster)

    def remaining(self, queue: str, stem: str, pct: int, elapsed_ms: int = 0) -> tuple[int, str]:
        """The run time still ahead of a pod that has run *elapsed_ms*, at percentile *pct*, and the level
        it came from (``job``, ``queue``, ``cluster``, ``beyond history``)."""
        levels = (
            ("job", self.by_job.get((queue, stem), []), MIN_SAMPLES),
            ("queue", self.by_queue.get(queue, []), MIN_SAMPLES),
            ("cluster", self.cluster, 1),
        )
        for name, values, least in levels:
            tail = values[bisect.bisect_right(values, elapsed_ms) :] if elapsed_ms > 0 else values
            if len(tail) >= least:
                return _nearest_rank(tail, pct) - elapsed_ms, name
        if elapsed_ms > 0:
            return int(elapsed_ms * (BEYOND_HISTORY.get(pct, 2.0) - 1)), "beyond history"
        raise EtaError("no pod has finished in the log yet: there are no run times to learn from")


# --------------------------------------------------------------------------- folding the log


@dataclass(slots=True)
class _PodInfo:
    queue: str
    stem: str
    submitted: ev.PodSubmitted
    bound_at: int | None = None
    interrupted: bool = False  # the current run is being evicted / deleted: not a natural run time
    first_bound_at: int | None = None


class Tracker:
    """The log folded so far: the engine's state plus what the estimates need (run starts, history)."""

    def __init__(self, ledger: bool = False) -> None:
        self.builder = StateBuilder()
        self.model = RuntimeModel()
        self.pods: dict[str, _PodInfo] = {}
        self.group_queue: dict[str, str] = {}
        self.last_ms = 0
        # With a time-based fair share: the exact allocation history, to compute usage going forward.
        self.ledger: EventLedger | None = EventLedger() if ledger else None
        self._owns_ledger = ledger

    def fork(self) -> Tracker:
        """An independent copy to fold hypothetical events into (the run-time history is shared)."""
        other = Tracker()
        other.builder = self.builder.fork()
        other.model = self.model
        other.pods = dict(self.pods)
        other.group_queue = dict(self.group_queue)
        other.last_ms = self.last_ms
        other.ledger, other._owns_ledger = (
            self.ledger,
            False,
        )  # shared, read-only: hypothetical pods never ran
        return other

    def apply(self, offset: int, e: Any) -> None:
        """Fold one event (one the fold rejects is skipped, as the service dead-letters it)."""
        previous = self.builder.offset
        try:
            self.builder.apply(e, offset)
        except Exception:
            self.builder.offset = previous
            return
        self.last_ms = max(self.last_ms, e.at_ms)
        if self.ledger is not None and self._owns_ledger:
            self.ledger.fold(e)
        kind = e.type
        if kind == "PodGroupUpserted":
            self.group_queue[f"{e.namespace}/{e.name}"] = e.queue
            return
        if kind not in ("PodSubmitted", "PodBound", "PodReleasing", "PodFinished", "PodDeleted"):
            return
        uid = f"{e.namespace}/{e.name}"
        if kind == "PodSubmitted":
            queue = e.queue or self.group_queue.get(f"{e.namespace}/{e.pod_group}") or e.namespace
            old = self.pods.get(uid)
            info = _PodInfo(queue, job_stem(e.pod_group), e)
            if old is not None:
                info.first_bound_at = old.first_bound_at
            self.pods[uid] = info
            return
        p = self.pods.get(uid)
        if p is None:
            return
        if kind == "PodBound":
            p.bound_at, p.interrupted = e.at_ms, False
            if p.first_bound_at is None:
                p.first_bound_at = e.at_ms
        elif kind == "PodReleasing":
            p.interrupted = True
        elif kind == "PodFinished":
            if p.bound_at is not None and not p.interrupted:
                self.model.add(p.queue, p.stem, e.at_ms - p.bound_at)
            p.bound_at = None
        elif kind == "PodDeleted":
            p.bound_at = None


# --------------------------------------------------------------------------- the forward simulation


@dataclass(frozen=True, slots=True)
class Setting:
    """What the forward runs need besides the state: engine config, usage, the cluster's clocks."""

    config: SessionConfig
    usage: dict[str, dict[str, float]] | None
    usage_id: str | None
    period_ms: int
    grace_ms: int
    # With a time-based fair share (k_value > 0) and a known fairshare config: usage is recomputed every
    # refresh_s in the forward runs from the allocation history plus what they run; else it stays frozen.
    fairshare: FairshareConfig | None = None
    usage_as_of: int | None = None  # the as-of time of `usage`


def _grid(t: int, period: int) -> int:
    return -(-t // period) * period


def next_cycle_ms(now_ms: int, s: Setting) -> int:
    """When the next cycle runs: *now_ms* rounded up to the cycle period."""
    return _grid(now_ms, s.period_ms)


def _split(uid: str) -> tuple[str, str]:
    ns, _, name = uid.partition("/")
    return ns, name


def _min_runtimes(state: ClusterState, config: SessionConfig) -> list[int]:
    vals = {config.default_preempt_min_runtime_ms, config.default_reclaim_min_runtime_ms}
    for q in state.queues:
        vals.update(v for v in (q.preempt_min_runtime_ms, q.reclaim_min_runtime_ms) if v is not None)
    return sorted(v for v in vals if v > 0)


class _ForwardUsage:
    """The usage snapshots of a forward run: the log's allocation history (the ledger) plus the changes the
    run makes, decayed and windowed as ``hourglass fairshare`` does (:func:`fairshare.decay.usage_at`)."""

    def __init__(self, ledger: EventLedger, s: Setting, cfg: FairshareConfig, now_ms: int) -> None:
        self.cfg = cfg
        lo = cfg.window_start_ms(now_ms)
        self.alloc = ledger.allocation(lo, now_ms + 1)
        self.cap = ledger.capacity(lo, now_ms + 1)
        self.parents = ledger.parents()
        self.held = dict(ledger.allocated_now())
        self.rows: list[tuple[int, str, str, float]] = []
        self.usage, self.usage_id = s.usage, s.usage_id
        self.as_of = s.usage_as_of if s.usage_as_of is not None else now_ms
        self.refresh_ms = cfg.refresh_s * 1000

    def change(self, t: int, queue: str, vec: tuple[int, int, int], sign: int) -> None:
        """*queue* starts (+1) or stops (-1) holding *vec* (milli-GPU, millicores, bytes) at *t*."""
        for r, v in zip(FAIRSHARE_RESOURCES, vec, strict=True):
            key = (queue, r)
            self.held[key] = max(self.held.get(key, 0) + sign * v, 0)
            self.rows.append((t, queue, r, float(self.held[key])))

    def due(self, t: int) -> bool:
        """A new snapshot is due at *t*."""
        return t - self.as_of >= self.refresh_ms

    def refresh(self, t: int) -> None:
        """Compute the snapshot as of *t* (rounded to 9 digits, as the simulator's)."""
        alloc = self.alloc
        if self.rows:
            extra = pl.DataFrame(self.rows, schema=ALLOCATION_SCHEMA, orient="row")
            alloc = pl.concat([alloc, extra]).sort(["queue", "resource", "ts_ms"], maintain_order=True)
        vectors = roll_up(usage_at(alloc, self.cap, t, self.cfg, kind="exact"), self.parents)
        self.usage = {q: {r: round(v, 9) for r, v in vals.items()} for q, vals in vectors.normalised.items()}
        self.usage_id, self.as_of = f"eta-usage-{t}", t


def _held(pod: Pod) -> tuple[int, int, int]:
    """What a bound pod holds: milli-GPU, millicores, bytes."""
    r = pod.request
    if pod.gpu_devices:
        gpu = (pod.gpu_milli_per_device or 1000) * len(pod.gpu_devices)
    elif r.gpu_fraction_milli is not None:
        gpu = r.gpu_fraction_milli * r.gpu_fraction_devices
    else:
        gpu = r.gpus * 1000
    return gpu, r.cpu, r.memory


def _forward(tr: Tracker, target: str, now_ms: int, pct: int, s: Setting) -> int | None:
    """The time the engine binds *target* when every run takes its *pct* percentile; None: not within
    :data:`HORIZON_MS` (it never fits while nothing new arrives).

    Long on purpose: one forward run is a single loop whose steps (feed arrivals, finish runs, cycle, look for
    the target) share its local clock and queues; split, they would pass that state around.
    """
    b = tr.builder.fork()
    run = KeptRun(b)  # every event folds through it: the session is kept between the forward cycles
    heap: list[tuple[int, int, int, str]] = []
    seq = itertools.count()
    model = tr.model
    state0 = b.snapshot()
    min_rt = _min_runtimes(state0, s.config)
    live: dict[str, set[str]] = {}
    for p in state0.pods:
        live.setdefault(p.job, set()).add(p.uid)
        info = tr.pods.get(p.uid)
        if p.status is PodStatus.RUNNING:
            start = info.bound_at if info is not None and info.bound_at is not None else now_ms
            rem, _ = model.remaining(
                info.queue if info else "", info.stem if info else "", pct, max(now_ms - start, 0)
            )
            heapq.heappush(heap, (now_ms + max(rem, 0), next(seq), _FINISH, p.uid))
        elif p.status is PodStatus.RELEASING:
            heapq.heappush(heap, (now_ms + s.grace_ms, next(seq), _TERMINATE, p.uid))
    for j in state0.jobs:
        if j.last_start_ms is not None:
            for v in min_rt:
                if j.last_start_ms + v > now_ms:
                    heapq.heappush(heap, (j.last_start_ms + v, next(seq), _WAKE, ""))
    fu = None
    if s.fairshare is not None and s.config.k_value > 0 and tr.ledger is not None:
        fu = _ForwardUsage(tr.ledger, s, s.fairshare, now_ms)
        heapq.heappush(heap, (max(fu.as_of + fu.refresh_ms, now_ms), next(seq), _WAKE, ""))

    def queue_of(uid: str) -> str:
        info = tr.pods.get(uid)
        return info.queue if info is not None else ""

    def end_run(uid: str, at: int, evicted: bool) -> None:
        ns, name = _split(uid)
        pod = b.pods.get(uid)
        if pod is None or pod.status not in (PodStatus.RUNNING, PodStatus.RELEASING):
            return
        if fu is not None:
            fu.change(at, queue_of(uid), _held(pod), -1)
        run.apply(
            ev.PodFinished(at_ms=at, name=name, namespace=ns, phase="Failed" if evicted else "Succeeded")
        )
        run.apply(ev.PodDeleted(at_ms=at, name=name, namespace=ns))
        if evicted:
            info = tr.pods.get(uid)
            if info is not None:  # the controller re-creates the evicted pod, pending
                run.apply(info.submitted.model_copy(update={"at_ms": at}))
                return
        pods = live.get(pod.job)
        if pods is not None:
            pods.discard(uid)
            if not pods:
                jns, jname = _split(pod.job)
                run.apply(ev.PodGroupDeleted(at_ms=at, name=jname, namespace=jns))

    t = _grid(now_ms, s.period_ms)
    for _ in range(MAX_CYCLES):
        while heap and heap[0][0] <= t:
            at, _, kind, uid = heapq.heappop(heap)
            if kind != _WAKE:
                end_run(uid, at, kind == _TERMINATE)
        if target not in b.pods:
            return None  # deleted (cannot happen without new events; kept as a guard)
        usage, usage_id = s.usage, s.usage_id
        if fu is not None:
            if fu.due(t):
                fu.refresh(t)
                heapq.heappush(heap, (t + fu.refresh_ms, next(seq), _WAKE, ""))
            usage, usage_id = fu.usage, fu.usage_id
        record = run.cycle(s.config, t, usage, usage_id)
        changed = False
        evicted = set()
        for d in record.decisions:
            if d.kind == "Evict" and d.pod is not None:
                ns, name = _split(d.pod)
                run.apply(ev.PodReleasing(at_ms=t, name=name, namespace=ns, reason=d.action or "eviction"))
                heapq.heappush(heap, (t + s.grace_ms, next(seq), _TERMINATE, d.pod))
                evicted.add(d.pod)
                changed = True
        for d in record.decisions:
            if d.kind != "Bind" or d.pod is None or d.pod in evicted or d.node is None:
                continue
            if d.pod == target:
                return t
            ns, name = _split(d.pod)
            run.apply(ev.PodBound(at_ms=t, name=name, namespace=ns, node=d.node, gpu_devices=d.gpu_devices))
            if fu is not None:
                fu.change(t, queue_of(d.pod), _held(b.pods[d.pod]), +1)
            info = tr.pods.get(d.pod)
            rem, _ = model.remaining(info.queue if info else "", info.stem if info else "", pct)
            heapq.heappush(heap, (t + rem, next(seq), _FINISH, d.pod))
            for v in min_rt:
                heapq.heappush(heap, (t + v, next(seq), _WAKE, ""))
            changed = True
        if changed:
            nxt = t + s.period_ms
        elif heap:
            nxt = max(t + s.period_ms, _grid(heap[0][0], s.period_ms))
        else:
            return None  # nothing runs, nothing will finish: it cannot fit without new arrivals
        if nxt - now_ms > HORIZON_MS:
            return None
        t = nxt
    return None


# --------------------------------------------------------------------------- the answer


@dataclass
class Eta:
    """The answer for one pod; times are logical ms (a simulation's clock, or epoch ms for a live log)."""

    pod: str
    queue: str | None
    state: str  # pending | running | gated
    now_ms: int
    earliest_ms: int | None = None  # the p10..p90 runs' earliest and latest answers; None = not within a year
    latest_ms: int | None = None
    most_likely_ms: int | None = None  # the p50 run's
    by_percentile: dict[str, int | None] = field(default_factory=dict)
    ahead: list[str] = field(default_factory=list)  # pending jobs of the pod's queue ordered before it
    reason: str | None = None  # the current cycle's Unschedulable reason
    message: str | None = None
    waiting_for: str | None = None
    node: str | None = None  # running: where
    started_ms: int | None = None  # running: since when
    history_runs: int = 0

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` object."""
        return asdict(self)

    def text(self) -> str:
        """The sentence a user reads."""
        head = f"{self.pod} (queue {self.queue})"
        if self.state == "running":
            since = (
                f" since {format_time(self.started_ms, self.now_ms)}" if self.started_ms is not None else ""
            )
            return f"{head} is already running on node {self.node}{since}: nothing to wait for.\n"
        if self.state == "gated":
            return f"{head} has scheduling gates: it is not pending until they are removed.\n"
        lines = []
        now = format_time(self.now_ms, self.now_ms)
        if self.most_likely_ms is None and self.latest_ms is None:
            lines.append(
                f"{head}: not expected to start within a year of {now} unless the cluster changes (no run of"
                " the forward simulation placed it)."
            )
        elif self.latest_ms is None:
            assert self.earliest_ms is not None
            lines.append(
                f"{head}: at the earliest {format_time(self.earliest_ms, self.now_ms)}"
                f" ({_rel(self.earliest_ms - self.now_ms)}), possibly not within a year (as of {now})."
            )
        elif self.earliest_ms == self.latest_ms:
            assert self.earliest_ms is not None
            lines.append(
                f"{head}: at {format_time(self.earliest_ms, self.now_ms)} ({_rel(self.earliest_ms - self.now_ms)};"
                f" as of {now}; the p10, p50 and p90 runs agree)."
            )
        else:
            assert self.earliest_ms is not None and self.most_likely_ms is not None
            lines.append(
                f"{head}: between {format_time(self.earliest_ms, self.now_ms)} and"
                f" {format_time(self.latest_ms, self.now_ms)}, most likely {format_time(self.most_likely_ms, self.now_ms)}"
                f" ({_rel(self.most_likely_ms - self.now_ms)}; as of {now})."
            )
        n = len(self.ahead)
        lines.append(
            f"{n} job{'s' if n != 1 else ''} of your queue {'are' if n != 1 else 'is'} ahead of you"
            + (f": {', '.join(self.ahead[:5])}{f' and {n - 5} more' if n > 5 else ''}." if n else ".")
        )
        if self.reason:
            lines.append(f"Now: [{self.reason}] {self.message}")
        if self.waiting_for:
            lines.append(self.waiting_for)
        lines.append(
            f"(run times learnt from {self.history_runs} finished run(s) in the log; jobs submitted later are"
            " not foreseen)"
        )
        return "\n".join(lines) + "\n"


def format_time(ms: int | None, now_ms: int) -> str:
    """A time on the log's clock: ``HH:MM UTC`` (epoch ms; with the date when not *now_ms*'s day) or, for a
    simulation's clock, ``HH:MM`` of the simulated day (``day N HH:MM`` on another day)."""
    if ms is None:
        return "never"
    if ms >= 10**12:  # epoch milliseconds (a live cluster)
        dt = datetime.fromtimestamp(ms / 1000, UTC)
        same = dt.date() == datetime.fromtimestamp(now_ms / 1000, UTC).date()
        return dt.strftime("%H:%M UTC" if same else "%Y-%m-%d %H:%M UTC")
    day, rest = divmod(ms, 86_400_000)
    hm = f"{rest // 3_600_000:02d}:{rest // 60_000 % 60:02d}"
    return hm if day == now_ms // 86_400_000 else f"day {day} {hm}"


def _rel(ms: int) -> str:
    s = ms / 1000
    if s < 60:
        return "now" if s <= 0 else f"in {s:.0f} s"
    if s < 7200:
        return f"in {s / 60:.0f} min"
    if s < 2 * 86400:
        return f"in {s / 3600:.1f} h"
    return f"in {s / 86400:.1f} d"


def _candidate_nodes(state: ClusterState, pod: Pod | None) -> list[str]:
    """Ready, schedulable nodes *pod* may use by its node selector and allowed nodes."""
    out = []
    for n in state.nodes:
        if not n.ready or n.unschedulable:
            continue
        if pod is not None:
            if pod.allowed_nodes is not None and n.name not in pod.allowed_nodes:
                continue
            if any(n.labels.get(k) != v for k, v in pod.node_selector.items()):
                continue
        out.append(n.name)
    return out


def gpu_holders(state: ClusterState, pod: Pod | None) -> dict[str, tuple[int, int]]:
    """Who holds GPUs on the nodes *pod* may use: queue -> (milli-GPU, pods), largest first; pods of other
    schedulers are ``(other schedulers)``."""
    nodes = set(_candidate_nodes(state, pod))
    queue_of = {j.uid: j.queue for j in state.jobs}
    held: dict[str, list[int]] = {}
    for p in state.pods:
        if p.node in nodes and p.status in (PodStatus.RUNNING, PodStatus.RELEASING, PodStatus.ALLOCATED):
            milli = (p.gpu_milli_per_device or 1000) * len(p.gpu_devices)
            if milli:
                entry = held.setdefault(queue_of.get(p.job, "?"), [0, 0])
                entry[0] += milli
                entry[1] += 1
    for f in state.foreign_pods:
        if f.node in nodes and f.request.gpus:
            entry = held.setdefault("(other schedulers)", [0, 0])
            entry[0] += f.request.gpus * 1000
            entry[1] += 1
    ordered = sorted(held.items(), key=lambda kv: (-kv[1][0], kv[0]))
    return {q: (v[0], v[1]) for q, v in ordered}


def free_gpu_milli(state: ClusterState, pod: Pod | None) -> int:
    """Free milli-GPU on the ready nodes *pod* may use (its node selector and allowed nodes)."""
    nodes = _candidate_nodes(state, pod)
    capacity = {n.name: n.gpus * 1000 for n in state.nodes}
    total = sum(capacity[n] for n in nodes)
    return max(total - sum(m for m, _ in gpu_holders(state, pod).values()), 0)


def queue_standing(
    record: CycleRecord, queue: str | None
) -> tuple[tuple[int, int] | None, list[tuple[str, int]]]:
    """(allocated, fair share) milli-GPU of *queue* in *record*, and the other queues over their fair share
    (name, excess), largest first: the inputs of :func:`analytics.reports.explain.advice`."""
    mine = None
    over = []
    for q in record.queues:
        alloc, fair = q.allocated.get("gpu", 0), q.fair_share.get("gpu", 0)
        if q.name == queue:
            mine = (alloc, fair)
        elif alloc > fair and q.name != queue:
            over.append((q.name, alloc - fair))
    over.sort(key=lambda x: (-x[1], x[0]))
    return mine, over[:5]


def _waiting_for(
    record: CycleRecord, d: Decision, state: ClusterState, pod: Pod | None, leaves: set[str]
) -> str:
    mine, over = queue_standing(record, d.queue)
    over_leaves = [(n, x) for n, x in over if n in leaves]
    if d.reason in (None, "PodSchedulingErrors", "NotAttempted") and mine is not None:
        alloc, fair = mine
        if alloc >= fair and alloc > 0:
            more = "more than" if alloc > fair else "all of"
            return (
                f"Your queue {d.queue} holds {alloc / 1000:g} GPUs, {more} its fair share of {fair / 1000:g}:"
                " it cannot reclaim, you are waiting for its own pods to finish."
            )
        if over_leaves:
            name, excess = over_leaves[0]
            return (
                f"You are waiting for GPUs that queue {name} holds over its fair share (+{excess / 1000:g} GPU);"
                " reclaim takes them once its pods pass their min-runtime, or they finish."
            )
    return "What it would take: " + advice(d.reason or "", d.details, mine, free_gpu_milli(state, pod), over)


def _ahead(ssn: Session, pod: Pod) -> list[str]:
    job = next((j for j in ssn.jobs if j.uid == pod.job), None)
    if job is None or job.queue is None:
        return []
    key = job.sort_key()
    out = [
        j
        for j in ssn.jobs
        if j.uid != job.uid and j.queue is job.queue and j.has_tasks_to_allocate() and j.sort_key() < key
    ]
    return [j.uid for j in sorted(out, key=lambda j: j.sort_key())]


def estimate(tr: Tracker, pod_uid: str, now_ms: int, s: Setting) -> Eta:
    """The answer for *pod_uid* on the state folded into *tr*, as of *now_ms*."""
    pod = tr.builder.pods.get(pod_uid)
    info = tr.pods.get(pod_uid)
    if pod is None or info is None:
        raise EtaError(f"pod {pod_uid} is not in the log's current state (never submitted, or already gone)")
    queue = info.queue
    if pod.status in (PodStatus.RUNNING, PodStatus.RELEASING):
        return Eta(pod_uid, queue, "running", now_ms, node=pod.node, started_ms=info.bound_at)
    if pod.status in (PodStatus.SUCCEEDED, PodStatus.FAILED):
        raise EtaError(f"pod {pod_uid} has finished ({pod.status.value})")
    if pod.gated:
        return Eta(pod_uid, queue, "gated", now_ms)
    if pod.job not in tr.builder.jobs:
        raise EtaError(
            f"pod {pod_uid}'s pod group {pod.job} is not in the log: the engine does not see the pod until"
            " its group exists"
        )
    if not len(tr.model):
        raise EtaError("no pod has finished in the log yet: there are no run times to learn from")
    state = tr.builder.snapshot()
    t0 = _grid(now_ms, s.period_ms)
    record, ssn = run_cycle(state, s.config, t0, s.usage, s.usage_id)
    answer = Eta(pod_uid, queue, "pending", now_ms, history_runs=len(tr.model))
    answer.ahead = _ahead(ssn, pod)
    mine = next((d for d in record.decisions if d.kind == "Unschedulable" and pod_uid in d.pods), None)
    if mine is not None:
        answer.reason, answer.message = mine.reason, mine.message
        leaves = {q.name for q in state.queues} - {q.parent for q in state.queues if q.parent}
        # Free GPUs as the cycle left them (what it placed is no longer free).
        answer.waiting_for = _waiting_for(record, mine, result_state(ssn), pod, leaves)
    results = {p: _forward(tr, pod_uid, now_ms, p, s) for p in PERCENTILES}
    answer.by_percentile = {f"p{p}": v for p, v in results.items()}
    known = [v for v in results.values() if v is not None]
    answer.earliest_ms = min(known) if known else None
    answer.latest_ms = max(known) if len(known) == len(results) else None
    answer.most_likely_ms = results[50]
    return answer


# --------------------------------------------------------------------------- opening a log


def _setting(src: ReplaySource, record: CycleRecord | None, base: Setting | None = None) -> Setting:
    """The forward runs' setting as of *record* (its usage snapshot); *base* saves re-reading the
    manifest."""
    if base is None:
        period, grace = DEFAULT_PERIOD_MS, DEFAULT_GRACE_MS
        path = Path(src.name)
        if (path / "manifest.json").is_file():
            manifest = read_manifest(path)
            period = int(float(manifest.get("period_s") or period / 1000) * 1000)
            grace = int((manifest.get("tenants") or {}).get("eviction_grace_s", grace / 1000) * 1000)
        base = Setting(src.config, None, None, max(period, 1), grace, _fairshare(src, path))
    usage, usage_id, as_of = None, None, None
    if record is not None and record.usage_snapshot_id is not None:
        snap = src.usage.get(record.usage_snapshot_id)
        if snap is not None:
            usage, usage_id, as_of = snap.usage, record.usage_snapshot_id, snap.as_of_ms
    return replace(base, usage=usage, usage_id=usage_id, usage_as_of=as_of)


def _fairshare(src: ReplaySource, path: Path) -> FairshareConfig | None:
    """How the run computed usage, when the log says (a run directory's manifest) and k_value > 0: a
    scenario's ``fairshare`` section, or a trace run's tenants engine (an unbounded window)."""
    if src.config.k_value <= 0 or not (path / "manifest.json").is_file():
        return None
    manifest = read_manifest(path)
    scenario = (manifest.get("inputs") or {}).get("scenario_config") or {}
    try:
        if scenario.get("fairshare"):
            return FairshareConfig(**scenario["fairshare"])
        engine = (manifest.get("tenants") or {}).get("engine") or {}
        return FairshareConfig(
            k_value=src.config.k_value,
            half_life_s=engine.get("usage_half_life_s"),
            window_s=100 * 365 * 86_400,  # the simulator's accumulator has no window
            refresh_s=engine.get("usage_refresh_s") or 3600,
        )
    except (FairshareConfigError, TypeError):
        return None


def _open(spec: str, engine_config: str | None, topic_prefix: str | None) -> ReplaySource:
    try:
        cfg = load_engine_config(engine_config) if engine_config else None
        return load_source(spec, config=cfg, topics=Topics.from_prefix(topic_prefix))
    except (ReplayError, EngineConfigError) as exc:
        raise EtaError(str(exc)) from None


def _resolve(tr: Tracker, pod: str) -> str:
    if "/" in pod:
        return pod
    hits = sorted(u for u in tr.pods if u.endswith("/" + pod))
    if not hits:
        raise EtaError(f"unknown pod {pod!r}: no PodSubmitted in the log names it")
    if len(hits) > 1:
        raise EtaError(f"pod name {pod!r} is ambiguous, give namespace/name: {', '.join(hits[:10])}")
    return hits[0]


def _tuned(base: Setting, step_ms: int | None, fairshare: FairshareConfig | None) -> Setting:
    """*base* with ``--step`` and ``--fairshare-config`` applied (the latter only with k_value > 0)."""
    if step_ms is not None:
        base = replace(base, period_ms=max(step_ms, 1))
    if fairshare is not None and base.config.k_value > 0:
        base = replace(base, fairshare=fairshare)
    return base


def fold_log(
    log: str,
    *,
    engine_config: str | None = None,
    topic_prefix: str | None = None,
    step_ms: int | None = None,
    fairshare: FairshareConfig | None = None,
) -> tuple[Tracker, int, Setting]:
    """The whole log folded, the time it ends (its last event or cycle) and the forward runs' setting
    (*step_ms*: the time between forward cycles instead of the log's cycle period; *fairshare*: how
    usage is computed, for a log that does not say)."""
    src = _open(log, engine_config, topic_prefix)
    try:
        base = _tuned(_setting(src, None), step_ms, fairshare)
        tr = Tracker(ledger=base.fairshare is not None)
        with gc_tuned():
            for offset, e in src.events():
                tr.apply(offset, e)
        last = src.records[-1] if src.records else None
        now = max(tr.last_ms, last.logical_time_ms if last is not None else 0)
        return tr, now, _setting(src, last, base)
    finally:
        src.close()


def eta(
    log: str,
    pod: str,
    *,
    engine_config: str | None = None,
    topic_prefix: str | None = None,
    step_ms: int | None = None,
    fairshare: FairshareConfig | None = None,
) -> Eta:
    """``hourglass eta POD --log LOG``: fold the whole log and answer for *pod* (``ns/name`` or a unique
    name) as of the end of the log."""
    tr, now, setting = fold_log(
        log, engine_config=engine_config, topic_prefix=topic_prefix, step_ms=step_ms, fairshare=fairshare
    )
    with gc_tuned():
        return estimate(tr, _resolve(tr, pod), now, setting)


# --------------------------------------------------------------------------- the backtest


@dataclass
class Backtest:
    """The backtest's figures; :attr:`line` is the closing line other tools parse."""

    pods: int = 0  # pods scored
    covered: int = 0  # real start within [earliest, latest]
    errors_s: list[float] = field(default_factory=list)  # |most likely - real start|, seconds
    candidates: int = 0  # pods ever left pending by a cycle
    never_started: int = 0  # candidates that never started before the end of the log (not scored)
    not_foreseen: int = 0  # scored pods whose p50 run never placed them (error counted to the horizon)
    no_history: int = 0  # sampled pods left pending before any run had finished (not scored)
    earlier: int = 0  # scored pods that started before the range
    later: int = 0  # scored pods that started after it
    wall_s: float = 0.0

    @property
    def coverage_pct(self) -> float:
        """Scored pods whose real start fell within the range, in percent."""
        return 100.0 * self.covered / self.pods if self.pods else 0.0

    @property
    def median_abs_error_s(self) -> float:
        """The median of |most likely - real start| in seconds."""
        if not self.errors_s:
            return 0.0
        xs = sorted(self.errors_s)
        mid = len(xs) // 2
        return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2

    @property
    def nothing_scored(self) -> str:
        """Why no pod was scored (a coverage of 0 pods would read as a 0 % score), for the one error line."""
        if not self.candidates:
            return "nothing to score: no cycle left a pod pending in this log"
        return (
            f"nothing to score: {self.candidates} pods were left pending by a cycle, but"
            f" {self.never_started} never started before the end of the log and {self.no_history} became"
            " pending before any run had finished"
        )

    @property
    def line(self) -> str:
        """The closing line other tools parse."""
        return (
            f"eta: {self.pods} pods, coverage {self.coverage_pct:.1f} % within p10-p90, median abs error"
            f" {self.median_abs_error_s:.0f} s"
        )


def _full_records(src: ReplaySource) -> Iterator[CycleRecord]:
    try:
        yield from expand_records(src.records)
    except RecordChainError as exc:
        raise EtaError(f"the log's cycle records do not chain: {exc}") from None


def backtest(
    log: str,
    *,
    sample: int = 200,
    engine_config: str | None = None,
    topic_prefix: str | None = None,
    on_pod: Callable[[str, Eta, int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
    step_ms: int | None = None,
    fairshare: FairshareConfig | None = None,
) -> Backtest:
    """Score the estimate on *log*: for up to *sample* pods (evenly spread over the pods any cycle left
    pending and that later started, in the order they became pending; 0 = all), estimate at the first
    cycle that left each pending, from the log up to that cycle only, and compare with its first ``Bind``.

    *on_pod* is called with each scored pod, its answer and its real start; *on_total* with the number
    of pods to score (progress)."""
    src = _open(log, engine_config, topic_prefix)
    out = Backtest()
    t0 = time.perf_counter()
    try:
        # Pass 1 over the records (streamed: only what pass 2 needs is kept).
        first_pending: dict[str, int] = {}  # pod -> index of the first record leaving it pending
        first_bind: dict[str, int] = {}
        inputs: list[tuple[int, int, str | None]] = []  # per record: events_offset, time, usage id
        for i, rec in enumerate(_full_records(src)):
            inputs.append((rec.events_offset, rec.logical_time_ms, rec.usage_snapshot_id))
            for d in rec.decisions:
                if d.kind == "Bind" and d.pod is not None:
                    first_bind.setdefault(d.pod, rec.logical_time_ms)
                elif d.kind == "Unschedulable":
                    for uid in d.pods:
                        if uid not in first_pending and uid not in first_bind:
                            first_pending[uid] = i
        order = sorted(first_pending, key=lambda u: (first_pending[u], u))
        out.candidates = len(order)
        started = [u for u in order if u in first_bind]
        out.never_started = len(order) - len(started)
        if sample > 0 and len(started) > sample:
            step = len(started) / sample
            started = [started[int(k * step)] for k in range(sample)]
        if on_total is not None:
            on_total(len(started))
        wanted: dict[int, list[str]] = {}
        for u in started:
            wanted.setdefault(first_pending[u], []).append(u)
        base = _tuned(_setting(src, None), step_ms, fairshare)
        tr = Tracker(ledger=base.fairshare is not None)
        events = iter(src.events())
        held: tuple[int, Any] | None = None  # the first event past the last fold
        with gc_tuned():
            for i in sorted(wanted):
                offset, now, usage_id = inputs[i]
                while True:  # fold up to this record's events_offset
                    nxt = held if held is not None else next(events, None)
                    held = None
                    if nxt is None:
                        break
                    if nxt[0] > offset:
                        held = nxt
                        break
                    tr.apply(*nxt)
                snap = src.usage.get(usage_id) if usage_id is not None else None
                s = replace(
                    base,
                    usage=snap.usage if snap else None,
                    usage_id=usage_id if snap else None,
                    usage_as_of=snap.as_of_ms if snap else None,
                )
                for uid in wanted[i]:
                    real = first_bind[uid]
                    try:
                        a = estimate(tr, uid, now, s)
                    except EtaError:
                        out.no_history += 1  # nothing finished before this cycle: nothing to learn from
                        continue
                    if a.state != "pending":
                        continue
                    out.pods += 1
                    lo, hi, mid = a.earliest_ms, a.latest_ms, a.most_likely_ms
                    if lo is not None and lo <= real and (hi is None or real <= hi):
                        out.covered += 1
                    elif lo is None or real > (hi if hi is not None else real):
                        out.later += 1
                    else:
                        out.earlier += 1
                    if mid is None:
                        out.not_foreseen += 1
                        mid = now + HORIZON_MS
                    out.errors_s.append(abs(mid - real) / 1000)
                    if on_pod is not None:
                        on_pod(uid, a, real)
    finally:
        src.close()
    out.wall_s = time.perf_counter() - t0
    return out


# --------------------------------------------------------------------------- the command


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``eta`` subcommand's arguments."""
    p.add_argument("pod", nargs="?", help="the pending pod: namespace/name, or name when it is unique")
    p.add_argument(
        "--log",
        metavar="LOG",
        help="a run directory (hourglass simulate --out), an embedded log directory or kafka://HOST:PORT",
    )
    p.add_argument(
        "--backtest",
        metavar="LOG",
        help="instead of one pod: score the estimate on every (sampled) pod of LOG that was left pending",
    )
    p.add_argument(
        "--sample",
        type=int,
        default=200,
        metavar="N",
        help="--backtest: score at most N pods, evenly spread (default 200; 0 = all)",
    )
    p.add_argument("--json", action="store_true", help="print a JSON object instead of sentences")
    add_step_argument(p)
    p.add_argument(
        "--engine-config", metavar="FILE", help="for a log: the engine config file `hourglass run` used"
    )
    p.add_argument("--topic-prefix", default=None, help="for a log: PREFIX.events, PREFIX.decisions, ...")


def add_step_argument(p: argparse.ArgumentParser) -> None:
    """``--step S`` and ``--fairshare-config FILE``, shared with ``check``."""
    p.add_argument(
        "--fairshare-config",
        metavar="FILE",
        default=None,
        help="for a service log with k_value > 0: the config file `hourglass fairshare` used, so the"
        " forward runs recompute usage as it does (a run directory's manifest says it; default: keep the"
        " last snapshot's usage)",
    )
    p.add_argument(
        "--step",
        type=float,
        default=None,
        metavar="S",
        help="seconds between the forward simulation's cycles (default: the log's cycle period, 10 s for a"
        " service log); coarser is faster on a large backlog, at the cost of up to S of error",
    )


def fairshare_config(args: argparse.Namespace) -> FairshareConfig | None:
    """``--fairshare-config`` read with ``hourglass fairshare``'s loader; EtaError on a bad file."""
    if args.fairshare_config is None:
        return None
    from fairshare.service import load_config

    try:
        return load_config(args.fairshare_config)[0]
    except FairshareConfigError as exc:
        raise EtaError(str(exc)) from None


def step_ms(args: argparse.Namespace) -> int | None:
    """``--step`` in ms (None: the log's period); EtaError unless positive."""
    if args.step is None:
        return None
    if not args.step > 0:
        raise EtaError(f"--step must be a positive number of seconds, got {args.step:g}")
    return int(args.step * 1000)


def _backtest_with_progress(args: argparse.Namespace) -> Backtest:
    """:func:`backtest` with a progress bar on stderr (when it is a terminal)."""
    from analytics.progress import count_bar

    with count_bar("backtesting", "pods") as bar:
        return backtest(
            args.backtest,
            sample=args.sample,
            engine_config=args.engine_config,
            topic_prefix=args.topic_prefix,
            on_pod=lambda *_: bar.advance(),
            on_total=bar.set_total,
            step_ms=step_ms(args),
            fairshare=fairshare_config(args),
        )


def run_cli(args: argparse.Namespace) -> int:
    """``hourglass eta``: one pod's answer, or the backtest's figures; exit 2 on bad input."""
    try:
        if args.backtest is not None:
            if args.pod is not None or args.log is not None:
                raise EtaError("--backtest LOG takes no pod and no --log")
            if args.sample < 0:
                raise EtaError(f"--sample must be >= 0, got {args.sample}")
            bt = _backtest_with_progress(args)
            if not bt.pods:
                raise EtaError(f"--backtest {args.backtest}: {bt.nothing_scored}")
            if args.json:
                body = {
                    "pods": bt.pods,
                    "coverage_pct": round(bt.coverage_pct, 1),
                    "median_abs_error_s": round(bt.median_abs_error_s, 1),
                    "candidates": bt.candidates,
                    "never_started": bt.never_started,
                    "no_history": bt.no_history,
                    "started_earlier": bt.earlier,
                    "started_later": bt.later,
                    "not_foreseen": bt.not_foreseen,
                    "wall_s": round(bt.wall_s, 1),
                    "line": bt.line,
                }
                print(json.dumps(body, indent=2))
                return 0
            else:
                sampled = args.sample and bt.candidates - bt.never_started > args.sample
                print(
                    f"{bt.candidates} pods were left pending by a cycle; {bt.never_started} never started before"
                    f" the end of the log and {bt.no_history} became pending before any run had finished (not"
                    f" scored); {bt.pods} scored{' (an even sample)' if sampled else ''}; {bt.not_foreseen} not"
                    f" placed by the most-likely run; {bt.wall_s:.1f} s"
                )
                print(f"outside the range: {bt.earlier} started earlier, {bt.later} later")
            print(bt.line)
            return 0
        if args.pod is None or args.log is None:
            raise EtaError("give a pod and --log LOG, or --backtest LOG")
        answer = eta(
            args.log,
            args.pod,
            engine_config=args.engine_config,
            topic_prefix=args.topic_prefix,
            step_ms=step_ms(args),
            fairshare=fairshare_config(args),
        )
    except EtaError as exc:
        print(f"eta: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(answer.to_json(), indent=2))
    else:
        from analytics.terminal import output_width, wrap_lines

        lines = wrap_lines(answer.text().splitlines(), output_width(sys.stdout))
        sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0
