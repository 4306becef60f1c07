"""Tenants of a simulated cluster: the queue tree, the task -> queue rule and the engine settings.

A trace (e.g. the Alibaba GPU trace) has no tenants, so a small YAML or TOML file supplies them; it is
validated with pydantic and every error names the offending field. Quantities are written in human units
(GPUs, CPU cores, GiB of memory) and converted exactly to engine units (milli-GPU, millicores, bytes); a
value that does not convert exactly (``0.0001`` GPU) is an error, never rounded. The format is documented in
``docs/simulate.md``; the shipped default is ``ingest/data/tenants-default.yaml``.

* :func:`load_tenants` reads and validates a file (``.yaml`` / ``.yml`` / ``.toml``).
* :meth:`TenantsConfig.queue_events` gives the ``QueueUpserted`` events (parents before children).
* :meth:`TenantsConfig.queue_for` maps a task name to a leaf queue with a stable hash (sha256 or crc32 of
  the name, never Python's salted ``hash()``), so the mapping is the same on every run and machine.
* :func:`scheduler.config.session_config` turns ``engine`` into the engine's config.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
import zlib
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ingest.events import QueueResource, QueueResources, QueueUpserted, validation_message

__all__ = [
    "DEFAULT_TENANTS",
    "AssignmentSpec",
    "EngineSpec",
    "JobPrioritySpec",
    "QueueSpec",
    "ResourceSpec",
    "TenantsConfig",
    "TenantsError",
    "load_tenants",
    "parse_tenants",
]

DEFAULT_TENANTS: Final = Path(__file__).resolve().parent / "data" / "tenants-default.yaml"

GIB: Final = 1 << 30
# Engine units per human unit, by resource.
_SCALE: Final[dict[str, int]] = {"gpu": 1000, "cpu": 1000, "memory": GIB}
_UNIT_NAME: Final[dict[str, str]] = {"gpu": "GPUs", "cpu": "cores", "memory": "GiB"}
_ENGINE_UNIT: Final[dict[str, str]] = {"gpu": "milli-GPU", "cpu": "millicores", "memory": "bytes"}

Amount = Annotated[int | float, Field(ge=0, allow_inf_nan=False)]
Seconds = Annotated[int, Field(ge=0)]


class TenantsError(ValueError):
    """A tenants file that cannot be read or does not validate; the message names the file and field."""


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _to_engine(value: int | float, resource: str, what: str) -> int:
    """A human amount (GPUs, cores, GiB) to exact engine units; inexact conversions are errors."""
    # repr() is the shortest round-tripping decimal, so 0.1 means 1/10, not its binary approximation.
    exact = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    scaled = exact * _SCALE[resource]
    if scaled.denominator != 1:
        raise ValueError(
            f"{what} {value} {_UNIT_NAME[resource]} is not a whole number of {_ENGINE_UNIT[resource]}"
        )
    return int(scaled)


class ResourceSpec(_Spec):
    """One resource of a queue, in human units (GPUs, cores or GiB).

    ``quota`` None = unlimited (KAI's -1); ``limit`` None = no cap; ``weight`` is the over-quota weight
    (0 = the queue never receives resources beyond its quota).
    """

    quota: Amount | None = 0
    limit: Amount | None = None
    weight: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 1.0

    @model_validator(mode="after")
    def _quota_within_limit(self) -> Self:
        if self.quota is not None and self.limit is not None and self.quota > self.limit:
            raise ValueError(f"quota {self.quota} exceeds limit {self.limit}")
        return self

    def to_event(self, resource: str) -> QueueResource:
        """The same entitlement in engine units, as the event contract carries it."""
        quota = None if self.quota is None else _to_engine(self.quota, resource, "quota")
        limit = None if self.limit is None else _to_engine(self.limit, resource, "limit")
        return QueueResource(quota=quota, limit=limit, over_quota_weight=self.weight)


def _unlimited() -> ResourceSpec:
    return ResourceSpec(quota=None)


class QueueSpec(_Spec):
    """One queue of the tree. Only leaf queues (queues nobody names as parent) receive tasks.

    ``share`` weighs how many tasks the hash rule sends to this leaf (ignored for parent queues).
    Min-runtimes (seconds) protect a queue's freshly started jobs from preemption / reclaim.
    """

    name: str
    parent: str | None = None
    priority: int = 100
    display_name: str | None = None
    gpu: ResourceSpec = Field(default_factory=ResourceSpec)
    cpu: ResourceSpec = Field(default_factory=_unlimited)
    memory: ResourceSpec = Field(default_factory=_unlimited)
    share: Annotated[int, Field(ge=1)] = 1
    preempt_min_runtime_s: Seconds | None = None
    reclaim_min_runtime_s: Seconds | None = None

    def to_event(self) -> QueueUpserted:
        """The queue as a ``QueueUpserted`` event at time 0 (validates the name as DNS-1123)."""
        return QueueUpserted(
            at_ms=0,
            name=self.name,
            parent=self.parent,
            priority=self.priority,
            display_name=self.display_name,
            resources=QueueResources(
                gpu=self.gpu.to_event("gpu"),
                cpu=self.cpu.to_event("cpu"),
                memory=self.memory.to_event("memory"),
            ),
            preempt_min_runtime_ms=None
            if self.preempt_min_runtime_s is None
            else self.preempt_min_runtime_s * 1000,
            reclaim_min_runtime_ms=None
            if self.reclaim_min_runtime_s is None
            else self.reclaim_min_runtime_s * 1000,
        )


class EngineSpec(_Spec):
    """Engine knobs (see :class:`scheduler.engine.session.SessionConfig`).

    ``node_scoring`` names a registered node-scoring rule (``kai``; ``bestfit``, ``fgd``, ``frag-aware``
    once ``scheduler.engine.scoring.fragmentation`` is importable); it is checked when a simulation starts.
    ``usage_half_life_s`` / ``usage_refresh_s`` shape the historical usage the simulator feeds the
    time-based fair share; they only matter when ``k_value`` > 0.
    """

    gpu_placement: Literal["binpack", "spread"] = "binpack"
    cpu_placement: Literal["binpack", "spread"] = "binpack"
    gpu_sharing_placement: Literal["binpack", "spread"] = "binpack"
    node_scoring: Annotated[str, Field(min_length=1)] = "kai"
    k_value: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    usage_half_life_s: Annotated[int, Field(ge=1)] = 7 * 24 * 3600
    usage_refresh_s: Annotated[int, Field(ge=1)] = 3600
    default_preempt_min_runtime_s: Seconds = 0
    default_reclaim_min_runtime_s: Seconds = 0
    # The reclaim / preempt search budget in simulated scenarios, null = unbounded (SessionConfig's fields of
    # the same names and defaults; docs/service.md, "Search budget").
    solver_job_budget: Annotated[int, Field(ge=0, strict=True)] | None = 256
    solver_action_budget: Annotated[int, Field(ge=0, strict=True)] | None = 1024
    # Whether a topology-constrained gang's Bind / Pipeline decisions say where it landed
    # (SessionConfig.topology_details; docs/topology.md).
    topology_details: Annotated[bool, Field(strict=True)] = True


class AssignmentSpec(_Spec):
    """The task -> queue rule.

    ``hash``: leaf ``i`` of the leaves (file order) owns ``share_i`` of ``sum(share)`` buckets; a task goes
    to bucket ``H(name) mod sum(share)`` where ``H`` is the first 8 bytes (big-endian) of sha256 of the name
    (default) or its crc32
    (prefixed ``"<seed>/"`` when the simulation's seed is not 0).
    """

    rule: Literal["hash"] = "hash"
    # sha256 by default: crc32 is linear over GF(2), so its low bits follow sequential names in a regular
    # pattern (openb-pod-0000, -0001, ... alternate between two buckets), which is stable but not mixed.
    hash: Literal["crc32", "sha256"] = "sha256"


class JobPrioritySpec(_Spec):
    """Pod-group priority of a task, by the trace's ``qos`` column; ``default`` for anything else.

    KAI treats a priority below 100 as preemptible, 100 and above as non-preemptible.
    """

    default: int = 50
    by_qos: dict[str, int] = Field(default_factory=dict)

    def of(self, qos: str | None) -> int:
        """The priority for a task's qos value (None or unknown: ``default``)."""
        return self.by_qos.get(qos, self.default) if qos is not None else self.default


class TenantsConfig(_Spec):
    """A whole tenants file (format version 1)."""

    version: Literal[1] = 1
    cycle_period_s: Annotated[int, Field(ge=1)] = 300
    eviction_grace_s: Seconds = 30
    engine: EngineSpec = Field(default_factory=EngineSpec)
    assignment: AssignmentSpec = Field(default_factory=AssignmentSpec)
    job_priority: JobPrioritySpec = Field(default_factory=JobPrioritySpec)
    queues: list[QueueSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _check_tree(self) -> Self:
        names: dict[str, QueueSpec] = {}
        for q in self.queues:
            if q.name in names:
                raise ValueError(f"queue {q.name!r} is defined twice")
            names[q.name] = q
        for q in self.queues:
            if q.parent is not None and q.parent not in names:
                raise ValueError(f"queue {q.name!r}: parent {q.parent!r} is not defined")
        for q in self.queues:  # a parent chain must end at a root
            seen = [q.name]
            p = q.parent
            while p is not None:
                if p in seen:
                    raise ValueError(f"queue {q.name!r}: parent cycle {' -> '.join([*seen, p])}")
                seen.append(p)
                p = names[p].parent
        for q in self.queues:  # DNS-1123 names, quota <= limit in engine units: the event contract decides
            try:
                q.to_event()
            except (ValidationError, ValueError) as exc:
                raise ValueError(f"queue {q.name!r}: {_message(exc)}") from None
        return self

    # -- derived views --------------------------------------------------------------------------------
    def leaves(self) -> list[QueueSpec]:
        """Leaf queues (no queue names them as parent), in file order."""
        parents = {q.parent for q in self.queues if q.parent is not None}
        return [q for q in self.queues if q.name not in parents]

    def ordered(self) -> list[QueueSpec]:
        """Every queue, each parent before its children, otherwise in file order (the event order)."""
        done: dict[str, None] = {}
        by_name = {q.name: q for q in self.queues}

        def visit(q: QueueSpec) -> None:
            if q.name in done:
                return
            if q.parent is not None:
                visit(by_name[q.parent])
            done[q.name] = None

        for q in self.queues:
            visit(q)
        return [by_name[n] for n in done]

    def queue_events(self) -> list[QueueUpserted]:
        """``QueueUpserted`` events at time 0, parents first."""
        return [q.to_event() for q in self.ordered()]

    def queue_for(self, task_name: str, seed: int = 0) -> str:
        """The leaf queue of a task: a stable hash of its name (see :class:`AssignmentSpec`)."""
        key = (task_name if seed == 0 else f"{seed}/{task_name}").encode("utf-8")
        if self.assignment.hash == "crc32":
            h = zlib.crc32(key)
        else:
            h = int.from_bytes(hashlib.sha256(key).digest()[:8], "big")
        leaves = self.leaves()
        bucket = h % sum(q.share for q in leaves)
        for q in leaves:
            if bucket < q.share:
                return q.name
            bucket -= q.share
        raise AssertionError("unreachable: bucket beyond the sum of shares")

    def min_runtimes_ms(self) -> list[int]:
        """Every distinct positive min-runtime (ms) in the file, ascending: when protection can expire."""
        values = {
            v * 1000
            for q in self.queues
            for v in (q.preempt_min_runtime_s, q.reclaim_min_runtime_s)
            if v is not None and v > 0
        }
        e = self.engine
        values |= {
            v * 1000 for v in (e.default_preempt_min_runtime_s, e.default_reclaim_min_runtime_s) if v > 0
        }
        return sorted(values)

    def canonical_json(self) -> str:
        """The validated config (defaults filled in) as canonical JSON, e.g. for a run manifest."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


# --------------------------------------------------------------------------- loading


def _message(exc: Exception) -> str:
    """A validation error in the same words the event contract uses; any other error as is."""
    return validation_message(exc) if isinstance(exc, ValidationError) else str(exc)


def parse_tenants(data: Any, source: str = "<tenants>") -> TenantsConfig:
    """Validate an already-decoded tenants document; raises :class:`TenantsError` naming *source*."""
    if not isinstance(data, dict):
        raise TenantsError(f"{source}: a tenants file must be a mapping, got {type(data).__name__}")
    try:
        return TenantsConfig.model_validate(data)
    except ValidationError as exc:
        raise TenantsError(f"{source}: {_message(exc)}") from None


def load_tenants(path: Path | str = DEFAULT_TENANTS) -> TenantsConfig:
    """Read and validate a tenants file; YAML (``.yaml``, ``.yml``) or TOML (``.toml``) by suffix."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TenantsError(f"{path}: cannot read tenants file: {exc.strerror or exc}") from None
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            data: Any = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text)
        else:
            raise TenantsError(f"{path}: unknown tenants file type {suffix!r} (use .yaml, .yml or .toml)")
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise TenantsError(f"{path}: not valid {suffix.lstrip('.').upper()}: {exc}") from None
    return parse_tenants(data, str(path))
