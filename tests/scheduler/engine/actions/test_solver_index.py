"""The job index reclaim and preempt keep across attempts stays equal to one built afresh, and its lazy
victim filters select exactly the victims of the reference scans (``victims_for``); a scenario's per-node
index of its potential victims gives what a scan of them gives."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.engine.actions import preempt, reclaim
from scheduler.engine.actions.jobindex import JobIndex
from scheduler.engine.actions.signatures import run_per_job
from scheduler.engine.actions.solver import Scenario
from scheduler.engine.cycle import open_session, result_state, run_actions, settle
from scheduler.engine.ordering import job_init_resources
from scheduler.engine.reclaimable import can_reclaim
from scheduler.engine.session import Session, TaskInfo
from scheduler.engine.state import ClusterState, fold
from tests.support.synthetic import SyntheticSpec, contention_events, synthetic_events


def _view(index: JobIndex) -> tuple[object, ...]:
    def uids(table: dict[str, list[tuple[tuple[object, ...], object]]]) -> dict[str, list[object]]:
        return {k: [e[0] for e in v] for k, v in sorted(table.items()) if v}

    return uids(index.victims), uids(index.pending), {k: v for k, v in sorted(index.gpu_held.items()) if v}


def _busy_state(spec: SyntheticSpec) -> ClusterState:
    """The synthetic workload after one cycle: running jobs (victims) and the rest still pending."""
    ssn = open_session(fold(synthetic_events(spec)), now_ms=1_000_000)
    run_actions(ssn, ("allocate",))
    return settle(result_state(ssn))


def _check_lazy_filters(ssn: Session, index: JobIndex) -> None:
    for job in ssn.jobs:
        if not job.has_tasks_to_allocate() or job.queue is None:
            continue
        for module in (reclaim, preempt):
            v = module.victims(index, ssn, job)
            lazy = {j.uid for n in v.leaves for _, j in index.victims.get(n, ()) if not v.skip(j)}
            assert lazy == {j.uid for j in module.victims_for(ssn, job)}, (module.NAME, job.uid)


@pytest.mark.parametrize("shape", ["reclaim", "preempt"])
def test_index_follows_the_action_on_contention_shapes(shape: str) -> None:
    ssn = open_session(fold(contention_events(6, shape)), now_ms=10**9)
    index = JobIndex(ssn)
    _check_lazy_filters(ssn, index)
    if shape == "reclaim":
        run_per_job(
            ssn,
            lambda s, j: can_reclaim(s, j, job_init_resources(s, j)),
            lambda s, j: reclaim.attempt(s, j, index),
        )
    else:
        run_per_job(ssn, preempt.within_quota, lambda s, j: preempt.attempt(s, j, index))
    evicted = sum(1 for op in ssn.decisions if op.kind == "evict")
    assert evicted == (24 if shape == "reclaim" else 48)  # B reclaims its half; every low-priority job goes
    assert _view(index) == _view(JobIndex(ssn))
    _check_lazy_filters(ssn, index)


@settings(max_examples=15, deadline=None)
@given(
    st.builds(
        SyntheticSpec,
        nodes=st.integers(2, 8),
        gpus_per_node=st.sampled_from([2, 4, 8]),
        pending_pods=st.integers(10, 80),
        departments=st.integers(1, 3),
        queues_per_department=st.integers(1, 3),
        seed=st.integers(0, 10_000),
    ),
    st.sampled_from(["reclaim", "preempt"]),
)
def test_index_follows_the_action_on_random_workloads(spec: SyntheticSpec, action: str) -> None:
    ssn = open_session(_busy_state(spec), now_ms=2_000_000)
    index = JobIndex(ssn)
    _check_lazy_filters(ssn, index)
    if action == "reclaim":
        run_per_job(
            ssn,
            lambda s, j: can_reclaim(s, j, job_init_resources(s, j)),
            lambda s, j: reclaim.attempt(s, j, index),
        )
    else:
        run_per_job(ssn, preempt.within_quota, lambda s, j: preempt.attempt(s, j, index))
    assert _view(index) == _view(JobIndex(ssn))
    _check_lazy_filters(ssn, index)


def _scanned(potential: list[TaskInfo], node: str) -> list[TaskInfo]:
    """The reference: every potential victim scanned for the jobs on `node`, then for their tasks."""
    jobs_here = {t.job.uid for t in potential if t.node is not None and t.node.name == node}
    return [t for t in potential if t.job.uid in jobs_here]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(st.integers(0, 5), st.one_of(st.none(), st.integers(0, 4))), min_size=1, max_size=4
        ),
        max_size=12,
    )
)
def test_victims_on_a_node_equal_the_scan_of_every_potential_victim(
    groups: list[list[tuple[int, int | None]]],
) -> None:
    """Groups of victim tasks (job number, node number or unplaced) added one at a time: after each, every
    node's victims -- the tasks of the jobs with a task there, in the order they came -- equal the scan."""
    jobs = {j: SimpleNamespace(uid=f"job-{j}") for j in range(6)}
    nodes = {n: SimpleNamespace(name=f"node-{n}") for n in range(5)}
    scenario = Scenario(cast(object, None), [], [], [])  # type: ignore[arg-type]
    seq = 0
    for group in groups:
        tasks = []
        for j, n in group:
            seq += 1
            tasks.append(
                cast(
                    TaskInfo,
                    SimpleNamespace(uid=f"t{seq}", job=jobs[j], node=None if n is None else nodes[n]),
                )
            )
        scenario.add_potential(tasks)
        for n in range(6):
            assert scenario.potential_on(f"node-{n}") == _scanned(scenario.potential, f"node-{n}")
