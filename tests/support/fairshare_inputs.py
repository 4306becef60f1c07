"""Inputs of the fair-share service: a small cluster's events on the log and a usage source that can be
taken down on demand.
"""

from __future__ import annotations

import polars as pl

from fairshare.source import ALLOCATION_SCHEMA, CAPACITY_SCHEMA, SourceUnavailable
from ingest import events as ev
from ingest.events import dump_event
from ingest.log import DEFAULT_TOPICS, Log

S = 1000


def append_events(log: Log, events: list[ev.EventBase]) -> None:
    """Append contract events to the log, keyed by their uid."""
    log.append_many(DEFAULT_TOPICS.events, [(e.uid.encode(), dump_event(e)) for e in events])


def one_pod_cluster(t0: int = 0) -> list[ev.EventBase]:
    """One 4-GPU node; queue `a` (under `org`) runs a 2-GPU pod from 10 s; logical time ends at 40 s."""
    return [
        ev.NodeUpserted(at_ms=t0, name="n1", cpu_millicores=8000, memory_bytes=2**34, gpus=4),
        ev.QueueUpserted(at_ms=t0, name="org"),
        ev.QueueUpserted(at_ms=t0, name="a", parent="org"),
        ev.PodGroupUpserted(at_ms=t0, name="g", namespace="ns", queue="a", created_at_ms=t0),
        ev.PodSubmitted(
            at_ms=t0,
            name="p",
            namespace="ns",
            pod_group="g",
            requests=ev.PodRequests(gpus=2),
            created_at_ms=t0,
        ),
        ev.PodBound(at_ms=10 * S, name="p", namespace="ns", node="n1"),
        ev.PodReleasing(at_ms=40 * S, name="p", namespace="ns", reason="done"),
    ]


class FlakySource:
    """A sampled usage source that answers from a fixed history or raises SourceUnavailable on demand."""

    kind = "sampled"
    step_ms = 10 * S

    def __init__(self) -> None:
        self.down: str | None = None
        ts = list(range(0, 10_000 * S, 10 * S))
        self.a = pl.DataFrame(
            {
                "ts_ms": ts,
                "queue": ["a"] * len(ts),
                "resource": ["gpu"] * len(ts),
                "value": [1000.0] * len(ts),
            },
            schema=ALLOCATION_SCHEMA,
        )
        self.c = pl.DataFrame(
            {"ts_ms": ts, "resource": ["gpu"] * len(ts), "value": [4000.0] * len(ts)}, schema=CAPACITY_SCHEMA
        )

    def _check(self) -> None:
        if self.down:
            raise SourceUnavailable(self.down)

    def allocation(self, start_ms: int, end_ms: int) -> pl.DataFrame:
        self._check()
        return self.a.filter((pl.col("ts_ms") >= start_ms) & (pl.col("ts_ms") < end_ms))

    def capacity(self, start_ms: int, end_ms: int) -> pl.DataFrame:
        self._check()
        return self.c.filter((pl.col("ts_ms") >= start_ms) & (pl.col("ts_ms") < end_ms))
