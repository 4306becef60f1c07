"""The Helm chart (deploy/helm/hourglass) as the tests render it: a helm binary, ``helm template``, and the
real ``hourglass`` parser to check the command lines it runs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import REPO_ROOT

CHART = REPO_ROOT / "deploy" / "helm" / "hourglass"
HELM_INSTALL = REPO_ROOT / "tools" / "helm" / "install.sh"


def find_helm() -> str | None:
    """A helm binary: ``$HELM``, then the one tools/helm/install.sh built, then PATH; None when there is none."""
    explicit = os.environ.get("HELM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    cached = subprocess.run([str(HELM_INSTALL), "--print"], capture_output=True, text=True, check=True)
    path = cached.stdout.strip()
    if Path(path).is_file():
        return path
    return shutil.which("helm")


def require_helm() -> str:
    """Path of a helm binary; skip the test (fail it under CI) when there is none."""
    found = find_helm()
    if found is None:
        message = "helm not found: run tools/helm/install.sh (builds helm via the Go module proxy, once)"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI is set, so the helm tests must run)", pytrace=False)
        pytest.skip(message)
    return found


def helm_run(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run helm with ``args``; the result is returned, not checked."""
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=120, check=False)


def render(
    helm: str, *args: str, release: str = "hourglass", namespace: str = "hourglass-system"
) -> list[dict[str, Any]]:
    """``helm template`` the chart and return the parsed objects (empty documents dropped)."""
    out = helm_run(helm, "template", release, str(CHART), "--namespace", namespace, *args)
    assert out.returncode == 0, f"helm template {' '.join(args)} failed:\n{out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(objs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """The objects of ``kind``, by name."""
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def component(obj: dict[str, Any]) -> str:
    """The object's ``app.kubernetes.io/component`` label."""
    return str(obj["metadata"]["labels"]["app.kubernetes.io/component"])


def parse_cli(argv: list[str]) -> Any:
    """Parse argv with the real ``hourglass`` parser; a rejected command line fails the test with stderr."""
    import io

    from analytics.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"`hourglass {' '.join(argv)}` is rejected by the CLI: {err.getvalue().strip()}")


def dry_run_create(api: Any, objs: list[dict[str, Any]]) -> None:
    """Create each of ``objs`` on the API server with ``dryRun=All``: the server validates it (schema,
    admission, CEL) and stores nothing."""
    from kubernetes.dynamic import DynamicClient

    dyn = DynamicClient(api)  # type: ignore[no-untyped-call]
    for o in objs:
        res = dyn.resources.get(api_version=o["apiVersion"], kind=o["kind"])
        namespace = o["metadata"].get("namespace") if res.namespaced else None
        res.create(body=o, namespace=namespace, query_params=[("dryRun", "All")])
