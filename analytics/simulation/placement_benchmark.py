"""Placement benchmark on the Alibaba GPU trace, following the FGD paper's protocol (Weng et al., ATC '23).

Protocol (``docs/fgd-protocol.md`` §4): for each seed, ``random.Random(seed)`` shuffles the
name-sorted tasks, then appends tasks drawn uniformly with replacement from the name-sorted list while the
total GPU request stays within 130 % of the cluster's GPUs, then draws a random priority order of the nodes
(ties between equal node scores go to the earlier node). Tasks are placed one at a time, never leave, and a
task that fits nowhere is dropped (its GPU request still counts as arrived). The metric is the unallocated
share of GPUs at arrived = 100 % of capacity (mean over the tasks whose rounded arrived percentage is 100).

Every placement goes through the engine: a :class:`~scheduler.engine.session.Session` over the trace nodes,
:func:`scheduler.engine.placement.ordered_fits` with ``SessionConfig.node_scoring`` = the policy, and
:meth:`~scheduler.engine.session.Statement.place`. To keep 10k tasks x 1,213 nodes fast, nodes in identical states
are grouped (:class:`NodeClasses`) and only the first node of each group (in tie-break order) is offered to
``ordered_fits``: nodes with equal state fit and score equally, and the engine breaks ties by name, so the
choice is the one all nodes would give.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from bisect import insort
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import scheduler.engine.scoring.fragmentation as frag
from analytics.simulation.trace_variants import VARIANTS, variant_nodes, variant_tasks
from ingest.events import NodeUpserted
from ingest.trace import (
    DEFAULT_GPU_NODES,
    DEFAULT_PODS,
    TraceTask,
    read_nodes,
    read_pods,
    task_node_affinity,
    task_requests,
)
from scheduler.engine import scoring
from scheduler.engine.placement import ordered_fits
from scheduler.engine.session import GPU_MILLI, NodeInfo, Session, SessionConfig
from scheduler.engine.state import ClusterState, Job, MatchExpression, Pod, PodRequest, node_from_event

__all__ = [
    "DEFAULT_FIRST_SEED",
    "INFLATION",
    "POLICIES",
    "NodeClasses",
    "SeedResult",
    "add_arguments",
    "arrival_sequence",
    "build_state",
    "policy_config",
    "run_benchmark",
    "run_cli",
    "run_seed",
    "unallocated_at",
]

INFLATION = 1.3  # arrivals continue to 130 % of the cluster's GPU capacity
DEFAULT_FIRST_SEED = 42  # the paper's seeds are 42..51
ACTION = "placement-benchmark"

# policy name -> (node_scoring, gpu_placement, gpu_sharing_placement, cpu_placement)
POLICIES: dict[str, tuple[str, str, str, str]] = {
    "binpack": ("kai", "binpack", "binpack", "binpack"),
    "spread": ("kai", "spread", "spread", "spread"),
    # best-fit's GPU choice (the fullest GPU that fits) is the engine's binpack sharing placement
    "bestfit": ("bestfit", "binpack", "binpack", "binpack"),
    "fgd": ("fgd", "binpack", "binpack", "binpack"),
    "frag-aware": ("frag-aware", "binpack", "binpack", "binpack"),
    "frag-aware-models": ("frag-aware-models", "binpack", "binpack", "binpack"),
}


def policy_config(policy: str) -> SessionConfig:
    """The engine configuration a benchmark policy name stands for."""
    try:
        scoring, gpu, sharing, cpu = POLICIES[policy]
    except KeyError:
        raise ValueError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})") from None
    return SessionConfig(
        node_scoring=scoring, gpu_placement=gpu, gpu_sharing_placement=sharing, cpu_placement=cpu
    )


# --------------------------------------------------------------------------- workload and cluster


def arrival_sequence(
    tasks: Sequence[TraceTask], capacity_milli: int, rng: random.Random, inflation: float = INFLATION
) -> list[TraceTask]:
    """The seeded arrival order: shuffled originals, then resampled copies up to `inflation` x capacity.

    Copies are named ``<name>-tuned-<i>``. Resampling stops at the first draw that would push the total GPU
    request (``sum num_gpu * gpu_milli``) above the target; if the trace alone exceeds the target, random
    tasks are removed until it fits (the simulator's workload tuning).
    """
    base = sorted(tasks, key=lambda t: t.name)
    order = list(base)
    rng.shuffle(order)
    target = inflation * capacity_milli
    total = sum(t.gpu_request_milli for t in order)
    if total > target:
        while total > target and order:
            gone = order.pop(rng.randrange(len(order)))
            total -= gone.gpu_request_milli
        return order
    i = 0
    while base:
        t = base[rng.randrange(len(base))]
        if total + t.gpu_request_milli > target:
            break
        total += t.gpu_request_milli
        order.append(
            TraceTask(
                name=f"{t.name}-tuned-{i}",
                cpu_millicores=t.cpu_millicores,
                memory_bytes=t.memory_bytes,
                num_gpu=t.num_gpu,
                gpu_milli=t.gpu_milli,
                gpu_spec=t.gpu_spec,
            )
        )
        i += 1
    return order


def _pod(t: TraceTask, index: int) -> tuple[Job, Pod]:
    r = task_requests(t)
    request = PodRequest(
        cpu=r.cpu_millicores,
        memory=r.memory_bytes,
        gpus=r.gpus,
        gpu_fraction_milli=r.gpu_fraction_milli,
        gpu_fraction_devices=r.gpu_fraction_devices,
    )
    affinity = tuple(
        tuple(MatchExpression(e.key, e.operator, tuple(e.values)) for e in term.match_expressions)
        for term in task_node_affinity(t)
    )
    job = Job(uid=t.name, name=t.name, queue="trace", created_ms=index)
    return job, Pod(
        uid=t.name, name=t.name, job=t.name, request=request, index=0, created_ms=index, affinity=affinity
    )


def build_state(
    nodes_csv: Path | str | Sequence[NodeUpserted], sequence: Sequence[TraceTask], rng: random.Random
) -> ClusterState:
    """Snapshot of the trace cluster (a node list file, or its nodes) with every task pending, one
    single-pod job each.

    Nodes are renamed ``<priority>-<name>`` with a seeded random priority, so the engine's tie-break (node
    name, ascending) is the protocol's random node order.
    """
    given = read_nodes(nodes_csv) if isinstance(nodes_csv, (str, Path)) else nodes_csv
    events = sorted(given, key=lambda e: e.name)
    prio = list(range(len(events)))
    rng.shuffle(prio)
    width = max(4, len(str(len(events))))
    nodes = tuple(node_from_event(e, f"{prio[i]:0{width}d}-{e.name}") for i, e in enumerate(events))
    jobs, pods = zip(*(_pod(t, i) for i, t in enumerate(sequence)), strict=True) if sequence else ((), ())
    return ClusterState(nodes=nodes, jobs=tuple(jobs), pods=tuple(pods))


# --------------------------------------------------------------------------- node classes


def _spec_key(n: NodeInfo) -> Hashable:
    s = n.spec
    return (
        s.cpu,
        s.memory,
        s.gpus,
        s.gpu_memory_mib,
        s.gpu_model,
        s.max_pods,
        tuple(sorted(s.labels.items())),
        s.taints,
        s.ready,
        s.unschedulable,
    )


class NodeClasses:
    """Nodes grouped by everything placement reads (spec without the name, and all accounting).

    Two nodes with the same signature fit and score the same for every task, so only the first of each
    group by name needs to be offered to the engine. Call :meth:`update` after a node's state changed.
    """

    def __init__(self, nodes: Sequence[NodeInfo]) -> None:
        self._spec_ids: dict[Hashable, int] = {}
        self._spec_of: dict[str, int] = {}
        self._sig_of: dict[str, Hashable] = {}
        self._members: dict[Hashable, list[tuple[str, NodeInfo]]] = {}
        for n in nodes:
            self._spec_of[n.name] = self._spec_ids.setdefault(_spec_key(n), len(self._spec_ids))
            self._add(n)

    def signature(self, n: NodeInfo) -> Hashable:
        """The node's state signature."""
        return (
            self._spec_of[n.name],
            n.pods,
            *n.alloc,
            *n.rel,
            *n.pipe,
            tuple(n.dev_alloc),
            tuple(n.dev_rel),
            tuple(n.dev_pipe),
            tuple(n.dev_shared),
        )

    def _add(self, n: NodeInfo) -> None:
        sig = self.signature(n)
        self._sig_of[n.name] = sig
        insort(self._members.setdefault(sig, []), (n.name, n), key=lambda m: m[0])

    def update(self, n: NodeInfo) -> None:
        """Move `n` to the group of its current state."""
        old = self._sig_of[n.name]
        members = self._members[old]
        members.remove(next(m for m in members if m[0] == n.name))
        if not members:
            del self._members[old]
        self._add(n)

    def representatives(self) -> list[NodeInfo]:
        """The first node (by name) of each group."""
        return [m[0][1] for m in self._members.values()]

    def __len__(self) -> int:
        return len(self._members)


# --------------------------------------------------------------------------- running


@dataclass
class SeedResult:
    """One seed of one policy."""

    policy: str
    seed: int
    tasks: int
    placed: int
    failed: int
    capacity_milli: int
    arrived: list[int] = field(repr=False)  # cumulative arrived milli-GPU after each task
    allocated: list[int] = field(repr=False)  # allocated milli-GPU after each task
    seconds: float = 0.0

    def unallocated(self, arrived_pct: int = 100) -> float:
        """Unallocated GPU % at the given arrived percentage (see :func:`unallocated_at`)."""
        return unallocated_at(self.arrived, self.allocated, self.capacity_milli, arrived_pct)


def unallocated_at(arrived: Sequence[int], allocated: Sequence[int], capacity: int, pct: int = 100) -> float:
    """``100 - mean allocation %`` over the tasks whose ``round(arrived %)`` is `pct` (else within ±1)."""
    pts = [a for x, a in zip(arrived, allocated, strict=True) if round(100 * x / capacity) == pct]
    if not pts:
        pts = [a for x, a in zip(arrived, allocated, strict=True) if abs(100 * x / capacity - pct) <= 1]
    if not pts:
        raise ValueError(f"no task arrived near {pct} % of capacity")
    return 100 - 100 * statistics.fmean(pts) / capacity


def run_seed(
    policy: str,
    seed: int,
    pods_csv: Path | str = DEFAULT_PODS,
    nodes_csv: Path | str = DEFAULT_GPU_NODES,
    limit: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    session_out: list[Session] | None = None,
    group_nodes: bool = True,
    variant: str = "default",
    until: int | None = None,
) -> SeedResult:
    """Run one seed: place the seeded arrival sequence task by task through the engine.

    `variant` (:data:`~analytics.simulation.trace_variants.VARIANTS`) derives the workload or node mix
    from the given lists first (:mod:`analytics.simulation.trace_variants`). `until` stops the run once the
    tasks arrived exceed that percentage of the capacity (``unallocated(x)`` stays exact for ``x < until``).

    `limit` keeps only the first tasks of the sequence (tests). `progress(done, total)` is called every few
    hundred tasks. `session_out`, if given, receives the final session (for inspection in tests).
    `group_nodes=False` offers every node to the engine instead of one per state group (same result, slower).
    """
    started = time.perf_counter()
    config = policy_config(policy)
    trace_nodes = read_nodes(nodes_csv)
    tasks = variant_tasks(variant, read_pods(pods_csv), trace_nodes)
    nodes = variant_nodes(variant, trace_nodes)
    if config.node_scoring not in scoring.FRAGMENTATION_RULES:
        return _run_seed(
            policy, seed, config, tasks, nodes, limit, until, progress, session_out, group_nodes, started
        )
    # Each rule at its own coverage of the trace's shapes (FGD's is the protocol's 95 %).
    models = frag.typical_task_types(tasks, frag.ModelAwarePolicy.COVERAGE)
    with scoring.task_types_in_use(frag.typical_task_types(tasks), models):
        return _run_seed(
            policy, seed, config, tasks, nodes, limit, until, progress, session_out, group_nodes, started
        )


def _until(sequence: list[TraceTask], pct_capacity: int) -> list[TraceTask]:
    """The prefix of `sequence` up to the first task whose arrival takes the total past `pct_capacity` %."""
    total = 0
    for i, t in enumerate(sequence):
        total += t.gpu_request_milli
        if 100 * total > pct_capacity:
            return sequence[: i + 1]
    return sequence


def _run_seed(
    policy: str,
    seed: int,
    config: SessionConfig,
    tasks: list[TraceTask],
    nodes: list[NodeUpserted],
    limit: int | None,
    until: int | None,
    progress: Callable[[int, int], None] | None,
    session_out: list[Session] | None,
    group_nodes: bool,
    started: float,
) -> SeedResult:
    # FGD scores against this trace's own task types (the paper's protocol), set by run_seed around this call.
    rng = random.Random(seed)
    capacity = sum(e.gpus for e in nodes) * GPU_MILLI
    sequence = arrival_sequence(tasks, capacity, rng)
    state = build_state(nodes, sequence, rng)  # node order draws come after the workload draws
    if limit is not None:
        sequence = sequence[:limit]
    if until is not None:
        sequence = _until(sequence, until * capacity)
    ssn = Session(state, config)
    classes = NodeClasses(ssn.nodes)
    by_uid = {t.uid: t for t in ssn.tasks}
    arrived_total = allocated_total = placed = 0
    arrived: list[int] = []
    allocated: list[int] = []
    for i, tt in enumerate(sequence):
        task = by_uid[tt.name]
        fits, _ = ordered_fits(ssn, task, classes.representatives() if group_nodes else ssn.nodes)
        if fits:
            best = fits[0]
            node = best.node
            before = sum(node.dev_alloc)
            stmt = ssn.statement()
            stmt.place(task, node, best.devices, best.portion, pipelined=not best.idle, action=ACTION)
            stmt.commit()
            allocated_total += sum(node.dev_alloc) - before
            classes.update(node)
            placed += 1
        arrived_total += tt.gpu_request_milli
        arrived.append(arrived_total)
        allocated.append(allocated_total)
        if progress is not None and (i + 1) % 250 == 0:
            progress(i + 1, len(sequence))
    if session_out is not None:
        session_out.append(ssn)
    return SeedResult(
        policy=policy,
        seed=seed,
        tasks=len(sequence),
        placed=placed,
        failed=len(sequence) - placed,
        capacity_milli=capacity,
        arrived=arrived,
        allocated=allocated,
        seconds=time.perf_counter() - started,
    )


def _run_seed_job(args: tuple[str, int, str, str, str, int | None]) -> SeedResult:
    return run_seed(args[0], args[1], args[2], args[3], variant=args[4], until=args[5])


def run_benchmark(
    policy: str,
    seeds: Sequence[int],
    pods_csv: Path | str = DEFAULT_PODS,
    nodes_csv: Path | str = DEFAULT_GPU_NODES,
    jobs: int = 1,
    on_result: Callable[[SeedResult], None] | None = None,
    variant: str = "default",
    until: int | None = None,
) -> list[SeedResult]:
    """Run every seed (in `jobs` processes), in seed order; `on_result` sees each result as it lands."""
    policy_config(policy)  # fail fast on a bad name
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r} (known: {', '.join(VARIANTS)})")
    args = [(policy, s, str(pods_csv), str(nodes_csv), variant, until) for s in seeds]
    results: list[SeedResult] = []
    if jobs <= 1:
        for a in args:
            results.append(_run_seed_job(a))
            if on_result is not None:
                on_result(results[-1])
        return results
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for r in pool.map(_run_seed_job, args):
            results.append(r)
            if on_result is not None:
                on_result(r)
    return results


# --------------------------------------------------------------------------- command line


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``hourglass placement-benchmark``."""
    p.add_argument(
        "--pods", default=str(DEFAULT_PODS), help="pod list CSV (default: the shipped default trace)"
    )
    p.add_argument(
        "--nodes", default=str(DEFAULT_GPU_NODES), help="node list CSV (default: the 1,213 GPU nodes)"
    )
    p.add_argument("--policy", default="fgd", choices=sorted(POLICIES), help="placement policy")
    p.add_argument("--seeds", type=int, default=10, help="number of seeds (default 10)")
    p.add_argument(
        "--first-seed", type=int, default=DEFAULT_FIRST_SEED, help="first seed; seeds run first..first+N-1"
    )
    p.add_argument("--jobs", type=int, default=1, help="seeds run in this many processes (default 1)")
    p.add_argument(
        "--variant",
        default="default",
        choices=VARIANTS,
        help="derive a workload or node mix from the lists (docs/placement-benchmark.md, Variants)",
    )
    p.add_argument(
        "--until",
        type=int,
        default=None,
        metavar="PCT",
        help="stop once the tasks arrived pass PCT %% of the GPUs (101: @100%% only, a third faster)",
    )


def run_cli(args: argparse.Namespace) -> int:
    """``hourglass placement-benchmark``: per-seed results, then the median over seeds."""
    from rich.console import Console

    from analytics.progress import count_bar

    if args.seeds < 1:
        print("placement-benchmark: --seeds must be at least 1", file=sys.stderr)
        return 2
    for path in (args.pods, args.nodes):
        if not Path(path).is_file():
            print(f"placement-benchmark: no such file: {path}", file=sys.stderr)
            return 2
    # Bound to the real stdout now: while the bar is drawn, rich swaps sys.stdout for its own proxy.
    console = Console(file=sys.stdout, highlight=False)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    values: list[float] = []
    # The bar goes to stderr and only to a terminal: stdout carries the results alone.
    with count_bar(args.policy, "seeds", total=len(seeds)) as bar:

        def report(r: SeedResult) -> None:
            u100 = r.unallocated(100)
            values.append(u100)
            end = f"  @130% {r.unallocated(130):.2f}" if args.until is None or args.until > 130 else ""
            bar.print(
                f"seed {r.seed}: unallocated@100% {u100:.2f}{end}  "
                f"tasks {r.tasks}  placed {r.placed}  failed {r.failed}  ({r.seconds:.1f} s)",
                console,
            )
            bar.advance()

        try:
            run_benchmark(
                args.policy,
                seeds,
                args.pods,
                args.nodes,
                jobs=args.jobs,
                on_result=report,
                variant=args.variant,
                until=args.until,
            )
        except ValueError as err:  # bad rows in a pod or node list
            print(f"placement-benchmark: {err}", file=sys.stderr)
            return 2
    console.print(
        f"unallocated@100%: {statistics.median(values):.2f} (median of {len(values)} seeds)", soft_wrap=True
    )
    return 0
