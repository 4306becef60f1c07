"""The embedded default with the services as separate processes on one log directory, as a user runs them
on one machine: `hourglass run` and `hourglass fairshare` side by side while events keep arriving."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from ingest.events import dump_event
from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from tests.support.synthetic import SyntheticSpec, synthetic_events


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "analytics.cli", *args]


def test_scheduler_and_fairshare_processes_share_the_log_with_a_writer(tmp_path: Path) -> None:
    d = tmp_path / "log"
    events = synthetic_events(
        SyntheticSpec(nodes=8, pending_pods=200, departments=2, queues_per_department=2)
    )
    half = len(events) // 2
    with FileLog(d) as w:
        w.append_many(DEFAULT_TOPICS.events, [(e.uid.encode(), dump_event(e)) for e in events[:half]])
    run = subprocess.Popen(
        _cli("run", "--log", str(d), "--k-value", "1", "--poll-interval", "0.05"), stderr=subprocess.PIPE
    )
    fair = subprocess.Popen(_cli("fairshare", "--log", str(d), "--interval", "0.2"), stderr=subprocess.PIPE)
    try:
        # Once the first scheduler has recorded a cycle it holds the log's scheduler role.
        deadline = time.monotonic() + 120
        with FileLog(d, readonly=True) as r:
            while r.end_offset(DEFAULT_TOPICS.decisions) == 0:
                assert time.monotonic() < deadline and run.poll() is None, "the scheduler recorded no cycle"
                time.sleep(0.05)
        # A second scheduler on the same log is refused: exactly-once relies on a single scheduler.
        second = subprocess.run(
            _cli("run", "--log", str(d), "--once"), capture_output=True, text=True, timeout=120
        )
        assert second.returncode == 2 and "as 'scheduler'" in second.stderr
        # Meanwhile a third process (this one) keeps appending events: nobody's write is refused or lost.
        with FileLog(d) as w:
            for e in events[half:]:
                w.append(DEFAULT_TOPICS.events, e.uid.encode(), dump_event(e))
        deadline = time.monotonic() + 120
        with FileLog(d, readonly=True) as r:
            while time.monotonic() < deadline:
                recs = [json.loads(x.value) for x in r.read(DEFAULT_TOPICS.decisions, 0, 100_000)]
                usage = r.end_offset(DEFAULT_TOPICS.usage)
                if (
                    recs
                    and recs[-1]["events_offset"] == len(events) - 1
                    and usage
                    and recs[-1]["usage_snapshot_id"]
                ):
                    break
                time.sleep(0.1)
            else:
                raise AssertionError(f"no cycle over all {len(events)} events with a usage snapshot in time")
            assert r.end_offset(DEFAULT_TOPICS.events) == len(events)
            assert r.end_offset(DEFAULT_TOPICS.deadletter) == 0
            ids = [x["cycle_id"] for x in recs]
            assert len(ids) == len(set(ids))
    finally:
        for p in (run, fair):
            p.send_signal(signal.SIGTERM)
        for p in (run, fair):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    assert run.returncode == 0, run.stderr.read().decode() if run.stderr else ""
