"""Fair share against a misbehaving Prometheus: local servers that trickle, flood or send bad samples.

Every case ends in :class:`SourceUnavailable` naming the reason, within the query's total deadline, and
the fair-share service turns it into an ``available=False`` snapshot carrying that reason.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fairshare.config import FairshareConfig
from fairshare.decay import DecayedUsage
from fairshare.prometheus import PrometheusSource, PrometheusSourceConfig
from fairshare.service import FairshareService
from fairshare.snapshot import UsageSnapshot
from fairshare.source import SourceUnavailable
from ingest.filelog import FileLog

Behaviour = Callable[[socket.socket, bytes], None]  # (connection, the request head) -> None
T0 = 1_700_000_040  # on the 60 s step grid


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.settimeout(10)
        head = b""
        try:
            while b"\r\n\r\n" not in head:
                chunk = self.request.recv(4096)
                if not chunk:
                    return
                head += chunk
            self.server.behaviour(self.request, head)  # type: ignore[attr-defined]
        except OSError:
            pass  # the client gave up: what the test wants


@pytest.fixture
def hostile() -> Iterator[Callable[[Behaviour], str]]:
    servers: list[socketserver.ThreadingTCPServer] = []

    def start(behaviour: Behaviour) -> str:
        srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
        srv.daemon_threads = True
        srv.behaviour = behaviour  # type: ignore[attr-defined]
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _answer(body: bytes, status: str = "200 OK") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def _matrix(*series: tuple[dict[str, str], list[list[object]]]) -> bytes:
    result = [{"metric": m, "values": v} for m, v in series]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


def _source(url: str, **kw: object) -> PrometheusSource:
    cfg = {"url": url, "retries": 0, "timeout_s": 0.5, "deadline_s": 1.5, **kw}
    return PrometheusSource(PrometheusSourceConfig.model_validate(cfg))


def _fails(source: PrometheusSource, why: str, within: float = 3.0, read: str = "capacity") -> str:
    t0 = time.monotonic()
    with pytest.raises(SourceUnavailable, match=why) as err:
        getattr(source, read)(T0 * 1000, (T0 + 600) * 1000)
    assert time.monotonic() - t0 < within
    return str(err.value)


def test_a_trickled_body_is_cut_at_the_deadline(hostile: Callable[[Behaviour], str]) -> None:
    """One byte every 0.2 s keeps each read under the 0.5 s timeout: only the total deadline ends it."""

    def trickle(conn: socket.socket, _: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
        for _ in range(200):
            conn.sendall(b" ")
            time.sleep(0.2)

    _fails(_source(hostile(trickle)), r"no complete answer within the 1\.5 s deadline")


def test_trickled_headers_are_cut_at_the_deadline(hostile: Callable[[Behaviour], str]) -> None:
    def trickle(conn: socket.socket, _: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        for i in range(200):
            conn.sendall(f"X-{i}: y\r\n".encode())
            time.sleep(0.2)

    _fails(_source(hostile(trickle)), r"1\.5 s deadline")


def test_retries_stay_inside_the_deadline(hostile: Callable[[Behaviour], str]) -> None:
    calls = []

    def busy(conn: socket.socket, _: bytes) -> None:
        calls.append(1)
        conn.sendall(_answer(b"busy", "503 Service Unavailable"))

    msg = _fails(_source(hostile(busy), retries=10), "HTTP Status Code 503")
    assert 1 < len(calls) <= 3, msg  # backoff 0.5 s, 1 s: the third wait would pass the 1.5 s deadline


def test_a_huge_declared_answer_is_refused_unread(hostile: Callable[[Behaviour], str]) -> None:
    def huge(conn: socket.socket, _: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1600000000\r\n\r\n" + b"[" * 1000)

    _fails(_source(hostile(huge), max_response_bytes=1 << 20), r"1600000000 bytes exceeds max_response_bytes")


def test_a_flood_without_a_length_is_cut_at_the_cap(hostile: Callable[[Behaviour], str]) -> None:
    def flood(conn: socket.socket, _: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
        block = b"9" * 65536
        for _ in range(10_000):  # 640 MB if nobody stops reading
            conn.sendall(block)

    _fails(_source(hostile(flood), max_response_bytes=1 << 20), r"exceeds max_response_bytes \(1048576\)")


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"\x00\xffnot json", "not JSON"),
        (b'{"status": "success"}', "no data.result"),
        (b'{"data": {"result": {"a": 1}}}', "expected a matrix"),
        (_matrix(({}, [[float("nan"), "1"]])), "malformed timestamp"),
        (_matrix(({}, [[1e306, "1"]])), "malformed timestamp"),
        (_matrix(({}, [[-5, "1"]])), "malformed timestamp"),
        (_matrix(({}, [[T0, "1e306"]])), "too large"),
        (_matrix(({}, [[T0, "NaN"]])), "non-finite value 'NaN'"),
        (_matrix(({}, [[T0, "-Inf"]])), "non-finite"),
        (_matrix(({}, [[T0, "-3"]])), "negative value '-3'"),
        (_matrix(({}, [[T0, "3"], ["x", "3"]])), "malformed samples"),
    ],
    ids=[
        "nested",
        "binary",
        "no-data",
        "not-matrix",
        "nan-time",
        "huge-time",
        "negative-time",
        "1e306",
        "nan",
        "-inf",
        "negative",
        "string-time",
    ],
)
def test_bad_answers_are_named(hostile: Callable[[Behaviour], str], body: bytes, why: str) -> None:
    url = hostile(lambda conn, _: conn.sendall(_answer(body)))
    msg = _fails(_source(url), why)
    assert url in msg


def test_negative_allocation_is_refused(hostile: Callable[[Behaviour], str]) -> None:
    body = _matrix(({"queue": "q"}, [[T0, "2"], [T0 + 60, "-1"]]))
    url = hostile(lambda conn, _: conn.sendall(_answer(body)))
    _fails(
        _source(url, allocation_queries={"gpu": "x"}, capacity_queries={}),
        "negative value",
        read="allocation",
    )


def test_gappy_capacity_is_unavailable_not_an_empty_cluster(hostile: Callable[[Behaviour], str]) -> None:
    """Queues held GPUs at every step but the capacity series skips some: the window cannot be computed."""
    steps = list(range(T0 - 3600, T0 + 60, 60))
    alloc = _matrix(({"queue": "q"}, [[t, "2"] for t in steps]))
    cap = _matrix(({}, [[t, "8"] for t in steps if not 600 <= t - steps[0] < 1200]))

    def answer(conn: socket.socket, head: bytes) -> None:
        conn.sendall(_answer(alloc if b"queue" in head else cap))

    source = _source(
        hostile(answer),
        allocation_queries={"gpu": "sum by (queue) (a)"},
        capacity_queries={"gpu": "sum(c)"},
        engine_per_unit={"gpu": 1000.0},
    )
    with pytest.raises(SourceUnavailable, match=r"capacity series has no gpu sample at \d+ ms .* a gap"):
        DecayedUsage.compute(source, T0 * 1000, FairshareConfig(window_s=3000))
    gapless = _matrix(({}, [[t, "8"] for t in steps]))
    source2 = _source(
        hostile(lambda conn, head: conn.sendall(_answer(alloc if b"queue" in head else gapless))),
        allocation_queries={"gpu": "sum by (queue) (a)"},
        capacity_queries={"gpu": "sum(c)"},
        engine_per_unit={"gpu": 1000.0},
    )
    usage = DecayedUsage.compute(source2, T0 * 1000, FairshareConfig(window_s=3000))
    assert usage.vectors().normalised["q"]["gpu"] == pytest.approx(0.25)


def test_the_service_publishes_an_unavailable_snapshot_with_the_reason(
    hostile: Callable[[Behaviour], str], tmp_path: Path
) -> None:
    body = _matrix(({}, [[T0, "1e306"]]))
    source = _source(hostile(lambda conn, _: conn.sendall(_answer(body))))
    with FileLog(tmp_path / "log") as log:
        svc = FairshareService(
            log, FairshareConfig(), source_name="prometheus", source=source, clock_ms=lambda: T0 * 1000
        )
        snap = svc.step()
        assert snap is not None and not snap.available
        assert "too large" in (snap.reason or "") and "1e306" in (snap.reason or "")
        (record,) = log.read("hourglass.usage", 0)
        assert UsageSnapshot.from_bytes(record.value).reason == snap.reason


def test_the_service_survives_an_unexpected_failure(tmp_path: Path) -> None:
    class Broken:
        kind = "sampled"
        step_ms = 60_000

        def allocation(self, start_ms: int, end_ms: int) -> object:
            raise OverflowError("math range error")

        capacity = allocation

    with FileLog(tmp_path / "log") as log:
        svc = FairshareService(
            log,
            FairshareConfig(),
            source_name="prometheus",
            source=Broken(),
            clock_ms=lambda: T0 * 1000,  # type: ignore[arg-type]
        )
        snap = svc.step()
        assert snap is not None and not snap.available
        assert "OverflowError: math range error" in (snap.reason or "")
