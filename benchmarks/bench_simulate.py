"""Simulation speed on the shipped Alibaba trace: simulated events per second, and where the time goes.

Default workload: the whole default trace (8,152 tasks, 1,213 GPU nodes, ~149 simulated days) with the
default tenants and cycle period. Run:

    python benchmarks/bench_simulate.py [--limit-tasks N] [--period S] [--nodes CSV] [--profile]

Prints the workload size, events, cycles run / skipped, wall and CPU seconds, the share spent inside
``run_cycle`` and simulated events per second. ``--profile`` adds the top functions by own time.
CPU seconds are the honest figure on a shared machine; wall seconds include waiting for a core.

Measured (shared 2-core machine, load ~5), whole default trace, 50,131 events:
period 300 s (default): 6,599 cycles, 8.5-10.3 s CPU / 9.0-13.0 s wall, 4,860-5,890 events per CPU second;
period 60 s: 12,055 cycles, 12.0 s CPU / 14.4 s wall, ~4,180 events per CPU second (load 2-3).
~85% of the time is inside the cycles, on the session kept between them (docs/simulate.md, "Speed").
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
from pathlib import Path

from analytics.simulation.simulate import simulate
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
    size = f"tasks={len(tasks)} nodes={len(nodes)} gpus={gpus} simulated_days={span_days:.0f}"

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
    cpu = sp["cpu_seconds"] or sp["wall_seconds"]
    print(
        f"bench: simulate {size} period_s={s['period_s']:g} cycles={cycles['run']} skipped={cycles['skipped']}"
        f" events={s['events']} binds={s['cluster']['binds']} evictions={s['cluster']['evictions']}"
        f" cpu_seconds={sp['cpu_seconds']:.1f} in_run_cycle={in_engine:.2f}"
        f" ms_per_cycle={sp['engine_cycle_seconds'] / max(cycles['run'], 1) * 1000:.1f}"
        f" events_per_cpu_s={s['events'] / cpu:.0f} seconds={sp['wall_seconds']:.1f}"
    )
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
