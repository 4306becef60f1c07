"""The Helm chart's scheduling shards (``shards``) and standby replicas (``leaderElection``): rendered and
checked against the real CLI parser.

* Shards: one scheduler and one binder Deployment per shard, each running ``--node-pool`` with its pool,
  selecting only its own pods (a label ``hourglass.io/shard``), each with its own Lease name and decisions
  topic; the metrics Services and ServiceMonitors still select every shard's pods, and the ServiceMonitor
  copies the shard label onto the series. Without ``shards`` the chart renders as before.
* Leader election: ``--leader-elect`` with the chart's timing on scheduler and binder only, replicas above
  1 accepted only with it, rolling updates, a token for the scheduler and a Role on Leases alone; on the
  real kube-apiserver the Deployments are accepted and SubjectAccessReviews show the Lease rights hold in
  the release namespace only.
"""

from __future__ import annotations

from typing import Any

import pytest

from ingest.kube.lease import lease_settings_from_args
from ingest.log import Topics
from tests.support.helm_chart import CHART, by_kind, component, helm_run, parse_cli, render, require_helm

SHARDS = ["--set-json", 'shards=[{"name":"gpu","nodePool":"gpu-nodes"},{"name":"default","nodePool":""}]']
ELECT = ["--set", "leaderElection.enabled=true"]
MONITOR = ["--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"]


@pytest.fixture(scope="module")
def helm() -> str:
    """A helm binary (tools/helm/install.sh); skipped (failed under CI) without one, as in test_deploy."""
    return require_helm()


def _args(dep: dict[str, Any]) -> Any:
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    return parse_cli([str(a) for a in container["args"]])


def test_one_scheduler_and_one_binder_per_shard(helm: str) -> None:
    objs = render(helm, *SHARDS, *MONITOR)
    deps = by_kind(objs, "Deployment")
    assert set(deps) == {
        "hourglass-ingest",
        "hourglass-scheduler-gpu",
        "hourglass-binder-gpu",
        "hourglass-scheduler-default",
        "hourglass-binder-default",
        "hourglass-fairshare",
    }
    pools = {name: getattr(_args(dep), "node_pool", None) for name, dep in deps.items()}
    assert pools == {
        "hourglass-ingest": None,  # ingest has no --node-pool: one events log for every shard
        "hourglass-scheduler-gpu": "gpu-nodes",
        "hourglass-binder-gpu": "gpu-nodes",
        "hourglass-scheduler-default": "",
        "hourglass-binder-default": "",
        "hourglass-fairshare": None,
    }
    # Each Deployment selects only its own pods: no two selectors match the same pod template.
    for name, dep in deps.items():
        selector = dep["spec"]["selector"]["matchLabels"]
        matched = [
            other
            for other, d in deps.items()
            if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert matched == [name]
    # Each shard's scheduler and binder write and read the shard's own decisions topic.
    assert {Topics().for_pool(pools[n]).decisions for n in deps if "scheduler" in n} == {
        "hourglass.decisions.pool.gpu-nodes",
        "hourglass.decisions.pool",
    }
    # The metrics Service selects every shard's scheduler; the ServiceMonitor labels series by shard.
    services = by_kind(objs, "Service")
    sched = services["hourglass-scheduler-metrics"]["spec"]["selector"]
    assert [
        n for n, d in deps.items() if sched.items() <= d["spec"]["template"]["metadata"]["labels"].items()
    ] == [
        "hourglass-scheduler-gpu",
        "hourglass-scheduler-default",
    ]
    monitors = by_kind(objs, "ServiceMonitor")
    assert monitors["hourglass-scheduler"]["spec"]["podTargetLabels"] == ["hourglass.io/shard"]
    assert "podTargetLabels" not in monitors["hourglass-fairshare"]["spec"]


def test_without_shards_the_chart_renders_one_scheduler_and_binder_unchanged(helm: str) -> None:
    deps = by_kind(render(helm), "Deployment")
    for name in ("hourglass-scheduler", "hourglass-binder"):
        assert "hourglass.io/shard" not in deps[name]["spec"]["selector"]["matchLabels"]
        args = _args(deps[name])
        assert args.node_pool is None and not args.leader_elect
        assert deps[name]["spec"]["strategy"]["type"] == "Recreate"


def test_shard_extra_args_reach_only_its_scheduler(helm: str) -> None:
    shards = 'shards=[{"name":"a","nodePool":"a","extraArgs":["--engine-config","/etc/a.yaml"]},{"name":"b","nodePool":"b"}]'
    deps = by_kind(render(helm, "--set-json", shards), "Deployment")
    assert _args(deps["hourglass-scheduler-a"]).engine_config == "/etc/a.yaml"
    assert _args(deps["hourglass-scheduler-b"]).engine_config is None


def test_leader_election_runs_standbys_on_their_own_leases(helm: str) -> None:
    objs = render(helm, *SHARDS, *ELECT, "--set", "scheduler.replicas=2", "--set", "binder.replicas=2")
    deps = by_kind(objs, "Deployment")
    leases = set()
    for name, dep in deps.items():
        args = _args(dep)
        elects = component(dep) in ("scheduler", "binder")
        assert bool(getattr(args, "leader_elect", False)) is elects, name
        if not elects:
            continue
        assert dep["spec"]["replicas"] == 2 and dep["spec"]["strategy"]["type"] == "RollingUpdate"
        assert (args.lease_duration, args.lease_renew_deadline, args.lease_retry_period) == (15, 10, 2)
        env = {e["name"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert "POD_NAMESPACE" in env  # the Lease's namespace
        default = "hourglass-scheduler" if component(dep) == "scheduler" else "hourglass-binder"
        settings = lease_settings_from_args(args, default)
        assert settings is not None
        leases.add(settings.name)
        assert dep["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    assert leases == {
        "hourglass-scheduler-pool-gpu-nodes",
        "hourglass-scheduler-pool",
        "hourglass-binder-pool-gpu-nodes",
        "hourglass-binder-pool",
    }
    (role,) = by_kind(objs, "Role").values()
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}
    ]
    (binding,) = by_kind(objs, "RoleBinding").values()
    assert {s["name"] for s in binding["subjects"]} == {"hourglass-scheduler", "hourglass-binder"}
    sas = by_kind(objs, "ServiceAccount")
    assert sas["hourglass-scheduler"]["automountServiceAccountToken"] is True
    assert sas["hourglass-fairshare"]["automountServiceAccountToken"] is False


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "binder.replicas=2"], "/binder/replicas': maximum: got 2, want 1"),
        (
            ["--set-json", 'shards=[{"name":"a","nodePool":"a"},{"name":"a","nodePool":"b"}]'],
            'shards: the name "a" is used twice',
        ),
        (["--set-json", 'shards=[{"name":"a"}]'], "missing property 'nodePool'"),
        (["--set-json", 'shards=[{"name":"A_1","nodePool":"a"}]'], "/shards/0/name"),
        (["--set-json", 'shards=[{"name":"a","nodePool":"a b"}]'], "/shards/0/nodePool"),
        (["--set", "leaderElection.leaseDuration=0"], "/leaderElection/leaseDuration"),
    ],
    ids=[
        "standby-without-election",
        "duplicate-shard",
        "shard-without-pool",
        "bad-shard-name",
        "bad-pool",
        "zero-lease",
    ],
)
def test_bad_shard_and_election_values_fail_with_a_specific_message(
    helm: str, values: list[str], message: str
) -> None:
    out = helm_run(helm, "template", "hourglass", str(CHART), *values)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr


def _can(api: Any, user: str, verb: str, resource: str, group: str, ns: str) -> bool:
    from kubernetes import client

    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=["system:serviceaccounts", "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource=resource, group=group, namespace=ns
            ),
        )
    )
    status = client.AuthorizationV1Api(api).create_subject_access_review(review).status
    return status is not None and bool(status.allowed)


def test_sharded_standby_deployments_are_accepted_and_lease_rbac_holds_on_a_real_apiserver(
    helm: str, kube_api: Any, kube_namespace: str
) -> None:
    import time

    from kubernetes.dynamic import DynamicClient

    ns = kube_namespace
    objs = render(helm, *SHARDS, *ELECT, "--set", "scheduler.replicas=2", namespace=ns)
    namespaced = [o for o in objs if o["kind"] in ("Deployment", "ServiceAccount", "Role", "RoleBinding")]
    assert len([o for o in namespaced if o["kind"] == "Deployment"]) == 6
    with kube_api.api_client() as api:
        dyn = DynamicClient(api)  # type: ignore[no-untyped-call]
        for obj in namespaced:
            dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"]).create(body=obj, namespace=ns)
        user = {c: f"system:serviceaccount:{ns}:hourglass-{c}" for c in ("scheduler", "binder", "fairshare")}
        lease = "coordination.k8s.io"
        deadline = time.monotonic() + 15  # the RBAC authorizer sees new bindings through an informer
        while not all(
            _can(api, user[c], v, "leases", lease, ns)
            for c in ("scheduler", "binder")
            for v in ("get", "create", "update")
        ):
            assert time.monotonic() < deadline, "the scheduler and binder cannot hold their Leases"
            time.sleep(0.3)
        assert not _can(api, user["scheduler"], "update", "leases", lease, "default")  # own namespace only
        assert not _can(api, user["scheduler"], "delete", "leases", lease, ns)
        assert not _can(api, user["scheduler"], "list", "pods", "", ns)
        assert not _can(api, user["fairshare"], "get", "leases", lease, ns)
