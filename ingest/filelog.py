"""FileLog: the embedded, crash-safe log backend (the default when no Kafka is configured).

Layout of a log directory::

    DIR/.lock.<role>                flock()ed by the one process of a role (``role=``: scheduler, ingest, ...)
    DIR/<topic>.log                 one append-only file per topic; flock()ed by a writer while it appends
    DIR/_commits/<group>/<topic>    a consumer group's next offset to read: decimal text, a space and the
                                    CRC-32 of those digits as 8 hex digits

Topic file format: an 8-byte header ``b"HGLOG\\x00\\x00\\x01"``, then records framed as::

    u32 big-endian  payload length N
    u32 big-endian  CRC-32 (zlib) of the payload
    N bytes         payload = i32 big-endian key length (-1 for no key) + key + value

Offsets are record indices, dense from 0. On open, each topic file is scanned once, every record's
length and CRC are checked, and an in-memory offset -> file position index is built, so a read is
one ``pread`` of a contiguous byte range.

Crash safety. Records are only ever appended, so a crash can only damage the *tail*: a torn last
record (header or payload cut short, or a complete-looking last record whose CRC fails because the
write was only partly persisted, or a zero-filled tail) is detected on open, logged and truncated
away, and appends continue at its offset: a torn record is never returned. Damage that a crash cannot
leave is corruption, and opening or reading raises :class:`~ingest.log.LogError` rather than dropping
or hiding the records behind it: a CRC failure or an impossible length with more data behind it, and a
length that runs past the end of the file while an intact record starts inside the bytes it claims
(a torn payload is a prefix of one payload; it holds no framed record). Readers apply the same rule
as writers: a torn tail is "not written yet", mid-file damage is an error, never a shorter log.

fsync policy (``fsync=``):

* ``"batch"`` (default): each ``append`` / ``append_many`` call is one ``write`` plus one ``fsync``;
  when the call returns, the whole batch is durable. A crash during the call keeps a prefix of the
  batch (possibly empty), never a torn record.
* ``"always"``: every record is written and fsynced on its own, even inside ``append_many``
  (slowest; after a crash mid-batch every record whose write finished is kept).
* ``"never"``: no fsync; records reach the OS page cache at every call, so they survive a process
  crash (SIGKILL) but not a power loss or kernel crash.

Consumer commits are written to a temporary file, fsynced (unless ``"never"``), renamed over the old
one, and the directory is fsynced: a commit is atomic and either the old or the new offset survives.

Concurrency: several processes may write one directory (``hourglass ingest``, ``run``, ``bind`` and
``fairshare`` on one machine share a log, each appending to its own topics and all to the dead-letter
topic). An append holds an exclusive ``flock`` on the topic file for its write (+ fsync): it first
indexes what other writers appended since (truncating a torn tail that a crashed writer left, which only
the lock holder can safely do), then writes at the end (``O_APPEND``). Offsets stay dense and totally
ordered per topic. ``role=`` additionally makes a process the only one of its role on the directory (an
exclusive ``flock`` on ``.lock.<role>``, held until close): the scheduler service relies on being the
single scheduler. Any number of ``readonly=True`` instances may read concurrently; they never truncate.
Every instance picks up records appended by others by extending its index on ``read`` / ``end_offset``,
ignoring an incomplete tail (a write in progress).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import struct
import zlib
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import numpy as np

from ingest.log import Log, LogError, Record, check_commit_offset, check_name, check_read_args

__all__ = ["FILE_HEADER", "MAX_RECORD_BYTES", "FileLog", "FsyncPolicy"]

log = logging.getLogger(__name__)

FsyncPolicy = Literal["batch", "always", "never"]

FILE_HEADER = b"HGLOG\x00\x00\x01"
MAX_RECORD_BYTES = 64 * 1024 * 1024
_FRAME = struct.Struct(">II")
_KEYLEN = struct.Struct(">i")
_SCAN_CHUNK = 1 << 20
# CRC checks spent deciding whether a damaged tail is torn; past this it is called corruption.
_MAX_CANDIDATES = 4096


# A commit file: the offset and the CRC-32 of its digits, so a flipped digit is an error rather than a
# skip. Files holding the bare offset (older versions) are still read.
_COMMIT = re.compile(r"([0-9]{1,19})( [0-9a-f]{8})?\n?")


def _commit_text(offset: int) -> str:
    digits = str(offset)
    return f"{digits} {zlib.crc32(digits.encode()):08x}\n"


def _encode(key: bytes | None, value: bytes) -> bytes:
    payload = _KEYLEN.pack(-1 if key is None else len(key)) + (key or b"") + value
    if len(payload) > MAX_RECORD_BYTES:
        raise LogError(f"record of {len(payload)} bytes exceeds the {MAX_RECORD_BYTES}-byte limit")
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


class _Topic:
    """One topic file: its fd and the offset -> position index."""

    __slots__ = ("fd", "path", "positions", "size")

    def __init__(self, path: Path, fd: int, positions: array[int], size: int) -> None:
        self.path = path
        self.fd = fd
        self.positions = positions  # start position of record i
        self.size = size  # end of the last complete record


class _Reader:
    """Buffered positional reads for the open-time scan."""

    __slots__ = ("at", "buf", "fd")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""
        self.at = 0

    def get(self, pos: int, n: int) -> bytes | None:
        lo = pos - self.at
        if lo < 0 or lo + n > len(self.buf):
            self.buf = os.pread(self.fd, max(n, _SCAN_CHUNK), pos)
            self.at = pos
            lo = 0
        if lo + n > len(self.buf):
            return None
        return self.buf[lo : lo + n]


def _all_zero(fd: int, start: int, stop: int) -> bool:
    """Whether bytes ``start..stop`` of the file are all zero (a tail a power loss left unwritten)."""
    pos = start
    while pos < stop:
        chunk = os.pread(fd, min(_SCAN_CHUNK, stop - pos), pos)
        if not chunk:
            return True  # shorter than it was: a writer cut a torn tail meanwhile
        if chunk.count(0) != len(chunk):
            return False
        pos += len(chunk)
    return True


def _intact_at(fd: int, pos: int, file_size: int) -> bool:
    """Whether a whole record with a matching CRC and a sane key length starts at ``pos``."""
    head = os.pread(fd, _FRAME.size + _KEYLEN.size, pos)
    if len(head) < _FRAME.size + _KEYLEN.size:
        return False
    length, crc = _FRAME.unpack_from(head)
    keylen = _KEYLEN.unpack_from(head, _FRAME.size)[0]
    if not _KEYLEN.size <= length <= MAX_RECORD_BYTES or pos + _FRAME.size + length > file_size:
        return False
    if keylen < -1 or keylen > length - _KEYLEN.size:
        return False
    payload = os.pread(fd, length, pos + _FRAME.size)
    return len(payload) == length and zlib.crc32(payload) == int(crc)


def _intact_after(fd: int, start: int, file_size: int) -> int | None:
    """The first position in ``start..file_size`` where an intact record starts, or None.

    A torn write leaves a prefix of one record's payload behind its frame, and a payload holds no
    framed record of its own, so an intact record found here means the frame before it was damaged
    in place. Candidates are found vectorised (a frame length in range that fits in the file); past
    ``_MAX_CANDIDATES`` CRC checks the region is not a plausible torn write either, and ``-1`` says so.
    """
    checked = 0
    at = start
    while at + _FRAME.size + _KEYLEN.size <= file_size:
        buf = os.pread(fd, min(_SCAN_CHUNK, file_size - at), at)
        n = len(buf) - (_FRAME.size - 1)
        if n <= 0:
            return None
        b = np.frombuffer(buf, dtype=np.uint8).astype(np.int64)
        lengths = (b[:n] << 24) | (b[1 : n + 1] << 16) | (b[2 : n + 2] << 8) | b[3 : n + 3]
        room = file_size - (at + np.arange(n, dtype=np.int64)) - _FRAME.size
        hits = np.flatnonzero((lengths >= _KEYLEN.size) & (lengths <= MAX_RECORD_BYTES) & (lengths <= room))
        for i in hits.tolist():
            checked += 1
            if checked > _MAX_CANDIDATES:
                return -1
            if _intact_at(fd, at + i, file_size):
                return at + i
        at += n
    return None


def _scan(path: Path, fd: int, start: int, file_size: int, positions: array[int]) -> int:
    """Index complete records from ``start``; return the end of the last good one.

    Only damage that a crash can leave is accepted, and only at the very tail: a frame header cut
    short, a payload cut short with nothing intact behind it, a last record whose CRC fails, or a
    zero-filled tail. There the scan stops: a writer truncates it, a reader treats it as not written
    yet. Any other damage (a bad length or CRC with records behind it) raises :class:`LogError`, for
    writers and readers alike, so no reader takes a prefix of a damaged log for the whole of it.
    """
    reader = _Reader(fd)
    pos = start
    while pos < file_size:
        head = reader.get(pos, _FRAME.size)
        if head is None:
            return pos  # torn frame header
        length, crc = _FRAME.unpack(head)
        if length < _KEYLEN.size or length > MAX_RECORD_BYTES:
            if _all_zero(fd, pos, file_size):
                return pos  # zero-filled tail
            raise LogError(f"{path}: corrupt record frame (length {length}) at byte {pos}")
        end = pos + _FRAME.size + length
        if end > file_size:
            found = _intact_after(fd, pos + 1, file_size)
            if (
                found is None
                and zlib.crc32(os.pread(fd, file_size - pos - _FRAME.size, pos + _FRAME.size)) == crc
            ):
                found = -2  # the whole payload is there: its length was damaged, nothing was torn
            if found is None:
                return pos  # torn payload
            raise LogError(
                f"{path}: corrupt record frame at byte {pos} (length {length} runs past the end of the"
                + (
                    f" file, yet an intact record starts at byte {found})"
                    if found >= 0
                    else " file, yet the bytes up to the end are the whole payload)"
                    if found == -2
                    else " file, and what follows is not a torn write)"
                )
            )
        record = reader.get(pos, _FRAME.size + length)
        if record is None:
            return pos
        if zlib.crc32(record[_FRAME.size :]) != crc:
            if end == file_size or _all_zero(fd, end, file_size):
                return pos  # last record only partly persisted
            raise LogError(f"{path}: corrupt record (CRC mismatch) at byte {pos}, followed by more records")
        keylen = _KEYLEN.unpack_from(record, _FRAME.size)[0]
        if keylen < -1 or keylen > length - _KEYLEN.size:
            raise LogError(f"{path}: corrupt record (key length {keylen}) at byte {pos}")
        positions.append(pos)
        pos = end
    return pos


class FileLog(Log):
    """An append-only file log in ``directory`` (created if missing). See the module docstring."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        fsync: FsyncPolicy = "batch",
        readonly: bool = False,
        role: str | None = None,
    ) -> None:
        if fsync not in ("batch", "always", "never"):
            raise ValueError(f"fsync must be 'batch', 'always' or 'never', got {fsync!r}")
        self.directory = Path(directory)
        self.fsync: FsyncPolicy = fsync
        self.readonly = readonly
        self._topics: dict[str, _Topic] = {}
        self._lock_fd: int | None = None
        self._closed = False
        if readonly:
            if not self.directory.is_dir():
                raise LogError(f"{self.directory}: no such log directory")
        else:
            self.directory.mkdir(parents=True, exist_ok=True)
            if role is not None:
                check_name("role", role)
                self._lock_fd = os.open(self.directory / f".lock.{role}", os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(self._lock_fd)
                    self._lock_fd = None
                    raise LogError(
                        f"{self.directory}: another process has this log open as {role!r}; run one per log"
                    ) from None
            try:
                for path in sorted(self.directory.glob("*.log")):
                    self._open_topic(path.stem, create=False)
            except BaseException:
                self.close()
                raise

    # -- topic files -------------------------------------------------------------------------

    def _open_topic(self, topic: str, *, create: bool) -> _Topic | None:
        check_name("topic", topic)
        found = self._topics.get(topic)
        if found is not None:
            return found
        path = self.directory / f"{topic}.log"
        if self.readonly:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return None
        else:
            if not create and not path.exists():
                return None
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)  # no other writer mid-append while the tail is checked
        try:
            size = os.fstat(fd).st_size
            if size < len(FILE_HEADER) and not FILE_HEADER.startswith(os.pread(fd, size, 0)):
                raise LogError(f"{path}: not a Hourglass log file (bad header)")
            if size < len(FILE_HEADER):
                if self.readonly:
                    os.close(fd)
                    return None
                # New file, or a crash while writing the header.
                os.ftruncate(fd, 0)
                os.write(fd, FILE_HEADER)
                self._sync_file(fd)
                if size == 0:
                    self._sync_dir()
                size = len(FILE_HEADER)
            elif os.pread(fd, len(FILE_HEADER), 0) != FILE_HEADER:
                raise LogError(f"{path}: not a Hourglass log file (bad header)")
            positions: array[int] = array("q")
            good = _scan(path, fd, len(FILE_HEADER), size, positions)
            if good < size and not self.readonly:
                log.warning(
                    "%s: dropping a torn record at the tail (bytes %d..%d) left by a crash; "
                    "appends continue at offset %d",
                    path,
                    good,
                    size,
                    len(positions),
                )
                os.ftruncate(fd, good)
                self._sync_file(fd)
            if not self.readonly:
                fcntl.flock(fd, fcntl.LOCK_UN)
        except BaseException:
            os.close(fd)  # also releases the flock
            raise
        t = _Topic(path, fd, positions, good)
        self._topics[topic] = t
        return t

    def _refresh(self, t: _Topic) -> None:
        """Index records other writers appended since the last look (an incomplete tail is a write in
        progress: not indexed yet)."""
        size = os.fstat(t.fd).st_size
        if size > t.size:
            t.size = _scan(t.path, t.fd, t.size, size, t.positions)

    def _catch_up_locked(self, t: _Topic) -> None:
        """Holding the topic lock: index what others appended; a torn tail is a crashed writer's, cut it."""
        size = os.fstat(t.fd).st_size
        if size > t.size:
            good = _scan(t.path, t.fd, t.size, size, t.positions)
            if good < size:
                log.warning(
                    "%s: dropping a torn record (bytes %d..%d) left by a crashed writer", t.path, good, size
                )
                os.ftruncate(t.fd, good)
                self._sync_file(t.fd)
            t.size = good

    def _sync_file(self, fd: int) -> None:
        if self.fsync != "never":
            os.fsync(fd)

    def _sync_dir(self, directory: Path | None = None) -> None:
        if self.fsync != "never":
            dfd = os.open(directory or self.directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def _writable(self) -> None:
        if self._closed:
            raise LogError("log is closed")
        if self.readonly:
            raise LogError(f"{self.directory}: log opened read-only")

    # -- Log API -----------------------------------------------------------------------------

    def append(self, topic: str, key: bytes | None, value: bytes) -> int:
        return self.append_many(topic, [(key, value)])[0]

    def append_many(self, topic: str, records: Iterable[tuple[bytes | None, bytes]]) -> list[int]:
        self._writable()
        t = self._open_topic(topic, create=True)
        assert t is not None
        frames = [_encode(key, value) for key, value in records]
        if not frames:
            return []
        fcntl.flock(t.fd, fcntl.LOCK_EX)
        try:
            self._catch_up_locked(t)
            first = len(t.positions)
            if self.fsync == "always":
                for frame in frames:
                    self._write(t, frame)
                    os.fsync(t.fd)
                    t.positions.append(t.size)
                    t.size += len(frame)
            else:
                self._write(t, b"".join(frames))
                self._sync_file(t.fd)
                pos = t.size
                for frame in frames:
                    t.positions.append(pos)
                    pos += len(frame)
                t.size = pos
        finally:
            fcntl.flock(t.fd, fcntl.LOCK_UN)
        return list(range(first, first + len(frames)))

    @staticmethod
    def _write(t: _Topic, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                n = os.write(t.fd, view)
                view = view[n:]
        except BaseException:
            # Leave no partial record behind in this process's view; the next open truncates it.
            os.ftruncate(t.fd, t.size)
            raise

    def read(self, topic: str, from_offset: int, max_records: int = 1000) -> list[Record]:
        check_read_args(from_offset, max_records)
        if self._closed:
            raise LogError("log is closed")
        t = self._open_topic(topic, create=False)
        if t is None:
            return []
        self._refresh(t)
        n = len(t.positions)
        if from_offset >= n:
            return []
        stop = min(n, from_offset + max_records)
        start_pos = t.positions[from_offset]
        end_pos = t.positions[stop] if stop < n else t.size
        data = os.pread(t.fd, end_pos - start_pos, start_pos)
        out: list[Record] = []
        at = 0
        frame = _FRAME.size
        keylen_size = _KEYLEN.size
        for offset in range(from_offset, stop):
            length = _FRAME.unpack_from(data, at)[0]
            p = at + frame
            keylen = _KEYLEN.unpack_from(data, p)[0]
            p += keylen_size
            end = at + frame + length
            if keylen < 0:
                out.append(Record(offset, None, data[p:end]))
            else:
                out.append(Record(offset, data[p : p + keylen], data[p + keylen : end]))
            at = end
        return out

    def end_offset(self, topic: str) -> int:
        if self._closed:
            raise LogError("log is closed")
        t = self._open_topic(topic, create=False)
        if t is None:
            return 0
        self._refresh(t)
        return len(t.positions)

    def _commit_path(self, group: str, topic: str) -> Path:
        return self.directory / "_commits" / check_name("group", group) / check_name("topic", topic)

    def commit(self, group: str, topic: str, offset: int) -> None:
        check_commit_offset(offset)
        if self._closed:
            raise LogError("log is closed")
        path = self._commit_path(group, topic)
        fresh_dir = not path.parent.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, _commit_text(offset).encode())
            self._sync_file(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self._sync_dir(path.parent)
        if fresh_dir:
            self._sync_dir(path.parent.parent)
            self._sync_dir()

    def committed(self, group: str, topic: str) -> int:
        path = self._commit_path(group, topic)
        try:
            with path.open("rb") as f:
                text = f.read(64).decode("ascii", errors="replace")
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise LogError(f"{path}: cannot read the commit file: {exc.strerror}") from None
        # Only what commit() writes (int() alone would also take "1_0" or " -5"), its checksum matching.
        m = _COMMIT.fullmatch(text)
        if m is None or (m[2] is not None and _commit_text(int(m[1])) != text.rstrip("\n") + "\n"):
            raise LogError(f"{path}: corrupt commit file for group {group!r} topic {topic!r}: {text[:40]!r}")
        return int(m[1])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for t in self._topics.values():
            os.close(t.fd)
        self._topics.clear()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None
