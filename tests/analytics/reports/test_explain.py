"""``hourglass explain POD`` on a small simulated run (pending, evicted, bound pods) and a hand-made store."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytics.audit.store import AuditStore, load_cycles, load_events, query
from analytics.cli import main
from analytics.reports.explain import ExplainError, explain, parse_time
from analytics.rundir import DirLog
from analytics.simulation.simulate import simulate
from ingest.tenants import DEFAULT_TENANTS, load_tenants
from ingest.trace import read_nodes
from scheduler.conformance import SCENARIOS_DIR
from scheduler.engine.record.decisions import CycleRecord, Decision, QueueRecord
from tests.support.paths import REPO_ROOT
from tests.support.trace_slices import first_tasks, small_nodes_csv


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 120 tasks of the trace on a 5-node, 16-GPU cluster: waits, an eviction, binds."""
    base = tmp_path_factory.mktemp("explain")
    out = base / "run"
    nodes = read_nodes(small_nodes_csv(base / "nodes.csv"))
    simulate(first_tasks(120), nodes, load_tenants(DEFAULT_TENANTS), log=DirLog(out))
    return out


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["explain", *argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_pending_pod_says_why_what_is_missing_and_who_holds_the_gpus(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, rows = query(
        run,
        "SELECT pods[1], logical_time_ms, queue, reason, details->'requested'->>'gpu' FROM decisions"
        " WHERE kind = 'Unschedulable' AND (details->'requested'->>'gpu') <> '0'"
        " ORDER BY logical_time_ms DESC LIMIT 1",
    )
    pod, t, queue, reason, gpu_milli = rows[0]
    rc, out, _ = _cli(capsys, pod.split("/")[1], "--store", str(run), "--at", str(t))
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"Pod {pod} (queue {queue}): PENDING")
    assert f"Why: [{reason}]" in out
    assert f"request {int(gpu_milli) / 1000:g} GPU" in out  # how much is missing
    assert f"queue {queue} (priority" in out and "fair share" in out
    assert "Who holds the GPUs" in out and "node openb-node-0022: 8 GPUs" in out
    assert "What to do:" in out
    # The numbers come from the cycle: the pod's queue's allocated GPUs as recorded in queue_cycles.
    _, qrow = query(
        run,
        f"SELECT gpu_allocated FROM queue_cycles q JOIN decisions d USING (cycle_id)"
        f" WHERE d.logical_time_ms = {t} AND list_contains(d.pods, '{pod}') AND q.queue = '{queue}'",
    )
    assert f"allocated {qrow[0][0] / 1000:g} GPU" in out


def test_evicted_pod_names_the_action_and_the_beneficiaries(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, rows = query(
        run, "SELECT pod, logical_time_ms, action, node FROM decisions WHERE kind = 'Evict' LIMIT 1"
    )
    pod, t, action, node = rows[0]
    e = explain(run, pod, t)
    assert e.state == "evicted" and e.reason == action
    text = e.text()
    assert f"evicted from node {node} by the {action} action" in text
    assert "beneficiaries" in text
    # Later on, the pod runs again; the default (latest) explanation points back at the eviction.
    rc, out, _ = _cli(capsys, pod, "--store", str(run))
    assert rc == 0 and "EVICTED" not in out.splitlines()[0]
    assert f"Earlier: evicted from node {node} by {action} at t={t} ms" in out


def test_bound_pod_shows_node_and_devices(run: Path) -> None:
    _, rows = query(
        run,
        "SELECT pod, logical_time_ms, node, gpu_devices FROM decisions WHERE kind = 'Bind'"
        " AND len(gpu_devices) > 0 ORDER BY logical_time_ms LIMIT 1",
    )
    pod, t, node, devices = rows[0]
    e = explain(run, pod, t)
    assert e.state == "bound"
    assert f"Placed: node {node}, GPU device(s) {','.join(map(str, devices))}" in e.text()
    # After the run every pod has finished: the latest answer says so.
    assert explain(run, pod).state == "finished"


def test_unknown_pod_and_bad_time_are_clear_errors(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _cli(capsys, "no-such-pod", "--store", str(run))
    assert rc == 2 and out == "" and "unknown pod 'no-such-pod'" in err
    rc, _, err = _cli(capsys, "research/no-such-pod", "--store", str(run))
    assert rc == 2 and "unknown pod 'research/no-such-pod'" in err
    rc, _, err = _cli(capsys, "openb-pod-0017", "--store", str(run), "--at", "yesterday")
    assert rc == 2 and "--at 'yesterday'" in err
    rc, _, err = _cli(capsys, "openb-pod-0017", "--store", str(run), "--at", "0")
    assert rc == 2 and "no cycle mentions it" in err
    rc, _, err = _cli(capsys, "x", "--store", str(run / "missing"))
    assert rc == 2 and "no such store" in err


def test_parse_time_forms() -> None:
    assert parse_time("3600000") == 3_600_000
    assert parse_time("90s") == 90_000
    assert parse_time("2h") == 7_200_000
    assert parse_time("1970-01-01T00:00:10Z") == 10_000
    with pytest.raises(ExplainError, match="time zone"):
        parse_time("2026-01-01T00:00:00")


def _q(name: str, parent: str | None, alloc: int, fair: int) -> QueueRecord:
    z = {"gpu": 0, "cpu": 0, "memory": 0}
    return QueueRecord(
        name=name,
        parent=parent,
        priority=100,
        deserved={"gpu": 2000, "cpu": None, "memory": None},
        limit={"gpu": None, "cpu": None, "memory": None},
        over_quota_weight={"gpu": "1", "cpu": "1", "memory": "1"},
        requested={**z, "gpu": max(alloc, fair)},
        allocated={**z, "gpu": alloc},
        allocated_non_preemptible=z,
        fair_share={**z, "gpu": fair},
        fair_share_classic={**z, "gpu": fair},
        k_adjustment=z,
        usage={"gpu": 0.0, "cpu": 0.0, "memory": 0.0},
    )


def test_reclaim_eviction_on_behalf_of_a_workload_and_ambiguous_names(tmp_path: Path) -> None:
    msg = "Pod team-b/train-0 was preempted by workload team-a/big-job."
    rec = CycleRecord(
        cycle_id="c1",
        events_offset=10,
        usage_snapshot_id=None,
        config_hash="h",
        logical_time_ms=5000,
        queues=[_q("team-a", None, 4000, 4000), _q("team-b", None, 4000, 2000)],
        decisions=[
            Decision(
                kind="Evict",
                job="team-b/train",
                queue="team-b",
                pod="team-b/train-0",
                node="n1",
                action="reclaim",
                reason="reclaim",
                message=msg,
            ),
            Decision(
                kind="Pipeline",
                job="team-a/big-job",
                queue="team-a",
                pod="team-a/big-job-0",
                node="n1",
                action="reclaim",
            ),
            Decision(
                kind="Unschedulable",
                job="team-c/train",
                queue="team-c",
                pods=["team-c/train-0"],
                reason="QueueDoesNotExist",
                message="Queue 'team-c' does not exist",
            ),
        ],
    )
    db = tmp_path / "audit.duckdb"
    with AuditStore(db) as store:
        load_cycles(store, [rec.dumps()])
    e = explain(db, "team-b/train-0")
    text = e.text()
    assert e.state == "evicted"
    assert "by the reclaim action on behalf of workload team-a/big-job" in text
    assert "team-a/big-job-0 (queue team-a, Pipeline by reclaim)" in text
    assert "OVER its fair share by 2 GPU" in text  # team-b, the victim's queue
    with pytest.raises(ExplainError, match="ambiguous, give namespace/name: team-b/train-0, team-c/train-0"):
        explain(db, "train-0")
    p = explain(db, "team-c/train-0")
    assert p.state == "pending" and "create the queue" in p.text()
    assert "store has no events" in p.text()


def test_a_job_bigger_than_its_queues_fair_share_is_told_why_reclaim_cannot_help(tmp_path: Path) -> None:
    """The two-queue scenario without time-based fairshare: queue a holds the 16-GPU node, b's 16-GPU job
    waits for ever. Reclaim would only bring b up to its fair share of 8, and explain says so."""
    example = REPO_ROOT / "examples" / "two-queue-oscillation.yaml"
    out = tmp_path / "run"
    args = ["simulate", "--config", str(example), "--set", "fairshare.k_value=0", "--set", "duration=6h"]
    assert main([*args, "--out", str(out)]) == 0
    text = "\\n".join(explain(out, "b/b-w1-0").lines)
    assert "PENDING" in text
    assert "reclaim only brings the queue up to its fair share of 8 GPUs" in text
    assert "queue a: 16 GPU" in text  # who holds them


def _scenario_store(tmp_path: Path, name: str) -> Path:
    """A real cycle on one of the real-node scenarios, loaded into an audit store."""
    import json
    from dataclasses import replace

    from scheduler.conformance.runner import NOW_MS, load_state
    from scheduler.engine.cycle import run_cycle
    from scheduler.engine.state import evolve

    [path] = (SCENARIOS_DIR / "hourglass").rglob(f"{name}.json")
    state, config = load_state(json.loads(path.read_text()))
    # Scenario pods have bare names; explain looks pods up as namespace/name.
    state = replace(state, pods=tuple(evolve(p, uid=f"default/{p.uid}") for p in state.pods))
    rec, _ = run_cycle(state, config, now_ms=NOW_MS)
    db = tmp_path / f"{name}.duckdb"
    with AuditStore(db) as store:
        load_cycles(store, [rec.dumps()])
    return db


def test_pending_on_filters_names_them_and_advises_on_the_constraints(tmp_path: Path) -> None:
    # Three web pods refusing each other by hostname, two nodes: anti-affinity, not capacity, keeps them out.
    text = explain(_scenario_store(tmp_path, "affinity-07-anti-gang-too-big"), "g-0").text()
    assert "Nodes ruled out by: InterPodAntiAffinity on 2 node(s)" in text
    assert "the pod's own constraints rule nodes out (InterPodAntiAffinity)" in text


def test_pending_behind_foreign_pods_names_the_node_and_what_they_hold(tmp_path: Path) -> None:
    text = explain(_scenario_store(tmp_path, "foreign-02-gpus-held-message"), "j-0").text()
    assert "node n1: 6 GPUs held by pods of other schedulers" in text


def test_who_holds_the_gpus_includes_pods_of_other_schedulers(tmp_path: Path) -> None:
    """A node whose GPUs a default-scheduler pod holds: explain lists it as held by other schedulers."""
    from ingest import events as ev
    from ingest.events import dump_event
    from scheduler.engine.cycle import run_cycle
    from scheduler.engine.state import fold

    events: list[ev.EventBase] = [
        ev.NodeUpserted(at_ms=0, name="gpu-7", cpu_millicores=64_000, memory_bytes=2**38, gpus=8),
        ev.QueueUpserted(at_ms=0, name="team", resources=ev.QueueResources(gpu=ev.QueueResource(quota=8000))),
        ev.ForeignPodUpserted(
            at_ms=1, name="other", namespace="ops", node="gpu-7", requests=ev.PodRequests(gpus=6)
        ),
        ev.PodGroupUpserted(at_ms=2, name="train", namespace="ml", queue="team", created_at_ms=2),
        ev.PodSubmitted(
            at_ms=2,
            name="train-0",
            namespace="ml",
            pod_group="train",
            requests=ev.PodRequests(gpus=4),
            created_at_ms=2,
        ),
    ]
    rec, _ = run_cycle(fold(events), now_ms=3)
    db = tmp_path / "audit.duckdb"
    with AuditStore(db) as store:
        load_events(store, [(i, dump_event(e)) for i, e in enumerate(events)])
        load_cycles(store, [rec.dumps()])
    text = explain(db, "ml/train-0").text()
    assert "node gpu-7: 6 GPUs held by pods of other schedulers" in text  # the Unschedulable message
    assert "(other schedulers)" in text and "node gpu-7: 8 GPUs, free 2" in text  # who holds the GPUs
