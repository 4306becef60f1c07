"""The Helm chart's embedded-log mode (``log.mode=embedded``) as rendered: one pod whose containers run the
four services on the FileLog of one PersistentVolumeClaim, with no Kafka, the API token only where the API
is called, and the values the FileLog cannot honour (more replicas, standbys, shards) refused.

The install on a real kube-apiserver and the pod scheduled end to end: tests/e2e/kwok/test_chart_embedded.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.helm_chart import CHART, by_kind, helm_run, parse_cli, render, require_helm

EMBEDDED = ("--set", "log.mode=embedded")
#: container -> the hourglass subcommand it must run.
SUBCOMMANDS = {"ingest": "ingest", "scheduler": "run", "binder": "bind", "fairshare": "fairshare"}


@pytest.fixture(scope="module")
def helm() -> str:
    """Path of a helm binary; skip (fail under CI) when there is none."""
    return require_helm()


def _pod(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The pod template of the one Deployment of the services (GPU sharing's webhook aside)."""
    deployments = [
        d for d in by_kind(objs, "Deployment").values() if d["metadata"]["name"] != "hourglass-webhook"
    ]
    assert len(deployments) == 1, [d["metadata"]["name"] for d in deployments]
    assert deployments[0]["spec"]["replicas"] == 1
    assert deployments[0]["spec"]["strategy"]["type"] == "Recreate"
    return dict(deployments[0]["spec"]["template"])


def test_embedded_chart_lints_strictly(helm: str) -> None:
    out = helm_run(helm, "lint", "--strict", str(CHART), *EMBEDDED)
    assert out.returncode == 0, out.stdout + out.stderr


def test_one_pod_runs_every_service_on_the_claimed_log(helm: str) -> None:
    objs = render(helm, *EMBEDDED)
    pod = _pod(objs)
    spec = pod["spec"]
    containers = {c["name"]: c for c in spec["containers"]}
    assert list(containers) == list(SUBCOMMANDS)
    claims = by_kind(objs, "PersistentVolumeClaim")
    assert list(claims) == ["hourglass-log"]
    assert claims["hourglass-log"]["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["log"]["persistentVolumeClaim"]["claimName"] == "hourglass-log"
    for name, c in containers.items():
        args = parse_cli(c["args"])
        assert c["args"][0] == SUBCOMMANDS[name]
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        # Every service's --log is the shared volume's mount: one FileLog, no Kafka.
        assert args.log == mounts["log"] == "/var/lib/hourglass/log", name
        # The API token only where the API is called (the kubelet's path, so in-cluster config finds it).
        has_token = mounts.get("kube-api-access") == "/var/run/secrets/kubernetes.io/serviceaccount"
        assert has_token == (name in ("ingest", "binder")), name
    assert spec["automountServiceAccountToken"] is False
    assert "kafka" not in str(objs)


def test_metrics_services_reach_the_embedded_containers(helm: str) -> None:
    objs = render(helm, *EMBEDDED)
    pod = _pod(objs)
    labels = pod["metadata"]["labels"]
    ports = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    assert len(ports) == 3  # names unique within the pod, as the API server requires
    services = by_kind(objs, "Service")
    assert len(services) == 3
    for svc in services.values():
        assert svc["spec"]["selector"].items() <= labels.items(), svc["metadata"]["name"]
        (port,) = svc["spec"]["ports"]
        assert ports[port["targetPort"]] == port["port"]


def test_one_account_holds_the_ingest_and_binder_roles(helm: str) -> None:
    objs = render(helm, *EMBEDDED, "--set", "gpuSharing.enabled=true")
    account = _pod(objs)["spec"]["serviceAccountName"]
    # Besides GPU sharing's own (reservation pods, webhook), one account for the services.
    assert sorted(by_kind(objs, "ServiceAccount")) == sorted(
        [account, "hourglass-reservation", "hourglass-webhook"]
    )
    bound = sorted(
        b["roleRef"]["name"]
        for kind in ("ClusterRoleBinding", "RoleBinding")
        for b in by_kind(objs, kind).values()
        if any(s["name"] == account for s in b["subjects"])
    )
    assert bound == [
        "hourglass-binder",
        "hourglass-binder-gpu-sharing",
        "hourglass-binder-reservations",
        "hourglass-ingest",
    ]


def test_an_existing_claim_is_used_and_none_is_created(helm: str) -> None:
    objs = render(helm, *EMBEDDED, "--set", "log.persistence.existingClaim=my-log")
    assert by_kind(objs, "PersistentVolumeClaim") == {}
    volumes = {v["name"]: v for v in _pod(objs)["spec"]["volumes"]}
    assert volumes["log"]["persistentVolumeClaim"]["claimName"] == "my-log"


def test_kafka_mode_renders_no_claim(helm: str) -> None:
    objs = render(helm)
    assert by_kind(objs, "PersistentVolumeClaim") == {}
    assert len(by_kind(objs, "Deployment")) == 4


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "scheduler.replicas=2"], "/scheduler/replicas"),
        (["--set", "ingest.replicas=2"], "/ingest/replicas"),
        (["--set", "binder.replicas=2"], "/binder/replicas"),
        (["--set", "fairshare.replicas=3"], "/fairshare/replicas"),
        (
            ["--set", "leaderElection.enabled=true", "--set", "scheduler.replicas=2"],
            "/leaderElection/enabled",
        ),
        (["--set", "shards[0].name=gpu", "--set", "shards[0].nodePool=gpu"], "/shards"),
    ],
    ids=[
        "scheduler-replicas",
        "ingest-replicas",
        "binder-replicas",
        "fairshare-replicas",
        "leader",
        "shards",
    ],
)
def test_embedded_mode_refuses_what_the_file_log_cannot_honour(
    helm: str, values: list[str], message: str
) -> None:
    out = helm_run(helm, "template", "hourglass", str(CHART), *EMBEDDED, *values)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr


def test_an_unknown_log_mode_is_refused(helm: str) -> None:
    out = helm_run(helm, "template", "hourglass", str(CHART), "--set", "log.mode=file")
    assert out.returncode != 0
    assert "/log/mode" in out.stderr and "'kafka', 'embedded'" in out.stderr, out.stderr
