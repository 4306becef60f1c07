"""KAI's node scores: binpack / spread at node and GPU level, plus the sharing, idle and CPU-only bonuses.

Node scores follow KAI's plugin constants and are summed: +1000 when a shared-GPU task fits an existing
shared device (binpack sharing), +100 when the task fits on idle capacity (not only on releasing capacity),
+10 for a CPU-only task on a CPU-only node, plus the node-placement score (binpack 0..9, spread 0..1).
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.engine.scoring.fit import Fit, fits_existing_shared
from scheduler.engine.session import GPU_MILLI, NodeInfo, Session, TaskInfo


def _placement_scores(ssn: Session, task: TaskInfo, fits: Sequence[Fit]) -> list[float]:
    cpu_only = task.is_cpu_only()
    strategy = ssn.config.cpu_placement if cpu_only else ssn.config.gpu_placement
    if strategy == "none":
        return [0.0] * len(fits)

    def free(n: NodeInfo) -> int:
        return n.future(0) if cpu_only else n.free_gpus_milli()

    def total(n: NodeInfo) -> int:
        return n.spec.cpu if cpu_only else n.gpus * GPU_MILLI

    if strategy == "spread":
        # KAI's spread counts what is left of shared GPUs too (GetSumOfIdleGPUs + releasing): a node whose
        # shared GPU still has room is freer than one whose GPU is full.
        spread_free = (lambda n: n.future(0)) if cpu_only else gpus_left_milli
        return [spread_free(f.node) / total(f.node) if total(f.node) else 0.0 for f in fits]
    frees = [free(f.node) for f in fits if total(f.node)]
    lo, hi = (min(frees), max(frees)) if frees else (0, 0)
    out = []
    for f in fits:
        if not total(f.node) or hi == 0:
            out.append(0.0)
        elif lo == hi:
            out.append(9.0)
        else:
            out.append(9.0 * (1 - (free(f.node) - lo) / (hi - lo)))
    return out


def gpus_left_milli(n: NodeInfo) -> int:
    """Idle + releasing GPU capacity in milli-GPU, whole devices and the room left on shared ones."""
    whole = n.whole_future_devices()
    left = GPU_MILLI * len(whole)
    for d in range(n.gpus):
        if n.dev_shared[d] > 0 and d not in whole:
            left += max(n.dev_future(d), 0)
    return left


def kai_scores(ssn: Session, task: TaskInfo, fits: Sequence[Fit]) -> list[float]:
    """KAI's summed node scores (see module docstring)."""
    base = _placement_scores(ssn, task, fits)
    # gpusharingorder runs only with binpack at both levels (KAI enables it iff placementStrategy.gpu is
    # binpack): with node-level spread, fractional pods spread over nodes and pack only within one.
    sharing_bonus = (
        task.shared
        and ssn.config.gpu_sharing_placement == "binpack"
        and ssn.config.gpu_placement == "binpack"
    )
    cpu_only = task.is_cpu_only()
    out = []
    for f, s in zip(fits, base, strict=True):
        if sharing_bonus and fits_existing_shared(f.node, task):
            s += 1000
        if f.idle:
            s += 100
        if cpu_only and f.node.gpus == 0:
            s += 10
        out.append(s)
    return out
