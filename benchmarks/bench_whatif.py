"""What-if speed: ``hourglass whatif`` over a month of the shipped trace vs simulating that month.

The month is the busiest 30 days of the shipped Alibaba trace (tasks created in days 120-150: 7,206 of
8,152 tasks) on the full 1,213-node cluster with the default tenants. Each step is the real command in a
fresh process (a second simulation in one process runs ~30 % slower: the first one's heap is still there):

1. ``hourglass simulate --trace-pods MONTH.csv`` (simulating the month);
2. the same with ``--out DIR`` (the recording);
3. ``hourglass whatif DIR --json`` (no change: must equal the recording);
4. ``hourglass whatif DIR --set KEY=VALUE --json``.

Run (from the repository root, so that the worktree's packages are the ones imported):

    PYTHONPATH=. python benchmarks/bench_whatif.py [--set KEY=VALUE] [--from-day D] [--days N]

Prints one ``bench: whatif ...`` line: wall seconds of each step and the CPU seconds of its processes
(``whatif`` measures the recording in a second process, counted too). On a shared machine wall times move
with the load; compare the CPU figures.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ingest.trace import DEFAULT_PODS

DAY_S = 86_400


def _timed(argv: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the command's processes, stdout) of ``hourglass ARGV`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "analytics.cli", *argv],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def _month_csv(path: Path, lo: int, hi: int) -> int:
    with DEFAULT_PODS.open(newline="") as src, path.open("w", newline="") as dst:
        reader = csv.DictReader(src)
        writer = csv.DictWriter(dst, fieldnames=list(reader.fieldnames or []))
        writer.writeheader()
        n = 0
        for row in reader:
            if lo <= int(float(row["creation_time"])) < hi:
                writer.writerow(row)
                n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--from-day", type=int, default=120, help="first day of the month (default 120)")
    ap.add_argument("--days", type=int, default=30, help="length in days (default 30)")
    ap.add_argument("--set", dest="change", default="engine.k_value=1", help="the what-if's change")
    a = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        pods = Path(tmp) / "month.csv"
        n = _month_csv(pods, a.from_day * DAY_S, (a.from_day + a.days) * DAY_S)
        run = Path(tmp) / "run"
        sim = _timed(["simulate", "--trace-pods", str(pods), "--json"])
        rec = _timed(["simulate", "--trace-pods", str(pods), "--json", "--out", str(run)])
        same = _timed(["whatif", str(run), "--json"])
        changed = _timed(["whatif", str(run), "--set", a.change, "--json"])
    same_doc: dict[str, Any] = json.loads(same[2])
    doc: dict[str, Any] = json.loads(changed[2])
    equal = same_doc["cluster"]["recorded"] == same_doc["cluster"]["whatif"] and all(
        q["recorded"] == q["whatif"] for q in same_doc["queues"].values()
    )
    r, w = doc["cluster"]["recorded"], doc["cluster"]["whatif"]
    print(
        f"bench: whatif tasks={n} days={a.from_day}-{a.from_day + a.days}"
        f" simulate_s={sim[0]:.1f} (cpu {sim[1]:.1f}) simulate_out_s={rec[0]:.1f} (cpu {rec[1]:.1f})"
        f" whatif_nochange_s={same[0]:.1f} (cpu {same[1]:.1f}) nochange_equal={equal}"
        f" whatif_changed_s={changed[0]:.1f} (cpu {changed[1]:.1f}) change={a.change}"
        f" gpu_hours={r['gpu_hours']:.1f}->{w['gpu_hours']:.1f} wait_p90_s={r['wait_p90_s']:.0f}->{w['wait_p90_s']:.0f}"
    )


if __name__ == "__main__":
    main()
