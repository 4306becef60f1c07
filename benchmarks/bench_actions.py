"""Action benchmarks in KAI's shape: reclaim-, preempt- and consolidation-heavy clusters.

N nodes x 8 GPUs, 4 leaf queues in 2 departments, 1-GPU jobs (see
:func:`tests.support.synthetic.contention_events`). One line per figure:
``bench: reclaim nodes=1000 running=8000 pending=8000 evictions=4000 seconds=S``.

    python benchmarks/bench_actions.py [--shapes reclaim,preempt,consolidation] [--nodes 100,500,1000]
"""

from __future__ import annotations

import argparse
import time

from scheduler.engine.cycle import ACTIONS, open_session
from scheduler.engine.record.decisions import make_record
from scheduler.engine.state import PodStatus, fold
from tests.support.synthetic import CONTENTION_SHAPES, contention_events


def run(shape: str, nodes: int) -> float:
    """Fold the shape's cluster, run its action once, print the figure; returns the action's seconds."""
    state = fold(contention_events(nodes, shape))
    running = sum(1 for p in state.pods if p.status is PodStatus.RUNNING)
    pending = sum(1 for p in state.pods if p.status is PodStatus.PENDING)
    ssn = open_session(state, now_ms=10**9)
    t0 = time.perf_counter()
    ACTIONS[shape](ssn)
    dt = time.perf_counter() - t0
    rec = make_record(ssn, state.events_offset)
    kinds: dict[str, int] = {}
    for d in rec.decisions:
        kinds[d.kind] = kinds.get(d.kind, 0) + 1
    counts = " ".join(f"{k.lower()}={v}" for k, v in sorted(kinds.items()) if k != "Unschedulable")
    print(
        f"bench: {shape} nodes={nodes} running={running} pending={pending} {counts} seconds={dt:.3f}",
        flush=True,
    )
    return dt


def main() -> None:
    """Parse shapes and sizes, print one ``bench:`` line each."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=",".join(CONTENTION_SHAPES))
    ap.add_argument("--nodes", default="100,500,1000")
    a = ap.parse_args()
    for shape in a.shapes.split(","):
        for n in (int(x) for x in a.nodes.split(",")):
            run(shape, n)


if __name__ == "__main__":
    main()
