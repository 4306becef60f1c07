"""Decision history at production cadence (issue 13): record bytes, sink speed, store size, query times.

1. ``records``: ``hourglass simulate`` of ``examples/production-cadence.yaml`` (500 x 8-GPU nodes, 20
   queues, 3,000 jobs kept pending, Poisson arrivals) at a 1 s and a 10 s cycle period; bytes per cycle
   record as written (checkpoints + deltas) and what full records would have been (the first record, a
   checkpoint, times the cycles).
2. ``sink``: the 1 s run loaded into a fresh audit store (DuckDB + Parquet history): seconds, times real
   time, store bytes per simulated day.
3. ``pending``: ``benchmarks/history-churn.yaml`` (160 GPUs, 8 queues keeping 10, 125 or 1,250 jobs
   pending each: 80 / 1,000 / 10,000 pending, short runs, 1 s period) for ``--pending-duration``: bytes per
   recorded cycle as written (v3) and as the v2 writer wrote the same cycles (every field and message
   written out), bytes per day at a 1 s cadence (every cycle recorded: the deltas' mean, an empty delta
   for each skipped cycle, a checkpoint every 3,600 records), and what a delta's bytes are made of in
   both formats (``delta_parts``: per decision kind, queue changes, templates, the rest).
4. ``queries``: a store holding ``--days`` days of synthetic input records at one record every 10 s (20
   queues, ~2,000 pending jobs, a few binds and finishes, new / cleared pending jobs and changed queues per
   record, with the matching pod events), every whole day moved to Parquet; then "why was pod X pending at
   time T" over ``pending_intervals`` and "GPU-hours per queue per day" over ``queue_days`` (median of
   ``--repeat`` runs on a read-only connection).

    python benchmarks/bench_history.py [--duration 10m] [--days 30] [--skip-records] [--pending 80,1000]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from analytics.audit.archive import archive
from analytics.audit.store import AuditStore, load_cycles, load_events, load_run_dir, open_readonly
from analytics.audit.views import history_dir
from analytics.rundir import CYCLES_FILE, read_cycles, read_records
from scheduler.engine.record.decisions import CycleRecord
from scheduler.engine.record.delta import DEFAULT_CHECKPOINT_EVERY, delta_of

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "production-cadence.yaml"
CHURN = ROOT / "benchmarks" / "history-churn.yaml"
DAY = 86_400_000


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _simulate(
    out: Path, period: str, duration: str, config: Path = EXAMPLE, extra: tuple[str, ...] = ()
) -> tuple[float, int]:
    """(wall seconds, cycles the simulator skipped because nothing had changed)."""
    cmd = [sys.executable, "-m", "analytics.cli", "simulate", "--config", str(config), "--out", str(out)]
    cmd += ["--set", f"cycle_period={period}", "--set", f"duration={duration}", "--json", *extra]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    return time.perf_counter() - t0, int(json.loads(done.stdout)["cycles"]["skipped"])


def _empty_delta_bytes(last: CycleRecord) -> int:
    """Bytes of the record a service writes for a cycle that changed nothing: a delta on *last* with no
    entries (the simulator skips such cycles; a service ticking every period writes them)."""
    t = last.logical_time_ms + 1000
    same = last.model_copy(update={"cycle_id": "0" * len(last.cycle_id), "logical_time_ms": t})
    return len(delta_of(last, same).model_copy(update={"v": 3}).dumps()) + 1


def bench_records(tmp: Path, duration: str) -> Path:
    totals = {}
    for period in ("1s", "10s"):
        out = tmp / f"run-{period}"
        wall, skipped = _simulate(out, period, duration)
        recs = list(read_records(out))
        size = (out / CYCLES_FILE).stat().st_size
        first = len(recs[0].dumps()) + 1
        deltas = [len(r.dumps()) + 1 for r in recs if not r.is_full]
        empty = _empty_delta_bytes(list(read_cycles(out))[-1])
        totals[period] = size
        # per_period_cycle: what a service with a cycle every period writes on average, counting an empty
        # delta for each cycle the simulator skipped (nothing changed)
        print(
            f"bench: history records scenario=production-cadence period={period} duration={duration}"
            f" cycles={len(recs)} skipped_cycles={skipped} checkpoints={sum(r.is_full for r in recs)}"
            f" bytes={size} bytes_per_record={size // max(1, len(recs))}"
            f" delta_median_bytes={int(statistics.median(deltas)) if deltas else 0} empty_delta_bytes={empty}"
            f" bytes_per_period_cycle={(size + skipped * empty) // max(1, len(recs) + skipped)}"
            f" full_bytes_per_record={first} simulate_seconds={wall:.1f} seconds={wall:.1f}"
        )
    print(
        f"bench: history cadence_ratio bytes_1s={totals['1s']} bytes_10s={totals['10s']}"
        f" ratio={totals['1s'] / max(1, totals['10s']):.2f} seconds=0"
    )
    return tmp / "run-1s"


def bench_sink(run: Path, duration_ms: int) -> None:
    db = run.parent / "sink.duckdb"
    t0 = time.perf_counter()
    with AuditStore(db) as store:
        load_run_dir(store, run)
        archive(store)
    wall = time.perf_counter() - t0
    size = _size(db) + _size(history_dir(db))
    per_day = size * DAY // max(1, duration_ms)
    print(
        f"bench: history sink records={sum(1 for _ in (run / CYCLES_FILE).open('rb'))}"
        f" simulated_s={duration_ms / 1000:.0f} x_real_time={duration_ms / 1000 / wall:.1f}"
        f" store_bytes={size} store_bytes_per_day={per_day} seconds={wall:.2f}"
    )


def previous_format(written: list[CycleRecord]) -> list[CycleRecord]:
    """The records the v2 writer made of the same cycles: the same content, every field and message written
    out (``scheduler/engine/record/written.py``)."""
    return [r.model_copy(update={"v": 2}) if r.v == 3 else r for r in written]


def delta_parts(recs: list[CycleRecord]) -> dict[str, int]:
    """Mean bytes per delta by part: each kind of decision, ``queue_changes``, ``message_templates`` and the
    rest (ids, offsets, ``cleared``, …), measured on the record's own JSON."""
    deltas = [json.loads(r.dumps()) for r in recs if not r.is_full]
    parts: dict[str, int] = {}
    for data in deltas:
        for d in data.pop("decisions", []):
            key = f"{d['kind']}"
            parts[key] = parts.get(key, 0) + len(json.dumps(d, separators=(",", ":"))) + 1
        for k in ("queue_changes", "message_templates"):
            if k in data:
                parts[k] = parts.get(k, 0) + len(json.dumps({k: data.pop(k)}, separators=(",", ":")))
        parts["envelope"] = parts.get("envelope", 0) + len(json.dumps(data, separators=(",", ":"))) + 1
    return {k: round(v / max(1, len(deltas))) for k, v in sorted(parts.items())}


def _per_day(recs: list[CycleRecord], skipped: int) -> tuple[int, int, int]:
    """(mean delta bytes, checkpoint bytes, bytes per day with a cycle every second, all recorded)."""
    deltas = [len(r.dumps()) + 1 for r in recs if not r.is_full]
    full = len(recs[0].dumps()) + 1
    empty = _empty_delta_bytes_of(recs[-1])
    # a skipped cycle (nothing changed) is an empty delta for a service recording every period
    mean = (sum(deltas) + skipped * empty) / max(1, len(deltas) + skipped)
    per_day = round(86_400 * mean + 86_400 / DEFAULT_CHECKPOINT_EVERY * (full - mean))
    return round(sum(deltas) / max(1, len(deltas))), full, per_day


def _empty_delta_bytes_of(last: CycleRecord) -> int:
    """Bytes of a delta listing nothing, in the format of *last* (as written)."""
    empty: dict[str, Any] = {"decisions": [], "cleared": [], "queues": [], "queue_changes": [], "queues_removed": []}
    if last.is_full:
        empty.update(kind="delta", base=last.cycle_id)
    return len(last.model_copy(update=empty).dumps()) + 1


def bench_pending(tmp: Path, duration: str, pending: list[int]) -> None:
    for n in pending:
        per_queue = max(1, n // 8)
        out = tmp / f"churn-{n}"
        sets = [f"workloads.{i}.jobs={per_queue}" for i in range(0, 16, 2)]  # the keep_pending workloads
        wall, skipped = _simulate(out, "1s", duration, CHURN, tuple(x for s in sets for x in ("--set", s)))
        written = list(read_records(out))
        old = previous_format(written)
        size = (out / CYCLES_FILE).stat().st_size
        old_size = sum(len(r.dumps()) + 1 for r in old)
        mean, full, day = _per_day(written, skipped)
        old_mean, old_full, old_day = _per_day(old, skipped)
        print(
            f"bench: history pending scenario=history-churn pending={per_queue * 8} duration={duration}"
            f" records={len(written)} skipped_cycles={skipped} bytes_per_record={size // len(written)}"
            f" previous_bytes_per_record={old_size // len(old)} delta_mean_bytes={mean}"
            f" previous_delta_mean_bytes={old_mean} checkpoint_bytes={full} previous_checkpoint_bytes={old_full}"
            f" bytes_per_day_1s={day} previous_bytes_per_day_1s={old_day} simulate_seconds={wall:.1f}"
            f" seconds={wall:.1f}"
        )
        for name, recs in (("v2", old), ("v3", written)):
            parts = " ".join(f"{k}={v}" for k, v in delta_parts(recs).items())
            print(f"bench: history delta_parts pending={per_queue * 8} format={name} {parts} seconds=0")


# --------------------------------------------------------------------------- 30 days of synthetic input


def _queue(name: str, alloc: int) -> dict[str, Any]:
    vec = {"gpu": alloc, "cpu": alloc * 4, "memory": alloc * 2**24}
    none = {"gpu": None, "cpu": None, "memory": None}
    zero = {"gpu": 0, "cpu": 0, "memory": 0}
    return {
        "name": name, "parent": None, "priority": 0, "deserved": {"gpu": 200_000, "cpu": None, "memory": None},
        "limit": none, "over_quota_weight": {"gpu": "1", "cpu": "1", "memory": "1"}, "requested": vec,
        "allocated": vec, "allocated_non_preemptible": zero, "fair_share": vec, "fair_share_classic": vec,
        "k_adjustment": zero, "usage": {"gpu": 0.0, "cpu": 0.0, "memory": 0.0},
    }  # fmt: skip


def _pending(job: str, queue: str, reason: str) -> dict[str, Any]:
    return {
        "kind": "Unschedulable", "job": job, "queue": queue, "pod": None, "pods": [f"{job}-0"], "node": None,
        "gpu_devices": [], "gpu_milli_per_device": 0, "action": None, "reason": reason,
        "message": f"{reason}: no node has 8 free GPUs for pod {job}-0",
        "details": {"pending_pods": 1, "requested": {"gpu": 8000, "cpu": 32000, "memory": 2**38}},
    }  # fmt: skip


def _bind(job: str, queue: str, node: str) -> dict[str, Any]:
    return {
        "kind": "Bind", "job": job, "queue": queue, "pod": f"{job}-0", "pods": [], "node": node,
        "gpu_devices": list(range(8)), "gpu_milli_per_device": 1000, "action": "allocate", "reason": None,
        "message": None, "details": {},
    }  # fmt: skip


def _dumps(d: dict[str, Any]) -> bytes:
    return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()


def synthetic(days: int, step_ms: int, seed: int = 13) -> tuple[list[tuple[int, bytes]], list[bytes]]:
    """(events, records) of *days* days: one record every *step_ms*, a checkpoint every 3,600 records."""
    rng = random.Random(seed)
    queues = [f"team-{i:02d}" for i in range(1, 21)]
    alloc = {q: 160_000 for q in queues}
    pending: dict[str, dict[str, Any]] = {}
    running: list[tuple[str, str, int]] = []  # (job, queue, end_ms)
    events: list[tuple[int, bytes]] = []
    records: list[bytes] = []
    serial = 0
    new_jobs: list[str] = []

    def event(body: dict[str, Any]) -> None:
        events.append((len(events), _dumps(body)))

    def submit(q: str, t: int) -> None:
        nonlocal serial
        serial += 1
        job = f"{q}/job-{serial}"
        pending[job] = _pending(job, q, rng.choice(("PodSchedulingErrors", "NotAttempted")))
        new_jobs.append(job)
        event({"type": "PodSubmitted", "at_ms": t, "uid": f"{job}-0", "name": f"job-{serial}-0", "namespace": q,
               "queue": q, "pod_group": f"job-{serial}", "requests": {"gpus": 8, "cpu_millicores": 32000,
               "memory_bytes": 2**38}})  # fmt: skip

    for q in queues:
        for _ in range(100):
            submit(q, 0)
    prev: str | None = None
    for i in range(days * DAY // step_ms):
        t = i * step_ms
        decisions: list[dict[str, Any]] = []
        changed_q: set[str] = set()
        running.sort(key=lambda r: r[2])
        while running and running[0][2] <= t:
            job, q, _ = running.pop(0)
            event({"type": "PodFinished", "at_ms": t, "uid": f"{job}-0", "phase": "Succeeded"})
            alloc[q] -= 8000
            changed_q.add(q)
        for _ in range(rng.choice((0, 1, 1, 2))):
            submit(rng.choice(queues), t)
        cleared = []
        for _ in range(rng.choice((0, 1, 2))):
            if not pending:
                break
            job = next(iter(pending))  # the oldest pending job starts (dicts keep insertion order)
            q = pending.pop(job)["queue"]
            node = f"gpu-node-{rng.randrange(500):03d}"
            decisions.append(_bind(job, q, node))
            event({"type": "PodBound", "at_ms": t, "uid": f"{job}-0", "node": node, "gpu_devices": list(range(8))})
            running.append((job, q, t + rng.randrange(600_000, 7_200_000)))
            alloc[q] += 8000
            changed_q.add(q)
            cleared.append(job)
        full = i % 3600 == 0
        fresh = list(pending) if full else new_jobs
        new_jobs = []
        for j in fresh:
            if j in pending:
                decisions.append(pending[j])
        cid = f"c{i:08d}"
        rec = {
            "v": 2, "kind": "full" if full else "delta", "base": None if full else prev, "cycle_id": cid,
            "events_offset": len(events) - 1, "usage_snapshot_id": None, "config_hash": "bench",
            "logical_time_ms": t, "usage_available": True,
            "queues": [_queue(q, alloc[q]) for q in queues] if full else [],
            "decisions": decisions, "cleared": [] if full else cleared, "queues_removed": [],
        }  # fmt: skip
        if not full and changed_q:  # a delta carries only the changed fields of a queue (as DeltaEncoder)
            moved = ("requested", "allocated", "fair_share", "fair_share_classic")
            rec["queue_changes"] = [
                {"name": q, **{f: v for f, v in _queue(q, alloc[q]).items() if f in moved}} for q in sorted(changed_q)
            ]
        records.append(_dumps(rec))
        prev = cid
    return events, records


def bench_queries(tmp: Path, days: int, repeat: int) -> None:
    t0 = time.perf_counter()
    events, records = synthetic(days, 10_000)
    gen = time.perf_counter() - t0
    db = tmp / "month.duckdb"
    t0 = time.perf_counter()
    with AuditStore(db) as store:
        load_events(store, iter(events))
        load_cycles(store, iter(records), batch_size=5000)
        archive(store)
    load = time.perf_counter() - t0
    size = _size(db) + _size(history_dir(db))
    print(
        f"bench: history month_store days={days} records={len(records)} events={len(events)}"
        f" generate_seconds={gen:.1f} store_bytes={size} store_bytes_per_day={size // days} seconds={load:.1f}"
    )
    con = open_readonly(db)
    rng = random.Random(7)
    pods = [r[0] for r in con.execute("SELECT pods[1] FROM pending_intervals USING SAMPLE 50 ROWS").fetchall()]
    rows = con.execute("SELECT count(*) FROM pending_intervals").fetchall()[0][0]

    def timed(sql: str, params: list[Any]) -> tuple[float, int]:
        t = time.perf_counter()
        n = len(con.execute(sql, params).fetchall())
        return time.perf_counter() - t, n

    why = (
        "SELECT start_ms, end_ms, cycle_id, job, queue, reason, message, details FROM pending_intervals"
        " WHERE list_contains(pods, ?) AND start_ms <= ? AND ? < end_ms"
    )
    times = []
    for _ in range(repeat):
        pod = rng.choice(pods)
        t_ms = rng.randrange(days * DAY)
        times.append(timed(why, [pod, t_ms, t_ms])[0])
    print(
        f"bench: history why_pending_at_t days={days} pending_interval_rows={rows} repeat={repeat}"
        f" median_ms={statistics.median(times) * 1000:.1f} max_ms={max(times) * 1000:.1f}"
        f" seconds={statistics.median(times):.4f}"
    )
    daily = "SELECT day, queue, gpu_held_ms / 3.6e9 AS gpu_hours FROM queue_days ORDER BY day, queue"
    times, n = [], 0
    for _ in range(repeat):
        dt, n = timed(daily, [])
        times.append(dt)
    print(
        f"bench: history gpu_hours_per_queue_per_day days={days} rows={n} repeat={repeat}"
        f" median_ms={statistics.median(times) * 1000:.1f} max_ms={max(times) * 1000:.1f}"
        f" seconds={statistics.median(times):.4f}"
    )
    con.close()


def _ms(text: str) -> int:
    unit = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": DAY}[text[-1]]
    return int(text[:-1]) * unit


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", default="1h", help="simulated time of the records benchmark (default 1h)")
    p.add_argument("--days", type=int, default=30, help="days of synthetic history for the queries")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--skip-records", action="store_true", help="only the 30-day store and its queries")
    p.add_argument("--skip-queries", action="store_true", help="only the records and sink benchmarks")
    p.add_argument("--pending", default="", help="pending-job counts of the churn benchmark (80,1000,10000)")
    p.add_argument("--pending-duration", default="5m", help="simulated time of each churn run (default 5m)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.pending:
            bench_pending(tmp, args.pending_duration, [int(x) for x in args.pending.split(",")])
        if not args.skip_records:
            run = bench_records(tmp, args.duration)
            bench_sink(run, _ms(args.duration))
        if not args.skip_queries:
            bench_queries(tmp, args.days, args.repeat)


if __name__ == "__main__":
    main()
