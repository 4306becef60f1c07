"""The Helm chart's Queue admission webhook (``queueWebhook.*``, templates/webhook.yaml): rendered and checked.

* Off by default: no ValidatingWebhookConfiguration, no webhook server, no token.
* On: the webhook server runs a command line the real CLI accepts (``--validate-queues``, and
  ``--enable-quota-validation`` only with ``quotaValidation``), with a token whose only access is reading
  Queues; the ValidatingWebhookConfiguration reaches :data:`VALIDATE_PATH` through the Service with the CA
  of the serving certificate, for KAI's operations (CREATE, UPDATE) unless told otherwise. Without GPU
  sharing no pod webhook is registered.
* The real API server accepts every rendered object (server-side dry run); bad values are refused.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.kube.queue_validation import VALIDATE_PATH
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

ON = ["--set", "queueWebhook.enabled=true"]


@pytest.fixture(scope="module")
def helm() -> str:
    """A helm binary (tools/helm/install.sh); skipped (failed under CI) without one, as in test_deploy."""
    return require_helm()


def _webhook(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (dep,) = [d for d in by_kind(objs, "Deployment").values() if component(d) == "webhook"]
    return dep


def test_queue_webhook_is_off_by_default(helm: str) -> None:
    objs = render(helm)
    assert not by_kind(objs, "ValidatingWebhookConfiguration")
    assert all(component(d) != "webhook" for d in by_kind(objs, "Deployment").values())


@pytest.mark.parametrize("quota", [False, True], ids=["rules-only", "quota-validation"])
def test_the_server_validates_queues_with_read_access_only(helm: str, quota: bool) -> None:
    objs = render(helm, *ON, "--set", f"queueWebhook.quotaValidation={str(quota).lower()}")
    assert not by_kind(objs, "MutatingWebhookConfiguration")  # GPU sharing stays off
    pod = _webhook(objs)["spec"]["template"]["spec"]
    args = parse_cli([str(a) for a in pod["containers"][0]["args"]])
    assert args.command == "webhook" and args.validate_queues and args.enable_quota_validation is quota
    assert pod["automountServiceAccountToken"] is True
    (role,) = [r for r in by_kind(objs, "ClusterRole").values() if component(r) == "webhook"]
    assert role["rules"] == [
        {"apiGroups": ["scheduling.run.ai"], "resources": ["queues"], "verbs": ["get", "list"]}
    ]
    (binding,) = [b for b in by_kind(objs, "ClusterRoleBinding").values() if component(b) == "webhook"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert [s["name"] for s in binding["subjects"]] == [pod["serviceAccountName"]]


def test_the_configuration_reaches_the_server(helm: str) -> None:
    objs = render(helm, *ON)
    (config,) = by_kind(objs, "ValidatingWebhookConfiguration").values()
    (hook,) = config["webhooks"]
    service = hook["clientConfig"]["service"]
    assert service["path"] == VALIDATE_PATH
    (svc,) = [s for s in by_kind(objs, "Service").values() if s["metadata"]["name"] == service["name"]]
    (secret,) = [s for s in by_kind(objs, "Secret").values() if component(s) == "webhook"]
    assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    assert svc["spec"]["selector"].items() <= _webhook(objs)["spec"]["template"]["metadata"]["labels"].items()
    (rule,) = hook["rules"]
    assert rule["operations"] == ["CREATE", "UPDATE"]  # KAI's operator routes these two only
    assert (rule["apiGroups"], rule["resources"], rule["scope"]) == (
        ["scheduling.run.ai"],
        ["queues"],
        "Cluster",
    )
    assert hook["failurePolicy"] == "Fail"
    with_delete = render(helm, *ON, "--set", "queueWebhook.operations={CREATE,UPDATE,DELETE}")
    (config,) = by_kind(with_delete, "ValidatingWebhookConfiguration").values()
    assert config["webhooks"][0]["rules"][0]["operations"] == ["CREATE", "UPDATE", "DELETE"]


def test_both_webhooks_share_one_server(helm: str) -> None:
    objs = render(helm, *ON, "--set", "gpuSharing.enabled=true")
    assert len(by_kind(objs, "MutatingWebhookConfiguration")) == len(
        by_kind(objs, "ValidatingWebhookConfiguration")
    )
    args = parse_cli([str(a) for a in _webhook(objs)["spec"]["template"]["spec"]["containers"][0]["args"]])
    assert args.validate_queues and not args.enable_quota_validation


def test_the_api_server_accepts_the_rendered_queue_webhook(
    helm: str, kube_api: Any, kube_namespace: str
) -> None:
    objs = render(helm, *ON, namespace=kube_namespace)
    mine = [
        o for o in objs if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "webhook"
    ]
    assert {o["kind"] for o in mine} >= {"ValidatingWebhookConfiguration", "Deployment", "ClusterRole"}
    with kube_api.api_client() as api:
        dry_run_create(api, mine)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "queueWebhook.failurePolicy=Sometimes"], "/queueWebhook/failurePolicy"),
        (["--set", "queueWebhook.operations={CONNECT}"], "/queueWebhook/operations/0"),
        (["--set", "queueWebhook.quotaValidaton=true"], "quotaValidaton"),
    ],
    ids=["bad-failure-policy", "bad-operation", "misspelt-key"],
)
def test_bad_queue_webhook_values_are_refused(helm: str, values: list[str], message: str) -> None:
    out = helm_run(helm, "template", "hourglass", str(CHART), *ON, *values)
    assert out.returncode != 0 and message in out.stderr, out.stderr
