"""Fairshare maths benchmark: decayed usage over a month of 30 s samples, polars vs DuckDB vs a numpy grid.

Workload (defaults): ``--queues`` 1000 queues × 3 resources, 30 days at a 30 s step = 86,400 timestamps,
so 259.2 M samples; sliding window of 30 days, half-life 7 days, as-of = the end of the data. The data
sits inside each engine before timing (as for the audit store numbers), times are the best of
``--repeat`` runs, and both engines use every core (``--threads``, 2 on the reference machine).

Jobs measured:

* **full**: decayed usage of every series from all samples in the window;
  - ``grid/numpy``: wide layout, one weight vector per timestamp, one matrix-vector product
    (:func:`fairshare.decay.grid_usage`, float64; the product path);
  - ``grid/polars``: the same wide layout as a polars frame, ``col.dot(w)`` per series;
  - ``long/polars``: the generic long-frame path (:func:`fairshare.decay.integrate`: clip, closed-form
    weights, ``group_by(queue, resource)``) on ``--long-queues`` queues, scaled linearly to the workload;
  - ``long/duckdb``: ``SUM(value * w) … JOIN weights USING (ts) GROUP BY series`` on the same reduced size;
* **exact**: the event-log ledger (``--exact-pods`` pod lifecycles over the same days and queues): fold
  throughput from JSON records, a full computation over the step rows and a one-minute advance;
* **incremental**: one more 30 s interval (one new sample per series, and for the sliding window the one
  that leaves it) through :meth:`fairshare.decay.DecayedUsage.advance` (the product path, polars over
  3,000-row frames) and the grid form (``U·0.5^(Δ/h) + new − old`` as numpy vectors).

Run: ``python benchmarks/bench_fairshare.py [--queues 1000] [--days 30] [--long-queues 100] [--json]``.
The full grid needs ``queues × 3 × timestamps × 8`` bytes (2.1 GB at the defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections.abc import Callable
from typing import Any, TypeVar

import duckdb
import numpy as np
import polars as pl

from fairshare.config import FairshareConfig
from fairshare.decay import DecayedUsage, _weights, grid_usage, integrate
from fairshare.source import ALLOCATION_SCHEMA, CAPACITY_SCHEMA, RESOURCES

T = TypeVar("T")
STEP_MS = 30_000
HALF_LIFE_S = 7 * 86_400


def best(fn: Callable[[], T], repeat: int) -> tuple[float, T]:
    """The shortest wall time of ``repeat`` runs and the last result."""
    times = []
    out: Any = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def long_frame(values: np.ndarray, ts: np.ndarray, queues: int) -> pl.DataFrame:
    """The long layout of the first ``queues`` queues of the grid (rows ordered by series, then time)."""
    n = queues * len(RESOURCES)
    names = np.array([f"q{i // len(RESOURCES):04d}" for i in range(n)])
    res = np.array([RESOURCES[i % len(RESOURCES)] for i in range(n)])
    return pl.DataFrame(
        {
            "ts_ms": np.tile(ts, n),
            "queue": np.repeat(names, len(ts)),
            "resource": np.repeat(res, len(ts)),
            "value": values[:n].ravel(),
        },
        schema=ALLOCATION_SCHEMA,
    )


class SliceSource:
    """A sampled usage source answering only from given slices (what Prometheus returns for one interval)."""

    kind = "sampled"
    step_ms = STEP_MS

    def __init__(self, slices: dict[tuple[int, int], tuple[pl.DataFrame, pl.DataFrame]]) -> None:
        self.slices = slices

    def _get(self, start: int, end: int) -> tuple[pl.DataFrame, pl.DataFrame]:
        for (lo, hi), frames in self.slices.items():
            if lo <= start and end <= hi:
                return frames
        raise KeyError((start, end))

    def allocation(self, start_ms: int, end_ms: int) -> pl.DataFrame:
        return self._get(start_ms, end_ms)[0]

    def capacity(self, start_ms: int, end_ms: int) -> pl.DataFrame:
        return self._get(start_ms, end_ms)[1]


def bench_exact(pods: int, queues: int, days: int) -> dict[str, Any]:
    """The event-log path: fold ``pods`` pod lifecycles (group, submit, bind, finish: 4 events each) from
    their JSON records, then a full decayed computation and a one-minute incremental step."""
    import random

    from fairshare.ledger import EventLedger
    from ingest import events as ev
    from ingest.events import dump_event

    rng = random.Random(3)
    span = days * 86_400_000
    events: list[ev.EventBase] = [
        ev.NodeUpserted(at_ms=0, name=f"n{i}", cpu_millicores=64_000, memory_bytes=2**38, gpus=8)
        for i in range(500)
    ]
    events += [ev.QueueUpserted(at_ms=0, name=f"q{i:04d}") for i in range(queues)]
    timeline: list[tuple[int, int, ev.EventBase]] = []
    for p in range(pods):
        q, t, d = f"q{rng.randrange(queues):04d}", rng.randrange(span), rng.randrange(60_000, 86_400_000)
        req = ev.PodRequests(gpus=rng.choice([1, 2, 4, 8]), cpu_millicores=4000, memory_bytes=2**34)
        timeline += [
            (t, 0, ev.PodGroupUpserted(at_ms=t, name=f"g{p}", namespace="ns", queue=q, created_at_ms=t)),
            (
                t,
                1,
                ev.PodSubmitted(
                    at_ms=t, name=f"p{p}", namespace="ns", pod_group=f"g{p}", requests=req, created_at_ms=t
                ),
            ),
            (t, 2, ev.PodBound(at_ms=t, name=f"p{p}", namespace="ns", node="n0")),
            (t + d, 3, ev.PodFinished(at_ms=t + d, name=f"p{p}", namespace="ns", phase="Succeeded")),
        ]
    timeline.sort(key=lambda x: (x[0], x[1]))
    records = [dump_event(e) for e in events + [e for _, _, e in timeline]]
    ledger = EventLedger()
    t0 = time.perf_counter()
    for r in records:
        ledger.fold_record(r)
    fold_s = time.perf_counter() - t0
    cfg = FairshareConfig(window_s=days * 86_400, half_life_s=HALF_LIFE_S)
    as_of = ledger.as_of_ms or 0
    t_full, state = best(lambda: DecayedUsage.compute(ledger, as_of, cfg), 3)
    for i in range(50):  # one more minute: 50 pods bound
        ledger.fold(
            ev.PodSubmitted(
                at_ms=as_of + i * 1000, name=f"x{i}", namespace="ns", pod_group="g1", created_at_ms=0
            )
        )
        ledger.fold(ev.PodBound(at_ms=as_of + i * 1000 + 1, name=f"x{i}", namespace="ns", node="n0"))
    t_inc, _ = best(lambda: state.advance(ledger, as_of + 60_000, cfg), 3)
    return {
        "events": len(records),
        "step_rows": ledger.allocation(0, 2**62).height,
        "fold_us_per_event": round(fold_s / len(records) * 1e6, 1),
        "full_s": round(t_full, 3),
        "advance_ms": round(t_inc * 1000, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=1000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--long-queues", type=int, default=100, help="queues for the long-layout runs")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument(
        "--exact-pods", type=int, default=100_000, help="pods for the event-log (exact) run; 0 skips"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = ap.parse_args()

    n_ts = args.days * 86_400_000 // STEP_MS
    n_series = args.queues * len(RESOURCES)
    as_of = n_ts * STEP_MS
    window_s = args.days * 86_400
    lo = as_of - window_s * 1000
    rng = np.random.default_rng(7)
    ts = np.arange(n_ts, dtype=np.int64) * STEP_MS
    grid = rng.random((n_series, n_ts))  # fills in place: no second copy of 2 GB
    out: dict[str, Any] = {
        "workload": {
            "queues": args.queues,
            "resources": len(RESOURCES),
            "timestamps": n_ts,
            "samples": n_series * n_ts,
            "step_s": STEP_MS // 1000,
            "window_days": args.days,
            "half_life_days": HALF_LIFE_S // 86_400,
            "cpu_cores": os.cpu_count(),
            "threads": args.threads,
            "grid_gb": round(grid.nbytes / 1e9, 2),
        }
    }

    # --- full: grid / numpy (the product path)
    t_np, u_np = best(lambda: grid_usage(grid, ts, lo, as_of, as_of, HALF_LIFE_S, STEP_MS), args.repeat)
    out["full_grid_numpy_s"] = round(t_np, 4)

    # --- full: grid / polars (a wide frame: one column per series; built without copying where possible)
    wide = pl.DataFrame({f"s{i}": grid[i] for i in range(n_series)})
    w = pl.Series("w", _weights(ts, ts + STEP_MS, as_of, HALF_LIFE_S))
    t_plw, u_plw = best(lambda: wide.select([pl.col(c).dot(w) for c in wide.columns]).row(0), args.repeat)
    out["full_grid_polars_s"] = round(t_plw, 4)
    assert np.allclose(np.array(u_plw), u_np, rtol=1e-9)
    wide = pl.DataFrame()  # free the copy before the next run

    # --- full: long / polars (generic path) and long / duckdb, on fewer queues, scaled to the workload
    lq = min(args.long_queues, args.queues)
    scale = args.queues / lq
    long = long_frame(grid, ts, lq)
    t_pll, u_pll = best(
        lambda: integrate(
            long, ("queue", "resource"), lo, as_of, as_of, HALF_LIFE_S, kind="sampled", step_ms=STEP_MS
        ),
        args.repeat,
    )
    by_series = {(q, r): v for q, r, v in u_pll.iter_rows()}
    for i in range(lq * len(RESOURCES)):
        key = (f"q{i // len(RESOURCES):04d}", RESOURCES[i % len(RESOURCES)])
        assert np.isclose(by_series[key], u_np[i], rtol=1e-9), key
    out["full_long_polars_s"] = {
        "rows": long.height,
        "s": round(t_pll, 3),
        "scaled_s": round(t_pll * scale, 2),
    }
    long = pl.DataFrame()

    con = duckdb.connect()
    con.execute(f"SET threads = {args.threads}")
    n_long = lq * len(RESOURCES)
    # The same values, loaded into DuckDB from numpy column by column (no pyarrow here).
    con.execute("CREATE TABLE t (ts_idx INTEGER, series SMALLINT, value DOUBLE)")
    idx = np.arange(n_ts, dtype=np.int32)
    for i in range(n_long):
        con.register("col", {"ts_idx": idx, "series": np.full(n_ts, i, dtype=np.int16), "value": grid[i]})
        con.execute("INSERT INTO t SELECT * FROM col")
        con.unregister("col")
    con.register("wts", {"ts_idx": idx, "w": w.to_numpy()})
    con.execute("CREATE TABLE wt AS SELECT * FROM wts")
    q = "SELECT series, SUM(value * w) AS u FROM t JOIN wt USING (ts_idx) GROUP BY series ORDER BY series"
    t_dk, u_dk = best(lambda: con.execute(q).fetchall(), args.repeat)
    assert np.allclose(np.array([r[1] for r in u_dk]), u_np[:n_long], rtol=1e-9)
    out["full_long_duckdb_s"] = {
        "rows": n_long * n_ts,
        "s": round(t_dk, 3),
        "scaled_s": round(t_dk * scale, 2),
    }
    con.close()

    # --- incremental: one more interval
    cfg = FairshareConfig(window_s=window_s, half_life_s=HALF_LIFE_S)
    queues = np.array([f"q{i // len(RESOURCES):04d}" for i in range(n_series)])
    res = np.array([RESOURCES[i % len(RESOURCES)] for i in range(n_series)])

    def one_sample(j: int, value: np.ndarray) -> tuple[pl.DataFrame, pl.DataFrame]:
        a = pl.DataFrame(
            {"ts_ms": np.full(n_series, j * STEP_MS), "queue": queues, "resource": res, "value": value},
            schema=ALLOCATION_SCHEMA,
        )
        c = pl.DataFrame(
            {"ts_ms": [j * STEP_MS] * 3, "resource": list(RESOURCES), "value": [float(n_series)] * 3},
            schema=CAPACITY_SCHEMA,
        )
        return a, c

    state = DecayedUsage(
        as_of,
        lo,
        {(str(q), str(r)): float(v) for q, r, v in zip(queues, res, u_np, strict=True)},
        {r: 1.0 for r in RESOURCES},
    )
    new_value = rng.random(n_series)
    # advance(as_of -> as_of + step) reads [as_of - step, as_of + step) (the last sample, which ends at as_of,
    # is clipped away, and the new one) and [lo - step, lo + step) for the sample leaving the window.
    last_a, last_c = one_sample(n_ts - 1, grid[:, -1])
    new_a, new_c = one_sample(n_ts, new_value)
    old_a, old_c = one_sample(0, grid[:, 0])
    prev_a, prev_c = one_sample(-1, np.zeros(n_series))
    src = SliceSource(
        {
            (as_of - STEP_MS, as_of + STEP_MS): (pl.concat([last_a, new_a]), pl.concat([last_c, new_c])),
            (lo - STEP_MS, lo + STEP_MS): (pl.concat([prev_a, old_a]), pl.concat([prev_c, old_c])),
        }
    )
    t_inc, advanced = best(lambda: state.advance(src, as_of + STEP_MS, cfg), max(args.repeat, 5))
    # Check against the grid maths: U·d + new·w_new − old·w_old.
    d = 2.0 ** (-STEP_MS / 1000 / HALF_LIFE_S)
    w_new = _weights(np.array([as_of]), np.array([as_of + STEP_MS]), as_of + STEP_MS, HALF_LIFE_S)[0]
    w_old = _weights(np.array([lo]), np.array([lo + STEP_MS]), as_of + STEP_MS, HALF_LIFE_S)[0]

    def grid_inc() -> np.ndarray:
        return np.asarray(u_np * d + new_value * w_new - grid[:, 0] * w_old)

    t_ginc, u_inc = best(grid_inc, max(args.repeat, 5))
    got = np.array([advanced.raw[(str(q), str(r))] for q, r in zip(queues, res, strict=True)])
    assert np.allclose(got, u_inc, rtol=1e-9), "incremental advance disagrees with the grid maths"
    out["incremental_advance_polars_ms"] = round(t_inc * 1000, 2)
    out["incremental_grid_numpy_ms"] = round(t_ginc * 1000, 3)
    if args.exact_pods:
        out["exact_eventlog"] = bench_exact(args.exact_pods, args.queues, args.days)
    out["peak_rss_gb"] = round(rss_gb(), 2)

    if args.json:
        print(json.dumps(out, indent=2))
        return
    wl = out["workload"]
    size = (
        f"queues={wl['queues']} resources={wl['resources']} timestamps={wl['timestamps']} step_s={wl['step_s']}"
        f" window_days={wl['window_days']} samples={wl['samples']}"
    )
    print(f"bench: fairshare_full_grid_numpy {size} seconds={out['full_grid_numpy_s']:.3f}")
    print(f"bench: fairshare_full_grid_polars {size} seconds={out['full_grid_polars_s']:.3f}")
    for name in ("full_long_polars_s", "full_long_duckdb_s"):
        r = out[name]
        label = name.removesuffix("_s")
        print(
            f"bench: fairshare_{label} {size} rows={r['rows']} measured_seconds={r['s']:.3f} seconds={r['scaled_s']:.3f}"
        )
    ms = out["incremental_advance_polars_ms"]
    print(f"bench: fairshare_incremental_polars {size} series={n_series} seconds={ms / 1000:.5f}")
    print(f"bench: fairshare_incremental_numpy {size} seconds={out['incremental_grid_numpy_ms'] / 1000:.6f}")
    if "exact_eventlog" in out:
        x = out["exact_eventlog"]
        print(
            f"bench: fairshare_exact_eventlog events={x['events']} step_rows={x['step_rows']}"
            f" fold_us_per_event={x['fold_us_per_event']} advance_seconds={x['advance_ms'] / 1000:.4f}"
            f" seconds={x['full_s']:.3f}"
        )
    print(f"bench: fairshare_peak_rss {size} gigabytes={out['peak_rss_gb']:.2f} seconds=0")


if __name__ == "__main__":
    main()
