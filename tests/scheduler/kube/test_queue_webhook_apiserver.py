"""KAI's Queue admission rules served by ``hourglass webhook --validate-queues`` to a real kube-apiserver.

The webhook runs in this process over TLS with a throwaway CA and reads the Queues through the API server,
as the chart's deployment does; a ValidatingWebhookConfiguration sends it this test's Queues only (an
``objectSelector`` on a per-test label, since the API server is shared by the session). What a user sees:

* with ``--enable-quota-validation``, ``kubectl apply`` of a child queue asking for more than its parent is
  accepted with ``Warning:`` lines (the API server's ``Warning`` headers), KAI's messages word for word;
  lowering a parent under its children warns too;
* deleting a queue that still has children is refused with the reason; once the child is gone it works;
* without the flag, the same over-quota child is accepted without a warning.
"""

from __future__ import annotations

import base64
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.kube.queue_validation import VALIDATE_PATH, ApiQueueLookup
from scheduler.kube.webhook import QueueValidation, serve
from tests.support.gpu_sharing import admission_api, make_certs
from tests.support.kube_objects import apply_crds

GROUP, VERSION, PLURAL = "scheduling.run.ai", "v2", "queues"


def _queue(
    name: str, tag: str, parent: str | None = None, *, gpu: float, cpu: float = 1000
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resources": {
            "cpu": {"quota": cpu, "limit": -1, "overQuotaWeight": 1},
            "gpu": {"quota": gpu, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        }
    }
    if parent:
        spec["parentQueue"] = parent
    meta = {"name": name, "labels": {"hourglass-queue-webhook-test": tag}}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Queue", "metadata": meta, "spec": spec}


def _warnings(response: Any) -> list[str]:
    """The admission warnings of one API response (``Warning: 299 - "<text>"`` headers)."""
    raw = response.headers.getlist("Warning") if hasattr(response.headers, "getlist") else []
    return [m.group(1) for h in raw for m in re.finditer(r'299 - "((?:[^"\\]|\\.)*)"', h)]


class Cluster:
    """This test's Queues on the shared API server, behind the webhook."""

    def __init__(self, api: Any, tag: str) -> None:
        from kubernetes import client

        self.co: Any = client.CustomObjectsApi(api)
        self.tag = tag

    def create(self, doc: dict[str, Any]) -> list[str]:
        r = self.co.create_cluster_custom_object(GROUP, VERSION, PLURAL, doc, _preload_content=False)
        return _warnings(r)

    def replace(self, doc: dict[str, Any]) -> list[str]:
        name = doc["metadata"]["name"]
        cur = self.co.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        doc = {**doc, "metadata": {**doc["metadata"], "resourceVersion": cur["metadata"]["resourceVersion"]}}
        r = self.co.replace_cluster_custom_object(GROUP, VERSION, PLURAL, name, doc, _preload_content=False)
        return _warnings(r)

    def delete(self, name: str) -> None:
        self.co.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


@pytest.fixture(params=[True, False], ids=["quota-validation", "default"])
def cluster(request: Any, kube_api: Any, tmp_path: Path) -> Iterator[Cluster]:
    quota_validation: bool = request.param
    tag = uuid.uuid4().hex[:8]
    with kube_api.api_client() as api:
        apply_crds(api)
        ca, crt, key = make_certs(tmp_path)
        server = serve(
            "127.0.0.1",
            0,
            str(crt),
            str(key),
            queues=QueueValidation(lambda: ApiQueueLookup(api), quota_validation),
        )
        threading.Thread(target=server.serve_forever, daemon=True).start()
        name = f"hourglass-queues-{tag}"
        admission_api(api).create_validating_webhook_configuration(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": name},
                "webhooks": [
                    {
                        "name": "queues.hourglass.io",
                        "clientConfig": {
                            "url": f"https://127.0.0.1:{server.server_address[1]}{VALIDATE_PATH}",
                            "caBundle": base64.b64encode(ca.read_bytes()).decode(),
                        },
                        "rules": [
                            {
                                "apiGroups": [GROUP],
                                "apiVersions": [VERSION],
                                "operations": ["CREATE", "UPDATE", "DELETE"],
                                "resources": [PLURAL],
                                "scope": "Cluster",
                            }
                        ],
                        "objectSelector": {"matchLabels": {"hourglass-queue-webhook-test": tag}},
                        "failurePolicy": "Fail",
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": 5,
                    }
                ],
            }
        )
        c = Cluster(api, tag)
        try:
            _wait_registered(c)
            yield c
        finally:
            admission_api(api).delete_validating_webhook_configuration(name)
            server.shutdown()
            server.server_close()
            for q in c.co.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]:
                if (q["metadata"].get("labels") or {}).get("hourglass-queue-webhook-test") == tag:
                    c.delete(q["metadata"]["name"])


def _wait_registered(c: Cluster) -> None:
    """The API server picks up a webhook configuration asynchronously: probe with a parent and a child
    until deleting the parent is refused."""
    from kubernetes.client.exceptions import ApiException

    parent, child = f"probe-{c.tag}", f"probe-{c.tag}-child"
    c.create(_queue(parent, c.tag, gpu=1))
    c.create(_queue(child, c.tag, parent, gpu=0))
    deadline = time.monotonic() + 30
    while True:
        try:
            c.delete(parent)
        except ApiException as e:
            assert "cannot delete queue" in str(e.body), e.body
            break
        assert time.monotonic() < deadline, "the webhook was never called"
        c.create(_queue(parent, c.tag, gpu=1))
        time.sleep(0.3)
    c.delete(child)
    c.delete(parent)


def test_kai_queue_rules_on_a_real_api_server(cluster: Cluster, request: Any) -> None:
    from kubernetes.client.exceptions import ApiException

    on = "quota-validation" in request.node.callspec.id
    tag = cluster.tag
    parent, child, sibling = f"research-{tag}", f"ml-{tag}", f"cv-{tag}"
    assert cluster.create(_queue(parent, tag, gpu=2)) == []
    over = cluster.create(_queue(child, tag, parent, gpu=3))
    if on:
        assert over == [f"child queue GPU quota (3.00) exceeds parent queue {parent} GPU quota (2.00)"]
    else:
        assert over == []
    siblings = cluster.create(_queue(sibling, tag, parent, gpu=0, cpu=500))
    if on:
        assert siblings == [f"total children CPU quota (1500) exceeds parent queue {parent} CPU quota (1000)"]
    lowered = cluster.replace(_queue(parent, tag, gpu=1))
    if on:
        assert "total children GPU quota (3.00) exceeds parent GPU quota (1.00)" in lowered, lowered
    else:
        assert lowered == []

    with pytest.raises(ApiException) as refused:
        cluster.delete(parent)
    assert f"cannot delete queue {parent}: it has child queues [{sibling} {child}]" in str(refused.value.body)
    cluster.delete(child)
    cluster.delete(sibling)
    cluster.delete(parent)
