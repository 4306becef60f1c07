"""deploy/ and compose/: what an operator installing Hourglass relies on.

* The Helm chart lints and renders; every Deployment runs an ``hourglass`` subcommand with arguments the
  real CLI parser accepts; RBAC is least-privilege (checked on the rendered rules and, against a real
  kube-apiserver, with SubjectAccessReviews); bad values fail with a specific message.
* The CRDs are accepted by a real kube-apiserver, which then accepts KAI-shaped Queues / PodGroups and
  rejects invalid ones naming the field; the whole rendered chart is accepted by the API server.
* The Grafana dashboard only queries metrics the scheduler exports; the compose stack references files
  that exist and runs real subcommands.

helm comes from ``tools/helm/install.sh`` (or ``$HELM``, or PATH). Without it the helm tests skip, except
under ``CI`` where they fail. The API-server tests use the ``kube_api`` fixture (tests/support/kubeapi.py).
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helm_chart import (
    CHART,
    by_kind,
    component,
    helm_run,
    parse_cli,
    render,
    require_helm,
)
from tests.support.paths import REPO_ROOT

CRD_DIR = REPO_ROOT / "deploy" / "crds"
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "hourglass-dashboard.json"
COMPOSE_DIR = REPO_ROOT / "compose"
GROUP = "scheduling.run.ai"

#: Deployment component -> the hourglass subcommand it must run.
SUBCOMMANDS = {"ingest": "ingest", "scheduler": "run", "binder": "bind", "fairshare": "fairshare"}


# --------------------------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def helm() -> str:
    """Path of a helm binary; skip (fail under CI) when there is none."""
    return require_helm()


# ----------------------------------------------------------------------------------- chart (no cluster)


def test_chart_lints_strictly(helm: str) -> None:
    for extra in ([], ["--set", "serviceMonitor.enabled=true", "--set", "kafka.topicPrefix=team1"]):
        out = helm_run(helm, "lint", "--strict", str(CHART), *extra)
        assert out.returncode == 0, out.stdout + out.stderr


def test_chart_renders_every_part_with_defaults(helm: str) -> None:
    objs = render(helm)
    kinds = sorted(o["kind"] for o in objs)
    assert kinds.count("Deployment") == 4
    assert kinds.count("ServiceAccount") == 4
    assert {component(d) for d in by_kind(objs, "Deployment").values()} == set(SUBCOMMANDS)
    # KAI's default priority classes with KAI's values: < 100 is preemptible.
    assert {n: p["value"] for n, p in by_kind(objs, "PriorityClass").items()} == {
        "train": 50,
        "build-preemptible": 75,
        "build": 100,
        "inference": 125,
    }
    queues = by_kind(objs, "Queue")
    assert set(queues) == {"default-parent-queue", "default-queue"}
    assert queues["default-queue"]["apiVersion"] == "scheduling.run.ai/v2"
    assert queues["default-queue"]["spec"]["parentQueue"] == "default-parent-queue"
    assert queues["default-queue"]["spec"]["resources"]["gpu"] == {
        "quota": 0,
        "limit": -1,
        "overQuotaWeight": 1,
    }
    # One metrics Service per component with /metrics (scheduler, binder, fairshare); each selects exactly
    # its component's pods, on the port the container exposes.
    services = by_kind(objs, "Service")
    deployments = {component(d): d for d in by_kind(objs, "Deployment").values()}
    assert {component(s) for s in services.values()} == {"scheduler", "binder", "fairshare"}
    for svc in services.values():
        dep = deployments[component(svc)]
        pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        assert svc["spec"]["selector"].items() <= pod_labels.items()
        (port,) = dep["spec"]["template"]["spec"]["containers"][0]["ports"]
        assert svc["spec"]["ports"][0]["targetPort"] == port["name"] == "metrics"
        assert svc["spec"]["ports"][0]["port"] == port["containerPort"]
    # Three processes, three distinct ports: they may share a node's network namespace in tests.
    assert len({s["spec"]["ports"][0]["port"] for s in services.values()}) == 3
    # No ServiceMonitor unless the cluster serves the Prometheus Operator API ("auto").
    assert not by_kind(objs, "ServiceMonitor")


def test_service_monitor_follows_the_cluster_api_and_the_switch(helm: str) -> None:
    api = ["--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"]
    monitors = by_kind(
        render(helm, *api, "--set", "serviceMonitor.labels.release=prom"), "ServiceMonitor"
    ).values()
    assert {sm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] for sm in monitors} == {
        "scheduler",
        "binder",
        "fairshare",
    }
    for sm in monitors:
        assert sm["metadata"]["labels"]["release"] == "prom"
        assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    # A component without a metrics endpoint gets no ServiceMonitor.
    off = render(helm, *api, "--set", "binder.metrics.enabled=false")
    assert "binder" not in {component(sm) for sm in by_kind(off, "ServiceMonitor").values()}
    assert "binder" not in {component(s) for s in by_kind(off, "Service").values()}
    assert not by_kind(render(helm, *api, "--set", "serviceMonitor.enabled=false"), "ServiceMonitor")
    assert by_kind(render(helm, "--set", "serviceMonitor.enabled=true"), "ServiceMonitor")


def test_chart_crds_are_the_deploy_crds(helm: str) -> None:
    chart_crds = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert (
        chart_crds
        == sorted(p.name for p in CRD_DIR.glob("*.yaml"))
        == [
            "kai.scheduler_topologies.yaml",
            "scheduling.run.ai_podgroups.yaml",
            "scheduling.run.ai_queues.yaml",
        ]
    )
    for name in chart_crds:
        assert (CHART / "crds" / name).read_bytes() == (CRD_DIR / name).read_bytes(), (
            f"deploy/helm/hourglass/crds/{name} differs from deploy/crds/{name}: copy it over"
        )
    crds = by_kind(render(helm, "--include-crds"), "CustomResourceDefinition")
    assert set(crds) == {
        "queues.scheduling.run.ai",
        "podgroups.scheduling.run.ai",
        "topologies.kai.scheduler",
    }
    served = {n: [v["name"] for v in c["spec"]["versions"] if v["served"]] for n, c in crds.items()}
    assert served == {
        "queues.scheduling.run.ai": ["v2"],
        "podgroups.scheduling.run.ai": ["v2alpha2"],
        "topologies.kai.scheduler": ["v1alpha1"],
    }


@pytest.mark.parametrize(
    "values",
    [
        [],
        [
            "--set",
            "kafka.topicPrefix=team1",
            "--set",
            "kafka.bootstrap=k1:9092\\,k2:9092",
            "--set",
            "prometheus.url=",
        ],
        ["--set", "scheduler.extraArgs={--batch-size,500}", "--set", "timeBasedFairShare.k_value=2"],
    ],
    ids=["defaults", "prefix-no-prometheus", "extra-args"],
)
def test_every_deployment_runs_a_real_subcommand(helm: str, values: list[str]) -> None:
    objs = render(helm, *values)
    deployments = by_kind(objs, "Deployment")
    assert len(deployments) == 4
    for dep in deployments.values():
        (container,) = dep["spec"]["template"]["spec"]["containers"]
        assert container["command"] == ["hourglass"]
        args = [str(a) for a in container["args"]]
        assert args[0] == SUBCOMMANDS[component(dep)]
        parsed = parse_cli(args)
        assert parsed.command == args[0]
        assert parsed.log.startswith("kafka://")
        if component(dep) in ("scheduler", "binder", "fairshare"):
            # /metrics must listen beyond loopback, on the port the Service targets.
            (port,) = container["ports"]
            assert (parsed.metrics_host, parsed.metrics_port) == ("0.0.0.0", port["containerPort"])
        if "kafka.topicPrefix=team1" in values:
            assert parsed.topic_prefix == "team1"
            assert parsed.log == "kafka://k1:9092,k2:9092"


def _settings_of(container: dict[str, Any], cm: dict[str, Any], mounts_at: Path, tmp: Path) -> Any:
    """The fair-share settings a rendered container's process loads: its args through the real CLI parser,
    the ConfigMap file its ``--fairshare-config`` names (checked to be mounted there), its env."""
    from fairshare.settings import cli_overrides, load_settings

    args = parse_cli([str(a) for a in container["args"]])
    assert args.fairshare_config is not None, f"{container['name']} gets no --fairshare-config"
    assert Path(args.fairshare_config).parent == mounts_at
    path = tmp / container["name"] / Path(args.fairshare_config).name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(cm["data"][path.name])
    env = {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}
    return args, load_settings(path, cli_overrides(args), environ=env)


@pytest.mark.parametrize(
    ("values", "expect"),
    [
        # helm template with default values: time-based fair share on, with KAI's defaults.
        ([], {"k_value": 1.0, "half_life_s": None, "window_s": 604800, "window_type": "sliding"}),
        (
            ["--set", "timeBasedFairShare.k_value=0.25", "--set", "timeBasedFairShare.half_life_s=3600"],
            {"k_value": 0.25, "half_life_s": 3600, "window_s": 604800},
        ),
        (["--set", "timeBasedFairShare.k_value=0"], {"k_value": 0.0}),
    ],
    ids=["defaults-kai", "overridden", "off"],
)
def test_one_fair_share_setting_reaches_scheduler_and_fairshare(
    helm: str, tmp_path: Path, values: list[str], expect: dict[str, Any]
) -> None:
    """The scheduler (`run`, which uses k_value) and fairshare load the same settings from the rendered
    chart: same file, same flags, same environment."""
    objs = render(helm, *values)
    (cm,) = by_kind(objs, "ConfigMap").values()
    loaded = {}
    for dep in by_kind(objs, "Deployment").values():
        if component(dep) not in ("scheduler", "fairshare"):
            continue
        spec = dep["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
        vol = next(v for v in spec["volumes"] if v["name"] == "config")
        assert vol["configMap"]["name"] == cm["metadata"]["name"]
        _, loaded[component(dep)] = _settings_of(container, cm, Path(mount["mountPath"]), tmp_path)
    assert set(loaded) == {"scheduler", "fairshare"}
    assert loaded["scheduler"].settings == loaded["fairshare"].settings
    got = loaded["scheduler"].settings.model_dump()
    assert {k: got[k] for k in expect} == expect


def test_fairshare_source_settings_reach_the_service(helm: str, tmp_path: Path) -> None:
    from fairshare.prometheus import PrometheusSourceConfig

    for values, source in (
        (["--set", "timeBasedFairShare.k_value=2.5", "--set", "prometheus.settings.step_s=30"], "prometheus"),
        (["--set", "prometheus.url=", "--set", "timeBasedFairShare.half_life_s=3600"], "eventlog"),
    ):
        objs = render(helm, *values)
        (cm,) = by_kind(objs, "ConfigMap").values()
        dep = next(d for d in by_kind(objs, "Deployment").values() if component(d) == "fairshare")
        (container,) = dep["spec"]["template"]["spec"]["containers"]
        args, loaded = _settings_of(container, cm, Path("/etc/hourglass"), tmp_path)
        assert args.source == source
        if source == "prometheus":
            assert loaded.settings.k_value == 2.5
            assert loaded.prometheus is not None
            pc = PrometheusSourceConfig.model_validate(loaded.prometheus)
            assert pc.url == "http://prometheus-operated.monitoring.svc:9090"
            assert pc.step_s == 30
        else:
            assert loaded.settings.half_life_s == 3600
            assert loaded.prometheus is None


def _rules_of(objs: list[dict[str, Any]], sa: str) -> list[dict[str, Any]]:
    """Every RBAC rule bound to ServiceAccount ``sa`` by the rendered (Cluster)RoleBindings."""
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objs if o["kind"] in ("ClusterRole", "Role")}
    rules: list[dict[str, Any]] = []
    for b in objs:
        if b["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if any(s["kind"] == "ServiceAccount" and s["name"] == sa for s in b["subjects"]):
            rules += roles[(b["roleRef"]["kind"], b["roleRef"]["name"])]["rules"]
    return rules


def _allows(rules: list[dict[str, Any]], verb: str, resource: str, group: str = "") -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


def test_rbac_is_least_privilege_in_the_rendered_chart(helm: str) -> None:
    objs = render(helm)
    sas = {component(s): s for s in by_kind(objs, "ServiceAccount").values()}
    deps = {component(d): d for d in by_kind(objs, "Deployment").values()}
    for comp, dep in deps.items():
        pod = dep["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == sas[comp]["metadata"]["name"]
        # Only the services that call the API get a token in the pod at all.
        assert pod["automountServiceAccountToken"] is (comp in ("ingest", "binder"))
    for o in objs:
        for rule in o.get("rules", []):
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
            assert not {"secrets", "configmaps", "serviceaccounts/token"} & set(rule["resources"]), rule
    sched, fair = (
        _rules_of(objs, sas["scheduler"]["metadata"]["name"]),
        _rules_of(objs, sas["fairshare"]["metadata"]["name"]),
    )
    assert sched == [] and fair == [], "scheduler and fairshare only use the log: no RBAC at all"

    binder = _rules_of(objs, sas["binder"]["metadata"]["name"])
    assert _allows(binder, "create", "pods/binding")
    assert _allows(binder, "delete", "pods")
    assert _allows(binder, "patch", "pods/status")
    assert _allows(binder, "create", "events") and _allows(binder, "patch", "events")
    assert _allows(binder, "update", "queues/status", GROUP)
    assert _allows(binder, "patch", "podgroups/status", GROUP)
    # WaitForFirstConsumer claims: bind the chosen volume, or name the node for the provisioner.
    assert _allows(binder, "update", "persistentvolumes") and _allows(binder, "patch", "persistentvolumeclaims")
    for verb, res, grp in (
        ("list", "pods", ""),
        ("update", "pods", ""),
        ("create", "pods", ""),
        ("watch", "nodes", ""),
        ("update", "queues", GROUP),
        ("create", "podgroups", GROUP),
    ):
        assert not _allows(binder, verb, res, grp), f"binder must not {verb} {res}"

    ingest = _rules_of(objs, sas["ingest"]["metadata"]["name"])
    for res, grp in (
        ("nodes", ""),
        ("pods", ""),
        ("queues", GROUP),
        ("podgroups", GROUP),
        ("topologies", "kai.scheduler"),
        ("namespaces", ""),  # their labels: affinity terms' namespaceSelector
    ):
        assert _allows(ingest, "list", res, grp) and _allows(ingest, "watch", res, grp)
    assert not _allows(ingest, "create", "topologies", "kai.scheduler")  # read only: KAI's admins write them
    # DRA: ingest reads slices, claims and classes; the binder allocates claims (docs/dra.md).
    dra = "resource.k8s.io"
    assert _allows(ingest, "watch", "resourceslices", dra) and _allows(ingest, "get", "resourceclaims", dra)
    assert not _allows(ingest, "update", "resourceclaims", dra)
    assert _allows(binder, "update", "resourceclaims/status", dra) and _allows(
        binder, "list", "resourceclaims", dra
    )
    assert not _allows(binder, "delete", "resourceclaims", dra) and not _allows(
        binder, "update", "resourceslices", dra
    )
    assert _allows(ingest, "create", "podgroups", GROUP) and _allows(ingest, "update", "podgroups", GROUP)
    assert _allows(ingest, "create", "events")
    assert _allows(ingest, "list", "persistentvolumes")  # the volumes a WaitForFirstConsumer claim could take
    assert _allows(ingest, "get", "priorityclasses", "scheduling.k8s.io")  # PodGroup priority values
    assert not _allows(ingest, "list", "priorityclasses", "scheduling.k8s.io")
    assert _allows(ingest, "get", "jobs", "batch") and not _allows(ingest, "list", "jobs", "batch")
    # Every owner kind ingest knows how to walk is readable, or its pods would never be grouped.
    from ingest.kube import client

    owner_plurals: dict[str, str] = client.OWNER_PLURALS
    readable = {res for r in ingest if r["verbs"] == ["get"] for res in r["resources"]}
    assert set(owner_plurals.values()) <= readable, set(owner_plurals.values()) - readable
    for verb, res in (
        ("create", "pods/binding"),
        ("delete", "pods"),
        ("patch", "pods/status"),
        ("update", "pods"),
    ):
        assert not _allows(ingest, verb, res), f"ingest must not {verb} {res}"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "kafka.bootstrap="], "kafka.bootstrap is required"),
        (
            ["--set", "serviceMonitor.enabled=maybe"],
            'serviceMonitor.enabled must be auto, true or false, not "maybe"',
        ),
        (["--set-json", 'queues=[{"name":"q1"}]'], "queue q1: resources is required"),
        (["--set-json", 'queues=[{"resources":{}}]'], "every entry of queues needs a name"),
        # values.schema.json: wrong types and unsafe settings are refused before rendering.
        (["--set", "scheduler.replicas=2"], "/scheduler/replicas': maximum: got 2, want 1"),
        (["--set", "binder.replicas=one"], "/binder/replicas': got string, want integer"),
        (["--set", "prometheus.url=prom:9090"], "/prometheus/url': 'prom:9090' does not match"),
        (["--set", "kafka.bootstrapServers=k:9092"], "additional properties 'bootstrapServers' not allowed"),
        (["--set", "timeBasedFairShare.k_value=-1"], "/timeBasedFairShare/k_value': minimum: got -1, want 0"),
        (["--set", "timeBasedFairShare.window_type=cron"], "/timeBasedFairShare/window_type'"),
        (
            ["--set", "fairshare.config.k_value=2"],
            "fairshare.config has moved to the top-level timeBasedFairShare",
        ),
    ],
    ids=[
        "no-bootstrap",
        "bad-servicemonitor",
        "queue-without-resources",
        "queue-without-name",
        "two-schedulers",
        "replicas-not-a-number",
        "prometheus-url-without-scheme",
        "misspelt-kafka-key",
        "negative-k-value",
        "unknown-window-type",
        "old-fairshare-config-key",
    ],
)
def test_bad_values_fail_with_a_specific_message(helm: str, values: list[str], message: str) -> None:
    out = helm_run(helm, "template", "hourglass", str(CHART), *values)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr


def test_values_are_documented() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    doc = (REPO_ROOT / "docs" / "deploy.md").read_text()
    for key, val in values.items():
        assert f"`{key}" in doc, f"values key {key!r} is not described in docs/deploy.md"
        if isinstance(val, dict) and key in SUBCOMMANDS:
            for sub in val:
                assert f"{key}.{sub}" in doc, f"values key {key}.{sub} is not described in docs/deploy.md"


# ------------------------------------------------------------------------------ real kube-apiserver


def _create_or_replace_crds(api: Any) -> None:
    """Apply deploy/crds (replacing an older copy an earlier test left) and wait until established."""
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import ConflictError

    crds = DynamicClient(api).resources.get(  # type: ignore[no-untyped-call]
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
    )
    names = []
    for path in sorted(CRD_DIR.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        names.append(doc["metadata"]["name"])
        try:
            crds.create(body=doc)
        except ConflictError:
            doc["metadata"]["resourceVersion"] = crds.get(
                name=doc["metadata"]["name"]
            ).metadata.resourceVersion
            crds.replace(body=doc)
    deadline = time.monotonic() + 30
    for name in names:
        while True:
            conds = crds.get(name=name).to_dict().get("status", {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                break
            assert time.monotonic() < deadline, f"CRD {name} not established: {conds}"
            time.sleep(0.2)


#: (apiVersion, kind, name, namespace or None) of an object a test created in the shared test cluster.
Created = list[tuple[str, str, str, str | None]]


@pytest.fixture
def crd_api(kube_api: Any) -> Iterator[Any]:
    """An admin API client on a cluster with the current deploy/crds installed."""
    with kube_api.api_client() as api:
        _create_or_replace_crds(api)
        yield api


@pytest.fixture
def created(crd_api: Any) -> Iterator[Created]:
    """Objects the test creates; deleted afterwards, since the API server is shared by the whole session
    (ingest tests watch every Queue, and other tests create KAI's PriorityClasses themselves)."""
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import NotFoundError

    objs: Created = []
    yield objs
    dyn = DynamicClient(crd_api)  # type: ignore[no-untyped-call]
    for api_version, kind, name, namespace in reversed(objs):
        with contextlib.suppress(NotFoundError):
            dyn.resources.get(api_version=api_version, kind=kind).delete(name=name, namespace=namespace)


def _queue(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def _podgroup(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v2alpha2", "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}


def _create_custom(custom: Any, obj: dict[str, Any], namespace: str, created: Created) -> None:
    """Create with server-side retries: a freshly established CRD may briefly 404 until its handler is up."""
    from kubernetes.client.exceptions import ApiException

    plural = {"Queue": "queues", "PodGroup": "podgroups"}[obj["kind"]]
    version = obj["apiVersion"].split("/")[1]
    deadline = time.monotonic() + 10
    while True:
        try:
            if obj["kind"] == "Queue":
                custom.create_cluster_custom_object(GROUP, version, plural, obj)
            else:
                custom.create_namespaced_custom_object(GROUP, version, namespace, plural, obj)
            ns = namespace if obj["kind"] != "Queue" else None
            created.append((obj["apiVersion"], obj["kind"], obj["metadata"]["name"], ns))
            return
        except ApiException as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# KAI users' objects, as KAI's docs and Helm chart write them: they must be accepted unchanged.
KAI_QUEUES: list[tuple[str, dict[str, Any]]] = [
    (
        "parent",
        {
            "resources": {
                r: {"quota": -1, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")
            }
        },
    ),
    (
        "leaf",
        {
            "parentQueue": "parent",
            "priority": 200,
            "displayName": "Team A",
            "preemptMinRuntime": "10m",
            "reclaimMinRuntime": "1h30m",
            "resources": {
                "gpu": {"quota": 2.5, "limit": 8, "overQuotaWeight": 2},
                "cpu": {"quota": 16000, "limit": -1, "overQuotaWeight": 1},
                "memory": {"quota": 64000, "limit": -1, "overQuotaWeight": 1},
            },
        },
    ),
]
KAI_PODGROUP: dict[str, Any] = {
    "minMember": 4,
    "queue": "leaf",
    "priorityClassName": "train",
    "preemptibility": "preemptible",
    "markUnschedulable": True,
    "schedulingBackoff": -1,
    "topologyConstraint": {"topology": "default", "requiredTopologyLevel": "rack"},
    "subGroups": [
        {"name": "master", "minMember": 1},
        {"name": "workers", "minMember": 3, "topologyConstraint": {"preferredTopologyLevel": "node"}},
    ],
}

#: (kind, spec, the field the API server's 422 must name).
INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("Queue", {}, "spec.resources"),
    ("Queue", {"resources": {"gpu": {"quota": -2}}}, "spec.resources.gpu.quota"),
    ("Queue", {"resources": {"cpu": {"limit": -5}}}, "spec.resources.cpu.limit"),
    ("Queue", {"resources": {"gpu": {"overQuotaWeight": -1}}}, "spec.resources.gpu.overQuotaWeight"),
    ("Queue", {"resources": {"gpu": {"quota": "two"}}}, "spec.resources.gpu.quota"),
    ("Queue", {"priority": "high", "resources": {}}, "spec.priority"),
    ("Queue", {"reclaimMinRuntime": "soon", "resources": {}}, "spec.reclaimMinRuntime"),
    ("Queue", {"parentQueue": "SELF", "resources": {}}, "cannot be its own parentQueue"),
    ("PodGroup", {"minMember": -3, "queue": "leaf"}, "spec.minMember"),
    ("PodGroup", {"minMember": 1, "preemptibility": "sometimes"}, "spec.preemptibility"),
    ("PodGroup", {"minMember": 1, "schedulingBackoff": 5}, "spec.schedulingBackoff"),
    ("PodGroup", {"minMember": 1, "queue": "Team_A"}, "spec.queue"),
    ("PodGroup", {"minMember": 1, "subGroups": [{"minMember": 1}]}, "spec.subGroups[0].name"),
    (
        "PodGroup",
        {"minMember": 1, "subGroups": [{"name": "w", "minMember": -1}]},
        "spec.subGroups[0].minMember",
    ),
]


def test_crds_accept_kai_objects_and_reject_invalid_ones(
    crd_api: Any, kube_namespace: str, created: Created
) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from scheduler.kube.binder import queue_status

    custom: Any = client.CustomObjectsApi(crd_api)  # returns untyped JSON objects
    prefix = f"hg{uuid.uuid4().hex[:6]}"
    for name, spec in KAI_QUEUES:
        spec = dict(spec)
        if "parentQueue" in spec:
            spec["parentQueue"] = f"{prefix}-{spec['parentQueue']}"
        _create_custom(custom, _queue(f"{prefix}-{name}", spec), kube_namespace, created)
    stored = custom.get_cluster_custom_object(GROUP, "v2", "queues", f"{prefix}-leaf")
    assert stored["spec"]["resources"]["gpu"] == {"quota": 2.5, "limit": 8, "overQuotaWeight": 2}
    assert stored["spec"]["reclaimMinRuntime"] == "1h30m"
    pg_obj = _podgroup("pg-train-job", {**KAI_PODGROUP, "queue": f"{prefix}-leaf"})
    _create_custom(custom, pg_obj, kube_namespace, created)
    pg = custom.get_namespaced_custom_object(GROUP, "v2alpha2", kube_namespace, "podgroups", "pg-train-job")
    assert pg["spec"]["minMember"] == 4 and pg["spec"]["subGroups"][1]["name"] == "workers"

    # Status is a subresource with its own schema: what the binder writes (KAI's quantities) lands.
    status = queue_status(_queue_record("leaf", {"gpu": 1500, "cpu": 4000, "memory": 2_500_000}))
    assert status["allocated"]["nvidia.com/gpu"] == "1500m"
    custom.patch_cluster_custom_object_status(GROUP, "v2", "queues", f"{prefix}-leaf", {"status": status})
    assert custom.get_cluster_custom_object(GROUP, "v2", "queues", f"{prefix}-leaf")["status"] == status

    failures = []
    for i, (kind, spec, field) in enumerate(INVALID):
        name = f"{prefix}-bad-{i}"
        if spec.get("parentQueue") == "SELF":
            spec = {**spec, "parentQueue": name}
        obj = _queue(name, spec) if kind == "Queue" else _podgroup(name, spec)
        try:
            _create_custom(custom, obj, kube_namespace, created)
        except ApiException as exc:
            if exc.status != 422 or field not in str(exc.body):
                failures.append(f"{kind} {spec}: {exc.status}, expected 422 naming {field}: {exc.body}")
            continue
        failures.append(f"{kind} {spec} was accepted; expected 422 naming {field}")
    assert not failures, "\n".join(failures)


def test_queue_printer_columns_show_the_kai_columns(crd_api: Any, created: Created) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(crd_api)
    name = f"hg{uuid.uuid4().hex[:6]}-cols"
    res = {"gpu": {"quota": 3, "limit": -1, "overQuotaWeight": 1}}
    _create_custom(custom, _queue(name, {"priority": 150, "parentQueue": "p", "resources": res}), "", created)
    # What `kubectl get queues` shows: the server-side Table rendering of the printer columns.
    method, url, headers, body, post = crd_api.param_serialize(
        "GET",
        f"/apis/{GROUP}/v2/queues/{name}",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
    )
    resp = crd_api.call_api(method, url, header_params=headers, body=body, post_params=post)
    resp.read()
    table = json.loads(resp.data)
    cols = [c["name"] for c in table["columnDefinitions"]]
    assert cols[:5] == ["Name", "Priority", "Parent", "Children", "DisplayName"]
    row = dict(zip(cols, table["rows"][0]["cells"], strict=True))
    assert (row["Priority"], row["Parent"], row["GPU-Quota"]) == ("150", "p", 3)


def _apply(api: Any, objs: list[dict[str, Any]], namespace: str, created: Created) -> None:
    """Create every object through discovery (any kind), like `kubectl create`, failing on rejection."""
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import ConflictError

    dyn = DynamicClient(api)  # type: ignore[no-untyped-call]
    for obj in objs:
        res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        ns = namespace if res.namespaced else None
        try:
            res.create(body=obj, namespace=ns)
            created.append((obj["apiVersion"], obj["kind"], obj["metadata"]["name"], ns))
        except ConflictError:
            # Cluster-scoped objects another test (or run) created first; they must match ours.
            existing = res.get(name=obj["metadata"]["name"]).to_dict()
            if obj["kind"] == "PriorityClass":
                assert existing["value"] == obj["value"], f"PriorityClass {obj['metadata']['name']} differs"
            else:
                raise


def _can(api: Any, user: str, verb: str, resource: str, group: str = "", ns: str | None = None) -> bool:
    from kubernetes import client

    sub, _, subresource = resource.partition("/")
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=["system:serviceaccounts", "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource=sub, subresource=subresource or None, group=group, namespace=ns
            ),
        )
    )
    status = client.AuthorizationV1Api(api).create_subject_access_review(review).status
    return status is not None and bool(status.allowed)


def test_rendered_chart_is_accepted_and_rbac_holds_on_a_real_apiserver(
    helm: str, crd_api: Any, kube_namespace: str, created: Created
) -> None:
    release = f"hg{uuid.uuid4().hex[:6]}"
    res = {r: {"quota": 0, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")}
    queues = [
        {"name": f"{release}-root", "resources": res},
        {"name": f"{release}-team", "parentQueue": f"{release}-root", "priority": 120, "resources": res},
    ]
    objs = render(
        helm, "--set-json", f"queues={json.dumps(queues)}", release=release, namespace=kube_namespace
    )
    # Deployments, RBAC, ServiceAccounts, ConfigMap, Service, PriorityClasses, Queues: all schema-valid.
    _apply(crd_api, objs, kube_namespace, created)
    from kubernetes import client

    custom: Any = client.CustomObjectsApi(crd_api)
    stored = custom.get_cluster_custom_object(GROUP, "v2", "queues", f"{release}-team")
    assert stored["spec"]["parentQueue"] == f"{release}-root"

    sa = {component(s): s["metadata"]["name"] for s in by_kind(objs, "ServiceAccount").values()}
    user = {c: f"system:serviceaccount:{kube_namespace}:{n}" for c, n in sa.items()}
    other_ns = "default"
    allowed = [
        ("ingest", "watch", "pods", ""),
        ("ingest", "list", "nodes", ""),
        ("ingest", "watch", "queues", GROUP),
        ("ingest", "watch", "topologies", "kai.scheduler"),
        ("ingest", "create", "podgroups", GROUP),
        ("ingest", "create", "events", ""),
        ("ingest", "get", "pytorchjobs", "kubeflow.org"),
        ("binder", "create", "pods/binding", ""),
        ("binder", "delete", "pods", ""),
        ("binder", "patch", "pods/status", ""),
        ("binder", "patch", "events", ""),
        ("binder", "update", "queues/status", GROUP),
        ("binder", "patch", "podgroups/status", GROUP),
    ]
    denied = [
        ("scheduler", "list", "pods", ""),
        ("scheduler", "get", "queues", GROUP),
        ("fairshare", "list", "pods", ""),
        ("fairshare", "get", "nodes", ""),
        ("binder", "list", "secrets", ""),
        ("binder", "get", "secrets", ""),
        ("binder", "update", "pods", ""),
        ("binder", "update", "queues", GROUP),
        ("binder", "create", "podgroups", GROUP),
        ("ingest", "get", "secrets", ""),
        ("ingest", "delete", "pods", ""),
        ("ingest", "create", "pods/binding", ""),
        ("ingest", "list", "jobs", "batch"),
        ("ingest", "update", "topologies", "kai.scheduler"),
    ]
    # The RBAC authorizer reads bindings from an informer: give it a moment to see the new ones.
    deadline = time.monotonic() + 15
    while not all(_can(crd_api, user[c], v, r, g, other_ns) for c, v, r, g in allowed):
        assert time.monotonic() < deadline, [
            (c, v, r) for c, v, r, g in allowed if not _can(crd_api, user[c], v, r, g, other_ns)
        ]
        time.sleep(0.3)
    wrongly = [(c, v, r) for c, v, r, g in denied if _can(crd_api, user[c], v, r, g, other_ns)]
    assert not wrongly, f"allowed but must be denied: {wrongly}"


# ------------------------------------------------------------------------------------ Grafana dashboard


def _queue_record(name: str, vec: dict[str, int], parent: str | None = None) -> Any:
    """A QueueRecord (engine units) with every quantity equal to ``vec``."""
    from scheduler.engine.record.decisions import QueueRecord

    return QueueRecord(
        name=name, parent=parent, priority=100, deserved=dict(vec), limit=dict(vec),
        over_quota_weight={"gpu": "1", "cpu": "1", "memory": "1"}, requested=vec, allocated=vec,
        allocated_non_preemptible=vec, fair_share=vec, fair_share_classic=vec, k_adjustment=vec,
        usage={"gpu": 0.5, "cpu": 0.1, "memory": 0.1},
    )  # fmt: skip


def _scheduler_metrics() -> Any:
    """Real scheduler metrics after one cycle of a two-level queue tree with every kind of decision."""
    from scheduler.engine.record.decisions import CycleRecord, Decision
    from scheduler.metrics import SchedulerMetrics, observe_cycle, observe_dead_letters

    vec = {"gpu": 1000, "cpu": 2000, "memory": 10**9}
    queues = [_queue_record("org", vec), _queue_record("team-a", vec, parent="org")]
    record = CycleRecord(
        cycle_id="c1", events_offset=1, usage_snapshot_id=None, config_hash="h", logical_time_ms=1000,
        queues=queues,
        decisions=[
            Decision(kind="Bind", job="j", queue="team-a", pod="p", node="n", action="allocate"),
            Decision(kind="Pipeline", job="j", queue="team-a", pod="p2", node="n", action="reclaim"),
            Decision(kind="Evict", job="k", queue="team-a", pod="v", node="n", action="reclaim"),
            Decision(kind="Unschedulable", job="u", queue="team-a", reason="OverLimit"),
        ],
    )  # fmt: skip
    m = SchedulerMetrics.create()
    observe_cycle(m, record, {"cycle": 0.01, "allocate": 0.005}, capacity={k: 4 * v for k, v in vec.items()})
    observe_dead_letters(m, ["bad-json"])
    return m


def _exported_metric_names() -> set[str]:
    """Every sample name the scheduler's /metrics serves once it has seen a cycle."""
    from prometheus_client import generate_latest

    text = generate_latest(_scheduler_metrics().registry).decode()
    return {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")
    }


def _dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every dashboard query, variables set as a user would (gpu, all queues)."""
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            expr = t["expr"].replace("$resource", "gpu").replace('queue=~"$queue"', 'queue=~".*"')
            out.append((p["title"], expr))
    return out


def test_dashboard_queries_only_exported_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if v.get("definition")]
    used = {n for e in exprs for n in re.findall(r"\bhourglass_[a-z_]+", e)}
    exported = _exported_metric_names()
    assert used, "the dashboard queries no Hourglass metric"
    assert used <= exported, (
        f"dashboard uses metrics the scheduler does not export: {sorted(used - exported)}"
    )
    # Everything per-queue and the cycle latency are on the dashboard.
    for name in (
        "hourglass_queue_allocated",
        "hourglass_queue_deserved",
        "hourglass_queue_fair_share",
        "hourglass_queue_fair_share_classic",
        "hourglass_queue_requested",
        "hourglass_queue_usage",
        "hourglass_cluster_capacity",
        "hourglass_cycle_duration_seconds_bucket",
    ):
        assert name in used, f"{name} is not on the dashboard"


def test_dashboard_is_importable_grafana_json() -> None:
    from scheduler.engine.proportion import RESOURCES

    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 36
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    # Panels must not overlap on the 24-column grid, or Grafana reflows them unpredictably.
    cells: set[tuple[int, int]] = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"panel {p['title']!r} overlaps another"
        cells |= mine
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert {"datasource", "queue", "resource"} <= set(variables)
    assert [o["value"] for o in variables["resource"]["options"]] == list(RESOURCES)
    used_vars = {
        v for p in dash["panels"] for t in p.get("targets", []) for v in re.findall(r"\$(\w+)", t["expr"])
    }
    assert used_vars <= set(variables) | {"__rate_interval", "__interval"}


def test_chart_ships_the_same_dashboard_for_the_grafana_sidecar(helm: str) -> None:
    copy = CHART / "dashboards" / DASHBOARD.name
    assert copy.read_bytes() == DASHBOARD.read_bytes(), f"{copy} differs from {DASHBOARD}: copy it over"
    assert "ConfigMap" not in {o["kind"] for o in render(helm) if "dashboard" in o["metadata"]["name"]}
    objs = render(
        helm, "--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.namespace=monitoring"
    )
    (cm,) = (o for o in by_kind(objs, "ConfigMap").values() if o["metadata"]["name"].endswith("-dashboard"))
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"][DASHBOARD.name]) == json.loads(DASHBOARD.read_text())


def test_every_dashboard_query_returns_data_from_a_real_prometheus(prometheus_server: Any) -> None:
    """Prometheus scrapes a real scheduler /metrics; each panel's query is valid PromQL and has data."""
    import urllib.parse
    import urllib.request

    from scheduler.metrics import serve

    def query(prom_url: str, expr: str) -> list[Any]:
        url = f"{prom_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        result: list[Any] = body["data"]["result"]
        return result

    with serve(_scheduler_metrics(), "127.0.0.1", 0) as endpoint:
        prom = prometheus_server(scrape_targets=[f"127.0.0.1:{endpoint.port}"])
        # rate() and histogram_quantile() need two scrapes of the counters.
        deadline = time.monotonic() + 30
        while not query(prom.url, "count_over_time(hourglass_cycles_total[1m]) >= 3"):
            assert time.monotonic() < deadline, "Prometheus did not scrape the scheduler 3 times in 30 s"
            time.sleep(0.5)
        empty = [(title, expr) for title, expr in _dashboard_queries() if not query(prom.url, expr)]
        assert not empty, f"dashboard queries with no data: {empty}"
        url = f"{prom.url}/api/v1/label/queue/values?match[]=hourglass_queue_allocated"
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert json.loads(resp.read())["data"] == ["org", "team-a"]  # the $queue variable's choices


# ------------------------------------------------------------------------------------- compose stack


def test_compose_stack_references_existing_files_and_real_commands() -> None:
    compose = yaml.safe_load((COMPOSE_DIR / "docker-compose.yaml").read_text())
    services = compose["services"]
    assert {"kafka", "scheduler", "fairshare", "ingest", "binder", "prometheus", "grafana"} <= set(services)
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft
    named_volumes = set(compose.get("volumes", {}))
    for name, svc in services.items():
        build = svc.get("build")
        if build:
            context = (COMPOSE_DIR / build["context"]).resolve()
            assert (context / build["dockerfile"]).is_file(), f"{name}: Dockerfile missing"
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("$") or src in named_volumes:
                continue
            assert (COMPOSE_DIR / src).exists(), f"{name}: mounts {src}, which does not exist"
        if build:
            args = parse_cli(list(svc["command"]))
            assert args.log == "kafka://kafka:9092"
    # Prometheus scrapes the scheduler on the port the scheduler serves.
    prom = yaml.safe_load((COMPOSE_DIR / "prometheus.yml").read_text())
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    sched = parse_cli(list(services["scheduler"]["command"]))
    assert sched.metrics_host == "0.0.0.0"
    # One fair-share setting: the scheduler and fairshare read the same file, mounted at the path they name.
    from fairshare.settings import cli_overrides, load_settings

    loaded = []
    for name in ("scheduler", "fairshare"):
        args = parse_cli(list(services[name]["command"]))
        mounts = dict(v.split(":")[:2] for v in services[name]["volumes"])
        host = next(h for h, c in mounts.items() if c == args.fairshare_config)
        loaded.append(load_settings(COMPOSE_DIR / host, cli_overrides(args), environ={}).settings)
    assert loaded[0] == loaded[1] and loaded[0].k_value > 0
    assert f"scheduler:{sched.metrics_port}" in targets
    # ... and the binder and fairshare on theirs (KAI's bind and usage-query latency).
    for name in ("binder", "fairshare"):
        args = parse_cli(list(services[name]["command"]))
        assert args.metrics_host == "0.0.0.0"
        assert f"{name}:{args.metrics_port}" in targets
    # Grafana gets the dashboard through the provisioning provider's path.
    grafana_mounts = dict(v.split(":")[:2] for v in services["grafana"]["volumes"])
    provider = yaml.safe_load((COMPOSE_DIR / "grafana/provisioning/dashboards/hourglass.yaml").read_text())
    dash_path = provider["providers"][0]["options"]["path"]
    host_dir = next(h for h, c in grafana_mounts.items() if c == dash_path)
    assert (COMPOSE_DIR / host_dir / DASHBOARD.name).resolve() == DASHBOARD.resolve()


def test_dockerfile_copies_what_the_package_needs() -> None:
    text = (COMPOSE_DIR / "Dockerfile").read_text()
    copied = {
        line.split()[1] for line in text.splitlines() if line.startswith("COPY ") and "--from" not in line
    }
    for src in copied:
        assert (REPO_ROOT / src).exists(), f"Dockerfile copies {src}, which does not exist"
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    packages = re.search(r"include = \[([^\]]*)\]", pyproject)
    assert packages is not None
    for pkg in re.findall(r'"(\w+)\*"', packages.group(1)):
        assert pkg in copied, f"Dockerfile does not copy package {pkg}"
    assert "USER 10001" in text  # the uid the Helm chart's runAsNonRoot security context expects
