"""The extended-resources filter: every resource a pod asks for beyond CPU, memory and ``nvidia.com/gpu``
must fit the node's allocatable (see :mod:`scheduler.engine.predicates.extended` for how GPUs among them are charged).

``ephemeral-storage`` travels with them (bytes) but is checked as kube-scheduler's NodeResourcesFit checks
it: before the extended resources, and a node that reports none has none ("Insufficient ephemeral-storage",
not a missing resource)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduler.engine.session import NodeInfo

# ingest.events.EPHEMERAL_STORAGE, repeated: the engine imports nothing of ingest.
EPHEMERAL_STORAGE = "ephemeral-storage"
INSUFFICIENT_EPHEMERAL_STORAGE = "Insufficient ephemeral-storage"


def extended_reason(node: NodeInfo, extended: Iterable[tuple[str, int]]) -> tuple[str | None, bool]:
    """(reason the node cannot hold the request, or None; whether it fits on idle capacity now)."""
    idle = True
    alloc, rel, pipe = node.ext_alloc, node.ext_rel, node.ext_pipe
    wanted = list(extended)
    # kube-scheduler's fitsRequest checks ephemeral storage before the scalar resources.
    wanted.sort(key=lambda kv: kv[0] != EPHEMERAL_STORAGE)
    for name, amount in wanted:
        cap = node.spec.extended.get(name, 0)
        storage = name == EPHEMERAL_STORAGE
        if cap == 0 and not storage:
            return f"node(s) didn't have resource {name}", False
        a, r, p = alloc.get(name, 0), rel.get(name, 0), pipe.get(name, 0)
        if cap - a - p < amount:
            return (
                INSUFFICIENT_EPHEMERAL_STORAGE if storage else f"node(s) didn't have enough resources: {name}"
            ), False
        if cap - a - r - max(p - r, 0) < amount:
            idle = False
    return None, idle
