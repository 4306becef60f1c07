"""What a cycle decided, and why: one :class:`CycleRecord` per cycle.

A record names the exact inputs of its cycle (events offset, usage snapshot id, config hash, logical time),
the fair-share division of every queue, and the decisions: ``Bind``, ``Evict``, ``Pipeline`` and
``Unschedulable`` (a machine-readable reason code plus a message a person can act on). The record's id is
derived from its inputs, so a re-run of the same cycle produces the same id and consumers can drop
duplicates. Serialisation is canonical JSON (sorted keys, no whitespace), byte-identical across runs.

Record versions: ``v: 1`` records (written before delta records existed) are always full and keep their
exact bytes when re-serialised. ``v: 2`` records say which ``kind`` they are: a ``full`` record (a
checkpoint) holds every queue and every pending job; a ``delta`` record holds what changed since the record
named by ``base`` (:mod:`scheduler.engine.record.delta`). :func:`make_record` makes full v2 records in canonical
order (other decisions as the session committed them, then ``Unschedulable`` sorted by job; queues sorted
by name), which is what lets a delta chain be expanded back to the identical full record. ``v: 3`` is how
a log holds v2 content (:mod:`scheduler.engine.record.written`: no field at its default, a message shared
by several decisions written once): a v3 record reads back as the same model with ``v == 3``, and
:func:`scheduler.engine.record.delta.render` gives the v2 record it stands for.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, model_validator

from scheduler.engine import topology
from scheduler.engine.predicates.extended import DRA_GPU_PREFIX
from scheduler.engine.predicates.volumes import chosen as chosen_volumes
from scheduler.engine.proportion import RESOURCES
from scheduler.engine.record import written
from scheduler.engine.session import (
    ACTIVE_ALLOCATED,
    FRAGMENTATION_RULES,
    GPU_MILLI,
    JobInfo,
    Op,
    Session,
    SessionConfig,
    TaskInfo,
)
from scheduler.engine.state import NODE_POOL_LABEL, PodStatus

RECORD_VERSION: Literal[2] = 2
# What a log holds (scheduler/engine/record/written.py): v2 content in fewer bytes.
WRITTEN_VERSION: Literal[3] = 3
_V2_FIELDS = frozenset(
    {"kind", "base", "cleared", "queues_removed", "queue_changes", "largest_free_gpu_milli"}
)
# The detail of a PodSchedulingErrors decision that is the cluster's, not the job's (the same number in
# every such decision of a cycle): delta records carry it once per record (scheduler/engine/record/delta.py).
LARGEST_FREE: Final = "largest_free_gpus_on_a_node"

ResVec = dict[str, int]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class QueueRecord(_Model):
    """One queue's division in one cycle (engine units: milli-GPU, millicores, bytes)."""

    name: str
    parent: str | None
    priority: int
    deserved: dict[str, int | None]
    limit: dict[str, int | None]
    over_quota_weight: dict[str, str]  # exact fractions as strings
    requested: ResVec
    allocated: ResVec
    allocated_non_preemptible: ResVec
    fair_share: ResVec
    fair_share_classic: ResVec  # the same division without the time-based (kValue) term
    k_adjustment: ResVec
    usage: dict[str, float]


class Decision(_Model):
    """One outcome for one pod (Bind, Evict, Pipeline) or one pending job (Unschedulable)."""

    kind: Literal["Bind", "Evict", "Pipeline", "Unschedulable"]
    job: str
    queue: str | None
    pod: str | None = None
    pods: list[str] = []
    node: str | None = None
    gpu_devices: list[int] = []
    gpu_milli_per_device: int = 0
    action: str | None = None
    reason: str | None = None
    message: str | None = None
    details: dict[str, Any] = {}


# A decision's fields at their default, as JSON values (what a v3 record leaves out); ``queue`` has no
# default in the model (every decision names it) but is None for a job whose queue does not exist.
_DECISION_DEFAULTS: Final[dict[str, Any]] = {
    "queue": None,
    **{name: f.default for name, f in Decision.model_fields.items() if not f.is_required()},
}


class InFlightBind(_Model):
    """A Bind of an earlier cycle whose pod the fold still shows pending (KAI: a pod with an unfailed
    BindRequest, status Binding). The cycle opens with the pod allocated where the Bind put it."""

    pod: str
    node: str
    gpu_devices: list[int] = []
    gpu_milli_per_device: int = 0
    decided_ms: int  # logical time of the cycle that decided the Bind (the deadline counts from it)


class InFlightEvict(_Model):
    """An Evict of an earlier cycle whose pod the fold still shows running (its deletion not yet seen). The
    cycle opens with the pod releasing, so it is not chosen as a victim again and its capacity can be
    pipelined onto, as KAI's evicted pods (status Releasing) are."""

    pod: str
    decided_ms: int  # logical time of the cycle that decided the Evict (the deadline counts from it)


class CycleRecord(_Model):
    """Everything one cycle saw and decided (full), or what changed since the record ``base`` (delta)."""

    v: Literal[1, 2, 3] = RECORD_VERSION
    kind: Literal["full", "delta"] = "full"
    base: str | None = None  # delta: the cycle_id of the record this one builds on
    cycle_id: str
    events_offset: int
    usage_snapshot_id: str | None
    config_hash: str
    logical_time_ms: int
    usage_available: bool = True
    queues: list[QueueRecord]
    decisions: list[Decision]
    cleared: list[str] = []  # delta: jobs no longer pending (their Unschedulable decision ended)
    queues_removed: list[str] = []  # delta: queues gone since the base record
    # delta: for a queue the base has, ``{"name": …}`` plus only the fields whose value changed
    queue_changes: list[dict[str, Any]] = []
    # The binds in flight the cycle opened with (scheduler/engine/record/inflight.py); written only when non-empty.
    in_flight: list[InFlightBind] = []
    # The evictions in flight the cycle opened with (scheduler/engine/record/inflight.py); only when non-empty.
    evicting: list[InFlightEvict] = []
    # A record as written (scheduler/engine/record/delta.py): the most free GPUs on any node (milli-GPU) for the
    # cycle's PodSchedulingErrors decisions, which are then written without it; written only when set.
    largest_free_gpu_milli: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _decode_written(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("v") == WRITTEN_VERSION:
            return written.decode(data, _DECISION_DEFAULTS)
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        delta_only = self.cleared or self.queues_removed or self.queue_changes
        if self.v == 1 and (
            self.kind != "full" or self.base or delta_only or self.largest_free_gpu_milli is not None
        ):
            raise ValueError(
                "a v1 cycle record is always full (no kind, base, cleared, queues_removed, queue_changes or"
                " largest_free_gpu_milli)"
            )
        if (self.kind == "delta") != (self.base is not None):
            raise ValueError(f"a {self.kind} record {'needs' if self.kind == 'delta' else 'has no'} base")
        if self.kind == "full" and delta_only:
            raise ValueError("a full record lists no cleared jobs, removed queues or queue changes")
        return self

    @property
    def is_full(self) -> bool:
        return self.kind == "full"

    def dumps(self) -> bytes:
        """Canonical JSON bytes (a v1 record: exactly the bytes v1 wrote).

        ``queue_changes``, ``in_flight`` and ``largest_free_gpu_milli`` appear only when they have entries,
        so full records and the deltas written before they existed keep their bytes. A v3 record: the
        bytes :func:`scheduler.engine.record.written.encode` makes of the same content.
        """
        exclude = set(_V2_FIELDS) if self.v == 1 else set() if self.queue_changes else {"queue_changes"}
        if not self.in_flight:
            exclude.add("in_flight")
        if not self.evicting:
            exclude.add("evicting")
        if self.largest_free_gpu_milli is None:
            exclude.add("largest_free_gpu_milli")
        data = self.model_dump(mode="json", exclude=exclude)
        if self.v == WRITTEN_VERSION:
            data = written.encode(data, _DECISION_DEFAULTS)
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def loads(cls, raw: bytes | str) -> CycleRecord:
        return cls.model_validate_json(raw)


def config_hash(config: SessionConfig) -> str:
    """A short stable hash of the engine configuration."""
    fields = asdict(config)
    # Fields added later are left out at their "absent" value, so older configs keep their hash.
    for name in ("solver_job_budget", "solver_action_budget", "stuck_in_releasing_ms"):
        if fields[name] is None:
            del fields[name]
    if not fields["topology_details"]:
        del fields["topology_details"]
    if fields["solver_job_budget_counts"] == "all" or config.solver_job_budget is None:
        del fields["solver_job_budget_counts"]  # absent = every simulation counted; no job budget, no count
    if fields["node_pool"] is None and fields["node_pool_label"] == NODE_POOL_LABEL:
        del fields["node_pool"], fields["node_pool_label"]  # unsharded: the hash it always had
    if fields["workload_types"] != "decayed" or fields["node_scoring"] not in FRAGMENTATION_RULES:
        # Only the decayed distribution reads these, so configs without it keep their hash.
        del fields["workload_half_life_s"], fields["workload_window_s"], fields["workload_refresh_s"]
    if fields["workload_types"] == "prior" or fields["node_scoring"] not in FRAGMENTATION_RULES:
        del fields["workload_types"]  # absent = prior; only the fragmentation rules read it
    blob = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def cycle_id(events_offset: int, usage_snapshot_id: str | None, cfg_hash: str, logical_time_ms: int) -> str:
    """Cycle ids are derived from the cycle's inputs, so re-running a cycle reproduces its id."""
    blob = f"{events_offset}|{usage_snapshot_id or ''}|{cfg_hash}|{logical_time_ms}".encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def _queue_records(ssn: Session) -> list[QueueRecord]:
    out = []
    for name, s in ssn.shares.items():
        q = ssn.queues[name]
        out.append(
            QueueRecord(
                name=name,
                parent=s.parent,
                priority=q.spec.priority,
                deserved=dict(s.deserved),
                limit=dict(s.limit),
                over_quota_weight={r: str(w) for r, w in s.weight.items()},
                requested=dict(s.requested),
                allocated={RESOURCES[r]: q.allocated[r] for r in range(3)},
                allocated_non_preemptible={RESOURCES[r]: q.allocated_np[r] for r in range(3)},
                fair_share=dict(s.fair_share),
                fair_share_classic=dict(s.fair_share_classic),
                k_adjustment=dict(s.k_adjustment),
                usage={r: float(s.usage.get(r, 0.0)) for r in RESOURCES},
            )
        )
    return out


def _max_free_gpus(ssn: Session) -> int:
    return max((n.free_gpus_milli() for n in ssn.nodes if n.spec.ready), default=0)


def largest_free_note(need_gpu_milli: int, free_gpu_milli: int) -> str:
    """The end of a PodSchedulingErrors message for a job needing GPUs: its need and the most free on a node."""
    return (
        f" (the job needs {need_gpu_milli / GPU_MILLI:g} GPU(s) for its next pods; the most free whole GPUs"
        f" on any node is {free_gpu_milli / GPU_MILLI:g})"
    )


def _unschedulable(
    ssn: Session, job: JobInfo, pending: list[TaskInfo], max_free: Callable[[], int], version: int = 2
) -> Decision:
    qname = job.queue.name if job.queue is not None else None
    pods = [t.uid for t in pending]
    need = [0, 0, 0]
    for t in pending:
        v = ssn.task_vec(t)
        for r in range(3):
            need[r] += v[r]
    details: dict[str, Any] = {
        "pending_pods": len(pending),
        "requested": dict(zip(RESOURCES, need, strict=True)),
    }
    if job.queue is None:
        reason, message = "QueueDoesNotExist", f"Queue '{job.spec.queue}' does not exist"
    elif not job.queue.is_leaf:
        reason = "QueueNotLeaf"
        message = f"Queue '{qname}' has child queues; jobs may only be submitted to leaf queues"
    elif not job.is_ready():
        alive = sum(1 for t in job.tasks if t.status in ACTIVE_ALLOCATED or t.status is PodStatus.PENDING)
        reason = "NotReady"
        message = (
            f"Job is not ready for scheduling. Waiting for {job.min_available} pods, currently {alive} exist"
        )
        tree = job.subgroup_tree()
        if tree is not None:  # name the subgroups that lack pods (KAI's subgroup variant)
            short = tree.root.shortfalls(ACTIVE_ALLOCATED, alive=True)
            message += ": " + ", ".join(f"subgroup {ps.name} has {have} of {need}" for ps, have, need in short)
    elif job.fit_errors:
        err = job.fit_errors[-1]
        reason, message = err.reason, err.message
        details.update(err.details)
    else:
        reason = "NotAttempted"
        message = "The job was not reached in this cycle"
    # v2 does not repeat the queue's division here: it is the record's QueueRecord of the same queue, and
    # a copy would change every pending job's decision whenever its queue's allocation moved (deltas).
    if job.queue is not None and version == 1:
        q = job.queue
        details["queue"] = {
            "name": q.name,
            "allocated": dict(zip(RESOURCES, q.allocated, strict=True)),
            "fair_share": dict(zip(RESOURCES, q.fair_share, strict=True)),
            "deserved": {RESOURCES[r]: q.deserved(r) for r in range(3)},
            "limit": {RESOURCES[r]: q.limit(r) for r in range(3)},
        }
    if need[0] and reason == "PodSchedulingErrors":
        free = max_free()
        details[LARGEST_FREE] = free / GPU_MILLI
        message += largest_free_note(need[0], free)
    return Decision(
        kind="Unschedulable",
        job=job.uid,
        queue=qname,
        pods=pods,
        reason=reason,
        message=message,
        details=details,
    )


def decisions_of(ssn: Session, version: int = RECORD_VERSION) -> list[Decision]:
    """Collapse the session's committed operations into one outcome per pod, plus Unschedulable per job."""
    out: list[Decision] = []
    ops_by_task: dict[str, list[Op]] = {}
    for op in ssn.decisions:
        ops_by_task.setdefault(op.task.uid, []).append(op)
    landed: dict[str, dict[str, Any]] = {}  # v2: where a job with a topology constraint sits (its Binds carry it)
    for t in ssn.tasks:
        job = t.job
        qname = job.queue.name if job.queue is not None else None
        ops = ops_by_task.get(t.uid)
        if not ops:
            continue
        last = ops[-1]
        was_placed = t.orig_status in (PodStatus.RUNNING, PodStatus.ALLOCATED)
        evicts = [op for op in ops if op.kind == "evict"]
        if was_placed and (t.status is PodStatus.RELEASING or (evicts and t.node is not None)):
            ev = evicts[0] if evicts else last
            out.append(
                Decision(
                    kind="Evict",
                    job=job.uid,
                    queue=qname,
                    pod=t.uid,
                    node=t.orig_node,
                    action=ev.action,
                    reason=ev.action,
                    message=ev.reason or None,
                )
            )
        if t.node is not None and t.status in (PodStatus.ALLOCATED, PodStatus.PIPELINED):
            details: dict[str, Any] = {}
            if version != 1 and ssn.config.topology_details and topology.constrained(job):
                if job.uid not in landed:
                    where = topology.landing(ssn, job)
                    landed[job.uid] = {"topology": where} if where is not None else {}
                details = landed[job.uid]
            if t.pod.volumes:
                claims = chosen_volumes(ssn, t)
                if claims:
                    details = {**details, "volumes": claims}
            claimed = {k: v for k, v in t.pod.request.extended if k.startswith(DRA_GPU_PREFIX)}
            if claimed:
                # The binder allocates the pod's ResourceClaims before binding it; the record says so.
                details = {**details, "dra": dict(sorted(claimed.items()))}
            out.append(
                Decision(
                    kind="Bind" if t.status is PodStatus.ALLOCATED else "Pipeline",
                    job=job.uid,
                    queue=qname,
                    pod=t.uid,
                    node=t.node.name,
                    gpu_devices=list(t.devices),
                    gpu_milli_per_device=t.portion,
                    action=last.action,
                    details=details,
                )
            )
    cached: list[int] = []

    def max_free() -> int:
        # Scanned at most once per cycle, and only if a message needs it.
        if not cached:
            cached.append(_max_free_gpus(ssn))
        return cached[0]

    for job in ssn.jobs:
        pending = [t for t in job.tasks if t.status is PodStatus.PENDING]
        if pending:
            out.append(_unschedulable(ssn, job, pending, max_free, version))
    return out


def make_record(
    ssn: Session,
    events_offset: int,
    usage_snapshot_id: str | None = None,
    usage_available: bool = True,
    version: Literal[1, 2, 3] = RECORD_VERSION,
    in_flight: list[InFlightBind] | tuple[InFlightBind, ...] = (),
    evicting: list[InFlightEvict] | tuple[InFlightEvict, ...] = (),
) -> CycleRecord:
    """The full cycle record of a finished session (``version`` 1: as a v1 writer made it, for replays).

    ``in_flight`` is the set of binds in flight the session was opened with; the record carries it.
    """
    h = config_hash(ssn.config)
    if version not in (1, RECORD_VERSION):
        raise ValueError(f"unknown cycle record version {version}")
    queues, decisions = _queue_records(ssn), decisions_of(ssn, version)
    if version != 1:  # v1 kept the session's order; v2 is canonical so deltas expand to the same bytes
        queues, decisions = sorted(queues, key=lambda q: q.name), canonical_order(decisions)
    return CycleRecord(
        v=version,
        cycle_id=cycle_id(events_offset, usage_snapshot_id, h, ssn.now_ms),
        events_offset=events_offset,
        usage_snapshot_id=usage_snapshot_id,
        config_hash=h,
        logical_time_ms=ssn.now_ms,
        usage_available=usage_available,
        queues=queues,
        decisions=decisions,
        in_flight=list(in_flight),
        evicting=list(evicting),
    )


def canonical_order(decisions: list[Decision]) -> list[Decision]:
    """A full record's decision order: Bind / Evict / Pipeline as committed, then Unschedulable by job."""
    rest = [d for d in decisions if d.kind != "Unschedulable"]
    pending = sorted((d for d in decisions if d.kind == "Unschedulable"), key=lambda d: d.job)
    return rest + pending
