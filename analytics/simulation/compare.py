"""``hourglass simulate --compare-scoring kai,fgd,frag-aware``: the same run once per node-scoring rule, and
the GPUs each left unallocated (and fragmented) over time.

Every run has the same inputs (trace or scenario, tenants, period, seed); only the tenants' ``engine.
node_scoring`` differs, so the difference between the series is the placement policy's. ``kai`` is KAI
Scheduler's default (binpack: its GPU placement strategy packs). The series cut the simulated span into
equal slices and give each slice's time-weighted mean of the simulator's exact step functions (GPUs held,
fragmented GPUs: :class:`analytics.simulation.simulate.SimulationResult` ``timeline``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from analytics.simulation.simulate import GPU_MILLI, SimulationResult

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["COMPARE_FORMAT", "compare_scoring", "render_comparison", "series_over_time"]

COMPARE_FORMAT: Final = "hourglass-sim-compare/1"


def series_over_time(result: SimulationResult, slices: int) -> list[dict[str, float]]:
    """`slices` equal slices of the run's span, each with the mean unallocated and fragmented GPUs over it
    (``start_s``, ``end_s``, ``unallocated_gpus``, ``fragmented_gpus``), weighted by time exactly."""
    if slices < 1:
        raise ValueError(f"slices must be at least 1, got {slices}")
    end_ms = max(round(result.summary["simulated_seconds"] * 1000), 1)
    cap = result.capacity_gpu_milli
    # The timeline's points hold until the next; integrate held and fragmented milli-GPU-ms per slice.
    points = [(t, held, frag) for t, held, frag, _ in result.timeline] or [(0, 0, 0)]
    edges = [end_ms * i // slices for i in range(slices + 1)]
    held_ms = [0] * slices
    frag_ms = [0] * slices
    for k, (t, held, frag) in enumerate(points):
        until = points[k + 1][0] if k + 1 < len(points) else end_ms
        for s in range(slices):
            lo, hi = max(t, edges[s]), min(until, edges[s + 1])
            if hi > lo:
                held_ms[s] += held * (hi - lo)
                frag_ms[s] += frag * (hi - lo)
    out = []
    for s in range(slices):
        span = max(edges[s + 1] - edges[s], 1)
        out.append(
            {
                "start_s": edges[s] / 1000,
                "end_s": edges[s + 1] / 1000,
                "unallocated_gpus": round((cap * span - held_ms[s]) / span / GPU_MILLI, 3),
                "fragmented_gpus": round(frag_ms[s] / span / GPU_MILLI, 3),
            }
        )
    return out


def compare_scoring(
    run: Callable[[str], SimulationResult], rules: Sequence[str], slices: int = 10
) -> dict[str, Any]:
    """Run `run(rule)` for each rule and collect, per rule, the cluster summary figures and the series over
    time (:func:`series_over_time`); JSON-ready, rules in the order given."""
    policies: dict[str, Any] = {}
    for rule in rules:
        result = run(rule)
        c = result.summary["cluster"]
        policies[rule] = {
            "engine_config_hash": result.summary["engine_config_hash"],
            "mean_unallocated_gpus": c["mean_unallocated_gpus"],
            "unallocated_gpus_at_end": c["unallocated_gpus_at_end"],
            "mean_fragmented_gpus": c["mean_fragmented_gpus"],
            "tasks_pending_at_end": c["tasks_pending_at_end"],
            "gpus": c["gpus"],
            "over_time": series_over_time(result, slices),
            "wall_seconds": result.summary["speed"]["wall_seconds"],
        }
    return {"format": COMPARE_FORMAT, "slices": slices, "policies": policies}


def _span(seconds: float) -> str:
    days = seconds / 86_400
    return f"{days:,.1f} d" if days >= 1 else f"{seconds / 3600:,.1f} h"


def render_comparison(doc: dict[str, Any], console: Console) -> None:
    """One table: a row per time slice, per rule its mean unallocated GPUs (and fragmented GPUs when the
    width allows), then the whole run's mean and the value at the end."""
    from analytics.terminal import Col, dropped_note, fitted_table

    rules = list(doc["policies"])
    cols = [Col("from", "left"), Col("to", "left")]
    cols += [Col(f"{r} unalloc") for r in rules]
    cols += [Col(f"{r} frag", drop=1) for r in rules]
    first = doc["policies"][rules[0]]["over_time"]
    rows: list[list[str]] = []
    for i, sl in enumerate(first):
        row = [_span(sl["start_s"]), _span(sl["end_s"])]
        row += [f"{doc['policies'][r]['over_time'][i]['unallocated_gpus']:,.1f}" for r in rules]
        row += [f"{doc['policies'][r]['over_time'][i]['fragmented_gpus']:,.1f}" for r in rules]
        rows.append(row)
    rows.append(
        ["whole run", "mean"]
        + [f"{doc['policies'][r]['mean_unallocated_gpus']:,.1f}" for r in rules]
        + [f"{doc['policies'][r]['mean_fragmented_gpus']:,.1f}" for r in rules]
    )
    rows.append(
        ["at end", ""]
        + [f"{doc['policies'][r]['unallocated_gpus_at_end']:,.1f}" for r in rules]
        + ["" for _ in rules]
    )
    gpus = doc["policies"][rules[0]]["gpus"]
    table, dropped = fitted_table(
        cols, rows, console.width, title=f"Unallocated GPUs over time, per node-scoring rule ({gpus:,} GPUs)"
    )
    console.print(table)
    note = dropped_note(dropped, console.width, "--json has them")
    if note is not None:
        console.print(note, highlight=False)
