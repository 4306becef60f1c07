"""One scheduling cycle: open a session on a snapshot, run the actions in order, collect the outcome.

The action registry lists the actions in the order a cycle runs them (KAI's default order). Each action is
a module with a ``NAME`` and a ``run(session)`` entry point.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from types import ModuleType
from typing import Literal

from scheduler.engine.actions import allocate, consolidation, preempt, reclaim, stale_gang
from scheduler.engine.record.decisions import (
    RECORD_VERSION,
    CycleRecord,
    InFlightBind,
    InFlightEvict,
    make_record,
)
from scheduler.engine.record.inflight import apply_evicting, apply_in_flight
from scheduler.engine.session import Session, SessionConfig
from scheduler.engine.state import ClusterState, Job, Pod, PodStatus, evolve

ACTION_MODULES: tuple[ModuleType, ...] = (allocate, consolidation, reclaim, preempt, stale_gang)
ACTIONS: dict[str, Callable[[Session], None]] = {m.NAME: m.run for m in ACTION_MODULES}
DEFAULT_ORDER: tuple[str, ...] = tuple(m.NAME for m in ACTION_MODULES)


def open_session(
    state: ClusterState,
    config: SessionConfig | None = None,
    now_ms: int = 0,
    usage: Mapping[str, Mapping[str, float]] | None = None,
) -> Session:
    """Snapshot -> session with fair shares computed."""
    return Session(state, config, now_ms, {k: dict(v) for k, v in (usage or {}).items()})


StepHook = Callable[[str], None]
"""Told the name of each step of a cycle as it ends: ``open_session``, each action, then ``record``; and,
inside the actions whose victim search is budgeted (reclaim, preempt), ``<action>/search`` as each job's
search begins and ``<action>/search/<result>`` as it ends
(:data:`scheduler.engine.actions.signatures.SEARCH_RESULTS`).

How metrics observe a cycle (they time the steps) without a second cycle runner; a hook is told, it never
feeds the cycle, so a cycle with a hook records what one without does."""


def run_actions(
    ssn: Session, actions: tuple[str, ...] = DEFAULT_ORDER, on_step: StepHook | None = None
) -> Session:
    """Run the named actions, in order, on `ssn`; `on_step` is told each action's name as it ends (and
    the victim searches inside them, :data:`StepHook`)."""
    ssn.on_step = on_step
    try:
        for name in actions:
            skip = name == "consolidation" and (
                ssn.config.max_consolidation_preemptees == 0
                or "spread" in (ssn.config.gpu_placement, ssn.config.cpu_placement)
            )
            if not skip:  # KAI disables consolidation with a spread strategy or a zero preemptee budget
                ACTIONS[name](ssn)
            if on_step is not None:
                on_step(name)
    finally:
        ssn.on_step = None  # a kept session outlives this cycle's observer
    return ssn


def result_state(ssn: Session) -> ClusterState:
    """The snapshot after the cycle: every task in the state the actions left it, job clocks updated."""
    pods = []
    for t in ssn.tasks:
        if t.status in (PodStatus.SUCCEEDED, PodStatus.FAILED):
            pods.append(t.pod)  # finished pods keep their record untouched
            continue
        node = t.node.name if t.node is not None and t.status is not PodStatus.PENDING else None
        pods.append(
            evolve(
                t.pod,
                status=t.status,
                node=node,
                gpu_devices=t.devices if node else (),
                gpu_milli_per_device=t.portion if node else 0,
            )
        )
    jobs: list[Job] = [
        evolve(j.spec, last_start_ms=j.last_start_ms, stale_since_ms=j.stale_since_ms) for j in ssn.jobs
    ]
    if ssn.gated:  # gated pods are untouched; keep them where the snapshot had them
        by_uid = {p.uid: p for p in pods}
        by_uid.update((p.uid, p) for p in ssn.gated)
        pods = [by_uid[p.uid] for p in ssn.state.pods if p.uid in by_uid]
    return replace(ssn.state, jobs=tuple(jobs), pods=tuple(pods))


def settle(state: ClusterState) -> ClusterState:
    """What the cluster does between two cycles (used by simulations and multi-cycle scenarios).

    allocated -> running; pipelined -> pending (re-queued); releasing -> pending (the evicted pod is
    re-created unscheduled) unless its job is being deleted, in which case it stays releasing.
    """
    deleting = {j.uid for j in state.jobs if j.deleting}
    pods: list[Pod] = []
    for p in state.pods:
        if p.status is PodStatus.ALLOCATED:
            p = evolve(p, status=PodStatus.RUNNING)
        elif p.status is PodStatus.PIPELINED or (p.status is PodStatus.RELEASING and p.job not in deleting):
            p = evolve(p, status=PodStatus.PENDING, node=None, gpu_devices=(), gpu_milli_per_device=0)
        pods.append(p)
    return replace(state, pods=tuple(pods))


def run_cycle(
    state: ClusterState,
    config: SessionConfig | None = None,
    now_ms: int = 0,
    usage: Mapping[str, Mapping[str, float]] | None = None,
    usage_snapshot_id: str | None = None,
    actions: tuple[str, ...] = DEFAULT_ORDER,
    record_version: Literal[1, 2, 3] = RECORD_VERSION,
    in_flight: tuple[InFlightBind, ...] | list[InFlightBind] = (),
    on_step: StepHook | None = None,
    evicting: tuple[InFlightEvict, ...] | list[InFlightEvict] = (),
) -> tuple[CycleRecord, Session]:
    """One full cycle: a pure function of (snapshot, usage, config, logical time, binds in flight) -> record.

    `usage` None means no usage snapshot is available: the division falls back to classic fair share and
    the record says so. ``record_version`` 1 makes the record a v1 writer made (replaying old logs); 3
    the compact form a log holds (:mod:`scheduler.engine.record.written`).
    ``in_flight`` are the binds of earlier cycles still waiting for their ``PodBound``
    (:mod:`scheduler.engine.record.inflight`): the session opens with those pods allocated on their node and the
    record carries the set. ``on_step`` observes the steps (:data:`StepHook`).
    """
    opened = apply_evicting(apply_in_flight(state, in_flight), evicting)
    ssn = open_session(opened, config, now_ms, usage)
    if on_step is not None:
        on_step("open_session")
    run_actions(ssn, actions, on_step)
    record = make_record(
        ssn,
        state.events_offset,
        usage_snapshot_id,
        usage_available=usage is not None,
        version=record_version,
        in_flight=in_flight,
        evicting=evicting,
    )
    if on_step is not None:
        on_step("record")
    return record, ssn
