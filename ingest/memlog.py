"""The in-memory log backend: the :class:`~ingest.log.Log` contract with nothing written anywhere."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from ingest.log import Log, Record, check_commit_offset, check_name, check_read_args


class MemoryLog(Log):
    """An in-memory :class:`~ingest.log.Log`: what a what-if re-run writes, held for the process's lifetime.

    It passes the same contract suite as the file and Kafka backends; nothing is written anywhere."""

    def __init__(self) -> None:
        self.topics: dict[str, list[Record]] = defaultdict(list)
        self.commits: dict[tuple[str, str], int] = {}

    def append(self, topic: str, key: bytes | None, value: bytes) -> int:
        """Append one record; its offset."""
        recs = self.topics[check_name("topic", topic)]
        recs.append(Record(len(recs), key, value))
        return len(recs) - 1

    def append_many(self, topic: str, records: Iterable[tuple[bytes | None, bytes]]) -> list[int]:
        """Append records in order; their offsets."""
        return [self.append(topic, k, v) for k, v in records]

    def read(self, topic: str, from_offset: int, max_records: int = 1000) -> list[Record]:
        """Up to *max_records* records from *from_offset*."""
        check_read_args(from_offset, max_records)
        return self.topics[topic][from_offset : from_offset + max_records]

    def end_offset(self, topic: str) -> int:
        """The next offset of *topic*."""
        return len(self.topics[topic])

    def commit(self, group: str, topic: str, offset: int) -> None:
        """Remember *group*'s position."""
        check_commit_offset(offset)
        self.commits[(check_name("group", group), check_name("topic", topic))] = offset

    def committed(self, group: str, topic: str) -> int:
        """*group*'s position (0 if none)."""
        return self.commits.get((group, topic), 0)

    def close(self) -> None:
        """Nothing to release."""
