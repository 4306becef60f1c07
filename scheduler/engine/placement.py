"""Where a task can go and where it should go: predicates, node scoring and GPU device choice.

Node scores follow KAI's plugin constants and are summed: +1000 when a shared-GPU task fits an existing
shared device (binpack sharing), +100 when the task fits on idle capacity (not only on releasing capacity),
+10 for a CPU-only task on a CPU-only node, plus the node-placement score (binpack 0..9, spread 0..1).
Ties go to the node name, ascending. Scoring rules are looked up by name in :mod:`scheduler.engine.scoring`
(the one table of them), so a new policy is a new entry there, not an edit across the engine.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from scheduler.engine import predicates, scoring
from scheduler.engine.columns import BoolArray, Columns, IntArray, columns
from scheduler.engine.predicates.labels import node_terms_match, tolerates_cordon, untolerated_taint
from scheduler.engine.scoring import fragmentation
from scheduler.engine.scoring.fit import Fit, fits_existing_shared
from scheduler.engine.session import GPU_MILLI, NodeInfo, Session, Statement, TaskInfo


def static_reason(task: TaskInfo, node: NodeInfo) -> str | None:
    """Checks that do not depend on what else runs on the node; None when they all pass."""
    spec = node.spec
    if not spec.ready:
        return "node(s) were not ready"
    pod = task.pod
    if spec.unschedulable and not tolerates_cordon(pod):
        return "node(s) were unschedulable"
    if pod.allowed_nodes is not None and node.name not in pod.allowed_nodes:
        return "node(s) didn't match Pod's node affinity/selector"
    labels = spec.labels
    for k, v in pod.node_selector.items():
        if labels.get(k) != v:
            return "node(s) didn't match Pod's node affinity/selector"
    if pod.affinity and not node_terms_match(labels, pod.affinity, node.name):
        return "node(s) didn't match Pod's node affinity/selector"
    taint = untolerated_taint(task.pod, spec) if spec.taints else None
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
    req = task.request
    if (req.gpus or req.is_shared) and node.gpus == 0:
        return "node(s) didn't have enough resources: GPUs"
    if req.gpu_memory_mib is not None:
        if not node.gpu_memory_mib:
            return "node(s) didn't advertise GPU memory (label nvidia.com/gpu.memory)"
        if req.gpu_memory_mib > node.gpu_memory_mib:
            return "node(s) didn't have enough resources: GPU memory"
    return None


def fit(ssn: Session, task: TaskInfo, node: NodeInfo, allow_idle: bool = True) -> Fit | str:
    """The best way `task` fits `node` right now, or the short reason it does not."""
    reason = static_reason(task, node)
    if reason is not None:
        return reason
    req = task.request
    idle_ok = node.idle(0) >= req.cpu and node.idle(1) >= req.memory
    if node.future(0) < req.cpu:
        return "node(s) didn't have enough resources: CPU"
    if node.future(1) < req.memory:
        return "node(s) didn't have enough resources: memory"
    if task.constrained or ssn.anti_present:
        why, now = predicates.pod_reason(ssn, task, node)
        if why is not None:
            return why
        idle_ok = idle_ok and now
    if req.is_shared:
        return _fit_shared(ssn, task, node, idle_ok and allow_idle)
    new_pods = node.pods_used() + 1
    if new_pods > node.spec.max_pods:
        return "node(s) had too many pods"
    if req.gpus:
        idle_devs = node.whole_idle_devices()
        if idle_ok and allow_idle and len(idle_devs) >= req.gpus:
            return Fit(node, True, tuple(idle_devs[: req.gpus]), 0, False)
        fut = node.whole_future_devices()
        if len(fut) < req.gpus:
            return "node(s) didn't have enough resources: GPUs"
        # Prefer idle devices, then releasing ones.
        fut.sort(key=lambda d: (d not in idle_devs, d))
        return Fit(node, False, tuple(fut[: req.gpus]), 0, False)
    return Fit(node, idle_ok and allow_idle, (), 0, False)


def _fit_shared(ssn: Session, task: TaskInfo, node: NodeInfo, idle_ok: bool) -> Fit | str:
    req = task.request
    if req.gpu_fraction_milli is not None:
        portion = req.gpu_fraction_milli
    else:
        assert req.gpu_memory_mib is not None
        p = node.memory_portion(req.gpu_memory_mib)
        if p is None:
            return "node(s) didn't advertise GPU memory (label nvidia.com/gpu.memory)"
        portion = p
    if portion > GPU_MILLI:
        return "node(s) didn't have enough resources: GPU memory"
    whole = set(node.whole_future_devices())
    spread = ssn.config.gpu_sharing_placement == "spread"
    cands: list[tuple[float, int, int]] = []  # (sort score, tie, device)
    for d in range(node.gpus):
        if d in whole:
            used = 0
        elif node.dev_shared[d] > 0 and node.dev_future(d) >= portion:
            used = GPU_MILLI - node.dev_future(d)
        else:
            continue
        # A shared GPU whose reservation is still pipelined is not there yet: joining it is pipelining too
        # (KAI's gpuSharingOrder case with a pending reservation pod).
        not_idle = 1 if node.dev_idle(d) < portion or node.dev_pipe[d] > 0 else 0
        score = -(GPU_MILLI - used) if spread else -used
        if ssn.config.gpu_sharing_placement == "none":
            score = 0
        cands.append((score, not_idle, d))
    n = req.gpu_fraction_devices
    if len(cands) < n:
        return "node(s) didn't have enough resources: GPUs"
    cands.sort()
    chosen = [d for _, _, d in cands[:n]]
    new_group = any(node.dev_shared[d] == 0 for d in chosen)
    new_groups = sum(1 for d in chosen if node.dev_shared[d] == 0)
    if node.pods_used() + 1 + new_groups > node.spec.max_pods:
        return "node(s) had too many pods"
    idle = idle_ok and all(node.dev_idle(d) >= portion and node.dev_pipe[d] == 0 for d in chosen)
    return Fit(node, idle, tuple(chosen), portion, new_group)


def _node_maxima(ssn: Session) -> tuple[int, int, int]:
    """The largest GPU count, CPU and memory of a Ready node (node specs are fixed within a session)."""
    cached = ssn._node_maxima
    if cached is not None and cached[0] is ssn.nodes and cached[1] == len(ssn.nodes):
        return cached[2]
    nodes = [n for n in ssn.nodes if n.spec.ready]
    out = (
        max((n.gpus for n in nodes), default=0),
        max((n.spec.cpu for n in nodes), default=0),
        max((n.spec.memory for n in nodes), default=0),
    )
    ssn._node_maxima = (ssn.nodes, len(ssn.nodes), out)
    return out


def max_node_resources_error(ssn: Session, task: TaskInfo) -> str | None:
    """KAI's pre-predicate: a request larger than the largest node can never fit."""
    req = task.request
    most, max_cpu, max_mem = _node_maxima(ssn)
    if req.gpus or req.is_shared:
        if most == 0:
            return "No node in the default node-pool has GPU resources"
        need = req.gpus or req.gpu_fraction_devices
        if need > most:
            return (
                f"The pod {task.name} requires {need} GPU(s). Max GPU resources available in a single "
                f"node in the default node-pool is topped at {most} GPU(s)"
            )
    if req.cpu > max_cpu:
        return (
            f"The pod {task.name} requires {req.cpu / 1000:g} CPU cores. Max CPU resources available in a "
            f"single node in the default node-pool is topped at {max_cpu / 1000:g} cores"
        )
    if req.memory > max_mem:
        return (
            f"The pod {task.name} requires {req.memory / 1e9:g} GB of memory. Max memory available in a "
            f"single node in the default node-pool is topped at {max_mem / 1e9:g} GB"
        )
    return None


def exceeds_every_node(ssn: Session, task: TaskInfo) -> dict[str, int | str] | None:
    """What makes `task` larger than every Ready node, or None: ``{"resource", "requested", "largest_node"}``
    in engine units (milli-GPU, millicores, bytes).

    The structured twin of :func:`max_node_resources_error`: such a pod never starts as it is, whatever
    finishes or is reclaimed, and the record says so in the pending job's details so advice can too.
    """
    req = task.request
    most, max_cpu, max_mem = _node_maxima(ssn)
    if req.gpus or req.is_shared:
        need = req.gpus or req.gpu_fraction_devices
        if need > most:
            return {"resource": "gpu", "requested": need * GPU_MILLI, "largest_node": most * GPU_MILLI}
    if req.cpu > max_cpu:
        return {"resource": "cpu", "requested": req.cpu, "largest_node": max_cpu}
    if req.memory > max_mem:
        return {"resource": "memory", "requested": req.memory, "largest_node": max_mem}
    return None


def ordered_fits(
    ssn: Session, task: TaskInfo, nodes: Sequence[NodeInfo], allow_idle: bool = True, best_only: bool = False
) -> tuple[list[Fit], Counter[str]]:
    """Nodes the task fits, best first, and a histogram of why the others did not fit.

    With `best_only` the caller reads only the first fit (and the histogram): then, under a scoring rule
    other than plain ``kai`` and for a task without pod predicates, nodes of one kind
    (:func:`scoring.fragmentation.node_key`: equal free views, counts and limits, so equal fits and
    scores) are fitted and scored once, by their first node in name order; the others count as it does.
    """
    fits: list[Fit] = []
    why: Counter[str] = Counter()
    cols = columns(ssn) if COLUMNS and len(nodes) >= COLUMNS_MIN_NODES else None
    if cols is not None:
        kinds = (
            best_only
            and not scoring.is_plain_kai(ssn.config.node_scoring)
            and not task.constrained
            and not ssn.anti_present
            and not predicates.existing_terms(ssn, task)
        )
        _scan_columns(ssn, cols, task, nodes, allow_idle, fits, why, kinds)
    else:
        for n in nodes:
            r = fit(ssn, task, n, allow_idle)
            if isinstance(r, Fit):
                fits.append(r)
            else:
                why[r] += 1
    rule = scoring.lookup(ssn.config.node_scoring)
    if rule.choose_devices is not None:
        fits = [rule.choose_devices(ssn, task, f) for f in fits]
    if len(fits) > 1:
        scores = rule.score(ssn, task, fits)
        pref = (
            predicates.preference_scores(ssn, task, [f.node for f in fits])
            if task.preferences or predicates.existing_terms(ssn, task)
            else None
        )
        if pref is not None:
            scores = [a + b for a, b in zip(scores, pref, strict=True)]
        order = sorted(range(len(fits)), key=lambda i: (-scores[i], fits[i].node.name))
        fits = [fits[i] for i in order]
    return fits, why


COLUMNS = True  # tests switch it off to check the vector checks against the per-node scan
COLUMNS_MIN_NODES = 16  # below this many nodes the per-node scan is as fast: no arrays

_NO_CPU = "node(s) didn't have enough resources: CPU"
_NO_MEMORY = "node(s) didn't have enough resources: memory"
_TOO_MANY_PODS = "node(s) had too many pods"
_NO_GPUS = "node(s) didn't have enough resources: GPUs"
_NO_GPU_MEMORY = "node(s) didn't have enough resources: GPU memory"


def _static_columns(cols: Columns, task: TaskInfo) -> tuple[BoolArray, list[str | None]]:
    """:func:`static_reason` on every node (by rank), kept per task signature: specs are fixed in a session."""
    pod, req = task.pod, task.request
    key = (
        pod.allowed_nodes,
        tuple(sorted(pod.node_selector.items())),
        pod.affinity,
        pod.tolerations,
        bool(req.gpus or req.is_shared),
        req.gpu_memory_mib,
    )
    got = cols.static.get(key)
    if got is None:
        reasons = [static_reason(task, n) for n in cols.nodes]
        got = (np.array([r is None for r in reasons], dtype=np.bool_), reasons)
        cols.static[key] = got
    return got


def _scan_columns(
    ssn: Session,
    cols: Columns,
    task: TaskInfo,
    nodes: Sequence[NodeInfo],
    allow_idle: bool,
    fits: list[Fit],
    why: Counter[str],
    kinds: bool = False,
) -> None:
    """:func:`fit` on every node of `nodes`, with the checks that read only capacity done as vector ops.

    Each node gets the code of the first check it fails, in :func:`fit`'s order: the static checks, future
    CPU, future memory and, for a task without pod predicates, the device checks: for a whole-GPU or
    CPU-only task the pod count and whole free devices, for a one-device shared task its portion and a
    device that is whole or shared with room. Only nodes that pass them all are asked :func:`fit` (for
    their ``Fit``, or for a reason the later checks give); the others count under their code's reason.
    """
    ranks = cols.ranks(nodes)
    code, reasons = _first_failed(ssn, cols, task, ranks)
    if kinds:
        # One fit per node kind, on its first node by name (ties in score go to the name); the static
        # checks, the only ones that read labels and taints, are already behind us. Rows are in name
        # order, so a kind's first node by name is its passing node of lowest rank.
        at = np.flatnonzero(code == 0)
        by_name = at[np.argsort(ranks[at], kind="stable")]
        _, first, count = np.unique(
            _kind_column(ssn, cols)[ranks[by_name]], return_index=True, return_counts=True
        )
        for j in np.argsort(first, kind="stable").tolist():
            got = fit(ssn, task, nodes[int(by_name[first[j]])], allow_idle)
            if isinstance(got, Fit):
                fits.append(got)
            else:
                why[got] += int(count[j])
    else:
        for i in np.flatnonzero(code == 0).tolist():
            r = fit(ssn, task, nodes[i], allow_idle)
            if isinstance(r, Fit):
                fits.append(r)
            else:
                why[r] += 1
    counts = np.bincount(code, minlength=7).tolist()
    if counts[1]:
        for rank in ranks[code == 1].tolist():
            why[reasons[rank] or ""] += 1
    for c, reason in ((2, _NO_CPU), (3, _NO_MEMORY), (4, _TOO_MANY_PODS), (5, _NO_GPUS), (6, _NO_GPU_MEMORY)):
        if counts[c]:
            why[reason] += counts[c]


def _kind_column(ssn: Session, cols: Columns) -> IntArray:
    """Each row's :func:`scoring.fragmentation.node_kinds` number, renumbering only the rows rewritten since
    the last read (a node's kind changes only with the node, which marks its row)."""
    numbering = fragmentation.kind_numbering(ssn)
    kind = fragmentation.node_kinds(ssn)
    got = cols.kinds
    if got is None or got[0] is not numbering:
        column = np.fromiter((kind(n) for n in cols.nodes), dtype=np.int64, count=cols.size)
        cols.kinds = (numbering, column)
    else:
        column = got[1]
        for r in cols.kind_dirty:
            column[r] = kind(cols.nodes[r])
    cols.kind_dirty.clear()
    return column


def _first_failed(
    ssn: Session, cols: Columns, task: TaskInfo, ranks: IntArray
) -> tuple[npt.NDArray[np.int8], list[str | None]]:
    """Per node (rows `ranks`) the code of the first vector check it fails, 0 if none (see
    :func:`_scan_columns`), and the static reasons by rank for code 1."""
    ok, reasons = _static_columns(cols, task)
    req = task.request
    code = np.zeros(len(ranks), dtype=np.int8)
    if task.constrained or ssn.anti_present:
        pass  # pod predicates come next in fit(): nodes that pass capacity go to fit()
    elif not req.is_shared:
        if req.gpus:
            code[cols.whole_future[ranks] < req.gpus] = 5
        code[cols.pods_used[ranks] + 1 > cols.max_pods[ranks]] = 4
    elif req.gpu_fraction_devices == 1:
        # _fit_shared's first checks: the portion fits a device; some device is whole or shared with room
        portion, known = cols.portions(req.gpu_fraction_milli, req.gpu_memory_mib)
        portion, known = portion[ranks], known[ranks]
        no_device = known & (cols.whole_future[ranks] == 0) & (cols.room[ranks] < portion)
        code[no_device] = 5
        code[known & (portion > GPU_MILLI)] = 6
    code[cols.future_memory[ranks] < req.memory] = 3
    code[cols.future_cpu[ranks] < req.cpu] = 2
    code[~ok[ranks]] = 1
    return code, reasons


def _vector_applies(ssn: Session, task: TaskInfo, nodes: Sequence[NodeInfo]) -> bool:
    """Whether :func:`_vector_best` knows every check and score for this task: the kai scorer (no device
    chooser, no preferences), a whole-GPU or CPU-only task without pod predicates, enough nodes."""
    cfg = ssn.config
    return (
        COLUMNS
        and len(nodes) >= COLUMNS_MIN_NODES
        and scoring.is_plain_kai(cfg.node_scoring)
        and not task.constrained  # includes preferences, extended resources, ports, volumes
        and not ssn.anti_present
        and not predicates.existing_terms(ssn, task)
        and not task.request.is_shared
        and columns(ssn) is not None
    )


def _vector_best(ssn: Session, task: TaskInfo, nodes: Sequence[NodeInfo], allow_idle: bool) -> Fit | None:
    """:func:`ordered_fits` ``[0]`` for a task :func:`_vector_applies` to, computed over the columns.

    Feasibility (static checks, future CPU / memory, pod count, whole free devices), fitting on idle
    capacity, and :func:`scheduler.engine.scoring.kai.kai_scores` are vector ops with the scalar code's integer and float arithmetic,
    in the same order; the best score wins, ties to the node name. Only the winner is asked :func:`fit`,
    for its ``Fit``. None when the task fits nowhere (the caller then scans for the reasons).
    """
    cols = columns(ssn)
    if cols is None:
        return None
    ranks = cols.ranks(nodes)
    ok, _ = _static_columns(cols, task)
    req = task.request
    feasible = (
        ok[ranks]
        & (cols.future_cpu[ranks] >= req.cpu)
        & (cols.future_memory[ranks] >= req.memory)
        & (cols.pods_used[ranks] + 1 <= cols.max_pods[ranks])
    )
    if req.gpus:
        feasible &= cols.whole_future[ranks] >= req.gpus
    pos = np.flatnonzero(feasible)
    if len(pos) == 0:
        return None
    at = int(pos[0])
    if len(pos) > 1:
        r = ranks[pos]
        cpu_only = task.is_cpu_only()
        cfg = ssn.config
        strategy = cfg.cpu_placement if cpu_only else cfg.gpu_placement
        total = cols.cpu[r] if cpu_only else cols.gpus[r] * GPU_MILLI
        has_total = total > 0
        safe_total = np.where(has_total, total, 1)
        if strategy == "none":
            score = np.zeros(len(r), dtype=np.float64)
        elif strategy == "spread":
            left = cols.future_cpu[r] if cpu_only else cols.gpus_left[r]
            score = np.where(has_total, left / safe_total, 0.0)
        else:
            free = cols.future_cpu[r] if cpu_only else cols.whole_future[r] * GPU_MILLI
            frees = free[has_total]
            lo, hi = (int(frees.min()), int(frees.max())) if len(frees) else (0, 0)
            if hi == 0:
                score = np.zeros(len(r), dtype=np.float64)
            elif lo == hi:
                score = np.where(has_total, 9.0, 0.0)
            else:
                score = np.where(has_total, 9.0 * (1 - (free - lo) / (hi - lo)), 0.0)
        if allow_idle:
            idle = (cols.idle_cpu[r] >= req.cpu) & (cols.idle_memory[r] >= req.memory)
            if req.gpus:
                idle &= cols.whole_idle[r] >= req.gpus
            score = score + np.where(idle, 100.0, 0.0)
        if cpu_only:
            score = score + np.where(cols.gpus[r] == 0, 10.0, 0.0)
        top = np.flatnonzero(score == score.max())
        at = int(pos[top[int(np.argmin(r[top]))]])
    best = fit(ssn, task, nodes[at], allow_idle)
    if not isinstance(best, Fit):  # cannot happen (the property test checks it); the scan decides if it does
        fits, _ = ordered_fits(ssn, task, nodes, allow_idle)
        return fits[0] if fits else None
    return best


def _walk_applies(ssn: Session, task: TaskInfo, nodes: Sequence[NodeInfo]) -> bool:
    """Whether :func:`_walk_best` applies: a shared-GPU task without pod predicates under the kai scorer
    with node-level spread or none (scores that do not depend on which other nodes fit)."""
    cfg = ssn.config
    return (
        COLUMNS
        and task.request.is_shared
        and cfg.gpu_placement in ("spread", "none")
        and len(nodes) >= COLUMNS_MIN_NODES
        and scoring.is_plain_kai(cfg.node_scoring)
        and not task.constrained
        and not ssn.anti_present
        and not predicates.existing_terms(ssn, task)
        and columns(ssn) is not None
    )


def _walk_best(ssn: Session, task: TaskInfo, nodes: Sequence[NodeInfo], allow_idle: bool) -> Fit | None:
    """:func:`ordered_fits` ``[0]`` for a task :func:`_walk_applies` to, asking :func:`fit` of few nodes.

    A node's kai score is its placement score, plus 100 if the task fits there on idle capacity (no
    sharing bonus without node-level binpack). The placement score is a vector op; whether the fit is idle
    is known only from :func:`fit` (it depends on the device chosen). So nodes passing the vector checks
    are walked by their best possible score (as if idle), then name, and the walk stops once no later node
    can beat the best score found: the same winner as scoring every node, with the same floats.
    """
    cols = columns(ssn)
    if cols is None:
        return None
    ranks = cols.ranks(nodes)
    code, _ = _first_failed(ssn, cols, task, ranks)
    pos = np.flatnonzero(code == 0)
    if len(pos) == 0:
        return None
    r = ranks[pos]
    total = cols.gpus[r] * GPU_MILLI
    if ssn.config.gpu_placement == "spread":
        base = np.where(total > 0, cols.gpus_left[r] / np.where(total > 0, total, 1), 0.0)
    else:
        base = np.zeros(len(r), dtype=np.float64)
    if_idle = base + 100.0 if allow_idle else base
    order = np.lexsort((r, -if_idle))
    best: Fit | None = None
    best_score = 0.0
    best_rank = 0
    for k in order.tolist():
        rank = int(r[k])
        bound = float(if_idle[k])
        if best is not None and (bound < best_score or (bound == best_score and rank > best_rank)):
            break
        f = fit(ssn, task, nodes[int(pos[k])], allow_idle)
        if not isinstance(f, Fit):
            continue
        score = bound if f.idle else float(base[k])
        if best is None or score > best_score or (score == best_score and rank < best_rank):
            best, best_score, best_rank = f, score, rank
    return best


def _shared_candidates(ssn: Session, task: TaskInfo) -> list[NodeInfo] | None:
    """Nodes where a shared-GPU task fits an existing shared device, by (free whole devices, name).

    One vector op over the columns' ``room``; None when the columns are off (the caller scans instead).
    """
    cols = columns(ssn) if COLUMNS else None
    if cols is None:
        return None
    req = task.request
    cand = np.flatnonzero(cols.shared_room_mask(req.gpu_fraction_milli, req.gpu_memory_mib))
    if len(cand) > 1:
        cand = cand[np.argsort(cols.whole_future[cand], kind="stable")]  # cand ascends by rank already
    by_rank = cols.nodes
    return [by_rank[r] for r in cand.tolist()]


def _fast_binpack(ssn: Session, task: TaskInfo, allow_idle: bool) -> Fit | None:
    """The kai scorer's best node under binpack, found without scoring every node.

    Scores are summed tiers: +1000 (shared task fits an existing shared device) > +100 (fits on idle
    capacity) > binpack 0..9 (fewer free whole devices is better) > node name. So the answer is: among
    nodes with a fitting shared device, the best by (idle, fewest free, name); otherwise the first node
    that fits on idle capacity scanning free-device buckets upward in name order; otherwise the first
    node that fits at all in the same scan. Returns None when nothing fits (the caller then collects the
    per-node reasons the slow way).
    """
    idx = ssn.free_index
    req = task.request
    if task.shared:
        cands = _shared_candidates(ssn, task)
        if cands is not None:
            # best key (not idle, fewest free, name): the first idle fit in this order, else the first fit
            first: Fit | None = None
            for n in cands:
                f = fit(ssn, task, n, allow_idle)
                if isinstance(f, Fit):
                    if f.idle:
                        return f
                    if first is None:
                        if not allow_idle:
                            return f  # no fit can be idle
                        first = f
            if first is not None:
                return first
            return _fast_binpack_scan(ssn, task, allow_idle, idx.buckets, req.gpu_fraction_devices)
        best: tuple[int, int, int] | None = None
        best_fit: Fit | None = None
        for r in idx.shared:
            n = idx.by_rank[r]
            if not fits_existing_shared(n, task):
                continue
            f = fit(ssn, task, n, allow_idle)
            if isinstance(f, Fit) and fits_existing_shared(n, task):
                key = (0 if f.idle else 1, idx.level[n.name], r)
                if best is None or key < best:
                    best, best_fit = key, f
        if best_fit is not None:
            return best_fit
        need = req.gpu_fraction_devices
    else:
        need = req.gpus
    return _fast_binpack_scan(ssn, task, allow_idle, idx.buckets, need)


def _fast_binpack_scan(
    ssn: Session, task: TaskInfo, allow_idle: bool, buckets: list[list[int]], need: int
) -> Fit | None:
    """The first idle fit scanning free-device buckets upward from `need`, else the first fit.

    Once a fit is in hand only an idle one can beat it, so nodes with fewer whole idle devices than
    `need` (no idle fit possible there) are passed over without being fitted -- for whole-GPU tasks only:
    a shared task may fit idle on a device it shares."""
    idx = ssn.free_index
    by_rank = idx.by_rank
    whole = not task.shared
    fallback: Fit | None = None
    start = max(need, 0)
    for k in range(start, len(buckets)):
        for i, r in enumerate(buckets[k]):
            f = fit(ssn, task, by_rank[r], allow_idle)
            if isinstance(f, Fit):
                if f.idle:
                    return f
                if fallback is None:
                    fallback = f
                    if whole:
                        if not allow_idle:
                            return fallback  # no fit can be idle
                        left = len(buckets[k]) - i - 1 + sum(len(b) for b in buckets[k + 1 :])
                        return (
                            _first_idle_after(ssn, task, allow_idle, buckets, need, (k, r), left) or fallback
                        )
    return fallback


def _first_idle_after(
    ssn: Session,
    task: TaskInfo,
    allow_idle: bool,
    buckets: list[list[int]],
    need: int,
    after: tuple[int, int],
    left: int,
) -> Fit | None:
    """The first idle fit of a whole-GPU task after position `after` (free-device bucket, rank) of the scan.

    Only a node with at least `need` whole idle devices can give an idle fit. When fewer such nodes
    exist than the `left` nodes the scan has still to pass, they are fitted in scan order instead."""
    idx = ssn.free_index
    by_rank, level, idle_level = idx.by_rank, idx.level, idx.idle_level
    idle_buckets = idx.idle_buckets
    count = sum(len(b) for b in idle_buckets[max(need, 0) :])
    if count < left:
        order = sorted((level[by_rank[r].name], r) for b in idle_buckets[max(need, 0) :] for r in b)
        nodes = (by_rank[pos[1]] for pos in order if pos > after)
    else:
        nodes = (
            by_rank[r]
            for k in range(after[0], len(buckets))
            for r in buckets[k]
            if (k, r) > after and idle_level[by_rank[r].name] >= need
        )
    for n in nodes:
        f = fit(ssn, task, n, allow_idle)
        if isinstance(f, Fit) and f.idle:
            return f
    return None


def _fast_binpack_cpu(ssn: Session, task: TaskInfo, allow_idle: bool) -> Fit | None:
    """The kai scorer's best node for a CPU-only task under CPU binpack, without scoring every node.

    Tiers: +100 (fits on idle capacity) > +10 (a node without GPUs) > binpack 0..9 (less free CPU is
    better: the score falls strictly as free CPU grows) > node name. Each class of nodes (without, with
    GPUs) is kept sorted by (future CPU, name); scanning a class upward from the request finds its first
    idle fit, which beats every later node of the class, and its first fit of any kind.
    """
    idx = ssn.free_index
    need = task.request.cpu
    idle: list[Fit | None] = [None, None]
    first: list[Fit | None] = [None, None]
    for cls in (0, 1):
        table = idx.cpu[cls]
        for _, r in table[bisect.bisect_left(table, (need, -1)) :]:
            f = fit(ssn, task, idx.by_rank[r], allow_idle)
            if not isinstance(f, Fit):
                continue
            if first[cls] is None:
                first[cls] = f
            if f.idle:
                idle[cls] = f
                break
            if not allow_idle:
                break  # no fit can be idle: the first is the best of its class
        if idle[0] is not None:
            return idle[0]  # idle, on a node without GPUs: nothing scores higher
    return idle[1] or first[0] or first[1]


FAST_PATH = True  # tests switch it off to check the fast path against the full scoring scan


def _fast_path_applies(ssn: Session, task: TaskInfo, nodes: Sequence[NodeInfo]) -> bool:
    cfg = ssn.config
    if (
        not FAST_PATH
        or task.preferences  # the fast path knows KAI's score tiers, not preference scores
        or predicates.existing_terms(ssn, task)  # ... nor the score placed pods' terms give
        or cfg.node_scoring != "kai"
        or nodes is not ssn.nodes
    ):
        return False
    if task.is_cpu_only():
        return cfg.cpu_placement == "binpack" and task.request.cpu > 0
    if cfg.gpu_placement != "binpack":
        return False
    req = task.request
    if task.shared:
        return cfg.gpu_sharing_placement == "binpack" and req.gpu_fraction_devices == 1
    return req.gpus > 0


def _fast_best(ssn: Session, task: TaskInfo, allow_idle: bool) -> Fit | None:
    if task.is_cpu_only():
        return _fast_binpack_cpu(ssn, task, allow_idle)
    return _fast_binpack(ssn, task, allow_idle)


def fit_summary(why: Counter[str]) -> str:
    """KAI-style histogram: "no nodes with enough resources were found: 2 <reason>. 1 <reason>."."""
    parts = [f"{n} {r}." for r, n in sorted(why.items(), key=lambda kv: (-kv[1], kv[0]))]
    return (
        "no nodes with enough resources were found: " + " ".join(parts)
        if parts
        else "no nodes in the cluster"
    )


def allocate_task(
    ssn: Session,
    stmt: Statement,
    task: TaskInfo,
    nodes: Sequence[NodeInfo],
    action: str,
    pipeline_only: bool = False,
    explain: bool = True,
) -> str | None:
    """Place `task` on the best node (allocate on idle capacity, else pipeline). Returns an error or None.

    With ``explain=False`` (what-if simulations that only need to know whether the task fits) a failed fast
    path returns a bare error instead of scanning every node again for the per-node reasons.
    """
    err = max_node_resources_error(ssn, task)
    if err is not None:
        return f"Scheduling conditions were not met for pod {task.name}:\nMaxNodePoolResources: {err}."
    fast = _fast_path_applies(ssn, task, nodes)
    if fast:
        best = _fast_best(ssn, task, not pipeline_only)
    elif _vector_applies(ssn, task, nodes):
        fast = True
        best = _vector_best(ssn, task, nodes, not pipeline_only)
    elif _walk_applies(ssn, task, nodes):
        fast = True
        best = _walk_best(ssn, task, nodes, not pipeline_only)
    else:
        best = None
    if best is None:
        if fast and not explain:
            return "no nodes with enough resources were found"
        fits, why = ordered_fits(ssn, task, nodes, allow_idle=not pipeline_only, best_only=True)
        if not fits:
            ssn.last_why = why
            return fit_summary(why) + foreign_note(ssn, task, nodes)
        best = fits[0]
    stmt.place(task, best.node, best.devices, best.portion, pipelined=not best.idle, action=action)
    return None


def foreign_note(ssn: Session, task: TaskInfo, nodes: Sequence[NodeInfo], most: int = 3) -> str:
    """Name the nodes where pods of other schedulers hold what the task lacks ("" when none do)."""
    gpu = not task.is_cpu_only()
    parts: list[str] = []
    for n in nodes:
        if len(parts) == most:
            break
        if gpu and n.foreign_gpu_milli:
            parts.append(
                f"node {n.name}: {n.foreign_gpu_milli / GPU_MILLI:g} GPUs held by pods of other schedulers"
            )
        elif not gpu and n.foreign_cpu and n.future(0) < task.request.cpu:
            parts.append(
                f"node {n.name}: {n.foreign_cpu / 1000:g} CPU cores held by pods of other schedulers"
            )
    return (" " + "; ".join(parts) + ".") if parts else ""


def best_fit(ssn: Session, task: TaskInfo, nodes: Sequence[NodeInfo], allow_idle: bool = True) -> Fit | None:
    """The node (and devices) `task` would go to among `nodes`, or None when it fits nowhere.

    The same choice as :func:`ordered_fits` ``[0]``, through the binpack fast path when it applies.
    """
    if _fast_path_applies(ssn, task, nodes):
        return _fast_best(ssn, task, allow_idle)
    if _vector_applies(ssn, task, nodes):
        return _vector_best(ssn, task, nodes, allow_idle)
    if _walk_applies(ssn, task, nodes):
        return _walk_best(ssn, task, nodes, allow_idle)
    fits, _ = ordered_fits(ssn, task, nodes, allow_idle, best_only=True)
    return fits[0] if fits else None
