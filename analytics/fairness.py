"""Received ÷ fair share: the one definition behind every output that shows it (``simulate``, ``report``,
``whatif``; docs/report.md, "Received ÷ fair share").

* **Fair share** of a queue at a cycle: the GPU fair share the engine recorded for it, **capped at the
  cluster**: when the top-level queues' fair shares add up to more than the cluster's GPUs (quotas written for
  a bigger cluster), every queue's fair share is scaled by ``capacity / Σ top fair shares``
  (:func:`capacity_scale`). The engine's fair share is bounded by quota and request, not by the cluster, so
  uncapped it would measure a queue against GPUs that never existed.
* **Fair-share GPU-hours**: that capped fair share held from each recorded cycle to the next, integrated over
  the window.
* **Received ÷ fair share**: GPU-hours received (:mod:`analytics.audit.gpuhours`) ÷ fair-share GPU-hours
  (:func:`received_over_fair_share`); none when the fair share is zero.

The audit store's views compute the same scale in SQL, from :func:`capacity_scale_sql`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = [
    "capacity_scale",
    "capacity_scale_sql",
    "capped_fair_shares",
    "received_over_fair_share",
]


def capacity_scale(top_fair_share: float, capacity: float) -> float:
    """The factor every fair share of a cycle is multiplied by: ``capacity / top_fair_share`` when the
    top-level queues' fair shares (*top_fair_share*, summed) exceed the cluster's *capacity*, else 1. A cycle
    with no known capacity (0: no node seen) is left as recorded. Both in the same unit (milli-GPU)."""
    if capacity > 0 and top_fair_share > capacity:
        return capacity / top_fair_share
    return 1.0


def capacity_scale_sql(top_fair_share: str, capacity: str) -> str:
    """:func:`capacity_scale` as a SQL expression over two columns (the audit store's views)."""
    return (
        f"CASE WHEN {capacity} > 0 AND coalesce({top_fair_share}, 0) > {capacity}"
        f" THEN {capacity} / {top_fair_share} ELSE 1.0 END"
    )


def capped_fair_shares(
    fair_shares: Mapping[str, int], top_level: Iterable[str], capacity: float
) -> dict[str, float]:
    """Every queue's GPU fair share of one cycle (*fair_shares*, milli-GPU, as recorded), capped at the
    cluster's *capacity* (milli-GPU); *top_level* names the queues without a parent."""
    scale = capacity_scale(sum(fair_shares.get(q, 0) for q in top_level), capacity)
    return {q: v * scale for q, v in fair_shares.items()}


def received_over_fair_share(received: float, fair_share: float) -> float | None:
    """GPU-hours received ÷ fair-share GPU-hours (any one unit for both), or None for a zero fair share."""
    return received / fair_share if fair_share > 0 else None
