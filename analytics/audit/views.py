"""SQL views of the audit store that ``hourglass report`` reads (documented in ``docs/report.md``).

Every number of the report is an aggregate over one of these views, clipped to the query window, so it can
be re-derived with ``hourglass sql``. The views hold intervals (``start_ms``, ``end_ms``) rather than
pre-aggregated totals, because a window cuts intervals: the report takes
``greatest(0, least(end_ms, TO) - greatest(start_ms, FROM))`` of each.

* ``run_span``: the store's time span (first and last event / cycle time);
* ``capacity_changes``: the cluster's total GPU / CPU / memory after each node event;
* ``cycle_spans``: each recorded cycle from its time to the next recorded cycle (or the end of the run),
  with the cluster capacity it saw;
* ``queue_intervals``: ``queue_cycles`` with the cycle's span and the fair share capped at capacity;
* ``cluster_intervals``: allocated / requested / idle GPUs of the whole cluster per cycle span;
* ``pod_runs``: one row per run of a pod, ``PodBound`` to its ``PodFinished`` / ``PodDeleted``, with the
  pod's queue (from ``PodSubmitted``) and what it held;
* ``job_waits``: each job (pod group), its submission and first bind;
* ``evictions``: each ``Evict`` decision with its kind and the queue that caused it;
* ``gang_placements``: per cycle and job with a topology constraint that got pods bound or pipelined, the
  domain its placed pods shared (per level and the narrowest), and whether that met its preferred level;
* ``pending_intervals``: each job's pending spans: reason and message from the cycle that decided them to
  the cycle that changed or cleared them;
* ``queue_days_live`` / ``queue_days``: per queue and day, GPU-ms held, allocated, fair share, job-ms
  pending, binds and evictions (archived days come from the ``daily_queue`` table);
* ``gpu_request_mode``, ``node_gpu_changes``, ``fragmentation_changes``: idle GPUs stranded on nodes where
  the workload's most common GPU request does not fit (fragmented GPUs), from the event log.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Final

import duckdb

from analytics.fairness import capacity_scale_sql

__all__ = [
    "LIVE_SOURCES",
    "TABLE_VIEWS",
    "VIEWS",
    "VIEWS_VERSION",
    "VIEW_NAMES",
    "create_table_views",
    "create_views",
    "history_dir",
    "history_glob",
    "views_current",
    "views_missing",
]

# The store's public tables: (view, the DuckDB table of recent rows, the Parquet history folder, the
# open-interval table and its state-only column). analytics/audit/store.py writes the tables, analytics/audit/archive.py
# moves whole days to Parquet.
TABLE_VIEWS: Final[tuple[tuple[str, str, str, str | None, str | None], ...]] = (
    ("events", "recent_events", "events", None, None),
    ("cycles", "recent_cycles", "cycles", None, None),
    ("decisions", "recent_decisions", "decisions", None, None),
    ("usage_snapshots", "recent_usage_snapshots", "usage_snapshots", None, None),
    ("usage", "recent_usage", "usage", None, None),
    ("pending_spans", "recent_pending", "pending", "pending_open", "decision"),
    ("queue_spans", "recent_queue_spans", "queue_spans", "queue_open", "raw"),
)


def history_dir(db_path: str | Path) -> Path:
    """The Parquet history folder of the store at *db_path* (``audit.duckdb`` → ``audit.history``), absolute:
    a view names it whatever the working directory was when the store was written."""
    p = Path(db_path).resolve()
    return p.with_name(p.stem + ".history")


def history_glob(history: Path, folder: str) -> str | None:
    """The read_parquet glob of one history folder, or None while it holds no file."""
    d = history / folder
    if not d.is_dir() or not any(d.glob("day=*/*.parquet")):
        return None
    return str(d / "day=*" / "*.parquet")


def create_table_views(con: duckdb.DuckDBPyConnection, history: Path | None, *, temporary: bool = False) -> None:
    """The public tables as views: recent rows, the Parquet history (if any) and open intervals."""
    kind = "TEMP VIEW" if temporary else "VIEW"
    for view, table, folder, open_table, state_col in TABLE_VIEWS:
        parts = [f"SELECT * FROM {table}"]
        glob = history_glob(history, folder) if history is not None else None
        if glob is not None:
            quoted = glob.replace("'", "''")
            parts.append(
                f"SELECT * EXCLUDE (day) FROM read_parquet('{quoted}', hive_partitioning = true, union_by_name = true)"
            )
        if open_table is not None:
            parts.append(f"SELECT * EXCLUDE ({state_col}) FROM {open_table}")
        con.execute(f"CREATE OR REPLACE {kind} {view} AS " + " UNION ALL BY NAME ".join(parts))


# Each entry: (name, SELECT). Order matters: later views read earlier ones.
_BASE_VIEWS: Final[tuple[tuple[str, str], ...]] = (
    (
        "run_span",
        """
SELECT min(lo) AS first_ms, max(hi) AS last_ms FROM (
  SELECT first_ms AS lo, last_ms AS hi FROM archived_span
  UNION ALL SELECT min(at_ms), max(at_ms) FROM recent_events
  UNION ALL SELECT min(logical_time_ms), max(logical_time_ms) FROM recent_cycles
)
""",
    ),
    (
        # A node's resources count from its NodeUpserted until it is removed; an upsert replaces the
        # node's previous values, so each event adds (new - previous) to the cluster totals.
        "capacity_changes",
        """
WITH node_ev AS (
  SELECT "offset", at_ms, json_extract_string(raw, '$.name') AS node,
         CASE WHEN type = 'NodeUpserted' THEN CAST(json_extract_string(raw, '$.gpus') AS BIGINT) * 1000 ELSE 0 END AS gpu,
         CASE WHEN type = 'NodeUpserted' THEN CAST(json_extract_string(raw, '$.cpu_millicores') AS BIGINT) ELSE 0 END AS cpu,
         CASE WHEN type = 'NodeUpserted' THEN CAST(json_extract_string(raw, '$.memory_bytes') AS BIGINT) ELSE 0 END AS mem
  FROM events WHERE type IN ('NodeUpserted', 'NodeRemoved')
), deltas AS (
  SELECT "offset", at_ms,
         gpu - coalesce(lag(gpu) OVER w, 0) AS d_gpu,
         cpu - coalesce(lag(cpu) OVER w, 0) AS d_cpu,
         mem - coalesce(lag(mem) OVER w, 0) AS d_mem
  FROM node_ev WINDOW w AS (PARTITION BY node ORDER BY "offset")
)
SELECT "offset", at_ms,
       CAST(sum(d_gpu) OVER o AS BIGINT) AS gpu_milli,
       CAST(sum(d_cpu) OVER o AS BIGINT) AS cpu_millicores,
       CAST(sum(d_mem) OVER o AS BIGINT) AS memory_bytes
FROM deltas WINDOW o AS (ORDER BY "offset" ROWS UNBOUNDED PRECEDING)
""",
    ),
    (
        # A cycle's division holds until the next recorded cycle (cycles are only skipped when nothing
        # changed); the last one holds until the end of the run.
        "cycle_spans",
        """
WITH c AS (
  SELECT cycle_id, seq, events_offset, logical_time_ms AS start_ms,
         coalesce(lead(logical_time_ms) OVER (ORDER BY seq),
                  greatest((SELECT last_ms FROM run_span), logical_time_ms)) AS end_ms,
         top_gpu_fair_share, top_gpu_allocated, top_gpu_requested
  FROM cycles
)
SELECT c.cycle_id, c.seq, c.events_offset, c.start_ms, c.end_ms, c.end_ms - c.start_ms AS held_ms,
       c.top_gpu_fair_share, c.top_gpu_allocated, c.top_gpu_requested,
       coalesce(k.gpu_milli, 0) AS capacity_gpu_milli,
       coalesce(k.cpu_millicores, 0) AS capacity_cpu_millicores,
       coalesce(k.memory_bytes, 0) AS capacity_memory_bytes
FROM c ASOF LEFT JOIN capacity_changes k ON k."offset" < c.events_offset
""",
    ),
    (
        # fair_share_scale: analytics.fairness.capacity_scale, the one definition of the fair share capped
        # at the cluster (simulate and whatif apply the same function). The scale is per cycle; runs of
        # cycles with the same scale are merged (scale_segments), and each queue span is cut where the
        # scale changes, so rows grow with changes of the division, not with cycles.
        "scale_segments",
        f"""
WITH c AS (
  SELECT seq, start_ms, end_ms,
         {capacity_scale_sql("top_gpu_fair_share", "capacity_gpu_milli")} AS scale
  FROM cycle_spans
), marked AS (
  SELECT *, CASE WHEN scale IS DISTINCT FROM lag(scale) OVER (ORDER BY seq) THEN 1 ELSE 0 END AS new_run FROM c
), runs AS (
  SELECT *, sum(new_run) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS run FROM marked
)
SELECT run, min(seq) AS start_seq, max(seq) + 1 AS end_seq, min(start_ms) AS start_ms, max(end_ms) AS end_ms,
       any_value(scale) AS scale
FROM runs GROUP BY run
""",
    ),
    (
        # Each queue's division from the cycle it took effect (start) to the cycle it changed (end; an
        # open span: the end of the run), cut where the scale changes; held_ms its length. Joined by time
        # (spans are also cut at midnight, between two cycles); a zero-length span holds nothing.
        "queue_intervals",
        """
WITH q AS (
  SELECT * EXCLUDE (end_ms, end_seq),
         coalesce(end_ms, greatest((SELECT last_ms FROM run_span), start_ms)) AS end_ms,
         coalesce(end_seq, 9223372036854775807) AS end_seq
  FROM queue_spans
)
SELECT q.* EXCLUDE (start_ms, end_ms, start_seq, end_seq),
       greatest(q.start_seq, g.start_seq) AS start_seq, least(q.end_seq, g.end_seq) AS end_seq,
       greatest(q.start_ms, g.start_ms) AS start_ms, least(q.end_ms, g.end_ms) AS end_ms,
       least(q.end_ms, g.end_ms) - greatest(q.start_ms, g.start_ms) AS held_ms,
       g.scale AS fair_share_scale,
       q.gpu_fair_share * g.scale AS gpu_fair_share_capped,
       q.gpu_fair_share_classic * g.scale AS gpu_fair_share_classic_capped
FROM q JOIN scale_segments g ON g.start_ms < q.end_ms AND g.end_ms > q.start_ms
""",
    ),
    (
        # Every cycle with the division in effect for each queue (the per-cycle view older stores held as a
        # table): a join of cycles and queue spans; filter it by cycle_id.
        "queue_cycles",
        """
SELECT c.cycle_id, c.logical_time_ms, q.* EXCLUDE (start_cycle, start_ms, start_seq, end_ms, end_seq)
FROM cycles c JOIN queue_spans q
  ON q.start_seq <= c.seq AND (q.end_seq IS NULL OR c.seq < q.end_seq)
""",
    ),
    (
        "cluster_intervals",
        """
SELECT s.cycle_id, s.start_ms, s.end_ms, s.held_ms, s.capacity_gpu_milli,
       coalesce(s.top_gpu_allocated, 0) AS gpu_allocated, coalesce(s.top_gpu_requested, 0) AS gpu_requested,
       s.capacity_gpu_milli - coalesce(s.top_gpu_allocated, 0) AS gpu_idle,
       coalesce(s.top_gpu_fair_share, 0) AS gpu_fair_share_total
FROM cycle_spans s
""",
    ),
    (
        # A pod holds what it was bound with from PodBound until the first PodFinished / PodDeleted after
        # it (an evicted pod holds its devices through the grace period); end_ms NULL = still running.
        # Its queue is the one its latest PodSubmitted named, else its pod group's.
        "pod_runs",
        """
WITH sub AS (
  -- One JSON parse per event for all eight fields (the list form of json_extract_string).
  SELECT "offset", uid, j[1] || '/' || j[2] AS job, j[3] AS queue, CAST(j[4] AS BIGINT) AS gpus,
         CAST(j[5] AS BIGINT) AS frac, CAST(j[6] AS BIGINT) AS frac_devices, CAST(j[7] AS BIGINT) AS cpu,
         CAST(j[8] AS BIGINT) AS mem
  FROM (
    SELECT "offset", uid, json_extract_string(raw, ['$.namespace', '$.pod_group', '$.queue', '$.requests.gpus',
             '$.requests.gpu_fraction_milli', '$.requests.gpu_fraction_devices', '$.requests.cpu_millicores',
             '$.requests.memory_bytes']) AS j
    FROM events WHERE type = 'PodSubmitted'
  )
), pg AS (
  SELECT uid, arg_max(json_extract_string(raw, '$.queue'), "offset") AS queue FROM events WHERE type = 'PodGroupUpserted' GROUP BY uid
), bound AS (
  SELECT "offset", uid, at_ms, json_extract_string(raw, '$.node') AS node,
         CAST(json_extract(raw, '$.gpu_devices') AS INTEGER[]) AS gpu_devices
  FROM events WHERE type = 'PodBound'
), ends AS (
  SELECT "offset", uid, at_ms, type, json_extract_string(raw, '$.phase') AS phase FROM events WHERE type IN ('PodFinished', 'PodDeleted')
), rel AS (
  SELECT "offset", uid, at_ms FROM events WHERE type = 'PodReleasing'
), runs AS (
  SELECT b.uid, s.job, coalesce(s.queue, pg.queue) AS queue, b.node, b.gpu_devices,
         CASE WHEN len(b.gpu_devices) > 0 THEN coalesce(s.frac, 1000)
              WHEN s.frac IS NOT NULL THEN s.frac ELSE 1000 END AS gpu_milli_per_device,
         CASE WHEN len(b.gpu_devices) > 0 THEN len(b.gpu_devices) * coalesce(s.frac, 1000)
              WHEN s.frac IS NOT NULL THEN s.frac * coalesce(s.frac_devices, 1)
              ELSE coalesce(s.gpus, 0) * 1000 END AS gpu_milli,
         coalesce(s.cpu, 0) AS cpu_millicores, coalesce(s.mem, 0) AS memory_bytes,
         b."offset" AS bound_offset, b.at_ms AS start_ms, e.at_ms AS end_ms, e."offset" AS end_offset,
         CASE WHEN e.type IS NULL THEN 'Running' WHEN e.type = 'PodFinished' THEN e.phase ELSE 'Deleted' END
           AS outcome
  FROM bound b
  ASOF LEFT JOIN sub s ON s.uid = b.uid AND s."offset" < b."offset"
  ASOF LEFT JOIN ends e ON e.uid = b.uid AND e."offset" > b."offset"
  LEFT JOIN pg ON pg.uid = s.job
)
SELECT r.*, coalesce(r2."offset" < coalesce(r.end_offset, 9223372036854775807), false) AS evicted
FROM runs r ASOF LEFT JOIN rel r2 ON r2.uid = r.uid AND r2."offset" > r.bound_offset
""",
    ),
    (
        # A job waits from its creation (the earliest created_at_ms of its pods, else its first
        # submission) to its first bind; first_bind_ms NULL = never bound (still waiting at the end).
        "job_waits",
        """
WITH sub AS (
  SELECT json_extract_string(raw, '$.namespace') || '/' || (json_extract_string(raw, '$.pod_group')) AS job,
         arg_min(json_extract_string(raw, '$.queue'), "offset") AS queue,
         min(coalesce(CAST(json_extract_string(raw, '$.created_at_ms') AS BIGINT), at_ms)) AS submitted_ms
  FROM events WHERE type = 'PodSubmitted' GROUP BY ALL
), pg AS (
  SELECT uid, arg_max(json_extract_string(raw, '$.queue'), "offset") AS queue FROM events WHERE type = 'PodGroupUpserted' GROUP BY uid
), first_bind AS (
  SELECT job, min(start_ms) AS first_bind_ms FROM pod_runs GROUP BY job
)
SELECT s.job, coalesce(s.queue, pg.queue) AS queue, s.submitted_ms, f.first_bind_ms,
       f.first_bind_ms - s.submitted_ms AS wait_ms
FROM sub s LEFT JOIN first_bind f USING (job) LEFT JOIN pg ON pg.uid = s.job
""",
    ),
    (
        # The engine writes where a topology-constrained job landed on each of its Bind / Pipeline decisions
        # (details.topology, scheduler/engine/topology.py ``landing``): one row per cycle and job.
        "gang_placements",
        """
SELECT job, queue, cycle_id, logical_time_ms, min(record_seq) AS record_seq,
       count(*) FILTER (WHERE kind = 'Bind') AS pods_bound,
       count(*) FILTER (WHERE kind = 'Pipeline') AS pods_pipelined,
       json_extract_string(details, '$.topology.topology') AS topology,
       json_extract_string(details, '$.topology.required_level') AS required_level,
       json_extract_string(details, '$.topology.preferred_level') AS preferred_level,
       json_extract_string(details, '$.topology.domain') AS domain,
       CAST(json_extract_string(details, '$.topology.within_preferred') AS BOOLEAN) AS within_preferred,
       CAST(json_extract(details, '$.topology.domains') AS VARCHAR) AS domains
FROM decisions
WHERE kind IN ('Bind', 'Pipeline') AND details IS NOT NULL AND json_extract(details, '$.topology') IS NOT NULL
GROUP BY job, queue, cycle_id, logical_time_ms, details
""",
    ),
    (
        # kind: the evicting action. The evictor of a reclaim / preempt is the workload its message names
        # (placed in the same cycle); a consolidation's is the job the moves made room for: a pod the same
        # cycle placed (and did not move itself), preferably on the moved pod's node, else the first one.
        "evictions",
        """
WITH e AS (
  SELECT cycle_id, logical_time_ms, seq, pod, job, queue, node, message,
         CASE WHEN action IN ('reclaim', 'preempt', 'consolidation') THEN action
              ELSE coalesce(action, 'other') END AS kind,
         nullif(rtrim(regexp_extract(message, 'workload (\\S+)$', 1), '.'), '') AS evictor
  FROM decisions WHERE kind = 'Evict'
), placed AS (
  SELECT d.cycle_id, d.seq, d.job, d.queue, d.node, split_part(d.job, '/', -1) AS job_name
  FROM decisions d
  WHERE d.kind IN ('Bind', 'Pipeline')
    AND NOT EXISTS (SELECT 1 FROM decisions m WHERE m.cycle_id = d.cycle_id AND m.kind = 'Evict' AND m.pod = d.pod)
), by_name AS (
  SELECT cycle_id, job_name, min(queue) AS queue, min(job) AS job FROM placed GROUP BY ALL
), consolidated AS (
  SELECT e.cycle_id, e.pod,
         arg_min(p.queue, CASE WHEN p.node = e.node THEN p.seq ELSE 1000000000 + p.seq END) AS queue,
         arg_min(p.job, CASE WHEN p.node = e.node THEN p.seq ELSE 1000000000 + p.seq END) AS job
  FROM e JOIN placed p ON p.cycle_id = e.cycle_id
  WHERE e.kind = 'consolidation'
  GROUP BY e.cycle_id, e.pod
)
SELECT e.cycle_id, e.logical_time_ms, e.pod, e.job, e.queue, e.node, e.kind,
       CASE WHEN e.kind = 'consolidation' THEN c.job ELSE coalesce(b.job, e.evictor) END AS evictor_job,
       CASE WHEN e.kind = 'consolidation' THEN c.queue ELSE b.queue END AS evictor_queue,
       e.message
FROM e
LEFT JOIN by_name b ON b.cycle_id = e.cycle_id AND b.job_name = e.evictor
LEFT JOIN consolidated c ON c.cycle_id = e.cycle_id AND c.pod = e.pod
""",
    ),
    (
        # A job stays pending for one reason (and message) from the cycle that decided it until the cycle
        # that changed or cleared it (open: the end of the run); cut at UTC midnight (analytics/audit/history.py).
        "pending_intervals",
        """
SELECT start_cycle AS cycle_id, start_ms,
       coalesce(end_ms, greatest((SELECT last_ms FROM run_span), start_ms)) AS end_ms,
       coalesce(end_ms, greatest((SELECT last_ms FROM run_span), start_ms)) - start_ms AS held_ms,
       job, queue, reason, message, len(pods) AS pending_pods, pods, details, start_seq, end_seq
FROM pending_spans
""",
    ),
)

# The live chain: the days not yet archived, without reading the Parquet history. Its sources are the
# recent_* tables, the open intervals, events_carry (the archived events those days still need: pods
# alive at the last archived midnight, pod groups, nodes) and cycles_carry (the last archived cycle, whose
# division holds into the first live day); analytics/audit/archive.py keeps both. The views over
# them are the definitions above with every source renamed, so there is one definition of each figure.
LIVE_SOURCES: Final[tuple[tuple[str, str], ...]] = (
    ("live_events", 'SELECT * FROM events_carry UNION ALL BY NAME SELECT * FROM recent_events'),
    ("live_cycles", "SELECT * FROM cycles_carry UNION ALL BY NAME SELECT * FROM recent_cycles"),
    ("live_decisions", "SELECT * FROM recent_decisions"),
    ("live_pending_spans", "SELECT * FROM recent_pending UNION ALL BY NAME SELECT * EXCLUDE (decision) FROM pending_open"),
    ("live_queue_spans", "SELECT * FROM recent_queue_spans UNION ALL BY NAME SELECT * EXCLUDE (raw) FROM queue_open"),
)
_LIVE_OF: Final = (
    "run_span", "capacity_changes", "cycle_spans", "scale_segments", "queue_intervals", "pod_runs",
    "pending_intervals",
)  # fmt: skip
_RENAMED: Final = {n: f"live_{n}" for n in (*_LIVE_OF, "events", "cycles", "decisions", "pending_spans", "queue_spans")}
_NAME_RE: Final = re.compile(r"\b(" + "|".join(sorted(_RENAMED, key=len, reverse=True)) + r")\b")


def _live(select: str) -> str:
    """*select* reading the live sources and live views instead of the whole history."""
    return _NAME_RE.sub(lambda m: _RENAMED[m.group(1)], select)


_LIVE_VIEWS: Final = LIVE_SOURCES + tuple((f"live_{n}", _live(q)) for n, q in _BASE_VIEWS if n in _LIVE_OF)

_DAY_VIEWS: Final[tuple[tuple[str, str], ...]] = (
    (
        # Per queue and UTC day (logical time) not yet in daily_queue: GPU-ms held (pod_runs: the one
        # definition of held GPUs), allocated and capped fair-share GPU-ms (queue_intervals), job-ms pending
        # (pending_intervals), binds and evictions. analytics/audit/archive.py stores these rows in daily_queue
        # when it moves a day to Parquet; queue_days reads both. It reads the live_* views (the same
        # definitions over the days not yet archived, see LIVE_SOURCES), so it costs one day, not months.
        "queue_days_live",
        """
WITH span AS (
  SELECT coalesce((SELECT max(day) + 1 - DATE '1970-01-01' FROM daily_queue), CAST(first_ms // 86400000 AS BIGINT)) AS d0,
         CAST(last_ms // 86400000 AS BIGINT) AS d1, last_ms
  FROM live_run_span
), bk AS (
  SELECT d, d * 86400000 AS lo, (d + 1) * 86400000 AS hi FROM span, range(span.d0, span.d1 + 1) t(d)
), held AS (
  SELECT bk.d, r.queue,
         sum(r.gpu_milli * greatest(0, least(coalesce(r.end_ms, (SELECT last_ms FROM span)), bk.hi) - greatest(r.start_ms, bk.lo))) AS v
  FROM live_pod_runs r JOIN bk ON r.start_ms < bk.hi AND coalesce(r.end_ms, (SELECT last_ms FROM span)) > bk.lo
  GROUP BY ALL
), div AS (
  SELECT bk.d, q.queue,
         sum(q.gpu_allocated * (least(q.end_ms, bk.hi) - greatest(q.start_ms, bk.lo))) AS alloc,
         sum(q.gpu_fair_share_capped * (least(q.end_ms, bk.hi) - greatest(q.start_ms, bk.lo))) AS fair
  FROM live_queue_intervals q JOIN bk ON q.start_ms < bk.hi AND q.end_ms > bk.lo
  GROUP BY ALL
), pend AS (
  SELECT bk.d, p.queue, sum(least(p.end_ms, bk.hi) - greatest(p.start_ms, bk.lo)) AS v
  FROM live_pending_intervals p JOIN bk ON p.start_ms < bk.hi AND p.end_ms > bk.lo
  GROUP BY ALL
), dec AS (
  SELECT logical_time_ms // 86400000 AS d, queue,
         count(*) FILTER (WHERE kind = 'Bind') AS binds, count(*) FILTER (WHERE kind = 'Evict') AS evictions
  FROM live_decisions WHERE kind IN ('Bind', 'Evict') AND logical_time_ms >= (SELECT d0 FROM span) * 86400000
  GROUP BY ALL
), keys AS (
  SELECT d, queue FROM held UNION SELECT d, queue FROM div UNION SELECT d, queue FROM pend
  UNION SELECT d, queue FROM dec
)
SELECT CAST(DATE '1970-01-01' + CAST(k.d AS INTEGER) AS DATE) AS day, k.queue,
       CAST(coalesce(h.v, 0) AS HUGEINT) AS gpu_held_ms, CAST(coalesce(v.alloc, 0) AS HUGEINT) AS gpu_allocated_ms,
       coalesce(v.fair, 0) AS gpu_fair_share_ms, CAST(coalesce(p.v, 0) AS HUGEINT) AS pending_job_ms,
       coalesce(c.binds, 0) AS binds, coalesce(c.evictions, 0) AS evictions
FROM keys k
LEFT JOIN held h USING (d, queue) LEFT JOIN div v USING (d, queue) LEFT JOIN pend p USING (d, queue)
LEFT JOIN dec c USING (d, queue)
WHERE k.queue IS NOT NULL
""",
    ),
    (
        # Every day's per-queue figures: archived days from daily_queue (kept forever, whatever the
        # retention), the others computed live. gpu_held_ms / 3.6e9 = GPU-hours.
        "queue_days",
        """
SELECT * FROM daily_queue UNION ALL BY NAME SELECT * FROM queue_days_live
""",
    ),
    (
        # The workload's most common GPU request by pod count (ties: the smaller), the probe of
        # fragmentation: (1, 1000) = one whole GPU.
        "gpu_request_mode",
        """
WITH r AS (
  SELECT CASE WHEN json_extract_string(raw, '$.requests.gpu_fraction_milli') IS NOT NULL
              THEN CAST(json_extract_string(raw, '$.requests.gpu_fraction_devices') AS BIGINT)
              ELSE CAST(json_extract_string(raw, '$.requests.gpus') AS BIGINT) END AS num_gpu,
         coalesce(CAST(json_extract_string(raw, '$.requests.gpu_fraction_milli') AS BIGINT), 1000) AS gpu_milli
  FROM (SELECT arg_min(raw, "offset") AS raw FROM events WHERE type = 'PodSubmitted' GROUP BY uid)
)
SELECT num_gpu, gpu_milli, count(*) AS pods FROM r WHERE num_gpu > 0
GROUP BY ALL ORDER BY pods DESC, num_gpu, gpu_milli LIMIT 1
""",
    ),
    (
        # Per node, after each change of a device's use: the node's idle milli-GPU and how many of its
        # devices have room for the probe request (gpu_request_mode: a whole GPU needs a fully idle device),
        # as running sums of per-device changes.
        "node_gpu_changes",
        """
WITH probe AS (SELECT num_gpu, gpu_milli FROM gpu_request_mode),
nodes AS (
  SELECT json_extract_string(raw, '$.name') AS node, arg_max(CAST(json_extract_string(raw, '$.gpus') AS BIGINT), "offset") AS gpus
  FROM events WHERE type = 'NodeUpserted' GROUP BY ALL
), dev AS (
  SELECT node, unnest(gpu_devices) AS device, gpu_milli_per_device AS milli, start_ms, end_ms, bound_offset
  FROM pod_runs WHERE len(gpu_devices) > 0
), steps AS (
  SELECT node, device, start_ms AS t, milli AS d, bound_offset AS o FROM dev
  UNION ALL
  SELECT node, device, end_ms AS t, -milli AS d, bound_offset AS o FROM dev WHERE end_ms IS NOT NULL
), dev_use AS (
  SELECT node, device, t, d,
         sum(d) OVER (PARTITION BY node, device ORDER BY t, d, o ROWS UNBOUNDED PRECEDING) AS used
  FROM steps
), dev_delta AS (
  SELECT u.node, u.t, -u.d AS d_idle,
         (CASE WHEN 1000 - u.used >= p.gpu_milli THEN 1 ELSE 0 END)
           - (CASE WHEN 1000 - (u.used - u.d) >= p.gpu_milli THEN 1 ELSE 0 END) AS d_fit
  FROM dev_use u, probe p
), node_t AS (
  SELECT node, t, sum(d_idle) AS d_idle, sum(d_fit) AS d_fit FROM dev_delta GROUP BY ALL
)
SELECT n.node, n.t AS at_ms,
       k.gpus * 1000 + sum(n.d_idle) OVER w AS idle_milli,
       k.gpus + sum(n.d_fit) OVER w AS fitting_devices
FROM node_t n JOIN nodes k USING (node)
WINDOW w AS (PARTITION BY n.node ORDER BY n.t ROWS UNBOUNDED PRECEDING)
""",
    ),
    (
        # fragmented: a node's idle GPUs when the probe request does not fit on it (fewer than num_gpu
        # devices with room for it). Each row is a change of one node's fragmented milli-GPU (including a
        # node fragmented from the start); the cluster's fragmented GPUs at time t are the sum of
        # d_fragmented over the rows with at_ms <= t.
        "fragmentation_changes",
        """
WITH probe AS (SELECT num_gpu, gpu_milli FROM gpu_request_mode),
nodes AS (
  SELECT json_extract_string(raw, '$.name') AS node, arg_max(CAST(json_extract_string(raw, '$.gpus') AS BIGINT), "offset") AS gpus,
         min(at_ms) AS first_ms
  FROM events WHERE type = 'NodeUpserted' GROUP BY ALL
), states AS (
  SELECT node, first_ms AS at_ms, gpus * 1000 AS idle_milli, gpus AS fitting_devices, 0 AS o FROM nodes
  UNION ALL
  SELECT node, at_ms, idle_milli, fitting_devices, 1 AS o FROM node_gpu_changes
), frag AS (
  SELECT s.node, s.at_ms, s.o,
         CASE WHEN s.idle_milli = 0 OR s.fitting_devices >= p.num_gpu THEN 0 ELSE s.idle_milli END
           AS fragmented_milli
  FROM states s, probe p
), deltas AS (
  SELECT node, at_ms, fragmented_milli,
         fragmented_milli - coalesce(lag(fragmented_milli) OVER (PARTITION BY node ORDER BY at_ms, o), 0)
           AS d_fragmented
  FROM frag
)
SELECT node, at_ms, fragmented_milli, d_fragmented FROM deltas WHERE d_fragmented <> 0
""",
    ),
)

VIEWS: Final = _BASE_VIEWS + _LIVE_VIEWS + _DAY_VIEWS
VIEW_NAMES: Final = tuple(name for name, _ in VIEWS)
# A fingerprint of the definitions above, stored as the view ``report_views_version``: a reader can tell
# whether a store's views are the current ones without comparing SQL text.
VIEWS_VERSION: Final = hashlib.sha256(repr(VIEWS).encode()).hexdigest()[:16]


def create_views(con: duckdb.DuckDBPyConnection, *, temporary: bool = False) -> None:
    """Create (or replace) the report views on *con*; ``temporary`` for a read-only connection."""
    kind = "TEMP VIEW" if temporary else "VIEW"
    for name, select in VIEWS:
        con.execute(f"CREATE OR REPLACE {kind} {name} AS {select}")
    con.execute(f"CREATE OR REPLACE {kind} report_views_version AS SELECT '{VIEWS_VERSION}' AS version")


def views_missing(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The report views this connection does not see (an audit store created before they existed)."""
    have = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
    return [n for n in VIEW_NAMES if n not in have]


def views_current(con: duckdb.DuckDBPyConnection) -> bool:
    """True if the store's views are this version's (so a reader need not rewrite them)."""
    if views_missing(con) or "report_views_version" not in {
        r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()
    }:
        return False
    row = con.execute("SELECT version FROM report_views_version").fetchone()
    return row is not None and row[0] == VIEWS_VERSION
