"""Installing CRDs on the test API server the way the docs tell users to: ``kubectl apply --server-side``.

``server_side_apply(api, docs)`` is ``hourglass apply-crds`` (``ingest/kube/crds.py``: each CRD as an apply patch,
conflicts forced, the request ``kubectl apply --server-side --force-conflicts -f deploy/crds/`` makes), plus
a wait until each CRD's resources are served (a just-updated CRD's handler can lag its status).
"""

from __future__ import annotations

import time
from typing import Any

import yaml

from ingest.kube.crds import apply_crds
from tests.support.paths import REPO_ROOT

CRD_DIR = REPO_ROOT / "deploy" / "crds"


def deploy_crds() -> list[dict[str, Any]]:
    """The CRDs shipped in ``deploy/crds``, parsed."""
    return [yaml.safe_load(p.read_text()) for p in sorted(CRD_DIR.glob("*.yaml"))]


def server_side_apply(api: Any, docs: list[dict[str, Any]], manager: str = "kubectl") -> None:
    """Apply ``docs`` (CRDs) as ``kubectl apply --server-side --force-conflicts`` does; wait until served."""
    apply_crds(api, docs, manager)
    deadline = time.monotonic() + 30
    for doc in docs:
        while not _served(api, doc):
            assert time.monotonic() < deadline, f"CRD {doc['metadata']['name']} is not served"
            time.sleep(0.2)


def _served(api: Any, doc: dict[str, Any]) -> bool:
    """The CRD's storage version answers a list."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    spec = doc["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("storage"))
    try:
        client.CustomObjectsApi(api).list_cluster_custom_object(
            spec["group"], version, spec["names"]["plural"]
        )
    except ApiException:
        return False
    return True
