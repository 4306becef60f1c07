"""GPU fragmentation (Weng et al., USENIX ATC '23) and the node-scoring rules built on it.

The measure: a node's free GPU capacity is a *fragment* for a task type when the task cannot use it. Over a
task-type distribution M (the "typical" task shapes of a workload, :func:`typical_task_types`), the node
fragmentation is ``F_n = sum_m p_m * F_n(m)`` with, for free CPU ``C``, per-GPU free milli ``g_1..g_k``
(``G = sum g_i``) and a type ``m = (c, u per GPU, d GPUs, accepted models T)``:

* CPU-only type (u = 0): ``F_n(m) = G`` (nothing can use the idle GPUs for it);
* the node's GPU model not in T (T non-empty): ``G``;
* ``#{i: g_i >= u} >= d`` and ``C >= c`` (the task fits): ``sum of g_i < u`` (only too-small GPUs count);
* otherwise (lacks GPU, CPU or both): ``G``.

This follows the simulator that produced the paper's figures (``pkg/utils/frag.go``); memory is not part
of the measure. See ``docs/fgd-protocol.md`` §1.5–§1.6.

Scoring rules listed in :mod:`scheduler.engine.scoring` under these names:

* ``"bestfit"``: the paper's best-fit baseline (least weighted CPU + GPU left over after placement);
* ``"fgd"``: Fragmentation Gradient Descent, ``score = floor(100 * sigmoid(-dF / 1000))`` where ``dF`` is
  the growth of ``F_n`` when the task lands; a shared task goes to the GPU with the best score;
* ``"frag-aware"``: FGD whose ties prefer nodes already in use (see :class:`FragAwarePolicy`);
* ``"frag-aware-models"``: ``frag-aware`` over the types that may use the node's GPU model, without
  multi-GPU types, sharing tasks preferring busy nodes more strongly (see :class:`ModelAwarePolicy`).

``fgd`` and ``frag-aware`` use the typical task types of the shipped default trace
(:func:`scheduler.engine.scoring.task_types_in_use` swaps in another distribution).
"""

from __future__ import annotations

import math
import weakref
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar, Final

from scheduler.engine.scoring.fit import Fit
from scheduler.engine.session import GPU_MILLI, NodeInfo, Session, TaskInfo
from scheduler.engine.state import WorkloadShape

if TYPE_CHECKING:
    from ingest.trace import TraceTask

__all__ = [
    "MODELS_COVERAGE",
    "FgdPolicy",
    "FragAwarePolicy",
    "FragModel",
    "ModelAwarePolicy",
    "ModelFragModel",
    "TaskType",
    "bestfit_scores",
    "cluster_fragmentation",
    "decay_weight",
    "decayed_mass",
    "decayed_task_types",
    "default_task_types",
    "learnt_task_types",
    "model_aware_policy",
    "node_fragmentation",
    "policies",
    "single_gpu_types",
    "typical_task_types",
]

POPULARITY_THRESHOLD = 0.95  # the simulator's podPopularityThreshold (95 %)
# frag-aware-models' distribution covers the most popular shapes up to 99 % of the tasks (see ModelAwarePolicy).
MODELS_COVERAGE = 0.99


@dataclass(frozen=True, slots=True)
class TaskType:
    """A task shape of the workload and its weight ``p_m`` in the fragmentation measure."""

    cpu_milli: int
    gpu_milli: int  # per GPU; 0 = CPU-only
    num_gpu: int
    gpu_spec: tuple[str, ...] = ()  # accepted GPU models; () = any
    weight: float = 1.0
    count: int = 0  # tasks of this shape in the source trace (information only)

    def accepts(self, model: str | None) -> bool:
        """True when a GPU of `model` may serve this type (the simulator's IsNodeAccessibleToPodByType)."""
        if not self.gpu_spec:
            return True
        return model is not None and model in self.gpu_spec


# --------------------------------------------------------------------------- the measure


def node_fragmentation(
    cpu_free: int, gpu_free: Sequence[int], model: str | None, types: Iterable[TaskType]
) -> float:
    """``F_n`` in milli-GPU for a node with `cpu_free` millicores and per-GPU free milli `gpu_free`.

    The direct, case-by-case form of the definition (module docstring); :class:`FragModel` computes the
    same value faster.
    """
    total = sum(gpu_free)
    frag = 0.0
    for m in types:
        if m.gpu_milli == 0 or not m.accepts(model):
            frag += m.weight * total
            continue
        fits_gpu = sum(1 for g in gpu_free if g >= m.gpu_milli) >= m.num_gpu
        if fits_gpu and cpu_free >= m.cpu_milli:
            frag += m.weight * sum(g for g in gpu_free if g < m.gpu_milli)
        else:
            frag += m.weight * total
    return frag


class FragModel:
    """``F_n`` for one task-type distribution, memoised by node state.

    ``F = G * P - sum over fitting GPU types m of p_m * S(u_m)`` where ``P`` is the total weight and
    ``S(u)`` the free milli on GPUs with at least ``u`` free. Types with the same ``(u, d)`` are grouped and
    their weights accumulated by CPU request, so one evaluation is a handful of bisections.
    """

    def __init__(self, types: Sequence[TaskType]) -> None:
        self.types = tuple(types)
        self.total_weight = math.fsum(m.weight for m in self.types)
        self._groups: dict[str | None, list[tuple[int, int, list[int], list[float]]]] = {}
        self._memo: dict[tuple[str | None, int, tuple[int, ...]], float] = {}

    def _groups_for(self, model: str | None) -> list[tuple[int, int, list[int], list[float]]]:
        groups = self._groups.get(model)
        if groups is None:
            by_shape: dict[tuple[int, int], list[tuple[int, float]]] = {}
            for m in self.types:
                if m.gpu_milli > 0 and m.accepts(model):
                    by_shape.setdefault((m.gpu_milli, m.num_gpu), []).append((m.cpu_milli, m.weight))
            groups = []
            for (u, d), members in sorted(by_shape.items()):
                members.sort()
                cum: list[float] = []
                acc = 0.0
                for _, w in members:
                    acc += w
                    cum.append(acc)
                groups.append((u, d, [c for c, _ in members], cum))
            self._groups[model] = groups
        return groups

    def _weight(self, model: str | None) -> float:
        """The weight of the types whose whole free GPU counts as a fragment on a node of `model`: all."""
        return self.total_weight

    def frag(self, model: str | None, cpu_free: int, gpu_free: Sequence[int]) -> float:
        """``F_n`` of a node state (order of `gpu_free` does not matter)."""
        key = (model, cpu_free, tuple(sorted(gpu_free, reverse=True)))
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        g = key[2]
        total = sum(g)
        value = 0.0
        if total:
            value = total * self._weight(model)
            for u, d, cpus, cum in self._groups_for(model):
                if d > len(g) or g[d - 1] < u:  # fewer than d GPUs with u free
                    continue
                i = bisect_right(cpus, cpu_free)  # types of this shape whose CPU request fits
                if i:
                    value -= cum[i - 1] * sum(x for x in g if x >= u)
        self._memo[key] = value
        return value

    def node(self, node: NodeInfo, idle: bool = True) -> float:
        """``F_n`` of an engine node (idle view, or the future view that counts releasing capacity)."""
        if idle:
            return self.frag(node.spec.gpu_model, node.idle(0), [node.dev_idle(d) for d in range(node.gpus)])
        return self.frag(node.spec.gpu_model, node.future(0), [node.dev_future(d) for d in range(node.gpus)])


def cluster_fragmentation(model: FragModel, nodes: Iterable[NodeInfo]) -> float:
    """Cluster fragmentation ``F = sum_n F_n`` in milli-GPU."""
    return math.fsum(model.node(n) for n in nodes)


def typical_task_types(tasks: Iterable[TraceTask], threshold: float = POPULARITY_THRESHOLD) -> list[TaskType]:
    """The task-type distribution of a workload, as the FGD simulator builds it (``GetTypicalPods``).

    Tasks are grouped by (CPU, GPU milli per GPU, #GPUs, GPU models), memory ignored; types are sorted by
    count, most popular first (ties: larger shape first); the shortest prefix covering at least
    `threshold` of all tasks is kept and each kept type weighs ``count / (tasks in the prefix)``.
    """
    counts: Counter[WorkloadShape] = Counter()
    for t in tasks:
        counts[(t.cpu_millicores, t.gpu_milli if t.num_gpu else 0, t.num_gpu, t.gpu_spec)] += 1
    total = sum(counts.values())
    if not total:
        return []
    return _popular_prefix(counts, total, threshold)


def _popular_prefix(mass: Mapping[WorkloadShape, float], total: float, threshold: float) -> list[TaskType]:
    """Shapes by mass, most popular first (ties: larger shape first), the shortest prefix covering at least
    `threshold` of `total`; each kept type weighs ``mass / (mass of the prefix)``."""
    ranked = sorted(mass.items(), key=lambda kv: (kv[1], kv[0][:3], "|".join(kv[0][3])), reverse=True)
    kept: list[tuple[WorkloadShape, float]] = []
    covered: float = 0
    for shape, m in ranked:
        if covered >= threshold * total:
            break
        kept.append((shape, m))
        covered += m
    return [TaskType(c, u, d, spec, m / covered, round(m)) for (c, u, d, spec), m in kept]


_DEFAULT_TYPES: list[TaskType] | None = None


def default_task_types() -> list[TaskType]:
    """The documented prior: the typical task types of the shipped default Alibaba trace, loaded once.

    Shipped as data (``default_task_types.json``, counts per shape) so the engine reads no trace file;
    ``tests/`` checks it equals :func:`typical_task_types` of the trace. Weights are recomputed from the
    counts exactly as :func:`typical_task_types` computes them.
    """
    global _DEFAULT_TYPES
    if _DEFAULT_TYPES is None:
        import json
        from importlib.resources import files

        doc = json.loads(files(__package__).joinpath("default_task_types.json").read_text())
        rows = doc["types"]
        covered = sum(int(r["count"]) for r in rows)
        _DEFAULT_TYPES = [
            TaskType(
                int(r["cpu_milli"]),
                int(r["gpu_milli"]),
                int(r["num_gpu"]),
                tuple(r["gpu_spec"]),
                int(r["count"]) / covered,
                int(r["count"]),
            )
            for r in rows
        ]
    return _DEFAULT_TYPES


#: How many pods the shipped prior counts as when it is blended with a cluster's own workload: with fewer
#: pods of history than this the prior still dominates, with thousands the cluster's workload does.
PRIOR_PODS = 64


def learnt_task_types(
    workload: Iterable[tuple[WorkloadShape, int]],
    prior: Sequence[TaskType] | None = None,
    prior_pods: int = PRIOR_PODS,
    threshold: float = POPULARITY_THRESHOLD,
) -> list[TaskType]:
    """The task-type distribution of a cluster's recent workload (``ClusterState.workload``), blended with
    `prior` (default: :func:`default_task_types`) worth `prior_pods` pods, then cut as
    :func:`typical_task_types` cuts (most popular first, the prefix covering `threshold`).

    The prior acts as pseudo-counts (a Dirichlet prior): a cluster with a few pods of history scores close
    to the prior, one with a full window scores against its own workload. Empty workload: the prior.
    """
    base = default_task_types() if prior is None else list(prior)
    workload = [(shape, n) for shape, n in workload if n > 0]
    if not workload:
        return base
    mass: dict[WorkloadShape, float] = {}
    for t in base:
        key = (t.cpu_milli, t.gpu_milli, t.num_gpu, t.gpu_spec)
        mass[key] = mass.get(key, 0.0) + prior_pods * t.weight
    for shape, n in workload:
        mass[shape] = mass.get(shape, 0.0) + n
    return _popular_prefix(mass, math.fsum(mass.values()), threshold)


#: A decayed weight's scale: a pod submitted at the reference time weighs this many micro-pods.
_UNIT = 1_000_000


def decay_weight(age_ms: int, half_life_ms: int) -> int:
    """A pod's weight in micro-pods at `age_ms`: ``10**6 * 0.5 ** (age / half-life)`` at whole half-lives,
    linear in between, so every weight is an exact integer on every platform (no ``pow`` rounding)."""
    if age_ms <= 0:
        return _UNIT
    k, r = divmod(age_ms, half_life_ms)
    if k >= 20:  # below one micro-pod
        return 0
    w = _UNIT >> k
    return w - (w // 2) * r // half_life_ms


def decayed_mass(
    history: Iterable[tuple[int, WorkloadShape]],
    now_ms: int,
    half_life_ms: int,
    window_ms: int,
    refresh_ms: int,
) -> dict[WorkloadShape, int]:
    """Micro-pods per shape of one pool's history at `now_ms` rounded down to `refresh_ms`: each pod weighs
    :func:`decay_weight` of its age (a pod submitted after the rounded time weighs one pod); pods older than
    `window_ms` count nothing."""
    at = now_ms - now_ms % refresh_ms
    mass: dict[WorkloadShape, int] = {}
    for t, shape in history:
        age = at - t
        if age > window_ms:
            continue
        w = decay_weight(age, half_life_ms)
        if w:
            mass[shape] = mass.get(shape, 0) + w
    return mass


def decayed_task_types(
    history: Iterable[tuple[int, WorkloadShape]],
    now_ms: int,
    half_life_ms: int,
    window_ms: int,
    refresh_ms: int,
    prior: Sequence[TaskType] | None = None,
    threshold: float = POPULARITY_THRESHOLD,
) -> list[TaskType]:
    """The task-type distribution of one node pool's recent workload (``workload_types: decayed``): shapes
    weighed by :func:`decayed_mass`, cut as :func:`typical_task_types` cuts (most popular first, the prefix
    covering `threshold`). A pool with no weight left in its window scores against `prior` (default: the
    shipped trace's, :func:`default_task_types`), and only then."""
    mass = decayed_mass(history, now_ms, half_life_ms, window_ms, refresh_ms)
    if not mass:
        return default_task_types() if prior is None else list(prior)
    return [
        replace(t, count=round(t.count / _UNIT))
        for t in _popular_prefix({k: float(v) for k, v in mass.items()}, float(sum(mass.values())), threshold)
    ]


# --------------------------------------------------------------------------- scoring helpers


def _task_shape(task: TaskInfo, fit: Fit) -> tuple[int, int]:
    """(CPU millicores, milli-GPU taken on each chosen device) for `task` placed as `fit`."""
    req = task.request
    if task.shared:
        return req.cpu, fit.portion
    return req.cpu, GPU_MILLI if req.gpus else 0


def _free_view(node: NodeInfo, idle: bool) -> tuple[int, list[int]]:
    if idle:
        return node.idle(0), [node.dev_idle(d) for d in range(node.gpus)]
    return node.future(0), [node.dev_future(d) for d in range(node.gpus)]


def _shared_candidates(node: NodeInfo, portion: int, idle: bool, devices_needed: int) -> list[int]:
    """Devices a shared task may take, as the engine's ``_fit_shared`` allows them (ascending index)."""
    whole = set(node.whole_future_devices())
    room_for_group = node.pods_used() + 1 + devices_needed <= node.spec.max_pods
    out = []
    for d in range(node.gpus):
        if d in whole:
            if not room_for_group:  # a new shared group adds a reservation pod
                continue
        elif not (node.dev_shared[d] > 0 and node.dev_future(d) >= portion):
            continue
        if idle and node.dev_idle(d) < portion:
            continue
        out.append(d)
    return out


_CLUSTER_MAX: weakref.WeakKeyDictionary[Session, tuple[int, int]] = weakref.WeakKeyDictionary()


def _cluster_max(ssn: Session) -> tuple[int, int]:
    """(largest node CPU, largest node GPU milli): the best-fit score's normalisers (128 cores, 8 GPUs)."""
    hit = _CLUSTER_MAX.get(ssn)
    if hit is None:
        hit = (
            max((n.spec.cpu for n in ssn.nodes), default=1) or 1,
            max((n.gpus for n in ssn.nodes), default=1) * GPU_MILLI or GPU_MILLI,
        )
        _CLUSTER_MAX[ssn] = hit
    return hit


def bestfit_score(ssn: Session, task: TaskInfo, fit: Fit) -> int:
    """``floor(100 * (1 - 0.5 * CPU left / max CPU - 0.5 * GPU left / max GPU))`` after placing the task."""
    max_cpu, max_gpu = _cluster_max(ssn)
    cpu, per_dev = _task_shape(task, fit)
    cpu_free, gpu_free = _free_view(fit.node, fit.idle)
    gpu_left = sum(gpu_free) - per_dev * len(fit.devices)
    return math.floor(100 * (1 - 0.5 * (cpu_free - cpu) / max_cpu - 0.5 * gpu_left / max_gpu))


def bestfit_scores(ssn: Session, task: TaskInfo, fits: Sequence[Fit]) -> list[float]:
    """The paper's best-fit baseline. Its GPU choice (fullest fitting GPU) is the engine's binpack one."""
    return [float(bestfit_score(ssn, task, f)) for f in fits]


#: Added to the score of a fit on idle capacity: more than any FGD / frag-aware score (at most 1,001).
IDLE_FIRST: Final = 10_000.0


def _sigmoid_score(delta_f: float) -> int:
    """The simulator's integer FGD score: ``floor(100 * sigmoid(-dF / 1000))``."""
    x = -delta_f / 1000
    s = 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))
    return math.floor(100 * s)


NodeKey = tuple[object, ...]
"""Everything about a node FGD's score and device choice read (see :func:`node_key`): nodes with equal keys
score alike, so a policy scores one node of each kind per task."""

_KEYS: weakref.WeakKeyDictionary[Session, dict[int, tuple[int, NodeKey]]] = weakref.WeakKeyDictionary()


def node_key(ssn: Session, node: NodeInfo) -> NodeKey:
    """The node's model, free CPU and per-device free milli-GPU (idle and future views), shared-pod counts,
    pod counts and limit, free memory and per-device GPU memory: all that placement's capacity checks and
    the fragmentation scores read. Kept per session while the node's ``stamp`` is unchanged."""
    cache = _KEYS.get(ssn)
    if cache is None:
        cache = _KEYS[ssn] = {}
    hit = cache.get(node.index)
    if hit is not None and hit[0] == node.stamp:
        return hit[1]
    n = node.gpus
    key: NodeKey = (
        node.spec.gpu_model,
        node.idle(0),
        node.future(0),
        tuple(node.dev_idle(d) for d in range(n)),
        tuple(node.dev_future(d) for d in range(n)),
        tuple(node.dev_shared),
        tuple(node.dev_alloc[d] == 0 and node.dev_pipe[d] == 0 for d in range(n)),
        node.pods,
        node.pods_used(),
        node.spec.max_pods,
        node.idle(1),
        node.future(1),
        node.gpu_memory_mib,
    )
    cache[node.index] = (node.stamp, key)
    return key


_KINDS: weakref.WeakKeyDictionary[Session, tuple[dict[int, tuple[int, int]], dict[object, int]]] = (
    weakref.WeakKeyDictionary()
)
#: Kinds a session keeps numbered before starting over (a kept session lives for many cycles and its nodes
#: pass through many states): a bound on memory, far above what one scan meets.
MAX_KINDS: Final = 1 << 16


def _kind_tables(ssn: Session) -> tuple[dict[int, tuple[int, int]], dict[object, int]]:
    got = _KINDS.get(ssn)
    if got is None or len(got[1]) > MAX_KINDS:
        got = _KINDS[ssn] = ({}, {})
    return got


def kind_numbering(ssn: Session) -> object:
    """The table :func:`node_kinds` numbers kinds by in `ssn` (numbers from different tables differ in
    meaning: a kept session starts a new table after :data:`MAX_KINDS` kinds)."""
    return _kind_tables(ssn)[1]


def node_kinds(ssn: Session) -> Callable[[NodeInfo], int]:
    """A function numbering nodes by kind for one scan: equal numbers exactly when :func:`node_key` and the
    node's CPU and memory are equal. The number is kept per node until its ``stamp`` changes, so a scan
    over every node for every task hashes each node's long key once per change, not once per task."""
    per_node, ids = _kind_tables(ssn)

    def kind(node: NodeInfo) -> int:
        hit = per_node.get(node.index)
        if hit is not None and hit[0] == node.stamp:
            return hit[1]
        key = (node_key(ssn, node), node.spec.cpu, node.spec.memory)
        k = ids.get(key)
        if k is None:
            k = ids[key] = len(ids)
        per_node[node.index] = (node.stamp, k)
        return k

    return kind


class FgdPolicy:
    """FGD: move each task where it grows the node's fragmentation least (steepest descent).

    Scores and device choices are memoised per session by (:func:`node_key`, the task's shape, the fit): on
    a large cluster most nodes are alike (empty, or full in the same way), and each kind is scored once.
    """

    #: The share of tasks the popular shapes of a learnt distribution cover for this rule (the simulator's
    #: 95 %); the shipped prior is the default trace's 95 % for every rule.
    COVERAGE: ClassVar[float] = POPULARITY_THRESHOLD

    def __init__(self, types: Sequence[TaskType]) -> None:
        self.model = self._measure(types)
        self._memo: weakref.WeakKeyDictionary[Session, dict[tuple[object, ...], object]] = (
            weakref.WeakKeyDictionary()
        )

    def _measure(self, types: Sequence[TaskType]) -> FragModel:
        """The fragmentation measure this rule scores with, over the distribution `types`: FGD's."""
        return FragModel(types)

    def _session_memo(self, ssn: Session) -> dict[tuple[object, ...], object]:
        memo = self._memo.get(ssn)
        if memo is None:
            memo = self._memo[ssn] = {}
        return memo

    def delta(self, task: TaskInfo, fit: Fit, devices: Sequence[int] | None = None) -> float:
        """``F_n' - F_n`` when `task` lands on `fit` (on `devices` if given, else the fit's devices)."""
        node = fit.node
        cpu_free, gpu_free = _free_view(node, fit.idle)
        cpu, per_dev = _task_shape(task, fit)
        after = list(gpu_free)
        for d in fit.devices if devices is None else devices:
            after[d] -= per_dev
        model = node.spec.gpu_model
        return self.model.frag(model, cpu_free - cpu, after) - self.model.frag(model, cpu_free, gpu_free)

    def device_key(self, task: TaskInfo, fit: Fit, d: int) -> float:
        """How good device `d` is for a shared task on this fit (higher = better)."""
        return float(_sigmoid_score(self.delta(task, fit, (d,))))

    def choose(self, ssn: Session, task: TaskInfo, fit: Fit) -> Fit:
        """Device choice: a shared task takes the GPU with the best score (lowest index on ties)."""
        req = task.request
        if not task.shared or req.gpu_fraction_devices != 1:
            return fit  # whole GPUs: the engine already takes the lowest-index free ones, as FGD does
        memo = self._session_memo(ssn)
        key = ("choose", node_key(ssn, fit.node), req.cpu, fit.portion, fit.idle)
        best = memo.get(key)
        if best is None:
            cands = _shared_candidates(fit.node, fit.portion, fit.idle, 1)
            best = max(cands, key=lambda d: (self.device_key(task, fit, d), -d)) if cands else -1
            memo[key] = best
        assert isinstance(best, int)
        if best < 0 or (best,) == fit.devices:
            return fit
        return replace(fit, devices=(best,), new_shared_group=fit.node.dev_shared[best] == 0)

    def node_score(self, ssn: Session, task: TaskInfo, fit: Fit) -> float:
        """Score of one fit, its devices as chosen."""
        return float(_sigmoid_score(self.delta(task, fit)))

    def scores(self, ssn: Session, task: TaskInfo, fits: Sequence[Fit]) -> list[float]:
        """Node scorer (:data:`scheduler.engine.scoring.NodeScorer`)."""
        memo = self._session_memo(ssn)
        cpu, shared = task.request.cpu, task.shared
        out: list[float] = []
        for f in fits:
            key = ("score", node_key(ssn, f.node), cpu, shared, f.portion, f.idle, f.devices)
            got = memo.get(key)
            if got is None:
                got = memo[key] = self.node_score(ssn, task, f)
            assert isinstance(got, float)
            # KAI's rule above any placement preference: a fit on idle capacity beats one that waits for
            # releasing pods (pipelining), or a reclaim would place a pod on its victims' node while an
            # idle one is free and starve the gang's other pods of that node. A fraction is left to the
            # policy's device choice: KAI ranks joining a shared GPU above idle capacity for it.
            out.append(got + IDLE_FIRST if f.idle and not shared else got)
        return out


class FragAwarePolicy(FgdPolicy):
    """FGD whose ties prefer nodes that already run pods (keep empty nodes whole), then node order.

    Ranking by the exact ``-dF``, finer or coarser score buckets, other tie-breaks and other measures all
    did worse on the benchmark (docs/placement-benchmark.md, "Alternatives tried"): FGD's coarse buckets
    with a fixed node order act as first-fit packing inside each bucket, and that packing matters as much as
    the gradient. This rule keeps both and only adds the empty-node preference inside a bucket.
    """

    def node_score(self, ssn: Session, task: TaskInfo, fit: Fit) -> float:
        """FGD's integer score first; within equal scores a node that hosts pods beats an empty one."""
        return float(_sigmoid_score(self.delta(task, fit)) * 10 + (1 if fit.node.pods > 0 else 0))


class ModelFragModel(FragModel):
    """``F_n`` over the types that may use the node: a type bound to other GPU models counts no fragment here.

    FGD counts all of a node's free GPU as a fragment for a type that rejects the node's GPU model, so any
    task placed on a node of a little-demanded model *lowers* ``F``: FGD fills the minority models first with
    tasks that accept any model, and the tasks bound to those models fail early (on ``gpuspec`` the first
    failure comes at 34 % arrived). Here the node's free GPU counts only for CPU-only types and for the types
    that accept its model. Without model-bound types it is FGD's measure exactly (same weights, same sum).
    """

    def __init__(self, types: Sequence[TaskType]) -> None:
        super().__init__(types)
        self._model_weight: dict[str | None, float] = {}

    def _weight(self, model: str | None) -> float:
        """Only the CPU-only types and those that accept `model` (FGD: every type)."""
        w = self._model_weight.get(model)
        if w is None:
            w = self._model_weight[model] = math.fsum(
                m.weight for m in self.types if m.gpu_milli == 0 or m.accepts(model)
            )
        return w


def single_gpu_types(types: Sequence[TaskType]) -> list[TaskType]:
    """The distribution without its multi-GPU types, the others' weights scaled to the same total.

    A multi-GPU type's fragment term is all or nothing per node (its whole free GPU, unless the node has
    enough whole GPUs free), and by count such types weigh little; in FGD's integer score they mostly move
    nodes across score levels, which breaks up the packing that equal levels and the node order give.
    Without them the measure sees the types that share and split GPUs. Measured on the placement
    benchmark (docs/placement-benchmark.md): lower unallocated GPU on every generated mix that has
    multi-GPU types in its distribution; the same distribution, unchanged, where it has none.
    """
    kept = [m for m in types if m.num_gpu <= 1]
    total, left = math.fsum(m.weight for m in types), math.fsum(m.weight for m in kept)
    if len(kept) == len(types) or not left:
        return list(types)
    return [replace(m, weight=m.weight / left * total) for m in kept]


class ModelAwarePolicy(FragAwarePolicy):
    """``frag-aware`` over :class:`ModelFragModel` of the single-GPU types, and a stronger in-use preference
    for GPU-sharing tasks.

    Score: FGD's integer score of the growth of the fragmentation that the types able to use the node see
    (:class:`ModelFragModel`), over the distribution's CPU-only and single-GPU types
    (:func:`single_gpu_types`). A node already running pods is preferred: for a whole-GPU or CPU task only
    among equal scores (as ``frag-aware``); for a GPU-sharing task it also beats an empty node one score
    level better, so sharing tasks gather on busy nodes and empty nodes stay whole. Then node order.
    Integer levels, no randomness: deterministic.

    Its learnt distributions cover the popular shapes up to 99 % of the tasks (:data:`MODELS_COVERAGE`;
    FGD's 95 % leaves out shapes that, rare one by one, still take a twentieth of the tasks).
    """

    COVERAGE: ClassVar[float] = MODELS_COVERAGE

    def _measure(self, types: Sequence[TaskType]) -> FragModel:
        """:class:`ModelFragModel` over the CPU-only and single-GPU types."""
        return ModelFragModel(single_gpu_types(types))

    def node_score(self, ssn: Session, task: TaskInfo, fit: Fit) -> float:
        """``10 * level`` plus, on a node that hosts pods, 1 (whole GPU, CPU) or 11 (a GPU share)."""
        level = _sigmoid_score(self.delta(task, fit))
        in_use = (11 if task.shared else 1) if fit.node.pods > 0 else 0
        return float(level * 10 + in_use)


def model_aware_policy(types: Sequence[TaskType] | None = None) -> FgdPolicy:
    """The ``frag-aware-models`` policy for a task-type distribution (default: as :func:`policies`)."""
    if types is None:
        return _LazyPolicy(ModelAwarePolicy)  # type: ignore[return-value]
    return ModelAwarePolicy(types)


def policies(types: Sequence[TaskType] | None = None) -> tuple[FgdPolicy, FgdPolicy]:
    """The ``fgd`` and ``frag-aware`` policies for a task-type distribution (default: the shipped trace's,
    read on first use). Their memo tables live as long as the returned objects."""
    if types is None:
        return _LazyPolicy(FgdPolicy), _LazyPolicy(FragAwarePolicy)  # type: ignore[return-value]
    return FgdPolicy(types), FragAwarePolicy(types)


class _LazyPolicy:
    """A policy over the distribution a session scores against, built on first use so importing reads no
    file: with ``workload_types: decayed`` each node is scored against its node pool's decayed workload
    (:func:`decayed_task_types` of ``ClusterState.workload_history``); with ``learnt`` the cluster's last
    pods (:func:`learnt_task_types` of ``ClusterState.workload``) when the log holds pods; the shipped prior
    otherwise."""

    def __init__(self, cls: type[FgdPolicy]) -> None:
        self._cls = cls
        self._policy: FgdPolicy | None = None
        # One learnt policy, for the workload it was built from: the snapshot's counts change only every
        # WorkloadWindow.REFRESH pods, so its memo tables serve many cycles.
        self._learnt: tuple[tuple[tuple[WorkloadShape, int], ...], FgdPolicy] | None = None
        # Per pool, the decayed policy and what it was built from (history, rounded time, settings): the
        # history changes every PoolHistory.REFRESH pods, the rounded time every workload_refresh_s.
        self._decayed: dict[str, tuple[tuple[object, ...], FgdPolicy]] = {}

    def _prior(self) -> FgdPolicy:
        if self._policy is None:
            self._policy = self._cls(default_task_types())
        return self._policy

    def _get(self, ssn: Session) -> FgdPolicy:
        workload = ssn.state.workload
        if workload and ssn.config.workload_types == "learnt":
            hit = self._learnt
            if hit is None or hit[0] != workload:
                hit = (workload, self._cls(learnt_task_types(workload, threshold=self._cls.COVERAGE)))
                self._learnt = hit
            return hit[1]
        return self._prior()

    def _pool_policy(self, ssn: Session, pool: str) -> FgdPolicy:
        history = dict(ssn.state.workload_history).get(pool)
        if not history:
            return self._prior()
        cfg = ssn.config
        refresh_ms = cfg.workload_refresh_s * 1000
        key = (
            history,
            ssn.now_ms - ssn.now_ms % refresh_ms,
            cfg.workload_half_life_s,
            cfg.workload_window_s,
            refresh_ms,
        )
        hit = self._decayed.get(pool)
        # The history by identity first: comparing its thousands of entries on every task would cost more
        # than the scores (a snapshot shares the frozen tuple until the pool's next refresh).
        if hit is None or not (hit[0][0] is history or hit[0][0] == history) or hit[0][1:] != key[1:]:
            types = decayed_task_types(
                history,
                ssn.now_ms,
                cfg.workload_half_life_s * 1000,
                cfg.workload_window_s * 1000,
                refresh_ms,
                threshold=self._cls.COVERAGE,
            )
            hit = self._decayed[pool] = (key, self._cls(types))
        return hit[1]

    def scores(self, ssn: Session, task: TaskInfo, fits: Sequence[Fit]) -> list[float]:
        if ssn.config.workload_types != "decayed":
            return self._get(ssn).scores(ssn, task, fits)
        label = ssn.config.node_pool_label
        pools = [f.node.spec.labels.get(label, "") for f in fits]
        first = pools[0] if pools else ""
        if all(p == first for p in pools):
            return self._pool_policy(ssn, first).scores(ssn, task, fits)
        # An unsharded scheduler over several pools: each node against its own pool's workload.
        out = [0.0] * len(fits)
        for pool in sorted(set(pools)):
            idx = [i for i, p in enumerate(pools) if p == pool]
            got = self._pool_policy(ssn, pool).scores(ssn, task, [fits[i] for i in idx])
            for i, v in zip(idx, got, strict=True):
                out[i] = v
        return out

    def choose(self, ssn: Session, task: TaskInfo, fit: Fit) -> Fit:
        if ssn.config.workload_types != "decayed":
            return self._get(ssn).choose(ssn, task, fit)
        pool = fit.node.spec.labels.get(ssn.config.node_pool_label, "")
        return self._pool_policy(ssn, pool).choose(ssn, task, fit)
