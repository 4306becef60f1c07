"""``hourglass whatif --html FILE``: the comparison as one self-contained, offline HTML page with plots;
also the table formatting the terminal output shares.

The same style as ``hourglass report --html`` (:mod:`analytics.reports.report_html`): matplotlib figures inlined as
SVG, no script, no stylesheet link, no image or font URL, so the page makes no network request. One section
per what-if (a sweep has several): the tables, GPU-hours per queue (recorded vs what-if), wait percentiles
per queue, and GPUs held over time by the recording and by the what-if. It works on the JSON document of a
what-if (:meth:`analytics.rerun.whatif.WhatIfResult.as_json`) and the two runs' held-GPU timelines, so it does not
import :mod:`analytics.rerun.whatif`, which imports it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from analytics.humanize import duration
from analytics.reports import htmlkit

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "CLUSTER_ROWS",
    "FIGURES",
    "HEAD",
    "PLOTS",
    "Timeline",
    "fmt",
    "render_html",
    "write_html",
]

#: The id suffix of each plot's <figure> element, in section order.
PLOTS: Final = ("gpu-hours", "waits", "allocation")
MAX_POINTS: Final = 2000  # steps drawn per series; longer timelines are thinned (every k-th change)
GPU_MILLI: Final = 1000
#: (time ms, leaf queue -> milli-GPU held from then on), as :class:`analytics.rerun.whatif.Outcomes` keeps it.
Timeline = list[tuple[int, dict[str, int]]]

#: Per-queue figures, in table order (the keys of each side of ``queues[NAME]`` in the JSON).
FIGURES: Final = (
    "gpu_hours",
    "fair_share_gpu_hours",
    "received_over_fair",
    "wait_p50_s",
    "wait_p90_s",
    "wait_p99_s",
    "evictions",
    "evictions_caused",
    "pending_at_end",
)


def fmt(key: str, value: Any) -> str:
    """One figure as the tables show it (durations, percentages, thousands separators; None as -)."""
    if value is None:
        return "-"
    if key.startswith("wait_"):
        return duration(float(value))
    if key in ("received_over_fair", "allocation_ratio"):
        return f"{value:.0%}" if key == "received_over_fair" else f"{value:.2%}"
    if isinstance(value, float):
        return f"{value:,.1f}" if key != "fragmented_gpus" else f"{value:,.2f}"
    return f"{value:,}"


HEAD: Final = {
    "gpu_hours": "GPU-h",
    "fair_share_gpu_hours": "fair GPU-h",
    "received_over_fair": "recv/fair",
    "wait_p50_s": "wait p50",
    "wait_p90_s": "p90",
    "wait_p99_s": "p99",
    "evictions": "evicted",
    "evictions_caused": "caused",
    "pending_at_end": "pending",
}
CLUSTER_ROWS: Final = (
    ("gpu_hours", "GPU-hours allocated"),
    ("allocation_ratio", "GPU allocation ratio (mean)"),
    ("fragmented_gpus", "fragmented GPUs (mean)"),
    ("wait_p50_s", "wait p50"),
    ("wait_p90_s", "wait p90"),
    ("wait_p99_s", "wait p99"),
    ("started", "pods started"),
    ("evictions", "evictions"),
    ("pending_at_end", "jobs pending at end"),
)


def _changed(doc: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in doc["changed"].items()) or "no change"


def _leaves(doc: dict[str, Any]) -> list[str]:
    return [
        name
        for name, sides in doc["queues"].items()
        if (sides["recorded"] or sides["whatif"] or {}).get("leaf")
    ]


def _figure() -> tuple[Figure, Axes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 3.4))
    return fig, ax


def _side(doc: dict[str, Any], queue: str, side: str, key: str) -> float:
    return float((doc["queues"][queue][side] or {}).get(key) or 0)


def _bars(doc: dict[str, Any]) -> str:
    leaves = _leaves(doc)
    fig, ax = _figure()
    xs = range(len(leaves))
    for off, side, label in ((-0.2, "recorded", "recorded"), (0.2, "whatif", "what-if")):
        ax.bar(
            [x + off for x in xs], [_side(doc, q, side, "gpu_hours") for q in leaves], width=0.4, label=label
        )
    ax.set_xticks(list(xs), leaves)
    ax.set_ylabel("GPU-hours")
    ax.legend(fontsize="small")
    return htmlkit.svg(fig, 8)


def _waits(doc: dict[str, Any]) -> str:
    leaves = _leaves(doc)
    fig, ax = _figure()
    xs = range(len(leaves))
    for k, (side, label) in enumerate((("recorded", "recorded"), ("whatif", "what-if"))):
        off = -0.2 if k == 0 else 0.2
        p90 = [_side(doc, q, side, "wait_p90_s") / 3600 for q in leaves]
        p50 = [_side(doc, q, side, "wait_p50_s") / 3600 for q in leaves]
        ax.bar([x + off for x in xs], p90, width=0.4, alpha=0.35, color=f"C{k}")
        ax.bar([x + off for x in xs], p50, width=0.4, color=f"C{k}", label=f"{label} p50 (pale: p90)")
    ax.set_xticks(list(xs), leaves)
    ax.set_ylabel("wait, hours")
    ax.legend(fontsize="small")
    return htmlkit.svg(fig, 8)


def _steps(
    tl: Timeline, leaves: list[str], start_ms: int, end_ms: int
) -> tuple[list[float], list[list[float]]]:
    """Day positions and, per leaf, GPUs held from each position on (thinned to about MAX_POINTS steps)."""
    pts = tl[:: max(len(tl) // MAX_POINTS, 1)]
    first = pts[0][1] if pts and pts[0][0] == start_ms else {}  # held at the window's start
    xs = [start_ms / 86_400_000] + [t / 86_400_000 for t, _ in pts] + [end_ms / 86_400_000]
    per_leaf = []
    for q in leaves:
        ys = [first.get(q, 0) / GPU_MILLI] + [v.get(q, 0) / GPU_MILLI for _, v in pts]
        per_leaf.append([*ys, ys[-1]])
    return xs, per_leaf


def _allocation(doc: dict[str, Any], recorded: Timeline, whatif: Timeline) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    leaves = _leaves(doc)
    fig, axes = plt.subplots(2, 1, figsize=(10, 5.2), sharex=True)
    gpus = doc["cluster"]["recorded"].get("gpus", 0)
    for ax, side, tl, label in (
        (axes[0], "recorded", recorded, "recorded"),
        (axes[1], "whatif", whatif, "what-if"),
    ):
        lo, hi = doc["cluster"][side]["window_ms"]
        xs, ys = _steps(tl, leaves, int(lo), int(hi))
        ax.stackplot(xs, ys, labels=leaves, step="post", alpha=0.85)
        ax.axhline(gpus, color="black", linewidth=0.6, linestyle=":")
        ax.set_ylabel(f"GPUs held, {label}")
    axes[0].legend(fontsize="small", loc="lower right")
    axes[1].set_xlabel("simulated days")
    return htmlkit.svg(fig, 6)


def _section(doc: dict[str, Any], recorded: Timeline, whatif: Timeline, n: int) -> list[str]:
    head = ["queue", "run", *(HEAD[k] for k in FIGURES)]
    rows = []
    for name, sides in doc["queues"].items():
        for label, side in (("recorded", sides["recorded"]), ("what-if", sides["whatif"])):
            rows.append(
                [name if label == "recorded" else "", label, *(fmt(k, (side or {}).get(k)) for k in FIGURES)]
            )
    cl = doc["cluster"]
    crows = [[label, fmt(k, cl["recorded"].get(k)), fmt(k, cl["whatif"].get(k))] for k, label in CLUSTER_ROWS]
    c = doc["censored_pods"]
    figs = (
        ("GPU-hours per leaf queue: recorded vs what-if", _bars(doc)),
        ("Wait per leaf queue (p50, and p90 pale)", _waits(doc)),
        ("GPUs held over time per leaf queue (dotted: capacity)", _allocation(doc, recorded, whatif)),
    )
    parts = [
        f"<h2>What if {html.escape(_changed(doc))}</h2>",
        "<h3>Queues</h3>",
        htmlkit.table(head, rows),
        "<h3>Cluster</h3>",
        htmlkit.table(["figure", "recorded", "what-if"], crows),
        f'<p class="note">Pods that never finished by themselves in the recording run for their recorded time'
        f" so far: {c['running_at_end']} running at the end, {c['evicted_unfinished']} evicted and unfinished,"
        f" {c['never_started']} never started.</p>",
    ]
    for pid, (title, svg) in zip(PLOTS, figs, strict=True):
        parts.append(
            f'<figure id="plot-{pid}-{n}"><figcaption>{html.escape(title)}</figcaption>{svg}</figure>'
        )
    return parts


def render_html(runs: Sequence[tuple[dict[str, Any], Timeline, Timeline]], recording: str) -> str:
    """The whole page: one section per (what-if JSON document, recorded timeline, what-if timeline)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ImportError("--html needs matplotlib: pip install 'hourglass[plot]'") from exc
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Hourglass what-if of {html.escape(recording)}</title>",
        f"<style>{htmlkit.CSS}</style></head><body>",
        "<h1>Hourglass what-if</h1>",
        f"<p class=\"meta\">Recording <code>{html.escape(recording)}</code>: the users' and nodes' actions"
        " replayed, every scheduling outcome re-decided under the changed settings (docs/whatif.md).</p>",
    ]
    for n, (doc, recorded, whatif) in enumerate(runs):
        parts += _section(doc, recorded, whatif, n)
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(runs: Sequence[tuple[dict[str, Any], Timeline, Timeline]], path: Path, recording: str) -> None:
    """Write the page of *runs* (see :func:`render_html`) to *path*."""
    path.write_text(render_html(runs, recording), encoding="utf-8")
