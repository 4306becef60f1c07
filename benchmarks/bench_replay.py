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

from analytics.rerun.replay import replay
from analytics.rundir import DirLog, read_events, read_manifest
from analytics.simulation.simulate import simulate
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
    print(f"bench: replay_record tasks={limit} seconds={time.perf_counter() - t0:.3f}")


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
        size = f"events={counts['events']} cycles={counts['cycles']} tasks={counts['tasks']}"
        print(
            f"bench: replay_verify {size} cpu_seconds={cpu:.2f} events_per_s={s.events_folded / s.wall_s:.0f} "
            f"cycles_per_s={s.cycles / s.wall_s:.1f} times_real_time={sim_s / s.wall_s:.0f} seconds={s.wall_s:.3f}"
        )
        f0 = time.perf_counter()
        b = StateBuilder()
        for offset, e in read_events(run):
            b.apply(e, offset)
        fold_s = time.perf_counter() - f0
        print(f"bench: replay_fold {size} rate={(b.offset + 1) / fold_s:.0f} seconds={fold_s:.3f}")


if __name__ == "__main__":
    main()
