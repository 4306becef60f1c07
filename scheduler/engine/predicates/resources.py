"""The extended-resources filter: every resource a pod asks for beyond CPU, memory and ``nvidia.com/gpu``
must fit the node's allocatable (see :mod:`scheduler.engine.predicates.extended` for how GPUs among them are charged)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduler.engine.session import NodeInfo


def extended_reason(node: NodeInfo, extended: Iterable[tuple[str, int]]) -> tuple[str | None, bool]:
    """(reason the node cannot hold the request, or None; whether it fits on idle capacity now)."""
    idle = True
    alloc, rel, pipe = node.ext_alloc, node.ext_rel, node.ext_pipe
    for name, amount in extended:
        cap = node.spec.extended.get(name, 0)
        if cap == 0:
            return f"node(s) didn't have resource {name}", False
        a, r, p = alloc.get(name, 0), rel.get(name, 0), pipe.get(name, 0)
        if cap - a - p < amount:
            return f"node(s) didn't have enough resources: {name}", False
        if cap - a - r - max(p - r, 0) < amount:
            idle = False
    return None, idle
