"""Replay speed: ``hourglass replay --verify`` over a recorded simulation.

Default workload: the first 2,000 tasks (by creation time) of the shipped Alibaba trace on the full
1,213-node cluster with the default tenants, recorded with ``simulate --out`` into a temporary directory
(or ``--run DIR``: an existing run directory, not re-simulated). Run:

    python benchmarks/bench_replay.py [--limit-tasks N] [--run DIR] [--repeat K]

Prints events folded, cycles re-run and compared, wall / CPU seconds, events per second and "× real
time" = simulated seconds replayed / wall seconds. The best of ``--repeat`` runs is reported (a shared
machine's load only ever slows a run down). See ``docs/replay.md`` for measured figures.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from analytics.replay import replay
from analytics.simlog import DirLog, read_events, read_manifest
from analytics.simulate import simulate
from ingest.tenants import DEFAULT_TENANTS, load_tenants
from ingest.trace import DEFAULT_GPU_NODES, DEFAULT_PODS, read_nodes, read_pods
from scheduler.engine.state import StateBuilder


def _record(out: Path, limit: int) -> None:
    tasks = read_pods(DEFAULT_PODS)
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i].creation_s or 0, i))[:limit]
    t0 = time.perf_counter()
    simulate(
        [tasks[i] for i in order],
        read_nodes(DEFAULT_GPU_NODES),
        load_tenants(DEFAULT_TENANTS),
        log=DirLog(out),
    )
    print(f"recorded {limit:,} tasks in {time.perf_counter() - t0:.1f} s wall -> {out}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit-tasks", type=int, default=2000, help="first N trace tasks (default 2000)")
    ap.add_argument("--run", type=Path, default=None, help="replay this existing run directory instead")
    ap.add_argument("--repeat", type=int, default=1, help="replay K times, report the fastest")
    a = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        run = a.run
        if run is None:
            run = Path(tmp) / "run"
            _record(run, a.limit_tasks)
        counts = read_manifest(run)["counts"]
        print(f"run: {counts['events']:,} events, {counts['cycles']:,} cycles, {counts['tasks']:,} tasks")
        best = None
        for _ in range(max(a.repeat, 1)):
            c0 = time.process_time()
            s = replay(run, verify=True)
            cpu = time.process_time() - c0
            if best is None or s.wall_s < best[0].wall_s:
                best = (s, cpu)
        assert best is not None
        s, cpu = best
        sim_s = s.simulated_ms / 1000
        print(s.line)
        print(f"wall {s.wall_s:.2f} s, CPU {cpu:.2f} s")
        print(f"events folded: {s.events_folded:,} -> {s.events_folded / s.wall_s:,.0f} events/s (wall)")
        print(f"cycles re-run: {s.cycles:,} -> {s.cycles / s.wall_s:,.1f} cycles/s")
        f0 = time.perf_counter()
        b = StateBuilder()
        for offset, e in read_events(run):
            b.apply(e, offset)
        fold_s = time.perf_counter() - f0
        print(
            f"parse + fold alone, no cycles (measured separately): {fold_s:.2f} s ({(b.offset + 1) / fold_s:,.0f} events/s)"
        )
        print(
            f"simulated time replayed: {sim_s / 86400:.2f} days -> {sim_s / s.wall_s:,.0f}x real time"
            f" (wall), {sim_s / cpu:,.0f}x per CPU second"
        )


if __name__ == "__main__":
    main()
