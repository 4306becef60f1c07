"""bench_kai_shapes' KAI side: its arguments, the line it prints when KAI cannot be run, and the reading of
``go test -bench`` output. KAI itself is not built here (minutes of compiling); the script's docs say how."""

from __future__ import annotations

import os
import runpy
import stat
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO_ROOT
from tests.support.synthetic import mixed_jobs_events, reclaim_large_events

SCRIPT = REPO_ROOT / "benchmarks" / "bench_kai_shapes.py"


def _run(args: list[str], path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PATH": path}
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--nodes", "", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _fake_go(tmp_path: Path) -> str:
    go = tmp_path / "go"
    go.write_text("#!/bin/sh\nexit 1\n")
    go.chmod(go.stat().st_mode | stat.S_IEXEC)
    return str(tmp_path)


def test_kai_without_go_says_skipped(tmp_path: Path) -> None:
    r = _run(["--kai"], str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["bench: kai skipped=go-not-found"]


def test_kai_src_that_is_not_a_kai_tree_says_why(tmp_path: Path) -> None:
    r = _run(["--kai-src", str(tmp_path / "nowhere")], _fake_go(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"bench: kai skipped=kai-src-has-no-go.mod dir={tmp_path / 'nowhere'}"]


def test_kai_from_proxy_refused_says_module_and_step(tmp_path: Path) -> None:
    r = _run(["--kai"], _fake_go(tmp_path))
    (line,) = r.stdout.splitlines()
    assert line.startswith("bench: kai skipped=build-failed module=github.com/NVIDIA/KAI-scheduler step=mod")


def test_unknown_shape_is_refused(tmp_path: Path) -> None:
    r = _run(["--shapes", "reclaim-huge"], str(tmp_path))
    assert r.returncode == 2
    assert "unknown shape 'reclaim-huge'" in r.stderr


def test_go_bench_line_is_read_as_seconds() -> None:
    parse = runpy.run_path(str(SCRIPT))["parse_go_bench"]
    out = (
        "goos: linux\nBenchmarkHourglassReclaimLarge_100Node-2   \t       1\t3402117890 ns/op\n"
        "BenchmarkHourglassReclaimLarge_1000Node-2 1 9 ns/op\nPASS\n"
    )
    assert parse(out, "BenchmarkHourglassReclaimLarge_100Node") == 3.40211789
    assert parse(out, "BenchmarkHourglassConsolidation_100Node") is None


def test_reclaim_large_is_kais_cluster_and_makes_kais_decisions(tmp_path: Path) -> None:
    # KAI's ReclaimLargeJobs asserts N/2 pipelined pods of the gang and 4N releasing victims
    # (integration_tests/reclaim/reclaim_benchmark_test.go:248-271); at 10 nodes: 5 and 40.
    r = _run(["--shapes", "reclaim-large", "--nodes", "10"], os.environ["PATH"])
    assert r.returncode == 0, r.stderr
    (line,) = r.stdout.splitlines()
    assert " nodes=10 evict=40 pipeline=5 " in line, line


def test_reclaim_large_queues_match_kai() -> None:
    events = reclaim_large_events(4)
    queues = {e.name: e.resources.gpu for e in events if type(e).__name__ == "QueueUpserted"}
    assert {q: (g.quota, g.over_quota_weight) for q, g in queues.items()} == {"a": (0, 0), "b": (32000, 0)}
    gangs = [e for e in events if type(e).__name__ == "PodGroupUpserted" and e.name == "large"]
    assert [g.min_member for g in gangs] == [2]


def test_consolidation_mixed_is_kais_mixed_jobs_topology() -> None:
    # benchmark_test.go createBenchmarkTopologyWithMixedJobs at 4 nodes x 8 GPUs, 16 jobs: queue i % 4 under
    # dept-a (0, 1) / dept-b (2, 3), a quarter of the GPUs deserved each (weight 1), departments half; job i
    # runs on node i % 4 when i is even, else pends.
    events = mixed_jobs_events(4, 16)
    queues = {e.name: e for e in events if type(e).__name__ == "QueueUpserted"}
    assert {
        n: (q.parent, q.resources.gpu.quota, q.resources.gpu.over_quota_weight) for n, q in queues.items()
    } == {
        "dept-a": (None, 16000, 1),
        "dept-b": (None, 16000, 1),
        "queue-0": ("dept-a", 8000, 1),
        "queue-1": ("dept-a", 8000, 1),
        "queue-2": ("dept-b", 8000, 1),
        "queue-3": ("dept-b", 8000, 1),
    }
    submitted = [e for e in events if type(e).__name__ == "PodSubmitted"]
    assert [e.queue for e in submitted] == [f"queue-{i % 4}" for i in range(16)]
    bound = {e.name: e.node for e in events if type(e).__name__ == "PodBound"}
    assert bound == {f"job-{i:07d}-0": f"node-{i % 4}" for i in range(0, 16, 2)}


def test_placements_are_compared_in_kais_task_names() -> None:
    ns = runpy.run_path(str(SCRIPT))
    assert ns["_kai_task_name"]("default/job-0000007-0") == "job-7-0"
    kai = ns["parse_placements"](
        "goos: linux\nhourglass-placement job-1-0 node-1\nhourglass-placement job-3-0 node-1\n"
        "hourglass-placement job-30-0 node-3\nBenchmarkX-2 1 5 ns/op\n"
    )
    assert kai == {"job-1-0": "node-1", "job-3-0": "node-1", "job-30-0": "node-3"}
    compare = ns["compare_placements"]
    assert compare(dict(kai), kai) == "pods=same nodes=same same_node=3/3"
    # job-1 and job-30 swap nodes: the same pods and pods per node, one pod of three where KAI put it
    swapped = {"job-1-0": "node-3", "job-3-0": "node-1", "job-30-0": "node-1"}
    assert compare(swapped, kai) == "pods=same nodes=same same_node=1/3"
    assert compare({"job-1-0": "node-2"}, kai) == "pods=differ nodes=differ same_node=0/1"
