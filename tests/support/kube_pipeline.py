"""Ingest, scheduler service and binder on one FileLog against a real kube-apiserver, stepped in turn,
and the decisions they recorded.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from ingest.log import DEFAULT_TOPICS, Log
from scheduler.kube.binder import (
    Binder,
    BinderApi,
    RetryPolicy,
)
from scheduler.service import Service


def decision_records(log: Log, topic: str = DEFAULT_TOPICS.decisions) -> list[dict[str, Any]]:
    """Every cycle record on a decisions topic, as the v2 dicts they stand for (a log holds them as v3,
    which leaves out fields at their default: :mod:`scheduler.engine.record.written`)."""
    from scheduler.engine.record.decisions import CycleRecord
    from scheduler.engine.record.delta import render

    return [json.loads(render(CycleRecord.loads(r.value)).dumps()) for r in log.read(topic, 0, 100_000)]


def last_decisions(log: Log, kind: str) -> dict[str, dict[str, Any]]:
    """The latest decision of ``kind`` per pod."""
    out: dict[str, dict[str, Any]] = {}
    for rec in decision_records(log):
        for d in rec["decisions"]:
            if d["kind"] == kind and d["pod"]:
                out[d["pod"]] = {**d, "cycle_time": rec["logical_time_ms"]}
    return out


class Pipeline:
    """The three components on one FileLog, stepped in turn until nothing moves."""

    def __init__(self, api: Any, ns: str, log: Log) -> None:
        from ingest.kube import client, watcher

        self.log = log
        self.ingest = watcher.KubeIngest(client.KubeApi(api), log, namespace=ns, watch_timeout_s=30)
        self.service = Service(log, poll_interval_s=0.05)
        self.binder = Binder(
            log, BinderApi(api), grace_seconds=0, retry=RetryPolicy(attempts=4, base_s=0.05), workers=4
        )

    def step(self) -> bool:
        """One round of ingest, scheduler and binder; True when ingest appended events."""
        events = self.log.end_offset(DEFAULT_TOPICS.events)
        self.ingest.step(timeout_s=0.5)
        self.service.run(stop_when_idle=True)
        self.binder.run(stop_when_idle=True)
        return self.log.end_offset(DEFAULT_TOPICS.events) != events

    def settle(self, until: Callable[[], bool], timeout_s: float = 90.0) -> None:
        """Step until ``until()`` holds and two rounds in a row brought no new events (a slow machine only
        takes longer, it does not make the test pass early)."""
        deadline = time.monotonic() + timeout_s
        quiet = 0
        while time.monotonic() < deadline:
            quiet = 0 if self.step() else quiet + 1
            if quiet >= 2 and until():
                return
        raise AssertionError("the pipeline did not reach the expected state in time")
