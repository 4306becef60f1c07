"""Pytest fixtures for a real Kubernetes API server (kube-apiserver + etcd on 127.0.0.1).

``kube_api`` (session scope) starts ``tools/kube/apiserver.sh start DIR`` once per session in a private
temp dir and stops it at the end. It yields a :class:`KubeAPI` with the admin ``kubeconfig`` path and
``api_client()``. ``KUBECONFIG_HOURGLASS_TEST=/path/to/kubeconfig`` uses an existing cluster instead.

When the binaries are missing (``tools/kube/build.sh`` not run yet) the tests are skipped, except under
``CI`` where the fixture runs the build itself and fails if that fails: CI must really run them. The
build takes tens of minutes cold, so CI should run ``tools/kube/build.sh`` before pytest (the fixture
build is a fallback; it counts against the test's timeout).

``kube_namespace`` (function scope) creates a fresh namespace and returns its name. No
kube-controller-manager runs, so a deleted namespace stays ``Terminating`` and its objects stay put:
the names are unique per test, so that does not matter.

Fixtures are registered for every test module by the import in ``tests/conftest.py``.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import REPO_ROOT

KUBE_DIR = REPO_ROOT / "tools" / "kube"
BUILD_SH = KUBE_DIR / "build.sh"
APISERVER_SH = KUBE_DIR / "apiserver.sh"
MISSING_PREREQUISITE = 2  # the scripts' exit code for "not built" / "openssl missing"
BUILD_TIMEOUT_S = 3 * 3600


@dataclass(frozen=True)
class KubeAPI:
    """A running API server: where it is and how to talk to it.

    ``etcd_url`` and ``user_token`` are ``None`` for an external cluster (``KUBECONFIG_HOURGLASS_TEST``).
    ``user_token`` authenticates user ``hourglass-tester``, who has no groups and so no RBAC rights.
    """

    kubeconfig: Path
    url: str
    etcd_url: str | None = None
    user_token: str | None = None

    def api_client(self, token: str | None = None) -> Any:
        """Return a new ``kubernetes.client.ApiClient`` for this cluster (admin, or ``token``'s user)."""
        from kubernetes import config

        cfg: dict[str, Any] = yaml.safe_load(self.kubeconfig.read_text())
        if token is not None:
            # Same cluster and CA, another bearer token: the kubeconfig's single user swapped out.
            for user in cfg.get("users", []):
                user["user"] = {"token": token}
        load: Any = config.new_client_from_config_dict  # untyped in the client library
        return load(cfg, persist_config=False)


def _unavailable(reason: str) -> None:
    message = f"Kubernetes API server unavailable: {reason}"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI is set, so the kube-apiserver tests must run)", pytrace=False)
    pytest.skip(message)


def _binaries_present() -> bool:
    out = subprocess.run([str(BUILD_SH), "--print"], capture_output=True, text=True, check=True).stdout
    bin_dir = Path(os.environ.get("HOURGLASS_KUBE_BIN_DIR", out.strip()))
    etcd = Path(os.environ["HOURGLASS_ETCD"]) if os.environ.get("HOURGLASS_ETCD") else bin_dir / "etcd"
    return (bin_dir / "kube-apiserver").is_file() and etcd.is_file()


def _read_env(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key: value for key, value in pairs}


@pytest.fixture(scope="session")
def kube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPI]:
    """A real kube-apiserver + etcd for the session (or the cluster named by KUBECONFIG_HOURGLASS_TEST)."""
    existing = os.environ.get("KUBECONFIG_HOURGLASS_TEST")
    if existing:
        cfg = yaml.safe_load(Path(existing).read_text())
        yield KubeAPI(kubeconfig=Path(existing), url=str(cfg["clusters"][0]["cluster"]["server"]))
        return
    if not _binaries_present():
        if not os.environ.get("CI"):
            _unavailable("kube-apiserver / etcd not built: run tools/kube/build.sh (tens of minutes, once)")
        built = subprocess.run(
            [str(BUILD_SH)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
        )
        if built.returncode != 0:
            pytest.fail(f"tools/kube/build.sh failed (exit {built.returncode}):\n{built.stderr[-4000:]}")
    run_dir = tmp_path_factory.mktemp("kube")
    started = subprocess.run(
        [str(APISERVER_SH), "start", str(run_dir)], capture_output=True, text=True, timeout=300, check=False
    )
    if started.returncode == MISSING_PREREQUISITE:
        _unavailable(started.stderr.strip())
    if started.returncode != 0:
        subprocess.run(
            [str(APISERVER_SH), "stop", str(run_dir)], capture_output=True, timeout=60, check=False
        )
        pytest.fail(
            f"tools/kube/apiserver.sh start failed (exit {started.returncode}):\n{started.stderr}",
            pytrace=False,
        )
    env = _read_env(run_dir / "env")
    try:
        yield KubeAPI(
            kubeconfig=run_dir / "kubeconfig",
            url=env["KUBE_URL"],
            etcd_url=env["ETCD_URL"],
            user_token=env["USER_TOKEN"],
        )
    finally:
        subprocess.run(
            [str(APISERVER_SH), "stop", str(run_dir)], capture_output=True, timeout=60, check=False
        )


@pytest.fixture
def kube_namespace(kube_api: KubeAPI) -> Iterator[str]:
    """A fresh namespace (unique name) in the test cluster; deleted (i.e. left Terminating) afterwards."""
    from kubernetes import client

    name = f"hg-test-{uuid.uuid4().hex[:10]}"
    with kube_api.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        try:
            yield name
        finally:
            core.delete_namespace(name)
