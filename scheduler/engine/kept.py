"""The session the service keeps between cycles: put back as it opened, then patched to the next snapshot.

Opening a :class:`~scheduler.engine.session.Session` from a snapshot builds one task per pod, charges every
placed pod to its node and every pod to its queue's sums, and indexes the nodes: most of a cycle's time at
production size (``benchmarks/bench_production.py``, docs/benchmarks.md). Between two cycles of the service only what the new events touched
differs, so :class:`KeptSession` keeps the last session and, given the next snapshot, the builder it came
from and the :class:`Changes` the service's folder noted for the events folded since (:func:`reopen`):

1. puts every task the last cycle moved (its decisions) back as the session opened it, with
   ``Session._set``'s accounting, so the nodes, the queues' allocation and the node index are as they were;
2. looks at the pods and pod groups the events named, and only at them: a task is kept while its pod and
   its job view are the very objects the builder holds (the fold replaces an object whenever it changes
   it); tasks of removed or changed pods and of changed pod groups come off their nodes and queue sums,
   tasks of new or changed ones go on;
3. rebuilds in the snapshot's order what is order-sensitive (the task and job lists by C-speed maps over
   the builder's keys, indices and queue job lists only where pod groups changed, each touched job's task
   order) and resets what a cycle fills (caches, fit errors, job clocks, decisions, counters, the pod
   index, fair shares). Nodes holding pods of other schedulers that ask for GPUs (whose devices are chosen
   after ours, see ``NodeInfo.add_foreign``), and nodes whose foreign pods changed, are rebuilt whole.

The session it returns equals ``Session(state, config, now_ms, usage)`` built afresh, so the cycle stays a
pure function of its inputs (``tests/scheduler/engine/test_kept_session.py`` compares sessions and records of many cycles
both ways, and replays a service run). It builds afresh instead when there is no finished previous cycle,
when the config, the nodes or the queues differ (rare: they are compared whole, so an unchanged node
re-announced is fine), when an event may have changed many pods at once (a node removed) or is of a kind
:class:`Changes` does not know, or when the changes do not lead from the last snapshot to this one.
The simulator (``analytics/simulation/simulate.py``) keeps its session the same way. Replays build every session
afresh (``run_cycle``): they check the service's and the simulator's records with an independent
construction.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from operator import attrgetter
from typing import Any, Final

from scheduler.engine.cycle import DEFAULT_ORDER, StepHook, run_actions
from scheduler.engine.predicates.podindex import has_soft_terms
from scheduler.engine.record.decisions import CycleRecord, InFlightBind, InFlightEvict, make_record
from scheduler.engine.record.inflight import apply_evicting, apply_in_flight
from scheduler.engine.session import (
    ACTIVE_ALLOCATED,
    ACTIVE_USED,
    QUEUE_ALLOCATED,
    JobInfo,
    NodeInfo,
    Session,
    SessionConfig,
    TaskInfo,
    lacks_devices,
    zero,
)
from scheduler.engine.state import ClusterState, Pod, PodStatus, StateBuilder

__all__ = ["Changes", "Index", "KeptRun", "KeptSession", "reopen", "run_kept_cycle"]

# Every attribute Session.__init__ sets, each reset or rebuilt by reopen. A session carrying any other
# attribute set in __init__ (a structure added later that reopen does not know) is opened afresh.
_KNOWN: Final = frozenset(
    {
        "config",
        "now_ms",
        "state",
        "nodes",
        "node_by_name",
        "queues",
        "jobs",
        "job_by_uid",
        "tasks",
        "gated",
        "version",
        "commits",
        "action_cache",
        "pred_cache",
        "vol_picks",
        "storage_index",
        "static_cache",
        "_pod_index",
        "anti_present",
        "soft_present",
        "last_why",
        "work",
        "min_gpu_memory",
        "decisions",
        "total",
        "free_index",
        "_claimed",
        "_batch",  # None between batches of moves, and a cycle ends between them
        "_batch_charges",  # empty between batches
        "_ready_gpu_milli",
        "shares",
        "_node_maxima",  # kept: it depends on the node specs only, unchanged by reopen
        "stuck_next_ms",  # kept, lowered for the tasks put on; reopen refuses once a pod would turn stuck
    }
)
_INIT_ATTRS: Final = frozenset(vars(Session(ClusterState())))
UNKNOWN_ATTRS: Final = _INIT_ATTRS - _KNOWN  # empty unless Session grew a structure reopen does not reset


# Events that change one pod (and its pod group): the pod is named by namespace / name.
_POD_EVENTS: Final = frozenset(
    {
        "PodSubmitted",
        "PodBound",
        "PodReleasing",
        "PodFinished",
        "PodDeleted",
        "PodUngated",
        "PodVolumesChanged",
    }
)
_GROUP_EVENTS: Final = frozenset({"PodGroupUpserted", "PodGroupDeleted"})
# Events that change neither pods nor pod groups (nodes, queues and foreign pods are compared whole).
_OTHER_EVENTS: Final = frozenset(
    {
        "NodeUpserted",
        "QueueUpserted",
        "QueueDeleted",
        "ForeignPodUpserted",
        "TopologyUpserted",
        "TopologyDeleted",
        "ClockTick",
    }
)


MAX_NOTED: Final = 50_000  # pods noted before a Changes gives up and asks for a fresh session


class Changes:
    """The pods and pod groups the events folded since offset ``since`` may have changed (a superset).

    :meth:`note` each event before the builder folds it. An event that may change many pods at once (a
    node removed) or of a kind not known here sets ``everything``: the next session is built afresh.
    """

    __slots__ = ("everything", "jobs", "pods", "since")

    def __init__(self, since: int) -> None:
        self.since = since
        self.pods: set[str] = set()
        self.jobs: set[str] = set()
        self.everything = False

    def note(self, event: object) -> None:
        """Record what folding ``event`` may change (an ``ingest.events`` model or a fast-path struct)."""
        if self.everything:
            return
        e: Any = event
        kind = getattr(e, "type", None)
        if kind in _POD_EVENTS:
            if len(self.pods) >= MAX_NOTED:  # a rebuild is cheaper (and a fold that never takes stays small)
                self.everything = True
                self.pods.clear()
                self.jobs.clear()
                return
            self.pods.add(f"{e.namespace}/{e.name}")
            if kind == "PodSubmitted":
                self.jobs.add(f"{e.namespace}/{e.pod_group}")
        elif kind in _GROUP_EVENTS:
            self.jobs.add(f"{e.namespace}/{e.name}")
        elif kind not in _OTHER_EVENTS:
            self.everything = True


class KeptSession:
    """The service's session, kept from one cycle to the next.

    ``open`` gives the session of the next cycle: patched from the last one when it is given the builder
    the snapshot came from and the :class:`Changes` folded since the last cycle's snapshot, else built
    afresh. ``close`` says the cycle finished (its actions returned and the record was made), so the
    session may be reused. ``fresh`` and ``patched`` count how sessions were opened; ``last_reason`` says
    why the last one was built afresh.
    """

    def __init__(
        self,
        factory: Callable[[ClusterState, SessionConfig, int, dict[str, dict[str, float]]], Session] = Session,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.session: Session | None = None
        self._index: Index | None = None
        self._clean = False
        self.fresh = 0
        self.patched = 0
        self.last_reason = ""
        # Fresh sessions come from `factory` (metrics pass a timed Session). With a `clock`, `timings` gets
        # the seconds of a patched session's fair-share division ("divide"); they never feed a decision.
        self.factory = factory
        self.clock = clock
        self.timings: dict[str, float] = {}
        self._in_flight: frozenset[str] = frozenset()  # pods the kept session opened as binds in flight

    def open(
        self,
        state: ClusterState,
        config: SessionConfig | None = None,
        now_ms: int = 0,
        usage: Mapping[str, Mapping[str, float]] | None = None,
        *,
        builder: StateBuilder | None = None,
        changes: Changes | None = None,
        in_flight: Mapping[str, Pod] | None = None,
    ) -> Session:
        """The session for a cycle on ``state``: equal to ``open_session(state, config, now_ms, usage)``.

        ``builder`` is the builder ``state`` is a snapshot of (nothing folded since), ``changes`` what was
        folded since the last cycle's snapshot; without them the session is built afresh (and not kept).
        ``in_flight`` are the pods ``state`` has in place of the builder's (binds in flight,
        :func:`scheduler.engine.record.inflight.apply_in_flight`); they, and those of the last cycle, are patched as
        changed pods.
        """
        overlay = dict(in_flight or {})
        if changes is not None and (overlay or self._in_flight):
            changes.pods.update(self._in_flight)
            changes.pods.update(overlay)
        self._in_flight = frozenset(overlay)
        cfg = config or SessionConfig()
        use = {k: dict(v) for k, v in (usage or {}).items()}
        last, index, self.session, self._index = self.session, self._index, None, None
        self.timings.clear()
        ssn: Session | None = None
        if builder is None or changes is None:
            self.last_reason = "no builder and changes given"
        elif last is None or index is None or not self._clean:
            self.last_reason = "no finished previous cycle"
        else:
            ssn, self.last_reason = reopen(
                last, index, builder, changes, state, cfg, now_ms, use, self.clock, self.timings, overlay
            )
        self._clean = False
        if ssn is None:
            ssn = self.factory(state, cfg, now_ms, use)
            index = Index(ssn, builder) if builder is not None else None
            self.fresh += 1
        else:
            self.patched += 1
        self.session, self._index = ssn, index
        return ssn

    def close(self) -> None:
        """The cycle on the session ``open`` gave has finished: every move it made is in its decisions."""
        self._clean = self.session is not None

    def discard(self) -> None:
        """Forget the kept session (the next ``open`` builds afresh)."""
        self.session = None
        self._index = None
        self._clean = False


def _charge(ssn: Session, t: TaskInfo, sign: int) -> None:
    """Add (1) or take off (-1) a task's part of its queue sums, as ``Session._account_queues`` counts it."""
    q = t.job.queue
    if q is None:
        return
    st = t.status
    if st in QUEUE_ALLOCATED:
        v = ssn.task_vec(t)
        np = not t.job.preemptible
        for a in q.ancestors():
            for r in range(3):
                a.allocated[r] += sign * v[r]
                a.requested[r] += sign * v[r]
                if np:
                    a.allocated_np[r] += sign * v[r]
    elif st is PodStatus.PENDING:
        v = ssn.task_vec(t)
        for a in q.ancestors():
            for r in range(3):
                a.requested[r] += sign * v[r]


def _open_node(ssn: Session, t: TaskInfo) -> NodeInfo | None:
    """The node a task sits on when its session opens."""
    if t.orig_node is None or t.orig_status not in ACTIVE_USED:
        return None
    return ssn.node_by_name.get(t.orig_node)


def _revert(ssn: Session) -> dict[str, NodeInfo]:
    """Put every task the last cycle moved back as the session opened it (``Session._set``'s accounting,
    with the node index left to the caller); return the nodes touched."""
    ssn._pod_index = None  # rebuilt on first use, in the snapshot's order
    touched: dict[str, NodeInfo] = {}
    moved = {id(op.task): op.task for op in ssn.decisions}
    for t in moved.values():
        node = t.node
        if node is not None:
            touched[node.name] = node
            if t.status in ACTIVE_USED:
                node.add(t, t.status, -1)
            if t.status in ACTIVE_ALLOCATED:
                ssn.queue_charge(t, -1)
        status, node = t.orig_status, _open_node(ssn, t)
        t.status, t.node, t.devices, t.portion = status, node, t.orig_devices, t.pod.gpu_milli_per_device
        t.virtual = False
        if node is not None:
            touched[node.name] = node
            if status in ACTIVE_USED:
                node.add(t, status, +1)
            if status in ACTIVE_ALLOCATED:
                ssn.queue_charge(t, +1)
    return touched


class _Overlay(Mapping[str, Pod]):
    """The builder's pods, in its order, with some replaced (binds in flight)."""

    __slots__ = ("base", "over")

    def __init__(self, base: Mapping[str, Pod], over: Mapping[str, Pod]) -> None:
        self.base, self.over = base, over

    def __getitem__(self, uid: str) -> Pod:
        p = self.over.get(uid)
        return p if p is not None else self.base[uid]

    def __iter__(self) -> Iterator[str]:
        return iter(self.base)

    def __len__(self) -> int:
        return len(self.base)


class Index:
    """What :func:`reopen` keeps beside the session: its tasks and gated pods by pod uid, the pods that make
    ``anti_present`` true, and the builder the session's snapshot came from."""

    __slots__ = ("anti", "builder", "gated", "soft", "tasks", "unknown")

    def __init__(self, ssn: Session, builder: StateBuilder) -> None:
        self.builder = builder
        self.tasks: dict[str, TaskInfo] = {t.uid: t for t in ssn.tasks}
        self.gated: dict[str, Pod] = {p.uid: p for p in ssn.gated}
        self.anti: set[str] = {t.uid for t in ssn.tasks if _holds_anti(t.pod)}
        self.soft: set[str] = {t.uid for t in ssn.tasks if _holds_soft(t.pod)}
        # Placed tasks whose bind named fewer devices than they hold (Session.assign_unknown_devices).
        self.unknown: set[str] = {t.uid for t in ssn.tasks if _unknown_devices(t.pod)}


def _unknown_devices(p: Pod) -> bool:
    """The pod is placed and its bind named fewer devices than it holds."""
    return p.node is not None and p.status in ACTIVE_USED and lacks_devices(p)


def _holds_soft(p: Pod) -> bool:
    """The pod is placed and has terms that score incoming pods (``Session.soft_present``'s test)."""
    return (
        p.node is not None and p.status in ACTIVE_USED and has_soft_terms(p.pod_affinity, p.pod_anti_affinity)
    )


def _holds_anti(p: Pod) -> bool:
    """The pod is placed and has a required anti-affinity term (``Session.anti_present``'s test)."""
    return bool(
        p.pod_anti_affinity
        and p.node is not None
        and p.status in ACTIVE_USED
        and any(not a.weight for a in p.pod_anti_affinity)
    )


def reopen(
    ssn: Session,
    index: Index,
    builder: StateBuilder,
    changes: Changes,
    state: ClusterState,
    config: SessionConfig,
    now_ms: int,
    usage: dict[str, dict[str, float]],
    clock: Callable[[], float] | None = None,
    timings: dict[str, float] | None = None,
    overlay: Mapping[str, Pod] | None = None,
) -> tuple[Session | None, str]:
    """Turn the session of the last (finished) cycle into the session of ``state``; ``index`` is kept current.

    ``state`` must be a snapshot of ``builder`` with nothing folded since, and ``changes`` what was folded
    since the snapshot ``ssn`` opened on. Returns ``(session, "")``, or ``(None, reason)`` when the session
    cannot be reused (then ``ssn`` and ``index`` are spent: build afresh). The session returned is a new
    :class:`Session` object over ``ssn``'s parts, changed in place (``ssn`` must not be used again). With a
    ``clock``, ``timings["divide"]`` gets the seconds of the fair-share division (observed, never read).
    ``overlay`` are pods ``state`` holds in place of the builder's (binds in flight); ``changes`` names them.

    Long on purpose: its steps share the last session's accounting and must run in this order
    (pod groups and pods named by the events, tasks off and on their nodes and queue sums, the lists in
    the snapshot's order, nodes rebuilt, a fresh Session object); each is commented where it starts.
    """
    old = ssn.state
    if UNKNOWN_ATTRS:
        return None, f"Session has attributes reopen does not reset: {sorted(UNKNOWN_ATTRS)}"
    if index.builder is not builder or changes.since != old.events_offset:
        return None, "the changes do not start at the last cycle's snapshot"
    if state.events_offset != builder.offset or len(state.jobs) != len(builder.jobs):
        return None, "the snapshot is not the builder's current state"
    if changes.everything:
        return None, "an event that may change many pods (a node removed, or an unknown kind)"
    if ssn.config != config:
        return None, "config changed"
    if config.node_pool is not None:
        # A shard's session opens on its pool's view of the snapshot (Session), not on the builder's state.
        return None, "a node-pool shard opens each session afresh"
    if old.nodes != state.nodes:
        return None, "nodes changed"
    if old.queues != state.queues:
        return None, "queues changed"
    if config.stuck_in_releasing_ms is not None and (
        now_ms < ssn.now_ms or (ssn.stuck_next_ms is not None and now_ms >= ssn.stuck_next_ms)
    ):
        # A releasing pod kept on its node would now be charged otherwise (stuck, or no longer stuck).
        return None, "a releasing pod's stuck-in-releasing state changed"
    touched = _revert(ssn)
    queues = ssn.queues
    job_by_uid = ssn.job_by_uid
    pods_now: Mapping[str, Pod] = _Overlay(builder.pods, overlay) if overlay else builder.pods
    jobs_now = builder.jobs
    tasks_of, gated = index.tasks, index.gated

    # Pod groups: those named by the events, and those of the pods named (before and after).
    pod_uids = set(changes.pods)
    job_uids = set(changes.jobs)
    for uid in changes.pods:
        t = tasks_of.get(uid)
        if t is not None:
            job_uids.add(t.job.uid)
        g = gated.get(uid)
        if g is not None:
            job_uids.add(g.job)
        p = pods_now.get(uid)
        if p is not None:
            job_uids.add(p.job)
    changed_jobs: list[tuple[JobInfo | None, JobInfo | None]] = []  # (old view, new view)
    for uid in sorted(job_uids):
        ji = job_by_uid.get(uid)
        spec = jobs_now.get(uid)
        if ji is not None and ji.spec is spec:
            continue
        nji = None
        if ji is not None:
            del job_by_uid[uid]
            pod_uids.update(t.uid for t in ji.tasks)  # their tasks are re-made for the new view
            pod_uids.update(u for u, g in gated.items() if g.job == uid)
        if spec is not None:
            nji = job_by_uid[uid] = JobInfo(spec, queues.get(spec.queue), ji.index if ji is not None else -1)
            pod_uids.update(builder.job_pod_uids(uid))
        changed_jobs.append((ji, nji))

    # Pods: a task is kept while its pod and its job view are the same objects.
    removed: list[TaskInfo] = []
    arriving: list[Pod] = []
    gated_changed = False
    for uid in sorted(pod_uids):
        p = pods_now.get(uid)
        if p is not None and p.job not in job_by_uid:
            p = None  # its pod group is unknown: the snapshot leaves it out
        t = tasks_of.get(uid)
        if t is not None:
            if p is t.pod and t.job is job_by_uid[t.job.uid]:
                continue
            removed.append(t)
            del tasks_of[uid]
            index.anti.discard(uid)
            index.soft.discard(uid)
            index.unknown.discard(uid)
        elif uid in gated:
            if p is gated[uid]:
                continue
            del gated[uid]
            gated_changed = True
        if p is None:
            continue
        if p.gated and p.status is PodStatus.PENDING:
            gated[uid] = p
            gated_changed = True
            continue
        arriving.append(p)

    # Take the old tasks off their nodes and queue sums, put the new ones on.
    dirty: dict[int, JobInfo] = {}  # job views whose task list changed
    for t in removed:
        _charge(ssn, t, -1)
        if t.node is not None:
            t.node.add(t, t.status, -1)
            touched[t.node.name] = t.node
        if job_by_uid.get(t.job.uid) is t.job:
            dirty[id(t.job)] = t.job
    removed_ids = {id(t) for t in removed}
    for job in dirty.values():
        job.tasks = [t for t in job.tasks if id(t) not in removed_ids]
    node_by_name = ssn.node_by_name
    for p in arriving:
        t = tasks_of[p.uid] = TaskInfo(p, job_by_uid[p.job])
        if p.status is PodStatus.RELEASING:
            t.stuck = ssn.is_stuck(p.releasing_ms, now_ms)
        if _holds_anti(p):
            index.anti.add(p.uid)
        if _holds_soft(p):
            index.soft.add(p.uid)
        if _unknown_devices(p):
            index.unknown.add(p.uid)
        if p.node is not None and p.status in ACTIVE_USED:
            node = node_by_name.get(p.node)
            if node is not None:
                t.node = node
                node.add(t, p.status, +1)
                touched[node.name] = node
        _charge(ssn, t, +1)
        t.job.tasks.append(t)
        dirty[id(t.job)] = t.job
    for job in dirty.values():
        if len(job.tasks) > 1:
            job.tasks.sort(key=TaskInfo.sort_key)

    # The lists, in the snapshot's (the builder's) order, and each job view's per-cycle state.
    if removed or arriving:
        ssn.tasks = list(filter(None, map(tasks_of.get, pods_now)))
    if gated_changed:
        ssn.gated = [p for p in state.pods if p.uid in gated] if gated else []
    jobs = ssn.jobs
    if changed_jobs:
        before = len(jobs)
        jobs = ssn.jobs = list(map(job_by_uid.__getitem__, jobs_now))
        for i in range(before, len(jobs)):
            jobs[i].index = i  # new pod groups come last
        moved = any(n is None for _, n in changed_jobs) or any(
            n is not None and (n.index < 0 or n.index >= len(jobs) or jobs[n.index] is not n)
            for _, n in changed_jobs
        )
        if moved or not _refile_queue_jobs(changed_jobs):
            # Pod groups went or moved: renumber all, and refile every queue's job list in job order.
            for q in queues.values():
                q.jobs = []
            for i, ji in enumerate(jobs):
                ji.index = i
                if ji.queue is not None:
                    ji.queue.jobs.append(ji)
    for ji in jobs:
        spec = ji.spec
        ji.last_start_ms = spec.last_start_ms
        ji.stale_since_ms = spec.stale_since_ms
        if ji.fit_errors:
            ji.fit_errors = []
        ji.subgroup_cache = None  # its PodSets list the job's tasks of the last cycle: rebuilt on first use

    # Nodes whose foreign pods decide devices after ours, or whose foreign pods changed: rebuilt whole.
    rebuild = {name for name in _foreign_rebuilds(old, state, touched) if name in node_by_name}
    # ... and touched nodes holding a task whose devices were not named: their choice depends on the
    # node's other tasks (Session.assign_unknown_devices), so it is made again as a fresh session makes it.
    for uid in index.unknown:
        on = tasks_of[uid].node
        if on is not None and on.name in touched:
            rebuild.add(on.name)
    if rebuild:
        for name in sorted(rebuild):
            n = node_by_name[name]
            stamp = n.stamp
            NodeInfo.__init__(n, n.spec, n.index)
            # A new state: views kept by stamp (scoring's node keys and kinds) must not match an old one.
            n.stamp = stamp + 1
        unknown: list[TaskInfo] = []
        for t in ssn.tasks:
            on = t.node
            if on is not None and on.name in rebuild:
                if t.status in ACTIVE_USED and lacks_devices(t.pod):
                    unknown.append(t)
                else:
                    on.add(t, t.status, +1)
        for t in unknown:
            assert t.node is not None
            t.node.assign_unknown_devices(t)
        for fp in state.foreign_pods:
            if fp.node in rebuild:
                node_by_name[fp.node].add_foreign(fp, fp.releasing and ssn.is_stuck(fp.releasing_ms, now_ms))
        for name in rebuild:
            touched[name] = node_by_name[name]
    for name in sorted(touched):
        ssn.free_index.update(touched[name])

    ssn.now_ms = now_ms
    ssn.state = state
    ssn.version = 0
    ssn.commits = 0
    ssn.action_cache = {}
    ssn.pred_cache = {}
    ssn.vol_picks = None
    ssn.storage_index = None
    ssn.static_cache = {}
    ssn._pod_index = None
    ssn.anti_present = bool(index.anti) or any(
        fp.pod_anti_affinity and fp.node in node_by_name and any(not a.weight for a in fp.pod_anti_affinity)
        for fp in state.foreign_pods
    )
    ssn.soft_present = bool(index.soft) or any(
        fp.node in node_by_name and has_soft_terms(fp.pod_affinity, fp.pod_anti_affinity)
        for fp in state.foreign_pods
    )
    ssn.last_why = Counter()
    ssn.work = Counter()
    ssn.decisions = []
    ssn._claimed = None
    ssn._batch = None
    ssn._batch_charges = {}
    ssn._ready_gpu_milli = 0
    # A new, plain Session object holding the same parts: caches other modules keep per session (weakly
    # keyed by the session, e.g. topology's domains and frees) must not carry over from the last cycle,
    # nor what actions hung on it or a subclass added (a timed session).
    out = Session.__new__(Session)
    out.__dict__.update((k, v) for k, v in vars(ssn).items() if k in _INIT_ATTRS)
    if rebuild:  # the total is the nodes' capacity less foreign pods: only rebuilt nodes change it
        out.total = out._total()
    for q in queues.values():
        q.share = None
        q.fair_share = zero()
        q._alloc_share = None
    t0 = clock() if clock is not None else 0.0
    out.shares = out._divide(usage)
    if clock is not None and timings is not None:
        timings["divide"] = max(clock() - t0, 0.0)  # observed only (KAI's proportion plugin latency)
    return out, ""


def _refile_queue_jobs(changed: list[tuple[JobInfo | None, JobInfo | None]]) -> bool:
    """Swap changed job views in their queues' job lists (kept in job order), when no pod group went or
    moved: a changed view has its old view's index, a new one comes after all others. False (lists
    half done) if an old view is not where its index says."""
    for old, new in changed:
        if old is not None and old.queue is not None:
            jobs = old.queue.jobs
            i = bisect.bisect_left(jobs, old.index, key=_INDEX)
            if i >= len(jobs) or jobs[i] is not old:
                return False
            if new is not None and new.queue is old.queue:
                jobs[i] = new
                continue
            del jobs[i]
        if new is not None and new.queue is not None:
            bisect.insort(new.queue.jobs, new, key=_INDEX)
    return True


_INDEX: Final = attrgetter("index")


def _foreign_rebuilds(old: ClusterState, state: ClusterState, touched: dict[str, NodeInfo]) -> set[str]:
    """Names of nodes to rebuild whole: touched ones holding a foreign pod that asks for GPUs, and every
    node where a foreign pod came, went or changed."""
    out: set[str] = set()
    if old.foreign_pods != state.foreign_pods:
        before = {fp.uid: fp for fp in old.foreign_pods}
        for fp in state.foreign_pods:
            was = before.pop(fp.uid, None)
            if was is not fp:
                out.add(fp.node)
                if was is not None:
                    out.add(was.node)
        out.update(fp.node for fp in before.values())
    if touched:
        out.update(
            fp.node
            for fp in state.foreign_pods
            if fp.node in touched and (fp.request.gpus or fp.request.is_shared)
        )
    return out


def run_kept_cycle(
    kept: KeptSession,
    state: ClusterState,
    config: SessionConfig | None = None,
    now_ms: int = 0,
    usage: Mapping[str, Mapping[str, float]] | None = None,
    usage_snapshot_id: str | None = None,
    actions: tuple[str, ...] = DEFAULT_ORDER,
    *,
    builder: StateBuilder | None = None,
    changes: Changes | None = None,
    in_flight: tuple[InFlightBind, ...] | list[InFlightBind] = (),
    on_step: StepHook | None = None,
    evicting: tuple[InFlightEvict, ...] | list[InFlightEvict] = (),
) -> tuple[CycleRecord, Session]:
    """:func:`scheduler.engine.cycle.run_cycle` on the kept session (see :meth:`KeptSession.open` for
    ``builder`` and ``changes``): the same record, the session patched instead of built.

    With binds in flight the session opens on the snapshot with those pods placed (``apply_in_flight``); a
    kept session patches them as changed pods, read from that state instead of the builder.
    """
    opened = apply_evicting(apply_in_flight(state, in_flight), evicting)
    changed = {b.pod for b in in_flight} | {e.pod for e in evicting}
    overlay = {p.uid: p for p in opened.pods if p.uid in changed} if changed else None
    ssn = kept.open(opened, config, now_ms, usage, builder=builder, changes=changes, in_flight=overlay)
    if on_step is not None:
        on_step("open_session")
    run_actions(ssn, actions, on_step)
    record = make_record(
        ssn,
        state.events_offset,
        usage_snapshot_id,
        usage_available=usage is not None,
        in_flight=in_flight,
        evicting=evicting,
    )
    kept.close()
    if on_step is not None:
        on_step("record")
    return record, ssn


class KeptRun:
    """A builder folded one event at a time and the session kept between the cycles run on it: what the
    simulator and the start-time estimates' forward runs use (the service folds through its ``Folder``).

    Every event goes through :meth:`apply`, which notes what it may change; :meth:`cycle` runs a cycle on
    the builder's current state, patching the last cycle's session. Its record equals ``run_cycle`` on
    ``builder.snapshot()``.
    """

    def __init__(self, builder: StateBuilder) -> None:
        self.builder = builder
        self.kept = KeptSession()
        self.changes = Changes(builder.offset)

    def apply(self, event: object, offset: int | None = None) -> None:
        """Fold one event (see :meth:`StateBuilder.apply`), noting what it may change."""
        self.changes.note(event)
        self.builder.apply(event, offset)

    def cycle(
        self,
        config: SessionConfig,
        now_ms: int,
        usage: Mapping[str, Mapping[str, float]] | None = None,
        usage_snapshot_id: str | None = None,
    ) -> CycleRecord:
        """One cycle at ``now_ms`` on the builder's state, on the kept session."""
        changes, self.changes = self.changes, Changes(self.builder.offset)
        record, _ = run_kept_cycle(
            self.kept,
            self.builder.snapshot(),
            config,
            now_ms,
            usage,
            usage_snapshot_id,
            builder=self.builder,
            changes=changes,
        )
        return record
