"""Decay / window maths against hand-computed values, config validation, incremental == full recomputation."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairshare.config import FairshareConfig, FairshareConfigError
from fairshare.decay import DecayedUsage, DecayError, grid_usage, integrate, roll_up, usage_at
from fairshare.source import ALLOCATION_SCHEMA, CAPACITY_SCHEMA

LN2 = math.log(2.0)


def alloc(rows: list[tuple[int, str, str, float]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=ALLOCATION_SCHEMA, orient="row")


def cap(rows: list[tuple[int, str, float]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=CAPACITY_SCHEMA, orient="row")


# Queue a holds 1 GPU (1000 milli) over [0 s, 10 s), then nothing; the cluster has 4 GPUs throughout.
A = alloc([(0, "a", "gpu", 1000.0), (10_000, "a", "gpu", 0.0)])
C = cap([(0, "gpu", 4000.0)])


def test_no_half_life_is_a_plain_integral_in_resource_seconds() -> None:
    u = usage_at(A, C, 20_000, FairshareConfig(window_s=100), kind="exact")
    assert u.raw["a"]["gpu"] == pytest.approx(10_000.0, rel=1e-12)  # 1000 milli-GPU x 10 s
    assert u.capacity["gpu"] == pytest.approx(80_000.0, rel=1e-12)  # 4000 x 20 s
    assert u.normalised["a"]["gpu"] == pytest.approx(0.125, rel=1e-12)


def test_half_life_0_means_no_decay() -> None:
    with_zero = usage_at(A, C, 20_000, FairshareConfig(window_s=100, half_life_s=0), kind="exact")
    assert with_zero.raw["a"]["gpu"] == pytest.approx(10_000.0, rel=1e-12)


def test_decay_is_integrated_in_closed_form() -> None:
    # h = 10 s, as-of 20 s: ∫_0^10 0.5^((20-t)/10) dt = (10/ln2)(0.5^1 - 0.5^2) = 3.6067 s.
    u = usage_at(A, C, 20_000, FairshareConfig(window_s=100, half_life_s=10), kind="exact")
    assert u.raw["a"]["gpu"] == pytest.approx(1000 * (10 / LN2) * 0.25, rel=1e-12)
    assert u.capacity["gpu"] == pytest.approx(4000 * (10 / LN2) * 0.75, rel=1e-12)
    assert u.normalised["a"]["gpu"] == pytest.approx(1 / 12, rel=1e-12)


def test_one_piece_decays_by_half_per_half_life() -> None:
    # The same 10 s of use seen one half-life later weighs exactly half.
    cfg = FairshareConfig(window_s=1000, half_life_s=30)
    early = usage_at(A, C, 20_000, cfg, kind="exact").raw["a"]["gpu"]
    late = usage_at(A, C, 50_000, cfg, kind="exact").raw["a"]["gpu"]
    assert late == pytest.approx(early / 2, rel=1e-12)


def test_sliding_window_clips_the_piece_at_its_start() -> None:
    # Window 15 s at as-of 20 s is [5 s, 20 s): only [5, 10) of the use counts.
    u = usage_at(A, C, 20_000, FairshareConfig(window_s=15), kind="exact")
    assert u.raw["a"]["gpu"] == pytest.approx(5_000.0)
    assert u.capacity["gpu"] == pytest.approx(60_000.0)


def test_tumbling_window_restarts_at_each_boundary() -> None:
    cfg = FairshareConfig(window_s=15, window_type="tumbling", tumbling_anchor_ms=0)
    # Boundaries at 0, 15, 30 s. At 14 s the window is [0, 14): 10 s of use.
    assert usage_at(A, C, 14_000, cfg, kind="exact").raw["a"]["gpu"] == pytest.approx(10_000.0)
    # At 20 s the window is [15, 20): the use before the boundary is gone, capacity counts 5 s.
    after = usage_at(A, C, 20_000, cfg, kind="exact")
    assert after.raw["a"]["gpu"] == 0.0
    assert after.capacity["gpu"] == pytest.approx(20_000.0)
    # Exactly on a boundary the window is empty: no capacity, normalised usage 0 (not a division error).
    on = usage_at(A, C, 30_000, cfg, kind="exact")
    assert on.capacity["gpu"] == 0.0 and on.normalised["a"]["gpu"] == 0.0


def test_tumbling_anchor_offsets_the_boundaries_and_a_future_anchor_gives_an_empty_window() -> None:
    cfg = FairshareConfig(window_s=15, window_type="tumbling", tumbling_anchor_ms=7_000)
    # Boundaries at 7, 22 s: at 20 s the window is [7, 20): use over [7, 10).
    assert usage_at(A, C, 20_000, cfg, kind="exact").raw["a"]["gpu"] == pytest.approx(3_000.0)
    future = FairshareConfig(window_s=15, window_type="tumbling", tumbling_anchor_ms=60_000)
    assert usage_at(A, C, 20_000, future, kind="exact").capacity["gpu"] == 0.0


def test_sampled_rows_hold_one_step_and_are_clipped_at_the_window_start() -> None:
    s = alloc([(0, "a", "gpu", 1000.0), (10_000, "a", "gpu", 500.0)])
    c = cap([(0, "gpu", 2000.0), (10_000, "gpu", 2000.0)])
    whole = usage_at(s, c, 25_000, FairshareConfig(window_s=100), kind="sampled", step_ms=10_000)
    assert whole.raw["a"]["gpu"] == pytest.approx(15_000.0)  # 1000 x 10 s + 500 x 10 s; nothing after 20 s
    # Window [13 s, 25 s): the sample at 10 s holds [10, 20), of which 7 s are inside.
    clipped = usage_at(s, c, 25_000, FairshareConfig(window_s=12), kind="sampled", step_ms=10_000)
    assert clipped.raw["a"]["gpu"] == pytest.approx(3_500.0)
    assert clipped.capacity["gpu"] == pytest.approx(14_000.0)


def test_queues_and_resources_come_out_sorted_with_every_resource() -> None:
    a = alloc([(0, "zeta", "cpu", 5.0), (0, "alpha", "gpu", 1.0), (0, "mid", "memory", 7.0)])
    u = usage_at(a, C, 1_000, FairshareConfig(window_s=10), kind="exact")
    assert list(u.raw) == ["alpha", "mid", "zeta"]
    assert all(list(per) == ["cpu", "gpu", "memory"] for per in u.raw.values())
    assert list(u.capacity) == ["cpu", "gpu", "memory"]
    # No cpu capacity reported: normalised cpu usage is 0, not a division by zero.
    assert u.normalised["zeta"]["cpu"] == 0.0


def test_later_row_at_the_same_time_is_the_one_that_holds() -> None:
    a = alloc([(0, "a", "gpu", 9999.0), (0, "a", "gpu", 1000.0)])
    assert usage_at(a, C, 10_000, FairshareConfig(window_s=10), kind="exact").raw["a"]["gpu"] == 10_000.0


def test_roll_up_gives_parents_the_sum_of_their_children() -> None:
    a = alloc([(0, "a", "gpu", 1000.0), (0, "b", "gpu", 3000.0)])
    u = roll_up(usage_at(a, C, 10_000, FairshareConfig(window_s=10), kind="exact"), {"a": "p", "b": "p"})
    assert u.raw["p"]["gpu"] == pytest.approx(40_000.0)
    assert u.normalised["p"]["gpu"] == pytest.approx(1.0)
    assert u.normalised["a"]["gpu"] == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("frame", "kind", "step", "message"),
    [
        (A, "sampled", 0, "step_ms > 0"),
        (A, "guess", 0, "unknown usage source kind 'guess'"),
        (A.drop("queue"), "exact", 0, "allocation frame lacks column(s) queue"),
    ],
)
def test_bad_frames_and_kinds_get_a_specific_error(
    frame: pl.DataFrame, kind: str, step: int, message: str
) -> None:
    with pytest.raises(DecayError, match=message.replace("(", r"\(").replace(")", r"\)")):
        usage_at(frame, C, 10_000, FairshareConfig(), kind=kind, step_ms=step)


def test_the_grid_layout_gives_the_same_usage_as_long_frames() -> None:
    ts = np.arange(0, 100_000, 10_000, dtype=np.int64)
    values = np.array([[float(i * j) for j in range(len(ts))] for i in (1, 2, 3)])
    # Window [25 s, 95 s): the sample at 20 s is clipped to 5 s, the one at 90 s to 5 s.
    g = grid_usage(values, ts, 25_000, 95_000, 95_000, 30, 10_000)
    rows = [(int(t), f"q{i}", "gpu", float(values[i, j])) for i in range(3) for j, t in enumerate(ts)]
    long = integrate(
        alloc(rows), ("queue", "resource"), 25_000, 95_000, 95_000, 30, kind="sampled", step_ms=10_000
    )
    assert long["value"].to_list() == pytest.approx(list(g), rel=1e-12)
    with pytest.raises(DecayError, match="does not match"):
        grid_usage(values, ts[:3], 0, 1, 1, None, 10_000)


# ---------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"window_s": 0}, ["window_s = 0", "> 0"]),
        ({"window_s": -5}, ["window_s = -5"]),
        ({"refresh_s": 0}, ["refresh_s = 0"]),
        ({"half_life_s": -1}, ["half_life_s = -1"]),
        ({"k_value": -0.5}, ["k_value = -0.5"]),
        ({"window_type": "cron"}, ["window_type = 'cron'", "sliding, tumbling"]),
        ({"staleness_s": -1}, ["staleness_s = -1"]),
        ({"windw_s": 10}, ["windw_s: unknown field"]),
    ],
)
def test_config_errors_name_the_field_and_the_value(fields: dict[str, object], names: list[str]) -> None:
    with pytest.raises(FairshareConfigError) as err:
        FairshareConfig.from_mapping(fields)
    for n in names:
        assert n in str(err.value)


def test_config_is_frozen_and_has_kai_defaults() -> None:
    cfg = FairshareConfig()
    assert (cfg.k_value, cfg.window_s, cfg.window_type, cfg.refresh_s, cfg.staleness_s) == (
        1.0,
        7 * 24 * 3600,
        "sliding",
        60,
        300,
    )
    assert cfg.decay_half_life_s is None
    with pytest.raises(Exception, match="frozen"):
        cfg.k_value = 2.0  # type: ignore[misc]


# ----------------------------------------------------------------------- incremental == full


class FrameSource:
    """A usage source over fixed frames, with either kind's slicing rules."""

    def __init__(self, a: pl.DataFrame, c: pl.DataFrame, kind: str, step_ms: int) -> None:
        self.a, self.c, self.kind, self.step_ms = a, c, kind, step_ms

    def _slice(self, df: pl.DataFrame, keys: list[str], start: int, end: int) -> pl.DataFrame:
        if self.kind == "sampled":
            return df.filter((pl.col("ts_ms") >= start) & (pl.col("ts_ms") < end))
        before = df.filter(pl.col("ts_ms") <= start).group_by(keys, maintain_order=True).last()
        inside = df.filter((pl.col("ts_ms") > start) & (pl.col("ts_ms") < end))
        return pl.concat([before.select(df.columns), inside])

    def allocation(self, start_ms: int, end_ms: int) -> pl.DataFrame:
        return self._slice(self.a, ["queue", "resource"], start_ms, end_ms)

    def capacity(self, start_ms: int, end_ms: int) -> pl.DataFrame:
        return self._slice(self.c, ["resource"], start_ms, end_ms)


@st.composite
def histories(draw: st.DrawFn) -> tuple[FrameSource, FairshareConfig, list[int]]:
    kind = draw(st.sampled_from(["exact", "sampled"]))
    step = draw(st.sampled_from([1_000, 7_000, 30_000])) if kind == "sampled" else 0
    n = draw(st.integers(1, 40))
    if kind == "sampled":
        times = sorted({draw(st.integers(0, 300)) * step for _ in range(n)})
    else:
        times = sorted(draw(st.lists(st.integers(0, 3_000_000), min_size=n, max_size=n)))
    rows = [
        (
            t,
            draw(st.sampled_from(["q1", "q2", "q3"])),
            draw(st.sampled_from(["gpu", "cpu"])),
            draw(st.floats(0, 1e6)),
        )
        for t in times
    ]
    caps = [
        (t, r, draw(st.floats(1, 1e7))) for t in times[:: max(1, len(times) // 3)] for r in ("gpu", "cpu")
    ]
    half = draw(st.sampled_from([None, 0, 1, 60, 3600, 10**7]))
    window_type = draw(st.sampled_from(["sliding", "tumbling"]))
    window_s = draw(st.integers(1, 2000))
    cfg = FairshareConfig(
        half_life_s=half,
        window_s=window_s,
        window_type=window_type,
        tumbling_anchor_ms=draw(st.integers(-1_000_000, 1_000_000)),
    )
    # Steps mostly shorter than the window, so the carried-over state and the slice that leaves a sliding
    # window are both exercised (a step longer than the window falls back to a full computation).
    t = draw(st.integers(1, 3_000_000))
    checkpoints = [t]
    for _ in range(draw(st.integers(1, 8))):
        t += draw(st.integers(1, window_s * 1000))
        checkpoints.append(t)
    return FrameSource(alloc(rows), cap(caps), kind, step), cfg, checkpoints


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_incremental_advance_equals_full_recomputation(
    case: tuple[FrameSource, FairshareConfig, list[int]],
) -> None:
    source, cfg, checkpoints = case
    state = DecayedUsage.compute(source, checkpoints[0], cfg)
    for t in checkpoints[1:]:
        prev = state
        state = state.advance(source, t, cfg)
        full = DecayedUsage.compute(source, t, cfg)
        pairs = [(state.raw, full.raw, prev.raw), (state.capacity, full.capacity, prev.capacity)]
        for inc, ful, before in pairs:
            for key in set(ful) | set(inc):
                got, want, was = inc.get(key, 0.0), ful.get(key, 0.0), before.get(key, 0.0)  # type: ignore[call-overload]
                tol = 1e-300  # below float64's normal range no relative precision exists at all
                assert math.isclose(got, want, rel_tol=1e-9, abs_tol=tol), (key, got, want, was)
