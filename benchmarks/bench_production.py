"""KAI's production snapshot shape: one scheduling cycle on a big, busy cluster, including bringing the
state up to date from the events since the last cycle.

Default: 4,000 nodes x 8 GPUs, 140,000 pods (28,000 running 1-GPU pods, 108,000 running CPU-only pods,
4,000 pending: half 1-GPU, half CPU-only), 100 leaf queues in 10 departments; between two cycles 1,000
events arrive (500 pods finish, 500 new ones are submitted). Figures: the delta fold, the snapshot, the
session, each action, the record, and the whole cycle.

The cycle is the service's: a first cycle runs on the cluster (``production_first_cycle``, its session
built afresh), then the delta is folded and the timed cycle opens the session the first one kept, patched
from the new snapshot (``production_session``, :mod:`scheduler.engine.kept`). ``production_session_fresh``
is the same session built from scratch (what every cycle paid before; not part of the cycle), and
``production_same_record`` checks that the patched session gave the record a fresh one gives.

    python benchmarks/bench_production.py [--nodes 4000] [--pods 140000] [--delta 1000]
"""

from __future__ import annotations

import argparse
import time

from ingest import events as ev
from scheduler.engine.cycle import ACTIONS, DEFAULT_ORDER, open_session, run_cycle
from scheduler.engine.kept import Changes, KeptSession, run_kept_cycle
from scheduler.engine.record.decisions import make_record
from scheduler.engine.state import StateBuilder


def cluster(nodes: int, pods: int) -> tuple[list[ev.Event], list[ev.Event]]:
    """The cluster's events, and the events of the next cycle's delta (finishes and new submissions)."""
    out: list[ev.Event] = []
    for i in range(nodes):
        n = f"node-{i:05d}"
        out.append(
            ev.NodeUpserted(
                at_ms=0, name=n, cpu_millicores=128_000, memory_bytes=1024 * 2**30, gpus=8, max_pods=250
            )
        )
    leaves = []
    total = nodes * 8 * 1000
    for d in range(10):
        out.append(
            ev.QueueUpserted(
                at_ms=0,
                name=f"dept-{d}",
                resources=ev.QueueResources(gpu=ev.QueueResource(quota=total // 10)),
            )
        )
        for q in range(10):
            leaves.append(f"team-{d}-{q}")
            out.append(
                ev.QueueUpserted(
                    at_ms=0,
                    name=leaves[-1],
                    parent=f"dept-{d}",
                    resources=ev.QueueResources(gpu=ev.QueueResource(quota=total // 100)),
                )
            )
    gpu = ev.PodRequests(cpu_millicores=4000, memory_bytes=16 * 2**30, gpus=1)
    cpu = ev.PodRequests(cpu_millicores=500, memory_bytes=2 * 2**30)
    gpu_running = min(pods * 20 // 100, nodes * 7)
    pending = pods * 4 // 140 if pods >= 140 else 1
    cpu_running = pods - gpu_running - pending
    j = 0

    def pod(req: ev.PodRequests, node: str | None, devices: list[int], t: int) -> list[ev.Event]:
        nonlocal j
        name = f"job-{j:07d}"
        q = leaves[j % len(leaves)]
        j += 1
        evs: list[ev.Event] = [
            ev.PodGroupUpserted(
                at_ms=t, name=name, namespace="default", queue=q, priority=50, created_at_ms=t
            ),
            ev.PodSubmitted(
                at_ms=t,
                name=f"{name}-0",
                namespace="default",
                pod_group=name,
                queue=q,
                requests=req,
                created_at_ms=t,
            ),
        ]
        if node is not None:
            evs.append(
                ev.PodBound(at_ms=t, name=f"{name}-0", namespace="default", node=node, gpu_devices=devices)
            )
        return evs

    for k in range(gpu_running):
        out += pod(gpu, f"node-{k // 7:05d}", [k % 7], 1)
    for k in range(cpu_running):
        out += pod(cpu, f"node-{k % nodes:05d}", [], 1)
    for k in range(pending):
        out += pod(gpu if k % 2 == 0 else cpu, None, [], 2)
    return out, []


def main() -> None:
    """Build the cluster, then time one cycle after a delta."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4000)
    ap.add_argument("--pods", type=int, default=140_000)
    ap.add_argument("--delta", type=int, default=1000)
    a = ap.parse_args()
    events, _ = cluster(a.nodes, a.pods)
    b = StateBuilder()
    t0 = time.perf_counter()
    for e in events:
        b.apply(e)
    t1 = time.perf_counter()
    size = f"nodes={a.nodes} pods={a.pods} delta={a.delta}"
    print(f"bench: production_fold {size} events={len(events)} seconds={t1 - t0:.3f}", flush=True)
    kept = KeptSession()
    f0 = time.perf_counter()
    run_kept_cycle(kept, b.snapshot(), now_ms=10**9 - 1, builder=b, changes=Changes(b.offset))
    changes = Changes(b.offset)
    f1 = time.perf_counter()
    print(f"bench: production_first_cycle {size} seconds={f1 - f0:.3f}", flush=True)
    # The delta: a.delta // 2 running CPU pods finish, as many new pods are submitted.
    running = [p for p in b.pods.values() if p.node is not None and not p.request.gpus][: a.delta // 2]
    delta: list[ev.Event] = []
    for p in running:
        ns, name = p.uid.split("/", 1)
        delta.append(ev.PodFinished(at_ms=3, name=name, namespace=ns, phase="Succeeded"))
    for k in range((a.delta - len(delta)) // 2):
        name = f"new-{k:06d}"
        delta.append(
            ev.PodGroupUpserted(at_ms=3, name=name, namespace="default", queue="team-0-0", created_at_ms=3)
        )
        delta.append(
            ev.PodSubmitted(
                at_ms=3,
                name=f"{name}-0",
                namespace="default",
                pod_group=name,
                queue="team-0-0",
                requests=ev.PodRequests(cpu_millicores=500, memory_bytes=2**30),
                created_at_ms=3,
            )
        )
    c0 = time.perf_counter()
    for e in delta:
        changes.note(e)  # what the service's Folder does for each event it folds
        b.apply(e)
    c1 = time.perf_counter()
    state = b.snapshot()
    c2 = time.perf_counter()
    p2 = time.process_time()
    ssn = kept.open(state, now_ms=10**9, builder=b, changes=changes)
    c3 = time.perf_counter()
    p3 = time.process_time()
    print(f"bench: production_delta_fold {size} seconds={c1 - c0:.3f}")
    print(f"bench: production_snapshot {size} seconds={c2 - c1:.3f}")
    print(f"bench: production_session {size} cpu_seconds={p3 - p2:.3f} seconds={c3 - c2:.3f}", flush=True)
    for name in DEFAULT_ORDER:
        s = time.perf_counter()
        ACTIONS[name](ssn)
        print(f"bench: production_{name} {size} seconds={time.perf_counter() - s:.3f}", flush=True)
    r0 = time.perf_counter()
    record = make_record(ssn, state.events_offset, usage_available=False)  # as run_cycle without usage
    c4 = time.perf_counter()
    kept.close()
    print(f"bench: production_record {size} seconds={c4 - r0:.3f}")
    print(f"bench: production_cycle {size} seconds={c4 - c0:.3f}", flush=True)
    del ssn
    s0, q0 = time.perf_counter(), time.process_time()
    open_session(state, now_ms=10**9)
    s1, q1 = time.perf_counter(), time.process_time()
    fresh_line = f"production_session_fresh {size} cpu_seconds={q1 - q0:.3f} seconds={s1 - s0:.3f}"
    print(f"bench: {fresh_line}", flush=True)
    fresh, _ = run_cycle(state, now_ms=10**9)
    same = fresh.dumps() == record.dumps()
    print(f"bench: production_same_record {size} same={same} patched={kept.patched}")


if __name__ == "__main__":
    main()
