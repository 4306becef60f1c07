"""Time-based fairshare settings: kValue, half-life, window, refresh and staleness.

The fields follow KAI's ``usageDBConfig.usageParams`` (spec section 4.4) with our own names and exact
integer units: seconds for durations, epoch milliseconds for the tumbling anchor. Construction never
raises a bare pydantic error: every problem becomes a :class:`FairshareConfigError` naming the field and
the value that was given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

__all__ = ["WINDOW_TYPES", "FairshareConfig", "FairshareConfigError", "describe_errors"]

#: The window types we implement. KAI's ``cron`` is not offered (see docs/fairshare.md).
WINDOW_TYPES: tuple[str, ...] = ("sliding", "tumbling")


class FairshareConfigError(ValueError):
    """A fairshare setting is missing, of the wrong type or out of range; the message names field and value."""

    def __init__(self, message: str, validation: ValidationError | None = None) -> None:
        super().__init__(message)
        #: pydantic's structured errors, when the problem came from validation (to re-describe them).
        self.validation = validation


def _short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def describe_errors(
    err: ValidationError,
    origins: Mapping[str, str] | None = None,
    *,
    what: str = "fairshare config",
    fields: Iterable[str] | None = None,
    prefix: str = "",
) -> str:
    """One line per problem: ``field = value: why``, so a user sees exactly what to fix.

    With ``origins`` (field -> ``env NAME``, ``flag --x``, ``file PATH``) each problem also says where the
    bad value came from. ``what`` names the settings, ``fields`` the known ones (for an unknown field) and
    ``prefix`` goes before each field name (``prometheus.`` for that mapping of the settings file).
    """
    lines = []
    known = ", ".join(sorted(fields if fields is not None else FairshareConfig.model_fields))
    for e in err.errors():
        field = prefix + (".".join(str(p) for p in e["loc"]) or "(config)")
        msg = str(e["msg"]).removeprefix("Value error, ")
        origin = (origins or {}).get(str(e["loc"][0])) if e["loc"] else None
        where = f" (from {origin})" if origin else ""
        if e["type"] == "missing":
            lines.append(f"{field}: is required")
        elif e["type"] == "extra_forbidden":
            lines.append(f"{field}{where}: unknown field (known: {known})")
        else:
            lines.append(f"{field} = {_short_repr(e.get('input'))}{where}: {msg}")
    return f"invalid {what}: " + "; ".join(lines)


#: Durations (window, half-life, refresh, staleness) are at most ten years: the window arithmetic in
#: epoch milliseconds then stays far inside int64 and any history a store can hold.
MAX_DURATION_S: Final = 10 * 366 * 24 * 3600
MAX_EPOCH_MS: Final = 253_402_300_800_000  # 10000-01-01T00:00:00Z
MAX_K_VALUE: Final = 1e6  # far past any useful strength, and P = W' + k(W' - U') stays finite


def _at_most_ten_years(v: int) -> int:
    if v > MAX_DURATION_S:
        raise ValueError(f"must be at most {MAX_DURATION_S} seconds (ten years)")
    return v


class FairshareConfig(BaseModel):
    """How historical usage is decayed, windowed and refreshed, and how strongly it bends the division."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)

    #: The penalty strength in ``P = max(W' + k·(W' − U'), 0)``; 0 disables the effect.
    k_value: float = 1.0
    #: Half-life of the exponential decay in seconds; ``None`` or 0 = no decay (plain window sum).
    half_life_s: int | None = None
    #: Window length in seconds (KAI default one week).
    window_s: int = 7 * 24 * 3600
    #: ``sliding``: ``[as_of − window, as_of)``; ``tumbling``: from the last reset boundary to ``as_of``.
    window_type: Literal["sliding", "tumbling"] = "sliding"
    #: Epoch ms of one tumbling boundary; the others are every ``window_s`` from it.
    tumbling_anchor_ms: int = 0
    #: How often the service recomputes, in seconds (KAI ``fetchInterval``, default 1 min).
    refresh_s: int = 60
    #: How long the last good snapshot stays valid when the source fails, in seconds (KAI default 5 min).
    staleness_s: int = 300

    def __init__(self, **data: Any) -> None:
        # Why: callers (CLI, service, scheduler) catch one error type with a readable message, not pydantic's.
        try:
            super().__init__(**data)
        except ValidationError as err:
            raise FairshareConfigError(describe_errors(err), err) from None

    @field_validator("window_type", mode="before")
    @classmethod
    def _known_window(cls, v: object) -> object:
        if v not in WINDOW_TYPES:
            raise ValueError(f"unknown window type, allowed: {', '.join(WINDOW_TYPES)}")
        return v

    @field_validator("k_value")
    @classmethod
    def _k_non_negative(cls, v: float) -> float:
        if not v >= 0.0:  # also rejects NaN
            raise ValueError("k_value must be >= 0 (0 disables time-based fairshare)")
        if v == float("inf"):
            raise ValueError("k_value must be finite")
        if v > MAX_K_VALUE:
            raise ValueError(f"k_value must be at most {MAX_K_VALUE:g}")
        return v

    @field_validator("half_life_s")
    @classmethod
    def _half_life(cls, v: int | None) -> int | None:
        if v is not None and v < 0:
            raise ValueError("half_life_s must be > 0, or 0 / null for no decay")
        return v if v is None else _at_most_ten_years(v)

    @field_validator("window_s", "refresh_s")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("must be > 0 seconds")
        return _at_most_ten_years(v)

    @field_validator("staleness_s")
    @classmethod
    def _non_negative(cls, v: int) -> int:
        if v < 0:
            raise ValueError("must be >= 0 seconds")
        return _at_most_ten_years(v)

    @field_validator("tumbling_anchor_ms")
    @classmethod
    def _anchor(cls, v: int) -> int:
        if abs(v) > MAX_EPOCH_MS:
            raise ValueError(f"must be an epoch time in ms within ±{MAX_EPOCH_MS} (the year 9999)")
        return v

    @property
    def decay_half_life_s(self) -> int | None:
        """The half-life that applies, ``None`` when decay is off (``None`` or 0 in the config)."""
        return self.half_life_s if self.half_life_s else None

    @property
    def window_ms(self) -> int:
        """Window length in milliseconds."""
        return self.window_s * 1000

    def window_start_ms(self, as_of_ms: int) -> int:
        """Start of the window that ends at ``as_of_ms`` (the window is ``[start, as_of_ms)``).

        Sliding: ``as_of − window``. Tumbling: the last boundary ``anchor + k·window`` at or before
        ``as_of``; an anchor in the future gives an empty window (``start == as_of``), as in KAI.
        """
        if self.window_type == "sliding":
            return as_of_ms - self.window_ms
        if as_of_ms < self.tumbling_anchor_ms:
            return as_of_ms
        k = (as_of_ms - self.tumbling_anchor_ms) // self.window_ms
        return self.tumbling_anchor_ms + k * self.window_ms

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> FairshareConfig:
        """Build from a parsed mapping (YAML / JSON); raises :class:`FairshareConfigError`."""
        if not isinstance(data, Mapping):
            raise FairshareConfigError(
                f"invalid fairshare config: expected a mapping, got {type(data).__name__}"
            )
        return cls(**{str(k): v for k, v in data.items()})

    @classmethod
    def from_yaml(cls, path: str | Path) -> FairshareConfig:
        """Load from a YAML file of these fields; raises :class:`FairshareConfigError`."""
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as err:
            raise FairshareConfigError(f"cannot read fairshare config {path}: {err}") from None
        except RecursionError:
            raise FairshareConfigError(f"cannot read fairshare config {path}: nested too deeply") from None
        return cls.from_mapping(data or {})
