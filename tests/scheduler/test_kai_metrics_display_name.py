"""KAI's queue labels from a Queue with ``spec.displayName``: the Queue object is translated, folded and
scheduled, and the scrape carries ``queue_display_name`` (and ``queue_name``) from it."""

from __future__ import annotations

from prometheus_client import generate_latest

from ingest import events as ev
from ingest.kube import translate as kube
from scheduler.engine.cycle import run_cycle
from scheduler.engine.state import StateBuilder
from scheduler.metrics import SchedulerMetrics, capacity_of, observe_cycle


def _queue(name: str, display: str | None) -> ev.Event:
    spec: dict[str, object] = {
        "resources": {r: {"quota": 0, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")}
    }
    if display is not None:
        spec["displayName"] = display
    event, _ = kube.queue_upserted({"metadata": {"name": name}, "spec": spec}, 0)
    return event


def test_queue_display_name_label_comes_from_spec_display_name() -> None:
    b = StateBuilder()
    b.apply(ev.NodeUpserted(uid="", at_ms=0, name="n1", cpu_millicores=8000, memory_bytes=2**34, gpus=1))
    b.apply(_queue("team-a", "Team A (research)"))
    b.apply(_queue("team-b", None))
    record, ssn = run_cycle(b.snapshot(), now_ms=1)
    m = SchedulerMetrics.create()
    observe_cycle(m, record, {"cycle": 0.001}, capacity=capacity_of(ssn), session=ssn)
    text = generate_latest(m.registry).decode()
    assert (
        'kai_queue_info{queue_display_name="Team A (research)",queue_metadata_name="team-a",'
        'queue_name="Team A (research)"} 1.0' in text
    )
    assert (
        'kai_queue_info{queue_display_name="",queue_metadata_name="team-b",queue_name="team-b"} 1.0' in text
    )
