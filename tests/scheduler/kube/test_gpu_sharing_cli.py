"""The GPU-sharing command lines against a real kube-apiserver: ``hourglass reserve`` and ``bind --gpu-sharing``.

* ``hourglass reserve`` (the reservation pod's container) writes the GPU the device plugin gave it to its own
  pod and holds it until SIGTERM; without a GPU in its environment it exits 2 with a clear message.
* ``hourglass bind --gpu-sharing --stop-when-idle`` reconciles reservation pods at start: an orphan whose
  sharer is gone is deleted, one whose sharer is bound on its node stays.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.filelog import FileLog
from scheduler.kube.reservation import ANNOTATION_RESERVED_GPU, SharingConfig, reservation_pod
from tests.support.paths import REPO_ROOT


def _core(api: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api)


@pytest.fixture
def resv(kube_api: Any) -> Iterator[tuple[Any, str]]:
    name = f"hg-resv-{uuid.uuid4().hex[:8]}"
    with kube_api.api_client() as api:
        _core(api).create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        yield api, name


def _hourglass(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    code = "import sys, analytics.cli as c; sys.exit(c.main(sys.argv[1:]))"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_reserve_reports_its_gpu_and_holds_until_sigterm(kube_api: Any, resv: tuple[Any, str]) -> None:
    api, ns = resv
    body = reservation_pod(SharingConfig(namespace=ns), "node-x", 0, ["team/a"])
    _core(api).create_namespaced_pod(ns, body)
    name = body["metadata"]["name"]
    env = {"NVIDIA_VISIBLE_DEVICES": "GPU-5f0c2d1e", "POD_NAME": name, "POD_NAMESPACE": ns}
    proc = _hourglass("reserve", "--kubeconfig", str(kube_api.kubeconfig), env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            r: Any = _core(api).read_namespaced_pod(name, ns, _preload_content=False)
            if json.loads(r.data)["metadata"]["annotations"].get(ANNOTATION_RESERVED_GPU) == "GPU-5f0c2d1e":
                break
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the reserved GPU was never reported"
            time.sleep(0.2)
        time.sleep(0.3)
        assert proc.poll() is None  # holds the device
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("gpu", ["", "all", "none"])
def test_reserve_without_one_gpu_says_so(kube_api: Any, gpu: str) -> None:
    env = {"NVIDIA_VISIBLE_DEVICES": gpu, "POD_NAME": "p", "POD_NAMESPACE": "ns"}
    proc = _hourglass("reserve", "--kubeconfig", str(kube_api.kubeconfig), env=env)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "reserve: need NVIDIA_VISIBLE_DEVICES" in err


def test_bind_cli_with_gpu_sharing_removes_orphans_at_start(
    kube_api: Any, resv: tuple[Any, str], kube_namespace: str, tmp_path: Path
) -> None:
    from analytics.cli import main

    api, ns = resv
    core = _core(api)
    node = f"{kube_namespace}-n1"
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    sharer = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "alive"},
        "spec": {"nodeName": node, "containers": [{"name": "m", "image": "busybox"}]},
    }
    core.create_namespaced_pod(kube_namespace, sharer)
    cfg = SharingConfig(namespace=ns)
    kept = reservation_pod(cfg, node, 0, [f"{kube_namespace}/alive"])
    orphan = reservation_pod(cfg, node, 1, [f"{kube_namespace}/gone"])
    for body in (kept, orphan):
        core.create_namespaced_pod(ns, body)
    FileLog(tmp_path / "log").close()
    argv = [
        "bind",
        "--log",
        str(tmp_path / "log"),
        "--kubeconfig",
        str(kube_api.kubeconfig),
        "--stop-when-idle",
    ]
    assert main([*argv, "--gpu-sharing", "--reservation-namespace", ns]) == 0
    r: Any = core.list_namespaced_pod(ns, _preload_content=False)
    assert [p["metadata"]["name"] for p in json.loads(r.data)["items"]] == [kept["metadata"]["name"]]
