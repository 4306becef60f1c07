"""The log contract, run against every backend, plus FileLog crash-recovery tests.

:class:`LogContract` holds the shared suite; ``TestFileLog`` runs it on a temp directory and
``TestKafkaLog`` on the real broker started by the ``kafka_bootstrap`` fixture (``conftest.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ingest.events import QueueDeleted, QueueUpserted, dump_event, event_key, parse_event
from ingest.filelog import FILE_HEADER, FileLog, FsyncPolicy
from ingest.log import DEFAULT_TOPICS, Log, LogError, Record, Topics
from ingest.memlog import MemoryLog

Opener = Callable[[], Log]


class LogContract:
    """The backend-independent contract; subclasses provide the ``opener`` fixture."""

    @pytest.fixture
    def opener(self) -> Iterator[Opener]:
        raise NotImplementedError
        yield  # pragma: no cover

    @pytest.fixture
    def topic(self) -> str:
        return f"test.{uuid.uuid4().hex[:12]}"

    @pytest.fixture
    def log(self, opener: Opener) -> Iterator[Log]:
        lg = opener()
        yield lg
        lg.close()

    def test_empty_topic(self, log: Log, topic: str) -> None:
        assert log.end_offset(topic) == 0
        assert log.read(topic, 0) == []
        assert log.committed("g", topic) == 0

    def test_append_read_in_order_with_dense_offsets(self, log: Log, topic: str) -> None:
        offsets = [log.append(topic, f"k{i % 3}".encode(), f"value-{i}".encode()) for i in range(25)]
        assert offsets == list(range(25))
        assert log.end_offset(topic) == 25
        records = log.read(topic, 0, 100)
        assert [r.offset for r in records] == list(range(25))
        assert [r.value for r in records] == [f"value-{i}".encode() for i in range(25)]
        assert [r.key for r in records] == [f"k{i % 3}".encode() for i in range(25)]

    def test_read_from_offset_and_max_records(self, log: Log, topic: str) -> None:
        log.append_many(topic, [(None, str(i).encode()) for i in range(30)])
        assert [r.offset for r in log.read(topic, 10, 5)] == [10, 11, 12, 13, 14]
        assert [r.value for r in log.read(topic, 28, 10)] == [b"28", b"29"]
        assert log.read(topic, 30) == []
        assert log.read(topic, 1000) == []
        # random access, backwards
        assert log.read(topic, 3, 1) == [Record(3, None, b"3")]
        assert log.read(topic, 0, 1) == [Record(0, None, b"0")]
        # paging reads everything exactly once
        seen: list[int] = []
        pos = 0
        while batch := log.read(topic, pos, 7):
            seen.extend(r.offset for r in batch)
            pos = batch[-1].offset + 1
        assert seen == list(range(30))

    def test_reads_follow_appends_jumps_and_other_topics(self, log: Log, topic: str) -> None:
        """Readers keep a position between reads (Kafka: a prefetching consumer per topic); a read from
        anywhere else, on another topic in between, or past records appended since, is still exact."""
        other = f"{topic}.other"
        log.append_many(topic, [(None, f"a{i}".encode()) for i in range(3000)])
        log.append_many(other, [(None, f"b{i}".encode()) for i in range(10)])
        assert [r.offset for r in log.read(topic, 0, 1000)] == list(range(1000))
        assert [r.value for r in log.read(other, 0, 5)] == [f"b{i}".encode() for i in range(5)]
        assert [r.offset for r in log.read(topic, 1000, 1000)] == list(range(1000, 2000))
        assert [r.value for r in log.read(topic, 2500, 2)] == [b"a2500", b"a2501"]  # forward jump
        assert log.read(topic, 5, 2) == [Record(5, None, b"a5"), Record(6, None, b"a6")]  # backward jump
        assert [r.offset for r in log.read(topic, 7, 5000)] == list(range(7, 3000))
        assert [r.value for r in log.read(other, 5, 100)] == [f"b{i}".encode() for i in range(5, 10)]
        assert log.read(topic, 3000) == []
        log.append_many(topic, [(None, b"late")])
        assert log.read(topic, 3000, 10) == [Record(3000, None, b"late")]
        assert log.read(topic, 3001) == []

    def test_bad_read_arguments(self, log: Log, topic: str) -> None:
        with pytest.raises(ValueError):
            log.read(topic, -1)
        with pytest.raises(ValueError):
            log.read(topic, 0, 0)
        with pytest.raises(ValueError):
            log.commit("g", topic, -1)
        with pytest.raises(LogError):
            log.append("bad/topic", None, b"x")

    def test_append_many(self, log: Log, topic: str) -> None:
        assert log.append(topic, b"a", b"first") == 0
        assert log.append_many(topic, [(b"b", b"x"), (None, b"y"), (b"c", b"z")]) == [1, 2, 3]
        assert log.append_many(topic, []) == []
        assert log.append_many(topic, iter([(b"d", b"w")])) == [4]
        assert [(r.key, r.value) for r in log.read(topic, 0)] == [
            (b"a", b"first"),
            (b"b", b"x"),
            (None, b"y"),
            (b"c", b"z"),
            (b"d", b"w"),
        ]

    def test_keys_and_values_kept_exactly(self, log: Log, topic: str) -> None:
        pairs: list[tuple[bytes | None, bytes]] = [
            (None, b"no key"),
            (b"", b"empty key"),
            (b"\x00\xff\x10binary", b"\x00\x01\x02"),
            (b"ns/pod-\xc3\xa9", "ünïcödé".encode()),
            (b"k", b""),
            (b"big", bytes(range(256)) * 400),
        ]
        log.append_many(topic, pairs)
        assert [(r.key, r.value) for r in log.read(topic, 0)] == pairs

    def test_topics_are_independent(self, log: Log, topic: str) -> None:
        other = topic + ".other"
        log.append(topic, None, b"a")
        log.append(other, None, b"b")
        log.append(other, None, b"c")
        assert log.end_offset(topic) == 1
        assert log.end_offset(other) == 2
        assert [r.value for r in log.read(other, 0)] == [b"b", b"c"]

    def test_records_persist_across_reopen(self, opener: Opener, topic: str) -> None:
        with opener() as lg:
            lg.append_many(topic, [(b"k", str(i).encode()) for i in range(10)])
        with opener() as lg:
            assert lg.end_offset(topic) == 10
            assert [r.value for r in lg.read(topic, 0)] == [str(i).encode() for i in range(10)]
            assert lg.append(topic, None, b"10") == 10
        with opener() as lg:
            assert lg.read(topic, 10) == [Record(10, None, b"10")]

    def test_commit_persists_across_reopen(self, opener: Opener, topic: str) -> None:
        other = topic + ".other"
        with opener() as lg:
            lg.append_many(topic, [(None, b"x")] * 5)
            lg.commit("scheduler", topic, 3)
            lg.commit("audit", topic, 5)
            lg.commit("scheduler", other, 1)
            assert lg.committed("scheduler", topic) == 3
        with opener() as lg:
            assert lg.committed("scheduler", topic) == 3
            assert lg.committed("audit", topic) == 5
            assert lg.committed("scheduler", other) == 1
            assert lg.committed("nobody", topic) == 0
            lg.commit("scheduler", topic, 4)
            lg.commit("audit", topic, 2)  # rewinding is allowed (replay)
        with opener() as lg:
            assert lg.committed("scheduler", topic) == 4
            assert lg.committed("audit", topic) == 2

    def test_events_round_trip_keyed_by_uid(self, log: Log, topic: str) -> None:
        events = [QueueUpserted(at_ms=1, name="team-a"), QueueDeleted(at_ms=2, name="team-a")]
        offsets = log.append_many(topic, [(event_key(e).encode(), dump_event(e)) for e in events])
        assert offsets == [0, 1]
        records = log.read(topic, 0)
        assert [parse_event(r.value) for r in records] == events
        assert {r.key for r in records} == {b"team-a"}


class TestFileLog(LogContract):
    @pytest.fixture
    def opener(self, tmp_path: Path) -> Iterator[Opener]:
        yield lambda: FileLog(tmp_path / "log")


class TestMemoryLog(LogContract):
    @pytest.fixture
    def opener(self) -> Iterator[Opener]:
        # An in-memory log lives as long as its object: "reopening" it is getting the same one back.
        log = MemoryLog()
        yield lambda: log


@pytest.mark.timeout(300)
class TestKafkaLog(LogContract):
    @pytest.fixture
    def opener(self, kafka_bootstrap: str) -> Iterator[Opener]:
        from ingest.kafkalog import KafkaLog

        yield lambda: KafkaLog(kafka_bootstrap)

    def test_topics_created_with_one_partition(self, kafka_bootstrap: str, topic: str) -> None:
        from kafka import KafkaAdminClient

        from ingest.kafkalog import KafkaLog

        with KafkaLog(kafka_bootstrap, retention_ms=3_600_000) as lg:
            lg.append(topic, b"k", b"v")
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        try:
            (described,) = admin.describe_topics([topic])
            assert len(described["partitions"]) == 1
        finally:
            admin.close()


# --------------------------------------------------------------------------- FileLog specifics

RECORD = 8 + 4 + 1 + 20  # frame + key length + 1-byte key + 20-byte value


def _fill(directory: Path, n: int = 5, fsync: FsyncPolicy = "batch") -> Path:
    with FileLog(directory, fsync=fsync) as lg:
        lg.append_many("t", [(b"k", f"value-{i:014d}".encode()) for i in range(n)])
    path = directory / "t.log"
    assert path.stat().st_size == len(FILE_HEADER) + n * RECORD
    return path


def _values(directory: Path) -> list[bytes]:
    with FileLog(directory) as lg:
        return [r.value for r in lg.read("t", 0)]


@pytest.mark.parametrize("cut", [1, 7, 8, 12, 13, RECORD - 1])
def test_torn_last_record_is_dropped_and_appends_continue(tmp_path: Path, cut: int) -> None:
    path = _fill(tmp_path)
    os.truncate(path, len(FILE_HEADER) + 4 * RECORD + cut)  # crash while writing record 4
    with FileLog(tmp_path) as lg:
        assert lg.end_offset("t") == 4
        assert [r.value for r in lg.read("t", 0)] == [f"value-{i:014d}".encode() for i in range(4)]
        assert lg.append("t", b"k", b"after the crash") == 4
    assert path.stat().st_size == len(FILE_HEADER) + 4 * RECORD + 8 + 4 + 1 + len(b"after the crash")
    assert _values(tmp_path)[-2:] == [b"value-00000000000003", b"after the crash"]


def test_flipped_byte_in_last_record_is_caught_by_crc(tmp_path: Path) -> None:
    path = _fill(tmp_path)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01  # inside the last record's value
    path.write_bytes(bytes(data))
    with FileLog(tmp_path) as lg:
        assert lg.end_offset("t") == 4
        assert all(r.value.startswith(b"value-") for r in lg.read("t", 0))
        assert lg.append("t", None, b"next") == 4


def test_flipped_byte_before_the_tail_is_corruption_not_a_torn_write(tmp_path: Path) -> None:
    path = _fill(tmp_path)
    data = bytearray(path.read_bytes())
    data[len(FILE_HEADER) + 2 * RECORD + 20] ^= 0x40  # record 2 of 5
    path.write_bytes(bytes(data))
    with pytest.raises(LogError, match="CRC mismatch"):
        FileLog(tmp_path)


def test_zero_filled_tail_is_dropped(tmp_path: Path) -> None:
    path = _fill(tmp_path)
    with path.open("ab") as f:
        f.write(bytes(100))
    assert len(_values(tmp_path)) == 5
    assert path.stat().st_size == len(FILE_HEADER) + 5 * RECORD


def test_not_a_log_file(tmp_path: Path) -> None:
    (tmp_path / "t.log").write_bytes(b"something else entirely")
    with pytest.raises(LogError, match="bad header"):
        FileLog(tmp_path)


@pytest.mark.parametrize("fsync", ["batch", "always", "never"])
def test_fsync_policies(tmp_path: Path, fsync: FsyncPolicy) -> None:
    _fill(tmp_path, 7, fsync)
    with FileLog(tmp_path, fsync=fsync) as lg:
        lg.commit("g", "t", 7)
    assert len(_values(tmp_path)) == 7
    with FileLog(tmp_path) as lg:
        assert lg.committed("g", "t") == 7


def test_writers_share_a_directory_and_readers_follow(tmp_path: Path) -> None:
    with FileLog(tmp_path) as a, FileLog(tmp_path) as b:
        assert a.append("t", None, b"a0") == 0
        assert b.append("t", None, b"b0") == 1  # b indexes a's record before writing after it
        assert a.append_many("t", [(None, b"a1"), (None, b"a2")]) == [2, 3]
        reader = FileLog(tmp_path, readonly=True)
        for lg in (a, b, reader):
            assert [r.value for r in lg.read("t", 0)] == [b"a0", b"b0", b"a1", b"a2"]
        with (tmp_path / "t.log").open("ab") as f:
            f.write(b"\x00\x00\x00\x10torn")  # an in-progress write: invisible to readers, not truncated
        assert [r.value for r in reader.read("t", 0)] == [b"a0", b"b0", b"a1", b"a2"]
        assert b.end_offset("t") == 4
        with pytest.raises(LogError, match="read-only"):
            reader.append("t", None, b"x")
        # The next append holds the topic lock: no write can be in progress, so the tail is a crashed
        # writer's and is cut before appending after the last good record.
        assert b.append("t", None, b"b1") == 4
        assert [r.value for r in reader.read("t", 0)] == [b"a0", b"b0", b"a1", b"a2", b"b1"]
        reader.close()
    with FileLog(tmp_path) as again:
        assert [r.value for r in again.read("t", 0)] == [b"a0", b"b0", b"a1", b"a2", b"b1"]


def test_one_process_per_role(tmp_path: Path) -> None:
    with FileLog(tmp_path, role="scheduler"):
        with pytest.raises(LogError, match="as 'scheduler'"):
            FileLog(tmp_path, role="scheduler")
        FileLog(tmp_path, role="ingest").close()  # other roles share the directory
    FileLog(tmp_path, role="scheduler").close()  # released on close


_WRITER = """
import sys
from ingest.filelog import FileLog
name, n = sys.argv[2], int(sys.argv[3])
with FileLog(sys.argv[1]) as lg:
    for i in range(0, n, 10):
        lg.append_many("t", [(name.encode(), f"{name}-{j}".encode()) for j in range(i, min(n, i + 10))])
"""


def test_concurrent_writer_processes_keep_every_record_in_order(tmp_path: Path) -> None:
    n = 1500
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), name, str(n)]) for name in ("p", "q")
    ]
    for p in procs:
        assert p.wait(timeout=300) == 0
    with FileLog(tmp_path) as lg:  # reopening re-checks every frame and CRC
        records = lg.read("t", 0, 10 * n)
    assert [r.offset for r in records] == list(range(2 * n))
    for name in ("p", "q"):
        mine = [r.value for r in records if r.key == name.encode()]
        assert mine == [f"{name}-{j}".encode() for j in range(n)]


def test_topics_dataclass() -> None:
    assert DEFAULT_TOPICS.all() == (
        "hourglass.events",
        "hourglass.usage",
        "hourglass.decisions",
        "hourglass.deadletter",
    )
    assert Topics.with_prefix("staging").decisions == "staging.decisions"
    with pytest.raises(LogError):
        Topics(events="no spaces allowed")
