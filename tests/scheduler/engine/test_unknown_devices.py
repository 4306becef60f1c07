"""A placed pod whose bind named no GPU devices still holds its GPUs.

Pods bound before Hourglass took over, or whose device annotation was missing or not trusted, arrive as
``PodBound`` without ``gpu_devices``. Their GPUs are counted all the same (devices chosen as for a foreign
pod), so no other pod over-commits the node.
"""

from __future__ import annotations

import pytest

from ingest import events as ev
from scheduler.engine.cycle import run_cycle
from scheduler.engine.session import Session, SessionConfig
from scheduler.engine.state import StateBuilder

S = 1000


def _events(bound: ev.PodRequests, devices: list[int], pending_gpus: tuple[int, ...]) -> list[ev.EventBase]:
    out: list[ev.EventBase] = [
        ev.NodeUpserted(at_ms=0, name="n1", cpu_millicores=64_000, memory_bytes=2**38, gpus=8),
        ev.QueueUpserted(at_ms=0, name="q"),
        ev.PodGroupUpserted(at_ms=0, name="old", namespace="ns", queue="q", created_at_ms=0),
        ev.PodSubmitted(at_ms=0, name="old", namespace="ns", pod_group="old", requests=bound, created_at_ms=0),
        ev.PodBound(at_ms=S, name="old", namespace="ns", node="n1", gpu_devices=devices),
    ]
    for i, gpus in enumerate(pending_gpus):
        name = f"new{i}"
        out += [
            ev.PodGroupUpserted(at_ms=S, name=name, namespace="ns", queue="q", created_at_ms=S + i),
            ev.PodSubmitted(
                at_ms=S,
                name=name,
                namespace="ns",
                pod_group=name,
                requests=ev.PodRequests(gpus=gpus),
                created_at_ms=S + i,
            ),
        ]
    return out


def _fold(events: list[ev.EventBase]) -> StateBuilder:
    b = StateBuilder()
    for e in events:
        b.apply(e)
    return b


@pytest.mark.parametrize("devices", [[], [7]])  # none named, or fewer than it holds
def test_a_whole_gpu_pod_bound_without_devices_holds_its_gpus(devices: list[int]) -> None:
    state = _fold(_events(ev.PodRequests(gpus=5), devices, (4, 3))).snapshot()
    ssn = Session(state, SessionConfig(), 2 * S)
    old = next(t for t in ssn.tasks if t.name == "old")
    assert len(old.devices) == 5 and set(devices) <= set(old.devices)
    assert ssn.node_by_name["n1"].idle_gpu_count() == 3
    record, _ = run_cycle(state, SessionConfig(), 2 * S)
    binds = {d.pod: d.gpu_devices for d in record.decisions if d.kind == "Bind"}
    # Only the 3-GPU pod fits beside the 5 GPUs held, on the devices the old pod does not hold.
    assert list(binds) == ["ns/new1"]
    assert not set(binds["ns/new1"]) & set(old.devices)


def test_a_shared_pod_bound_without_devices_holds_its_share() -> None:
    state = _fold(_events(ev.PodRequests(gpu_fraction_milli=500), [], (8,))).snapshot()
    ssn = Session(state, SessionConfig(), 2 * S)
    node = ssn.node_by_name["n1"]
    assert node.shared_devices() == 1 and node.idle_gpu_count() == 7
    record, _ = run_cycle(state, SessionConfig(), 2 * S)
    assert not [d for d in record.decisions if d.kind == "Bind"]  # an 8-GPU pod no longer fits
