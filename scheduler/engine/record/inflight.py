"""Binds in flight: Binds an earlier cycle decided whose ``PodBound`` has not come back through the fold yet.

A Bind becomes state only when its ``PodBound`` event is folded. Until then the fold shows the pod pending and
its node's capacity free, so a cycle in between could give that capacity to another pod. KAI avoids this with
its BindRequest objects: a pod with an unfailed BindRequest counts as allocated on its selected node (status
Binding, kai-spec §1.4 step 4). The event-sourced equivalent here:

* :func:`binds_in_flight` is the rule (one pure function): which tracked Binds are still in flight at a cycle.
* :func:`track` carries the tracked set from one cycle record to the next (the record's own ``in_flight``,
  plus its Binds), so the service needs only its last record to rebuild it on start.
* :func:`apply_in_flight` opens the cycle with the in-flight pods allocated where their Bind put them (status
  running: KAI's Binding counts like Bound); the session then counts them in node capacity, queue allocation
  and devices, and does not decide them again.

The record of a cycle carries the set it used (``CycleRecord.in_flight``), so a replay re-runs the cycle with
the recorded set, like the usage snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Final

from scheduler.engine.record.decisions import CycleRecord, InFlightBind, InFlightEvict
from scheduler.engine.state import ClusterState, PodStatus, evolve

__all__ = [
    "DEFAULT_BIND_DEADLINE_MS",
    "InFlightBind",
    "InFlightEvict",
    "apply_evicting",
    "apply_in_flight",
    "binds_in_flight",
    "evictions_in_flight",
    "track",
    "track_evictions",
]

DEFAULT_BIND_DEADLINE_MS: Final = 60_000  # logical time after which an unanswered Bind is dropped


def track(tracked: Mapping[str, InFlightBind], record: CycleRecord) -> dict[str, InFlightBind]:
    """The Binds to track after *record*: its ``in_flight``, then its Binds added.

    An ``Evict`` of an in-flight pod does not end the tracking: the binder may already have carried out
    the Bind, so the pod holds its node until its ``PodBound`` (then the fold has it, releasing once the
    eviction lands) or its deletion is folded, or the deadline passes.

    Works on full and delta records alike (a delta carries every Bind and Evict of its cycle). ``tracked``
    is what was tracked before the record; the record's ``in_flight`` supersedes it when present (it is
    exactly what the cycle kept of it), so after any record the result depends only on that record and
    the Binds tracked before it that its cycle did not see (none, for the service's own chain).
    """
    out = {b.pod: b for b in record.in_flight} if record.in_flight else dict(tracked)
    for d in record.decisions:
        if d.pod is None:
            continue
        if d.kind == "Bind" and d.node is not None:
            out[d.pod] = InFlightBind(
                pod=d.pod,
                node=d.node,
                gpu_devices=list(d.gpu_devices),
                gpu_milli_per_device=d.gpu_milli_per_device,
                decided_ms=record.logical_time_ms,
            )
    return out


def binds_in_flight(
    tracked: Iterable[InFlightBind],
    state: ClusterState,
    now_ms: int,
    deadline_ms: int = DEFAULT_BIND_DEADLINE_MS,
) -> tuple[InFlightBind, ...]:
    """The binds in flight for a cycle on *state* at logical time *now_ms*, sorted by pod uid.

    A tracked Bind is in flight while its pod is still pending in the fold (no ``PodBound`` yet, not
    deleted), its node still exists and has the devices it names, and it was decided less than *deadline_ms* of logical time ago. After
    the deadline the pod is pending again (KAI deletes a failed BindRequest and the pod is re-scheduled).
    """
    pending = {p.uid for p in state.pods if p.status is PodStatus.PENDING and p.node is None}
    gpus = {n.name: n.gpus for n in state.nodes}
    # A node that lost the devices a bind names (it shrank meanwhile) fails that bind: the pod is pending.
    keep = {
        b.pod: b
        for b in tracked
        if b.pod in pending
        and b.node in gpus
        and all(d < gpus[b.node] for d in b.gpu_devices)
        and now_ms - b.decided_ms < deadline_ms
    }
    return tuple(keep[uid] for uid in sorted(keep))


def apply_in_flight(state: ClusterState, in_flight: Iterable[InFlightBind]) -> ClusterState:
    """*state* with each in-flight pod running on its Bind's node and devices (KAI's Binding status)."""
    by_pod = {b.pod: b for b in in_flight}
    if not by_pod:
        return state
    pods = tuple(
        evolve(
            p,
            status=PodStatus.RUNNING,
            node=b.node,
            gpu_devices=tuple(b.gpu_devices),
            gpu_milli_per_device=b.gpu_milli_per_device,
        )
        if (b := by_pod.get(p.uid)) is not None
        else p
        for p in state.pods
    )
    return replace(state, pods=pods)


# Evictions in flight: an Evict becomes state only when the pod's PodReleasing / PodDeleted is folded. Until
# then the fold shows the victim running, and a cycle in between would evict it again (and count its
# capacity as not yet freed). The same rule as for binds: the record carries the set the cycle used.


def track_evictions(tracked: Mapping[str, InFlightEvict], record: CycleRecord) -> dict[str, InFlightEvict]:
    """The Evicts to track after *record*: its ``evicting`` (or *tracked* when it has none), then its Evicts."""
    out = {e.pod: e for e in record.evicting} if record.evicting else dict(tracked)
    for d in record.decisions:
        if d.kind == "Evict" and d.pod is not None and d.pod not in out:
            out[d.pod] = InFlightEvict(pod=d.pod, decided_ms=record.logical_time_ms)
    return out


def evictions_in_flight(
    tracked: Iterable[InFlightEvict],
    state: ClusterState,
    now_ms: int,
    deadline_ms: int = DEFAULT_BIND_DEADLINE_MS,
) -> tuple[InFlightEvict, ...]:
    """The evictions in flight for a cycle on *state* at *now_ms*, sorted by pod uid.

    A tracked Evict is in flight while the fold still shows its pod on a node and not releasing, and it was
    decided less than *deadline_ms* of logical time ago (after that the binder is taken to have failed, and
    the pod may be chosen again).
    """
    placed = {p.uid for p in state.pods if p.node is not None and p.status is PodStatus.RUNNING}
    keep = {e.pod: e for e in tracked if e.pod in placed and now_ms - e.decided_ms < deadline_ms}
    return tuple(keep[uid] for uid in sorted(keep))


def apply_evicting(state: ClusterState, evicting: Iterable[InFlightEvict]) -> ClusterState:
    """*state* with each pod of an eviction in flight releasing (it holds its node until it is gone)."""
    uids = {e.pod for e in evicting}
    if not uids:
        return state
    pods = tuple(evolve(p, status=PodStatus.RELEASING) if p.uid in uids else p for p in state.pods)
    return replace(state, pods=pods)
