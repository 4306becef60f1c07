"""Installing CRDs on the test API server the way the docs tell users to: ``kubectl apply --server-side``.

``server_side_apply(api, docs)`` sends each CRD as an apply patch (field manager ``kubectl``, conflicts
forced), which is the request ``kubectl apply --server-side --force-conflicts -f deploy/crds/`` makes, then
waits until every CRD is ``Established`` and its resources are served.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CRD_DIR = ROOT / "deploy" / "crds"


def deploy_crds() -> list[dict[str, Any]]:
    """The CRDs shipped in ``deploy/crds``, parsed."""
    return [yaml.safe_load(p.read_text()) for p in sorted(CRD_DIR.glob("*.yaml"))]


def server_side_apply(api: Any, docs: list[dict[str, Any]], manager: str = "kubectl") -> None:
    """Apply ``docs`` (CRDs) as ``kubectl apply --server-side --force-conflicts`` does; wait until served."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api)
    for doc in docs:
        ext.patch_custom_resource_definition(
            doc["metadata"]["name"],
            doc,
            field_manager=manager,
            force=True,
            _content_type="application/apply-patch+yaml",
        )
    deadline = time.monotonic() + 30
    for doc in docs:
        name = doc["metadata"]["name"]
        while True:
            crd = ext.read_custom_resource_definition(name).to_dict()
            conds = (crd.get("status") or {}).get("conditions") or []
            established = any(c["type"] == "Established" and c["status"] == "True" for c in conds)
            if established and _served(api, doc):
                break
            assert time.monotonic() < deadline, f"CRD {name} not established: {conds}"
            time.sleep(0.2)


def _served(api: Any, doc: dict[str, Any]) -> bool:
    """The CRD's storage version answers a list (a just-updated CRD's handler can lag its status)."""
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
