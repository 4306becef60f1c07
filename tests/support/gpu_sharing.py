"""GPU sharing against a real kube-apiserver: the admission webhook served over TLS with a throwaway CA
and registered with the chart's matchConditions, and a node agent standing in for kubelet, the device
plugin and ``hourglass reserve``.
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.kube.reservation import (
    ANNOTATION_RESERVED_GPU,
)
from scheduler.kube.webhook import MUTATE_PATH, serve

SCHEDULER = "hourglass"


def core_api(api: Any) -> Any:
    """The core/v1 client of ``api``."""
    from kubernetes import client

    return client.CoreV1Api(api)


def admission_api(api: Any) -> Any:
    """The admissionregistration/v1 client of ``api``."""
    from kubernetes import client

    return client.AdmissionregistrationV1Api(api)


def make_certs(d: Path) -> tuple[Path, Path, Path]:
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
    """The admission webhook served in this process, and its CA."""

    port: int
    ca: bytes
    server: Any
    thread: threading.Thread

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_webhook(tmp: Path) -> Webhook:
    """Serve the webhook over TLS on 127.0.0.1 (an ephemeral port) with a certificate made in ``tmp``."""
    ca, crt, key = make_certs(tmp)
    server = serve("127.0.0.1", 0, str(crt), str(key), SCHEDULER)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return Webhook(server.server_address[1], ca.read_bytes(), server, thread)


def register_webhook(api: Any, hook: Webhook, namespace: str) -> str:
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
    admission_api(api).create_mutating_webhook_configuration(body)
    return name


def sharing_pod(
    name: str, *, fraction: str | None = None, gpus: int = 0, generate: bool = False
) -> dict[str, Any]:
    """A pod for our scheduler with a sidecar and a ``main`` container; ``fraction`` makes it share a GPU."""
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


def create_pod(api: Any, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create ``body`` in ``ns`` and return the pod as the API server (and the webhook) left it."""
    r: Any = core_api(api).create_namespaced_pod(ns, body, _preload_content=False)
    return dict(json.loads(r.data))


def wait_registered(api: Any, ns: str) -> None:
    """The API server picks up a new webhook configuration asynchronously: probe until it mutates."""
    import time

    deadline = time.monotonic() + 30
    while True:
        probe = create_pod(api, ns, sharing_pod("probe", fraction="0.5", generate=True))
        core_api(api).delete_namespaced_pod(probe["metadata"]["name"], ns, grace_period_seconds=0)
        if "hourglass.io/gpu-configmap" in (probe["metadata"].get("annotations") or {}):
            return
        assert time.monotonic() < deadline, "the webhook was never called"
        time.sleep(0.3)


class NodeAgent:
    """Stands in for kubelet + device plugin + ``hourglass reserve``: reports each reservation pod's GPU."""

    def __init__(self, api: Any, namespace: str, report: bool = True) -> None:
        self.api, self.namespace, self.report = api, namespace, report

    def tick(self, _seconds: float) -> None:
        if not self.report:
            return
        core = core_api(self.api)
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
