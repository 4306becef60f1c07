"""Exact per-queue usage from the events log: a :class:`~fairshare.source.UsageSource` of kind ``exact``.

The ledger folds contract events (:mod:`ingest.events`) into step functions:

* ``PodGroupUpserted`` names a job's queue (authoritative); ``PodSubmitted`` gives the pod's requests and
  its own queue label (used only when the pod group is unknown);
* ``PodBound`` starts holding the requests on the pod's (leaf) queue; ``PodReleasing`` still holds;
  ``PodFinished`` / ``PodDeleted`` stop holding;
* ``QueueUpserted`` / ``QueueDeleted`` keep the queue tree (:meth:`EventLedger.parents`), which the service
  uses to roll leaf usage up to parent queues (:func:`fairshare.decay.roll_up`) for either source;
* ``NodeUpserted`` / ``NodeRemoved`` change the cluster capacity (every node present, as
  ``kube_node_status_capacity`` counts them).

Every change is one row ``(ts_ms, queue, resource, value)`` holding until the next row of the series, in
engine units: milli-GPU, millicores, bytes. Integrating these steps (:mod:`fairshare.decay`) gives
resource-seconds with no sampling error. Time is the events' ``at_ms``; an event stamped earlier than one
already folded is applied at the later time, because history that was already integrated cannot change.

Inconsistent input (a bind of a pod never submitted, a finish of a pod not holding) is ignored and counted
in :attr:`EventLedger.counters`, never an exception.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

import polars as pl

from fairshare.source import ALLOCATION_SCHEMA, CAPACITY_SCHEMA, RESOURCES
from ingest import events as ev
from ingest.events import EventError, parse_event

__all__ = ["EventLedger"]

_log = logging.getLogger(__name__)

_Vec = tuple[int, int, int]  # gpu (milli), cpu (millicores), memory (bytes), in RESOURCES order


@dataclass(frozen=True, slots=True)
class _PodInfo:
    job: str
    label_queue: str | None
    requests: ev.PodRequests


@dataclass(frozen=True, slots=True)
class _Node:
    vec: _Vec
    gpu_memory_mib: int | None


def _gpu_milli(r: ev.PodRequests, node: _Node | None) -> int:
    """Milli-GPUs a bound pod holds, the way the scheduler's state fold counts them."""
    if r.gpu_fraction_milli is not None:
        return r.gpu_fraction_milli * r.gpu_fraction_devices
    if r.gpu_memory_mib is not None:
        # KAI turns a GPU-memory request into a fraction of the device's memory, rounded up to 1 %.
        mem = (node.gpu_memory_mib or 100) // 100 * 100 if node else 100
        return -(-r.gpu_memory_mib * 100 // max(mem, 100)) * 10 * r.gpu_fraction_devices
    return r.gpus * 1000


class EventLedger:
    """Folds events into exact allocation / capacity step functions; a ``UsageSource`` of kind ``exact``."""

    kind: str = "exact"
    step_ms: int = 0

    def __init__(self) -> None:
        self._pods: dict[str, _PodInfo] = {}
        self._group_queue: dict[str, str] = {}
        self._parent: dict[str, str | None] = {}
        self._nodes: dict[str, _Node] = {}
        self._holding: dict[str, tuple[str, _Vec]] = {}
        self._alloc_now: dict[tuple[str, str], int] = {}
        self._cap_now: dict[str, int] = {}
        # History = a polars frame of folded rows + the rows folded since it was last built; a query appends
        # the pending rows as one chunk, so a step costs its new rows, not the whole history.
        self._alloc_rows: list[tuple[int, str, str, float]] = []
        self._cap_rows: list[tuple[int, str, float]] = []
        self._alloc_df = pl.DataFrame(schema=ALLOCATION_SCHEMA)
        self._cap_df = pl.DataFrame(schema=CAPACITY_SCHEMA)
        self._now_ms: int | None = None
        #: How many inputs of each kind were ignored or folded (``bind_unknown_pod``, ``bad_record``, ...).
        self.counters: Counter[str] = Counter()

    @property
    def as_of_ms(self) -> int | None:
        """Logical time: the ``at_ms`` of the last folded event (``None`` before any)."""
        return self._now_ms

    # ------------------------------------------------------------------ folding

    def fold_record(self, raw: bytes) -> bool:
        """Parse and fold one log record; a record that is not a valid event is counted and skipped."""
        try:
            event = parse_event(raw)
        except EventError as err:
            self.counters["bad_record"] += 1
            _log.warning("fairshare ledger: skipping a bad event record: %s", err)
            return False
        self.fold(event)
        return True

    def fold(self, e: ev.EventBase) -> None:
        """Apply one event at ``max(e.at_ms, last at_ms)``."""
        t = e.at_ms if self._now_ms is None else max(e.at_ms, self._now_ms)
        self._now_ms = t
        self.counters["events"] += 1
        if isinstance(e, ev.PodGroupUpserted):
            self._group_queue[f"{e.namespace}/{e.name}"] = e.queue
        elif isinstance(e, ev.QueueUpserted):
            self._parent[e.name] = e.parent
        elif isinstance(e, ev.QueueDeleted):
            self._parent.pop(e.name, None)
        elif isinstance(e, ev.PodSubmitted):
            uid = f"{e.namespace}/{e.name}"
            self._pods[uid] = _PodInfo(f"{e.namespace}/{e.pod_group}", e.queue, e.requests)
        elif isinstance(e, ev.PodBound):
            self._bind(t, f"{e.namespace}/{e.name}", e.node)
        elif isinstance(e, ev.PodFinished | ev.PodDeleted):
            uid = f"{e.namespace}/{e.name}"
            if not self._release(t, uid):
                self.counters["stop_not_holding"] += 1
            if isinstance(e, ev.PodDeleted):
                self._pods.pop(uid, None)
        elif isinstance(e, ev.NodeUpserted):
            node = _Node((e.gpus * 1000, e.cpu_millicores, e.memory_bytes), e.gpu_memory_mib)
            old = self._nodes.get(e.name)
            self._nodes[e.name] = node
            self._capacity_delta(t, node.vec, old.vec if old else (0, 0, 0))
        elif isinstance(e, ev.NodeRemoved):
            gone = self._nodes.pop(e.name, None)
            if gone is None:
                self.counters["remove_unknown_node"] += 1
            else:
                self._capacity_delta(t, (0, 0, 0), gone.vec)

    def parents(self) -> dict[str, str | None]:
        """The current queue tree: queue → parent (``None`` for a top-level queue), sorted by queue."""
        return dict(sorted(self._parent.items()))

    def _bind(self, t: int, uid: str, node_name: str) -> None:
        info = self._pods.get(uid)
        if info is None:
            self.counters["bind_unknown_pod"] += 1
            return
        queue = self._group_queue.get(info.job) or info.label_queue
        if queue is None:
            self.counters["bind_without_queue"] += 1
            return
        self._release(t, uid)  # a re-bind moves the pod; it does not hold twice
        r = info.requests
        vec = (_gpu_milli(r, self._nodes.get(node_name)), r.cpu_millicores, r.memory_bytes)
        self._holding[uid] = (queue, vec)
        self._alloc_delta(t, queue, vec, +1)

    def _release(self, t: int, uid: str) -> bool:
        held = self._holding.pop(uid, None)
        if held is None:
            return False
        self._alloc_delta(t, held[0], held[1], -1)
        return True

    def _alloc_delta(self, t: int, q: str, vec: _Vec, sign: int) -> None:
        for res, amount in zip(RESOURCES, vec, strict=True):
            if amount == 0:
                continue
            key = (q, res)
            value = self._alloc_now.get(key, 0) + sign * amount
            self._alloc_now[key] = value
            self._alloc_rows.append((t, q, res, float(value)))

    def _capacity_delta(self, t: int, new: _Vec, old: _Vec) -> None:
        for res, n, o in zip(RESOURCES, new, old, strict=True):
            if n == o:
                continue
            value = self._cap_now.get(res, 0) + n - o
            self._cap_now[res] = value
            self._cap_rows.append((t, res, float(value)))

    # ------------------------------------------------------------------ the UsageSource side

    def allocated_now(self) -> dict[tuple[str, str], int]:
        """Current holdings per ``(queue, resource)`` in engine units (non-zero only)."""
        return {k: v for k, v in sorted(self._alloc_now.items()) if v}

    def _frames(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        if self._alloc_rows:
            new = pl.DataFrame(self._alloc_rows, schema=ALLOCATION_SCHEMA, orient="row")
            self._alloc_df = pl.concat([self._alloc_df, new], rechunk=False)
            self._alloc_rows = []
        if self._cap_rows:
            new_c = pl.DataFrame(self._cap_rows, schema=CAPACITY_SCHEMA, orient="row")
            self._cap_df = pl.concat([self._cap_df, new_c], rechunk=False)
            self._cap_rows = []
        return self._alloc_df, self._cap_df

    @staticmethod
    def _slice(df: pl.DataFrame, keys: list[str], start_ms: int, end_ms: int) -> pl.DataFrame:
        # The row in effect at ``start_ms`` (the last one at or before it, per series) plus the changes
        # inside the range: exactly what an exact step function over [start, end) needs.
        before = df.filter(pl.col("ts_ms") <= start_ms).group_by(keys, maintain_order=True).last()
        inside = df.filter((pl.col("ts_ms") > start_ms) & (pl.col("ts_ms") < end_ms))
        return pl.concat([before.select(df.columns), inside]).sort([*keys, "ts_ms"], maintain_order=True)

    def allocation(self, start_ms: int, end_ms: int) -> pl.DataFrame:
        """Per-queue allocation step function over ``[start_ms, end_ms)`` (never unavailable)."""
        return self._slice(self._frames()[0], ["queue", "resource"], start_ms, end_ms)

    def capacity(self, start_ms: int, end_ms: int) -> pl.DataFrame:
        """Cluster capacity step function over ``[start_ms, end_ms)``."""
        return self._slice(self._frames()[1], ["resource"], start_ms, end_ms)

    def prune(self, before_ms: int) -> int:
        """Drop history no window can need any more: rows older than ``before_ms`` except each series'
        row in effect at ``before_ms``. Returns how many rows were dropped."""
        alloc, cap = self._frames()
        a = self._slice(alloc, ["queue", "resource"], before_ms, 2**62)
        c = self._slice(cap, ["resource"], before_ms, 2**62)
        dropped = alloc.height - a.height + cap.height - c.height
        # Keep the log (time) order the rows were appended in, which the sort by series does not.
        a = a.sort("ts_ms", maintain_order=True)
        c = c.sort("ts_ms", maintain_order=True)
        self._alloc_df = a.select(list(ALLOCATION_SCHEMA)).rechunk()
        self._cap_df = c.select(list(CAPACITY_SCHEMA)).rechunk()
        return dropped
