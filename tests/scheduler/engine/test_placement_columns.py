"""Placement over numpy columns must decide exactly what the per-node scan decides.

On random clusters — node selectors and taints, unschedulable and not-ready nodes, pod limits, whole and
shared GPUs (fractions and GPU-memory requests), running, pipelined-to-be and releasing pods — every
pending task's ordered fits and reasons, its best node, and a whole cycle's records are compared with
``placement.COLUMNS`` on and off. The columns, kept current row by row through the cycle, must also equal
columns built afresh from the final session.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.engine.placement as placement
from ingest import events as ev
from scheduler.conformance import SCENARIOS_DIR
from scheduler.engine.columns import NO_ROOM, columns
from scheduler.engine.cycle import DEFAULT_ORDER, open_session, run_actions
from scheduler.engine.record.decisions import make_record
from scheduler.engine.scoring import kai as kai_scoring
from scheduler.engine.session import Session, SessionConfig
from scheduler.engine.state import PodStatus, fold

CONFIGS = [
    SessionConfig(),
    SessionConfig(gpu_placement="spread"),
    SessionConfig(gpu_sharing_placement="spread"),
    SessionConfig(gpu_placement="spread", gpu_sharing_placement="spread", cpu_placement="spread"),
    SessionConfig(gpu_sharing_placement="none"),
    SessionConfig(gpu_placement="none", cpu_placement="none"),
    SessionConfig(cpu_placement="spread"),
]

_REQUESTS = [
    ev.PodRequests(cpu_millicores=1000, memory_bytes=2**30, gpus=1),
    ev.PodRequests(cpu_millicores=2000, memory_bytes=4 * 2**30, gpus=2),
    ev.PodRequests(cpu_millicores=500, memory_bytes=2**30, gpus=4),
    ev.PodRequests(cpu_millicores=500, memory_bytes=2**30, gpu_fraction_milli=250),
    ev.PodRequests(cpu_millicores=500, memory_bytes=2**30, gpu_fraction_milli=500),
    ev.PodRequests(cpu_millicores=500, memory_bytes=2**30, gpu_fraction_milli=700),
    ev.PodRequests(cpu_millicores=500, memory_bytes=2**30, gpu_fraction_milli=300, gpu_fraction_devices=2),
    ev.PodRequests(cpu_millicores=500, memory_bytes=2**30, gpu_memory_mib=20_000),
    ev.PodRequests(
        cpu_millicores=500, memory_bytes=2**30, gpu_memory_mib=40_900
    ),  # a whole device of the 40,960 MiB nodes (floored to 40,900)
    ev.PodRequests(cpu_millicores=3000, memory_bytes=8 * 2**30),
    ev.PodRequests(cpu_millicores=12_000, memory_bytes=2**30),
]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[object], SessionConfig]:
    """Events of a random cluster (see the module docstring) and the engine config to run it with."""
    out: list[object] = [
        ev.QueueUpserted(at_ms=0, name="dept", resources=ev.QueueResources(gpu=ev.QueueResource(quota=None))),
    ]
    for q in ("a", "b"):
        out.append(
            ev.QueueUpserted(
                at_ms=0,
                name=q,
                parent="dept",
                resources=ev.QueueResources(
                    gpu=ev.QueueResource(quota=draw(st.sampled_from([0, 4000, None])))
                ),
            )
        )
    n = draw(st.integers(1, 24))
    gpus_of: list[int] = []
    for i in range(n):
        gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
        gpus_of.append(gpus)
        out.append(
            ev.NodeUpserted(
                at_ms=0,
                name=f"n{draw(st.integers(0, 99)):02d}-{i}",  # name order differs from session order
                cpu_millicores=draw(st.sampled_from([4000, 8000, 16000])),
                memory_bytes=draw(st.sampled_from([8, 64])) * 2**30,
                gpus=gpus,
                gpu_memory_mib=draw(st.sampled_from([None, 40_960, 81_920])),
                max_pods=draw(st.sampled_from([2, 4, 110])),
                labels={"pool": draw(st.sampled_from(["x", "y"]))},
                taints=[ev.Taint(key="t", value="v", effect="NoSchedule")] if draw(st.booleans()) else [],
                ready=draw(st.integers(0, 9)) > 0,
                unschedulable=draw(st.integers(0, 9)) == 0,
            )
        )
    names = [e.name for e in out if isinstance(e, ev.NodeUpserted)]
    at = 1
    for k in range(draw(st.integers(0, 40))):  # running pods, some releasing
        node = draw(st.integers(0, n - 1))
        g = gpus_of[node]
        kind = draw(st.sampled_from(["cpu", "whole", "fraction"] if g else ["cpu"]))
        devices: list[int] = []
        if kind == "whole":
            req = ev.PodRequests(cpu_millicores=500, memory_bytes=2**30, gpus=1)
            devices = [draw(st.integers(0, g - 1))]
        elif kind == "fraction":
            req = ev.PodRequests(
                cpu_millicores=500,
                memory_bytes=2**30,
                gpu_fraction_milli=draw(st.sampled_from([200, 500, 800])),
            )
            devices = [draw(st.integers(0, g - 1))]
        else:
            req = ev.PodRequests(cpu_millicores=draw(st.sampled_from([500, 2000])), memory_bytes=2**30)
        name = f"r{k}"
        out += [
            ev.PodGroupUpserted(at_ms=at, name=name, namespace="d", queue="a", created_at_ms=at, priority=50),
            ev.PodSubmitted(
                at_ms=at,
                name=f"{name}-0",
                namespace="d",
                pod_group=name,
                queue="a",
                requests=req,
                created_at_ms=at,
            ),
            ev.PodBound(at_ms=at, name=f"{name}-0", namespace="d", node=names[node], gpu_devices=devices),
        ]
        if draw(st.integers(0, 2)) == 0:
            out.append(ev.PodReleasing(at_ms=at + 1, name=f"{name}-0", namespace="d", reason="deleted"))
        at += 2
    for k in range(draw(st.integers(1, 14))):  # pending jobs, some gangs, some filtered
        name = f"p{k}"
        size = draw(st.sampled_from([1, 1, 2]))
        req = draw(st.sampled_from(_REQUESTS))
        extra: dict[str, object] = {}
        if draw(st.integers(0, 3)) == 0:
            extra["node_selector"] = {"pool": draw(st.sampled_from(["x", "y"]))}
        if draw(st.booleans()):
            extra["tolerations"] = [ev.Toleration(key="t", operator="Exists")]
        if draw(st.integers(0, 4)) == 0:
            pool = draw(st.sampled_from(["x", "y"]))
            extra["node_affinity"] = [
                ev.NodeSelectorTerm(
                    match_expressions=[
                        ev.NodeSelectorRequirement(key="pool", operator="NotIn", values=[pool])
                    ]
                )
            ]
        if draw(st.integers(0, 5)) == 0:
            extra["allowed_nodes"] = draw(st.lists(st.sampled_from(names), max_size=3, unique=True))
        out.append(
            ev.PodGroupUpserted(
                at_ms=at,
                name=name,
                namespace="d",
                queue=draw(st.sampled_from(["a", "b"])),
                created_at_ms=at,
                priority=draw(st.sampled_from([50, 100])),
                min_member=size,
            )
        )
        for j in range(size):
            out.append(
                ev.PodSubmitted(
                    at_ms=at,
                    name=f"{name}-{j}",
                    namespace="d",
                    pod_group=name,
                    queue=None,
                    requests=req,
                    created_at_ms=at,
                    **extra,  # type: ignore[arg-type]
                )
            )
        at += 1
    return out, draw(st.sampled_from(CONFIGS))


@contextmanager
def _columns(on: bool) -> Iterator[None]:
    old = placement.COLUMNS, placement.COLUMNS_MIN_NODES
    placement.COLUMNS, placement.COLUMNS_MIN_NODES = on, 0
    try:
        yield
    finally:
        placement.COLUMNS, placement.COLUMNS_MIN_NODES = old


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    yield
    placement.COLUMNS, placement.COLUMNS_MIN_NODES = True, 16
    placement.FAST_PATH = True


def _session(events: list[object], config: SessionConfig) -> Session:
    return open_session(fold(events), config, now_ms=10**6)  # type: ignore[arg-type]


def _fits(ssn: Session, allow_idle: bool) -> list[object]:
    out: list[object] = []
    subset = ssn.nodes[::2]
    for t in ssn.tasks:
        if t.status is not PodStatus.PENDING:
            continue
        for nodes in (ssn.nodes, subset):
            fits, why = placement.ordered_fits(ssn, t, nodes, allow_idle)
            out.append(([(f.node.name, f.idle, f.devices, f.portion, f.new_shared_group) for f in fits], why))
        for nodes in (ssn.nodes, subset):  # a subset skips the bin-pack fast path: vector scores
            best = placement.best_fit(ssn, t, nodes, allow_idle)
            out.append(None if best is None else (best.node.name, best.idle, best.devices, best.portion))
    return out


@settings(max_examples=120, deadline=None)
@given(clusters(), st.booleans())
def test_each_task_fits_the_same_nodes_for_the_same_reasons(
    cluster: tuple[list[object], SessionConfig], allow_idle: bool
) -> None:
    events, config = cluster
    with _columns(True):
        vector = _fits(_session(events, config), allow_idle)
    with _columns(False):
        scan = _fits(_session(events, config), allow_idle)
    assert vector == scan


def _cycle(events: list[object], config: SessionConfig) -> tuple[str, Session]:
    ssn = run_actions(_session(events, config), DEFAULT_ORDER)
    return make_record(ssn, 0).model_dump_json(), ssn


@settings(max_examples=80, deadline=None)
@given(clusters())
def test_whole_cycle_records_are_identical(cluster: tuple[list[object], SessionConfig]) -> None:
    events, config = cluster
    with _columns(True):
        vector, ssn = _cycle(events, config)
        kept = columns(ssn)
    with _columns(False):
        scan, _ = _cycle(events, config)
    assert vector == scan
    # Columns kept current through the cycle's moves say what the session's nodes say.
    assert kept is not None
    for r, node in enumerate(ssn.free_index.by_rank):
        rooms = [
            node.dev_future(d) for d in range(node.gpus) if node.dev_shared[d] and node.dev_future(d) < 1000
        ]
        assert kept.future_cpu[r] == node.future(0)
        assert kept.future_memory[r] == node.future(1)
        assert kept.pods_used[r] == node.pods_used()
        assert kept.whole_future[r] == len(node.whole_future_devices())
        assert kept.room[r] == (max(rooms) if rooms else NO_ROOM)
        assert kept.idle_cpu[r] == node.idle(0)
        assert kept.idle_memory[r] == node.idle(1)
        assert kept.whole_idle[r] == len(node.whole_idle_devices())
        assert kept.gpus_left[r] == kai_scoring.gpus_left_milli(node)


def test_fast_path_and_columns_agree_with_the_plain_scan_on_the_synthetic_mix() -> None:
    """Columns and the binpack fast path together, against neither, on a small synthetic cycle."""
    from tests.support.synthetic import SyntheticSpec, synthetic_events

    events: list[object] = list(synthetic_events(SyntheticSpec(nodes=40, pending_pods=400, departments=2)))
    with _columns(True):
        vector, _ = _cycle(events, SessionConfig())
    with _columns(False):
        placement.FAST_PATH = False
        scan, _ = _cycle(events, SessionConfig())
    assert vector == scan


def test_conformance_scenarios_decide_the_same_with_columns_at_any_size() -> None:
    """The KAI scenarios are small clusters, under ``COLUMNS_MIN_NODES``: force the columns on for them."""

    from scheduler.conformance.runner import run_file, scenario_files

    root = SCENARIOS_DIR
    files = list(scenario_files(root / "kai")) + list(scenario_files(root / "hourglass"))
    assert files
    for path in files:
        with _columns(True):
            vector = run_file(path)
        with _columns(False):
            scan = run_file(path)
        assert (vector.passed, vector.error, vector.diffs) == (scan.passed, scan.error, scan.diffs), path


def _node(name: str, gpus: int, cpu: int = 16_000) -> ev.NodeUpserted:
    return ev.NodeUpserted(at_ms=0, name=name, cpu_millicores=cpu, memory_bytes=64 * 2**30, gpus=gpus)


def _pod(
    name: str, req: ev.PodRequests, node: str | None = None, devices: tuple[int, ...] = ()
) -> list[object]:
    out: list[object] = [
        ev.PodGroupUpserted(at_ms=1, name=name, namespace="d", queue="q", created_at_ms=1),
        ev.PodSubmitted(
            at_ms=1, name=f"{name}-0", namespace="d", pod_group=name, requests=req, created_at_ms=1
        ),
    ]
    if node is not None:
        out.append(
            ev.PodBound(at_ms=1, name=f"{name}-0", namespace="d", node=node, gpu_devices=list(devices))
        )
    return out


_GPU = ev.PodRequests(cpu_millicores=1000, memory_bytes=2**30, gpus=1)
_QUEUE = ev.QueueUpserted(at_ms=0, name="q", resources=ev.QueueResources(gpu=ev.QueueResource(quota=None)))


@pytest.mark.parametrize(
    ("what", "config", "events", "best"),
    [
        (
            "spread counts the room left on a shared GPU (1.8 of 2 GPUs beats 3 of 4)",
            SessionConfig(gpu_placement="spread"),
            [
                _node("a", 2),
                _node("b", 4),
                *_pod("f", ev.PodRequests(cpu_millicores=100, gpu_fraction_milli=200), "a", (0,)),
                *_pod("w", _GPU, "b", (0,)),
                *_pod("p", _GPU),
            ],
            "a",
        ),
        (
            "a GPU that is only releasing is not idle: the idle node's +100 beats bin-packing",
            SessionConfig(),
            [
                _node("a", 2),
                _node("b", 4),
                *_pod("w", _GPU, "a", (0,)),
                *_pod("r", _GPU, "a", (1,)),
                ev.PodReleasing(at_ms=2, name="r-0", namespace="d", reason="deleted"),
                *_pod("p", _GPU),
            ],
            "b",
        ),
        (
            "a shared task under spread: idle on a fuller node beats only releasing capacity on an emptier one",
            SessionConfig(gpu_placement="spread"),
            [
                _node("a", 2),
                _node("b", 2),
                *_pod("r0", _GPU, "a", (0,)),
                *_pod("r1", _GPU, "a", (1,)),
                ev.PodReleasing(at_ms=2, name="r0-0", namespace="d", reason="deleted"),
                ev.PodReleasing(at_ms=2, name="r1-0", namespace="d", reason="deleted"),
                *_pod("w", _GPU, "b", (0,)),
                *_pod("p", ev.PodRequests(cpu_millicores=100, gpu_fraction_milli=500)),
            ],
            "b",
        ),
        (
            "a CPU-only task: +10 on a node without GPUs beats bin-packing's 9",
            SessionConfig(),
            [
                _node("a", 0, cpu=64000),
                _node("b", 2, cpu=4000),
                *_pod("p", ev.PodRequests(cpu_millicores=1000, memory_bytes=2**30)),
            ],
            "a",
        ),
    ],
)
def test_vector_scores_pick_the_node_the_scan_picks(
    what: str, config: SessionConfig, events: list[object], best: str
) -> None:
    picks = []
    for on in (True, False):
        with _columns(on):
            ssn = _session([_QUEUE, *events], config)
            task = next(t for t in ssn.tasks if t.status is PodStatus.PENDING)
            got = placement.best_fit(ssn, task, list(ssn.nodes))  # a new list: no bin-pack fast path
            picks.append(None if got is None else got.node.name)
    assert picks == [best, best], what
