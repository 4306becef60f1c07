"""Damaged FileLog files: each case either recovers a true torn tail or stops with one clear LogError.

The table damages a topic file (truncate, flip, zero, delete bytes, inflate a length) at its head, middle
and tail, and a commit file likewise. A writer, a reader opened alone and a reader that was following
the topic before the damage must all agree: the same records (a prefix that lacks only the torn tail) or
the same error, never a shorter log that hides records behind the damage.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ingest.filelog import FILE_HEADER, FileLog
from ingest.log import LogError
from tests.support.damage import damage_commit

N = 5
VALUES = [f"value-{i:04d}-".encode() + bytes(range(32, 32 + 20 + i)) for i in range(N)]


def _fill(directory: Path) -> tuple[Path, list[int]]:
    """A topic ``t`` of N records; returns its path and each record's start position."""
    with FileLog(directory) as lg:
        lg.append_many("t", [(b"key", v) for v in VALUES])
    starts, pos = [], len(FILE_HEADER)
    for v in VALUES:
        starts.append(pos)
        pos += 8 + 4 + 3 + len(v)
    path = directory / "t.log"
    assert path.stat().st_size == pos
    return path, starts


Damage = Callable[[bytearray, int, int], bytearray]  # (file bytes, record start, record end) -> damaged


def _truncate(b: bytearray, start: int, end: int) -> bytearray:
    return b[: start + (end - start) // 2]


def _flip(b: bytearray, start: int, end: int) -> bytearray:
    b[end - 3] ^= 0x10  # inside the value
    return b


def _zero(b: bytearray, start: int, end: int) -> bytearray:
    b[start : start + 16] = bytes(16)
    return b


def _delete(b: bytearray, start: int, end: int) -> bytearray:
    return b[: start + 14] + b[start + 24 :]  # ten bytes cut out of the payload


def _inflate(b: bytearray, start: int, end: int) -> bytearray:
    (length,) = struct.unpack_from(">I", b, start)
    struct.pack_into(">I", b, start, length + 1000)
    return b


def _inflate_huge(b: bytearray, start: int, end: int) -> bytearray:
    struct.pack_into(">I", b, start, 0x7FFFFFFF)  # past the record size limit
    return b


DAMAGES: dict[str, Damage] = {
    "truncate": _truncate,
    "flip": _flip,
    "zero": _zero,
    "delete": _delete,
    "inflate": _inflate,
    "inflate-huge": _inflate_huge,
}

# (damage, record index) -> the records that survive (a true torn tail), or "error".
# Truncation can only ever leave a prefix: the log cannot tell it from a crash; the services above it
# catch a log that lost what they already acted on (tests/e2e/test_log_damage_components.py).
# Damage to the last record alone looks exactly like a write that was only partly persisted, and is
# trimmed as one — unless what is there is provably whole (an inflated length over a matching payload).
EXPECTED: dict[tuple[str, int], int | str] = {
    ("truncate", 0): 0,
    ("truncate", 2): 2,
    ("truncate", 4): 4,
    ("flip", 0): "error",
    ("flip", 2): "error",
    ("flip", 4): 4,
    ("zero", 0): "error",
    ("zero", 2): "error",
    ("zero", 4): "error",
    ("delete", 0): "error",
    ("delete", 2): "error",
    ("delete", 4): 4,
    ("inflate", 0): "error",
    ("inflate", 2): "error",
    ("inflate", 4): "error",
    ("inflate-huge", 0): "error",
    ("inflate-huge", 2): "error",
    ("inflate-huge", 4): "error",
}


def _outcome(open_: Callable[[], FileLog]) -> int | str:
    try:
        with open_() as lg:
            got = [r.value for r in lg.read("t", 0)]
            assert lg.end_offset("t") == len(got)
    except LogError as e:
        msg = str(e)
        assert "\n" not in msg and "t.log" in msg and "byte" in msg, msg
        return "error"
    assert got == VALUES[: len(got)], "records read are not the ones written"
    return len(got)


@pytest.mark.parametrize(("damage", "index"), sorted(EXPECTED))
def test_damaged_topic_file(tmp_path: Path, damage: str, index: int) -> None:
    path, starts = _fill(tmp_path)
    follower = FileLog(tmp_path, readonly=True)  # was reading before the damage: it indexes afresh
    assert follower.end_offset("t") == N
    follower.close()
    data = bytearray(path.read_bytes())
    end = starts[index + 1] if index + 1 < N else len(data)
    damaged = bytes(DAMAGES[damage](data, starts[index], end))
    path.write_bytes(damaged)
    want = EXPECTED[(damage, index)]

    assert _outcome(lambda: FileLog(tmp_path, readonly=True)) == want  # a reader: sink, replay, fairshare
    if want == "error":
        assert path.read_bytes() == damaged  # the reader and the failed writer deleted nothing
    assert _outcome(lambda: FileLog(tmp_path)) == want  # a writer: run, ingest, bind
    if want == "error":
        assert path.read_bytes() == damaged
    else:
        with FileLog(tmp_path) as lg:  # the tail was trimmed and appends continue after the survivors
            assert lg.append("t", None, b"next") == want
        with FileLog(tmp_path, readonly=True) as lg:
            assert [r.value for r in lg.read("t", 0)] == [*VALUES[:want], b"next"]


def test_reader_following_a_topic_fails_on_damage_behind_new_data(tmp_path: Path) -> None:
    path, _ = _fill(tmp_path)
    with FileLog(tmp_path, readonly=True) as reader, FileLog(tmp_path) as writer:
        assert reader.end_offset("t") == N
        appended_at = path.stat().st_size
        writer.append_many("t", [(None, b"more-%d" % i) for i in range(3)])
        data = bytearray(path.read_bytes())
        data[appended_at + 12] ^= 0x01  # the first new record's payload; two intact ones follow it
        path.write_bytes(bytes(data))
        with pytest.raises(LogError, match="CRC mismatch"):
            reader.read("t", N)


def test_header_damage(tmp_path: Path) -> None:
    path, _ = _fill(tmp_path)
    data = path.read_bytes()
    path.write_bytes(b"HGLOG\x00\x00\x02" + data[8:])  # a future format
    for ro in (True, False):
        with pytest.raises(LogError, match="bad header"):
            FileLog(tmp_path, readonly=ro).read("t", 0)
    path.write_bytes(b"HGX")  # too short to hold a header, and not the start of one
    for ro in (True, False):
        with pytest.raises(LogError, match="bad header"):
            FileLog(tmp_path, readonly=ro).read("t", 0)
    path.write_bytes(b"HGL")  # a crash while a new file's header was written: an empty topic
    with FileLog(tmp_path) as lg:
        assert lg.end_offset("t") == 0


def test_a_zero_filled_tail_behind_a_partly_persisted_record_is_a_tail(tmp_path: Path) -> None:
    path, _ = _fill(tmp_path)
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x01
    path.write_bytes(bytes(data) + bytes(4096))  # a power loss: the last page never reached the disk
    assert _outcome(lambda: FileLog(tmp_path)) == N - 1


def test_huge_garbage_tail_is_an_error_quickly(tmp_path: Path) -> None:
    """Random bytes behind a frame whose length runs past the end: not a torn write; decided fast."""
    path, _ = _fill(tmp_path)
    garbage = os.urandom(8 << 20)
    with path.open("ab") as f:
        f.write(struct.pack(">II", 60 << 20, 0) + garbage)
    t0 = time.perf_counter()
    outcome = _outcome(lambda: FileLog(tmp_path, readonly=True))
    assert time.perf_counter() - t0 < 5
    assert outcome == "error"


# -- commit files ------------------------------------------------------------------------------------


def _commit_path(directory: Path) -> Path:
    return directory / "_commits" / "g" / "t"


COMMIT_CASES: dict[str, tuple[Callable[[bytes], bytes], int | str]] = {
    # damage to "1234 <crc>\n" -> the offset read back, or "error"
    "intact": (lambda b: b, 1234),
    "truncate-head": (lambda b: b[2:], "error"),
    "truncate-middle": (lambda b: b[:6], "error"),
    "truncate-to-digits": (lambda b: b[:3], 123),  # an older version's bare offset: lower is harmless
    "empty": (lambda b: b"", "error"),
    "flip-digit": (lambda b: b"1834" + b[4:], "error"),
    "flip-crc": (lambda b: b[:5] + (b"0" if b[5:6] != b"0" else b"1") + b[6:], "error"),
    "zero": (lambda b: bytes(len(b)), "error"),
    "inflate": (lambda b: b"9" * 30 + b"\n", "error"),
    "inflate-huge-file": (lambda b: b"1" * (1 << 20), "error"),
    "negative": (lambda b: b"-5\n", "error"),
    "underscore": (lambda b: b"1_0\n", "error"),
    "legacy": (lambda b: b"77\n", 77),
}


@pytest.mark.parametrize("case", sorted(COMMIT_CASES))
def test_damaged_commit_file(tmp_path: Path, case: str) -> None:
    damage, want = COMMIT_CASES[case]
    with FileLog(tmp_path) as lg:
        lg.commit("g", "t", 1234)
    path = _commit_path(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    with FileLog(tmp_path, readonly=True) as lg:
        if want == "error":
            with pytest.raises(LogError, match="corrupt commit file") as info:
                lg.committed("g", "t")
            assert "\n" not in str(info.value) and len(str(info.value)) < 300
        else:
            assert lg.committed("g", "t") == want


def test_commit_file_deleted_or_a_directory(tmp_path: Path) -> None:
    with FileLog(tmp_path) as lg:
        lg.commit("g", "t", 9)
        _commit_path(tmp_path).unlink()
        assert lg.committed("g", "t") == 0  # as if never committed: readers start over (duplicates dropped)
        _commit_path(tmp_path).mkdir()
        with pytest.raises(LogError, match="cannot read the commit file"):
            lg.committed("g", "t")


# Only the trailing newline can go without changing what the file says; every other damage is an error.
COMMIT_TABLE: dict[tuple[str, str], int | str] = {
    (kind, where): 1234 if (kind, where) in {("truncate", "tail"), ("delete", "tail")} else "error"
    for kind in ("truncate", "flip", "zero", "delete", "inflate")
    for where in ("head", "middle", "tail")
}


@pytest.mark.parametrize(("kind", "where"), sorted(COMMIT_TABLE))
def test_commit_file_damage_table(tmp_path: Path, kind: str, where: str) -> None:
    """Each damage at the head, middle or tail of a commit file reads back the exact offset or is one
    clear error: never another offset."""
    with FileLog(tmp_path) as lg:
        lg.commit("g", "t", 1234)
    path = _commit_path(tmp_path)
    path.write_bytes(damage_commit(path.read_bytes(), kind, where))
    with FileLog(tmp_path, readonly=True) as lg:
        if COMMIT_TABLE[(kind, where)] == "error":
            with pytest.raises(LogError, match="corrupt commit file") as info:
                lg.committed("g", "t")
            assert "\n" not in str(info.value)
        else:
            assert lg.committed("g", "t") == 1234
