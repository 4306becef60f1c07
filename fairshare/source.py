"""Where historical usage comes from: the small interface every usage source implements.

Two sources implement it: :mod:`fairshare.prometheus` (range queries against the cluster's Prometheus) and
:mod:`fairshare.ledger` (exact usage from the events log). The decay / window maths in
:mod:`fairshare.decay` only ever sees the frames below, never the source.

Frames (polars), engine units throughout (milli-GPU, millicores, bytes):

* ``allocation(start_ms, end_ms)``: columns ``ts_ms: Int64, queue: Utf8, resource: Utf8 ('gpu' | 'cpu' |
  'memory'), value: Float64`` — the amount the leaf queue held from ``ts_ms`` for ``step_ms`` (sampled
  sources) or a piecewise-constant step function (exact sources: one row per change, the value holds
  until the queue/resource's next row or ``end_ms``).
* ``capacity(start_ms, end_ms)``: columns ``ts_ms, resource, value`` with the same meaning for the
  cluster's allocatable total.
"""

from __future__ import annotations

from typing import Final, Protocol, runtime_checkable

import polars as pl

__all__ = ["ALLOCATION_SCHEMA", "CAPACITY_SCHEMA", "RESOURCES", "SourceUnavailable", "UsageSource"]

RESOURCES: Final = ("gpu", "cpu", "memory")

ALLOCATION_SCHEMA: Final = {"ts_ms": pl.Int64, "queue": pl.Utf8, "resource": pl.Utf8, "value": pl.Float64}
CAPACITY_SCHEMA: Final = {"ts_ms": pl.Int64, "resource": pl.Utf8, "value": pl.Float64}


class SourceUnavailable(RuntimeError):
    """The source cannot answer now (server down, timeout, bad response); the message says which and why."""


@runtime_checkable
class UsageSource(Protocol):
    """A history of per-queue allocation and cluster capacity."""

    #: "sampled" (each row holds for ``step_ms``) or "exact" (step function, a row holds until the next).
    kind: str
    #: Sample spacing of a sampled source in ms; 0 for an exact source.
    step_ms: int

    def allocation(self, start_ms: int, end_ms: int) -> pl.DataFrame:
        """Per-queue allocation in ``[start_ms, end_ms)``; raises :class:`SourceUnavailable`."""
        ...

    def capacity(self, start_ms: int, end_ms: int) -> pl.DataFrame:
        """Cluster capacity in ``[start_ms, end_ms)``; raises :class:`SourceUnavailable`."""
        ...
