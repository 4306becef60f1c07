"""The scheduler service loop: dead letters, exactly-once cycle records across SIGKILLs, Kafka.

See ``docs/service.md`` for the idempotent scheme these tests pin.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from ingest.backends import open_log
from ingest.events import Event, PodDeleted, PodGroupDeleted, PodGroupUpserted, PodSubmitted, dump_event
from ingest.filelog import FileLog
from ingest.log import Log, Topics
from scheduler.engine.cycle import run_cycle
from scheduler.engine.record.decisions import CycleRecord
from scheduler.engine.record.delta import expand_records
from scheduler.engine.session import SessionConfig
from scheduler.service import Folder, Service
from tests.support.paths import REPO_ROOT
from tests.support.replay_cli import replay_verify
from tests.support.synthetic import SyntheticSpec, synthetic_events


def _records(events: list[Event]) -> list[tuple[bytes | None, bytes]]:
    return [(e.uid.encode(), dump_event(e)) for e in events]


def _malformed(template: PodSubmitted) -> list[tuple[bytes, str, str]]:
    """(raw value, expected reason_code, a word the message must contain)."""
    base = json.loads(dump_event(template))
    unknown_version = {**base, "v": 3}
    negative = {**base, "name": "neg-0", "requests": {**base["requests"], "cpu_millicores": -1}}
    unknown_type = {**base, "type": "PodTeleported"}
    return [
        (b'{"type": "PodSubmitted", "name": ', "bad_json", "JSON"),
        (json.dumps(unknown_version).encode(), "unknown_version", "version 3"),
        (json.dumps(negative).encode(), "schema", "requests.cpu_millicores"),
        (json.dumps(unknown_type).encode(), "unknown_type", "PodTeleported"),
        (b"\xff\xfe not utf-8", "bad_json", "JSON"),
    ]


def _write_mixed(log: Log, topics: Topics, events: list[Event], seed: int) -> dict[int, tuple[str, str]]:
    """Append the events with the malformed records interleaved (never last); return their offsets."""
    template = next(e for e in events if isinstance(e, PodSubmitted))
    bad = _malformed(template)
    rng = random.Random(seed)
    slots = sorted(rng.sample(range(1, len(events) - 1), len(bad)))
    out: list[tuple[bytes | None, bytes]] = []
    where: dict[int, tuple[str, str]] = {}
    base = log.end_offset(topics.events)
    good = _records(events)
    k = 0
    for i, rec in enumerate(good):
        while k < len(bad) and slots[k] == i:
            where[base + len(out)] = (bad[k][1], bad[k][2])
            out.append((None, bad[k][0]))
            k += 1
        out.append(rec)
    log.append_many(topics.events, out)
    return where


def _read_all(log: Log, topic: str) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    at = 0
    while True:
        batch = log.read(topic, at, 1000)
        if not batch:
            return out
        out += [(r.offset, r.value) for r in batch]
        at = batch[-1].offset + 1


def _check_malformed_run(log: Log, topics: Topics) -> None:
    events = synthetic_events(SyntheticSpec(nodes=4, pending_pods=40, departments=2, queues_per_department=2))
    where = _write_mixed(log, topics, events, seed=3)
    service = Service(log, topics, batch_size=16)
    stats = service.run(stop_when_idle=True)
    end = log.end_offset(topics.events)
    assert stats.events_folded == len(events)
    assert stats.dead_letters == len(where)

    dead = [json.loads(v) for _, v in _read_all(log, topics.deadletter)]
    assert {d["source_offset"] for d in dead} == set(where)
    for d in dead:
        reason, word = where[d["source_offset"]]
        assert d["source_topic"] == topics.events
        assert d["reason_code"] == reason, d
        assert word in d["message"], d
        assert isinstance(d["raw"], str) and d["raw"]

    cycles = [CycleRecord.loads(v) for _, v in _read_all(log, topics.decisions)]
    assert len(cycles) >= 2
    assert cycles[-1].events_offset == end - 1  # the last record is a valid event
    assert cycles[-1].logical_time_ms == events[-1].at_ms
    assert len({c.cycle_id for c in cycles}) == len(cycles)
    assert log.committed("hourglass-scheduler", topics.events) == end

    # A second service over the same log recovers and appends nothing twice.
    again = Service(log, topics, batch_size=16).run(stop_when_idle=True)
    assert again.cycles_appended == 0 and again.dead_letters == 0
    assert again.recovered_offset == end - 1
    assert len(_read_all(log, topics.deadletter)) == len(where)
    assert len(_read_all(log, topics.decisions)) == len(cycles)


def test_rerun_cycles_are_not_appended_twice(tmp_path: Path) -> None:
    topics = Topics()
    events = synthetic_events(SyntheticSpec(nodes=4, pending_pods=30, departments=1, queues_per_department=2))
    with FileLog(tmp_path / "log") as log:
        log.append_many(topics.events, _records(events))
        first = Service(log, topics, batch_size=10).run(stop_when_idle=True)
        assert first.cycles_appended == first.cycles >= 3
        # A service that re-runs everything from offset 0 (as if its position were lost) derives the same
        # cycle ids and drops every one of them.
        again = Service(log, topics, batch_size=10)
        again.recover()
        again.folder, again.position, again.cycled_offset = Folder(topics.events), 0, -1
        stats = again.run(stop_when_idle=True)
        assert stats.cycles == first.cycles and stats.cycles_skipped == first.cycles
        assert stats.cycles_appended == 0
        assert log.end_offset(topics.decisions) == first.cycles


def test_malformed_input_goes_to_deadletter_filelog(tmp_path: Path) -> None:
    topics = Topics()
    with FileLog(tmp_path / "log") as log:
        _check_malformed_run(log, topics)


def test_kafka_malformed_input(kafka_bootstrap: str) -> None:
    topics = Topics.with_prefix(f"svc-{uuid.uuid4().hex[:8]}")
    with open_log(f"kafka://{kafka_bootstrap}", topics=topics.all()) as log:
        _check_malformed_run(log, topics)


# -- crash test ------------------------------------------------------------------------------------


def churn_events(spec: SyntheticSpec, window: int) -> list[Event]:
    """The synthetic workload, with every job deleted (pods, then group) ``window`` jobs after it was
    submitted: a long event stream over a small live state, so cycles stay cheap."""
    out: list[Event] = []
    jobs: list[tuple[str, list[str]]] = []
    pods_of: dict[str, list[str]] = {}
    for e in synthetic_events(spec):
        if isinstance(e, PodGroupUpserted):
            if len(jobs) >= window:
                name, pods = jobs[len(jobs) - window]
                for p in pods:
                    out.append(PodDeleted(at_ms=e.at_ms, name=p, namespace="default"))
                out.append(PodGroupDeleted(at_ms=e.at_ms, name=name, namespace="default"))
            pods_of[e.name] = []
            jobs.append((e.name, pods_of[e.name]))
        elif isinstance(e, PodSubmitted):
            pods_of[e.pod_group].append(e.name)
        out.append(e)
    return out


def _run_cmd(directory: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "analytics.cli",
        "run",
        "--log",
        str(directory),
        "--batch-size",
        "250",
        *extra,
    ]


def _wait_for_decisions(
    directory: Path, at_least: int, proc: subprocess.Popen[bytes], timeout: float
) -> bool:
    deadline = time.monotonic() + timeout
    reader = FileLog(directory, readonly=True)
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if reader.end_offset(Topics().decisions) >= at_least:
                return True
            time.sleep(0.005)
    finally:
        reader.close()
    return False


def test_sigkill_exactly_once(tmp_path: Path) -> None:
    topics = Topics()
    directory = tmp_path / "log"
    spec = SyntheticSpec(nodes=20, pending_pods=4000, departments=2, queues_per_department=3, seed=11)
    events = churn_events(spec, window=40)
    assert len(events) >= 10_000
    rng = random.Random(20261122)
    chunks = 4
    size = -(-len(events) // chunks)
    kills = 0
    mid_run_kills = 0
    dead_expected: set[int] = set()
    for c in range(chunks):
        with FileLog(directory) as log:
            dead_expected |= set(_write_mixed(log, topics, events[c * size : (c + 1) * size], seed=c))
            before = log.end_offset(topics.decisions)
        for _ in range(2):  # two kills per chunk, each after a random number of new cycle records
            proc = subprocess.Popen(
                _run_cmd(directory), cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            try:
                reached = _wait_for_decisions(directory, before + rng.randint(1, 4), proc, timeout=120)
                time.sleep(rng.uniform(0, 0.05))
            finally:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode() if proc.stderr else ""
            kills += 1
            with FileLog(directory, readonly=True) as reader:
                before = reader.end_offset(topics.decisions)
                if reached and reader.committed("hourglass-scheduler", topics.events) < reader.end_offset(
                    topics.events
                ):
                    mid_run_kills += 1
    assert kills == 2 * chunks
    assert mid_run_kills >= chunks  # the kills really hit a running service
    done = subprocess.run(
        _run_cmd(directory, "--stop-when-idle"), cwd=REPO_ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr

    with FileLog(directory, readonly=True) as log:
        decisions = _read_all(log, topics.decisions)
        dead = [json.loads(v) for _, v in _read_all(log, topics.deadletter)]
        end = log.end_offset(topics.events)
        events_raw = log.read(topics.events, 0, end)
    ids = [json.loads(v)["cycle_id"] for _, v in decisions]
    assert len(ids) == len(set(ids)), "a cycle record was duplicated"
    assert len(ids) >= 40
    assert sorted(d["source_offset"] for d in dead) == sorted(dead_expected)  # each exactly once

    # Re-run every recorded cycle from a fresh fold: byte-identical to the record the delta chain
    # rebuilds. Every service start wrote a checkpoint first, so the chain never breaks across kills.
    written = [CycleRecord.loads(raw) for _, raw in decisions]
    assert written[0].kind == "full" and sum(r.kind == "full" for r in written) >= 2
    assert any(r.kind == "delta" for r in written)
    folder = Folder(topics.events)
    pos = 0
    mismatches = 0
    last_offset = -1
    config = SessionConfig()
    for rec in expand_records(written):
        raw = rec.dumps()
        assert rec.events_offset > last_offset  # offsets strictly increase: no cycle lost its order
        last_offset = rec.events_offset
        while pos <= rec.events_offset:
            folder.feed(events_raw[pos])
            pos += 1
        assert folder.offset == rec.events_offset
        assert folder.now_ms == rec.logical_time_ms  # logical time = at_ms of the last folded event
        # the binds in flight the cycle used are an input it records (docs/service.md, "Binds in flight")
        rerun, _ = run_cycle(folder.snapshot(), config, rec.logical_time_ms, in_flight=rec.in_flight)
        mismatches += rerun.dumps() != raw
    assert mismatches == 0
    assert last_offset == end - 1  # every valid event was folded into a recorded cycle

    # And the user's check: `hourglass replay LOG --verify` over the log the killed services left.
    assert replay_verify(directory) == f"replay: {len(ids)} cycles, 0 mismatches"
