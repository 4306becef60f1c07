"""Cluster state: an immutable snapshot of everything a scheduling cycle reads.

The snapshot is built either by folding the event log (:func:`fold`) or directly (conformance scenarios,
tests). All collections are tuples / insertion-ordered mappings built in a deterministic order, so the same
inputs always give an equal snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from scheduler.proportion import RESOURCES, ResourceQuota


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


@dataclass(frozen=True, slots=True)
class Queue:
    """A queue of the hierarchy. Resource keys are :data:`scheduler.proportion.RESOURCES`."""

    name: str
    parent: str | None
    resources: Mapping[str, ResourceQuota]
    priority: int = 100
    order: int = 0  # creation order; smaller = older
    preempt_min_runtime_ms: int | None = None
    reclaim_min_runtime_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Job:
    """A pod group: the unit of gang scheduling."""

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


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What one pod asks for. GPU amounts: whole devices, or a fraction / memory on shared devices."""

    cpu: int = 0  # millicores
    memory: int = 0  # bytes
    gpus: int = 0  # whole devices
    gpu_fraction_milli: int | None = None  # share of one device, 1..1000
    gpu_fraction_devices: int = 1
    gpu_memory_mib: int | None = None  # alternative to a fraction

    @property
    def is_shared(self) -> bool:
        """True when the pod asks for part of a device (by portion or by memory)."""
        return self.gpu_fraction_milli is not None or self.gpu_memory_mib is not None


@dataclass(frozen=True, slots=True)
class Pod:
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
    node_selector: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    allowed_nodes: tuple[str, ...] | None = None
    affinity: tuple[tuple[MatchExpression, ...], ...] = ()  # OR of AND-terms
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterState:
    """Immutable snapshot: nodes, queues, jobs and pods in deterministic order."""

    nodes: tuple[Node, ...] = ()
    queues: tuple[Queue, ...] = ()
    jobs: tuple[Job, ...] = ()
    pods: tuple[Pod, ...] = ()
    events_offset: int = -1  # last event folded into this snapshot


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
