"""Delta cycle records: write what changed since the previous record, read full decision sets back.

A full cycle record repeats every queue's division and one ``Unschedulable`` decision per pending job, so
at a cycle a second with thousands of jobs pending it would repeat megabytes a second. A **delta** record
(``kind: "delta"``, ``base``: the cycle id of the record it builds on) carries only:

* every ``Bind``, ``Evict`` and ``Pipeline`` decision of its cycle (they are outcomes, not state);
* the ``Unschedulable`` decisions that are new or differ in any field from the base's (a job pending for
  the same reason with the same message and details is not repeated), and ``cleared``: the jobs the base
  listed as pending that are pending no more;
* for each queue the base has whose record changed, only the changed fields (``queue_changes``: the
  queue's ``name`` plus each field whose value differs, typically ``requested`` and ``allocated``); whole
  records (``queues``) only for queues the base lacks; and ``queues_removed``.

A writer (:class:`DeltaEncoder`) emits a full record (a checkpoint) first, whenever it is reset (the
service starts) and every ``checkpoint_every`` records; everything else is a delta on the record it wrote
just before. A reader (:func:`expand` / :class:`DeltaReader`) applies deltas to the last full decision set
and gets back exactly the full record the cycle made: :func:`scheduler.engine.record.decisions.make_record` emits
full records in canonical order, so expanding yields the same canonical bytes (what ``replay --verify``
compares). Cycle ids are those of the cycles; only the record bytes differ.

**What a user acts on, not the cluster's detail.** A ``PodSchedulingErrors`` decision of a job that needs
GPUs ends with the most free GPUs on any node (``details.largest_free_gpus_on_a_node`` and the message's
"the most free whole GPUs on any node is N"). That number is the cluster's, the same in every such
decision of a cycle, and it moves whenever any pod starts or ends; restating every pending job for it made
a delta O(pending). So a record as written (:func:`compact`) carries it once, ``largest_free_gpu_milli``,
and its decisions without it; :func:`render` puts it back. A pending job is restated only when its own
decision (reason, message, request, filters, pods) changed. :func:`compact` keeps a record as it is
unless :func:`render` gives back exactly the decisions it was given, so expanding is always exact.

Which form a delta builds on follows the delta: one with ``largest_free_gpu_milli`` on the base as
written (compact), one without (a record of an older writer, or a cycle with no such decision) on the
rendered base.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from scheduler.engine.record.decisions import (
    LARGEST_FREE,
    RECORD_VERSION,
    WRITTEN_VERSION,
    CycleRecord,
    Decision,
    QueueRecord,
    largest_free_note,
)
from scheduler.engine.session import GPU_MILLI

__all__ = [
    "DEFAULT_CHECKPOINT_EVERY",
    "DeltaEncoder",
    "DeltaReader",
    "RecordChainError",
    "compact",
    "delta_of",
    "expand",
    "expand_records",
    "patch_queue",
    "queue_change",
    "render",
    "render_pending",
    "strip_pending",
]

# One full record per this many records. A checkpoint costs one record per pending job; with thousands
# pending that is ~1 MB, so at one cycle a second an hourly-ish checkpoint keeps it a small share of
# the bytes while `replay --from-cycle` never has to expand more than this many records.
DEFAULT_CHECKPOINT_EVERY: Final = 3600


class RecordChainError(ValueError):
    """A delta record whose base is not the record before it (a gap, or a reader that began mid-chain)."""


def _pending(record: CycleRecord) -> dict[str, Decision]:
    return {d.job: d for d in record.decisions if d.kind == "Unschedulable"}


_QUEUE_FIELDS: Final = tuple(f for f in QueueRecord.model_fields if f != "name")


def _need_gpu(d: Decision) -> int:
    req = d.details.get("requested")
    g = req.get("gpu") if isinstance(req, dict) else None
    return g if isinstance(g, int) and not isinstance(g, bool) else 0


def _takes_free(d: Decision) -> bool:
    """A decision whose full form names the cluster's largest free GPUs (see the module doc)."""
    return d.kind == "Unschedulable" and d.reason == "PodSchedulingErrors" and _need_gpu(d) > 0


def strip_pending(d: Decision) -> tuple[Decision, int] | None:
    """(*d* without the cluster's largest free GPUs, that number in milli-GPU), or None if *d* has none."""
    if not _takes_free(d) or d.message is None:
        return None
    value = d.details.get(LARGEST_FREE)
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    free = round(value * GPU_MILLI)
    note = largest_free_note(_need_gpu(d), free)
    if not d.message.endswith(note):
        return None
    details = {k: v for k, v in d.details.items() if k != LARGEST_FREE}
    return d.model_copy(update={"message": d.message[: -len(note)], "details": details}), free


def render_pending(d: Decision, free_gpu_milli: int | None) -> Decision:
    """*d* with the cluster's largest free GPUs put back (the inverse of :func:`strip_pending`)."""
    if free_gpu_milli is None or not _takes_free(d) or LARGEST_FREE in d.details:
        return d
    message = (d.message or "") + largest_free_note(_need_gpu(d), free_gpu_milli)
    details = {**d.details, LARGEST_FREE: free_gpu_milli / GPU_MILLI}
    return d.model_copy(update={"message": message, "details": details})


def compact(full: CycleRecord) -> CycleRecord:
    """A full v2 record as written: the largest free GPUs once (``largest_free_gpu_milli``), not per decision.

    The record itself when it has no such decision, is already compact, or would not render back exactly.
    """
    if full.v == 1 or not full.is_full or full.largest_free_gpu_milli is not None:
        return full
    free: int | None = None
    out: list[Decision] = []
    for d in full.decisions:
        stripped = strip_pending(d)
        if stripped is None:
            out.append(d)
            continue
        if free is not None and stripped[1] != free:
            return full  # one cycle has one largest free; two values are not this engine's records
        out.append(stripped[0])
        free = stripped[1]
    if free is None or any(render_pending(c, free) != d for c, d in zip(out, full.decisions, strict=True)):
        return full
    return full.model_copy(update={"decisions": out, "largest_free_gpu_milli": free})


def render(record: CycleRecord) -> CycleRecord:
    """*record*'s decisions in their full form (the inverse of :func:`compact`; deltas too), as a v2 record
    when it was read as v3 (the bytes a log holds, :mod:`scheduler.engine.record.written`)."""
    free = record.largest_free_gpu_milli
    update: dict[str, Any] = {"v": RECORD_VERSION} if record.v == WRITTEN_VERSION else {}
    if free is not None:
        update["decisions"] = [render_pending(d, free) for d in record.decisions]
        update["largest_free_gpu_milli"] = None
    return record.model_copy(update=update) if update else record


def _base_for(base: CycleRecord, delta: CycleRecord) -> CycleRecord:
    """The form of *base* that *delta* builds on (see the module doc)."""
    return compact(base) if delta.largest_free_gpu_milli is not None else render(base)


def queue_change(before: QueueRecord, after: QueueRecord) -> dict[str, Any] | None:
    """``{"name": …, field: new value, …}`` for the fields of *after* that differ from *before*; None if none."""
    changed = {f: getattr(after, f) for f in _QUEUE_FIELDS if getattr(before, f) != getattr(after, f)}
    return {"name": after.name, **changed} if changed else None


def patch_queue(q: QueueRecord, change: Mapping[str, Any]) -> QueueRecord:
    """*q* with the fields of one ``queue_changes`` entry applied (validated like any queue record)."""
    if change.get("name") != q.name:
        raise RecordChainError(f"a change for queue {change.get('name')!r} applied to queue {q.name!r}")
    return QueueRecord.model_validate({**q.model_dump(), **change})


def delta_of(base: CycleRecord, full: CycleRecord) -> CycleRecord:
    """*full* (a full record) as a delta on *base* (the full decision set of the previous record), both
    as made or as written (:func:`compact`); the delta is in the written form."""
    if not full.is_full or not base.is_full:
        raise ValueError("delta_of takes two full records")
    full = compact(full)
    base = _base_for(base, full)
    before_q = {q.name: q for q in base.queues}
    names = {q.name for q in full.queues}
    queues: list[QueueRecord] = []
    changes: list[dict[str, Any]] = []
    for q in full.queues:
        old = before_q.get(q.name)
        if old is None:
            queues.append(q)
        elif old != q:
            change = queue_change(old, q)
            if change is not None:
                changes.append(change)
    before = _pending(base)
    decisions: list[Decision] = []
    now_pending: set[str] = set()
    for d in full.decisions:
        if d.kind != "Unschedulable":
            decisions.append(d)
            continue
        now_pending.add(d.job)
        if before.get(d.job) != d:
            decisions.append(d)
    return full.model_copy(
        update={
            "v": 2,
            "kind": "delta",
            "base": base.cycle_id,
            "queues": queues,
            "queue_changes": changes,
            "decisions": decisions,
            "cleared": sorted(j for j in before if j not in now_pending),
            "queues_removed": sorted(n for n in before_q if n not in names),
        }
    )


def expand(base: CycleRecord, delta: CycleRecord) -> CycleRecord:
    """The full record that *delta* describes, given the full record *base* it builds on (as made or as
    written); the result is in the form :func:`scheduler.engine.record.decisions.make_record` made it."""
    return render(delta if delta.is_full else _merge(base, delta))


def _merge(base: CycleRecord, delta: CycleRecord) -> CycleRecord:
    """*delta* applied to *base*: the full record in the form the delta was written in."""
    base = _base_for(base, delta)
    if delta.base != base.cycle_id:
        raise RecordChainError(
            f"cycle {delta.cycle_id} builds on {delta.base}, but the record before it is {base.cycle_id}"
        )
    queues: dict[str, QueueRecord] = {q.name: q for q in base.queues}
    for name in delta.queues_removed:
        queues.pop(name, None)
    for q in delta.queues:
        queues[q.name] = q
    for change in delta.queue_changes:
        old = queues.get(change.get("name", ""))
        if old is None:
            raise RecordChainError(
                f"cycle {delta.cycle_id} changes queue {change.get('name')!r}, which its base does not have"
            )
        queues[old.name] = patch_queue(old, change)
    pending = _pending(base)
    for job in delta.cleared:
        pending.pop(job, None)
    rest: list[Decision] = []
    for d in delta.decisions:
        if d.kind == "Unschedulable":
            pending[d.job] = d
        else:
            rest.append(d)
    return delta.model_copy(
        update={
            "kind": "full",
            "base": None,
            "queues": [queues[n] for n in sorted(queues)],
            "decisions": rest + [pending[j] for j in sorted(pending)],
            "cleared": [],
            "queues_removed": [],
            "queue_changes": [],
        }
    )


class DeltaEncoder:
    """Turns a service's stream of full records into checkpoints and deltas (see the module doc)."""

    def __init__(self, checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY) -> None:
        if checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
        self.checkpoint_every = checkpoint_every
        self._base: CycleRecord | None = None
        self._since = 0  # records written since the last checkpoint

    def reset(self) -> None:
        """The next record is a checkpoint (a service start, or a gap in what was written)."""
        self._base = None
        self._since = 0

    def encode(self, full: CycleRecord) -> CycleRecord:
        """The record to write for *full*, which the caller then writes (and no other record between): v3
        (its ``dumps`` are the bytes a log holds), or v1 for a v1 record."""
        if not full.is_full:
            raise ValueError("encode takes the full record of a cycle")
        written = compact(full)
        if full.v == 1:
            self._base, self._since = written, 0
            return written
        if self._base is None or self._since + 1 >= self.checkpoint_every:
            out, self._since = written, 0
        else:
            out, self._since = delta_of(self._base, written), self._since + 1
        self._base = written
        return out.model_copy(update={"v": WRITTEN_VERSION})


@dataclass(slots=True)
class DeltaReader:
    """Expands a stream of records (v1, full or delta) into full records, one at a time.

    A repeated cycle id (a record written twice) is dropped. A delta whose base is not the previous record
    raises :class:`RecordChainError` when ``strict``; otherwise it is skipped (``orphans`` counts them)
    until the next checkpoint, which is what a consumer that starts mid-log wants.
    """

    strict: bool = True
    last: CycleRecord | None = None  # the last full record handed out
    orphans: int = 0
    duplicates: int = 0
    _written: CycleRecord | None = None  # the same decision set as written (what the next delta builds on)

    def feed(self, record: CycleRecord) -> CycleRecord | None:
        """The full record for *record*, or None (a duplicate, or an orphan delta when not strict)."""
        if self.last is not None and record.cycle_id == self.last.cycle_id:
            self.duplicates += 1
            return None
        if record.is_full:
            self._written, self.last = record, render(record)
            return self.last
        if self.last is None or self._written is None or record.base != self.last.cycle_id:
            if self.strict:
                where = self.last.cycle_id if self.last is not None else "nothing (no checkpoint read yet)"
                raise RecordChainError(
                    f"cycle {record.cycle_id} builds on {record.base}, but follows {where}"
                )
            self.orphans += 1
            return None
        self._written = _merge(self._written, record)
        self.last = render(self._written)
        return self.last


def expand_records(records: Iterable[CycleRecord], *, strict: bool = True) -> Iterator[CycleRecord]:
    """Full records for a stream of v1 / full / delta records in log order (see :class:`DeltaReader`)."""
    reader = DeltaReader(strict=strict)
    for r in records:
        full = reader.feed(r)
        if full is not None:
            yield full
