"""``hourglass replay``: rebuild state from a run's event log and re-run its recorded cycles.

The engine is a pure function of (snapshot, usage, config, logical time), and every :class:`CycleRecord`
names those inputs (``events_offset``, ``usage_snapshot_id``, ``config_hash``, ``logical_time_ms``). So a
recorded cycle is reproduced by folding the event log up to its ``events_offset`` with
:class:`~scheduler.engine.state.StateBuilder` and calling :func:`scheduler.engine.cycle.run_cycle` with the recorded
time, the run's engine config and the binds in flight the record names (``in_flight``); ``--verify`` compares the canonical bytes of the re-run record with the
recorded one and, on a difference, names the field (see ``docs/replay.md``).

The input (:func:`load_source`) is either a run directory written by ``hourglass simulate --out DIR``
(:mod:`analytics.rundir`: events.jsonl, cycles.jsonl, usage.jsonl, manifest.json) or the log of a running
deployment: an embedded FileLog directory or ``kafka://HOST:PORT`` (its events, usage and decisions
topics). A recorded cycle that consumed a usage snapshot is re-run with that snapshot, looked up by the id
the record names; if the snapshot is missing from the log the cycle counts as a mismatch with the reason
``usage snapshot not in the log``. A log carries no engine config: replay uses ``--engine-config FILE``
(the file ``hourglass run --engine-config`` used) or the defaults, and checks it against the records'
config hash.

:func:`replay_cycles` is the shared core (fold + re-run, a generator); :func:`replay` adds selection,
comparison and counting; :func:`run_cli` is the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from analytics.gctune import gc_tuned
from analytics.rundir import read_events, read_manifest, read_records, read_usage
from fairshare.record import UsageInput, UsageRecordError, parse_usage_record
from ingest.backends import open_log
from ingest.events import Event, parse_event
from ingest.log import DEFAULT_TOPICS, LogError, Topics
from scheduler.config import EngineConfigError, load_engine_config
from scheduler.engine.cycle import run_cycle
from scheduler.engine.record.decisions import CycleRecord, Decision, config_hash
from scheduler.engine.record.delta import DeltaReader, RecordChainError
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import StateBuilder

__all__ = [
    "NO_USAGE",
    "CycleOutcome",
    "FieldDiff",
    "ReplayError",
    "ReplaySource",
    "ReplaySummary",
    "add_arguments",
    "add_log_argument",
    "as_recorded",
    "diff_records",
    "engine_config",
    "load_source",
    "pod_decisions",
    "replay",
    "replay_cycles",
    "run_cli",
]

NO_USAGE: Final = "usage snapshot not in the log"
MAX_SHOWN: Final = 40  # field differences printed for the first mismatching cycle


class ReplayError(Exception):
    """The run directory cannot be replayed (missing files, unknown format, inconsistent records)."""


@dataclass(frozen=True, slots=True)
class FieldDiff:
    """One differing field: a readable path into the record, the recorded and the re-run value."""

    path: str
    recorded: Any
    rerun: Any

    def __str__(self) -> str:
        return f"{self.path}: recorded {_show(self.recorded)}, re-run {_show(self.rerun)}"


@dataclass(slots=True)
class CycleOutcome:
    """One replayed cycle: the record, its re-run (None if it could not be re-run) and the comparison."""

    index: int  # position in cycles.jsonl (0-based)
    recorded: CycleRecord
    rerun: CycleRecord | None
    diffs: list[FieldDiff] = field(default_factory=list)
    reason: str | None = None  # why it could not be re-run

    @property
    def matched(self) -> bool:
        return self.reason is None and not self.diffs


@dataclass(slots=True)
class ReplaySummary:
    cycles: int = 0
    mismatches: int = 0
    events_folded: int = 0
    simulated_ms: int = 0  # logical time of the last replayed cycle
    wall_s: float = 0.0
    first_mismatch: CycleOutcome | None = None
    mismatched: list[CycleOutcome] = field(default_factory=list)

    @property
    def line(self) -> str:
        """The closing line other tools parse."""
        return f"replay: {self.cycles} cycles, {self.mismatches} mismatches"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


# --------------------------------------------------------------------------- the shared core


def engine_config(manifest: dict[str, Any]) -> SessionConfig:
    """The run's :class:`SessionConfig` from its manifest; checks it against the recorded config hash."""
    try:
        fields = dict(manifest["engine_config"])
        # A run recorded before the search budget existed searched without one.
        fields.setdefault("solver_job_budget", None)
        fields.setdefault("solver_action_budget", None)
        # ... and one recorded before Binds named a constrained gang's domain wrote no such details.
        fields.setdefault("topology_details", False)
        # ... and one recorded before the learnt workload scored against the shipped prior.
        fields.setdefault("workload_types", "prior")
        # ... and one recorded before the stuck-in-releasing threshold pipelined onto every releasing pod.
        fields.setdefault("stuck_in_releasing_ms", None)
        # ... and one recorded before the job budget counted failed simulations only counted them all.
        fields.setdefault("solver_job_budget_counts", "all")
        config = SessionConfig(**fields)
    except (KeyError, TypeError, ValueError) as exc:
        raise ReplayError(f"manifest has no usable engine_config: {exc}") from exc
    want = manifest.get("engine_config_hash")
    if want is not None and config_hash(config) != want:
        raise ReplayError(
            f"manifest engine_config hashes to {config_hash(config)}, but engine_config_hash says {want}"
        )
    return config


def as_recorded(config: SessionConfig, recorded_hash: str) -> SessionConfig:
    """`config`, or `config` as an older writer ran it when the recorded cycles' hash is that one's.

    Cycles recorded before the search budget existed (their hash is the budget-less config's) searched
    without one; cycles recorded before Binds carried ``details.topology`` (their hash is that of the config
    with ``topology_details`` off) wrote no such details; the oldest did neither. Cycles recorded before
    ``workload_types`` existed scored ``fgd`` / ``frag-aware`` against the shipped prior, and cycles
    recorded before ``decayed`` against the ``learnt`` window.
    """
    older = config.without_topology_details()
    variants = (config, config.unbudgeted(), older, older.unbudgeted())
    typed = (*(v.with_learnt_types() for v in variants), *(v.with_prior_types() for v in variants))
    # Cycles recorded before the stuck-in-releasing threshold existed pipelined onto every releasing pod.
    unstuck = tuple(v.never_stuck() for v in (*variants, *typed))
    # Cycles recorded before `solver_job_budget_counts` existed counted every simulation against the job
    # budget.
    counted = tuple(v.counting_every_scenario() for v in (*variants, *typed, *unstuck))
    for candidate in (*variants, *typed, *unstuck, *counted):
        if config_hash(candidate) == recorded_hash:
            return candidate
    return config


def replay_cycles(
    events: Iterable[tuple[int, Event]],
    records: Iterable[CycleRecord],
    config: SessionConfig,
    on_fold: Callable[[int], None] | None = None,
    usage: dict[str, UsageInput] | None = None,
) -> Iterator[tuple[CycleRecord, CycleRecord | None]]:
    """(recorded, re-run) for each record, folding *events* up to each record's ``events_offset``.

    *records* are full records (deltas expanded, :mod:`scheduler.engine.record.delta`); each is re-run as a
    record of its own version (a v1 record is compared with what a v1 writer made). They must come in
    cycle order (``events_offset`` never decreasing). A record that consumed a
    usage snapshot is re-run with the snapshot of that id from *usage*; if it is not there the record is
    yielded with ``None``. An event the fold rejects is skipped, as the service skips (dead-letters) it.
    *on_fold* is called with the last folded offset after each stretch of folding (progress, counting).
    """
    snapshots = usage or {}
    builder = StateBuilder()
    it = iter(events)
    offset = -1
    for rec in records:
        if rec.events_offset < offset:
            raise ReplayError(
                f"cycle {rec.cycle_id}: events_offset {rec.events_offset} is before the previous cycle's"
                f" {offset}; cycles.jsonl is not in cycle order"
            )
        while builder.offset < rec.events_offset:
            nxt = next(it, None)
            if nxt is None:
                raise ReplayError(
                    f"cycle {rec.cycle_id}: events_offset {rec.events_offset} is past the end of the event"
                    f" log (last offset {builder.offset})"
                )
            previous = builder.offset
            try:
                builder.apply(nxt[1], nxt[0])
            except Exception:
                builder.offset = previous  # the service dead-lettered this event; so does the replay
        offset = rec.events_offset
        if on_fold is not None:
            on_fold(builder.offset)
        if rec.usage_snapshot_id is None:
            if rec.usage_available:
                yield rec, None
                continue
            again, _ = run_cycle(
                builder.snapshot(),
                config,
                rec.logical_time_ms,
                record_version=rec.v,
                in_flight=rec.in_flight,
                evicting=rec.evicting,
            )
        else:
            snap = snapshots.get(rec.usage_snapshot_id)
            if snap is None:
                yield rec, None
                continue
            again, _ = run_cycle(
                builder.snapshot(),
                config,
                rec.logical_time_ms,
                snap.usage,
                rec.usage_snapshot_id,
                record_version=rec.v,
                in_flight=rec.in_flight,  # the binds in flight the cycle used, as recorded
                evicting=rec.evicting,  # and the evictions in flight
            )
        yield rec, again


# --------------------------------------------------------------------------- comparison


def _decision_key(d: dict[str, Any]) -> str:
    return f"pod={d['pod']}" if d.get("pod") else f"job={d.get('job')}"


def _diff_values(path: str, a: Any, b: Any, out: list[FieldDiff]) -> None:
    if a == b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            _diff_values(f"{path}.{k}", a.get(k), b.get(k), out)
    elif isinstance(a, list) and isinstance(b, list) and all(not isinstance(x, dict | list) for x in a + b):
        out.append(FieldDiff(path, a, b))
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff_values(f"{path}[{i}]", x, y, out)
    else:
        out.append(FieldDiff(path, a, b))


def _grouped(decisions: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for d in decisions:
        groups.setdefault(_decision_key(d), []).append(d)
    return groups


def _diff_decisions(a: list[dict[str, Any]], b: list[dict[str, Any]], out: list[FieldDiff]) -> None:
    """Decisions matched by their pod (or job, for Unschedulable), in order within one pod."""
    ga, gb = _grouped(a), _grouped(b)
    for key in [*ga, *(k for k in gb if k not in ga)]:
        xs, ys = ga.get(key, []), gb.get(key, [])
        for i in range(max(len(xs), len(ys))):
            label = f"decisions[{key}]" + (f"#{i}" if max(len(xs), len(ys)) > 1 else "")
            if i >= len(xs):
                out.append(FieldDiff(label, None, ys[i]))
            elif i >= len(ys):
                out.append(FieldDiff(label, xs[i], None))
            else:
                _diff_values(label, xs[i], ys[i], out)
    if not out and a != b:
        out.append(
            FieldDiff("decisions (order)", [_decision_key(d) for d in a], [_decision_key(d) for d in b])
        )


def diff_records(recorded: CycleRecord, rerun: CycleRecord, pod: str | None = None) -> list[FieldDiff]:
    """Field differences between two records (empty if their canonical bytes are equal).

    Queues are matched by name, decisions by pod (Unschedulable: by job). With *pod*, only the decisions
    that concern that pod are compared.
    """
    if pod is not None:
        out: list[FieldDiff] = []
        _diff_decisions(pod_decisions(recorded, pod), pod_decisions(rerun, pod), out)
        return out
    if recorded.dumps() == rerun.dumps():
        return []
    a, b = recorded.model_dump(mode="json"), rerun.model_dump(mode="json")
    out = []
    for k in sorted(set(a) - {"queues", "decisions"}):
        _diff_values(k, a[k], b.get(k), out)
    qa = {q["name"]: q for q in a["queues"]}
    qb = {q["name"]: q for q in b["queues"]}
    for name in [*qa, *(n for n in qb if n not in qa)]:
        _diff_values(f"queues[{name}]", qa.get(name), qb.get(name), out)
    if not out and [q["name"] for q in a["queues"]] != [q["name"] for q in b["queues"]]:
        out.append(FieldDiff("queues (order)", list(qa), list(qb)))
    dec: list[FieldDiff] = []
    _diff_decisions(a["decisions"], b["decisions"], dec)
    out += dec
    if not out:  # equal content, different bytes: cannot happen with canonical JSON, but never hide it
        out.append(FieldDiff("canonical bytes", recorded.dumps(), rerun.dumps()))
    return out


def pod_decisions(record: CycleRecord, pod: str) -> list[dict[str, Any]]:
    """The record's decisions about *pod* (as JSON dicts): its own, and Unschedulable ones listing it."""
    return [d.model_dump(mode="json") for d in record.decisions if _concerns(d, pod)]


def _concerns(d: Decision, pod: str) -> bool:
    return d.pod == pod or pod in d.pods


# --------------------------------------------------------------------------- selection and counting


@dataclass(slots=True)
class ReplaySource:
    """What a replay reads: the recorded cycles, the event log, the usage snapshots and the config."""

    name: str
    records: list[CycleRecord]
    events: Callable[[], Iterator[tuple[int, Event]]]
    usage: dict[str, UsageInput]
    config: SessionConfig
    close: Callable[[], None] = lambda: None


def _is_run_dir(spec: str) -> bool:
    return not spec.startswith("kafka://") and (Path(spec) / "manifest.json").is_file()


def load_source(
    spec: str | Path, *, config: SessionConfig | None = None, topics: Topics = DEFAULT_TOPICS
) -> ReplaySource:
    """Open a run directory, a FileLog directory or ``kafka://HOST:PORT`` for replay."""
    spec = str(spec)
    if _is_run_dir(spec):
        run_dir = Path(spec)
        try:
            manifest = read_manifest(run_dir)
            records = list(read_records(run_dir))
            snapshots = {u.id: u for u in read_usage(run_dir)}
        except (OSError, ValueError) as exc:
            raise ReplayError(str(exc)) from exc
        return ReplaySource(
            str(run_dir), records, lambda: read_events(run_dir), snapshots, config or engine_config(manifest)
        )
    if not spec.startswith("kafka://") and not (Path(spec) / f"{topics.decisions}.log").is_file():
        raise ReplayError(
            f"{spec}: neither a run directory (no manifest.json) nor a log directory (no"
            f" {topics.decisions}.log), nor kafka://HOST:PORT"
        )
    try:
        log = open_log(spec, readonly=True)
    except LogError as exc:
        raise ReplayError(str(exc)) from exc
    try:
        records = [CycleRecord.loads(r.value) for r in log.scan(topics.decisions, batch=5000)]
        usage: dict[str, UsageInput] = {}
        for r in log.scan(topics.usage, batch=5000):
            try:
                u = parse_usage_record(r.value)
            except UsageRecordError:
                continue  # the service dead-lettered it and never used it
            usage[u.id] = u
    except LogError as exc:
        log.close()
        raise ReplayError(str(exc)) from exc
    except ValueError as exc:
        log.close()
        raise ReplayError(
            f"{spec}: {topics.decisions} holds a record that is not a cycle record: {exc}"
        ) from exc
    cfg = config or SessionConfig()
    if records:
        cfg = as_recorded(cfg, records[0].config_hash)
    if records and records[0].config_hash != config_hash(cfg):
        log.close()
        raise ReplayError(
            f"the recorded cycles were made with engine config hash {records[0].config_hash}, the replay's"
            f" config hashes to {config_hash(cfg)}: pass the file `hourglass run` used with --engine-config"
        )

    def events() -> Iterator[tuple[int, Event]]:
        records = log.scan(topics.events, batch=5000)
        while True:
            try:
                r = next(records, None)
            except LogError as exc:  # damage in the events log: the history cannot be replayed
                raise ReplayError(str(exc)) from None
            if r is None:
                return
            try:
                event = parse_event(r.value)
            except Exception:
                continue  # dead-lettered by the service, never folded
            yield r.offset, event

    return ReplaySource(spec, records, events, usage, cfg, log.close)


def replay(
    source: Path | str | ReplaySource,
    *,
    verify: bool = True,
    until_offset: int | None = None,
    until_ms: int | None = None,
    cycle: str | None = None,
    from_cycle: str | None = None,
    pod: str | None = None,
    on_cycle: Callable[[CycleOutcome], None] | None = None,
    on_fold: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> ReplaySummary:
    """Replay the recorded cycles of *source* (optionally narrowed) and count mismatches.

    *source* is a :class:`ReplaySource` or anything :func:`load_source` opens. ``until_offset`` /
    ``until_ms`` keep the cycles whose ``events_offset`` / ``logical_time_ms`` is at or before the bound;
    ``cycle`` keeps the one cycle with that id (a unique prefix is enough); ``from_cycle`` keeps that cycle
    and every later one. Delta records are expanded from the last checkpoint at or before the first cycle
    kept, and only the cycles kept are re-run (the events are folded from the start, which is cheap next
    to re-running cycles). ``pod`` narrows the comparison to that pod's decisions. Without ``verify``
    nothing is compared (0 mismatches), except that a cycle which cannot be re-run (its usage snapshot is
    not in the log) is still reported.
    """
    src = source if isinstance(source, ReplaySource) else load_source(source)
    try:
        return _replay(
            src, verify, until_offset, until_ms, cycle, from_cycle, pod, on_cycle, on_fold, on_total
        )
    finally:
        if not isinstance(source, ReplaySource):
            src.close()


def _find(records: list[CycleRecord], indices: list[int], prefix: str, flag: str) -> int:
    hits = [i for i in indices if records[i].cycle_id.startswith(prefix)]
    if not hits:
        raise ReplayError(f"no recorded cycle with id {prefix!r} ({flag}, within the --until bound)")
    if len({records[i].cycle_id for i in hits}) > 1:
        raise ReplayError(f"cycle id prefix {prefix!r} is ambiguous ({len(hits)} cycles)")
    return hits[0]


def _selected(
    records: list[CycleRecord],
    until_offset: int | None,
    until_ms: int | None,
    cycle: str | None,
    from_cycle: str | None,
) -> list[int]:
    keep = list(range(len(records)))
    if until_offset is not None:
        keep = [i for i in keep if records[i].events_offset <= until_offset]
    if until_ms is not None:
        keep = [i for i in keep if records[i].logical_time_ms <= until_ms]
    if cycle is not None:
        keep = [_find(records, keep, cycle, "--cycle")]
    if from_cycle is not None:
        first = _find(records, keep, from_cycle, "--from-cycle")
        keep = [i for i in keep if i >= first]
    return keep


def _expanded(records: list[CycleRecord], keep: list[int]) -> Iterator[tuple[int, CycleRecord]]:
    """(index, full record) for the kept indices, expanding deltas from the checkpoint before the first."""
    if not keep:
        return
    start = keep[0]
    while start >= 0 and not records[start].is_full:
        start -= 1
    if start < 0:
        raise ReplayError(
            f"cycle {records[keep[0]].cycle_id} is a delta record with no checkpoint (full record) before it"
            " in the log: it cannot be rebuilt"
        )
    wanted = set(keep)
    reader = DeltaReader()
    for i in range(start, keep[-1] + 1):
        try:
            full = reader.feed(records[i])
        except RecordChainError as exc:
            raise ReplayError(f"record #{i}: {exc}") from exc
        if full is not None and i in wanted:
            yield i, full


def _replay(
    src: ReplaySource,
    verify: bool,
    until_offset: int | None,
    until_ms: int | None,
    cycle: str | None,
    from_cycle: str | None,
    pod: str | None,
    on_cycle: Callable[[CycleOutcome], None] | None,
    on_fold: Callable[[int], None] | None,
    on_total: Callable[[int], None] | None,
) -> ReplaySummary:
    keep = _selected(src.records, until_offset, until_ms, cycle, from_cycle)
    if on_total is not None:
        on_total(len(keep))

    summary = ReplaySummary()

    def folded(offset: int) -> None:
        summary.events_folded = offset + 1
        if on_fold is not None:
            on_fold(offset)

    # The simulator's GC relaxation: every cycle opens a session of one NodeInfo per node, and young-
    # generation collections re-traversing the fold's state would otherwise cost ~2/3 of the replay.
    t0 = time.perf_counter()
    with gc_tuned():
        _run(src, _expanded(src.records, keep), verify, pod, summary, folded, on_cycle)
    summary.wall_s = time.perf_counter() - t0
    return summary


def _run(
    src: ReplaySource,
    indexed: Iterator[tuple[int, CycleRecord]],
    verify: bool,
    pod: str | None,
    summary: ReplaySummary,
    folded: Callable[[int], None],
    on_cycle: Callable[[CycleOutcome], None] | None,
) -> None:
    position: dict[int, int] = {}

    def records() -> Iterator[CycleRecord]:
        for i, r in indexed:
            position[id(r)] = i  # popped when its outcome is made: the record is alive until then
            yield r

    pairs = replay_cycles(src.events(), records(), src.config, folded, src.usage)
    for rec, again in pairs:
        out = CycleOutcome(index=position.pop(id(rec)), recorded=rec, rerun=again)
        if again is None:
            out.reason = f"{NO_USAGE}: {rec.usage_snapshot_id or '(no id)'}"
        elif verify:
            out.diffs = diff_records(rec, again, pod)
        summary.cycles += 1
        summary.simulated_ms = rec.logical_time_ms
        if verify and not out.matched:
            summary.mismatches += 1
            summary.mismatched.append(out)
            if summary.first_mismatch is None:
                summary.first_mismatch = out
        if on_cycle is not None:
            on_cycle(out)


# --------------------------------------------------------------------------- the command


def add_log_argument(p: argparse.ArgumentParser) -> None:
    """The LOG positional of ``hourglass replay`` and ``hourglass whatif``: what :func:`load_source` opens."""
    p.add_argument(
        "log",
        metavar="LOG",
        help="a run directory written by `hourglass simulate --out DIR`, an embedded log directory"
        " (`hourglass run --log DIR`) or kafka://HOST:PORT",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``hourglass replay`` options."""
    add_log_argument(p)
    p.add_argument(
        "--engine-config",
        metavar="FILE",
        help="for a log: the engine config file `hourglass run` used (JSON/YAML; default: the defaults)",
    )
    p.add_argument("--topic-prefix", default=None, help="for a log: PREFIX.events, PREFIX.decisions, ...")
    p.add_argument("--node-pool", default=None, metavar="POOL", help="the node pool this instance is the shard of (label kai.scheduler/node-pool; \"\" = the default shard, nodes without it): its own decisions topic; docs/deploy.md")
    p.add_argument("--verify", action="store_true", help="compare every re-run record with the recorded one")
    until = p.add_mutually_exclusive_group()
    until.add_argument(
        "--until", type=int, metavar="OFFSET", help="only cycles whose events_offset is <= OFFSET"
    )
    until.add_argument("--until-ms", type=int, metavar="T", help="only cycles whose logical time is <= T ms")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--cycle", metavar="CYCLE_ID", help="replay just this cycle (a unique id prefix is enough)"
    )
    which.add_argument(
        "--from-cycle",
        metavar="CYCLE_ID",
        help="replay this cycle and every later one, expanding delta records from the checkpoint before it",
    )
    p.add_argument("--pod", metavar="UID", help="compare and print only the decisions about this pod")


def _decision_line(d: dict[str, Any]) -> str:
    parts = [d["kind"]]
    if d.get("node"):
        parts.append(f"node={d['node']}")
    if d.get("gpu_devices"):
        parts.append(f"devices={d['gpu_devices']}x{d['gpu_milli_per_device']}m")
    if d.get("action"):
        parts.append(f"action={d['action']}")
    if d.get("reason") and d.get("reason") != d.get("action"):
        parts.append(f"reason={d['reason']}")
    if d.get("message"):
        parts.append(f"({d['message']})")
    return " ".join(parts)


def _head(o: CycleOutcome) -> str:
    r = o.recorded
    return f"cycle #{o.index} {r.cycle_id} (events_offset {r.events_offset}, t={r.logical_time_ms} ms)"


def run_cli(args: argparse.Namespace) -> int:
    """``hourglass replay``: replay with a progress bar; print per cycle, the first diff, the closing line."""
    from rich.console import Console

    from analytics.progress import count_bar

    err = Console(stderr=True)
    first_printed = False

    def on_cycle(o: CycleOutcome) -> None:
        nonlocal first_printed
        bar.advance()
        rec = o.rerun or o.recorded
        if args.verify:
            if o.matched:
                return
            if o.reason is not None:
                print(f"MISMATCH {_head(o)}: {o.reason}")
                return
            print(f"MISMATCH {_head(o)}: {len(o.diffs)} field(s) differ, first {o.diffs[0].path}")
            if not first_printed:
                first_printed = True
                for fd in o.diffs[:MAX_SHOWN]:
                    print(f"  {fd}")
                if len(o.diffs) > MAX_SHOWN:
                    print(f"  ... {len(o.diffs) - MAX_SHOWN} more")
            return
        if o.reason is not None:
            print(f"{_head(o)}: not re-run ({o.reason})")
        elif args.pod is not None:
            for pd in pod_decisions(rec, args.pod):
                print(f"{_head(o)}: {args.pod}: {_decision_line(pd)}")
        else:
            kinds: dict[str, int] = {}
            for dec in rec.decisions:
                kinds[dec.kind] = kinds.get(dec.kind, 0) + 1
            counts = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "no decisions"
            print(f"{_head(o)}: {counts}")

    with count_bar("replaying", "cycles", err=err) as bar:
        try:
            topics = Topics.from_prefix(args.topic_prefix).for_pool(args.node_pool)
            cfg = load_engine_config(args.engine_config) if args.engine_config else None
            if args.node_pool is not None:
                cfg = dataclasses.replace(cfg or SessionConfig(), node_pool=args.node_pool)
            src = load_source(args.log, config=cfg, topics=topics)
            summary = replay(
                src,
                verify=args.verify,
                until_offset=args.until,
                until_ms=args.until_ms,
                cycle=args.cycle,
                from_cycle=args.from_cycle,
                pod=args.pod,
                on_cycle=on_cycle,
                on_total=bar.set_total,
            )
            src.close()
        except (ReplayError, EngineConfigError) as exc:
            err.print(f"replay: {exc}", markup=False, highlight=False, soft_wrap=True)  # one line, any width
            return 2
    if args.verify:
        print(summary.line)
    else:
        print(f"replay: {summary.cycles} cycles (not verified: add --verify to compare)")
    sys.stdout.flush()
    return 1 if summary.mismatches else 0
