"""Which job goes next: DRF queue order over the queue tree, job order inside a leaf queue.

The queue comparator follows KAI's proportion plugin rules, first decisive rule wins:
under fair share first, under deserved quota (with the job) first, higher queue priority, no usage without
an allocatable share, smaller dominant resource share with the job, without it, smaller allocatable share,
older queue. In victim mode every comparison is inverted, so victims come first from the queue that looks
most over its share.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.engine.session import G, JobInfo, QueueInfo, Session, TaskInfo, Vec

_INF = float("inf")


def job_init_resources(ssn: Session, job: JobInfo, include_virtual: bool = False) -> Vec:
    """Resources of the tasks the job would place next (KAI's "init resources").

    `include_virtual` counts tasks evicted inside a simulation as placeable, as KAI's what-if allocation does.
    """
    out = [0, 0, 0]
    for t in job.tasks_to_allocate(include_virtual):
        v = ssn.task_vec(t)
        for r in range(3):
            out[r] += v[r]
    return out


def job_allocated(ssn: Session, job: JobInfo) -> Vec:
    out = [0, 0, 0]
    for t in job.tasks:
        if t.status.value in ("allocated", "running", "pipelined"):
            v = ssn.task_vec(t)
            for r in range(3):
                out[r] += v[r]
    return out


def _le(a: Vec, b: list[int | None]) -> bool:
    b0, b1, b2 = b
    return (b0 is None or a[0] <= b0) and (b1 is None or a[1] <= b1) and (b2 is None or a[2] <= b2)


def dominant_share(ssn: Session, q: QueueInfo, alloc: Vec) -> float:
    """max over resources of allocated / AllocatableShare (unlimited -> cluster total; 0 -> alloc * 1000)."""
    best = 0.0
    shares = q._alloc_share
    for r in range(3):
        a = alloc[r]
        share = shares[r] if shares is not None else q.allocatable_share(r)
        if share is None:
            share = ssn.total[r]
        if share == 0:
            # KAI multiplies the allocation (in its own units: GPUs, millicores, bytes) by 1000.
            v = (a / 1000 if r == G else a) * 1000.0
        else:
            v = a / share
        best = max(best, v)
    return best


@dataclass
class JobCache:
    """Per-job values shared between orderings while only the `volatile` jobs' tasks may change.

    The caller owns it and must drop it once any other job changes; ``init`` holds init resources for one
    `include_virtual` setting, ``keys`` the jobs' sort keys.
    """

    volatile: set[str]
    init: dict[str, Vec] = field(default_factory=dict)
    keys: dict[str, tuple[object, ...]] = field(default_factory=dict)

    def mark(self, uid: str) -> None:
        """From now on the job may change: forget what was cached for it."""
        if uid not in self.volatile:
            self.volatile.add(uid)
            self.init.pop(uid, None)
            self.keys.pop(uid, None)


QueueKey = tuple[bool, bool, int, bool, float, float]


@dataclass
class KeyMemo:
    """Queue keys and rules 7-8 outcomes that orderings built over one session state may share.

    A fresh key is looked up by everything it reads that can change (the queue's allocation, its best job's
    init resources), so it stays valid while fair shares, quotas and allocatable shares stay as they are:
    the solvers keep one per solve, as they keep their memo of comparisons, and each simulation's ordering
    finds the keys the earlier ones took.
    """

    fresh: dict[tuple[str, int, int, int, int, int, int], QueueKey] = field(default_factory=dict)
    ties: dict[tuple[str, str], tuple[list[int | None], list[int | None], bool]] = field(default_factory=dict)


class QueueComparator:
    """KAI's queue order, evaluated on the best pending job of each queue (or its victims)."""

    def __init__(
        self,
        ssn: Session,
        include_virtual: bool = False,
        shared_init: JobCache | None = None,
        memo: dict[tuple[object, ...], int] | None = None,
        fixed_victims: bool = False,
    ) -> None:
        self.ssn = ssn
        self.include_virtual = include_virtual
        # Victims' allocations by job object, when the caller reads the ordering only while no task of a
        # victim has moved since it was built (`fixed_victims`); the job is kept so its id stays its own.
        self._victim_alloc: dict[int, tuple[JobInfo, Vec]] | None = {} if fixed_victims else None
        # Outcomes of victim-less comparisons, keyed by everything they read that can change within a
        # session (allocations and init resources); shared by the caller while queue shares stay fixed.
        self._memo = memo
        self._init_cache: dict[str, Vec] = {}
        self._deserved_cache: dict[str, list[int | None]] = {}  # quotas are static within a session
        # Init resources the caller shares between comparators built with the same `include_virtual`.
        self._shared_init = shared_init
        self._static: dict[str, tuple[list[int | None], list[int | None], list[float]]] = {}

    def init_res(self, job: JobInfo | None) -> Vec:
        if job is None:
            return [0, 0, 0]
        key = job.uid
        v = self._init_cache.get(key)
        if v is None:
            shared = self._shared_init
            if shared is None or key in shared.volatile:
                v = job_init_resources(self.ssn, job, self.include_virtual)
            else:
                v = shared.init.get(key)
                if v is None:
                    v = shared.init[key] = job_init_resources(self.ssn, job, self.include_virtual)
            self._init_cache[key] = v
        return v

    def _deserved(self, q: QueueInfo) -> list[int | None]:
        d = self._deserved_cache.get(q.name)
        if d is None:
            d = self._deserved_cache[q.name] = [q.deserved(r) for r in range(3)]
        return d

    def _shares(self, q: QueueInfo) -> tuple[list[int | None], list[float]]:
        """The queue's allocatable shares, and the same with unlimited as infinity (cached once frozen)."""
        st = self._static.get(q.name)
        if st is not None and st[0] is q._alloc_share:
            return st[1], st[2]
        sh = [q.allocatable_share(r) for r in range(3)]
        inf = [_INF if x is None else x for x in sh]
        if q._alloc_share is not None:
            self._static[q.name] = (q._alloc_share, sh, inf)
        return sh, inf

    def forget(self, job: JobInfo) -> None:
        self._init_cache.pop(job.uid, None)

    def compare(
        self,
        lq: QueueInfo,
        rq: QueueInfo,
        lj: JobInfo | None,
        rj: JobInfo | None,
        lv: list[JobInfo] | None = None,
        rv: list[JobInfo] | None = None,
    ) -> int:
        """-1 when `lq` goes first, +1 when `rq` does."""
        memo = self._memo
        if memo is None or lv is not None or rv is not None:
            return self._compare(lq, rq, lj, rj, lv, rv)
        lqa, rqa = lq.allocated, rq.allocated
        li, ri = self.init_res(lj), self.init_res(rj)
        key = (lq.name, rq.name, *lqa, *rqa, *li, *ri)
        out = memo.get(key)
        if out is None:
            out = memo[key] = self._compare(lq, rq, lj, rj, lv, rv)
        return out

    def _allocated(self, v: JobInfo) -> Vec:
        """:func:`job_allocated` of a victim (kept per job object with `fixed_victims`)."""
        cache = self._victim_alloc
        if cache is None:
            return job_allocated(self.ssn, v)
        hit = cache.get(id(v))
        if hit is None:
            hit = cache[id(v)] = (v, job_allocated(self.ssn, v))
        return hit[1]

    def key(self, q: QueueInfo, job: JobInfo | None) -> tuple[bool, bool, int, bool, float, float]:
        """Rules 1-6 of :meth:`compare` as one sortable key of `q` with its best job `job`.

        Each of those rules compares one value of each side, so when two keys differ, the queue with the
        smaller key is the one :meth:`compare` puts first; equal keys leave it to rules 7-8 (the
        comparator itself). Victim-mode comparisons (minus victims) are not covered.
        """
        qa, f = q.allocated, q.fair_share
        over = f[0] < qa[0] and f[1] < qa[1] and f[2] < qa[2]
        i = self.init_res(job)
        a = [qa[0] + i[0], qa[1] + i[1], qa[2] + i[2]]
        sh, _ = self._shares(q)
        zero = (sh[0] == 0 and a[0] > 0) or (sh[1] == 0 and a[1] > 0) or (sh[2] == 0 and a[2] > 0)
        total = self.ssn.total
        return (
            over,
            not _le(a, self._deserved(q)),
            -q.spec.priority,
            zero,
            _dshare(total, sh, a),
            _dshare(total, sh, qa),
        )

    def _compare(
        self,
        lq: QueueInfo,
        rq: QueueInfo,
        lj: JobInfo | None,
        rj: JobInfo | None,
        lv: list[JobInfo] | None,
        rv: list[JobInfo] | None,
    ) -> int:
        # 1. under-utilised first: over-utilised means fair share < allocated in every resource.
        lqa, rqa, lf, rf = lq.allocated, rq.allocated, lq.fair_share, rq.fair_share
        lo = lf[0] < lqa[0] and lf[1] < lqa[1] and lf[2] < lqa[2]
        ro = rf[0] < rqa[0] and rf[1] < rqa[1] and rf[2] < rqa[2]
        if lo != ro:
            return 1 if lo else -1
        li, ri = self.init_res(lj), self.init_res(rj)
        la = [lqa[0] + li[0], lqa[1] + li[1], lqa[2] + li[2]]
        ra = [rqa[0] + ri[0], rqa[1] + ri[1], rqa[2] + ri[2]]
        # 2. starved (stays within deserved with the job) first.
        ls = _le(la, self._deserved(lq))
        rs = _le(ra, self._deserved(rq))
        if ls != rs:
            return -1 if ls else 1
        # 3. higher queue priority first.
        if lq.spec.priority != rq.spec.priority:
            return -1 if lq.spec.priority > rq.spec.priority else 1
        # 4. penalise using a resource with no allocatable share.
        lsh, lx = self._shares(lq)
        rsh, rx = self._shares(rq)
        lz = (lsh[0] == 0 and la[0] > 0) or (lsh[1] == 0 and la[1] > 0) or (lsh[2] == 0 and la[2] > 0)
        rz = (rsh[0] == 0 and ra[0] > 0) or (rsh[1] == 0 and ra[1] > 0) or (rsh[2] == 0 and ra[2] > 0)
        if lz != rz:
            return 1 if lz else -1
        # 5. smaller dominant share with the job (minus victims).
        if lv or rv:
            la, ra = list(la), list(ra)
            for vs, w in ((lv, la), (rv, ra)):
                for v in vs or ():
                    va = self._allocated(v)
                    for r in range(3):
                        w[r] -= va[r]
        total = self.ssn.total
        lds, rds = _dshare(total, lsh, la), _dshare(total, rsh, ra)
        if lds != rds:
            return -1 if lds < rds else 1
        # 6. smaller dominant share without the job.
        lds, rds = _dshare(total, lsh, lqa), _dshare(total, rsh, rqa)
        if lds != rds:
            return -1 if lds < rds else 1
        return _rules_7_8(lq, rq, lx, rx)


def _rules_7_8(lq: QueueInfo, rq: QueueInfo, lx: list[float], rx: list[float]) -> int:
    """The comparator's last rules, given the queues' allocatable shares with unlimited as infinity."""
    # 7. smaller allocatable share (<= everywhere, < somewhere).
    if all(a <= b for a, b in zip(lx, rx, strict=True)) and any(a < b for a, b in zip(lx, rx, strict=True)):
        return -1
    if all(b <= a for a, b in zip(lx, rx, strict=True)) and any(b < a for a, b in zip(lx, rx, strict=True)):
        return 1
    # 8. older queue first.
    return -1 if (lq.spec.order, lq.name) < (rq.spec.order, rq.name) else 1


def _dshare(total: Vec, shares: list[int | None], alloc: Vec) -> float:
    """:func:`dominant_share` with the queue's allocatable shares already looked up."""
    best = 0.0
    for r in range(3):
        a = alloc[r]
        share = shares[r]
        if share is None:
            share = total[r]
        if share == 0:
            v = (a / 1000 if r == G else a) * 1000.0
        else:
            v = a / share
        if v > best:
            best = v
    return best


Run = tuple[list[tuple[tuple[object, ...], JobInfo]], Callable[[JobInfo], bool]]
"""A leaf's jobs already sorted by ascending :meth:`JobInfo.sort_key` (key, job), and a filter: jobs for
which it returns True are left out. Read lazily, so building an ordering over a long run costs nothing."""


class _Leaf:
    """One leaf queue's jobs in order: a heap of pushed jobs merged with an optional presorted run."""

    __slots__ = ("_best", "heap", "pos", "run", "skip", "victim")

    def __init__(self, victim: bool, run: Run | None = None) -> None:
        self.heap: list[tuple[tuple[object, ...], int, JobInfo]] = []
        self.victim = victim
        self.run: list[tuple[tuple[object, ...], JobInfo]] = run[0] if run is not None else []
        self.skip: Callable[[JobInfo], bool] | None = run[1] if run is not None else None
        # Victim order is the reverse of job order: read the run from its end.
        self.pos = len(self.run) - 1 if victim else 0
        self._best: tuple[bool, JobInfo | None] | None = None  # (from the run?, job), until the next change

    def _run_head(self) -> tuple[tuple[object, ...], JobInfo] | None:
        run, skip = self.run, self.skip
        if self.victim:
            while self.pos >= 0:
                entry = run[self.pos]
                if skip is None or not skip(entry[1]):
                    return entry
                self.pos -= 1
            return None
        while self.pos < len(run):
            entry = run[self.pos]
            if skip is None or not skip(entry[1]):
                return entry
            self.pos += 1
        return None

    def _run_first(self) -> bool:
        """True when the run's head goes before the heap's (there is a run head)."""
        head = self._run_head()
        if head is None:
            return False
        if not self.heap:
            return True
        key = tuple(_Neg(x) for x in head[0]) if self.victim else head[0]
        return bool(key < self.heap[0][0])

    def _head(self) -> tuple[bool, JobInfo | None]:
        best = self._best
        if best is None:
            if self._run_first():
                best = (True, self.run[self.pos][1])
            else:
                best = (False, self.heap[0][2] if self.heap else None)
            self._best = best
        return best

    def peek(self) -> JobInfo | None:
        return self._head()[1]

    def pop(self) -> JobInfo:
        from_run, job = self._head()
        assert job is not None
        self._best = None
        if from_run:
            self.pos += -1 if self.victim else 1
            return job
        return heapq.heappop(self.heap)[2]

    def push(self, entry: tuple[tuple[object, ...], int, JobInfo]) -> None:
        self._best = None
        heapq.heappush(self.heap, entry)

    def __bool__(self) -> bool:
        return self._head()[1] is not None


class JobsByQueue:
    """A tree of ordered queues: at every level, the child whose best job wins the queue comparator.

    Each parent keeps its active children sorted best-first. Only the queues on the path of the leaf
    that was last popped or pushed change state, so only they are re-positioned (binary insertion),
    lazily at the next pop or push -- after the popped job's allocation has been accounted, as KAI's
    lazily re-fixed heaps do. `runs` give leaves whose jobs are already sorted (see :data:`Run`), in the
    order the leaves are to be placed: the solvers keep them across attempts instead of heaping every job
    again.
    """

    fast = True
    """Re-insert with :meth:`_fresh_key` and :meth:`_tie` (the same probes and outcomes, cheaper); False
    keeps the plain key-then-comparator path, the reference the tests compare the fast path with."""

    def __init__(
        self,
        ssn: Session,
        jobs: Iterable[JobInfo],
        victim: bool = False,
        include_virtual: bool = False,
        shared_init: JobCache | None = None,
        memo: dict[tuple[object, ...], int] | None = None,
        runs: Mapping[str, Run] | None = None,
        fixed_victims: bool = False,
        keys: KeyMemo | None = None,
    ) -> None:
        """`fixed_victims` (victim mode): the caller reads the ordering only while no task of its jobs has
        moved since it was built, so each victim's allocation is summed once. `keys`: queue keys shared
        with other orderings over the same shares (:class:`KeyMemo`)."""
        self.ssn = ssn
        self.victim = victim
        self.cmp = QueueComparator(ssn, include_virtual, shared_init, memo, fixed_victims)
        self._shared = shared_init
        self._leaves: dict[str, _Leaf] = {}
        self._children: dict[str | None, list[QueueInfo]] = {}
        self._dirty: list[QueueInfo] = []
        self._seq = 0
        self.popped: dict[str, list[JobInfo]] = {}
        # Victim mode with `fixed_victims`: per leaf, the summed allocation of its popped victims, kept as
        # they are popped so that a victim key does not re-add every victim taken so far (exact integers:
        # the same sums in any order).
        self._popped_alloc: dict[str, list[int]] | None = {} if victim and fixed_victims else None
        # Each placed queue's allocation and QueueComparator.key, taken when it was last (re-)inserted or
        # compared. Its best job changes only when the queue is on the path being re-inserted; its
        # allocation may also change under the ordering (a commit of the action evicts from other queues),
        # so a key is used only while the allocation it was taken with still holds (see _key_of).
        self._keys: dict[str, tuple[int, int, int, tuple[bool, bool, int, bool, float, float]]] = {}
        # Orderings given a memo of comparisons and no shared keys find their comparisons there already:
        # keys of their own would only add. The solvers' simulations, which rebuild an ordering per scenario
        # over mostly the same queues, share their keys (`keys`), which compare faster than memo lookups.
        self._keyed = not victim and (memo is None or keys is not None)
        # Victim orderings whose victims' allocations are fixed are keyed too, on the fast path only.
        self._victim_keyed = victim and fixed_victims and memo is None
        # With `fast` (keyed orderings): fresh keys by their inputs, and rules 7-8's outcome per sibling pair.
        shared_keys = keys if keys is not None else KeyMemo()
        self._fresh = shared_keys.fresh
        self._ties = shared_keys.ties
        # Leaves are placed in the order `runs` lists them (then those of `jobs`, in order of first job):
        # callers give a deterministic order, the one a heap of the same jobs would have created.
        for name, run in (runs or {}).items():
            self._leaves[name] = _Leaf(victim, run)
        for j in jobs:
            assert j.queue is not None
            self._seq += 1
            self._leaf(j.queue.name).heap.append((self._key(j), self._seq, j))
        for leaf in self._leaves.values():
            heapq.heapify(leaf.heap)  # one pass rather than a push per job: the same pops (distinct keys)
        for name in self._leaves:
            self._reposition(self.ssn.queues[name])

    def _leaf(self, name: str) -> _Leaf:
        leaf = self._leaves.get(name)
        if leaf is None:
            leaf = self._leaves[name] = _Leaf(self.victim)
        return leaf

    def _key(self, job: JobInfo) -> tuple[object, ...]:
        shared = self._shared
        if shared is not None and job.uid not in shared.volatile:
            k = shared.keys.get(job.uid)
            if k is None:
                k = shared.keys[job.uid] = job.sort_key()
        else:
            k = job.sort_key()
        if self.victim:
            return tuple(_Neg(x) for x in k)
        return k

    def push(self, job: JobInfo) -> None:
        """Put a job (back) into its leaf queue."""
        assert job.queue is not None
        self._flush()
        self.cmp.forget(job)
        self._seq += 1
        self._leaf(job.queue.name).push((self._key(job), self._seq, job))
        self._reposition(job.queue)

    def __bool__(self) -> bool:
        return any(self._leaves.values())

    def _best_job(self, q: QueueInfo) -> JobInfo | None:
        leaf = self._leaves.get(q.name)
        return leaf.peek() if leaf is not None else None

    def _leaf_of(self, q: QueueInfo) -> QueueInfo:
        while q.children:  # not a leaf
            q = self._children[q.name][0]
        return q

    def _has_jobs(self, q: QueueInfo) -> bool:
        if q.is_leaf:
            leaf = self._leaves.get(q.name)
            return leaf is not None and bool(leaf)
        return bool(self._children.get(q.name))

    def _before(self, a: QueueInfo, b: QueueInfo) -> bool:
        """True when queue `a` goes before its sibling `b`."""
        la, lb = self._leaf_of(a), self._leaf_of(b)
        if not self.victim:
            return self.cmp.compare(a, b, self._best_job(la), self._best_job(lb)) < 0
        va = [*self.popped.get(la.name, []), *filter(None, [self._best_job(la)])]
        vb = [*self.popped.get(lb.name, []), *filter(None, [self._best_job(lb)])]
        return self.cmp.compare(a, b, None, None, va, vb) > 0

    def _reposition(self, q: QueueInfo) -> None:
        """Re-insert `q` and each of its ancestors at their place among their siblings."""
        node: QueueInfo | None = q
        while node is not None:
            parent = node.parent
            key = parent.name if parent is not None else None
            siblings = self._children.setdefault(key, [])
            for i, s in enumerate(siblings):
                if s is node:
                    del siblings[i]
                    break
            if self._has_jobs(node):
                lo, hi = 0, len(siblings)
                if not siblings:
                    # Nothing to compare with: no key is needed now. A kept key would go stale (a victim
                    # key also reads what was popped), so it is dropped and taken afresh when next read.
                    self._keys.pop(node.name, None)
                elif not self._keyed and not (self._victim_keyed and self.fast):
                    while lo < hi:
                        mid = (lo + hi) // 2
                        if self._before(node, siblings[mid]):
                            hi = mid
                        else:
                            lo = mid + 1
                elif not self.fast:
                    # The comparator's rules 1-6 as keys: a key comparison decides unless the keys tie.
                    k = self._key_of(node, fresh=True)
                    while lo < hi:
                        mid = (lo + hi) // 2
                        other = siblings[mid]
                        ko = self._key_of(other)
                        if k < ko if k != ko else self._before(node, other):
                            hi = mid
                        else:
                            lo = mid + 1
                else:
                    # The same probes, each cheaper: the fresh key looked up by what it reads, and a tie of
                    # keys (rules 1-6 all equal) decided by rules 7-8 alone, which read no allocation.
                    k = self._fresh_key(node)
                    keys = self._keys
                    ties = self._ties
                    inv = self.victim  # victims: the comparator's order inverted, rules 1-8 alike
                    while lo < hi:
                        mid = (lo + hi) // 2
                        other = siblings[mid]
                        kept = keys.get(other.name)
                        a = other.allocated
                        if kept is not None and kept[0] == a[0] and kept[1] == a[1] and kept[2] == a[2]:
                            ko = kept[3]
                        else:  # _key_of(other): its key afresh, looked up by its inputs
                            ko = self._fresh_key(other)
                        if k != ko:
                            before = ko < k if inv else k < ko
                        else:  # _tie(node, other), its kept outcome looked up here
                            tie = ties.get((node.name, other.name))
                            if (
                                tie is not None
                                and tie[0] is node._alloc_share
                                and tie[1] is other._alloc_share
                            ):
                                before = tie[2] != inv
                            else:
                                before = self._tie(node, other) != inv
                        if before:
                            hi = mid
                        else:
                            lo = mid + 1
                siblings.insert(lo, node)
            node = parent

    def _key_of(self, q: QueueInfo, fresh: bool = False) -> tuple[bool, bool, int, bool, float, float]:
        """`q`'s :meth:`QueueComparator.key` with its best job, as :meth:`_before` would see it now."""
        a = q.allocated
        kept = None if fresh else self._keys.get(q.name)
        if kept is not None and kept[0] == a[0] and kept[1] == a[1] and kept[2] == a[2]:
            return kept[3]
        k = self._victim_key(q) if self.victim else self.cmp.key(q, self._best_job(self._leaf_of(q)))
        self._keys[q.name] = (a[0], a[1], a[2], k)
        return k

    def _victim_key(self, q: QueueInfo) -> tuple[bool, bool, int, bool, float, float]:
        """Victim mode's key of `q`: :meth:`QueueComparator.key` without a job, its rule 5 (the dominant
        share with the job) taken minus the victims :meth:`_before` would pass for `q` (those popped from
        its best leaf, and that leaf's best job). Victim orderings are keyed only with `fixed_victims`, so
        each victim's allocation is the one summed when the ordering first read it."""
        leaf = self._leaf_of(q)
        qa = q.allocated
        rest = [qa[0], qa[1], qa[2]]
        taken = self._popped_alloc.get(leaf.name) if self._popped_alloc is not None else None
        if taken is not None:
            rest[0] -= taken[0]
            rest[1] -= taken[1]
            rest[2] -= taken[2]
        else:
            for v in self.popped.get(leaf.name, ()):
                va = self.cmp._allocated(v)
                rest[0] -= va[0]
                rest[1] -= va[1]
                rest[2] -= va[2]
        best = self._best_job(leaf)
        if best is not None:
            va = self.cmp._allocated(best)
            rest[0] -= va[0]
            rest[1] -= va[1]
            rest[2] -= va[2]
        k = self.cmp.key(q, None)
        sh, _ = self.cmp._shares(q)
        return (k[0], k[1], k[2], k[3], _dshare(self.ssn.total, sh, rest), k[5])

    def _fresh_key(self, q: QueueInfo) -> tuple[bool, bool, int, bool, float, float]:
        """``_key_of(q, fresh=True)``, looked up by the inputs the key reads that can change while the
        ordering lives: `q`'s allocation and its best job's init resources (fair shares, allocatable shares,
        quotas, priority and the cluster total are fixed once the session's shares are divided). In victim
        mode, :meth:`_victim_key` afresh."""
        a = q.allocated
        if self.victim:
            k = self._victim_key(q)
        else:
            job = self._best_job(self._leaf_of(q))
            i = self.cmp.init_res(job)
            memo_key = (q.name, a[0], a[1], a[2], i[0], i[1], i[2])
            hit = self._fresh.get(memo_key)
            if hit is None or q._alloc_share is None:
                k = self.cmp.key(q, job)
                if q._alloc_share is not None:
                    self._fresh[memo_key] = k
            else:
                k = hit
        self._keys[q.name] = (a[0], a[1], a[2], k)
        return k

    def _tie(self, a: QueueInfo, b: QueueInfo) -> bool:
        """:meth:`_before` for siblings whose keys tie: rules 1-6 of the comparator are then all equal, so
        rules 7-8 decide (smaller allocatable share, then the older queue). They read only the queues'
        allocatable shares, frozen once the session's shares are divided: kept per pair while they are."""
        sa, sb = a._alloc_share, b._alloc_share
        hit = self._ties.get((a.name, b.name))
        if hit is not None and hit[0] is sa and hit[1] is sb:
            return hit[2]
        _, lx = self.cmp._shares(a)
        _, rx = self.cmp._shares(b)
        out = _rules_7_8(a, b, lx, rx) < 0
        if sa is not None and sb is not None:
            self._ties[(a.name, b.name)] = (sa, sb, out)
        return out

    def _flush(self) -> None:
        while self._dirty:
            self._reposition(self._dirty.pop())

    def leaf_order(self, leaf: str, uids: set[str]) -> Iterator[JobInfo]:
        """The pushed jobs of `leaf` whose uid is in `uids`, in the order the leaf would give them.

        Read lazily from a copy of the leaf's heap: a simulation often stops after a few of them."""
        heap = list(self._leaves[leaf].heap)
        while heap:
            j = heapq.heappop(heap)[2]
            if j.uid in uids:
                yield j

    def pop_alike(self, job: JobInfo, keep: Container[str]) -> int:
        """Pop, without placing them, the jobs that follow `job` (just popped) in its leaf while each would
        be popped next anyway; returns how many. Only for an ordering whose allocations did not change
        since `job` was popped (a simulation's turns: other pending jobs are never placed).

        Queue comparisons read a leaf only through its best job's init resources, and since `job` was
        popped only its leaf's path is out of place: while the leaf's next job has the same init
        resources, every comparison re-placing that path comes out as it did for `job`, so the leaf is
        the best again and that job is popped next. Stops before a job whose uid is in `keep`.
        """
        assert not self.victim and job.queue is not None
        leaf = self._leaves[job.queue.name]
        init = self.cmp.init_res(job)
        n = 0
        while (head := leaf.peek()) is not None and head.uid not in keep and self.cmp.init_res(head) == init:
            leaf.pop()
            n += 1
        return n

    def pop(self) -> JobInfo | None:
        """The next job: best root queue, then best child, down to a leaf; then that leaf's best job."""
        self._flush()
        roots = self._children.get(None)
        if not roots:
            return None
        leaf = self._leaf_of(roots[0])
        job = self._leaves[leaf.name].pop()
        if self.victim:
            self.popped.setdefault(leaf.name, []).append(job)
            if self._popped_alloc is not None:
                va = self.cmp._allocated(job)
                taken = self._popped_alloc.setdefault(leaf.name, [0, 0, 0])
                taken[0] += va[0]
                taken[1] += va[1]
                taken[2] += va[2]
        self._dirty.append(leaf)
        return job


class _Neg:
    """Wraps a sort key element to invert its order (victim mode)."""

    __slots__ = ("v",)

    def __init__(self, v: object) -> None:
        self.v = v

    def __lt__(self, other: _Neg) -> bool:
        return bool(other.v < self.v)  # type: ignore[operator]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Neg) and bool(self.v == other.v)

    def __hash__(self) -> int:
        return hash(self.v)


def turns(order: JobsByQueue, involved: Sequence[JobInfo]) -> Iterator[JobInfo]:
    """The involved jobs (the ones a simulation places), each once, in the order the queue gives them their turn.

    Other pending jobs take their turns too but are never placed, so they change no allocation: once every
    involved job still to come sits in one leaf queue, they come in that leaf's job order whatever else
    the queue pops in between, and the rest of the queue is skipped. Once all had their turn the rest of
    the queue changes nothing either. The jobs of a leaf that would be popped next anyway (the same init
    resources as the one just popped) are popped in one step (:meth:`JobsByQueue.pop_alike`).
    """
    remaining = {j.uid: j for j in involved}
    while remaining:
        leaves = {j.queue.name for j in remaining.values() if j.queue is not None}
        if len(leaves) == 1:
            yield from order.leaf_order(leaves.pop(), set(remaining))
            return
        nxt = order.pop()
        if nxt is None:
            return
        if remaining.pop(nxt.uid, None) is not None:
            yield nxt
        else:
            order.pop_alike(nxt, remaining)


def task_order(tasks: Iterable[TaskInfo]) -> list[TaskInfo]:
    """Tasks in placement order (eviction uses the reverse)."""
    return sorted(tasks, key=TaskInfo.sort_key)
