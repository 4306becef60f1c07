"""Where a simulation writes its event log and cycle records: a tiny interface and two implementations.

The simulator only calls :class:`SimLog` (``append_event``, ``append_cycle``, ``close``), so the plain
directory format below can be swapped for a real log backend without touching the simulator or the
engine. Format of a run directory (``hourglass simulate --out DIR``; see ``docs/simulate.md``):

* ``events.jsonl``: one event per line, :func:`ingest.events.dump_event` bytes, in offset order (line ``i``
  is offset ``i``);
* ``cycles.jsonl``: one :meth:`scheduler.engine.record.decisions.CycleRecord.dumps` per line, in cycle order: a
  full checkpoint first and every ``checkpoint_every`` records, deltas in between
  (:mod:`scheduler.engine.record.delta`; runs written before delta records hold only full v1 records);
* ``usage.jsonl``: the usage snapshots the cycles consumed (runs with ``k_value`` > 0), one JSON object per
  line in the usage topic's format (``id``, ``as_of_ms``, ``available``, ``queues``; see
  :mod:`fairshare.record`), so a replay re-runs those cycles with the same usage;
* ``manifest.json``: ``format`` (:data:`RUN_FORMAT`), inputs (trace files with sha256, tenants config),
  engine config hash and counts; canonical JSON (sorted keys, 2-space indent).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Final, Protocol

from fairshare.record import UsageInput, dump_usage_record, parse_usage_record
from ingest.events import Event, EventBase, dump_event, parse_event
from scheduler.engine.record.decisions import CycleRecord
from scheduler.engine.record.delta import DEFAULT_CHECKPOINT_EVERY, DeltaEncoder, expand_records

__all__ = [
    "CYCLES_FILE",
    "EVENTS_FILE",
    "MANIFEST_FILE",
    "RUN_FORMAT",
    "USAGE_FILE",
    "DirLog",
    "NullLog",
    "SimLog",
    "read_cycles",
    "read_events",
    "read_manifest",
    "read_records",
    "read_usage",
    "usage_record",
]

RUN_FORMAT: Final = "hourglass-sim-run/1"
EVENTS_FILE: Final = "events.jsonl"
CYCLES_FILE: Final = "cycles.jsonl"
MANIFEST_FILE: Final = "manifest.json"
USAGE_FILE: Final = "usage.jsonl"


def usage_record(snapshot_id: str, as_of_ms: int, usage: dict[str, dict[str, float]] | None) -> bytes:
    """Canonical JSON of a usage snapshot in the usage topic's format (``None`` usage: unavailable)."""
    return dump_usage_record(UsageInput(snapshot_id, as_of_ms, usage))


class SimLog(Protocol):
    """The sink of a simulation run."""

    def append_event(self, offset: int, event: EventBase) -> None:
        """Record one event; offsets arrive in order, starting at 0, without gaps."""

    def append_cycle(self, record: CycleRecord) -> None:
        """Record one cycle's (full) record, in cycle order."""

    def append_usage(self, raw: bytes) -> None:
        """Record one usage snapshot (:func:`usage_record` bytes) before the first cycle that uses it."""

    def close(self, manifest: dict[str, Any]) -> None:
        """Finish the run; *manifest* describes its inputs and counts."""


class NullLog:
    """Keeps nothing (a run whose log nobody asked for)."""

    def append_event(self, offset: int, event: EventBase) -> None:
        """Drop the event."""

    def append_cycle(self, record: CycleRecord) -> None:
        """Drop the record."""

    def append_usage(self, raw: bytes) -> None:
        """Drop the snapshot."""

    def close(self, manifest: dict[str, Any]) -> None:
        """Nothing to finish."""


class DirLog:
    """Writes the directory format of the module doc. The directory is created if missing."""

    def __init__(self, directory: Path | str, checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY) -> None:
        self.dir = Path(directory)
        self.encoder = DeltaEncoder(checkpoint_every)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._events: IO[bytes] = (self.dir / EVENTS_FILE).open("wb")
        self._cycles: IO[bytes] = (self.dir / CYCLES_FILE).open("wb")
        self._usage: IO[bytes] = (self.dir / USAGE_FILE).open("wb")
        self._next_offset = 0

    def append_event(self, offset: int, event: EventBase) -> None:
        """Append one line to ``events.jsonl``; refuses an offset out of sequence."""
        if offset != self._next_offset:
            raise ValueError(f"event offset {offset} out of sequence (expected {self._next_offset})")
        self._events.write(dump_event(event) + b"\n")
        self._next_offset += 1

    def append_cycle(self, record: CycleRecord) -> None:
        """Append one line to ``cycles.jsonl``: *record* (a full record) as a checkpoint or a delta."""
        self._cycles.write(self.encoder.encode(record).dumps() + b"\n")

    def append_usage(self, raw: bytes) -> None:
        """Append one line to ``usage.jsonl``."""
        self._usage.write(raw + b"\n")

    def close(self, manifest: dict[str, Any]) -> None:
        """Close the logs and write ``manifest.json``."""
        self._events.close()
        self._cycles.close()
        self._usage.close()
        body = {"format": RUN_FORMAT, "checkpoint_every": self.encoder.checkpoint_every, **manifest}
        text = json.dumps(body, sort_keys=True, indent=2) + "\n"
        (self.dir / MANIFEST_FILE).write_text(text, encoding="utf-8")


def read_events(directory: Path | str) -> Iterator[tuple[int, Event]]:
    """(offset, event) for every line of a run's ``events.jsonl``."""
    with (Path(directory) / EVENTS_FILE).open("rb") as fh:
        for offset, line in enumerate(fh):
            yield offset, parse_event(line)


def read_records(directory: Path | str) -> Iterator[CycleRecord]:
    """The records of a run's ``cycles.jsonl`` as written (checkpoints and deltas), in order."""
    with (Path(directory) / CYCLES_FILE).open("rb") as fh:
        for line in fh:
            if line.strip():
                yield CycleRecord.loads(line)


def read_cycles(directory: Path | str) -> Iterator[CycleRecord]:
    """The full record of every cycle of a run (deltas expanded), in order."""
    return expand_records(read_records(directory))


def read_usage(directory: Path | str) -> Iterator[UsageInput]:
    """The usage snapshots of a run's ``usage.jsonl`` (none if the file is absent: older runs)."""
    path = Path(directory) / USAGE_FILE
    if not path.exists():
        return
    with path.open("rb") as fh:
        for line in fh:
            if line.strip():
                yield parse_usage_record(line)


def read_manifest(directory: Path | str) -> dict[str, Any]:
    """A run's ``manifest.json``; raises ValueError for another format."""
    data: dict[str, Any] = json.loads((Path(directory) / MANIFEST_FILE).read_text(encoding="utf-8"))
    if data.get("format") != RUN_FORMAT:
        raise ValueError(f"{directory}: not a {RUN_FORMAT} run (format {data.get('format')!r})")
    return data
