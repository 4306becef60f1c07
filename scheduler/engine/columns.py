"""Node capacity as columns (numpy arrays), so a task shape is checked against every node in one vector op.

One row per node, in node-name order (the rank of :class:`~scheduler.engine.session.FreeIndex`). The
columns hold what placement's checks read: future (idle + releasing) CPU and memory, pods counted as KAI
counts them, whole free devices, and ``room`` — the most milli-GPU left on a device that already hosts
shared pods and is not all releasing (what ``predicates.fit.fits_existing_shared`` asks). Rows are refreshed
lazily: ``Session._set`` marks the nodes it touches in ``FreeIndex.dirty`` and :meth:`Columns.sync` rewrites
only those rows before a query. Node specs are fixed within a session, so the checks that read only the
spec (:func:`placement.static_reason`) are computed once per task signature and kept.

All columns are int64 (exact integer units, as the scalar code): a vector check gives the same answer as
the scalar one for every node, which the property test ``tests/scheduler/engine/test_placement_columns.py`` checks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from scheduler.engine.session import GPU_MILLI, FreeIndex, NodeInfo, Session

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

NO_ROOM = np.iinfo(np.int64).min  # `room` of a node without a shared device that has pods on it


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
        self.cpu = np.array([x.spec.cpu for x in nodes], dtype=np.int64)
        self.future_cpu = np.zeros(n, dtype=np.int64)  # NodeInfo.future(0)
        self.future_memory = np.zeros(n, dtype=np.int64)  # NodeInfo.future(1)
        self.idle_cpu = np.zeros(n, dtype=np.int64)  # NodeInfo.idle(0)
        self.idle_memory = np.zeros(n, dtype=np.int64)  # NodeInfo.idle(1)
        self.pods_used = np.zeros(n, dtype=np.int64)  # NodeInfo.pods_used()
        self.whole_future = np.zeros(n, dtype=np.int64)  # len(NodeInfo.whole_future_devices())
        self.whole_idle = np.zeros(n, dtype=np.int64)  # len(NodeInfo.whole_idle_devices())
        self.room = np.zeros(n, dtype=np.int64)  # see the module docstring
        self.gpus_left = np.zeros(n, dtype=np.int64)  # scoring.kai.gpus_left_milli
        for r in range(n):
            self._row(r)
        idx.dirty = set()
        # static_reason per task signature: (passes, reason per rank)
        self.static: dict[tuple[object, ...], tuple[BoolArray, list[str | None]]] = {}
        self._ranks_for: tuple[Sequence[NodeInfo], int, IntArray] | None = None
        self.session_nodes: Sequence[NodeInfo] | None = None  # Session.nodes, set by columns()
        # Each row's node-kind number (placement's one-fit-per-kind scan) and the numbering it is from; rows
        # rewritten since are in `kind_dirty`, renumbered on the next read.
        self.kinds: tuple[object, IntArray] | None = None
        self.kind_dirty: set[int] = set()

    def _row(self, r: int) -> None:
        x = self.nodes[r]
        spec = x.spec
        alloc, rel, pipe = x.alloc, x.rel, x.pipe
        self.future_cpu[r] = spec.cpu - alloc[0] - pipe[0]
        self.future_memory[r] = spec.memory - alloc[1] - pipe[1]
        over = pipe[0] - rel[0]
        self.idle_cpu[r] = spec.cpu - alloc[0] - rel[0] - (over if over > 0 else 0)
        over = pipe[1] - rel[1]
        self.idle_memory[r] = spec.memory - alloc[1] - rel[1] - (over if over > 0 else 0)
        whole = whole_idle = shared_devices = left = 0
        room = int(NO_ROOM)
        shared, d_alloc, d_pipe, d_rel = x.dev_shared, x.dev_alloc, x.dev_pipe, x.dev_rel
        for d in range(x.gpus):
            a, p = d_alloc[d], d_pipe[d]
            is_whole = a == 0 and p == 0
            if is_whole:
                whole += 1
                if d_rel[d] == 0:
                    whole_idle += 1
            if shared[d] > 0:
                shared_devices += 1
                held = a + p
                if held > 0 and GPU_MILLI - held > room:
                    room = GPU_MILLI - held
                if not is_whole and held < GPU_MILLI:
                    left += GPU_MILLI - held
        self.pods_used[r] = x.pods + shared_devices
        self.whole_future[r] = whole
        self.whole_idle[r] = whole_idle
        self.room[r] = room
        self.gpus_left[r] = GPU_MILLI * whole + left

    def sync(self) -> None:
        """Rewrite the rows of the nodes moved since the last query."""
        dirty = self.idx.dirty
        if dirty:
            for r in dirty:
                self._row(r)
            if self.kinds is not None:
                self.kind_dirty |= dirty
            dirty.clear()

    def ranks(self, nodes: Sequence[NodeInfo]) -> IntArray:
        """The rows of `nodes`, in their order (kept for ``Session.nodes``, which a session never reorders;
        any other sequence is read afresh: a caller may reuse and refill its list)."""
        got = self._ranks_for
        if got is not None and got[0] is nodes and got[1] == len(nodes):
            return got[2]
        out = self.rank_of_index[np.fromiter((x.index for x in nodes), dtype=np.int64, count=len(nodes))]
        if nodes is self.session_nodes:
            self._ranks_for = (nodes, len(nodes), out)
        return out

    def portions(self, fraction_milli: int | None, memory_mib: int | None) -> tuple[IntArray, BoolArray]:
        """Milli-GPU a shared task takes on one device of each node, and where that is known.

        The fraction, or the GPU-memory request over the node's per-device memory rounded up as
        ``NodeInfo.memory_portion`` rounds it; unknown on nodes that advertise no GPU memory.
        """
        if fraction_milli is not None:
            return np.full(self.size, fraction_milli, dtype=np.int64), np.ones(self.size, dtype=np.bool_)
        if memory_mib is None:
            return np.zeros(self.size, dtype=np.int64), np.zeros(self.size, dtype=np.bool_)
        known: BoolArray = self.gpu_memory > 0
        portion: IntArray = -(-memory_mib * 100 // np.where(known, self.gpu_memory, 1)) * 10
        return portion, known

    def shared_room_mask(self, fraction_milli: int | None, memory_mib: int | None) -> BoolArray:
        """Nodes with a device already shared (not all releasing) that has room for the task's portion
        (what ``predicates.fit.fits_existing_shared`` asks of each node)."""
        portion, known = self.portions(fraction_milli, memory_mib)
        mask: BoolArray = known & (self.room >= portion)
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
    cols.session_nodes = ssn.nodes
    cols.sync()
    return cols
