"""The generated-client wrapper reuses its connections against a real kube-apiserver: every answer is read,
so urllib3 gets the connection back instead of opening (and TLS-handshaking) a new one per call."""

from __future__ import annotations

from typing import Any

from ingest.kube.client import call
from tests.support.kubeapi import KubeAPI


def _pool(api: Any) -> Any:
    return api.rest_client.pool_manager.connection_from_url(api.configuration.host)


def test_calls_whose_answer_nobody_reads_reuse_one_connection(kube_api: KubeAPI, kube_namespace: str) -> None:
    from kubernetes import client

    with kube_api.api_client() as api:
        core = client.CoreV1Api(api)
        call(core.read_namespace, kube_namespace)  # the first call opens the connection
        before = _pool(api).num_connections
        for _ in range(10):
            call(core.read_namespace, kube_namespace)  # answers dropped unread, as the binder drops a bind's
        assert _pool(api).num_connections == before, "a new connection per call"
