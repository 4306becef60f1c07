"""Installing Hourglass's CRDs over KAI's keeps every field KAI users have set (a real kube-apiserver).

The cluster starts with KAI-shaped CRDs: today's KAI PodGroup fields (``minMember: 0``, ``minSubGroup``,
``preemptionDelay``, ``stalenessGracePeriod``, ``semi-preemptible``, sub-groups with ``minSubGroup``,
``status.schedulingState``) plus a field Hourglass does not know (standing in for whatever KAI adds next).
A KAI user's PodGroup and Queue use all of them. Then the documented upgrade step runs
(``kubectl apply --server-side --force-conflicts -f deploy/crds/``, see docs/deploy.md) and every object
reads back unchanged: nothing was pruned. The shipped PodGroup CRD also validates as KAI does.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.crds import deploy_crds, server_side_apply
from tests.support.paths import REPO_ROOT

GROUP = "scheduling.run.ai"


def _kai_shaped(doc: dict[str, Any]) -> dict[str, Any]:
    """KAI's schema as the API server sees it: no unknown-field preservation, plus a field unknown to us."""

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: strip(v)
                for k, v in node.items()
                if k not in ("x-kubernetes-preserve-unknown-fields", "x-kubernetes-validations")
            }
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    out: dict[str, Any] = strip(copy.deepcopy(doc))
    out["metadata"]["labels"] = {"app.kubernetes.io/part-of": "kai-scheduler"}
    for v in out["spec"]["versions"]:
        props = v["schema"]["openAPIV3Schema"]["properties"]
        props["spec"]["properties"]["futureKaiField"] = {"type": "string"}
        if "status" in props:  # KAI's Topology has no status
            props["status"]["properties"]["futureKaiStatus"] = {
                "type": "object",
                "properties": {"phase": {"type": "string"}},
            }
    return out


KAI_PODGROUP_SPEC: dict[str, Any] = {
    "minSubGroup": 2,
    "queue": "team-a",
    "priorityClassName": "train",
    "preemptibility": "semi-preemptible",
    "preemptionDelay": "5m",
    "stalenessGracePeriod": "-1s",
    "markUnschedulable": True,
    "schedulingBackoff": 1,
    "topologyConstraint": {"topology": "default", "requiredTopologyLevel": "rack"},
    "subGroups": [
        {"name": "decode", "minSubGroup": 1},
        {"name": "decode-0", "parent": "decode", "minMember": 0},
        {"name": "prefill", "minMember": 2, "topologyConstraint": {"preferredTopologyLevel": "node"}},
    ],
    "futureKaiField": "kept",
}
KAI_PODGROUP_STATUS: dict[str, Any] = {
    "schedulingState": {"corePods": ["train-0", "train-1"]},
    "schedulingConditions": [
        {
            "type": "UnschedulableOnNodePool",
            "nodePool": "default",
            "reason": "Unschedulable",
            "message": "OverLimit: queue team-a is over its limit",
            "status": "True",
            "transitionID": "3",
            "lastTransitionTime": "2026-11-25T10:00:00Z",
            "reasons": [
                {"reason": "OverLimit", "message": "over", "details": {"queueDetails": {"name": "team-a"}}}
            ],
        }
    ],
    "futureKaiStatus": {"phase": "Elastic"},
}


@pytest.fixture
def kai_crds(kube_api: Any) -> Iterator[Any]:
    """An admin client on a cluster whose CRDs are KAI's; Hourglass's are back in place afterwards."""
    with kube_api.api_client() as api:
        server_side_apply(api, [_kai_shaped(d) for d in deploy_crds()], manager="kai-scheduler")
        try:
            yield api
        finally:
            server_side_apply(api, deploy_crds())


def test_applying_our_crds_over_kais_keeps_every_field(kai_crds: Any, kube_namespace: str) -> None:
    from kubernetes import client

    custom: Any = client.CustomObjectsApi(kai_crds)
    ns = kube_namespace
    name = f"pg-{uuid.uuid4().hex[:6]}"
    pg = {
        "apiVersion": f"{GROUP}/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": KAI_PODGROUP_SPEC,
    }
    custom.create_namespaced_custom_object(GROUP, "v2alpha2", ns, "podgroups", pg)
    custom.patch_namespaced_custom_object_status(
        GROUP, "v2alpha2", ns, "podgroups", name, {"status": KAI_PODGROUP_STATUS}
    )
    elastic = f"pg-{uuid.uuid4().hex[:6]}"
    custom.create_namespaced_custom_object(
        GROUP,
        "v2alpha2",
        ns,
        "podgroups",
        {**pg, "metadata": {"name": elastic}, "spec": {"minMember": 0, "queue": "team-a"}},
    )
    queue = f"q-{uuid.uuid4().hex[:6]}"
    qspec = {"resources": {"gpu": {"quota": 2, "limit": -1, "overQuotaWeight": 1}}, "futureKaiField": "kept"}
    custom.create_cluster_custom_object(
        GROUP,
        "v2",
        "queues",
        {"apiVersion": f"{GROUP}/v2", "kind": "Queue", "metadata": {"name": queue}, "spec": qspec},
    )
    try:
        before = custom.get_namespaced_custom_object(GROUP, "v2alpha2", ns, "podgroups", name)
        assert before["spec"] == KAI_PODGROUP_SPEC and before["status"] == KAI_PODGROUP_STATUS

        server_side_apply(kai_crds, deploy_crds())  # the documented upgrade step

        after = custom.get_namespaced_custom_object(GROUP, "v2alpha2", ns, "podgroups", name)
        assert after["spec"] == KAI_PODGROUP_SPEC
        assert after["status"] == KAI_PODGROUP_STATUS
        assert custom.get_namespaced_custom_object(GROUP, "v2alpha2", ns, "podgroups", elastic)["spec"] == {
            "minMember": 0,
            "queue": "team-a",
        }
        assert custom.get_cluster_custom_object(GROUP, "v2", "queues", queue)["spec"] == qspec
        # A write after the upgrade (what ingest and the binder do) keeps them too.
        custom.patch_namespaced_custom_object(
            GROUP, "v2alpha2", ns, "podgroups", name, {"metadata": {"labels": {"touched": "yes"}}}
        )
        again = custom.get_namespaced_custom_object(GROUP, "v2alpha2", ns, "podgroups", name)
        assert again["spec"] == KAI_PODGROUP_SPEC and again["status"] == KAI_PODGROUP_STATUS
    finally:
        custom.delete_cluster_custom_object(GROUP, "v2", "queues", queue)


#: PodGroup specs KAI rejects, and the field (or message) the API server's 422 must name.
INVALID: list[tuple[dict[str, Any], str]] = [
    ({"minMember": -1}, "spec.minMember"),
    ({"minSubGroup": -1, "subGroups": [{"name": "a", "minMember": 1}]}, "spec.minSubGroup"),
    ({"minMember": 1, "minSubGroup": 1}, "minMember and minSubGroup are mutually exclusive"),
    ({"preemptionDelay": "soon"}, "spec.preemptionDelay"),
    ({"preemptionDelay": "-5m"}, "spec.preemptionDelay"),
    ({"stalenessGracePeriod": "1 minute"}, "spec.stalenessGracePeriod"),
    ({"preemptibility": "sometimes"}, "spec.preemptibility"),
    ({"subGroups": [{"name": "Workers", "minMember": 1}]}, "spec.subGroups[0].name"),
    ({"subGroups": [{"name": "w", "minMember": -1}]}, "spec.subGroups[0].minMember"),
    ({"subGroups": [{"name": "w", "minSubGroup": -1}]}, "spec.subGroups[0].minSubGroup"),
]
VALID: list[dict[str, Any]] = [
    {"minMember": 0},
    {"minMember": None},
    {"preemptionDelay": "0"},
    {"preemptionDelay": "1h30m", "stalenessGracePeriod": "-1s"},
    {"stalenessGracePeriod": "0s"},
    {"subGroups": [{"name": "w", "minMember": 0}, {"name": "p", "minSubGroup": 0}]},
    {"minSubGroup": 0, "subGroups": [{"name": "a", "minMember": 1}]},  # KAI accepts 0 at the root too
]


def test_podgroup_validation_is_kais(kube_api: Any, kube_namespace: str) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    with kube_api.api_client() as api:
        server_side_apply(api, deploy_crds())
        custom: Any = client.CustomObjectsApi(api)
        failures = []
        for i, spec in enumerate(VALID):
            body = {"apiVersion": f"{GROUP}/v2alpha2", "kind": "PodGroup", "metadata": {"name": f"ok-{i}"}}
            try:
                custom.create_namespaced_custom_object(
                    GROUP, "v2alpha2", kube_namespace, "podgroups", {**body, "spec": spec}
                )
            except ApiException as exc:
                failures.append(f"{spec} rejected: {exc.body}")
        for i, (spec, field) in enumerate(INVALID):
            body = {"apiVersion": f"{GROUP}/v2alpha2", "kind": "PodGroup", "metadata": {"name": f"bad-{i}"}}
            try:
                custom.create_namespaced_custom_object(
                    GROUP, "v2alpha2", kube_namespace, "podgroups", {**body, "spec": spec}
                )
            except ApiException as exc:
                if exc.status != 422 or field not in str(exc.body):
                    failures.append(f"{spec}: {exc.status}, expected 422 naming {field}: {exc.body}")
                continue
            failures.append(f"{spec} was accepted; expected 422 naming {field}")
        assert not failures, "\n".join(failures)


def test_helm_install_over_kai_keeps_podgroups_then_the_upgrade_step_adopts_the_crds(
    kai_crds: Any, kube_api: Any, kube_namespace: str
) -> None:
    """`helm install` on a cluster with KAI's CRDs (the documented flags for KAI users), then the upgrade step."""
    import os
    import subprocess

    from kubernetes import client

    from tests.support.helm_chart import CHART, find_helm

    helm = find_helm()
    if helm is None:
        pytest.skip("helm not found: run tools/helm/install.sh")
    custom: Any = client.CustomObjectsApi(kai_crds)
    ext: Any = client.ApiextensionsV1Api(kai_crds)
    ns = kube_namespace
    pg = {
        "apiVersion": f"{GROUP}/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "kai-pg"},
        "spec": KAI_PODGROUP_SPEC,
    }
    custom.create_namespaced_custom_object(GROUP, "v2alpha2", ns, "podgroups", pg)
    release = f"hg{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "KUBECONFIG": str(kube_api.kubeconfig), "HOME": os.environ.get("HOME", "/tmp")}
    install = [
        helm, "install", release, str(CHART), "--namespace", ns,
        "--set", "priorityClasses.create=false", "--set-json", "queues=[]", "--set", "serviceMonitor.enabled=false",
    ]  # fmt: skip
    out = subprocess.run(install, capture_output=True, text=True, timeout=180, env=env, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    try:
        # Helm left the existing (KAI's) CRDs alone: the PodGroup is exactly as the KAI user wrote it.
        crd = ext.read_custom_resource_definition("podgroups.scheduling.run.ai")
        assert crd.metadata.labels.get("app.kubernetes.io/part-of") == "kai-scheduler"
        assert (
            custom.get_namespaced_custom_object(GROUP, "v2alpha2", ns, "podgroups", "kai-pg")["spec"]
            == KAI_PODGROUP_SPEC
        )
        server_side_apply(
            kai_crds, deploy_crds()
        )  # kubectl apply --server-side --force-conflicts -f deploy/crds/
        crd = ext.read_custom_resource_definition("podgroups.scheduling.run.ai")
        assert crd.metadata.labels.get("app.kubernetes.io/part-of") == "hourglass"
        assert (
            custom.get_namespaced_custom_object(GROUP, "v2alpha2", ns, "podgroups", "kai-pg")["spec"]
            == KAI_PODGROUP_SPEC
        )
    finally:
        subprocess.run(
            [helm, "uninstall", release, "--namespace", ns],
            capture_output=True,
            timeout=120,
            env=env,
            check=False,
        )


def test_chart_crd_upgrade_hook_applies_the_chart_crds_over_kais(
    kai_crds: Any, kube_api: Any, kube_namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """crdUpgrade.enabled: the hook Job's command, run on the files its ConfigMap mounts, adopts KAI's CRDs."""
    from kubernetes import client

    from analytics.cli import main
    from tests.support.helm_chart import by_kind, find_helm, parse_cli, render

    helm = find_helm()
    if helm is None:
        pytest.skip("helm not found: run tools/helm/install.sh")
    objs = render(helm, "--set", "crdUpgrade.enabled=true")
    (job,) = by_kind(objs, "Job").values()
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    (container,) = job["spec"]["template"]["spec"]["containers"]
    args = parse_cli([str(a) for a in container["args"]])
    (mount,) = (m for m in container["volumeMounts"] if m["mountPath"] == args.dir)
    (volume,) = (v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    files = by_kind(objs, "ConfigMap")[volume["configMap"]["name"]]["data"]
    assert {n: files[n] for n in files} == {
        p.name: p.read_text().rstrip("\n") for p in sorted((REPO_ROOT / "deploy" / "crds").glob("*.yaml"))
    }
    (role,) = [r for n, r in by_kind(objs, "ClusterRole").items() if n.endswith("-crd-upgrade")]
    for rule in role["rules"]:
        assert rule["resources"] == ["customresourcedefinitions"]
        assert rule["verbs"] == ["create"] or rule["resourceNames"] == [
            "queues.scheduling.run.ai",
            "podgroups.scheduling.run.ai",
            "topologies.kai.scheduler",
        ]

    # What the Job does, on the files it mounts, over KAI's CRDs and a KAI user's PodGroup.
    custom: Any = client.CustomObjectsApi(kai_crds)
    pg = {
        "apiVersion": f"{GROUP}/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "hooked"},
        "spec": KAI_PODGROUP_SPEC,
    }
    custom.create_namespaced_custom_object(GROUP, "v2alpha2", kube_namespace, "podgroups", pg)
    mounted = tmp_path / "crds"
    mounted.mkdir()
    for name, text in files.items():
        (mounted / name).write_text(text)
    assert main(["apply-crds", "--dir", str(mounted), "--kubeconfig", str(kube_api.kubeconfig)]) == 0
    assert "3 CRDs applied" in capsys.readouterr().out
    ext: Any = client.ApiextensionsV1Api(kai_crds)
    crd = ext.read_custom_resource_definition("podgroups.scheduling.run.ai")
    assert crd.metadata.labels.get("app.kubernetes.io/part-of") == "hourglass"
    got = custom.get_namespaced_custom_object(GROUP, "v2alpha2", kube_namespace, "podgroups", "hooked")
    assert got["spec"] == KAI_PODGROUP_SPEC


def test_apply_crds_reports_bad_input_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from analytics.cli import main

    assert main(["apply-crds", "--dir", str(tmp_path)]) == 2
    assert "apply-crds: no CustomResourceDefinition in" in capsys.readouterr().err
    (tmp_path / "x.yaml").write_text("kind: Queue\n")
    assert main(["apply-crds", "--dir", str(tmp_path)]) == 2
    assert "x.yaml: not a CustomResourceDefinition" in capsys.readouterr().err
