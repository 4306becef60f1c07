"""``hourglass report``: what each queue deserved, got and used over a time window (docs/report.md).

Every figure is an aggregate over the SQL views of :mod:`analytics.audit.views`, clipped to the window
``[from, to)``, so it can be re-derived with ``hourglass sql``:

* GPU-/CPU-hours received: ``pod_runs`` (``PodBound`` → ``PodFinished`` integrals of what each pod held);
* deserved, fair share (with and without the kValue term), allocated, requested, decayed usage: time-weighted
  means over ``queue_intervals`` (each cycle's division held until the next recorded cycle);
* fair-share GPU-hours: the integral of ``gpu_fair_share_capped`` (the fair share scaled down to the cluster
  when the top queues' fair shares exceed the capacity);
* waits: ``job_waits`` (nearest-rank percentiles of jobs first bound in the window);
* evictions: ``evictions``; pending reasons: ``pending_intervals`` (job-hours pending per reason);
* cluster: ``capacity_changes``, ``fragmentation_changes``; Jain's index over the leaf queues'
  GPU-hours divided by their deserved GPU quota.

A parent queue's figures are those of its subtree (its children's GPU-hours, jobs and evictions added up;
the engine's own division of the parent for deserved / fair share / allocated).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import duckdb

from analytics.audit.store import AuditStore, StoreError, bind_history, connect_readonly, resolve_store
from analytics.audit.views import create_views, views_current
from analytics.fairness import received_over_fair_share

__all__ = [
    "EVICTION_KINDS",
    "ClusterRow",
    "QueueRow",
    "Report",
    "ReportError",
    "Window",
    "build_report",
    "connect",
    "jain_index",
    "nearest_rank",
    "parse_time",
    "queue_story",
    "render",
    "report_from",
]

MS_PER_HOUR: Final = 3_600_000
MS_PER_DAY: Final = 86_400_000
GPU_MILLI: Final = 1000
EVICTION_KINDS: Final = ("reclaim", "preempt", "consolidation", "other")
LONG_WAIT_MS: Final = MS_PER_HOUR
# Times below ten years since the epoch are logical (simulated) times, shown as offsets from t = 0.
_LOGICAL_LIMIT_MS: Final = 10 * 365 * MS_PER_DAY
_BUCKETS: Final = (
    (MS_PER_HOUR, "hour"),
    (MS_PER_DAY, "day"),
    (7 * MS_PER_DAY, "week"),
    (30 * MS_PER_DAY, "30 days"),
)
_MAX_BUCKETS: Final = 40
_MATERIALISED: Final = ("cycle_spans", "pod_runs")
_REL = re.compile(r"^\+?(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d|w)$")
_UNIT_MS: Final = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": MS_PER_HOUR,
    "d": MS_PER_DAY,
    "w": 7 * MS_PER_DAY,
}


class ReportError(ValueError):
    """Bad report input: an unknown queue, an unreadable time, an empty window, a store without data."""


@dataclass(frozen=True)
class Window:
    """The query window ``[from_ms, to_ms)`` and the store's own span."""

    from_ms: int
    to_ms: int
    store_first_ms: int
    store_last_ms: int

    @property
    def length_ms(self) -> int:
        return self.to_ms - self.from_ms


@dataclass
class QueueRow:
    """One queue over the window (a parent: its subtree). GPU figures in GPUs, times in seconds."""

    name: str
    parent: str | None
    depth: int
    leaf: bool
    deserved_gpus: float | None  # time-weighted mean; None = unlimited
    fair_share_gpus: float  # with the kValue term, capped at capacity
    fair_share_classic_gpus: float  # without it, capped at capacity
    fair_share_uncapped_gpus: float  # as the engine recorded it
    allocated_gpus: float
    requested_gpus: float
    gpu_hours: float  # received, from the event log
    cpu_hours: float  # core-hours received
    fair_share_gpu_hours: float  # capped
    fair_share_classic_gpu_hours: float
    fair_share_uncapped_gpu_hours: float
    deserved_gpu_hours: float | None
    usage_end: float  # decayed usage share the last cycle of the window saw
    usage_mean: float
    cluster_share: float  # gpu_hours / capacity GPU-hours
    received_over_fair_share: float | None
    jobs_started: int
    jobs_waiting_at_end: int
    longest_waiting_s: float | None
    wait_p50_s: float | None
    wait_p90_s: float | None
    wait_p99_s: float | None
    jobs_waited_over_1h: int
    evictions_suffered: dict[str, int]
    evictions_caused: dict[str, int]
    pending_reasons: list[dict[str, Any]]  # reason, job_hours, jobs, message; most job-hours first


@dataclass
class ClusterRow:
    """The cluster over the window."""

    capacity_gpus: float  # time-weighted mean
    capacity_gpu_hours: float
    gpu_hours_allocated: float  # held by pods, from the event log
    allocation_ratio: float
    idle_gpus: float  # mean capacity - held
    fragmented_gpus: float  # mean idle GPUs on nodes where the probe request does not fit
    fragmented_gpus_at_end: float
    fragmentation_probe: dict[str, int] | None
    fair_share_capped_fraction: float  # of the window during which fair shares were scaled to capacity
    top_fair_share_gpus_max: float
    jain_index: float | None
    jain_queues: int
    evictions: dict[str, int]


@dataclass
class Report:
    """Everything ``hourglass report`` shows, in plain data (``asdict`` gives the JSON)."""

    store: str
    window: Window
    cluster: ClusterRow
    queues: list[QueueRow]
    jain_trend: list[dict[str, Any]]  # bucket start / end ms, index, queues, allocation ratio
    bucket: str
    notes: list[str] = field(default_factory=list)
    focus: str | None = None
    # Topology (gang_placements): per leaf queue, the gangs with a topology constraint first placed in the
    # window, and how many of those with a preferred level got it (docs/topology.md).
    placements: list[dict[str, Any]] = field(default_factory=list)
    # Per node pool, the task types fgd / frag-aware score against at the window's end
    # (analytics/reports/workload.py).
    workload: list[dict[str, Any]] = field(default_factory=list)
    # Per node pool, fragmented GPUs over the window and per bucket (analytics/reports/pool_fragmentation.py).
    pool_fragmentation: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["window"]["from"] = fmt_time(self.window.from_ms)
        d["window"]["to"] = fmt_time(self.window.to_ms)
        if self.focus is not None:
            d["story"] = queue_story(self, self.focus)
        return d


# --------------------------------------------------------------------------- formatting helpers


def fmt_time(ms: int) -> str:
    """A logical time as ``t+3d 04:05`` (simulations start at 0), a wall-clock one as ISO 8601 UTC."""
    if abs(ms) < _LOGICAL_LIMIT_MS:
        days, rem = divmod(int(ms), MS_PER_DAY)
        h, rem = divmod(rem, MS_PER_HOUR)
        m, rem = divmod(rem, 60_000)
        s = round(rem / 1000)
        tail = f":{s:02d}" if s else ""
        return f"t+{days}d {h:02d}:{m:02d}{tail}"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat().replace("+00:00", "Z")


def fmt_duration(seconds: float | None) -> str:
    """Seconds in the largest sensible unit."""
    if seconds is None:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def parse_time(text: str, first_ms: int) -> int:
    """``--from`` / ``--to``: integer ms, an offset from the store's start (``36h``, ``+2d``), or ISO 8601."""
    t = text.strip()
    if re.fullmatch(r"-?\d+", t):
        return int(t)
    m = _REL.match(t)
    if m:
        return first_ms + round(float(m.group(1)) * _UNIT_MS[m.group(2)])
    try:
        when = dt.datetime.fromisoformat(t)
    except ValueError:
        raise ReportError(
            f"cannot read the time {text!r}: give milliseconds, an offset from the store's start (36h, 2d,"
            " 90m) or an ISO 8601 date/time"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return round(when.timestamp() * 1000)


def nearest_rank(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile ``q`` in (0, 1] of already sorted values (None for none)."""
    if not sorted_values:
        return None
    return sorted_values[max(math.ceil(q * len(sorted_values)) - 1, 0)]


def jain_index(values: Iterable[float]) -> float | None:
    """Jain's fairness index (Σx)² / (n·Σx²): 1 when all are equal, 1/n when one gets everything."""
    xs = list(values)
    sq = sum(x * x for x in xs)
    if not xs or sq == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * sq)


# --------------------------------------------------------------------------- store access


def connect(store: Path | str) -> tuple[duckdb.DuckDBPyConnection, Path]:
    """Open the store read-only, with the current report views.

    The views are (re)written into the file first, so `hourglass sql` sees the same definitions the report
    used, also on a store written by an older version; if the file cannot be written (another process
    holds the write lock, a read-only copy), they are made for this connection only.
    """
    try:
        db = resolve_store(store)
    except StoreError as e:
        raise ReportError(str(e)) from e
    try:
        con = connect_readonly(db)
    except StoreError as e:
        raise ReportError(str(e)) from e
    temporary = False
    try:
        bind_history(con, db)
        if not views_current(con):
            # An older store (or older views): rewrite them in the file so `hourglass sql` sees the same
            # definitions; if it cannot be written (another process holds the write lock, a read-only
            # copy), make them for this connection only.
            con.close()
            try:
                AuditStore(db).close()
            except duckdb.Error:
                temporary = True
            con = connect_readonly(db)
            bind_history(con, db)
            if temporary:
                create_views(con, temporary=True)
        if not temporary:
            # The report reads these views many times: compute them once. A temporary table shadows the
            # stored view of the same name, also inside the other views, for this connection only.
            for name in _MATERIALISED:
                con.execute(f"CREATE TEMP TABLE {name} AS SELECT * FROM main.{name}")
    except StoreError as e:
        con.close()
        raise ReportError(str(e)) from e
    except duckdb.Error as e:
        con.close()
        raise ReportError(f"{db}: not an audit store ({e})") from e
    return con, db


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run *sql* with the positional parameters it uses (``$1``… ; DuckDB refuses unused ones)."""
    used = {int(m) for m in re.findall(r"\$(\d+)", sql)}
    if not used:
        return con.execute(sql).fetchall()
    values = {str(i): params[i - 1] for i in used}
    return con.execute(sql, values).fetchall()


def _overlap(start: str = "start_ms", end: str = "end_ms") -> str:
    """SQL: the part of ``[start, end)`` inside the window ``[$1, $2)`` (ms)."""
    return f"greatest(0, least({end}, $2) - greatest({start}, $1))"


# --------------------------------------------------------------------------- the report


def build_report(
    store: Path | str, from_: str | None = None, to: str | None = None, queue: str | None = None
) -> Report:
    """Compute the report over ``[from_, to)`` (default: the store's whole span)."""
    con, db = connect(store)
    try:
        return report_from(con, str(db), from_, to, queue)
    finally:
        con.close()


def report_from(
    con: duckdb.DuckDBPyConnection, db: str, from_: str | None, to: str | None, focus: str | None
) -> Report:
    """:func:`build_report` on a connection from :func:`connect`."""
    try:
        return _build(con, db, from_, to, focus)
    except duckdb.Error as e:
        raise ReportError(f"{db}: query failed: {e}") from e


def _clip_to_store(lo: int, hi: int, first: int, last: int) -> tuple[int, int, list[str]]:
    """The window ``[lo, hi)`` within the store's span ``[first, last]``, and a note when it was clipped.

    Outside the span the store knows nothing (no capacity, no cycles, no pods), and the views would hold the
    last state on forever: a window that misses the span entirely is refused, one that reaches past it is cut
    to it, with a note saying so.
    """
    end = last + 1  # the window's end is exclusive: the last event belongs to it
    span = f"{fmt_time(first)} → {fmt_time(last)}"
    if hi <= first or lo >= end:
        raise ReportError(
            f"the window {fmt_time(lo)} → {fmt_time(hi)} is outside the store's data, which spans {span};"
            " give --from / --to within it"
        )
    if first <= lo and hi <= end:
        return lo, hi, []
    clipped_lo, clipped_hi = max(lo, first), min(hi, end)
    note = (
        f"The window {fmt_time(lo)} → {fmt_time(hi)} reaches outside the store's data ({span}): it was clipped"
        f" to {fmt_time(clipped_lo)} → {fmt_time(clipped_hi)}, and every figure is over that part only."
    )
    return clipped_lo, clipped_hi, [note]


def _build(
    con: duckdb.DuckDBPyConnection, db: str, from_: str | None, to: str | None, focus: str | None
) -> Report:
    """The report, built from the store's views in one place: every figure of :class:`Report` is computed here
    from the same window and the same connection. Long on purpose: the figures are one query each, read top to
    bottom in the order the report prints them.
    """
    span = _rows(con, "SELECT first_ms, last_ms FROM run_span")[0]
    if span[0] is None:
        raise ReportError(f"{db}: the store holds no events and no cycles")
    first, last = int(span[0]), int(span[1])
    lo = parse_time(from_, first) if from_ is not None else first
    hi = parse_time(to, first) if to is not None else last + 1  # the end is exclusive: include the last event
    if to is None and lo > last:
        raise ReportError(
            f"the window from {fmt_time(lo)} is outside the store's data, which spans {fmt_time(first)} →"
            f" {fmt_time(last)}; give --from / --to within it"
        )
    if hi <= lo:
        raise ReportError(f"empty window: --to ({fmt_time(hi)}) must be after --from ({fmt_time(lo)})")
    lo, hi, notes = _clip_to_store(lo, hi, first, last)
    win = Window(lo, hi, first, last)
    w = [lo, hi]
    length = hi - lo
    if length < 60_000:
        # Hours-based figures round to zero over a window this short; say so instead of showing bare zeros.
        notes.append(
            f"The window is only {length / 1000:g} s long (events' logical times span {fmt_time(first)} →"
            f" {fmt_time(last)}): GPU-hours and hourly figures round to zero; use a longer --from / --to or a"
            " store with more history."
        )

    # -- the queue tree and the engine's division (time-weighted over the window) --------------------------
    ov = _overlap()
    div = _rows(
        con,
        f"""
        SELECT queue, arg_max(parent, start_ms),
               sum(gpu_deserved * {ov}), bool_and(gpu_deserved IS NULL),
               sum(gpu_fair_share_capped * {ov}), sum(gpu_fair_share_classic_capped * {ov}),
               sum(gpu_fair_share * {ov}), sum(gpu_allocated * {ov}), sum(gpu_requested * {ov}),
               sum(gpu_usage * {ov}), arg_max(gpu_usage, start_ms)
        FROM queue_intervals WHERE start_ms < $2 AND end_ms > $1
        GROUP BY queue
        """,
        w,
    )
    if not div:
        # No cycle in the window: the tree still comes from the latest cycle before it, if any.
        div = [
            (q, p, 0, True, 0, 0, 0, 0, 0, 0, 0)
            for q, p in _rows(
                con, "SELECT queue, arg_max(parent, logical_time_ms) FROM queue_cycles GROUP BY queue"
            )
        ]
    parent_of: dict[str, str | None] = {r[0]: r[1] for r in div}
    # -- received, from the event log ------------------------------------------------------------------------
    # A run still open at the end of the store holds until the end of the store (not last + 1, the default
    # window's exclusive end): the rule of analytics.audit.gpuhours. The window never reaches past the
    # store's data (it is clipped to it), so this is also "until the window's end".
    open_end = last
    received = {
        r[0]: (float(r[1] or 0), float(r[2] or 0))
        for r in _rows(
            con,
            f"""
            SELECT queue, sum(gpu_milli * {_overlap("start_ms", "coalesce(end_ms, $3)")}),
                   sum(cpu_millicores * {_overlap("start_ms", "coalesce(end_ms, $3)")})
            FROM pod_runs WHERE start_ms < $2 AND coalesce(end_ms, $3) > $1 GROUP BY queue
            """,
            [lo, hi, open_end],
        )
    }

    for q in received:  # a queue the cycles never showed (its pods still held GPUs)
        if q is not None:
            parent_of.setdefault(q, None)
    if not parent_of:
        raise ReportError(f"{db}: no queues in the store")
    children: dict[str, list[str]] = defaultdict(list)
    for q, p in parent_of.items():
        if p is not None and p in parent_of:
            children[p].append(q)
    order: list[tuple[str, int]] = []

    def walk(q: str, depth: int) -> None:
        order.append((q, depth))
        for c in sorted(children.get(q, [])):
            walk(c, depth + 1)

    for q in sorted(q for q, p in parent_of.items() if p is None or p not in parent_of):
        walk(q, 0)

    def subtree(q: str) -> list[str]:
        return [q, *(x for c in children.get(q, []) for x in subtree(c))]

    # -- cluster capacity, allocation, fragmentation -----------------------------------------------------
    cap_ms = float(
        _rows(
            con,
            f"""
            SELECT sum(gpu_milli * {_overlap("at_ms", "next_ms")}) FROM (
              SELECT at_ms, gpu_milli, coalesce(lead(at_ms) OVER (ORDER BY "offset"), $3) AS next_ms
              FROM capacity_changes)
            """,
            [lo, hi, max(last, hi)],
        )[0][0]
        or 0
    )
    held_ms = sum(g for g, _ in received.values())
    probe_rows = _rows(con, "SELECT num_gpu, gpu_milli FROM gpu_request_mode")
    probe = {"num_gpu": int(probe_rows[0][0]), "gpu_milli": int(probe_rows[0][1])} if probe_rows else None
    frag_int, frag_end = _rows(
        con,
        "SELECT sum(d_fragmented * ($2 - greatest(at_ms, $1))), sum(d_fragmented)"
        " FROM fragmentation_changes WHERE at_ms < $2",
        w,
    )[0]
    capped = _rows(
        con,
        f"""
        SELECT sum(CASE WHEN capacity_gpu_milli > 0 AND gpu_fair_share_total > capacity_gpu_milli THEN {ov} ELSE 0 END),
               max(gpu_fair_share_total)
        FROM cluster_intervals WHERE start_ms < $2 AND end_ms > $1
        """,
        w,
    )[0]
    capped_fraction = float(capped[0] or 0) / length
    top_fair_max = float(capped[1] or 0) / GPU_MILLI

    # -- waits -----------------------------------------------------------------------------------------------
    # Jobs first bound in the window (their wait), and jobs still waiting at its end (waited so far).
    waits_by_queue: dict[str, list[float]] = defaultdict(list)
    still_waiting: dict[str, list[float]] = defaultdict(list)
    for q, started, wait_ms in _rows(
        con,
        "SELECT queue, first_bind_ms IS NOT NULL AND first_bind_ms < $2, coalesce(wait_ms, $2 - submitted_ms)"
        " FROM job_waits WHERE submitted_ms < $2 AND (first_bind_ms IS NULL OR first_bind_ms >= $1)"
        " ORDER BY 3",
        w,
    ):
        if started:
            waits_by_queue[q].append(wait_ms / 1000)
        else:
            still_waiting[q].append(wait_ms / 1000)

    # -- evictions ---------------------------------------------------------------------------------------
    suffered: dict[str, Counter[str]] = defaultdict(Counter)
    caused: dict[str, Counter[str]] = defaultdict(Counter)
    cluster_ev: Counter[str] = Counter()
    for q, cq, kind, n in _rows(
        con,
        "SELECT queue, evictor_queue, kind, count(*) FROM evictions"
        " WHERE logical_time_ms >= $1 AND logical_time_ms < $2 GROUP BY ALL",
        w,
    ):
        k = kind if kind in EVICTION_KINDS else "other"
        suffered[q][k] += n
        if cq is not None:
            caused[cq][k] += n
        cluster_ev[k] += n

    # -- pending reasons ------------------------------------------------------------------------------------
    pending: dict[str, dict[str, list[Any]]] = defaultdict(dict)  # queue -> reason -> [ms, jobs, message]
    for q, reason, job_ms, jobs, msg in _rows(
        con,
        f"""
        SELECT queue, reason, sum(held_ms_in), count(DISTINCT job), arg_max(message, start_ms) FROM (
          SELECT queue, reason, job, message, start_ms, {ov} AS held_ms_in
          FROM pending_intervals WHERE start_ms < $2 AND end_ms > $1)
        WHERE held_ms_in > 0 GROUP BY ALL
        """,
        w,
    ):
        pending[q or "(none)"][reason or "unknown"] = [float(job_ms), int(jobs), msg]

    # -- per queue rows ---------------------------------------------------------------------------------
    div_by = {r[0]: r for r in div}
    rows: list[QueueRow] = []
    for q, depth in order:
        tree = subtree(q)
        d = div_by.get(q)

        def mean(i: int, d: tuple[Any, ...] | None = d) -> float:
            return float(d[i] or 0) / length / GPU_MILLI if d is not None else 0.0

        gpu_ms = sum(received.get(x, (0.0, 0.0))[0] for x in tree)
        cpu_ms = sum(received.get(x, (0.0, 0.0))[1] for x in tree)
        unlimited = d is None or bool(d[3])
        fair_gpu_ms = float(d[4] or 0) if d else 0.0
        waits = sorted(x for t in tree for x in waits_by_queue.get(t, []))
        waiting = [x for t in tree for x in still_waiting.get(t, [])]
        reasons: dict[str, list[Any]] = {}
        for t in tree:
            for reason, (ms, jobs, msg) in pending.get(t, {}).items():
                acc = reasons.setdefault(reason, [0.0, 0, msg])
                acc[0] += ms
                acc[1] += jobs
        rows.append(
            QueueRow(
                name=q,
                parent=parent_of[q],
                depth=depth,
                leaf=not children.get(q),
                deserved_gpus=None if unlimited else mean(2),
                fair_share_gpus=mean(4),
                fair_share_classic_gpus=mean(5),
                fair_share_uncapped_gpus=mean(6),
                allocated_gpus=mean(7),
                requested_gpus=mean(8),
                gpu_hours=gpu_ms / GPU_MILLI / MS_PER_HOUR,
                cpu_hours=cpu_ms / 1000 / MS_PER_HOUR,
                fair_share_gpu_hours=fair_gpu_ms / GPU_MILLI / MS_PER_HOUR,
                fair_share_classic_gpu_hours=float(d[5] or 0) / GPU_MILLI / MS_PER_HOUR if d else 0.0,
                fair_share_uncapped_gpu_hours=float(d[6] or 0) / GPU_MILLI / MS_PER_HOUR if d else 0.0,
                deserved_gpu_hours=None
                if unlimited or d is None
                else float(d[2] or 0) / GPU_MILLI / MS_PER_HOUR,
                usage_end=float(d[10] or 0) if d else 0.0,
                usage_mean=float(d[9] or 0) / length if d else 0.0,
                cluster_share=gpu_ms / cap_ms if cap_ms else 0.0,
                received_over_fair_share=received_over_fair_share(gpu_ms, fair_gpu_ms),
                jobs_started=len(waits),
                jobs_waiting_at_end=len(waiting),
                longest_waiting_s=max(waiting) if waiting else None,
                wait_p50_s=nearest_rank(waits, 0.50),
                wait_p90_s=nearest_rank(waits, 0.90),
                wait_p99_s=nearest_rank(waits, 0.99),
                jobs_waited_over_1h=sum(1 for x in waits if x * 1000 > LONG_WAIT_MS),
                evictions_suffered={k: sum(suffered[t][k] for t in tree) for k in EVICTION_KINDS},
                evictions_caused={k: sum(caused[t][k] for t in tree) for k in EVICTION_KINDS},
                pending_reasons=[
                    {"reason": r, "job_hours": v[0] / MS_PER_HOUR, "jobs": v[1], "message": v[2]}
                    for r, v in sorted(reasons.items(), key=lambda kv: (-kv[1][0], kv[0]))
                ],
            )
        )

    # -- Jain's index over the window and per bucket ----------------------------------------------------------
    leaves = [r for r in rows if r.leaf]
    jain, n_jain = _jain(leaves, {r.name: r.gpu_hours for r in leaves})
    bucket_ms, bucket_name = next(
        ((b, n) for b, n in _BUCKETS if -(-length // b) <= _MAX_BUCKETS), (_BUCKETS[-1][0], _BUCKETS[-1][1])
    )
    if -(-length // bucket_ms) > _MAX_BUCKETS:
        bucket_ms = -(-length // _MAX_BUCKETS)
        bucket_name = fmt_duration(bucket_ms / 1000)
    trend = _jain_trend(con, leaves, lo, hi, open_end, bucket_ms)

    if capped_fraction > 0:
        notes.append(
            f"Fair shares were scaled down to the cluster's capacity during {capped_fraction:.0%} of the window:"
            f" the top queues' fair shares (bounded by their deserved quotas and requests) added up to as much"
            f' as {top_fair_max:,.0f} GPUs on a {cap_ms / length / GPU_MILLI:,.0f}-GPU cluster. "Fair share"'
            ' and "received / fair share" use the scaled share (the engine\'s own value is in the JSON as'
            " fair_share_uncapped_*)."
        )
    if jain is not None:
        notes.append(
            f"Jain's index is over the {n_jain} leaf queues that had a fair share in the window, of GPU-hours"
            " received / fair-share GPU-hours without the kValue term (1 = every queue got the same fraction of"
            " its fair share; 1/n = one queue got everything)."
        )
    cluster = ClusterRow(
        capacity_gpus=cap_ms / length / GPU_MILLI,
        capacity_gpu_hours=cap_ms / GPU_MILLI / MS_PER_HOUR,
        gpu_hours_allocated=held_ms / GPU_MILLI / MS_PER_HOUR,
        allocation_ratio=held_ms / cap_ms if cap_ms else 0.0,
        idle_gpus=(cap_ms - held_ms) / length / GPU_MILLI,
        fragmented_gpus=float(frag_int or 0) / length / GPU_MILLI,
        fragmented_gpus_at_end=float(frag_end or 0) / GPU_MILLI,
        fragmentation_probe=probe,
        fair_share_capped_fraction=capped_fraction,
        top_fair_share_gpus_max=top_fair_max,
        jain_index=jain,
        jain_queues=n_jain,
        evictions={k: cluster_ev[k] for k in EVICTION_KINDS},
    )
    if focus is not None:
        if focus not in parent_of:
            known = ", ".join(q for q, _ in order)
            raise ReportError(f"unknown queue {focus!r} (queues in the store: {known})")
        keep = _family(focus, parent_of, children)
        rows = [r for r in rows if r.name in keep]
    placements = _placements(con, w)
    if focus is not None:
        placements = [p for p in placements if p["queue"] in keep]
    from analytics.reports.workload import workload_distribution

    workload = workload_distribution(con, hi)
    from analytics.reports.pool_fragmentation import pool_fragmentation

    pools = pool_fragmentation(con, lo, hi, bucket_ms)
    return Report(db, win, cluster, rows, trend, bucket_name, notes, focus, placements, workload, pools)


def _placements(con: duckdb.DuckDBPyConnection, w: Sequence[Any]) -> list[dict[str, Any]]:
    """Per queue: gangs with a topology constraint first placed in the window, and preferred-level hits."""
    out = []
    for q, gangs, req, pref, hit in _rows(
        con,
        """
        SELECT queue, count(*), count(*) FILTER (WHERE required_level IS NOT NULL),
               count(*) FILTER (WHERE preferred_level IS NOT NULL), count(*) FILTER (WHERE within_preferred)
        FROM (SELECT * FROM gang_placements
              QUALIFY row_number() OVER (PARTITION BY job ORDER BY logical_time_ms, record_seq) = 1)
        WHERE logical_time_ms >= $1 AND logical_time_ms < $2 GROUP BY queue ORDER BY queue
        """,
        w,
    ):
        out.append(
            {
                "queue": q or "(none)",
                "gangs": int(gangs),
                "with_required_level": int(req),
                "with_preferred_level": int(pref),
                "got_preferred_level": int(hit),
                "preferred_hit_rate": int(hit) / int(pref) if pref else None,
            }
        )
    return out


def _family(q: str, parent_of: dict[str, str | None], children: dict[str, list[str]]) -> set[str]:
    """The queue, its ancestors, its siblings (and theirs up the tree) and its children."""
    keep = {q, *children.get(q, [])}
    cur: str | None = q
    while cur is not None:
        keep.add(cur)
        p = parent_of.get(cur)
        siblings = children.get(p, []) if p is not None else [x for x, y in parent_of.items() if y is None]
        keep.update(siblings)
        cur = p
    return keep


def _jain(leaves: Sequence[QueueRow], gpu_hours: dict[str, float]) -> tuple[float | None, int]:
    """Jain's index of x = GPU-hours received ÷ fair-share GPU-hours (classic, capped at capacity) over the
    leaf queues that had a fair share: Jain's normalised throughput, where the fair share carries the
    queues' quotas, weights and demand (zero-quota queues of equal weight count too)."""
    xs = [
        gpu_hours[r.name] / r.fair_share_classic_gpu_hours
        for r in leaves
        if r.fair_share_classic_gpu_hours > 0
    ]
    return jain_index(xs), len(xs)


def _jain_trend(
    con: duckdb.DuckDBPyConnection, leaves: Sequence[QueueRow], lo: int, hi: int, end: int, bucket_ms: int
) -> list[dict[str, Any]]:
    """Jain's index per bucket (same rule as the whole window), with the bucket's allocation ratio."""
    names = [r.name for r in leaves]
    if not names:
        return []
    n = -(-(hi - lo) // bucket_ms)
    # A last bucket of a sliver (the window ends one ms past the last record) would be a row of nothing:
    # it joins the bucket before it.
    if n > 1 and (hi - lo) - (n - 1) * bucket_ms < bucket_ms // 10:
        n -= 1
    bounds = (
        "SELECT b, $1 + b * $4 AS b0, CASE WHEN b = $5 - 1 THEN $2 ELSE least($1 + (b + 1) * $4, $2) END AS b1"
        " FROM range(0, $5) t(b)"
    )
    params = [lo, hi, end, bucket_ms, n]
    got: dict[tuple[int, str], float] = {}
    for b, q, v in _rows(
        con,
        f"""
        WITH bk AS ({bounds})
        SELECT bk.b, r.queue, sum(r.gpu_milli * greatest(0, least(coalesce(r.end_ms, $3), bk.b1)
                                                  - greatest(r.start_ms, bk.b0)))
        FROM pod_runs r JOIN bk ON r.start_ms < bk.b1 AND coalesce(r.end_ms, $3) > bk.b0
        GROUP BY ALL
        """,
        params,
    ):
        got[(int(b), q)] = float(v or 0) / GPU_MILLI / MS_PER_HOUR
    fair: dict[tuple[int, str], float] = {}
    for b, q, v in _rows(
        con,
        f"""
        WITH bk AS ({bounds})
        SELECT bk.b, i.queue,
               sum(i.gpu_fair_share_classic_capped * greatest(0, least(i.end_ms, bk.b1) - greatest(i.start_ms, bk.b0)))
        FROM queue_intervals i JOIN bk ON i.start_ms < bk.b1 AND i.end_ms > bk.b0
        GROUP BY ALL
        """,
        params,
    ):
        fair[(int(b), q)] = float(v or 0) / GPU_MILLI / MS_PER_HOUR
    cap = {
        int(b): float(v or 0)
        for b, v in _rows(
            con,
            f"""
            WITH bk AS ({bounds}), c AS (
              SELECT at_ms, gpu_milli, coalesce(lead(at_ms) OVER (ORDER BY "offset"), $3) AS next_ms
              FROM capacity_changes)
            SELECT bk.b, sum(c.gpu_milli * greatest(0, least(c.next_ms, bk.b1) - greatest(c.at_ms, bk.b0)))
            FROM c JOIN bk ON c.at_ms < bk.b1 AND c.next_ms > bk.b0 GROUP BY ALL
            """,
            params,
        )
    }
    out = []
    for b in range(n):
        b0, b1 = lo + b * bucket_ms, hi if b == n - 1 else min(lo + (b + 1) * bucket_ms, hi)
        xs = [got.get((b, q), 0.0) / fair[(b, q)] for q in names if fair.get((b, q), 0.0) > 0]
        held = sum(got.get((b, q), 0.0) for q in names) * GPU_MILLI * MS_PER_HOUR
        out.append(
            {
                "from_ms": b0,
                "to_ms": b1,
                "jain_index": jain_index(xs),
                "queues": len(xs),
                "allocation_ratio": held / cap[b] if cap.get(b) else 0.0,
            }
        )
    return out


# --------------------------------------------------------------------------- output


def _n(count: int, noun: str) -> str:
    """``1 job``, ``2 jobs``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}" if x >= 0.1 or x == 0 else f"{x:.1%}"


def _num(x: float | None, nd: int = 1) -> str:
    return "∞" if x is None else f"{x:,.{nd}f}"


def _ev(c: dict[str, int]) -> str:
    """Evictions by kind as ``r/p/c`` (+ other)."""
    s = f"{c['reclaim']}/{c['preempt']}/{c['consolidation']}"
    return s + (f" +{c['other']}" if c.get("other") else "")


def _top_reason(r: QueueRow) -> str:
    return str(r.pending_reasons[0]["reason"]) if r.pending_reasons else "-"


CSV_COLUMNS: Final = (
    "queue",
    "parent",
    "leaf",
    "deserved_gpus",
    "fair_share_gpus",
    "fair_share_classic_gpus",
    "fair_share_uncapped_gpus",
    "allocated_gpus",
    "requested_gpus",
    "gpu_hours",
    "cpu_hours",
    "fair_share_gpu_hours",
    "received_over_fair_share",
    "usage_end",
    "cluster_share",
    "jobs_started",
    "jobs_waiting_at_end",
    "wait_p50_s",
    "wait_p90_s",
    "wait_p99_s",
    "jobs_waited_over_1h",
    "evicted_reclaim",
    "evicted_preempt",
    "evicted_consolidation",
    "evicted_other",
    "caused_reclaim",
    "caused_preempt",
    "caused_consolidation",
    "caused_other",
    "top_pending_reason",
)


def _csv_row(r: QueueRow) -> list[Any]:
    top = r.pending_reasons[0]["reason"] if r.pending_reasons else ""
    return [
        r.name,
        r.parent or "",
        r.leaf,
        "" if r.deserved_gpus is None else round(r.deserved_gpus, 3),
        round(r.fair_share_gpus, 3),
        round(r.fair_share_classic_gpus, 3),
        round(r.fair_share_uncapped_gpus, 3),
        round(r.allocated_gpus, 3),
        round(r.requested_gpus, 3),
        round(r.gpu_hours, 3),
        round(r.cpu_hours, 3),
        round(r.fair_share_gpu_hours, 3),
        "" if r.received_over_fair_share is None else round(r.received_over_fair_share, 6),
        round(r.usage_end, 6),
        round(r.cluster_share, 6),
        r.jobs_started,
        r.jobs_waiting_at_end,
        *("" if v is None else round(v, 3) for v in (r.wait_p50_s, r.wait_p90_s, r.wait_p99_s)),
        r.jobs_waited_over_1h,
        *(r.evictions_suffered[k] for k in EVICTION_KINDS),
        *(r.evictions_caused[k] for k in EVICTION_KINDS),
        top,
    ]


def render(report: Report, fmt: str = "table", out: IO[str] | None = None) -> None:
    """Print the report as rich tables, CSV (one row per queue) or JSON (everything)."""
    out = out if out is not None else sys.stdout
    if fmt == "json":
        json.dump(report.to_json(), out, indent=1, default=str)
        out.write("\n")
    elif fmt == "csv":
        wr = csv.writer(out, lineterminator="\n")
        wr.writerow(CSV_COLUMNS)
        wr.writerows(_csv_row(r) for r in report.queues)
    elif fmt == "table":
        _render_table(report, out)
    else:
        raise ReportError(f"unknown format {fmt!r} (table, csv or json)")


def _render_table(report: Report, out: IO[str]) -> None:
    """The terminal tables of a report. Long on purpose: one block per table, in print order; each block only
    formats columns the report already holds.
    """
    from analytics.terminal import Col, console, dropped_note, fitted_table

    con = console(out)
    width = con.width
    where = "--format csv or json has every figure"

    def show(cols: Sequence[Col], rows: Sequence[Sequence[str]], title: str, header: bool = True) -> None:
        table, dropped = fitted_table(cols, rows, width, title=title, show_header=header)
        con.print(table)
        note = dropped_note(dropped, width, where)
        if note is not None:
            con.print(note, style="dim", highlight=False)

    win = report.window
    con.print(
        f"[bold]Fairness report[/bold]  store {report.store}\n"
        f"window {fmt_time(win.from_ms)} → {fmt_time(win.to_ms)} ({fmt_duration(win.length_ms / 1000)});"
        f" the store spans {fmt_time(win.store_first_ms)} → {fmt_time(win.store_last_ms)}"
    )
    show(
        (
            Col("queue", "left"),
            Col("deserved"),
            Col("fair share"),
            Col("fair (no kValue)", drop=3),
            Col("allocated"),
            Col("requested", drop=2),
            Col("decayed usage", drop=1),
        ),
        [
            [
                "  " * r.depth + r.name,
                _num(r.deserved_gpus),
                _num(r.fair_share_gpus),
                _num(r.fair_share_classic_gpus),
                _num(r.allocated_gpus),
                _num(r.requested_gpus),
                f"{r.usage_end:.3f}",
            ]
            for r in report.queues
        ],
        "What each queue was entitled to (mean GPUs over the window)",
    )
    show(
        (
            Col("queue", "left"),
            Col("GPU-h"),
            Col("CPU core-h", drop=6),
            Col("fair-share GPU-h"),
            Col("received ÷ fair"),
            Col("of cluster", drop=5),
            Col("wait p50", drop=2),
            Col("p90", drop=4),
            Col("p99", drop=7),
            Col("waiting at end", drop=1),
            Col("evicted r/p/c", drop=3),
            Col("caused r/p/c", drop=3),
            Col("typical pending reason", "left", whole=False, drop=2),
        ),
        [
            [
                "  " * r.depth + r.name,
                _num(r.gpu_hours),
                _num(r.cpu_hours),
                _num(r.fair_share_gpu_hours),
                _pct(r.received_over_fair_share),
                _pct(r.cluster_share),
                fmt_duration(r.wait_p50_s),
                fmt_duration(r.wait_p90_s),
                fmt_duration(r.wait_p99_s),
                str(r.jobs_waiting_at_end),
                _ev(r.evictions_suffered),
                _ev(r.evictions_caused),
                _top_reason(r),
            ]
            for r in report.queues
        ],
        "What each queue received",
    )
    c = report.cluster
    probe = c.fragmentation_probe
    probe_s = (
        f" (probe: {probe['num_gpu']} × {probe['gpu_milli'] / GPU_MILLI:g} GPU)"
        if probe is not None
        else " (no GPU pods)"
    )
    show(
        (Col("figure", "left", whole=False), Col("value")),
        [
            ("capacity (mean GPUs)", _num(c.capacity_gpus)),
            ("GPU-hours allocated / capacity", f"{c.gpu_hours_allocated:,.1f} / {c.capacity_gpu_hours:,.1f}"),
            ("allocation ratio", _pct(c.allocation_ratio)),
            ("idle GPUs (mean)", _num(c.idle_gpus, 2)),
            (
                "fragmented GPUs (mean / at end)" + probe_s,
                f"{c.fragmented_gpus:,.2f} / {c.fragmented_gpus_at_end:,.2f}",
            ),
            ("evictions reclaim / preempt / consolidation", _ev(c.evictions)),
            (
                f"Jain's index ({c.jain_queues} leaf queues)",
                "-" if c.jain_index is None else f"{c.jain_index:.3f}",
            ),
        ],
        "Cluster",
        header=False,
    )
    if report.jain_trend:
        show(
            (Col("from"), Col("to"), Col("Jain's index"), Col("queues"), Col("allocation ratio")),
            [
                [
                    fmt_time(b["from_ms"]),
                    fmt_time(b["to_ms"]),
                    "-" if b["jain_index"] is None else f"{b['jain_index']:.3f}",
                    str(b["queues"]),
                    _pct(b["allocation_ratio"]),
                ]
                for b in report.jain_trend
            ],
            f"How it moved (per {report.bucket})",
        )
    if report.placements:
        show(
            (
                Col("queue", "left"),
                Col("gangs"),
                Col("required level"),
                Col("preferred level"),
                Col("got preferred level"),
            ),
            [
                [
                    p["queue"],
                    str(p["gangs"]),
                    str(p["with_required_level"]),
                    str(p["with_preferred_level"]),
                    "-"
                    if p["preferred_hit_rate"] is None
                    else f"{p['got_preferred_level']} ({_pct(p['preferred_hit_rate'])})",
                ]
                for p in report.placements
            ],
            "Topology: gangs with a constraint, first placed in the window",
        )
    if report.pool_fragmentation:
        from analytics.reports.pool_fragmentation import sparkline

        pf = report.pool_fragmentation
        top = max((b["fragmented_gpus"] for p in pf for b in p["buckets"]), default=0.0)
        fixed = [
            [
                p["pool"] or "(default)",
                f"{p['nodes']:,}",
                f"{p['fragmented_gpus']:,.2f}",
                f"{p['fragmented_gpus_at_end']:,.2f}",
            ]
            for p in pf
        ]
        # The curve takes what the other columns leave (rich draws 3 characters a column plus one).
        room = (
            width
            - 1
            - sum(3 + max(len(r[i]) for r in [*fixed, ["pool", "nodes", "mean", "at end"]]) for i in range(4))
            - 3
        )
        show(
            (Col("pool", "left"), Col("nodes"), Col("mean"), Col("at end"), Col("over time", "left", drop=1)),
            [
                [*r, sparkline([b["fragmented_gpus"] for b in p["buckets"]], top, max(room, 8))]
                for r, p in zip(fixed, pf, strict=True)
            ],
            f"Fragmented GPUs per node pool (curve: mean per {report.bucket}, full bar = {top:,.1f} GPUs)",
        )
    if report.workload:
        from analytics.reports.workload import SHOWN, shape_text

        wrows: list[list[str]] = []
        for p in report.workload:
            label = p["pool"] or "(default)"
            source = "prior" if p["prior"] else f"{p['pods']:,} pods"
            for i, t in enumerate(p["types"][:SHOWN]):
                wrows.append(
                    [
                        label if i == 0 else "",
                        source if i == 0 else "",
                        shape_text(t),
                        _num(t["cpu_millicores"] / 1000),
                        ", ".join(t["gpu_models"]) or "any",
                        _pct(t["weight"]),
                    ]
                )
        show(
            (
                Col("pool", "left"),
                Col("learnt from", drop=1),
                Col("GPUs per pod", "left"),
                Col("cores"),
                Col("GPU models", "left", whole=False, drop=2),
                Col("share"),
            ),
            wrows,
            f"Workload scored against by fgd / frag-aware at the window's end (top {SHOWN} per pool)",
        )
    for n in report.notes:
        con.print(f"[dim]note:[/dim] {n}", highlight=False)
    if report.focus is not None:
        con.print()
        con.print(queue_story(report, report.focus), highlight=False)


def queue_story(report: Report, name: str) -> str:
    """The focused queue in plain words: what it got against what it deserved, its waits and why."""
    by = {r.name: r for r in report.queues}
    if name not in by:
        raise ReportError(f"queue {name!r} is not in the report")
    r = by[name]
    win = report.window
    lines = [
        f"Queue {r.name}"
        + (f" (in {r.parent})" if r.parent else " (a top-level queue)")
        + f", {fmt_time(win.from_ms)} → {fmt_time(win.to_ms)}:"
    ]
    des = (
        "no GPU quota limit"
        if r.deserved_gpu_hours is None
        else f"{r.deserved_gpu_hours:,.0f} GPU-hours deserved (a quota of {r.deserved_gpus:,.1f} GPUs)"
    )
    ratio = _pct(r.received_over_fair_share)
    lines.append(
        f"- You received {r.gpu_hours:,.0f} GPU-hours ({r.cpu_hours:,.0f} CPU core-hours) against {des};"
        f" your fair share was {r.fair_share_gpu_hours:,.0f} GPU-hours, so you got {ratio} of it"
        f" ({_pct(r.cluster_share)} of the cluster)."
    )
    if report.cluster.fair_share_capped_fraction > 0:
        lines.append(
            f"  The fair share is capped at what the cluster has: your quota and your siblings' add up to more"
            f" than its {report.cluster.capacity_gpus:,.0f} GPUs (uncapped, the engine's fair share was"
            f" {r.fair_share_uncapped_gpu_hours:,.0f} GPU-hours)."
        )
    if r.jobs_started:
        lines.append(
            f"- {_n(r.jobs_started, 'job')} started in the window; half waited less than {fmt_duration(r.wait_p50_s)},"
            f" 90 % less than {fmt_duration(r.wait_p90_s)}; {r.jobs_waited_over_1h} waited > 1 h."
        )
    if r.jobs_waiting_at_end:
        lines.append(
            f"- {_n(r.jobs_waiting_at_end, 'job')} {'was' if r.jobs_waiting_at_end == 1 else 'were'} still waiting at"
            " the end (the longest for"
            f" {fmt_duration(r.longest_waiting_s)})."
        )
    if r.pending_reasons:
        top = r.pending_reasons[:2]
        why = "; ".join(
            f'{p["reason"]} for {p["job_hours"]:,.0f} job-hours, e.g. "{p["message"]}"' for p in top
        )
        lines.append(f"- Your jobs were pending because: {why}.")
    s, c = r.evictions_suffered, r.evictions_caused
    if sum(s.values()) or sum(c.values()):
        lines.append(
            f"- {_n(sum(s.values()), 'pod')} of yours {'was' if sum(s.values()) == 1 else 'were'} evicted"
            f" ({_words(s)}); your jobs caused {_n(sum(c.values()), 'eviction')} ({_words(c)})."
        )
    else:
        lines.append("- None of your pods was evicted, and your jobs evicted nobody.")
    others = [x for x in report.queues if x.parent == r.parent and x.name != r.name]
    for o in others:
        lines.append(
            f"- Sibling {o.name}: {o.gpu_hours:,.0f} GPU-hours, {_pct(o.received_over_fair_share)} of its fair share."
        )
    p = by.get(r.parent) if r.parent else None
    while p is not None:
        lines.append(
            f"- Parent {p.name}: {p.gpu_hours:,.0f} GPU-hours, {_pct(p.received_over_fair_share)} of its fair share."
        )
        p = by.get(p.parent) if p.parent else None
    return "\n".join(lines)


def _words(c: dict[str, int]) -> str:
    parts = [f"{n} by {k}" for k, n in c.items() if n]
    return ", ".join(parts) if parts else "none"
