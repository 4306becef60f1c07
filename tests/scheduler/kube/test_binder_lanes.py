"""Records take turns for the binder's workers: an unrelated pod's bind is not queued behind the hundreds of
calls of a large record (a gang's binds, a burst of pending-pod conditions) that came before it."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from scheduler.kube.binder import Binder, EventSpec
from scheduler.kube.workers import KeyedPool
from tests.support.cycle_records import bind, pending, record
from tests.support.kube_objects import FAST


def test_lanes_take_turns_and_each_key_keeps_its_order() -> None:
    pool = KeyedPool(2)
    done: list[str] = []
    lock = threading.Lock()

    def task(name: str) -> None:
        time.sleep(0.01)
        with lock:
            done.append(name)

    for i in range(60):
        pool.submit(f"big-{i}", functools.partial(task, f"big-{i}"), lane=1)
    pool.submit("small", functools.partial(task, "small"), lane=2)
    for i in range(3):  # one key across two lanes: still in submission order
        pool.submit("shared", functools.partial(task, f"shared-{i}"), lane=1 + i % 2)
    pool.close()
    assert done.index("small") < 6, f"the one-call lane waited behind the large one: {done.index('small')}"
    assert [d for d in done if d.startswith("shared")] == ["shared-0", "shared-1", "shared-2"]
    assert sorted(done) == sorted(
        [f"big-{i}" for i in range(60)] + ["small", "shared-0", "shared-1", "shared-2"]
    )


class _Kube:
    """Every bind and pod condition write takes 20 ms; both are recorded in the order they start."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.lock = threading.Lock()

    def bind(self, namespace: str, name: str, node: str, annotations: Mapping[str, str]) -> None:
        with self.lock:
            self.started.append(f"{namespace}/{name}")
        time.sleep(0.02)

    def pod_node(self, namespace: str, name: str) -> str | None:
        return None

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None) -> None:
        pass

    def set_pod_condition(self, namespace: str, name: str, condition: Mapping[str, str]) -> str | None:
        with self.lock:
            self.started.append(f"condition {namespace}/{name}")
        time.sleep(0.02)
        return None

    def upsert_event(self, ev: EventSpec) -> None:
        pass

    def patch_queue_status(self, name: str, status: Mapping[str, Any]) -> None:
        pass

    def write_podgroup_condition(self, action: Any) -> bool:
        return False


def test_an_unrelated_pods_bind_goes_ahead_of_a_large_gang_record(tmp_path: Path) -> None:
    gang = [f"ns/g{i}" for i in range(100)]
    log = FileLog(tmp_path / "log")
    log.append(
        DEFAULT_TOPICS.decisions, None, record([bind(p, "n1", job="ns/gang") for p in gang], t=1).dumps()
    )
    log.append(DEFAULT_TOPICS.decisions, None, record([bind("ns/unrelated", "n2")], t=2).dumps())
    kube = _Kube()
    st = Binder(log, kube, retry=FAST, workers=4).run(stop_when_idle=True)  # type: ignore[arg-type]
    assert st.bound == 101
    # FIFO would start it 101st; taking turns, it starts with the first workers' second round.
    assert kube.started.index("ns/unrelated") < 10


def test_an_unrelated_pod_decided_in_the_gangs_cycle_is_not_bound_after_the_gang(tmp_path: Path) -> None:
    # One cycle binds a 100-pod gang and, after it in the record, an unrelated pod of another job.
    gang = [bind(f"ns/g{i}", "n1", job="ns/gang") for i in range(100)]
    log = FileLog(tmp_path / "log")
    log.append(DEFAULT_TOPICS.decisions, None, record([*gang, bind("ns/unrelated", "n2")], t=1).dumps())
    kube = _Kube()
    st = Binder(log, kube, retry=FAST, workers=4).run(stop_when_idle=True)  # type: ignore[arg-type]
    assert st.bound == 101
    # In record order it would start 101st; its job's lane takes turns with the gang's.
    assert kube.started.index("ns/unrelated") < 10


def test_a_bind_goes_ahead_of_the_status_writes_of_many_earlier_records(tmp_path: Path) -> None:
    # Twenty records each marking five pods pending (a gang arriving), then one record binding an unrelated pod:
    # the pending marks of all records share one turn, so the bind starts with the first free worker.
    log = FileLog(tmp_path / "log")
    for t in range(20):
        marks = pending([f"ns/gang-{t}-{i}" for i in range(5)])
        log.append(DEFAULT_TOPICS.decisions, None, record([marks], t=t + 1).dumps())
    log.append(DEFAULT_TOPICS.decisions, None, record([bind("ns/unrelated", "n2")], t=100).dumps())
    kube = _Kube()
    st = Binder(log, kube, retry=FAST, workers=4).run(stop_when_idle=True)  # type: ignore[arg-type]
    assert st.bound == 1 and st.pending_conditions == 100
    # One lane per record would start it after a condition write of each of the twenty records before it.
    before = kube.started.index("ns/unrelated")
    assert before <= 8, f"the bind started after {before} condition writes"
