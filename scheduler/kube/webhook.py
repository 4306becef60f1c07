"""``hourglass webhook``: the mutating admission webhook that wires GPU-sharing pods (docs/gpu-sharing.md).

A pod for our scheduler that asks for a GPU share (``gpu-fraction`` or ``gpu-memory``) gets, on CREATE:

* the annotation ``hourglass.io/gpu-configmap: <name>``: the ConfigMap the binder fills in before binding;
* in its GPU container (``gpu-fraction-container-name``, init containers searched first, else the first
  container; a name matching no container denies the pod) the environment variables
  ``NVIDIA_VISIBLE_DEVICES``, ``GPU_PORTION`` and ``RUNAI_NUM_OF_GPUS``, each read from that ConfigMap
  (``configMapKeyRef``, not optional), as KAI's admission webhook injects them. The kubelet cannot start
  the container before the ConfigMap holds the keys, and the NVIDIA container runtime exposes exactly the
  devices ``NVIDIA_VISIBLE_DEVICES`` names.

* ``runtimeClassName`` from ``--gpu-pod-runtime-class`` when set and the pod names none (only these
  fractional pods pass through this webhook; reservation pods keep the binder's own runtime class).

Every other pod is answered "allowed, unchanged". In the cluster the webhook is only called for sharing
pods at all (``matchConditions`` in the chart's MutatingWebhookConfiguration), so an outage of this server
never blocks other pods; sharing pods are refused while it is down (``failurePolicy: Fail``), since
without the wiring their container would see no GPU or all of them.

The ConfigMap name is ``<pod name or generateName>`` + 10 hex digits of ``sha256(admission request uid)``
+ ``-gpu``: pods created from a ``generateName`` have no name yet when admission runs.

:func:`mutation` (pure) decides the JSON patch; :func:`review` answers one AdmissionReview; :func:`serve`
runs the HTTPS server (a ThreadingHTTPServer with the given certificate).

The server is exposed to anything that can reach its port, and with ``failurePolicy: Fail`` a stuck
server refuses every sharing pod, so no client may hold it (:class:`ServerLimits`): the accept thread
only accepts; each connection's TLS handshake and request run on its own thread, under a handshake
timeout, a per-read timeout and a total deadline (a client trickling bytes is cut off too); at most
``max_connections`` are served at once and a connection beyond that is closed at once rather than
queued; a body must be ``application/json`` with a Content-Length of at most ``max_body_bytes``; a
body that does not parse (nested too deeply included) or is not an AdmissionReview with a request
and its uid gets an HTTP 4xx answer, never "allowed".
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from ingest.backends import StartupError
from ingest.kube.client import add_kubeconfig_argument, api_client_for
from ingest.kube.names import ANNOTATION_GPU_CONFIGMAP, ANNOTATION_GPU_FRACTION, ANNOTATION_GPU_MEMORY
from scheduler.kube.queue_validation import VALIDATE_PATH, ApiQueueLookup, QueueLookup, Verdict, validate
from scheduler.kube.reservation import VISIBILITY_KEYS

__all__ = [
    "ANNOTATION_CONTAINER",
    "MUTATE_PATH",
    "MutationRefused",
    "QueueValidation",
    "ReviewError",
    "ServerLimits",
    "configmap_name",
    "mutation",
    "queue_review",
    "review",
    "serve",
    "sharing_pod",
]

log = logging.getLogger(__name__)

MUTATE_PATH: Final = "/mutate-pods"
ANNOTATION_CONTAINER: Final = "gpu-fraction-container-name"  # KAI: the container that gets the GPU share


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What one client may cost the webhook server (defaults fit the API server's 10 s webhook timeout)."""

    handshake_timeout_s: float = 5.0  # TLS handshake
    read_timeout_s: float = 5.0  # any one read of the request
    request_deadline_s: float = 10.0  # the whole connection: handshake, request and answer
    max_connections: int = 64  # served at once; more are closed on accept
    max_body_bytes: int = 4 * 1024 * 1024  # an AdmissionReview of a pod is a few KB


class ReviewError(ValueError):
    """The body is not an AdmissionReview the webhook can answer (HTTP 400)."""


def sharing_pod(pod: Mapping[str, Any], scheduler_name: str) -> bool:
    """A pod for ``scheduler_name`` asking for a GPU share (the pods the webhook wires)."""
    if (pod.get("spec") or {}).get("schedulerName") != scheduler_name:
        return False
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    return ANNOTATION_GPU_FRACTION in ann or ANNOTATION_GPU_MEMORY in ann


def configmap_name(pod: Mapping[str, Any], request_uid: str) -> str:
    """The visibility ConfigMap's name for a pod being created (a DNS subdomain of at most 253 chars)."""
    meta = pod.get("metadata") or {}
    base = str(meta.get("name") or meta.get("generateName") or "pod").rstrip("-.")[:200] or "pod"
    return f"{base}-{hashlib.sha256(request_uid.encode()).hexdigest()[:10]}-gpu"


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


class MutationRefused(ValueError):
    """The pod cannot be wired as asked (its ``gpu-fraction-container-name`` names no container)."""


def _gpu_container(spec: Mapping[str, Any], wanted: str | None) -> tuple[str, int] | None:
    """The (``containers`` / ``initContainers``, index) of the container that gets the GPU share.

    KAI's ``GetFractionContainerRef``: the named container, init containers searched first (an init
    container can be the one that uses the GPU, KAI's ``gpu-sharing-init-container.yaml``); no name = the
    first regular container. None when a name is given and no container has it."""
    if wanted is None:
        return ("containers", 0)
    for field in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(field) or []):
            if isinstance(c, Mapping) and c.get("name") == wanted:
                return (field, i)
    return None


def mutation(
    pod: Mapping[str, Any], request_uid: str, scheduler_name: str, runtime_class: str | None = None
) -> list[dict[str, Any]]:
    """The JSON patch that wires a sharing pod (empty for any other pod, or one already wired).

    ``runtime_class`` (KAI's ``gpuPodRuntimeClassName``; None or empty = leave it) is set as the pod's
    ``runtimeClassName`` when the pod names none. :class:`MutationRefused` when the pod's
    ``gpu-fraction-container-name`` names no container of the pod: KAI's binder refuses such a pod too,
    and wiring another container would hand the share to the wrong process.
    """
    if not sharing_pod(pod, scheduler_name):
        return []
    meta = pod.get("metadata") or {}
    ann = meta.get("annotations") or {}
    if ANNOTATION_GPU_CONFIGMAP in ann:
        return []
    spec = pod.get("spec") or {}
    if not spec.get("containers"):
        return []
    wanted = ann.get(ANNOTATION_CONTAINER)
    where = _gpu_container(spec, wanted)
    if where is None:
        raise MutationRefused(
            f"annotation {ANNOTATION_CONTAINER}={wanted!r} names no container or init container of the pod"
        )
    field, index = where
    name = configmap_name(pod, request_uid)
    env = [e for e in spec[field][index].get("env") or [] if e.get("name") not in VISIBILITY_KEYS]
    env += [
        {"name": key, "valueFrom": {"configMapKeyRef": {"name": name, "key": key, "optional": False}}}
        for key in VISIBILITY_KEYS
    ]
    ops: list[dict[str, Any]] = []
    if "annotations" not in meta or meta["annotations"] is None:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {ANNOTATION_GPU_CONFIGMAP: name}})
    else:
        ops.append(
            {"op": "add", "path": f"/metadata/annotations/{_escape(ANNOTATION_GPU_CONFIGMAP)}", "value": name}
        )
    ops.append({"op": "add", "path": f"/spec/{field}/{index}/env", "value": env})
    if runtime_class and not spec.get("runtimeClassName"):
        ops.append({"op": "add", "path": "/spec/runtimeClassName", "value": runtime_class})
    return ops


def _request(body: Any) -> tuple[Mapping[str, Any], str]:
    """The AdmissionReview's request and its uid (:class:`ReviewError` when there is none)."""
    if not isinstance(body, Mapping):
        raise ReviewError(f"expected a JSON object, got {type(body).__name__}")
    request = body.get("request")
    if not isinstance(request, Mapping):
        raise ReviewError("no request in the AdmissionReview")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("the AdmissionReview request has no uid")
    return request, uid


def _answer(body: Mapping[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": body.get("apiVersion", "admission.k8s.io/v1"),
        "kind": "AdmissionReview",
        "response": response,
    }


def queue_review(
    body: Mapping[str, Any], lookup: Callable[[], QueueLookup], quota_validation: bool = False
) -> dict[str, Any]:
    """The AdmissionReview answer to one Queue request, by KAI's queue webhook rules
    (:mod:`scheduler.kube.queue_validation`): denied with the reason, or allowed with any warnings.

    ``lookup`` gives the other Queues. When they cannot be read the request is denied, naming why, as KAI's
    webhook denies a child whose parent it cannot read: allowing it would skip the checks unseen."""
    request, uid = _request(body)
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if (request.get("kind") or {}).get("kind") == "Queue":
        obj, old = request.get("object"), request.get("oldObject")
        try:
            verdict = validate(
                str(request.get("operation") or ""),
                obj if isinstance(obj, Mapping) else None,
                old if isinstance(old, Mapping) else None,
                lookup(),
                quota_validation=quota_validation,
            )
        except Exception as e:  # the API server's answer: any failure to read the Queues
            log.warning("webhook: cannot read the Queues: %s", e)
            verdict = Verdict(
                False, f"hourglass webhook: cannot read the Queues to validate this one: {str(e)[:300]}"
            )
        response["allowed"] = verdict.allowed
        if not verdict.allowed:
            response["status"] = {"code": 400, "reason": "BadRequest", "message": verdict.message}
        if verdict.warnings:
            response["warnings"] = list(verdict.warnings)
    return _answer(body, response)


def review(body: Mapping[str, Any], scheduler_name: str, runtime_class: str | None = None) -> dict[str, Any]:
    """The AdmissionReview answer to one request: allowed, with the patch when the pod shares a GPU; denied
    (with the reason) when a sharing pod's ``gpu-fraction-container-name`` names no container.

    :class:`ReviewError` when ``body`` is not an AdmissionReview with a request and its uid: such a body
    was not sent by an API server, and "allowed" is not an answer to it.
    """
    request, uid = _request(body)
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    pod = request.get("object") or {}
    if request.get("operation") == "CREATE" and request.get("kind", {}).get("kind") == "Pod":
        try:
            ops = mutation(pod, uid, scheduler_name, runtime_class)
        except MutationRefused as e:
            response["allowed"] = False
            response["status"] = {"code": 400, "reason": "BadRequest", "message": f"hourglass webhook: {e}"}
            ops = []
        if ops:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
            log.info(
                "wired GPU-sharing pod %s/%s",
                request.get("namespace"),
                (pod.get("metadata") or {}).get("name") or (pod.get("metadata") or {}).get("generateName"),
            )
    return _answer(body, response)


@dataclass(frozen=True, slots=True)
class QueueValidation:
    """Serve KAI's Queue admission rules on :data:`VALIDATE_PATH`: ``lookup`` reads the Queues for one
    request (a fresh listing each time); ``quota_validation`` adds the parent/child quota warnings."""

    lookup: Callable[[], QueueLookup]
    quota_validation: bool = False


def _handler(
    scheduler_name: str,
    limits: ServerLimits,
    runtime_class: str | None = None,
    queues: QueueValidation | None = None,
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = limits.read_timeout_s  # StreamRequestHandler sets it on the socket: every read is bounded

        def _send(self, code: int, payload: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _refuse(self, code: int, message: str, *, drain: int = 0) -> None:
            if drain:
                # Read the (capped) body first: closing with unread data resets the connection, and the
                # client would never see the answer.
                self.rfile.read(drain)
            self.close_connection = True  # whatever body the client still sends is never read
            self._send(code, message.encode(), "text/plain")

        def do_GET(self) -> None:
            if self.path in ("/healthz", "/readyz"):
                self._send(200, b"ok", "text/plain")
            else:
                self._send(404, b"not found", "text/plain")

        def do_POST(self) -> None:
            raw_length = self.headers.get("Content-Length")
            if raw_length is None:
                self._refuse(411, "a Content-Length is required")
                return
            try:
                length = int(raw_length)
            except ValueError:
                self._refuse(400, "bad Content-Length")
                return
            if length <= 0:
                self._refuse(400, "an AdmissionReview body is required")
                return
            if length > limits.max_body_bytes:
                self._refuse(413, f"the body exceeds {limits.max_body_bytes} bytes")
                return
            path = self.path.split("?")[0]
            if path != MUTATE_PATH and (queues is None or path != VALIDATE_PATH):
                self._refuse(404, "not found", drain=length)
                return
            if self.headers.get_content_type() != "application/json":
                self._refuse(415, "an AdmissionReview is sent as application/json", drain=length)
                return
            data = self.rfile.read(length)
            if len(data) < length:
                self.close_connection = True  # the client went away mid-body
                return
            try:
                body = json.loads(data)
                if path == MUTATE_PATH:
                    answer = review(body, scheduler_name, runtime_class)
                else:
                    assert queues is not None
                    answer = queue_review(body, queues.lookup, queues.quota_validation)
            except RecursionError:
                self._refuse(400, "not an AdmissionReview: JSON nested too deeply")
                return
            except (ValueError, AttributeError, TypeError, KeyError, IndexError) as e:
                self._refuse(400, f"not an AdmissionReview: {str(e)[:200]}")
                return
            self._send(200, json.dumps(answer).encode())

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("webhook: " + format, *args)

    return Handler


class _AdmissionServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer whose TLS handshakes run on the connection's thread, under the limits."""

    daemon_threads = True  # a stuck client never holds up shutdown

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        context: ssl.SSLContext,
        limits: ServerLimits,
    ) -> None:
        super().__init__(address, handler)
        self.context = context
        self.limits = limits
        self._slots = threading.BoundedSemaphore(limits.max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        # On the accept thread: never wait here. Over the cap, the connection is closed, not queued.
        if not self._slots.acquire(blocking=False):
            log.warning("webhook: %d connections open; closing one from %s", self.limits.max_connections,
                        client_address)  # fmt: skip
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            self.shutdown_request(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        conn: socket.socket = request
        lock = threading.Lock()
        done = False

        def expire() -> None:
            # A read already in progress is not bounded by its own timeout alone: shutting the socket
            # down ends it, however slowly the client trickles bytes.
            with lock:
                if not done:
                    with contextlib.suppress(OSError):
                        socket.socket.shutdown(conn, socket.SHUT_RDWR)

        timer = threading.Timer(self.limits.request_deadline_s, expire)
        timer.daemon = True
        timer.start()
        try:
            request.settimeout(self.limits.handshake_timeout_s)
            conn = self.context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
            conn.do_handshake()
            self.finish_request(conn, client_address)
        except (OSError, ValueError) as e:  # ssl.SSLError and timeouts are OSErrors
            log.debug("webhook: connection from %s ended: %s", client_address, e)
        except Exception:
            self.handle_error(conn, client_address)
        finally:
            with lock:
                done = True
            timer.cancel()
            self.shutdown_request(conn)
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.exception("webhook: error answering %s", client_address)


def serve(
    host: str,
    port: int,
    certfile: str,
    keyfile: str,
    scheduler_name: str = "hourglass",
    limits: ServerLimits | None = None,
    runtime_class: str | None = None,
    queues: QueueValidation | None = None,
) -> ThreadingHTTPServer:
    """An HTTPS server answering AdmissionReviews on :data:`MUTATE_PATH`, and on :data:`VALIDATE_PATH` when
    ``queues`` is given (not started: call serve_forever)."""
    limits = limits or ServerLimits()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certfile, keyfile)
    return _AdmissionServer(
        (host, port), _handler(scheduler_name, limits, runtime_class, queues), ctx, limits
    )


def add_arguments(p: Any) -> None:
    """The ``webhook`` subcommand's arguments (``p`` is an ``argparse.ArgumentParser``)."""
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=9443, help="HTTPS port (default 9443)")
    p.add_argument("--tls-cert", required=True, help="PEM certificate the API server trusts (caBundle)")
    p.add_argument("--tls-key", required=True, help="PEM private key of --tls-cert")
    p.add_argument("--scheduler-name", default="hourglass", help="wire pods with this spec.schedulerName")
    p.add_argument(
        "--gpu-pod-runtime-class",
        default="",
        help="runtimeClassName set on GPU-sharing pods that name none (KAI's gpuPodRuntimeClassName, e.g."
        " nvidia); empty (the default) leaves pods unchanged",
    )
    p.add_argument(
        "--validate-queues",
        action="store_true",
        help=f"also answer Queue admission on {VALIDATE_PATH} with KAI's queue webhook rules (resources"
        " required; no deleting a queue that has children); reads Queues through --kubeconfig",
    )
    p.add_argument(
        "--enable-quota-validation",
        action="store_true",
        help="with --validate-queues: warn when a child queue's quota, or its siblings' summed quota, exceeds"
        " its parent's (KAI's queue-controller flag; off by default, warnings only)",
    )
    add_kubeconfig_argument(p)


def run_cli(args: Any) -> int:
    """``hourglass webhook``: serve until SIGTERM."""
    import signal
    import sys
    import threading

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    queues: QueueValidation | None = None
    if args.enable_quota_validation and not args.validate_queues:
        print("webhook: --enable-quota-validation needs --validate-queues", file=sys.stderr)
        return 2
    if args.validate_queues:
        try:
            client = api_client_for("webhook", args.kubeconfig)
        except StartupError as e:
            print(e, file=sys.stderr)
            return 2
        queues = QueueValidation(lambda: ApiQueueLookup(client), args.enable_quota_validation)
    try:
        server = serve(
            args.host,
            args.port,
            args.tls_cert,
            args.tls_key,
            args.scheduler_name,
            runtime_class=args.gpu_pod_runtime_class or None,
            queues=queues,
        )
    except (OSError, ssl.SSLError) as e:
        print(f"webhook: cannot serve on {args.host}:{args.port} with {args.tls_cert}: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    paths = MUTATE_PATH + (f" and {VALIDATE_PATH}" if queues else "")
    log.info("webhook: serving %s on https://%s:%d", paths, args.host, args.port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
