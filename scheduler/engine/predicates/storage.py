"""Storage filters that depend on other pods: kube-scheduler's VolumeRestrictions and NodeVolumeLimits.

VolumeRestrictions (``volumerestrictions/volume_restrictions.go``):

- a claim with the ReadWriteOncePod access mode that another placed pod (ours or another scheduler's, on
  any node) mounts keeps the pod off every node (``IsPVCUsedByPods``);
- an inline disk conflicts with the same disk of a pod on the node (``isVolumeConflict``): a GCE PD of the
  same name unless both mount it read-only, an AWS EBS volume of the same ID (read-only or not), an iSCSI
  target of the same IQN unless both are read-only, an RBD image of the same pool and image with a
  monitor in common unless both are read-only.

NodeVolumeLimits (``nodevolumelimits/csi.go``, ``CSILimits.Filter``): the unique CSI volumes of the pods on
the node (``driver/handle``; an unbound claim counts as one volume of its class's provisioner, however many
pods mount it) plus the incoming pod's new ones must not exceed the node's CSINode ``allocatable.count`` of
each driver. A driver without a count, or a node without a CSINode, has no limit. The CSI volumes
VolumeAttachments attach to the node that no pod there accounts for count as well.

Pods being deleted (releasing) still hold their claims and disks, as they do in kube-scheduler's cache.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scheduler.engine.state import Disk, PodStatus, Volume

if TYPE_CHECKING:
    from scheduler.engine.session import NodeInfo, Session, TaskInfo

DISK_CONFLICT = "node(s) had no available disk"
RWOP_CONFLICT = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by"
    " another pod"
)
MAX_VOLUME_COUNT = "node(s) exceed max volume count"

_USED = frozenset({PodStatus.ALLOCATED, PodStatus.PIPELINED, PodStatus.RUNNING, PodStatus.RELEASING})
_CACHE_KEY = "\x00storage"  # not a pod uid: the session-wide index shares the per-task filter cache

AttachKey = tuple[str, ...]


def attach_key(namespace: str, v: Volume) -> AttachKey | None:
    """The unique name kube-scheduler counts a claim's CSI volume by (``getVolumeUniqueName``): driver and
    handle; for an unbound claim, driver and the claim itself (kube uses a random prefix + ns/claim)."""
    if not v.attach_driver:
        return None
    if v.attach_handle:
        return (v.attach_driver, v.attach_handle)
    return (v.attach_driver, "", namespace, v.claim)


@dataclass(slots=True)
class _Placed:
    uid: str
    disks: tuple[Disk, ...]
    attached: dict[AttachKey, str]  # unique volume -> driver


@dataclass(slots=True)
class StorageIndex:
    """The placed pods' claims in use (by namespace / claim) and, per node, their disks and CSI volumes."""

    claims: Counter[tuple[str, str]] = field(default_factory=Counter)
    claims_of: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    on_node: dict[str, list[_Placed]] = field(default_factory=dict)

    def add(
        self, uid: str, namespace: str, node: str, volumes: Iterable[Volume], disks: tuple[Disk, ...]
    ) -> None:
        """Index one placed pod."""
        vols = tuple(volumes)
        mine = {(namespace, v.claim) for v in vols if not v.missing}
        if mine:
            self.claims.update(mine)
            self.claims_of[uid] = mine
        attached = {}
        for v in vols:
            key = attach_key(namespace, v)
            if key is not None:
                attached[key] = v.attach_driver
        if disks or attached:
            self.on_node.setdefault(node, []).append(_Placed(uid, disks, attached))


def index(ssn: Session) -> StorageIndex:
    """The session's storage index at its current version (rebuilt after a move, only for pods that ask)."""
    cached = ssn.pred_cache.get(_CACHE_KEY)
    if cached is not None and cached[0] == ssn.version and isinstance(cached[1], StorageIndex):
        return cached[1]
    idx = StorageIndex()
    for t in ssn.tasks:
        p = t.pod
        if t.node is not None and t.status in _USED and (p.volumes or p.disks):
            idx.add(t.uid, p.namespace, t.node.name, p.volumes, p.disks)
    for fp in ssn.state.foreign_pods:
        if fp.volumes or fp.disks:
            idx.add(fp.uid, fp.namespace, fp.node, fp.volumes, fp.disks)
    ssn.pred_cache[_CACHE_KEY] = (ssn.version, idx)
    return idx


def limits(ssn: Session) -> Mapping[str, tuple[Mapping[str, int], Mapping[AttachKey, str]]]:
    """Node -> (driver -> attach limit, from its CSINode, drivers without a count left out; the volumes
    VolumeAttachments attach there -> driver)."""
    key = ("csi_limits",)
    got = ssn.static_cache.get(key)
    if got is None:
        got = {
            node: ({d: c for d, c in csi.drivers if c is not None}, {(d, h): d for d, h in csi.attached})
            for node, csi in ssn.state.csi_nodes
        }
        ssn.static_cache[key] = got
    return got  # type: ignore[return-value]


def needs_check(task: TaskInfo) -> bool:
    """The pod has something these filters look at."""
    p = task.pod
    return bool(p.disks) or any(v.read_write_once_pod or v.attach_driver for v in p.volumes)


def reason(ssn: Session, task: TaskInfo, node: NodeInfo) -> str | None:
    """Why the pod's disks, ReadWriteOncePod claims or CSI volumes keep it off `node`, or None."""
    pod = task.pod
    idx = index(ssn)
    if pod.disks:
        for other in idx.on_node.get(node.name, ()):
            if other.uid != task.uid and any(conflict(d, e) for d in pod.disks for e in other.disks):
                return DISK_CONFLICT
    rwop = {(pod.namespace, v.claim) for v in pod.volumes if v.read_write_once_pod}
    if rwop:
        own = idx.claims_of.get(task.uid, set())
        if any(idx.claims[c] - (c in own) > 0 for c in rwop):
            return RWOP_CONFLICT
    return _limit_reason(ssn, idx, task, node)


def _limit_reason(ssn: Session, idx: StorageIndex, task: TaskInfo, node: NodeInfo) -> str | None:
    pod = task.pod
    new: dict[AttachKey, str] = {}
    for v in pod.volumes:
        key = attach_key(pod.namespace, v)
        if key is not None:
            new[key] = v.attach_driver
    if not new:
        return None
    node_limits, by_attachment = limits(ssn).get(node.name, ({}, {}))
    if not node_limits:
        return None
    attached: dict[AttachKey, str] = {}
    for other in idx.on_node.get(node.name, ()):
        if other.uid != task.uid:
            attached.update(other.attached)
    for key in attached:
        new.pop(key, None)
    have = Counter(attached.values())
    # VolumeAttachments no pod here accounts for count too; unlike the pods' volumes they are not taken
    # off the new ones (``getNodeVolumeAttachmentInfo`` as ``CSILimits.Filter`` uses it).
    have.update(d for k, d in by_attachment.items() if k not in attached)
    for driver, count in sorted(Counter(new.values()).items()):
        limit = node_limits.get(driver)
        if limit is not None and have[driver] + count > limit:
            return MAX_VOLUME_COUNT
    return None


def conflict(a: Disk, b: Disk) -> bool:
    """Two inline disks cannot be on one node together (``isVolumeConflict``)."""
    if a.kind != b.kind or a.name != b.name:
        return False
    both_ro = a.read_only and b.read_only
    if a.kind == "aws_ebs":
        return True
    if a.kind == "rbd":
        return a.pool == b.pool and bool(set(a.monitors) & set(b.monitors)) and not both_ro
    return not both_ro  # gce_pd, iscsi
