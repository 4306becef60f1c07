"""A compiled fast path for decoding events: msgspec structs in front of the pydantic models.

Every contract-v1 event type of :mod:`ingest.events` has a frozen msgspec struct here with the same name
and the same v1 fields, defaults and constraints. :meth:`FastPath.decode` turns the JSON of a *valid* v1
event into such a struct, or returns ``None`` when it cannot decide: invalid JSON, an unknown type, version
or field, a value of the wrong type or out of range, a model validator that would fail. Contract v2 is
never decoded here: ``v`` is ``Literal[1]``, the v2 fields (a model's ``V2_FIELDS``, ``PodRequests.extended``)
are not struct fields and the v2-only types have no struct, so ``"v": 2``, any v2 field present in the JSON
and ``ForeignPodUpserted`` / ``PodUngated`` all go to pydantic. A struct still has every v2 field the fold
reads, as a class attribute equal to the model's empty default. The caller then runs the full pydantic
validation (:func:`ingest.events.parse_event`), which raises the error, so error reason codes and messages
come from one place. An object that might hold a key twice (msgspec would keep the last value) is left to
pydantic's path too, which refuses it (:func:`_keys_may_repeat`). The fast path never accepts what pydantic rejects and never gives a different value:
``tests/ingest/test_fastdecode.py`` checks that with hypothesis.

Why msgspec: it checks types and numeric / length constraints in C while decoding, an order of magnitude
faster than ``json.loads`` + pydantic or pydantic-core's ``validate_json`` (which still builds nested
pydantic models and runs Python validators); docs/benchmarks.md has the figures. The fold
(:class:`scheduler.service.Folder`) applies the structs directly (they have the attributes of the models);
:meth:`FastPath.to_model` builds the equal pydantic model for :func:`~ingest.events.parse_event`.

This module does not import :mod:`ingest.events` (which imports it): the models are handed to
:class:`FastPath`, which compares each struct with its model and leaves out of the fast path any struct
whose field names, defaults or model validators differ (its events then always go through pydantic);
``tests/ingest/test_fastdecode.py`` fails on such drift so it gets fixed here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Final, Literal, Union

import msgspec
from msgspec import Meta, Struct, field

__all__ = [
    "DNS1123_LABEL",
    "DNS1123_SUBDOMAIN",
    "EVENT_STRUCTS",
    "LABEL_KEY",
    "LABEL_VALUE",
    "LIMITS",
    "SAFE_TEXT",
    "FastEvent",
    "FastPath",
]

# Names as Kubernetes validates them (apimachinery's IsDNS1123Subdomain / IsDNS1123Label / IsQualifiedName /
# IsValidLabelValue). Used with fullmatch; the msgspec patterns below end in \Z because msgspec searches and
# "$" would also match before a trailing newline.
_SUB = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_QNAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
DNS1123_SUBDOMAIN: Final = re.compile(_SUB)
DNS1123_LABEL: Final = re.compile(_LABEL)
LABEL_KEY: Final = re.compile(rf"((?=[^/]{{1,253}}/){_SUB}/)?{_QNAME}")
LABEL_VALUE: Final = re.compile(rf"({_QNAME})?")
LABEL_VALUE_OR_KEY: Final = re.compile(rf"({LABEL_KEY.pattern})?")  # a toleration's key: empty = every key
# Free text (reasons, display names, uids): no control characters (NUL included), no bidirectional
# overrides or marks that make a name read differently than it compares, no lone surrogates (not UTF-8).
SAFE_TEXT: Final = re.compile(
    r"[^\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]*"
)
_INTEGER = re.compile(r"[+-]?\d+")

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


class _Limits:
    """The range of every quantity in the contract: what the engine's integer columns, the audit store's
    types and a cycle's time can hold, with Kubernetes' own limits as the guide (docs/reliability.md)."""

    TIME_MS: Final = 4_102_444_800_000  # 2100-01-01T00:00:00Z: at_ms, created_at_ms, durations
    CPU_MILLI: Final = 2**40  # ~1.1e9 cores on one node or pod
    MEMORY_BYTES: Final = 2**50  # 1 PiB
    STORAGE_BYTES: Final = 2**60  # 1 EiB: a volume claim's requested storage
    GPUS: Final = 256  # devices on a node or asked by a pod (a node has 8-16 today)
    GPU_MEMORY_MIB: Final = 2**20  # 1 TiB per device
    MAX_PODS: Final = 2**20
    EXTENDED: Final = 2**50  # an extended resource's amount (hugepages are in bytes)
    QUOTA: Final = 2**53  # a queue's quota / limit in engine units (milli-GPU, millicores, bytes)
    WEIGHT: Final = 1_000_000.0  # over_quota_weight
    INT32_MIN: Final = _INT32_MIN  # priorities (PriorityClass values are int32), counts
    INT32_MAX: Final = _INT32_MAX
    NAME: Final = 253  # DNS-1123 subdomain
    LABEL: Final = 63  # DNS-1123 label, label value, name part of a label key
    TEXT: Final = 1024  # free text
    UID: Final = 512
    LIST: Final = 256  # gpu_devices


LIMITS: Final = _Limits


def _pattern(rx: re.Pattern[str]) -> str:
    return f"^(?:{rx.pattern})\\Z"


NonNegInt = Annotated[int, Meta(ge=0, le=2**63 - 1)]
TimeMs = Annotated[int, Meta(ge=0, le=LIMITS.TIME_MS)]
Cpu = Annotated[int, Meta(ge=0, le=LIMITS.CPU_MILLI)]
Memory = Annotated[int, Meta(ge=0, le=LIMITS.MEMORY_BYTES)]
Gpus = Annotated[int, Meta(ge=0, le=LIMITS.GPUS)]
GpuMemory = Annotated[int, Meta(gt=0, le=LIMITS.GPU_MEMORY_MIB)]
Quota = Annotated[int, Meta(ge=0, le=LIMITS.QUOTA)]
Int32 = Annotated[int, Meta(ge=_INT32_MIN, le=_INT32_MAX)]
Count = Annotated[int, Meta(ge=1, le=_INT32_MAX)]
Name = Annotated[str, Meta(min_length=1, max_length=LIMITS.NAME, pattern=_pattern(DNS1123_SUBDOMAIN))]
Namespace = Annotated[str, Meta(min_length=1, max_length=LIMITS.LABEL, pattern=_pattern(DNS1123_LABEL))]
LabelKey = Annotated[
    str, Meta(min_length=1, max_length=LIMITS.NAME + 1 + LIMITS.LABEL, pattern=_pattern(LABEL_KEY))
]
LabelValue = Annotated[str, Meta(max_length=LIMITS.LABEL, pattern=_pattern(LABEL_VALUE))]
Text = Annotated[str, Meta(max_length=LIMITS.TEXT, pattern=_pattern(SAFE_TEXT))]
Word = Annotated[str, Meta(min_length=1, max_length=LIMITS.TEXT, pattern=_pattern(SAFE_TEXT))]
Uid = Annotated[str, Meta(max_length=LIMITS.UID, pattern=_pattern(SAFE_TEXT))]
Labels = dict[LabelKey, LabelValue]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class _Rec(Struct, frozen=True, forbid_unknown_fields=True, kw_only=True, gc=False):
    """A nested record (no tag)."""


class _Ev(Struct, frozen=True, forbid_unknown_fields=True, kw_only=True, gc=False, tag_field="type"):
    """Fields every event carries; ``type`` is the msgspec tag, exposed as a class attribute."""

    type: ClassVar[str]
    # Contract v1 only: an event that says "v": 2, carries a v2 field or is a v2-only type does not decode
    # here (wrong literal, unknown field, unknown tag) and goes through pydantic.
    v: Literal[1] = 1
    uid: Uid | None = ""  # a missing, empty or null uid defaults to the object's natural key (see decode)
    at_ms: TimeMs


class Taint(_Rec, frozen=True, kw_only=True):
    key: LabelKey
    value: LabelValue = ""
    effect: TaintEffect


class NodeUpserted(_Ev, tag="NodeUpserted", frozen=True, kw_only=True):
    type: ClassVar[str] = "NodeUpserted"
    name: Name
    cpu_millicores: Cpu
    memory_bytes: Memory
    gpus: Gpus = 0
    gpu_memory_mib: GpuMemory | None = None
    gpu_model: Text | None = None
    max_pods: Annotated[int, Meta(ge=0, le=LIMITS.MAX_PODS)] = 110
    labels: Labels = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    ready: bool = True
    unschedulable: bool = False
    extended: ClassVar[dict[str, int]] = {}  # contract v2: events that carry it take the pydantic path


class NodeRemoved(_Ev, tag="NodeRemoved", frozen=True, kw_only=True):
    type: ClassVar[str] = "NodeRemoved"
    name: Name


class QueueResource(_Rec, frozen=True, kw_only=True):
    quota: Quota | None
    limit: Quota | None = None
    over_quota_weight: Annotated[float, Meta(ge=0, le=LIMITS.WEIGHT)] = 1.0


def _gpu_default() -> QueueResource:
    return QueueResource(quota=0)


def _unlimited() -> QueueResource:
    return QueueResource(quota=None)


class QueueResources(_Rec, frozen=True, kw_only=True):
    gpu: QueueResource = field(default_factory=_gpu_default)
    cpu: QueueResource = field(default_factory=_unlimited)
    memory: QueueResource = field(default_factory=_unlimited)


class QueueUpserted(_Ev, tag="QueueUpserted", frozen=True, kw_only=True):
    type: ClassVar[str] = "QueueUpserted"
    name: Name
    parent: Name | None = None
    priority: Int32 = 100
    display_name: Text | None = None
    resources: QueueResources = field(default_factory=QueueResources)
    preempt_min_runtime_ms: TimeMs | None = None
    reclaim_min_runtime_ms: TimeMs | None = None
    node_pool: ClassVar[str | None] = None  # contract v2: events that set it take the pydantic path


class QueueDeleted(_Ev, tag="QueueDeleted", frozen=True, kw_only=True):
    type: ClassVar[str] = "QueueDeleted"
    name: Name


class PodGroupUpserted(_Ev, tag="PodGroupUpserted", frozen=True, kw_only=True):
    type: ClassVar[str] = "PodGroupUpserted"
    name: Name
    namespace: Namespace
    queue: Name
    min_member: Count = 1
    priority_class: Name | None = None
    priority: Int32 | None = None
    preemptible: bool | None = None
    created_at_ms: TimeMs
    # Contract v2 (topology constraint): events that set one take the pydantic path.
    topology: ClassVar[str | None] = None
    required_topology_level: ClassVar[str | None] = None
    preferred_topology_level: ClassVar[str | None] = None
    subgroups: ClassVar[list[Any]] = []  # read-only empty default, never mutated
    min_sub_group: ClassVar[int | None] = None
    k8s_uid: ClassVar[str | None] = None
    node_pool: ClassVar[str | None] = None
    preemption_delay_ms: ClassVar[int | None] = None
    staleness_grace_ms: ClassVar[int | None] = None


class PodGroupDeleted(_Ev, tag="PodGroupDeleted", frozen=True, kw_only=True):
    type: ClassVar[str] = "PodGroupDeleted"
    name: Name
    namespace: Namespace


class PodRequests(_Rec, frozen=True, kw_only=True):
    cpu_millicores: Cpu = 0
    memory_bytes: Memory = 0
    gpus: Gpus = 0
    gpu_fraction_milli: Annotated[int, Meta(ge=1, le=1000)] | None = None
    gpu_fraction_devices: Annotated[int, Meta(ge=1, le=LIMITS.GPUS)] = 1
    gpu_memory_mib: GpuMemory | None = None
    extended: ClassVar[dict[str, int]] = {}  # contract v2 (see module docstring)


class NodeSelectorRequirement(_Rec, frozen=True, kw_only=True):
    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[Text] = field(default_factory=list)


class NodeSelectorTerm(_Rec, frozen=True, kw_only=True):
    match_expressions: Annotated[list[NodeSelectorRequirement], Meta(min_length=1)]


class Toleration(_Rec, frozen=True, kw_only=True):
    key: Annotated[
        str, Meta(max_length=LIMITS.NAME + 1 + LIMITS.LABEL, pattern=_pattern(LABEL_VALUE_OR_KEY))
    ] = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: LabelValue = ""
    effect: TaintEffect | None = None


class PodSubmitted(_Ev, tag="PodSubmitted", frozen=True, kw_only=True):
    type: ClassVar[str] = "PodSubmitted"
    name: Name
    namespace: Namespace
    pod_group: Name
    queue: Name | None = None
    requests: PodRequests = field(default_factory=PodRequests)
    node_selector: Labels = field(default_factory=dict)
    allowed_nodes: list[Name] | None = None
    node_affinity: list[NodeSelectorTerm] = field(default_factory=list)
    tolerations: list[Toleration] = field(default_factory=list)
    task_priority: Int32 = 0
    created_at_ms: TimeMs
    scheduler_name: Name = "hourglass"
    # Contract v2 fields: an event that sets one is not decoded here (unknown field), so a struct always
    # has them empty, as the model's defaults.
    labels: ClassVar[dict[str, str]] = {}
    host_ports: ClassVar[list[Any]] = []
    pod_affinity: ClassVar[list[Any]] = []
    pod_anti_affinity: ClassVar[list[Any]] = []
    preferred_node_affinity: ClassVar[list[Any]] = []
    topology_spread: ClassVar[list[Any]] = []
    scheduling_gates: ClassVar[list[str]] = []
    volumes: ClassVar[list[Any]] = []
    disks: ClassVar[list[Any]] = []


class PodBound(_Ev, tag="PodBound", frozen=True, kw_only=True):
    type: ClassVar[str] = "PodBound"
    name: Name
    namespace: Namespace
    node: Name
    gpu_devices: Annotated[list[Annotated[int, Meta(ge=0, lt=LIMITS.GPUS)]], Meta(max_length=LIMITS.GPUS)] = (
        field(default_factory=list)
    )


class PodReleasing(_Ev, tag="PodReleasing", frozen=True, kw_only=True):
    type: ClassVar[str] = "PodReleasing"
    name: Name
    namespace: Namespace
    reason: Word


class PodFinished(_Ev, tag="PodFinished", frozen=True, kw_only=True):
    type: ClassVar[str] = "PodFinished"
    name: Name
    namespace: Namespace
    phase: Literal["Succeeded", "Failed"]


class PodDeleted(_Ev, tag="PodDeleted", frozen=True, kw_only=True):
    type: ClassVar[str] = "PodDeleted"
    name: Name
    namespace: Namespace


class ClockTick(_Ev, tag="ClockTick", frozen=True, kw_only=True):
    type: ClassVar[str] = "ClockTick"
    uid: Uid = "clock"


FastEvent = Union[  # noqa: UP007 -- a runtime union object for msgspec
    NodeUpserted,
    NodeRemoved,
    QueueUpserted,
    QueueDeleted,
    PodGroupUpserted,
    PodGroupDeleted,
    PodSubmitted,
    PodBound,
    PodReleasing,
    PodFinished,
    PodDeleted,
    ClockTick,
]
"""Any fast-decoded event; each has the attributes of the pydantic model of the same name."""

EVENT_STRUCTS: Final[tuple[type[_Ev], ...]] = FastEvent.__args__  # type: ignore[attr-defined]

# The record structs each event struct contains, at any depth.
_NESTED: Final[dict[type[Struct], tuple[type[Struct], ...]]] = {
    NodeUpserted: (Taint,),
    QueueUpserted: (QueueResources, QueueResource),
    PodSubmitted: (PodRequests, NodeSelectorTerm, NodeSelectorRequirement, Toleration),
}

# Model validators the checks below reproduce, by model name; every event model also has _default_uid.
# A validator added to events.py and not listed here takes the model out of the fast path.
_REPRODUCED: Final[dict[str, frozenset[str]]] = {
    "QueueResource": frozenset({"_quota_within_limit"}),
    "QueueUpserted": frozenset({"_default_uid", "_not_own_parent"}),
    "PodRequests": frozenset({"_one_gpu_shape"}),
    "NodeSelectorRequirement": frozenset({"_values_fit_operator"}),
    "Toleration": frozenset({"_consistent"}),
    "PodBound": frozenset({"_default_uid", "_distinct_devices"}),
    # Check only the v2 topology and subgroup fields, which a struct never carries (always empty here).
    "PodGroupUpserted": frozenset({"_default_uid", "_level_needs_topology", "_subgroup_tree"}),
}


# --------------------------------------------------------------------------- model validators, again
# Each returns True when the pydantic validator(s) of that model would pass; False sends the event to
# pydantic, which raises the error with its message.


_GOOD_NAMES: set[str] = set()  # DNS-1123 names already checked (queue names repeat in every pod event)


def _dns1123(name: str) -> bool:
    if name in _GOOD_NAMES:
        return True
    if len(name) > 253 or DNS1123_SUBDOMAIN.fullmatch(name) is None:
        return False
    if len(_GOOD_NAMES) < 100_000:
        _GOOD_NAMES.add(name)
    return True


def _queue_resource_ok(q: QueueResource) -> bool:
    # inf: an overflowing literal (1e999) decodes as inf; pydantic refuses it (allow_inf_nan=False).
    return (q.quota is None or q.limit is None or q.quota <= q.limit) and q.over_quota_weight != float("inf")


def _queue_ok(e: QueueUpserted) -> bool:
    r = e.resources
    return (
        _dns1123(e.name)
        and (e.parent is None or (_dns1123(e.parent) and e.parent != e.name))
        and _queue_resource_ok(r.gpu)
        and _queue_resource_ok(r.cpu)
        and _queue_resource_ok(r.memory)
    )


def _requests_ok(r: PodRequests) -> bool:
    shared = r.gpu_fraction_milli is not None
    if r.gpu_memory_mib is not None:
        if shared:
            return False
        shared = True
    if shared and r.gpus > 0:
        return False
    return shared or r.gpu_fraction_devices <= 1


def _requirement_ok(m: NodeSelectorRequirement) -> bool:
    op, n = m.operator, len(m.values)
    if op in ("In", "NotIn"):
        return n > 0
    if op in ("Exists", "DoesNotExist"):
        return n == 0
    return n == 1 and _INTEGER.fullmatch(m.values[0]) is not None


def _toleration_ok(t: Toleration) -> bool:
    if t.operator == "Exists" and t.value:
        return False
    return bool(t.key) or t.operator == "Exists"


def _pod_ok(e: PodSubmitted) -> bool:
    queue = e.queue
    if queue is not None and not _dns1123(queue):
        return False
    if not _requests_ok(e.requests):
        return False
    if e.node_affinity and not all(_requirement_ok(m) for t in e.node_affinity for m in t.match_expressions):
        return False
    return not e.tolerations or all(_toleration_ok(t) for t in e.tolerations)


def _distinct_devices(e: PodBound) -> bool:
    return len(set(e.gpu_devices)) == len(e.gpu_devices)


_CHECKS: Final[dict[type[Struct], Callable[[Any], bool]]] = {
    QueueUpserted: _queue_ok,
    QueueDeleted: lambda e: _dns1123(e.name),
    PodGroupUpserted: lambda e: _dns1123(e.queue),
    PodSubmitted: _pod_ok,
    PodBound: _distinct_devices,
}

# Events whose default uid is "namespace/name" (EventBase._default_uid); the others use "name".
_NAMESPACED: Final = (
    PodGroupUpserted,
    PodGroupDeleted,
    PodSubmitted,
    PodBound,
    PodReleasing,
    PodFinished,
    PodDeleted,
)


# --------------------------------------------------------------------------- the fast path


_V2_NESTED: Final[dict[str, set[str]]] = {"PodRequests": {"extended"}}


def _drift(struct: type[Struct], model: type[Any]) -> list[str]:
    """How ``struct`` differs from ``model`` (field names, required-ness, plain defaults, validators)."""
    name = model.__name__
    struct_fields = {f.name: f for f in msgspec.structs.fields(struct)}
    # Contract-v2 fields are not mirrored: a struct holds them as empty class attributes, and an event that
    # sets one fails to decode here (unknown field) and goes through pydantic.
    v2 = set(getattr(model, "V2_FIELDS", ())) | _V2_NESTED.get(name, set())
    model_fields = {k: f for k, f in model.model_fields.items() if k != "type" and k not in v2}
    if set(struct_fields) != set(model_fields):
        return [f"{name}: fields {sorted(model_fields)} != {sorted(struct_fields)}"]
    problems: list[str] = []
    for key, mf in model_fields.items():
        sf = struct_fields[key]
        if mf.is_required() != sf.required:
            problems.append(f"{name}.{key}: required in one, not in the other")
        elif mf.default_factory is None and not mf.is_required() and mf.default != sf.default:
            problems.append(f"{name}.{key}: default {mf.default!r} != {sf.default!r}")
    decorators = model.__pydantic_decorators__
    validators = set(decorators.model_validators) | set(decorators.field_validators)
    expected = _REPRODUCED.get(name, frozenset({"_default_uid"}) if "uid" in model_fields else frozenset())
    if "uid" in model_fields:
        # The version validator only acts on v2 content or "v": 2, which a struct never decodes (``v`` is 1).
        expected = expected | {"_version"}
    if validators != expected:
        problems.append(f"{name}: validators {sorted(validators)}, fast path reproduces {sorted(expected)}")
    # A struct answers the fold's reads of a v2 field with the model's empty default (a class attribute).
    for key in sorted(v2):
        mf = model.model_fields.get(key)
        if mf is None:
            problems.append(f"{name}.{key}: contract-v2 field missing from the model")
            continue
        default = mf.get_default(call_default_factory=True)
        if not hasattr(struct, key):
            problems.append(f"{name}.{key}: no class attribute for the contract-v2 field")
        elif type(getattr(struct, key)) is not type(default) or getattr(struct, key) != default:
            problems.append(f"{name}.{key}: class attribute {getattr(struct, key)!r} != default {default!r}")
    return problems


_GENERIC: Final = msgspec.json.Decoder()
_ENCODE: Final = msgspec.json.Encoder().encode
_QUOTE_SPACE: Final = (b'" ', b'"\n', b'"\t', b'"\r')
_QUOTE_SPACE_STR: Final = tuple(q.decode() for q in _QUOTE_SPACE)


def _keys_may_repeat(raw: bytes | str) -> bool:
    """True unless ``raw`` surely has no object key twice (msgspec keeps the last of two, silently).

    A decoded object keeps one value per key, so its canonical encoding has as many ``":`` as ``raw`` has
    keys when no key repeats. Strings can hold ``":`` only as ``\\":``, which both encodings keep; a
    key written with blanks before its colon, or a quote written as an escape, makes the counts differ or
    is not counted: those inputs are left to the full parse (which rejects repeated keys precisely).
    """
    if isinstance(raw, str):
        if any(q in raw for q in _QUOTE_SPACE_STR):
            return True
        return raw.count('":') != _ENCODE(_GENERIC.decode(raw)).count(b'":')
    if any(q in raw for q in _QUOTE_SPACE):
        return True
    return raw.count(b'":') != _ENCODE(_GENERIC.decode(raw)).count(b'":')


class FastPath:
    """The fast decoder for the given pydantic models (by class name: event and nested record models).

    Structs that do not mirror their model (:attr:`drift`) are left out: their events decode to ``None``.
    """

    def __init__(self, models: Mapping[str, type[Any]]) -> None:
        self.models = models
        self.drift: dict[str, list[str]] = {}
        for struct in (*EVENT_STRUCTS, *{s for nested in _NESTED.values() for s in nested}):
            model = models.get(struct.__name__)
            problems = [f"no model {struct.__name__}"] if model is None else _drift(struct, model)
            if problems:
                self.drift[struct.__name__] = problems
        self.types: tuple[type[_Ev], ...] = tuple(
            s
            for s in EVENT_STRUCTS
            if s.__name__ not in self.drift and not any(n.__name__ in self.drift for n in _NESTED.get(s, ()))
        )
        decoder: msgspec.json.Decoder[Any] | None = None
        if self.types:
            decoder = msgspec.json.Decoder(Union[self.types])  # noqa: UP007
        self._decoder = decoder

    def decode(self, raw: bytes | str) -> FastEvent | None:
        """The event in ``raw`` as a struct, or ``None`` when only the full validation can decide."""
        if self._decoder is None:
            return None
        try:
            e = self._decoder.decode(raw)
            if _keys_may_repeat(raw):
                return None
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return None
        check = _CHECKS.get(type(e))
        if check is not None and not check(e):
            return None
        if not e.uid and not isinstance(e, ClockTick):
            uid = f"{e.namespace}/{e.name}" if isinstance(e, _NAMESPACED) else e.name
            e = msgspec.structs.replace(e, uid=uid)
        event: FastEvent = e
        return event

    def to_model(self, value: Any) -> Any:
        """The pydantic model equal to a decoded struct (lists and dicts of them too), built without
        validating again (what ``model_construct`` does, minus its per-field default handling: a struct
        has every field). Every field counts as set (``model_fields_set``), present in the JSON or not."""
        if isinstance(value, list):
            return [self.to_model(v) for v in value]
        if isinstance(value, dict):
            return dict(value)
        if not isinstance(value, Struct):
            return value
        model: Any = self.models[type(value).__name__]
        values: dict[str, Any] = {}
        for name in model.model_fields:
            v = getattr(value, name)  # "type": the event struct's class attribute
            values[name] = self.to_model(v) if isinstance(v, list | dict | Struct) else v
        m = model.__new__(model)
        _setattr(m, "__dict__", values)
        _setattr(m, "__pydantic_fields_set__", set(values))
        _setattr(m, "__pydantic_extra__", None)
        _setattr(m, "__pydantic_private__", None)
        return m


_setattr = object.__setattr__
