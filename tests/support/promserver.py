"""A real Prometheus server for tests: Debian's ``/usr/bin/prometheus`` on 127.0.0.1 with a temp config.

Use it from a test module with ``pytest_plugins = ["tests.support.promserver"]`` (or import the names below), then::

    def test_x(prometheus_server, tmp_path):
        hist = openmetrics_history(tmp_path / "h.om", start_s=..., end_s=..., allocation={...}, capacity={...})
        prom = prometheus_server(history=hist)               # backfilled, started, ready
        prom = prometheus_server(scrape_targets=["127.0.0.1:8000"])  # scrapes every second
        prom.stop(); prom.start()                             # same port, same data

History is written with ``promtool tsdb create-blocks-from openmetrics`` into the data directory before the
server starts. Backfilled samples must end at least an hour before now (older than the TSDB head), and the
retention is set to cover the whole range. Every server is killed at teardown.

When ``prometheus`` or ``promtool`` is missing the tests skip naming ``tools/prometheus/install.sh``, except
under ``CI`` where they fail: CI must really run them.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import pytest
import yaml

PROMETHEUS = Path(os.environ.get("HOURGLASS_PROMETHEUS_BIN", "/usr/bin/prometheus"))
PROMTOOL = Path(os.environ.get("HOURGLASS_PROMTOOL_BIN", "/usr/bin/promtool"))
INSTALL_HINT = "bash tools/prometheus/install.sh"

#: A step function: (from_unix_seconds, value) breakpoints, each value holding until the next breakpoint.
Steps = Sequence[tuple[int, float]]


def require_prometheus() -> None:
    """Skip (or fail under CI) when the Prometheus binaries are missing."""
    missing = [str(p) for p in (PROMETHEUS, PROMTOOL) if not os.access(p, os.X_OK)]
    if not missing:
        return
    message = f"Prometheus unavailable: {', '.join(missing)} not found (install with `{INSTALL_HINT}`)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI is set, so the Prometheus tests must run", pytrace=False)
    pytest.skip(message)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _step_value(steps: Steps | float, t: int) -> float | None:
    if isinstance(steps, int | float):
        return float(steps)
    value: float | None = None
    for at, v in steps:
        if at > t:
            break
        value = v
    return value


def step_integral(steps: Steps | float, start_s: int, end_s: int) -> float:
    """Exact integral (value-seconds) of a step function over ``[start_s, end_s)``; 0 before its first step."""
    if isinstance(steps, int | float):
        return float(steps) * (end_s - start_s)
    total = 0.0
    points = sorted(steps)
    for i, (at, v) in enumerate(points):
        nxt = points[i + 1][0] if i + 1 < len(points) else end_s
        lo, hi = max(at, start_s), min(nxt, end_s)
        if hi > lo:
            total += v * (hi - lo)
    return total


def _fmt(v: float) -> str:
    if math.isfinite(v) and v == int(v):
        return str(int(v))
    return repr(float(v))


def openmetrics_history(
    path: Path,
    *,
    start_s: int,
    end_s: int,
    allocation: Mapping[str, Mapping[str, Steps | float]],
    capacity: Mapping[str, Steps | float],
    interval_s: int = 60,
    parents: Mapping[str, str] | None = None,
) -> Path:
    """Write OpenMetrics text that ``promtool tsdb create-blocks-from openmetrics`` accepts.

    ``allocation`` is queue -> resource -> step function (or constant) in Prometheus base units (GPUs, CPU
    cores, bytes); ``capacity`` is resource -> step function (or constant). Samples are written every
    ``interval_s`` in ``[start_s, end_s)``, under the names :mod:`scheduler.metrics` exports
    (``hourglass_queue_allocated``, ``hourglass_cluster_capacity``), plus ``hourglass_queue_info`` for every
    queue (``parents`` maps a queue to its parent; a queue that is nobody's parent is a leaf). A step
    function with no value yet at a timestamp writes no sample there. Returns ``path``.
    """
    if end_s <= start_s or interval_s <= 0:
        raise ValueError(f"empty history: start_s={start_s} end_s={end_s} interval_s={interval_s}")
    parents = dict(parents or {})
    ts = range(start_s, end_s, interval_s)
    lines: list[str] = []
    # OpenMetrics wants each family's samples contiguous and each series' timestamps increasing.
    lines.append("# TYPE hourglass_queue_allocated gauge")
    for queue in sorted(allocation):
        for res in sorted(allocation[queue]):
            steps = allocation[queue][res]
            for t in ts:
                v = _step_value(steps, t)
                if v is not None:
                    lines.append(
                        f'hourglass_queue_allocated{{queue="{queue}",resource="{res}"}} {_fmt(v)} {t}'
                    )
    lines.append("# TYPE hourglass_cluster_capacity gauge")
    for res in sorted(capacity):
        for t in ts:
            v = _step_value(capacity[res], t)
            if v is not None:
                lines.append(f'hourglass_cluster_capacity{{resource="{res}"}} {_fmt(v)} {t}')
    lines.append("# TYPE hourglass_queue_info gauge")
    queues = sorted(set(allocation) | set(parents) | set(parents.values()))
    parent_names = set(parents.values())
    for queue in queues:
        leaf = "false" if queue in parent_names else "true"
        labels = f'queue="{queue}",parent="{parents.get(queue, "")}",leaf="{leaf}"'
        lines.extend(f"hourglass_queue_info{{{labels}}} 1 {t}" for t in ts)
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n")
    return path


def _die_with_parent() -> None:
    """In the child before exec: ask Linux to SIGKILL it when pytest dies, even by SIGKILL (no orphans)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: teardown still stops the server


class PrometheusServer:
    """One Prometheus process with its own config, data directory and port; restartable."""

    def __init__(
        self,
        workdir: Path,
        *,
        scrape_targets: Sequence[str] = (),
        scrape_interval_s: float = 1.0,
        retention: str = "3650d",
        port: int | None = None,
    ) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.config_path = workdir / "prometheus.yml"
        self.log_path = workdir / "prometheus.log"
        self.port = port or free_port()
        self.retention = retention
        self.data_dir.mkdir(parents=True, exist_ok=True)
        interval = f"{scrape_interval_s:g}s"
        config: dict[str, object] = {
            "global": {
                "scrape_interval": interval,
                "scrape_timeout": interval,  # must not exceed the interval
                "evaluation_interval": interval,
            },
            "scrape_configs": [
                {"job_name": "hourglass", "static_configs": [{"targets": list(scrape_targets)}]}
            ]
            if scrape_targets
            else [],
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=True))
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:41234``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def backfill(self, openmetrics: Path) -> None:
        """Turn an OpenMetrics file into TSDB blocks in the data directory (call while stopped)."""
        if self.running:
            raise RuntimeError("backfill before start(): a running server does not pick up new blocks")
        done = subprocess.run(
            [
                str(PROMTOOL),
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                "-q",
                str(openmetrics),
                str(self.data_dir),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"promtool backfill of {openmetrics} failed (exit {done.returncode}):\n{done.stderr}"
            )

    def start(self, timeout_s: float = 60.0) -> None:
        """Start the server (on the same port and data as before) and wait until ``/-/ready`` answers 200."""
        if self.running:
            return
        log = self.log_path.open("ab")
        try:
            self._proc = subprocess.Popen(
                [
                    str(PROMETHEUS),
                    f"--config.file={self.config_path}",
                    f"--storage.tsdb.path={self.data_dir}",
                    f"--storage.tsdb.retention.time={self.retention}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C in pytest must not race our own shutdown
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self._proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"prometheus not ready after {timeout_s} s:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout_s``); the data directory is kept."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's log, for failure messages."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


class PrometheusFactory(Protocol):
    """The callable the ``prometheus_server`` fixture yields."""

    def __call__(
        self,
        *,
        scrape_targets: Sequence[str] = (),
        history: Path | None = None,
        scrape_interval_s: float = 1.0,
        retention: str = "3650d",
        start: bool = True,
    ) -> PrometheusServer: ...


def _factory(workdir: Callable[[], Path]) -> tuple[PrometheusFactory, list[PrometheusServer]]:
    servers: list[PrometheusServer] = []

    def make(
        *,
        scrape_targets: Sequence[str] = (),
        history: Path | None = None,
        scrape_interval_s: float = 1.0,
        retention: str = "3650d",
        start: bool = True,
    ) -> PrometheusServer:
        require_prometheus()
        server = PrometheusServer(
            workdir(), scrape_targets=scrape_targets, scrape_interval_s=scrape_interval_s, retention=retention
        )
        servers.append(server)
        if history is not None:
            server.backfill(history)
        if start:
            server.start()
        return server

    return make, servers


@pytest.fixture
def prometheus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusFactory]:
    """Factory for real Prometheus servers, each killed when the test ends."""
    make, servers = _factory(lambda: tmp_path_factory.mktemp("prometheus"))
    try:
        yield make
    finally:
        for s in servers:
            s.stop()


@pytest.fixture(scope="module")
def prometheus_server_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusFactory]:
    """Like ``prometheus_server``, but servers live for the whole test module (share a slow backfill)."""
    make, servers = _factory(lambda: tmp_path_factory.mktemp("prometheus"))
    try:
        yield make
    finally:
        for s in servers:
            s.stop()


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.2) -> None:
    """Poll ``predicate`` until true; fail the test naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}", pytrace=False)


__all__ = [
    "INSTALL_HINT",
    "PROMETHEUS",
    "PROMTOOL",
    "PrometheusFactory",
    "PrometheusServer",
    "Steps",
    "free_port",
    "openmetrics_history",
    "prometheus_server",
    "prometheus_server_module",
    "require_prometheus",
    "step_integral",
    "wait_for",
]
