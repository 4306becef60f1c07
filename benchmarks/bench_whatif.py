"""What-if speed: ``hourglass whatif`` over a month of the shipped trace vs simulating that month.

The month is the busiest 30 days of the shipped Alibaba trace (tasks created in days 120-150: 7,206 of
8,152 tasks) on the full 1,213-node cluster with the default tenants. It is simulated once with the log
written (the recording, what ``simulate --out`` does) and once without (``simulate`` alone); then the
no-change what-if (which must reproduce the recording) and a what-if with another setting run on the
recording, each measured end to end (reading the recording, re-running, measuring both logs). Run:

    python benchmarks/bench_whatif.py [--set KEY=VALUE] [--from-day D] [--days N]

Prints one ``bench: whatif ...`` line with the wall times in seconds (and the CPU seconds of this process:
on a shared machine wall times move with the load). ``--keep DIR`` keeps the recording.
"""

from __future__ import annotations

import argparse
import filecmp
import tempfile
import time
from pathlib import Path

from analytics.simlog import DirLog
from analytics.simulate import simulate
from analytics.whatif import run_whatif
from ingest.tenants import DEFAULT_TENANTS, load_tenants
from ingest.trace import DEFAULT_GPU_NODES, DEFAULT_PODS, read_nodes, read_pods

DAY_S = 86_400


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--from-day", type=int, default=120, help="first day of the month (default 120)")
    ap.add_argument("--days", type=int, default=30, help="length in days (default 30)")
    ap.add_argument("--set", dest="change", default="engine.k_value=1", help="the what-if's change")
    ap.add_argument(
        "--keep", type=Path, default=None, help="write the recording here (kept) instead of a temp dir"
    )
    a = ap.parse_args()

    tasks = read_pods(DEFAULT_PODS)
    lo, hi = a.from_day * DAY_S, (a.from_day + a.days) * DAY_S
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i].creation_s or 0, i))
    month = [tasks[i] for i in order if lo <= (tasks[i].creation_s or 0) < hi]
    nodes, tenants = read_nodes(DEFAULT_GPU_NODES), load_tenants(DEFAULT_TENANTS)
    with tempfile.TemporaryDirectory() as tmp:
        run = a.keep if a.keep is not None else Path(tmp) / "run"
        t0, c0 = time.perf_counter(), time.process_time()
        simulate(month, nodes, tenants)
        sim_s, sim_cpu = time.perf_counter() - t0, time.process_time() - c0
        t0, c0 = time.perf_counter(), time.process_time()
        simulate(month, nodes, tenants, log=DirLog(run))
        record_s, record_cpu = time.perf_counter() - t0, time.process_time() - c0
        t0, c0 = time.perf_counter(), time.process_time()
        same = run_whatif(run, [], out=Path(tmp) / "same")
        same_s, same_cpu = time.perf_counter() - t0, time.process_time() - c0
        identical = all(
            filecmp.cmp(run / f, Path(tmp) / "same" / f, shallow=False)
            for f in ("events.jsonl", "cycles.jsonl", "usage.jsonl")
        )
        t0 = time.perf_counter()
        changed = run_whatif(run, [a.change])
        changed_s = time.perf_counter() - t0
    rec, wi = changed.recorded.cluster, changed.whatif.cluster
    print(
        f"bench: whatif tasks={len(month)} days={a.from_day}-{a.from_day + a.days}"
        f" simulate_s={sim_s:.1f} (cpu {sim_cpu:.1f}) simulate_out_s={record_s:.1f} (cpu {record_cpu:.1f})"
        f" whatif_nochange_s={same_s:.1f} (cpu in this process {same_cpu:.1f})"
        f" identical={identical} whatif_changed_s={changed_s:.1f} change={a.change}"
        f" gpu_hours={rec['gpu_hours']:.1f}->{wi['gpu_hours']:.1f}"
        f" wait_p90_s={rec['wait_p90_s']:.0f}->{wi['wait_p90_s']:.0f}"
        f" nochange_equal={same.recorded.cluster == same.whatif.cluster}"
    )


if __name__ == "__main__":
    main()
