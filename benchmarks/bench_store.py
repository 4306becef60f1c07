"""Audit store benchmark: DuckDB sink rows / s, and the "why was pod X pending" query over >= 1 M decisions.

Synthetic cycle records (canonical ``CycleRecord`` JSON built from plain dicts, so generating them is
cheap): ``--cycles`` cycles of ``--per-cycle`` decisions (90 % Unschedulable with realistic details, the
rest Bind / Pipeline / Evict) and ``--queues`` queues each. They are appended to an embedded FileLog
(``fsync="never"``), then ``sink_from_log`` loads them into a fresh DuckDB file; rows / s counts decision,
queue and cycle rows. The query is the ready query of ``docs/sql.md`` on a read-only connection
(median of ``--repeat`` runs, on a connection already open; the full ``analytics.audit.store.query`` path, which
also parses the statement and opens the file, is reported too). Run:

    python benchmarks/bench_store.py [--cycles 1000] [--per-cycle 1000] [--queues 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from analytics.audit.store import AuditStore, open_readonly, query, sink_from_log
from ingest.filelog import FileLog
from ingest.log import Topics

WHY_PENDING = """
SELECT start_ms, end_ms, cycle_id, job, queue, reason, message, details
FROM pending_intervals
WHERE list_contains(pods, '{pod}')
ORDER BY start_ms DESC
LIMIT 1
"""


def _queue(name: str, parent: str | None, i: int) -> dict[str, Any]:
    vec = {"cpu": 1000 * i, "gpu": 500 * i, "memory": 2**30 * i}
    return {
        "allocated": vec,
        "allocated_non_preemptible": vec,
        "deserved": {"cpu": None, "gpu": 8000, "memory": None},
        "fair_share": vec,
        "fair_share_classic": vec,
        "k_adjustment": {"cpu": 0, "gpu": 0, "memory": 0},
        "limit": {"cpu": None, "gpu": None, "memory": None},
        "name": name,
        "over_quota_weight": {"cpu": "1", "gpu": "1", "memory": "1"},
        "parent": parent,
        "priority": 100,
        "requested": vec,
        "usage": {"cpu": 0.0, "gpu": 0.1, "memory": 0.0},
    }


def _decision(c: int, i: int, pods: int) -> dict[str, Any]:
    p = (c * 37 + i) % pods
    q = f"q{p % 20}"
    pod = f"{q}/pod-{p:07d}"
    base: dict[str, Any] = {
        "action": None,
        "details": {},
        "gpu_devices": [],
        "gpu_milli_per_device": 0,
        "job": pod,
        "message": None,
        "node": None,
        "pod": None,
        "pods": [],
        "queue": q,
        "reason": None,
    }
    if i % 10:
        base.update(
            kind="Unschedulable",
            pods=[pod],
            reason="PodSchedulingErrors",
            message=f"Resources were not found for pod pod-{p:07d} due to: no nodes with enough resources",
            details={
                "pending_pods": 1,
                "requested": {"cpu": 8000, "gpu": 1000, "memory": 2**34},
                "queue": {"name": q, "allocated": {"gpu": 4000}, "fair_share": {"gpu": 3000}},
            },
        )
    else:
        kind = ("Bind", "Pipeline", "Evict")[(i // 10) % 3]
        base.update(kind=kind, pod=pod, node=f"node-{p % 1000:04d}", action="allocate", gpu_devices=[0])
    return base


def synthetic_records(cycles: int, per_cycle: int, queues: int, pods: int) -> list[bytes]:
    qs = [_queue("root", None, 1)] + [_queue(f"q{i}", "root", i) for i in range(queues - 1)]
    out = []
    for c in range(cycles):
        rec = {
            "config_hash": "0123456789abcdef",
            "cycle_id": f"{c:020x}",
            "decisions": [_decision(c, i, pods) for i in range(per_cycle)],
            "events_offset": c * 10,
            "logical_time_ms": c * 300_000,
            "queues": qs,
            "usage_available": False,
            "usage_snapshot_id": None,
            "v": 1,
        }
        out.append(json.dumps(rec, sort_keys=True, separators=(",", ":")).encode())
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--per-cycle", type=int, default=1000)
    ap.add_argument("--queues", type=int, default=20)
    ap.add_argument("--pods", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=200, help="records per sink batch")
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    t0 = time.perf_counter()
    records = synthetic_records(a.cycles, a.per_cycle, a.queues, a.pods)
    mb = sum(map(len, records)) / 1e6
    print(
        f"bench: store_generate cycles={a.cycles} decisions={a.cycles * a.per_cycle} megabytes={mb:.0f}"
        f" seconds={time.perf_counter() - t0:.3f}"
    )
    topics = Topics.with_prefix("bench")
    with tempfile.TemporaryDirectory() as tmp:
        log = FileLog(Path(tmp) / "log", fsync="never")
        for i in range(0, len(records), 100):
            log.append_many(topics.decisions, [(None, r) for r in records[i : i + 100]])
        del records
        db = Path(tmp) / "audit.duckdb"
        with AuditStore(db) as store:
            t1 = time.perf_counter()
            stats = sink_from_log(store, log, topics, group="bench", batch_size=a.batch)
            dt = time.perf_counter() - t1
        log.close()
        rows = stats.decision_rows + stats.queue_rows + stats.cycles
        print(
            f"bench: sink cycles={stats.cycles} decision_rows={stats.decision_rows} queue_rows={stats.queue_rows}"
            f" batch={a.batch} rows_per_s={rows / dt:.0f} seconds={dt:.3f}"
        )
        p = 12_345
        pod = f"q{p % 20}/pod-{p:07d}"
        sql = WHY_PENDING.format(pod=pod)
        con = open_readonly(db)
        times = []
        for _ in range(a.repeat):
            q0 = time.perf_counter()
            rows_out = con.execute(sql).fetchall()
            times.append(time.perf_counter() - q0)
        con.close()
        assert rows_out, "the pod is pending in some cycle"
        full = []
        for _ in range(3):
            q0 = time.perf_counter()
            query(db, sql)
            full.append(time.perf_counter() - q0)
        print(
            f"bench: why_pending decision_rows={stats.decision_rows} repeat={a.repeat}"
            f" min_seconds={min(times):.4f} seconds={statistics.median(times):.4f}"
        )
        print(
            f"bench: why_pending_with_open decision_rows={stats.decision_rows} repeat=3"
            f" seconds={statistics.median(full):.4f}"
        )


if __name__ == "__main__":
    main()
