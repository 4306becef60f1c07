"""Opening a log by its spec: the one place that knows every backend (so :mod:`ingest.log` knows none)."""

from __future__ import annotations

from collections.abc import Sequence

from ingest.filelog import FileLog
from ingest.kafkalog import KafkaLog
from ingest.log import Log, LogError


def open_log(
    spec: str, *, topics: Sequence[str] | None = None, role: str | None = None, readonly: bool = False
) -> Log:
    """Open a log from a spec: ``kafka://HOST:PORT[,HOST:PORT...]`` or a directory path (FileLog).

    ``topics`` (Kafka only) are created up front if missing; others are created on first use. ``role``
    (FileLog only: ``scheduler``, ``ingest``, ...) makes this process the only one of its role on the
    directory; on Kafka, running one instance per role is the deployment's job. ``readonly`` (FileLog only)
    opens an existing directory for reading, beside live writers (a missing directory is an error).
    """
    if spec.startswith("kafka://"):
        log = KafkaLog(spec.removeprefix("kafka://"))
        for topic in topics or ():
            log.ensure_topic(topic)
        return log
    return FileLog(spec, role=role, readonly=readonly)


class StartupError(Exception):
    """A command cannot start; its message is the one line the user sees (``COMMAND: what is wrong``)."""


def open_log_for(
    command: str,
    spec: str,
    *,
    topics: Sequence[str] | None = None,
    role: str | None = None,
    readonly: bool = False,
) -> Log:
    """:func:`open_log` for a command's start: any failure is a :class:`StartupError` naming the command."""
    try:
        return open_log(spec, topics=topics, role=role, readonly=readonly)
    except LogError as e:
        raise StartupError(f"{command}: {e}") from None
