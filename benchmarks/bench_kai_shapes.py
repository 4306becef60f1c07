"""The victim-search shapes of KAI's benchmarks, written as Hourglass clusters; optionally KAI side by side.

``reclaim-large`` (KAI's ReclaimLargeJobs): N nodes x 8 GPUs, two queues with half the cluster deserved
each; queue ``a`` holds every GPU with 1-GPU single-pod jobs, queue ``b`` has one pending gang of N/10
8-GPU pods (minMember = N/10) that must reclaim whole nodes. ``consolidation``: bench_actions' shape (each
node holds five 1-GPU jobs, N/2 4-GPU jobs pend), with no cap on preemptees as in KAI's benchmark. One line per run:
``bench: kai-shape shape=S nodes=N cpu_seconds=C seconds=S simulations=K decisions=D digest=H``; the digest
(sha256 of the record) lets two builds' decisions be compared.

    python benchmarks/bench_kai_shapes.py [--shapes reclaim-large,consolidation] [--nodes 100,500,1000]
                                          [--kai]

``--kai``: also run KAI's own Go benchmark for the same shapes, built from the Go module proxy
(``go test -bench`` on module ``github.com/NVIDIA/KAI-scheduler`` in a temporary module), when ``go`` is on
PATH; otherwise say it was skipped. Nothing of KAI's code is kept in this repository.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

from ingest import events as ev
from scheduler.engine.actions.consolidation_sim import UNLIMITED
from scheduler.engine.cycle import ACTIONS, open_session
from scheduler.engine.record.decisions import make_record
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import fold
from tests.support.synthetic import a100_nodes, contention_events, one_pod_job

SHAPES = ("reclaim-large", "consolidation")
KAI_MODULE = "github.com/NVIDIA/KAI-scheduler"
# KAI's benchmark functions for each shape (pkg/scheduler/actions/benchmark_test.go).
KAI_BENCH = {"reclaim-large": "BenchmarkReclaimLargeJobs", "consolidation": "BenchmarkConsolidation"}


def reclaim_large_events(nodes: int, gpus_per_node: int = 8) -> list[ev.Event]:
    """KAI's ReclaimLargeJobs cluster (see the module docstring)."""
    out: list[ev.Event] = list(a100_nodes(nodes, gpus_per_node))
    total = nodes * gpus_per_node * 1000
    for q in ("a", "b"):
        out.append(
            ev.QueueUpserted(
                uid=q, at_ms=0, name=q, resources=ev.QueueResources(gpu=ev.QueueResource(quota=total // 2))
            )
        )
    one = ev.PodRequests(cpu_millicores=1000, memory_bytes=4 * 2**30, gpus=1)
    eight = ev.PodRequests(cpu_millicores=8000, memory_bytes=32 * 2**30, gpus=gpus_per_node)
    t = 1
    for i in range(nodes):
        for dev in range(gpus_per_node):
            t += 1
            out.extend(one_pod_job(f"run-{i:05d}-{dev}", t, "a", one, 50, f"node-{i:05d}", [dev]))
    size = max(1, nodes // 10)
    t += 1
    out.append(
        ev.PodGroupUpserted(
            uid="default/large",
            at_ms=t,
            name="large",
            namespace="default",
            queue="b",
            min_member=size,
            priority=50,
            preemptible=True,
            created_at_ms=t,
        )
    )
    for k in range(size):
        out.append(
            ev.PodSubmitted(
                uid=f"default/large-{k}",
                at_ms=t,
                name=f"large-{k}",
                namespace="default",
                pod_group="large",
                queue="b",
                requests=eight,
                created_at_ms=t,
            )
        )
    return out


def run(shape: str, nodes: int) -> float:
    """Fold the shape's cluster, run its action once, print the figure; returns the action's CPU seconds."""
    if shape == "reclaim-large":
        events, action = reclaim_large_events(nodes), "reclaim"
    elif shape == "consolidation":
        events, action = contention_events(nodes, "consolidation"), "consolidation"
    else:
        raise SystemExit(f"unknown shape {shape!r}: one of {', '.join(SHAPES)}")
    state = fold(events)
    # KAI's consolidation benchmark admits every preemptible job as a victim (no preemptee cap).
    config = SessionConfig(max_consolidation_preemptees=UNLIMITED) if action == "consolidation" else None
    ssn = open_session(state, config=config, now_ms=10**9)
    t0, c0 = time.perf_counter(), time.process_time()
    ACTIONS[action](ssn)
    cpu, dt = time.process_time() - c0, time.perf_counter() - t0
    rec = make_record(ssn, state.events_offset)
    kinds: dict[str, int] = {}
    for d in rec.decisions:
        kinds[d.kind] = kinds.get(d.kind, 0) + 1
    counts = " ".join(f"{k.lower()}={v}" for k, v in sorted(kinds.items()))
    sims = ssn.work.get(f"{action}.simulations", 0)
    digest = hashlib.sha256(rec.dumps()).hexdigest()[:16]
    print(
        f"bench: kai-shape shape={shape} nodes={nodes} {counts} simulations={sims} "
        f"cpu_seconds={cpu:.3f} seconds={dt:.3f} digest={digest}",
        flush=True,
    )
    return cpu


def run_kai(shapes: list[str]) -> None:
    """KAI's Go benchmarks for `shapes`, built from the Go module proxy in a throw-away module; skipped
    (with a line saying so) when Go is not installed or the build fails."""
    go = shutil.which("go")
    if go is None:
        print("bench: kai skipped=go-not-found", flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GOFLAGS": "-mod=mod"}  # the module proxy: Go's own setting (go env GOPROXY)
        steps = [
            [go, "mod", "init", "hourglass-kai-bench"],
            [go, "get", f"{KAI_MODULE}@latest"],
        ]
        for cmd in steps:
            r = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
            if r.returncode != 0:
                print(
                    f"bench: kai skipped=build-failed step={cmd[1]} error={r.stderr.strip()[:200]!r}",
                    flush=True,
                )
                return
        pattern = "|".join(KAI_BENCH[s] for s in shapes if s in KAI_BENCH)
        r = subprocess.run(
            [go, "test", "-run", "^$", "-bench", pattern, f"{KAI_MODULE}/pkg/scheduler/actions"],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
        )
        for line in r.stdout.splitlines():
            if line.startswith("Benchmark"):
                print(f"bench: kai {line}", flush=True)
        if r.returncode != 0:
            print(f"bench: kai failed error={r.stderr.strip()[:200]!r}", flush=True)


def main() -> None:
    """Parse shapes and sizes, print one ``bench:`` line each."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--nodes", default="100,500,1000")
    ap.add_argument("--kai", action="store_true", help="also run KAI's Go benchmark when Go is installed")
    a = ap.parse_args()
    shapes = [s for s in a.shapes.split(",") if s]
    for shape in shapes:
        for n in (int(x) for x in a.nodes.split(",")):
            run(shape, n)
    if a.kai:
        run_kai(shapes)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
