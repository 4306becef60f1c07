"""GPU sharing at run time on a real kube-apiserver with the Hourglass admission webhook registered.

The webhook (``scheduler/kube/webhook.py``) runs in this process over TLS on 127.0.0.1 with a certificate from a
throwaway CA; the API server calls it through a MutatingWebhookConfiguration whose ``caBundle`` is that CA and
whose ``matchConditions`` are the chart's. No kubelet runs, so a small "node agent" stands in for the device
plugin and ``hourglass reserve``: it writes the GPU each new reservation pod was given
(``hourglass.io/reserved-gpu``), or, for the timeout case, never does.

What a user would notice:
* a sharing pod is created with its GPU container wired to a per-pod ConfigMap; other pods are untouched, and
  while the webhook is down sharing pods are refused but other pods are still created;
* a reservation pod appears with the first sharer of a device and goes with the last one;
* a sharing pod is bound only once its ConfigMap holds the reserved GPU, and two pods sharing a device get the
  same ``NVIDIA_VISIBLE_DEVICES``; a pod the webhook never wired is not bound (dead letter, Warning Event);
* a restarted binder deletes reservation pods whose sharers are gone: no orphans.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from scheduler.engine.record.decisions import Decision
from scheduler.kube.binder import Binder, BinderApi, RetryPolicy
from scheduler.kube.reservation import (
    ANNOTATION_RESERVED_GPU,
    ANNOTATION_SHARERS,
    GpuSharing,
    SharingConfig,
    gpu_group,
    reservation_pod,
    reservation_pod_name,
)
from tests.support.cycle_records import record
from tests.support.gpu_sharing import (
    NodeAgent,
    Webhook,
    admission_api,
    core_api,
    create_pod,
    register_webhook,
    sharing_pod,
    start_webhook,
    wait_registered,
)

FAST = RetryPolicy(attempts=3, base_s=0.01)


# --------------------------------------------------------------------------- TLS and the webhook


def _read(api: Any, ns: str, name: str) -> dict[str, Any]:
    r: Any = core_api(api).read_namespaced_pod(name, ns, _preload_content=False)
    return dict(json.loads(r.data))


@pytest.fixture
def cluster(kube_api: Any, kube_namespace: str, tmp_path: Path) -> Iterator[tuple[Any, str, Webhook]]:
    hook = start_webhook(tmp_path)
    with kube_api.api_client() as api:
        name = register_webhook(api, hook, kube_namespace)
        try:
            wait_registered(api, kube_namespace)
            yield api, kube_namespace, hook
        finally:
            admission_api(api).delete_mutating_webhook_configuration(name)
            hook.stop()


# --------------------------------------------------------------------------- the webhook


def test_webhook_wires_sharing_pods_only_and_an_outage_blocks_only_them(
    cluster: tuple[Any, str, Webhook],
) -> None:
    from kubernetes.client.exceptions import ApiException

    api, ns, hook = cluster
    shared = create_pod(api, ns, sharing_pod("shared", fraction="0.5"))
    cm = shared["metadata"]["annotations"]["hourglass.io/gpu-configmap"]
    assert cm.startswith("shared-") and cm.endswith("-gpu")
    sidecar, main = shared["spec"]["containers"]
    assert "env" not in sidecar  # only the GPU container (gpu-fraction-container-name, else the first)
    assert main["env"][0] == {"name": "A", "value": "1"}
    assert {e["name"]: e["valueFrom"]["configMapKeyRef"]["name"] for e in main["env"][1:]} == {
        "NVIDIA_VISIBLE_DEVICES": cm,
        "GPU_PORTION": cm,
        "RUNAI_NUM_OF_GPUS": cm,
    }
    # No name yet at admission:
    generated = create_pod(api, ns, sharing_pod("gen", fraction="0.25", generate=True))
    assert generated["metadata"]["annotations"]["hourglass.io/gpu-configmap"].startswith("gen-")
    whole = create_pod(api, ns, sharing_pod("whole", gpus=1))
    assert "annotations" not in whole["metadata"] and "env" not in whole["spec"]["containers"][0]

    hook.stop()  # the webhook is down
    with pytest.raises(ApiException) as refused:
        create_pod(api, ns, sharing_pod("shared-2", fraction="0.5"))
    assert "gpu-sharing.hourglass.io" in str(refused.value.body)  # failurePolicy Fail: a clear refusal
    assert create_pod(api, ns, sharing_pod("whole-2", gpus=1))["metadata"]["name"] == "whole-2"  # never asked
    cpu_only = sharing_pod("cpu", gpus=0)
    cpu_only["spec"]["schedulerName"] = "default-scheduler"
    cpu_only["metadata"]["annotations"] = {"gpu-fraction": "0.5"}  # another scheduler's pod: not ours
    assert create_pod(api, ns, cpu_only)["metadata"]["name"] == "cpu"


# --------------------------------------------------------------------------- reservations and binding


class BindSpy:
    """The real client; at each bind, records the pod's visibility ConfigMap as the binder left it."""

    def __init__(self, inner: BinderApi) -> None:
        self.inner = inner
        self.seen: dict[str, dict[str, str] | None] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def bind(self, namespace: str, name: str, node: str, annotations: Any) -> None:
        from kubernetes.client.exceptions import ApiException

        core: Any = self.inner.core
        pod = core.read_namespaced_pod(name, namespace)
        cm = (pod.metadata.annotations or {}).get("hourglass.io/gpu-configmap")
        try:
            self.seen[name] = core.read_namespaced_config_map(cm, namespace).data if cm else None
        except ApiException:
            self.seen[name] = None
        self.inner.bind(namespace, name, node, annotations)


def _node(api: Any, name: str) -> None:
    core_api(api).create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})


def _reservations(api: Any, ns: str) -> dict[str, list[str]]:
    r: Any = core_api(api).list_namespaced_pod(ns, _preload_content=False)
    return {
        p["metadata"]["name"]: sorted((p["metadata"]["annotations"].get(ANNOTATION_SHARERS) or "").split(","))
        for p in json.loads(r.data)["items"]
    }


def _bind(pod: str, node: str, device: int, milli: int = 500) -> Decision:
    return Decision(
        kind="Bind",
        job=pod,
        queue="q",
        pod=pod,
        node=node,
        gpu_devices=[device],
        gpu_milli_per_device=milli,
        action="allocate",
    )


def _evict(pod: str, node: str) -> Decision:
    return Decision(kind="Evict", job=pod, queue="q", pod=pod, node=node, action="reclaim", reason="reclaim")


def _record(decisions: list[Decision], t: int) -> bytes:
    return record(decisions, t=t).dumps()


@pytest.fixture
def reservation_ns(kube_api: Any) -> Iterator[str]:
    name = f"hg-resv-{uuid.uuid4().hex[:8]}"
    with kube_api.api_client() as api:
        core_api(api).create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        yield name


def test_reservations_follow_sharers_and_pods_bind_only_once_their_gpu_is_set(
    cluster: tuple[Any, str, Webhook], reservation_ns: str, tmp_path: Path
) -> None:
    api, ns, _hook = cluster
    node = f"{ns}-n1"
    _node(api, node)
    for name in ("a", "b", "c"):
        create_pod(api, ns, sharing_pod(name, fraction="0.5"))
    agent = NodeAgent(api, reservation_ns)
    cfg = SharingConfig(namespace=reservation_ns, timeout_s=10, poll_s=0.05, sync_interval_s=0)
    kube = BinderApi(api)
    spy = BindSpy(kube)
    log = FileLog(tmp_path / "log")
    binder = Binder(
        log,
        spy,
        grace_seconds=0,
        retry=FAST,
        sharing=GpuSharing(kube.core, kube.call, cfg, sleep=agent.tick),
    )  # type: ignore[arg-type]
    log.append(
        DEFAULT_TOPICS.decisions,
        None,
        _record([_bind(f"{ns}/a", node, 0), _bind(f"{ns}/b", node, 0), _bind(f"{ns}/c", node, 1)], 1),
    )
    st = binder.run(stop_when_idle=True)
    assert (st.bound, st.shared_bound, st.dead_letters) == (3, 3, 0)

    dev0, dev1 = reservation_pod_name(gpu_group(node, 0)), reservation_pod_name(gpu_group(node, 1))
    assert _reservations(api, reservation_ns) == {dev0: [f"{ns}/a", f"{ns}/b"], dev1: [f"{ns}/c"]}
    resv = _read(api, reservation_ns, dev0)
    assert resv["spec"]["nodeName"] == node
    assert resv["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1"
    # Bound only after the value was set: at the moment of each bind its ConfigMap held the reserved GPU.
    assert (
        spy.seen["a"]
        == spy.seen["b"]
        == {
            "NVIDIA_VISIBLE_DEVICES": f"GPU-{node}-0",
            "GPU_PORTION": "0.5",
            "RUNAI_NUM_OF_GPUS": "0.5",
        }
    )
    assert spy.seen["c"] is not None and spy.seen["c"]["NVIDIA_VISIBLE_DEVICES"] == f"GPU-{node}-1"
    a = _read(api, ns, "a")
    assert a["spec"]["nodeName"] == node
    assert a["metadata"]["annotations"]["hourglass.io/gpu-groups"] == gpu_group(node, 0)
    cm = core_api(api).read_namespaced_config_map(
        a["metadata"]["annotations"]["hourglass.io/gpu-configmap"], ns
    )
    assert cm.metadata.owner_references[0].uid == a["metadata"]["uid"]  # goes with the pod

    # The first sharer of device 0 is evicted: the device stays reserved for the second.
    log.append(DEFAULT_TOPICS.decisions, None, _record([_evict(f"{ns}/a", node)], 2))
    binder.run(stop_when_idle=True)
    assert _reservations(api, reservation_ns) == {dev0: [f"{ns}/b"], dev1: [f"{ns}/c"]}
    # The last sharer of device 0 finishes (its owner deletes it): the reservation goes at the next idle sync.
    core_api(api).delete_namespaced_pod("b", ns, grace_period_seconds=0)
    binder.run(stop_when_idle=True)
    assert _reservations(api, reservation_ns) == {dev1: [f"{ns}/c"]}
    assert binder.stats.reservations_deleted == 1


def test_unwired_pods_and_silent_reservations_are_not_bound(
    cluster: tuple[Any, str, Webhook], reservation_ns: str, tmp_path: Path
) -> None:
    api, ns, _hook = cluster
    node = f"{ns}-n1"
    _node(api, node)
    create_pod(api, ns, sharing_pod("wired", fraction="0.5"))
    unwired = sharing_pod("unwired")  # created without a gpu-fraction annotation, so the webhook skipped it
    create_pod(api, ns, unwired)
    cfg = SharingConfig(namespace=reservation_ns, timeout_s=0.3, poll_s=0.05, sync_interval_s=3600)
    kube = BinderApi(api)
    silent = NodeAgent(api, reservation_ns, report=False)  # the reservation pod never starts
    log = FileLog(tmp_path / "log")
    binder = Binder(log, kube, retry=FAST, sharing=GpuSharing(kube.core, kube.call, cfg, sleep=silent.tick))
    log.append(
        DEFAULT_TOPICS.decisions,
        None,
        _record([_bind(f"{ns}/unwired", node, 0), _bind(f"{ns}/wired", node, 1)], 1),
    )
    st = binder.run(stop_when_idle=True)
    assert (st.bound, st.dead_letters) == (0, 2)
    letters = {
        json.loads(r.value)["target"]: json.loads(r.value) for r in log.read(DEFAULT_TOPICS.deadletter, 0, 10)
    }
    assert letters[f"{ns}/unwired"]["reason_code"] == "gpu_sharing_not_wired"
    assert "re-create the pod" in letters[f"{ns}/unwired"]["message"]
    assert letters[f"{ns}/wired"]["reason_code"] == "gpu_reservation_timeout"
    assert (
        "nodeName" not in _read(api, ns, "wired")["spec"]
        and "nodeName" not in _read(api, ns, "unwired")["spec"]
    )


def test_a_restarted_binder_leaves_no_orphan_reservation_pods(
    cluster: tuple[Any, str, Webhook], reservation_ns: str, tmp_path: Path
) -> None:
    api, ns, _hook = cluster
    node = f"{ns}-n1"
    _node(api, node)
    for name in ("x", "y", "z"):
        create_pod(api, ns, sharing_pod(name, fraction="0.5"))
    agent = NodeAgent(api, reservation_ns)
    cfg = SharingConfig(namespace=reservation_ns, timeout_s=10, poll_s=0.05, sync_interval_s=3600)
    kube = BinderApi(api)
    log = FileLog(tmp_path / "log")
    sharing = GpuSharing(kube.core, kube.call, cfg, sleep=agent.tick)
    log.append(
        DEFAULT_TOPICS.decisions,
        None,
        _record([_bind(f"{ns}/x", node, 0), _bind(f"{ns}/y", node, 1), _bind(f"{ns}/z", node, 2)], 1),
    )
    Binder(log, kube, retry=FAST, sharing=sharing).run(stop_when_idle=True)
    assert len(_reservations(api, reservation_ns)) == 3
    # While the binder is down: x finishes, y is deleted, and a crash left a reservation whose pod never bound.
    core = core_api(api)
    core.patch_namespaced_pod_status("x", ns, {"status": {"phase": "Succeeded"}})
    core.delete_namespaced_pod("y", ns, grace_period_seconds=0)
    create_pod(api, ns, sharing_pod("never", fraction="0.5"))
    orphan = {
        **sharing._json(core.read_namespaced_pod, reservation_pod_name(gpu_group(node, 2)), reservation_ns)
    }
    stray = json.loads(json.dumps(orphan))
    stray["metadata"] = {
        "name": reservation_pod_name(gpu_group(node, 3)),
        "labels": orphan["metadata"]["labels"],
        "annotations": {**orphan["metadata"]["annotations"], ANNOTATION_SHARERS: f"{ns}/never"},
    }
    stray.pop("status", None)
    core.create_namespaced_pod(reservation_ns, stray)

    st = Binder(log, kube, retry=FAST, sharing=sharing).run(
        stop_when_idle=True
    )  # restart: nothing new to apply
    assert st.records == 0 and st.reservations_deleted == 3
    assert _reservations(api, reservation_ns) == {reservation_pod_name(gpu_group(node, 2)): [f"{ns}/z"]}


def test_a_sharer_arriving_while_its_reservation_pod_is_deleted_waits_for_a_new_one(
    cluster: tuple[Any, str, Webhook], reservation_ns: str, tmp_path: Path
) -> None:
    api, ns, _hook = cluster
    node = f"{ns}-n1"
    _node(api, node)
    create_pod(api, ns, sharing_pod("late", fraction="0.5"))
    core = core_api(api)
    cfg = SharingConfig(namespace=reservation_ns, timeout_s=10, poll_s=0.05, sync_interval_s=3600)
    # The device's reservation pod is on its way out (a finalizer holds it, as a kubelet would while it stops).
    dying = reservation_pod(cfg, node, 0, [f"{ns}/gone"])
    dying["metadata"]["finalizers"] = ["hourglass.io/test-hold"]
    dying["metadata"]["annotations"][ANNOTATION_RESERVED_GPU] = "GPU-old"
    core.create_namespaced_pod(reservation_ns, dying)
    name = dying["metadata"]["name"]
    core.delete_namespaced_pod(name, reservation_ns)
    agent = NodeAgent(api, reservation_ns)
    ticks = [0]

    def tick(seconds: float) -> None:
        ticks[0] += 1
        if ticks[0] == 3:  # the old pod finally goes
            core.patch_namespaced_pod(
                name,
                reservation_ns,
                {"metadata": {"finalizers": None}},
                _content_type="application/merge-patch+json",
            )
        agent.tick(seconds)

    kube = BinderApi(api)
    log = FileLog(tmp_path / "log")
    binder = Binder(log, kube, retry=FAST, sharing=GpuSharing(kube.core, kube.call, cfg, sleep=tick))
    log.append(DEFAULT_TOPICS.decisions, None, _record([_bind(f"{ns}/late", node, 0)], 1))
    st = binder.run(stop_when_idle=True)
    assert (st.bound, st.dead_letters) == (1, 0) and ticks[0] >= 3
    fresh = _read(api, reservation_ns, name)
    assert "deletionTimestamp" not in fresh["metadata"]
    assert fresh["metadata"]["annotations"][ANNOTATION_SHARERS] == f"{ns}/late"
    assert (
        fresh["metadata"]["annotations"][ANNOTATION_RESERVED_GPU] == f"GPU-{node}-0"
    )  # not the old pod's GPU
