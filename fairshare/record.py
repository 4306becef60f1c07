"""The usage record: the usage topic's format, read and written here only.

The fairshare service (:mod:`fairshare.snapshot`) publishes one JSON record per snapshot; the simulator
and the what-if write the same format with :func:`dump_usage_record`. The scheduler
needs four fields of it: ``id`` (recorded in every cycle that used it, so replays are exact), ``as_of_ms``,
``available`` (False: usage is unavailable and the division falls back to classic fair share) and
``queues`` (queue -> resource -> normalised usage U'). Everything else in the record is for people and
reports.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["UsageInput", "UsageRecordError", "dump_usage_record", "parse_usage_record"]


class UsageRecordError(ValueError):
    """A usage record that cannot be used; the message names the field."""


@dataclass(frozen=True, slots=True)
class UsageInput:
    """One usage snapshot as a cycle input. ``usage`` is None when the snapshot says unavailable."""

    id: str
    as_of_ms: int
    usage: dict[str, dict[str, float]] | None
    reason: str | None = None


def parse_usage_record(raw: bytes) -> UsageInput:
    """Parse a usage snapshot record; raises :class:`UsageRecordError` with a specific message."""
    try:
        d: Any = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageRecordError(f"usage record is not JSON: {exc}") from exc
    if not isinstance(d, dict):
        raise UsageRecordError(f"usage record must be a JSON object, got {type(d).__name__}")
    sid, as_of = d.get("id"), d.get("as_of_ms")
    if not isinstance(sid, str) or not sid:
        raise UsageRecordError("usage record: 'id' must be a non-empty string")
    if not isinstance(as_of, int) or isinstance(as_of, bool):
        raise UsageRecordError(f"usage record {sid}: 'as_of_ms' must be an integer, got {as_of!r}")
    available = d.get("available", True)
    if not isinstance(available, bool):
        raise UsageRecordError(f"usage record {sid}: 'available' must be true or false")
    reason = d.get("reason")
    if not available:
        return UsageInput(sid, as_of, None, str(reason) if reason is not None else None)
    queues = d.get("queues")
    if not isinstance(queues, dict):
        raise UsageRecordError(
            f"usage record {sid}: 'queues' must be an object of queue -> resource -> value"
        )
    usage: dict[str, dict[str, float]] = {}
    for q in sorted(queues):
        per = queues[q]
        if not isinstance(per, dict):
            raise UsageRecordError(f"usage record {sid}: queues.{q} must be an object of resource -> value")
        vec: dict[str, float] = {}
        for r in sorted(per):
            v = per[r]
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise UsageRecordError(
                    f"usage record {sid}: queues.{q}.{r} must be a finite number >= 0, got {v!r}"
                )
            vec[r] = float(v)
        usage[q] = vec
    return UsageInput(sid, as_of, usage, None)


def dump_usage_record(u: UsageInput) -> bytes:
    """Canonical JSON of a snapshot in the usage topic's format; :func:`parse_usage_record` reads it back
    equal (``usage`` None: unavailable, with its ``reason`` when there is one)."""
    body: dict[str, Any] = {"id": u.id, "as_of_ms": u.as_of_ms, "available": u.usage is not None}
    if u.usage is not None:
        body["queues"] = u.usage
    if u.reason is not None:
        body["reason"] = u.reason
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
