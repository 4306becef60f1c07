"""Tests for the event contract (ingest.events) and the quantity parsers (ingest.kube.units)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from ingest.events import (
    EVENT_TYPES,
    AttachedVolume,
    ClockTick,
    CSIDriverLimit,
    CSINodeDeleted,
    CSINodeUpserted,
    EventBase,
    EventError,
    ForeignPodUpserted,
    HostPort,
    InlineDisk,
    LabelSelector,
    LabelSelectorRequirement,
    NamespaceDeleted,
    NamespaceUpserted,
    NodeRemoved,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    NodeUpserted,
    PodAffinityTerm,
    PodBound,
    PodDeleted,
    PodFinished,
    PodGroupDeleted,
    PodGroupUpserted,
    PodReleasing,
    PodRequests,
    PodSubmitted,
    PodUngated,
    PodVolumesChanged,
    PreferredSchedulingTerm,
    QueueDeleted,
    QueueResource,
    QueueResources,
    QueueUpserted,
    Taint,
    Toleration,
    TopologyDeleted,
    TopologySpreadConstraint,
    TopologyUpserted,
    VolumeClaim,
    dump_event,
    event_key,
    parse_event,
)
from ingest.kube.units import parse_bytes, parse_cpu_millicores, parse_fraction_milli, parse_gpu_milli

# One fully populated example of every event type.
EXAMPLES: list[EventBase] = [
    NodeUpserted(
        at_ms=0,
        name="node-a",
        cpu_millicores=64_000,
        memory_bytes=512 * 2**30,
        gpus=8,
        gpu_memory_mib=81_920,
        gpu_model="NVIDIA-A100-SXM4-80GB",
        labels={"pool": "a", "nvidia.com/gpu.memory": "81920"},
        taints=[Taint(key="nvidia.com/gpu", effect="NoSchedule")],
        unschedulable=True,
    ),
    NodeRemoved(at_ms=9, name="node-a"),
    QueueUpserted(
        at_ms=1,
        name="team-a",
        parent="dept-1",
        priority=120,
        display_name="Team A",
        resources=QueueResources(
            gpu=QueueResource(quota=2000, limit=4000, over_quota_weight=2.5),
            cpu=QueueResource(quota=None, limit=None, over_quota_weight=0.0),
        ),
        preempt_min_runtime_ms=60_000,
        reclaim_min_runtime_ms=None,
    ),
    QueueDeleted(at_ms=2, name="team-a"),
    PodGroupUpserted(
        at_ms=3,
        name="pg-train",
        namespace="ml",
        queue="team-a",
        min_member=4,
        priority_class="train",
        priority=50,
        preemptible=None,
        created_at_ms=3,
    ),
    PodGroupDeleted(at_ms=4, name="pg-train", namespace="ml"),
    PodSubmitted(
        at_ms=5,
        uid="5f0c-pod-uid",
        name="train-0",
        namespace="ml",
        pod_group="pg-train",
        queue="team-a",
        requests=PodRequests(
            cpu_millicores=500, memory_bytes=2**30, gpu_fraction_milli=500, gpu_fraction_devices=2
        ),
        node_selector={"pool": "a"},
        allowed_nodes=["node-a", "node-b"],
        node_affinity=[
            NodeSelectorTerm(
                match_expressions=[
                    NodeSelectorRequirement(key="zone", operator="In", values=["z1", "z2"]),
                    NodeSelectorRequirement(key="gpu-count", operator="Gt", values=["3"]),
                ]
            )
        ],
        tolerations=[Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
        task_priority=10,
        created_at_ms=5,
        scheduler_name="kai-scheduler",
    ),
    PodBound(at_ms=6, name="train-0", namespace="ml", node="node-a", gpu_devices=[3, 1]),
    PodReleasing(at_ms=7, name="train-0", namespace="ml", reason="reclaim"),
    PodFinished(at_ms=8, name="train-0", namespace="ml", phase="Succeeded"),
    PodDeleted(at_ms=8, name="train-0", namespace="ml"),
    ClockTick(at_ms=9),
    # Contract v2 (docs/events.md): fields and types for real nodes.
    PodSubmitted(
        at_ms=10,
        name="web-0",
        namespace="ml",
        pod_group="pg-web",
        requests=PodRequests(cpu_millicores=100, extended={"nvidia.com/mig-1g.10gb": 1, "rdma/ib": 2}),
        labels={"app": "web"},
        host_ports=[HostPort(port=8080), HostPort(port=53, protocol="UDP", host_ip="10.0.0.1")],
        pod_affinity=[
            PodAffinityTerm(label_selector=LabelSelector(match_labels={"app": "db"}), topology_key="zone")
        ],
        pod_anti_affinity=[
            PodAffinityTerm(
                label_selector=LabelSelector(
                    match_expressions=[LabelSelectorRequirement(key="app", operator="In", values=["web"])]
                ),
                topology_key="kubernetes.io/hostname",
                namespaces=["ml", "serving"],
            ),
            PodAffinityTerm(topology_key="zone", weight=30),
        ],
        preferred_node_affinity=[
            PreferredSchedulingTerm(
                weight=20,
                match_expressions=[NodeSelectorRequirement(key="pool", operator="In", values=["a"])],
            )
        ],
        topology_spread=[
            TopologySpreadConstraint(
                max_skew=1,
                topology_key="zone",
                label_selector=LabelSelector(match_labels={"app": "web"}),
                min_domains=3,
                node_taints_policy="Honor",
            )
        ],
        scheduling_gates=["example.com/quota-check"],
        volumes=[
            VolumeClaim(
                claim="data",
                node_affinity=[
                    NodeSelectorTerm(
                        match_expressions=[NodeSelectorRequirement(key="zone", operator="In", values=["z1"])]
                    )
                ],
            ),
            VolumeClaim(claim="scratch", bound=False, binding_mode="WaitForFirstConsumer"),
        ],
        created_at_ms=10,
    ),
    PodUngated(at_ms=11, name="web-0", namespace="ml"),
    ForeignPodUpserted(
        at_ms=12,
        name="dcgm-exporter-x7",
        namespace="gpu-operator",
        node="node-a",
        requests=PodRequests(cpu_millicores=100, memory_bytes=2**28, gpus=2, extended={"amd.com/gpu": 1}),
        labels={"app": "dcgm"},
        host_ports=[HostPort(port=9400)],
        releasing=True,
    ),
    TopologyUpserted(
        at_ms=13, name="cluster-topology", levels=["zone", "block", "rack", "kubernetes.io/hostname"]
    ),
    TopologyDeleted(at_ms=14, name="old-topology"),
    PodGroupUpserted(
        at_ms=15,
        name="train-rack",
        namespace="ml",
        queue="team-a",
        min_member=8,
        created_at_ms=15,
        topology="cluster-topology",
        required_topology_level="block",
        preferred_topology_level="rack",
    ),
    NamespaceUpserted(at_ms=0, name="team-a", labels={"team": "a"}),
    NamespaceDeleted(at_ms=0, name="team-a"),
    CSINodeUpserted(
        at_ms=16,
        name="node-a",
        drivers=[CSIDriverLimit(name="ebs.csi.aws.com", count=25), CSIDriverLimit(name="nfs.csi.k8s.io")],
        attached=[AttachedVolume(driver="ebs.csi.aws.com", handle="vol-9")],
    ),
    CSINodeDeleted(at_ms=17, name="node-b"),
    PodVolumesChanged(
        at_ms=18,
        name="web-0",
        namespace="ml",
        volumes=[
            VolumeClaim(
                claim="web-0-scratch",
                bound=False,
                binding_mode="WaitForFirstConsumer",
                provision=True,
                request_bytes=2**30,
                read_write_once_pod=True,
                attach_driver="ebs.csi.aws.com",
                capacity_checked=True,
                capacity_topologies=[
                    NodeSelectorTerm(
                        match_expressions=[NodeSelectorRequirement(key="zone", operator="In", values=["z1"])]
                    )
                ],
                ephemeral=True,
            )
        ],
    ),
    ForeignPodUpserted(
        at_ms=19,
        name="db-0",
        namespace="ml",
        node="node-a",
        volumes=[VolumeClaim(claim="db", attach_driver="ebs.csi.aws.com", attach_handle="vol-1")],
        disks=[InlineDisk(kind="rbd", name="img", pool="rbd", monitors=["m1"], read_only=True)],
    ),
]


def test_examples_cover_every_event_type() -> None:
    assert sorted({type(e).__name__ for e in EXAMPLES}) == sorted(EVENT_TYPES)


def test_version_is_the_lowest_that_carries_the_event() -> None:
    # A v1 event reads and writes byte for byte as before contract v2: no new keys, "v":1.
    plain = PodSubmitted(at_ms=0, name="p", namespace="ns", pod_group="pg", created_at_ms=0)
    raw = dump_event(plain)
    assert plain.v == 1 and b'"labels"' not in raw and b'"extended"' not in raw
    assert parse_event(raw).v == 1
    # Using any v2 field (or type) makes it v2.
    assert (
        PodSubmitted(at_ms=0, name="p", namespace="ns", pod_group="pg", created_at_ms=0, labels={"a": "b"}).v
        == 2
    )
    assert PodSubmitted.model_validate(_pod(requests={"extended": {"amd.com/gpu": 1}})).v == 2
    assert PodUngated(at_ms=0, name="p", namespace="ns").v == 2


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: type(e).__name__)
def test_round_trip_is_byte_identical(event: EventBase) -> None:
    raw = dump_event(event)
    parsed = parse_event(raw)
    assert parsed == event
    assert type(parsed) is type(event)
    assert dump_event(parsed) == raw
    # Every input form gives the same event.
    assert parse_event(raw.decode()) == event
    assert parse_event(json.loads(raw)) == event


def test_dump_is_compact_and_sorted() -> None:
    raw = dump_event(NodeRemoved(at_ms=1, name="n"))
    assert raw == b'{"at_ms":1,"name":"n","type":"NodeRemoved","uid":"n","v":1}'
    # Label insertion order must not change the bytes.
    a = NodeUpserted(at_ms=0, name="n", cpu_millicores=1, memory_bytes=1, labels={"x": "1", "a": "2"})
    b = NodeUpserted(at_ms=0, name="n", cpu_millicores=1, memory_bytes=1, labels={"a": "2", "x": "1"})
    assert dump_event(a) == dump_event(b)


def test_uid_defaults_and_key() -> None:
    assert event_key(NodeRemoved(at_ms=0, name="node-a")) == "node-a"
    assert event_key(QueueDeleted(at_ms=0, name="q")) == "q"
    assert event_key(PodDeleted(at_ms=0, name="p", namespace="ns")) == "ns/p"
    assert event_key(PodGroupDeleted(at_ms=0, name="pg", namespace="ns")) == "ns/pg"
    assert event_key(PodDeleted(at_ms=0, uid="abc-123", name="p", namespace="ns")) == "abc-123"
    parsed = parse_event('{"type":"PodDeleted","at_ms":0,"name":"p","namespace":"ns"}')
    assert parsed.uid == "ns/p"
    assert parsed.v == 1


def test_queue_defaults_follow_kai_default_queue() -> None:
    q = QueueUpserted(at_ms=0, name="q")
    assert q.priority == 100
    assert q.resources.gpu == QueueResource(quota=0, limit=None, over_quota_weight=1.0)
    assert q.resources.cpu == QueueResource(quota=None, limit=None, over_quota_weight=1.0)
    assert q.resources.memory == QueueResource(quota=None, limit=None, over_quota_weight=1.0)


def test_models_are_frozen() -> None:
    event = NodeRemoved(at_ms=0, name="n")
    with pytest.raises(ValueError, match="frozen"):
        event.name = "m"  # type: ignore[misc]


def _pod(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "type": "PodSubmitted",
        "at_ms": 0,
        "name": "p",
        "namespace": "ns",
        "pod_group": "pg",
        "created_at_ms": 0,
    }
    return base | overrides


def _queue(**overrides: Any) -> dict[str, Any]:
    return {"type": "QueueUpserted", "at_ms": 0, "name": "q"} | overrides


# One case per entry reads better as a table than the formatter's layout.
# fmt: off
INVALID: list[tuple[str, Any, str, str]] = [
    # (id, raw input, reason_code, message substring)
    ("bad-json", '{"type": "NodeRemoved",', "bad_json", "not valid JSON"),
    ("bad-utf8", b'{"type":"\xff"}', "bad_json", "not valid JSON"),
    ("not-an-object", "[1, 2]", "schema", "must be a JSON object"),
    ("version-3", {"v": 3, "type": "NodeRemoved", "at_ms": 0, "name": "n"}, "unknown_version",
     "event version 3 is not supported (supported: 1, 2)"),
    ("v1-with-v2-field", _pod(v=1, labels={"a": "b"}), "schema", "labels needs event contract version 2"),
    ("v1-with-v2-type", {"v": 1, "type": "PodUngated", "at_ms": 0, "name": "p", "namespace": "ns"}, "schema",
     "type PodUngated needs event contract version 2"),
    ("extended-core-name", _pod(requests={"extended": {"cpu": 1}}), "schema", "'cpu' has its own field"),
    ("extended-bad-name", _pod(requests={"extended": {"fpga": 1}}), "schema",
     "'fpga' is not an extended resource name"),
    ("extended-zero", _pod(requests={"extended": {"amd.com/gpu": 0}}), "schema", "greater than 0"),
    ("host-port-0", _pod(host_ports=[{"port": 0}]), "schema", "host_ports[0].port"),
    ("selector-op", _pod(pod_affinity=[{"topology_key": "zone", "label_selector": {
        "match_expressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}}]), "schema",
     "pod_affinity[0].label_selector.match_expressions[0].operator"),
    ("spread-skew-0", _pod(topology_spread=[{"max_skew": 0, "topology_key": "zone"}]), "schema",
     "topology_spread[0].max_skew"),
    ("spread-min-domains-anyway", _pod(topology_spread=[{"max_skew": 1, "topology_key": "zone",
     "when_unsatisfiable": "ScheduleAnyway", "min_domains": 2}]), "schema",
     "min_domains is only allowed with when_unsatisfiable DoNotSchedule"),
    ("topology-no-levels", {"type": "TopologyUpserted", "at_ms": 0, "name": "t", "levels": []}, "schema",
     "levels: List should have at least 1 item"),
    ("topology-level-twice", {"type": "TopologyUpserted", "at_ms": 0, "name": "t", "levels": ["rack", "rack"]},
     "schema", "topology 't' lists level 'rack' twice"),
    ("level-without-topology", {"type": "PodGroupUpserted", "at_ms": 0, "name": "g", "namespace": "ns",
     "queue": "q", "created_at_ms": 0, "required_topology_level": "rack"}, "schema",
     "a required or preferred topology level needs a topology"),
    ("v1-with-topology", {"v": 1, "type": "PodGroupUpserted", "at_ms": 0, "name": "g", "namespace": "ns",
     "queue": "q", "created_at_ms": 0, "topology": "t"}, "schema", "topology needs event contract version 2"),
    ("foreign-without-node", {"type": "ForeignPodUpserted", "at_ms": 0, "name": "p", "namespace": "ns"},
     "schema", "node: Field required"),
    ("version-7", '{"v":7,"type":"Whatever"}', "unknown_version", "event version 7 is not supported"),
    ("version-string", {"v": "1", "type": "NodeRemoved", "at_ms": 0, "name": "n"}, "schema", "v: "),
    ("unknown-type", {"type": "PodExploded", "at_ms": 0}, "unknown_type", "unknown event type 'PodExploded'"),
    ("missing-type", {"at_ms": 0, "name": "n"}, "schema", "type: Field required"),
    ("extra-field", {"type": "NodeRemoved", "at_ms": 0, "name": "n", "colour": "red"}, "schema",
     "colour: Extra inputs are not permitted"),
    ("negative-at", {"type": "NodeRemoved", "at_ms": -1, "name": "n"}, "schema",
     "at_ms: Input should be greater"),
    ("string-int", {"type": "NodeRemoved", "at_ms": "5", "name": "n"}, "schema",
     "at_ms: Input should be a valid integer"),
    ("negative-request", _pod(requests={"cpu_millicores": -100}), "schema",
     "requests.cpu_millicores: Input should be greater than or equal to 0"),
    ("fraction-0", _pod(requests={"gpu_fraction_milli": 0}), "schema",
     "requests.gpu_fraction_milli: Input should be greater than or equal to 1"),
    ("fraction-1.5", _pod(requests={"gpu_fraction_milli": 1500}), "schema",
     "requests.gpu_fraction_milli: Input should be less than or equal to 1000"),
    ("fraction-and-gpus", _pod(requests={"gpus": 1, "gpu_fraction_milli": 500}), "schema",
     "gpu_fraction_milli cannot be combined with whole gpus=1"),
    ("memory-and-gpus", _pod(requests={"gpus": 2, "gpu_memory_mib": 2000}), "schema",
     "gpu_memory_mib cannot be combined with whole gpus=2"),
    ("fraction-and-memory", _pod(requests={"gpu_fraction_milli": 500, "gpu_memory_mib": 2000}), "schema",
     "mutually exclusive"),
    ("devices-without-fraction", _pod(requests={"gpu_fraction_devices": 2}), "schema",
     "gpu_fraction_devices=2 requires gpu_fraction_milli or gpu_memory_mib"),
    ("bad-affinity", _pod(node_affinity=[{"match_expressions": [{"key": "z", "operator": "In"}]}]), "schema",
     "node_affinity[0].match_expressions[0]: operator In needs at least one value"),
    ("bad-toleration", _pod(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]), "schema",
     "tolerations[0]: a toleration with operator Exists takes no value"),
    ("podgroup-missing-queue",
     {"type": "PodGroupUpserted", "at_ms": 0, "name": "pg", "namespace": "ns", "created_at_ms": 0},
     "schema", "queue: Field required"),
    ("podgroup-min-member-0",
     {"type": "PodGroupUpserted", "at_ms": 0, "name": "pg", "namespace": "ns", "queue": "q", "min_member": 0,
      "created_at_ms": 0},
     "schema", "min_member: Input should be greater than or equal to 1"),
    ("quota-above-limit", _queue(resources={"gpu": {"quota": 4000, "limit": 2000}}), "schema",
     "resources.gpu: quota 4000 exceeds limit 2000"),
    ("negative-quota", _queue(resources={"cpu": {"quota": -1}}), "schema", "resources.cpu.quota"),
    ("quota-must-be-stated", _queue(resources={"gpu": {"limit": 2000}}), "schema",
     "resources.gpu.quota: Field required"),
    ("nan-weight", '{"type":"QueueUpserted","at_ms":0,"name":"q","resources":{"gpu":{"quota":0,'
     '"over_quota_weight":NaN}}}', "schema", "resources.gpu.over_quota_weight"),
    ("own-parent", _queue(parent="q"), "schema", "queue 'q' cannot be its own parent"),
    ("bad-queue-name", _queue(name="Team_A"), "schema", "'Team_A' is not a valid DNS-1123 name"),
    ("duplicate-devices", {"type": "PodBound", "at_ms": 0, "name": "p", "namespace": "ns", "node": "n",
                           "gpu_devices": [1, 1]}, "schema", "gpu_devices has duplicates"),
    ("bad-phase", {"type": "PodFinished", "at_ms": 0, "name": "p", "namespace": "ns", "phase": "Running"},
     "schema", "phase: Input should be 'Succeeded' or 'Failed'"),
]
# fmt: on


@pytest.mark.parametrize(("raw", "code", "fragment"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_input_is_rejected_with_reason(raw: Any, code: str, fragment: str) -> None:
    with pytest.raises(EventError) as info:
        parse_event(raw)
    assert info.value.reason_code == code
    assert fragment in info.value.message


# --------------------------------------------------------------------------- units

GOOD: list[tuple[Callable[[Any], int], Any, int]] = [
    (parse_cpu_millicores, "500m", 500),
    (parse_cpu_millicores, "2", 2000),
    (parse_cpu_millicores, "1.5", 1500),
    (parse_cpu_millicores, 2, 2000),
    (parse_cpu_millicores, 0.25, 250),
    (parse_cpu_millicores, "0", 0),
    (parse_bytes, "16Gi", 16 * 2**30),
    (parse_bytes, "1G", 10**9),
    (parse_bytes, "1000", 1000),
    (parse_bytes, "1e9", 10**9),
    (parse_bytes, "1E", 10**18),  # a bare E is the exa suffix, not an exponent
    (parse_bytes, "1.5Ki", 1536),
    (parse_bytes, "128974848", 128974848),
    (parse_bytes, "129M", 129 * 10**6),
    (parse_bytes, "123Mi", 123 * 2**20),
    (parse_bytes, "2k", 2000),
    (parse_bytes, "1Pi", 2**50),
    (parse_bytes, 1024, 1024),
    (parse_gpu_milli, 2, 2000),
    (parse_gpu_milli, "1", 1000),
    (parse_gpu_milli, "0.5", 500),
    (parse_gpu_milli, 0.5, 500),
    (parse_gpu_milli, "0.333", 330),  # KAI keeps two decimals
    (parse_gpu_milli, "0.285", 280),  # KAI's float64 product is 28.4999..., rounded to 28
    (parse_gpu_milli, "1.5", 1500),
    (parse_gpu_milli, "0", 0),
    (parse_fraction_milli, "0.5", 500),
    (parse_fraction_milli, "1", 1000),
    (parse_fraction_milli, 0.25, 250),
    (parse_fraction_milli, "0.333", 330),
    (parse_fraction_milli, "0.01", 10),
]


@pytest.mark.parametrize(("parse", "value", "expected"), GOOD, ids=lambda x: getattr(x, "__name__", repr(x)))
def test_unit_parsers(parse: Callable[[Any], int], value: Any, expected: int) -> None:
    assert parse(value) == expected


BAD: list[tuple[Callable[[Any], int], Any, str]] = [
    (parse_cpu_millicores, "-100m", "negative CPU request -100m"),
    (parse_cpu_millicores, "0.0005", "is not a whole number of millicores"),
    (parse_cpu_millicores, "two", "invalid CPU quantity 'two'"),
    (parse_cpu_millicores, "", "invalid CPU quantity ''"),
    (parse_cpu_millicores, True, "must be a number or string"),
    (parse_cpu_millicores, float("nan"), "must be finite"),
    (parse_bytes, "5Gb", "unknown unit 'Gb' in memory quantity '5Gb'"),
    (parse_bytes, "1 Gi", "unknown unit ' Gi' in memory quantity '1 Gi'"),
    (parse_bytes, "-1Gi", "negative memory request -1Gi"),
    (parse_bytes, "0.5", "is not a whole number of bytes"),
    (parse_bytes, "1e999999999", "exponent out of range"),
    (parse_bytes, "16Ei", "too large"),
    (parse_gpu_milli, "-1", "negative GPU request -1"),
    (parse_gpu_milli, "0.001", "rounds to 0"),
    (parse_fraction_milli, "0", "GPU fraction must be > 0 and <= 1, got '0'"),
    (parse_fraction_milli, "1.5", "GPU fraction must be > 0 and <= 1, got '1.5'"),
    (parse_fraction_milli, "-0.5", "negative GPU fraction -0.5"),
    (parse_fraction_milli, "0.004", "rounds to 0"),
]


@pytest.mark.parametrize(("parse", "value", "fragment"), BAD, ids=lambda x: getattr(x, "__name__", repr(x)))
def test_unit_parsers_reject(parse: Callable[[Any], int], value: Any, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse(value)
    assert fragment in str(info.value)
