"""``hourglass simulate`` on small slices of the shipped Alibaba trace: properties of the run's outputs.

Two slices: the first 300 tasks (by creation time) on the full 1,213-node cluster, where everything fits,
and the first 300 tasks on a 5-node, 16-GPU cluster, where tasks wait, get evicted and some never fit.
The properties are checked from the written event log and cycle records, not from the simulator's own
counters, wherever that is possible.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from analytics.cli import main
from analytics.rundir import DirLog, read_cycles, read_events, read_manifest
from analytics.simulation.simulate import SimulationResult, Simulator, simulate
from ingest import events as ev
from ingest.tenants import DEFAULT_TENANTS, TenantsError, load_tenants, parse_tenants
from ingest.trace import DEFAULT_GPU_NODES, read_nodes
from scheduler.config import session_config
from scheduler.engine.cycle import run_cycle
from scheduler.engine.record.decisions import CycleRecord
from scheduler.engine.state import StateBuilder
from tests.support.trace_slices import SLICE, first_tasks, small_nodes_csv

# How each run's sessions were opened (fresh / patched), by output directory.
SESSIONS: dict[Path, tuple[int, int]] = {}


def _run(out: Path, nodes_csv: Path = DEFAULT_GPU_NODES, seed: int = 0) -> SimulationResult:
    sim = Simulator(
        first_tasks(SLICE), read_nodes(nodes_csv), load_tenants(DEFAULT_TENANTS), seed=seed, log=DirLog(out)
    )
    result = sim.run()
    sim.log.close(sim.manifest({}))
    SESSIONS[out] = (sim.kept.fresh, sim.kept.patched)
    return result


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimulationResult]:
    out = tmp_path_factory.mktemp("big")
    return out, _run(out)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimulationResult]:
    base = tmp_path_factory.mktemp("small")
    nodes = small_nodes_csv(base / "nodes.csv")
    out = base / "run"
    return out, _run(out, nodes)


RUNS = ("big", "small")


def _get(request: pytest.FixtureRequest, name: str) -> tuple[Path, SimulationResult]:
    run: tuple[Path, SimulationResult] = request.getfixturevalue(name)
    return run


# --------------------------------------------------------------------------- the event log


@pytest.mark.parametrize("name", RUNS)
def test_every_task_ran_or_has_an_unschedulable_reason(name: str, request: pytest.FixtureRequest) -> None:
    out, _ = _get(request, name)
    bound = {e.uid for _, e in read_events(out) if isinstance(e, ev.PodBound)}
    submitted = {e.uid for _, e in read_events(out) if isinstance(e, ev.PodSubmitted)}
    assert len(submitted) == SLICE
    last_seen: dict[str, tuple[str, str | None]] = {}
    for rec in read_cycles(out):
        for d in rec.decisions:
            for uid in [*d.pods, *([d.pod] if d.pod else [])]:
                last_seen[uid] = (d.kind, d.reason)
    for uid in sorted(submitted - bound):
        kind, reason = last_seen[uid]
        assert kind == "Unschedulable" and reason, (uid, kind, reason)


@pytest.mark.parametrize("name", RUNS)
def test_no_node_ever_over_capacity(name: str, request: pytest.FixtureRequest) -> None:
    """Replay binds and finishes from the log: devices, CPU and memory never exceed the node."""
    out, _ = _get(request, name)
    nodes: dict[str, ev.NodeUpserted] = {}
    requests: dict[str, ev.PodRequests] = {}
    on_node: dict[str, tuple[str, list[int]]] = {}
    dev_used: dict[str, list[int]] = {}
    cpu_used: dict[str, int] = defaultdict(int)
    mem_used: dict[str, int] = defaultdict(int)
    last_at = 0
    for _, e in read_events(out):
        assert e.at_ms >= last_at, "event times must not go backwards"
        last_at = e.at_ms
        if isinstance(e, ev.NodeUpserted):
            nodes[e.name] = e
            dev_used[e.name] = [0] * e.gpus
        elif isinstance(e, ev.PodSubmitted):
            requests[e.uid] = e.requests
        elif isinstance(e, ev.PodBound):
            assert e.uid not in on_node, f"{e.uid} bound twice"
            r, n = requests[e.uid], nodes[e.node]
            per_device = r.gpu_fraction_milli or (1000 if r.gpus else 0)
            assert len(e.gpu_devices) == (r.gpus or (1 if r.gpu_fraction_milli else 0))
            for dev in e.gpu_devices:
                dev_used[e.node][dev] += per_device
                assert dev_used[e.node][dev] <= 1000, (e.node, dev, e.uid)
            cpu_used[e.node] += r.cpu_millicores
            mem_used[e.node] += r.memory_bytes
            assert cpu_used[e.node] <= n.cpu_millicores and mem_used[e.node] <= n.memory_bytes, e.uid
            on_node[e.uid] = (e.node, list(e.gpu_devices))
        elif isinstance(e, ev.PodFinished):
            node, devs = on_node.pop(e.uid)
            r = requests[e.uid]
            for dev in devs:
                dev_used[node][dev] -= r.gpu_fraction_milli or 1000
            cpu_used[node] -= r.cpu_millicores
            mem_used[node] -= r.memory_bytes
    assert not on_node, "every bound pod finished by the end of the run"


@pytest.mark.parametrize("name", RUNS)
def test_gpu_hours_per_queue_add_up_to_the_cluster(name: str, request: pytest.FixtureRequest) -> None:
    out, result = _get(request, name)
    queues = result.summary["queues"]
    leaves = [q for q in queues if q["leaf"]]
    cluster = result.summary["cluster"]["gpu_hours_allocated"]
    assert sum(q["gpu_hours"] for q in leaves) == pytest.approx(cluster, abs=1e-2)
    for parent in (q for q in queues if not q["leaf"]):
        kids = [q["gpu_hours"] for q in queues if q["parent"] == parent["name"]]
        assert sum(kids) == pytest.approx(parent["gpu_hours"], abs=1e-2)
    # The same figure, independently from the event log: held milli-GPU x time between bind and finish.
    requests: dict[str, ev.PodRequests] = {}
    bound_at: dict[str, tuple[int, int]] = {}
    per_queue: dict[str, int] = defaultdict(int)
    for _, e in read_events(out):
        if isinstance(e, ev.PodSubmitted):
            requests[e.uid] = e.requests
        elif isinstance(e, ev.PodBound):
            r = requests[e.uid]
            bound_at[e.uid] = (e.at_ms, (r.gpu_fraction_milli or 1000) * len(e.gpu_devices))
        elif isinstance(e, ev.PodFinished):
            start, milli = bound_at.pop(e.uid)
            per_queue[e.namespace] += milli * (e.at_ms - start)
    hours = 1000 * 3_600_000
    assert sum(per_queue.values()) / hours == pytest.approx(cluster, abs=1e-2)
    for q in leaves:
        assert per_queue[q["name"]] / hours == pytest.approx(q["gpu_hours"], abs=1e-2)


def test_contention_shows_waits_evictions_and_reasons(small: tuple[Path, SimulationResult]) -> None:
    """On 16 GPUs the slice cannot all run at once: the figures must show it."""
    _, result = small
    c = result.summary["cluster"]
    assert c["gpus"] == 16
    assert c["tasks_started"] + c["tasks_pending_at_end"] == SLICE
    assert max(q["p95_wait_s"] for q in result.summary["queues"]) > result.summary["period_s"]
    assert c["peak_allocation_ratio"] <= 1.0
    pending = [q for q in result.summary["queues"] if q["leaf"] and q["pending_at_end"]]
    for q in pending:
        assert sum(q["pending_reasons"].values()) == q["pending_at_end"]
        assert "unknown" not in q["pending_reasons"]


def test_evicted_pods_are_resubmitted_and_rerun(small: tuple[Path, SimulationResult]) -> None:
    out, result = small
    kinds: dict[str, list[str]] = defaultdict(list)
    for _, e in read_events(out):
        if isinstance(e, ev.PodSubmitted | ev.PodBound | ev.PodReleasing | ev.PodFinished | ev.PodDeleted):
            kinds[e.uid].append(e.type)
    releasing = 0
    for ks in kinds.values():
        for i, kind in enumerate(ks):
            if kind == "PodReleasing":  # a pod may be evicted more than once
                releasing += 1
                assert ks[i - 1] == "PodBound"
                assert ks[i + 1 : i + 4] == ["PodFinished", "PodDeleted", "PodSubmitted"]
    assert releasing == result.summary["cluster"]["evictions"] > 0


# --------------------------------------------------------------------------- cycle records


def test_cycle_records_replay_from_the_event_log(small: tuple[Path, SimulationResult]) -> None:
    """Every record is reproduced by folding the log up to its events_offset and re-running the cycle on a
    session built afresh, while the simulator patched the session it kept from the previous cycle."""
    out, _ = small
    fresh, patched = SESSIONS[out]
    assert fresh == 1 and patched > 100  # built once, then kept (scheduler/engine/kept.py)
    manifest = read_manifest(out)
    config = session_config(load_tenants(DEFAULT_TENANTS).engine)
    assert manifest["engine_config_hash"] == json.loads(next(read_cycles(out)).dumps())["config_hash"]
    by_offset: dict[int, list[CycleRecord]] = defaultdict(list)
    for r in read_cycles(out):
        by_offset[r.events_offset].append(r)
    assert sum(map(len, by_offset.values())) == fresh + patched
    b = StateBuilder()
    for offset, e in read_events(out):
        b.apply(e, offset)
        for r in by_offset.pop(offset, []):
            again, _ = run_cycle(b.snapshot(), config, r.logical_time_ms)
            assert again.dumps() == r.dumps()
    assert not by_offset


def test_fair_share_is_recorded_for_every_queue(big: tuple[Path, SimulationResult]) -> None:
    out, result = big
    names = {q["name"] for q in result.summary["queues"]}
    for rec in read_cycles(out):
        assert {q.name for q in rec.queues} == names
    for q in result.summary["queues"]:
        # Everything fits on the full cluster, so each queue's fair share tracks its demand.
        assert q["fair_share_gpu_hours"] >= q["gpu_hours"] * 0.99


# --------------------------------------------------------------------------- determinism, manifest, CLI


def test_same_seed_gives_identical_logs(big: tuple[Path, SimulationResult], tmp_path: Path) -> None:
    out, _ = big
    again = tmp_path / "again"
    _run(again)
    for f in ("events.jsonl", "cycles.jsonl", "manifest.json"):
        assert (again / f).read_bytes() == (out / f).read_bytes(), f


def test_seed_changes_the_queue_assignment() -> None:
    tenants = load_tenants(DEFAULT_TENANTS)
    names = [t.name for t in first_tasks(50)]
    assert [tenants.queue_for(n, 0) for n in names] != [tenants.queue_for(n, 7) for n in names]


def test_manifest(big: tuple[Path, SimulationResult]) -> None:
    out, result = big
    m = read_manifest(out)
    assert m["format"] == "hourglass-sim-run/1"
    assert m["counts"]["events"] == sum(1 for _ in read_events(out)) == result.summary["events"]
    assert m["counts"]["cycles"] == sum(1 for _ in read_cycles(out)) == result.summary["cycles"]["run"]
    assert m["engine_config_hash"] == result.summary["engine_config_hash"]


JSON_KEYS = {
    "format", "simulated_seconds", "period_s", "seed", "engine_config_hash", "events", "cycles", "queues",
    "cluster", "speed",
}  # fmt: skip
QUEUE_KEYS = {
    "name", "parent", "leaf", "tasks", "started", "gpu_hours", "fair_share_gpu_hours",
    "received_over_fair_share", "mean_wait_s", "p95_wait_s", "pending_at_end", "pending_reasons", "evictions",
}  # fmt: skip
CLUSTER_KEYS = {
    "nodes", "gpus", "gpu_hours_allocated", "gpu_hours_capacity", "mean_allocation_ratio",
    "peak_allocation_ratio", "peak_allocated_gpus", "mean_unallocated_gpus", "unallocated_gpus_at_end",
    "mean_fragmented_gpus", "fragmented_gpus_at_end", "fragmentation_probe", "tasks", "tasks_started",
    "tasks_finished", "tasks_pending_at_end", "binds", "evictions",
}  # fmt: skip


def test_cli_json_prints_only_the_documented_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plot = tmp_path / "sim.png"
    rc = main(
        ["simulate", "--limit-tasks", "60", "--json", "--plot", str(plot), "--out", str(tmp_path / "o")]
    )
    assert rc == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert set(data) == JSON_KEYS
    assert data["format"] == "hourglass-sim-summary/1"
    assert {q["name"] for q in data["queues"]} == {q.name for q in load_tenants().queues}
    for q in data["queues"]:
        assert set(q) == QUEUE_KEYS
    assert set(data["cluster"]) == CLUSTER_KEYS
    assert set(data["cycles"]) == {"run", "skipped"}
    assert data["cluster"]["tasks"] == 60
    assert plot.stat().st_size > 10_000
    assert (tmp_path / "o" / "events.jsonl").exists()


def test_cli_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--limit-tasks", "20", "--period", "300"]) == 0
    text = capsys.readouterr().out
    assert "research-vision" in text and "fragmented GPUs" in text


def test_cli_reports_a_bad_tenants_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "t.yaml"
    bad.write_text("version: 1\nqueues:\n  - name: a\n    parent: nope\n")
    assert main(["simulate", "--tenants", str(bad), "--limit-tasks", "5"]) == 2
    assert "parent 'nope' is not defined" in capsys.readouterr().err


# --------------------------------------------------------------------------- tenants file


def test_default_tenants() -> None:
    t = load_tenants()
    assert [q.name for q in t.leaves()] == [
        "research-vision", "research-nlp", "production-inference", "production-recsys",
    ]  # fmt: skip
    events = t.queue_events()
    assert events[0].name == "research" and events[0].resources.gpu.quota == 3_000_000
    recsys = next(e for e in events if e.name == "production-recsys")
    assert recsys.resources.gpu.limit == 2_500_000
    assert recsys.resources.cpu.limit == 40_000_000
    assert recsys.resources.memory.limit == 200_000 * 2**30
    assert sum(e.resources.gpu.quota or 0 for e in events if e.parent is None) == 6_000_000


def test_queue_for_is_a_stable_hash() -> None:
    """Pinned values: the mapping must never depend on the machine or on PYTHONHASHSEED."""
    t = load_tenants()
    got = [t.queue_for(f"openb-pod-{i:04d}") for i in range(6)]
    assert got == [t.queue_for(f"openb-pod-{i:04d}") for i in range(6)]
    crc = parse_tenants({**t.model_dump(mode="json"), "assignment": {"rule": "hash", "hash": "crc32"}})
    assert crc.queue_for("openb-pod-0000") == "research-vision"  # crc32 0xf3bc3908 mod 4 = 0
    assert got == PINNED


PINNED = ["production-inference", "production-recsys", "research-vision", "research-vision", "research-nlp",
          "research-nlp"]  # fmt: skip


def test_tenants_toml_and_shares(tmp_path: Path) -> None:
    f = tmp_path / "t.toml"
    f.write_text(
        'version = 1\ncycle_period_s = 30\n[[queues]]\nname = "a"\nshare = 3\ngpu = {quota = 0.5}\n'
        '[[queues]]\nname = "b"\n'
    )
    t = load_tenants(f)
    assert t.cycle_period_s == 30
    assert t.queue_events()[0].resources.gpu.quota == 500
    counts = {"a": 0, "b": 0}
    for i in range(4000):
        counts[t.queue_for(f"task-{i}")] += 1
    assert 2800 < counts["a"] < 3200


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"queues": [{"name": "a", "parent": "a"}]}, "parent cycle"),
        ({"queues": [{"name": "a"}, {"name": "a"}]}, "defined twice"),
        ({"queues": [{"name": "a", "gpu": {"quota": 4, "limit": 2}}]}, "quota 4 exceeds limit 2"),
        ({"queues": [{"name": "a", "gpu": {"quota": 0.0001}}]}, "not a whole number of milli-GPU"),
        ({"queues": [{"name": "Bad_Name"}]}, "DNS-1123"),
        ({"queues": [{"name": "a", "gpus": 1}]}, "queues[0].gpus: Extra inputs are not permitted"),
        ({"queues": []}, "queues: List should have at least 1 item"),
        ({"version": 2, "queues": [{"name": "a"}]}, "version"),
        ({"engine": {"gpu_placement": "pack"}, "queues": [{"name": "a"}]}, "engine.gpu_placement"),
    ],
)
def test_tenants_errors_name_the_field(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(TenantsError, match=r"t\.yaml") as exc:
        parse_tenants(doc, "t.yaml")
    assert message in str(exc.value)


def test_unknown_node_scoring_fails_early() -> None:
    t = parse_tenants({"engine": {"node_scoring": "nope"}, "queues": [{"name": "a"}]})
    with pytest.raises(ValueError, match="unknown node_scoring 'nope'"):
        simulate(first_tasks(1), read_nodes()[:1], t)


def test_time_based_settings_run_and_are_recorded(tmp_path: Path) -> None:
    """k_value > 0 feeds usage snapshots to the cycles; min-runtimes add wake-ups. Both must settle."""
    doc = load_tenants().model_dump(mode="json")
    doc["engine"] |= {"k_value": 1.0, "usage_refresh_s": 600, "default_reclaim_min_runtime_s": 900}
    doc["queues"][1]["preempt_min_runtime_s"] = 300
    tenants = parse_tenants(doc)
    assert tenants.min_runtimes_ms() == [300_000, 900_000]
    nodes = read_nodes(small_nodes_csv(tmp_path / "nodes.csv"))
    out = tmp_path / "run"
    result = simulate(first_tasks(60), nodes, tenants, log=DirLog(out))
    assert (
        result.summary["cluster"]["tasks_started"] + result.summary["cluster"]["tasks_pending_at_end"] == 60
    )
    records = list(read_cycles(out))
    assert all(r.usage_available and r.usage_snapshot_id for r in records)
    assert any(r.queues[0].usage["gpu"] > 0 for r in records)
