"""Queue statuses under a burst of records: the concurrent binder writes the statuses that wait for one Queue
as one merge patch, whose effect is that of writing them one by one; one worker writes each as before."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from ingest.filelog import FileLog
from ingest.kube.client import KubeError
from ingest.log import DEFAULT_TOPICS
from scheduler.kube.binder import DEFAULT_GROUP, Binder, EventSpec, merge_patches, queue_status
from tests.support.cycle_records import bind, queue, record
from tests.support.kube_objects import FAST


def _apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 section 2, MergePatch(Target, Patch), as the RFC writes it."""
    if isinstance(patch, dict):
        target = dict(target) if isinstance(target, dict) else {}
        for name, value in patch.items():
            if value is None:
                target.pop(name, None)
            else:
                target[name] = _apply_merge_patch(target.get(name), value)
        return target
    return patch


# RFC 7386 appendix A's cases (target, patch), and a second patch on top of each.
RFC_CASES = [
    ({"a": "b"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}),
    ({"a": "b"}, {"a": None}),
    ({"a": "b", "b": "c"}, {"a": None}),
    ({"a": ["b"]}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}),
    ({"e": None}, {"a": 1}),
    ({}, {"a": {"bb": {"ccc": None}}}),
]
SECOND = [{"a": {"x": "1"}}, {"a": None}, {"b": {"c": None}, "a": "z"}]


@pytest.mark.parametrize(("target", "first"), RFC_CASES)
@pytest.mark.parametrize("second", SECOND)
def test_merged_patches_do_what_the_patches_do_one_after_the_other(
    target: dict[str, Any], first: dict[str, Any], second: dict[str, Any]
) -> None:
    one_by_one = _apply_merge_patch(_apply_merge_patch(target, first), second)
    assert _apply_merge_patch(target, merge_patches([first, second])) == one_by_one


class _QueueKube:
    """Binds at once; Queue status writes take ``delay_s`` each and are recorded in order."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.writes: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        self.down = False

    def bind(self, namespace: str, name: str, node: str, annotations: Mapping[str, str]) -> None:
        pass

    def pod_node(self, namespace: str, name: str) -> str | None:
        return None

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None) -> None:
        pass

    def set_pod_condition(self, namespace: str, name: str, condition: Mapping[str, str]) -> str | None:
        return None

    def upsert_event(self, ev: EventSpec) -> None:
        pass

    def patch_queue_status(self, name: str, status: Mapping[str, Any]) -> None:
        time.sleep(self.delay_s)
        if self.down:
            raise KubeError(503, "down")
        with self.lock:
            self.writes.append((name, dict(status)))

    def write_podgroup_condition(self, action: Any) -> bool:
        return False


def _burst(tmp_path: Path, n: int) -> FileLog:
    """``n`` records, each binding one more pod of team-a and so changing its status."""
    log = FileLog(tmp_path / "log")
    for i in range(n):
        r = record([bind(f"ns/p{i}", "n1")], [queue("team-a", gpu_alloc=1000 * (i + 1))], t=i + 1)
        log.append(DEFAULT_TOPICS.decisions, None, r.dumps())
    return log


def _written(writes: list[tuple[str, dict[str, Any]]]) -> Any:
    state: Any = {}
    for _, status in writes:
        state = _apply_merge_patch(state, status)
    return state


def test_a_burst_of_records_writes_a_queues_status_once_per_wait_not_once_per_record(tmp_path: Path) -> None:
    log = _burst(tmp_path, 12)
    kube = _QueueKube(delay_s=0.1)
    st = Binder(log, kube, retry=FAST, workers=8).run(stop_when_idle=True)  # type: ignore[arg-type]
    assert (st.records, st.bound) == (12, 12)
    assert len(kube.writes) < 12, "one Queue status write per record"
    assert st.queue_statuses == len(kube.writes)
    assert st.queue_statuses + st.queue_statuses_merged == 12
    # What the Queue object holds at the end is the last record's status.
    assert _written(kube.writes) == queue_status(queue("team-a", gpu_alloc=12_000))
    assert log.committed(DEFAULT_GROUP, DEFAULT_TOPICS.decisions) == 12


def test_one_worker_writes_each_records_status(tmp_path: Path) -> None:
    log = _burst(tmp_path, 5)
    kube = _QueueKube(delay_s=0.0)
    st = Binder(log, kube, retry=FAST, workers=1).run(stop_when_idle=True)  # type: ignore[arg-type]
    assert [s for _, s in kube.writes] == [
        queue_status(queue("team-a", gpu_alloc=1000 * i)) for i in range(1, 6)
    ]
    assert st.queue_statuses_merged == 0


def test_merged_statuses_of_an_unapplied_record_are_written_again(tmp_path: Path) -> None:
    log = _burst(tmp_path, 6)
    kube = _QueueKube(delay_s=0.05)
    kube.down = True
    st = Binder(log, kube, retry=FAST, workers=4, sleep=lambda _: None).run(stop_when_idle=True)  # type: ignore[arg-type]
    assert st.unavailable >= 1 and not kube.writes
    kube.down = False
    st = Binder(log, kube, retry=FAST, workers=4).run(stop_when_idle=True)  # type: ignore[arg-type]
    assert _written(kube.writes) == queue_status(queue("team-a", gpu_alloc=6000))
    assert log.committed(DEFAULT_GROUP, DEFAULT_TOPICS.decisions) == 6
