"""``hourglass apply-crds``: install or upgrade the Queue, PodGroup and Topology CRDs, dropping no field.

Helm installs a chart's ``crds/`` only when they are missing and never upgrades them. This command is the
upgrade path the chart can run itself (``crdUpgrade.enabled``: a pre-install / pre-upgrade hook Job), and
the same request as the documented manual step ``kubectl apply --server-side --force-conflicts -f
deploy/crds/``: each CRD is sent as a server-side apply patch (field manager ``hourglass``, conflicts
forced, so it also takes over CRDs KAI's installer created), then the command waits until every CRD is
``Established``. The shipped CRDs are a superset of KAI's and keep unknown fields (docs/deploy.md), so
existing Queues, PodGroups and Topologies keep every field.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Final

import yaml

from ingest.kube.client import add_kubeconfig_argument

__all__ = ["FIELD_MANAGER", "add_arguments", "apply_crds", "load_crds", "run_cli"]

FIELD_MANAGER: Final = "hourglass"


def load_crds(directory: Path) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions in ``directory/*.yaml``, by file name; ValueError names a bad file."""
    out: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                raise ValueError(f"{path}: not a CustomResourceDefinition")
            out.append(doc)
    if not out:
        raise ValueError(f"no CustomResourceDefinition in {directory}/*.yaml")
    return out


def apply_crds(
    api: Any, docs: list[dict[str, Any]], manager: str = FIELD_MANAGER, timeout_s: float = 60.0
) -> None:
    """Server-side apply ``docs`` (conflicts forced) and wait until each is Established; raises on failure."""
    from kubernetes import client

    ext: Any = client.ApiextensionsV1Api(api)
    for doc in docs:
        ext.patch_custom_resource_definition(
            doc["metadata"]["name"],
            doc,
            field_manager=manager,
            force=True,
            _content_type="application/apply-patch+yaml",
        )
    deadline = time.monotonic() + timeout_s
    for doc in docs:
        name = doc["metadata"]["name"]
        while True:
            crd = ext.read_custom_resource_definition(name)
            conds = (crd.status.conditions if crd.status else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} is not Established after {timeout_s:g} s: {conds}")
            time.sleep(0.2)


def add_arguments(p: Any) -> None:
    """The ``apply-crds`` subcommand's arguments (``p`` is an ``argparse.ArgumentParser``)."""
    p.add_argument("--dir", required=True, help="directory of CRD YAML files (deploy/crds)")
    add_kubeconfig_argument(p)
    p.add_argument(
        "--field-manager", default=FIELD_MANAGER, help=f"server-side apply field manager ({FIELD_MANAGER})"
    )


def run_cli(args: Any) -> int:
    """``hourglass apply-crds --dir D``: 0 when every CRD is applied and Established."""
    from ingest.backends import StartupError
    from ingest.kube.client import api_client_for

    try:
        docs = load_crds(Path(args.dir))
    except (OSError, ValueError, yaml.YAMLError) as e:
        print(f"apply-crds: {e}", file=sys.stderr)
        return 2
    try:
        api = api_client_for("apply-crds", args.kubeconfig)
    except StartupError as e:
        print(e, file=sys.stderr)
        return 2
    try:
        with api:
            apply_crds(api, docs, args.field_manager)
    except Exception as e:  # ApiException, TimeoutError, connection errors: report, never a traceback
        print(f"apply-crds: {type(e).__name__}: {str(e)[:2000]}", file=sys.stderr)
        return 1
    print(f"apply-crds: {len(docs)} CRDs applied: {', '.join(d['metadata']['name'] for d in docs)}")
    return 0
