"""The session the service keeps between cycles: put back as it opened, then patched to the next snapshot.

Opening a :class:`~scheduler.engine.session.Session` from a snapshot builds one task per pod, charges every
placed pod to its node and every pod to its queue's sums, and indexes the nodes: 0.5-0.7 s at 140,000 pods
(``benchmarks/bench_production.py``). Between two cycles of the service only what the new events touched
differs, so :class:`KeptSession` keeps the last session and, given the next snapshot (:func:`reopen`):

1. puts every task the last cycle moved back where the session opened it, through the session's single
   mutation point (``Session._set``), so the nodes' accounting, the queues' allocation, the node index and
   the tasks are as they were when it opened;
2. compares the new snapshot with the one the session opened on, object by object: the fold replaces a pod
   or job whenever it changes it, so an unchanged one is the *same* object. Tasks of removed or changed pods
   and of changed jobs come off their nodes and queue sums; tasks of new or changed pods go on;
3. rebuilds in the snapshot's order what is cheap and order-sensitive (the task, job and queue job lists,
   job indices, each touched job's task order) and resets what a cycle fills (caches, fit errors, job
   clocks, decisions, counters, the pod index, fair shares).

Nodes holding pods of other schedulers that ask for GPUs (their devices are chosen after ours, see
``NodeInfo.add_foreign``), and nodes whose foreign pods changed, are rebuilt whole when touched.

The session it returns equals ``Session(state, config, now_ms, usage)`` built afresh, so the cycle stays a
pure function of its inputs (``tests/test_kept_session.py`` compares sessions and records of many cycles
both ways). It opens afresh instead when there is no clean previous session (the first cycle, or one that
did not finish), or when the config, the nodes or the queues differ.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Final

from scheduler.engine.cycle import DEFAULT_ORDER, run_actions
from scheduler.engine.decisions import CycleRecord, make_record
from scheduler.engine.session import (
    ACTIVE_USED,
    QUEUE_ALLOCATED,
    JobInfo,
    NodeInfo,
    Session,
    SessionConfig,
    TaskInfo,
    zero,
)
from scheduler.engine.state import ClusterState, Job, Pod, PodStatus

__all__ = ["Index", "KeptSession", "reopen", "run_kept_cycle"]

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
        "static_cache",
        "_pod_index",
        "anti_present",
        "last_why",
        "work",
        "min_gpu_memory",
        "decisions",
        "total",
        "free_index",
        "_claimed",
        "_ready_gpu_milli",
        "shares",
    }
)
_INIT_ATTRS: Final = frozenset(vars(Session(ClusterState())))
UNKNOWN_ATTRS: Final = _INIT_ATTRS - _KNOWN  # empty unless Session grew a structure reopen does not reset


class KeptSession:
    """The service's session, kept from one cycle to the next.

    ``open`` gives the session of the next cycle (patched from the last one, or built afresh); ``close``
    says the cycle finished (its actions returned and the record was made), so the session may be reused.
    ``fresh`` and ``patched`` count how each session was opened; ``last_reason`` says why the last one
    was built afresh.
    """

    def __init__(self) -> None:
        self.session: Session | None = None
        self._index: Index | None = None
        self._clean = False
        self.fresh = 0
        self.patched = 0
        self.last_reason = ""

    def open(
        self,
        state: ClusterState,
        config: SessionConfig | None = None,
        now_ms: int = 0,
        usage: Mapping[str, Mapping[str, float]] | None = None,
    ) -> Session:
        """The session for a cycle on ``state``: equal to ``open_session(state, config, now_ms, usage)``."""
        cfg = config or SessionConfig()
        use = {k: dict(v) for k, v in (usage or {}).items()}
        last, index, self.session, self._index = self.session, self._index, None, None
        ssn: Session | None = None
        if last is None or index is None or not self._clean:
            self.last_reason = "no finished previous cycle"
        else:
            ssn, self.last_reason = reopen(last, index, state, cfg, now_ms, use)
        self._clean = False
        if ssn is None or index is None:
            ssn = Session(state, cfg, now_ms, use)
            index = Index(ssn)
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


def _revert(ssn: Session) -> None:
    """Put every task the last cycle moved back as the session opened it."""
    ssn._pod_index = None  # rebuilt on first use, in the snapshot's order
    moved = {id(op.task): op.task for op in ssn.decisions}
    for t in moved.values():
        ssn._set(t, t.orig_status, _open_node(ssn, t), t.orig_devices, t.pod.gpu_milli_per_device)
        t.virtual = False


class Index:
    """What :func:`reopen` keeps beside the session to find what changed without walking every pod.

    Keyed by the identity of the snapshot's objects (``id``): the session's tasks by their pod, its job
    views by their job. Every key is the id of an object the session holds (a task's pod, a job view's
    spec), so no key can be reused by another object while the session lives.
    """

    __slots__ = ("anti", "gated", "job_of", "task_of")

    def __init__(self, ssn: Session) -> None:
        self.task_of: dict[int, TaskInfo | None] = {id(t.pod): t for t in ssn.tasks}  # gated pods: None
        self.task_of.update((id(p), None) for p in ssn.gated)
        self.gated: set[int] = {id(p) for p in ssn.gated}
        self.job_of: dict[int, JobInfo] = {id(j.spec): j for j in ssn.jobs}
        self.anti: set[int] = {id(t.pod) for t in ssn.tasks if _holds_anti(t.pod)}


def _holds_anti(p: Pod) -> bool:
    """The pod is placed and has a required anti-affinity term (``Session.anti_present``'s test)."""
    return bool(
        p.pod_anti_affinity
        and p.node is not None
        and p.status in ACTIVE_USED
        and any(not a.weight for a in p.pod_anti_affinity)
    )


def _uid(x: Pod | Job) -> str:
    return x.uid


def reopen(
    ssn: Session,
    index: Index,
    state: ClusterState,
    config: SessionConfig,
    now_ms: int,
    usage: dict[str, dict[str, float]],
) -> tuple[Session | None, str]:
    """Turn the session of the last (finished) cycle into the session of ``state``; ``index`` is kept current.

    Returns ``(session, "")``, or ``(None, reason)`` when it cannot be reused (then ``ssn`` and ``index``
    are spent: build afresh). The session returned is a new :class:`Session` object over ``ssn``'s parts,
    changed in place (``ssn`` must not be used again).
    """
    if UNKNOWN_ATTRS:
        return None, f"Session has attributes reopen does not reset: {sorted(UNKNOWN_ATTRS)}"
    if ssn.config != config:
        return None, "config changed"
    old = ssn.state
    if old.nodes != state.nodes:
        return None, "nodes changed"
    if old.queues != state.queues:
        return None, "queues changed"
    _revert(ssn)
    queues = ssn.queues
    job_by_uid = ssn.job_by_uid

    # Jobs that came (new or changed) and went, by identity; set operations run at C speed.
    new_job_ids = set(map(id, state.jobs))
    gone_jobs = set(index.job_of).difference(new_job_ids)
    came_jobs = new_job_ids.difference(index.job_of)
    replaced: list[JobInfo] = []  # old views of jobs that changed: their tasks are re-made
    for jid in sorted(gone_jobs, key=lambda i: index.job_of[i].uid):
        ji = index.job_of.pop(jid)
        if job_by_uid.get(ji.uid) is ji:
            del job_by_uid[ji.uid]
        replaced.append(ji)
    if came_jobs:
        by_id = dict(zip(map(id, state.jobs), state.jobs, strict=True))
        for j in sorted((by_id[i] for i in came_jobs), key=_uid):
            ji = JobInfo(j, queues.get(j.queue), 0)
            index.job_of[id(j)] = ji
            job_by_uid[j.uid] = ji

    # Pods that came and went; tasks of changed jobs are re-made for their (unchanged) pods.
    new_pod_ids = set(map(id, state.pods))
    gone_pods = set(index.task_of).difference(new_pod_ids)
    came_pods = new_pod_ids.difference(index.task_of)
    removed: list[TaskInfo] = []
    gated_changed = False
    for pid in gone_pods:
        t = index.task_of.pop(pid)
        if pid in index.gated:
            index.gated.discard(pid)
            gated_changed = True
        index.anti.discard(pid)
        if t is not None:
            removed.append(t)
    arriving: list[Pod] = []
    for ji in replaced:
        for t in ji.tasks:
            if id(t.pod) in new_pod_ids:
                removed.append(t)
                arriving.append(t.pod)
    if came_pods:
        by_pid = dict(zip(map(id, state.pods), state.pods, strict=True))
        arriving.extend(by_pid[i] for i in came_pods)
    arriving.sort(key=_uid)
    removed.sort(key=lambda t: t.uid)

    # Take the old tasks off their nodes and queue sums, put the new ones on.
    touched: dict[str, NodeInfo] = {}
    dirty: dict[int, JobInfo] = {}  # kept jobs whose task list changed
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
        pid = id(p)
        if p.gated and p.status is PodStatus.PENDING:
            index.task_of[pid] = None
            index.gated.add(pid)
            gated_changed = True
            continue
        t = TaskInfo(p, job_by_uid[p.job])
        index.task_of[pid] = t
        if _holds_anti(p):
            index.anti.add(pid)
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

    # The lists, in the snapshot's order (C-speed maps over the snapshot), and per-cycle job state.
    if gone_pods or came_pods or replaced:
        ssn.tasks = [t for t in map(index.task_of.__getitem__, map(id, state.pods)) if t is not None]
    if gated_changed:
        gated = index.gated
        ssn.gated = [p for p in state.pods if id(p) in gated] if gated else []
    jobs = ssn.jobs
    if gone_jobs or came_jobs:
        jobs = ssn.jobs = list(map(index.job_of.__getitem__, map(id, state.jobs)))
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

    # Nodes whose foreign pods decide devices after ours, or whose foreign pods changed: rebuilt whole.
    rebuild = {name for name in _foreign_rebuilds(old, state, touched) if name in node_by_name}
    if rebuild:
        for name in sorted(rebuild):
            n = node_by_name[name]
            NodeInfo.__init__(n, n.spec, n.index)
        for t in ssn.tasks:
            on = t.node
            if on is not None and on.name in rebuild:
                on.add(t, t.status, +1)
        for fp in state.foreign_pods:
            if fp.node in rebuild:
                node_by_name[fp.node].add_foreign(fp)
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
    ssn.static_cache = {}
    ssn._pod_index = None
    ssn.anti_present = bool(index.anti)
    ssn.last_why = Counter()
    ssn.work = Counter()
    ssn.decisions = []
    ssn._claimed = None
    ssn._ready_gpu_milli = 0
    for name in [a for a in vars(ssn) if a not in _INIT_ATTRS]:
        delattr(ssn, name)  # what actions hung on the session (e.g. placement's node maxima)
    ssn.total = ssn._total()
    for q in queues.values():
        q.share = None
        q.fair_share = zero()
        q._alloc_share = None
    ssn.shares = ssn._divide(usage)
    # A new Session object holding the same parts: caches other modules keep per session (weakly keyed
    # by the session, e.g. topology's domains and frees) must not carry over from the last cycle.
    out = Session.__new__(Session)
    out.__dict__.update(vars(ssn))
    return out, ""


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
) -> tuple[CycleRecord, Session]:
    """:func:`scheduler.engine.cycle.run_cycle` on the kept session: the same record, opened incrementally."""
    ssn = kept.open(state, config, now_ms, usage)
    run_actions(ssn, actions)
    record = make_record(ssn, state.events_offset, usage_snapshot_id, usage_available=usage is not None)
    kept.close()
    return record, ssn
