"""Synthetic scenarios for ``hourglass simulate --config FILE``: a cluster, queues and workload generators.

A scenario file (YAML, format version 1, documented in ``docs/simulate.md``) declares everything a
simulation needs without a trace: nodes (count x shape), the queue tree (the tenants file's
:class:`~ingest.tenants.QueueSpec`), engine knobs, the time-based fairshare settings (the field names of
:class:`fairshare.config.FairshareConfig`), the cycle period, the simulated duration, and workload
generators:

* ``keep_pending``: keep *jobs* jobs of one shape pending in a queue (whenever fewer are pending, submit
  another at once), e.g. "queue a always has one 16-GPU, 1-hour job waiting";
* ``poisson``: arrivals at a mean rate, runtimes from a distribution, both drawn from a seeded generator;
* ``fixed``: a list of jobs with arrival times.

A scenario may also declare KAI topologies (``topologies``: ordered node-label levels), lay its nodes out
in domains of those levels (``nodes[].domains``: consecutive nodes share a block, a rack, ...) and give
workloads a ``topology_constraint`` (required and/or preferred level), which the simulator puts on each
job's ``PodGroupUpserted``.

:func:`load_scenario` reads and validates a file (every error names the file and the field path, e.g.
``s.yaml: workloads[0].runtime: ...``); :func:`apply_overrides` changes fields by dotted path first
(``fairshare.k_value=0``); :meth:`Scenario.build` turns it into the inputs of
:class:`analytics.simulation.simulate.Simulator`, which makes contract events of it exactly as it does of a trace.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from analytics.simulation.simulate import JobSpec, KeepPending, UsageFn, UsageHistory
from ingest import events as ev
from ingest.events import validation_message
from ingest.tenants import EngineSpec, QueueSpec, TenantsConfig
from ingest.trace import GPU_MODEL_LABEL

__all__ = [
    "HOSTNAME_LABEL",
    "DomainSplit",
    "FairshareSpec",
    "FixedJob",
    "FixedWorkload",
    "KeepPendingWorkload",
    "NodeShape",
    "PoissonWorkload",
    "Scenario",
    "ScenarioError",
    "ScenarioRun",
    "SubGroupSpec",
    "TopologyConstraintSpec",
    "TopologySpec",
    "apply_overrides",
    "decay_usage",
    "load_scenario",
    "parse_duration_ms",
    "parse_scenario",
]

GIB: Final = 1 << 30
_UNITS_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION: Final = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d|w)\s*")
MAX_JOBS: Final = 1_000_000  # a guard against a rate typo generating a run that never finishes
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"  # what the kubelet labels every node with
# A label key: an optional DNS-subdomain prefix and a name (Kubernetes' qualified-name syntax).
_LABEL_KEY: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE: Final = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
LabelKey = Annotated[str, Field(pattern=_LABEL_KEY, max_length=316)]
LabelValue = Annotated[str, Field(pattern=_LABEL_VALUE)]


class ScenarioError(ValueError):
    """A scenario file that cannot be read, does not validate or cannot be built; names file and field."""


def parse_duration_ms(value: Any) -> int:
    """A duration as whole milliseconds: seconds as a number (``90``) or a string ``"90s"``, ``"1.5h"``,
    ``"7d"`` (units ms, s, m, h, d, w). Negative, fractional-millisecond or other values are errors."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 90, '15m' or '1h', got {value!r}")
    if isinstance(value, int):
        exact = Fraction(value) * 1000
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"expected a finite duration, got {value!r}")
        exact = Fraction(repr(value)) * 1000
    elif isinstance(value, str):
        m = _DURATION.fullmatch(value)
        if m is None:
            raise ValueError(f"expected a duration such as '90s', '15m', '1h' or '7d', got {value!r}")
        exact = Fraction(m.group(1)) * _UNITS_MS[m.group(2)]
    else:
        raise ValueError(f"expected a duration such as 90, '15m' or '1h', got {type(value).__name__}")
    if exact < 0:
        raise ValueError(f"a duration cannot be negative, got {value!r}")
    if exact.denominator != 1:
        raise ValueError(f"{value!r} is not a whole number of milliseconds")
    return int(exact)


DurationMs = Annotated[int, BeforeValidator(parse_duration_ms)]
Positive = Annotated[int | float, Field(gt=0, allow_inf_nan=False)]
NonNeg = Annotated[int | float, Field(ge=0, allow_inf_nan=False)]


def _exact(value: int | float, scale: int, what: str) -> int:
    """A human amount times *scale*, exactly (``0.5`` GPU is 500 milli-GPU; ``0.0001`` is an error)."""
    exact = (Fraction(repr(value)) if isinstance(value, float) else Fraction(value)) * scale
    if exact.denominator != 1:
        raise ValueError(f"{what} {value} does not convert to a whole number of engine units")
    return int(exact)


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DomainSplit(_Spec):
    """Consecutive nodes of an entry share a domain of one topology level: every ``nodes`` nodes get the
    next value ``<prefix>-<k>`` of label ``label`` (k counts on across entries with the same label)."""

    label: LabelKey
    nodes: Annotated[int, Field(ge=1, le=100_000)]
    prefix: Annotated[str, Field(pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,40}[A-Za-z0-9])?$")] | None = None

    def value_prefix(self) -> str:
        """``prefix``, or the label's name without its DNS prefix (``cloud.provider.com/topology-rack``
        gives ``topology-rack``)."""
        return self.prefix if self.prefix is not None else self.label.rsplit("/", 1)[-1]


class NodeShape(_Spec):
    """``count`` identical nodes named ``<name_prefix>-<i>`` (i counts on across entries with one prefix).

    ``labels`` are put on every node of the entry; ``domains`` (widest level first) split the entry's
    nodes into consecutive groups per level, e.g. 4 nodes a rack and 16 a block.
    """

    count: Annotated[int, Field(ge=1, le=100_000)]
    gpus: Annotated[int, Field(ge=0, le=1024)]
    cpu: Positive = 64  # cores
    memory: Positive = 512  # GiB
    gpu_model: Annotated[str, Field(pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")] = "sim-gpu"
    name_prefix: Annotated[str, Field(min_length=1, max_length=200)] = "node"
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    domains: list[DomainSplit] = Field(default_factory=list)

    @model_validator(mode="after")
    def _exact_units(self) -> Self:
        _exact(self.cpu, 1000, "cpu")
        _exact(self.memory, GIB, "memory")
        reserved = sorted({GPU_MODEL_LABEL, HOSTNAME_LABEL} & set(self.labels))
        if reserved:
            raise ValueError(f"labels: {reserved[0]!r} is set by the simulator (gpu_model, the node's name)")
        seen: set[str] = set(self.labels)
        for i, d in enumerate(self.domains):
            if d.label in seen or d.label in (GPU_MODEL_LABEL, HOSTNAME_LABEL):
                raise ValueError(f"domains[{i}].label: {d.label!r} is already set on these nodes")
            seen.add(d.label)
            if i and self.domains[i - 1].nodes % d.nodes:
                prev = self.domains[i - 1]
                raise ValueError(
                    f"domains[{i}].nodes: {d.nodes} does not divide {prev.nodes} (domains[{i - 1}].nodes), so a"
                    f" {d.label} domain would straddle two {prev.label} domains"
                )
        return self


class TopologySpec(_Spec):
    """A KAI Topology: node-label keys from the widest level to the narrowest."""

    name: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")]
    levels: Annotated[list[LabelKey], Field(min_length=1)]

    @model_validator(mode="after")
    def _distinct(self) -> Self:
        for i, level in enumerate(self.levels):
            if level in self.levels[:i]:
                raise ValueError(f"levels[{i}]: {level!r} is listed twice")
        return self


class TopologyConstraintSpec(_Spec):
    """A workload's KAI ``topologyConstraint``: all pods of a job within one domain of ``required_level``
    (or the job waits), and/or packed into as few domains of ``preferred_level`` as possible. ``topology``
    may be left out when the scenario declares exactly one."""

    topology: str | None = None
    required_level: str | None = None
    preferred_level: str | None = None


class SubGroupSpec(_Spec):
    """One of a job's KAI ``subGroups``. A subgroup no other names as ``parent`` is a PodSet: ``pods`` of
    the job's pods join it (in the order the subgroups are listed), ``min_member`` of them make it ready
    (default all, as a LeaderWorkerSet's leader and workers). A subgroup with children is a SubGroupSet:
    no pods of its own, ``min_sub_group`` of its children must be ready (default all)."""

    name: Annotated[str, Field(min_length=1, max_length=63)]
    parent: str | None = None
    pods: Annotated[int, Field(ge=1, le=10_000)] | None = None
    min_member: Annotated[int, Field(ge=0)] | None = None
    min_sub_group: Annotated[int, Field(ge=1)] | None = None
    topology_constraint: TopologyConstraintSpec | None = None


class _PodShape(_Spec):
    """The shape of every pod of a job (per-pod amounts in GPUs, cores, GiB)."""

    pods: Annotated[int, Field(ge=1, le=10_000)] = 1
    gpus_per_pod: NonNeg = 0
    cpu_per_pod: NonNeg = 1
    memory_per_pod: NonNeg = 4
    priority: int = 50
    gpu_model: str | None = None  # a required node affinity on the gpu-model label
    topology_constraint: TopologyConstraintSpec | None = None
    subgroups: list[SubGroupSpec] = Field(default_factory=list)
    min_sub_group: Annotated[int, Field(ge=1)] | None = None  # of the top-level subgroups (default all)

    @model_validator(mode="after")
    def _valid_request(self) -> Self:
        self.requests()
        self._check_subgroups()
        return self

    def _check_subgroups(self) -> None:
        if not self.subgroups:
            if self.min_sub_group is not None:
                raise ValueError("min_sub_group needs subgroups")
            return
        parents = {sg.parent for sg in self.subgroups}
        for k, sg in enumerate(self.subgroups):
            if sg.name in parents:
                if sg.pods is not None or sg.min_member is not None:
                    raise ValueError(
                        f"subgroups[{k}] ({sg.name!r}) has child subgroups: pods and min_member belong to"
                        " its children (give it min_sub_group)"
                    )
            elif sg.pods is None:
                raise ValueError(f"subgroups[{k}].pods: the pods of this PodSet (it has no child subgroups)")
            elif sg.min_member is not None and sg.min_member > sg.pods:
                raise ValueError(f"subgroups[{k}].min_member: {sg.min_member} exceeds its {sg.pods} pods")
        problem = ev.subgroup_problem(
            [
                ev.SubGroup(name=sg.name, parent=sg.parent, min_sub_group=sg.min_sub_group)
                for sg in self.subgroups
            ],
            self.min_sub_group,
        )
        if problem is not None:
            raise ValueError(f"subgroups: {problem}")
        total = self.pod_count()
        if "pods" in self.model_fields_set and self.pods != total:
            raise ValueError(f"pods: {self.pods}, but the subgroups' pods add up to {total} (leave pods out)")

    def pod_count(self) -> int:
        """Pods per job: ``pods``, or with subgroups the sum of the PodSets' pods."""
        if not self.subgroups:
            return self.pods
        return sum(sg.pods or 0 for sg in self.subgroups)

    def pod_subgroups(self) -> tuple[str, ...]:
        """The PodSet of each pod, in pod order (empty without subgroups)."""
        return tuple(name for sg in self.subgroups if sg.pods for name in [sg.name] * sg.pods)

    def requests(self) -> ev.PodRequests:
        """The pod's request in engine units: whole GPUs, or a fraction (< 1) of one device."""
        g = self.gpus_per_pod
        cpu = _exact(self.cpu_per_pod, 1000, "cpu_per_pod")
        memory = _exact(self.memory_per_pod, GIB, "memory_per_pod")
        if 0 < g < 1:
            return ev.PodRequests(
                cpu_millicores=cpu, memory_bytes=memory, gpu_fraction_milli=_exact(g, 1000, "gpus_per_pod")
            )
        if g != int(g):
            raise ValueError(f"gpus_per_pod {g}: whole GPUs, or a fraction below 1 of one GPU")
        return ev.PodRequests(cpu_millicores=cpu, memory_bytes=memory, gpus=int(g))

    def affinity(self) -> tuple[ev.NodeSelectorTerm, ...]:
        """A required ``gpu-model In [model]`` term when ``gpu_model`` is set."""
        if self.gpu_model is None:
            return ()
        req = ev.NodeSelectorRequirement(key=GPU_MODEL_LABEL, operator="In", values=[self.gpu_model])
        return (ev.NodeSelectorTerm(match_expressions=[req]),)


class KeepPendingWorkload(_PodShape):
    """Keep ``jobs`` jobs pending in ``queue`` from ``start`` until ``stop`` (default: the whole run)."""

    kind: Literal["keep_pending"]
    queue: str
    name: str | None = None
    jobs: Annotated[int, Field(ge=1, le=10_000)] = 1
    runtime: DurationMs
    start: DurationMs = 0
    stop: DurationMs | None = None


class ExponentialRuntime(_Spec):
    """Exponentially distributed runtimes with mean ``mean``."""

    dist: Literal["exponential"]
    mean: DurationMs


class UniformRuntime(_Spec):
    """Runtimes uniform in [``min``, ``max``]."""

    dist: Literal["uniform"]
    min: DurationMs
    max: DurationMs

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.min > self.max:
            raise ValueError(f"min {self.min} ms exceeds max {self.max} ms")
        return self


class LognormalRuntime(_Spec):
    """Log-normal runtimes: ``median`` and the standard deviation ``sigma`` of the log."""

    dist: Literal["lognormal"]
    median: DurationMs
    sigma: Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)]


RuntimeDist = Annotated[ExponentialRuntime | UniformRuntime | LognormalRuntime, Field(discriminator="dist")]


class PoissonWorkload(_PodShape):
    """Poisson arrivals (``arrivals_per_hour`` on average) in [``start``, ``stop``) with random runtimes.

    ``runtime`` is a duration (every job the same) or a distribution; sampled runtimes are rounded to
    whole seconds, at least one. ``seed`` defaults to the scenario's ``seed`` plus the workload's index.
    """

    kind: Literal["poisson"]
    queue: str
    name: str | None = None
    arrivals_per_hour: Positive
    runtime: DurationMs | RuntimeDist
    seed: int | None = None
    start: DurationMs = 0
    stop: DurationMs | None = None


class FixedJob(_Spec):
    """One job of a ``fixed`` workload; shape fields left out come from the workload."""

    at: DurationMs
    runtime: DurationMs
    name: str | None = None
    pods: Annotated[int, Field(ge=1, le=10_000)] | None = None
    gpus_per_pod: NonNeg | None = None
    cpu_per_pod: NonNeg | None = None
    memory_per_pod: NonNeg | None = None
    priority: int | None = None
    topology_constraint: TopologyConstraintSpec | None = None  # {} = none, whatever the workload says


class FixedWorkload(_PodShape):
    """Jobs at given times (``jobs``), each with its own runtime; the shape fields are the defaults."""

    kind: Literal["fixed"]
    queue: str
    name: str | None = None
    jobs: Annotated[list[FixedJob], Field(min_length=1)]

    @model_validator(mode="after")
    def _valid_jobs(self) -> Self:
        for i, j in enumerate(self.jobs):
            try:
                self.shape_of(j)
            except (ValidationError, ValueError) as exc:
                msg = validation_message(exc) if isinstance(exc, ValidationError) else str(exc)
                raise ValueError(f"jobs[{i}]: {msg}") from None
        return self

    def shape_of(self, job: FixedJob) -> _PodShape:
        """The workload's shape with the job's own fields on top."""
        own = {k: v for k, v in job.model_dump(exclude={"at", "runtime", "name"}).items() if v is not None}
        base = self.model_dump(include=set(_PodShape.model_fields), exclude_unset=True)
        return _PodShape.model_validate(base | own)


Workload = Annotated[KeepPendingWorkload | PoissonWorkload | FixedWorkload, Field(discriminator="kind")]


class FairshareSpec(_Spec):
    """Time-based fairshare, with the field names of :class:`fairshare.config.FairshareConfig`.

    ``k_value`` 0 (default) = classic fair share; ``half_life_s`` null or 0 = no decay; the window is
    ``[t - window_s, t)`` (sliding) or from the last boundary ``tumbling_anchor_ms + k * window_s``
    (tumbling); a new usage snapshot every ``refresh_s``. ``staleness_s`` is accepted for the same
    file to drive the fairshare service; the simulator's snapshots are never stale.
    """

    k_value: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    half_life_s: Annotated[int, Field(ge=0)] | None = None
    window_s: Annotated[int, Field(gt=0)] = 7 * 24 * 3600
    window_type: Literal["sliding", "tumbling"] = "sliding"
    tumbling_anchor_ms: int = 0
    refresh_s: Annotated[int, Field(gt=0)] = 60
    staleness_s: Annotated[int, Field(ge=0)] = 300


class Scenario(_Spec):
    """A whole scenario file (format version 1)."""

    version: Literal[1] = 1
    name: str | None = None
    description: str | None = None
    duration: DurationMs
    cycle_period: DurationMs = 60_000
    eviction_grace: DurationMs = 30_000
    seed: int = 0
    nodes: Annotated[list[NodeShape], Field(min_length=1)]
    topologies: list[TopologySpec] = Field(default_factory=list)
    queues: Annotated[list[QueueSpec], Field(min_length=1)]
    engine: EngineSpec = Field(default_factory=EngineSpec)
    fairshare: FairshareSpec = Field(default_factory=FairshareSpec)
    workloads: Annotated[list[Workload], Field(min_length=1)]

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.duration <= 0:
            raise ValueError("duration must be positive")
        if self.cycle_period < 1000 or self.cycle_period % 1000:
            raise ValueError(
                f"cycle_period must be a whole number of seconds >= 1 s, got {self.cycle_period} ms"
            )
        if self.eviction_grace % 1000:
            raise ValueError(
                f"eviction_grace must be a whole number of seconds, got {self.eviction_grace} ms"
            )
        misplaced = sorted({"k_value", "usage_half_life_s", "usage_refresh_s"} & self.engine.model_fields_set)
        if misplaced:
            # One place for the time-based settings: the fairshare section, in the fairshare service's words.
            raise ValueError(f"engine.{misplaced[0]}: set k_value, half_life_s and refresh_s under fairshare")
        tenants = self.tenants()  # the queue tree's own checks, with the tenants file's words
        leaves = {q.name for q in tenants.leaves()}
        for i, w in enumerate(self.workloads):
            if w.queue not in leaves:
                raise ValueError(
                    f"workloads[{i}].queue: {w.queue!r} is not a leaf queue (leaves: {sorted(leaves)})"
                )
            if not isinstance(w, FixedWorkload) and w.stop is not None and w.stop <= w.start:
                raise ValueError(f"workloads[{i}]: stop {w.stop} ms is not after start {w.start} ms")
        self._check_topologies()
        return self

    def _check_topologies(self) -> None:
        """Topology names are unique, every level is a label some node carries, every domain label is a
        level of some topology, and every workload's constraint names a topology and levels of it."""
        names = [t.name for t in self.topologies]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(f"topologies[{i}].name: {name!r} is declared twice")
        carried = {HOSTNAME_LABEL} if self.topologies else set()
        for shape in self.nodes:
            carried |= set(shape.labels) | {d.label for d in shape.domains}
        all_levels = {lv for t in self.topologies for lv in t.levels}
        for i, shape in enumerate(self.nodes):
            for k, d in enumerate(shape.domains):
                if d.label not in all_levels:
                    raise ValueError(
                        f"nodes[{i}].domains[{k}].label: {d.label!r} is not a level of any topology"
                        f" (levels: {sorted(all_levels)})"
                    )
        for i, t in enumerate(self.topologies):
            for k, level in enumerate(t.levels):
                if level not in carried:
                    raise ValueError(
                        f"topologies[{i}].levels[{k}]: no node carries label {level!r}"
                        " (give it in nodes[].labels or nodes[].domains)"
                    )
        for i, w in enumerate(self.workloads):
            shapes: list[tuple[_PodShape, str]] = [(w, f"workloads[{i}].topology_constraint")]
            if isinstance(w, FixedWorkload):
                shapes += [
                    (w.shape_of(j), f"workloads[{i}].jobs[{k}].topology_constraint") for k, j in enumerate(w.jobs)
                ]
            for pod_shape, where in shapes:
                self._constraint(pod_shape, where)
                self._subgroups(pod_shape, where)  # their constraints too

    def _constraint(self, w: _PodShape, where: str) -> tuple[str | None, str | None, str | None]:
        """(topology, required level, preferred level) of a workload; raises ValueError naming *where*."""
        return self._resolve(w.topology_constraint, where)

    def _subgroups(self, w: _PodShape, where: str) -> dict[str, Any]:
        """The JobSpec / KeepPending fields of a workload's subgroups (contract ``SubGroup`` entries with
        their topology resolved, the top-level ``min_sub_group``, each pod's PodSet)."""
        out: list[ev.SubGroup] = []
        for k, sg in enumerate(w.subgroups):
            topology, required, preferred = self._resolve(
                sg.topology_constraint,
                where.replace("topology_constraint", f"subgroups[{k}].topology_constraint"),
            )
            out.append(
                ev.SubGroup(
                    name=sg.name,
                    parent=sg.parent,
                    # All of a PodSet's pods unless it says otherwise, as the simulator's gangs (KAI itself
                    # reads an unset minMember as 1).
                    min_member=sg.min_member if sg.min_member is not None else sg.pods,
                    min_sub_group=sg.min_sub_group,
                    topology=topology,
                    required_topology_level=required,
                    preferred_topology_level=preferred,
                )
            )
        return {"subgroups": tuple(out), "min_sub_group": w.min_sub_group, "pod_subgroups": w.pod_subgroups()}

    def _resolve(
        self, c: TopologyConstraintSpec | None, where: str
    ) -> tuple[str | None, str | None, str | None]:
        """(topology, required level, preferred level) of one constraint; raises ValueError naming *where*."""
        if c is None or (c.required_level is None and c.preferred_level is None):
            return (None, None, None)
        by_name = {t.name: t for t in self.topologies}
        if c.topology is None:
            if len(self.topologies) != 1:
                raise ValueError(
                    f"{where}.topology: name one of the scenario's topologies {sorted(by_name)}"
                    if self.topologies
                    else f"{where}: the scenario declares no topologies"
                )
            topo = self.topologies[0]
        elif c.topology not in by_name:
            raise ValueError(
                f"{where}.topology: {c.topology!r} is not declared (topologies: {sorted(by_name)})"
            )
        else:
            topo = by_name[c.topology]
        for field in ("required_level", "preferred_level"):
            level = getattr(c, field)
            if level is not None and level not in topo.levels:
                raise ValueError(
                    f"{where}.{field}: {level!r} is not a level of topology {topo.name!r} (levels: {topo.levels})"
                )
        if (
            c.required_level is not None
            and c.preferred_level is not None
            and topo.levels.index(c.preferred_level) < topo.levels.index(c.required_level)
        ):
            raise ValueError(
                f"{where}.preferred_level: {c.preferred_level!r} is wider than the required level"
                f" {c.required_level!r}; the preferred level must be at or below the required one"
            )
        return (topo.name, c.required_level, c.preferred_level)

    def tenants(self) -> TenantsConfig:
        """The tenants view of the scenario (queue tree, engine knobs, cycle period) the simulator runs."""
        f = self.fairshare
        engine = self.engine.model_copy(
            update={
                "k_value": f.k_value,
                "usage_half_life_s": f.half_life_s or 1,  # unused: usage comes from decay_usage()
                "usage_refresh_s": f.refresh_s,
            }
        )
        return TenantsConfig(
            cycle_period_s=self.cycle_period // 1000,
            eviction_grace_s=self.eviction_grace // 1000,
            engine=engine,
            queues=self.queues,
        )

    def node_events(self) -> list[ev.NodeUpserted]:
        """One ``NodeUpserted`` per node at time 0, in file order."""
        out: list[ev.NodeUpserted] = []
        counters: dict[str, int] = {}
        domain_next: dict[str, int] = {}  # per domain label: the next value number
        for shape in self.nodes:
            first = {d.label: domain_next.get(d.label, 0) for d in shape.domains}
            for d in shape.domains:
                domain_next[d.label] = first[d.label] + -(-shape.count // d.nodes)
            for j in range(shape.count):
                k = counters.get(shape.name_prefix, 0)
                counters[shape.name_prefix] = k + 1
                name = f"{shape.name_prefix}-{k}"
                labels = {GPU_MODEL_LABEL: shape.gpu_model} if shape.gpus else {}
                if self.topologies:
                    labels[HOSTNAME_LABEL] = name
                labels.update(shape.labels)
                for d in shape.domains:
                    labels[d.label] = f"{d.value_prefix()}-{first[d.label] + j // d.nodes}"
                out.append(
                    ev.NodeUpserted(
                        at_ms=0,
                        name=name,
                        cpu_millicores=_exact(shape.cpu, 1000, "cpu"),
                        memory_bytes=_exact(shape.memory, GIB, "memory"),
                        gpus=shape.gpus,
                        gpu_model=shape.gpu_model if shape.gpus else None,
                        labels=dict(sorted(labels.items())),
                    )
                )
        return out

    def topology_events(self) -> list[ev.TopologyUpserted]:
        """One ``TopologyUpserted`` per declared topology at time 0, in file order."""
        return [ev.TopologyUpserted(at_ms=0, name=t.name, levels=list(t.levels)) for t in self.topologies]

    def build(self) -> ScenarioRun:
        """The simulator's inputs: nodes, tenants, the static jobs (poisson, fixed), the keep-pending rules,
        the end time and the usage function."""
        jobs: list[JobSpec] = []
        rules: list[KeepPending] = []
        for i, w in enumerate(self.workloads):
            prefix = w.name or f"{w.queue}-w{i}"
            where = f"workloads[{i}].topology_constraint"
            topology, required, preferred = self._constraint(w, where)
            groups = self._subgroups(w, where)
            if isinstance(w, KeepPendingWorkload):
                rules.append(
                    KeepPending(
                        name=prefix,
                        queue=w.queue,
                        jobs=w.jobs,
                        runtime_ms=w.runtime,
                        requests=w.requests(),
                        pods=w.pod_count(),
                        priority=w.priority,
                        start_ms=w.start,
                        stop_ms=w.stop,
                        affinity=w.affinity(),
                        topology=topology,
                        required_level=required,
                        preferred_level=preferred,
                        **groups,
                    )
                )
            elif isinstance(w, PoissonWorkload):
                jobs.extend(
                    replace(
                        j, topology=topology, required_level=required, preferred_level=preferred, **groups
                    )
                    for j in self._poisson(w, i, prefix)
                )
            else:
                for k, j in enumerate(w.jobs):
                    if j.at >= self.duration:
                        continue  # arrives after the end of the run
                    shape = w.shape_of(j)
                    where = f"workloads[{i}].jobs[{k}].topology_constraint"
                    topology, required, preferred = self._constraint(shape, where)
                    jobs.append(
                        JobSpec(
                            name=j.name or f"{prefix}-{k}",
                            queue=w.queue,
                            created_ms=j.at,
                            runtime_ms=j.runtime,
                            requests=shape.requests(),
                            pods=shape.pod_count(),
                            priority=shape.priority,
                            affinity=shape.affinity(),
                            topology=topology,
                            required_level=required,
                            preferred_level=preferred,
                            **self._subgroups(shape, where),
                        )
                    )
        return ScenarioRun(
            nodes=self.node_events(),
            topologies=self.topology_events(),
            tenants=self.tenants(),
            jobs=jobs,
            keep_pending=rules,
            end_ms=self.duration,
            usage=decay_usage(self.fairshare) if self.fairshare.k_value > 0 else None,
        )

    def _poisson(self, w: PoissonWorkload, index: int, prefix: str) -> list[JobSpec]:
        """Arrival times and runtimes from one seeded generator (``random.Random``: the same on every
        machine), arrivals in [start, min(stop, duration))."""
        rng = random.Random(w.seed if w.seed is not None else self.seed + index)
        stop = min(w.stop if w.stop is not None else self.duration, self.duration)
        mean_gap_ms = 3_600_000 / w.arrivals_per_hour
        out: list[JobSpec] = []
        t = float(w.start)
        requests, affinity = w.requests(), w.affinity()
        while True:
            t += rng.expovariate(1.0 / mean_gap_ms)
            at = round(t)
            if at >= stop:
                return out
            if len(out) >= MAX_JOBS:
                raise ValueError(f"workloads[{index}] generates more than {MAX_JOBS:,} jobs; lower the rate")
            out.append(
                JobSpec(
                    name=f"{prefix}-{len(out)}",
                    queue=w.queue,
                    created_ms=at,
                    runtime_ms=_sample_runtime(w.runtime, rng),
                    requests=requests,
                    pods=w.pod_count(),
                    priority=w.priority,
                    affinity=affinity,
                )
            )


def _sample_runtime(
    spec: int | ExponentialRuntime | UniformRuntime | LognormalRuntime, rng: random.Random
) -> int:
    """One runtime in ms: a fixed duration as is, a sampled one rounded to whole seconds (at least 1 s)."""
    if isinstance(spec, int):
        return spec
    if isinstance(spec, ExponentialRuntime):
        ms = rng.expovariate(1.0 / spec.mean) if spec.mean > 0 else 0.0
    elif isinstance(spec, UniformRuntime):
        ms = rng.uniform(spec.min, spec.max)
    else:
        ms = spec.median * math.exp(rng.gauss(0.0, spec.sigma))
    return max(round(ms / 1000), 1) * 1000


@dataclass(frozen=True, slots=True)
class ScenarioRun:
    """What :meth:`Scenario.build` gives the simulator."""

    nodes: list[ev.NodeUpserted]
    topologies: list[ev.TopologyUpserted]
    tenants: TenantsConfig
    jobs: list[JobSpec]
    keep_pending: list[KeepPending]
    end_ms: int
    usage: UsageFn | None


def decay_usage(spec: FairshareSpec) -> UsageFn:
    """Usage snapshots from :func:`fairshare.decay.usage_at` over the run's exact allocation history: the
    same decay and window maths as the fairshare service, so a simulated cycle sees what production would."""
    from fairshare.config import FairshareConfig
    from fairshare.decay import usage_at

    cfg = FairshareConfig(**spec.model_dump())

    def usage(history: UsageHistory, now_ms: int) -> dict[str, dict[str, float]]:
        # Snapshots only move forward in time, so points before the window's start are never read again.
        history.forget_before(cfg.window_start_ms(now_ms))
        vectors = usage_at(history.allocation_frame(), history.capacity_frame(), now_ms, cfg, kind="exact")
        return vectors.normalised

    return usage


# --------------------------------------------------------------------------- loading


def _set_path(doc: Any, path: str, value: Any, source: str) -> None:
    """Set ``doc[a][b][0]...`` for the dotted *path* ``a.b.0``; lists are indexed by number."""
    parts = path.split(".")
    node = doc
    for k, part in enumerate(parts):
        last = k == len(parts) - 1
        where = ".".join(parts[: k + 1])
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ScenarioError(
                    f"{source}: --set {path}: {where} is not an index of a {len(node)}-item list"
                )
            if last:
                node[int(part)] = value
            else:
                node = node[int(part)]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
        else:
            raise ScenarioError(f"{source}: --set {path}: {where} is inside a value, not a mapping or list")


def apply_overrides(doc: Any, overrides: Sequence[str], source: str = "<scenario>") -> Any:
    """Apply ``KEY.PATH=VALUE`` overrides (VALUE parsed as YAML: ``0``, ``2h``, ``[1, 2]``) to a decoded
    scenario document, in order; returns the document."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ScenarioError(f"{source}: --set {item!r}: expected KEY.PATH=VALUE")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ScenarioError(f"{source}: --set {item!r}: value is not valid YAML: {exc}") from None
        _set_path(doc, key.strip(), value, source)
    return doc


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate an already-decoded scenario; raises :class:`ScenarioError` naming *source* and the field."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario file must be a mapping, got {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(f"{source}: {validation_message(exc)}") from None


def load_scenario(path: Path | str, overrides: Sequence[str] = ()) -> Scenario:
    """Read, override (:func:`apply_overrides`) and validate a YAML scenario file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read scenario file: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from None
    if overrides and not isinstance(data, dict):
        raise ScenarioError(f"{path}: a scenario file must be a mapping, got {type(data).__name__}")
    return parse_scenario(apply_overrides(data, overrides, str(path)), str(path))
