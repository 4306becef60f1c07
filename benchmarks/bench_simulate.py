"""Simulation speed on the shipped Alibaba trace: simulated events per second, and where the time goes.

Default workload: the whole default trace (8,152 tasks, 1,213 GPU nodes, ~149 simulated days) with the
default tenants and cycle period. Run:

    python benchmarks/bench_simulate.py [--limit-tasks N] [--period S] [--nodes CSV] [--profile]

Prints the workload size, events, cycles run / skipped, wall and CPU seconds, the share spent inside
``run_cycle`` and simulated events per second. ``--profile`` adds the top functions by own time.
CPU seconds are the honest figure on a shared machine; wall seconds include waiting for a core.

Measured (shared 2-core machine, load ~5), whole default trace, 50,131 events:
period 300 s (default): 6,599 cycles, 42-73 s CPU / 43-105 s wall, 690-1,190 events per CPU second;
period 60 s: 12,055 cycles, 116 s CPU / 215 s wall, ~430 events per CPU second.
~85% of the time is inside run_cycle, dominated by per-node work every cycle (docs/simulate.md, "Speed").
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
from pathlib import Path

from analytics.simulate import simulate
from ingest.tenants import DEFAULT_TENANTS, load_tenants
from ingest.trace import DEFAULT_GPU_NODES, DEFAULT_PODS, read_nodes, read_pods


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit-tasks", type=int, default=None, help="first N tasks by creation time")
    ap.add_argument("--period", type=int, default=None, help="cycle period, seconds (default: tenants file)")
    ap.add_argument("--pods", type=Path, default=DEFAULT_PODS)
    ap.add_argument("--nodes", type=Path, default=DEFAULT_GPU_NODES)
    ap.add_argument("--tenants", type=Path, default=DEFAULT_TENANTS)
    ap.add_argument("--profile", action="store_true", help="also print the top 15 functions by own time")
    a = ap.parse_args()

    tasks = read_pods(a.pods)
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i].creation_s or 0, i))
    if a.limit_tasks is not None:
        order = order[: a.limit_tasks]
    tasks = [tasks[i] for i in order]
    nodes = read_nodes(a.nodes)
    tenants = load_tenants(a.tenants)
    span_days = max((t.deletion_s or 0) for t in tasks) / 86400 if tasks else 0.0
    gpus = sum(n.gpus for n in nodes)
    print(
        f"workload: {len(tasks):,} tasks, {len(nodes):,} nodes ({gpus:,} GPUs), ~{span_days:.0f} simulated days"
    )

    prof = cProfile.Profile() if a.profile else None
    if prof is not None:
        prof.enable()
    result = simulate(tasks, nodes, tenants, period_s=a.period)
    if prof is not None:
        prof.disable()
    s = result.summary
    sp = s["speed"]
    cycles = s["cycles"]
    in_engine = sp["engine_cycle_seconds"] / sp["wall_seconds"] if sp["wall_seconds"] else 0.0
    print(
        f"period: {s['period_s']:g} s; cycles run: {cycles['run']:,}; period slots skipped: {cycles['skipped']:,}"
    )
    print(
        f"events: {s['events']:,}; binds: {s['cluster']['binds']:,}; evictions: {s['cluster']['evictions']:,}"
    )
    print(
        f"wall: {sp['wall_seconds']:.1f} s; CPU: {sp['cpu_seconds']:.1f} s; in run_cycle: {in_engine:.0%} of wall; "
        f"per cycle: {sp['engine_cycle_seconds'] / max(cycles['run'], 1) * 1000:.1f} ms"
    )
    cpu = sp["cpu_seconds"] or sp["wall_seconds"]
    print(
        f"simulated events/s: {s['events'] / cpu:,.0f} per CPU second ({sp['events_per_second']:,.0f} per wall second)"
    )
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
