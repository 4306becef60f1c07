"""The event-log usage source: exact resource-seconds from a small event stream, bad input counted."""

from __future__ import annotations

import polars as pl
import pytest

from fairshare.config import FairshareConfig
from fairshare.decay import DecayedUsage, roll_up
from fairshare.ledger import EventLedger
from fairshare.source import UsageSource
from ingest import events as ev
from ingest.events import dump_event

S = 1000  # ms per second

GiB = 2**30


def stream() -> list[ev.EventBase]:
    """Two queues under one parent on one 8-GPU node, times in seconds:

    * a/p1: 2 GPUs + 4 cores, bound at 10, releasing at 40 (still holds), finished at 50 -> 40 s;
    * b/p2: half a GPU (fraction 500), bound at 20, deleted at 80 -> 60 s;
    * a/p3: 1 GPU, bound at 60, still running at 100 -> 40 s;
    * a second node (4 GPUs) joins at 30 and leaves at 70.
    """
    return [
        ev.NodeUpserted(at_ms=0, name="n1", cpu_millicores=32_000, memory_bytes=128 * GiB, gpus=8),
        ev.QueueUpserted(at_ms=0, name="org"),
        ev.QueueUpserted(at_ms=0, name="a", parent="org"),
        ev.QueueUpserted(at_ms=0, name="b", parent="org"),
        ev.PodGroupUpserted(at_ms=0, name="ga", namespace="ns", queue="a", created_at_ms=0),
        ev.PodGroupUpserted(at_ms=0, name="gb", namespace="ns", queue="b", created_at_ms=0),
        ev.PodSubmitted(
            at_ms=0,
            name="p1",
            namespace="ns",
            pod_group="ga",
            requests=ev.PodRequests(gpus=2, cpu_millicores=4000, memory_bytes=GiB),
            created_at_ms=0,
        ),
        ev.PodSubmitted(
            at_ms=0,
            name="p2",
            namespace="ns",
            pod_group="gb",
            requests=ev.PodRequests(gpu_fraction_milli=500),
            created_at_ms=0,
        ),
        ev.PodBound(at_ms=10 * S, name="p1", namespace="ns", node="n1"),
        ev.PodBound(at_ms=20 * S, name="p2", namespace="ns", node="n1"),
        ev.NodeUpserted(at_ms=30 * S, name="n2", cpu_millicores=16_000, memory_bytes=64 * GiB, gpus=4),
        ev.PodReleasing(at_ms=40 * S, name="p1", namespace="ns", reason="preempted"),
        ev.PodFinished(at_ms=50 * S, name="p1", namespace="ns", phase="Failed"),
        ev.PodSubmitted(
            at_ms=55 * S,
            name="p3",
            namespace="ns",
            pod_group="ga",
            requests=ev.PodRequests(gpus=1),
            created_at_ms=55 * S,
        ),
        ev.PodBound(at_ms=60 * S, name="p3", namespace="ns", node="n1"),
        ev.NodeRemoved(at_ms=70 * S, name="n2"),
        ev.PodDeleted(at_ms=80 * S, name="p2", namespace="ns"),
        ev.QueueUpserted(at_ms=100 * S, name="b", parent="org"),  # moves logical time to 100 s
    ]


def ledger() -> EventLedger:
    led = EventLedger()
    for e in stream():
        led.fold(e)
    return led


def test_it_is_a_usage_source_of_kind_exact() -> None:
    led = EventLedger()
    assert isinstance(led, UsageSource)
    assert (led.kind, led.step_ms) == ("exact", 0)


def test_resource_seconds_are_exact() -> None:
    led = ledger()
    assert led.as_of_ms == 100 * S
    u = DecayedUsage.compute(led, 100 * S, FairshareConfig(window_s=1000)).vectors()
    # a: 2000 milli-GPU x 40 s (releasing still holds) + 1000 x 40 s; b: 500 x 60 s.
    assert u.raw["a"]["gpu"] == 2000 * 40 + 1000 * 40
    assert u.raw["b"]["gpu"] == 500 * 60
    assert u.raw["a"]["cpu"] == 4000 * 40
    assert u.raw["a"]["memory"] == GiB * 40
    # capacity: 8000 x 100 s + 4000 x 40 s (n2 from 30 to 70).
    assert u.capacity["gpu"] == 8000 * 100 + 4000 * 40
    assert u.normalised["b"]["gpu"] == pytest.approx(30_000 / 960_000, rel=1e-15)


def test_a_window_sees_only_its_part_and_parents_get_the_sum() -> None:
    led = ledger()
    # Window [50 s, 100 s): a holds only p3 (40 s); b holds p2 over [50, 80).
    u = roll_up(DecayedUsage.compute(led, 100 * S, FairshareConfig(window_s=50)).vectors(), led.parents())
    assert u.raw["a"]["gpu"] == 1000 * 40
    assert u.raw["b"]["gpu"] == 500 * 30
    assert u.raw["org"]["gpu"] == 1000 * 40 + 500 * 30
    assert u.capacity["gpu"] == 8000 * 50 + 4000 * 20


def test_allocation_frame_starts_with_the_value_in_effect() -> None:
    led = ledger()
    frame = led.allocation(45 * S, 100 * S).filter((pl.col("queue") == "a") & (pl.col("resource") == "gpu"))
    rows = frame.select("ts_ms", "value").rows()
    # p1's 2000 (from 10 s) is in effect at 45 s, drops to 0 at 50 s, p3 brings 1000 at 60 s.
    assert rows == [(10 * S, 2000.0), (50 * S, 0.0), (60 * S, 1000.0)]


def test_inconsistent_input_is_counted_not_raised() -> None:
    led = ledger()
    led.fold(ev.PodBound(at_ms=101 * S, name="ghost", namespace="ns", node="n1"))
    led.fold(ev.PodFinished(at_ms=102 * S, name="ghost", namespace="ns", phase="Succeeded"))
    led.fold(ev.NodeRemoved(at_ms=103 * S, name="nope"))
    assert not led.fold_record(b'{"type": "PodBound"}')
    assert not led.fold_record(b"\xff not json")
    assert led.counters["bind_unknown_pod"] == 1
    assert led.counters["stop_not_holding"] == 1
    assert led.counters["remove_unknown_node"] == 1
    assert led.counters["bad_record"] == 2
    # ... and the usage is unchanged by them (only time moved on, p3 still holds).
    assert led.allocated_now() == {("a", "gpu"): 1000}


def test_records_fold_like_events_and_late_stamps_apply_at_the_later_time() -> None:
    led = EventLedger()
    for e in stream():
        assert led.fold_record(dump_event(e))
    # An event stamped before the last one cannot rewrite integrated history: it applies at 100 s.
    led.fold(ev.PodFinished(at_ms=5 * S, name="p3", namespace="ns", phase="Succeeded"))
    assert led.as_of_ms == 100 * S
    u = DecayedUsage.compute(led, 100 * S, FairshareConfig(window_s=1000)).vectors()
    assert u.raw["a"]["gpu"] == 2000 * 40 + 1000 * 40


def test_pruning_old_history_does_not_change_the_window() -> None:
    led = ledger()
    cfg = FairshareConfig(window_s=45, half_life_s=20)
    before = DecayedUsage.compute(led, 100 * S, cfg).vectors()
    dropped = led.prune(55 * S)
    assert dropped > 0
    assert DecayedUsage.compute(led, 100 * S, cfg).vectors() == before


def test_a_rebind_moves_the_pod_instead_of_holding_twice() -> None:
    led = ledger()
    led.fold(ev.PodBound(at_ms=100 * S, name="p3", namespace="ns", node="n1"))
    assert led.allocated_now()[("a", "gpu")] == 1000
