"""A candidate placement the scoring rules rank: how a task fits one node, and the GPU devices it takes there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from scheduler.engine.session import GPU_MILLI

if TYPE_CHECKING:
    from scheduler.engine.session import NodeInfo, TaskInfo


@dataclass(frozen=True, slots=True)
class Fit:
    """How a task fits one node: on idle capacity now, or only once releasing pods are gone."""

    node: NodeInfo
    idle: bool
    devices: tuple[int, ...]
    portion: int  # shared pods: milli-GPU on each device
    new_shared_group: bool


def fits_existing_shared(node: NodeInfo, task: TaskInfo) -> bool:
    """True when a shared-GPU task fits a device that already hosts shared pods (not all releasing)."""
    req = task.request
    portion = req.gpu_fraction_milli
    if portion is None and req.gpu_memory_mib is not None:
        portion = node.memory_portion(req.gpu_memory_mib)
    if portion is None:
        return False
    shared, alloc, pipe = node.dev_shared, node.dev_alloc, node.dev_pipe
    for d in range(node.gpus):
        # dev_future(d) = GPU_MILLI - alloc - pipe, inlined: the binpack fast path asks this per node
        held = alloc[d] + pipe[d]
        if shared[d] > 0 and held > 0 and GPU_MILLI - held >= portion:
            return True
    return False
