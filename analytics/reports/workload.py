"""The workload distribution ``fgd`` / ``frag-aware`` score against, per node pool, at the end of a report's
window (``workload_types: decayed``, docs/placement-benchmark.md).

Re-derived from the store's events with the engine's own code: the pod-group and pod submissions up to the
window's end are folded (:class:`scheduler.engine.state.StateBuilder` keeps each pool's history) and each
pool's history is weighed as a cycle at that time would weigh it
(:func:`scheduler.engine.scoring.fragmentation.decayed_task_types`) with the default half-life, window and
refresh period. A cycle sees a pool's history as of its last 128-pod refresh; this reads all of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ingest.events import EventError, parse_event
from scheduler.engine.scoring.fragmentation import decayed_task_types
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import StateBuilder

if TYPE_CHECKING:
    import duckdb

__all__ = ["workload_distribution"]

#: Shapes shown per pool (the most popular first); the JSON has them all.
SHOWN = 6


def workload_distribution(
    con: duckdb.DuckDBPyConnection, end_ms: int, config: SessionConfig | None = None
) -> list[dict[str, Any]]:
    """Per pool (sorted by name; ``""`` = the default pool; pools with pods submitted in the window or named
    by a pod group, else the default pool alone), its task types at `end_ms`: ``pool``, ``pods``
    (pods of its history inside the window), ``prior`` (True when none are: the shipped trace's types) and
    ``types`` (``cpu_millicores``, ``gpu_milli`` per GPU, ``gpus``, ``gpu_models``, ``weight``), most
    popular first."""
    cfg = config or SessionConfig()
    half, window, refresh = (
        cfg.workload_half_life_s * 1000,
        cfg.workload_window_s * 1000,
        cfg.workload_refresh_s * 1000,
    )
    # Pods submitted before the window count nothing, so only the window's submissions are read (a long
    # store's older ones are not parsed); every pod group is, for the node pool its pods belong to.
    rows = con.execute(
        """SELECT raw FROM events
           WHERE at_ms < ? AND (type = 'PodGroupUpserted' OR (type = 'PodSubmitted' AND at_ms >= ?))
           ORDER BY "offset" """,
        [end_ms, end_ms - refresh - window],
    ).fetchall()
    b = StateBuilder()
    for (raw,) in rows:
        try:
            b.apply(parse_event(raw))
        except (EventError, ValueError, TypeError):
            continue  # the service dead-lettered it; it never reached a cycle either
    out: list[dict[str, Any]] = []
    # The pools with pods in the window, and those pod groups name (their history may have aged out);
    # with neither, the default pool, on the prior.
    named = {j.node_pool for j in b.jobs.values() if j.node_pool is not None}
    for pool in sorted(set(b.history.recent) | named) or [""]:
        history = tuple(b.history.recent.get(pool, ()))
        at = end_ms - end_ms % refresh
        pods = sum(1 for t, _ in history if at - t <= window)
        types = decayed_task_types(history, end_ms, half, window, refresh)
        out.append(
            {
                "pool": pool,
                "pods": pods,
                "prior": pods == 0,
                "types": [
                    {
                        "cpu_millicores": t.cpu_milli,
                        "gpu_milli": t.gpu_milli,
                        "gpus": t.num_gpu,
                        "gpu_models": list(t.gpu_spec),
                        "weight": round(t.weight, 6),
                    }
                    for t in types
                ],
            }
        )
    return out


def shape_text(t: dict[str, Any]) -> str:
    """A type as a person reads it: ``2 GPUs``, ``1 × 0.5 GPU``, ``CPU only``; the CPU and models apart."""
    if not t["gpus"]:
        return "CPU only"
    if t["gpu_milli"] >= 1000:
        return f"{t['gpus']} GPU{'s' if t['gpus'] > 1 else ''}"
    return f"{t['gpus']} × {t['gpu_milli'] / 1000:g} GPU"
