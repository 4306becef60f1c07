"""Cycle benchmark on a synthetic cluster: fold rate, fair-share time, allocate time, whole cycle.

Default size (the issue's target workload): 1,000 nodes x 8 GPUs, 10,000 pending pods (whole-GPU,
multi-GPU gangs, fractional), 100 leaf queues under 10 departments. Run:

    python benchmarks/bench_cycle.py [--nodes N] [--pods P] [--repeat R]
"""

from __future__ import annotations

import argparse
import time

from scheduler.engine.cycle import ACTIONS, DEFAULT_ORDER, open_session
from scheduler.engine.decisions import make_record
from scheduler.engine.state import fold
from scheduler.synthetic import SyntheticSpec, synthetic_events


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--pods", type=int, default=10_000)
    a = ap.parse_args()
    spec = SyntheticSpec(nodes=a.nodes, gpus_per_node=a.gpus, pending_pods=a.pods)
    events = synthetic_events(spec)
    print(f"workload: {a.nodes} nodes x {a.gpus} GPUs, {a.pods} pending pods, 100 queues (2 levels)")
    t0 = time.perf_counter()
    state = fold(events)
    t1 = time.perf_counter()
    ssn = open_session(state, now_ms=10**9)
    t2 = time.perf_counter()
    per_action = {}
    for name in DEFAULT_ORDER:
        a0 = time.perf_counter()
        ACTIONS[name](ssn)
        per_action[name] = time.perf_counter() - a0
    r0 = time.perf_counter()
    rec = make_record(ssn, state.events_offset)
    t3 = time.perf_counter()
    binds = sum(1 for d in rec.decisions if d.kind == "Bind")
    print(f"fold:                {len(events) / (t1 - t0):,.0f} events/s ({len(events)} events in {t1 - t0:.3f} s)")
    print(f"session + fair share: {(t2 - t1) * 1000:.1f} ms")
    for name, dt in per_action.items():
        print(f"{name + ':':21s}{dt * 1000:.1f} ms")
    print(f"cycle record:        {(t3 - r0) * 1000:.1f} ms ({len(rec.decisions)} decisions, {binds} binds)")
    print(f"full cycle:          {(t3 - t1) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
