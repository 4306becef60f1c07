"""Pure translation of Kubernetes objects (plain JSON dicts, as the API server sends them) into events.

Nothing here talks to the API server: :mod:`ingest.kube.watcher` fetches objects and
:mod:`ingest.kube.podgrouper` decides pod groups; this module only maps one object to
the event contract of :mod:`ingest.events`, or raises :class:`InvalidObject` naming
the offending field and value. The mapping follows KAI Scheduler's semantics
(kai-spec §2.1 Queue, §2.2 PodGroup, §2.3 labels, §2.5 GPU sharing, §2.6 pod
status); docs/ingest.md has the full table.

Units are exact integers (milli-GPU, millicores, bytes, MiB): every quantity goes
through :mod:`ingest.kube.units`, never through a float.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any, Final

from pydantic import ValidationError

from ingest.events import (
    EPHEMERAL_STORAGE,
    FIELD_NODE_NAME,
    CSINodeDeleted,
    CSINodeUpserted,
    ForeignPodUpserted,
    HostPort,
    InlineDisk,
    NamespaceDeleted,
    NamespaceUpserted,
    NodeRemoved,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    NodeUpserted,
    PodAffinityTerm,
    PodDeleted,
    PodGroupDeleted,
    PodGroupUpserted,
    PodRequests,
    PodSubmitted,
    PreferredSchedulingTerm,
    QueueDeleted,
    QueueResource,
    QueueResources,
    QueueUpserted,
    SubGroup,
    Taint,
    Toleration,
    TopologyDeleted,
    TopologySpreadConstraint,
    TopologyUpserted,
    VolumeClaim,
    validation_message,
)
from ingest.kube import volumes as kube_volumes
from ingest.kube.names import (
    ANNOTATION_CYCLE,
    ANNOTATION_GPU_CONFIGMAP,
    ANNOTATION_GPU_DEVICES,
    ANNOTATION_GPU_FRACTION,
    ANNOTATION_GPU_FRACTION_DEVICES,
    ANNOTATION_GPU_GROUPS,
    ANNOTATION_GPU_MEMORY,
    ANNOTATION_GPU_PORTION,
    ANNOTATION_POD_GROUP,
    ANNOTATION_TOPOLOGY,
    ANNOTATION_TOPOLOGY_PREFERRED,
    ANNOTATION_TOPOLOGY_REQUIRED,
    GPU_RESOURCE,
    LABEL_GPU_MEMORY,
    LABEL_GPU_PRODUCT,
    LABEL_GPU_RESERVATION,
    LABEL_NODE_POOL,
    LABEL_PREEMPTIBILITY,
    LABEL_QUEUE,
    LABEL_TASK_PRIORITY,
    PRIORITY_CLASSES,
)
from ingest.kube.units import parse_bytes, parse_cpu_millicores, parse_fraction_milli, parse_gpu_milli

__all__ = [
    "ANNOTATION_CYCLE",
    "ANNOTATION_GPU_CONFIGMAP",
    "ANNOTATION_GPU_DEVICES",
    "ANNOTATION_GPU_FRACTION",
    "ANNOTATION_GPU_FRACTION_DEVICES",
    "ANNOTATION_GPU_GROUPS",
    "ANNOTATION_GPU_MEMORY",
    "ANNOTATION_GPU_PORTION",
    "ANNOTATION_POD_GROUP",
    "ANNOTATION_TOPOLOGY",
    "ANNOTATION_TOPOLOGY_PREFERRED",
    "ANNOTATION_TOPOLOGY_REQUIRED",
    "GPU_RESOURCE",
    "LABEL_GPU_RESERVATION",
    "LABEL_NODE_POOL",
    "LABEL_PREEMPTIBILITY",
    "LABEL_QUEUE",
    "LABEL_TASK_PRIORITY",
    "PRIORITY_CLASSES",
    "InvalidObject",
    "PodView",
    "check_queue_name",
    "claim_names",
    "creation_ms",
    "csi_node_deleted",
    "csi_node_upserted",
    "foreign_pod",
    "host_ports",
    "inline_disks",
    "node_removed",
    "node_upserted",
    "pod_claims",
    "pod_deleted",
    "pod_group_annotation",
    "pod_requests",
    "pod_submitted",
    "pod_view",
    "podgroup_deleted",
    "podgroup_upserted",
    "queue_deleted",
    "queue_upserted",
    "topology_constraint",
    "topology_deleted",
    "topology_upserted",
    "unknown_fields",
    "volume_claim",
]


_MIB = 1024 * 1024
_GPU_MEMORY_BYTES_THRESHOLD = 1_048_576  # label values at or above this are bytes, not MiB (kai-spec §2.5)
_MB = 1_000_000  # Queue memory is in MB (10^6 bytes), kai-spec units
_DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 10**6, "s": 10**9, "m": 60 * 10**9}
_DURATION_NS["h"] = 3600 * 10**9


class InvalidObject(ValueError):
    """A Kubernetes object that cannot be translated.

    ``reason`` is the Kubernetes Event reason posted on the object (``HourglassInvalidQueue``, ...),
    ``reason_code`` the dead-letter reason code (``invalid_queue``, ...), ``field`` and ``value``
    name what is wrong, and ``message`` is the full human sentence.
    """

    def __init__(self, kind: str, key: str, field: str, value: object, problem: str) -> None:
        shown = value if isinstance(value, str | int | float | bool) or value is None else repr(value)
        message = f"{kind} {key}: {field}={shown!r}: {problem}" if field else f"{kind} {key}: {problem}"
        super().__init__(message)
        self.kind = kind
        self.key = key
        self.field = field
        self.value = value
        self.problem = problem
        self.message = message
        self.reason = f"HourglassInvalid{kind}"
        self.reason_code = f"invalid_{kind.lower()}"


# --------------------------------------------------------------------------- small helpers


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return _dict(obj.get("metadata"))


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in _dict(value).items()}


def object_key(obj: dict[str, Any]) -> str:
    """``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones."""
    meta = _meta(obj)
    name = str(meta.get("name") or "")
    ns = meta.get("namespace")
    return f"{ns}/{name}" if ns else name


def creation_ms(obj: dict[str, Any]) -> int:
    """``metadata.creationTimestamp`` as epoch milliseconds (0 when absent, e.g. a hand-written dict)."""
    stamp = _meta(obj).get("creationTimestamp")
    if not isinstance(stamp, str) or not stamp:
        return 0
    try:
        return max(0, int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000))
    except ValueError:
        return 0


def check_queue_name(name: str) -> str | None:
    """None when ``name`` is a valid queue name (a DNS-1123 subdomain), else the problem."""
    if len(name) > 253 or not _DNS1123.fullmatch(name):
        return (
            "not a valid queue name (lowercase letters, digits, '-' and '.', starting and ending with a "
            "letter or digit, at most 253 characters)"
        )
    return None


def _exact(value: Any) -> Fraction:
    """A JSON number (int or float as sent by the API server) as an exact rational of its decimal text."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("must be a number")
    try:
        # str() of a float is its shortest round-trip decimal, so 0.1 means 1/10, not the binary double.
        dec = Decimal(str(value))
    except InvalidOperation:
        raise ValueError("must be a number") from None
    if not dec.is_finite():
        raise ValueError("must be finite")
    return Fraction(dec)


def _fail_model(kind: str, key: str, exc: ValidationError) -> InvalidObject:
    return InvalidObject(kind, key, "", None, validation_message(exc))


# --------------------------------------------------------------------------- nodes


def node_upserted(obj: dict[str, Any], at_ms: int) -> NodeUpserted:
    """Translate a Node: allocatable (not capacity), GPU memory and model labels, taints, readiness.

    A node without any ``Ready`` condition (an API object no kubelet reports on) counts as ready;
    ``Ready`` False or Unknown makes it not ready.
    """
    meta = _meta(obj)
    name = str(meta.get("name") or "")
    alloc = _dict(_dict(obj.get("status")).get("allocatable"))
    labels = _str_map(meta.get("labels"))

    def quantity(resource: str, parse: Any, default: int) -> int:
        if resource not in alloc:
            return default
        try:
            return int(parse(alloc[resource]))
        except ValueError as exc:
            raise InvalidObject(
                "Node", name, f"status.allocatable[{resource}]", alloc[resource], str(exc)
            ) from None

    cpu = quantity("cpu", parse_cpu_millicores, 0)
    memory = quantity("memory", parse_bytes, 0)
    gpu_milli = quantity(GPU_RESOURCE, parse_gpu_milli, 0)
    if gpu_milli % 1000:
        raise InvalidObject(
            "Node",
            name,
            f"status.allocatable[{GPU_RESOURCE}]",
            alloc[GPU_RESOURCE],
            "not a whole number of GPUs",
        )
    max_pods = quantity("pods", lambda v: parse_cpu_millicores(v) // 1000, 110)
    extended: dict[str, int] = {}
    for res in sorted(alloc):
        if is_extended_resource(str(res)):
            amount = quantity(str(res), lambda v, r=str(res): extended_amount(r, v), 0)
            if amount:
                extended[str(res)] = amount

    gpu_memory: int | None = None
    if LABEL_GPU_MEMORY in labels:
        raw = labels[LABEL_GPU_MEMORY]
        if not raw.isdigit() or int(raw) == 0:
            raise InvalidObject(
                "Node", name, f"metadata.labels[{LABEL_GPU_MEMORY}]", raw, "must be a positive integer"
            )
        gpu_memory = int(raw)
        if gpu_memory >= _GPU_MEMORY_BYTES_THRESHOLD:  # KAI: such values are bytes
            gpu_memory = max(1, gpu_memory // _MIB)

    ready = True
    for cond in _dict(obj.get("status")).get("conditions") or []:
        if _dict(cond).get("type") == "Ready":
            ready = _dict(cond).get("status") == "True"
    spec = _dict(obj.get("spec"))
    taints: list[Taint] = []
    for i, t in enumerate(spec.get("taints") or []):
        t = _dict(t)
        try:
            taints.append(
                Taint.model_validate(
                    {
                        "key": str(t.get("key", "")),
                        "value": str(t.get("value", "")),
                        "effect": t.get("effect"),
                    }
                )
            )
        except ValidationError as exc:
            raise InvalidObject("Node", name, f"spec.taints[{i}]", t, validation_message(exc)) from None
    try:
        return NodeUpserted(
            name=name,
            at_ms=at_ms,
            cpu_millicores=cpu,
            memory_bytes=memory,
            gpus=gpu_milli // 1000,
            gpu_memory_mib=gpu_memory,
            gpu_model=labels.get(LABEL_GPU_PRODUCT),
            max_pods=max_pods,
            labels=labels,
            taints=taints,
            ready=ready,
            unschedulable=bool(spec.get("unschedulable", False)),
            extended=extended,
        )
    except ValidationError as exc:
        raise _fail_model("Node", name, exc) from None


def node_removed(obj: dict[str, Any], at_ms: int) -> NodeRemoved:
    """A deleted Node."""
    return NodeRemoved(name=str(_meta(obj).get("name") or ""), at_ms=at_ms)


# --------------------------------------------------------------------------- queues


def _queue_amount(resource: str, value: Any) -> int:
    """A Queue quota or limit (KAI units) in engine units; -1 is handled by the caller."""
    if resource == "gpu":
        return parse_gpu_milli(value)
    amount = _exact(value)
    scaled = amount * (_MB if resource == "memory" else 1)
    if scaled.denominator != 1:
        unit = "bytes" if resource == "memory" else "millicores"
        raise ValueError(f"not a whole number of {unit}")
    return int(scaled)


def _parse_duration_ms(text: Any) -> int:
    """A Go duration (``"90s"``, ``"1h30m"``, ``"1.5h"``) as whole milliseconds."""
    if not isinstance(text, str) or not text:
        raise ValueError("must be a Go duration such as '90s' or '1h30m'")
    pos, total = 0, Fraction(0)
    for m in _GO_DURATION.finditer(text):
        if m.start() != pos:
            break
        total += Fraction(Decimal(m.group(1))) * _DURATION_NS[m.group(2)]
        pos = m.end()
    if pos != len(text):
        raise ValueError("must be a Go duration such as '90s' or '1h30m'")
    ms = total / 10**6
    if ms.denominator != 1:
        raise ValueError("must be a whole number of milliseconds")
    return int(ms)


def queue_upserted(obj: dict[str, Any], at_ms: int) -> tuple[QueueUpserted, list[str]]:
    """Translate a Queue (``scheduling.run.ai/v2``); also return warnings that are not errors.

    KAI semantics (kai-spec §2.1): ``-1`` means unlimited / no cap; an unset ``quota`` is 0; an unset
    ``limit`` is a hard cap of 0 and an unset ``overQuotaWeight`` is 0 (Go zero values) -- such a queue
    is valid but cannot use that resource, so it gets a warning.
    """
    meta = _meta(obj)
    name = str(meta.get("name") or "")
    spec = _dict(obj.get("spec"))
    warnings: list[str] = []
    if "resources" not in spec or not isinstance(spec.get("resources"), dict):
        raise InvalidObject("Queue", name, "spec.resources", spec.get("resources"), "is required")
    res_spec = spec["resources"]
    resources: dict[str, QueueResource] = {}
    for resource in ("gpu", "cpu", "memory"):
        entry = res_spec.get(resource)
        if entry is not None and not isinstance(entry, dict):
            raise InvalidObject("Queue", name, f"spec.resources.{resource}", entry, "must be an object")
        entry = entry or {}
        values: dict[str, int | None] = {}
        for key in ("quota", "limit"):
            field = f"spec.resources.{resource}.{key}"
            raw = entry.get(key, 0)
            try:
                amount = _exact(raw)
            except ValueError as exc:
                raise InvalidObject("Queue", name, field, raw, str(exc)) from None
            if amount == -1:
                values[key] = None
                continue
            if amount < 0:
                raise InvalidObject("Queue", name, field, raw, "must be >= 0, or -1 for unlimited")
            try:
                values[key] = _queue_amount(resource, raw)
            except ValueError as exc:
                raise InvalidObject("Queue", name, field, raw, str(exc)) from None
        raw_weight = entry.get("overQuotaWeight", 0)
        field = f"spec.resources.{resource}.overQuotaWeight"
        try:
            weight = _exact(raw_weight)
        except ValueError as exc:
            raise InvalidObject("Queue", name, field, raw_weight, str(exc)) from None
        if weight < 0:
            raise InvalidObject("Queue", name, field, raw_weight, "must be >= 0")
        quota, limit = values["quota"], values["limit"]
        if limit is not None and quota is not None and quota > limit:
            # KAI's webhook accepts such a queue and its limit wins: pods are held at the limit ("over max
            # allowed"). The same here, said once: the quota is read as the limit.
            unset = " (unset: a hard cap of 0; use -1 for no cap)" if "limit" not in entry else ""
            warnings.append(
                f"spec.resources.{resource}.quota {entry.get('quota', 0)} exceeds its limit"
                f" {entry.get('limit', 0)}{unset}: the queue never gets more than the limit, so its quota is"
                " read as the limit"
            )
            quota = limit
        if limit == 0 and "limit" not in entry:
            warnings.append(
                f"spec.resources.{resource}.limit is unset: KAI treats that as a hard cap of 0, so this queue "
                f"can never use {resource}; set limit: -1 for no cap"
            )
        resources[resource] = QueueResource(quota=quota, limit=limit, over_quota_weight=float(weight))

    parent = spec.get("parentQueue") or None
    priority = spec.get("priority", 100)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidObject("Queue", name, "spec.priority", priority, "must be an integer")
    if parent is not None and (not isinstance(parent, str) or (problem := check_queue_name(parent))):
        problem = check_queue_name(parent) if isinstance(parent, str) else "must be a string"
        raise InvalidObject("Queue", name, "spec.parentQueue", parent, problem or "")
    if parent == name:
        raise InvalidObject("Queue", name, "spec.parentQueue", parent, "a queue cannot be its own parent")
    runtimes: dict[str, int | None] = {}
    for key in ("preemptMinRuntime", "reclaimMinRuntime"):
        raw = spec.get(key)
        if raw in (None, ""):
            runtimes[key] = None
            continue
        try:
            runtimes[key] = _parse_duration_ms(raw)
        except ValueError as exc:
            raise InvalidObject("Queue", name, f"spec.{key}", raw, str(exc)) from None
    display = spec.get("displayName")
    pool = _dict(_meta(obj).get("labels")).get(LABEL_NODE_POOL)
    try:
        event = QueueUpserted(
            name=name,
            at_ms=at_ms,
            parent=parent,
            priority=priority,
            display_name=str(display) if display else None,
            resources=QueueResources(**resources),
            preempt_min_runtime_ms=runtimes["preemptMinRuntime"],
            reclaim_min_runtime_ms=runtimes["reclaimMinRuntime"],
            node_pool=pool if isinstance(pool, str) and pool else None,
        )
    except ValidationError as exc:
        raise _fail_model("Queue", name, exc) from None
    return event, warnings


def queue_deleted(obj: dict[str, Any], at_ms: int) -> QueueDeleted:
    """A deleted Queue."""
    return QueueDeleted(name=str(_meta(obj).get("name") or ""), at_ms=at_ms)


# --------------------------------------------------------------------------- pod groups


def podgroup_upserted(obj: dict[str, Any], at_ms: int) -> PodGroupUpserted:
    """Translate a PodGroup (``scheduling.run.ai/v2alpha2``).

    The priority value is left for the state fold to resolve from ``priorityClassName`` (KAI's four
    classes, else 50); ``preemptibility`` maps to ``preemptible`` (empty = derive from priority).
    """
    meta = _meta(obj)
    key = object_key(obj)
    spec = _dict(obj.get("spec"))
    queue = spec.get("queue")
    if not isinstance(queue, str) or not queue:
        raise InvalidObject("PodGroup", key, "spec.queue", queue, "is required (the leaf queue of the group)")
    if problem := check_queue_name(queue):
        raise InvalidObject("PodGroup", key, "spec.queue", queue, problem)
    min_member = spec.get("minMember", 1)
    if isinstance(min_member, bool) or not isinstance(min_member, int) or min_member < 0:
        raise InvalidObject("PodGroup", key, "spec.minMember", min_member, "must be an integer >= 0")
    pre = spec.get("preemptibility") or ""
    if pre == "semi-preemptible":
        raise InvalidObject(
            "PodGroup",
            key,
            "spec.preemptibility",
            pre,
            "is KAI's semi-preemptible (core pods protected, elastic pods preemptible), which Hourglass does"
            " not implement yet; use 'preemptible' or 'non-preemptible'",
        )
    if pre not in ("", "preemptible", "non-preemptible"):
        raise InvalidObject(
            "PodGroup", key, "spec.preemptibility", pre, "must be 'preemptible', 'non-preemptible' or empty"
        )
    pcn = spec.get("priorityClassName") or None
    if pcn is not None and not isinstance(pcn, str):
        raise InvalidObject("PodGroup", key, "spec.priorityClassName", pcn, "must be a string")
    topology, required, preferred = topology_constraint(obj)
    subgroups = _subgroups(key, spec)
    min_sub = spec.get("minSubGroup")
    if min_sub is not None and (isinstance(min_sub, bool) or not isinstance(min_sub, int) or min_sub < 0):
        raise InvalidObject("PodGroup", key, "spec.minSubGroup", min_sub, "must be an integer >= 0")
    if min_sub == 0 and not subgroups:
        min_sub = None  # KAI accepts 0 without subgroups: nothing to require
    delay_ms, grace_ms = podgroup_timings(obj)
    k8s_uid = meta.get("uid")
    node_pool = _dict(meta.get("labels")).get(LABEL_NODE_POOL)
    try:
        return PodGroupUpserted(
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            at_ms=at_ms,
            queue=queue,
            min_member=max(min_member, 1),  # the engine uses max(minMember, 1), kai-spec §2.2
            priority_class=pcn,
            preemptible=None if pre == "" else pre == "preemptible",
            created_at_ms=creation_ms(obj),
            topology=topology,
            required_topology_level=required,
            preferred_topology_level=preferred,
            subgroups=subgroups,
            min_sub_group=min_sub,
            preemption_delay_ms=delay_ms,
            staleness_grace_ms=grace_ms,
            # For KAI's metric labels only (kai_pod_group_evicted_pods_total).
            k8s_uid=k8s_uid if isinstance(k8s_uid, str) and k8s_uid else None,
            node_pool=node_pool if isinstance(node_pool, str) and node_pool else None,
        )
    except ValidationError as exc:
        raise _fail_model("PodGroup", key, exc) from None


#: The spec fields of KAI's CRDs (deploy/crds/ declares exactly these; tests/ingest/kube/test_unknown_fields.py
#: checks the two agree). A field outside them is dropped by KAI's structural schema, so it is reported.
_KNOWN_SPEC: Final[dict[str, frozenset[str]]] = {
    "PodGroup": frozenset(
        {
            "backoffLimit",
            "completions",
            "markUnschedulable",
            "minMember",
            "minSubGroup",
            "parallelism",
            "preemptibility",
            "preemptionDelay",
            "priorityClassName",
            "queue",
            "schedulingBackoff",
            "stalenessGracePeriod",
            "subGroups",
            "topologyConstraint",
        }
    ),
    "Queue": frozenset(
        {"displayName", "parentQueue", "preemptMinRuntime", "priority", "reclaimMinRuntime", "resources"}
    ),
}
_KNOWN_SUBGROUP: Final = frozenset({"minMember", "minSubGroup", "name", "parent", "topologyConstraint"})
_KNOWN_CONSTRAINT: Final = frozenset({"topology", "requiredTopologyLevel", "preferredTopologyLevel"})


def _suggest(name: str, known: frozenset[str]) -> str:
    close = [k for k in sorted(known) if k.lower() == name.lower()]
    return f" (did you mean {close[0]}?)" if close else ""


def unknown_fields(kind: str, obj: dict[str, Any]) -> list[str]:
    """Fields of a Queue / PodGroup spec that KAI's schema does not have, one message each (empty: none).

    ``kubectl`` refuses or warns about these when the CRD is strict (field validation); an object stored
    through a CRD that keeps unknown fields still reaches us with them, and ignoring them without a word
    hides a typo such as ``subgroups`` for ``subGroups`` (KAI's docs make that one)."""
    known = _KNOWN_SPEC.get(kind)
    spec = obj.get("spec")
    if known is None or not isinstance(spec, dict):
        return []
    where: list[tuple[str, dict[str, Any], frozenset[str]]] = [("spec", spec, known)]
    if kind == "PodGroup":
        for name, tc in [("spec.topologyConstraint", spec.get("topologyConstraint"))]:
            if isinstance(tc, dict):
                where.append((name, tc, _KNOWN_CONSTRAINT))
        for i, sg in enumerate(
            spec.get("subGroups") or [] if isinstance(spec.get("subGroups"), list) else []
        ):
            if isinstance(sg, dict):
                where.append((f"spec.subGroups[{i}]", sg, _KNOWN_SUBGROUP))
                if isinstance(sg.get("topologyConstraint"), dict):
                    where.append(
                        (
                            f"spec.subGroups[{i}].topologyConstraint",
                            sg["topologyConstraint"],
                            _KNOWN_CONSTRAINT,
                        )
                    )
    out = []
    for path, fields, names in where:
        for f in sorted(str(k) for k in fields if k not in names):
            out.append(
                f"unknown field {path}.{f}{_suggest(f, names)}: KAI's schema has no such field; it is ignored"
            )
    return out


ANNOTATION_PREEMPTION_DELAY: Final = "kai.scheduler/preemption-delay"
ANNOTATION_STALENESS_GRACE: Final = "kai.scheduler/staleness-grace-period"


def podgroup_timings(obj: dict[str, Any]) -> tuple[int | None, int | None]:
    """A PodGroup's (preemption delay, staleness grace period) in milliseconds, None when unset.

    ``spec.preemptionDelay`` / ``spec.stalenessGracePeriod`` (Go durations), else the annotations
    ``kai.scheduler/preemption-delay`` / ``kai.scheduler/staleness-grace-period`` on the PodGroup. A
    negative grace period means "never evict as stale"; a negative delay is an error.
    """
    key = object_key(obj)
    spec = _dict(obj.get("spec"))
    annotations = _str_map(_meta(obj).get("annotations"))
    out: list[int | None] = []
    for field, annotation, negative_ok in (
        ("preemptionDelay", ANNOTATION_PREEMPTION_DELAY, False),
        ("stalenessGracePeriod", ANNOTATION_STALENESS_GRACE, True),
    ):
        raw: Any = spec.get(field)
        where = f"spec.{field}"
        if raw in (None, ""):
            raw, where = (
                annotations.get(annotation, "").strip() or None,
                f"metadata.annotations[{annotation}]",
            )
        if raw is None:
            out.append(None)
            continue
        text = raw[1:] if isinstance(raw, str) and raw[:1] in ("-", "+") else raw
        try:
            ms = 0 if text == "0" else _parse_duration_ms(text)  # Go accepts a bare 0
        except ValueError as exc:
            raise InvalidObject("PodGroup", key, where, raw, str(exc)) from None
        if isinstance(raw, str) and raw.startswith("-") and ms:
            if not negative_ok:
                raise InvalidObject("PodGroup", key, where, raw, "must not be negative")
            ms = -ms  # any negative period: never
        out.append(ms)
    return out[0], out[1]


def _subgroups(key: str, spec: dict[str, Any]) -> list[SubGroup]:
    """``spec.subGroups`` as contract records (the tree itself is checked by :class:`PodGroupUpserted`)."""
    raw = spec.get("subGroups")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidObject("PodGroup", key, "spec.subGroups", raw, "must be a list")
    out: list[SubGroup] = []
    for i, item in enumerate(raw):
        where = f"spec.subGroups[{i}]"
        if not isinstance(item, dict):
            raise InvalidObject("PodGroup", key, where, item, "must be an object")
        tc = item.get("topologyConstraint") or {}
        if not isinstance(tc, dict):
            raise InvalidObject("PodGroup", key, f"{where}.topologyConstraint", tc, "must be an object")
        for field in ("name", "parent"):
            if item.get(field) is not None and not isinstance(item.get(field), str):
                raise InvalidObject("PodGroup", key, f"{where}.{field}", item.get(field), "must be a string")
        for field in ("minMember", "minSubGroup"):
            v = item.get(field)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise InvalidObject("PodGroup", key, f"{where}.{field}", v, "must be an integer >= 0")
        values: list[str | None] = []
        for field, _ in _CONSTRAINT_FIELDS:
            v = tc.get(field)
            if v is not None and not isinstance(v, str):
                raise InvalidObject(
                    "PodGroup", key, f"{where}.topologyConstraint.{field}", v, "must be a string"
                )
            values.append(v or None)
        try:
            out.append(
                SubGroup(
                    name=item.get("name") or "",
                    parent=item.get("parent") or None,
                    min_member=item.get("minMember"),
                    min_sub_group=item.get("minSubGroup"),
                    topology=values[0],
                    required_topology_level=values[1],
                    preferred_topology_level=values[2],
                )
            )
        except ValidationError as exc:
            raise InvalidObject("PodGroup", key, where, item.get("name"), validation_message(exc)) from None
    return out


_CONSTRAINT_FIELDS: Final = (
    ("topology", ANNOTATION_TOPOLOGY),
    ("requiredTopologyLevel", ANNOTATION_TOPOLOGY_REQUIRED),
    ("preferredTopologyLevel", ANNOTATION_TOPOLOGY_PREFERRED),
)


def topology_constraint(obj: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """A PodGroup's (topology, required level, preferred level).

    ``spec.topologyConstraint`` wins; a field it leaves empty is read from KAI's workload annotations
    (``kai.scheduler/topology``, ``-required-placement``, ``-preferred-placement``) on the PodGroup.
    Levels without a topology are an error, as is a value that is not a string.
    """
    key = object_key(obj)
    raw = _dict(obj.get("spec")).get("topologyConstraint")
    if raw is not None and not isinstance(raw, dict):
        raise InvalidObject("PodGroup", key, "spec.topologyConstraint", raw, "must be an object")
    tc = raw or {}
    annotations = _str_map(_meta(obj).get("annotations"))
    values: list[str | None] = []
    for field, annotation in _CONSTRAINT_FIELDS:
        value = tc.get(field)
        if value is not None and not isinstance(value, str):
            raise InvalidObject(
                "PodGroup", key, f"spec.topologyConstraint.{field}", value, "must be a string"
            )
        if not value:
            value = annotations.get(annotation, "").strip()
        values.append(value or None)
    topology, required, preferred = values
    if topology is None and (required or preferred):
        level = required or preferred
        raise InvalidObject(
            "PodGroup",
            key,
            "spec.topologyConstraint.topology",
            None,
            f"is required with a topology level ({level!r}); set it or the {ANNOTATION_TOPOLOGY} annotation",
        )
    return topology, required, preferred


# --------------------------------------------------------------------------- topologies


def topology_upserted(obj: dict[str, Any], at_ms: int) -> TopologyUpserted:
    """Translate a KAI Topology (``kai.scheduler/v1alpha1``): ``spec.levels[].nodeLabel``, widest first."""
    name = str(_meta(obj).get("name") or "")
    levels = _dict(obj.get("spec")).get("levels")
    if not isinstance(levels, list) or not levels:
        raise InvalidObject(
            "Topology", name, "spec.levels", levels, "must be a non-empty list of {nodeLabel: ...}"
        )
    keys: list[str] = []
    aliases: dict[str, str] = {}
    for i, level in enumerate(levels):
        label = level.get("nodeLabel") if isinstance(level, dict) else None
        if not isinstance(label, str) or not label:
            raise InvalidObject("Topology", name, f"spec.levels[{i}].nodeLabel", label, "must be a label key")
        keys.append(label)
        alias = level.get("alias")
        if alias is not None:
            if not isinstance(alias, str) or not alias:
                raise InvalidObject(
                    "Topology", name, f"spec.levels[{i}].alias", alias, "must be a non-empty string"
                )
            if alias in aliases:
                raise InvalidObject(
                    "Topology", name, f"spec.levels[{i}].alias", alias, "is used by two levels"
                )
            aliases[alias] = label
    try:
        return TopologyUpserted(name=name, levels=keys, aliases=aliases, at_ms=at_ms)
    except ValidationError as exc:
        raise _fail_model("Topology", name, exc) from None


def namespace_upserted(obj: dict[str, Any], at_ms: int) -> NamespaceUpserted:
    """A Namespace: its name and labels (what affinity terms' namespaceSelector match)."""
    meta = _meta(obj)
    name = str(meta.get("name") or "")
    try:
        return NamespaceUpserted(name=name, labels=_str_map(meta.get("labels")), at_ms=at_ms)
    except ValidationError as exc:
        raise _fail_model("Namespace", name, exc) from None


def namespace_deleted(obj: dict[str, Any], at_ms: int) -> NamespaceDeleted:
    """A deleted Namespace."""
    return NamespaceDeleted(name=str(_meta(obj).get("name") or ""), at_ms=at_ms)


def csi_node_upserted(
    obj: dict[str, Any], at_ms: int, attached: list[tuple[str, str]] | None = None
) -> CSINodeUpserted:
    """A CSINode: its drivers and their ``allocatable.count`` (NodeVolumeLimits), and ``attached``, the
    (attacher, volume handle) of the node's VolumeAttachments."""
    name = str(_meta(obj).get("name") or "")
    drivers = []
    for d in _dict(obj.get("spec")).get("drivers") or []:
        d = _dict(d)
        count = _dict(d.get("allocatable")).get("count")
        drivers.append({"name": str(d.get("name") or ""), "count": count})
    try:
        return CSINodeUpserted.model_validate(
            {
                "name": name,
                "drivers": drivers,
                "attached": [{"driver": d, "handle": h} for d, h in sorted(set(attached or []))],
                "at_ms": at_ms,
            }
        )
    except ValidationError as exc:
        raise _fail_model("CSINode", name, exc) from None


def csi_node_deleted(obj: dict[str, Any], at_ms: int) -> CSINodeDeleted:
    """A deleted CSINode."""
    return CSINodeDeleted(name=str(_meta(obj).get("name") or ""), at_ms=at_ms)


def topology_deleted(obj: dict[str, Any], at_ms: int) -> TopologyDeleted:
    """A deleted Topology."""
    return TopologyDeleted(name=str(_meta(obj).get("name") or ""), at_ms=at_ms)


def podgroup_deleted(obj: dict[str, Any], at_ms: int) -> PodGroupDeleted:
    """A deleted PodGroup."""
    meta = _meta(obj)
    return PodGroupDeleted(
        name=str(meta.get("name") or ""), namespace=str(meta.get("namespace") or ""), at_ms=at_ms
    )


# --------------------------------------------------------------------------- pods


def pod_group_annotation(obj: dict[str, Any]) -> str | None:
    """The PodGroup a pod names through KAI's ``pod-group-name`` annotation, if any."""
    value = _str_map(_meta(obj).get("annotations")).get(ANNOTATION_POD_GROUP)
    return value or None


@dataclass(frozen=True, slots=True)
class _Totals:
    cpu: int = 0
    memory: int = 0
    gpus: int = 0
    ext: tuple[tuple[str, int], ...] = ()  # extended resources, sorted by name

    def plus(self, o: _Totals) -> _Totals:
        ext = dict(self.ext)
        for k, v in o.ext:
            ext[k] = ext.get(k, 0) + v
        return _Totals(
            self.cpu + o.cpu, self.memory + o.memory, self.gpus + o.gpus, tuple(sorted(ext.items()))
        )

    def max(self, o: _Totals) -> _Totals:
        ext = dict(self.ext)
        for k, v in o.ext:
            ext[k] = max(ext.get(k, 0), v)
        return _Totals(
            max(self.cpu, o.cpu),
            max(self.memory, o.memory),
            max(self.gpus, o.gpus),
            tuple(sorted(ext.items())),
        )


def is_extended_resource(name: str) -> bool:
    """A resource carried in the ``extended`` map: a domain-qualified name (``vendor.com/thing``),
    ``hugepages-<size>``, or ``ephemeral-storage`` (a node filter only, as kube-scheduler's NodeResourcesFit
    checks it)."""
    return (
        ("/" in name and name != GPU_RESOURCE) or name.startswith("hugepages-") or name == EPHEMERAL_STORAGE
    )


def extended_amount(name: str, value: Any) -> int:
    """An extended resource quantity in engine units: bytes for hugepages and ephemeral storage, a whole
    count otherwise."""
    if name.startswith("hugepages-") or name == EPHEMERAL_STORAGE:
        return parse_bytes(value)
    milli = parse_cpu_millicores(value)
    if milli % 1000:
        raise ValueError("extended resources are whole numbers")
    return milli // 1000


def _amounts(key: str, where: str, resources: dict[str, Any]) -> _Totals:
    """cpu / memory / whole GPUs of one resource list (requests, falling back to limits per resource)."""
    requests = _dict(resources.get("requests"))
    limits = _dict(resources.get("limits"))

    def get(name: str) -> tuple[Any, str] | None:
        if name in requests:
            return requests[name], f"{where}.resources.requests[{name}]"
        if name in limits:  # the API server defaults a missing request to its limit
            return limits[name], f"{where}.resources.limits[{name}]"
        return None

    out: dict[str, int] = {"cpu": 0, "memory": 0, "gpus": 0}
    for name, parse, slot in (("cpu", parse_cpu_millicores, "cpu"), ("memory", parse_bytes, "memory")):
        got = get(name)
        if got is not None:
            try:
                out[slot] = parse(got[0])
            except ValueError as exc:
                raise InvalidObject("Pod", key, got[1], got[0], str(exc)) from None
    got = get(GPU_RESOURCE)
    if got is not None:
        try:
            milli = parse_gpu_milli(got[0])
        except ValueError as exc:
            raise InvalidObject("Pod", key, got[1], got[0], str(exc)) from None
        if milli % 1000:
            raise InvalidObject(
                "Pod", key, got[1], got[0], "must be a whole number of GPUs (use the gpu-fraction annotation)"
            )
        out["gpus"] = milli // 1000
    ext: dict[str, int] = {}
    for name in sorted(set(requests) | set(limits)):
        if name in ("cpu", "memory", GPU_RESOURCE):
            continue
        got = get(name)
        assert got is not None
        if not is_extended_resource(name):
            raise InvalidObject(
                "Pod",
                key,
                got[1],
                got[0],
                "is not a resource Hourglass knows (not an extended resource name)",
            )
        try:
            amount = extended_amount(name, got[0])
        except ValueError as exc:
            raise InvalidObject("Pod", key, got[1], got[0], str(exc)) from None
        if amount:
            ext[name] = amount
    return _Totals(out["cpu"], out["memory"], out["gpus"], tuple(sorted(ext.items())))


def _pod_level(key: str, spec: dict[str, Any], total: _Totals) -> _Totals:
    """`total` with the pod-level requests (``spec.resources``) in place of the containers' sum for the
    resources pod-level resources cover (CPU, memory, hugepages), as component-helpers ``PodRequests`` does;
    a pod-level limit without a request is the request (the API server's defaulting)."""
    level = _dict(spec.get("resources"))
    names = set(_dict(level.get("requests"))) | set(_dict(level.get("limits")))
    covered = {n for n in names if n in ("cpu", "memory") or str(n).startswith("hugepages-")}
    if not covered:
        return total
    only = {
        part: {n: v for n, v in _dict(level.get(part)).items() if n in covered}
        for part in ("requests", "limits")
    }
    given = _amounts(key, "spec.resources", only)
    ext = dict(total.ext) | dict(given.ext)
    return _Totals(
        given.cpu if "cpu" in covered else total.cpu,
        given.memory if "memory" in covered else total.memory,
        total.gpus,
        tuple(sorted(ext.items())),
    )


def pod_requests(obj: dict[str, Any]) -> PodRequests:
    """A pod's effective request, as KAI computes it (kai-spec §2.5, §2.6).

    max(sum of containers and sidecars, each init container plus the sidecars started before it), or the
    pod-level request where ``spec.resources`` sets one (CPU, memory, hugepages), + overhead, per resource (a sidecar is an init container with ``restartPolicy: Always``); whole GPUs from
    ``nvidia.com/gpu``; shared GPUs from the ``gpu-fraction`` / ``gpu-memory`` /
    ``gpu-fraction-num-devices`` annotations.
    """
    key = object_key(obj)
    spec = _dict(obj.get("spec"))
    total = _Totals()
    for i, c in enumerate(spec.get("containers") or []):
        total = total.plus(_amounts(key, f"spec.containers[{i}]", _dict(_dict(c).get("resources"))))
    # Init containers as the kubelet and kube-scheduler sum them (component-helpers resource
    # AggregateContainerRequests): a sidecar (restartPolicy Always) keeps running, so it adds to the
    # pod's total and to every init container started after it; the pod needs the larger of that total
    # and its largest init-time peak.
    sidecars = _Totals()
    peak = _Totals()
    for i, c in enumerate(spec.get("initContainers") or []):
        c = _dict(c)
        amounts = _amounts(key, f"spec.initContainers[{i}]", _dict(c.get("resources")))
        if c.get("restartPolicy") == "Always":
            total = total.plus(amounts)
            sidecars = sidecars.plus(amounts)
            peak = peak.max(sidecars)
        else:
            peak = peak.max(amounts.plus(sidecars))
    total = total.max(peak)
    total = _pod_level(key, spec, total)
    overhead = _dict(spec.get("overhead"))
    if overhead:
        total = total.plus(_amounts(key, "spec.overhead", {"requests": overhead}))

    annotations = _str_map(_meta(obj).get("annotations"))
    fraction: int | None = None
    memory_mib: int | None = None
    devices = 1
    where = "metadata.annotations"
    if ANNOTATION_GPU_FRACTION in annotations:
        raw = annotations[ANNOTATION_GPU_FRACTION]
        field = f"{where}[{ANNOTATION_GPU_FRACTION}]"
        try:
            fraction = parse_fraction_milli(raw)
        except ValueError as exc:
            raise InvalidObject("Pod", key, field, raw, str(exc)) from None
        if total.gpus:
            raise InvalidObject(
                "Pod", key, field, raw, f"cannot be combined with {GPU_RESOURCE}={total.gpus}"
            )
    if ANNOTATION_GPU_MEMORY in annotations:
        raw = annotations[ANNOTATION_GPU_MEMORY]
        field = f"{where}[{ANNOTATION_GPU_MEMORY}]"
        if not raw.isdigit() or int(raw) == 0:
            raise InvalidObject("Pod", key, field, raw, "must be a positive integer number of MiB")
        if fraction is not None:
            raise InvalidObject("Pod", key, field, raw, f"cannot be combined with {ANNOTATION_GPU_FRACTION}")
        if total.gpus:
            raise InvalidObject(
                "Pod", key, field, raw, f"cannot be combined with {GPU_RESOURCE}={total.gpus}"
            )
        memory_mib = int(raw)
    if ANNOTATION_GPU_FRACTION_DEVICES in annotations:
        raw = annotations[ANNOTATION_GPU_FRACTION_DEVICES]
        field = f"{where}[{ANNOTATION_GPU_FRACTION_DEVICES}]"
        if not raw.isdigit() or int(raw) == 0:
            raise InvalidObject("Pod", key, field, raw, "must be a positive integer")
        if fraction is None and memory_mib is None:
            raise InvalidObject("Pod", key, field, raw, "needs a gpu-fraction or gpu-memory annotation")
        devices = int(raw)
    try:
        return PodRequests(
            cpu_millicores=total.cpu,
            memory_bytes=total.memory,
            gpus=total.gpus,
            gpu_fraction_milli=fraction,
            gpu_fraction_devices=devices,
            gpu_memory_mib=memory_mib,
            extended=dict(total.ext),
        )
    except ValidationError as exc:
        raise _fail_model("Pod", key, exc) from None


# FIELD_NODE_NAME (from ingest.events): the key of a matchFields metadata.name requirement


def _affinity(key: str, spec: dict[str, Any]) -> tuple[list[NodeSelectorTerm], list[str] | None]:
    """Required node affinity as kube-scheduler reads it: terms ORed, each term's ``matchExpressions`` and
    ``matchFields`` ANDed, an empty term dropped (and no term left matching no node).

    ``matchFields`` (``metadata.name In`` / ``NotIn``) become allowed nodes when that says the same (every
    term names nodes only, with ``In``); otherwise they stay in their term as a node-name requirement.
    """
    required = _dict(
        _dict(_dict(spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )
    given = required.get("nodeSelectorTerms") or []
    parsed: list[tuple[list[dict[str, Any]], list[dict[str, Any]], str]] = []  # (fields, expressions, where)
    for i, term in enumerate(given):
        term = _dict(term)
        where = f"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
        fields = []
        for f in term.get("matchFields") or []:
            f = _dict(f)
            if f.get("key") != "metadata.name" or f.get("operator") not in ("In", "NotIn"):
                raise InvalidObject(
                    "Pod",
                    key,
                    f"{where}.matchFields",
                    f,
                    "only 'metadata.name In / NotIn [...]' is supported",
                )
            fields.append(
                {
                    "key": FIELD_NODE_NAME,
                    "operator": f["operator"],
                    "values": [str(v) for v in f.get("values") or []],
                }
            )
        exprs = [
            {
                "key": str(_dict(e).get("key", "")),
                "operator": _dict(e).get("operator"),
                "values": [str(v) for v in _dict(e).get("values") or []],
            }
            for e in term.get("matchExpressions") or []
        ]
        if fields or exprs:  # kube-scheduler drops an empty term
            parsed.append((fields, exprs, where))
    if given and not parsed:
        return [], []  # every term empty: no node matches
    if parsed and all(
        not exprs and all(f["operator"] == "In" for f in fields) for fields, exprs, _ in parsed
    ):
        # Terms that only name nodes: the union over terms of the nodes each term allows.
        allowed: set[str] = set()
        for fields, _, _ in parsed:
            names = set(fields[0]["values"])
            for f in fields[1:]:
                names &= set(f["values"])
            allowed |= names
        return [], sorted(allowed)
    terms: list[NodeSelectorTerm] = []
    for fields, exprs, where in parsed:
        try:
            terms.append(
                NodeSelectorTerm(
                    match_expressions=[NodeSelectorRequirement.model_validate(r) for r in exprs + fields]
                )
            )
        except ValidationError as exc:
            raise InvalidObject("Pod", key, where, exprs + fields, validation_message(exc)) from None
    return terms, None


def _tolerations(key: str, spec: dict[str, Any]) -> list[Toleration]:
    out: list[Toleration] = []
    for i, t in enumerate(spec.get("tolerations") or []):
        t = _dict(t)
        try:
            out.append(
                Toleration(
                    key=str(t.get("key") or ""),
                    operator=t.get("operator") or "Equal",
                    value=str(t.get("value") or ""),
                    effect=t.get("effect") or None,
                )
            )
        except ValidationError as exc:
            raise InvalidObject("Pod", key, f"spec.tolerations[{i}]", t, validation_message(exc)) from None
    return out


def host_ports(key: str, spec: dict[str, Any]) -> list[HostPort]:
    """The ``hostPort`` of every container port that has one (what the NodePorts filter checks), sidecar
    init containers (``restartPolicy: Always``) included: they run beside the pod's containers."""
    out: list[HostPort] = []
    containers = [("spec.containers", i, c) for i, c in enumerate(spec.get("containers") or [])]
    containers += [
        ("spec.initContainers", i, c)
        for i, c in enumerate(spec.get("initContainers") or [])
        if _dict(c).get("restartPolicy") == "Always"
    ]
    for kind, i, c in containers:
        for j, port in enumerate(_dict(c).get("ports") or []):
            port = _dict(port)
            if not port.get("hostPort"):
                continue
            try:
                out.append(
                    HostPort(
                        port=port["hostPort"],
                        protocol=port.get("protocol") or "TCP",
                        host_ip=str(port.get("hostIP") or ""),
                    )
                )
            except ValidationError as exc:
                where = f"{kind}[{i}].ports[{j}]"
                raise InvalidObject("Pod", key, where, port, validation_message(exc)) from None
    return out


def _selector(s: Any) -> dict[str, Any] | None:
    """A label selector in the event contract's words; None when the spec has none (it selects no pod,
    as kube-scheduler reads a missing selector)."""
    if s is None:
        return None
    s = _dict(s)
    return {
        "match_labels": _str_map(s.get("matchLabels")),
        "match_expressions": [
            {
                "key": str(_dict(e).get("key", "")),
                "operator": _dict(e).get("operator"),
                "values": [str(v) for v in _dict(e).get("values") or []],
            }
            for e in s.get("matchExpressions") or []
        ],
    }


def _pod_terms(key: str, spec: dict[str, Any], kind: str) -> list[PodAffinityTerm]:
    """Required and preferred terms of ``podAffinity`` / ``podAntiAffinity`` (preferred ones carry a weight)."""
    block = _dict(_dict(spec.get("affinity")).get(kind))
    out: list[PodAffinityTerm] = []
    where = f"spec.affinity.{kind}"
    items = [
        (t, 0, f"{where}.requiredDuringSchedulingIgnoredDuringExecution[{i}]")
        for i, t in enumerate(block.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
    ]
    for i, w in enumerate(block.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        w = _dict(w)
        items.append(
            (
                w.get("podAffinityTerm"),
                w.get("weight", 1),
                f"{where}.preferredDuringSchedulingIgnoredDuringExecution[{i}]",
            )
        )
    for t, weight, at in items:
        t = _dict(t)
        try:
            out.append(
                PodAffinityTerm.model_validate(
                    {
                        "label_selector": _selector(t.get("labelSelector")),
                        "topology_key": str(t.get("topologyKey") or ""),
                        "namespaces": [str(n) for n in t.get("namespaces") or []],
                        "weight": weight,
                        # A null namespaceSelector differs from {} (every namespace): keep None as None.
                        "namespace_selector": None
                        if t.get("namespaceSelector") is None
                        else _selector(t.get("namespaceSelector")),
                        # matchLabelKeys / mismatchLabelKeys are not carried: kube-apiserver already merged
                        # them into labelSelector when the pod was created (merging again with labels
                        # changed since would differ from kube-scheduler, which reads the stored selector).
                    }
                )
            )
        except ValidationError as exc:
            raise InvalidObject("Pod", key, at, t, validation_message(exc)) from None
    return out


def _preferred_node_affinity(key: str, spec: dict[str, Any]) -> list[PreferredSchedulingTerm]:
    block = _dict(_dict(spec.get("affinity")).get("nodeAffinity"))
    out: list[PreferredSchedulingTerm] = []
    for i, w in enumerate(block.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        w = _dict(w)
        pref = _dict(w.get("preference"))
        try:
            out.append(
                PreferredSchedulingTerm.model_validate(
                    {
                        "weight": w.get("weight"),
                        "match_expressions": [
                            {
                                "key": str(_dict(e).get("key", "")),
                                "operator": _dict(e).get("operator"),
                                "values": [str(v) for v in _dict(e).get("values") or []],
                            }
                            for e in pref.get("matchExpressions") or []
                        ],
                    }
                )
            )
        except ValidationError as exc:
            where = f"spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
            raise InvalidObject("Pod", key, where, w, validation_message(exc)) from None
    return out


def _spread(key: str, spec: dict[str, Any]) -> list[TopologySpreadConstraint]:
    out: list[TopologySpreadConstraint] = []
    for i, c in enumerate(spec.get("topologySpreadConstraints") or []):
        c = _dict(c)
        try:
            out.append(
                TopologySpreadConstraint.model_validate(
                    {
                        "max_skew": c.get("maxSkew"),
                        "topology_key": str(c.get("topologyKey") or ""),
                        "when_unsatisfiable": c.get("whenUnsatisfiable") or "DoNotSchedule",
                        "label_selector": _selector(c.get("labelSelector")),
                        "min_domains": c.get("minDomains"),
                        "node_affinity_policy": c.get("nodeAffinityPolicy") or "Honor",
                        "node_taints_policy": c.get("nodeTaintsPolicy") or "Ignore",
                        "match_label_keys": [str(k) for k in c.get("matchLabelKeys") or []],
                    }
                )
            )
        except ValidationError as exc:
            raise InvalidObject(
                "Pod", key, f"spec.topologySpreadConstraints[{i}]", c, validation_message(exc)
            ) from None
    return out


def claim_names(obj: dict[str, Any]) -> list[str]:
    """The PersistentVolumeClaims a pod mounts (ingest resolves them into :class:`VolumeClaim`)."""
    spec = _dict(obj.get("spec"))
    out = []
    for v in spec.get("volumes") or []:
        claim = _dict(_dict(v).get("persistentVolumeClaim")).get("claimName")
        if claim:
            out.append(str(claim))
    return out


def pod_claims(obj: dict[str, Any]) -> list[tuple[str, bool]]:
    """Every claim a pod mounts, with whether it is a generic ephemeral volume's: a
    ``persistentVolumeClaim`` volume names its claim, an ``ephemeral`` one's claim is ``<pod>-<volume>``
    (``ephemeral.VolumeClaimName``)."""
    spec = _dict(obj.get("spec"))
    pod = str(_meta(obj).get("name") or "")
    out = []
    for v in spec.get("volumes") or []:
        v = _dict(v)
        claim = _dict(v.get("persistentVolumeClaim")).get("claimName")
        if claim:
            out.append((str(claim), False))
        elif isinstance(v.get("ephemeral"), dict):
            out.append((f"{pod}-{v.get('name') or ''}", True))
    return out


_DISK_SOURCES: Final = (
    ("gcePersistentDisk", "gce_pd", "pdName"),
    ("awsElasticBlockStore", "aws_ebs", "volumeID"),
    ("rbd", "rbd", "image"),
    ("iscsi", "iscsi", "iqn"),
    # Only counted by NodeVolumeLimits, under CSI migration (VolumeRestrictions does not check them).
    ("azureDisk", "azure_disk", "diskURI"),
    ("cinder", "cinder", "volumeID"),
    ("portworxVolume", "portworx", "volumeID"),
)


def inline_disks(key: str, spec: dict[str, Any]) -> list[InlineDisk]:
    """The inline disks VolumeRestrictions checks (GCE PD, AWS EBS, RBD, iSCSI volume sources) and those
    NodeVolumeLimits counts under CSI migration (GCE PD, AWS EBS, Azure Disk, Cinder, Portworx), each
    with the CSI volume it migrates to (:func:`ingest.kube.volumes.migrated_attachment`)."""
    out = []
    for i, v in enumerate(spec.get("volumes") or []):
        v = _dict(v)
        for field, kind, name_key in _DISK_SOURCES:
            src = v.get(field)
            if not isinstance(src, dict):
                continue
            raw = {
                "kind": kind,
                "name": str(src.get(name_key) or ""),
                "read_only": src.get("readOnly") is True,
            }
            if kind == "rbd":
                raw["pool"] = str(src.get("pool") or "")
                raw["monitors"] = [str(m) for m in src.get("monitors") or []]
            migrated = kube_volumes.migrated_attachment(field, src)
            if migrated is not None:
                raw["attach_driver"], raw["attach_handle"] = migrated
            elif field in kube_volumes.MIGRATED_SOURCES:
                # Its translation fails (kube-scheduler's filter errors on a node with a CSINode): the
                # driver without a handle lets the engine refuse it there.
                raw["attach_driver"] = kube_volumes.MIGRATED_SOURCES[field][1]
            try:
                out.append(InlineDisk.model_validate(raw))
            except ValidationError as exc:
                raise InvalidObject(
                    "Pod", key, f"spec.volumes[{i}].{field}", src, validation_message(exc)
                ) from None
    return out


def volume_claim(
    claim: str,
    pvc: dict[str, Any] | None,
    pv: dict[str, Any] | None,
    storage_class: dict[str, Any] | None,
    volumes: list[dict[str, Any]] | None = None,
) -> VolumeClaim:
    """A claim as the engine needs it (:func:`ingest.kube.volumes.claim`): bound to a volume with this node
    affinity and these zone labels, or unbound with this binding mode; an unbound ``WaitForFirstConsumer``
    claim also lists the ``volumes`` (every PersistentVolume) it could bind to and where its class
    provisions. A missing claim counts as unbound Immediate: kube-scheduler waits for it too."""
    return VolumeClaim.model_validate(kube_volumes.claim(claim, pvc, pv, storage_class, volumes))


def dra_not_supported(key: str, claims: object) -> InvalidObject:
    """The refusal of a pod that claims devices through DRA (``spec.resourceClaims``) whose claims were not
    resolved: reading the pod without them would bind it as a CPU-only pod on a node that may have no such
    device. Ingest resolves whole-GPU claims against the cluster (:mod:`ingest.kube.dra`) and refuses the
    other shapes itself; an offline translation (``hourglass check``) has no cluster to resolve them in.
    Event reason ``DRANotSupported``, dead-letter code ``dra_not_supported``."""
    err = InvalidObject(
        "Pod",
        key,
        "spec.resourceClaims",
        claims,
        "claims devices through Dynamic Resource Allocation, and its ResourceClaims were not resolved against"
        " the cluster here; the pod stays pending",
    )
    err.reason = "DRANotSupported"
    err.reason_code = "dra_not_supported"
    return err


def pod_submitted(
    obj: dict[str, Any],
    pod_group: str,
    at_ms: int,
    volumes: list[VolumeClaim] | None = None,
    dra: dict[str, int] | None = None,
) -> PodSubmitted:
    """Translate a pod that asks for placement; ``pod_group`` comes from the annotation or the pod grouper.

    ``volumes`` are its claims as ingest resolved them (:func:`volume_claim`); ``dra`` the extended
    resources its ResourceClaims translate to (:mod:`ingest.kube.dra`); a pod with ``spec.resourceClaims``
    and no ``dra`` is refused."""
    meta = _meta(obj)
    key = object_key(obj)
    labels = _str_map(meta.get("labels"))
    spec = _dict(obj.get("spec"))
    queue = labels.get(LABEL_QUEUE) or None
    if queue is not None and (problem := check_queue_name(queue)):
        raise InvalidObject("Pod", key, f"metadata.labels[{LABEL_QUEUE}]", queue, problem)
    task_priority = 0
    if LABEL_TASK_PRIORITY in labels:
        raw = labels[LABEL_TASK_PRIORITY]
        if not re.fullmatch(r"[+-]?\d+", raw):
            raise InvalidObject(
                "Pod", key, f"metadata.labels[{LABEL_TASK_PRIORITY}]", raw, "must be an integer"
            )
        task_priority = int(raw)
    claims = spec.get("resourceClaims")
    if claims and dra is None:
        raise dra_not_supported(key, claims)
    requests = pod_requests(obj)
    if dra:
        extended = dict(requests.extended)
        for res, n in sorted(dra.items()):
            extended[res] = extended.get(res, 0) + n
        requests = requests.model_copy(update={"extended": dict(sorted(extended.items()))})
    terms, allowed = _affinity(key, spec)
    try:
        return PodSubmitted(
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            at_ms=at_ms,
            pod_group=pod_group,
            queue=queue,
            requests=requests,
            node_selector=_str_map(spec.get("nodeSelector")),
            allowed_nodes=allowed,
            node_affinity=terms,
            tolerations=_tolerations(key, spec),
            task_priority=task_priority,
            created_at_ms=creation_ms(obj),
            scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
            labels=labels,
            host_ports=host_ports(key, spec),
            pod_affinity=_pod_terms(key, spec, "podAffinity"),
            pod_anti_affinity=_pod_terms(key, spec, "podAntiAffinity"),
            preferred_node_affinity=_preferred_node_affinity(key, spec),
            topology_spread=_spread(key, spec),
            scheduling_gates=[str(_dict(g).get("name") or "") for g in spec.get("schedulingGates") or []],
            volumes=volumes or [],
            disks=inline_disks(key, spec),
        )
    except ValidationError as exc:
        raise _fail_model("Pod", key, exc) from None


def foreign_pod(
    obj: dict[str, Any], at_ms: int, volumes: list[VolumeClaim] | None = None
) -> ForeignPodUpserted:
    """A pod bound by another scheduler: only what the engine needs (requests, node, labels, ports, its
    inter-pod terms — kube-scheduler enforces an existing pod's required anti-affinity on newcomers — its
    claims ``volumes`` as ingest resolved them, inline disks)."""
    meta = _meta(obj)
    key = object_key(obj)
    spec = _dict(obj.get("spec"))
    try:
        return ForeignPodUpserted(
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            at_ms=at_ms,
            node=str(spec.get("nodeName") or ""),
            requests=pod_requests(obj),
            labels=_str_map(meta.get("labels")),
            host_ports=host_ports(key, spec),
            releasing=bool(meta.get("deletionTimestamp")),
            pod_affinity=_pod_terms(key, spec, "podAffinity"),
            pod_anti_affinity=_pod_terms(key, spec, "podAntiAffinity"),
            volumes=volumes or [],
            disks=inline_disks(key, spec),
        )
    except ValidationError as exc:
        raise _fail_model("Pod", key, exc) from None


@dataclass(frozen=True, slots=True)
class PodView:
    """What the lifecycle events need from a pod: where it is bound and how far it got.

    ``node`` is ``spec.nodeName``; ``releasing`` is a set ``deletionTimestamp`` on a bound pod that
    has not finished; ``finished`` is the terminal phase (Succeeded / Failed) or None.
    """

    node: str | None
    releasing: bool
    finished: str | None


def pod_view(obj: dict[str, Any]) -> PodView:
    """The lifecycle facts of a pod (kai-spec §2.6)."""
    node = _dict(obj.get("spec")).get("nodeName") or None
    phase = _dict(obj.get("status")).get("phase")
    finished = phase if phase in ("Succeeded", "Failed") else None
    releasing = bool(_meta(obj).get("deletionTimestamp")) and node is not None and finished is None
    return PodView(node=str(node) if node else None, releasing=releasing, finished=finished)


def pod_deleted(namespace: str, name: str, at_ms: int) -> PodDeleted:
    """A pod that is gone from the API server."""
    return PodDeleted(name=name, namespace=namespace, at_ms=at_ms)
