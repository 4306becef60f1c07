"""Node pools and scheduling shards, as KAI partitions a cluster (its ``kai.scheduler/node-pool`` label).

A shard (``SessionConfig.node_pool`` / ``hourglass run --node-pool``) schedules the pods of its pool on
the nodes of its pool; the default shard (``""``) takes nodes and pods without the label. Each shard
writes its own decisions topic, and a replay of it verifies with 0 mismatches.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analytics.rerun.replay import load_source, replay
from ingest import events as ev
from ingest.filelog import FileLog
from ingest.log import Topics
from scheduler.engine.cycle import run_cycle
from scheduler.engine.record.decisions import CycleRecord, config_hash
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import NODE_POOL_LABEL, StateBuilder
from scheduler.service import Service
from tests.support.fairshare_inputs import append_events

S = 1000


def _pod(name: str, pool: str | None, gpus: int, at: int = S) -> list[ev.EventBase]:
    labels = {} if pool is None else {NODE_POOL_LABEL: pool}
    return [
        ev.PodGroupUpserted(at_ms=at, name=name, namespace="ns", queue="q", created_at_ms=at),
        ev.PodSubmitted(
            v=2,
            at_ms=at,
            name=name,
            namespace="ns",
            pod_group=name,
            requests=ev.PodRequests(gpus=gpus),
            created_at_ms=at,
            labels=labels,
        ),
    ]


def _cluster() -> list[ev.EventBase]:
    """Nodes a1, a2 in pool a, b1 in pool b, plain1 without a pool; pods of each pool, and pod big-a that
    fits only on the node of another pool."""
    out: list[ev.EventBase] = [ev.QueueUpserted(at_ms=0, name="q")]
    for name, pool, gpus in (("a1", "a", 4), ("a2", "a", 4), ("b1", "b", 8), ("plain1", None, 8)):
        labels = {} if pool is None else {NODE_POOL_LABEL: pool}
        out.append(
            ev.NodeUpserted(at_ms=0, name=name, cpu_millicores=64_000, memory_bytes=2**38, gpus=gpus, labels=labels)
        )
    out += _pod("pa", "a", 2) + _pod("pb", "b", 2) + _pod("pplain", None, 2) + _pod("big-a", "a", 8)
    return out


def _binds(pool: str | None) -> dict[str, str]:
    b = StateBuilder()
    for e in _cluster():
        b.apply(e)
    record, _ = run_cycle(b.snapshot(), SessionConfig(node_pool=pool), 2 * S)
    return {d.pod or "": d.node or "" for d in record.decisions if d.kind == "Bind"}


@pytest.mark.parametrize(
    ("pool", "expected"),
    [
        ("a", {"ns/pa": {"a1", "a2"}}),  # big-a fits only b1 / plain1: another pool's, so it waits
        ("b", {"ns/pb": {"b1"}}),
        ("", {"ns/pplain": {"plain1"}}),  # the default shard: no label on node or pod
        (None, {"ns/pa": None, "ns/pb": None, "ns/pplain": None, "ns/big-a": None}),  # unsharded: anywhere
    ],
)
def test_each_shard_places_only_its_pool_on_its_pool(pool: str | None, expected: dict[str, set[str] | None]) -> None:
    got = _binds(pool)
    assert set(got) == set(expected)
    for pod, nodes in expected.items():
        if nodes is not None:
            assert got[pod] in nodes


def test_another_pools_pod_on_this_pools_node_still_holds_its_gpus() -> None:
    events = [*_cluster(), ev.PodBound(at_ms=S, name="pb", namespace="ns", node="a1", gpu_devices=[0, 1])]
    events += _pod("pa4", "a", 4, at=2 * S)
    b = StateBuilder()
    for e in events:
        b.apply(e)
    record, _ = run_cycle(b.snapshot(), SessionConfig(node_pool="a"), 3 * S)
    binds = {d.pod: d.node for d in record.decisions if d.kind == "Bind"}
    assert binds["ns/pa4"] == "a2"  # a1 has only 2 of its 4 GPUs free: pb (pool b) holds the others


def test_the_pool_is_part_of_the_recorded_config() -> None:
    assert config_hash(SessionConfig()) == config_hash(SessionConfig(node_pool=None))
    assert len({config_hash(SessionConfig(node_pool=p)) for p in (None, "", "a", "b")}) == 4
    with pytest.raises(ValueError, match="node_pool"):
        SessionConfig(node_pool="x" * 64)


def test_two_shards_on_one_log_write_their_own_records_and_replay_exactly(tmp_path: Path) -> None:
    base = Topics()
    with FileLog(tmp_path) as log:
        append_events(log, _cluster())
        for pool in ("a", "b"):
            Service(log, base.for_pool(pool), SessionConfig(node_pool=pool)).run(stop_when_idle=True)
    for pool, mine in (("a", "ns/pa"), ("b", "ns/pb")):
        topics = base.for_pool(pool)
        assert topics.decisions == f"hourglass.decisions.pool.{pool}" and topics.events == base.events
        with FileLog(tmp_path) as log:
            records = [CycleRecord.loads(r.value) for r in log.read(topics.decisions, 0, 1000)]
        bound = {d.pod for r in records for d in r.decisions if d.kind == "Bind"}
        assert bound == {mine}
        summary = replay(load_source(tmp_path, config=SessionConfig(node_pool=pool), topics=topics), verify=True)
        assert summary.cycles == len(records) > 0 and summary.mismatches == 0


def _labelled_group(pod_group_pool: str | None, pod_pool: str | None) -> list[ev.EventBase]:
    """Pod g-0 of PodGroup g: the PodGroup's and the pod's node-pool labels (None: no label)."""
    group, pod = _pod("g", pod_pool, 1, at=2 * S)
    assert isinstance(group, ev.PodGroupUpserted) and isinstance(pod, ev.PodSubmitted)
    return [group.model_copy(update={"v": 2, "node_pool": pod_group_pool}), pod]


@pytest.mark.parametrize(
    ("group_pool", "pod_pool", "placed_by"),
    [
        ("b", None, "b"),  # KAI: the pod grouper copies the top owner's label to the PodGroup
        ("b", "a", "b"),  # relabelling the PodGroup moves the job (KAI's docs/scheduling-shards)
        (None, "a", "a"),  # a PodGroup without the label: the pod's own
        (None, None, ""),
    ],
)
def test_the_podgroups_node_pool_label_decides_the_shard(
    group_pool: str | None, pod_pool: str | None, placed_by: str
) -> None:
    events = [*_cluster(), *_labelled_group(group_pool, pod_pool)]
    b = StateBuilder()
    for e in events:
        b.apply(e)
    where = {"a": {"a1", "a2"}, "b": {"b1"}, "": {"plain1"}}
    for pool in ("a", "b", ""):
        record, _ = run_cycle(b.snapshot(), SessionConfig(node_pool=pool), 3 * S)
        binds = {d.pod: d.node for d in record.decisions if d.kind == "Bind"}
        if pool == placed_by:
            assert binds.get("ns/g") in where[pool]
        else:
            assert "ns/g" not in binds


def test_each_shard_sinks_into_a_store_of_its_own_for_sql(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from analytics.cli import main

    log_dir = tmp_path / "log"
    with FileLog(log_dir) as log:
        append_events(log, _cluster())
        for pool in ("a", "b"):
            Service(log, Topics().for_pool(pool), SessionConfig(node_pool=pool)).run(stop_when_idle=True)
    binds: dict[str, list[str]] = {}
    for pool in ("a", "b"):
        store = str(tmp_path / f"audit-{pool}.duckdb")
        assert main(["sink", "--log", str(log_dir), "--store", store, "--node-pool", pool]) == 0
        capsys.readouterr()
        query = "SELECT pod FROM decisions WHERE kind = 'Bind' ORDER BY pod"
        assert main(["sql", "--store", store, "--format", "json", query]) == 0
        binds[pool] = [row["pod"] for row in json.loads(capsys.readouterr().out)]
        # Both stores hold every event: the events topic is shared, each store keeps its own position.
        assert main(["sql", "--store", store, "--format", "json", "SELECT count(*) AS n FROM events"]) == 0
        assert json.loads(capsys.readouterr().out) == [{"n": len(_cluster())}]
    assert binds == {"a": ["ns/pa"], "b": ["ns/pb"]}


def _pool_queues() -> list[ev.EventBase]:
    """Queue qa labelled for pool a, qb for pool b, q without the label; one pool-a pod in each queue."""
    out: list[ev.EventBase] = [
        ev.QueueUpserted(at_ms=0, name="q"),
        ev.QueueUpserted(at_ms=0, name="qa", node_pool="a"),
        ev.QueueUpserted(at_ms=0, name="qb", node_pool="b"),
        ev.NodeUpserted(
            at_ms=0, name="a1", cpu_millicores=64_000, memory_bytes=2**38, gpus=8,
            labels={NODE_POOL_LABEL: "a"},
        ),
    ]
    for name, queue in (("in-q", "q"), ("in-qa", "qa"), ("in-qb", "qb")):
        out += [
            ev.PodGroupUpserted(
                v=2, at_ms=S, name=name, namespace="ns", queue=queue, created_at_ms=S, node_pool="a"
            ),
            ev.PodSubmitted(
                at_ms=S, name=name, namespace="ns", pod_group=name, requests=ev.PodRequests(gpus=1),
                created_at_ms=S,
            ),
        ]
    return out


def test_a_queue_labelled_for_a_pool_is_seen_by_that_shard_only() -> None:
    """KAI's shard lists queues with its partition selector (``pkg/scheduler/cache/cluster_info/
    data_lister/kubernetes_lister.go`` ListQueues, ``pkg/scheduler/conf/scheduler_conf.go``
    GetLabelSelector): a queue labelled ``kai.scheduler/node-pool: b`` does not exist for shard a, so
    shard a's pod in it is not placed and the queue is not divided there. Unlabelled queues stay."""
    b = StateBuilder()
    for e in _pool_queues():
        b.apply(e)
    record, _ = run_cycle(b.snapshot(), SessionConfig(node_pool="a"), 2 * S)
    binds = {d.pod for d in record.decisions if d.kind == "Bind"}
    assert binds == {"ns/in-q", "ns/in-qa"}
    assert {q.name for q in record.queues} == {"q", "qa"}
    unsharded, _ = run_cycle(b.snapshot(), SessionConfig(), 2 * S)
    assert {q.name for q in unsharded.queues} == {"q", "qa", "qb"}


def test_the_queue_label_is_read_from_the_queue_object() -> None:
    from ingest.kube import translate as kube

    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    meta: dict[str, object] = {"name": "gpu-queue", "labels": {NODE_POOL_LABEL: "gpu-nodes"}}
    spec = {"resources": {r: unlimited for r in ("gpu", "cpu", "memory")}}
    obj = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": meta, "spec": spec}
    event, _ = kube.queue_upserted(obj, 0)
    assert event.node_pool == "gpu-nodes"
    assert b'"node_pool"' in ev.dump_event(event)
    del meta["labels"]
    plain, _ = kube.queue_upserted(obj, 0)
    assert plain.node_pool is None and b"node_pool" not in ev.dump_event(plain)
