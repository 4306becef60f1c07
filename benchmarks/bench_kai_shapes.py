"""The victim-search shapes of KAI's benchmarks, written as Hourglass clusters; optionally KAI side by side.

``reclaim-large`` (KAI v0.17.0's ReclaimLargeJobs, pkg/scheduler/actions/integration_tests/reclaim/
reclaim_benchmark_test.go:182-199 and reclaim_large_job_topology_test.go:33-102): N nodes x 8 GPUs; queue ``a``
(KAI's queue-0) deserves 0 GPUs with over-quota weight 0 and holds every GPU with 8N 1-GPU single-pod jobs,
job i on node i mod N; queue ``b`` (queue-1) deserves all 8N GPUs, weight 0, and has one pending gang of N/2
8-GPU pods (minMember = N/2, jobs_fake's default of all tasks) that must reclaim whole nodes. KAI's benchmark
asserts N/2 pipelined pods and 4N releasing victims. ``consolidation``: bench_actions' shape (each
node holds five 1-GPU jobs, N/2 4-GPU jobs pend), with no cap on preemptees as in KAI's benchmark.
``consolidation-mixed``: the cluster KAI's consolidation benchmark itself builds
(``createBenchmarkTopologyWithMixedJobs``, 8N 1-GPU jobs in 4 queues, half running, half pending;
``tests/support/synthetic.mixed_jobs_events``), so both sides run the same cluster. One line per run:
``bench: kai-shape shape=S nodes=N cpu_seconds=C seconds=S simulations=K decisions=D digest=H``; the digest
(sha256 of the record) lets two builds' decisions be compared.

    python benchmarks/bench_kai_shapes.py [--shapes reclaim-large,consolidation] [--nodes 100,500,1000]
                                          [--kai] [--kai-src DIR] [--kai-only]

``--kai``: after each Hourglass run, KAI's own Go benchmark for the same shape and size (alternating, so both
see the same load), from the Go module proxy (KAI's module under its current and former path, in a
temporary module); ``--kai-src DIR`` takes KAI from a source tree on disk instead (the proxy refuses KAI's
module; its dependencies it serves). One line each: ``bench: kai shape=S nodes=N seconds=X decisions=D``,
where D says what KAI's benchmark checks (it prints no decisions), or ``bench: kai skipped=REASON``. For
``consolidation-mixed`` the benchmark file also prints, untimed, every task KAI's session left
``Pipelined`` with its node, and D compares them with Hourglass's Pipeline decisions of the same run
(``pods=same|differ nodes=same|differ same_node=K/N``, :func:`compare_placements`). Sizes are
asked for through a one-function benchmark file given to ``go test -overlay``; nothing of KAI's code is kept
in this repository and KAI's tree is not written to.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter

from scheduler.engine.actions.consolidation_sim import UNLIMITED
from scheduler.engine.cycle import ACTIONS, open_session
from scheduler.engine.record.decisions import make_record
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import fold
from tests.support.synthetic import contention_events, mixed_jobs_events, reclaim_large_events

SHAPES = ("reclaim-large", "consolidation", "consolidation-mixed")
# KAI's module under its current and its former path, tried in turn on the Go module proxy.
KAI_MODULES = ("github.com/kai-scheduler/KAI-scheduler", "github.com/NVIDIA/KAI-scheduler")


def run(shape: str, nodes: int) -> dict[str, str]:
    """Fold the shape's cluster, run its action once, print the figure; returns where each pod the action
    pipelined went, in KAI's task names (``job-7-0``), for :func:`compare_placements`."""
    if shape == "reclaim-large":
        events, action = reclaim_large_events(nodes), "reclaim"
    elif shape == "consolidation":
        events, action = contention_events(nodes, "consolidation"), "consolidation"
    elif shape == "consolidation-mixed":
        events, action = mixed_jobs_events(nodes, 8 * nodes), "consolidation"
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
    return {_kai_task_name(d.pod or ""): d.node or "" for d in rec.decisions if d.kind == "Pipeline"}


def _kai_task_name(pod: str) -> str:
    """``default/job-0000007-0`` -> KAI's fake task name ``job-7-0``."""
    job, _, task = pod.rpartition("/")[2].rpartition("-")
    head, _, num = job.rpartition("-")
    return f"{head}-{int(num)}-{task}" if num.isdigit() else pod


def compare_placements(ours: dict[str, str], kai: dict[str, str]) -> str:
    """How Hourglass's pipelined pods compare with the tasks KAI's session ends with ``Pipelined``.

    KAI shows a moved victim as ``Pipelined`` on its new node, where Hourglass records an Evict and a
    Pipeline, so both sides list the same kind of thing. Returns ``pods=same|differ``, ``nodes=same|differ``
    (the multiset of pods per node) and ``same_node=K/N``."""
    pods = "same" if set(ours) == set(kai) else "differ"
    per_node = sorted(Counter(ours.values()).items()) == sorted(Counter(kai.values()).items())
    same = sum(1 for p, n in ours.items() if kai.get(p) == n)
    return f"pods={pods} nodes={'same' if per_node else 'differ'} same_node={same}/{len(ours)}"


# KAI's benchmark helpers each shape calls, and the package (relative to KAI's module root) that holds them:
# reclaim-large is BenchmarkReclaimLargeJobs_<N>Node (integration_tests/reclaim), consolidation is
# BenchmarkConsolidationAction_* (pkg/scheduler/actions). Both come as fixed tables of sizes, so a size is
# asked for through a one-line benchmark added with `go test -overlay` (KAI's tree on disk is not touched).
KAI_HELPER = {
    "reclaim-large": (
        "pkg/scheduler/actions/integration_tests/reclaim",
        "reclaim",
        "benchmarkReclaimLargeJobs(b, {n})",
    ),
    # KAI's consolidation benchmark at 8 jobs per node, the 1,000 x 8,000 shape of the table.
    "consolidation": ("pkg/scheduler/actions", "actions_test", "benchmarkConsolidation(b, {n}, {jobs})"),
    "consolidation-mixed": (
        "pkg/scheduler/actions",
        "actions_test",
        "benchmarkConsolidation(b, {n}, {jobs})",
    ),
}
# What KAI's benchmark itself checks about the decisions (it prints none, so no digest can be compared).
KAI_CHECKS = {
    "reclaim-large": "asserted",  # b.Fatalf unless the gang pipelines every task and N/2*8 victims release
    "consolidation": "not-exposed",
    "consolidation-mixed": "compared",  # the overlay prints KAI's pipelined tasks (KAI_DUMP below)
}
# consolidation-mixed's benchmark body: benchmarkConsolidation's, then every task the session left Pipelined
# (a moved victim included), with its node; printed outside the timed part.
KAI_DUMP = """package actions_test

import (
	"fmt"
	"testing"

	"go.uber.org/mock/gomock"

	"{module}/pkg/scheduler/actions/consolidation"
	"{module}/pkg/scheduler/api/pod_status"
	"{module}/pkg/scheduler/test_utils"
)

func {bench}(b *testing.B) {{
	ctrl := gomock.NewController(b)
	defer ctrl.Finish()
	topology := createBenchmarkTopologyWithMixedJobs({n}, {jobs})
	action := consolidation.New()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {{
		ssn := test_utils.BuildSession(topology, ctrl)
		action.Execute(ssn)
		b.StopTimer()
		for _, job := range ssn.ClusterInfo.PodGroupInfos {{
			for _, t := range job.GetAllPodsMap() {{
				if t.Status == pod_status.Pipelined {{
					fmt.Println("hourglass-placement", t.Name, t.NodeName)
				}}
			}}
		}}
		b.StartTimer()
	}}
}}
"""


def kai_overlay(src: str, shape: str, nodes: int, tmp: str) -> tuple[str, str, str]:
    """Write a one-benchmark test file for `shape` at `nodes` into `tmp` and the ``go test -overlay`` JSON
    that places it in KAI's package; returns (package dir, benchmark name, overlay json path)."""
    pkg, name, call = KAI_HELPER[shape]
    bench = f"BenchmarkHourglass{shape.title().replace('-', '')}_{nodes}Node"
    body = f'package {name}\n\nimport "testing"\n\nfunc {bench}(b *testing.B) {{\n\t{call.format(n=nodes, jobs=8 * nodes)}\n}}\n'
    if KAI_CHECKS[shape] == "compared":
        body = KAI_DUMP.format(module=_module(src), bench=bench, n=nodes, jobs=8 * nodes)
    path = os.path.join(tmp, f"{bench}.go")
    with open(path, "w") as f:
        f.write(body)
    pkg_dir = os.path.join(os.path.abspath(src), pkg)
    overlay = os.path.join(tmp, f"{bench}.json")
    with open(overlay, "w") as f:
        json.dump({"Replace": {os.path.join(pkg_dir, "zz_hourglass_size_test.go"): path}}, f)
    return pkg_dir, bench, overlay


def _module(src: str) -> str:
    """The module path KAI's tree declares (its ``go.mod``'s first ``module`` line)."""
    with open(os.path.join(src, "go.mod")) as f:
        for line in f:
            if line.startswith("module "):
                return line.split()[1]
    raise ValueError(f"{src}/go.mod names no module")


def parse_placements(stdout: str) -> dict[str, str]:
    """The ``hourglass-placement TASK NODE`` lines of KAI_DUMP's output."""
    out: dict[str, str] = {}
    for line in stdout.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0] == "hourglass-placement":
            out[fields[1]] = fields[2]
    return out


def parse_go_bench(stdout: str, bench: str) -> float | None:
    """Seconds per op of `bench` from ``go test -bench`` output (``BenchmarkX-2  1  123 ns/op``), or None."""
    for line in stdout.splitlines():
        fields = line.split()
        if fields and fields[0].split("-")[0] == bench and "ns/op" in fields:
            return int(float(fields[fields.index("ns/op") - 1])) / 1e9
    return None


def kai_skip_reason(go: str | None, src: str | None) -> str | None:
    """Why KAI's benchmark cannot run from `src` with the Go binary `go`, or None when it can be tried."""
    if go is None:
        return "go-not-found"
    if src is None:
        return "no-kai-source"
    if not os.path.isfile(os.path.join(src, "go.mod")):
        return f"kai-src-has-no-go.mod dir={src}"
    for shape in SHAPES:
        pkg = os.path.join(src, KAI_HELPER[shape][0])
        if not os.path.isdir(pkg):
            return f"kai-src-lacks-package pkg={KAI_HELPER[shape][0]}"
    return None


def run_kai_one(
    go: str, src: str, shape: str, nodes: int, ours: dict[str, str] | None = None
) -> float | None:
    """Run KAI's benchmark for `shape` at `nodes` once from the source tree `src`; print one line. For a
    compared shape, `ours` (Hourglass's placements of the same size) is set against KAI's."""
    env = {**os.environ, "GOFLAGS": "-mod=mod"}  # the module proxy: Go's own setting (go env GOPROXY)
    with tempfile.TemporaryDirectory() as tmp:
        pkg_dir, bench, overlay = kai_overlay(src, shape, nodes, tmp)
        cmd = [go, "test", "-overlay", overlay, "-run", "^$", "-bench", f"^{bench}$", "-benchtime", "1x"]
        cmd += ["-count", "1", "-timeout", "0", "."]
        r = subprocess.run(cmd, cwd=pkg_dir, env=env, capture_output=True, text=True)
    secs = parse_go_bench(r.stdout, bench)
    if r.returncode != 0 or secs is None:
        err = (r.stderr.strip() or r.stdout.strip())[-300:]
        print(f"bench: kai shape={shape} nodes={nodes} failed rc={r.returncode} error={err!r}", flush=True)
        return None
    checks = KAI_CHECKS[shape]
    if checks == "compared":
        checks = compare_placements(ours, parse_placements(r.stdout)) if ours is not None else "not-run"
    print(
        f"bench: kai shape={shape} nodes={nodes} seconds={secs:.3f} decisions={checks} bench={bench}",
        flush=True,
    )
    return secs


def kai_source_from_proxy(go: str, tmp: str) -> tuple[str | None, str]:
    """Download KAI's module from the Go module proxy into the module cache; (its dir or None, reason)."""
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    for mod in KAI_MODULES:
        steps = [[go, "mod", "init", "hourglass-kai-bench"], [go, "get", f"{mod}@latest"]]
        steps.append([go, "list", "-m", "-f", "{{.Dir}}", mod])
        out = ""
        for cmd in steps:
            r = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
            if r.returncode != 0:
                out = f"build-failed module={mod} step={cmd[1]} error={r.stderr.strip()[:200]!r}"
                break
            out = r.stdout.strip()
        if os.path.isdir(out):
            return out, ""
        if os.path.exists(os.path.join(tmp, "go.mod")):
            os.remove(os.path.join(tmp, "go.mod"))
    return None, out


def kai_source(go: str | None, src: str | None, use_proxy: bool, tmp: str) -> tuple[str | None, str]:
    """The KAI source tree to benchmark: `src` when given, else the Go module proxy's copy; (dir, skip)."""
    if go is not None and src is None and use_proxy:
        src, why = kai_source_from_proxy(go, tmp)
        if src is None:
            return None, why
    why2 = kai_skip_reason(go, src)
    return (None, why2) if why2 else (src, "")


def main() -> None:
    """Parse shapes and sizes; per size, Hourglass then (when asked) KAI, one ``bench:`` line each."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--nodes", default="100,500,1000")
    ap.add_argument(
        "--kai", action="store_true", help="also run KAI's Go benchmark, from the Go module proxy"
    )
    ap.add_argument(
        "--kai-src", metavar="DIR", help="KAI source tree (e.g. `git archive` of a clone) for --kai"
    )
    ap.add_argument("--kai-only", action="store_true", help="run KAI's side only (no Hourglass runs)")
    a = ap.parse_args()
    shapes = [s for s in a.shapes.split(",") if s]
    for shape in shapes:
        if shape not in SHAPES:
            ap.error(f"unknown shape {shape!r}: one of {', '.join(SHAPES)}")
    sizes = [int(x) for x in a.nodes.split(",") if x]
    with_kai = a.kai or a.kai_src is not None
    with tempfile.TemporaryDirectory() as tmp:
        src, why = kai_source(shutil.which("go"), a.kai_src, a.kai, tmp) if with_kai else (None, "")
        if with_kai and src is None:
            print(f"bench: kai skipped={why}", flush=True)
        go = shutil.which("go")
        # Alternating Hourglass and KAI per shape and size, so both see the same machine load.
        for shape in shapes:
            for n in sizes:
                ours = None if a.kai_only else run(shape, n)
                if src is not None and go is not None:
                    run_kai_one(go, src, shape, n, ours)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
