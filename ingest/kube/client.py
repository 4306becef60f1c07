"""The one way Hourglass talks to the Kubernetes API, for ingest and binder alike.

:func:`api_client` opens a client from a kubeconfig (in-cluster config as the fallback); :class:`KubeApi`
makes raw-JSON requests (list, watch, get, any verb) and :func:`call` runs one call of the generated client;
both report every failure as :class:`KubeError`, whose ``status`` says whether a retry is worth it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, Final, Protocol

__all__ = [
    "HasPath",
    "KubeApi",
    "KubeError",
    "KubeUnavailable",
    "add_kubeconfig_argument",
    "api_client",
    "api_client_for",
    "call",
    "size_connection_pool",
]

_LIST_PAGE = 500
# Metadata only, with plain JSON as the fallback for a server that cannot answer so.
_METADATA_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json"

# Plural resource names of owner kinds; anything else is lower-case kind + "s" (true for most CRDs).
OWNER_PLURALS: Final = {
    "Deployment": "deployments",
    "ReplicaSet": "replicasets",
    "StatefulSet": "statefulsets",
    "DaemonSet": "daemonsets",
    "Job": "jobs",
    "CronJob": "cronjobs",
    "JobSet": "jobsets",
    "PyTorchJob": "pytorchjobs",
    "TFJob": "tfjobs",
    "MPIJob": "mpijobs",
    "XGBoostJob": "xgboostjobs",
    "JAXJob": "jaxjobs",
    "Notebook": "notebooks",
    "RayCluster": "rayclusters",
    "RayJob": "rayjobs",
    "RayService": "rayservices",
    "ReplicationController": "replicationcontrollers",
    "LeaderWorkerSet": "leaderworkersets",
}


class KubeError(Exception):
    """A Kubernetes API call failed. ``status`` is the HTTP status, 0 when the server was not reached."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message

    @property
    def transient(self) -> bool:
        """Worth retrying: no answer, too many requests, or a server error."""
        return self.status == 0 or self.status == 429 or self.status >= 500


class KubeUnavailable(RuntimeError):
    """Transient failures outlasted the retry policy; the record stays uncommitted and is re-applied."""


def _message(body: Any, fallback: str) -> str:
    """The API server's ``Status.message`` from an error body, else the body's start, else `fallback`."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else body
    if not text:
        return fallback
    try:
        got = json.loads(text).get("message", fallback)
    except (ValueError, AttributeError):
        return str(text[:500])
    return str(got)


def call(fn: Callable[..., Any], *args: Any, timeout_s: float = 30.0, **kwargs: Any) -> Any:
    """One call of the generated client (``CoreV1Api`` ...) as raw bytes, failures as :class:`KubeError`.

    ``_preload_content=False``: the generated client cannot deserialise the binding subresource's
    ``Status`` answer, and no caller needs typed responses. The body is read before returning (``.data``),
    so the connection goes back to the pool."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        resp = fn(*args, _preload_content=False, _request_timeout=timeout_s, **kwargs)
        # Read the answer now, even when no caller looks at it: urllib3 returns the connection to its pool
        # only once the body is read, and an unread one costs the next call a new TLS handshake (on the API
        # server too).
        _ = resp.data
        return resp
    except ApiException as e:
        raise KubeError(int(e.status or 0), _message(e.body, e.reason or "")) from None
    except (HTTPError, OSError) as e:
        raise KubeError(0, f"{type(e).__name__}: {e}") from None


class HasPath(Protocol):
    """A resource kind that knows its API path (``ingest.kube.watcher.Resource``)."""

    def path(self, namespace: str | None) -> str:
        """The collection's path, in `namespace` or cluster-wide."""
        ...


class KubeApi:
    """Raw-JSON access to the API server through a configured ``kubernetes.client.ApiClient``.

    Raw dicts (not the generated models) keep the translation pure and identical for built-in and
    custom resources. Every failure is a :class:`KubeError` (``.status``: the HTTP status, 0 unreached).
    """

    def __init__(self, api_client: Any) -> None:
        self.client = api_client

    def _call(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = 30.0,
        accept: str = "application/json",
    ) -> Any:
        """One request; returns the ``RESTResponse`` (:class:`KubeError` on non-2xx or no answer)."""
        from urllib3.exceptions import HTTPError

        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        req = self.client.param_serialize(
            method=method,
            resource_path=path,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            resp = self.client.call_api(*req, _request_timeout=timeout)
        except (HTTPError, OSError) as e:
            raise KubeError(0, f"{type(e).__name__}: {e}") from None
        if not 200 <= resp.status <= 299:
            raise KubeError(resp.status, _message(resp.read(), resp.reason or ""))
        return resp

    def request(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        """A JSON request; returns the decoded response body."""
        resp = self._call(method, path, query, body, content_type)
        return json.loads(resp.read() or b"null")

    def read_metadata(self, path: str, *, cached: bool = False) -> dict[str, Any]:
        """GET an object's ``metadata`` only (a ``PartialObjectMetadata``: no spec or status encoded);
        ``cached``: as the API server's watch cache holds it (``resourceVersion=0``), without an etcd read,
        for fields that never change (uid, name)."""
        resp = self._call(
            "GET",
            path,
            {"resourceVersion": "0"} if cached else None,
            accept=_METADATA_ACCEPT,
        )
        got = json.loads(resp.read() or b"null")
        return got if isinstance(got, dict) else {}

    def get(self, path: str) -> dict[str, Any] | None:
        """GET an object; None when it does not exist (404) or may not be read (403)."""
        try:
            got = self.request("GET", path)
        except KubeError as exc:
            if exc.status in (403, 404):
                return None
            raise
        return got if isinstance(got, dict) else None

    def list_all(
        self, resource: HasPath, namespace: str | None, field_selector: str | None
    ) -> tuple[list[dict[str, Any]], str]:
        """LIST every object (paged); returns the items and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        rv = ""
        while True:
            page = self.request(
                "GET",
                resource.path(namespace),
                {"limit": _LIST_PAGE, "continue": token, "fieldSelector": field_selector},
            )
            if not rv:  # the first page's version is the snapshot the continuation pages belong to
                rv = str(page.get("metadata", {}).get("resourceVersion") or "")
            items.extend(i for i in page.get("items") or [] if isinstance(i, dict))
            token = page.get("metadata", {}).get("continue") or None
            if not token:
                return items, rv

    def watch(
        self,
        resource: HasPath,
        namespace: str | None,
        field_selector: str | None,
        resource_version: str,
        timeout_s: int,
        on_response: Callable[[Any], None] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """WATCH from ``resource_version`` with bookmarks; yields decoded watch events until the
        server closes the stream (after ``timeout_s``)."""
        from kubernetes.watch.watch import iter_resp_lines

        resp = self._call(
            "GET",
            resource.path(namespace),
            {
                "watch": "true",
                "allowWatchBookmarks": "true",
                "resourceVersion": resource_version,
                "timeoutSeconds": timeout_s,
                "fieldSelector": field_selector,
            },
            timeout=(10.0, timeout_s + 30.0),
        )
        if on_response is not None:
            on_response(resp.response)
        try:
            for line in iter_resp_lines(resp.response):  # type: ignore[no-untyped-call]
                if line.strip():
                    event = json.loads(line)
                    if isinstance(event, dict):
                        yield event
        finally:
            resp.response.release_conn()

    def owner_getter(self) -> Callable[[str, str, str, str], dict[str, Any] | None]:
        """A :data:`ingest.kube.podgrouper.OwnerGetter` that reads owners through this API."""

        def get(api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            plural = OWNER_PLURALS.get(kind, kind.lower() + "s")
            return self.get(f"{base}/namespaces/{namespace}/{plural}/{name}")

        return get


def api_client(kubeconfig: str | None) -> Any:
    """An ``ApiClient`` for *kubeconfig*, else ``$KUBECONFIG`` / ``~/.kube/config``, else the pod's
    service account (in-cluster). The kubernetes config loaders raise several unrelated error types."""
    from kubernetes import config as kube_config

    config: Any = kube_config  # untyped package
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        return config.new_client_from_config()
    except config.ConfigException:
        from kubernetes import client

        config.load_incluster_config()
        return client.ApiClient()


def size_connection_pool(api_client: Any, connections: int) -> None:
    """Let ``connections`` threads hold a connection each: urllib3 drops, with a warning, every connection
    returned beyond its pool (by default 5 per core), and opens a new one for the next call."""
    from kubernetes.client import rest

    cfg = api_client.configuration
    if (cfg.connection_pool_maxsize or 0) < connections:
        cfg.connection_pool_maxsize = connections
        api_client.rest_client = rest.RESTClientObject(cfg)


def api_client_for(command: str, kubeconfig: str | None) -> Any:
    """:func:`api_client` for a command's start: a missing kubeconfig file, or any configuration the
    loaders refuse, is a :class:`~ingest.backends.StartupError` naming the command and the file."""
    from pathlib import Path

    from ingest.backends import StartupError

    if kubeconfig and not Path(kubeconfig).is_file():
        raise StartupError(f"{command}: no kubeconfig file at {kubeconfig}")
    try:
        return api_client(kubeconfig)
    except Exception as e:  # the kubernetes config loaders raise several unrelated types
        raise StartupError(f"{command}: cannot load a Kubernetes configuration: {e}") from None


def add_kubeconfig_argument(p: Any) -> None:
    """The ``--kubeconfig`` option :func:`api_client` reads (``p`` is an ``argparse.ArgumentParser``)."""
    p.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config, else the in-cluster service account)",
    )
