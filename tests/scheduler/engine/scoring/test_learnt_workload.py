"""Fragmentation-aware scoring learns the task-type distribution from the cluster's own workload.

The distribution is folded from the event log (``ClusterState.workload``), so it changes when the recorded
workload changes, a replay rebuilds it exactly, and a cluster with no history scores against the prior.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from analytics.rerun.replay import load_source, replay
from ingest import events as ev
from ingest.filelog import FileLog
from ingest.log import Topics
from scheduler.engine.cycle import run_cycle
from scheduler.engine.record.decisions import config_hash
from scheduler.engine.scoring.fragmentation import default_task_types, learnt_task_types
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import StateBuilder, WorkloadWindow
from scheduler.service import Service
from tests.support.fairshare_inputs import append_events

S = 1000


def _group(name: str, at: int) -> ev.PodGroupUpserted:
    return ev.PodGroupUpserted(at_ms=at, name=name, namespace="ns", queue="q", created_at_ms=at)


def _pod(name: str, group: str, gpus: int, at: int) -> ev.PodSubmitted:
    return ev.PodSubmitted(
        at_ms=at, name=name, namespace="ns", pod_group=group, requests=ev.PodRequests(gpus=gpus), created_at_ms=at
    )


def _cluster(history_gpus: int, history_pods: int) -> list[ev.EventBase]:
    """Two 8-GPU nodes, n1 with 3 GPUs free and n2 with 6; `history_pods` finished pods of
    `history_gpus` GPUs each; then a pending 2-GPU pod."""
    out: list[ev.EventBase] = [
        ev.NodeUpserted(at_ms=0, name=n, cpu_millicores=64_000, memory_bytes=2**38, gpus=8) for n in ("n1", "n2")
    ]
    out += [ev.QueueUpserted(at_ms=0, name="q"), _group("hist", 0)]
    for i in range(history_pods):
        out += [_pod(f"h{i}", "hist", history_gpus, S), ev.PodDeleted(at_ms=S, name=f"h{i}", namespace="ns")]
    for node, gpus in (("n1", 5), ("n2", 2)):
        name = f"fill-{node}"
        out += [_group(name, 2 * S), _pod(name, name, gpus, 2 * S)]
        out.append(ev.PodBound(at_ms=2 * S, name=name, namespace="ns", node=node))
    out += [_group("new", 3 * S), _pod("new", "new", 2, 3 * S)]
    return out


def _landing(events: list[ev.EventBase], config: SessionConfig) -> str | None:
    b = StateBuilder()
    for e in events:
        b.apply(e)
    record, _ = run_cycle(b.snapshot(), config, 4 * S)
    nodes = [d.node for d in record.decisions if d.kind == "Bind" and d.pod == "ns/new"]
    return nodes[0] if nodes else None


def test_the_fold_counts_the_recent_workload_per_shape() -> None:
    history = 2 * WorkloadWindow.REFRESH + 1  # the snapshot's counts were refreshed at the last of these
    b = StateBuilder()
    for e in _cluster(history_gpus=3, history_pods=history):
        b.apply(e)
    counts = dict(b.snapshot().workload)
    assert counts == {(0, 1000, 3, ()): history}  # deleted pods stay: the window is history, not state
    for i in range(WorkloadWindow.REFRESH):
        b.apply(_pod(f"more{i}", "hist", 1, 4 * S))
    counts = dict(b.snapshot().workload)
    assert counts[(0, 1000, 5, ())] == 1 and counts[(0, 1000, 2, ())] == 2  # the fillers and the new pod
    assert counts[(0, 1000, 1, ())] == WorkloadWindow.REFRESH - 3


def test_the_window_slides_and_refreshes_in_steps() -> None:
    w = WorkloadWindow()
    w.add((0, 1000, 1, ()))
    assert w.frozen == (((0, 1000, 1, ()), 1),)  # the first pod is seen at once
    for _ in range(w.WINDOW + w.REFRESH):
        w.add((0, 1000, 4, ()))
    counts = dict(w.frozen)
    assert (0, 1000, 1, ()) not in counts  # aged out of the window
    assert counts[(0, 1000, 4, ())] == w.WINDOW
    before = w.frozen
    w.add((0, 500, 1, ()))
    assert w.frozen == before  # between refreshes the snapshot's counts hold still (scorer memos survive)


def test_learnt_types_follow_the_workload_and_fall_back_to_the_prior() -> None:
    assert learnt_task_types(()) == default_task_types()
    types = learnt_task_types([((0, 1000, 3, ()), 2000)])
    top = types[0]
    assert (top.num_gpu, top.gpu_milli) == (3, 1000) and top.weight > 0.9
    few = learnt_task_types([((0, 1000, 3, ()), 1)])
    assert max(t.weight for t in few if t.num_gpu == 3) < 0.05  # one pod barely moves the prior


@pytest.mark.parametrize("rule", ["fgd", "frag-aware"])
def test_the_placement_follows_the_recorded_workload(rule: str) -> None:
    learnt = SessionConfig(node_scoring=rule)
    # A cluster that runs 3-GPU pods keeps n2's 6 free GPUs able to take two of them after the 2-GPU pod;
    # one that runs 1-GPU pods loses nothing either way.
    three = _landing(_cluster(history_gpus=3, history_pods=1000), learnt)
    one = _landing(_cluster(history_gpus=1, history_pods=1000), learnt)
    assert three == "n2"
    assert one != three
    # The shipped prior alone ignores the history: the same node for both.
    prior = replace(learnt, workload_types="prior")
    assert _landing(_cluster(3, 1000), prior) == _landing(_cluster(1, 1000), prior)


def test_the_field_changes_the_hash_only_where_it_changes_decisions() -> None:
    assert config_hash(SessionConfig()) == config_hash(SessionConfig(workload_types="prior"))  # kai ignores it
    fgd = SessionConfig(node_scoring="fgd")
    assert config_hash(fgd) != config_hash(fgd.with_prior_types())
    with pytest.raises(ValueError, match="workload_types"):
        SessionConfig(workload_types="oracle")


def test_a_service_run_with_a_learnt_distribution_replays_exactly(tmp_path: Path) -> None:
    config = SessionConfig(node_scoring="frag-aware")
    topics = Topics()
    with FileLog(tmp_path) as log:
        append_events(log, _cluster(history_gpus=3, history_pods=400))
        Service(log, topics, config).run(stop_when_idle=True)
    summary = replay(load_source(tmp_path, config=config), verify=True)
    assert summary.cycles > 0 and summary.mismatches == 0
    with FileLog(tmp_path) as log:
        decisions = b"".join(r.value for r in log.read(topics.decisions, 0, 1000))
    assert b'"node":"n2"' in decisions
