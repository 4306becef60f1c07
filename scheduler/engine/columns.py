"""Node capacity as columns (numpy arrays), so a task shape is checked against every node in one vector op.

One row per node, in node-name order (the rank of :class:`~scheduler.engine.session.FreeIndex`). The
columns hold what placement's checks read: future (idle + releasing) CPU and memory, pods counted as KAI
counts them, whole free devices, and ``room`` — the most milli-GPU left on a device that already hosts
shared pods and is not all releasing (what ``placement.fits_existing_shared`` asks). Rows are refreshed
lazily: ``Session._set`` marks the nodes it touches in ``FreeIndex.dirty`` and :meth:`Columns.sync` rewrites
only those rows before a query. Node specs are fixed within a session, so the checks that read only the
spec (:func:`placement.static_reason`) are computed once per task signature and kept.

All columns are int64 (exact integer units, as the scalar code): a vector check gives the same answer as
the scalar one for every node, which the property test ``tests/test_placement_columns.py`` checks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from scheduler.engine.session import GPU_MILLI, FreeIndex, NodeInfo, Session

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

NO_ROOM = np.iinfo(np.int64).min  # `room` of a node without a shared device that has pods on it


def _room(n: NodeInfo) -> int:
    """Most milli-GPU left on a device holding shared pods that are not all releasing (NO_ROOM if none)."""
    best = int(NO_ROOM)
    shared, alloc, pipe = n.dev_shared, n.dev_alloc, n.dev_pipe
    for d in range(n.gpus):
        held = alloc[d] + pipe[d]
        if shared[d] > 0 and held > 0 and GPU_MILLI - held > best:
            best = GPU_MILLI - held
    return best


class Columns:
    """Per-node capacity columns for one session, rows in node-name order (see the module docstring)."""

    def __init__(self, idx: FreeIndex) -> None:
        nodes = idx.by_rank
        self.idx = idx
        self.nodes = nodes
        n = len(nodes)
        self.size = n
        # NodeInfo.index (position in Session.nodes) -> rank
        self.rank_of_index = np.zeros(max((x.index for x in nodes), default=-1) + 1, dtype=np.int64)
        for r, x in enumerate(nodes):
            self.rank_of_index[x.index] = r
        self.gpus = np.array([x.gpus for x in nodes], dtype=np.int64)
        self.gpu_memory = np.array([x.gpu_memory_mib or 0 for x in nodes], dtype=np.int64)
        self.max_pods = np.array([x.spec.max_pods for x in nodes], dtype=np.int64)
        self.future_cpu = np.zeros(n, dtype=np.int64)
        self.future_memory = np.zeros(n, dtype=np.int64)
        self.idle_cpu = np.zeros(n, dtype=np.int64)
        self.idle_memory = np.zeros(n, dtype=np.int64)
        self.pods_used = np.zeros(n, dtype=np.int64)
        self.whole_future = np.zeros(n, dtype=np.int64)
        self.whole_idle = np.zeros(n, dtype=np.int64)
        self.room = np.zeros(n, dtype=np.int64)
        for r in range(n):
            self._row(r)
        idx.dirty = set()
        # static_reason per task signature: (passes, reason per rank)
        self.static: dict[tuple[object, ...], tuple[BoolArray, list[str | None]]] = {}
        self._ranks_for: tuple[Sequence[NodeInfo], int, IntArray] | None = None

    def _row(self, r: int) -> None:
        x = self.nodes[r]
        self.future_cpu[r] = x.future(0)
        self.future_memory[r] = x.future(1)
        self.idle_cpu[r] = x.idle(0)
        self.idle_memory[r] = x.idle(1)
        self.pods_used[r] = x.pods_used()
        self.whole_future[r] = len(x.whole_future_devices())
        self.whole_idle[r] = len(x.whole_idle_devices())
        self.room[r] = _room(x)

    def sync(self) -> None:
        """Rewrite the rows of the nodes moved since the last query."""
        dirty = self.idx.dirty
        if dirty:
            for r in dirty:
                self._row(r)
            dirty.clear()

    def ranks(self, nodes: Sequence[NodeInfo]) -> IntArray:
        """The rows of `nodes`, in their order (kept for the last sequence asked, e.g. ``Session.nodes``)."""
        got = self._ranks_for
        if got is not None and got[0] is nodes and got[1] == len(nodes):
            return got[2]
        out = self.rank_of_index[np.fromiter((x.index for x in nodes), dtype=np.int64, count=len(nodes))]
        self._ranks_for = (nodes, len(nodes), out)
        return out

    def shared_room_mask(self, fraction_milli: int | None, memory_mib: int | None) -> BoolArray:
        """Nodes with a device already shared (not all releasing) that has room for the task's portion.

        The portion is the fraction, or the GPU-memory request over each node's per-device memory (a node
        that advertises none has no portion, hence no room), as ``fits_existing_shared`` computes it.
        """
        if fraction_milli is not None:
            out: BoolArray = self.room >= fraction_milli
            return out
        if memory_mib is None:
            return np.zeros(self.size, dtype=np.bool_)
        has = self.gpu_memory > 0
        portion = -(-memory_mib * 100 // np.where(has, self.gpu_memory, 1)) * 10
        mask: BoolArray = has & (self.room >= portion)
        return mask


def columns(ssn: Session) -> Columns | None:
    """The session's columns, built on first use and brought up to date; None if the node list changed."""
    idx = ssn.free_index
    cols = idx.columns
    if not isinstance(cols, Columns):
        cols = Columns(idx)
        idx.columns = cols
    if cols.size != len(ssn.nodes):
        return None
    cols.sync()
    return cols
