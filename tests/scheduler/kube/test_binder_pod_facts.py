"""What a pod learns from the binder, on a real kube-apiserver: Events ``kubectl describe pod`` lists (they
carry the pod's uid), the ``DisruptionTarget`` condition an eviction sets before deleting, and a pod deleted
while being bound, which is not a bind conflict."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from scheduler.kube.binder import DISRUPTION_REASON, Binder, BinderApi
from tests.support.cycle_records import bind, evict, record
from tests.support.kube_objects import FAST, apply_crds, make_node, make_pod, pod_events, read_pod


@pytest.fixture
def api(kube_api: Any) -> Iterator[Any]:
    with kube_api.api_client() as client_:
        apply_crds(client_)
        yield client_


def _describe_events(api: Any, ns: str, name: str, uid: str) -> dict[str, dict[str, Any]]:
    """The Events ``kubectl describe pod`` shows: it selects them by the pod's name, namespace, kind and uid."""
    from kubernetes import client

    sel = f"involvedObject.name={name},involvedObject.namespace={ns},involvedObject.kind=Pod,involvedObject.uid={uid}"
    r = client.CoreV1Api(api).list_namespaced_event(ns, field_selector=sel, _preload_content=False)
    return {e["reason"]: e for e in json.loads(r.data)["items"]}


def test_events_carry_the_pod_uid_and_an_eviction_marks_a_disruption_target(
    api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns = kube_namespace
    node = f"{ns}-n1"
    make_node(api, node)
    make_pod(api, ns, "victim", gpus=1)
    uid = read_pod(api, ns, "victim")["metadata"]["uid"]
    log = FileLog(tmp_path / "log")
    log.append(DEFAULT_TOPICS.decisions, None, record([bind(f"{ns}/victim", node, (0,), 1000)], t=1).dumps())
    msg = f"Pod {ns}/victim was preempted by workload {ns}/big."
    log.append(
        DEFAULT_TOPICS.decisions, None, record([evict(f"{ns}/victim", node, "reclaim", msg)], t=2).dumps()
    )
    # Grace 30 s and no kubelet: the pod stays Terminating, so its status can be read after the eviction.
    st = Binder(log, BinderApi(api), grace_seconds=30, retry=FAST, workers=4).run(stop_when_idle=True)
    assert (st.records, st.bound, st.evicted, st.dead_letters) == (2, 1, 1, 0)
    events = _describe_events(api, ns, "victim", uid)
    assert set(events) == {"Scheduled", "Preempted"}
    pod = read_pod(api, ns, "victim")
    assert pod["metadata"].get("deletionTimestamp")
    target = [c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert len(target) == 1
    assert (target[0]["status"], target[0]["reason"]) == ("True", DISRUPTION_REASON)
    assert "preempted by workload" in target[0]["message"]


def test_eviction_condition_can_be_turned_off(api: Any, kube_namespace: str, tmp_path: Path) -> None:
    ns = kube_namespace
    node = f"{ns}-n1"
    make_node(api, node)
    make_pod(api, ns, "victim", gpus=1)
    log = FileLog(tmp_path / "log")
    log.append(DEFAULT_TOPICS.decisions, None, record([bind(f"{ns}/victim", node, (0,), 1000)], t=1).dumps())
    log.append(DEFAULT_TOPICS.decisions, None, record([evict(f"{ns}/victim", node)], t=2).dumps())
    Binder(log, BinderApi(api), grace_seconds=30, retry=FAST, eviction_condition=False).run(
        stop_when_idle=True
    )
    conditions = read_pod(api, ns, "victim")["status"].get("conditions") or []
    assert not [c for c in conditions if c["type"] == "DisruptionTarget"]


def test_a_pod_deleted_during_its_bind_is_not_a_conflict(
    api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kube_namespace
    node = f"{ns}-n1"
    make_node(api, node)
    make_pod(api, ns, "leaving", gpus=1)
    core = client.CoreV1Api(api)
    # A finalizer keeps the deleted pod readable with its deletionTimestamp: the state a bind races with.
    core.patch_namespaced_pod("leaving", ns, {"metadata": {"finalizers": ["hourglass.io/test-hold"]}})
    core.delete_namespaced_pod("leaving", ns, grace_period_seconds=30)
    log = FileLog(tmp_path / "log")
    log.append(DEFAULT_TOPICS.decisions, None, record([bind(f"{ns}/leaving", node, (0,), 1000)], t=1).dumps())
    st = Binder(log, BinderApi(api), retry=FAST).run(stop_when_idle=True)
    try:
        assert (st.records, st.bound, st.conflicts, st.dead_letters, st.unavailable) == (1, 0, 0, 0, 0)
        assert st.deleted_during_bind == 1
        assert "FailedBinding" not in {e["reason"] for e in pod_events(api, ns, "leaving")}
    finally:
        core.patch_namespaced_pod("leaving", ns, {"metadata": {"finalizers": None}})
