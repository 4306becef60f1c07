"""The binder (``hourglass bind``): cycle records in, Kubernetes API calls out.

The binder consumes the decisions topic from its committed offset (consumer group ``hourglass-binder``)
and applies each :class:`~scheduler.engine.record.decisions.CycleRecord` to the cluster:

* ``Evict`` → the pod's ``DisruptionTarget`` condition (reason ``PreemptionByScheduler``), a Normal
  ``Preempted`` / ``Evicted`` Event naming the action and its message, then delete the pod with a grace
  period (404: already gone, success);
* ``Bind`` → POST the ``pods/binding`` subresource; the binding's annotations (GPU devices, portion per
  device, cycle id) are copied onto the pod by the API server in the same write, so whoever sees
  ``spec.nodeName`` also sees the devices. 409 with the pod on the same node is success (no duplicate),
  on another node a conflict (dead letter + Warning ``FailedBinding``); 404: the pod is gone, skipped;
* ``Unschedulable`` → pod condition ``PodScheduled=False`` (reason ``Unschedulable``) when the reason or
  message changed, and a Warning ``Unschedulable`` Event at most once per pod per ``event_interval_s``
  unless the reason code changed (then at once);
* the record's queues → the ``status`` of the ``scheduling.run.ai/v2`` Queue objects (allocated,
  allocatedNonPreemptible, requested, fairShare; KAI's ResourceLists of ``cpu``, ``memory``, ``nvidia.com/gpu``
  quantities), written only when it changed (404: no such Queue object, skipped).
* ``Pipeline`` decisions need no call: the pod waits for its node to be freed and is bound by a later
  cycle's ``Bind``.

What to call is decided by the pure function :func:`plan` (record + :class:`Memory` + time → actions +
next memory); :class:`Binder` executes the actions through the small :class:`Kube` interface, retrying
connection errors, 429 and 5xx with exponential backoff. A permanent failure (another 4xx) becomes a
dead-letter record on the dead-letter topic (JSON ``{source_topic, source_offset, target, reason_code,
message, raw}``) and, for pods, a Warning Event. When the API server stays unreachable the record is not
committed and is re-applied later: the offset is committed only after a record is fully applied, and
re-applying a partly applied record is harmless (binds answer 409 on the same node, deletes 404).
Dead letters already on the topic for the same record and target are not written twice.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from ingest.kube.client import KubeApi, KubeError, KubeUnavailable, add_kubeconfig_argument, call
from ingest.kube.names import ANNOTATION_CYCLE, ANNOTATION_GPU_DEVICES, ANNOTATION_GPU_PORTION, GPU_RESOURCE
from ingest.kube.volumes import ANNOTATION_BIND_COMPLETED, ANNOTATION_SELECTED_NODE, bound_to, prebind_volume
from ingest.log import DEFAULT_TOPICS, Log, Topics
from scheduler.engine.record.decisions import CycleRecord, Decision, QueueRecord
from scheduler.engine.record.delta import render
from scheduler.kube.claims import ClaimAllocator, ClaimError
from scheduler.kube.podgroup_status import (
    PODGROUP_GROUP,
    PODGROUP_PLURAL,
    PODGROUP_VERSION,
    REASON_UNSCHEDULABLE,
    ClearConditions,
    ConditionMemory,
    ConditionWriter,
    SetCondition,
    plan_conditions,
)
from scheduler.kube.reservation import DEFAULT_NAMESPACE as DEFAULT_RESERVATION_NAMESPACE
from scheduler.kube.reservation import GpuSharing, SharingConfig, SharingError
from scheduler.kube.workers import KeyedPool, Lane
from scheduler.metrics import BinderMetrics

__all__ = [
    "ANNOTATION_CYCLE",
    "ANNOTATION_GPU_DEVICES",
    "ANNOTATION_GPU_PORTION",
    "COMPONENT",
    "DEFAULT_GROUP",
    "DEFAULT_WORKERS",
    "DISRUPTION_REASON",
    "BindPod",
    "Binder",
    "BinderApi",
    "BinderStats",
    "EventSpec",
    "EvictPod",
    "Invalid",
    "Kube",
    "MarkNotReady",
    "MarkPending",
    "Memory",
    "PendingMark",
    "Plan",
    "RetryPolicy",
    "WriteQueueStatus",
    "event_name",
    "plan",
    "quantity",
    "queue_status",
    "queue_status_part",
]

log = logging.getLogger(__name__)

DEFAULT_GROUP: Final = "hourglass-binder"
DEFAULT_WORKERS: Final = (
    8  # ``hourglass bind``'s parallel calls: enough to hide the API round trip on a small server
)
#: Idle poll period: short, since a poll of an idle log costs next to nothing and a new decision waits for it.
DEFAULT_POLL_INTERVAL_S: Final = 0.05
#: The wait before applying again a record the API server refused through all of the calls' own retries.
UNAVAILABLE_RETRY_S: Final = 1.0
COMPONENT: Final = "hourglass-binder"
QUEUE_GROUP: Final = "scheduling.run.ai"
QUEUE_VERSION: Final = "v2"
QUEUE_PLURAL: Final = "queues"
EVENT_MESSAGE_MAX: Final = 1024  # core/v1 Events reject longer messages on some servers; keep the head
DISRUPTION_REASON: Final = "PreemptionByScheduler"  # v1.PodReasonPreemptionByScheduler, as KAI's evictor
CLUSTER_EVENT_NAMESPACE: Final = "default"  # events about cluster-scoped objects (Queues) live here
NOT_READY: Final = "NotReady"  # the reason of a gang with fewer pods than its minimum (KAI's Event reason)


# --------------------------------------------------------------------------- actions (pure data)


@dataclass(frozen=True, slots=True)
class BindPod:
    """Bind one pod to a node; ``annotations`` travel with the binding onto the pod."""

    namespace: str
    name: str
    node: str
    annotations: tuple[tuple[str, str], ...]
    action: str | None
    # (claim, volume) for each WaitForFirstConsumer claim, done before the pod is bound: bind the volume to
    # the claim, or (volume "") have the claim's class provision one on `node`.
    volumes: tuple[tuple[str, str], ...] = ()
    dra: bool = False  # the pod claims DRA GPUs: allocate its ResourceClaims before binding it
    job: str = ""  # the pod's job: each job of a record takes its own turns for the workers


@dataclass(frozen=True, slots=True)
class EvictPod:
    """Delete one pod with a grace period, on behalf of ``action`` (reclaim, preempt, ...)."""

    namespace: str
    name: str
    node: str | None
    action: str | None
    message: str | None
    grace_seconds: int | None
    job: str = ""  # the victim's job, as BindPod's


@dataclass(frozen=True, slots=True)
class MarkPending:
    """Tell a pending pod why: the condition (if it changed) and a Warning Event (if not rate-limited)."""

    namespace: str
    name: str
    reason: str
    message: str
    condition: bool
    event: bool


@dataclass(frozen=True, slots=True)
class MarkNotReady:
    """Tell a gang that waits for members why: a Normal ``NotReady`` Event on its PodGroup.

    KAI (``default_status_updater.go``, ``RecordJobStatusEvent``) writes only this Event for a job with fewer
    pods than its minimum, nothing on the pods: each pod write is an update every watcher sees, and a large
    gang arriving pod by pod would make one per member."""

    namespace: str
    name: str
    message: str


@dataclass(frozen=True, slots=True)
class WriteQueueStatus:
    """Replace the status fields Hourglass owns on one Queue object."""

    name: str
    status: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Invalid:
    """A decision the binder cannot act on (e.g. a pod reference that is not ``namespace/name``)."""

    target: str
    reason_code: str
    message: str
    raw: str


Action = EvictPod | BindPod | MarkPending | MarkNotReady | WriteQueueStatus


@dataclass(frozen=True, slots=True)
class PendingMark:
    """What the binder last told one pending pod."""

    reason: str
    message: str
    event_at: float  # clock time of the last Warning Event
    job: str = ""  # the pending job the pod belongs to (a delta record clears pending jobs, not pods)
    condition_at: float = 0.0  # clock time of the last PodScheduled=False write


@dataclass(frozen=True, slots=True)
class Memory:
    """The binder's rate-limit and change-detection state, keyed by pod uid and queue name."""

    pending: Mapping[str, PendingMark] = field(default_factory=dict)
    queues: Mapping[str, str] = field(default_factory=dict)  # canonical JSON of the last written status
    not_ready: Mapping[str, PendingMark] = field(default_factory=dict)  # by job: its last NotReady Event


@dataclass(frozen=True, slots=True)
class Plan:
    """The calls one record needs, in order, and the memory after they are made."""

    actions: tuple[Action, ...]
    invalid: tuple[Invalid, ...]
    memory: Memory


# --------------------------------------------------------------------------- pure planning


_DECIMAL_SUFFIXES: Final = ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"))


def quantity(value: int, milli: bool = False) -> str:
    """A Kubernetes quantity in the canonical form the API server (and KAI's Go client) writes.

    ``value`` is whole units, or thousandths with ``milli``: 1500 milli → ``"1500m"``, 2000 milli → ``"2"``,
    2,500,000 → ``"2500k"`` (decimal suffixes, as ``resource.Quantity`` canonicalises a DecimalSI amount).
    """
    if milli:
        if value % 1000:
            return f"{value}m"
        value //= 1000
    if value:
        for exp, suffix in _DECIMAL_SUFFIXES:
            if value % 10**exp == 0:
                return f"{value // 10**exp}{suffix}"
    return str(value)


def _resources(vec: Mapping[str, int | None]) -> dict[str, str]:
    """Engine units → KAI's Queue status: a ``ResourceList`` of quantities (``cpu``, ``memory``, ``nvidia.com/gpu``).

    Exact: milli-GPU and millicores become milli quantities when not whole (0.5 GPU → ``"500m"``), memory is
    bytes; unlimited (None) is left out.
    """
    out: dict[str, str] = {}
    gpu, cpu, mem = vec.get("gpu"), vec.get("cpu"), vec.get("memory")
    if cpu is not None:
        out["cpu"] = quantity(cpu, milli=True)
    if mem is not None:
        out["memory"] = quantity(mem)
    if gpu is not None:
        out[GPU_RESOURCE] = quantity(gpu, milli=True)
    return out


# QueueRecord field -> the Queue status field it is written to
_STATUS_FIELDS: Final = {
    "allocated": "allocated",
    "allocated_non_preemptible": "allocatedNonPreemptible",
    "requested": "requested",
    "fair_share": "fairShare",
}


def queue_status(q: QueueRecord) -> dict[str, Any]:
    """The Queue object's status fields from one queue's division (``deploy/crds`` units and names)."""
    return {status: _resources(getattr(q, f)) for f, status in _STATUS_FIELDS.items()}


def queue_status_part(change: Mapping[str, Any]) -> dict[str, Any]:
    """The status fields one ``queue_changes`` entry of a delta record changes (may be empty)."""
    return {status: _resources(change[f]) for f, status in _STATUS_FIELDS.items() if f in change}


def _split_pod(uid: str) -> tuple[str, str] | None:
    ns, sep, name = uid.partition("/")
    if not sep or not ns or not name or "/" in name:
        return None
    return ns, name


def _raw(d: Decision) -> str:
    return json.dumps(d.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def _bind_annotations(d: Decision, cycle_id: str) -> tuple[tuple[str, str], ...]:
    ann = [(ANNOTATION_CYCLE, cycle_id)]
    if d.gpu_devices:
        ann.append((ANNOTATION_GPU_DEVICES, ",".join(str(i) for i in d.gpu_devices)))
        ann.append((ANNOTATION_GPU_PORTION, str(d.gpu_milli_per_device or 1000)))
    return tuple(sorted(ann))


def _bind_volumes(d: Decision) -> tuple[tuple[str, str], ...]:
    got = d.details.get("volumes") if d.details else None
    if not isinstance(got, dict):
        return ()
    return tuple(sorted((str(c), str(v)) for c, v in got.items()))


class VolumeBindError(Exception):
    """A WaitForFirstConsumer claim cannot be bound as the cycle chose (its volume was taken meanwhile):
    the pod is not bound; dead-letter code ``volume_bind_conflict``."""

    reason_code = "volume_bind_conflict"

    def __init__(self, message: str, reason_code: str = "volume_bind_conflict") -> None:
        super().__init__(message)
        self.message = message
        self.reason_code = reason_code


DEFAULT_VOLUME_BIND_TIMEOUT_S: Final = 600.0  # kube-scheduler's VolumeBinding bindTimeoutSeconds default


def plan(
    record: CycleRecord,
    memory: Memory,
    now: float,
    *,
    grace_seconds: int | None = 30,
    event_interval_s: float = 60.0,
) -> Plan:
    """The Kubernetes calls that apply ``record``, given what was already told (``memory``) at ``now``.

    Order: evictions, then binds, then pending pods, then queue status. After a full record, pending-pod
    memory keeps only the pods it lists as pending (every pending job is in a full record), so a pod that
    was bound and becomes pending again is told at once, and the memory stays as large as the pending set.
    A delta record (:mod:`scheduler.engine.record.delta`) lists only the pending jobs that changed: the other
    remembered pods stay pending, less the jobs it clears and the pods it binds, evicts or pipelines, and
    each of them still gets its periodic Warning Event. A pending pod's message is its decision's full
    message (:func:`scheduler.engine.record.delta.render`); it is rewritten when the job's decision is listed
    again, not each time only the cluster's largest free GPUs moved.

    Long on purpose: one pass over the record's decisions in record order, one branch per decision kind, each
    deciding the calls from the same memory of what was already told.
    """
    record = render(record)
    evicts: list[Action] = []
    binds: list[Action] = []
    pendings: list[Action] = []
    invalid: list[Invalid] = []
    pending_next: dict[str, PendingMark] = {}
    not_ready_next: dict[str, PendingMark] = {}

    def pod_ref(d: Decision, uid: str | None) -> tuple[str, str] | None:
        ref = _split_pod(uid or "")
        if ref is None:
            invalid.append(
                Invalid(
                    uid or d.job,
                    "bad_pod_ref",
                    f"{d.kind} decision names pod {uid!r}, not 'namespace/name'",
                    _raw(d),
                )
            )
        return ref

    for d in record.decisions:
        if d.kind == "Evict":
            ref = pod_ref(d, d.pod)
            if ref is not None:
                evicts.append(EvictPod(ref[0], ref[1], d.node, d.action, d.message, grace_seconds, d.job))
        elif d.kind == "Bind":
            ref = pod_ref(d, d.pod)
            if ref is not None and d.node is None:
                invalid.append(
                    Invalid(d.pod or d.job, "bad_decision", "Bind decision without a node", _raw(d))
                )
            elif ref is not None and d.node is not None:
                binds.append(
                    BindPod(
                        ref[0],
                        ref[1],
                        d.node,
                        _bind_annotations(d, record.cycle_id),
                        d.action,
                        _bind_volumes(d),
                        dra=bool(d.details.get("dra")),
                        job=d.job,
                    )
                )
        elif d.kind == "Unschedulable" and d.reason == NOT_READY:
            # A gang waiting for members: one Event on its PodGroup, nothing on its pods (KAI). The pods
            # are remembered as NotReady, so a later reason (the gang complete, no room) is told at once.
            message = d.message or NOT_READY
            for uid in d.pods:
                prev = memory.pending.get(uid)
                if pod_ref(d, uid) is not None and uid not in pending_next:
                    at = prev.condition_at if prev is not None else 0.0
                    pending_next[uid] = PendingMark(NOT_READY, message, now, d.job, at)
            group = _split_pod(d.job)
            if group is None or d.job in not_ready_next:
                continue
            told = memory.not_ready.get(d.job)
            if told is None or now - told.event_at >= event_interval_s:
                pendings.append(MarkNotReady(group[0], group[1], message))
                told = PendingMark(NOT_READY, message, now, d.job)
            not_ready_next[d.job] = told
        elif d.kind == "Unschedulable":
            reason = d.reason or "Unschedulable"
            message = d.message or reason
            for uid in d.pods:
                ref = pod_ref(d, uid)
                if ref is None or uid in pending_next:
                    continue
                prev = memory.pending.get(uid)
                # A message that only counts (gang members arriving, free GPUs moving) is rewritten at most
                # once per interval; a new reason at once. Each condition write is a pod update every
                # watcher sees, and a large gang arriving pod by pod would rewrite all its pods each cycle.
                condition = (
                    prev is None
                    or prev.reason != reason
                    or (prev.message != message and now - prev.condition_at >= event_interval_s)
                )
                event = prev is None or prev.reason != reason or now - prev.event_at >= event_interval_s
                event_at = now if event or prev is None else prev.event_at
                if condition or prev is None:
                    pending_next[uid] = PendingMark(reason, message, event_at, d.job, now)
                else:  # remember what the pod shows, so the change is written once the interval is up
                    pending_next[uid] = PendingMark(reason, prev.message, event_at, d.job, prev.condition_at)
                if condition or event:
                    pendings.append(MarkPending(ref[0], ref[1], reason, message, condition, event))
        # Pipeline: nothing to call; a later cycle binds the pod once its node is free.

    if not record.is_full:
        cleared = set(record.cleared)
        placed = {d.pod for d in record.decisions if d.kind != "Unschedulable"}
        changed = {d.job for d in record.decisions if d.kind == "Unschedulable"}
        for uid, mark in memory.pending.items():
            if uid in pending_next or uid in placed or mark.job in cleared or mark.job in changed:
                continue
            ref = _split_pod(uid)
            if ref is None:
                continue
            if mark.reason != NOT_READY and now - mark.event_at >= event_interval_s:
                mark = PendingMark(mark.reason, mark.message, now, mark.job, mark.condition_at)
                pendings.append(MarkPending(ref[0], ref[1], mark.reason, mark.message, False, True))
            pending_next[uid] = mark
        placed_jobs = {d.job for d in record.decisions if d.kind != "Unschedulable"}
        for job, mark in memory.not_ready.items():
            if job in not_ready_next or job in cleared or job in changed or job in placed_jobs:
                continue
            group = _split_pod(job)
            if group is not None and now - mark.event_at >= event_interval_s:
                pendings.append(MarkNotReady(group[0], group[1], mark.message))
                mark = PendingMark(NOT_READY, mark.message, now, job)
            not_ready_next[job] = mark

    statuses: list[Action] = []
    queues_next: dict[str, str] = {}
    for q in record.queues:
        status = queue_status(q)
        canon = json.dumps(status, sort_keys=True, separators=(",", ":"))
        queues_next[q.name] = canon
        if memory.queues.get(q.name) != canon:
            statuses.append(WriteQueueStatus(q.name, status))
    for change in record.queue_changes:
        # A delta names only the changed fields; the status write is a merge patch, so writing just the
        # changed status fields is right even when this binder (restarted mid-chain) never saw the rest.
        name = str(change.get("name", ""))
        part = queue_status_part(change)
        if not part:
            continue
        known = json.loads(memory.queues.get(name, "{}"))
        status = {**known, **part}
        canon = json.dumps(status, sort_keys=True, separators=(",", ":"))
        queues_next[name] = canon
        if memory.queues.get(name) != canon:
            statuses.append(WriteQueueStatus(name, part))
    # Queues absent from this record keep their last status in memory (they may come back unchanged).
    merged_queues = {**memory.queues, **queues_next}
    return Plan(
        actions=(*evicts, *binds, *pendings, *statuses),
        invalid=tuple(invalid),
        memory=Memory(pending=pending_next, queues=merged_queues, not_ready=not_ready_next),
    )


# --------------------------------------------------------------------------- the Kubernetes interface


@dataclass(frozen=True, slots=True)
class EventSpec:
    """A core/v1 Event about one object; one Event object per (object, reason), its count bumped."""

    kind: str  # "Pod", "PodGroup" or "Queue"
    namespace: str | None  # None for cluster-scoped objects
    name: str
    type: str  # "Normal" or "Warning"
    reason: str
    message: str
    api_version: str = "v1"
    uid: str | None = None  # the object's uid: ``kubectl describe`` lists only Events that carry it


def event_name(ev: EventSpec) -> str:
    """A deterministic Event name per (object, reason), so repeats update one Event instead of piling up."""
    digest = hashlib.sha256(f"{ev.kind}/{ev.namespace}/{ev.name}/{ev.reason}".encode()).hexdigest()[:12]
    return f"{ev.name[:200]}.hourglass.{digest}"


class Kube(Protocol):
    """The Kubernetes calls the binder makes; every method raises :class:`KubeError` on failure."""

    def bind(self, namespace: str, name: str, node: str, annotations: Mapping[str, str]) -> None:
        """POST the pod's binding subresource."""

    def pod_node(self, namespace: str, name: str) -> str | None:
        """The pod's ``spec.nodeName`` (None when unbound)."""

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None) -> None:
        """Delete the pod with a grace period (None: the pod's own)."""

    def set_pod_condition(self, namespace: str, name: str, condition: Mapping[str, str]) -> str | None:
        """Set one condition in the pod's status (merged by type); the pod's uid."""

    def upsert_event(self, ev: EventSpec) -> None:
        """Create the Event, or bump its count and message if it exists."""

    def patch_queue_status(self, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the Queue object's status subresource."""

    def write_podgroup_condition(self, action: SetCondition | ClearConditions) -> bool:
        """Set or clear a PodGroup's ``status.schedulingConditions``; False when it already said so."""

    def bind_volumes(self, namespace: str, pod: str, node: str, volumes: tuple[tuple[str, str], ...]) -> None:
        """Before binding the pod: bind each WaitForFirstConsumer claim to its chosen volume, or annotate
        it with the node for its provisioner; :class:`VolumeBindError` when a volume was taken."""

    def wait_volumes_bound(
        self, namespace: str, pod: str, node: str, volumes: tuple[tuple[str, str], ...], timeout_s: float
    ) -> None:
        """Wait until the PersistentVolume controller (or the provisioner) has bound every claim
        :meth:`bind_volumes` prepared; :class:`VolumeBindError` when a binding was undone or the timeout
        passed."""

    def allocate_claims(self, namespace: str, name: str, node: str) -> list[str]:
        """Allocate the pod's DRA ResourceClaims on ``node`` (:mod:`scheduler.kube.claims`); the claims
        written. Raises :class:`~scheduler.kube.claims.ClaimError` when the node cannot hold them."""

    def undo_claims(self, namespace: str, name: str, claims: list[str]) -> None:
        """Undo :meth:`allocate_claims` after the binding failed."""


def _now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class BinderApi:
    """:class:`Kube` over the official client (``kubernetes.client.ApiClient``).

    Every call passes ``_preload_content=False``: the generated client cannot deserialise the binding
    subresource's ``Status`` answer (dependency notes, "Binding quirk"), and the binder needs no typed
    responses anyway. Non-2xx answers still raise ``ApiException`` (mapped to :class:`KubeError`).
    """

    def __init__(self, api_client: Any, timeout_s: float = 30.0) -> None:
        from kubernetes import client

        self._client = client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.timeout = timeout_s
        self.claims = ClaimAllocator(self.call, self.core, self.custom)
        self._metadata = KubeApi(api_client)

    @staticmethod
    def size_pool(api_client: Any, workers: int) -> None:
        """Let ``workers`` threads hold a connection each (urllib3 blocks or drops connections beyond its pool)."""
        from kubernetes.client import rest

        cfg = api_client.configuration
        if (cfg.connection_pool_maxsize or 0) < workers:
            cfg.connection_pool_maxsize = workers
            api_client.rest_client = rest.RESTClientObject(cfg)

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One generated-client call with this client's timeout; :class:`KubeError` on failure."""
        return call(fn, *args, timeout_s=self.timeout, **kwargs)

    def bind(self, namespace: str, name: str, node: str, annotations: Mapping[str, str]) -> None:
        c = self._client
        body = c.V1Binding(
            metadata=c.V1ObjectMeta(name=name, annotations=dict(annotations) or None),
            target=c.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        self.call(self.core.create_namespaced_pod_binding, name, namespace, body)

    def bind_volumes(self, namespace: str, pod: str, node: str, volumes: tuple[tuple[str, str], ...]) -> None:
        """kube-scheduler's VolumeBinding PreBind for the volumes the cycle chose: a static volume gets a
        ``claimRef`` to the claim (an update at the volume's resourceVersion, so a concurrent binding
        conflicts instead of being overwritten) and the PersistentVolume controller completes the binding;
        a claim to provision gets ``volume.kubernetes.io/selected-node``. A claim bound meanwhile is left
        alone. :meth:`wait_volumes_bound` then waits for the bindings, as kube-scheduler's PreBind does."""
        for claim, volume in volumes:
            r = self.call(self.core.read_namespaced_persistent_volume_claim, claim, namespace)
            pvc = json.loads(r.data)
            if (pvc.get("spec") or {}).get("volumeName"):
                continue
            if not volume:
                body = {"metadata": {"annotations": {ANNOTATION_SELECTED_NODE: node}}}
                self.call(self.core.patch_namespaced_persistent_volume_claim, claim, namespace, body)
                continue
            pv = json.loads(self.call(self.core.read_persistent_volume, volume).data)
            if bound_to(pv, pvc):
                continue
            ref = (pv.get("spec") or {}).get("claimRef")
            if ref:
                raise VolumeBindError(
                    f"volume {volume} chosen for claim {namespace}/{claim} of pod {namespace}/{pod} is bound to"
                    f" {ref.get('namespace')}/{ref.get('name')} meanwhile; the pod is not bound"
                )
            self.call(self.core.replace_persistent_volume, volume, prebind_volume(pv, pvc))

    def wait_volumes_bound(
        self,
        namespace: str,
        pod: str,
        node: str,
        volumes: tuple[tuple[str, str], ...],
        timeout_s: float,
        poll_s: float = 0.5,
    ) -> None:
        """kube-scheduler's ``checkBindings``, polled: each claim must end bound (``spec.volumeName`` and
        the bind-completed annotation); a static volume that lost its ``claimRef`` to the claim, or a
        claim to provision whose selected-node annotation was removed, undid the binding. Either, or the
        timeout, raises :class:`VolumeBindError` and the pod is not bound."""
        deadline = time.monotonic() + timeout_s
        what = f"pod {namespace}/{pod}"
        while True:
            waiting = []
            for claim, volume in volumes:
                pvc = json.loads(
                    self.call(self.core.read_namespaced_persistent_volume_claim, claim, namespace).data
                )
                spec = pvc.get("spec") or {}
                ann = (pvc.get("metadata") or {}).get("annotations") or {}
                if spec.get("volumeName") and ANNOTATION_BIND_COMPLETED in ann:
                    continue
                if not volume and ann.get(ANNOTATION_SELECTED_NODE) != node:
                    raise VolumeBindError(
                        f"the {ANNOTATION_SELECTED_NODE} annotation of claim {namespace}/{claim} of {what} was"
                        " reset before the volume was provisioned; the pod is not bound",
                        "volume_bind_undone",
                    )
                if volume:
                    pv = json.loads(self.call(self.core.read_persistent_volume, volume).data)
                    if not bound_to(pv, pvc):
                        raise VolumeBindError(
                            f"volume {volume} chosen for claim {namespace}/{claim} of {what} was unbound"
                            " before the binding completed; the pod is not bound",
                            "volume_bind_undone",
                        )
                waiting.append(claim)
            if not waiting:
                return
            if time.monotonic() >= deadline:
                raise VolumeBindError(
                    f"timed out after {timeout_s:g}s waiting for claims {', '.join(waiting)} of {what} to be"
                    " bound (is the PersistentVolume controller or the provisioner running?); the pod is not"
                    " bound",
                    "volume_bind_timeout",
                )
            time.sleep(poll_s)

    def allocate_claims(self, namespace: str, name: str, node: str) -> list[str]:
        return self.claims.allocate(namespace, name, node)

    def undo_claims(self, namespace: str, name: str, claims: list[str]) -> None:
        self.claims.undo(namespace, name, claims)

    def pod_uid(self, namespace: str, name: str) -> str | None:
        """The pod's uid, None when it is gone (its Event is then written without one)."""
        return self._cached_uid(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def podgroup_uid(self, namespace: str, name: str) -> str | None:
        """The PodGroup's uid (for its Events' ``involvedObject``), None when it is gone."""
        return self._cached_uid(
            f"/apis/{PODGROUP_GROUP}/{PODGROUP_VERSION}/namespaces/{namespace}/{PODGROUP_PLURAL}/{name}"
        )

    def _cached_uid(self, path: str) -> str | None:
        """An object's uid, None when it is gone. Read as metadata only (``PartialObjectMetadata``) from the
        API server's watch cache (``resourceVersion=0``): a uid never changes, the object was in that cache
        before the scheduler saw it, and neither etcd nor the whole object's encoding is needed for one
        field."""
        try:
            got = self._metadata.read_metadata(path, cached=True)
        except KubeError as e:
            if e.status == 404:
                return None
            raise
        uid = (got or {}).get("metadata", {}).get("uid")
        return str(uid) if uid else None

    def pod_node(self, namespace: str, name: str) -> str | None:
        r = self.call(self.core.read_namespaced_pod, name, namespace)
        node = json.loads(r.data).get("spec", {}).get("nodeName")
        return str(node) if node else None

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None) -> None:
        self.call(self.core.delete_namespaced_pod, name, namespace, grace_period_seconds=grace_seconds)

    def set_pod_condition(self, namespace: str, name: str, condition: Mapping[str, str]) -> str | None:
        # A strategic merge patch merges status.conditions by type: other conditions are kept.
        body = {"status": {"conditions": [dict(condition)]}}
        r = self.call(
            self.core.patch_namespaced_pod_status,
            name,
            namespace,
            body,
            _content_type="application/strategic-merge-patch+json",
        )
        uid = json.loads(r.data).get("metadata", {}).get("uid") if getattr(r, "data", None) else None
        return str(uid) if uid else None

    def upsert_event(self, ev: EventSpec) -> None:
        ns = ev.namespace or CLUSTER_EVENT_NAMESPACE
        name = event_name(ev)
        uid = ev.uid
        if uid is None and ev.kind == "Pod" and ev.namespace:
            uid = self.pod_uid(ev.namespace, ev.name)
        elif uid is None and ev.kind == "PodGroup" and ev.namespace:
            uid = self.podgroup_uid(ev.namespace, ev.name)
        now = _now_rfc3339()
        message = ev.message[:EVENT_MESSAGE_MAX]
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {
                "apiVersion": ev.api_version,
                "kind": ev.kind,
                "name": ev.name,
                **({"namespace": ev.namespace} if ev.namespace else {}),
                **({"uid": uid} if uid else {}),
            },
            "reason": ev.reason,
            "message": message,
            "type": ev.type,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
        }
        try:
            self.call(self.core.create_namespaced_event, ns, body)
            return
        except KubeError as e:
            if e.status != 409:
                raise
        r = self.call(self.core.read_namespaced_event, name, ns)
        count = int(json.loads(r.data).get("count") or 1)
        patch = {"count": count + 1, "message": message, "lastTimestamp": now, "type": ev.type}
        self.call(
            self.core.patch_namespaced_event, name, ns, patch, _content_type="application/merge-patch+json"
        )

    def patch_queue_status(self, name: str, status: Mapping[str, Any]) -> None:
        self.call(
            self.custom.patch_cluster_custom_object_status,
            QUEUE_GROUP,
            QUEUE_VERSION,
            QUEUE_PLURAL,
            name,
            {"status": dict(status)},
            _content_type="application/merge-patch+json",
        )

    def write_podgroup_condition(self, action: SetCondition | ClearConditions) -> bool:
        return ConditionWriter(self.custom, self.call).apply(action)


# --------------------------------------------------------------------------- execution


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff for transient failures: ``base_s``, doubling, capped at ``max_s``."""

    attempts: int = 6
    base_s: float = 0.2
    max_s: float = 5.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return float(min(self.max_s, self.base_s * 2 ** (attempt - 1)))


@dataclass(slots=True)
class BinderStats:
    """What the binder did (lifetime counters)."""

    records: int = 0
    bound: int = 0
    already_bound: int = 0
    conflicts: int = 0
    evicted: int = 0
    already_gone: int = 0
    pending_conditions: int = 0
    pending_events: int = 0
    not_ready_events: int = 0  # NotReady Events on PodGroups of gangs waiting for members
    queue_statuses: int = 0
    queue_statuses_merged: int = 0  # a Queue status folded into the write of an earlier one still waiting
    queues_missing: int = 0
    retries: int = 0
    unavailable: int = 0  # records left uncommitted because the API server stayed unreachable
    dead_letters: int = 0
    dead_letters_skipped: int = 0
    events_failed: int = 0
    podgroup_conditions: int = 0  # PodGroup status.schedulingConditions set
    podgroup_conditions_cleared: int = 0
    podgroups_missing: int = 0  # a pending job whose PodGroup object does not exist (404)
    podgroup_conditions_failed: int = 0  # best effort, like Events: logged, never dead-lettered
    deleted_during_bind: int = 0  # a Bind refused because its pod was being deleted
    shared_bound: int = 0  # binds of GPU-sharing pods whose visibility ConfigMap was written first
    reservations_deleted: int = 0


@dataclass(slots=True)
class _RecordRun:
    """One record being applied: its calls not yet finished, and how they failed (if they did)."""

    offset: int
    memory_before: Memory
    conditions_before: ConditionMemory
    remaining: int = 0
    evicted_on: frozenset[str] = frozenset()
    error: KubeUnavailable | None = None  # the API server stayed unreachable: apply the record again
    crash: BaseException | None = None  # anything else: raised in the main thread


#: The worker pool's lane of every record's status writes (binds and evictions use (record offset, job)).
_STATUS_LANE: Final = (-1, "")


def merge_patches(patches: Collection[Mapping[str, Any]]) -> dict[str, Any]:
    """One JSON merge patch (RFC 7386) with the effect of ``patches`` applied in order: objects merge
    key by key, anything else (a value, a list, null) is replaced by the later patch."""
    out: dict[str, Any] = {}
    for patch in patches:
        out = _merge_into(out, patch)
    return out


def _merge_into(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in patch.items():
        old = out.get(k)
        out[k] = _merge_into(old, v) if isinstance(v, Mapping) and isinstance(old, Mapping) else v
    return out


def _action_key(a: Action) -> str:
    """The object an action changes: calls with the same key run in order on one worker."""
    if isinstance(a, WriteQueueStatus):
        return f"queue/{a.name}"
    if isinstance(a, MarkNotReady):
        return f"podgroup/{a.namespace}/{a.name}"
    return f"pod/{a.namespace}/{a.name}"


class Binder:
    """Applies cycle records from the decisions topic to Kubernetes; resumes from its committed offset."""

    def __init__(
        self,
        log: Log,
        kube: Kube,
        topics: Topics = DEFAULT_TOPICS,
        *,
        group: str = DEFAULT_GROUP,
        grace_seconds: int | None = 30,
        event_interval_s: float = 60.0,
        retry: RetryPolicy | None = None,
        batch_size: int = 100,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        sharing: GpuSharing | None = None,
        metrics: BinderMetrics | None = None,
        timer: Callable[[], float] = time.perf_counter,
        workers: int = 1,
        max_in_flight: int = 256,
        eviction_condition: bool = True,
        volume_bind_timeout_s: float = DEFAULT_VOLUME_BIND_TIMEOUT_S,
    ) -> None:
        self.log = log
        # How long a bind waits for its WaitForFirstConsumer claims to be bound (0: it does not wait).
        self.volume_bind_timeout_s = volume_bind_timeout_s
        self.eviction_condition = eviction_condition  # DisruptionTarget on a pod before its eviction
        # Calls run on ``workers`` threads, those of one pod (Queue, PodGroup) in order; 1 = sequential.
        self._pool = KeyedPool(workers)
        self.max_in_flight = max(1, max_in_flight)  # records started and not yet committed
        self._cv = threading.Condition()  # guards the counters and each record's remaining calls
        self._running: deque[_RecordRun] = deque()
        self._cursor = 0  # the next decisions offset to start (ahead of ``position`` while records run)
        # KAI's task_bind_latency_milliseconds (``--metrics-port``); ``timer`` times each bind.
        self.metrics = metrics
        self._timer = timer
        self.sharing = (
            sharing  # GPU sharing at run time (scheduler/kube/reservation.py); None: annotations only
        )
        self._synced_at = 0.0
        self.kube = kube
        self.topics = topics
        self.group = group
        self.grace_seconds = grace_seconds
        self.event_interval_s = event_interval_s
        self.retry = retry or RetryPolicy()
        self.batch_size = batch_size
        self.poll_interval_s = poll_interval_s
        self._clock = clock
        self._sleep = sleep
        self.memory = Memory()
        self.conditions = ConditionMemory()
        # Queue statuses planned and not yet written, per Queue, oldest first (guarded by _cv). A burst of
        # records each changing a Queue's status costs one write, not one per record: the first write
        # to run takes every status waiting, the later ones find nothing left.
        self._queue_due: dict[str, list[Mapping[str, Any]]] = {}
        self.stats = BinderStats()
        self.position = 0
        self.dead_seen: set[str] = set()
        self._dead_lock = threading.Lock()
        self._started = False
        self._stop = False

    # -- start-up ------------------------------------------------------------------------------

    def start(self) -> None:
        """Read the committed position and the dead letters this binder already wrote."""
        self.position = self.log.committed(self.group, self.topics.decisions)
        self._cursor = self.position
        prefix = f"{self.topics.decisions}:"
        for r in self.log.scan(self.topics.deadletter, batch=5000):
            if r.key is not None and r.key.decode(errors="replace").startswith(prefix):
                self.dead_seen.add(r.key.decode(errors="replace"))
        self._started = True
        self._sync_reservations()
        log.info("binder: resuming at decisions offset %d", self.position)

    # -- one record ----------------------------------------------------------------------------

    def _sync_reservations(self, nodes: Collection[str] | None = None) -> None:
        """Reservation pods (on ``nodes``, or all) against their sharers: no orphan survives a restart."""
        if self.sharing is None:
            return
        if nodes is None:
            self._synced_at = self._clock()
        sharing = self.sharing
        try:
            n = self._with_retry("reservation sync", lambda: sharing.reconcile(nodes))
        except (KubeError, KubeUnavailable) as e:
            log.warning("reservation sync failed, will retry: %s", e)
            return
        self._count("reservations_deleted", n)

    def _with_retry(self, what: str, fn: Callable[[], Any]) -> Any:
        for attempt in range(1, self.retry.attempts + 1):
            try:
                return fn()
            except KubeError as e:
                if not e.transient:
                    raise
                if attempt == self.retry.attempts:
                    raise KubeUnavailable(f"{what}: {e} (after {attempt} attempts)") from e
                self._count("retries")
                delay = self.retry.delay(attempt)
                log.warning("%s: %s; retrying in %.1fs", what, e, delay)
                self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _count(self, counter: str, n: int = 1) -> None:
        """Add ``n`` to one of :attr:`stats` (workers count from several threads)."""
        with self._cv:
            setattr(self.stats, counter, getattr(self.stats, counter) + n)

    def _dead_letter(self, offset: int, target: str, reason_code: str, message: str, raw: str) -> None:
        with self._dead_lock:
            self._dead_letter_locked(offset, target, reason_code, message, raw)

    def _dead_letter_locked(self, offset: int, target: str, reason_code: str, message: str, raw: str) -> None:
        key = f"{self.topics.decisions}:{offset}:{target}"
        if key in self.dead_seen:
            self._count("dead_letters_skipped")
            return
        value = {
            "source_topic": self.topics.decisions,
            "source_offset": offset,
            "target": target,
            "reason_code": reason_code,
            "message": message,
            "raw": raw,
        }
        body = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        self.log.append(self.topics.deadletter, key.encode(), body)
        self.dead_seen.add(key)
        self._count("dead_letters")
        log.warning("dead letter for %s at decisions offset %d: %s: %s", target, offset, reason_code, message)

    def _event(self, ev: EventSpec) -> None:
        """Events are best effort: a permanent failure is logged and counted, never dead-lettered.

        Transient failures are retried like any call; an unreachable server (KubeUnavailable) propagates, so
        the record stays uncommitted like for any other call.
        """
        try:
            self._with_retry(f"event {ev.reason} on {ev.name}", lambda: self.kube.upsert_event(ev))
        except KubeError as e:
            self._count("events_failed")
            log.warning("event %s on %s/%s failed: %s", ev.reason, ev.namespace, ev.name, e)

    def _fail(
        self,
        offset: int,
        target: str,
        code: str,
        message: str,
        raw: str,
        pod: tuple[str, str] | None = None,
        event_reason: str | None = None,
    ) -> None:
        """A permanent failure: a dead letter, and a Warning Event on the pod when one is named."""
        self._dead_letter(offset, target, code, message, raw)
        if pod is not None and event_reason is not None:
            self._event(EventSpec("Pod", pod[0], pod[1], "Warning", event_reason, message))

    def _apply(self, offset: int, a: Action, cycle_id: str) -> None:
        """Apply one planned action through the handler for its kind (:data:`_HANDLERS`)."""
        _HANDLERS[type(a)](self, offset, a, cycle_id)

    def _apply_bind(self, offset: int, a: BindPod, cycle_id: str) -> None:
        """Bind the pod (GPU-sharing preparation first); a conflict or refusal is dead-lettered, FailedBinding."""
        k = self.kube
        uid = f"{a.namespace}/{a.name}"
        raw = json.dumps({"cycle_id": cycle_id, "kind": "Bind", "pod": uid, "node": a.node})
        annotations = dict(a.annotations)
        claims: list[str] = []
        try:
            if a.volumes:
                self._with_retry(
                    f"volumes of {uid}", lambda: k.bind_volumes(a.namespace, a.name, a.node, a.volumes)
                )
                if self.volume_bind_timeout_s > 0:
                    k.wait_volumes_bound(a.namespace, a.name, a.node, a.volumes, self.volume_bind_timeout_s)
            shared = self._prepare_sharing(a)
            if shared is not None:
                annotations.update(shared)
            if a.dra:
                claims = self._with_retry(
                    f"allocate claims of {uid}", lambda: k.allocate_claims(a.namespace, a.name, a.node)
                )
            self._with_retry(f"bind {uid}", lambda: k.bind(a.namespace, a.name, a.node, annotations))
        except (SharingError, VolumeBindError, ClaimError) as e:
            self._fail(offset, uid, e.reason_code, e.message, raw, (a.namespace, a.name), "FailedBinding")
            return
        except KubeError as e:
            if claims and e.status != 409:
                self._undo_claims(a, claims)
            if e.status == 404:
                self._count("already_gone")
                return
            if e.status != 409:
                self._fail(
                    offset,
                    uid,
                    "bind_rejected",
                    f"binding {uid} to {a.node} failed: {e}",
                    raw,
                    (a.namespace, a.name),
                    "FailedBinding",
                )
                return
            try:
                current = self._with_retry(f"read {uid}", lambda: k.pod_node(a.namespace, a.name))
            except KubeError as e2:
                if e2.status == 404:
                    self._count("already_gone")
                    return
                raise
            if current == a.node:
                self._count("already_bound")
                return
            if current is None:
                # Unbound yet refused: the pod is being deleted (the binding subresource refuses a pod with a
                # deletionTimestamp). Its deletion reaches the scheduler through ingest; nothing to report.
                self._count("deleted_during_bind")
                log.info("pod %s was deleted while being bound to %s", uid, a.node)
                return
            self._count("conflicts")
            self._fail(
                offset,
                uid,
                "bind_conflict",
                f"pod {uid} is already bound to node {current}; the scheduler chose {a.node}"
                f" (cycle {cycle_id})",
                raw,
                (a.namespace, a.name),
                "FailedBinding",
            )
            return
        self._count("bound")
        self._count("shared_bound", int(shared is not None))
        self._event(
            EventSpec(
                "Pod",
                a.namespace,
                a.name,
                "Normal",
                "Scheduled",
                f"Successfully assigned {uid} to {a.node}",
            )
        )

    def _apply_evict(self, offset: int, a: EvictPod, cycle_id: str) -> None:
        """Mark the pod a disruption target, tell it why (Event), then delete it with its grace period."""
        k = self.kube
        uid = f"{a.namespace}/{a.name}"
        raw = json.dumps({"cycle_id": cycle_id, "kind": "Evict", "pod": uid, "action": a.action})
        what = a.message or f"Pod {uid} was evicted by the {a.action or 'scheduler'} action"
        reason = "Preempted" if a.action in ("reclaim", "preempt") else "Evicted"
        try:
            pod_uid = None
            if self.eviction_condition:
                # As kube-scheduler and KAI (--update-pod-eviction-condition): a Job's podFailurePolicy can
                # then tell a scheduler eviction from a failure of the pod.
                cond = {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": DISRUPTION_REASON,
                    "message": f"{COMPONENT}: {what}",
                    "lastTransitionTime": _now_rfc3339(),
                }
                pod_uid = self._with_retry(
                    f"disruption condition {uid}", lambda: k.set_pod_condition(a.namespace, a.name, cond)
                )
            self._event(
                EventSpec("Pod", a.namespace, a.name, "Normal", reason, f"[{a.action}] {what}", uid=pod_uid)
            )
            self._with_retry(f"evict {uid}", lambda: k.delete_pod(a.namespace, a.name, a.grace_seconds))
        except KubeError as e:
            if e.status == 404:
                self._count("already_gone")
                return
            self._fail(
                offset,
                uid,
                "evict_rejected",
                f"deleting {uid} failed: {e}",
                raw,
                (a.namespace, a.name),
                "FailedEviction",
            )
            return
        self._count("evicted")

    def _apply_pending(self, offset: int, a: MarkPending, cycle_id: str) -> None:
        """Set the pending pod's PodScheduled=False condition and its Unschedulable Event, as the plan says."""
        k = self.kube
        uid = f"{a.namespace}/{a.name}"
        text = f"{a.reason}: {a.message}"
        pod_uid = None
        try:
            if a.condition:
                cond = {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": text,
                    "lastTransitionTime": _now_rfc3339(),
                }
                pod_uid = self._with_retry(
                    f"condition {uid}", lambda: k.set_pod_condition(a.namespace, a.name, cond)
                )
                self._count("pending_conditions")
        except KubeError as e:
            if e.status == 404:
                self._count("already_gone")
                return
            raw = json.dumps({"cycle_id": cycle_id, "kind": "Unschedulable", "pod": uid})
            self._dead_letter(
                offset, uid, "condition_rejected", f"setting PodScheduled on {uid} failed: {e}", raw
            )
            return
        if a.event:
            self._event(EventSpec("Pod", a.namespace, a.name, "Warning", "Unschedulable", text, uid=pod_uid))
            self._count("pending_events")

    def _apply_not_ready(self, offset: int, a: MarkNotReady, cycle_id: str) -> None:
        """The Normal ``NotReady`` Event on a waiting gang's PodGroup; best effort, like every Event."""
        api_version = f"{PODGROUP_GROUP}/{PODGROUP_VERSION}"
        self._event(EventSpec("PodGroup", a.namespace, a.name, "Normal", NOT_READY, a.message, api_version))
        self._count("not_ready_events")

    def _apply_queue(self, offset: int, a: WriteQueueStatus, cycle_id: str) -> None:
        """Merge-patch a Queue's status; a refusal is dead-lettered with a FailedStatusUpdate Event.

        Writes every status of this Queue planned so far as one patch (``_queue_due``); nothing when an
        earlier call already wrote this one."""
        k = self.kube
        with self._cv:
            due = self._queue_due.pop(a.name, [])
        if not due:
            self._count("queue_statuses_merged")
            return
        status = merge_patches(due) if len(due) > 1 else dict(due[0])
        a = WriteQueueStatus(a.name, status)
        try:
            self._with_retry(f"queue status {a.name}", lambda: k.patch_queue_status(a.name, a.status))
        except KubeError as e:
            if e.status == 404:
                self._count("queues_missing")
                return
            raw = json.dumps({"cycle_id": cycle_id, "queue": a.name, "status": a.status}, sort_keys=True)
            self._dead_letter(
                offset,
                f"queue/{a.name}",
                "queue_status_rejected",
                f"writing the status of Queue {a.name} failed: {e}",
                raw,
            )
            self._event(
                EventSpec(
                    "Queue",
                    None,
                    a.name,
                    "Warning",
                    "FailedStatusUpdate",
                    f"writing the status of Queue {a.name} failed: {e}",
                    api_version=f"{QUEUE_GROUP}/{QUEUE_VERSION}",
                )
            )
            return
        self._count("queue_statuses")

    def _undo_claims(self, a: BindPod, claims: list[str]) -> None:
        try:
            self.kube.undo_claims(a.namespace, a.name, claims)
        except KubeError as e:  # the resourceclaim controller deallocates it once the pod is gone
            log.warning("could not undo the claim allocation of %s/%s: %s", a.namespace, a.name, e)

    def _prepare_sharing(self, a: BindPod) -> dict[str, str] | None:
        """For a pod sharing GPUs: reservation pods and its visibility ConfigMap, before the bind."""
        ann = dict(a.annotations)
        milli = int(ann.get(ANNOTATION_GPU_PORTION, "1000") or 1000)
        if self.sharing is None or ANNOTATION_GPU_DEVICES not in ann or milli >= 1000:
            return None
        devices = [int(d) for d in ann[ANNOTATION_GPU_DEVICES].split(",") if d]
        sharing = self.sharing
        out: dict[str, str] = self._with_retry(
            f"gpu sharing {a.namespace}/{a.name}",
            lambda: sharing.prepare(a.namespace, a.name, a.node, devices, milli),
        )
        return out

    def apply_record(self, offset: int, value: bytes) -> None:
        """Apply one decisions record fully; raises :class:`KubeUnavailable` to leave it uncommitted.

        Plans from and adopts :attr:`memory` like :meth:`step`, but waits for every call of the record.
        """
        run = self._submit(offset, value)
        self._wait(lambda: run.remaining == 0)
        if run.crash is not None:
            raise run.crash
        if run.error is not None:
            self.memory, self.conditions = run.memory_before, run.conditions_before
            self._forget_queue_statuses()
            raise run.error
        self._finished(run)

    def _submit(self, offset: int, value: bytes) -> _RecordRun:
        """Plan one record and hand its calls to the workers, each keyed by the object it changes.

        Planning is sequential and adopts the next memory at once, so the next record plans on top of this
        one while its calls are still running; a record that fails is planned again from the memory it
        started from (:meth:`_settle`).
        """
        run = _RecordRun(offset, self.memory, self.conditions)
        try:
            record = CycleRecord.loads(value)
        except ValueError as e:
            raw = value.decode("utf-8", errors="backslashreplace")
            self._dead_letter(offset, "record", "bad_record", f"not a cycle record: {str(e)[:300]}", raw)
            return run
        p = plan(
            record,
            self.memory,
            self._clock(),
            grace_seconds=self.grace_seconds,
            event_interval_s=self.event_interval_s,
        )
        for bad in p.invalid:
            self._dead_letter(offset, bad.target, bad.reason_code, bad.message, bad.raw)
        cond_actions, conditions = plan_conditions(
            record, self.conditions, self._clock(), message_interval_s=self.event_interval_s
        )
        self.memory = p.memory
        self.conditions = conditions
        run.evicted_on = frozenset(a.node for a in p.actions if isinstance(a, EvictPod) and a.node)
        # Binds and evictions: a lane per job of each record, so an unrelated pod decided in the same cycle
        # as a 500-pod gang is not bound after the gang's binds. What users only read (pending conditions and
        # their Events, Queue statuses, PodGroup conditions): one lane shared by all records, so a burst of
        # them takes one turn among the binds instead of one per record.
        tasks: list[tuple[str, Callable[[], None], Lane]] = [
            (
                _action_key(a),
                functools.partial(self._timed_apply, offset, a, record.cycle_id),
                (offset, a.job) if isinstance(a, BindPod | EvictPod) else _STATUS_LANE,
            )
            for a in p.actions
        ]
        tasks += [
            (f"podgroup/{c.job}", functools.partial(self._condition, c), _STATUS_LANE) for c in cond_actions
        ]
        with self._cv:
            run.remaining = len(tasks)
            for a in p.actions:
                if isinstance(a, WriteQueueStatus):
                    self._queue_due.setdefault(a.name, []).append(a.status)
        for key, fn, lane in tasks:
            self._pool.submit(key, functools.partial(self._run_task, run, fn), lane=lane)
        return run

    def _run_task(self, run: _RecordRun, fn: Callable[[], None]) -> None:
        """Run one call of ``run`` on a worker; its outcome is kept on the record, never raised."""
        try:
            if run.error is None and run.crash is None:  # the record is applied again anyway
                fn()
        except KubeUnavailable as e:
            run.error = run.error or e
        except BaseException as e:  # a bug or a dying process: raised again in the main thread
            run.crash = run.crash or e
        finally:
            with self._cv:
                run.remaining -= 1
                self._cv.notify_all()

    def _timed_apply(self, offset: int, a: Action, cycle_id: str) -> None:
        if isinstance(a, BindPod) and self.metrics is not None:
            started = self._timer()
            try:
                self._apply(offset, a, cycle_id)
            finally:  # as KAI's deferred observation: failed binds are timed too
                self.metrics.task_bind_latency.observe_seconds(self._timer() - started)
        else:
            self._apply(offset, a, cycle_id)

    def _wait(self, done: Callable[[], bool], timeout_s: float | None = None) -> None:
        with self._cv:
            self._cv.wait_for(done, timeout_s)

    def _forget_queue_statuses(self) -> None:
        """Back to an earlier memory: the records after it plan their Queue statuses again."""
        with self._cv:
            self._queue_due.clear()

    def _finished(self, run: _RecordRun) -> None:
        """A record whose every call went through (or failed for good): reservations after evictions."""
        if run.evicted_on and self.sharing is not None:
            self._pool.drain()  # no sharer is being added while reservations are reconciled
            self._sync_reservations(run.evicted_on)  # an evicted sharer may have been the last of its device

    def _condition(self, c: SetCondition | ClearConditions) -> None:
        """PodGroup scheduling conditions are best effort (like Events); an unreachable server propagates."""
        try:
            changed = self._with_retry(
                f"podgroup condition {c.job}", lambda: self.kube.write_podgroup_condition(c)
            )
        except KubeError as e:
            if e.status == 404:
                self._count("podgroups_missing")
                return
            self._count("podgroup_conditions_failed")
            log.warning("scheduling condition of PodGroup %s failed: %s", c.job, e)
            return
        if changed and isinstance(c, SetCondition):
            self._count("podgroup_conditions")
            # KAI's markPodGroupUnschedulable records the condition's message as a Normal Event too.
            ns, _, name = c.job.partition("/")
            api_version = f"{PODGROUP_GROUP}/{PODGROUP_VERSION}"
            self._event(
                EventSpec("PodGroup", ns, name, "Normal", REASON_UNSCHEDULABLE, c.message, api_version)
            )
        elif changed:
            self._count("podgroup_conditions_cleared")

    # -- the loop ------------------------------------------------------------------------------

    def step(self) -> bool:
        """Read and start the next records, commit those fully applied; False when idle or the API is down.

        Records are applied in parallel up to ``max_in_flight`` at a time; the committed offset is the
        first record not yet fully applied, so a restart applies again only records that may be partial.
        """
        if not self._started:
            self.start()
        room = self.max_in_flight - len(self._running)
        failing = any(r.error is not None or r.crash is not None for r in self._running)
        records = (
            []
            if room <= 0 or failing
            else self.log.read(self.topics.decisions, self._cursor, min(self.batch_size, room))
        )
        for r in records:
            run = self._submit(r.offset, r.value)
            self._running.append(run)
            self._cursor = r.offset + 1
            if run.error is not None or run.crash is not None:
                break
        if not self._running:
            if (
                self.sharing is not None
                and self._clock() - self._synced_at >= self.sharing.cfg.sync_interval_s
            ):
                self._sync_reservations()  # sharers that finished or were deleted by their owners
            return False
        if not records or failing:
            head = self._running[0]
            self._wait(lambda: head.remaining == 0, self.poll_interval_s)
        return self._settle()

    def _settle(self) -> bool:
        """Commit the records applied so far, in order; on a failed record, go back to it. False: API down."""
        for run in self._running:
            if run.crash is not None:
                self._pool.drain()
                self._running.clear()
                raise run.crash
        while self._running and self._running[0].remaining == 0:
            run = self._running.popleft()
            if run.error is not None:
                self._pool.drain()  # later records' calls finish; they are applied again after this one
                self._count("unavailable")
                log.warning("decisions offset %d not applied, will retry: %s", run.offset, run.error)
                self._running.clear()
                self._cursor = run.offset
                self.memory, self.conditions = run.memory_before, run.conditions_before
                self._forget_queue_statuses()
                return False
            self._finished(run)
            self._count("records")
            self.position = run.offset + 1
            self.log.commit(self.group, self.topics.decisions, self.position)
        return True

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current step."""
        self._stop = True

    def run(self, max_steps: int | None = None, stop_when_idle: bool = False) -> BinderStats:
        """Step until ``max_steps`` batches, or idle (``stop_when_idle``), or :meth:`stop`."""
        if not self._started:
            self.start()
        done = 0
        while not self._stop and (max_steps is None or done < max_steps):
            unavailable = self.stats.unavailable
            if self.step():
                done += 1
                continue
            if stop_when_idle:
                # Caught up, or (one-shot use) the API server stayed unreachable: the caller sees
                # ``stats.unavailable`` and the uncommitted record is applied by the next run.
                break
            # Idle polls are short (a new record is bound at once); a record the API server refused even
            # after the calls' own backoff waits longer, so an outage is not hammered.
            down = self.stats.unavailable != unavailable
            self._sleep(max(self.poll_interval_s, UNAVAILABLE_RETRY_S) if down else self.poll_interval_s)
        self._pool.drain()  # stopped: let started calls finish and commit what is whole
        self._settle()
        return self.stats

    def close(self) -> None:
        """Finish started calls and stop the worker threads."""
        self._pool.close()


# --------------------------------------------------------------------------- CLI


_HANDLERS: dict[type, Callable[[Binder, int, Any, str], None]] = {
    BindPod: Binder._apply_bind,
    EvictPod: Binder._apply_evict,
    MarkPending: Binder._apply_pending,
    MarkNotReady: Binder._apply_not_ready,
    WriteQueueStatus: Binder._apply_queue,
}
"""Each planned action's handler, by its kind (the binder applies a record's actions in plan order)."""


def add_arguments(p: Any) -> None:
    """The ``bind`` subcommand's arguments (``p`` is an ``argparse.ArgumentParser``)."""
    p.add_argument("--log", required=True, help="a FileLog directory or kafka://HOST:PORT")
    add_kubeconfig_argument(p)
    p.add_argument("--topic-prefix", default=None, help="use PREFIX.decisions, PREFIX.deadletter as topics")
    p.add_argument(
        "--node-pool",
        default=None,
        metavar="POOL",
        help='the node pool this instance is the shard of (label kai.scheduler/node-pool; "" = the default shard, nodes without it): its own decisions topic; docs/deploy.md',
    )
    p.add_argument("--group", default=DEFAULT_GROUP, help=f"consumer group (default {DEFAULT_GROUP})")
    p.add_argument(
        "--grace-period",
        type=int,
        default=30,
        help="seconds of grace for evicted pods (default 30; -1: the pod's)",
    )
    p.add_argument(
        "--event-interval",
        type=float,
        default=60.0,
        help="at most one Unschedulable Event per pod per this many seconds, unless the reason changes",
    )
    p.add_argument(
        "--poll-interval",
        type=float,
        default=DEFAULT_POLL_INTERVAL_S,
        help=f"seconds between polls when idle (default {DEFAULT_POLL_INTERVAL_S})",
    )
    p.add_argument(
        "--no-eviction-condition",
        action="store_true",
        help="evict without first setting the pod's DisruptionTarget condition (set by default, as kube-scheduler)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        help=f"parallel API calls; one pod's calls stay in order (default {DEFAULT_WORKERS}; 1: one at a time)",
    )
    p.add_argument(
        "--gpu-sharing",
        action="store_true",
        help="make fractional GPUs real: reservation pods and visibility ConfigMaps (docs/gpu-sharing.md)",
    )
    p.add_argument(
        "--reservation-namespace",
        default=DEFAULT_RESERVATION_NAMESPACE,
        help=f"namespace of the GPU reservation pods (default {DEFAULT_RESERVATION_NAMESPACE})",
    )
    p.add_argument("--reservation-image", default="hourglass:latest", help="image of the reservation pods")
    p.add_argument(
        "--reservation-service-account", default=None, help="service account of the reservation pods"
    )
    p.add_argument(
        "--volume-bind-timeout",
        type=float,
        default=DEFAULT_VOLUME_BIND_TIMEOUT_S,
        help="seconds a bind waits for its WaitForFirstConsumer claims to be bound by the PersistentVolume"
        " controller or provisioner, as kube-scheduler's PreBind does; 0 binds without waiting"
        f" (default {DEFAULT_VOLUME_BIND_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--reservation-timeout",
        type=float,
        default=60.0,
        help="seconds to wait for a reservation pod to report its GPU (default 60)",
    )
    p.add_argument(
        "--reservation-sync-interval",
        type=float,
        default=30.0,
        help="when idle, reconcile reservation pods with their sharers this often (default 30 s)",
    )
    p.add_argument(
        "--stop-when-idle",
        action="store_true",
        help="exit when every record is applied (or the API server stays unreachable: exit code 1)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus /metrics (KAI's kai_task_bind_latency_milliseconds) on this port",
    )
    p.add_argument(
        "--metrics-host", default="127.0.0.1", help="address for --metrics-port (default 127.0.0.1)"
    )
    from ingest.kube.lease import add_leader_election_arguments

    add_leader_election_arguments(p, LEASE_NAME)


#: The binder's default Lease (``--leader-elect``); a node-pool shard's carries its pool.
LEASE_NAME = "hourglass-binder"


def run_cli(args: Any) -> int:
    """``hourglass bind``: apply cycle records until stopped (SIGTERM) or idle (``--stop-when-idle``)."""
    import signal
    import sys

    from ingest.backends import StartupError, open_log_for
    from ingest.kube.client import api_client_for
    from ingest.log import LogError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    topics = Topics.from_prefix(args.topic_prefix).for_pool(args.node_pool)
    if args.workers < 1:
        print(f"bind: --workers must be at least 1, not {args.workers}", file=sys.stderr)
        return 2
    from scheduler.tenure import Tenure

    tenure = Tenure("bind")
    metrics = None
    if args.metrics_port is not None:
        metrics = BinderMetrics.create()
        if not tenure.serve_metrics(metrics, args.metrics_host, args.metrics_port):
            return 2
    try:
        # A standby waits here, before opening the log: it binds nothing until it holds the Lease.
        if not tenure.lead(args, LEASE_NAME):
            return 0
        api = api_client_for("bind", args.kubeconfig)
        log_ = open_log_for(
            "bind", args.log, topics=topics.all(), role=Topics.pool_role("binder", args.node_pool)
        )
    except StartupError as e:
        tenure.close()
        print(e, file=sys.stderr)
        return 2
    BinderApi.size_pool(api, args.workers)
    sharing = None
    if args.gpu_sharing:
        kube_api = BinderApi(api)
        cfg = SharingConfig(
            namespace=args.reservation_namespace,
            image=args.reservation_image,
            service_account=args.reservation_service_account,
            timeout_s=args.reservation_timeout,
            sync_interval_s=args.reservation_sync_interval,
        )
        sharing = GpuSharing(kube_api.core, kube_api.call, cfg)
    with log_:
        binder = Binder(
            log_,
            BinderApi(api),
            topics,
            group=args.group,
            grace_seconds=None if args.grace_period < 0 else args.grace_period,
            event_interval_s=args.event_interval,
            poll_interval_s=args.poll_interval,
            sharing=sharing,
            metrics=metrics,
            workers=args.workers,
            eviction_condition=not args.no_eviction_condition,
            volume_bind_timeout_s=args.volume_bind_timeout,
        )
        signal.signal(signal.SIGTERM, lambda *_: binder.stop())
        try:
            st = binder.run(stop_when_idle=args.stop_when_idle)
        except KeyboardInterrupt:
            st = binder.stats
        except LogError as e:  # a damaged decisions log: stop with the reason, never bind past it
            print(f"bind: {e}", file=sys.stderr)
            return 2
        finally:
            binder.close()
            tenure.close()  # after the last call: a successor never overlaps this one's binds
        behind = binder.position < log_.end_offset(topics.decisions)
    print(
        f"bind: {st.records} records applied, {st.bound} bound ({st.already_bound} already), {st.evicted}"
        f" evicted ({st.already_gone} already gone), {st.conflicts} conflicts, {st.pending_conditions}"
        f" pending conditions, {st.pending_events} pending events, {st.not_ready_events} not-ready events,"
        f" {st.queue_statuses} queue statuses,"
        f" {st.dead_letters} dead letters, decisions position {binder.position}"
    )
    if tenure.lost():
        return 1
    return 1 if args.stop_when_idle and behind else 0
