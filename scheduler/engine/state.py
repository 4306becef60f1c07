"""Cluster state: an immutable snapshot of everything a scheduling cycle reads.

The snapshot is built either by folding the event log (:func:`fold`) or directly (conformance scenarios,
tests). All collections are tuples / insertion-ordered mappings built in a deterministic order, so the same
inputs always give an equal snapshot.
"""

from __future__ import annotations

import functools
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from operator import attrgetter
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypeVar

import msgspec

from scheduler.engine.proportion import RESOURCES, ResourceQuota

if TYPE_CHECKING:
    from ingest import events as ev_mod
    from ingest.events import NodeUpserted


class PodStatus(StrEnum):
    """Lifecycle of a pod as the engine sees it (KAI's pod statuses, reduced to what the engine uses)."""

    PENDING = "pending"
    ALLOCATED = "allocated"  # decided this cycle, bind requested
    PIPELINED = "pipelined"  # decided onto capacity that releasing pods still hold
    RUNNING = "running"  # bound to a node (Binding / Bound / Running in KAI)
    RELEASING = "releasing"  # being evicted or deleted; still holds its node's capacity
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str | None = None


@dataclass(frozen=True, slots=True)
class MatchExpression:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Node:
    """A node's capacity in exact engine units."""

    name: str
    cpu: int  # millicores
    memory: int  # bytes
    gpus: int = 0  # whole devices
    gpu_memory_mib: int | None = None  # per device; None = not advertised
    gpu_model: str | None = None
    max_pods: int = 110
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False
    # Extended resources the node advertises (nvidia.com/mig-1g.10gb, amd.com/gpu, rdma/..., hugepages-2Mi
    # in bytes), by resource name, sorted; anything a pod can ask for beyond CPU, memory and nvidia.com/gpu.
    extended: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class Queue:
    """A queue of the hierarchy. Resource keys are :data:`scheduler.engine.proportion.RESOURCES`."""

    name: str
    parent: str | None
    resources: Mapping[str, ResourceQuota]
    priority: int = 100
    order: int = 0  # creation order; smaller = older
    preempt_min_runtime_ms: int | None = None
    reclaim_min_runtime_ms: int | None = None
    display_name: str | None = None  # spec.displayName, for KAI's metric labels only (no decision reads it)
    node_pool: str | None = None  # its kai.scheduler/node-pool label: only that shard sees it (pool_view)


SUBGROUP_LABEL = "kai.scheduler/subgroup-name"  # the pod label that puts a pod in a subgroup (KAI)


@dataclass(frozen=True, slots=True)
class SubGroup:
    """One of KAI's PodGroup ``subGroups`` (see :mod:`scheduler.engine.subgroups` for what the engine makes
    of them): a PodSet (no child names it as parent) needs ``max(min_member, 1)`` pods, a SubGroupSet
    ``min_sub_group`` ready children (None = all). The topology fields are its own constraint."""

    name: str
    parent: str | None = None
    min_member: int | None = None
    min_sub_group: int | None = None
    topology: str | None = None
    required_level: str | None = None
    preferred_level: str | None = None


class Job(msgspec.Struct, frozen=True, gc=False):
    """A pod group: the unit of gang scheduling (a frozen msgspec struct, like :class:`Pod`)."""

    uid: str
    name: str
    queue: str
    min_available: int = 1
    priority: int = 50
    preemptible: bool = True
    created_ms: int = 0
    last_start_ms: int | None = None
    stale_since_ms: int | None = None
    deleting: bool = False
    # KAI's topologyConstraint: a Topology name and level keys of it (None = no constraint).
    topology: str | None = None
    required_level: str | None = None
    preferred_level: str | None = None
    # KAI's subGroups (empty = one implicit gang of min_available) and the PodGroup's minSubGroup. With
    # subgroups, min_available is the tree's minimum (subgroups.minimum), not the PodGroup's minMember.
    subgroups: tuple[SubGroup, ...] = ()
    min_sub_group: int | None = None
    # The PodGroup's metadata.uid (KAI's metric labels only) and node-pool label (also a shard's pods).
    k8s_uid: str | None = None
    node_pool: str | None = None
    # KAI's per-PodGroup preemptionDelay and stalenessGracePeriod (ms; None = the engine's default, a
    # negative grace = never stale-evicted).
    preemption_delay_ms: int | None = None
    staleness_grace_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Topology:
    """A KAI Topology: node-label keys from the widest domain to the narrowest (zone, block, rack, ...)."""

    name: str
    levels: tuple[str, ...]
    # KAI's levels[].alias: (alias, node-label key) pairs; a constraint may name a level by either.
    aliases: tuple[tuple[str, str], ...] = ()

    def key(self, level: str) -> str:
        """The node-label key of ``level``, given by its key or by its alias."""
        return next((label for alias, label in self.aliases if alias == level), level)

    def has(self, level: str) -> bool:
        """Whether ``level`` (key or alias) is a level of this topology."""
        return self.key(level) in self.levels

    def index(self, level: str) -> int:
        """The depth of ``level`` (key or alias), widest first."""
        return self.levels.index(self.key(level))


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What one pod asks for. GPU amounts: whole devices, or a fraction / memory on shared devices."""

    cpu: int = 0  # millicores
    memory: int = 0  # bytes
    gpus: int = 0  # whole devices
    gpu_fraction_milli: int | None = None  # share of one device, 1..1000
    gpu_fraction_devices: int = 1
    gpu_memory_mib: int | None = None  # alternative to a fraction
    # Extended resources (see Node.extended) as sorted (name, amount) pairs, checked against allocatable.
    extended: tuple[tuple[str, int], ...] = ()

    @property
    def is_shared(self) -> bool:
        """True when the pod asks for part of a device (by portion or by memory)."""
        return self.gpu_fraction_milli is not None or self.gpu_memory_mib is not None


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes label selector: ``match_labels`` and ``match_expressions`` (In / NotIn / Exists /
    DoesNotExist), all ANDed. The empty selector matches every pod."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[MatchExpression, ...] = ()
    nothing: bool = False  # a missing labelSelector: selects no pod at all


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A required (weight 0) or preferred (weight 1..100) inter-pod (anti-)affinity term.

    ``namespaces`` empty and no ``namespace_selector`` means the pod's own namespace (Kubernetes' default);
    else the term looks at ``namespaces`` and the namespaces whose labels ``namespace_selector`` matches
    (the empty selector: every namespace). ``selector`` already holds the ``matchLabelKeys`` /
    ``mismatchLabelKeys`` requirements.
    """

    selector: LabelSelector
    topology_key: str
    namespaces: tuple[str, ...] = ()
    weight: int = 0
    namespace_selector: LabelSelector | None = None


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A topology spread constraint, as kube-scheduler's PodTopologySpread reads it."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str = "DoNotSchedule"  # DoNotSchedule | ScheduleAnyway
    selector: LabelSelector = LabelSelector()
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"  # Honor | Ignore
    node_taints_policy: str = "Ignore"  # Honor | Ignore


@dataclass(frozen=True, slots=True)
class HostPort:
    """A host port a container binds; ``host_ip`` "" or "0.0.0.0" means every address."""

    port: int
    protocol: str = "TCP"
    host_ip: str = ""


@dataclass(frozen=True, slots=True)
class Volume:
    """A PersistentVolumeClaim a pod mounts, as ingest resolved it.

    ``bound``: the claim is bound to a volume; ``node_affinity`` is that volume's required node affinity
    (OR of AND-terms, empty = any node). An unbound claim says its StorageClass's ``binding_mode``.
    """

    claim: str
    bound: bool = True
    node_affinity: tuple[tuple[MatchExpression, ...], ...] = ()
    binding_mode: str = "Immediate"  # Immediate | WaitForFirstConsumer
    zone_labels: tuple[tuple[str, str], ...] = ()  # the bound volume's zone / region labels, sorted
    # An unbound WaitForFirstConsumer claim: (volume name, its node affinity) it could bind to, smallest
    # first; whether its class provisions, where (ORed terms, empty = anywhere); its storage request.
    candidates: tuple[tuple[str, tuple[tuple[MatchExpression, ...], ...]], ...] = ()
    provision: bool = False
    allowed_topologies: tuple[tuple[MatchExpression, ...], ...] = ()
    request_bytes: int = 0
    # VolumeRestrictions / NodeVolumeLimits / CSI storage capacity / generic ephemeral volumes: see
    # ingest.events.VolumeClaim.
    read_write_once_pod: bool = False
    attach_driver: str = ""
    attach_handle: str = ""
    capacity_checked: bool = False
    capacity_anywhere: bool = False
    capacity_topologies: tuple[tuple[MatchExpression, ...], ...] = ()
    ephemeral: bool = False
    missing: bool = False
    not_owned: bool = False


@dataclass(frozen=True, slots=True)
class CSINode:
    """A node's CSINode: each driver's attach limit (None = no limit), sorted, and the CSI volumes
    VolumeAttachments attach there (driver, handle), sorted."""

    drivers: tuple[tuple[str, int | None], ...] = ()
    attached: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Disk:
    """An inline disk a pod mounts: ``kind`` gce_pd / aws_ebs / rbd / iscsi (VolumeRestrictions), or
    azure_disk / cinder / portworx; ``attach_driver`` / ``attach_handle``: the CSI volume NodeVolumeLimits
    counts it as under CSI migration ("" when none)."""

    kind: str
    name: str
    read_only: bool = False
    pool: str = ""
    monitors: tuple[str, ...] = ()
    attach_driver: str = ""
    attach_handle: str = ""


_NO_MAP: Mapping[str, str] = MappingProxyType({})  # the one empty read-only map pods share


class Pod(msgspec.Struct, frozen=True, gc=False):
    """A pod of a pod group, as the fold and the engine see it.

    A frozen msgspec struct rather than a frozen dataclass: the fold builds one per submitted pod and a
    copy per state change, and a struct is built ~15x faster (in C, where a frozen dataclass sets each of
    its 24 fields through ``object.__setattr__``). It holds only immutable values and no reference cycle,
    so it is not tracked by the cyclic GC (``gc=False``), which no longer re-scans every pod the builder
    keeps. Copy one with :func:`evolve` (``dataclasses.replace`` does not apply to it).
    """

    uid: str
    name: str
    job: str  # job uid
    request: PodRequest
    status: PodStatus = PodStatus.PENDING
    node: str | None = None
    gpu_devices: tuple[int, ...] = ()  # device indices on `node` (shared pods: the shared devices)
    gpu_milli_per_device: int = 0  # for placed shared pods: the portion held on each device
    task_priority: int = 0
    index: int = 0  # creation order within the job
    created_ms: int = 0
    node_selector: Mapping[str, str] = _NO_MAP
    allowed_nodes: tuple[str, ...] | None = None
    affinity: tuple[tuple[MatchExpression, ...], ...] = ()  # OR of AND-terms
    tolerations: tuple[Toleration, ...] = ()
    namespace: str = ""
    labels: Mapping[str, str] = _NO_MAP
    host_ports: tuple[HostPort, ...] = ()
    pod_affinity: tuple[PodAffinityTerm, ...] = ()  # required terms (weight 0) and preferred (weight > 0)
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    topology_spread: tuple[SpreadConstraint, ...] = ()
    preferred_affinity: tuple[tuple[int, tuple[MatchExpression, ...]], ...] = ()  # (weight, AND-term)
    volumes: tuple[Volume, ...] = ()
    gated: bool = False  # spec.schedulingGates not empty: not pending yet, the engine skips it
    disks: tuple[Disk, ...] = ()  # inline disks (VolumeRestrictions)
    # When its PodReleasing event came (the logical time ingest saw the deletionTimestamp): how long it has
    # been releasing decides whether pods may still be pipelined onto what it holds (KAI's StuckInReleasing).
    releasing_ms: int | None = None

    @property
    def has_preferences(self) -> bool:
        """True when node scores depend on the pod's preferences (preferred node or pod affinity,
        ScheduleAnyway spread): the bin-pack fast path does not know these scores."""
        return bool(
            self.preferred_affinity
            or any(t.weight for t in self.pod_affinity)
            or any(t.weight for t in self.pod_anti_affinity)
            or any(c.when_unsatisfiable != "DoNotSchedule" for c in self.topology_spread)
        )

    @property
    def has_pod_constraints(self) -> bool:
        """True when placing this pod depends on other pods (ports, inter-pod terms, spread) or on
        preferences: such pods take the full scan instead of the bin-pack fast path."""
        return bool(
            self.host_ports
            or self.pod_affinity
            or self.pod_anti_affinity
            or self.topology_spread
            or self.preferred_affinity
            or self.volumes
            or self.disks
            or self.request.extended
        )


@dataclass(frozen=True, slots=True)
class ForeignPod:
    """A pod bound to a node by another scheduler (DaemonSets, default-scheduler pods, KAI during a
    migration). It holds capacity and takes part in inter-pod affinity and spread, but belongs to no
    queue: never counted in fair share, never a victim."""

    uid: str
    name: str
    namespace: str
    node: str
    request: PodRequest
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    host_ports: tuple[HostPort, ...] = ()
    releasing: bool = False
    releasing_ms: int | None = None  # logical time it was first seen releasing (see Pod.releasing_ms)
    # Its inter-pod terms, required (weight 0) and preferred: its required anti-affinity repels our pods.
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    volumes: tuple[Volume, ...] = ()  # its claims (ReadWriteOncePod, CSI attach limits)
    disks: tuple[Disk, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterState:
    """Immutable snapshot: nodes, queues, jobs and pods in deterministic order."""

    nodes: tuple[Node, ...] = ()
    queues: tuple[Queue, ...] = ()
    jobs: tuple[Job, ...] = ()
    pods: tuple[Pod, ...] = ()
    events_offset: int = -1  # last event folded into this snapshot
    foreign_pods: tuple[ForeignPod, ...] = ()
    topologies: tuple[Topology, ...] = ()  # sorted by name
    # Namespaces' labels, sorted by name: what affinity terms' namespace selectors match.
    namespaces: tuple[tuple[str, Mapping[str, str]], ...] = ()
    # The recent workload's pod shapes and how many of each (:class:`WorkloadWindow`), sorted by shape:
    # what fragmentation-aware scoring learns the cluster's task-type distribution from.
    workload: tuple[tuple[WorkloadShape, int], ...] = ()
    # Each node's CSI drivers and attach limits (CSINode ``allocatable.count``; None = no limit), sorted by
    # node name: what NodeVolumeLimits counts against.
    csi_nodes: tuple[tuple[str, CSINode], ...] = ()
    # Per node pool, the recent pods' (submission time ms, shape) in log order (:class:`PoolHistory`),
    # sorted by pool: what ``workload_types: decayed`` weighs by age at each cycle's logical time.
    workload_history: tuple[tuple[str, tuple[tuple[int, WorkloadShape], ...]], ...] = ()


WorkloadShape = tuple[int, int, int, tuple[str, ...]]
"""A pod's shape as FGD's task types name it: (CPU millicores, milli-GPU on each GPU, #GPUs, GPU models)."""

#: Node labels that name a GPU model: the trace's and NVIDIA's GPU feature discovery's. A pod that selects
#: models through one of them accepts only those models (FGD's ``gpu_spec``).
GPU_MODEL_LABELS: Final = ("gpu-model", "nvidia.com/gpu.product")


def workload_shape(pod: Pod) -> WorkloadShape | None:
    """`pod`'s shape for the workload distribution; None for a pod whose per-GPU share is not known before
    it lands (GPU memory requests: the share depends on the node's devices)."""
    r = pod.request
    if r.gpu_memory_mib is not None:
        return None
    if r.gpu_fraction_milli is not None:
        per_gpu, gpus = r.gpu_fraction_milli, r.gpu_fraction_devices
    else:
        per_gpu, gpus = (1000, r.gpus) if r.gpus else (0, 0)
    models: set[str] = set()
    for key in GPU_MODEL_LABELS:
        chosen = pod.node_selector.get(key)
        if chosen is not None:
            models.add(chosen)
    if len(pod.affinity) == 1:  # OR-ed terms give no single allow-list
        for expr in pod.affinity[0]:
            if expr.key in GPU_MODEL_LABELS and expr.operator == "In":
                models.update(expr.values)
    return (r.cpu, per_gpu, gpus, tuple(sorted(models)) if gpus else ())


class WorkloadWindow:
    """The shapes of the last :data:`WINDOW` pods submitted, counted per shape.

    A sliding window over the event log, so it is a function of the folded events (a replay rebuilds it
    exactly) and old workload ages out as new pods arrive. The counts the snapshot exposes are refreshed
    every :data:`REFRESH` pods (and at the first pod), so a scorer's memo tables built on them survive many
    cycles instead of one.
    """

    WINDOW: Final = 4096
    REFRESH: Final = 128

    def __init__(self) -> None:
        self.recent: deque[WorkloadShape] = deque()
        self.counts: Counter[WorkloadShape] = Counter()
        self.since_refresh = 0
        self.frozen: tuple[tuple[WorkloadShape, int], ...] = ()

    def add(self, shape: WorkloadShape) -> None:
        """Count one submitted pod's shape (the oldest leaves a full window)."""
        self.recent.append(shape)
        self.counts[shape] += 1
        if len(self.recent) > self.WINDOW:
            old = self.recent.popleft()
            self.counts[old] -= 1
            if not self.counts[old]:
                del self.counts[old]
        self.since_refresh += 1
        if not self.frozen or self.since_refresh >= self.REFRESH:
            self.frozen = tuple(sorted(self.counts.items()))
            self.since_refresh = 0

    def copy(self) -> WorkloadWindow:
        """An independent window with the same contents."""
        other = WorkloadWindow()
        other.recent, other.counts = deque(self.recent), Counter(self.counts)
        other.since_refresh, other.frozen = self.since_refresh, self.frozen
        return other


class PoolHistory:
    """Per node pool, the (event time ms, shape) of the last :data:`HISTORY` pods submitted to it.

    The raw material of the decayed workload distribution (``workload_types: decayed``): which pods count
    and how much is decided at cycle time from the config's half-life and window, so this fold keeps no
    setting. A pod's pool is its PodGroup's node-pool label, else its own (as :func:`pool_view` assigns
    pods to shards). The snapshot's view of a pool is refreshed every :data:`REFRESH` pods of that pool
    (and at its first pod), so a scorer's memo tables built on it survive many cycles.
    """

    HISTORY: Final = 4096
    REFRESH: Final = 128

    def __init__(self) -> None:
        self.recent: dict[str, deque[tuple[int, WorkloadShape]]] = {}
        self.since_refresh: dict[str, int] = {}
        self.frozen_pools: dict[str, tuple[tuple[int, WorkloadShape], ...]] = {}
        self.frozen: tuple[tuple[str, tuple[tuple[int, WorkloadShape], ...]], ...] = ()

    def add(self, pool: str, at_ms: int, shape: WorkloadShape) -> None:
        """Record one submitted pod of `pool` (the pool's oldest leaves a full history)."""
        q = self.recent.get(pool)
        if q is None:
            q = self.recent[pool] = deque(maxlen=self.HISTORY)
        q.append((at_ms, shape))
        n = self.since_refresh.get(pool, 0) + 1
        if pool not in self.frozen_pools or n >= self.REFRESH:
            self.frozen_pools[pool] = tuple(q)
            self.frozen = tuple(sorted(self.frozen_pools.items()))
            n = 0
        self.since_refresh[pool] = n

    def copy(self) -> PoolHistory:
        """An independent history with the same contents."""
        other = PoolHistory()
        other.recent = {k: deque(v, maxlen=self.HISTORY) for k, v in self.recent.items()}
        other.since_refresh = dict(self.since_refresh)
        other.frozen_pools, other.frozen = dict(self.frozen_pools), self.frozen
        return other


#: The node label that partitions a cluster into node pools, each scheduled by its own shard (KAI's
#: default ``nodePoolLabelKey``).
NODE_POOL_LABEL: Final = "kai.scheduler/node-pool"


def pool_view(state: ClusterState, pool: str, label: str = NODE_POOL_LABEL) -> ClusterState:
    """What the shard scheduling node pool `pool` sees: the nodes whose `label` is `pool` and the pods
    of that pool (``""``: the default shard, nodes and pods without the label), as KAI's scheduling shards
    partition a cluster.

    A pod's pool is its PodGroup's label, as KAI's shards select PodGroups by it (its pod grouper copies
    the top owner's labels, and relabelling a PodGroup moves the job to another shard); a pod whose
    PodGroup carries none (or when `label` is not the key ingest reads from PodGroups) goes by its own.

    Pods of other pools bound to this pool's nodes still hold capacity there: they become foreign pods.
    Pod groups without a pod in the pool are left out. A queue labelled with a pool (KAI's queue label,
    read with `label` the key ingest reads) is seen by that pool's shard only, as KAI's shards list queues
    by their partition selector; a queue without the label stays in every shard (a queue without pods here
    asks for nothing, so fair share divides this pool's capacity among the queues that have work in it).
    KAI shows unlabelled queues to the default shard only; Hourglass keeps them visible so a pool's pods
    in an unlabelled queue are still scheduled (docs/kai-compatibility.md).
    """
    nodes = tuple(n for n in state.nodes if n.labels.get(label, "") == pool)
    names = {n.name for n in nodes}
    pods: list[Pod] = []
    foreign = list(state.foreign_pods)
    group_pool = (
        {j.uid: j.node_pool for j in state.jobs if j.node_pool is not None}
        if label == NODE_POOL_LABEL
        else {}
    )
    for p in state.pods:
        if group_pool.get(p.job, p.labels.get(label, "")) == pool:
            pods.append(p)
        elif p.node in names and p.status in (PodStatus.RUNNING, PodStatus.ALLOCATED, PodStatus.RELEASING):
            foreign.append(
                ForeignPod(
                    p.uid,
                    p.name,
                    p.namespace,
                    p.node,
                    p.request,
                    p.labels,
                    p.host_ports,
                    releasing=p.status is PodStatus.RELEASING,
                    releasing_ms=p.releasing_ms if p.status is PodStatus.RELEASING else None,
                    pod_affinity=p.pod_affinity,
                    pod_anti_affinity=p.pod_anti_affinity,
                )
            )
    jobs_here = {p.job for p in pods}
    queues = state.queues
    if label == NODE_POOL_LABEL and any(q.node_pool is not None for q in queues):
        queues = _pool_queues(queues, pool)
    return replace(
        state,
        queues=queues,
        nodes=nodes,
        jobs=tuple(j for j in state.jobs if j.uid in jobs_here),
        pods=tuple(pods),
        foreign_pods=tuple(foreign),
    )


def _pool_queues(queues: tuple[Queue, ...], pool: str) -> tuple[Queue, ...]:
    """The queues shard `pool` sees: unlabelled ones and those labelled `pool`. A child whose parent is
    labelled for another pool loses its parent here, so the session drops it with its subtree (KAI's rule
    for a missing parent; KAI's shard does not list that parent either)."""
    return tuple(q for q in queues if q.node_pool is None or q.node_pool == pool)


def default_queue_resources(
    gpu_quota: int = 0, gpu_limit: int | None = None, gpu_weight: int = 1
) -> dict[str, ResourceQuota]:
    """Queue resources with KAI's defaults for CPU and memory (unlimited quota, no limit, weight 1)."""
    out = {r: ResourceQuota.of(None, None, 1) for r in RESOURCES}
    out["gpu"] = ResourceQuota.of(gpu_quota, gpu_limit, gpu_weight)
    return out


def with_pods(state: ClusterState, pods: Iterable[Pod]) -> ClusterState:
    """Return `state` with its pod list replaced."""
    return replace(state, pods=tuple(pods))


# -- the fold -------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def subgroup_minimum(subgroups: tuple[SubGroup, ...], min_sub_group: int | None = None) -> int:
    """The fewest pods that satisfy a subgroup tree: each PodSet needs ``max(min_member, 1)``, a
    SubGroupSet (and the PodGroup) the ``min_sub_group`` cheapest of its children (all by default).
    A tree the contract would reject (a cycle) counts what it can reach from the top."""
    children: dict[str | None, list[SubGroup]] = {}
    for sg in subgroups:
        children.setdefault(sg.parent, []).append(sg)

    def need(name: str | None, k: int | None, depth: int) -> int:
        kids = children.get(name, [])
        costs = sorted(
            need(c.name, c.min_sub_group, depth + 1) if c.name in children else max(c.min_member or 0, 1)
            for c in kids
            if depth < len(subgroups)
        )
        return sum(costs[: len(costs) if k is None else k])

    return max(need(None, min_sub_group, 0), 1)


def subgroups_satisfied(
    subgroups: tuple[SubGroup, ...], min_sub_group: int | None, active: Mapping[str, int]
) -> bool:
    """The gang rule of :mod:`scheduler.engine.subgroups` over ``active`` pods per PodSet name (for the
    fold's stale-gang clock, which has no session)."""
    children: dict[str | None, list[SubGroup]] = {}
    for sg in subgroups:
        children.setdefault(sg.parent, []).append(sg)

    def ok(name: str | None, k: int | None, depth: int) -> bool:
        kids = children.get(name, []) if depth <= len(subgroups) else []
        good = sum(
            1
            for c in kids
            if (
                ok(c.name, c.min_sub_group, depth + 1)
                if c.name in children
                else active.get(c.name, 0) >= max(c.min_member or 0, 1)
            )
        )
        return good >= (len(kids) if k is None else min(k, len(kids)))

    return ok(None, min_sub_group, 0)


_PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
DEFAULT_JOB_PRIORITY = 50


_EMPTY_MAP: Mapping[str, str] = MappingProxyType({})


def _sorted_map(items: Mapping[str, str]) -> Mapping[str, str]:
    """A read-only copy of ``items`` in key order (empty ones share one instance)."""
    return MappingProxyType(dict(sorted(items.items()))) if items else _EMPTY_MAP


def node_from_event(e: NodeUpserted, name: str | None = None) -> Node:
    """The snapshot's view of a node event (`name` renames it, e.g. for a tie-break order)."""
    return Node(
        name=name or e.name,
        cpu=e.cpu_millicores,
        memory=e.memory_bytes,
        gpus=e.gpus,
        gpu_memory_mib=e.gpu_memory_mib,
        gpu_model=e.gpu_model,
        max_pods=e.max_pods,
        labels=_sorted_map(e.labels),
        taints=tuple(Taint(t.key, t.value, t.effect) for t in e.taints),
        ready=e.ready,
        unschedulable=e.unschedulable,
        extended=MappingProxyType(dict(sorted(e.extended.items()))),
    )


def _exprs(terms: Iterable[ev_mod.NodeSelectorTerm]) -> tuple[tuple[MatchExpression, ...], ...]:
    return tuple(
        tuple(MatchExpression(m.key, m.operator, tuple(m.values)) for m in t.match_expressions) for t in terms
    )


def _volume(v: ev_mod.VolumeClaim) -> Volume:
    return Volume(
        v.claim,
        v.bound,
        _exprs(v.node_affinity),
        v.binding_mode,
        tuple(sorted(v.zone_labels.items())),
        tuple((c.name, _exprs(c.node_affinity)) for c in v.candidates),
        v.provision,
        _exprs(v.allowed_topologies),
        v.request_bytes,
        v.read_write_once_pod,
        v.attach_driver,
        v.attach_handle,
        v.capacity_checked,
        v.capacity_anywhere,
        _exprs(v.capacity_topologies),
        v.ephemeral,
        v.missing,
        v.not_owned,
    )


def disks_from_event(disks: Iterable[ev_mod.InlineDisk]) -> tuple[Disk, ...]:
    """The inline disks of a pod event."""
    return tuple(
        Disk(d.kind, d.name, d.read_only, d.pool, tuple(d.monitors), d.attach_driver, d.attach_handle)
        for d in disks
    )


def subgroups_from_event(subgroups: Iterable[ev_mod.SubGroup]) -> tuple[SubGroup, ...]:
    """A PodGroup event's subgroups as the engine keeps them."""
    return tuple(
        SubGroup(
            name=sg.name,
            parent=sg.parent,
            min_member=sg.min_member,
            min_sub_group=sg.min_sub_group,
            topology=sg.topology,
            required_level=sg.required_topology_level,
            preferred_level=sg.preferred_topology_level,
        )
        for sg in subgroups
    )


def csi_node_from_event(e: ev_mod.CSINodeUpserted) -> CSINode:
    """The CSINode of a CSINodeUpserted event."""
    return CSINode(
        tuple(sorted((d.name, d.count) for d in e.drivers)),
        tuple(sorted({(a.driver, a.handle) for a in e.attached})),
    )


def volumes_from_event(volumes: Iterable[ev_mod.VolumeClaim]) -> tuple[Volume, ...]:
    """The resolved claims of a pod event."""
    return tuple(_volume(v) for v in volumes)


def _selector(s: ev_mod.LabelSelector | None) -> LabelSelector:
    if s is None:
        return LabelSelector(nothing=True)
    return LabelSelector(
        match_labels=tuple(sorted(s.match_labels.items())),
        match_expressions=tuple(
            MatchExpression(m.key, m.operator, tuple(m.values)) for m in s.match_expressions
        ),
    )


def _with_label_keys(
    sel: LabelSelector, labels: Mapping[str, str], match: Iterable[str], mismatch: Iterable[str] = ()
) -> LabelSelector:
    """``sel`` ANDed with ``key In (value)`` for each `match` key and ``key NotIn (value)`` for each
    `mismatch` key the pod's `labels` hold (kube-apiserver's ``applyMatchLabelKeysAndMismatchLabelKeys``,
    kube-scheduler's spread merge). A missing selector stays one that selects nothing."""
    extra = tuple(MatchExpression(k, "In", (labels[k],)) for k in match if k in labels) + tuple(
        MatchExpression(k, "NotIn", (labels[k],)) for k in mismatch if k in labels
    )
    if not extra or sel.nothing:
        return sel
    return LabelSelector(sel.match_labels, sel.match_expressions + extra)


def _term(t: ev_mod.PodAffinityTerm, labels: Mapping[str, str]) -> PodAffinityTerm:
    sel = _selector(t.label_selector)
    if t.match_label_keys or t.mismatch_label_keys:
        sel = _with_label_keys(sel, labels, t.match_label_keys, t.mismatch_label_keys)
    ns_sel = _selector(t.namespace_selector) if t.namespace_selector is not None else None
    return PodAffinityTerm(sel, t.topology_key, tuple(t.namespaces), t.weight, ns_sel)


def request_from_event(r: ev_mod.PodRequests) -> PodRequest:
    """The engine's view of a pod's requests."""
    return PodRequest(
        cpu=r.cpu_millicores,
        memory=r.memory_bytes,
        gpus=r.gpus,
        gpu_fraction_milli=r.gpu_fraction_milli,
        gpu_fraction_devices=r.gpu_fraction_devices,
        gpu_memory_mib=r.gpu_memory_mib,
        extended=tuple(sorted(r.extended.items())) if r.extended else (),
    )


def foreign_pod_from_event(e: ev_mod.ForeignPodUpserted) -> ForeignPod:
    """The engine's view of a pod of another scheduler (its terms' label keys merged as for our pods)."""
    labels = MappingProxyType(dict(sorted(e.labels.items())))
    return ForeignPod(
        uid=f"{e.namespace}/{e.name}",
        name=e.name,
        namespace=e.namespace,
        node=e.node,
        request=request_from_event(e.requests),
        labels=labels,
        host_ports=ports_from_event(e.host_ports),
        releasing=e.releasing,
        pod_affinity=tuple(_term(t, labels) for t in e.pod_affinity),
        pod_anti_affinity=tuple(_term(t, labels) for t in e.pod_anti_affinity),
        volumes=volumes_from_event(e.volumes),
        disks=disks_from_event(e.disks),
    )


def ports_from_event(ports: Iterable[ev_mod.HostPort]) -> tuple[HostPort, ...]:
    return tuple(HostPort(p.port, p.protocol, p.host_ip) for p in ports)


def _labels(m: dict[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(sorted(m.items()))) if m else _NO_MAP


def placement_fields(e: ev_mod.PodSubmitted) -> dict[str, Any]:
    """The :class:`Pod` fields placement reads, from a pod event (the fold and scenario files share it)."""
    out: dict[str, Any] = {
        "node_selector": _labels(e.node_selector),
        "allowed_nodes": tuple(e.allowed_nodes) if e.allowed_nodes is not None else None,
        "affinity": _exprs(e.node_affinity) if e.node_affinity else (),
        "tolerations": tuple(Toleration(t.key, t.operator, t.value, t.effect) for t in e.tolerations)
        if e.tolerations
        else (),
        "namespace": e.namespace,
    }
    if e.v == 1:  # no contract-v2 field can be set: the rest keep their defaults (the fold's hot path)
        return out
    out["labels"] = labels = _labels(e.labels)
    out["host_ports"] = ports_from_event(e.host_ports)
    out["pod_affinity"] = tuple(_term(t, labels) for t in e.pod_affinity)
    out["pod_anti_affinity"] = tuple(_term(t, labels) for t in e.pod_anti_affinity)
    out["topology_spread"] = tuple(
        SpreadConstraint(
            c.max_skew,
            c.topology_key,
            c.when_unsatisfiable,
            _with_label_keys(_selector(c.label_selector), labels, c.match_label_keys),
            c.min_domains,
            c.node_affinity_policy,
            c.node_taints_policy,
        )
        for c in e.topology_spread
    )
    out["preferred_affinity"] = tuple(
        (t.weight, tuple(MatchExpression(m.key, m.operator, tuple(m.values)) for m in t.match_expressions))
        for t in e.preferred_node_affinity
    )
    out["volumes"] = tuple(_volume(v) for v in e.volumes)
    out["gated"] = bool(e.scheduling_gates)
    if e.disks:
        out["disks"] = disks_from_event(e.disks)
    return out


MAX_HELD_BINDS = 100_000  # PodBound events waiting for their PodSubmitted; beyond, one is refused
FAST_BIND = True  # tests switch it off to check _bind_pending against the general PodBound branch

_T = TypeVar("_T")
_SHAPES: dict[type, tuple[Callable[[Any], tuple[Any, ...]], dict[str, int]]] = {}


def evolve(obj: _T, **changes: Any) -> _T:
    """A copy of a frozen state object (a dataclass, or a struct such as :class:`Pod`) with `changes`.

    ``dataclasses.replace``, several times faster for the fold's frozen dataclasses: the fields are read
    at once by an ``attrgetter`` and passed positionally (every field of these classes is an ``__init__``
    field); structs use ``msgspec.structs.replace``.
    """
    if isinstance(obj, msgspec.Struct):
        return msgspec.structs.replace(obj, **changes)
    cls = type(obj)
    shape = _SHAPES.get(cls)
    if shape is None:
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        shape = _SHAPES[cls] = (attrgetter(*names), {n: i for i, n in enumerate(names)})
    getter, index = shape
    values = list(getter(obj))
    for name, value in changes.items():
        values[index[name]] = value
    return cls(*values)


class StateBuilder:
    """Folds events, one at a time, into a state; :meth:`snapshot` freezes it.

    Objects are kept in insertion-ordered dicts keyed by name / uid, so the same event sequence always
    yields the same snapshot. Job clocks the engine needs (last start, stale since) are derived from the
    events themselves, so a replay rebuilds them exactly.
    """

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.queues: dict[str, Queue] = {}
        self.jobs: dict[str, Job] = {}
        self.pods: dict[str, Pod] = {}
        self.foreign: dict[str, ForeignPod] = {}  # pods of other schedulers bound to nodes
        self.topologies: dict[str, Topology] = {}
        self.namespaces: dict[str, Mapping[str, str]] = {}
        self.csi_nodes: dict[str, CSINode] = {}
        self.offset = -1
        self._queue_seq = 0
        self._pod_seq: dict[str, int] = {}
        self._job_pods: dict[str, dict[str, None]] = {}  # job uid -> its pod uids (ordered)
        self._requests: dict[tuple[Any, ...], PodRequest] = {}  # see _request
        # PodBound events of pods not submitted yet, by pod uid: applied when the pod arrives (see apply).
        self.held_binds: dict[str, Any] = {}
        self.latest_ms = 0  # the latest at_ms folded: logical time never goes back on a ClockTick
        self.workload = WorkloadWindow()
        self.history = PoolHistory()

    def apply(self, event: object, offset: int | None = None) -> None:
        """Fold one event: an ``ingest.events`` model, or the struct ``ingest.events.FAST_PATH`` decodes
        (same attributes); the event's ``type`` picks its handler in :data:`_FOLD`."""
        self.offset = self.offset + 1 if offset is None else offset
        e: Any = event
        kind = getattr(e, "type", None)
        at_ms = getattr(e, "at_ms", 0)
        if at_ms > self.latest_ms:
            self.latest_ms = at_ms
        elif kind == "ClockTick" and at_ms < self.latest_ms:
            # Ticks come from the service's clock, always past the fold's time: one that goes back is
            # refused (a replayed or forged tick), so no interval ends before it starts.
            raise ValueError(f"ClockTick at {at_ms} goes back before the latest event time {self.latest_ms}")
        handler = _FOLD.get(kind) if isinstance(kind, str) else None
        if handler is None:
            raise TypeError(f"cannot fold {type(event).__name__}")
        handler(self, e)

    def _on_pod_submitted(self, e: Any) -> None:
        uid = f"{e.namespace}/{e.name}"
        job_uid = f"{e.namespace}/{e.pod_group}"
        seq = self._pod_seq.get(job_uid, 0)
        self._pod_seq[job_uid] = seq + 1
        was = self.pods.get(uid)
        if was is not None and was.job != job_uid:
            # Submitted again under another pod group: it leaves the old one's pod list.
            self._job_pods.get(was.job, {}).pop(uid, None)
        self._job_pods.setdefault(job_uid, {})[uid] = None
        if e.v == 1 and not (e.node_selector or e.allowed_nodes or e.node_affinity or e.tolerations):
            # The hot path: a contract-v1 pod without placement constraints (what placement_fields
            # gives for it, without building its keyword arguments).
            pod = Pod(
                uid,
                e.name,
                job_uid,
                self._request(e.requests),
                task_priority=e.task_priority,
                index=seq,
                created_ms=e.created_at_ms,
                allowed_nodes=None if e.allowed_nodes is None else (),
                namespace=e.namespace,
            )
        else:
            pod = Pod(
                uid=uid,
                name=e.name,
                job=job_uid,
                request=self._request(e.requests),
                task_priority=e.task_priority,
                index=seq,
                created_ms=e.created_at_ms,
                **placement_fields(e),
            )
        self.pods[uid] = pod
        if was is None:  # a pod submitted again (new pod group, new spec) is still one pod of the workload
            shape = workload_shape(pod)
            if shape is not None:
                self.workload.add(shape)
                job = self.jobs.get(job_uid)
                pool = job.node_pool if job is not None and job.node_pool is not None else None
                if pool is None:
                    pool = pod.labels.get(NODE_POOL_LABEL, "")
                self.history.add(pool, getattr(e, "at_ms", 0), shape)
        if self.held_binds:
            held = self.held_binds.pop(uid, None)
            if held is not None:
                self._bound(uid, pod, held)

    def _on_pod_bound(self, e: Any) -> None:
        uid = f"{e.namespace}/{e.name}"
        bound = self.pods.get(uid)
        if bound is None:
            # Bound before it was submitted (two watchers, a relist): the cluster says it runs, so hold
            # the bind for the pod's PodSubmitted rather than drop it and later bind the pod again.
            if uid not in self.held_binds and len(self.held_binds) >= MAX_HELD_BINDS:
                raise ValueError(
                    f"PodBound for unknown pod {uid}: {MAX_HELD_BINDS} binds already wait for their pod"
                )
            self.held_binds[uid] = e
            return
        self._bound(uid, bound, e)

    def _on_pod_group_upserted(self, e: Any) -> None:
        uid = f"{e.namespace}/{e.name}"
        prio = e.priority
        if prio is None:
            prio = _PRIORITY_CLASSES.get(e.priority_class or "", DEFAULT_JOB_PRIORITY)
        preemptible = e.preemptible if e.preemptible is not None else prio < 100
        old_job = self.jobs.get(uid)
        subgroups = subgroups_from_event(e.subgroups)
        self.jobs[uid] = Job(
            uid=uid,
            name=e.name,
            queue=e.queue,
            min_available=subgroup_minimum(subgroups, e.min_sub_group) if subgroups else e.min_member,
            subgroups=subgroups,
            min_sub_group=e.min_sub_group,
            priority=prio,
            preemptible=preemptible,
            created_ms=e.created_at_ms,
            last_start_ms=old_job.last_start_ms if old_job else None,
            stale_since_ms=old_job.stale_since_ms if old_job else None,
            topology=e.topology,
            required_level=e.required_topology_level,
            preferred_level=e.preferred_topology_level,
            k8s_uid=e.k8s_uid,
            node_pool=e.node_pool,
            preemption_delay_ms=e.preemption_delay_ms,
            staleness_grace_ms=e.staleness_grace_ms,
        )

    def _on_node_upserted(self, e: Any) -> None:
        old_node = self.nodes.get(e.name)
        new_node = self.nodes[e.name] = node_from_event(e)
        if old_node is None or new_node.gpus < old_node.gpus:
            self._clamp_devices(new_node)

    def _on_node_removed(self, e: Any) -> None:
        self.nodes.pop(e.name, None)
        for uid, p in list(self.pods.items()):
            if p.node == e.name and p.status in (PodStatus.RUNNING, PodStatus.RELEASING):
                self.pods[uid] = evolve(p, status=PodStatus.FAILED)
                self._touch_job(p.job, e.at_ms)
        for uid in [u for u, f in self.foreign.items() if f.node == e.name]:
            del self.foreign[uid]

    def _on_queue_upserted(self, e: Any) -> None:
        self._check_parent(e.name, e.parent)
        old = self.queues.get(e.name)
        order = old.order if old is not None else self._queue_seq
        if old is None:
            self._queue_seq += 1
        res = {
            r: ResourceQuota.of(q.quota, q.limit, q.over_quota_weight)
            for r, q in (
                ("gpu", e.resources.gpu),
                ("cpu", e.resources.cpu),
                ("memory", e.resources.memory),
            )
        }
        self.queues[e.name] = Queue(
            name=e.name,
            parent=e.parent,
            resources=MappingProxyType(res),
            priority=e.priority,
            order=order,
            preempt_min_runtime_ms=e.preempt_min_runtime_ms,
            reclaim_min_runtime_ms=e.reclaim_min_runtime_ms,
            display_name=e.display_name,
            node_pool=getattr(e, "node_pool", None),
        )

    def _on_queue_deleted(self, e: Any) -> None:
        self.queues.pop(e.name, None)

    def _on_pod_group_deleted(self, e: Any) -> None:
        uid = f"{e.namespace}/{e.name}"
        if uid in self.jobs:
            self.jobs[uid] = evolve(self.jobs[uid], deleting=True)
            self._forget_if_done(uid)

    def _on_foreign_pod_upserted(self, e: Any) -> None:
        fp = foreign_pod_from_event(e)
        if fp.releasing:
            before = self.foreign.get(fp.uid)
            since = before.releasing_ms if before is not None and before.releasing else None
            fp = replace(fp, releasing_ms=e.at_ms if since is None else since)
        self.foreign[fp.uid] = fp

    def _on_pod_ungated(self, e: Any) -> None:
        uid = f"{e.namespace}/{e.name}"
        gated = self.pods.get(uid)
        if gated is not None and gated.gated:
            self.pods[uid] = evolve(gated, gated=False)

    def _on_pod_releasing(self, e: Any) -> None:
        uid = f"{e.namespace}/{e.name}"
        if uid in self.foreign and not self.foreign[uid].releasing:
            self.foreign[uid] = replace(self.foreign[uid], releasing=True, releasing_ms=e.at_ms)
        rel = self.pods.get(uid)
        if rel is not None and rel.node is not None:
            # The first PodReleasing dates the release; a repeated one does not restart the clock.
            since = (
                rel.releasing_ms
                if rel.status is PodStatus.RELEASING and rel.releasing_ms is not None
                else e.at_ms
            )
            self.pods[uid] = evolve(rel, status=PodStatus.RELEASING, releasing_ms=since)
            self._touch_job(rel.job, e.at_ms)

    def _on_pod_finished(self, e: Any) -> None:
        uid = f"{e.namespace}/{e.name}"
        self.foreign.pop(uid, None)
        fin = self.pods.get(uid)
        if fin is not None:
            st = PodStatus.SUCCEEDED if e.phase == "Succeeded" else PodStatus.FAILED
            self.pods[uid] = evolve(fin, status=st)
            self._touch_job(fin.job, e.at_ms)

    def _on_pod_deleted(self, e: Any) -> None:
        uid = f"{e.namespace}/{e.name}"
        self.foreign.pop(uid, None)
        gone = self.pods.pop(uid, None)
        if self.held_binds:
            self.held_binds.pop(uid, None)
        if gone is not None:
            self._job_pods.get(gone.job, {}).pop(uid, None)
            self._touch_job(gone.job, e.at_ms)
            self._forget_if_done(gone.job)

    def _on_topology_upserted(self, e: Any) -> None:
        self.topologies[e.name] = Topology(e.name, tuple(e.levels), tuple(sorted(e.aliases.items())))

    def _on_topology_deleted(self, e: Any) -> None:
        self.topologies.pop(e.name, None)

    def _on_namespace_upserted(self, e: Any) -> None:
        self.namespaces[e.name] = _labels(e.labels)

    def _on_namespace_deleted(self, e: Any) -> None:
        self.namespaces.pop(e.name, None)

    def _on_pod_volumes_changed(self, e: Any) -> None:
        uid = f"{e.namespace}/{e.name}"
        pod = self.pods.get(uid)
        if pod is not None and pod.status is PodStatus.PENDING:  # a placed pod keeps what it was placed with
            self.pods[uid] = evolve(pod, volumes=volumes_from_event(e.volumes))

    def _on_csi_node_upserted(self, e: Any) -> None:
        self.csi_nodes[e.name] = csi_node_from_event(e)

    def _on_csi_node_deleted(self, e: Any) -> None:
        self.csi_nodes.pop(e.name, None)

    def _on_clock_tick(self, e: Any) -> None:
        """Only time moves (the offset in :meth:`apply`, and the folder's logical time)."""

    def _bound(self, uid: str, p: Pod, e: Any) -> None:
        """Fold a ``PodBound`` of a known pod. Device indices the node does not have are dropped: a bind
        names the node's devices, and one beyond them (a stale or hand-written annotation, a node that
        shrank) would otherwise index past the node's devices in every session."""
        node = self.nodes.get(e.node)
        devices = tuple(e.gpu_devices)
        if node is not None and devices and max(devices) >= node.gpus:
            devices = tuple(d for d in devices if d < node.gpus)
        portion = 0
        if p.request.gpu_fraction_milli is not None:
            portion = p.request.gpu_fraction_milli
        elif p.request.gpu_memory_mib is not None:
            mem = (node.gpu_memory_mib or 100) // 100 * 100 if node else 100
            portion = -(-p.request.gpu_memory_mib * 100 // max(mem, 100)) * 10
        if FAST_BIND and p.status is PodStatus.PENDING:
            self._bind_pending(uid, p, e, portion, devices)
            return
        was_running = self._active(p.job)
        self.pods[uid] = evolve(
            p,
            status=PodStatus.RUNNING,
            node=e.node,
            gpu_devices=devices,
            gpu_milli_per_device=portion,
        )
        owner = self.jobs.get(p.job)
        if owner is not None and was_running == 0:
            self.jobs[p.job] = evolve(owner, last_start_ms=e.at_ms)
        self._touch_job(p.job, e.at_ms)

    def _bind_pending(self, uid: str, p: Pod, e: Any, portion: int, devices: tuple[int, ...]) -> None:
        """``PodBound`` of a pending pod: the general branch (``_active``, the bind, ``_touch_job``) in one
        pass over the job's pods. The pod was pending, so it counted in neither count before the bind and
        counts as active after it; the job's other pods are unchanged."""
        job_uid = p.job
        running = active = 0  # the other pods: allocated / running / releasing; running / releasing
        succeeded = False
        for u in self._job_pods.get(job_uid, ()):
            st = self.pods[u].status
            if st is PodStatus.RUNNING or st is PodStatus.RELEASING:
                running += 1
                active += 1
            elif st is PodStatus.ALLOCATED:
                running += 1
            elif st is PodStatus.SUCCEEDED:
                succeeded = True
        self.pods[uid] = evolve(
            p,
            status=PodStatus.RUNNING,
            node=e.node,
            gpu_devices=devices,
            gpu_milli_per_device=portion,
        )
        job = self.jobs.get(job_uid)
        if job is None:
            return
        if running == 0:
            job = evolve(job, last_start_ms=e.at_ms)
        active += 1
        # _touch_job's clocks; with this pod running, active > 0, so last_start_ms stays.
        stale = not succeeded and active < max(job.min_available, 1)
        if job.subgroups:
            stale = not succeeded and self._subgroups_short(job_uid, job)
        if stale and job.stale_since_ms is None:
            job = evolve(job, stale_since_ms=e.at_ms)
        elif not stale and job.stale_since_ms is not None:
            job = evolve(job, stale_since_ms=None)
        self.jobs[job_uid] = job

    def _clamp_devices(self, node: Node) -> None:
        """Drop the device indices ``node`` no longer has from the pods bound to it (a node whose GPU count
        shrank under running pods, or that arrived after their binds): no session may index past a node's
        devices. Only when a node appears or loses GPUs, which is rare."""
        for uid, p in list(self.pods.items()):
            if p.node == node.name and p.gpu_devices and max(p.gpu_devices) >= node.gpus:
                self.pods[uid] = evolve(p, gpu_devices=tuple(d for d in p.gpu_devices if d < node.gpus))

    def _check_parent(self, name: str, parent: str | None) -> None:
        """Refuse a queue whose parent chain would come back to it: every walk up the hierarchy (fair
        share, accounting) must end at a root."""
        seen = 0
        cur = parent
        while cur is not None and seen <= len(self.queues):
            if cur == name:
                raise ValueError(
                    f"queue {name!r} with parent {parent!r} makes a cycle in the queue hierarchy"
                )
            q = self.queues.get(cur)
            cur = q.parent if q is not None else None
            seen += 1

    def _request(self, r: Any) -> PodRequest:
        """The request of a ``PodRequests`` event field; equal requests share one (immutable) instance,
        since most pods of a cluster ask for one of a few shapes."""
        ext = r.extended
        key = (
            r.cpu_millicores,
            r.memory_bytes,
            r.gpus,
            r.gpu_fraction_milli,
            r.gpu_fraction_devices,
            r.gpu_memory_mib,
            tuple(sorted(ext.items())) if ext else (),
        )
        request = self._requests.get(key)
        if request is None:
            if len(self._requests) >= 10_000:
                self._requests.clear()
            request = self._requests[key] = PodRequest(*key)
        return request

    def _forget_if_done(self, job_uid: str) -> None:
        """Drop a deleted pod group once its last pod is gone: it can no longer affect a cycle, and
        keeping it would make every later snapshot walk all the jobs that ever finished."""
        job = self.jobs.get(job_uid)
        if job is not None and job.deleting and not self._job_pods.get(job_uid):
            del self.jobs[job_uid]
            self._job_pods.pop(job_uid, None)
            self._pod_seq.pop(job_uid, None)

    def _job_pod_list(self, job: str) -> list[Pod]:
        return [self.pods[u] for u in self._job_pods.get(job, {})]

    def _active(self, job: str) -> int:
        return sum(
            1
            for p in self._job_pod_list(job)
            if p.status in (PodStatus.RUNNING, PodStatus.RELEASING, PodStatus.ALLOCATED)
        )

    def _touch_job(self, job_uid: str, at_ms: int) -> None:
        """Keep the stale-gang clock: set when active pods drop below minAvailable, cleared otherwise."""
        job = self.jobs.get(job_uid)
        if job is None:
            return
        pods = self._job_pod_list(job_uid)
        active = sum(1 for p in pods if p.status in (PodStatus.RUNNING, PodStatus.RELEASING))
        succeeded = any(p.status is PodStatus.SUCCEEDED for p in pods)
        stale = not succeeded and 0 < active < max(job.min_available, 1)
        if job.subgroups:
            stale = not succeeded and active > 0 and self._subgroups_short(job_uid, job)
        if stale and job.stale_since_ms is None:
            self.jobs[job_uid] = evolve(job, stale_since_ms=at_ms)
        elif not stale and job.stale_since_ms is not None:
            self.jobs[job_uid] = evolve(job, stale_since_ms=None)
        if active == 0 and job.last_start_ms is not None and not stale:
            self.jobs[job_uid] = evolve(self.jobs[job_uid], last_start_ms=None)

    def job_pod_uids(self, job_uid: str) -> tuple[str, ...]:
        """The uids of the pods of a pod group the builder holds, in submission order."""
        return tuple(self._job_pods.get(job_uid, ()))

    def _subgroups_short(self, job_uid: str, job: Job) -> bool:
        """Some PodSet the job needs has fewer running (or releasing) pods than its minimum."""
        counts: dict[str, int] = {}
        for p in self._job_pod_list(job_uid):
            if p.status in (PodStatus.RUNNING, PodStatus.RELEASING):
                name = p.labels.get(SUBGROUP_LABEL, "default")
                counts[name] = counts.get(name, 0) + 1
        return not subgroups_satisfied(job.subgroups, job.min_sub_group, counts)

    def fork(self) -> StateBuilder:
        """An independent builder with the same state (what-if runs fold on from here, this one is
        untouched). Cheap: the objects are immutable, only the containers are copied."""
        other = StateBuilder()
        other.nodes, other.queues = dict(self.nodes), dict(self.queues)
        other.jobs, other.pods, other.foreign = dict(self.jobs), dict(self.pods), dict(self.foreign)
        other.topologies = dict(self.topologies)
        other.namespaces = dict(self.namespaces)
        other.csi_nodes = dict(self.csi_nodes)
        other.offset = self.offset
        other._queue_seq = self._queue_seq
        other._pod_seq = dict(self._pod_seq)
        other._job_pods = {k: dict(v) for k, v in self._job_pods.items()}
        other._requests = self._requests
        other.held_binds = dict(self.held_binds)
        other.latest_ms = self.latest_ms
        other.workload = self.workload.copy()
        other.history = self.history.copy()
        return other

    def snapshot(self) -> ClusterState:
        """Freeze the current state. Pods whose pod group is unknown are left out until it arrives."""
        pods = tuple(p for p in self.pods.values() if p.job in self.jobs)
        return ClusterState(
            nodes=tuple(self.nodes.values()),
            queues=tuple(self.queues.values()),
            jobs=tuple(self.jobs.values()),
            pods=pods,
            events_offset=self.offset,
            foreign_pods=tuple(self.foreign.values()),
            topologies=tuple(self.topologies[k] for k in sorted(self.topologies)),
            namespaces=tuple((k, self.namespaces[k]) for k in sorted(self.namespaces)),
            workload=self.workload.frozen,
            csi_nodes=tuple((k, self.csi_nodes[k]) for k in sorted(self.csi_nodes)),
            workload_history=self.history.frozen,
        )


_FOLD: Final[dict[str, Callable[[StateBuilder, Any], None]]] = {
    "PodSubmitted": StateBuilder._on_pod_submitted,
    "PodBound": StateBuilder._on_pod_bound,
    "PodGroupUpserted": StateBuilder._on_pod_group_upserted,
    "NodeUpserted": StateBuilder._on_node_upserted,
    "NodeRemoved": StateBuilder._on_node_removed,
    "QueueUpserted": StateBuilder._on_queue_upserted,
    "QueueDeleted": StateBuilder._on_queue_deleted,
    "PodGroupDeleted": StateBuilder._on_pod_group_deleted,
    "ForeignPodUpserted": StateBuilder._on_foreign_pod_upserted,
    "PodUngated": StateBuilder._on_pod_ungated,
    "PodReleasing": StateBuilder._on_pod_releasing,
    "PodFinished": StateBuilder._on_pod_finished,
    "PodDeleted": StateBuilder._on_pod_deleted,
    "TopologyUpserted": StateBuilder._on_topology_upserted,
    "TopologyDeleted": StateBuilder._on_topology_deleted,
    "NamespaceUpserted": StateBuilder._on_namespace_upserted,
    "NamespaceDeleted": StateBuilder._on_namespace_deleted,
    "PodVolumesChanged": StateBuilder._on_pod_volumes_changed,
    "CSINodeUpserted": StateBuilder._on_csi_node_upserted,
    "CSINodeDeleted": StateBuilder._on_csi_node_deleted,
    "ClockTick": StateBuilder._on_clock_tick,
}
"""Each event type's fold, by its ``type`` (the hot types first: dict order is the documentation's)."""


def fold(events: Iterable[object]) -> ClusterState:
    """Fold a sequence of events from the empty state into a snapshot."""
    b = StateBuilder()
    for e in events:
        b.apply(e)
    return b.snapshot()
