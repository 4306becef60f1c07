"""Decayed, windowed usage: ``U = Σ A · 0.5^(Δt / t½)`` in resource-seconds, normalised to capacity.

The frames are the ones of :mod:`fairshare.source`. Every row is a constant piece of allocation:

* exact sources: a row holds from its ``ts_ms`` until the next row of the same series (queue/resource,
  or resource for capacity) or the end of the question; an exact frame must contain, for each series,
  the row in effect at the window start (a row at or before it), which :class:`fairshare.ledger.EventLedger`
  does;
* sampled sources: a row holds ``[ts_ms, ts_ms + step_ms)``.

Each piece ``[a, b)`` (clipped to the window) contributes its value times the closed-form integral of the
decay weight over the piece, ``(t½/ln 2) · 0.5^((T−b)/t½) · (1 − 0.5^((b−a)/t½))`` seconds, or ``(b−a)``
seconds without decay, so an exact step function has no sampling error. ``1 − 0.5^x`` is evaluated with
``expm1`` so short pieces under a long half-life keep full relative precision.

The incremental form (:class:`DecayedUsage`) uses ``U(T2) = U(T1)·0.5^((T2−T1)/t½) + I[T1, T2) −
I[T1−W, T2−W)`` (sliding) where ``I`` is the decayed integral of a slice evaluated at ``T2``; a tumbling
window restarts from zero when ``T2`` crosses a boundary.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import polars as pl

from fairshare.config import FairshareConfig
from fairshare.source import ALLOCATION_SCHEMA, CAPACITY_SCHEMA, RESOURCES, UsageSource

__all__ = ["DecayError", "DecayedUsage", "UsageVectors", "grid_usage", "integrate", "roll_up", "usage_at"]

_LN2 = math.log(2.0)
K = TypeVar("K", bound=Hashable)
_ALLOC_KEYS = ("queue", "resource")
_CAP_KEYS = ("resource",)


class DecayError(ValueError):
    """The frames or the source kind cannot be integrated (wrong columns, unknown kind, missing step)."""


@dataclass(frozen=True)
class UsageVectors:
    """Per-queue decayed usage, the capacity over the same window, and their ratio (``U'``).

    Queues and resources are in sorted order, so iterating these dicts is deterministic.
    """

    #: queue → resource → decayed resource-seconds (engine units · s).
    raw: dict[str, dict[str, float]]
    #: resource → decayed capacity resource-seconds over the same window, decayed the same way.
    capacity: dict[str, float]
    #: queue → resource → raw ÷ capacity (0.0 when the capacity is 0).
    normalised: dict[str, dict[str, float]] = field(default_factory=dict)


def _check(frame: pl.DataFrame, schema: Mapping[str, pl.DataType | type[pl.DataType]], what: str) -> None:
    missing = [c for c in schema if c not in frame.columns]
    if missing:
        raise DecayError(
            f"{what} frame lacks column(s) {', '.join(missing)} (has {', '.join(frame.columns)})"
        )


def _weights(
    a: npt.NDArray[np.int64], b: npt.NDArray[np.int64], as_of_ms: int, half_life_s: int | None
) -> npt.NDArray[np.float64]:
    """Decayed seconds of each piece ``[a, b)`` (ms) seen from ``as_of_ms``: the closed-form integral."""
    dur_s = (b - a).astype(np.float64) / 1000.0
    if half_life_s is None:
        return np.asarray(dur_s, dtype=np.float64)
    h = float(half_life_s)
    age_end_s = (as_of_ms - b).astype(np.float64) / 1000.0
    # ∫_a^b 0.5^((T−t)/h) dt = (h/ln2)·0.5^((T−b)/h)·(1 − 0.5^((b−a)/h)); expm1 keeps tiny pieces exact.
    w = (h / _LN2) * np.exp2(-age_end_s / h) * -np.expm1(-_LN2 * dur_s / h)
    return np.asarray(w, dtype=np.float64)


def _sample_weights(
    ts: npt.NDArray[np.int64], lo_ms: int, hi_ms: int, as_of_ms: int, half_life_s: int | None, step_ms: int
) -> npt.NDArray[np.float64] | None:
    """Weights of step-aligned samples, computed once per timestamp and gathered (``None``: not aligned).

    A sampled history has many series on few timestamps; the exponentials are the expensive part, so
    they are evaluated on the timestamp grid (the wide layout's weight vector) instead of once per row.
    """
    if ts.size == 0:
        return None
    t0 = int(ts.min())
    off = ts - t0
    k = off // step_ms
    n = int(k.max()) + 1
    if n > 2 * ts.size or not np.array_equal(k * step_ms, off):
        return None
    grid_ts = t0 + np.arange(n, dtype=np.int64) * step_ms
    a = np.maximum(grid_ts, lo_ms)
    b = np.minimum(grid_ts + step_ms, hi_ms)
    wk = np.where(b > a, _weights(a, np.maximum(a, b), as_of_ms, half_life_s), 0.0)
    return np.asarray(wk[k], dtype=np.float64)


def integrate(
    frame: pl.DataFrame,
    keys: tuple[str, ...],
    lo_ms: int,
    hi_ms: int,
    as_of_ms: int,
    half_life_s: int | None,
    *,
    kind: str,
    step_ms: int = 0,
) -> pl.DataFrame:
    """Decayed integral of the pieces of ``frame`` inside ``[lo_ms, hi_ms)``, seen from ``as_of_ms``.

    Returns one row per series present in ``frame`` (``keys`` + ``value``), including series whose pieces
    all fall outside the slice (value 0.0), so callers see a stable key set.
    """
    if kind not in ("exact", "sampled"):
        raise DecayError(f"unknown usage source kind {kind!r}, expected 'exact' or 'sampled'")
    if kind == "sampled" and step_ms <= 0:
        raise DecayError(f"a sampled source needs step_ms > 0, got {step_ms}")
    key_cols = list(keys)
    if frame.height == 0:
        return pl.DataFrame(schema={**{k: pl.Utf8 for k in keys}, "value": pl.Float64})
    f = frame.select([*key_cols, pl.col("ts_ms").cast(pl.Int64), pl.col("value").cast(pl.Float64)])
    ts = f["ts_ms"].to_numpy()
    w = _sample_weights(ts, lo_ms, hi_ms, as_of_ms, half_life_s, step_ms) if kind == "sampled" else None
    if w is None:
        if kind == "exact":
            # A row holds until the next row of its series; the stable sort keeps the log order of equal
            # stamps, so the later of two same-time rows is the one that holds (the earlier one gets a
            # zero-length piece).
            f = f.sort([*key_cols, "ts_ms"], maintain_order=True)
            end = f.select(pl.col("ts_ms").shift(-1).over(key_cols).fill_null(hi_ms))["ts_ms"].to_numpy()
            ts = f["ts_ms"].to_numpy()
        else:
            end = ts + step_ms
        # Clip each piece to the slice and give pieces outside it weight 0 rather than filtering them
        # out: one group_by then yields every series (a stable key set) with no unique() + join.
        a = np.maximum(ts, lo_ms)
        b = np.minimum(end, hi_ms)
        w = np.where(b > a, _weights(a, np.maximum(a, b), as_of_ms, half_life_s), 0.0)
    return (
        f.select(*key_cols, (pl.col("value") * pl.Series("_w", w)).alias("_u"))
        .group_by(key_cols)
        .agg(pl.col("_u").sum().alias("value"))
        .sort(key_cols)
    )


def _to_nested(df: pl.DataFrame) -> dict[tuple[str, str], float]:
    return {(q, r): float(v) for q, r, v in df.select("queue", "resource", "value").iter_rows()}


def _to_flat(df: pl.DataFrame) -> dict[str, float]:
    return {r: float(v) for r, v in df.select("resource", "value").iter_rows()}


def _vectors(raw: Mapping[tuple[str, str], float], capacity: Mapping[str, float]) -> UsageVectors:
    resources = sorted(set(RESOURCES) | {r for _, r in raw} | set(capacity))
    queues = sorted({q for q, _ in raw})
    # Usage is non-negative; the incremental form can leave a residue of a few ulps below 0 after a
    # subtraction, which must not read as a credit.
    cap = {r: max(capacity.get(r, 0.0), 0.0) for r in resources}
    raw_out = {q: {r: max(raw.get((q, r), 0.0), 0.0) for r in resources} for q in queues}
    norm = {q: {r: (raw_out[q][r] / cap[r] if cap[r] > 0.0 else 0.0) for r in resources} for q in queues}
    return UsageVectors(raw=raw_out, capacity=cap, normalised=norm)


def usage_at(
    allocation: pl.DataFrame,
    capacity: pl.DataFrame,
    as_of_ms: int,
    cfg: FairshareConfig,
    *,
    kind: str,
    step_ms: int = 0,
) -> UsageVectors:
    """Decayed usage per queue and resource over the window ending at ``as_of_ms``, and its ratio to capacity.

    ``allocation`` / ``capacity`` follow :mod:`fairshare.source`; rows outside the window are clipped away,
    so a frame may cover more than the window. Raises :class:`DecayError` on malformed frames.
    """
    _check(allocation, ALLOCATION_SCHEMA, "allocation")
    _check(capacity, CAPACITY_SCHEMA, "capacity")
    lo = cfg.window_start_ms(as_of_ms)
    h = cfg.decay_half_life_s
    a = integrate(allocation, _ALLOC_KEYS, lo, as_of_ms, as_of_ms, h, kind=kind, step_ms=step_ms)
    c = integrate(capacity, _CAP_KEYS, lo, as_of_ms, as_of_ms, h, kind=kind, step_ms=step_ms)
    return _vectors(_to_nested(a), _to_flat(c))


def _fetch(source: UsageSource, lo: int, hi: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    # A sample taken before ``lo`` may still hold at ``lo``: ask for one step earlier and let clipping cut it.
    start = lo - source.step_ms if source.kind == "sampled" else lo
    return source.allocation(start, hi), source.capacity(start, hi)


def _add(acc: dict[K, float], mag: dict[K, float], rows: Iterable[tuple[K, float]], sign: float) -> None:
    for key, v in rows:
        acc[key] = acc.get(key, 0.0) + sign * v
        mag[key] = mag.get(key, 0.0) + abs(v)


def _cancelled(acc: Mapping[K, float], mag: Mapping[K, float]) -> bool:
    """True when some series lost all but 1e-6 of its terms' magnitude to the subtraction."""
    return any(m > 0.0 and abs(acc[key]) <= 1e-6 * m for key, m in mag.items())


@dataclass(frozen=True)
class DecayedUsage:
    """Decayed usage at ``as_of_ms`` that can be advanced with only the new slice of history.

    ``raw`` is keyed by ``(queue, resource)``; ``capacity`` by resource. Instances are immutable:
    :meth:`advance` returns a new one.
    """

    as_of_ms: int
    window_start_ms: int
    raw: Mapping[tuple[str, str], float]
    capacity: Mapping[str, float]

    @classmethod
    def compute(cls, source: UsageSource, as_of_ms: int, cfg: FairshareConfig) -> DecayedUsage:
        """Full recomputation over the whole window ending at ``as_of_ms``."""
        lo = cfg.window_start_ms(as_of_ms)
        h = cfg.decay_half_life_s
        alloc, cap = _fetch(source, lo, as_of_ms)
        a = integrate(alloc, _ALLOC_KEYS, lo, as_of_ms, as_of_ms, h, kind=source.kind, step_ms=source.step_ms)
        c = integrate(cap, _CAP_KEYS, lo, as_of_ms, as_of_ms, h, kind=source.kind, step_ms=source.step_ms)
        return cls(as_of_ms, lo, _to_nested(a), _to_flat(c))

    def advance(self, source: UsageSource, to_ms: int, cfg: FairshareConfig) -> DecayedUsage:
        """The usage at ``to_ms`` from this state and only the history in ``[as_of, to_ms)`` (plus, for a
        sliding window, the slice that left the window). Falls back to :meth:`compute` when nothing can be
        carried over (a tumbling boundary was crossed or the whole sliding window moved past)."""
        if to_ms < self.as_of_ms:
            raise DecayError(f"cannot advance usage backwards from {self.as_of_ms} to {to_ms}")
        if to_ms == self.as_of_ms:
            return self
        lo2 = cfg.window_start_ms(to_ms)
        if cfg.window_type == "tumbling" and lo2 != self.window_start_ms:
            return DecayedUsage.compute(source, to_ms, cfg)
        if lo2 >= self.as_of_ms:
            return DecayedUsage.compute(source, to_ms, cfg)
        h = cfg.decay_half_life_s
        k, step = source.kind, source.step_ms
        factor = 1.0 if h is None else math.exp2(-(to_ms - self.as_of_ms) / 1000.0 / h)
        raw = {key: v * factor for key, v in self.raw.items()}
        cap = {r: v * factor for r, v in self.capacity.items()}
        raw_mag = {key: abs(v) for key, v in raw.items()}
        cap_mag = {key: abs(v) for key, v in cap.items()}

        def part(lo: int, hi: int) -> tuple[dict[tuple[str, str], float], dict[str, float]]:
            """The decayed integral over [lo, hi) seen from ``to_ms``."""
            fa, fc = _fetch(source, lo, hi)
            a = integrate(fa, _ALLOC_KEYS, lo, hi, to_ms, h, kind=k, step_ms=step)
            c = integrate(fc, _CAP_KEYS, lo, hi, to_ms, h, kind=k, step_ms=step)
            return _to_nested(a), _to_flat(c)

        new_raw, new_cap = part(self.as_of_ms, to_ms)
        _add(raw, raw_mag, new_raw.items(), 1.0)
        _add(cap, cap_mag, new_cap.items(), 1.0)
        if lo2 > self.window_start_ms:  # sliding: take out what left the window, decayed to the new as-of
            old_raw, old_cap = part(self.window_start_ms, lo2)
            _add(raw, raw_mag, old_raw.items(), -1.0)
            _add(cap, cap_mag, old_cap.items(), -1.0)
            if _cancelled(raw, raw_mag) or _cancelled(cap, cap_mag):
                # Most of a series left the window: carried − left keeps an absolute error of a few ulps of
                # the terms, which would be large relative to what remains. Recompute that (rare) step.
                return DecayedUsage.compute(source, to_ms, cfg)
        return DecayedUsage(to_ms, lo2, raw, cap)

    def vectors(self) -> UsageVectors:
        """The state as sorted, normalised :class:`UsageVectors`."""
        return _vectors(self.raw, self.capacity)


def roll_up(vectors: UsageVectors, parents: Mapping[str, str | None]) -> UsageVectors:
    """Add every queue's usage to all its ancestors (``parents``: queue → parent or ``None``).

    Sources report leaf queues; KAI's division applies each parent's *own* usage, which is the sum of its
    children's (queue status sums its children). Decay and windowing are linear, so summing the decayed
    leaf values is exact. A parent cycle in bad input stops the walk instead of looping. Queues of the tree
    without usage are listed with 0.0.
    """
    # Every queue of the tree is listed, 0.0 when it used nothing: a reader sees "no usage", not "unknown".
    raw: dict[tuple[str, str], float] = {(q, r): 0.0 for q in parents for r in vectors.capacity}
    for q in sorted(vectors.raw):
        chain = [q]
        parent = parents.get(q)
        while parent is not None and parent not in chain:
            chain.append(parent)
            parent = parents.get(parent)
        for node in chain:
            for r, v in vectors.raw[q].items():
                raw[(node, r)] = raw.get((node, r), 0.0) + v
    return _vectors(raw, vectors.capacity)


def grid_usage(
    values: npt.NDArray[np.floating[Any]],
    ts_ms: npt.NDArray[np.int64],
    lo_ms: int,
    hi_ms: int,
    as_of_ms: int,
    half_life_s: int | None,
    step_ms: int,
) -> npt.NDArray[np.float64]:
    """Decayed integral over ``[lo_ms, hi_ms)`` of every row of a sampled grid (series × timestamps).

    The wide layout of a sampled history: ``values[i, j]`` is series ``i``'s sample at ``ts_ms[j]``,
    holding ``[ts_ms[j], ts_ms[j] + step_ms)``. Every series shares the timestamps, so the decay weights
    are one vector and the whole computation is one matrix-vector product (the fastest layout measured,
    see docs/fairshare.md); missing samples are 0.
    """
    if step_ms <= 0:
        raise DecayError(f"a sampled grid needs step_ms > 0, got {step_ms}")
    if values.ndim != 2 or values.shape[1] != ts_ms.shape[0]:
        raise DecayError(f"grid shape {values.shape} does not match {ts_ms.shape[0]} timestamps")
    a = np.maximum(ts_ms, lo_ms)
    b = np.minimum(ts_ms + step_ms, hi_ms)
    w = np.where(b > a, _weights(a, np.maximum(a, b), as_of_ms, half_life_s), 0.0)
    return np.asarray(values @ w.astype(values.dtype, copy=False), dtype=np.float64)
