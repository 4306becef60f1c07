"""The log interface: the only way Hourglass components talk to the event log.

The scheduler, fair share and analytics code see a :class:`Log`; which backend sits behind it
(:class:`ingest.filelog.FileLog`, the embedded default, or :class:`ingest.kafkalog.KafkaLog`) is
chosen once, by :func:`open_log`.

Semantics shared by every backend (pinned by ``tests/ingest/test_log_contract.py``):

* A log holds named **topics** (see :class:`Topics` for the defaults). Each topic is one totally
  ordered sequence of :class:`Record` (for Kafka: one partition of the topic).
* **Offsets** are integers assigned by the log at append time, increasing by one per record from 0
  (dense). ``end_offset(topic)`` is the offset the next appended record will get, i.e. the number
  of records ever appended (Kafka: the high watermark). A topic that was never written has
  ``end_offset == 0`` and reads as empty.
* ``read(topic, from_offset, max_records)`` returns up to ``max_records`` records with offsets
  ``>= from_offset``, in order, without blocking for new records: an empty list means
  ``from_offset >= end_offset``. (With Kafka retention, reading below the earliest retained offset
  starts at the earliest retained record.)
* **Consumer positions**: ``commit(group, topic, offset)`` stores ``offset`` as the *next offset
  to read* (Kafka's convention: after processing record ``n`` commit ``n + 1``), durably.
  ``committed(group, topic)`` returns it, or ``0`` when the group never committed on that topic,
  so a new consumer starts from the beginning of the topic (what an event-sourced reader needs).
  There is no ``-1`` sentinel: "nothing committed" and "committed 0" both mean "start at 0".
* Keys are opaque bytes or ``None`` and are returned as written (events are keyed by object uid,
  see :func:`ingest.events.event_key`).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Self

__all__ = [
    "DEFAULT_TOPICS",
    "Log",
    "LogError",
    "Record",
    "Topics",
    "check_commit_offset",
    "check_name",
    "check_read_args",
]

_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


class LogError(RuntimeError):
    """A log backend failed (corrupt file, broker unreachable, bad topic or group name, ...)."""


def check_name(kind: str, name: str) -> str:
    """Validate a topic or group name: Kafka's legal characters ``[A-Za-z0-9._-]``, 1-249 long."""
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise LogError(f"invalid {kind} name {name!r}: use 1-249 characters from [A-Za-z0-9._-]")
    return name


@dataclass(frozen=True, slots=True)
class Record:
    """One record read from a topic."""

    offset: int
    key: bytes | None
    value: bytes


@dataclass(frozen=True, slots=True)
class Topics:
    """The topic names Hourglass uses; override them to run several deployments on one cluster."""

    events: str = "hourglass.events"
    usage: str = "hourglass.usage"
    decisions: str = "hourglass.decisions"
    deadletter: str = "hourglass.deadletter"

    def __post_init__(self) -> None:
        for name in self.all():
            check_name("topic", name)

    def all(self) -> tuple[str, str, str, str]:
        return (self.events, self.usage, self.decisions, self.deadletter)

    @classmethod
    def with_prefix(cls, prefix: str) -> Topics:
        """``Topics.with_prefix("staging")`` gives ``staging.events``, ``staging.usage``, ..."""
        return cls(f"{prefix}.events", f"{prefix}.usage", f"{prefix}.decisions", f"{prefix}.deadletter")

    def for_pool(self, pool: str | None) -> Topics:
        """The topics of the shard scheduling node pool `pool` (None: the whole cluster, these topics).

        Shards read the one events and usage topics; each writes and binds from its own decisions topic
        (``<decisions>.pool.<pool>``, ``<decisions>.pool`` for the default shard), so its records, replay
        and audit trail are its own. Dead letters stay shared (each names its source)."""
        if pool is None:
            return self
        decisions = f"{self.decisions}.pool.{pool}" if pool else f"{self.decisions}.pool"
        return Topics(self.events, self.usage, decisions, self.deadletter)

    @staticmethod
    def pool_role(role: str, pool: str | None) -> str:
        """The one-per-log role of a shard's process (``scheduler.pool.<pool>``): shards of one log run
        side by side, two instances of one shard do not."""
        if pool is None:
            return role
        return f"{role}.pool.{pool}" if pool else f"{role}.pool"

    @classmethod
    def from_prefix(cls, prefix: str | None) -> Topics:
        """The topics of a ``--topic-prefix`` option: :meth:`with_prefix`, or the defaults when unset."""
        return cls.with_prefix(prefix) if prefix else cls()


DEFAULT_TOPICS = Topics()


class Log(ABC):
    """An append-only, offset-addressed log of topics with durable consumer positions."""

    @abstractmethod
    def append(self, topic: str, key: bytes | None, value: bytes) -> int:
        """Append one record durably (per the backend's policy); return its offset."""

    @abstractmethod
    def append_many(self, topic: str, records: Iterable[tuple[bytes | None, bytes]]) -> list[int]:
        """Append ``(key, value)`` pairs in order as one batch; return their offsets."""

    @abstractmethod
    def read(self, topic: str, from_offset: int, max_records: int = 1000) -> list[Record]:
        """Up to ``max_records`` records with offset ``>= from_offset``, in order; never blocks."""

    @abstractmethod
    def end_offset(self, topic: str) -> int:
        """The offset the next appended record will get (0 for an empty or unknown topic)."""

    @abstractmethod
    def commit(self, group: str, topic: str, offset: int) -> None:
        """Durably store ``offset`` as ``group``'s next offset to read on ``topic``."""

    @abstractmethod
    def committed(self, group: str, topic: str) -> int:
        """``group``'s next offset to read on ``topic``; 0 if it never committed."""

    @abstractmethod
    def close(self) -> None:
        """Flush and release resources; the log must not be used afterwards."""

    def scan(self, topic: str, from_offset: int = 0, batch: int = 1000) -> Iterator[Record]:
        """Every record from ``from_offset`` to the end as seen while paging, ``batch`` per :meth:`read`."""
        at = from_offset
        while records := self.read(topic, at, batch):
            yield from records
            at = records[-1].offset + 1

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def check_read_args(from_offset: int, max_records: int) -> None:
    if from_offset < 0:
        raise ValueError(f"from_offset must be >= 0, got {from_offset}")
    if max_records < 1:
        raise ValueError(f"max_records must be >= 1, got {max_records}")


def check_commit_offset(offset: int) -> None:
    if offset < 0:
        raise ValueError(f"a committed offset must be >= 0, got {offset}")
