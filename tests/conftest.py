"""Shared fixtures: a real single-node Kafka broker (KRaft) for the integration tests.

``kafka_bootstrap`` starts ``tools/kafka/kafka.sh start`` once per session on free ports with a
private run dir, and stops it at the end. ``HOURGLASS_KAFKA_BOOTSTRAP=host:port`` uses an existing
broker instead. When Java (or Maven, with no cached jars) is missing the Kafka tests are skipped,
except under ``CI`` where they fail: CI must really run them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

# The kube_api / kube_namespace fixtures (a real kube-apiserver + etcd), registered for every test module.
from tests.support.kubeapi import kube_api, kube_namespace  # noqa: F401
from tests.support.paths import REPO_ROOT

# The prometheus_server / prometheus_server_module fixture factories (a real Prometheus), likewise.
from tests.support.promserver import prometheus_server, prometheus_server_module  # noqa: F401

KAFKA_SH = REPO_ROOT / "tools" / "kafka" / "kafka.sh"
MISSING_PREREQUISITE = 2  # kafka.sh's exit code when java / mvn are missing


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _unavailable(reason: str) -> None:
    message = f"Kafka broker unavailable: {reason}"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI is set, so the Kafka tests must run)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    existing = os.environ.get("HOURGLASS_KAFKA_BOOTSTRAP")
    if existing:
        yield existing
        return
    cache = Path(os.environ.get("HOURGLASS_CACHE", Path.home() / ".cache" / "hourglass"))
    if shutil.which("java") is None:
        _unavailable("`java` not found (apt-get install -y default-jdk-headless)")
    if shutil.which("mvn") is None and not (cache / "kafka" / "libs" / ".complete").exists():
        _unavailable("`mvn` not found and no cached Kafka jars (apt-get install -y maven)")
    port = _free_port()
    controller_port = _free_port()
    while controller_port == port:
        controller_port = _free_port()
    env = {
        **os.environ,
        "HOURGLASS_KAFKA_PORT": str(port),
        "HOURGLASS_KAFKA_CONTROLLER_PORT": str(controller_port),
        "HOURGLASS_KAFKA_DIR": str(tmp_path_factory.mktemp("kafka")),
    }
    started = subprocess.run([str(KAFKA_SH), "start"], env=env, capture_output=True, text=True, timeout=600)
    if started.returncode == MISSING_PREREQUISITE:
        _unavailable(started.stderr.strip())
    if started.returncode != 0:
        pytest.fail(
            f"tools/kafka/kafka.sh start failed (exit {started.returncode}):\n{started.stderr}", pytrace=False
        )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([str(KAFKA_SH), "stop"], env=env, capture_output=True, text=True, timeout=60)
