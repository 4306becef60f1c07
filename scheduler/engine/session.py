"""The working copy a scheduling cycle mutates, and the statement that makes each change transactional.

A :class:`Session` is opened from an immutable :class:`~scheduler.engine.state.ClusterState`. Actions change it
only through a :class:`Statement`: every placement or eviction is applied tentatively and can be rolled back
to a checkpoint, so a job that cannot be placed completely leaves no trace (KAI's statement model).

Accounting is in exact integers: milli-GPU, millicores, bytes. Each GPU device has three buckets of
milli-GPU held on it: by allocated/running pods (``alloc``), by releasing pods (``rel``) and by pipelined
pods (``pipe``). Pipelined pods consume releasing capacity first, then idle capacity.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace

from scheduler.engine import subgroups
from scheduler.engine.predicates import hostports as host_ports
from scheduler.engine.predicates import storage as storage_index
from scheduler.engine.predicates import volumes as volume_picks
from scheduler.engine.predicates.extended import gpu_equivalent_milli
from scheduler.engine.predicates.podindex import Entry, PodIndex, has_soft_terms, soft_terms
from scheduler.engine.proportion import RESOURCES, QueueDemand, QueueShare, ResourceQuota, divide
from scheduler.engine.state import (
    NODE_POOL_LABEL,
    ClusterState,
    ForeignPod,
    Job,
    Node,
    Pod,
    PodRequest,
    PodStatus,
    Queue,
    pool_view,
    subgroup_minimum,
)

GPU_MILLI = 1000
G, C, M = 0, 1, 2  # indices into resource vectors: milli-GPU, millicores, bytes
Vec = list[int]

ACTIVE_ALLOCATED = frozenset({PodStatus.ALLOCATED, PodStatus.PIPELINED, PodStatus.RUNNING})
ACTIVE_USED = ACTIVE_ALLOCATED | {PodStatus.RELEASING}
QUEUE_ALLOCATED = frozenset({PodStatus.ALLOCATED, PodStatus.RUNNING})


def zero() -> Vec:
    return [0, 0, 0]


class NodeInfo:
    """Mutable per-node accounting for one cycle."""

    __slots__ = (
        "alloc",
        "dev_alloc",
        "dev_pipe",
        "dev_rel",
        "dev_shared",
        "ext_alloc",
        "ext_pipe",
        "ext_rel",
        "foreign_cpu",
        "foreign_gpu_milli",
        "foreign_memory",
        "foreign_pods",
        "gpu_memory_mib",
        "gpus",
        "index",
        "name",
        "pipe",
        "pods",
        "ports_held",
        "ports_rel",
        "rel",
        "spec",
        "stamp",
    )

    def __init__(self, spec: Node, index: int) -> None:
        self.spec = spec
        # Bumped on every charge: a scorer's per-session view of this node is current while it is unchanged.
        self.stamp = 0
        self.name = spec.name
        self.index = index
        self.gpus = spec.gpus
        # KAI floors advertised GPU memory to a multiple of 100 MiB.
        self.gpu_memory_mib = None if spec.gpu_memory_mib is None else spec.gpu_memory_mib // 100 * 100
        self.alloc = [0, 0]  # cpu, memory held by allocated/running pods
        self.rel = [0, 0]
        self.pipe = [0, 0]
        self.pods = 0
        self.dev_alloc = [0] * spec.gpus
        self.dev_rel = [0] * spec.gpus
        self.dev_pipe = [0] * spec.gpus
        self.dev_shared = [0] * spec.gpus  # number of shared-GPU pods on each device
        # Extended resources held, by name, in the same three buckets as CPU and memory.
        self.ext_alloc: dict[str, int] = {}
        self.ext_rel: dict[str, int] = {}
        self.ext_pipe: dict[str, int] = {}
        # Host ports: (protocol, port) -> host IP -> pods; held by placed / running pods, or by releasing ones.
        self.ports_held: dict[tuple[str, int], dict[str, int]] = {}
        self.ports_rel: dict[tuple[str, int], dict[str, int]] = {}
        # What pods of other schedulers hold here (for messages and the fair-share total).
        self.foreign_gpu_milli = 0
        self.foreign_cpu = 0
        self.foreign_memory = 0
        self.foreign_pods = 0

    # -- capacity views -------------------------------------------------------------------------------
    def _cap(self, i: int) -> int:
        return self.spec.cpu if i == 0 else self.spec.memory

    def idle(self, i: int) -> int:
        """Idle CPU (i=0) or memory (i=1): not held by anyone, now."""
        over = self.pipe[i] - self.rel[i]
        return self._cap(i) - self.alloc[i] - self.rel[i] - (over if over > 0 else 0)

    def future(self, i: int) -> int:
        """Idle plus what releasing pods will free (minus what pipelined pods already claimed)."""
        return self._cap(i) - self.alloc[i] - self.pipe[i]

    def dev_idle(self, d: int) -> int:
        over = self.dev_pipe[d] - self.dev_rel[d]
        return GPU_MILLI - self.dev_alloc[d] - self.dev_rel[d] - (over if over > 0 else 0)

    def dev_future(self, d: int) -> int:
        return GPU_MILLI - self.dev_alloc[d] - self.dev_pipe[d]

    def whole_idle_devices(self) -> list[int]:
        return [
            d
            for d in range(self.gpus)
            if self.dev_alloc[d] == 0 and self.dev_rel[d] == 0 and self.dev_pipe[d] == 0
        ]

    def whole_future_devices(self) -> list[int]:
        return [d for d in range(self.gpus) if self.dev_alloc[d] == 0 and self.dev_pipe[d] == 0]

    def shared_devices(self) -> int:
        return sum(1 for n in self.dev_shared if n > 0)

    def pods_used(self) -> int:
        """Pods on the node, counting one reservation pod per shared GPU (as KAI does)."""
        return self.pods + self.shared_devices()

    def free_gpus_milli(self) -> int:
        """Idle + releasing whole devices, in milli-GPU (KAI's non-allocated GPUs)."""
        return GPU_MILLI * len(self.whole_future_devices())

    def idle_gpu_count(self) -> int:
        return len(self.whole_idle_devices())

    def releasing_gpu_count(self) -> int:
        """Devices that will come free once releasing pods are gone (KAI's device accounting).

        A shared device still used by a running fraction is not releasing, however much of it is.
        """
        return sum(
            1 for d in range(self.gpus) if self.dev_alloc[d] == 0 and self.dev_rel[d] > self.dev_pipe[d]
        )

    def memory_portion(self, mib: int) -> int | None:
        """Milli-GPU a GPU-memory request takes on one of this node's devices; None if memory is unknown."""
        if not self.gpu_memory_mib:
            return None
        return -(-mib * 100 // self.gpu_memory_mib) * 10

    # -- mutation -------------------------------------------------------------------------------------
    def add(self, task: TaskInfo, status: PodStatus, sign: int) -> None:
        self.stamp += 1
        req = task.request
        if task.stuck and status is PodStatus.RELEASING:
            status = PodStatus.RUNNING  # stuck in releasing: its capacity is not releasing (KAI)
        bucket = (
            self.alloc
            if status in QUEUE_ALLOCATED
            else self.rel
            if status is PodStatus.RELEASING
            else self.pipe
        )
        bucket[0] += sign * req.cpu
        bucket[1] += sign * req.memory
        self.pods += sign
        devs = (
            self.dev_alloc
            if status in QUEUE_ALLOCATED
            else self.dev_rel
            if status is PodStatus.RELEASING
            else self.dev_pipe
        )
        if task.shared:
            for d in task.devices:
                devs[d] += sign * task.portion
                self.dev_shared[d] += sign
        else:
            for d in task.devices:
                devs[d] += sign * GPU_MILLI
        if req.extended:
            ext = (
                self.ext_alloc
                if status in QUEUE_ALLOCATED
                else self.ext_rel
                if status is PodStatus.RELEASING
                else self.ext_pipe
            )
            for name, amount in req.extended:
                ext[name] = ext.get(name, 0) + sign * amount
        if task.pod.host_ports:
            table = self.ports_rel if status is PodStatus.RELEASING else self.ports_held
            host_ports.hold(table, task.pod.host_ports, sign)

    def assign_unknown_devices(self, task: TaskInfo) -> None:
        """Give a placed task whose bind named fewer devices than it holds (a pod bound before Hourglass,
        or whose device annotation was absent or not trusted) devices here, then charge it.

        Devices are unknown, but how many it holds is not: leaving them out would show its GPUs as free
        and let another pod over-commit the node. The choice follows :meth:`add_foreign`'s (whole GPUs the
        least-used devices from the highest index down, a share a shared device with room, else a free
        one) and is made after every task with known devices is charged, so it depends only on the node's
        tasks: a kept session rebuilds such a node whole when it is touched (scheduler/engine/kept.py).
        """
        req = task.request
        known = [d for d in task.pod.gpu_devices if d < self.gpus]

        def load(d: int) -> int:
            return self.dev_alloc[d] + self.dev_rel[d] + self.dev_pipe[d]

        chosen = list(known)
        taken = set(known)
        if task.shared:
            portion = task.portion or req.gpu_fraction_milli or GPU_MILLI
            # Nothing is charged until the end, so each pick is the first device not yet chosen of: the
            # shared devices with room (lowest index first), then the free ones, then any (highest first).
            # Built once: picking one at a time by rescanning every device was cubic in the device count.
            down = range(self.gpus - 1, -1, -1)
            room = [d for d in range(self.gpus) if self.dev_shared[d] and self.dev_future(d) >= portion]
            free = [d for d in down if load(d) == 0]
            want = min(req.gpu_fraction_devices, self.gpus)
            for d in (*room, *free, *down):
                if len(chosen) >= want:
                    break
                if d not in taken:
                    taken.add(d)
                    chosen.append(d)
        else:
            order = sorted((d for d in range(self.gpus) if d not in taken), key=lambda d: (load(d), -d))
            chosen += order[: max(req.gpus - len(chosen), 0)]
        task.devices = task.orig_devices = tuple(sorted(chosen))
        self.add(task, task.status, +1)

    def add_foreign(self, fp: ForeignPod, stuck: bool = False) -> None:
        """Charge a pod of another scheduler: it holds CPU, memory, a pod slot, devices, extended
        resources and ports like one of ours. Device indices are not known for it: whole GPUs take free
        devices from the highest index down (ours are recorded from the lowest), a shared request joins a
        shared device with room, else a free one."""
        self.stamp += 1
        req = fp.request
        rel = fp.releasing and not stuck  # stuck in releasing: held like a running pod's (KAI)
        bucket = self.rel if rel else self.alloc
        bucket[0] += req.cpu
        bucket[1] += req.memory
        self.pods += 1
        devs = self.dev_rel if rel else self.dev_alloc
        gpu = gpu_equivalent_milli(req.extended)
        if req.gpus:
            order = sorted(
                range(self.gpus), key=lambda d: (self.dev_alloc[d] + self.dev_rel[d] + self.dev_pipe[d], -d)
            )
            for d in order[: req.gpus]:
                devs[d] += GPU_MILLI
            gpu += req.gpus * GPU_MILLI
        elif req.is_shared and self.gpus:
            portion = req.gpu_fraction_milli
            if portion is None:
                portion = self.memory_portion(req.gpu_memory_mib or 0) or GPU_MILLI
            portion = min(portion, GPU_MILLI)
            for _ in range(req.gpu_fraction_devices):
                room = [d for d in range(self.gpus) if self.dev_shared[d] and self.dev_future(d) >= portion]
                free = [d for d in range(self.gpus - 1, -1, -1) if self.dev_future(d) == GPU_MILLI]
                d = room[0] if room else free[0] if free else self.gpus - 1
                devs[d] += portion
                self.dev_shared[d] += 1
            gpu += portion * req.gpu_fraction_devices
        if req.extended:
            ext = self.ext_rel if rel else self.ext_alloc
            for name, amount in req.extended:
                ext[name] = ext.get(name, 0) + amount
        if fp.host_ports:
            host_ports.hold(self.ports_rel if rel else self.ports_held, fp.host_ports, 1)
        self.foreign_gpu_milli += gpu
        self.foreign_cpu += req.cpu
        self.foreign_memory += req.memory
        self.foreign_pods += 1


class TaskInfo:
    """Mutable view of one pod during a cycle."""

    __slots__ = (
        "constrained",
        "devices",
        "ext_gpu",
        "index",
        "job",
        "name",
        "node",
        "orig_devices",
        "orig_node",
        "orig_status",
        "pod",
        "portion",
        "preferences",
        "request",
        "shared",
        "status",
        "stuck",
        "uid",
        "virtual",
    )

    def __init__(self, pod: Pod, job: JobInfo) -> None:
        self.pod = pod
        self.uid = pod.uid
        self.name = pod.name
        self.job = job
        self.index = pod.index
        self.request: PodRequest = pod.request
        self.shared = pod.request.is_shared
        self.status = pod.status
        self.node: NodeInfo | None = None
        self.devices: tuple[int, ...] = pod.gpu_devices
        self.portion = pod.gpu_milli_per_device  # shared pods: milli-GPU on each device
        self.orig_status = pod.status
        self.orig_node: str | None = pod.node
        self.orig_devices = pod.gpu_devices
        self.virtual = False  # evicted inside a what-if simulation
        # Releasing longer than the config's threshold when the session opened (KAI's StuckInReleasing):
        # it holds its node like a running pod, so nothing is pipelined onto what it holds.
        self.stuck = False
        # Filters beyond capacity apply (extended resources, ports, volumes, inter-pod terms, spread).
        self.constrained = pod.has_pod_constraints
        self.preferences = self.constrained and pod.has_preferences
        self.ext_gpu = gpu_equivalent_milli(pod.request.extended) if pod.request.extended else 0

    def sort_key(self) -> tuple[int, int, int, str]:
        """Task order: higher task priority first, then creation order, then uid."""
        return (-self.pod.task_priority, self.pod.created_ms, self.index, self.uid)

    def gpu_milli(self, node: NodeInfo | None = None, min_gpu_memory: int = 0) -> int:
        """GPUs this task accounts for, in milli-GPU."""
        r = self.request
        if self.ext_gpu:
            return self.ext_gpu + r.gpus * GPU_MILLI
        if r.gpus:
            return r.gpus * GPU_MILLI
        if r.gpu_fraction_milli is not None:
            return r.gpu_fraction_milli * r.gpu_fraction_devices
        if r.gpu_memory_mib is not None:
            if self.portion and self.node is not None:
                return self.portion * r.gpu_fraction_devices
            if node is not None:
                p = node.memory_portion(r.gpu_memory_mib)
                if p is not None:
                    return p * r.gpu_fraction_devices
            if min_gpu_memory:
                return -(-r.gpu_fraction_devices * r.gpu_memory_mib * GPU_MILLI // min_gpu_memory)
        return 0

    def is_cpu_only(self) -> bool:
        r = self.request
        return r.gpus == 0 and not r.is_shared and not self.ext_gpu


@dataclass(slots=True)
class QueueInfo:
    """A queue during a cycle: static spec, the fair-share result and live allocation counters."""

    spec: Queue
    name: str
    parent: QueueInfo | None
    children: list[QueueInfo] = field(default_factory=list)
    jobs: list[JobInfo] = field(default_factory=list)
    allocated: Vec = field(default_factory=zero)
    allocated_np: Vec = field(default_factory=zero)
    requested: Vec = field(default_factory=zero)
    fair_share: Vec = field(default_factory=zero)
    share: QueueShare | None = None
    _alloc_share: list[int | None] | None = None

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def quota(self, r: int) -> ResourceQuota:
        return self.spec.resources[RESOURCES[r]]

    def deserved(self, r: int) -> int | None:
        return self.quota(r).quota

    def limit(self, r: int) -> int | None:
        return self.quota(r).limit

    def ancestors(self) -> Iterator[QueueInfo]:
        """This queue and each ancestor up to the root."""
        q: QueueInfo | None = self
        while q is not None:
            yield q
            q = q.parent

    def allocatable_share(self, r: int) -> int | None:
        """KAI's AllocatableShare: what the queue may hold before it is reclaimable (None = infinite)."""
        if self._alloc_share is not None:
            return self._alloc_share[r]
        return self._compute_allocatable_share(r)

    def freeze_shares(self) -> None:
        """Cache the allocatable shares once the division is done (they do not change within a cycle)."""
        self._alloc_share = None
        self._alloc_share = [self._compute_allocatable_share(r) for r in range(3)]

    def _compute_allocatable_share(self, r: int) -> int | None:
        d, lim = self.deserved(r), self.limit(r)
        if d is None:
            return lim
        v = max(d, self.fair_share[r])
        return v if lim is None else min(v, lim)


class JobInfo:
    """Mutable view of one pod group during a cycle."""

    __slots__ = (
        "fit_errors",
        "index",
        "last_start_ms",
        "min_available",
        "name",
        "queue",
        "spec",
        "stale_since_ms",
        "subgroup_cache",
        "tasks",
        "uid",
    )

    def __init__(self, spec: Job, queue: QueueInfo | None, index: int) -> None:
        self.subgroup_cache: subgroups.Tree[TaskInfo] | None = None
        self.spec = spec
        self.uid = spec.uid
        self.name = spec.name
        self.queue = queue
        self.index = index
        self.tasks: list[TaskInfo] = []
        self.fit_errors: list[FitError] = []
        self.last_start_ms = spec.last_start_ms
        self.stale_since_ms = spec.stale_since_ms
        # KAI: the PodGroup's minMember is unused when it has subgroups. Fixed with the (frozen) spec, and
        # read by every job comparison, so taken once.
        self.min_available = (
            subgroup_minimum(spec.subgroups, spec.min_sub_group)
            if spec.subgroups
            else max(spec.min_available, 1)
        )

    @property
    def priority(self) -> int:
        return self.spec.priority

    @property
    def preemptible(self) -> bool:
        return self.spec.preemptible

    def subgroup_tree(self) -> subgroups.Tree[TaskInfo] | None:
        """The job's subgroup tree (:mod:`scheduler.engine.subgroups`), None without subgroups.

        Built on first use, once the session has given the job all its tasks.
        """
        if not self.spec.subgroups:
            return None
        if self.subgroup_cache is None:
            self.subgroup_cache = subgroups.build(self)
        return self.subgroup_cache

    def gang_satisfied(self, statuses: frozenset[PodStatus] = ACTIVE_ALLOCATED) -> bool:
        """Enough pods in ``statuses`` for the gang: minAvailable, or every required PodSet's with subgroups."""
        tree = self.subgroup_tree()
        if tree is not None:
            return tree.root.satisfied(statuses)
        return self.count(statuses) >= self.min_available

    def count(self, statuses: frozenset[PodStatus]) -> int:
        n = 0
        for t in self.tasks:  # a plain loop: several times faster than sum() over a generator for few tasks
            if t.status in statuses:
                n += 1
        return n

    def active_allocated(self) -> int:
        return self.count(ACTIVE_ALLOCATED)

    def pending_tasks(self, include_virtual: bool = False) -> list[TaskInfo]:
        return [
            t
            for t in self.tasks
            if t.status is PodStatus.PENDING
            or (include_virtual and t.virtual and t.status is PodStatus.RELEASING)
        ]

    def is_ready(self) -> bool:
        """KAI: a job can be considered only if enough pods exist (alive) to reach minAvailable."""
        tree = self.subgroup_tree()
        if tree is not None:
            return tree.root.alive_ready()
        alive = sum(1 for t in self.tasks if t.status in ACTIVE_ALLOCATED or t.status is PodStatus.PENDING)
        return alive >= self.min_available

    def sort_key(self) -> tuple[int, int, int, int, str]:
        """Job order inside a queue: priority, elastic state, creation time, uid."""
        active = self.active_allocated()
        m = self.min_available
        elastic = 0 if active < m else 1 if active == m else 2
        return (-self.priority, elastic, self.spec.created_ms, self.index, self.uid)

    def tasks_to_allocate(self, include_virtual: bool = False) -> list[TaskInfo]:
        """The next tasks to place: enough to reach minAvailable, or one elastic extra."""
        tree = self.subgroup_tree()
        if tree is not None:
            return tree.tasks_to_allocate(include_virtual)
        pending = sorted(self.pending_tasks(include_virtual), key=TaskInfo.sort_key)
        need = self.min_available - self.active_allocated()
        return pending[:need] if need > 0 else pending[:1]

    def first_to_allocate(self, include_virtual: bool = False) -> TaskInfo | None:
        """The first of :meth:`tasks_to_allocate`, without sorting every pending task."""
        if self.subgroup_tree() is not None:
            tasks = self.tasks_to_allocate(include_virtual)
            return tasks[0] if tasks else None
        if len(self.tasks) == 1:  # most jobs: pending_tasks without building the list
            t = self.tasks[0]
            if t.status is PodStatus.PENDING or (
                include_virtual and t.virtual and t.status is PodStatus.RELEASING
            ):
                return t
            return None
        pending = self.pending_tasks(include_virtual)
        if len(pending) <= 1:
            return pending[0] if pending else None
        return min(pending, key=TaskInfo.sort_key)  # the first of equal keys, as a stable sort puts first

    def has_tasks_to_allocate(self) -> bool:
        """A pending task is left to place (per subgroup when the job has them)."""
        tree = self.subgroup_tree()
        if tree is not None:
            return tree.has_tasks_to_allocate()
        # A plain loop: every action asks this of every job each cycle, and any() over a generator was
        # several times slower for the one- or two-task jobs most clusters hold.
        for t in self.tasks:  # noqa: SIM110
            if t.status is PodStatus.PENDING:
                return True
        return False

    def fit_error(self, reason: str, message: str, **details: object) -> None:
        self.fit_errors.append(FitError(reason, message, dict(details)))


@dataclass(frozen=True, slots=True)
class FitError:
    """Why a job could not be placed: a machine-readable reason and a message a user understands."""

    reason: str
    message: str
    details: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Op:
    """One tentative change: the task and its state before and after."""

    kind: str  # allocate | pipeline | evict
    task: TaskInfo
    prev_status: PodStatus
    prev_node: NodeInfo | None
    prev_devices: tuple[int, ...]
    prev_portion: int
    action: str
    reason: str = ""


class FreeIndex:
    """Nodes bucketed by free whole GPU devices (idle + releasing), each bucket in node-name order.

    Binpack placement wants the fitting node with the fewest free devices; scanning buckets upward finds
    it without scoring every node. Kept current by :meth:`Session._set`, the single mutation point.
    """

    def __init__(self, nodes: list[NodeInfo]) -> None:
        self.by_rank = sorted(nodes, key=lambda n: n.name)
        self.rank = {n.name: i for i, n in enumerate(self.by_rank)}
        top = max((n.gpus for n in nodes), default=0)
        self.buckets: list[list[int]] = [[] for _ in range(top + 1)]
        self.level: dict[str, int] = {}
        # Whole idle devices per node (no allocated, releasing or pipelined pod): at least the task's count
        # is necessary for a fit on idle capacity, which lets a binpack scan skip nodes cheaply.
        self.idle_level: dict[str, int] = {}
        self.idle_buckets: list[list[int]] = [[] for _ in range(top + 1)]  # ranks by idle_level, sorted
        self.shared: list[int] = []  # ranks of nodes holding at least one shared device
        # CPU-only placement: nodes without GPUs [0] and with GPUs [1], each by (future CPU, rank).
        self.cpu: tuple[list[tuple[int, int]], list[tuple[int, int]]] = ([], [])
        self.cpu_at: dict[str, int] = {}
        # Placement's numpy columns (scheduler.engine.columns), built on first use; `dirty` holds the ranks
        # of nodes moved since they last read them (None until they exist).
        self.columns: object | None = None
        self.dirty: set[int] | None = None
        for n in self.by_rank:
            k = len(n.whole_future_devices())
            self.level[n.name] = k
            self.idle_level[n.name] = len(n.whole_idle_devices())
            self.buckets[k].append(self.rank[n.name])
            self.idle_buckets[self.idle_level[n.name]].append(self.rank[n.name])
            if n.shared_devices():
                self.shared.append(self.rank[n.name])
            self.cpu_at[n.name] = n.future(0)
            self.cpu[1 if n.gpus else 0].append((n.future(0), self.rank[n.name]))
        for table in self.cpu:
            table.sort()

    def update(self, n: NodeInfo) -> None:
        r = self.rank[n.name]
        if self.dirty is not None:
            self.dirty.add(r)
        k = idle = 0
        alloc, pipe, rel = n.dev_alloc, n.dev_pipe, n.dev_rel
        for d in range(n.gpus):
            if alloc[d] == 0 and pipe[d] == 0:
                k += 1
                if rel[d] == 0:
                    idle += 1
        old = self.idle_level[n.name]
        if idle != old:
            _move(self.idle_buckets[old], self.idle_buckets[idle], r)
            self.idle_level[n.name] = idle
        old = self.level[n.name]
        if k != old:
            _move(self.buckets[old], self.buckets[k], r)
            self.level[n.name] = k
        cpu = n.future(0)
        old_cpu = self.cpu_at[n.name]
        if cpu != old_cpu:
            table = self.cpu[1 if n.gpus else 0]
            del table[bisect.bisect_left(table, (old_cpu, r))]
            bisect.insort(table, (cpu, r))
            self.cpu_at[n.name] = cpu
        has = n.shared_devices() > 0
        i = bisect.bisect_left(self.shared, r)
        present = i < len(self.shared) and self.shared[i] == r
        if has and not present:
            self.shared.insert(i, r)
        elif present and not has:
            del self.shared[i]


def _move(src: list[int], dst: list[int], r: int) -> None:
    """Move rank `r` between two sorted lists."""
    del src[bisect.bisect_left(src, r)]
    bisect.insort(dst, r)


def lacks_devices(p: Pod) -> bool:
    """Whether a placed pod's bind named fewer GPU devices than it holds."""
    r = p.request
    if r.is_shared:
        return len(p.gpu_devices) < r.gpu_fraction_devices
    return len(p.gpu_devices) < r.gpus


#: The ``node_scoring`` rules that score against a task-type distribution, so the workload settings below
#: apply to them (their scorers are in ``scheduler/engine/scoring``; ``config_hash`` keeps those settings
#: only for them).
FRAGMENTATION_RULES = ("fgd", "frag-aware", "frag-aware-models")


@dataclass(slots=True)
class SessionConfig:
    """Engine knobs that shape a cycle (recorded in the cycle's config hash)."""

    gpu_placement: str = "binpack"  # binpack | spread | none
    cpu_placement: str = "binpack"
    gpu_sharing_placement: str = "binpack"
    fair_share_enabled: bool = True
    # KAI's kValue default (time-based fair share on); the same default as fairshare.settings, which is
    # what `hourglass run` passes here. Without a usage snapshot it changes nothing (U' = 0).
    k_value: float = 1.0
    stale_grace_ms: int = 60_000
    max_consolidation_preemptees: int = 16
    saturation_multiplier: float = 1.0
    default_preempt_min_runtime_ms: int = 0
    default_reclaim_min_runtime_ms: int = 0
    node_scoring: str = "kai"  # kai | fragmentation (see scheduler/engine/placement.py)
    # Reclaim / preempt search budget in simulated scenarios (scheduler/engine/actions/budget.py): per job
    # attempt, and per action per cycle. None: unbounded -- what a config recorded before these fields
    # existed means (config_hash leaves a None budget out, so its hash is unchanged).
    solver_job_budget: int | None = 256
    solver_action_budget: int | None = 1024
    # What `solver_job_budget` counts: ``failed`` = simulations that found no solution (as the action
    # budget), so a gang solved partial job by partial job is never cut however many pods it has; ``all``
    # = every simulation, what a config recorded before the field meant (config_hash leaves ``all`` out):
    # a gang of more pods than the budget could then never reclaim.
    solver_job_budget_counts: str = "failed"
    # Whether a constrained gang's Bind / Pipeline decisions carry ``details.topology`` (the domain it
    # landed in, scheduler/engine/topology.py ``landing``). False: what a config recorded before the field
    # existed means (config_hash leaves a False value out, so its hash is unchanged and its replay writes
    # the records it wrote).
    topology_details: bool = True
    # The node pool this scheduler is the shard of (KAI's scheduling shards): None = the whole cluster;
    # "" = the default shard (nodes and pods without the label); else the label's value. Recorded in the
    # config hash only when set, so an unsharded config keeps its hash.
    node_pool: str | None = None
    node_pool_label: str = NODE_POOL_LABEL
    # What ``fgd`` / ``frag-aware`` score against: ``decayed`` = each node pool's own recent workload
    # (ClusterState.workload_history weighed by age at the cycle's logical time with the half-life and
    # window below; the shipped prior only for a pool with no history; scoring/fragmentation.py
    # decayed_task_types); ``learnt`` = the last 4,096 pods of the whole cluster blended with the prior,
    # what configs recorded before ``decayed`` meant; ``prior`` = the shipped trace's distribution alone,
    # what a config recorded before the field meant (config_hash leaves ``prior`` out, and the field
    # whenever the rule does not read it).
    workload_types: str = "decayed"
    # ``decayed``: a pod submitted ``age`` ago weighs ``0.5 ** (age / half-life)`` (exact integers, linear
    # between half-lives); pods older than the window count nothing. The age is taken at the cycle's
    # logical time rounded down to ``workload_refresh_s``, so the distribution (and the memo tables built
    # on it) changes at most once per refresh period. Hashed only with ``decayed``.
    workload_half_life_s: int = 86_400
    workload_window_s: int = 7 * 86_400
    workload_refresh_s: int = 600
    # KAI's --stuck-in-releasing-threshold (pkg/scheduler/api/pod_info/pod_info.go getTaskStatus, default
    # 2m): a pod releasing for longer than this at the cycle's logical time is StuckInReleasing, and what
    # it holds is not releasing capacity that pending pods may be pipelined onto. None: never stuck -- what
    # a config recorded before the field existed means (config_hash leaves None out).
    stuck_in_releasing_ms: int | None = 120_000

    def __post_init__(self) -> None:
        for name in ("solver_job_budget", "solver_action_budget"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ValueError(f"{name} must be a whole number of scenarios >= 0 or null, not {v!r}")
        if self.solver_job_budget_counts not in ("failed", "all"):
            raise ValueError(
                f"solver_job_budget_counts must be 'failed' or 'all', not {self.solver_job_budget_counts!r}"
            )
        if not isinstance(self.topology_details, bool):
            raise ValueError(f"topology_details must be true or false, not {self.topology_details!r}")
        if self.node_pool is not None and (not isinstance(self.node_pool, str) or len(self.node_pool) > 63):
            raise ValueError(
                f"node_pool must be a label value (up to 63 characters) or null, not {self.node_pool!r}"
            )
        if self.workload_types not in ("decayed", "learnt", "prior"):
            raise ValueError(
                f"workload_types must be 'decayed', 'learnt' or 'prior', not {self.workload_types!r}"
            )
        v = self.stuck_in_releasing_ms
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise ValueError(
                f"stuck_in_releasing_ms must be a whole number of milliseconds >= 1 or null, not {v!r}"
            )
        for name in ("workload_half_life_s", "workload_window_s", "workload_refresh_s"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a whole number of seconds >= 1, not {v!r}")

    def unbudgeted(self) -> SessionConfig:
        """This config with no search budget: the behaviour of a config recorded without the fields."""
        return replace(self, solver_job_budget=None, solver_action_budget=None)

    def counting_every_scenario(self) -> SessionConfig:
        """This config with `solver_job_budget` counting every simulation: the behaviour of a config
        recorded without the ``solver_job_budget_counts`` field."""
        return replace(self, solver_job_budget_counts="all")

    def without_topology_details(self) -> SessionConfig:
        """This config writing no ``details.topology`` on Binds: the behaviour of a config recorded without
        the ``topology_details`` field."""
        return replace(self, topology_details=False)

    def with_learnt_types(self) -> SessionConfig:
        """This config scoring against the whole cluster's last 4,096 pods blended with the prior: the
        behaviour of a config recorded before ``decayed`` existed (``learnt`` was then the default)."""
        return replace(self, workload_types="learnt")

    def never_stuck(self) -> SessionConfig:
        """This config with no stuck-in-releasing threshold: the behaviour of a config recorded without
        the ``stuck_in_releasing_ms`` field (every releasing pod's capacity may be pipelined onto)."""
        return replace(self, stuck_in_releasing_ms=None)

    def with_prior_types(self) -> SessionConfig:
        """This config scoring against the shipped prior alone: the behaviour of a config recorded without
        the ``workload_types`` field."""
        return replace(self, workload_types="prior")


class Session:
    """The mutable state of one scheduling cycle."""

    # The cycle's observer while its actions run (scheduler.engine.cycle.StepHook): told as each job's victim
    # search begins and ends, for metrics; it never feeds the cycle.
    on_step: Callable[[str], None] | None = None

    def __init__(
        self,
        state: ClusterState,
        config: SessionConfig | None = None,
        now_ms: int = 0,
        usage: dict[str, dict[str, float]] | None = None,
    ) -> None:
        self.config = config or SessionConfig()
        if self.config.node_pool is not None:
            state = pool_view(state, self.config.node_pool, self.config.node_pool_label)
        self.now_ms = now_ms
        self.state = state
        self.nodes = [NodeInfo(n, i) for i, n in enumerate(state.nodes)]
        # Placement's largest Ready node (scheduler.engine.placement._node_maxima), cached: a function of
        # the node specs alone, so a kept session's reopen (which requires them unchanged) keeps it.
        self._node_maxima: tuple[list[NodeInfo], int, tuple[int, int, int]] | None = None
        self.node_by_name = {n.name: n for n in self.nodes}
        self.queues: dict[str, QueueInfo] = {}
        for qs in state.queues:
            self.queues[qs.name] = QueueInfo(spec=qs, name=qs.name, parent=None)
        # Drop queues whose parent chain loops (the fold refuses such a queue; a scenario may not), with
        # their subtree: every walk up the hierarchy must end at a root.
        for name in list(self.queues):
            seen: set[str] = set()
            cur: str | None = name
            while cur is not None and cur in self.queues and cur not in seen:
                seen.add(cur)
                cur = self.queues[cur].spec.parent
            if cur is not None and cur in seen:
                del self.queues[name]
        # Drop queues whose parent is missing, with their subtree (KAI rule).
        changed = True
        while changed:
            changed = False
            for name in list(self.queues):
                parent = self.queues[name].spec.parent
                if parent is not None and parent not in self.queues:
                    del self.queues[name]
                    changed = True
        for qi in self.queues.values():
            if qi.spec.parent is not None:
                parent_info = self.queues[qi.spec.parent]
                qi.parent = parent_info
                parent_info.children.append(qi)
        self.jobs: list[JobInfo] = []
        self.job_by_uid: dict[str, JobInfo] = {}
        for i, j in enumerate(state.jobs):
            ji = JobInfo(j, self.queues.get(j.queue), i)
            if ji.queue is not None:
                ji.queue.jobs.append(ji)
            self.jobs.append(ji)
            self.job_by_uid[j.uid] = ji
        self.tasks: list[TaskInfo] = []
        self.gated: list[Pod] = []  # pods with scheduling gates: not pending yet, no decision
        self.version = 0  # bumped on every move; per-task filter views are cached against it
        self.commits = 0  # committed statements: structures built from committed state are checked against it
        self.action_cache: dict[str, object] = {}  # per-action structures kept current by their owners
        self.pred_cache: dict[str, tuple[int, object]] = {}
        # The volume each placed task's WaitForFirstConsumer claims take (predicates/volumes.py), built on
        # first use and kept current by _set, so two pods of one cycle never take the same volume.
        self.vol_picks: dict[str, dict[str, str]] | None = None
        # The placed pods' claims, disks and CSI volumes (predicates/storage.py), built on first use and
        # kept current by _set.
        self.storage_index: storage_index.StorageIndex | None = None
        self.static_cache: dict[tuple[object, ...], object] = {}  # facts about nodes only (fixed per session)
        self._pod_index: PodIndex | None = None
        # Some pod on a node has required anti-affinity: every placement checks it (symmetry).
        self.anti_present = False
        # Some pod on a node has terms that score incoming pods (required affinity, preferred terms): every
        # placement takes the scored scan (kube-scheduler's InterPodAffinity score of existing pods).
        self.soft_present = False
        self.last_why: Counter[str] = Counter()  # per-node reasons of the last task that fitted nowhere
        # Work counters ("reclaim.attempts", "reclaim.simulations", "reclaim.filtered", ...) for benchmarks and
        # KAI's solver metrics (scheduler/kai_metrics.py); no decision reads them.
        self.work: Counter[str] = Counter()
        # The earliest logical time at which a pod charged here as releasing would be stuck: a kept
        # session reused at or after it would charge that pod wrongly (scheduler/engine/kept.py).
        self.stuck_next_ms: int | None = None
        unknown_devices: list[TaskInfo] = []
        for p in state.pods:
            if p.gated and p.status is PodStatus.PENDING:
                self.gated.append(p)
                continue
            if (
                p.pod_anti_affinity
                and p.node is not None
                and p.status in ACTIVE_USED
                and any(not t.weight for t in p.pod_anti_affinity)
            ):
                self.anti_present = True
            placed = p.node is not None and p.status in ACTIVE_USED
            if placed and has_soft_terms(p.pod_affinity, p.pod_anti_affinity):
                self.soft_present = True
            job = self.job_by_uid[p.job]
            t = TaskInfo(p, job)
            if p.status is PodStatus.RELEASING:
                t.stuck = self.is_stuck(p.releasing_ms, now_ms)
            job.tasks.append(t)
            self.tasks.append(t)
            if p.node is not None and p.status in ACTIVE_USED:
                node = self.node_by_name.get(p.node)
                if node is not None:
                    t.node = node
                    if lacks_devices(p):
                        unknown_devices.append(t)
                    else:
                        node.add(t, p.status, +1)
        for t in unknown_devices:  # after every known device is charged (see assign_unknown_devices)
            assert t.node is not None
            t.node.assign_unknown_devices(t)
        for fp in state.foreign_pods:
            fnode = self.node_by_name.get(fp.node)
            if fnode is not None:
                fnode.add_foreign(fp, fp.releasing and self.is_stuck(fp.releasing_ms, now_ms))
                if any(not t.weight for t in fp.pod_anti_affinity):
                    self.anti_present = True
                if has_soft_terms(fp.pod_affinity, fp.pod_anti_affinity):
                    self.soft_present = True
        for job in self.jobs:
            if len(job.tasks) > 1:
                job.tasks.sort(key=TaskInfo.sort_key)
        gpu_mems = [n.gpu_memory_mib for n in self.nodes if n.gpu_memory_mib and n.gpu_memory_mib > 100]
        # KAI falls back to its default per-GPU memory (100 MiB) when no node advertises more.
        self.min_gpu_memory = min(gpu_mems) if gpu_mems else 100
        self.decisions: list[Op] = []
        self.total = self._total()
        self.free_index = FreeIndex(self.nodes)
        self._claimed: int | None = None  # see unclaimed_gpu_milli; computed on first use, then kept current
        # While a batch of moves runs (Statement.rollback, Statement.evict_all): node name -> the node and its
        # claimed milli-GPU before the batch; the free index and `_claimed` are brought up to date once per
        # node when it ends. Both depend only on the nodes' final state, so this changes nothing but cost.
        self._batch: dict[str, tuple[NodeInfo, int]] | None = None
        self._batch_charges: dict[tuple[str, bool], tuple[QueueInfo, Vec]] = {}  # queue charges of the batch
        self._ready_gpu_milli = 0
        self._account_queues()
        self.shares = self._divide(usage or {})

    def is_stuck(self, releasing_ms: int | None, now_ms: int) -> bool:
        """Whether a pod releasing since ``releasing_ms`` is stuck in releasing at ``now_ms`` (KAI's
        ``time.Since(deletionTimestamp) > threshold``); notes when a pod not stuck yet would become so."""
        limit = self.config.stuck_in_releasing_ms
        if limit is None or releasing_ms is None:
            return False
        if now_ms - releasing_ms > limit:
            return True
        turns = releasing_ms + limit + 1
        if self.stuck_next_ms is None or turns < self.stuck_next_ms:
            self.stuck_next_ms = turns
        return False

    # -- accounting -----------------------------------------------------------------------------------
    def task_vec(self, t: TaskInfo) -> Vec:
        return [t.gpu_milli(t.node, self.min_gpu_memory), t.request.cpu, t.request.memory]

    def _total(self) -> Vec:
        # What pods of other schedulers hold is not ours to divide (KAI subtracts non-KAI pods too).
        g = c = m = 0
        for n in self.nodes:
            spec = n.spec
            if not spec.ready:
                continue
            if spec.extended or n.foreign_pods:
                ext_gpu = gpu_equivalent_milli(spec.extended.items()) if spec.extended else 0
                g += max(n.gpus * GPU_MILLI + ext_gpu - n.foreign_gpu_milli, 0)
                c += max(spec.cpu - n.foreign_cpu, 0)
                m += max(spec.memory - n.foreign_memory, 0)
            else:
                g += n.gpus * GPU_MILLI
                c += spec.cpu
                m += spec.memory
        return [g, c, m]

    def pod_index(self) -> PodIndex:
        """Every pod on a node (ours and foreign) by labels, built on first use and kept current."""
        if self._pod_index is None:
            idx = PodIndex(dict(self.state.namespaces))
            for t in self.tasks:
                if t.node is not None and t.status in ACTIVE_USED:
                    idx.add(t.uid, self._entry(t, t.node, t.status))
            for fp in self.state.foreign_pods:
                if fp.node in self.node_by_name:
                    anti = tuple(a for a in fp.pod_anti_affinity if not a.weight)
                    soft = soft_terms(fp.pod_affinity, fp.pod_anti_affinity)
                    idx.add(fp.uid, Entry(fp.namespace, fp.labels, fp.node, fp.releasing, anti, soft))
            self._pod_index = idx
        return self._pod_index

    @staticmethod
    def _entry(t: TaskInfo, node: NodeInfo, status: PodStatus) -> Entry:
        p = t.pod
        anti = tuple(a for a in p.pod_anti_affinity if not a.weight)
        soft = soft_terms(p.pod_affinity, p.pod_anti_affinity)
        return Entry(p.namespace, p.labels, node.name, status is PodStatus.RELEASING, anti, soft)

    def _account_queues(self) -> None:
        # Sum per leaf queue first, then add each sum to the queue's ancestors once.
        sums: dict[str, tuple[QueueInfo, list[int], list[int], list[int]]] = {}
        for job in self.jobs:
            q = job.queue
            if q is None:
                continue
            entry = sums.get(q.name)
            if entry is None:
                entry = sums[q.name] = (q, [0, 0, 0], [0, 0, 0], [0, 0, 0])
            _, alloc, req, alloc_np = entry
            np = not job.preemptible
            for t in job.tasks:
                if t.status in QUEUE_ALLOCATED:
                    v = self.task_vec(t)
                    alloc[0] += v[0]
                    alloc[1] += v[1]
                    alloc[2] += v[2]
                    if np:
                        alloc_np[0] += v[0]
                        alloc_np[1] += v[1]
                        alloc_np[2] += v[2]
                elif t.status is PodStatus.PENDING:
                    v = self.task_vec(t)
                    req[0] += v[0]
                    req[1] += v[1]
                    req[2] += v[2]
        for q, alloc, req, alloc_np in sums.values():
            for a in q.ancestors():
                for r in range(3):
                    a.allocated[r] += alloc[r]
                    a.requested[r] += alloc[r] + req[r]
                    a.allocated_np[r] += alloc_np[r]

    def _divide(self, usage: dict[str, dict[str, float]]) -> dict[str, QueueShare]:
        demands = [
            QueueDemand(
                name=q.name,
                parent=q.spec.parent,
                priority=q.spec.priority,
                order=q.spec.order,
                resources=q.spec.resources,
                requested={RESOURCES[r]: q.requested[r] for r in range(3)},
                allocated={RESOURCES[r]: q.allocated[r] for r in range(3)},
                allocated_non_preemptible={RESOURCES[r]: q.allocated_np[r] for r in range(3)},
                usage=usage.get(q.name, {}),
            )
            for q in self.queues.values()
        ]
        shares = divide({RESOURCES[r]: self.total[r] for r in range(3)}, demands, self.config.k_value)
        for name, s in shares.items():
            q = self.queues[name]
            q.share = s
            q.fair_share = [s.fair_share[RESOURCES[r]] for r in range(3)]
            q.freeze_shares()
        return shares

    def queue_charge(self, t: TaskInfo, sign: int) -> None:
        """Live queue accounting, as KAI's allocate / deallocate event handlers do."""
        q = t.job.queue
        if q is None:
            return
        v = self.task_vec(t)
        np = not t.job.preemptible
        if self._batch is not None:
            # Summed per leaf queue and flag, added to the ancestors once when the batch ends.
            charges = self._batch_charges
            key = (q.name, np)
            got = charges.get(key)
            if got is None:
                charges[key] = (q, [sign * v[0], sign * v[1], sign * v[2]])
            else:
                for r in range(3):
                    got[1][r] += sign * v[r]
            return
        self._charge(q, v, np, sign)

    @staticmethod
    def _charge(q: QueueInfo, v: Vec, np: bool, sign: int) -> None:
        """Add `sign` times `v` to what `q` and its ancestors hold (and to the non-preemptible part)."""
        for a in q.ancestors():
            for r in range(3):
                a.allocated[r] += sign * v[r]
                if np:
                    a.allocated_np[r] += sign * v[r]

    def unclaimed_gpu_milli(self) -> int:
        """Idle + releasing milli-GPUs over Ready nodes (not held by allocated or pipelined pods).

        The solvers' cheap bound before any scenario; kept current by :meth:`_set` so it costs O(1).
        """
        if self._claimed is None:
            self._claimed = sum(_claimed(n) for n in self.nodes)
            self._ready_gpu_milli = sum(GPU_MILLI * n.gpus for n in self.nodes if n.spec.ready)
        return self._ready_gpu_milli - self._claimed

    # -- low-level moves (used by Statement only) -----------------------------------------------------
    def _set(
        self, t: TaskInfo, status: PodStatus, node: NodeInfo | None, devices: tuple[int, ...], portion: int
    ) -> None:
        old_counted = t.node is not None and t.status in ACTIVE_ALLOCATED
        old_node = t.node
        self.version += 1
        batch = self._batch
        if batch is not None:
            known = self._claimed is not None  # else nothing to keep current
            for n in (old_node, node):
                if n is not None and n.name not in batch:
                    batch[n.name] = (n, _claimed(n) if known else 0)
            claimed = None
        else:
            claimed = self._claimed
        if claimed is not None:
            if old_node is not None:
                claimed -= _claimed(old_node)
            if node is not None and node is not old_node:
                claimed -= _claimed(node)
        idx = self._pod_index
        if idx is not None and t.node is not None and t.status in ACTIVE_USED:
            idx.remove(t.uid)
        if t.node is not None and t.status in ACTIVE_USED:
            t.node.add(t, t.status, -1)
        if old_counted:
            self.queue_charge(t, -1)
        t.status, t.node, t.devices, t.portion = status, node, devices, portion
        if node is not None and status in ACTIVE_USED:
            node.add(t, status, +1)
            if idx is not None:
                idx.add(t.uid, self._entry(t, node, status))
            if t.pod.pod_anti_affinity:
                self.anti_present = True
            if has_soft_terms(t.pod.pod_affinity, t.pod.pod_anti_affinity):
                self.soft_present = True
        if node is not None and status in ACTIVE_ALLOCATED:
            self.queue_charge(t, +1)
        if batch is None:
            if old_node is not None:
                self.free_index.update(old_node)
            if node is not None and node is not old_node:
                self.free_index.update(node)
        if claimed is not None:
            if old_node is not None:
                claimed += _claimed(old_node)
            if node is not None and node is not old_node:
                claimed += _claimed(node)
            self._claimed = claimed
        if self.vol_picks is not None and t.pod.volumes:
            volume_picks.moved(self, t)
        if self.storage_index is not None and (t.pod.volumes or t.pod.disks):
            storage_index.moved(self, t)

    def _begin_batch(self) -> None:
        """Defer the free index and `_claimed` until :meth:`_end_batch` (nothing may read them meanwhile)."""
        assert self._batch is None, "batches do not nest"
        self._batch = {}

    def _end_batch(self) -> None:
        batch, self._batch = self._batch, None
        assert batch is not None
        for (_, np), (q, v) in self._batch_charges.items():
            self._charge(q, v, np, 1)
        self._batch_charges.clear()
        claimed = self._claimed
        for n, before in batch.values():
            self.free_index.update(n)
            if claimed is not None:
                claimed += _claimed(n) - before
        self._claimed = claimed

    def statement(self) -> Statement:
        return Statement(self)

    def leaf_queues_with_jobs(self) -> list[QueueInfo]:
        return [q for q in self.queues.values() if q.is_leaf and q.jobs]


def _claimed(n: NodeInfo) -> int:
    """Milli-GPUs allocated or pipelined on a Ready node (0 for a node that is not Ready)."""
    return sum(n.dev_alloc) + sum(n.dev_pipe) if n.spec.ready else 0


class Statement:
    """Tentative changes to a session: checkpoint / rollback / commit / discard."""

    def __init__(self, session: Session) -> None:
        self.ssn = session
        self.ops: list[Op] = []

    def checkpoint(self) -> int:
        return len(self.ops)

    def rollback(self, cp: int) -> None:
        if len(self.ops) <= cp:
            return
        ssn = self.ssn
        ssn._begin_batch()
        while len(self.ops) > cp:
            op = self.ops.pop()
            t = op.task
            ssn._set(t, op.prev_status, op.prev_node, op.prev_devices, op.prev_portion)
            if op.kind == "evict":
                t.virtual = False
        ssn._end_batch()

    def place(
        self,
        t: TaskInfo,
        node: NodeInfo,
        devices: tuple[int, ...],
        portion: int,
        pipelined: bool,
        action: str,
    ) -> None:
        self.ops.append(
            Op("pipeline" if pipelined else "allocate", t, t.status, t.node, t.devices, t.portion, action)
        )
        self.ssn._set(t, PodStatus.PIPELINED if pipelined else PodStatus.ALLOCATED, node, devices, portion)

    def evict(self, t: TaskInfo, action: str, reason: str = "", virtual: bool = False) -> None:
        self.ops.append(Op("evict", t, t.status, t.node, t.devices, t.portion, action, reason))
        self.ssn._set(t, PodStatus.RELEASING, t.node, t.devices, t.portion)
        t.virtual = virtual

    def evict_all(
        self, tasks: Iterable[TaskInfo], action: str, reason: Callable[[TaskInfo], str], virtual: bool
    ) -> None:
        """:meth:`evict` each task, in order, as one batch of moves."""
        ssn = self.ssn
        ssn._begin_batch()
        for t in tasks:
            self.evict(t, action, reason(t), virtual)
        ssn._end_batch()

    def restore(
        self,
        t: TaskInfo,
        status: PodStatus,
        node: NodeInfo,
        devices: tuple[int, ...],
        portion: int,
        action: str,
    ) -> None:
        """Undo an eviction in place (KAI's un-evict): the task keeps running where it was, as it was."""
        self.ops.append(Op("unevict", t, t.status, t.node, t.devices, t.portion, action))
        self.ssn._set(t, status, node, devices, portion)

    def convert_to_pipelined(self, job: JobInfo, action: str) -> None:
        """Turn every task of `job` allocated in this statement into a pipelined one."""
        for op in list(self.ops):
            t = op.task
            if (
                t.job is job
                and op.kind == "allocate"
                and t.status is PodStatus.ALLOCATED
                and t.node is not None
            ):
                self.place(t, t.node, t.devices, t.portion, True, action)

    def commit(self) -> None:
        # Collapse to the final state of each task so decisions show one outcome per task.
        self.ssn.decisions.extend(self.ops)
        if self.ops:
            self.ssn.commits += 1
        self.ops = []

    def discard(self) -> None:
        self.rollback(0)
