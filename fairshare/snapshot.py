"""The usage snapshot: one record on the usage topic per computed (or unavailable) usage.

A snapshot is published as **one** record keyed ``"cluster"``, not one record per queue: the division
needs every queue's ``U'`` from the same computation (same as-of time, same capacity), and a reader that
saw half of a per-queue batch would mix two computations. One record is read atomically on every backend.

The id is the first 16 hex characters of the SHA-256 of the canonical JSON of everything else, so the
same inputs always give the same id (a cycle record names the snapshot it used, and a replay can check it).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fairshare.config import FairshareConfig

__all__ = ["SNAPSHOT_KEY", "SnapshotError", "UsageSnapshot", "WindowSpec"]

#: The log key of every snapshot record (see the module docstring for why not per queue).
SNAPSHOT_KEY = b"cluster"


class SnapshotError(ValueError):
    """A usage snapshot record that cannot be decoded; the message says which field and why."""


class WindowSpec(BaseModel):
    """The window a snapshot was computed over."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["sliding", "tumbling"]
    size_s: int = Field(gt=0)
    half_life_s: int | None = None
    anchor_ms: int = 0

    @classmethod
    def of(cls, cfg: FairshareConfig) -> WindowSpec:
        """The window of a config (the half-life as it applies: ``None`` when decay is off)."""
        return cls(
            type=cfg.window_type,
            size_s=cfg.window_s,
            half_life_s=cfg.decay_half_life_s,
            anchor_ms=cfg.tumbling_anchor_ms if cfg.window_type == "tumbling" else 0,
        )


def _finite_nested(v: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    for q, per in v.items():
        for r, x in per.items():
            if not math.isfinite(x) or x < 0:
                raise ValueError(f"{q}.{r} = {x!r}: must be a finite number >= 0")
    return v


class UsageSnapshot(BaseModel):
    """Per-queue, per-resource historical usage at one as-of time, or why it is unavailable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    id: str = ""
    as_of_ms: int
    window: WindowSpec
    source: Literal["prometheus", "eventlog"]
    available: bool = True
    reason: str | None = None
    #: queue → resource → normalised usage ``U'`` (decayed usage ÷ decayed capacity over the window).
    queues: dict[str, dict[str, float]] = Field(default_factory=dict)
    #: queue → resource → decayed resource-seconds (engine units · s).
    raw: dict[str, dict[str, float]] = Field(default_factory=dict)
    #: resource → decayed capacity resource-seconds.
    capacity: dict[str, float] = Field(default_factory=dict)

    @field_validator("queues", "raw")
    @classmethod
    def _finite(cls, v: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        return _finite_nested(v)

    @field_validator("capacity")
    @classmethod
    def _finite_cap(cls, v: dict[str, float]) -> dict[str, float]:
        _finite_nested({"capacity": v})
        return v

    @model_validator(mode="after")
    def _id(self) -> UsageSnapshot:
        want = self.content_id()
        if not self.id:
            object.__setattr__(self, "id", want)  # frozen model: the id is derived, set once here
        elif self.id != want:
            raise ValueError(f"id {self.id!r} does not match the content (expected {want!r})")
        return self

    def _content(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"id"})

    def content_id(self) -> str:
        """16 hex chars of SHA-256 over the canonical JSON of every field but ``id``."""
        return hashlib.sha256(_canonical(self._content())).hexdigest()[:16]

    def to_bytes(self) -> bytes:
        """Canonical JSON: sorted keys, compact separators, UTF-8; equal snapshots give equal bytes."""
        return _canonical(self.model_dump(mode="json"))

    @classmethod
    def from_bytes(cls, raw: bytes) -> UsageSnapshot:
        """Decode a record written by :meth:`to_bytes`; raises :class:`SnapshotError` with the reason."""
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as err:
            raise SnapshotError(f"usage snapshot is not valid JSON: {err}") from None
        if not isinstance(data, dict):
            raise SnapshotError(f"usage snapshot must be a JSON object, got {type(data).__name__}")
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            first = err.errors()[0]
            loc = ".".join(str(p) for p in first["loc"]) or "(snapshot)"
            more = f" (and {len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
            msg = str(first["msg"]).removeprefix("Value error, ")
            raise SnapshotError(f"invalid usage snapshot: {loc}: {msg}{more}") from None


def _canonical(data: Any) -> bytes:
    return json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()
