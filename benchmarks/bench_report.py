"""Report benchmark: ``hourglass report`` over an audit store with >= 1 M queue spans (one per queue per cycle).

A synthetic store is written straight into DuckDB with set-based ``INSERT … SELECT`` over ``range()``
(generating it through the log would time the sink, which ``bench_store.py`` measures): ``--cycles``
cycles, one every 5 minutes, of ``--parents`` × ``--leaves`` leaf queues plus their parents (default
50,000 × (4 + 16) = 1,000,000 queue spans), ``--nodes`` 8-GPU nodes, ``--pods`` pods (submit, bind,
finish events; 1 in 50 evicted by a preempt), and one Unschedulable decision per pending pod every 10th
cycle. Then it times, on that store:

* ``build_report`` (every query of the report, the views computed from scratch) + the terminal tables;
* the same with ``--queue``;
* ``--html`` (the plot series and six SVG plots);

each the median of ``--repeat`` runs. Run:

    python benchmarks/bench_report.py [--cycles 50000] [--parents 4] [--leaves 4] [--pods 100000]
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from analytics.audit.store import AuditStore
from analytics.reports.report import build_report, connect, render, report_from

PERIOD_MS = 300_000


def build_store(path: Path, cycles: int, parents: int, leaves: int, nodes: int, pods: int) -> dict[str, int]:
    """Write the synthetic store; returns its row counts."""
    n_leaves = parents * leaves
    span = cycles * PERIOD_MS
    with AuditStore(path) as store:
        con = store.con
        con.execute("CREATE TEMP TABLE q AS SELECT i, 'dept-' || (i // $l) AS parent, 'team-' || i AS name"
                    " FROM range(0, $n) t(i)", {"l": leaves, "n": n_leaves})  # fmt: skip
        # events: nodes, queues, then per pod a submit, a bind and a finish (offsets in time order)
        con.execute(
            """
            INSERT INTO recent_events
            SELECT i, 'NodeUpserted', 'node-' || i, 0,
                   json_object('type', 'NodeUpserted', 'name', 'node-' || i, 'uid', 'node-' || i, 'at_ms', 0,
                               'gpus', 8, 'cpu_millicores', 128000, 'memory_bytes', 1099511627776)
            FROM range(0, $nodes) t(i)
            """,
            {"nodes": nodes},
        )
        con.execute(
            """
            CREATE TEMP TABLE p AS
            SELECT i, 'team-' || (i % $nl) AS queue, 'team-' || (i % $nl) || '/pod-' || i AS uid, 'pod-' || i AS name,
                   (i * $span // $pods) AS created, (i * $span // $pods) + (hash(i) % 3600000)::BIGINT AS bound,
                   (i * $span // $pods) + (hash(i) % 3600000)::BIGINT + 600000 + (hash(i + 1) % 86400000)::BIGINT AS finished,
                   (1 + hash(i + 2) % 4)::BIGINT AS gpus, 'node-' || (i % $nodes) AS node
            FROM range(0, $pods) t(i)
            """,
            {"nl": n_leaves, "span": span, "pods": pods, "nodes": nodes},
        )
        con.execute(
            """
            INSERT INTO recent_events
            SELECT row_number() OVER (ORDER BY at_ms, k, i) + $base - 1, type, uid, at_ms, raw FROM (
              SELECT i, 0 AS k, 'PodSubmitted' AS type, uid, created AS at_ms,
                     json_object('type', 'PodSubmitted', 'uid', uid, 'name', name, 'namespace', queue,
                                 'pod_group', name, 'queue', queue, 'created_at_ms', created, 'at_ms', created,
                                 'requests', json_object('gpus', gpus, 'gpu_fraction_milli', NULL,
                                   'gpu_fraction_devices', 1, 'cpu_millicores', 4000 * gpus,
                                   'memory_bytes', 17179869184)) AS raw FROM p
              UNION ALL
              SELECT i, 1, 'PodBound', uid, bound,
                     json_object('type', 'PodBound', 'uid', uid, 'name', name, 'namespace', queue, 'node', node,
                                 'at_ms', bound, 'gpu_devices', range(0, gpus)) FROM p
              UNION ALL
              SELECT i, 2, 'PodFinished', uid, finished,
                     json_object('type', 'PodFinished', 'uid', uid, 'name', name, 'namespace', queue,
                                 'phase', 'Succeeded', 'at_ms', finished) FROM p WHERE i % 50 <> 7
              UNION ALL
              SELECT i, 1, 'PodReleasing', uid, finished - 30000,
                     json_object('type', 'PodReleasing', 'uid', uid, 'name', name, 'namespace', queue,
                                 'reason', 'preempt', 'at_ms', finished - 30000) FROM p WHERE i % 50 = 7
              UNION ALL
              SELECT i, 2, 'PodFinished', uid, finished,
                     json_object('type', 'PodFinished', 'uid', uid, 'name', name, 'namespace', queue,
                                 'phase', 'Failed', 'at_ms', finished) FROM p WHERE i % 50 = 7)
            """,
            {"base": nodes},
        )
        con.execute(
            """
            INSERT INTO recent_cycles
            SELECT 'c' || c, c, 'delta', NULL, c * 10, NULL, 'bench', c * $period, true, $nq, 0, NULL, NULL, NULL
            FROM range(0, $cycles) t(c)
            """,
            {"period": PERIOD_MS, "cycles": cycles, "nq": n_leaves + parents},
        )
        # Leaves: a slowly varying allocation; parents: the sum of their leaves.
        con.execute(
            """
            CREATE TEMP TABLE leaf_rows AS
            SELECT 'c' || c AS cycle_id, c, c * $period AS t, q.name AS queue, q.parent,
                   (1000 * (8 + ((c // 100 + q.i * 7) % 24)))::BIGINT AS alloc,
                   (1000 * (10 + ((c // 150 + q.i * 5) % 30)))::BIGINT AS req,
                   ((c // 50 + q.i) % 100) / 400.0 AS usage
            FROM range(0, $cycles) t(c), q
            """,
            {"period": PERIOD_MS, "cycles": cycles},
        )
        con.execute(
            """
            INSERT INTO recent_queue_spans
            SELECT queue, parent, 100, 20000, NULL, NULL, least(req, 24000), NULL, NULL,
                   least(req, 22000), NULL, NULL, alloc, 4000 * alloc // 1000, 0, req, 0, 0, NULL, NULL, NULL,
                   usage, 0, 0, cycle_id, t, c, t + $period, c + 1
            FROM leaf_rows
            UNION ALL
            SELECT parent, NULL, 100, 20000 * $leaves, NULL, NULL, sum(least(req, 24000)),
                   NULL, NULL, sum(least(req, 22000)), NULL, NULL, sum(alloc), sum(4000 * alloc // 1000), 0,
                   sum(req), 0, 0, NULL, NULL, NULL, sum(usage), 0, 0,
                   cycle_id, any_value(t), any_value(c), any_value(t) + $period, any_value(c) + 1
            FROM leaf_rows GROUP BY cycle_id, parent
            """,
            {"leaves": leaves, "period": PERIOD_MS},
        )
        # One span per queue per cycle (the division changing every cycle: the store's worst case); the
        # top queues' totals per cycle, as the sink records them.
        con.execute(
            """
            UPDATE recent_cycles SET top_gpu_fair_share = s.fair, top_gpu_allocated = s.alloc,
                   top_gpu_requested = s.req
            FROM (SELECT start_cycle, sum(gpu_fair_share) AS fair, sum(gpu_allocated) AS alloc,
                         sum(gpu_requested) AS req
                  FROM recent_queue_spans WHERE parent IS NULL GROUP BY start_cycle) s
            WHERE recent_cycles.cycle_id = s.start_cycle
            """
        )
        con.execute(
            """
            INSERT INTO recent_decisions
            SELECT 'c' || (bound // $period), (bound // $period) * $period, 0, 'Bind', queue || '/' || name, queue,
                   uid, [], node, [], 1000, 'allocate', NULL, NULL, NULL, bound // $period FROM p
            UNION ALL
            SELECT 'c' || ((finished - 30000) // $period), ((finished - 30000) // $period) * $period, 1, 'Evict',
                   queue || '/' || name, queue, uid, [], node, [], 0, 'preempt', 'preempt',
                   'Pod ' || name || ' was preempted by higher priority workload pod-' || (i + 1), NULL,
                   (finished - 30000) // $period
            FROM p WHERE i % 50 = 7
            """,
            {"period": PERIOD_MS},
        )
        # Each pod pending from its creation to its bind: one interval.
        con.execute(
            """
            INSERT INTO recent_pending
            SELECT queue || '/' || name, queue, [uid], 'PodSchedulingErrors', 'no nodes with enough resources',
                   NULL, 'c' || (created // $period), created, created // $period, bound, bound // $period
            FROM p
            """,
            {"period": PERIOD_MS},
        )
        return {t: store.count(t) for t in ("events", "cycles", "queue_spans", "decisions", "pending_intervals")}


def _median(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median wall and CPU seconds (CPU time shows the cost when other processes share the machine)."""
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    """Build the store, time the report."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=50_000)
    ap.add_argument("--parents", type=int, default=4)
    ap.add_argument("--leaves", type=int, default=4, help="leaf queues per parent")
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--pods", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.duckdb"
        t0 = time.perf_counter()
        counts = build_store(db, args.cycles, args.parents, args.leaves, args.nodes, args.pods)
        print(
            "bench: report_store "
            + " ".join(f"{k}={v}" for k, v in counts.items())
            + f" seconds={time.perf_counter() - t0:.3f}"
        )

        def terminal(queue: str | None = None) -> None:
            render(build_report(db, queue=queue), "table", io.StringIO())

        def html() -> None:
            from analytics.reports.report_html import write_html

            con, path = connect(db)  # as `hourglass report --html` does: one connection for both
            try:
                write_html(report_from(con, str(path), None, None, None), Path(tmp) / "report.html", con)
            finally:
                con.close()

        rows = counts["queue_spans"]
        for label, fn in (
            ("report_terminal", lambda: terminal()),
            ("report_queue", lambda: terminal("team-5")),
            ("report_html", html),
        ):
            s, c = _median(fn, args.repeat)
            print(
                f"bench: {label} queue_spans={rows} repeat={args.repeat} target_seconds=5"
                f" cpu_seconds={c:.2f} seconds={s:.3f}"
            )


if __name__ == "__main__":
    main()
