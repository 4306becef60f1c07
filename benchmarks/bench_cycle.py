"""Cycle benchmark on a synthetic cluster: fold rate, fair-share time, allocate time, whole cycle.

Default size (the issue's target workload): 1,000 nodes x 8 GPUs, 10,000 pending pods (whole-GPU,
multi-GPU gangs, fractional), 100 leaf queues under 10 departments. Run:

    python benchmarks/bench_cycle.py [--nodes N] [--pods P] [--repeat R]
"""

from __future__ import annotations

import argparse
import time

from scheduler.actions import allocate
from scheduler.cycle import open_session, run_cycle
from scheduler.state import fold
from scheduler.synthetic import SyntheticSpec, synthetic_events


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    spec = SyntheticSpec(nodes=a.nodes, gpus_per_node=a.gpus, pending_pods=a.pods)
    events = synthetic_events(spec)
    print(f"workload: {a.nodes} nodes x {a.gpus} GPUs, {a.pods} pending pods, 100 queues (2 levels)")
    best = {"fold": 1e9, "fair": 1e9, "alloc": 1e9, "cycle": 1e9}
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        state = fold(events)
        t1 = time.perf_counter()
        ssn = open_session(state, now_ms=10**9)
        t2 = time.perf_counter()
        allocate.run(ssn)
        t3 = time.perf_counter()
        rec, _ = run_cycle(state, now_ms=10**9)
        t4 = time.perf_counter()
        best["fold"] = min(best["fold"], t1 - t0)
        best["fair"] = min(best["fair"], t2 - t1)
        best["alloc"] = min(best["alloc"], t3 - t2)
        best["cycle"] = min(best["cycle"], t4 - t3)
    binds = sum(1 for d in rec.decisions if d.kind == "Bind")
    print(f"fold:        {len(events) / best['fold']:,.0f} events/s ({len(events)} events in {best['fold']:.3f} s)")
    print(f"session+fair share: {best['fair'] * 1000:.1f} ms")
    print(f"allocate:    {best['alloc'] * 1000:.1f} ms ({binds} binds)")
    print(f"full cycle:  {best['cycle'] * 1000:.1f} ms (all actions + cycle record, {len(rec.decisions)} decisions)")


if __name__ == "__main__":
    main()
