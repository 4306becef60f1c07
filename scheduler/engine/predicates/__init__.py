"""The filters a pod must pass to start on a node, beyond capacity and the node's own state, and the
node scores its preferences add. Each filter is a module of its own; docs/filters.md lists them all with
the reason code a user sees.

:func:`pod_reason` runs the filters that depend on the pod's own constraints or on other pods (extended
resources, host ports, volumes, inter-pod (anti-)affinity, topology spread); it is called from
:func:`scheduler.engine.placement.fit` only for tasks that have such constraints, or when some pod on a node
has required anti-affinity (symmetry), so an unconstrained pod costs nothing extra.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scheduler.engine.predicates import interpod, ports, resources, spread, storage, volumes

if TYPE_CHECKING:
    from scheduler.engine.session import NodeInfo, Session, TaskInfo


@dataclass(slots=True)
class TaskContext:
    """A task's filters resolved against the session at one version (cached while nothing moves)."""

    interpod: interpod.InterPodView | None
    spread: list[spread.Resolved]


def context(ssn: Session, task: TaskInfo) -> TaskContext:
    """The task's resolved inter-pod and spread views, recomputed only after something moved."""
    cached = ssn.pred_cache.get(task.uid)
    if cached is not None and cached[0] == ssn.version and isinstance(cached[1], TaskContext):
        return cached[1]
    pod = task.pod
    ip = interpod.view(ssn, task) if (pod.pod_affinity or pod.pod_anti_affinity or ssn.anti_present) else None
    if ip is not None and not (ip.affinity or ip.anti or ip.against):
        ip = None
    ctx = TaskContext(ip, spread.resolve(ssn, task, "DoNotSchedule") if pod.topology_spread else [])
    ssn.pred_cache[task.uid] = (ssn.version, ctx)
    return ctx


def existing_terms(ssn: Session, task: TaskInfo) -> list[tuple[str, str, int]]:
    """Placed pods' scoring terms that select the task (:meth:`PodIndex.soft_against`), recomputed only after
    something moved; empty at no cost when no placed pod has such terms."""
    if not ssn.soft_present:
        return []
    key = task.uid + "\0soft"
    cached = ssn.pred_cache.get(key)
    if cached is not None and cached[0] == ssn.version and isinstance(cached[1], list):
        return cached[1]
    pod = task.pod
    got = ssn.pod_index().soft_against(pod.namespace, pod.labels)
    ssn.pred_cache[key] = (ssn.version, got)
    return got


def pod_reason(ssn: Session, task: TaskInfo, node: NodeInfo) -> tuple[str | None, bool]:
    """(the first filter that rejects `node`, or None; whether the task can start there now rather than
    once releasing pods are gone)."""
    pod = task.pod
    idle = True
    if pod.volumes:
        r = volumes.reason(pod.volumes, node, volumes.taken(ssn, task) if volumes.waits(pod.volumes) else ())
        if r is not None:
            return r, False
    if (pod.volumes or pod.disks) and storage.needs_check(task):
        r = storage.reason(ssn, task, node)
        if r is not None:
            return r, False
    if pod.request.extended:
        r, ok = resources.extended_reason(node, pod.request.extended)
        if r is not None:
            return r, False
        idle = idle and ok
    if pod.host_ports:
        r, ok = ports.ports_reason(node, pod.host_ports)
        if r is not None:
            return r, False
        idle = idle and ok
    ctx = context(ssn, task)
    if ctx.interpod is not None:
        r, ok = interpod.reason(ssn, ctx.interpod, node)
        if r is not None:
            return r, False
        idle = idle and ok
    if ctx.spread:
        r = spread.reason(ctx.spread, node)
        if r is not None:
            return r, False
    return None, idle


# Score weights: each preference is scaled to 0..WEIGHT over the candidate nodes, so together they rank
# above bin-pack / spread (0..9) and below the idle-capacity bonus (+100) and GPU-sharing bonus (+1000).
PREFERRED_NODE_AFFINITY_WEIGHT = 20.0
PREFERRED_POD_AFFINITY_WEIGHT = 20.0
SCHEDULE_ANYWAY_SPREAD_WEIGHT = 20.0


def _scaled(raw: list[float], weight: float) -> list[float]:
    lo, hi = min(raw, default=0.0), max(raw, default=0.0)
    if hi == lo:
        return [0.0] * len(raw)
    return [weight * (x - lo) / (hi - lo) for x in raw]


def preference_scores(ssn: Session, task: TaskInfo, nodes: list[NodeInfo]) -> list[float] | None:
    """Node scores from the task's preferences (None when it states none)."""
    from scheduler.engine.predicates.labels import node_term_matches

    pod = task.pod
    has_pref_pod = any(t.weight for t in pod.pod_affinity) or any(t.weight for t in pod.pod_anti_affinity)
    # Placed pods' terms that select this pod add to the same inter-pod score (kube-scheduler's
    # processExistingPod: their required affinity with hardPodAffinityWeight, their preferred terms).
    existing = existing_terms(ssn, task)
    anyway = [c for c in pod.topology_spread if c.when_unsatisfiable == "ScheduleAnyway"]
    if not (pod.preferred_affinity or has_pref_pod or existing or anyway):
        return None
    total = [0.0] * len(nodes)
    if pod.preferred_affinity:
        raw = [
            float(
                sum(w for w, term in pod.preferred_affinity if node_term_matches(n.spec.labels, term, n.name))
            )
            for n in nodes
        ]
        total = [a + b for a, b in zip(total, _scaled(raw, PREFERRED_NODE_AFFINITY_WEIGHT), strict=True)]
    if has_pref_pod or existing:
        raw = interpod.preference(ssn, task, nodes) if has_pref_pod else [0.0] * len(nodes)
        if existing:
            raw = [
                a + b for a, b in zip(raw, interpod.existing_preference(ssn, existing, nodes), strict=True)
            ]
        total = [a + b for a, b in zip(total, _scaled(raw, PREFERRED_POD_AFFINITY_WEIGHT), strict=True)]
    if anyway:
        raw = spread.preference(spread.resolve(ssn, task, "ScheduleAnyway"), nodes)
        total = [a + b for a, b in zip(total, _scaled(raw, SCHEDULE_ANYWAY_SPREAD_WEIGHT), strict=True)]
    return total


# Reason codes: the machine-readable name of each filter, for Unschedulable details and docs/filters.md.
REASON_CODES: dict[str, str] = {
    ports.REASON: "HostPorts",
    interpod.AFFINITY: "InterPodAffinity",
    interpod.ANTI_AFFINITY: "InterPodAntiAffinity",
    interpod.EXISTING_ANTI_AFFINITY: "ExistingPodsAntiAffinity",
    spread.REASON: "PodTopologySpread",
    spread.MISSING_LABEL: "PodTopologySpreadMissingLabel",
    volumes.NODE_AFFINITY: "VolumeNodeAffinity",
    volumes.UNBOUND_IMMEDIATE: "VolumeUnboundImmediate",
    volumes.BIND_CONFLICT: "VolumeBindConflict",
    volumes.ZONE_CONFLICT: "VolumeZoneConflict",
    volumes.NOT_ENOUGH_SPACE: "VolumeNotEnoughSpace",
    volumes.EPHEMERAL_MISSING: "EphemeralClaimMissing",
    volumes.EPHEMERAL_NOT_OWNED: "EphemeralClaimNotOwned",
    storage.DISK_CONFLICT: "VolumeDiskConflict",
    storage.RWOP_CONFLICT: "ReadWriteOncePodConflict",
    storage.MAX_VOLUME_COUNT: "MaxVolumeCount",
    storage.MIGRATION_FAILED: "CSIMigrationFailed",
    "node(s) were not ready": "NodeNotReady",
    "node(s) were unschedulable": "NodeUnschedulable",
    "node(s) didn't match Pod's node affinity/selector": "NodeAffinity",
    "node(s) had too many pods": "TooManyPods",
    resources.INSUFFICIENT_EPHEMERAL_STORAGE: "Insufficientephemeral-storage",
}


def reason_code(message: str) -> str:
    """The code of a per-node reason message (prefix rules for the messages that name something)."""
    code = REASON_CODES.get(message)
    if code is not None:
        return code
    if message.startswith("node(s) had untolerated taint"):
        return "TaintToleration"
    if message.startswith("pod has unbound PersistentVolumeClaim"):  # records written before binding
        return "VolumeWaitForFirstConsumer"
    if message.startswith("node(s) didn't have resource "):
        return "ExtendedResourceMissing"
    if message.startswith("node(s) didn't have enough resources: "):
        what = message.rsplit(": ", 1)[1]
        if "/" in what or what.startswith("hugepages-"):
            return "InsufficientExtendedResource"
        return "Insufficient" + what.replace(" ", "")
    return "Other"


def filter_counts(why: Counter[str]) -> dict[str, int]:
    """Nodes rejected per reason code, sorted by code."""
    out: Counter[str] = Counter()
    for msg, n in why.items():
        out[reason_code(msg)] += n
    return dict(sorted(out.items()))
