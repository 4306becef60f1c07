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
VolumeAttachments attach to the node that no pod there accounts for count as well. In-tree volumes (a
claim's or inline) count as the CSI volume CSI migration translates them to; ingest translates them.

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
MIGRATION_FAILED = "node(s) have a CSINode and the pod's in-tree volume cannot be translated to CSI"

_USED = frozenset({PodStatus.ALLOCATED, PodStatus.PIPELINED, PodStatus.RUNNING, PodStatus.RELEASING})

AttachKey = tuple[str, ...]


def _attached(namespace: str, volumes: Iterable[Volume], disks: Iterable[Disk]) -> dict[AttachKey, str]:
    """The CSI volumes a pod attaches (unique name -> driver): its claims' and its migrated inline disks'."""
    out: dict[AttachKey, str] = {}
    for v in volumes:
        key = attach_key(namespace, v)
        if key is not None:
            out[key] = v.attach_driver
    for d in disks:
        if d.attach_driver and d.attach_handle:
            out[(d.attach_driver, d.attach_handle)] = d.attach_driver
    return out


def attach_key(namespace: str, v: Volume) -> AttachKey | None:
    """The unique name kube-scheduler counts a claim's CSI volume by (``getVolumeUniqueName``): driver and
    handle; for an unbound claim, driver and the claim itself (kube uses a random prefix + ns/claim)."""
    if not v.attach_driver:
        return None
    if v.attach_handle:
        return (v.attach_driver, v.attach_handle)
    return (v.attach_driver, "", namespace, v.claim)


@dataclass(slots=True)
class _NodeStorage:
    """One node's placed pods' disks (by pod) and CSI volumes (how many pods have each; unique volumes
    per driver)."""

    disks: dict[str, tuple[Disk, ...]] = field(default_factory=dict)
    volumes: Counter[AttachKey] = field(default_factory=Counter)
    drivers: Counter[str] = field(default_factory=Counter)


@dataclass(slots=True)
class StorageIndex:
    """The placed pods' claims in use (by namespace / claim) and, per node, their disks and CSI volumes.
    Kept current as pods move (:func:`moved`), not rebuilt: simulations move pods thousands of times."""

    claims: Counter[tuple[str, str]] = field(default_factory=Counter)
    on_node: dict[str, _NodeStorage] = field(default_factory=dict)
    # pod uid -> (node, its claims, its CSI volumes -> driver, its disks), for :meth:`remove`
    entries: dict[str, tuple[str, frozenset[tuple[str, str]], dict[AttachKey, str], tuple[Disk, ...]]] = (
        field(default_factory=dict)
    )

    def add(
        self, uid: str, namespace: str, node: str, volumes: Iterable[Volume], disks: tuple[Disk, ...]
    ) -> None:
        """Index one placed pod."""
        vols = tuple(volumes)
        mine = frozenset((namespace, v.claim) for v in vols if not v.missing)
        attached = _attached(namespace, vols, disks)
        self.entries[uid] = (node, mine, attached, disks)
        self.claims.update(mine)
        if not (disks or attached):
            return
        ns = self.on_node.setdefault(node, _NodeStorage())
        if disks:
            ns.disks[uid] = disks
        for key, driver in attached.items():
            ns.volumes[key] += 1
            if ns.volumes[key] == 1:
                ns.drivers[driver] += 1

    def remove(self, uid: str) -> None:
        """Forget a pod that left its node."""
        got = self.entries.pop(uid, None)
        if got is None:
            return
        node, mine, attached, _ = got
        self.claims.subtract(mine)
        ns = self.on_node.get(node)
        if ns is None:
            return
        ns.disks.pop(uid, None)
        for key, driver in attached.items():
            ns.volumes[key] -= 1
            if ns.volumes[key] <= 0:
                del ns.volumes[key]
                ns.drivers[driver] -= 1


def index(ssn: Session) -> StorageIndex:
    """The session's storage index, built on first use (tasks in uid order, then pods of other
    schedulers) and kept current by ``Session._set`` (:func:`moved`)."""
    if ssn.storage_index is None:
        idx = StorageIndex()
        for t in sorted(ssn.tasks, key=lambda t: t.uid):
            p = t.pod
            if t.node is not None and t.status in _USED and (p.volumes or p.disks):
                idx.add(t.uid, p.namespace, t.node.name, p.volumes, p.disks)
        for fp in ssn.state.foreign_pods:
            if fp.volumes or fp.disks:
                idx.add(fp.uid, fp.namespace, fp.node, fp.volumes, fp.disks)
        ssn.storage_index = idx
    return ssn.storage_index


def moved(ssn: Session, t: TaskInfo) -> None:
    """Task `t` changed status or node: its claims, disks and CSI volumes follow."""
    idx = ssn.storage_index
    if idx is None:
        return
    idx.remove(t.uid)
    p = t.pod
    if t.node is not None and t.status in _USED:
        idx.add(t.uid, p.namespace, t.node.name, p.volumes, p.disks)


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
    here = idx.on_node.get(node.name)
    own = idx.entries.get(task.uid)  # the task itself, when it is placed (consolidation re-checks it)
    if pod.disks and here is not None:
        for uid, disks in here.disks.items():
            if uid != task.uid and any(conflict(d, e) for d in pod.disks for e in disks):
                return DISK_CONFLICT
    for v in pod.volumes:
        if v.read_write_once_pod:
            c = (pod.namespace, v.claim)
            if idx.claims[c] - (own is not None and c in own[1]) > 0:
                return RWOP_CONFLICT
    return _limit_reason(ssn, here, own if own is not None and own[0] == node.name else None, task, node)


def _limit_reason(
    ssn: Session,
    here: _NodeStorage | None,
    own: tuple[str, frozenset[tuple[str, str]], dict[AttachKey, str], tuple[Disk, ...]] | None,
    task: TaskInfo,
    node: NodeInfo,
) -> str | None:
    pod = task.pod
    # ``checkAttachableInlineVolume`` fails the filter on a node with a CSINode, limits or not.
    if node.name in limits(ssn) and any(d.attach_driver and not d.attach_handle for d in pod.disks):
        return MIGRATION_FAILED
    new = _attached(pod.namespace, pod.volumes, pod.disks)
    if not new:
        return None
    node_limits, by_attachment = limits(ssn).get(node.name, ({}, {}))
    if not node_limits:
        return None
    volumes: Mapping[AttachKey, int] = here.volumes if here is not None else {}
    mine: Mapping[AttachKey, str] = own[2] if own is not None else {}

    def on_node(key: AttachKey) -> bool:  # another pod here has this volume
        return volumes.get(key, 0) - (key in mine) > 0

    want: dict[str, int] = {}
    for key, driver in new.items():
        if driver in node_limits and not on_node(key):
            want[driver] = want.get(driver, 0) + 1
    for driver, count in sorted(want.items()):
        have = here.drivers.get(driver, 0) if here is not None else 0
        have -= sum(1 for k, d in mine.items() if d == driver and volumes.get(k, 0) == 1)
        # VolumeAttachments no pod here accounts for count too; unlike the pods' volumes they are not
        # taken off the new ones (``getNodeVolumeAttachmentInfo`` as ``CSILimits.Filter`` uses it).
        have += sum(1 for k, d in by_attachment.items() if d == driver and not on_node(k))
        if have + count > node_limits[driver]:
            return MAX_VOLUME_COUNT
    return None


_CONFLICT_KINDS = frozenset({"gce_pd", "aws_ebs", "rbd", "iscsi"})


def conflict(a: Disk, b: Disk) -> bool:
    """Two inline disks cannot be on one node together (``isVolumeConflict``: GCE PD, AWS EBS, RBD and
    iSCSI only)."""
    if a.kind != b.kind or a.name != b.name or a.kind not in _CONFLICT_KINDS:
        return False
    both_ro = a.read_only and b.read_only
    if a.kind == "aws_ebs":
        return True
    if a.kind == "rbd":
        return a.pool == b.pool and bool(set(a.monitors) & set(b.monitors)) and not both_ro
    return not both_ro  # gce_pd, iscsi
