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
* ``pending_intervals``: each ``Unschedulable`` decision with the span its job stayed pending for it;
* ``gpu_request_mode``, ``node_gpu_changes``, ``fragmentation_changes``: idle GPUs stranded on nodes where
  the workload's most common GPU request does not fit (fragmented GPUs), from the event log.
"""

from __future__ import annotations

import hashlib
from typing import Final

import duckdb

__all__ = ["VIEWS", "VIEWS_VERSION", "VIEW_NAMES", "create_views", "views_current", "views_missing"]

# Each entry: (name, SELECT). Order matters: later views read earlier ones.
VIEWS: Final[tuple[tuple[str, str], ...]] = (
    (
        "run_span",
        """
SELECT least(coalesce((SELECT min(at_ms) FROM events), (SELECT min(logical_time_ms) FROM cycles)),
             coalesce((SELECT min(logical_time_ms) FROM cycles), (SELECT min(at_ms) FROM events))) AS first_ms,
       greatest(coalesce((SELECT max(at_ms) FROM events), (SELECT max(logical_time_ms) FROM cycles)),
                coalesce((SELECT max(logical_time_ms) FROM cycles), (SELECT max(at_ms) FROM events))) AS last_ms
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
  SELECT cycle_id, events_offset, logical_time_ms AS start_ms,
         coalesce(lead(logical_time_ms) OVER (ORDER BY logical_time_ms, events_offset, cycle_id),
                  greatest((SELECT last_ms FROM run_span), logical_time_ms)) AS end_ms
  FROM cycles
)
SELECT c.cycle_id, c.events_offset, c.start_ms, c.end_ms, c.end_ms - c.start_ms AS held_ms,
       coalesce(k.gpu_milli, 0) AS capacity_gpu_milli,
       coalesce(k.cpu_millicores, 0) AS capacity_cpu_millicores,
       coalesce(k.memory_bytes, 0) AS capacity_memory_bytes
FROM c ASOF LEFT JOIN capacity_changes k ON k."offset" < c.events_offset
""",
    ),
    (
        # fair_share_scale: the engine's fair share of a queue is bounded by its deserved quota and its
        # request, not by the cluster; when the top queues' fair shares add up to more than the capacity
        # (quotas written for a bigger cluster), every queue's share is scaled down by the same factor so
        # that "received / fair share" is measured against something the cluster could have given. A store
        # without node events (capacity unknown) is left as recorded.
        "queue_intervals",
        """
WITH top AS (
  SELECT cycle_id, sum(gpu_fair_share) AS top_fair_gpu
  FROM queue_cycles WHERE parent IS NULL GROUP BY cycle_id
)
SELECT q.*, s.start_ms, s.end_ms, s.held_ms, s.capacity_gpu_milli,
       CASE WHEN s.capacity_gpu_milli > 0 AND coalesce(t.top_fair_gpu, 0) > s.capacity_gpu_milli
            THEN s.capacity_gpu_milli / t.top_fair_gpu ELSE 1.0 END AS fair_share_scale,
       q.gpu_fair_share * (CASE WHEN s.capacity_gpu_milli > 0 AND coalesce(t.top_fair_gpu, 0) > s.capacity_gpu_milli
            THEN s.capacity_gpu_milli / t.top_fair_gpu ELSE 1.0 END) AS gpu_fair_share_capped,
       q.gpu_fair_share_classic * (CASE WHEN s.capacity_gpu_milli > 0 AND coalesce(t.top_fair_gpu, 0) > s.capacity_gpu_milli
            THEN s.capacity_gpu_milli / t.top_fair_gpu ELSE 1.0 END) AS gpu_fair_share_classic_capped
FROM queue_cycles q JOIN cycle_spans s USING (cycle_id) LEFT JOIN top t USING (cycle_id)
""",
    ),
    (
        "cluster_intervals",
        """
SELECT s.cycle_id, s.start_ms, s.end_ms, s.held_ms, s.capacity_gpu_milli,
       coalesce(a.allocated, 0) AS gpu_allocated, coalesce(a.requested, 0) AS gpu_requested,
       s.capacity_gpu_milli - coalesce(a.allocated, 0) AS gpu_idle,
       coalesce(a.top_fair, 0) AS gpu_fair_share_total
FROM cycle_spans s LEFT JOIN (
  SELECT cycle_id, sum(gpu_allocated) AS allocated, sum(gpu_requested) AS requested,
         sum(gpu_fair_share) AS top_fair
  FROM queue_cycles WHERE parent IS NULL GROUP BY cycle_id
) a USING (cycle_id)
""",
    ),
    (
        # A pod holds what it was bound with from PodBound until the first PodFinished / PodDeleted after
        # it (an evicted pod holds its devices through the grace period); end_ms NULL = still running.
        # Its queue is the one its latest PodSubmitted named, else its pod group's.
        "pod_runs",
        """
WITH sub AS (
  SELECT "offset", uid, json_extract_string(raw, '$.namespace') || '/' || (json_extract_string(raw, '$.pod_group')) AS job, json_extract_string(raw, '$.queue') AS queue,
         CAST(json_extract_string(raw, '$.requests.gpus') AS BIGINT) AS gpus,
         CAST(json_extract_string(raw, '$.requests.gpu_fraction_milli') AS BIGINT) AS frac,
         CAST(json_extract_string(raw, '$.requests.gpu_fraction_devices') AS BIGINT) AS frac_devices,
         CAST(json_extract_string(raw, '$.requests.cpu_millicores') AS BIGINT) AS cpu,
         CAST(json_extract_string(raw, '$.requests.memory_bytes') AS BIGINT) AS mem
  FROM events WHERE type = 'PodSubmitted'
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
        # A job reported Unschedulable by a cycle stays pending for that reason until the next cycle.
        "pending_intervals",
        """
SELECT d.cycle_id, s.start_ms, s.end_ms, s.held_ms, d.job, d.queue, d.reason, d.message,
       len(d.pods) AS pending_pods
FROM decisions d JOIN cycle_spans s USING (cycle_id)
WHERE d.kind = 'Unschedulable'
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
