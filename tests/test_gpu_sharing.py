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

import base64
import json
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
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
from scheduler.kube.webhook import MUTATE_PATH, serve
from tests.test_binder import record

FAST = RetryPolicy(attempts=3, base_s=0.01)
SCHEDULER = "hourglass"


# --------------------------------------------------------------------------- TLS and the webhook


def _core(api: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api)


def _admission(api: Any) -> Any:
    from kubernetes import client

    return client.AdmissionregistrationV1Api(api)


def _certs(d: Path) -> tuple[Path, Path, Path]:
    """A CA and a serving certificate for 127.0.0.1 signed by it (what the chart's genCA/genSignedCert make)."""
    ca_key, ca, key, csr, crt, ext = (
        d / n for n in ("ca.key", "ca.crt", "tls.key", "tls.csr", "tls.crt", "ext")
    )

    def run(*a: str) -> None:
        subprocess.run(a, check=True, capture_output=True)

    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "2", "-keyout", str(ca_key),
        "-out", str(ca), "-subj", "/CN=hourglass-webhook-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature", "-addext", "subjectKeyIdentifier=hash")  # fmt: skip
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-sha256", "-keyout", str(key), "-out", str(csr),
        "-subj", "/CN=hourglass-webhook")  # fmt: skip
    ext.write_text(
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\nsubjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n"
    )
    run("openssl", "x509", "-req", "-sha256", "-days", "2", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-extfile", str(ext), "-out", str(crt))  # fmt: skip
    return ca, crt, key


#: The chart's matchConditions (deploy/helm/hourglass/templates/gpu-sharing.yaml), scheduler name filled in.
MATCH_CONDITIONS = [
    {"name": "our-scheduler", "expression": f"object.spec.schedulerName == '{SCHEDULER}'"},
    {
        "name": "shares-a-gpu",
        "expression": "has(object.metadata.annotations) && ('gpu-fraction' in object.metadata.annotations"
        " || 'gpu-memory' in object.metadata.annotations)",
    },
]


@dataclass
class Webhook:
    port: int
    ca: bytes
    server: Any
    thread: threading.Thread

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _start_webhook(tmp: Path) -> Webhook:
    ca, crt, key = _certs(tmp)
    server = serve("127.0.0.1", 0, str(crt), str(key), SCHEDULER)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return Webhook(server.server_address[1], ca.read_bytes(), server, thread)


def _register(api: Any, hook: Webhook, namespace: str) -> str:
    """A MutatingWebhookConfiguration for pods in ``namespace`` only (the API server is shared by the session)."""

    name = f"hourglass-gpu-sharing-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "gpu-sharing.hourglass.io",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{hook.port}{MUTATE_PATH}",
                    "caBundle": base64.b64encode(hook.ca).decode(),
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "matchConditions": MATCH_CONDITIONS,
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
                "reinvocationPolicy": "Never",
            }
        ],
    }
    _admission(api).create_mutating_webhook_configuration(body)
    return name


def _pod(name: str, *, fraction: str | None = None, gpus: int = 0, generate: bool = False) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "100m"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    meta: dict[str, Any] = {"generateName": f"{name}-"} if generate else {"name": name}
    if fraction:
        meta["annotations"] = {"gpu-fraction": fraction, "gpu-fraction-container-name": "main"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": SCHEDULER,
            "containers": [
                {"name": "sidecar", "image": "busybox"},
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": resources,
                    "env": [{"name": "A", "value": "1"}],
                },
            ],
        },
    }


def _create(api: Any, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    r: Any = _core(api).create_namespaced_pod(ns, body, _preload_content=False)
    return dict(json.loads(r.data))


def _read(api: Any, ns: str, name: str) -> dict[str, Any]:
    r: Any = _core(api).read_namespaced_pod(name, ns, _preload_content=False)
    return dict(json.loads(r.data))


def _wait_registered(api: Any, ns: str) -> None:
    """The API server picks up a new webhook configuration asynchronously: probe until it mutates."""
    import time

    deadline = time.monotonic() + 30
    while True:
        probe = _create(api, ns, _pod("probe", fraction="0.5", generate=True))
        _core(api).delete_namespaced_pod(probe["metadata"]["name"], ns, grace_period_seconds=0)
        if "hourglass.io/gpu-configmap" in (probe["metadata"].get("annotations") or {}):
            return
        assert time.monotonic() < deadline, "the webhook was never called"
        time.sleep(0.3)


@pytest.fixture
def cluster(kube_api: Any, kube_namespace: str, tmp_path: Path) -> Iterator[tuple[Any, str, Webhook]]:
    hook = _start_webhook(tmp_path)
    with kube_api.api_client() as api:
        name = _register(api, hook, kube_namespace)
        try:
            _wait_registered(api, kube_namespace)
            yield api, kube_namespace, hook
        finally:
            _admission(api).delete_mutating_webhook_configuration(name)
            hook.stop()


# --------------------------------------------------------------------------- the webhook


def test_webhook_wires_sharing_pods_only_and_an_outage_blocks_only_them(
    cluster: tuple[Any, str, Webhook],
) -> None:
    from kubernetes.client.exceptions import ApiException

    api, ns, hook = cluster
    shared = _create(api, ns, _pod("shared", fraction="0.5"))
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
    generated = _create(api, ns, _pod("gen", fraction="0.25", generate=True))  # no name yet at admission
    assert generated["metadata"]["annotations"]["hourglass.io/gpu-configmap"].startswith("gen-")
    whole = _create(api, ns, _pod("whole", gpus=1))
    assert "annotations" not in whole["metadata"] and "env" not in whole["spec"]["containers"][0]

    hook.stop()  # the webhook is down
    with pytest.raises(ApiException) as refused:
        _create(api, ns, _pod("shared-2", fraction="0.5"))
    assert "gpu-sharing.hourglass.io" in str(refused.value.body)  # failurePolicy Fail: a clear refusal
    assert _create(api, ns, _pod("whole-2", gpus=1))["metadata"]["name"] == "whole-2"  # never asked
    cpu_only = _pod("cpu", gpus=0)
    cpu_only["spec"]["schedulerName"] = "default-scheduler"
    cpu_only["metadata"]["annotations"] = {"gpu-fraction": "0.5"}  # another scheduler's pod: not ours
    assert _create(api, ns, cpu_only)["metadata"]["name"] == "cpu"


# --------------------------------------------------------------------------- reservations and binding


class NodeAgent:
    """Stands in for kubelet + device plugin + ``hourglass reserve``: reports each reservation pod's GPU."""

    def __init__(self, api: Any, namespace: str, report: bool = True) -> None:
        self.api, self.namespace, self.report = api, namespace, report

    def tick(self, _seconds: float) -> None:
        if not self.report:
            return
        core = _core(self.api)
        r: Any = core.list_namespaced_pod(self.namespace, _preload_content=False)
        for pod in json.loads(r.data)["items"]:
            ann = pod["metadata"].get("annotations") or {}
            if ANNOTATION_RESERVED_GPU not in ann:
                uuid_ = f"GPU-{pod['spec']['nodeName']}-{ann['hourglass.io/gpu-device']}"
                patch = {"metadata": {"annotations": {ANNOTATION_RESERVED_GPU: uuid_}}}
                core.patch_namespaced_pod(
                    pod["metadata"]["name"],
                    self.namespace,
                    patch,
                    _content_type="application/merge-patch+json",
                )


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
    _core(api).create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})


def _reservations(api: Any, ns: str) -> dict[str, list[str]]:
    r: Any = _core(api).list_namespaced_pod(ns, _preload_content=False)
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
        _core(api).create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        yield name


def test_reservations_follow_sharers_and_pods_bind_only_once_their_gpu_is_set(
    cluster: tuple[Any, str, Webhook], reservation_ns: str, tmp_path: Path
) -> None:
    api, ns, _hook = cluster
    node = f"{ns}-n1"
    _node(api, node)
    for name in ("a", "b", "c"):
        _create(api, ns, _pod(name, fraction="0.5"))
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
    cm = _core(api).read_namespaced_config_map(a["metadata"]["annotations"]["hourglass.io/gpu-configmap"], ns)
    assert cm.metadata.owner_references[0].uid == a["metadata"]["uid"]  # goes with the pod

    # The first sharer of device 0 is evicted: the device stays reserved for the second.
    log.append(DEFAULT_TOPICS.decisions, None, _record([_evict(f"{ns}/a", node)], 2))
    binder.run(stop_when_idle=True)
    assert _reservations(api, reservation_ns) == {dev0: [f"{ns}/b"], dev1: [f"{ns}/c"]}
    # The last sharer of device 0 finishes (its owner deletes it): the reservation goes at the next idle sync.
    _core(api).delete_namespaced_pod("b", ns, grace_period_seconds=0)
    binder.run(stop_when_idle=True)
    assert _reservations(api, reservation_ns) == {dev1: [f"{ns}/c"]}
    assert binder.stats.reservations_deleted == 1


def test_unwired_pods_and_silent_reservations_are_not_bound(
    cluster: tuple[Any, str, Webhook], reservation_ns: str, tmp_path: Path
) -> None:
    api, ns, _hook = cluster
    node = f"{ns}-n1"
    _node(api, node)
    _create(api, ns, _pod("wired", fraction="0.5"))
    unwired = _pod("unwired")  # created without a gpu-fraction annotation, so the webhook skipped it
    _create(api, ns, unwired)
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
        _create(api, ns, _pod(name, fraction="0.5"))
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
    core = _core(api)
    core.patch_namespaced_pod_status("x", ns, {"status": {"phase": "Succeeded"}})
    core.delete_namespaced_pod("y", ns, grace_period_seconds=0)
    _create(api, ns, _pod("never", fraction="0.5"))
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
    _create(api, ns, _pod("late", fraction="0.5"))
    core = _core(api)
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
