"""Volumes: kube-scheduler's VolumeBinding and VolumeZone filters, for the claims ingest resolved.

VolumeBinding: a bound PersistentVolume with required node affinity (a zonal disk, a local volume) pins
the pod to the nodes it selects; an unbound ``Immediate`` claim keeps the pod pending until the volume
controller binds it; an unbound ``WaitForFirstConsumer`` claim admits a node where one of its candidate
volumes (available, of its class, large enough, right modes: ingest checked those) has node affinity the
node satisfies, or else where its StorageClass can provision a volume (a provisioner other than
``kubernetes.io/no-provisioner``, ``allowedTopologies`` matching the node). Several such claims of one pod
take distinct volumes, smallest claim first, as ``findMatchingVolumes`` does.

CSI storage capacity (VolumeBinding's ``hasEnoughCapacity``): where the claim's class provisions through a
CSI driver with ``storageCapacity: true``, a node is also required to see a CSIStorageCapacity of the class
with room for the request (ingest kept those with room; ``capacity_topologies`` say where they are).

Generic ephemeral volumes: the claim ``<pod>-<volume>`` must exist and be owned by the pod
(``ephemeral.VolumeIsForPod``), else the pod waits on every node with a reason saying which.

VolumeZone: a bound volume's zone / region labels (``topology.kubernetes.io/*`` and the legacy
``failure-domain.beta.kubernetes.io/*``; several zones joined by ``__``) must name the node's value — unless
the node has none of these labels at all (a single-zone cluster).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from scheduler.engine.predicates.labels import node_terms_match
from scheduler.engine.state import PodStatus

if TYPE_CHECKING:
    from scheduler.engine.session import NodeInfo, Session, TaskInfo
    from scheduler.engine.state import Volume

NODE_AFFINITY = "node(s) had volume node affinity conflict"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
ZONE_CONFLICT = "node(s) had no available volume zone"
NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
EPHEMERAL_MISSING = "pod's generic ephemeral volume claim (<pod>-<volume>) does not exist yet"
EPHEMERAL_NOT_OWNED = "pod's generic ephemeral volume claim was not created for the pod (pod is not owner)"

BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
ZONE_KEYS = (BETA_ZONE, BETA_REGION, ZONE, REGION)  # VolumeZone's topologyLabels, in its order
_GA = {BETA_ZONE: ZONE, BETA_REGION: REGION}
ZONE_SEPARATOR = "__"  # cloud-provider's LabelMultiZoneDelimiter


def zone_set(value: str) -> frozenset[str] | None:
    """The zones a volume label names (``a__b``), spaces trimmed; None when one is empty: VolumeZone
    ignores such a label (``LabelZonesToSet`` fails)."""
    zones = [z.strip() for z in value.split(ZONE_SEPARATOR)]
    if any(not z for z in zones):
        return None
    return frozenset(zones)


def reason(volumes: tuple[Volume, ...], node: NodeInfo, taken: Collection[str] = ()) -> str | None:
    """Why the pod's volumes keep it off `node`, or None; ``taken``: volumes other pods' claims took."""
    for v in volumes:
        if v.ephemeral and v.missing:
            return EPHEMERAL_MISSING
        if v.ephemeral and v.not_owned:
            return EPHEMERAL_NOT_OWNED
    if any(not v.bound and v.binding_mode != "WaitForFirstConsumer" for v in volumes):
        return UNBOUND_IMMEDIATE
    labels = node.spec.labels
    for v in volumes:
        if v.bound and v.node_affinity and not node_terms_match(labels, v.node_affinity, node.name):
            return NODE_AFFINITY
    waiting = waits(volumes)
    if waiting:
        got = _assign(waiting, labels, node.name, taken)
        if isinstance(got, str):
            return got
    if not _zones_match(volumes, labels):
        return ZONE_CONFLICT
    return None


def waits(volumes: tuple[Volume, ...]) -> list[Volume]:
    """The pod's unbound WaitForFirstConsumer claims."""
    return [v for v in volumes if not v.bound and v.binding_mode == "WaitForFirstConsumer"]


def _assign(
    claims: list[Volume], labels: Mapping[str, str], name: str, taken: Collection[str] = ()
) -> list[tuple[str, str]] | str:
    """(claim, volume) for each WaitForFirstConsumer claim on this node — a distinct candidate volume no
    other pod took, or "" where its class provisions one here — or the reason one of them cannot bind
    (no volume and no provisioning here; provisioning here but no storage capacity with room)."""
    chosen: set[str] = set(taken)
    out = []
    for v in sorted(claims, key=lambda c: c.request_bytes):  # stable: equal requests keep pod order
        pick = next(
            (n for n, terms in v.candidates if n not in chosen and node_terms_match(labels, terms, name)),
            None,
        )
        if pick is not None:
            chosen.add(pick)
            out.append((v.claim, pick))
        elif v.provision and node_terms_match(labels, v.allowed_topologies, name):
            if v.capacity_checked and not _has_capacity(v, labels, name):
                return NOT_ENOUGH_SPACE
            out.append((v.claim, ""))
        else:
            return BIND_CONFLICT
    return out


def _has_capacity(v: Volume, labels: Mapping[str, str], name: str) -> bool:
    """A CSIStorageCapacity with room for the claim covers this node (an empty ``capacity_topologies``
    covers none: ``node_terms_match`` would read it as "anywhere")."""
    if v.capacity_anywhere:
        return True
    return bool(v.capacity_topologies) and node_terms_match(labels, v.capacity_topologies, name)


def bindings(volumes: tuple[Volume, ...], node: NodeInfo, taken: Collection[str] = ()) -> dict[str, str]:
    """What the binder does before binding the pod to `node` (kube-scheduler's VolumeBinding PreBind):
    each unbound WaitForFirstConsumer claim's chosen volume, or "" to have its class provision one there.
    Empty when the pod has no such claim (or they cannot bind there)."""
    waiting = waits(volumes)
    if not waiting:
        return {}
    got = _assign(waiting, node.spec.labels, node.name, taken)
    return {} if isinstance(got, str) else dict(got)


# -- volumes taken by the session's placed pods ---------------------------------------------------------

_PLACED = frozenset({PodStatus.ALLOCATED, PodStatus.PIPELINED, PodStatus.RUNNING, PodStatus.RELEASING})


def picks(ssn: Session) -> dict[str, dict[str, str]]:
    """Each placed task's claim -> volume, built on first use in pod-uid order (pods placed before the
    session opened: the same whichever way the session was built), then kept current by ``Session._set``
    (:func:`moved`): a task takes its volumes when placed, excluding every volume taken before, and gives
    them back when it leaves its node or is rolled back."""
    if ssn.vol_picks is None:
        ssn.vol_picks = {}
        for t in sorted((t for t in ssn.tasks if t.pod.volumes), key=lambda t: t.uid):
            moved(ssn, t)
    return ssn.vol_picks


def moved(ssn: Session, t: TaskInfo) -> None:
    """Task `t` changed status or node: its volumes follow."""
    held = ssn.vol_picks
    if held is None:
        return
    held.pop(t.uid, None)
    if t.node is None or t.status not in _PLACED or not waits(t.pod.volumes):
        return
    held[t.uid] = bindings(t.pod.volumes, t.node, taken_by_others(held, t.uid))


def taken_by_others(held: Mapping[str, Mapping[str, str]], uid: str) -> set[str]:
    """The volumes placed tasks other than `uid` took."""
    return {v for other, m in held.items() if other != uid for v in m.values() if v}


def taken(ssn: Session, t: TaskInfo) -> set[str]:
    """The volumes the session's other placed pods took: no longer candidates for `t`."""
    return taken_by_others(picks(ssn), t.uid)


def chosen(ssn: Session, t: TaskInfo) -> dict[str, str]:
    """The volumes placed task `t` takes (its Bind decision's ``details.volumes``)."""
    return dict(picks(ssn).get(t.uid, {}))


def _zones_match(volumes: tuple[Volume, ...], labels: Mapping[str, str]) -> bool:
    if not any(k in labels for k in ZONE_KEYS):
        return True  # a node with no zone labels: a single-zone cluster
    for v in volumes:
        for key, value in v.zone_labels:
            if key not in ZONE_KEYS:
                continue  # the volume's other labels
            zones = zone_set(value)
            if zones is None:
                continue
            got = labels.get(key)
            if got is None:
                got = labels.get(_GA.get(key, key))
            if got is None or got not in zones:
                return False
    return True
