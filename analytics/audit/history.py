"""Cycle records as intervals: what the audit store keeps, so its rows grow with changes, not with cycles.

A job pending for reason R with message M from t1 to t2 is one ``pending`` row; a queue whose division
was D from t1 to t2 is one ``queue_spans`` row, whatever the number of cycles in between. :class:`Intervals`
is the sink's state machine: it reads records in log order (v1 full records, v2 checkpoints and deltas,
:mod:`scheduler.engine.record.delta`), keeps the open intervals, and hands out the rows to write:

* ``cycles``: one row per record (its inputs, kind, a sequence number, and the cluster's top-level totals
  of the division in effect, which the report's capped fair share needs);
* ``decisions``: every ``Bind`` / ``Evict`` / ``Pipeline``, and an ``Unschedulable`` decision only at the
  cycle it starts or changes (a full record repeating an open interval adds nothing);
* closed ``pending`` and ``queue_spans`` intervals. Open intervals stay in :attr:`Intervals.pending` /
  :attr:`Intervals.queues` (the store keeps them in its ``*_open`` tables between loads).

Intervals are cut at UTC midnight (logical time), closed at ``D 00:00`` and reopened with the same content,
so each day's rows stand alone: a day's Parquet partition answers "what held during day D" by itself, and
daily aggregates need no other day. ``start_cycle`` stays the cycle that made the decision. Whole days
without any cycle record (the scheduler was down, or the clock jumped) are the exception: they are one row
from the first such midnight to the last, archived with its last day, so the work per record is
bounded whatever the jump (:meth:`Intervals._cut_at_midnights`).

Records as written keep the cluster's largest free GPUs once (``largest_free_gpu_milli``,
:mod:`scheduler.engine.record.delta`), not in each pending decision. The store keeps decisions in their full
form, so each record's decisions are rendered, and when that number moves every open pending interval
that names it is closed and reopened with the new number (with a ``decisions`` row at that cycle), as it
was when every delta restated those decisions: the store's rows and answers do not depend on the format.

Sequence numbers (``seq``) count the records in load order; an interval covers the cycles with
``start_seq <= seq < end_seq``, which is exact even when two cycles share a logical time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from scheduler.engine.record.decisions import CycleRecord, Decision, QueueRecord
from scheduler.engine.record.delta import RecordChainError, patch_queue, render, render_pending, strip_pending

__all__ = ["DAY_MS", "RESOURCES", "Intervals", "OpenPending", "OpenQueue", "queue_columns"]

DAY_MS: Final = 86_400_000
RESOURCES: Final = ("gpu", "cpu", "memory")
QUEUE_FIELDS: Final = ("deserved", "fair_share", "fair_share_classic", "allocated", "requested", "limit")


def _canon(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def queue_columns(q: QueueRecord) -> dict[str, Any]:
    """A queue record as the flat columns of ``queue_spans`` (``gpu_fair_share``, …, ``raw`` JSON)."""
    cols: dict[str, Any] = {"queue": q.name, "parent": q.parent, "priority": q.priority}
    for f in QUEUE_FIELDS:
        vec = getattr(q, f)
        for r in RESOURCES:
            cols[f"{r}_{f}"] = vec.get(r)
    for r in RESOURCES:
        cols[f"{r}_usage"] = float(q.usage.get(r, 0.0))
    cols["raw"] = _canon(q.model_dump(mode="json"))
    return cols


@dataclass(slots=True)
class OpenPending:
    """A job pending for one decision since ``start_ms`` (cycle ``start_cycle``, record ``start_seq``)."""

    decision: Decision
    key: str  # canonical JSON of the decision: an equal decision continues the interval
    start_cycle: str
    start_ms: int
    start_seq: int
    # The columns that do not change while the interval is open, rendered once: cutting at midnights
    # yields several rows from the same record.
    _base: dict[str, Any] | None = None

    def row(self, end_ms: int, end_seq: int) -> dict[str, Any]:
        if self._base is None:
            self._base = self._render()
        out = dict(self._base)
        out.update(
            start_cycle=self.start_cycle,
            start_ms=self.start_ms,
            start_seq=self.start_seq,
            end_ms=end_ms,
            end_seq=end_seq,
        )
        return out

    def _render(self) -> dict[str, Any]:
        d = self.decision
        return {
            "job": d.job,
            "queue": d.queue,
            "pods": list(d.pods),
            "reason": d.reason,
            "message": d.message,
            "details": _canon(d.details) if d.details else None,
            "start_cycle": None,
            "start_ms": None,
            "start_seq": None,
            "end_ms": None,
            "end_seq": None,
            "decision": self.key,
        }


@dataclass(slots=True)
class OpenQueue:
    """A queue's division since ``start_ms``."""

    record: QueueRecord
    key: str
    start_cycle: str
    start_ms: int
    start_seq: int
    _base: dict[str, Any] | None = None  # queue_columns(record), rendered once (as OpenPending's)

    def row(self, end_ms: int, end_seq: int) -> dict[str, Any]:
        if self._base is None:
            self._base = queue_columns(self.record)
        cols = dict(self._base)
        cols.update(
            start_cycle=self.start_cycle,
            start_ms=self.start_ms,
            start_seq=self.start_seq,
            end_ms=end_ms,
            end_seq=end_seq,
        )
        return cols


def _decision_row(rec: CycleRecord, seq: int, i: int, d: Decision) -> dict[str, Any]:
    return {
        "cycle_id": rec.cycle_id,
        "logical_time_ms": rec.logical_time_ms,
        "seq": i,
        "kind": d.kind,
        "job": d.job,
        "queue": d.queue,
        "pod": d.pod,
        "pods": list(d.pods),
        "node": d.node,
        "gpu_devices": list(d.gpu_devices),
        "gpu_milli_per_device": d.gpu_milli_per_device,
        "action": d.action,
        "reason": d.reason,
        "message": d.message,
        "details": _canon(d.details) if d.details else None,
        "record_seq": seq,
    }


@dataclass(slots=True)
class Intervals:
    """The sink's state: open intervals, the last record read, and the rows produced since :meth:`drain`."""

    pending: dict[str, OpenPending] = field(default_factory=dict)
    queues: dict[str, OpenQueue] = field(default_factory=dict)
    last_cycle: str | None = None
    last_ms: int | None = None
    seq: int = -1  # of the last record read
    orphans: int = 0  # deltas skipped because their base was never read
    free: int | None = None  # the last record's largest_free_gpu_milli (None: unknown or not written)
    cycles: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    closed_pending: list[dict[str, Any]] = field(default_factory=list)
    closed_queues: list[dict[str, Any]] = field(default_factory=list)
    _opened: set[str] = field(default_factory=set)  # jobs whose interval the current record opened

    # -- reading records ------------------------------------------------------------------------------

    def feed(self, rec: CycleRecord) -> bool:
        """Take one record (in log order); False for a delta whose base was not the last record read."""
        if not rec.is_full and rec.base != self.last_cycle:
            self.orphans += 1
            return False
        seq = self.seq + 1
        t = rec.logical_time_ms
        self._cut_at_midnights(t, seq)
        self._opened = set()
        free = rec.largest_free_gpu_milli
        written, rec = rec, render(rec)
        if rec.is_full:
            self._full(rec, seq, t)
        else:
            self._delta(rec, seq, t)
        listed = {d.job for d in rec.decisions if d.kind == "Unschedulable"}
        refreshed = self._refresh(rec, seq, free, listed) if free is not None and free != self.free else []
        self.free = free
        for i, d in enumerate([*rec.decisions, *refreshed]):
            if d.kind != "Unschedulable" or d.job in self._opened:
                self.decisions.append(_decision_row(rec, seq, i, d))
        self.cycles.append(self._cycle_row(written, seq))
        self.seq, self.last_cycle, self.last_ms = seq, rec.cycle_id, t
        return True

    def _open_pending(self, d: Decision, key: str, rec: CycleRecord, seq: int) -> None:
        old = self.pending.get(d.job)
        if old is not None:
            if old.key == key:
                return
            self.closed_pending.append(old.row(rec.logical_time_ms, seq))
        self.pending[d.job] = OpenPending(d, key, rec.cycle_id, rec.logical_time_ms, seq)
        self._opened.add(d.job)

    def _open_queue(self, q: QueueRecord, rec: CycleRecord, seq: int) -> None:
        key = _canon(q.model_dump(mode="json"))
        old = self.queues.get(q.name)
        if old is not None:
            if old.key == key:
                return
            self.closed_queues.append(old.row(rec.logical_time_ms, seq))
        self.queues[q.name] = OpenQueue(q, key, rec.cycle_id, rec.logical_time_ms, seq)

    def _close_pending(self, job: str, t: int, seq: int) -> None:
        old = self.pending.pop(job, None)
        if old is not None:
            self.closed_pending.append(old.row(t, seq))

    def _close_queue(self, name: str, t: int, seq: int) -> None:
        old = self.queues.pop(name, None)
        if old is not None:
            self.closed_queues.append(old.row(t, seq))

    def _full(self, rec: CycleRecord, seq: int, t: int) -> None:
        now = {d.job: d for d in rec.decisions if d.kind == "Unschedulable"}
        for job in [j for j in self.pending if j not in now]:
            self._close_pending(job, t, seq)
        for d in now.values():
            self._open_pending(d, _canon(d.model_dump(mode="json")), rec, seq)
        names = {q.name for q in rec.queues}
        for name in [n for n in self.queues if n not in names]:
            self._close_queue(name, t, seq)
        for q in rec.queues:
            self._open_queue(q, rec, seq)

    def _delta(self, rec: CycleRecord, seq: int, t: int) -> None:
        for job in rec.cleared:
            self._close_pending(job, t, seq)
        for d in rec.decisions:
            if d.kind == "Unschedulable":
                self._open_pending(d, _canon(d.model_dump(mode="json")), rec, seq)
        for name in rec.queues_removed:
            self._close_queue(name, t, seq)
        for q in rec.queues:
            self._open_queue(q, rec, seq)
        for change in rec.queue_changes:
            open_q = self.queues.get(change.get("name", ""))
            if open_q is None:
                raise RecordChainError(
                    f"cycle {rec.cycle_id} changes queue {change.get('name')!r}, which is not open in the store"
                )
            self._open_queue(patch_queue(open_q.record, change), rec, seq)

    def _refresh(self, rec: CycleRecord, seq: int, free: int, listed: set[str]) -> list[Decision]:
        """Reopen the open pending intervals that name another largest free than *free* (the record did
        not list these jobs: only the cluster's number moved); their decisions as of this record."""
        out: list[Decision] = []
        for job in sorted(self.pending):
            if job in listed:
                continue
            stripped = strip_pending(self.pending[job].decision)
            if stripped is None or stripped[1] == free:
                continue
            d = render_pending(stripped[0], free)
            self._open_pending(d, _canon(d.model_dump(mode="json")), rec, seq)
            out.append(d)
        return out

    def _cut_at_midnights(self, t: int, seq: int) -> None:
        """Close and reopen every open interval at the midnights between the last record and *t*.

        At most two cuts per record: the first midnight after the last record (its day stands alone) and
        the last one before *t* (so does *t*'s). The whole days in between saw no cycle at all, and are
        one row from the first midnight to the last: a clock jump of years (the contract allows up to
        2100) costs two rows per open interval, not one per day. Readers that take a day's share of an
        interval by overlap (``queue_days``) count those days exactly.
        """
        if self.last_ms is None or t // DAY_MS <= self.last_ms // DAY_MS:
            return
        first, last = self.last_ms // DAY_MS + 1, t // DAY_MS
        for day in sorted({first, last}):
            midnight = day * DAY_MS
            for o in self.pending.values():
                self.closed_pending.append(o.row(midnight, seq))
                o.start_ms, o.start_seq = midnight, seq
            for oq in self.queues.values():
                self.closed_queues.append(oq.row(midnight, seq))
                oq.start_ms, oq.start_seq = midnight, seq

    def _cycle_row(self, rec: CycleRecord, seq: int) -> dict[str, Any]:
        top = [o.record for o in self.queues.values() if o.record.parent is None]
        return {
            "cycle_id": rec.cycle_id,
            "seq": seq,
            "kind": rec.kind,
            "base": rec.base,
            "events_offset": rec.events_offset,
            "usage_snapshot_id": rec.usage_snapshot_id,
            "config_hash": rec.config_hash,
            "logical_time_ms": rec.logical_time_ms,
            "usage_available": rec.usage_available,
            "n_queues": len(rec.queues) + len(rec.queue_changes),
            "n_decisions": len(rec.decisions),
            "top_gpu_fair_share": sum(q.fair_share.get("gpu", 0) for q in top),
            "top_gpu_allocated": sum(q.allocated.get("gpu", 0) for q in top),
            "top_gpu_requested": sum(q.requested.get("gpu", 0) for q in top),
        }

    # -- handing out rows ---------------------------------------------------------------------------------

    def drain(self) -> tuple[list[dict[str, Any]], ...]:
        """(cycles, decisions, closed pending, closed queue spans) produced since the last drain."""
        out = (self.cycles, self.decisions, self.closed_pending, self.closed_queues)
        self.cycles, self.decisions, self.closed_pending, self.closed_queues = [], [], [], []
        return out

    def open_pending_rows(self) -> Iterator[dict[str, Any]]:
        """The open pending intervals as rows (``end_ms`` / ``end_seq`` NULL)."""
        for o in self.pending.values():
            row = o.row(0, 0)
            row["end_ms"] = row["end_seq"] = None
            yield row

    def open_queue_rows(self) -> Iterator[dict[str, Any]]:
        """The open queue spans as rows (``end_ms`` / ``end_seq`` NULL), with their ``raw`` record."""
        for o in self.queues.values():
            row = o.row(0, 0)
            row["end_ms"] = row["end_seq"] = None
            yield row

    @classmethod
    def resume(
        cls,
        last_cycle: str | None,
        last_ms: int | None,
        seq: int,
        pending_rows: list[dict[str, Any]],
        queue_rows: list[dict[str, Any]],
    ) -> Intervals:
        """The state a previous load left (its last record and open intervals, as the store keeps them)."""
        st = cls(last_cycle=last_cycle, last_ms=last_ms, seq=seq)
        for r in pending_rows:
            d = Decision.model_validate_json(r["decision"])
            st.pending[d.job] = OpenPending(d, r["decision"], r["start_cycle"], r["start_ms"], r["start_seq"])
        for r in queue_rows:
            q = QueueRecord.model_validate_json(r["raw"])
            st.queues[q.name] = OpenQueue(q, r["raw"], r["start_cycle"], r["start_ms"], r["start_seq"])
        return st
