"""The Helm chart's GPU-sharing part (``gpuSharing.*``, templates/gpu-sharing.yaml): rendered and checked.

* Off by default (as KAI's ``global.gpuSharing``): nothing of it is rendered and the binder gets no flag.
* On: the webhook Deployment and the binder run command lines the real CLI accepts; the serving certificate
  Helm generates is valid for the webhook Service's DNS name and signed by the CA in the webhook's
  ``caBundle``; the webhook is reached through the Service on the container's port; ``matchConditions`` are
  exactly the ones ``tests/scheduler/kube/test_gpu_sharing.py`` registers on the real API server (so an outage blocks only
  sharing pods); RBAC stays narrow (ConfigMaps: create / patch only; pods created only in the reservation
  namespace). The real API server accepts every rendered object (server-side dry run, which also compiles
  the CEL ``matchConditions``).
* With cert-manager: a Certificate and the CA-injection annotation instead of a generated Secret; a missing
  issuer is refused with a specific message.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import pytest

from scheduler.kube.webhook import MUTATE_PATH
from tests.support.gpu_sharing import MATCH_CONDITIONS
from tests.support.helm_chart import (
    CHART,
    by_kind,
    component,
    dry_run_create,
    helm_run,
    parse_cli,
    render,
    require_helm,
)

ON = ["--set", "gpuSharing.enabled=true"]


@pytest.fixture(scope="module")
def helm() -> str:
    """A helm binary (tools/helm/install.sh); skipped (failed under CI) without one, as in test_deploy."""
    return require_helm()


def test_gpu_sharing_is_off_by_default(helm: str) -> None:
    objs = render(helm)
    assert not by_kind(objs, "MutatingWebhookConfiguration")
    assert all(component(d) != "webhook" for d in by_kind(objs, "Deployment").values())
    binder = next(d for d in by_kind(objs, "Deployment").values() if component(d) == "binder")
    assert "--gpu-sharing" not in binder["spec"]["template"]["spec"]["containers"][0]["args"]


def test_webhook_and_binder_run_real_command_lines(helm: str) -> None:
    objs = render(helm, *ON)
    deps = {component(d): d for d in by_kind(objs, "Deployment").values()}
    (hook,) = deps["webhook"]["spec"]["template"]["spec"]["containers"]
    args = parse_cli([str(a) for a in hook["args"]])
    assert (args.command, args.scheduler_name) == ("webhook", "hourglass")
    (port,) = hook["ports"]
    assert port["containerPort"] == args.port and port["name"] == "https"
    mounted = {m["mountPath"] for m in hook["volumeMounts"]}
    assert str(Path(args.tls_cert).parent) in mounted and str(Path(args.tls_key).parent) in mounted
    (binder,) = deps["binder"]["spec"]["template"]["spec"]["containers"]
    bargs = parse_cli([str(a) for a in binder["args"]])
    assert bargs.gpu_sharing and bargs.reservation_namespace == "hourglass-reservation"
    sas = {
        (s["metadata"]["namespace"], s["metadata"]["name"]) for s in by_kind(objs, "ServiceAccount").values()
    }
    assert ("hourglass-reservation", bargs.reservation_service_account) in sas
    assert bargs.reservation_image == hook["image"]  # the reservation pods run `hourglass reserve`


def _openssl(*args: str, stdin: bytes | None = None) -> str:
    out = subprocess.run(["openssl", *args], input=stdin, capture_output=True, check=True)
    return out.stdout.decode()


def test_certificate_service_and_webhook_fit_together(helm: str, tmp_path: Path) -> None:
    objs = render(helm, *ON, namespace="gpu-system")
    (mwc,) = by_kind(objs, "MutatingWebhookConfiguration").values()
    (hook,) = mwc["webhooks"]
    (secret,) = (s for s in by_kind(objs, "Secret").values() if s["type"] == "kubernetes.io/tls")
    ca = tmp_path / "ca.crt"
    crt = tmp_path / "tls.crt"
    ca.write_bytes(base64.b64decode(hook["clientConfig"]["caBundle"]))
    crt.write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    assert "OK" in _openssl("verify", "-CAfile", str(ca), str(crt))
    service = hook["clientConfig"]["service"]
    sans = _openssl("x509", "-in", str(crt), "-noout", "-ext", "subjectAltName")
    assert f"DNS:{service['name']}.gpu-system.svc" in sans
    assert service["path"] == MUTATE_PATH and service["namespace"] == "gpu-system"
    svc = by_kind(objs, "Service")[service["name"]]
    (port,) = (p for p in svc["spec"]["ports"] if p["port"] == service["port"])
    assert port["targetPort"] == "https"
    deps = {component(d): d for d in by_kind(objs, "Deployment").values()}
    assert (
        svc["spec"]["selector"].items() <= deps["webhook"]["spec"]["template"]["metadata"]["labels"].items()
    )
    # Only sharing pods of our scheduler ever reach the webhook; they are refused while it is down.
    assert hook["matchConditions"] == MATCH_CONDITIONS
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert hook["rules"][0]["operations"] == ["CREATE"] and hook["rules"][0]["resources"] == ["pods"]
    (expr,) = hook["namespaceSelector"]["matchExpressions"]
    assert {"gpu-system", "hourglass-reservation"} <= set(expr["values"]) and expr["operator"] == "NotIn"


def test_gpu_sharing_rbac_stays_narrow(helm: str) -> None:
    objs = render(helm, *ON)
    binder_sa = "hourglass-binder"
    for o in objs:
        for rule in o.get("rules", []):
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
            assert "secrets" not in rule["resources"], rule
            if "configmaps" in rule["resources"]:
                assert sorted(rule["verbs"]) == ["create", "patch"], rule  # written, never read
    cluster = [
        r
        for b in by_kind(objs, "ClusterRoleBinding").values()
        if any(s["name"] == binder_sa for s in b["subjects"])
        for r in by_kind(objs, "ClusterRole")[b["roleRef"]["name"]]["rules"]
    ]
    assert not any("pods" in r["resources"] and "create" in r["verbs"] for r in cluster)
    (role,) = (
        by_kind(objs, "Role")[b["roleRef"]["name"]]
        for b in by_kind(objs, "RoleBinding").values()
        if any(s["name"] == binder_sa for s in b["subjects"])
    )
    assert role["metadata"]["namespace"] == "hourglass-reservation"
    assert "create" in role["rules"][0]["verbs"] and role["rules"][0]["resources"] == ["pods"]


def test_cert_manager_option(helm: str) -> None:
    objs = render(
        helm, *ON, "--set", "gpuSharing.webhook.certManager.enabled=true", "--set-json",
        'gpuSharing.webhook.certManager.issuerRef={"name":"ca-issuer","kind":"ClusterIssuer"}',
    )  # fmt: skip
    (cert,) = by_kind(objs, "Certificate").values()
    assert cert["spec"]["issuerRef"] == {"name": "ca-issuer", "kind": "ClusterIssuer"}
    (mwc,) = by_kind(objs, "MutatingWebhookConfiguration").values()
    assert mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].endswith("/hourglass-webhook")
    assert "caBundle" not in mwc["webhooks"][0]["clientConfig"]
    assert not [s for s in by_kind(objs, "Secret").values() if s["type"] == "kubernetes.io/tls"]
    out = helm_run(
        helm, "template", "hourglass", str(CHART), *ON, "--set", "gpuSharing.webhook.certManager.enabled=true"
    )
    assert out.returncode != 0 and "gpuSharing.webhook.certManager.issuerRef is required" in out.stderr


def test_the_api_server_accepts_the_rendered_gpu_sharing_objects(
    helm: str, kube_api: Any, kube_namespace: str
) -> None:
    ns = kube_namespace
    objs = render(
        helm, *ON, "--set", f"gpuSharing.reservationNamespace={ns}", "--set", "gpuSharing.createNamespace=false",
        namespace=ns,
    )  # fmt: skip
    mine = [
        o
        for o in objs
        if "gpu-sharing" in o["metadata"]["name"]
        or o["metadata"].get("labels", {}).get("app.kubernetes.io/component")
        in ("webhook", "gpu-reservation")
    ]
    mine += [o for o in objs if o["kind"] in ("Role", "RoleBinding")]
    assert {o["kind"] for o in mine} >= {
        "MutatingWebhookConfiguration",
        "Deployment",
        "Secret",
        "Service",
        "Role",
    }
    with kube_api.api_client() as api:
        dry_run_create(api, mine)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "gpuSharing.webhook.failurePolicy=Sometimes"], "/gpuSharing/webhook/failurePolicy"),
        (["--set", "gpuSharing.reservationNamespace=Bad_NS"], "/gpuSharing/reservationNamespace"),
        (["--set", "gpuSharing.reservationTimeoutSeconds=0"], "/gpuSharing/reservationTimeoutSeconds"),
    ],
    ids=["bad-failure-policy", "bad-namespace", "zero-timeout"],
)
def test_bad_gpu_sharing_values_are_refused(helm: str, values: list[str], message: str) -> None:
    out = helm_run(helm, "template", "hourglass", str(CHART), *ON, *values)
    assert out.returncode != 0 and message in out.stderr, out.stderr
