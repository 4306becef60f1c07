"""The event schema: the contract between ingest and every other part of Hourglass.

Every input to the scheduler is one of the events below, serialised as compact
JSON with sorted keys (:func:`dump_event`) and read back with
:func:`parse_event`, which turns any bad input into an :class:`EventError`
carrying a machine-readable ``reason_code`` for the dead-letter log.

Conventions
-----------
* Units are exact integers: milli-GPU (0.5 GPU = 500), CPU millicores, memory
  bytes, GPU memory MiB. Times are integer milliseconds of *logical* time
  (``at_ms``, ``created_at_ms``), never wall-clock reads inside the engine.
* Every event carries ``v`` (schema version: 1, or 2 for an event that uses a
  field or type added in contract v2, see docs/events.md "Contract v2"), ``type`` (the
  discriminator), ``uid`` (the object's uid, used as the Kafka key) and
  ``at_ms`` (when the event happened, >= 0).
* ``uid`` may be omitted (or empty): it then defaults to the object's natural
  key, ``name`` for cluster-scoped objects (nodes, queues) and
  ``f"{namespace}/{name}"`` for namespaced ones (pods, pod groups). Producers
  that know the Kubernetes ``metadata.uid`` may use it instead, but must then
  use it for every event of that object so its events stay in one partition.
* Models are frozen, reject unknown fields and validate strictly (no ``"5"``
  for 5, no 5.0 for an int).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Final, Literal, Self, cast

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from ingest.fastdecode import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    LABEL_KEY,
    LABEL_VALUE,
    LABEL_VALUE_OR_KEY,
    LIMITS,
    SAFE_TEXT,
    FastEvent,
    FastPath,
)

__all__ = [
    "DEFAULT_MAX_PODS",
    "DEFAULT_QUEUE_PRIORITY",
    "DEFAULT_SCHEDULER_NAME",
    "EPHEMERAL_STORAGE",
    "EVENT_TYPES",
    "FAST_PATH",
    "LIMITS",
    "SUPPORTED_VERSIONS",
    "AttachedVolume",
    "CSIDriverLimit",
    "CSINodeDeleted",
    "CSINodeUpserted",
    "CandidateVolume",
    "ClockTick",
    "Event",
    "EventBase",
    "EventError",
    "FastEvent",
    "ForeignPodUpserted",
    "HostPort",
    "InlineDisk",
    "LabelSelector",
    "LabelSelectorRequirement",
    "NodeRemoved",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "NodeUpserted",
    "PodAffinityTerm",
    "PodBound",
    "PodDeleted",
    "PodFinished",
    "PodGroupDeleted",
    "PodGroupUpserted",
    "PodReleasing",
    "PodRequests",
    "PodSubmitted",
    "PodUngated",
    "PodVolumesChanged",
    "PreferredSchedulingTerm",
    "QueueDeleted",
    "QueueResource",
    "QueueResources",
    "QueueUpserted",
    "ReasonCode",
    "SubGroup",
    "Taint",
    "Toleration",
    "TopologyDeleted",
    "TopologySpreadConstraint",
    "TopologyUpserted",
    "VolumeClaim",
    "dump_event",
    "event_key",
    "parse_event",
    "subgroup_problem",
]

SUPPORTED_VERSIONS: Final = (1, 2)
DEFAULT_SCHEDULER_NAME: Final = "hourglass"
DEFAULT_QUEUE_PRIORITY: Final = 100  # KAI DefaultQueuePriority
DEFAULT_MAX_PODS: Final = 110  # kubelet default

_INT64_MAX = 2**63 - 1
_DNS1123_SUBDOMAIN = DNS1123_SUBDOMAIN


def _check_dns1123(name: str) -> str:
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
        raise ValueError(
            f"{name!r} is not a valid DNS-1123 name (lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit, at most 253 characters)"
        )
    return name


def _check(rx: re.Pattern[str], what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if rx.fullmatch(value) is None:
            raise ValueError(f"{value[:80]!r} is not {what}")
        return value

    return check


_LABEL_SYNTAX = "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
_DNS_LABEL = "a valid DNS-1123 label (lowercase letters, digits and '-', starting and ending with one)"
_QUALIFIED = f"a valid label key (an optional DNS-1123 prefix and '/', then a name of {_LABEL_SYNTAX})"
_TEXT = "text without control characters, bidirectional overrides or lone surrogates"

# Quantities: each has the range LIMITS gives it (ingest/fastdecode.py, docs/reliability.md).
NonNegInt = Annotated[int, Field(ge=0, le=_INT64_MAX)]
TimeMs = Annotated[int, Field(ge=0, le=LIMITS.TIME_MS)]
Cpu = Annotated[int, Field(ge=0, le=LIMITS.CPU_MILLI)]
Memory = Annotated[int, Field(ge=0, le=LIMITS.MEMORY_BYTES)]
Gpus = Annotated[int, Field(ge=0, le=LIMITS.GPUS)]
GpuMemory = Annotated[int, Field(gt=0, le=LIMITS.GPU_MEMORY_MIB)]
Quota = Annotated[int, Field(ge=0, le=LIMITS.QUOTA)]
Int32 = Annotated[int, Field(ge=LIMITS.INT32_MIN, le=LIMITS.INT32_MAX)]
Count = Annotated[int, Field(ge=1, le=LIMITS.INT32_MAX)]
Count0 = Annotated[int, Field(ge=0, le=LIMITS.INT32_MAX)]
# Names: as the Kubernetes API server validates them.
Name = Annotated[str, Field(min_length=1, max_length=LIMITS.NAME), AfterValidator(_check_dns1123)]
Namespace = Annotated[
    str, Field(min_length=1, max_length=LIMITS.LABEL), AfterValidator(_check(DNS1123_LABEL, _DNS_LABEL))
]
QueueName = Name
LabelKey = Annotated[
    str,
    Field(min_length=1, max_length=LIMITS.NAME + 1 + LIMITS.LABEL),
    AfterValidator(_check(LABEL_KEY, _QUALIFIED)),
]
FIELD_NODE_NAME: Final = "@metadata.name"
"""The key of a node-affinity requirement translated from a ``matchFields`` ``metadata.name`` term: a node
field, not a label, so it cannot collide with a label key (``@`` is not legal in one)."""
_check_label_key = _check(LABEL_KEY, _QUALIFIED)
RequirementKey = Annotated[
    str,
    Field(min_length=1, max_length=LIMITS.NAME + 1 + LIMITS.LABEL),
    AfterValidator(lambda k: k if k == FIELD_NODE_NAME else _check_label_key(k)),
]
LabelValue = Annotated[
    str,
    Field(max_length=LIMITS.LABEL),
    AfterValidator(_check(LABEL_VALUE, f"a valid label value ({_LABEL_SYNTAX}, or empty)")),
]
NamedValue = Annotated[LabelValue, Field(min_length=1)]  # a label value used as a name (subgroups, pools)
Text = Annotated[str, Field(max_length=LIMITS.TEXT), AfterValidator(_check(SAFE_TEXT, _TEXT))]
Word = Annotated[str, Field(min_length=1, max_length=LIMITS.TEXT), AfterValidator(_check(SAFE_TEXT, _TEXT))]
Uid = Annotated[str, Field(max_length=LIMITS.UID), AfterValidator(_check(SAFE_TEXT, _TEXT))]
Labels = dict[LabelKey, LabelValue]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
_RESOURCE_NAME = re.compile(
    r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?|hugepages-[0-9A-Za-z]+)"
)
_CORE_RESOURCES: Final = frozenset({"cpu", "memory", "nvidia.com/gpu", "pods"})
EPHEMERAL_STORAGE: Final = "ephemeral-storage"
"""The one unqualified resource carried among the extended ones (bytes): a node filter like any of them,
never quota (kube-scheduler's NodeResourcesFit checks it against allocatable)."""


def _check_resource_name(name: str) -> str:
    if name == EPHEMERAL_STORAGE:
        return name
    if name in _CORE_RESOURCES:
        raise ValueError(f"{name!r} has its own field; extended resources are the others")
    if len(name) > 253 or not _RESOURCE_NAME.fullmatch(name):
        raise ValueError(
            f"{name!r} is not an extended resource name (domain/name, e.g. nvidia.com/mig-1g.10gb, or "
            "hugepages-<size>)"
        )
    return name


ResourceName = Annotated[str, AfterValidator(_check_resource_name)]


class _Record(BaseModel):
    """Shared configuration: immutable, no unknown fields, no type coercion."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


def _v2_present(value: Any) -> bool:
    """Whether a v2 field carries content: anything but None and empty collections / strings. An integer 0
    is content (a ``min_sub_group`` or grace period of 0 means something); every v2 field defaults to None
    or an empty collection, so no v1 event ever holds one."""
    return bool(value) or (isinstance(value, int) and not isinstance(value, bool))


class EventBase(_Record):
    """Fields every event carries. Concrete events add ``type`` and their own fields.

    ``V2_FIELDS`` names the fields contract v2 added to a v1 event type (empty ones are left out of the
    serialised event, so a v1 event reads and writes exactly as before); ``V2_ONLY`` marks event types that
    exist only in v2. ``v`` defaults to the lowest version that can carry the event.
    """

    V2_FIELDS: ClassVar[frozenset[str]] = frozenset()
    V2_ONLY: ClassVar[bool] = False

    v: Literal[1, 2] = 1
    uid: Uid = ""
    at_ms: TimeMs

    @model_validator(mode="before")
    @classmethod
    def _version(cls, data: Any) -> Any:
        """Default ``v`` to 2 when the event uses v2; reject v2 content in an event that says v 1."""
        if not isinstance(data, dict) or not (cls.V2_FIELDS or cls.V2_ONLY or "requests" in data):
            return data
        used = sorted(k for k in cls.V2_FIELDS if _v2_present(data.get(k)))
        requests = data.get("requests")
        if (isinstance(requests, dict) and requests.get("extended")) or (
            isinstance(requests, PodRequests) and requests.extended
        ):
            used.append("requests.extended")
        if cls.V2_ONLY:
            used.insert(0, f"type {data.get('type', '?')}")
        if not used:
            return data
        if "v" not in data:
            return {**data, "v": 2}
        if data["v"] == 1:
            raise ValueError(f"{', '.join(used)} needs event contract version 2 (the event says v 1)")
        return data

    @model_validator(mode="before")
    @classmethod
    def _default_uid(cls, data: Any) -> Any:
        """Default a missing or empty ``uid`` to the object's natural key (see module doc)."""
        if not isinstance(data, dict) or data.get("uid") or not isinstance(data.get("name"), str):
            return data
        namespace = data.get("namespace")
        uid = f"{namespace}/{data['name']}" if isinstance(namespace, str) else data["name"]
        return {**data, "uid": uid}


# --------------------------------------------------------------------------- nodes


class Taint(_Record):
    """A node taint; pods need a matching :class:`Toleration` to land on the node."""

    key: LabelKey
    value: LabelValue = ""
    effect: TaintEffect


class NodeUpserted(EventBase):
    """A node appeared or changed. Carries allocatable capacity, not capacity."""

    type: Literal["NodeUpserted"] = "NodeUpserted"
    name: Name
    cpu_millicores: Cpu
    memory_bytes: Memory
    gpus: Gpus = 0
    # Per device; None when the node does not advertise it (label nvidia.com/gpu.memory missing).
    gpu_memory_mib: GpuMemory | None = None
    gpu_model: Text | None = None
    max_pods: Annotated[int, Field(ge=0, le=LIMITS.MAX_PODS)] = DEFAULT_MAX_PODS
    labels: Labels = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    ready: bool = True
    unschedulable: bool = False
    # v2: allocatable extended resources (nvidia.com/mig-1g.10gb, amd.com/gpu, rdma/ib, hugepages-2Mi in
    # bytes, ...) by resource name.
    extended: dict[ResourceName, Annotated[int, Field(ge=0, le=LIMITS.EXTENDED)]] = Field(
        default_factory=dict
    )

    V2_FIELDS: ClassVar[frozenset[str]] = frozenset({"extended"})


class NodeRemoved(EventBase):
    """A node left the cluster."""

    type: Literal["NodeRemoved"] = "NodeRemoved"
    name: Name


# --------------------------------------------------------------------------- queues


class QueueResource(_Record):
    """One resource's entitlement in a queue, in engine units.

    Units: milli-GPU for ``gpu``, millicores for ``cpu``, bytes for ``memory``.
    ``quota`` (KAI "deserved") has no default on purpose: a queue that states a
    resource must say whether its quota is 0 or unlimited (None).
    ``limit`` None means no cap. ``over_quota_weight`` 0 means the queue gets no
    share of capacity left over after quotas.
    """

    quota: Quota | None
    limit: Quota | None = None
    over_quota_weight: Annotated[float, Field(ge=0, le=LIMITS.WEIGHT, allow_inf_nan=False)] = 1.0

    @model_validator(mode="after")
    def _quota_within_limit(self) -> Self:
        if self.quota is not None and self.limit is not None and self.quota > self.limit:
            raise ValueError(f"quota {self.quota} exceeds limit {self.limit}")
        return self


class QueueResources(_Record):
    """Per-resource entitlements of a queue.

    Defaults for a resource the queue does not mention:

    * ``gpu``: quota 0, no limit, weight 1 -- KAI's Helm ``default-queue``
      (quota 0, limit -1, weight 1): no guarantee, may borrow idle GPUs.
    * ``cpu`` / ``memory``: quota unlimited, no limit, weight 1, so a queue that
      only speaks about GPUs is never held back by CPU or memory accounting.

    These are trace-friendly defaults. A watcher translating a real KAI Queue
    must map the CR's explicit values itself (``-1`` -> None; KAI treats an
    *unset* limit as a hard cap of 0, see kai-spec §2.1).
    """

    gpu: QueueResource = Field(default_factory=lambda: QueueResource(quota=0))
    cpu: QueueResource = Field(default_factory=lambda: QueueResource(quota=None))
    memory: QueueResource = Field(default_factory=lambda: QueueResource(quota=None))


class QueueUpserted(EventBase):
    """A queue (KAI Queue CRD) was created or changed. Only leaf queues hold jobs.

    v2: ``node_pool`` is its ``kai.scheduler/node-pool`` label: the one scheduling shard that sees it.
    """

    type: Literal["QueueUpserted"] = "QueueUpserted"
    name: QueueName
    parent: QueueName | None = None
    priority: Int32 = DEFAULT_QUEUE_PRIORITY
    display_name: Text | None = None
    resources: QueueResources = Field(default_factory=QueueResources)
    preempt_min_runtime_ms: TimeMs | None = None
    reclaim_min_runtime_ms: TimeMs | None = None
    node_pool: NamedValue | None = None

    # Written only when set, so a queue without the label serialises as before the field existed.
    V2_FIELDS: ClassVar[frozenset[str]] = frozenset({"node_pool"})

    @model_validator(mode="after")
    def _not_own_parent(self) -> Self:
        if self.parent == self.name:
            raise ValueError(f"queue {self.name!r} cannot be its own parent")
        return self


class QueueDeleted(EventBase):
    """A queue was deleted."""

    type: Literal["QueueDeleted"] = "QueueDeleted"
    name: QueueName


# --------------------------------------------------------------------------- topologies


class TopologyUpserted(EventBase):
    """(v2) A KAI Topology (``kai.scheduler/v1alpha1``) was created or changed.

    ``levels`` are node-label keys from the widest domain to the narrowest (e.g. zone, block, rack,
    ``kubernetes.io/hostname``): a node's domain at level *i* is its values of levels 0..i.
    """

    V2_ONLY: ClassVar[bool] = True

    type: Literal["TopologyUpserted"] = "TopologyUpserted"
    name: Name
    levels: list[LabelKey] = Field(min_length=1, max_length=LIMITS.LIST)
    # KAI's levels[].alias: alias -> the level's node-label key; constraints may name a level by it.
    aliases: dict[NamedValue, LabelKey] = Field(default_factory=dict, max_length=LIMITS.LIST)

    V2_FIELDS: ClassVar[frozenset[str]] = frozenset({"aliases"})  # left out when empty: bytes unchanged

    @model_validator(mode="after")
    def _distinct_levels(self) -> Self:
        seen: set[str] = set()
        for level in self.levels:
            if level in seen:
                raise ValueError(f"topology {self.name!r} lists level {level!r} twice")
            seen.add(level)
        for alias, label in sorted(self.aliases.items()):
            if label not in seen:
                raise ValueError(
                    f"topology {self.name!r}: alias {alias!r} names {label!r}, which is not a level"
                )
            if alias in seen and alias != label:
                raise ValueError(f"topology {self.name!r}: alias {alias!r} is another level's node label")
        return self


class TopologyDeleted(EventBase):
    """(v2) A Topology was deleted."""

    V2_ONLY: ClassVar[bool] = True

    type: Literal["TopologyDeleted"] = "TopologyDeleted"
    name: Name


# --------------------------------------------------------------------------- pod groups


class SubGroup(_Record):
    """One entry of KAI's ``spec.subGroups`` (contract v2, in :class:`PodGroupUpserted`).

    A subgroup that another one names as ``parent`` is a *SubGroupSet* (structural: ``min_sub_group`` of its
    direct children must be ready, all of them by default); the others are *PodSets*, the gangs pods join
    through the pod label ``kai.scheduler/subgroup-name``, each with ``min_member`` pods (KAI uses
    ``max(minMember, 1)``). ``min_member`` and ``min_sub_group`` are mutually exclusive, as in KAI's CRD. The
    topology fields are the subgroup's own ``topologyConstraint``, nested in its parent's.
    """

    name: NamedValue
    parent: NamedValue | None = None
    min_member: Count0 | None = None
    min_sub_group: Count0 | None = None
    topology: Name | None = None
    required_topology_level: LabelKey | None = None
    preferred_topology_level: LabelKey | None = None

    @model_validator(mode="after")
    def _one_minimum(self) -> Self:
        if self.min_member is not None and self.min_sub_group is not None:
            raise ValueError(f"subgroup {self.name!r}: min_member and min_sub_group are mutually exclusive")
        if self.topology is None and (self.required_topology_level or self.preferred_topology_level):
            raise ValueError(
                f"subgroup {self.name!r}: a required or preferred topology level needs a topology"
            )
        return self


def subgroup_problem(subgroups: list[SubGroup], min_sub_group: int | None) -> str | None:
    """What is wrong with a PodGroup's subgroup tree (KAI's webhook rules), or None.

    Duplicate names, a parent that is not a subgroup, a parent chain that loops, ``min_sub_group`` on a
    subgroup without children (or more than it has). A ``min_member`` on a subgroup with children is
    ignored, as KAI ignores it (its own Grove grouper writes 0 there).
    """
    if min_sub_group is not None and not subgroups:
        return "min_sub_group needs subgroups"
    names: dict[str, SubGroup] = {}
    for sg in subgroups:
        if sg.name in names:
            return f"subgroup {sg.name!r} is listed twice"
        names[sg.name] = sg
    children: dict[str | None, list[str]] = {}
    for sg in subgroups:
        if sg.parent is not None and sg.parent not in names:
            return (
                f"subgroup {sg.name!r} names parent {sg.parent!r}, which is not a subgroup of this PodGroup"
            )
        children.setdefault(sg.parent, []).append(sg.name)
    for sg in subgroups:
        seen = [sg.name]
        cur = sg.parent
        while cur is not None:
            if cur in seen:
                return f"subgroups {' -> '.join([*seen, cur])} form a cycle"
            seen.append(cur)
            cur = names[cur].parent
    for owner, min_sub, label in [(None, min_sub_group, "the PodGroup")] + [
        (sg.name, sg.min_sub_group, f"subgroup {sg.name!r}") for sg in subgroups
    ]:
        kids = children.get(owner, [])
        if min_sub is not None and (not kids or min_sub > len(kids)):
            return f"{label} has min_sub_group {min_sub} but {len(kids)} child subgroup(s)"
    return None


class PodGroupUpserted(EventBase):
    """A pod group (gang) was created or changed.

    ``priority`` is the resolved PriorityClass value when the producer knows it;
    None lets the state fold resolve ``priority_class`` (KAI falls back to the
    global default class, then 50). ``preemptible`` None means "derive": a job
    is preemptible iff its priority < 100 (kai-spec §2.4).

    v2: ``k8s_uid`` and ``node_pool`` are the PodGroup object's ``metadata.uid`` and its
    ``kai.scheduler/node-pool`` label, for KAI's metric labels. ``topology`` names a :class:`TopologyUpserted`; ``required_topology_level`` (all pods within one
    domain of that level) and ``preferred_topology_level`` (try one domain of that level first) are level
    keys of it (KAI's ``spec.topologyConstraint``). A level needs a topology; a preferred level must be
    at or below the required one (checked against the topology by the engine).
    """

    type: Literal["PodGroupUpserted"] = "PodGroupUpserted"
    name: Name
    namespace: Namespace
    queue: QueueName
    min_member: Count = 1
    priority_class: Name | None = None
    priority: Int32 | None = None
    preemptible: bool | None = None
    created_at_ms: TimeMs
    topology: Name | None = None
    required_topology_level: LabelKey | None = None
    preferred_topology_level: LabelKey | None = None
    subgroups: list[SubGroup] = Field(default_factory=list, max_length=LIMITS.LIST)
    # KAI allows 0 at the root: no child subgroup has to be ready, each PodSet is a gang of its own.
    min_sub_group: Count0 | None = None
    # v2: KAI's per-PodGroup timings. ``preemption_delay_ms``: how long the group must have waited (from
    # its creation, or its last start) before it may evict others to start. ``staleness_grace_ms``: how
    # long it may stay below its minimum before its pods are evicted; negative = never; None = the
    # engine's default (SessionConfig.stale_grace_ms).
    preemption_delay_ms: TimeMs | None = None
    staleness_grace_ms: Annotated[int, Field(ge=-LIMITS.TIME_MS, le=LIMITS.TIME_MS)] | None = None
    # v2, for KAI's metrics only (kai_pod_group_evicted_pods_total's uid and nodepool labels); no decision
    # reads them: the PodGroup's metadata.uid and its kai.scheduler/node-pool label.
    k8s_uid: Word | None = None
    node_pool: NamedValue | None = None

    V2_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {
            "topology",
            "required_topology_level",
            "preferred_topology_level",
            "subgroups",
            "min_sub_group",
            "k8s_uid",
            "node_pool",
            "preemption_delay_ms",
            "staleness_grace_ms",
        }
    )

    @model_validator(mode="after")
    def _level_needs_topology(self) -> Self:
        if self.topology is None and (self.required_topology_level or self.preferred_topology_level):
            raise ValueError("a required or preferred topology level needs a topology")
        return self

    @model_validator(mode="after")
    def _subgroup_tree(self) -> Self:
        problem = subgroup_problem(self.subgroups, self.min_sub_group)
        if problem is not None:
            raise ValueError(problem)
        return self


class PodGroupDeleted(EventBase):
    """A pod group was deleted."""

    type: Literal["PodGroupDeleted"] = "PodGroupDeleted"
    name: Name
    namespace: Namespace


# --------------------------------------------------------------------------- pods


class PodRequests(_Record):
    """A pod's effective resource request (max over init containers, plus overhead).

    GPU shapes, mirroring KAI's annotations (kai-spec §2.5):

    * whole devices: ``gpus`` > 0 (``nvidia.com/gpu``);
    * fraction: ``gpu_fraction_milli`` of each of ``gpu_fraction_devices``
      devices (``gpu-fraction``, ``gpu-fraction-num-devices``);
    * GPU memory: ``gpu_memory_mib`` on each of ``gpu_fraction_devices``
      devices (``gpu-memory``).

    The three shapes are mutually exclusive.
    """

    cpu_millicores: Cpu = 0
    memory_bytes: Memory = 0
    gpus: Gpus = 0
    gpu_fraction_milli: Annotated[int, Field(ge=1, le=1000)] | None = None
    gpu_fraction_devices: Annotated[int, Field(ge=1, le=LIMITS.GPUS)] = 1
    gpu_memory_mib: GpuMemory | None = None
    # v2: extended resources by name (MIG profiles, amd.com/gpu, RDMA, hugepages in bytes, ...).
    extended: dict[ResourceName, Annotated[int, Field(gt=0, le=LIMITS.EXTENDED)]] = Field(
        default_factory=dict
    )

    @model_validator(mode="after")
    def _one_gpu_shape(self) -> Self:
        shared = "gpu_fraction_milli" if self.gpu_fraction_milli is not None else None
        if self.gpu_memory_mib is not None:
            if shared:
                raise ValueError("gpu_fraction_milli and gpu_memory_mib are mutually exclusive")
            shared = "gpu_memory_mib"
        if shared and self.gpus > 0:
            raise ValueError(f"{shared} cannot be combined with whole gpus={self.gpus}")
        if not shared and self.gpu_fraction_devices > 1:
            devices = self.gpu_fraction_devices
            raise ValueError(f"gpu_fraction_devices={devices} requires gpu_fraction_milli or gpu_memory_mib")
        return self


class NodeSelectorRequirement(_Record):
    """One ``matchExpressions`` entry of a required node-affinity term (or a ``matchFields`` one, keyed
    :data:`FIELD_NODE_NAME`)."""

    key: RequirementKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[Text] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_fit_operator(self) -> Self:
        # Same rules as the Kubernetes API server, so a bad term fails here, not at placement.
        op, n = self.operator, len(self.values)
        if op in ("In", "NotIn") and n == 0:
            raise ValueError(f"operator {op} needs at least one value")
        if op in ("Exists", "DoesNotExist") and n:
            raise ValueError(f"operator {op} takes no values")
        if op in ("Gt", "Lt") and (n != 1 or not re.fullmatch(r"[+-]?\d+", self.values[0])):
            raise ValueError(f"operator {op} needs exactly one integer value")
        return self


class NodeSelectorTerm(_Record):
    """A node-affinity term: its expressions are ANDed; a pod's terms are ORed."""

    match_expressions: list[NodeSelectorRequirement] = Field(min_length=1)


class Toleration(_Record):
    """A pod toleration. An empty ``key`` with ``Exists`` tolerates every taint."""

    key: Annotated[
        str,
        Field(max_length=LIMITS.NAME + 1 + LIMITS.LABEL),
        AfterValidator(_check(LABEL_VALUE_OR_KEY, f"empty or {_QUALIFIED}")),
    ] = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: LabelValue = ""
    effect: TaintEffect | None = None  # None matches every effect

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists takes no value")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration with an empty key needs operator Exists")
        return self


class LabelSelectorRequirement(_Record):
    """One ``matchExpressions`` entry of a label selector."""

    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[LabelValue] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_fit_operator(self) -> Self:
        n = len(self.values)
        if self.operator in ("In", "NotIn") and n == 0:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and n:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(_Record):
    """A Kubernetes label selector; everything in it is ANDed, the empty selector matches every pod."""

    match_labels: Labels = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)


class PodAffinityTerm(_Record):
    """An inter-pod (anti-)affinity term. ``weight`` 0 = required; 1..100 = preferred with that weight.
    ``namespaces`` empty = the pod's own namespace."""

    # None: the pod spec had no labelSelector, which selects no pod (kube-scheduler's labels.Nothing());
    # the empty selector {} selects every pod.
    label_selector: LabelSelector | None = Field(default_factory=LabelSelector)
    topology_key: LabelKey
    namespaces: list[Namespace] = Field(default_factory=list)
    weight: Annotated[int, Field(ge=0, le=100)] = 0
    # None: not set (with no ``namespaces`` too, the pod's own namespace); {} selects every namespace; else
    # the namespaces (NamespaceUpserted) whose labels it matches, added to ``namespaces``.
    namespace_selector: LabelSelector | None = None
    # The pod's values of these label keys are ANDed into the selector as ``key In (value)`` /
    # ``key NotIn (value)`` (kube-apiserver's merge at pod creation); a key the pod lacks adds nothing.
    match_label_keys: list[LabelKey] = Field(default_factory=list, max_length=LIMITS.LIST)
    mismatch_label_keys: list[LabelKey] = Field(default_factory=list, max_length=LIMITS.LIST)

    @model_validator(mode="after")
    def _label_keys(self) -> Self:
        """kube-apiserver's checks of ``matchLabelKeys`` / ``mismatchLabelKeys`` on an affinity term."""
        # (With no label_selector the keys add nothing, as kube-apiserver's merge skips such a term.)
        both = sorted(set(self.match_label_keys) & set(self.mismatch_label_keys))
        if both:
            raise ValueError(f"label key(s) {both} are in both match_label_keys and mismatch_label_keys")
        return self


class TopologySpreadConstraint(_Record):
    """``spec.topologySpreadConstraints[i]`` (kube-scheduler PodTopologySpread semantics)."""

    max_skew: Count
    topology_key: LabelKey
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = "DoNotSchedule"
    label_selector: LabelSelector | None = Field(default_factory=LabelSelector)  # None: selects no pod
    min_domains: Count | None = None
    node_affinity_policy: Literal["Honor", "Ignore"] = "Honor"
    node_taints_policy: Literal["Honor", "Ignore"] = "Ignore"
    # The pod's values of these label keys are ANDed into the selector (kube-scheduler's merge); a key the
    # pod lacks adds nothing, and so do all of them when there is no label_selector (it selects nothing).
    match_label_keys: list[LabelKey] = Field(default_factory=list, max_length=LIMITS.LIST)

    @model_validator(mode="after")
    def _min_domains_needs_do_not_schedule(self) -> Self:
        if self.min_domains is not None and self.when_unsatisfiable != "DoNotSchedule":
            raise ValueError("min_domains is only allowed with when_unsatisfiable DoNotSchedule")
        return self


class HostPort(_Record):
    """A ``hostPort`` a container binds on its node."""

    port: Annotated[int, Field(ge=1, le=65535)]
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    host_ip: Annotated[Text, Field(max_length=45)] = ""


class PreferredSchedulingTerm(_Record):
    """A preferred node-affinity term: its expressions ANDed, ``weight`` 1..100."""

    weight: Annotated[int, Field(ge=1, le=100)]
    match_expressions: list[NodeSelectorRequirement] = Field(min_length=1)


class CandidateVolume(_Record):
    """An available PersistentVolume an unbound ``WaitForFirstConsumer`` claim could bind to: ingest has
    checked its class, phase, capacity, volume mode, access modes and the claim's selector; what is left
    depends on the node (its required ``node_affinity``, empty = any node)."""

    name: Annotated[Text, Field(min_length=1)]
    node_affinity: list[NodeSelectorTerm] = Field(default_factory=list)


class VolumeClaim(_Record):
    """A PersistentVolumeClaim the pod mounts, resolved by ingest.

    Bound: ``node_affinity`` is the PersistentVolume's required node affinity (empty = any node) and
    ``zone_labels`` its zone / region labels (kube-scheduler's VolumeZone keys, values as written on the
    volume: several zones joined by ``__``).
    Unbound: ``binding_mode`` is its StorageClass's volumeBindingMode. A ``WaitForFirstConsumer`` claim
    also carries what kube-scheduler's VolumeBinding filter weighs per node: the ``candidates`` it could
    bind to (smallest first), whether its class can ``provision`` a volume, the class's
    ``allowed_topologies`` (ORed terms, empty = anywhere) and the claim's ``request_bytes`` (claims are
    matched smallest first).
    """

    claim: Name
    bound: bool = True
    node_affinity: list[NodeSelectorTerm] = Field(default_factory=list)
    binding_mode: Literal["Immediate", "WaitForFirstConsumer"] = "Immediate"
    zone_labels: Labels = Field(default_factory=dict)
    candidates: list[CandidateVolume] = Field(default_factory=list)
    provision: bool = False
    allowed_topologies: list[NodeSelectorTerm] = Field(default_factory=list)
    request_bytes: Annotated[int, Field(ge=0, le=LIMITS.STORAGE_BYTES)] = 0
    # Storage filters beyond binding (docs/filters.md "Volumes"). ``read_write_once_pod``: the claim has
    # the ReadWriteOncePod access mode (VolumeRestrictions). ``attach_driver`` / ``attach_handle``: the CSI
    # volume it attaches, counted against the node's CSINode limit (NodeVolumeLimits) — the bound volume's
    # driver and handle, or for an unbound claim its class's provisioner and no handle (the claim itself
    # is then the volume). ``capacity_checked``: provisioning needs a CSIStorageCapacity with room for
    # the request (its class's CSIDriver has ``storageCapacity``); ``capacity_topologies`` (ORed terms)
    # and ``capacity_anywhere`` say where one with enough room is. ``ephemeral``: the claim of a generic
    # ephemeral volume (``<pod>-<volume>``); ``missing``: it does not exist yet; ``not_owned``: it exists
    # but was not created for this pod.
    read_write_once_pod: bool = False
    attach_driver: Text = ""
    attach_handle: Text = ""
    capacity_checked: bool = False
    capacity_anywhere: bool = False
    capacity_topologies: list[NodeSelectorTerm] = Field(default_factory=list)
    ephemeral: bool = False
    missing: bool = False
    not_owned: bool = False

    # Written only when set, so a claim that uses none of them serialises as before they existed.
    OPTIONAL: ClassVar[tuple[str, ...]] = (
        "zone_labels",
        "candidates",
        "provision",
        "allowed_topologies",
        "request_bytes",
        "read_write_once_pod",
        "attach_driver",
        "attach_handle",
        "capacity_checked",
        "capacity_anywhere",
        "capacity_topologies",
        "ephemeral",
        "missing",
        "not_owned",
    )


class InlineDisk(_Record):
    """A disk a pod names inline (not through a claim) that kube-scheduler's VolumeRestrictions checks
    against the other pods of the node: a GCE persistent disk (``name`` = pdName), an AWS EBS volume
    (volumeID), an RBD image (``name`` = image, ``pool``, ``monitors``) or an iSCSI target (``name`` =
    IQN). ``read_only`` as the volume source states it. An Azure Disk (diskURI), Cinder or Portworx
    volume (volumeID) is listed only for NodeVolumeLimits: ``attach_driver`` / ``attach_handle`` are the
    CSI volume CSI migration translates an in-tree disk to (empty when it does not count; a driver without
    a handle when the translation fails: kube-scheduler cannot place the pod on a node with a CSINode)."""

    kind: Literal["gce_pd", "aws_ebs", "rbd", "iscsi", "azure_disk", "cinder", "portworx"]
    name: Annotated[Text, Field(min_length=1)]
    read_only: bool = False
    pool: Text = ""
    monitors: list[Text] = Field(default_factory=list, max_length=LIMITS.LIST)
    attach_driver: Text = ""
    attach_handle: Text = ""

    # Written only when set, so a disk that does not migrate serialises as before they existed.
    OPTIONAL: ClassVar[tuple[str, ...]] = ("attach_driver", "attach_handle")


class PodSubmitted(EventBase):
    """A pod asking for placement was created (or seen for the first time).

    ``queue`` is the pod's ``kai.scheduler/queue`` label (None if absent; the
    pod group's queue is authoritative). ``allowed_nodes`` None means no
    restriction, ``[]`` means no node is allowed. ``task_priority``
    (``kai.scheduler/task-priority``) orders tasks within a job, higher first.
    """

    type: Literal["PodSubmitted"] = "PodSubmitted"
    name: Name
    namespace: Namespace
    pod_group: Name
    queue: QueueName | None = None
    requests: PodRequests = Field(default_factory=PodRequests)
    node_selector: Labels = Field(default_factory=dict)
    allowed_nodes: list[Name] | None = None
    node_affinity: list[NodeSelectorTerm] = Field(default_factory=list)
    tolerations: list[Toleration] = Field(default_factory=list)
    task_priority: Int32 = 0
    created_at_ms: TimeMs
    scheduler_name: Name = DEFAULT_SCHEDULER_NAME
    # v2: what inter-pod filters, scores and the other kube-scheduler filters need (docs/filters.md).
    labels: Labels = Field(default_factory=dict)
    host_ports: list[HostPort] = Field(default_factory=list)
    pod_affinity: list[PodAffinityTerm] = Field(default_factory=list)
    pod_anti_affinity: list[PodAffinityTerm] = Field(default_factory=list)
    preferred_node_affinity: list[PreferredSchedulingTerm] = Field(default_factory=list)
    topology_spread: list[TopologySpreadConstraint] = Field(default_factory=list)
    scheduling_gates: list[LabelKey] = Field(default_factory=list)
    volumes: list[VolumeClaim] = Field(default_factory=list)
    disks: list[InlineDisk] = Field(default_factory=list, max_length=LIMITS.LIST)

    V2_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {
            "labels",
            "host_ports",
            "pod_affinity",
            "pod_anti_affinity",
            "preferred_node_affinity",
            "topology_spread",
            "scheduling_gates",
            "volumes",
            "disks",
        }
    )


class PodUngated(EventBase):
    """(v2) A gated pod's ``spec.schedulingGates`` became empty: from now on it is pending."""

    V2_ONLY: ClassVar[bool] = True

    type: Literal["PodUngated"] = "PodUngated"
    name: Name
    namespace: Namespace


class ForeignPodUpserted(EventBase):
    """(v2) A non-terminal pod bound to a node by another scheduler (DaemonSets, default-scheduler pods,
    KAI during a migration). Only what the engine needs: its requests, node, labels, host ports and its
    inter-pod terms (its required anti-affinity keeps our pods out of its domain, as kube-scheduler checks
    existing pods' terms). It leaves through :class:`PodFinished` or :class:`PodDeleted`; ``releasing`` is
    a set deletionTimestamp."""

    V2_ONLY: ClassVar[bool] = True

    type: Literal["ForeignPodUpserted"] = "ForeignPodUpserted"
    name: Name
    namespace: Namespace
    node: Name
    requests: PodRequests = Field(default_factory=PodRequests)
    labels: Labels = Field(default_factory=dict)
    host_ports: list[HostPort] = Field(default_factory=list)
    releasing: bool = False
    pod_affinity: list[PodAffinityTerm] = Field(default_factory=list)
    pod_anti_affinity: list[PodAffinityTerm] = Field(default_factory=list)
    # Its claims (what ReadWriteOncePod and the node's CSI attach limit count) and inline disks.
    volumes: list[VolumeClaim] = Field(default_factory=list)
    disks: list[InlineDisk] = Field(default_factory=list, max_length=LIMITS.LIST)

    # Written only when set, so a pod without them serialises as before they existed.
    V2_FIELDS: ClassVar[frozenset[str]] = frozenset({"pod_affinity", "pod_anti_affinity", "volumes", "disks"})


class PodBound(EventBase):
    """A pod was bound to a node. ``gpu_devices`` are device indices on that node.

    For a fractional or GPU-memory pod they are the shared device(s) it sits on.
    """

    type: Literal["PodBound"] = "PodBound"
    name: Name
    namespace: Namespace
    node: Name
    gpu_devices: list[Annotated[int, Field(ge=0, lt=LIMITS.GPUS)]] = Field(
        default_factory=list, max_length=LIMITS.GPUS
    )

    @model_validator(mode="after")
    def _distinct_devices(self) -> Self:
        if len(set(self.gpu_devices)) != len(self.gpu_devices):
            raise ValueError(f"gpu_devices has duplicates: {self.gpu_devices}")
        return self


class PodReleasing(EventBase):
    """A pod started terminating (eviction begun or deletionTimestamp set); it still holds its node."""

    type: Literal["PodReleasing"] = "PodReleasing"
    name: Name
    namespace: Namespace
    reason: Word


class PodFinished(EventBase):
    """A pod's containers ended; it no longer uses its node."""

    type: Literal["PodFinished"] = "PodFinished"
    name: Name
    namespace: Namespace
    phase: Literal["Succeeded", "Failed"]


class PodDeleted(EventBase):
    """A pod object is gone from the API server."""

    type: Literal["PodDeleted"] = "PodDeleted"
    name: Name
    namespace: Namespace


# --------------------------------------------------------------------------- namespaces


class NamespaceUpserted(EventBase):
    """(v2) A namespace appeared or its labels changed: what affinity terms' ``namespace_selector`` match."""

    V2_ONLY: ClassVar[bool] = True

    type: Literal["NamespaceUpserted"] = "NamespaceUpserted"
    name: Namespace
    labels: Labels = Field(default_factory=dict)


class NamespaceDeleted(EventBase):
    """(v2) A namespace is gone."""

    V2_ONLY: ClassVar[bool] = True

    type: Literal["NamespaceDeleted"] = "NamespaceDeleted"
    name: Namespace


class PodVolumesChanged(EventBase):
    """(v2) A pending pod's claims, resolved again because a PersistentVolume, PersistentVolumeClaim,
    StorageClass, CSIDriver or CSIStorageCapacity changed (a volume created, a claim bound, capacity
    freed): ``volumes`` replace the ones its PodSubmitted carried. Ingest watches those objects and emits
    this only when the resolution differs, so a replay folds exactly what the scheduler saw."""

    V2_ONLY: ClassVar[bool] = True

    type: Literal["PodVolumesChanged"] = "PodVolumesChanged"
    name: Name
    namespace: Namespace
    volumes: list[VolumeClaim] = Field(default_factory=list)


# --------------------------------------------------------------------------- CSI nodes


class CSIDriverLimit(_Record):
    """One CSI driver installed on a node; ``count`` is ``allocatable.count``, the most volumes of that
    driver the node can attach (None: the driver states no limit)."""

    name: Annotated[Text, Field(min_length=1)]
    count: Count0 | None = None


class AttachedVolume(_Record):
    """A CSI volume attached to a node by a VolumeAttachment: its attacher and the volume's handle."""

    driver: Annotated[Text, Field(min_length=1)]
    handle: Annotated[Text, Field(min_length=1)]


class CSINodeUpserted(EventBase):
    """(v2) A node's CSINode object appeared or changed: its CSI drivers and their attach limits
    (kube-scheduler's NodeVolumeLimits). ``name`` is the node's (and the CSINode's) name. ``attached``:
    the CSI volumes VolumeAttachments attach to the node (kube-scheduler counts those no pod there
    accounts for); ingest upserts the CSINode again when they change."""

    V2_ONLY: ClassVar[bool] = True

    type: Literal["CSINodeUpserted"] = "CSINodeUpserted"
    name: Name
    drivers: list[CSIDriverLimit] = Field(default_factory=list, max_length=LIMITS.LIST)
    attached: list[AttachedVolume] = Field(default_factory=list, max_length=LIMITS.LIST)


class CSINodeDeleted(EventBase):
    """(v2) A node's CSINode object is gone: no attach limit applies there."""

    V2_ONLY: ClassVar[bool] = True

    type: Literal["CSINodeDeleted"] = "CSINodeDeleted"
    name: Name


# --------------------------------------------------------------------------- time


class ClockTick(EventBase):
    """Time passed with nothing else happening (``hourglass run --period``).

    The engine never reads a clock: time reaches it only through ``at_ms`` of the events it folds. When the
    cluster is quiet, the scheduler service appends a tick so that time-driven decisions (a min-runtime
    protection running out, a stale gang's grace ending) are taken, and recorded in the log, so a replay
    folds the same tick and reaches the same decision.
    """

    type: Literal["ClockTick"] = "ClockTick"
    uid: Uid = "clock"


# --------------------------------------------------------------------------- the union

Event = Annotated[
    NodeUpserted
    | NodeRemoved
    | QueueUpserted
    | QueueDeleted
    | PodGroupUpserted
    | PodGroupDeleted
    | PodSubmitted
    | PodBound
    | PodReleasing
    | PodFinished
    | PodDeleted
    | ClockTick
    | PodUngated
    | ForeignPodUpserted
    | TopologyUpserted
    | TopologyDeleted
    | NamespaceUpserted
    | NamespaceDeleted
    | CSINodeUpserted
    | CSINodeDeleted
    | PodVolumesChanged,
    Field(discriminator="type"),
]
"""Any event; pydantic picks the model from the ``type`` field."""

EVENT_TYPES: Final[dict[str, type[EventBase]]] = {
    cls.model_fields["type"].default: cls
    for cls in (
        NodeUpserted,
        NodeRemoved,
        QueueUpserted,
        QueueDeleted,
        PodGroupUpserted,
        PodGroupDeleted,
        PodSubmitted,
        PodBound,
        PodReleasing,
        PodFinished,
        PodDeleted,
        ClockTick,
        PodUngated,
        ForeignPodUpserted,
        TopologyUpserted,
        TopologyDeleted,
        NamespaceUpserted,
        NamespaceDeleted,
        CSINodeUpserted,
        CSINodeDeleted,
        PodVolumesChanged,
    )
}
"""Event model by ``type`` name."""

FAST_PATH: Final = FastPath(
    {
        **EVENT_TYPES,
        **{
            m.__name__: m
            for m in (
                Taint,
                QueueResource,
                QueueResources,
                PodRequests,
                NodeSelectorRequirement,
                NodeSelectorTerm,
                Toleration,
            )
        },
    }
)
"""The compiled decoder in front of pydantic (:mod:`ingest.fastdecode`): ``FAST_PATH.decode(raw)`` gives a
struct with the fields of the event, or ``None`` when :func:`parse_event` must decide."""


# --------------------------------------------------------------------------- parse / dump

ReasonCode = Literal["bad_json", "schema", "unknown_version", "unknown_type"]


class EventError(ValueError):
    """An input that is not a valid event; ``reason_code`` goes to the dead-letter record."""

    def __init__(self, reason_code: ReasonCode, message: str) -> None:
        super().__init__(f"{reason_code}: {message}")
        self.reason_code: ReasonCode = reason_code
        self.message = message


def validation_message(err: ValidationError) -> str:
    """Pydantic's first error as ``location: message``, plus how many more there were."""
    errors = err.errors(include_url=False)
    first = errors[0]
    loc = ""
    for part in first["loc"]:
        loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
    msg = first["msg"].removeprefix("Value error, ")
    text = f"{loc}: {msg}" if loc else msg
    if len(errors) > 1:
        text += f" (and {len(errors) - 1} more)"
    return text


class _RepeatedKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's keys, refused when one repeats: readers disagree on which value wins (Python's json and
    msgspec take the last, DuckDB the first), so such an event has no one meaning."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _RepeatedKey(k)
            seen.add(k)
    return out


def parse_event(raw: bytes | str | dict[str, Any]) -> Event:
    """Parse one event from JSON text/bytes or an already-decoded dict.

    Raises :class:`EventError` with reason code ``bad_json`` (also for a key that appears twice in one
    object), ``schema``, ``unknown_version`` or ``unknown_type``; never anything else for bad input.
    Valid JSON events take the compiled fast path (:data:`FAST_PATH`); everything it cannot decide, and
    every error, goes through the pydantic models.
    """
    data: Any
    if isinstance(raw, dict):
        data = raw
    else:
        fast = FAST_PATH.decode(raw)
        if fast is not None:
            return cast(Event, FAST_PATH.to_model(fast))
        try:
            data = json.loads(raw, object_pairs_hook=_unique_keys)
        except _RepeatedKey as exc:
            raise EventError("bad_json", f"key {exc.key[:80]!r} appears twice in one object") from None
        except json.JSONDecodeError as exc:
            raise EventError(
                "bad_json", f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError; an int over 4,300 digits
            raise EventError("bad_json", f"not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise EventError("schema", f"an event must be a JSON object, got {type(data).__name__}")

    version = data.get("v", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise EventError("schema", f"v: event version must be an integer, got {version!r}")
    if version not in SUPPORTED_VERSIONS:
        supported = ", ".join(str(s) for s in SUPPORTED_VERSIONS)
        raise EventError(
            "unknown_version", f"event version {version} is not supported (supported: {supported})"
        )

    if "type" not in data:
        raise EventError("schema", "type: Field required")
    model = EVENT_TYPES.get(data["type"]) if isinstance(data["type"], str) else None
    if model is None:
        raise EventError(
            "unknown_type", f"unknown event type {data['type']!r} (known: {', '.join(sorted(EVENT_TYPES))})"
        )
    try:
        return cast(Event, model.model_validate(data))
    except ValidationError as exc:
        raise EventError("schema", validation_message(exc)) from None


def dump_event(event: EventBase) -> bytes:
    """Serialise an event as compact UTF-8 JSON with sorted keys; equal events give equal bytes."""
    payload = event.model_dump(mode="json")
    # v2 fields left at their empty default are not written: a v1 event serialises exactly as before.
    for k in event.V2_FIELDS:
        if not _v2_present(payload.get(k)):
            payload.pop(k, None)
    for vol in payload.get("volumes") or ():
        for k in VolumeClaim.OPTIONAL:
            if not vol.get(k):
                vol.pop(k, None)
    for disk in payload.get("disks") or ():
        for k in InlineDisk.OPTIONAL:
            if not disk.get(k):
                disk.pop(k, None)
    req = payload.get("requests")
    if isinstance(req, dict) and not req.get("extended"):
        req.pop("extended", None)
    # Terms' and constraints' optional fields left unset are not written either (same bytes as before).
    for k in ("pod_affinity", "pod_anti_affinity", "topology_spread"):
        for item in payload.get(k) or ():
            for opt in ("match_label_keys", "mismatch_label_keys", "namespace_selector"):
                if opt in item and item[opt] in (None, []):
                    item.pop(opt)
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")


def event_key(event: EventBase) -> str:
    """The log key of an event: its object's uid."""
    return event.uid
