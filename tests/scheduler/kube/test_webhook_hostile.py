"""The admission webhook against hostile local clients: no client can hold it, garbage gets an HTTP error.

The server runs on 127.0.0.1 with short limits; each test keeps a hostile connection open (idle TCP, idle
TLS, a trickled body, a connection over the cap ...) while a well-behaved admission must still be
answered promptly.
"""

from __future__ import annotations

import json
import random
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.kube.webhook import MUTATE_PATH, ServerLimits, serve

LIMITS = ServerLimits(
    handshake_timeout_s=0.5,
    read_timeout_s=0.5,
    request_deadline_s=1.5,
    max_connections=4,
    max_body_bytes=64 * 1024,
)
REVIEW = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "u1",
        "kind": {"kind": "Pod"},
        "operation": "CREATE",
        "object": {
            "metadata": {"name": "p", "annotations": {"gpu-fraction": "0.5"}},
            "spec": {"schedulerName": "hourglass", "containers": [{"name": "c"}]},
        },
    },
}


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    key, crt = d / "k.pem", d / "c.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(crt), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return crt, key


@pytest.fixture
def server(cert: tuple[Path, Path]) -> Iterator[tuple[int, ssl.SSLContext]]:
    crt, key = cert
    srv = serve("127.0.0.1", 0, str(crt), str(key), limits=LIMITS)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv.server_address[1], ssl.create_default_context(cafile=str(crt))
    finally:
        srv.shutdown()
        srv.server_close()


def _tls(port: int, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def _post(
    port: int, ctx: ssl.SSLContext, body: bytes, ctype: str = "application/json", extra: str = ""
) -> tuple[int, bytes]:
    """One request on a fresh connection: (status, body)."""
    with _tls(port, ctx) as s:
        s.sendall(
            f"POST {MUTATE_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            f"{extra}\r\n".encode()
            + body
        )
        return _response(s)


def _response(s: socket.socket) -> tuple[int, bytes]:
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), rest


def _admit(port: int, ctx: ssl.SSLContext, within: float = 1.0) -> None:
    """A well-behaved admission is answered, with the patch, within ``within`` seconds."""
    t0 = time.monotonic()
    status, body = _post(port, ctx, json.dumps(REVIEW).encode())
    assert status == 200 and json.loads(body)["response"]["patchType"] == "JSONPatch"
    assert time.monotonic() - t0 < within


def _closed_within(s: socket.socket, seconds: float) -> bool:
    s.settimeout(seconds)
    try:
        while s.recv(4096):
            pass
    except TimeoutError:
        return False
    except (OSError, ssl.SSLError):
        pass
    return True


def test_an_idle_tcp_connection_does_not_block_admissions(server: tuple[int, ssl.SSLContext]) -> None:
    port, ctx = server
    idle = socket.create_connection(("127.0.0.1", port))  # never starts a TLS handshake
    try:
        _admit(port, ctx)
        assert _closed_within(idle, LIMITS.handshake_timeout_s + 1.0)  # and the server lets it go
    finally:
        idle.close()


def test_an_idle_tls_connection_is_cut_at_the_read_timeout(server: tuple[int, ssl.SSLContext]) -> None:
    port, ctx = server
    with _tls(port, ctx) as idle:
        _admit(port, ctx)
        assert _closed_within(idle, LIMITS.read_timeout_s + 1.0)


def _trickle(s: ssl.SSLSocket, data: bytes, port: int, ctx: ssl.SSLContext) -> float:
    """Send ``data`` a byte at a time, each well within the read timeout, until the server cuts the
    connection; a good admission is answered meanwhile. Returns how long the server let it last."""
    t0 = time.monotonic()
    for i, b in enumerate(data):
        if i == 1:
            _admit(port, ctx)
        try:
            s.sendall(bytes([b]))
        except OSError:
            return time.monotonic() - t0
        time.sleep(LIMITS.read_timeout_s / 3)
        if time.monotonic() - t0 > LIMITS.request_deadline_s + 1.0:
            break
    assert _closed_within(s, 0.5), "the trickling client was never cut off"
    return time.monotonic() - t0


def test_a_trickled_body_is_cut_at_the_deadline(server: tuple[int, ssl.SSLContext]) -> None:
    """Each byte arrives within the read timeout; the whole request still may not outlast the deadline."""
    port, ctx = server
    body = json.dumps(REVIEW).encode()
    with _tls(port, ctx) as slow:
        slow.sendall(
            f"POST {MUTATE_PATH} HTTP/1.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
        )
        assert _trickle(slow, body, port, ctx) < LIMITS.request_deadline_s + 1.5


def test_trickled_headers_are_cut_at_the_deadline(server: tuple[int, ssl.SSLContext]) -> None:
    port, ctx = server
    with _tls(port, ctx) as slow:
        headers = f"POST {MUTATE_PATH} HTTP/1.1\r\n".encode() + b"X-Slow: header\r\n" * 50
        assert _trickle(slow, headers, port, ctx) < LIMITS.request_deadline_s + 1.5


def test_connections_over_the_cap_are_closed_not_queued(server: tuple[int, ssl.SSLContext]) -> None:
    port, ctx = server
    held = [_tls(port, ctx) for _ in range(LIMITS.max_connections)]
    try:
        time.sleep(0.1)  # every held connection has taken its slot
        extra = socket.create_connection(("127.0.0.1", port))
        assert _closed_within(extra, 0.5)  # closed at once, not left waiting behind the held ones
        extra.close()
    finally:
        for s in held:
            s.close()
    time.sleep(0.2)  # the slots are released as the held connections end
    _admit(port, ctx)


@pytest.mark.parametrize(
    ("body", "ctype", "extra", "status"),
    [
        (b"[" * 30_000 + b"]" * 30_000, "application/json", "", 400),  # nested too deeply
        (b'{"a":' * 10_000 + b"1" + b"}" * 10_000, "application/json", "", 400),
        (json.dumps({**REVIEW, "request": None}).encode(), "application/json", "", 400),
        (json.dumps({**REVIEW, "request": {"uid": "", "object": {}}}).encode(), "application/json", "", 400),
        (json.dumps({"apiVersion": "v1"}).encode(), "application/json", "", 400),
        (b"[1, 2]", "application/json", "", 400),
        (
            json.dumps({**REVIEW, "request": {**REVIEW["request"], "kind": "Pod"}}).encode(),
            "application/json",
            "",
            400,
        ),
        (json.dumps(REVIEW).encode(), "text/plain", "", 415),
        (json.dumps(REVIEW).encode(), "application/x-www-form-urlencoded", "", 415),
        (b"\xff\xfe\x00garbage", "application/json", "", 400),
    ],
    ids=[
        "nested-list",
        "nested-object",
        "request-null",
        "no-uid",
        "no-request",
        "not-object",
        "kind-not-object",
        "text-plain",
        "form",
        "binary",
    ],
)
def test_bad_bodies_get_an_http_error(
    server: tuple[int, ssl.SSLContext], body: bytes, ctype: str, extra: str, status: int
) -> None:
    port, ctx = server
    got, text = _post(port, ctx, body, ctype, extra)
    assert got == status, text[:200]
    _admit(port, ctx)


def test_a_huge_declared_length_is_refused_before_reading(server: tuple[int, ssl.SSLContext]) -> None:
    port, ctx = server
    with _tls(port, ctx) as s:
        s.sendall(
            f"POST {MUTATE_PATH} HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {10**12}\r\n\r\n".encode()
        )
        status, _ = _response(s)
    assert status == 413
    with _tls(port, ctx) as s:
        s.sendall(f"POST {MUTATE_PATH} HTTP/1.1\r\nContent-Type: application/json\r\n\r\n".encode())
        assert _response(s)[0] == 411


def test_random_garbage_never_stops_the_server(server: tuple[int, ssl.SSLContext]) -> None:
    """Random bytes as raw TCP, as a TLS stream and as a request body: the server stays up throughout."""
    port, ctx = server
    rng = random.Random(7)
    statuses: set[int] = set()
    for i in range(30):
        blob = rng.randbytes(rng.choice([1, 10, 300, 5000]))
        if i % 3 == 0:
            with socket.create_connection(("127.0.0.1", port)) as raw:
                raw.sendall(blob)
                assert _closed_within(raw, LIMITS.request_deadline_s + 1.0)
        elif i % 3 == 1:
            with _tls(port, ctx) as s:
                s.sendall(blob + b"\r\n\r\n")
                try:
                    data = b""
                    s.settimeout(LIMITS.request_deadline_s + 1.0)
                    while chunk := s.recv(4096):
                        data += chunk
                except (OSError, ssl.SSLError):
                    data = b""
                if data.startswith(b"HTTP/"):
                    statuses.add(int(data.split()[1]))
        else:
            got, _ = _post(port, ctx, blob)
            statuses.add(got)
    assert statuses and all(400 <= s < 500 for s in statuses), statuses
    _admit(port, ctx)
