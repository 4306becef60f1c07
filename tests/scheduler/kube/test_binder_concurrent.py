"""The concurrent binder with a recording stand-in for the API: calls overlap, one pod's calls stay in order,
a slow GPU-sharing bind holds up only itself, and a failed record is applied again from its start."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ingest.filelog import FileLog
from ingest.kube.client import KubeError
from ingest.log import DEFAULT_TOPICS
from scheduler.kube.binder import (
    DEFAULT_GROUP,
    DEFAULT_POLL_INTERVAL_S,
    UNAVAILABLE_RETRY_S,
    Binder,
    EventSpec,
)
from scheduler.kube.workers import KeyedPool
from tests.support.cycle_records import bind, evict, record
from tests.support.kube_objects import FAST


class _SlowKube:
    """Answers every call after ``delay_s``, recording (call, pod) in completion order; thread-safe."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.active = 0
        self.most_active = 0
        self.down = False

    def _call(self, what: str, pod: str) -> None:
        with self.lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        try:
            time.sleep(self.delay_s)
            if self.down:
                raise KubeError(503, "down")
        finally:
            with self.lock:
                self.active -= 1
                self.calls.append((what, pod))

    def bind(self, namespace: str, name: str, node: str, annotations: Mapping[str, str]) -> None:
        self._call("bind", f"{namespace}/{name}")

    def pod_node(self, namespace: str, name: str) -> str | None:
        return None

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None) -> None:
        self._call("delete", f"{namespace}/{name}")

    def set_pod_condition(self, namespace: str, name: str, condition: Mapping[str, str]) -> str | None:
        self._call("condition", f"{namespace}/{name}")
        return "uid-1"

    def upsert_event(self, ev: EventSpec) -> None:
        pass

    def patch_queue_status(self, name: str, status: Mapping[str, Any]) -> None:
        pass

    def write_podgroup_condition(self, action: Any) -> bool:
        return False


def _log(tmp_path: Path, *records: Any) -> FileLog:
    log = FileLog(tmp_path / "log")
    for r in records:
        log.append(DEFAULT_TOPICS.decisions, None, r.dumps())
    return log


def test_binds_run_in_parallel_and_all_are_applied(tmp_path: Path) -> None:
    pods = [f"ns/p{i}" for i in range(40)]
    log = _log(
        tmp_path,
        record([bind(p, "n1") for p in pods[:20]], t=1),
        record([bind(p, "n1") for p in pods[20:]], t=2),
    )
    kube = _SlowKube(delay_s=0.05)
    started = time.perf_counter()
    st = Binder(log, kube, retry=FAST, workers=8).run(stop_when_idle=True)  # type: ignore[arg-type]
    took = time.perf_counter() - started
    assert (st.records, st.bound) == (2, 40)
    assert sorted(p for _, p in kube.calls) == sorted(pods)
    assert kube.most_active > 1  # sequential would take 40 x 50 ms = 2 s
    assert took < 1.0
    assert log.committed(DEFAULT_GROUP, DEFAULT_TOPICS.decisions) == 2


def test_one_pods_calls_keep_their_order_across_records(tmp_path: Path) -> None:
    # Record 1 binds p (slow to answer for everyone); record 2 evicts it: the delete must come after the bind,
    # even though other workers are free when record 2 starts.
    log = _log(tmp_path, record([bind("ns/p", "n1")], t=1), record([evict("ns/p", "n1")], t=2))
    kube = _SlowKube(delay_s=0.1)
    st = Binder(log, kube, retry=FAST, workers=8).run(stop_when_idle=True)  # type: ignore[arg-type]
    assert (st.bound, st.evicted) == (1, 1)
    assert [c for c in kube.calls if c[1] == "ns/p"] == [
        ("bind", "ns/p"),
        ("condition", "ns/p"),
        ("delete", "ns/p"),
    ]


def test_a_slow_sharing_bind_blocks_only_its_own_pod(tmp_path: Path) -> None:
    release = threading.Event()

    class _Sharing:
        class cfg:  # stands in for SharingConfig
            sync_interval_s = 3600.0

        def prepare(self, namespace: str, name: str, node: str, devices: Any, milli: int) -> dict[str, str]:
            assert release.wait(5), "never released"
            return {}

        def reconcile(self, nodes: Any = None) -> int:
            return 0

    log = _log(
        tmp_path,
        record([bind("ns/shared", "n1", (0,), 500)], t=1),
        record([bind("ns/whole", "n2", (0,), 1000)], t=2),
    )
    kube = _SlowKube()
    b = Binder(log, kube, retry=FAST, workers=4, sharing=_Sharing())  # type: ignore[arg-type]
    done = threading.Thread(target=b.run, kwargs={"stop_when_idle": True})
    done.start()
    deadline = time.monotonic() + 3
    while ("bind", "ns/whole") not in kube.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ("bind", "ns/whole") in kube.calls  # bound while the shared pod still waits for its reservation
    assert ("bind", "ns/shared") not in kube.calls
    assert log.committed(DEFAULT_GROUP, DEFAULT_TOPICS.decisions) == 0  # record 1 is not whole yet
    release.set()
    done.join(5)
    assert log.committed(DEFAULT_GROUP, DEFAULT_TOPICS.decisions) == 2
    b.close()


def test_an_unreachable_server_leaves_the_record_uncommitted_and_it_is_applied_again(tmp_path: Path) -> None:
    log = _log(tmp_path, record([bind(f"ns/p{i}", "n1") for i in range(6)], t=1))
    kube = _SlowKube()
    kube.down = True
    slept: list[float] = []
    st = Binder(log, kube, retry=FAST, workers=4, sleep=slept.append).run(stop_when_idle=True)  # type: ignore[arg-type]
    assert (st.records, st.unavailable) == (0, 1)
    assert log.committed(DEFAULT_GROUP, DEFAULT_TOPICS.decisions) == 0
    kube.down = False
    st = Binder(log, kube, retry=FAST, workers=4).run(stop_when_idle=True)  # type: ignore[arg-type]
    assert (st.records, st.bound) == (1, 6)
    assert log.committed(DEFAULT_GROUP, DEFAULT_TOPICS.decisions) == 1


def test_keyed_pool_runs_same_key_in_order_and_others_alongside() -> None:
    pool = KeyedPool(4)
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def task(key: str, i: int) -> None:
        time.sleep(0.01 if i % 2 == 0 else 0.0)
        with lock:
            seen.append((key, i))

    for i in range(10):
        for key in ("a", "b", "c"):
            pool.submit(key, functools.partial(task, key, i))
    pool.close()
    for key in ("a", "b", "c"):
        assert [i for k, i in seen if k == key] == list(range(10))


def test_idle_polls_are_short_and_an_unreachable_server_is_retried_slower(tmp_path: Path) -> None:
    """A new decision waits at most one short idle poll; a record the server refused waits the longer retry."""
    for down, expect, never in (
        (False, DEFAULT_POLL_INTERVAL_S, UNAVAILABLE_RETRY_S),
        (True, UNAVAILABLE_RETRY_S, DEFAULT_POLL_INTERVAL_S),
    ):
        log = _log(tmp_path / str(down), record([bind("ns/p", "n1")], t=1))
        kube = _SlowKube()
        kube.down = down
        slept: list[float] = []
        binders: list[Binder] = []

        def nap(s: float, slept: list[float] = slept, binders: list[Binder] = binders) -> None:
            slept.append(s)
            if s in (DEFAULT_POLL_INTERVAL_S, UNAVAILABLE_RETRY_S) and len(slept) >= 3:
                binders[0].stop()

        binders.append(Binder(log, kube, retry=FAST, workers=2, sleep=nap))  # type: ignore[arg-type]
        binders[0].run()
        binders[0].close()
        assert expect in slept and never not in slept, slept
    assert DEFAULT_POLL_INTERVAL_S <= 0.05 < UNAVAILABLE_RETRY_S
