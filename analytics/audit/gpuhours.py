"""What a queue received: the one definition of "GPUs held from t1 to t2" behind every GPU-hours figure.

A *run* of a pod starts at a ``PodBound`` and ends at the first ``PodFinished`` or ``PodDeleted`` of the
same pod after it (by log offset), so an evicted pod holds its devices through the eviction grace period,
until its ``PodFinished``. It holds, the whole run, the milli-GPU it was bound with: ``len(gpu_devices)``
devices of its fraction (1000 for whole GPUs), or without devices ``gpu_fraction_milli`` x
``gpu_fraction_devices`` (else ``gpus`` x 1000), as its latest ``PodSubmitted`` before the bind asked. Its
queue is that ``PodSubmitted``'s ``queue``, else the latest ``PodGroupUpserted`` queue of its pod group. A
run with no end yet holds until the end of the log: the latest event or cycle time (``run_span.last_ms``),
which for a simulation is the end of the run. Never past it, also in a window that reaches further: what
happened after the log ends is not known (``hourglass report`` clips such a window to the log).

This is the rule of the ``pod_runs`` view (:mod:`analytics.audit.views`), which ``hourglass report`` and
``hourglass sql`` read, and of the simulator's summary (:mod:`analytics.simulation.simulate`); here it is computed in
plain Python from a run directory's files, in exact integers (milli-GPU x ms).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Final

from analytics.rundir import CYCLES_FILE, EVENTS_FILE

__all__ = ["MILLI_GPU_MS_PER_GPU_HOUR", "held_gpu_ms", "held_gpu_ms_of"]

MILLI_GPU_MS_PER_GPU_HOUR: Final = 1000 * 3_600_000
_GPU_MILLI: Final = 1000


def _bound_milli(sub: dict[str, Any] | None, devices: list[int]) -> int:
    """Milli-GPU a bound pod holds (the ``gpu_milli`` column of ``pod_runs``)."""
    r = (sub or {}).get("requests") or {}
    frac = r.get("gpu_fraction_milli")
    if devices:
        return len(devices) * (frac if frac is not None else _GPU_MILLI)
    if frac is not None:
        return int(frac) * int(r.get("gpu_fraction_devices") or 1)
    return int(r.get("gpus") or 0) * _GPU_MILLI


def held_gpu_ms(run_dir: Path | str, t1: int | None = None, t2: int | None = None) -> dict[str, int]:
    """Milli-GPU x ms each leaf queue held over ``[t1, t2)`` (ms; None = unbounded), from *run_dir*'s
    ``events.jsonl`` (and ``cycles.jsonl`` for where the log ends), by the rule in the module doc.

    Every leaf queue the log declares is a key (0 if it held nothing); a run whose pod names no queue is
    not counted. Divide by :data:`MILLI_GPU_MS_PER_GPU_HOUR` for GPU-hours.
    """
    run = Path(run_dir)

    def events() -> Iterator[dict[str, Any]]:
        with (run / EVENTS_FILE).open() as f:
            for line in f:
                yield json.loads(line)

    def cycle_times() -> Iterator[int]:
        cycles = run / CYCLES_FILE
        if cycles.exists():
            with cycles.open() as f:
                for line in f:
                    yield int(json.loads(line)["logical_time_ms"])

    return held_gpu_ms_of(events(), cycle_times, t1, t2)


def held_gpu_ms_of(
    events: Iterable[dict[str, Any]],
    cycle_times: Callable[[], Iterable[int]],
    t1: int | None = None,
    t2: int | None = None,
) -> dict[str, int]:
    """:func:`held_gpu_ms` of decoded events (the dicts of ``events.jsonl`` lines, in offset order) and the
    run's cycle times (read after the events: they only say where the log ends)."""
    log_end = 0
    parents: set[str] = set()
    leaves: set[str] = set()
    group_queue: dict[str, str] = {}  # pod group uid -> its latest queue
    submitted: dict[str, dict[str, Any]] = {}  # pod uid -> its latest PodSubmitted
    # Each run: [group uid, the PodSubmitted queue, milli-GPU, start, end (None: open)].
    runs: list[list[Any]] = []
    open_runs: dict[str, list[int]] = defaultdict(list)  # pod uid -> indices of its open runs
    for e in events:
        kind, at = e["type"], int(e["at_ms"])
        log_end = max(log_end, at)
        if kind == "QueueUpserted":
            leaves.add(e["name"])
            if e.get("parent") is not None:
                parents.add(e["parent"])
        elif kind == "PodGroupUpserted":
            group_queue[e["uid"]] = e["queue"]
        elif kind == "PodSubmitted":
            submitted[e["uid"]] = e
        elif kind == "PodBound":
            sub = submitted.get(e["uid"])
            job = f"{sub['namespace']}/{sub['pod_group']}" if sub else None
            queue = sub.get("queue") if sub else None
            open_runs[e["uid"]].append(len(runs))
            runs.append([job, queue, _bound_milli(sub, e.get("gpu_devices") or []), at, None])
        elif kind in ("PodFinished", "PodDeleted"):
            for i in open_runs.pop(e["uid"], []):  # the first end after a bind closes it
                runs[i][4] = at
    for at in cycle_times():
        log_end = max(log_end, at)

    lo = -math.inf if t1 is None else t1
    hi = math.inf if t2 is None else t2
    open_end = log_end
    held: dict[str, int] = dict.fromkeys(sorted(leaves - parents), 0)
    for job, queue, milli, start, end in runs:
        q = queue if queue is not None or job is None else group_queue.get(job)
        if q is None or not milli:
            continue
        overlap = min(open_end if end is None else end, hi) - max(start, lo)
        if overlap > 0:
            held[q] = held.get(q, 0) + milli * int(overlap)
    return held
