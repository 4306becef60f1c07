"""Extended resources: every resource a pod asks for beyond CPU, memory and ``nvidia.com/gpu``.

Each is a dimension checked against the node's allocatable, in integers (hugepages in bytes). Two kinds also
count as GPUs for queue quota and fair share, the way KAI charges them
(``pkg/scheduler/api/resource_info/resource_info.go`` ``GetSumGPUs``): a MIG instance
``nvidia.com/mig-<N>g.<M>gb`` counts as N GPUs (its compute slices), and ``amd.com/gpu`` is one whole GPU.
So is a GPU a DRA ResourceClaim asks for, which ingest spells ``dra.hourglass.dev/<driver>`` (on the pod and on
the node whose ResourceSlices publish it), so that a DRA GPU is charged to its queue as ``nvidia.com/gpu``.
A MIG profile is placed as a device of that profile: the node must advertise enough of exactly it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

GPU_MILLI = 1000
AMD_GPU = "amd.com/gpu"
# ingest.kube.dra.DRA_RESOURCE_PREFIX, repeated: the engine imports nothing of ingest.kube.
DRA_GPU_PREFIX = "dra.hourglass.dev/"
_MIG = re.compile(r"nvidia\.com/mig-(\d+)g\.(\d+)gb")


def mig_slices(name: str) -> int | None:
    """The compute slices (GPU count KAI charges) of a MIG resource name, None for anything else."""
    m = _MIG.fullmatch(name)
    return int(m.group(1)) if m else None


def gpu_equivalent_milli(extended: Iterable[tuple[str, int]]) -> int:
    """Milli-GPU the extended resources count for in quota and fair share (MIG slices, AMD and DRA GPUs)."""
    total = 0
    for name, amount in extended:
        if name == AMD_GPU or name.startswith(DRA_GPU_PREFIX):
            total += amount * GPU_MILLI
        else:
            slices = mig_slices(name)
            if slices is not None:
                total += slices * amount * GPU_MILLI
    return total
