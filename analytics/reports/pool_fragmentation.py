"""Fragmented GPUs over time, per node pool (``report``'s terminal table, JSON ``pool_fragmentation`` and
HTML figure).

A node belongs to the pool its ``kai.scheduler/node-pool`` label names (``""``: the default pool, nodes
without the label), as KAI's scheduling shards partition a cluster; the label is read from the node's
latest ``NodeUpserted`` in the store. Each pool's curve is the sum of its nodes' rows of the
``fragmentation_changes`` view (idle GPUs on nodes where the workload's most common request, the probe,
does not fit), averaged over each of the report's buckets: the cluster-wide figure split by pool, so the
pools' curves add up to the cluster's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scheduler.engine.state import NODE_POOL_LABEL

if TYPE_CHECKING:
    import duckdb

__all__ = ["pool_fragmentation", "sparkline"]

GPU_MILLI = 1000
_BARS = "▁▂▃▄▅▆▇█"


def bucket_bounds(lo: int, hi: int, bucket_ms: int) -> list[tuple[int, int]]:
    """The report's buckets over ``[lo, hi)``: whole `bucket_ms` from `lo`, the last one ending at `hi`; a
    last sliver (under a tenth of a bucket) joins the bucket before it, as the Jain trend's do."""
    n = max(1, -(-(hi - lo) // bucket_ms))
    if n > 1 and (hi - lo) - (n - 1) * bucket_ms < bucket_ms // 10:
        n -= 1
    return [(lo + b * bucket_ms, hi if b == n - 1 else min(lo + (b + 1) * bucket_ms, hi)) for b in range(n)]


def pool_fragmentation(
    con: duckdb.DuckDBPyConnection, lo: int, hi: int, bucket_ms: int
) -> list[dict[str, Any]]:
    """Per node pool (sorted by name; ``""`` = the default pool), over the window ``[lo, hi)``: ``pool``,
    ``nodes``, ``gpus`` (its nodes' GPUs), ``fragmented_gpus`` (time-weighted mean),
    ``fragmented_gpus_at_end`` and ``buckets`` (``from_ms``, ``to_ms``, ``fragmented_gpus``: the mean over
    the bucket). Empty when the store has no nodes."""
    if hi <= lo:
        return []
    label_path = f'$.labels."{NODE_POOL_LABEL}"'
    pools = con.execute(
        """
        SELECT node, coalesce(pool, '') AS pool, gpus FROM (
          SELECT json_extract_string(raw, '$.name') AS node,
                 arg_max(json_extract_string(raw, $1), "offset") AS pool,
                 arg_max(CAST(json_extract_string(raw, '$.gpus') AS BIGINT), "offset") AS gpus
          FROM events WHERE type = 'NodeUpserted' GROUP BY ALL)
        ORDER BY pool, node
        """,
        [label_path],
    ).fetchall()
    if not pools:
        return []
    bounds = bucket_bounds(lo, hi, bucket_ms)
    # One step function per pool: its nodes' changes summed per instant, then a running sum.
    steps = f"""
        WITH pools AS (
          SELECT json_extract_string(raw, '$.name') AS node,
                 coalesce(arg_max(json_extract_string(raw, $label), "offset"), '') AS pool
          FROM events WHERE type = 'NodeUpserted' GROUP BY ALL
        ), d AS (
          SELECT p.pool, f.at_ms, sum(f.d_fragmented) AS d
          FROM fragmentation_changes f JOIN pools p USING (node) GROUP BY ALL
        ), c AS (
          SELECT pool, at_ms AS s,
                 coalesce(lead(at_ms) OVER (PARTITION BY pool ORDER BY at_ms), greatest($hi, at_ms)) AS e,
                 sum(d) OVER (PARTITION BY pool ORDER BY at_ms ROWS UNBOUNDED PRECEDING) AS v
          FROM d
        ), bk AS (
          SELECT * FROM (VALUES {", ".join(f"({b}, {b0}, {b1})" for b, (b0, b1) in enumerate(bounds))})
            t(b, b0, b1)
        )"""
    per_bucket: dict[tuple[str, int], float] = {}
    for pool, b, v in con.execute(
        steps
        + """
        SELECT c.pool, bk.b, sum(c.v * greatest(0, least(c.e, bk.b1) - greatest(c.s, bk.b0)))
        FROM c JOIN bk ON c.s < bk.b1 AND c.e > bk.b0 GROUP BY ALL
        """,
        {"label": label_path, "hi": hi},
    ).fetchall():
        per_bucket[(pool, int(b))] = float(v or 0)
    at_end = {
        pool: float(v or 0)
        for pool, v in con.execute(
            steps + " SELECT pool, sum(d) FROM d WHERE at_ms < $hi GROUP BY pool",
            {"label": label_path, "hi": hi},
        ).fetchall()
    }
    out: list[dict[str, Any]] = []
    for pool in sorted({p for _, p, _ in pools}):
        mine = [r for r in pools if r[1] == pool]
        total = sum(per_bucket.get((pool, b), 0.0) for b in range(len(bounds)))
        out.append(
            {
                "pool": pool,
                "nodes": len(mine),
                "gpus": sum(int(g or 0) for _, _, g in mine),
                "fragmented_gpus": total / (hi - lo) / GPU_MILLI,
                "fragmented_gpus_at_end": at_end.get(pool, 0.0) / GPU_MILLI,
                "buckets": [
                    {
                        "from_ms": b0,
                        "to_ms": b1,
                        "fragmented_gpus": per_bucket.get((pool, b), 0.0) / (b1 - b0) / GPU_MILLI,
                    }
                    for b, (b0, b1) in enumerate(bounds)
                ],
            }
        )
    return out


def sparkline(values: list[float], top: float, width: int) -> str:
    """`values` as bar characters scaled to `top`, at most `width` of them (consecutive values averaged
    into one bar when there are more); a zero is the lowest bar, so a flat curve still shows."""
    if not values or width < 1:
        return ""
    groups = -(-len(values) // width)
    means = [sum(values[i : i + groups]) / len(values[i : i + groups]) for i in range(0, len(values), groups)]
    if top <= 0:
        return _BARS[0] * len(means)
    return "".join(_BARS[min(len(_BARS) - 1, round(v / top * (len(_BARS) - 1)))] for v in means)
