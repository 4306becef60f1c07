"""The compiled fast path (``ingest/fastdecode.py``) decides exactly like the pydantic models.

For valid and invalid inputs alike, ``FAST_PATH.decode`` either returns ``None`` (pydantic decides) or a
struct equal to what pydantic gives: same model once converted, same ``dump_event`` bytes, same fold.
``parse_event`` therefore returns the same event, or raises the same ``EventError``, with and without it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.events import EVENT_TYPES, FAST_PATH, EventError, dump_event, parse_event
from scheduler.engine.state import fold
from tests.support.synthetic import SyntheticSpec, synthetic_events

# Names at and past every syntax and length rule of the contract (DNS-1123, label keys and values, text).
NAMES = st.sampled_from(
    [
        "a", "q1", "team-a", "node-1", "x.y", "default", "A", "-bad", "a_b", "é", "",
        "kubernetes.io/hostname", "a/b", "A_b.c", "a\x00b", "a\u202eb", "a\n", "x" * 63, "x" * 64, "x" * 253,
        "x" * 254, "a b",
    ]
)  # fmt: skip
# Integers at and past every range of the contract (ingest.fastdecode.LIMITS) and of int64.
INTS = st.one_of(
    st.integers(min_value=-3, max_value=3000),
    st.sampled_from(
        [
            2**63 - 1, 2**63, 2**64, -(2**63), -(2**63) - 1, 10**30, 4_102_444_800_000, 4_102_444_800_001,
            2**40, 2**40 + 1, 2**50, 2**50 + 1, 2**53, 2**53 + 1, 2**20, 2**20 + 1, 256, 257, 2**31 - 1, 2**31,
            -(2**31), -(2**31) - 1,
        ]
    ),
)  # fmt: skip
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    INTS,
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.sampled_from([0.0, 1.0, -0.0, 0.5]),
    NAMES,
    st.text(max_size=4),
    st.sampled_from(["In", "NotIn", "Exists", "Gt", "Lt", "Equal", "NoSchedule", "NoExecute", "Failed", "1"]),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(NAMES, inner, max_size=3)),
    max_leaves=6,
)
OPT_INT = st.one_of(st.none(), INTS)


def _base(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"type": st.just(kind), "at_ms": INTS},
        optional={"v": st.sampled_from([1, 1, 2, True, 1.0]), "uid": st.one_of(NAMES, st.none())},
    )


def _event(
    kind: str, required: dict[str, Any], optional: dict[str, Any]
) -> st.SearchStrategy[dict[str, Any]]:
    fields = st.fixed_dictionaries(required, optional=optional)
    return st.tuples(_base(kind), fields).map(lambda t: {**t[0], **t[1]})


TAINT = st.fixed_dictionaries(
    {"key": NAMES, "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute", "Bad"])},
    optional={"value": NAMES},
)
QUEUE_RESOURCE = st.fixed_dictionaries(
    {"quota": OPT_INT},
    optional={"limit": OPT_INT, "over_quota_weight": st.one_of(INTS, st.floats(allow_nan=False, width=64))},
)
REQUESTS = st.fixed_dictionaries(
    {},
    optional={
        "cpu_millicores": INTS,
        "memory_bytes": INTS,
        "gpus": st.one_of(st.integers(0, 3), st.sampled_from([256, 257])),
        "gpu_fraction_milli": st.one_of(st.none(), st.integers(0, 1001)),
        "gpu_fraction_devices": st.one_of(st.integers(0, 3), st.sampled_from([256, 257])),
        "gpu_memory_mib": st.one_of(st.none(), st.integers(-1, 2)),
    },
)
REQUIREMENT = st.fixed_dictionaries(
    {"key": NAMES, "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Eq"])},
    optional={"values": st.lists(st.sampled_from(["1", "+2", "x", "-3", "1.5"]), max_size=2)},
)
TOLERATION = st.fixed_dictionaries(
    {},
    optional={
        "key": NAMES,
        "operator": st.sampled_from(["Equal", "Exists", "Other"]),
        "value": NAMES,
        "effect": st.sampled_from([None, "NoSchedule", "NoExecute", "Bad"]),
    },
)
LABELS = st.dictionaries(NAMES, NAMES, max_size=3)

EVENTS = st.one_of(
    _event(
        "NodeUpserted",
        {"name": NAMES, "cpu_millicores": INTS, "memory_bytes": INTS},
        {
            "gpus": INTS,
            "gpu_memory_mib": OPT_INT,
            "gpu_model": st.one_of(st.none(), NAMES),
            "max_pods": INTS,
            "labels": LABELS,
            "taints": st.lists(TAINT, max_size=2),
            "ready": st.booleans(),
            "unschedulable": st.booleans(),
        },
    ),
    _event("NodeRemoved", {"name": NAMES}, {}),
    _event(
        "QueueUpserted",
        {"name": NAMES},
        {
            "parent": st.one_of(st.none(), NAMES),
            "priority": INTS,
            "display_name": st.one_of(st.none(), NAMES),
            "resources": st.fixed_dictionaries(
                {}, optional={"gpu": QUEUE_RESOURCE, "cpu": QUEUE_RESOURCE, "memory": QUEUE_RESOURCE}
            ),
            "preempt_min_runtime_ms": OPT_INT,
            "reclaim_min_runtime_ms": OPT_INT,
        },
    ),
    _event("QueueDeleted", {"name": NAMES}, {}),
    _event(
        "PodGroupUpserted",
        {"name": NAMES, "namespace": NAMES, "queue": NAMES, "created_at_ms": INTS},
        {
            "min_member": INTS,
            "priority_class": st.one_of(st.none(), NAMES),
            "priority": OPT_INT,
            "preemptible": st.one_of(st.none(), st.booleans()),
        },
    ),
    _event("PodGroupDeleted", {"name": NAMES, "namespace": NAMES}, {}),
    _event(
        "PodSubmitted",
        {"name": NAMES, "namespace": NAMES, "pod_group": NAMES, "created_at_ms": INTS},
        {
            "queue": st.one_of(st.none(), NAMES),
            "requests": REQUESTS,
            "node_selector": LABELS,
            "allowed_nodes": st.one_of(st.none(), st.lists(NAMES, max_size=2)),
            "node_affinity": st.lists(
                st.fixed_dictionaries({"match_expressions": st.lists(REQUIREMENT, max_size=2)}), max_size=2
            ),
            "tolerations": st.lists(TOLERATION, max_size=2),
            "task_priority": INTS,
            "scheduler_name": NAMES,
        },
    ),
    _event(
        "PodBound",
        {"name": NAMES, "namespace": NAMES, "node": NAMES},
        {"gpu_devices": st.lists(st.one_of(st.integers(-1, 3), st.sampled_from([255, 256])), max_size=3)},
    ),
    _event("PodReleasing", {"name": NAMES, "namespace": NAMES, "reason": NAMES}, {}),
    _event(
        "PodFinished",
        {"name": NAMES, "namespace": NAMES, "phase": st.sampled_from(["Succeeded", "Failed", "x"])},
        {},
    ),
    _event("PodDeleted", {"name": NAMES, "namespace": NAMES}, {}),
    _event("ClockTick", {}, {}),
)


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    """A near-valid event, then up to two edits anywhere in it: a field dropped, added or replaced."""
    event: Any = draw(EVENTS)
    for _ in range(draw(st.integers(0, 2))):
        node = event
        while isinstance(node, dict | list) and node and draw(st.booleans()):
            child = draw(st.sampled_from(list(node)) if isinstance(node, dict) else st.sampled_from(node))
            if not isinstance(child, dict | list) or not child:
                break
            node = child if isinstance(child, dict | list) else node
        if isinstance(node, dict):
            action = draw(st.sampled_from(["drop", "add", "set"]))
            if action == "drop" and node:
                node.pop(draw(st.sampled_from(sorted(node))))
            elif action == "add":
                node[draw(NAMES)] = draw(JSON_VALUES)
            elif node:
                node[draw(st.sampled_from(sorted(node)))] = draw(JSON_VALUES)
        elif isinstance(node, list) and node:
            node[draw(st.integers(0, len(node) - 1))] = draw(JSON_VALUES)
        elif draw(st.booleans()):
            event = draw(JSON_VALUES)
    return event


def _reference(data: Any) -> Any:
    """pydantic's verdict: parse_event on an already-decoded dict never takes the fast path."""
    try:
        return parse_event(data) if isinstance(data, dict) else parse_event(json.dumps(data))
    except EventError as exc:
        return (exc.reason_code, exc.message)


def assert_fast_matches(raw: bytes | str) -> bool:
    """The fast path on ``raw`` defers or agrees with pydantic; True when it decided."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        data = None
    fast = FAST_PATH.decode(raw)
    if fast is None:
        return False
    ref = _reference(data)
    assert not isinstance(ref, tuple), f"fast path accepted what pydantic rejects: {ref} for {raw!r}"
    model = FAST_PATH.to_model(fast)
    assert model == ref
    assert dump_event(model) == dump_event(ref)
    assert fold([fast]) == fold([ref])
    return True


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(), st.booleans())
def test_fast_path_defers_or_agrees_with_pydantic(data: Any, sort_keys: bool) -> None:
    raw = json.dumps(data, sort_keys=sort_keys)
    assert_fast_matches(raw)
    assert_fast_matches(raw.encode())
    # parse_event (fast path in front) gives the same event or the same error as pydantic alone.
    try:
        got: Any = parse_event(raw.encode())
    except EventError as exc:
        got = (exc.reason_code, exc.message)
    assert got == _reference(json.loads(raw))


@settings(max_examples=300, deadline=None)
@given(EVENTS)
def test_valid_events_take_the_fast_path(data: dict[str, Any]) -> None:
    """Every event pydantic accepts (from the generator above) is decided by the fast path."""
    ref = _reference(data)
    if isinstance(ref, tuple):
        return
    if data.get("v") == 2:  # a v1 event that says v 2: contract v2, pydantic's
        assert FAST_PATH.decode(json.dumps(data)) is None
        assert FAST_PATH.decode(dump_event(ref)) is None
        return
    assert assert_fast_matches(json.dumps(data)), data
    assert assert_fast_matches(dump_event(ref))


def test_synthetic_cluster_takes_the_fast_path() -> None:
    events = synthetic_events(SyntheticSpec(nodes=20, pending_pods=200, seed=3))
    raws = [dump_event(e) for e in events]
    assert all(assert_fast_matches(r) for r in raws)
    assert [FAST_PATH.to_model(FAST_PATH.decode(r)) for r in raws] == events


@pytest.mark.parametrize(
    "raw",
    [
        b'{"type":"NodeRemoved","at_ms":1,"name":"\\ud800"}',  # lone surrogate
        b'\xef\xbb\xbf{"type":"NodeRemoved","at_ms":1,"name":"a"}',  # UTF-8 BOM
        '{"type":"NodeRemoved","at_ms":1,"name":"a"}'.encode("utf-16"),
        b'{"type":"NodeRemoved","at_ms":1.0,"name":"a"}',
        b'{"type":"NodeRemoved","at_ms":1e3,"name":"a"}',
        b'{"type":"NodeRemoved","at_ms":NaN,"name":"a"}',
        b'{"type":"NodeRemoved","at_ms":true,"name":"a"}',
        b'{"type":"NodeRemoved","at_ms":9223372036854775808,"name":"a"}',
        b'{"type":"QueueUpserted","at_ms":1,"name":"q","resources":{"gpu":{"quota":1,"over_quota_weight":1e999}}}',
        b'{"type":"QueueUpserted","at_ms":1,"name":"q","resources":{"gpu":{"quota":1,"over_quota_weight":Infinity}}}',
        b'{"type":"QueueUpserted","at_ms":1,"name":"q","resources":{"gpu":{"quota":1,"over_quota_weight":2}}}',
        b'{"type":"ClockTick","at_ms":5,"uid":""}',
        b'{"type":"ClockTick","at_ms":5}',
        b'{"type":"PodBound","at_ms":5,"name":"p","namespace":"n","node":"x","uid":""}',
        b'{"type":"PodBound","at_ms":5,"name":"p","namespace":"n","node":"x","gpu_devices":[1,1]}',
        b'{"type":"NodeRemoved","at_ms":1,"name":"a"} trailing',
        b"[]",
        b"",
        b'{"type":"NodeRemoved","at_ms":1,"name":"a","v":2}',
        b'{"type":"Nope","at_ms":1}',
    ],
)
def test_edge_inputs(raw: bytes) -> None:
    assert_fast_matches(raw)
    try:
        got: Any = parse_event(raw)
    except EventError as exc:
        got = (exc.reason_code, exc.message)
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        with pytest.raises(EventError):
            parse_event(raw.decode("utf-8", errors="replace") if raw else raw)
        return
    assert got == _reference(data)


def test_fast_structs_mirror_the_models() -> None:
    """A field, default or validator added to ingest/events.py must be mirrored in ingest/fastdecode.py;
    until it is, that event type silently loses the fast path."""
    assert FAST_PATH.drift == {}
    v1_types = sorted(name for name, model in EVENT_TYPES.items() if not model.V2_ONLY)
    assert sorted(t.__name__ for t in FAST_PATH.types) == v1_types


V2_EVENTS = [
    b'{"type":"PodSubmitted","at_ms":3,"name":"p","namespace":"n","pod_group":"g","created_at_ms":3,'
    b'"labels":{"app":"x"}}',
    b'{"type":"PodSubmitted","at_ms":3,"name":"p2","namespace":"n","pod_group":"g","created_at_ms":3,'
    b'"requests":{"gpus":1,"extended":{"rdma/ib":1}}}',
    b'{"type":"PodSubmitted","at_ms":3,"name":"p3","namespace":"n","pod_group":"g","created_at_ms":3,'
    b'"scheduling_gates":["wait"]}',
    b'{"type":"PodUngated","at_ms":4,"name":"p3","namespace":"n"}',
    b'{"type":"NodeUpserted","at_ms":1,"name":"n1","cpu_millicores":1000,"memory_bytes":1,'
    b'"extended":{"amd.com/gpu":2}}',
    b'{"type":"ForeignPodUpserted","at_ms":2,"name":"ds","namespace":"kube-system","node":"n1",'
    b'"requests":{"cpu_millicores":100}}',
]


@pytest.mark.parametrize("raw", V2_EVENTS)
def test_contract_v2_events_take_the_pydantic_path(raw: bytes) -> None:
    """Events with contract-v2 content are not decoded by the v1 structs; pydantic reads them whole."""
    assert FAST_PATH.decode(raw) is None
    event = parse_event(raw)
    assert event.v == 2
    assert FAST_PATH.decode(dump_event(event)) is None


def test_folder_folds_mixed_v1_and_v2_events_like_the_reference() -> None:
    """The service's fold (fast path where it applies) equals the fold of pydantic-parsed events."""
    from ingest.log import Record
    from scheduler.service import Folder

    v1 = [dump_event(e) for e in synthetic_events(SyntheticSpec(nodes=3, pending_pods=12, seed=5))]
    raws = [*V2_EVENTS[4:5], *v1, *V2_EVENTS[:4], V2_EVENTS[5]]
    folder = Folder("t")
    for i, raw in enumerate(raws):
        assert folder.feed(Record(i, None, raw)) is None
    assert folder.snapshot() == fold([parse_event(r) for r in raws])


# Contract-v2 content for a valid v1 event: (field, value), value non-empty (empty v2 fields are still
# unknown fields to the structs, so they defer too, but dump_event leaves them out).
POD_V2 = st.sampled_from(
    [
        ("labels", {"app": "x"}),
        ("host_ports", [{"port": 8080}]),
        (
            "pod_affinity",
            [{"topology_key": "kubernetes.io/hostname", "label_selector": {"match_labels": {"a": "b"}}}],
        ),
        ("pod_anti_affinity", [{"topology_key": "zone", "weight": 10}]),
        (
            "preferred_node_affinity",
            [{"weight": 5, "match_expressions": [{"key": "k", "operator": "Exists"}]}],
        ),
        ("topology_spread", [{"max_skew": 1, "topology_key": "zone"}]),
        ("scheduling_gates", ["wait"]),
        ("volumes", [{"claim": "data", "bound": False, "binding_mode": "WaitForFirstConsumer"}]),
        ("requests", {"cpu_millicores": 100, "extended": {"example.com/dev": 1}}),
    ]
)


@st.composite
def v2_events(draw: st.DrawFn) -> tuple[list[bytes], list[bytes]]:
    """A small synthetic cluster as v1 events, some of them given contract-v2 content, plus foreign pods
    and ungated pods: (the v2 events, every event in log order)."""
    seed = draw(st.integers(0, 50))
    events = [
        json.loads(dump_event(e)) for e in synthetic_events(SyntheticSpec(nodes=3, pending_pods=8, seed=seed))
    ]
    v2: list[bytes] = []
    out: list[bytes] = []
    gated: list[dict[str, Any]] = []
    for e in events:
        is_v2 = False
        if e["type"] == "NodeUpserted" and draw(st.booleans()):
            e = {**e, "extended": {"amd.com/gpu": draw(st.integers(1, 4))}}
            is_v2 = True
        elif e["type"] == "PodSubmitted" and draw(st.booleans()):
            key, value = draw(POD_V2)
            e = {**e, key: value}
            is_v2 = True
            if key == "scheduling_gates":
                gated.append(e)
        elif e["type"] == "PodGroupUpserted" and draw(st.integers(0, 3)) == 0:
            # a v2 topology constraint, or the v2 metric labels (metadata.uid, node pool)
            extra = (
                {"topology": "t", "required_topology_level": "rack"}
                if draw(st.booleans())
                else {"k8s_uid": "0b6f-uid", "node_pool": "pool-a"}
            )
            e = {**e, **extra}
            is_v2 = True
        elif e["type"] in ("NodeRemoved", "PodGroupUpserted") and draw(st.integers(0, 3)) == 0:
            e = {**e, "v": 2}  # v1 content that says v 2
            is_v2 = True
        if is_v2 and e["v"] == 1:  # dump_event wrote v 1: state v 2 or leave it to its default
            e = {k: v for k, v in e.items() if k != "v"} if draw(st.booleans()) else {**e, "v": 2}
        raw = json.dumps(e, sort_keys=draw(st.booleans())).encode()
        out.append(raw)
        if is_v2:
            v2.append(raw)
        if e["type"] == "NodeUpserted" and draw(st.integers(0, 2)) == 0:
            foreign = {
                "type": "ForeignPodUpserted",
                "at_ms": e["at_ms"],
                "name": f"ds-{e['name']}",
                "namespace": "kube-system",
                "node": e["name"],
                "requests": {"cpu_millicores": draw(st.integers(0, 500))},
            }
            if draw(st.booleans()):
                foreign["labels"] = {"app": "ds"}
            out.append(json.dumps(foreign).encode())
            v2.append(out[-1])
    for e in gated:
        ungated = {
            "type": "PodUngated",
            "at_ms": e["at_ms"] + 1,
            "name": e["name"],
            "namespace": e["namespace"],
        }
        out.append(json.dumps(ungated).encode())
        v2.append(out[-1])
    return v2, out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(v2_events())
def test_v2_events_defer_and_a_mixed_fold_equals_the_reference(case: tuple[list[bytes], list[bytes]]) -> None:
    """Contract-v2 events (v2 fields, "v": 2, v2-only types) never take the fast path, as read or as
    written back; the service's Folder folds the mixed log exactly like fold() of pydantic-parsed events."""
    from ingest.log import Record
    from scheduler.service import Folder

    v2, raws = case
    for raw in v2:
        assert FAST_PATH.decode(raw) is None, raw
        event = parse_event(raw)
        assert event.v == 2
        assert FAST_PATH.decode(dump_event(event)) is None
    for raw in raws:
        if raw not in v2:
            assert FAST_PATH.decode(raw) is not None, raw  # the v1 events keep the fast path
    folder = Folder("t")
    for i, raw in enumerate(raws):
        assert folder.feed(Record(i, None, raw)) is None
    assert folder.snapshot() == fold([parse_event(r) for r in raws])


# The JSON schema of every model the fast path mirrors, as of the last time ingest/fastdecode.py was
# checked against it. A changed type, constraint or literal in events.py (which the import-time drift
# check does not see: it compares names, defaults and validators) changes this fingerprint.
# contract v2: v1 fields unchanged, v2 fields (PodGroupUpserted's topology constraint, subgroups, k8s_uid and
# node_pool too) not mirrored; a v2 term's label_selector may be null (missing: selects no pod): only v2
# events carry terms, so the fast path (v1) is unchanged; a node requirement keyed ingest.events.FIELD_NODE_NAME
# (a matchFields term) is not a label key, so the fast path leaves it to pydantic; a v2 VolumeClaim's zone
# labels and WaitForFirstConsumer fields (only v2 events carry volumes: the fast path is unchanged), a term's namespace_selector /
# match_label_keys / mismatch_label_keys and NamespaceUpserted / NamespaceDeleted (v2 only as well); a v2
# VolumeClaim's storage fields, PodSubmitted's v2 ``disks`` (a class attribute of the struct), and the
# v2-only CSINodeUpserted / CSINodeDeleted / PodVolumesChanged; ForeignPodUpserted's terms, volumes and disks
MIRRORED_SCHEMAS = "c4b830de06ac5fee"


def test_mirrored_models_have_not_changed_since_the_structs_were_checked() -> None:
    schemas = {name: model.model_json_schema() for name, model in sorted(FAST_PATH.models.items())}
    fingerprint = hashlib.sha256(json.dumps(schemas, sort_keys=True).encode()).hexdigest()[:16]
    assert fingerprint == MIRRORED_SCHEMAS, (
        "a model in ingest/events.py changed: mirror the change in ingest/fastdecode.py (and in this "
        "file's generators), then set MIRRORED_SCHEMAS to the new fingerprint"
    )


@pytest.mark.parametrize(
    "raw",
    [
        b'{"type":"NodeRemoved","at_ms":1,"name":"a","name":"b"}',
        b'{"type":"NodeRemoved","at_ms":1,"name":"a","name":"a"}',
        b'{"type":"NodeRemoved","at_ms":1,"name" :"a","name":"b"}',
        '{"type":"NodeRemoved","at_ms":1,"name":"a","name":"b"}',
        b'{"type":"NodeUpserted","at_ms":1,"name":"n","cpu_millicores":1,"memory_bytes":1,'
        b'"labels":{"k":"a","k":"b"}}',
        b'{"type":"PodSubmitted","at_ms":1,"name":"p","namespace":"n","pod_group":"g","created_at_ms":1,'
        b'"requests":{"gpus":1,"gpus":2}}',
    ],
)
def test_a_repeated_key_is_refused_by_both_paths(raw: bytes | str) -> None:
    """One event, one meaning: a key twice in one object is bad JSON, fast path or not."""
    assert FAST_PATH.decode(raw) is None
    with pytest.raises(EventError) as err:
        parse_event(raw)
    assert err.value.reason_code == "bad_json"
    assert "appears twice" in err.value.message


def test_a_key_repeated_in_different_objects_is_fine() -> None:
    raw = (
        b'{"type":"NodeUpserted","at_ms":1,"name":"n","cpu_millicores":1,"memory_bytes":1,'
        b'"taints":[{"key":"a","effect":"NoSchedule"},{"key":"b","effect":"NoSchedule"}]}'
    )
    assert FAST_PATH.decode(raw) is not None
    assert parse_event(raw).name == "n"  # type: ignore[union-attr]
