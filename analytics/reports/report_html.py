"""``hourglass report --html FILE``: the report as one self-contained, offline HTML page with plots.

Plots are matplotlib figures written as inline SVG (``docs/report.md`` says why): the page has no script,
no stylesheet link, no image or font URL, so a browser opening it makes no network request, and it renders
the same with JavaScript disabled. Time series are time-weighted means over at most :data:`POINTS`
buckets of the window (computed in DuckDB from the report's views), so the page stays small however many
cycles the store holds.
"""

from __future__ import annotations

import html
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import duckdb

from analytics.reports import htmlkit
from analytics.reports.report import (
    EVICTION_KINDS,
    GPU_MILLI,
    MS_PER_DAY,
    MS_PER_HOUR,
    Report,
    ReportError,
    connect,
    fmt_duration,
    fmt_time,
    queue_story,
)

if TYPE_CHECKING:
    pass

__all__ = ["PLOTS", "POINTS", "series", "write_html"]

POINTS: Final = 300
_LEGEND_COLUMNS: Final = 4  # entries per legend row above a plot (queue names are up to ~25 characters)
# The id of each plot's <figure> element, in page order (the browser test counts them).
PLOTS: Final = ("allocation", "fair-share", "usage", "waits", "evictions", "fairness")
_KIND_STYLE: Final = {
    "reclaim": ("o", "#d62728"),
    "preempt": ("s", "#9467bd"),
    "consolidation": ("^", "#2ca02c"),
    "other": ("x", "#7f7f7f"),
}


def _bucketed(con: duckdb.DuckDBPyConnection, lo: int, hi: int, width: int) -> list[tuple[Any, ...]]:
    """Per queue per bucket: time-weighted sums of allocated, fair share (capped, classic capped) and usage,
    and the time the queue's intervals cover in the bucket (all in milli-GPU·ms / ms)."""
    # Each interval is spread over the buckets it touches (computed, not a range join: 1 M intervals stay
    # ~1 M rows), then clipped to each bucket.
    return con.execute(
        """
        WITH i AS (
          SELECT queue, start_ms, end_ms, gpu_allocated, gpu_fair_share_capped, gpu_fair_share_classic_capped,
                 gpu_usage,
                 unnest(range((greatest(start_ms, $lo) - $lo) // $w, (least(end_ms, $hi) - 1 - $lo) // $w + 1)) AS b
          FROM queue_intervals WHERE start_ms < $hi AND end_ms > $lo AND end_ms > start_ms
        )
        SELECT b, queue,
               sum(gpu_allocated * ov), sum(gpu_fair_share_capped * ov),
               sum(gpu_fair_share_classic_capped * ov), sum(gpu_usage * ov), sum(ov)
        FROM (
          SELECT *, greatest(0, least(end_ms, $lo + (b + 1) * $w, $hi) - greatest(start_ms, $lo + b * $w)) AS ov
          FROM i)
        GROUP BY b, queue ORDER BY b
        """,
        {"lo": lo, "hi": hi, "w": width},
    ).fetchall()


def series(con: duckdb.DuckDBPyConnection, report: Report) -> dict[str, Any]:
    """The plot data of *report*, queried from its store's views over the same window."""
    lo, hi = report.window.from_ms, report.window.to_ms
    width = max(-(-(hi - lo) // POINTS), 1)
    n = -(-(hi - lo) // width)
    names = [r.name for r in report.queues]
    per: dict[str, dict[str, list[float]]] = {
        q: {k: [0.0] * n for k in ("allocated", "fair", "fair_classic", "usage")} for q in names
    }
    rows = [r for r in _bucketed(con, lo, hi, width) if r[1] in per and 0 <= r[0] < n]
    # A bucket's means are over the time the store has intervals for (the longest any queue covers): a
    # bucket past the last cycle (the window ends one past the store's last time) has none, and is a gap
    # in the plots, not a drop of every queue to 0.
    covered = [0.0] * n
    for b, _, _, _, _, _, ms in rows:
        covered[b] = max(covered[b], float(ms or 0))
    for b, q, alloc, fair, classic, usage, _ in rows:
        if covered[b] > 0:
            p = per[q]
            p["allocated"][b] = float(alloc or 0) / covered[b] / GPU_MILLI
            p["fair"][b] = float(fair or 0) / covered[b] / GPU_MILLI
            p["fair_classic"][b] = float(classic or 0) / covered[b] / GPU_MILLI
            p["usage"][b] = float(usage or 0) / covered[b]
    for b in range(n):
        if covered[b] == 0:
            for p in per.values():
                for k in p:
                    p[k][b] = math.nan
    cap = [0.0] * n
    for b, v in con.execute(
        """
        WITH c AS (
          SELECT at_ms AS s, coalesce(lead(at_ms) OVER (ORDER BY "offset"), $hi) AS e, gpu_milli FROM capacity_changes
        ), i AS (
          SELECT s, e, gpu_milli,
                 unnest(range((greatest(s, $lo) - $lo) // $w, (least(e, $hi) - 1 - $lo) // $w + 1)) AS b
          FROM c WHERE s < $hi AND e > $lo AND e > s
        )
        SELECT b, sum(gpu_milli * greatest(0, least(e, $lo + (b + 1) * $w, $hi) - greatest(s, $lo + b * $w)))
                  / (least($lo + (b + 1) * $w, $hi) - ($lo + b * $w))
        FROM i GROUP BY b
        """,
        {"lo": lo, "hi": hi, "w": width},
    ).fetchall():
        if 0 <= b < n:
            cap[b] = float(v or 0) / GPU_MILLI
    fragmented = [0.0] * n
    for b, v in con.execute(
        """
        WITH d AS (SELECT at_ms, sum(d_fragmented) AS d FROM fragmentation_changes GROUP BY at_ms),
        c AS (
          SELECT at_ms AS s, coalesce(lead(at_ms) OVER (ORDER BY at_ms), greatest($hi, at_ms)) AS e,
                 sum(d) OVER (ORDER BY at_ms ROWS UNBOUNDED PRECEDING) AS v
          FROM d
        ), i AS (
          SELECT s, e, v, unnest(range((greatest(s, $lo) - $lo) // $w, (least(e, $hi) - 1 - $lo) // $w + 1)) AS b
          FROM c WHERE s < $hi AND e > $lo AND e > s
        )
        SELECT b, sum(v * greatest(0, least(e, $lo + (b + 1) * $w, $hi) - greatest(s, $lo + b * $w)))
                  / (least($lo + (b + 1) * $w, $hi) - ($lo + b * $w))
        FROM i GROUP BY b
        """,
        {"lo": lo, "hi": hi, "w": width},
    ).fetchall():
        if 0 <= b < n:
            fragmented[b] = float(v or 0) / GPU_MILLI
    waits: dict[str, list[float]] = defaultdict(list)
    for q, w in con.execute(
        "SELECT queue, wait_ms FROM job_waits WHERE first_bind_ms >= $lo AND first_bind_ms < $hi",
        {"lo": lo, "hi": hi},
    ).fetchall():
        waits[q].append(w / 1000)
    evictions = con.execute(
        "SELECT logical_time_ms, queue, kind, evictor_queue FROM evictions"
        " WHERE logical_time_ms >= $lo AND logical_time_ms < $hi ORDER BY logical_time_ms",
        {"lo": lo, "hi": hi},
    ).fetchall()
    return {
        "t_ms": [lo + b * width for b in range(n)] + [hi],
        "queues": per,
        "capacity": cap,
        "fragmented": fragmented,
        "waits": dict(waits),
        "evictions": evictions,
    }


# --------------------------------------------------------------------------- plots


def _time_axis(report: Report) -> tuple[float, str]:
    """Divisor and label for the x axis (days of a long window, hours of a short one)."""
    if report.window.length_ms >= 3 * MS_PER_DAY:
        return MS_PER_DAY, "days" if report.window.from_ms < 10 * 365 * MS_PER_DAY else "days since epoch"
    return MS_PER_HOUR, "hours"


def _mpl_at_least(major: int, minor: int) -> bool:
    import matplotlib

    parts = matplotlib.__version__.split(".")
    return (int(parts[0]), int(re.sub(r"\D.*", "", parts[1]) or 0)) >= (major, minor)


def _figures(report: Report, data: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """plot id -> (title, inline SVG).

    Long on purpose: one block per figure, in page order; they share the time axis and the colours.
    """
    try:
        import matplotlib
    except ImportError as e:
        raise ReportError("--html needs matplotlib: pip install 'hourglass[plot]'") from e
    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "hourglass", "font.size": 9})
    div, unit = _time_axis(report)
    t = [x / div for x in data["t_ms"]]
    leaves = [r.name for r in report.queues if r.leaf]
    per = data["queues"]
    out: dict[str, tuple[str, str]] = {}

    # 1. allocation stacked by leaf queue, against capacity
    fig, ax = plt.subplots(figsize=(10, 4))
    if leaves:
        stacked = [_post_steps(t, per[q]["allocated"]) for q in leaves]
        ax.stackplot(stacked[0][0], [ys for _, ys in stacked], labels=leaves, alpha=0.85)
    ax.step(
        t,
        data["capacity"] + data["capacity"][-1:],
        where="post",
        color="black",
        linewidth=1.2,
        label="capacity",
    )
    frag = data["fragmented"]
    ax.step(
        t,
        frag + frag[-1:],
        where="post",
        color="black",
        linestyle="--",
        linewidth=0.8,
        label="fragmented (idle)",
    )
    ax.set_xlabel(unit)
    ax.set_ylabel("GPUs (mean per bucket)")
    rows = htmlkit.legend_above(ax, _LEGEND_COLUMNS)
    out["allocation"] = (
        "GPUs allocated per leaf queue, stacked, against the capacity; idle GPUs that are fragmented",
        htmlkit.svg(fig, legend_rows=rows),
    )

    # 2. fair share vs allocated, one panel per queue
    names = [r.name for r in report.queues]
    cols = 2 if len(names) > 1 else 1
    rows_n = -(-len(names) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(10, 2.2 * rows_n + 0.4), squeeze=False, sharex=True)
    for k, q in enumerate(names):
        a = axes[k // cols][k % cols]
        a.step(
            t,
            per[q]["allocated"] + per[q]["allocated"][-1:],
            where="post",
            label="allocated",
            color="#1f77b4",
        )
        a.step(t, per[q]["fair"] + per[q]["fair"][-1:], where="post", label="fair share", color="#ff7f0e")
        a.step(
            t,
            per[q]["fair_classic"] + per[q]["fair_classic"][-1:],
            where="post",
            label="fair share, no kValue",
            color="#ff7f0e",
            linestyle=":",
            linewidth=0.9,
        )
        a.set_title(q, fontsize=9)
        a.set_ylabel("GPUs")
    for k in range(len(names), rows_n * cols):
        axes[k // cols][k % cols].set_visible(False)
    for a in axes[-1]:
        a.set_xlabel(unit)
    height = 2.2 * rows_n + 0.4
    fig.subplots_adjust(hspace=0.45 / height * 4, wspace=0.18)
    # One legend for every panel, above the first one's title: inside a panel it hid that queue's lines.
    handles, labels = axes[0][0].get_legend_handles_labels()
    axes[0][0].legend(
        handles, labels, loc="lower left", bbox_to_anchor=(0.0, 1.12), ncol=3, fontsize="small", frameon=False
    )
    out["fair-share"] = (
        "Fair share (capped at capacity) vs allocated, per queue",
        htmlkit.svg(fig, legend_rows=1),
    )

    # 3. decayed usage
    fig, ax = plt.subplots(figsize=(10, 3.2))
    for q in names:
        ax.step(t, per[q]["usage"] + per[q]["usage"][-1:], where="post", label=q)
    ax.set_xlabel(unit)
    ax.set_ylabel("share of the cluster")
    if not any(v for q in names for v in per[q]["usage"]):
        ax.text(
            0.5,
            0.6,
            "no usage recorded (k_value = 0: the fair share ignores history)",
            transform=ax.transAxes,
            ha="center",
        )
    rows = htmlkit.legend_above(ax, _LEGEND_COLUMNS)
    out["usage"] = (
        "Decayed historical usage per queue (what the time-based fair share sees)",
        htmlkit.svg(fig, legend_rows=rows),
    )

    # 4. wait-time distributions (leaf queues: every job belongs to one)
    fig, ax = plt.subplots(figsize=(10, 3.2))
    waits = [[max(w, 1.0) / 3600 for w in data["waits"].get(q, [])] for q in leaves]
    if any(waits):
        # Matplotlib 3.10 renamed vert=False to orientation="horizontal" (and deprecated the former).
        horizontal = {"orientation": "horizontal"} if _mpl_at_least(3, 10) else {"vert": False}
        ax.boxplot([w if w else [float("nan")] for w in waits], whis=(1, 99), **horizontal)
        ax.set_yticks(range(1, len(leaves) + 1), leaves)
        ax.set_xscale("log")
    ax.set_xlabel("hours from submission to first bind (log; whiskers p1-p99)")
    out["waits"] = (
        "Wait-time distribution per leaf queue",
        htmlkit.svg(fig, max(map(len, leaves), default=0)),
    )

    # 5. eviction timeline
    fig, ax = plt.subplots(figsize=(10, max(1.6, 0.9 + 0.32 * len(leaves))))
    # Rows for leaf queues only: pods run in leaves, so a parent queue's row could only ever be empty.
    ys = {q: i for i, q in enumerate(leaves)}
    for kind in EVICTION_KINDS:
        pts = [(e[0] / div, ys.get(e[1], -1)) for e in data["evictions"] if e[2] == kind]
        if pts:
            marker, color = _KIND_STYLE[kind]
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=kind, s=18)
    ax.set_yticks(range(len(leaves)), leaves)
    ax.set_ylim(-0.6, len(leaves) - 0.4)
    ax.set_xlim(t[0], t[-1])
    ax.set_xlabel(unit)
    rows = htmlkit.legend_above(ax, len(EVICTION_KINDS))
    if not data["evictions"]:
        ax.text(0.5, 0.5, "no evictions in the window", transform=ax.transAxes, ha="center")
    out["evictions"] = (
        "Evictions over time, by the queue that suffered them and the evicting action",
        htmlkit.svg(fig, max(map(len, leaves), default=0), legend_rows=rows),
    )

    # 6. Jain's index and allocation ratio per bucket
    fig, ax = plt.subplots(figsize=(10, 2.8))
    tr = report.jain_trend
    if tr:
        xs = [*(b["from_ms"] / div for b in tr), tr[-1]["to_ms"] / div]
        jain, ratio = _fairness_steps(tr)
        # The ratio is a pale area with a thin edge and the index a thick dark line drawn over it: the two
        # often coincide near 1, where a second line of the same weight hid the first.
        ax.fill_between(
            *_post_steps(xs, ratio), color="#9ecae1", alpha=0.6, linewidth=0, zorder=1,
            label="allocation ratio", gid="allocation-ratio-area",
        )  # fmt: skip
        ax.step(
            xs, [*ratio, ratio[-1]], where="post", color="#3182bd", linewidth=0.9, zorder=2,
            gid="allocation-ratio",
        )  # fmt: skip
        ax.step(
            xs, [*jain, jain[-1]], where="post", color="#111111", linewidth=2.2, zorder=3,
            label="Jain's index", gid="jain-index",
        )  # fmt: skip
    ax.set_ylim(0, 1.05)
    ax.set_xlabel(unit)
    rows = htmlkit.legend_above(ax, 2)
    out["fairness"] = (
        f"Jain's fairness index and allocation ratio per {report.bucket}",
        htmlkit.svg(fig, legend_rows=rows),
    )
    return out


def _pool_figure(report: Report) -> tuple[str, str]:
    """Title and inline SVG of the fragmented GPUs per node pool, one step line per pool."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "hourglass", "font.size": 9})
    div, unit = _time_axis(report)
    fig, ax = plt.subplots(figsize=(10, 2.8))
    for p in report.pool_fragmentation:
        bk = p["buckets"]
        xs = [*(b["from_ms"] / div for b in bk), bk[-1]["to_ms"] / div]
        ys = [b["fragmented_gpus"] for b in bk]
        ax.step(xs, [*ys, ys[-1]], where="post", linewidth=1.2, label=f"pool {p['pool'] or '(default)'}")
    ax.set_xlabel(unit)
    ax.set_ylabel(f"GPUs (mean per {report.bucket})")
    rows = htmlkit.legend_above(ax, _LEGEND_COLUMNS)
    return (
        "Fragmented GPUs per node pool: idle GPUs on the pool's nodes where the probe request does not fit",
        htmlkit.svg(fig, legend_rows=rows),
    )


def _post_steps(xs: list[float], values: list[float]) -> tuple[list[float], list[float]]:
    """Bucket values as explicit steps: (x0, v0), (x1, v0), (x1, v1), (x2, v1), ... for ``len(values) + 1``
    bucket edges *xs*. matplotlib's ``step="post"`` areas drop the whole bucket before a NaN (a bucket with no
    data); explicit steps leave only the empty bucket itself out."""
    out_x: list[float] = []
    out_y: list[float] = []
    for k, v in enumerate(values):
        out_x += [xs[k], xs[k + 1]]
        out_y += [v, v]
    return out_x, out_y


def _fairness_steps(trend: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """Jain's index and the allocation ratio per bucket; NaN (a gap) where the bucket has no index: a bucket
    with no fair share anywhere, such as the window's last, one past the store's end, holds no data, and
    drawing it as 0 made every line drop at the end."""
    jain = [math.nan if b["jain_index"] is None else float(b["jain_index"]) for b in trend]
    ratio = [
        math.nan if b["jain_index"] is None and not b["allocation_ratio"] else float(b["allocation_ratio"])
        for b in trend
    ]
    return jain, ratio


# --------------------------------------------------------------------------- the page


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def render_html(report: Report, data: dict[str, Any]) -> str:
    """The whole page as a string.

    Long on purpose: the page's sections in reading order, each a few lines of HTML around the report's
    figures.
    """
    figs = _figures(report, data)
    win = report.window
    qrows = [
        [
            "\u00a0\u00a0" * r.depth + r.name,
            "∞" if r.deserved_gpus is None else f"{r.deserved_gpus:,.1f}",
            f"{r.fair_share_gpus:,.1f}",
            f"{r.fair_share_classic_gpus:,.1f}",
            f"{r.allocated_gpus:,.1f}",
            f"{r.requested_gpus:,.1f}",
            f"{r.gpu_hours:,.1f}",
            f"{r.cpu_hours:,.1f}",
            f"{r.fair_share_gpu_hours:,.1f}",
            _pct(r.received_over_fair_share),
            _pct(r.cluster_share),
            f"{r.usage_end:.3f}",
            fmt_duration(r.wait_p50_s),
            fmt_duration(r.wait_p90_s),
            fmt_duration(r.wait_p99_s),
            "/".join(str(r.evictions_suffered[k]) for k in EVICTION_KINDS[:3]),
            "/".join(str(r.evictions_caused[k]) for k in EVICTION_KINDS[:3]),
            r.pending_reasons[0]["reason"] if r.pending_reasons else "-",
        ]
        for r in report.queues
    ]
    head = [
        "queue",
        "deserved",
        "fair share",
        "fair (no kValue)",
        "allocated",
        "requested",
        "GPU-h",
        "CPU core-h",
        "fair-share GPU-h",
        "received ÷ fair",
        "of cluster",
        "decayed usage",
        "wait p50",
        "p90",
        "p99",
        "evicted r/p/c",
        "caused r/p/c",
        "typical pending reason",
    ]
    c = report.cluster
    crows = [
        ["capacity (mean GPUs)", f"{c.capacity_gpus:,.1f}"],
        ["GPU-hours allocated / capacity", f"{c.gpu_hours_allocated:,.1f} / {c.capacity_gpu_hours:,.1f}"],
        ["allocation ratio", _pct(c.allocation_ratio)],
        ["idle GPUs (mean)", f"{c.idle_gpus:,.2f}"],
        ["fragmented GPUs (mean / at end)", f"{c.fragmented_gpus:,.2f} / {c.fragmented_gpus_at_end:,.2f}"],
        [
            "evictions reclaim / preempt / consolidation",
            "/".join(str(c.evictions[k]) for k in EVICTION_KINDS[:3]),
        ],
        [
            f"Jain's index ({c.jain_queues} leaf queues)",
            "-" if c.jain_index is None else f"{c.jain_index:.3f}",
        ],
    ]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Hourglass fairness report {html.escape(fmt_time(win.from_ms))} → {html.escape(fmt_time(win.to_ms))}</title>",
        f"<style>{htmlkit.CSS}</style></head><body>",
        "<h1>Hourglass fairness report</h1>",
        f'<p class="meta">Store <code>{html.escape(report.store)}</code>; window {html.escape(fmt_time(win.from_ms))} →'
        f" {html.escape(fmt_time(win.to_ms))} ({html.escape(fmt_duration(win.length_ms / 1000))}); the store spans"
        f" {html.escape(fmt_time(win.store_first_ms))} → {html.escape(fmt_time(win.store_last_ms))}. Every figure can be"
        " re-derived with <code>hourglass sql</code> from the views in docs/report.md.</p>",
    ]
    if report.focus is not None:
        parts.append(f'<pre class="story">{html.escape(queue_story(report, report.focus))}</pre>')
    parts += [
        "<h2>Queues</h2>",
        htmlkit.table(head, qrows),
        "<h2>Cluster</h2>",
        htmlkit.table(["figure", "value"], crows),
    ]
    if report.placements:
        parts += [
            "<h2>Topology: gangs with a constraint, first placed in the window</h2>",
            htmlkit.table(
                ["queue", "gangs", "required level", "preferred level", "got preferred level"],
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
            ),
        ]
    if report.workload:
        from analytics.reports.workload import shape_text

        parts += [
            "<h2>Workload scored against by fgd / frag-aware at the window's end</h2>",
            htmlkit.table(
                ["pool", "learnt from", "GPUs per pod", "cores", "GPU models", "share"],
                [
                    [
                        p["pool"] or "(default)",
                        "prior" if p["prior"] else f"{p['pods']:,} pods",
                        shape_text(t),
                        f"{t['cpu_millicores'] / 1000:,.1f}",
                        ", ".join(t["gpu_models"]) or "any",
                        _pct(t["weight"]),
                    ]
                    for p in report.workload
                    for t in p["types"]
                ],
            ),
        ]
    # One pool's curve is the cluster's, already drawn in the allocation figure.
    if len(report.pool_fragmentation) > 1:
        title, svg = _pool_figure(report)
        parts += [
            "<h2>Fragmented GPUs per node pool</h2>",
            htmlkit.table(
                ["pool", "nodes", "GPUs", "fragmented GPUs (mean)", "at end"],
                [
                    [
                        p["pool"] or "(default)",
                        f"{p['nodes']:,}",
                        f"{p['gpus']:,}",
                        f"{p['fragmented_gpus']:,.2f}",
                        f"{p['fragmented_gpus_at_end']:,.2f}",
                    ]
                    for p in report.pool_fragmentation
                ],
            ),
            # Not one of PLOTS: those are the cluster's and the queues' figures, drawn for every report.
            f'<figure id="pool-fragmentation"><figcaption>{html.escape(title)}</figcaption>{svg}</figure>',
        ]
    parts += [f'<p class="note">Note: {html.escape(n)}</p>' for n in report.notes]
    for pid in PLOTS:
        title, svg = figs[pid]
        parts.append(f'<figure id="plot-{pid}"><figcaption>{html.escape(title)}</figcaption>{svg}</figure>')
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(report: Report, path: Path, con: duckdb.DuckDBPyConnection | None = None) -> None:
    """Query the plot series of *report* from its store (on *con* if given) and write the page to *path*."""
    own = con is None
    if con is None:
        con, _ = connect(report.store)
    try:
        data = series(con, report)
    except duckdb.Error as e:
        raise ReportError(f"{report.store}: query failed: {e}") from e
    finally:
        if own:
            con.close()
    try:
        path.write_text(render_html(report, data), encoding="utf-8")
    except OSError as e:
        raise ReportError(f"cannot write {path}: {e}") from e
