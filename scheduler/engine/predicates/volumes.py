"""Volumes: kube-scheduler's VolumeBinding and VolumeZone filters, for the claims ingest resolved.

VolumeBinding: a bound PersistentVolume with required node affinity (a zonal disk, a local volume) pins
the pod to the nodes it selects; an unbound ``Immediate`` claim keeps the pod pending until the volume
controller binds it; an unbound ``WaitForFirstConsumer`` claim admits a node where one of its candidate
volumes (available, of its class, large enough, right modes: ingest checked those) has node affinity the
node satisfies, or else where its StorageClass can provision a volume (a provisioner other than
``kubernetes.io/no-provisioner``, ``allowedTopologies`` matching the node). Several such claims of one pod
take distinct volumes, smallest claim first, as ``findMatchingVolumes`` does.

VolumeZone: a bound volume's zone / region labels (``topology.kubernetes.io/*`` and the legacy
``failure-domain.beta.kubernetes.io/*``; several zones joined by ``__``) must name the node's value — unless
the node has none of these labels at all (a single-zone cluster).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from scheduler.engine.predicates.labels import node_terms_match

if TYPE_CHECKING:
    from scheduler.engine.session import NodeInfo
    from scheduler.engine.state import Volume

NODE_AFFINITY = "node(s) had volume node affinity conflict"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
ZONE_CONFLICT = "node(s) had no available volume zone"

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


def reason(volumes: tuple[Volume, ...], node: NodeInfo) -> str | None:
    """Why the pod's volumes keep it off `node`, or None."""
    if any(not v.bound and v.binding_mode != "WaitForFirstConsumer" for v in volumes):
        return UNBOUND_IMMEDIATE
    labels = node.spec.labels
    for v in volumes:
        if v.bound and v.node_affinity and not node_terms_match(labels, v.node_affinity, node.name):
            return NODE_AFFINITY
    waiting = [v for v in volumes if not v.bound]
    if waiting and not _can_bind(waiting, labels, node.name):
        return BIND_CONFLICT
    if not _zones_match(volumes, labels):
        return ZONE_CONFLICT
    return None


def _can_bind(claims: list[Volume], labels: Mapping[str, str], name: str) -> bool:
    return _assign(claims, labels, name) is not None


def _assign(claims: list[Volume], labels: Mapping[str, str], name: str) -> list[tuple[str, str]] | None:
    """(claim, volume) for each WaitForFirstConsumer claim on this node — a distinct candidate volume, or
    "" where its class provisions one here — or None when one of them cannot bind here."""
    chosen: set[str] = set()
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
            out.append((v.claim, ""))
        else:
            return None
    return out


def bindings(volumes: tuple[Volume, ...], node: NodeInfo) -> dict[str, str]:
    """What the binder does before binding the pod to `node` (kube-scheduler's VolumeBinding PreBind):
    each unbound WaitForFirstConsumer claim's chosen volume, or "" to have its class provision one there.
    Empty when the pod has no such claim."""
    waiting = [v for v in volumes if not v.bound and v.binding_mode == "WaitForFirstConsumer"]
    if not waiting:
        return {}
    return dict(_assign(waiting, node.spec.labels, node.name) or ())


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
