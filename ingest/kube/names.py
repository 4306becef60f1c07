"""The names a KAI cluster and Hourglass agree on: labels, annotations, resources and priority classes.

KAI's keys are read as KAI writes them (a KAI user switches schedulers without relabelling anything);
Hourglass's own (``hourglass.io/...``) are written by the binder and read back by ingest.
"""

from __future__ import annotations

from typing import Final

# KAI's keys (kai-spec §2.2, §2.3, §2.5).
ANNOTATION_POD_GROUP: Final = "pod-group-name"
# KAI's topology annotations on a workload (the pod grouper copies them into spec.topologyConstraint).
ANNOTATION_TOPOLOGY: Final = "kai.scheduler/topology"
ANNOTATION_TOPOLOGY_REQUIRED: Final = "kai.scheduler/topology-required-placement"
ANNOTATION_TOPOLOGY_PREFERRED: Final = "kai.scheduler/topology-preferred-placement"
ANNOTATION_GPU_FRACTION: Final = "gpu-fraction"
ANNOTATION_GPU_MEMORY: Final = "gpu-memory"
ANNOTATION_GPU_FRACTION_DEVICES: Final = "gpu-fraction-num-devices"
LABEL_QUEUE: Final = "kai.scheduler/queue"
LABEL_NODE_POOL: Final = "kai.scheduler/node-pool"  # KAI's node pool of a PodGroup (absent: "default")
LABEL_TASK_PRIORITY: Final = "kai.scheduler/task-priority"
LABEL_PREEMPTIBILITY: Final = "kai.scheduler/preemptibility"
GPU_RESOURCE: Final = "nvidia.com/gpu"
# Hourglass's own, written by the binder on the Binding (so set on the pod with its node) and read back by
# ingest into PodBound: the devices the engine chose and the portion of each.
ANNOTATION_GPU_DEVICES: Final = "hourglass.io/gpu-devices"  # "0,3": device indices on the node
ANNOTATION_GPU_PORTION: Final = "hourglass.io/gpu-milli-per-device"  # "500" (1000 = a whole device)
ANNOTATION_CYCLE: Final = "hourglass.io/cycle-id"
# GPU sharing at run time (docs/gpu-sharing.md): the admission webhook names each sharing pod's ConfigMap; the
# binder fills it in before binding and records the shared devices' groups on the Binding.
ANNOTATION_GPU_CONFIGMAP: Final = "hourglass.io/gpu-configmap"
ANNOTATION_GPU_GROUPS: Final = "hourglass.io/gpu-groups"
# Reservation pods (one per shared device, in the binder's reservation namespace) carry this label. They hold
# the whole device through the device plugin on behalf of its sharers, so the engine must not count them.
LABEL_GPU_RESERVATION: Final = "hourglass.io/gpu-reservation"
LABEL_GPU_MEMORY: Final = "nvidia.com/gpu.memory"
LABEL_GPU_PRODUCT: Final = "nvidia.com/gpu.product"

PRIORITY_CLASSES: Final[dict[str, int]] = {
    "train": 50,
    "build-preemptible": 75,
    "build": 100,
    "inference": 125,
}
"""KAI's installed PriorityClasses and their values (kai-spec §2.4); preemptible iff value < 100."""
