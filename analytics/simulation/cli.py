"""The ``hourglass simulate`` command line: arguments, inputs (trace or scenario file), summary and plots.

Kept apart from :mod:`analytics.simulation.simulate` (the simulator itself) so that the scenario loader, which builds on
the simulator's job specs, and the simulator never import each other.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analytics.humanize import duration
from analytics.simulation.simulate import (
    GPU_MILLI,
    JobSpec,
    KeepPending,
    SimulationResult,
    UsageFn,
    file_input,
    simulate,
)
from ingest import events as ev
from ingest.tenants import TenantsConfig
from ingest.trace import TraceTask
from scheduler.command import positive_int

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from analytics.rundir import SimLog


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``hourglass simulate`` options."""
    # The trace options default to None so that --config can tell whether they were given; run_cli fills
    # in the shipped defaults for a trace run.
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="a synthetic scenario file instead of a trace: nodes, queues, generators (docs/simulate.md)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="with --config: override a scenario field by dotted path, e.g. fairshare.k_value=0 (repeatable)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        metavar="K",
        help="with --out: a full cycle record every K records, deltas in between (default 3600; 1 = all full)",
    )
    p.add_argument(
        "--trace-pods",
        type=Path,
        default=None,
        help="pod list CSV (default: the shipped default list)",
    )
    p.add_argument(
        "--trace-nodes",
        type=Path,
        default=None,
        help="node list CSV (default: the shipped GPU nodes)",
    )
    p.add_argument("--tenants", type=Path, default=None, help="tenants file, YAML or TOML (docs/simulate.md)")
    p.add_argument(
        "--period",
        type=int,
        default=None,
        metavar="S",
        help="cycle period in simulated seconds (default: the tenants or scenario file's)",
    )
    p.add_argument(
        "--limit-tasks",
        type=positive_int,
        default=None,
        metavar="N",
        help="simulate only the first N tasks by creation time",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="write events.jsonl, cycles.jsonl, manifest.json here",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="with --out: write into a directory that is not empty (replacing its run files)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON (nothing else on stdout)")
    p.add_argument(
        "--plot",
        type=Path,
        default=None,
        metavar="PNG",
        help="write allocation-over-time and GPU-hours plots",
    )
    p.add_argument(
        "--compare-scoring",
        default=None,
        metavar="RULES",
        help="run once per node-scoring rule (comma-separated, e.g. kai,fgd,frag-aware) and print the"
        " unallocated GPUs over time of each (docs/simulate.md); not with --out or --plot",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="salt of the task -> queue hash (0 = the plain task name; default 0); with --config: replaces"
        " the scenario's seed",
    )


def render_summary(summary: dict[str, Any], console: Console) -> None:
    """The summary as rich tables fitted to the console's width (:mod:`analytics.terminal`): per queue, then
    the cluster; numbers are never cut, less important columns are left out with a note when too narrow."""
    from analytics.terminal import Col, dropped_note, fitted_table

    depth: dict[str, int] = {}
    cols = (
        Col("queue", "left"),
        Col("tasks", drop=4),
        Col("GPU-h"),
        Col("fair GPU-h"),
        Col("recv/fair"),
        Col("wait mean", drop=3),
        Col("wait p95", drop=2),
        Col("pending", drop=1),
        Col("evicted", drop=1),
    )
    rows: list[list[str]] = []
    styles: list[str | None] = []
    for q in summary["queues"]:
        depth[q["name"]] = 0 if q["parent"] is None else depth.get(q["parent"], 0) + 1
        ratio = "-" if q["received_over_fair_share"] is None else f"{q['received_over_fair_share']:.0%}"
        styles.append(None if q["leaf"] else "bold")
        rows.append(
            [
                "  " * depth[q["name"]] + q["name"],
                f"{q['tasks']:,}",
                f"{q['gpu_hours']:,.1f}",
                f"{q['fair_share_gpu_hours']:,.1f}",
                ratio,
                duration(q["mean_wait_s"]),
                duration(q["p95_wait_s"]),
                f"{q['pending_at_end']:,}",
                f"{q['evictions']:,}",
            ]
        )
    qt, dropped = fitted_table(cols, rows, console.width, row_styles=styles, title="Queues")
    console.print(qt)
    note = dropped_note(dropped, console.width, "--json has every figure")
    if note is not None:
        console.print(note, style="dim", highlight=False)
    c = summary["cluster"]
    sp = summary["speed"]
    probe = c["fragmentation_probe"]
    probe_text = (
        "-"
        if probe is None
        else (
            f"{probe['num_gpu']} whole GPU(s)"
            if probe["gpu_milli"] >= GPU_MILLI
            else f"{probe['gpu_milli'] / 1000:g} GPU"
        )
    )
    cluster_rows = [
        ("nodes / GPUs", f"{c['nodes']:,} / {c['gpus']:,}"),
        ("simulated time", duration(summary["simulated_seconds"])),
        (
            "tasks: started / finished / pending at end",
            f"{c['tasks_started']:,} / {c['tasks_finished']:,} / {c['tasks_pending_at_end']:,}",
        ),
        ("GPU-hours allocated", f"{c['gpu_hours_allocated']:,.1f}"),
        (
            "GPU allocation ratio: mean / peak",
            f"{c['mean_allocation_ratio']:.2%} / {c['peak_allocation_ratio']:.2%}",
        ),
        (
            "unallocated GPUs: mean / at end",
            f"{c['mean_unallocated_gpus']:,.1f} / {c['unallocated_gpus_at_end']:,.1f}",
        ),
        (
            f"fragmented GPUs (idle, cannot fit {probe_text}): mean / at end",
            f"{c['mean_fragmented_gpus']:,.2f} / {c['fragmented_gpus_at_end']:,.2f}",
        ),
        ("binds / evictions", f"{c['binds']:,} / {c['evictions']:,}"),
        ("cycles run / skipped", f"{summary['cycles']['run']:,} / {summary['cycles']['skipped']:,}"),
        ("events", f"{summary['events']:,}"),
        (
            "wall time / CPU time / in engine cycles",
            f"{sp['wall_seconds']:.1f} s / {sp['cpu_seconds']:.1f} s / {sp['engine_cycle_seconds']:.1f} s",
        ),
        ("simulated events / s", f"{summary['speed']['events_per_second']:,.0f}"),
    ]
    ct, _ = fitted_table(
        (Col("figure", "left", whole=False), Col("value")),
        cluster_rows,
        console.width,
        show_header=False,
        title="Cluster",
    )
    console.print(ct)
    for topo in summary.get("topology", []):
        topo_rows = [
            [
                lv["level"],
                q["queue"],
                f"{q['gangs']:,}",
                f"{q['mean_domains']:.2f}",
                f"{q['max_domains']:,}",
                f"{q['within_one']:,} ({q['within_one'] / q['gangs']:.0%})",
            ]
            for lv in topo["levels"]
            for q in lv["queues"]
        ]
        tt, _ = fitted_table(
            (
                Col("level", "left", whole=False),
                Col("queue", "left"),
                Col("gangs"),
                Col("domains: mean"),
                Col("max"),
                Col("within one"),
            ),
            topo_rows,
            console.width,
            title=f"Gang placement, topology {topo['name']}",
        )
        console.print(tt)


def write_plot(result: SimulationResult, path: Path) -> None:
    """Allocation over time (stacked by leaf queue, with fragmented GPUs) and GPU-hours per leaf queue."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt

    tl = result.timeline
    end_s = result.summary["simulated_seconds"]
    days = [p[0] / 86_400_000 for p in tl] + [end_s / 86400]
    per_leaf = [[p[3][i] / GPU_MILLI for p in tl] for i in range(len(result.leaf_queues))]
    per_leaf = [series + series[-1:] for series in per_leaf]
    frag = [p[2] / GPU_MILLI for p in tl] + [tl[-1][2] / GPU_MILLI]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 8), gridspec_kw={"height_ratios": [3, 2]})
    ax1.stackplot(days, per_leaf, labels=result.leaf_queues, step="post", alpha=0.85)
    ax1.step(days, frag, where="post", color="black", linewidth=0.8, label="fragmented (idle)")
    cap = result.capacity_gpu_milli / GPU_MILLI
    ax1.set_title(f"GPUs allocated over time (capacity {cap:,.0f} GPUs)")
    ax1.set_xlabel("simulated days")
    ax1.set_ylabel("GPUs")
    ax1.legend(loc="upper left", fontsize="small")
    leaves = [q for q in result.summary["queues"] if q["leaf"]]
    xs = range(len(leaves))
    ax2.bar([x - 0.2 for x in xs], [q["gpu_hours"] for q in leaves], width=0.4, label="received")
    ax2.bar([x + 0.2 for x in xs], [q["fair_share_gpu_hours"] for q in leaves], width=0.4, label="fair share")
    ax2.set_xticks(list(xs), [q["name"] for q in leaves])
    ax2.set_ylabel("GPU-hours")
    ax2.set_title("GPU-hours per queue: received vs fair share")
    ax2.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@dataclass(slots=True)
class _CliRun:
    """What a command line resolved to: the simulator's inputs and the manifest's ``inputs``."""

    tasks: list[TraceTask]
    nodes: list[ev.NodeUpserted]
    tenants: TenantsConfig
    seed: int
    inputs: dict[str, Any]
    jobs: list[JobSpec] = field(default_factory=list)
    keep_pending: list[KeepPending] = field(default_factory=list)
    end_ms: int | None = None
    usage: UsageFn | None = None
    scenario: dict[str, Any] | None = None
    topologies: list[ev.TopologyUpserted] = field(default_factory=list)

    def simulate(
        self,
        tenants: TenantsConfig,
        period_s: int | None,
        progress: Callable[[int], None] | None,
        log: SimLog | None = None,
    ) -> SimulationResult:
        """Run this command line's simulation under *tenants* (the resolved ones, or a variant of them)."""
        return simulate(
            self.tasks,
            self.nodes,
            tenants,
            period_s=period_s,
            seed=self.seed,
            log=log,
            progress=progress,
            inputs=self.inputs,
            jobs=self.jobs,
            keep_pending=self.keep_pending,
            end_ms=self.end_ms,
            usage=self.usage,
            topologies=self.topologies,
        )


def _trace_inputs(args: argparse.Namespace) -> _CliRun:
    """The trace run of the command line; raises TenantsError / TraceError / OSError / ValueError."""
    from ingest.tenants import DEFAULT_TENANTS, load_tenants
    from ingest.trace import DEFAULT_GPU_NODES, DEFAULT_PODS, read_nodes, read_pods

    if args.overrides:
        raise ValueError("--set needs --config (it overrides scenario fields)")
    pods_path = args.trace_pods if args.trace_pods is not None else DEFAULT_PODS
    nodes_path = args.trace_nodes if args.trace_nodes is not None else DEFAULT_GPU_NODES
    tenants_path = args.tenants if args.tenants is not None else DEFAULT_TENANTS
    tenants = load_tenants(tenants_path)
    nodes = read_nodes(nodes_path)
    all_tasks = read_pods(pods_path)
    if any(t.creation_s is None or t.deletion_s is None for t in all_tasks):
        raise ValueError(f"{pods_path} lacks creation_time / deletion_time for some tasks")
    order = sorted(range(len(all_tasks)), key=lambda i: (all_tasks[i].creation_s or 0, i))
    if args.limit_tasks is not None:
        order = order[: max(args.limit_tasks, 0)]
    inputs = {
        "trace_pods": file_input(pods_path),
        "trace_nodes": file_input(nodes_path),
        "tenants": file_input(tenants_path),
        "limit_tasks": args.limit_tasks,
    }
    seed = args.seed if args.seed is not None else 0
    return _CliRun([all_tasks[i] for i in order], nodes, tenants, seed, inputs)


def _scenario_inputs(args: argparse.Namespace) -> _CliRun:
    """The scenario run of ``--config FILE``; raises ScenarioError / ValueError."""
    from analytics.simulation.scenario import load_scenario

    clash = [
        opt
        for opt, value in (
            ("--trace-pods", args.trace_pods),
            ("--trace-nodes", args.trace_nodes),
            ("--tenants", args.tenants),
            ("--limit-tasks", args.limit_tasks),
        )
        if value is not None
    ]
    if clash:
        raise ValueError(f"--config cannot be combined with {', '.join(clash)} (the scenario file has them)")
    overrides = list(args.overrides)
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    scenario = load_scenario(args.config, overrides)
    built = scenario.build()
    inputs = {
        "scenario": file_input(args.config) | {"overrides": list(args.overrides)},
        "scenario_config": scenario.model_dump(mode="json"),
    }
    return _CliRun(
        tasks=[],
        nodes=built.nodes,
        tenants=built.tenants,
        seed=scenario.seed,
        inputs=inputs,
        jobs=built.jobs,
        keep_pending=built.keep_pending,
        end_ms=built.end_ms,
        usage=built.usage,
        topologies=built.topologies,
        scenario={
            "name": scenario.name,
            "file": str(args.config),
            "overrides": list(args.overrides),
            "duration_s": scenario.duration / 1000,
        },
    )


def run_cli(args: argparse.Namespace) -> int:
    """``hourglass simulate``: load inputs, run with a progress bar, print / write the outputs."""
    from rich.console import Console

    from analytics.progress import day_bar
    from analytics.rundir import DirLog
    from analytics.simulation.outputs import OutputError, check_out_dir, check_plot_path
    from analytics.simulation.scenario import ScenarioError
    from ingest.tenants import TenantsError
    from ingest.trace import TraceError

    err = Console(stderr=True)
    if args.period is not None and args.period < 1:
        err.print("simulate: --period must be at least 1 second")
        return 2
    try:
        run = _scenario_inputs(args) if args.config is not None else _trace_inputs(args)
    except (ScenarioError, TenantsError, TraceError, OSError, ValueError) as exc:
        err.print(f"simulate: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    if run.end_ms is not None:
        horizon_ms = run.end_ms
    else:
        horizon_ms = max((t.deletion_s or 0 for t in run.tasks), default=0) * 1000

    if args.compare_scoring is not None:
        return _run_comparison(args, run, horizon_ms, err)
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        err.print(f"simulate: --checkpoint-every must be >= 1, got {args.checkpoint_every}")
        return 2
    try:
        if args.out is not None:
            check_out_dir(args.out, force=args.force)
        if args.plot is not None:
            check_plot_path(args.plot)
    except OutputError as exc:
        err.print(f"simulate: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    log = None
    if args.out is not None:
        try:
            log = (
                DirLog(args.out) if args.checkpoint_every is None else DirLog(args.out, args.checkpoint_every)
            )
        except OSError as exc:
            err.print(f"simulate: --out {args.out}: {exc.strerror or exc}", markup=False, highlight=False)
            return 2
    with day_bar("simulating", horizon_ms, err=err) as progress:
        try:
            result = run.simulate(run.tenants, args.period, progress, log)
        except ValueError as exc:
            err.print(f"simulate: {exc}", markup=False, highlight=False, soft_wrap=True)
            return 2
    if run.scenario is not None:
        result.summary["scenario"] = run.scenario
    if args.plot is not None:
        write_plot(result, args.plot)
    if args.json:
        print(json.dumps(result.summary, indent=2))
    else:
        from analytics.terminal import console

        out = console()
        render_summary(result.summary, out)
        if args.out is not None:
            out.print(f"event log and cycle records: {args.out}", highlight=False)
        if args.plot is not None:
            out.print(f"plots: {args.plot}", highlight=False)
    return 0


def _run_comparison(args: argparse.Namespace, run: _CliRun, horizon_ms: int, err: Console) -> int:
    """``--compare-scoring``: the run once per rule, then the comparison table (or its JSON)."""
    from analytics.progress import day_bar
    from analytics.simulation.compare import compare_scoring, render_comparison
    from scheduler.engine import scoring

    rules = [r.strip() for r in args.compare_scoring.split(",") if r.strip()]
    problem = None
    if args.out is not None or args.plot is not None:
        problem = "--compare-scoring cannot be combined with --out or --plot (it runs several simulations)"
    elif not rules or len(set(rules)) != len(rules):
        problem = f"--compare-scoring needs distinct rule names, got {args.compare_scoring!r}"
    else:
        try:
            for r in rules:
                scoring.check_name(r)
        except scoring.UnknownScoring as exc:
            problem = f"--compare-scoring: {exc}"
    if problem is not None:
        err.print(f"simulate: {problem}", markup=False, highlight=False, soft_wrap=True)
        return 2

    def one(rule: str) -> SimulationResult:
        engine = run.tenants.engine.model_copy(update={"node_scoring": rule})
        tenants = run.tenants.model_copy(update={"engine": engine})
        with day_bar(f"simulating ({rule})", horizon_ms, err=err) as progress:
            return run.simulate(tenants, args.period, progress)

    try:
        doc = compare_scoring(one, rules)
    except ValueError as exc:
        err.print(f"simulate: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    if run.scenario is not None:
        doc["scenario"] = run.scenario
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        from analytics.terminal import console

        render_comparison(doc, console())
    return 0
