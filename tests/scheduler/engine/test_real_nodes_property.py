"""Property: on random clusters with pods of other schedulers, extended resources, host ports, anti-affinity
and spread, no cycle ever binds or pipelines beyond what a node can hold, in any resource, and no bind or
pipeline breaks a filter. The check recomputes everything from the resulting state, independently of the
engine's own accounting."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.engine.cycle import result_state, run_cycle, settle
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import ClusterState, HostPort, Pod, PodStatus, evolve, fold
from tests.support.synthetic import SyntheticSpec, synthetic_events

NOW = (PodStatus.RUNNING, PodStatus.ALLOCATED, PodStatus.RELEASING)  # on the node right now
LATER = (PodStatus.RUNNING, PodStatus.ALLOCATED, PodStatus.PIPELINED)  # once releasing pods are gone


def _decorate(state: ClusterState, draw: st.DrawFn) -> ClusterState:
    """Add RDMA capacity to some nodes and ports / RDMA requests to some pending pods."""
    rdma = draw(st.lists(st.integers(0, 2), min_size=len(state.nodes), max_size=len(state.nodes)))
    nodes = tuple(
        replace(n, extended={"rdma/ib": r} if r else {}) for n, r in zip(state.nodes, rdma, strict=True)
    )
    pods = []
    for p in state.pods:
        kind = draw(st.integers(0, 5))
        if kind == 0:
            p = evolve(p, host_ports=(HostPort(8000 + draw(st.integers(0, 2))),))
        elif kind == 1:
            p = evolve(p, request=replace(p.request, extended=(("rdma/ib", 1),)))
        pods.append(p)
    return replace(state, nodes=nodes, pods=tuple(pods))


def _gpu_devices_used(p: Pod) -> int:
    return p.request.gpus if p.request.gpus else 0


def _check(state: ClusterState) -> None:
    node = {n.name: n for n in state.nodes}
    by_node: dict[str, list[Pod]] = defaultdict(list)
    for p in state.pods:
        if p.node is not None:
            by_node[p.node].append(p)
    foreign = defaultdict(list)
    for f in state.foreign_pods:
        foreign[f.node].append(f)
    for name, n in node.items():
        for view in (NOW, LATER):
            pods = [p for p in by_node[name] if p.status in view]
            fps = [f for f in foreign[name] if view is NOW or not f.releasing]
            reqs = [p.request for p in pods] + [f.request for f in fps]
            assert sum(r.cpu for r in reqs) <= n.cpu, (name, view)
            assert sum(r.memory for r in reqs) <= n.memory, (name, view)
            assert len(reqs) <= n.max_pods, (name, view)
            whole = sum(_gpu_devices_used(p) for p in pods) + sum(f.request.gpus for f in fps)
            shared = {d for p in pods if p.request.is_shared for d in p.gpu_devices}
            assert whole + len(shared) <= n.gpus, (name, view, whole, shared)
            per_device: Counter[int] = Counter()
            for p in pods:
                for d in p.gpu_devices:
                    per_device[d] += p.gpu_milli_per_device if p.request.is_shared else 1000
            assert all(v <= 1000 for v in per_device.values()), (name, view, per_device)
            rdma = sum(dict(r.extended).get("rdma/ib", 0) for r in reqs)
            assert rdma <= n.extended.get("rdma/ib", 0), (name, view)
            ports = Counter((hp.protocol, hp.port) for p in pods for hp in p.host_ports)
            ports.update((hp.protocol, hp.port) for f in fps for hp in f.host_ports)
            assert all(c == 1 for c in ports.values()), (name, view, ports)
    # Anti-affinity (hostname, within a job) and zone spread (max skew 1, every zone eligible).
    zones = sorted({n.labels["zone"] for n in state.nodes})
    for job in {p.job for p in state.pods}:
        placed = [p for p in state.pods if p.job == job and p.status in LATER and p.node is not None]
        if not placed:
            continue
        if placed[0].pod_anti_affinity:
            hosts = Counter(p.node for p in placed)
            assert max(hosts.values()) == 1, (job, hosts)
        if placed[0].topology_spread:
            per_zone = Counter(node[p.node or ""].labels["zone"] for p in placed)
            counts = [per_zone.get(z, 0) for z in zones]
            assert max(counts) - min(counts) <= 1, (job, counts)


@st.composite
def clusters(draw: st.DrawFn) -> ClusterState:
    spec = SyntheticSpec(
        nodes=draw(st.integers(1, 10)),
        gpus_per_node=draw(st.sampled_from([1, 2, 4, 8])),
        pending_pods=draw(st.integers(1, 50)),
        departments=draw(st.integers(1, 2)),
        queues_per_department=draw(st.integers(1, 2)),
        seed=draw(st.integers(0, 10_000)),
        foreign_fraction=draw(st.sampled_from([0.0, 0.25, 0.5, 0.75])),
        constrained_fraction=draw(st.sampled_from([0.3, 0.7, 1.0])),
        zones=draw(st.integers(1, 4)),
    )
    return _decorate(fold(synthetic_events(spec)), draw)


@settings(max_examples=40, deadline=None)
@given(clusters())
def test_no_cycle_binds_beyond_allocatable_or_breaks_a_filter(state: ClusterState) -> None:
    for c in range(3):
        _, ssn = run_cycle(state, SessionConfig(), now_ms=1_000_000 + c * 1000)
        after = result_state(ssn)
        _check(after)
        state = settle(after)
