"""``hourglass whatif``: re-run a recorded history under another configuration and compare the outcomes.

Only what the cluster's users and nodes did is taken from the recording; every scheduling outcome (binds,
evictions, start times) comes from the engine under the changed settings:

* **taken from the log**: the nodes and queues, every job (pod group) with its pods as first submitted
  (time, queue, requests, node affinity, priority), and how long each pod ran: the run its owner ended
  (``PodFinished`` not preceded by an eviction), and whether it failed;
* **re-decided**: everything else. The run is driven by :class:`analytics.simulation.simulate.Simulator`, the same
  clock, cycle-skipping rule, eviction grace and re-submission of evicted pods as ``hourglass simulate``,
  so a no-change what-if reproduces a recorded simulation byte for byte (the fidelity check).
* **censored pods**: a pod that never finished by itself in the recording (still running at the end, or
  evicted and never run to the end) runs for its recorded time so far: its longest run. A pod that never
  started has no run time; it runs until the end of the recording. The report counts all three.
* **keep-pending generators** of a scenario run (``keep_pending`` workloads) are the users' own rule
  ("always keep one job waiting"), so their submissions depend on when earlier jobs started: the rule is
  re-run, not its recorded submissions. Jobs of every other workload are taken from the log.

The log of a running deployment (an embedded log directory or ``kafka://…``) is re-run by
:mod:`analytics.rerun.whatif_service` (the real scheduler service over an in-memory log, the binder's delays and
the pods' runs as recorded) and measured here by the same :func:`measure`.

``--set KEY=VALUE`` changes the configuration by dotted path: for a scenario run (``simulate --config``)
the scenario file's keys (``fairshare.k_value``, ``queues.0.gpu.weight``, ``nodes.0.count``,
``cycle_period``); for a trace run the tenants file's keys (``engine.k_value``, ``queues.1.gpu.quota``,
``cycle_period_s``), with the scenario names ``fairshare.k_value`` / ``fairshare.half_life_s`` /
``fairshare.refresh_s`` accepted as aliases of ``engine.k_value`` / ``engine.usage_half_life_s`` /
``engine.usage_refresh_s``. A comma list (``fairshare.k_value=0,0.5,1``) is a sweep: one what-if per value
(the product over several swept keys), each in its own process.

Both columns are measured by one function, :func:`measure`, on a run's decoded events and cycle records:
the recording's (:func:`outcomes` reads its directory, in a second process while the what-if runs) and the
what-if's own (its ``--out DIR``, else kept in memory by :class:`_CaptureLog`). GPU-hours are
:func:`analytics.audit.gpuhours.held_gpu_ms_of`, the one definition; the rest is one pass over each log (see
``docs/whatif.md`` for every figure's rule).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import copy
import itertools
import json
import math
import multiprocessing
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from analytics.audit.gpuhours import MILLI_GPU_MS_PER_GPU_HOUR, held_gpu_ms_of
from analytics.fairness import capped_fair_shares, received_over_fair_share
from analytics.gctune import gc_tuned
from analytics.progress import count_bar, day_bar
from analytics.rerun.replay import add_log_argument
from analytics.rerun.whatif_html import CLUSTER_ROWS, FIGURES, HEAD, fmt
from analytics.rerun.whatif_service import (
    ServiceLogError,
    ServiceRecording,
    load_service_recording,
    log_window,
    service_config,
    usage_config,
)
from analytics.rerun.whatif_service import rerun as rerun_service_log
from analytics.rundir import CYCLES_FILE, EVENTS_FILE, DirLog, SimLog, read_cycles, read_manifest
from analytics.simulation.simulate import JobSpec, KeepPending, Simulator, UsageFn, simulate
from ingest import events as ev
from ingest.events import dump_event
from ingest.tenants import TenantsConfig
from scheduler.engine.record.decisions import CycleRecord

__all__ = [
    "Censored",
    "Change",
    "Outcomes",
    "Recording",
    "WhatIfError",
    "WhatIfResult",
    "add_arguments",
    "changed_text",
    "compare",
    "expand_sweeps",
    "is_service_log",
    "load_recording",
    "measure",
    "measuring",
    "outcomes",
    "parse_change",
    "parse_window",
    "render",
    "rerun",
    "rerun_service",
    "run_cli",
    "run_whatif",
    "service_outcomes",
    "usage_text",
]

GPU_MILLI: Final = 1000
MS_PER_HOUR: Final = 3_600_000
#: Keys of a trace run's tenants file that the scenario spelling also names.
TENANT_ALIASES: Final = {
    "fairshare.k_value": "engine.k_value",
    "fairshare.half_life_s": "engine.usage_half_life_s",
    "fairshare.refresh_s": "engine.usage_refresh_s",
}
_BY_WORKLOAD = re.compile(r"by (?:higher priority )?workload (\S+?)\.?$")


class WhatIfError(ValueError):
    """The recording cannot be re-run as asked (not a run directory, bad --set, bad window)."""


# --------------------------------------------------------------------------- changes and windows


@dataclass(frozen=True, slots=True)
class Change:
    """One ``--set KEY=VALUE``: the dotted key, the raw text and the value as YAML reads it."""

    key: str
    raw: str
    value: Any

    @property
    def text(self) -> str:
        return f"{self.key}={self.raw}"


def parse_change(item: str) -> list[Change]:
    """``KEY=VALUE`` as changes: one, or one per value of a comma list (a sweep; ``[1, 2]`` is one list)."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise WhatIfError(f"--set {item!r}: expected KEY=VALUE, e.g. fairshare.k_value=0")
    raw = raw.strip()
    parts = [raw] if raw.startswith(("[", "{", '"', "'")) or "," not in raw else raw.split(",")
    out = []
    for part in parts:
        part = part.strip()
        if not part:
            raise WhatIfError(f"--set {item!r}: an empty value in the list")
        try:
            value = yaml.safe_load(part)
        except yaml.YAMLError as exc:
            raise WhatIfError(f"--set {item!r}: {part!r} is not valid YAML: {exc}") from None
        out.append(Change(key, part, value))
    return out


def expand_sweeps(items: Sequence[str]) -> list[list[Change]]:
    """Every combination of the ``--set`` items (one list of changes per what-if run, in order)."""
    per_key = [parse_change(i) for i in items]
    return [list(combo) for combo in itertools.product(*per_key)] if per_key else [[]]


_DURATION_UNITS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _time_ms(text: str, what: str) -> int:
    m = re.fullmatch(r"\s*([0-9]+)\s*(ms|s|m|h|d)?\s*", text)
    if m is None:
        raise WhatIfError(
            f"--window: {what} {text!r} is not a time such as 0, 30d, 12h or 3600s (ms if bare)"
        )
    return int(m.group(1)) * _DURATION_UNITS[m.group(2) or "ms"]


def parse_window(text: str) -> tuple[int, int]:
    """``FROM..TO`` as milliseconds of logical time (each ``30d``, ``12h``, ``90m``, ``3600s`` or bare ms)."""
    lo, sep, hi = text.partition("..")
    if not sep:
        raise WhatIfError(f"--window {text!r}: expected FROM..TO, e.g. 0..30d")
    t1, t2 = _time_ms(lo, "FROM"), _time_ms(hi, "TO")
    if t2 <= t1:
        raise WhatIfError(f"--window {text!r}: TO must be after FROM")
    return t1, t2


# --------------------------------------------------------------------------- the recording


@dataclass(slots=True)
class Censored:
    """Pods that did not finish by themselves in the recording (their run time is what they ran so far)."""

    running_at_end: int = 0
    evicted_unfinished: int = 0
    never_started: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "running_at_end": self.running_at_end,
            "evicted_unfinished": self.evicted_unfinished,
            "never_started": self.never_started,
        }


@dataclass(slots=True)
class Recording:
    """What a what-if takes from a recorded simulation run directory."""

    path: Path
    manifest: dict[str, Any]
    scenario: dict[str, Any] | None  # the validated scenario document of a ``simulate --config`` run
    nodes: list[ev.NodeUpserted]
    jobs: list[JobSpec]  # every job not submitted by a keep-pending rule, in recorded arrival order
    censored: Censored
    end_ms: int  # the latest event or cycle time
    rule_jobs: int = 0  # recorded jobs of keep-pending rules (re-run as the rule, not replayed)


def _rule_patterns(scenario: dict[str, Any] | None) -> list[tuple[str, re.Pattern[str]]]:
    """(queue, pattern of job names) of the scenario's keep-pending rules (names as Scenario.build gives)."""
    if scenario is None:
        return []
    out = []
    for i, w in enumerate(scenario.get("workloads") or []):
        if w.get("kind") == "keep_pending":
            prefix = w.get("name") or f"{w['queue']}-w{i}"
            out.append((w["queue"], re.compile(re.escape(prefix) + r"-[0-9]+")))
    return out


def is_service_log(spec: Path | str) -> bool:
    """True for the log of a running deployment: ``kafka://…`` or a directory without a manifest (an
    embedded log directory); those are re-run by :mod:`analytics.rerun.whatif_service`."""
    text = str(spec)
    return text.startswith("kafka://") or (
        Path(text).is_dir() and not (Path(text) / "manifest.json").is_file()
    )


def load_recording(path: Path | str) -> Recording:
    """Read a ``simulate --out`` directory: its manifest, nodes, jobs and the pods' recorded run times.

    Long on purpose: one pass over the manifest and the events file, one branch per event type,
    then the jobs assembled from their pods.
    """
    run = Path(path)
    spec = str(path)
    if is_service_log(spec):
        raise WhatIfError(
            f"{spec}: the log of a running deployment; re-run it with analytics.rerun.whatif_service (the command"
            " does so)"
        )
    if not run.is_dir():
        raise WhatIfError(f"{spec}: no such run directory")
    try:
        manifest = read_manifest(run)
    except (OSError, ValueError) as exc:
        raise WhatIfError(f"{spec}: {exc}") from None
    scenario = (manifest.get("inputs") or {}).get("scenario_config")
    if scenario is None and "tenants" not in manifest:
        origin = ((manifest.get("inputs") or {}).get("whatif") or {}).get("recording")
        if origin is not None:  # a service log's what-if kept with --out: no users' inputs to re-run
            raise WhatIfError(
                f"{spec}: a what-if of the service log {origin} (whatif --out); run whatif on that log with"
                " the changes together"
            )
        raise WhatIfError(f"{spec}: the manifest has neither a scenario nor a tenants config")
    rules = _rule_patterns(scenario)

    nodes: list[ev.NodeUpserted] = []
    groups: dict[str, dict[str, Any]] = {}  # group uid -> its first PodGroupUpserted
    pods: dict[str, dict[str, Any]] = {}  # pod uid -> its first PodSubmitted
    order: list[str] = []  # group uids, by first PodGroupUpserted
    bound_at: dict[str, int] = {}  # pod uid -> start of its open run
    evicted: set[str] = set()  # pods whose open run was evicted
    done: dict[str, tuple[int, str]] = {}  # pod uid -> (run time, phase) of the run its owner ended
    longest: dict[str, int] = defaultdict(int)  # pod uid -> its longest evicted or open run so far
    end_ms = 0
    try:
        with (run / EVENTS_FILE).open("rb") as fh:
            for line in fh:
                e = json.loads(line)
                kind, at = e["type"], e["at_ms"]
                end_ms = max(end_ms, at)
                uid = e.get("uid")
                if kind == "PodBound":
                    bound_at[uid] = at
                elif kind == "PodReleasing":
                    evicted.add(uid)
                elif kind == "PodFinished":
                    start = bound_at.pop(uid, None)
                    if start is not None:
                        if uid in evicted:
                            longest[uid] = max(longest[uid], at - start)
                        elif uid not in done:
                            done[uid] = (at - start, e.get("phase", "Succeeded"))
                    evicted.discard(uid)
                elif kind == "PodSubmitted":
                    pods.setdefault(uid, e)
                elif kind == "PodGroupUpserted":
                    if uid not in groups:
                        groups[uid] = e
                        order.append(uid)
                elif kind == "NodeUpserted":
                    nodes.append(ev.NodeUpserted.model_validate(e))
        with (run / CYCLES_FILE).open("rb") as fh:
            for line in fh:
                m = re.search(rb'"logical_time_ms":([0-9]+)', line)
                if m is not None:
                    end_ms = max(end_ms, int(m.group(1)))
    except (OSError, ValueError, KeyError) as exc:
        raise WhatIfError(f"{spec}: cannot read the run's log: {exc}") from None
    for uid, start in bound_at.items():  # still running at the end
        longest[uid] = max(longest[uid], end_ms - start)

    by_group: dict[str, list[str]] = defaultdict(list)
    for uid, p in pods.items():
        by_group[f"{p['namespace']}/{p['pod_group']}"].append(uid)
    jobs: list[JobSpec] = []
    censored = Censored()
    rule_jobs = 0
    for guid in order:
        g = groups[guid]
        if any(g["namespace"] == q and pat.fullmatch(g["name"]) for q, pat in rules):
            rule_jobs += 1
            continue
        members = by_group.get(guid, [])
        if not members:
            continue  # a pod group whose pods never came
        first = pods[members[0]]
        runtime = 0
        fails = False
        for uid in members:
            if uid in done:
                runtime = max(runtime, done[uid][0])
                fails = fails or done[uid][1] == "Failed"
            elif uid in bound_at:
                censored.running_at_end += 1
                runtime = max(runtime, longest[uid])
            elif uid in longest:
                censored.evicted_unfinished += 1
                runtime = max(runtime, longest[uid])
            else:
                censored.never_started += 1
                runtime = max(runtime, end_ms - int(first.get("created_at_ms") or g["created_at_ms"]))
        jobs.append(
            JobSpec(
                name=g["name"],
                queue=first["queue"] or g["queue"],
                created_ms=int(g["created_at_ms"] if g.get("created_at_ms") is not None else first["at_ms"]),
                runtime_ms=runtime,
                requests=ev.PodRequests.model_validate(first["requests"]),
                pods=len(members),
                priority=int(g.get("priority") or 0),
                affinity=tuple(
                    ev.NodeSelectorTerm.model_validate(t) for t in first.get("node_affinity") or []
                ),
                fails=fails,
            )
        )
    return Recording(run, manifest, scenario, nodes, jobs, censored, end_ms, rule_jobs)


# --------------------------------------------------------------------------- the re-run


@dataclass(slots=True)
class _Plan:
    """The simulator's inputs for one what-if."""

    tenants: TenantsConfig
    nodes: list[ev.NodeUpserted]
    rules: list[KeepPending]
    end_ms: int | None
    usage: UsageFn | None
    period_s: int


def _ms(value: Any) -> Any:
    return f"{value}ms" if isinstance(value, int) and not isinstance(value, bool) else value


def _scenario_doc(dumped: dict[str, Any]) -> dict[str, Any]:
    """The manifest's scenario dump as a scenario document: durations there are milliseconds, while a bare
    number in a scenario file means seconds, so each duration is written ``"<n>ms"``."""
    doc = copy.deepcopy(dumped)
    for k in ("duration", "cycle_period", "eviction_grace"):
        doc[k] = _ms(doc.get(k))
    for w in doc.get("workloads") or []:
        for k in ("start", "stop"):
            if k in w:
                w[k] = _ms(w[k])
        rt = w.get("runtime")
        if isinstance(rt, dict):
            for k in ("mean", "min", "max", "median"):
                if k in rt:
                    rt[k] = _ms(rt[k])
        elif rt is not None:
            w["runtime"] = _ms(rt)
        for j in w["jobs"] if isinstance(w.get("jobs"), list) else []:
            for k in ("at", "runtime"):
                if j.get(k) is not None:
                    j[k] = _ms(j[k])
    return doc


def _plan(rec: Recording, changes: Sequence[Change]) -> _Plan:
    """Apply *changes* to the recording's configuration; raises :class:`WhatIfError` naming the key."""
    from analytics.simulation.scenario import ScenarioError, apply_overrides, parse_scenario
    from ingest.tenants import TenantsError, parse_tenants

    keys = {c.key for c in changes}
    overrides = [c.text for c in changes]
    period = int(rec.manifest.get("period_s") or 0)
    if rec.scenario is not None:
        try:
            doc = _scenario_doc(rec.scenario)
            for k in ("k_value", "usage_half_life_s", "usage_refresh_s"):  # derived from fairshare: in the
                (doc.get("engine") or {}).pop(k, None)  # manifest's dump, refused in a scenario document
            scenario = parse_scenario(apply_overrides(doc, overrides, "scenario"), "scenario")
            built = scenario.build()
        except ScenarioError as exc:
            raise WhatIfError(str(exc)) from None
        if "cycle_period" in keys or not period:
            period = scenario.cycle_period // 1000
        return _Plan(built.tenants, built.nodes, built.keep_pending, built.end_ms, built.usage, period)
    renamed = [f"{TENANT_ALIASES.get(c.key, c.key)}={c.raw}" for c in changes]
    try:
        doc = apply_overrides(copy.deepcopy(rec.manifest["tenants"]), renamed, "tenants")
        tenants = parse_tenants(doc, "tenants")
    except (ScenarioError, TenantsError) as exc:
        raise WhatIfError(str(exc).replace("--set ", "--set (tenants) ")) from None
    if "cycle_period_s" in keys or not period:
        period = tenants.cycle_period_s
    return _Plan(tenants, rec.nodes, [], None, None, period)


def _windowed(
    rec: Recording, plan: _Plan, window: tuple[int, int] | None
) -> tuple[list[JobSpec], int | None]:
    if window is None:
        return rec.jobs, plan.end_ms
    end = window[1] if plan.end_ms is None else min(window[1], plan.end_ms)
    return [j for j in rec.jobs if j.created_ms < end], end


class _FromRecording(Simulator):
    """A simulator that, before *from_ms*, carries out the recorded cycles' decisions instead of running the
    engine, so its state at *from_ms* is the recording's (the usage history accumulates under the new
    settings); from *from_ms* on the engine decides under the new settings.

    A wake-up is pushed at every recorded cycle time before *from_ms*, so the loop visits each (a cycle of
    the recording that the changed settings would have skipped still happens, with its recorded decisions).
    """

    def __init__(self, *args: Any, recording: Path, from_ms: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.from_ms = from_ms
        times: list[int] = []
        with (recording / CYCLES_FILE).open("rb") as fh:
            for line in fh:
                m = re.search(rb'"logical_time_ms":([0-9]+)', line)
                if m is not None and int(m.group(1)) < from_ms:
                    times.append(int(m.group(1)))
        for t in times:
            self.wake_at(t)
        self.recorded: Iterator[CycleRecord] = read_cycles(recording)
        self.upcoming: CycleRecord | None = next(self.recorded, None)

    def cycle(self, now_ms: int, record: CycleRecord | None = None) -> bool:
        """From *from_ms* on the engine decides; before it, the recorded cycle at *now_ms* is carried out
        (none recorded at that time: no cycle)."""
        if now_ms >= self.from_ms or record is not None:
            return super().cycle(now_ms, record)
        while self.upcoming is not None and self.upcoming.logical_time_ms < now_ms:
            self.upcoming = next(self.recorded, None)
        found = self.upcoming
        if found is None or found.logical_time_ms != now_ms:
            self.refresh_usage(now_ms)
            return False  # no recorded cycle now: the recording decided nothing at this time
        self.upcoming = next(self.recorded, None)
        return super().cycle(now_ms, found)


class _CaptureLog:
    """A :class:`~analytics.rundir.SimLog` that keeps what :func:`measure` reads, in memory: each event as
    the dict its ``events.jsonl`` line decodes to, and the cycle records fed to a tally as they come (so no
    record is kept, encoded as a delta or read back)."""

    def __init__(self, window: tuple[int, int] | None) -> None:
        # The lines are kept as bytes and decoded after the run: tens of thousands of live dicts would be
        # re-traversed by every garbage collection of the run (+20 % CPU on a month of the trace).
        self.lines: list[bytes] = []
        self.tally = _CycleTally(window)

    @property
    def events(self) -> list[dict[str, Any]]:
        """The events as the dicts their ``events.jsonl`` lines decode to."""
        return [json.loads(line) for line in self.lines]

    def append_event(self, offset: int, event: ev.EventBase) -> None:
        """Keep the event's line (and tell the tally of node changes)."""
        self.lines.append(dump_event(event))
        if isinstance(event, ev.NodeUpserted):
            self.tally.node(event.at_ms, event.name, event.gpus)
        elif isinstance(event, ev.NodeRemoved):
            self.tally.node(event.at_ms, event.name, None)

    def append_cycle(self, record: CycleRecord) -> None:
        """Count the record."""
        self.tally.feed(record)

    def append_usage(self, raw: bytes) -> None:
        """Usage snapshots are not measured."""

    def close(self, manifest: dict[str, Any]) -> None:
        """Nothing to finish."""


def rerun(
    rec: Recording,
    changes: Sequence[Change],
    out: Path | SimLog,
    window: tuple[int, int] | None = None,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Run the what-if of *changes* and write its run directory to *out* (the ``simulate --out`` format),
    or into the log *out*.

    With a *window* ``(FROM, TO)`` the run ends at TO; before FROM it carries out the recorded decisions
    (:class:`_FromRecording`), so the engine under the new settings starts from the recorded state at FROM.
    """
    plan = _plan(rec, changes)
    jobs, end_ms = _windowed(rec, plan, window)
    recorded_period = int(rec.manifest.get("period_s") or plan.period_s)
    if window is not None and window[0] > 0 and recorded_period % plan.period_s:
        raise WhatIfError(
            f"--window FROM..TO with FROM > 0: the cycle period {plan.period_s} s must divide the recording's"
            f" {recorded_period} s, so that the recorded cycles before FROM fall on the new clock"
        )
    log = DirLog(out, int(rec.manifest.get("checkpoint_every") or 3600)) if isinstance(out, Path) else out
    inputs = {
        "whatif": {
            "recording": str(rec.path),
            "changed": {c.key: c.value for c in changes},
            "window_ms": list(window) if window is not None else None,
        }
    }
    if rec.scenario is not None:
        inputs["scenario_config"] = rec.scenario
    kwargs: dict[str, Any] = {
        "period_s": plan.period_s,
        "seed": int(rec.manifest.get("seed") or 0),
        "log": log,
        "progress": progress,
        "jobs": jobs,
        "keep_pending": plan.rules,
        "end_ms": end_ms,
        "usage": plan.usage,
    }
    try:
        if window is None or window[0] == 0:
            simulate([], plan.nodes, plan.tenants, inputs=inputs, **kwargs)
            return
        sim = _FromRecording([], plan.nodes, plan.tenants, recording=rec.path, from_ms=window[0], **kwargs)
        with gc_tuned():
            sim.run()
        log.close(sim.manifest(inputs))
    except ValueError as exc:
        raise WhatIfError(f"the what-if run cannot start: {exc}") from None
    except (AssertionError, KeyError) as exc:
        raise WhatIfError(
            f"the recorded decisions before FROM do not fit the changed settings ({exc}): change the cluster"
            " or the workload only with FROM = 0"
        ) from None


# --------------------------------------------------------------------------- measuring a run


def _pct(values: list[int], q: float) -> float | None:
    """Nearest-rank percentile of waits in ms, as seconds; None when nothing started (no wait to rank, and
    0 s would read as "started at once")."""
    if not values:
        return None
    return values[max(math.ceil(q * len(values)) - 1, 0)] / 1000


@dataclass(slots=True)
class Outcomes:
    """What one run directory shows over a window: per queue (leaves and parents) and for the cluster."""

    queues: dict[str, dict[str, Any]]
    cluster: dict[str, Any]
    parents: dict[str, str | None] = field(default_factory=dict)
    # (time ms, leaf queue -> milli-GPU held from then on) at every change of a device-bound pod
    timeline: list[tuple[int, dict[str, int]]] = field(default_factory=list)


def _point(timeline: list[tuple[int, dict[str, int]]], at: int, held: Counter[str]) -> None:
    now = {q: v for q, v in held.items() if v}
    if timeline and timeline[-1][0] == at:
        timeline[-1] = (at, now)
    else:
        timeline.append((at, now))


def _probe(shapes: Counter[tuple[int, int]]) -> tuple[int, int] | None:
    if not shapes:
        return None
    return min(shapes.items(), key=lambda kv: (-kv[1], kv[0]))[0]


class _CycleTally:
    """The cycle records' part of the figures, fed one full record at a time (none is kept): the GPU fair
    share integral (each record's value, capped at the cluster by :func:`analytics.fairness.capped_fair_shares`,
    held until the next record) and the evictions each queue caused. The node events come first
    (:meth:`node`): the cap needs the cluster's GPUs at each record's time."""

    def __init__(self, window: tuple[int, int] | None) -> None:
        self.t1 = window[0] if window is not None else 0
        self.t2 = window[1] if window is not None else None
        self.last_ms = 0
        self.prev: tuple[int, dict[str, float]] | None = None
        self.fair_ms: defaultdict[str, float] = defaultdict(float)
        self.node_gpus: dict[str, int] = {}
        self.capacity: list[tuple[int, int]] = []  # (at_ms, milli-GPU of all nodes from then on)
        self.caused: Counter[str] = Counter()
        self.evicted: set[str | None] = set()  # pods the previous record evicted

    def _hold(self, until: int) -> None:
        if self.prev is None:
            return
        start, fair = self.prev
        a = max(start, self.t1)
        b = until if self.t2 is None else min(until, self.t2)
        if b > a:
            for name, v in fair.items():
                self.fair_ms[name] += v * (b - a)

    def node(self, at_ms: int, name: str, gpus: int | None) -> None:
        """A node event: *name* now has *gpus* GPUs (None: removed). In log order, before the records."""
        total = (self.capacity[-1][1] if self.capacity else 0) - self.node_gpus.pop(name, 0) * GPU_MILLI
        if gpus is not None:
            self.node_gpus[name] = gpus
            total += gpus * GPU_MILLI
        self.capacity.append((at_ms, total))

    def node_event(self, e: dict[str, Any]) -> None:
        """:meth:`node` of an event dict, if it is a node event."""
        if e["type"] == "NodeUpserted":
            self.node(int(e["at_ms"]), e["name"], int(e["gpus"]))
        elif e["type"] == "NodeRemoved":
            self.node(int(e["at_ms"]), e["name"], None)

    def _capacity_at(self, t_ms: int) -> int:
        i = bisect.bisect_right(self.capacity, (t_ms, math.inf))
        return self.capacity[i - 1][1] if i else 0

    def feed(self, rec: CycleRecord) -> None:
        """Count one full record (records come in cycle order)."""
        now = rec.logical_time_ms
        self._hold(now)
        fair = {q.name: int(q.fair_share["gpu"]) for q in rec.queues}
        top = [q.name for q in rec.queues if q.parent is None]
        self.prev = (now, capped_fair_shares(fair, top, self._capacity_at(now)))
        self.last_ms = max(self.last_ms, now)
        if now < self.t1 or (self.t2 is not None and now >= self.t2):
            return
        placed = {d.job.rsplit("/", 1)[-1]: d.queue for d in rec.decisions if d.kind in ("Bind", "Pipeline")}
        before, self.evicted = self.evicted, {d.pod for d in rec.decisions if d.kind == "Evict"}
        for d in rec.decisions:
            # A service decides an eviction again in the next cycle when it folded that cycle's input
            # before the eviction's PodReleasing (Kafka reads in two batches): counted once.
            if d.kind == "Evict" and d.pod not in before:
                m = _BY_WORKLOAD.search(d.message or "")
                by = placed.get(m.group(1)) if m is not None else None
                if by is not None:
                    self.caused[by] += 1

    def finish(self, end_ms: int) -> None:
        """Hold the last record's fair share until *end_ms* (the window's or the log's end)."""
        self._hold(end_ms)
        self.prev = None


def outcomes(run_dir: Path | str, window: tuple[int, int] | None = None) -> Outcomes:
    """Measure a run directory over ``[FROM, TO)`` (default: the whole log); see :func:`measure`."""
    run = Path(run_dir)
    with (run / EVENTS_FILE).open("rb") as fh:
        events = [json.loads(line) for line in fh]
    return measure(events, _tally(events, read_cycles(run), window), window)


def _tally(
    events: Sequence[dict[str, Any]], records: Iterable[CycleRecord], window: tuple[int, int] | None
) -> _CycleTally:
    """A :class:`_CycleTally` fed the node events of *events*, then *records*."""
    tally = _CycleTally(window)
    for e in events:
        tally.node_event(e)
    for r in records:
        tally.feed(r)
    return tally


def measure(events: Sequence[dict[str, Any]], tally: _CycleTally, window: tuple[int, int] | None) -> Outcomes:
    """The figures of one run from its decoded events (``events.jsonl`` dicts) and its fed cycle tally.

    GPU-hours: :func:`analytics.audit.gpuhours.held_gpu_ms_of`, the one definition. Waits: first bind minus
    creation, of pods created in the window that started (nearest-rank percentiles). Evictions suffered:
    ``PodReleasing`` of the queue's pods in the window; caused: evictions whose message names a workload the
    same cycle bound or pipelined, counted for that workload's queue. Pending at end: jobs with a pod
    submitted and neither bound nor deleted at the window's end. Fair share: each cycle record's GPU fair
    share, held until the next record. Allocation ratio: held GPU-time over capacity GPU-time; fragmented
    GPUs: the time-mean of idle GPUs on nodes where the run's most common per-pod GPU request does not fit.

    Long on purpose: one pass over the events that updates every figure at once (allocations, waits,
    evictions, GPU-hours); splitting it would mean one pass per figure.
    """
    lo, hi = window if window is not None else (None, None)
    held = held_gpu_ms_of(events, lambda: [tally.last_ms], lo, hi)

    parents: dict[str, str | None] = {}
    queue_of: dict[str, str] = {}  # pod uid -> queue
    group_of: dict[str, str] = {}  # pod uid -> group uid
    created: dict[str, int] = {}
    first_bind: dict[str, int] = {}
    pending: dict[str, int] = {}  # pod uid -> at_ms of its unanswered submission
    evictions: Counter[str] = Counter()
    shapes: Counter[tuple[int, int]] = Counter()
    per_device: dict[str, int] = {}  # pod uid -> milli-GPU per device it asked for
    node_free: dict[str, list[int]] = {}
    holding: dict[str, tuple[str, list[int], int]] = {}  # pod uid -> (node, devices, milli per device)
    held_now: Counter[str] = Counter()  # leaf queue -> milli-GPU held now (the plots' series)
    timeline: list[tuple[int, dict[str, int]]] = []
    capacity = 0
    # (time, capacity change, node) points; the fragmentation integral needs the node state over time,
    # so it is integrated as the events go, from the window's start.
    frag_ms = 0
    cap_ms = 0
    last_t: int | None = None
    frag_now = 0
    frag_of: dict[str, int] = {}
    end_ms = tally.last_ms
    for e in events:
        if e["type"] == "PodSubmitted":
            r = e["requests"]
            if r.get("gpus"):
                shapes[(int(r["gpus"]), GPU_MILLI)] += 1
            elif r.get("gpu_fraction_milli") is not None:
                shapes[(int(r.get("gpu_fraction_devices") or 1), int(r["gpu_fraction_milli"]))] += 1
        end_ms = max(end_ms, e["at_ms"])
    t1 = lo if lo is not None else 0
    t2 = hi if hi is not None else end_ms
    probe = _probe(shapes)

    def fragmented(free: list[int]) -> int:
        idle = sum(free)
        if probe is None or idle == 0:
            return 0
        n, milli = probe
        fits = (
            sum(1 for f in free if f == GPU_MILLI) >= n
            if milli >= GPU_MILLI
            else any(f >= milli for f in free)
        )
        return 0 if fits else idle

    def advance(t: int) -> None:
        nonlocal frag_ms, cap_ms, last_t
        a = max(last_t if last_t is not None else t1, t1)
        b = min(t, t2)
        if b > a:
            frag_ms += frag_now * (b - a)
            cap_ms += capacity * (b - a)
        last_t = t

    def refresh(node: str) -> None:
        nonlocal frag_now
        f = fragmented(node_free[node])
        frag_now += f - frag_of.get(node, 0)
        frag_of[node] = f

    for e in events:
        kind, at, uid = e["type"], e["at_ms"], str(e.get("uid"))
        if window is not None and at >= t2:
            break
        advance(at)
        if kind == "QueueUpserted":
            parents[e["name"]] = e.get("parent")
        elif kind == "NodeUpserted":
            old = node_free.get(e["name"])
            capacity += (int(e["gpus"]) - (len(old) if old is not None else 0)) * GPU_MILLI
            node_free[e["name"]] = [GPU_MILLI] * int(e["gpus"])
            refresh(e["name"])
        elif kind == "PodSubmitted":
            queue_of[uid] = e["queue"]
            group_of[uid] = f"{e['namespace']}/{e['pod_group']}"
            created.setdefault(uid, int(e.get("created_at_ms") or at))
            pending[uid] = at
            r = e["requests"]
            per_device[uid] = (
                r["gpu_fraction_milli"] if r.get("gpu_fraction_milli") is not None else GPU_MILLI
            )
        elif kind == "PodBound":
            pending.pop(uid, None)
            first_bind.setdefault(uid, at)
            devices = list(e.get("gpu_devices") or [])
            if devices and e["node"] in node_free:
                milli = per_device.get(uid, GPU_MILLI)
                for d in devices:
                    node_free[e["node"]][d] -= milli
                holding[uid] = (e["node"], devices, milli)
                refresh(e["node"])
                held_now[queue_of.get(uid, "")] += milli * len(devices)
                _point(timeline, at, held_now)
        elif kind == "PodReleasing":
            if t1 <= at:
                evictions[queue_of.get(uid, "")] += 1
        elif kind in ("PodFinished", "PodDeleted"):
            if kind == "PodDeleted":
                pending.pop(uid, None)
            h = holding.pop(uid, None)
            if h is not None:
                node, devices, milli = h
                for d in devices:
                    node_free[node][d] += milli
                refresh(node)
                held_now[queue_of.get(uid, "")] -= milli * len(devices)
                _point(timeline, at, held_now)
    advance(t2)

    tally.finish(t2)
    fair_ms, caused = tally.fair_ms, tally.caused

    waits: dict[str, list[int]] = defaultdict(list)
    for uid, t in first_bind.items():
        c = created.get(uid)
        if c is not None and t1 <= c < t2 and t < t2:
            waits[queue_of[uid]].append(t - c)
    jobs_pending: Counter[str] = Counter()
    for queue in {group_of[u]: queue_of[u] for u in pending}.values():
        jobs_pending[queue] += 1

    def subtree(name: str) -> list[str]:
        kids = [c for c, p in parents.items() if p == name]
        return [name] if not kids else [x for c in kids for x in subtree(c)]

    queues: dict[str, dict[str, Any]] = {}
    for name in parents:
        leaves = subtree(name)
        got = sum(held.get(x, 0) for x in leaves)
        fair = fair_ms.get(name, 0)
        w = sorted(x for leaf in leaves for x in waits.get(leaf, []))
        queues[name] = {
            "parent": parents[name],
            "leaf": leaves == [name],
            "gpu_hours": got / MILLI_GPU_MS_PER_GPU_HOUR,
            "fair_share_gpu_hours": fair / MILLI_GPU_MS_PER_GPU_HOUR,
            "received_over_fair": received_over_fair_share(got, fair),
            "wait_p50_s": _pct(w, 0.50),
            "wait_p90_s": _pct(w, 0.90),
            "wait_p99_s": _pct(w, 0.99),
            "started": len(w),
            "evictions": sum(evictions.get(x, 0) for x in leaves),
            "evictions_caused": sum(caused.get(x, 0) for x in leaves),
            "pending_at_end": sum(jobs_pending.get(x, 0) for x in leaves),
        }
    all_waits = sorted(x for v in waits.values() for x in v)
    total = sum(held.values())
    span = max(t2 - t1, 1)
    cluster = {
        "gpu_hours": total / MILLI_GPU_MS_PER_GPU_HOUR,
        "wait_p50_s": _pct(all_waits, 0.50),
        "wait_p90_s": _pct(all_waits, 0.90),
        "wait_p99_s": _pct(all_waits, 0.99),
        "started": len(all_waits),
        "evictions": sum(evictions.values()),
        "pending_at_end": sum(jobs_pending.values()),
        "allocation_ratio": round(total / cap_ms, 6) if cap_ms else 0.0,
        "fragmented_gpus": round(frag_ms / span / GPU_MILLI, 3),
        "gpus": capacity // GPU_MILLI,
        "window_ms": [t1, t2],
    }
    # The plots' series over the window: what was held at its start, then every change in it.
    inside = [p for p in timeline if t1 <= p[0] < t2]
    before = [p for p in timeline if p[0] < t1]
    if before:
        inside.insert(0, (t1, before[-1][1]))
    return Outcomes(queues, cluster, parents, inside)


# --------------------------------------------------------------------------- service logs


def service_outcomes(rec: ServiceRecording, window: tuple[int, int] | None = None) -> Outcomes:
    """The figures of a service log as recorded (:func:`measure` on its events and cycle records), over
    the logical-time *window* ``(FROM, TO)`` if given (:func:`analytics.rerun.whatif_service.log_window`)."""
    return measure(rec.events, _tally(rec.events, rec.records, window), window)


def rerun_service(
    rec: ServiceRecording,
    changes: Sequence[Change],
    progress: Callable[[int], None] | None = None,
    window: tuple[int, int] | None = None,
    usage: str = "auto",
    out: Path | None = None,
) -> Outcomes:
    """Re-run a service log under *changes* (engine config fields and the usage computation's
    ``fairshare.*`` settings, :func:`analytics.rerun.whatif_service.rerun`) and measure it as
    :func:`service_outcomes` measures the recording (over the same *window*). *usage* is ``--usage``
    (:func:`analytics.rerun.whatif_service.usage_config`); with *out* the what-if is also written there as a run
    directory (:func:`analytics.rerun.whatif_service.write_run_dir`)."""
    try:
        config = service_config(rec.config, changes)
        fair = usage_config(rec, changes, usage)
    except ServiceLogError as exc:
        raise WhatIfError(str(exc)) from None
    inputs = {
        "whatif": {
            "recording": rec.path,
            "changed": {c.key: c.value for c in changes},
            "window_ms": list(window) if window is not None else None,
            "usage": usage,
        }
    }
    try:
        events, records = rerun_service_log(rec, config, progress, window, fair, out, inputs)
    except OSError as exc:
        raise WhatIfError(f"cannot write the what-if's run directory {out}: {exc}") from None
    return measure(events, _tally(events, records, window), window)


def usage_text(rec: ServiceRecording, changes: Sequence[Change], usage: str = "auto") -> str:
    """What the report says of the usage the what-if's cycles saw."""
    try:
        fair = usage_config(rec, changes, usage)
    except ServiceLogError as exc:
        raise WhatIfError(str(exc)) from None
    if fair is None:
        src = rec.usage_source or "none recorded"
        return f"recorded snapshots (source {src}; the usage of the recorded allocations)"
    half = fair.decay_half_life_s
    return (
        f"recomputed from the what-if's own events by the fair-share service (window {fair.window_type}"
        f" {fair.window_s} s, half-life {half if half is not None else 'none'}"
        f"{' s' if half is not None else ''}), at the recorded snapshots' times"
    )


def _service_censored(rec: ServiceRecording) -> Censored:
    return Censored(
        **{k: rec.censored.get(k, 0) for k in ("running_at_end", "evicted_unfinished", "never_started")}
    )


def _load_service(spec: str, config: Any, topics: Any) -> ServiceRecording:
    try:
        return load_service_recording(spec, config, topics)
    except ServiceLogError as exc:
        raise WhatIfError(str(exc)) from None


# --------------------------------------------------------------------------- comparing


@dataclass(slots=True)
class WhatIfResult:
    """One what-if next to its recording; :meth:`as_json` is the interface other tools read."""

    changes: list[Change]
    recorded: Outcomes
    whatif: Outcomes
    censored: Censored
    rule_jobs: int
    run_dir: Path | None = None  # where the what-if's own log was kept (--out), if anywhere
    usage: str | None = None  # service logs: which usage the what-if's cycles saw (recorded | recomputed …)

    def as_json(self) -> dict[str, Any]:
        """``{"queues": {NAME: {"recorded": …, "whatif": …}}, "cluster": {…}, "changed": {KEY: VALUE}}``."""
        names = [*self.recorded.queues, *(q for q in self.whatif.queues if q not in self.recorded.queues)]
        return {
            "queues": {
                n: {"recorded": self.recorded.queues.get(n), "whatif": self.whatif.queues.get(n)}
                for n in names
            },
            "cluster": {"recorded": self.recorded.cluster, "whatif": self.whatif.cluster},
            "changed": {c.key: c.value for c in self.changes},
            "censored_pods": self.censored.as_dict(),
            "keep_pending_jobs_rerun_by_rule": self.rule_jobs,
            "run_dir": str(self.run_dir) if self.run_dir is not None else None,
            **({"usage": self.usage} if self.usage is not None else {}),
        }


def compare(
    rec: Recording,
    changes: Sequence[Change],
    recorded: Outcomes | Future[Outcomes],
    window: tuple[int, int] | None = None,
    out: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> WhatIfResult:
    """Re-run *rec* under *changes* (into the run directory *out*, else in memory) and measure it next to
    *recorded* (or the outcome of a future measuring the recording meanwhile, see :func:`measuring`)."""
    if out is not None:
        rerun(rec, changes, out, window, progress)
        mine = outcomes(out, window)
    else:
        kept = _CaptureLog(window)
        rerun(rec, changes, kept, window, progress)
        mine = measure(kept.events, kept.tally, window)
    got = recorded if isinstance(recorded, Outcomes) else recorded.result()
    return WhatIfResult(list(changes), got, mine, rec.censored, rec.rule_jobs, out)


def _spawn_pool(workers: int) -> ProcessPoolExecutor:
    # spawn, not fork: a forked child of a process with threads (polars' pool) can deadlock
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


@contextlib.contextmanager
def measuring(path: Path, window: tuple[int, int] | None) -> Iterator[Future[Outcomes]]:
    """:func:`outcomes` of the recording, measured in another process while this one re-runs it."""
    with _spawn_pool(1) as pool:
        yield pool.submit(outcomes, path, window)


def run_whatif(
    path: Path | str,
    items: Sequence[str],
    window: tuple[int, int] | None = None,
    out: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> WhatIfResult:
    """One what-if of the ``--set`` *items* (no sweep) on the recording at *path*."""
    runs = expand_sweeps(items)
    if len(runs) != 1:
        raise WhatIfError("run_whatif takes one what-if; a comma list is a sweep (use the command)")
    rec = load_recording(path)
    with measuring(rec.path, window) as recorded:
        return compare(rec, runs[0], recorded, window, out, progress)


# --------------------------------------------------------------------------- the command


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``hourglass whatif`` options."""
    add_log_argument(p)
    p.add_argument(
        "--recorded-config",
        type=Path,
        default=None,
        metavar="FILE",
        help="for a service log: the engine config file `hourglass run` used (JSON/YAML; default: the"
        " defaults), checked against the recorded cycles",
    )
    p.add_argument(
        "--topic-prefix", default=None, help="for a service log: PREFIX.events, PREFIX.decisions, ..."
    )
    p.add_argument(
        "--usage",
        choices=("auto", "recorded", "recompute"),
        default="auto",
        help="for a service log: the usage the what-if's cycles see: recomputed from its own events by the"
        " fair-share service, or the recorded snapshots (auto: recompute if they came from the eventlog"
        " source or a fairshare.* usage setting is changed; docs/whatif.md)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="changes",
        help="change a setting by dotted path (fairshare.k_value=0); a comma list is a sweep (repeatable)",
    )
    p.add_argument(
        "--engine-config",
        type=Path,
        default=None,
        metavar="FILE",
        help="a YAML/JSON mapping of settings to change (nested or dotted keys), applied before --set",
    )
    p.add_argument(
        "--window", default=None, metavar="FROM..TO", help="re-run and measure only [FROM, TO), e.g. 0..30d"
    )
    p.add_argument("--out", type=Path, default=None, metavar="DIR", help="keep the what-if's run directory")
    p.add_argument(
        "--json", action="store_true", help="print the comparison as JSON (nothing else on stdout)"
    )
    p.add_argument(
        "--html", type=Path, default=None, metavar="FILE", help="write an offline HTML page with plots"
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="processes for a sweep (default: the machine's cores)",
    )


def _flatten(doc: Any, prefix: str = "") -> list[str]:
    """A mapping of settings as ``KEY=VALUE`` items (nested mappings become dotted keys; VALUE as JSON)."""
    if isinstance(doc, dict) and doc:
        return [x for k, v in doc.items() for x in _flatten(v, f"{prefix}{k}.")]
    return [f"{prefix[:-1]}={json.dumps(doc)}"]


def _config_items(path: Path) -> list[str]:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise WhatIfError(f"{path}: cannot read the settings file: {exc}") from None
    if doc is None:
        return []
    if not isinstance(doc, dict):
        raise WhatIfError(f"{path}: expected a mapping of settings, got {type(doc).__name__}")
    items = _flatten(doc)
    for item in items:  # a list value in a file is one value, never a sweep
        if "," in item.partition("=")[2] and not item.partition("=")[2].startswith(("[", "{", '"')):
            raise WhatIfError(f"{path}: {item}: a comma in a value (write it as a YAML list or quote it)")
    return items


def changed_text(changes: Sequence[Change]) -> str:
    """``k=v, k2=v2`` (or ``no change``)."""
    return ", ".join(c.text for c in changes) or "no change"


# Per-queue columns left out first when the terminal is narrow (highest first): the tail percentiles,
# then who caused evictions, the median wait, what was pending; received vs fair share always stays.
_QUEUE_DROP: Final = {
    "wait_p99_s": 6,
    "wait_p90_s": 5,
    "evictions_caused": 4,
    "wait_p50_s": 3,
    "pending_at_end": 2,
    "evictions": 1,
}


def render(result: WhatIfResult, console: Any) -> None:
    """Two tables fitted to the console's width (:mod:`analytics.terminal`): per queue (recorded and
    what-if rows side by side), then the cluster; then the notes, folded at the same width."""
    from analytics.terminal import Col, dropped_note, fitted_table, wrap_lines

    width = int(console.width)
    cols = [Col("queue", "left"), Col("run", "left")]
    cols += [Col(HEAD[key], drop=_QUEUE_DROP.get(key, 0)) for key in FIGURES]
    rows: list[list[str]] = []
    styles: list[str | None] = []
    ends: list[bool] = []
    parents = result.recorded.parents or result.whatif.parents
    depth: dict[str, int] = {}
    for name, sides in result.as_json()["queues"].items():
        parent = parents.get(name)
        depth[name] = 0 if parent is None else depth.get(parent, 0) + 1
        for label, side in (("recorded", sides["recorded"]), ("what-if", sides["whatif"])):
            cells = [fmt(k, side.get(k)) if side else "-" for k in FIGURES]
            rows.append(["  " * depth[name] + name if label == "recorded" else "", label, *cells])
            styles.append("dim" if label == "recorded" else None)
            ends.append(label == "what-if")
    qt, dropped = fitted_table(
        cols,
        rows,
        width,
        row_styles=styles,
        section_ends=ends,
        title=f"Queues: recorded vs what-if ({changed_text(result.changes)})",
    )
    console.print(qt)
    note = dropped_note(dropped, width, "--json has every figure")
    if note is not None:
        console.print(note, highlight=False)
    cluster_rows = [
        [label, fmt(key, result.recorded.cluster.get(key)), fmt(key, result.whatif.cluster.get(key))]
        for key, label in CLUSTER_ROWS
    ]
    ct, _ = fitted_table(
        [Col("figure", "left"), Col("recorded"), Col("what-if")], cluster_rows, width, title="Cluster"
    )
    console.print(ct)
    c = result.censored
    lines = [
        f"pods that never finished by themselves in the recording (run for their recorded time so far):"
        f" {c.running_at_end} running at the end, {c.evicted_unfinished} evicted and unfinished,"
        f" {c.never_started} never started (run until the recording's end)"
    ]
    if result.usage is not None:
        lines.append(f"usage: {result.usage}")
    if result.rule_jobs:
        lines.append(
            f"{result.rule_jobs} recorded jobs of keep-pending workloads: their rule was re-run, not their"
            " recorded submissions"
        )
    for line in wrap_lines(lines, width):
        console.print(line, highlight=False, soft_wrap=True)


def _variant(
    path: str, changes: list[Change], window: tuple[int, int] | None, out: Path | None
) -> tuple[list[Change], Outcomes, Path | None]:
    """One sweep member in a worker process: re-run and measure (the recorded side is measured once)."""
    rec = load_recording(path)
    if out is not None:
        rerun(rec, changes, out, window)
        return changes, outcomes(out, window), out
    kept = _CaptureLog(window)
    rerun(rec, changes, kept, window)
    return changes, measure(kept.events, kept.tally, window), None


def run_cli(args: argparse.Namespace) -> int:
    """``hourglass whatif``: re-run with a progress bar (a sweep in parallel), print / write the comparison."""
    import os

    from rich.console import Console

    err = Console(stderr=True)
    try:
        items = (_config_items(args.engine_config) if args.engine_config is not None else []) + list(
            args.changes
        )
        runs = expand_sweeps(items)
        window = parse_window(args.window) if args.window is not None else None
        if args.jobs is not None and args.jobs < 1:
            raise WhatIfError(f"--jobs must be >= 1, got {args.jobs}")
        if is_service_log(args.log):
            return _service_cli(args, runs, window, err)
        if getattr(args, "usage", "auto") != "auto":
            raise WhatIfError(
                "--usage is for service logs: a run directory's what-if computes usage under its own"
                " settings (the simulator's usage refresh)"
            )
        rec = load_recording(args.log)
        for changes in runs:  # every variant's settings are checked before anything runs
            _plan(rec, changes)
    except WhatIfError as exc:
        err.print(f"whatif: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2

    results: list[WhatIfResult] = []
    horizon = window[1] if window is not None else rec.end_ms
    try:
        if len(runs) == 1:
            days = day_bar(f"what-if {changed_text(runs[0])}", horizon, err=err)
            with days as progress, measuring(rec.path, window) as recorded:
                results.append(compare(rec, runs[0], recorded, window, args.out, progress))
        else:
            with count_bar(f"what-if sweep of {len(runs)}", "variants", total=len(runs), err=err) as bar:
                workers = args.jobs or os.cpu_count() or 1
                with _spawn_pool(min(workers, len(runs))) as pool:
                    futures = [
                        pool.submit(
                            _variant,
                            str(rec.path),
                            changes,
                            window,
                            args.out / str(i) if args.out is not None else None,
                        )
                        for i, changes in enumerate(runs)
                    ]
                    measured = outcomes(rec.path, window)  # measured here while the workers run
                    for fut in futures:
                        changes, mine, kept = fut.result()
                        bar.advance()
                        results.append(
                            WhatIfResult(changes, measured, mine, rec.censored, rec.rule_jobs, kept)
                        )
    except WhatIfError as exc:
        err.print(f"whatif: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    return _output(args, results, str(rec.path), err)


def _service_variant(
    spec: str,
    config: Path | None,
    prefix: str | None,
    changes: list[Change],
    window: tuple[int, int] | None = None,
    usage: str = "auto",
    out: Path | None = None,
) -> tuple[list[Change], Outcomes]:
    """One sweep member on a service log in a worker process (the log is read again there)."""
    rec = _load_service(spec, _recorded_config(config), _topics(prefix))
    return changes, rerun_service(rec, changes, window=window, usage=usage, out=out)


def _recorded_config(path: Path | None) -> Any:
    from scheduler.config import EngineConfigError, load_engine_config

    if path is None:
        return None
    try:
        return load_engine_config(path)
    except EngineConfigError as exc:
        raise WhatIfError(str(exc)) from None


def _topics(prefix: str | None) -> Any:
    from ingest.log import Topics

    return Topics.from_prefix(prefix)


def _service_cli(
    args: argparse.Namespace, runs: list[list[Change]], window: tuple[int, int] | None, err: Any
) -> int:
    """``hourglass whatif`` on a service log (:mod:`analytics.rerun.whatif_service`)."""
    import os

    try:
        rec = _load_service(str(args.log), _recorded_config(args.recorded_config), _topics(args.topic_prefix))
        for changes in runs:
            try:
                service_config(rec.config, changes)
                usage_config(rec, changes, args.usage)
            except ServiceLogError as exc:
                raise WhatIfError(str(exc)) from None
        try:
            span = log_window(rec, window) if window is not None else None
        except ServiceLogError as exc:
            raise WhatIfError(str(exc)) from None
        recorded = service_outcomes(rec, span)
        censored = _service_censored(rec)
        results: list[WhatIfResult] = []
        if len(runs) == 1:
            start = rec.inputs[0][0] if rec.inputs else 0  # the bar counts days from the first input
            span_ms = max(rec.end_ms - start, 1)
            with day_bar(f"what-if {changed_text(runs[0])}", span_ms, start_ms=start, err=err) as progress:
                mine = rerun_service(rec, runs[0], progress, span, args.usage, args.out)
            text = usage_text(rec, runs[0], args.usage)
            results.append(WhatIfResult(runs[0], recorded, mine, censored, 0, args.out, usage=text))
        else:
            workers = min(args.jobs or os.cpu_count() or 1, len(runs))
            with _spawn_pool(workers) as pool:
                futures = [
                    pool.submit(
                        _service_variant,
                        str(args.log),
                        args.recorded_config,
                        args.topic_prefix,
                        c,
                        span,
                        args.usage,
                        args.out / str(i) if args.out is not None else None,
                    )
                    for i, c in enumerate(runs)
                ]
                for i, fut in enumerate(futures):
                    changes, mine = fut.result()
                    text = usage_text(rec, changes, args.usage)
                    kept = args.out / str(i) if args.out is not None else None
                    results.append(WhatIfResult(changes, recorded, mine, censored, 0, kept, usage=text))
    except WhatIfError as exc:
        err.print(f"whatif: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    return _output(args, results, str(args.log), err)


def _output(args: argparse.Namespace, results: list[WhatIfResult], source: str, err: Any) -> int:
    """Write the HTML page, print the JSON or the tables."""
    from analytics.terminal import console

    if args.html is not None:
        from analytics.rerun.whatif_html import write_html

        try:
            write_html(
                [(r.as_json(), r.recorded.timeline, r.whatif.timeline) for r in results],
                args.html,
                source,
            )
        except (OSError, ImportError) as exc:
            err.print(f"whatif: cannot write {args.html}: {exc}", markup=False, highlight=False)
            return 2
    if args.json:
        body: Any = results[0].as_json() if len(results) == 1 else {"sweep": [r.as_json() for r in results]}
        print(json.dumps(body, indent=2))
        return 0
    out = console()
    for r in results:
        render(r, out)
    if args.html is not None:
        out.print(f"html: {args.html}", highlight=False)
    return 0
