"""Volumes (kube-scheduler's VolumeBinding / VolumeZone, for claims ingest resolved).

A bound PersistentVolume with required node affinity (a zonal disk, a local volume) pins the pod to the
nodes it selects. Hourglass does not provision volumes: an unbound claim is never bound silently; the pod
stays pending with a reason naming the claim (``WaitForFirstConsumer``) or the unbound immediate claim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.engine.predicates.labels import node_terms_match

if TYPE_CHECKING:
    from scheduler.engine.session import NodeInfo
    from scheduler.engine.state import Volume

NODE_AFFINITY = "node(s) had volume node affinity conflict"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


def reason(volumes: tuple[Volume, ...], node: NodeInfo) -> str | None:
    """Why the pod's volumes keep it off `node`, or None."""
    for v in volumes:
        if not v.bound:
            if v.binding_mode == "WaitForFirstConsumer":
                return (
                    f"pod has unbound PersistentVolumeClaim {v.claim} (WaitForFirstConsumer): Hourglass does "
                    "not provision volumes; bind it first or use Immediate binding"
                )
            return UNBOUND_IMMEDIATE
    for v in volumes:
        if v.node_affinity and not node_terms_match(node.spec.labels, v.node_affinity, node.name):
            return NODE_AFFINITY
    return None
