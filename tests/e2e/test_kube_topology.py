"""KAI Topology objects on a real kube-apiserver (tests/support/kubeapi.py): the CRD, the watch, a gang kept in one rack.

* The shipped Topology CRD (``deploy/crds/kai.scheduler_topologies.yaml``) accepts KAI's example and refuses
  what KAI's schema refuses.
* Ingest watches Topologies: with the CRD installed, a Topology and rack-labelled nodes, a PodGroup whose
  ``topologyConstraint`` requires a rack is placed and bound within one rack; a second one that no rack can
  hold (though the cluster has the GPUs free across racks) waits with the topology reason on its pods.
  A PyTorchJob with KAI's ``kai.scheduler/topology`` / ``-required-placement`` annotations gets the
  constraint on the PodGroup the pod grouper makes, and its gang lands in one rack too.
* Without the CRD, ingest logs one clear line and every other kind keeps flowing; once the CRD is installed
  the Topology arrives without a restart, and a restart resumes without duplicates. Without permission on
  Topologies (a role that predates them), the same: one line naming the missing permission.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ingest.events import parse_event
from ingest.filelog import FileLog
from ingest.kube.client import KubeApi, KubeError
from ingest.kube.watcher import STORAGE_RESOURCES, KubeIngest
from ingest.log import DEFAULT_TOPICS, Log
from tests.support.kube_objects import (
    TOPOLOGY_GROUP,
    TOPOLOGY_PLURAL,
    TOPOLOGY_VERSION,
    apply_crds,
    create_topology,
    make_node,
    make_pod,
    make_podgroup,
    make_queue,
    read_pod,
)
from tests.support.kube_pipeline import Pipeline, last_decisions

CRD_NAME = "topologies.kai.scheduler"
BLOCK, RACK = "topology.hourglass.test/block", "topology.hourglass.test/rack"


def _events(log: Log) -> list[Any]:
    return [parse_event(r.value) for r in log.read(DEFAULT_TOPICS.events, 0, 1_000_000)]


def _counts(log: Log, name_prefix: str) -> Counter[tuple[str, str]]:
    return Counter(
        (str(e.type), str(e.name))
        for e in _events(log)
        if str(getattr(e, "name", "")).startswith(name_prefix)
    )


# --------------------------------------------------------------------------- the CRD

INVALID: list[tuple[str, list[str] | None, str]] = [
    ("no-spec", None, "spec.levels: Required value"),
    ("no-levels", [], "spec.levels: Invalid value"),
    ("repeated", [RACK, RACK], "must be unique"),
    ("hostname-not-last", ["kubernetes.io/hostname", RACK], "can only be used at the lowest level"),
    ("not-a-label", ["rack label!"], "spec.levels[0].nodeLabel"),
]


@pytest.mark.parametrize(("case", "levels", "message"), INVALID, ids=[c[0] for c in INVALID])
def test_topology_crd_refuses_what_kai_refuses(
    kube_api: Any, kube_namespace: str, case: str, levels: list[str] | None, message: str
) -> None:
    from kubernetes.client.exceptions import ApiException

    with kube_api.api_client() as api:
        apply_crds(api)
        with pytest.raises(ApiException) as refused:
            create_topology(api, f"{kube_namespace}-{case}", levels)
        assert refused.value.status == 422 and message in str(refused.value.body), refused.value.body


def test_topology_crd_accepts_kais_example_and_keeps_its_levels_fixed(
    kube_api: Any, kube_namespace: str
) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    name = f"{kube_namespace}-dc"
    levels = [
        "cloud.provider.com/topology-block",
        "cloud.provider.com/topology-rack",
        "kubernetes.io/hostname",
    ]
    with kube_api.api_client() as api:
        apply_crds(api)
        create_topology(api, name, levels)
        custom: Any = client.CustomObjectsApi(api)
        got = custom.get_cluster_custom_object(TOPOLOGY_GROUP, TOPOLOGY_VERSION, TOPOLOGY_PLURAL, name)
        assert [lv["nodeLabel"] for lv in got["spec"]["levels"]] == levels
        got["spec"]["levels"] = got["spec"]["levels"][1:]
        with pytest.raises(ApiException) as refused:
            custom.replace_cluster_custom_object(TOPOLOGY_GROUP, TOPOLOGY_VERSION, TOPOLOGY_PLURAL, name, got)
        assert refused.value.status == 422 and "nodeLabel structure is immutable" in str(refused.value.body)
        # KAI v0.17: a level's alias is kept (not pruned) and may be edited after creation.
        got = custom.get_cluster_custom_object(TOPOLOGY_GROUP, TOPOLOGY_VERSION, TOPOLOGY_PLURAL, name)
        got["spec"]["levels"][1]["alias"] = "rack"
        custom.replace_cluster_custom_object(TOPOLOGY_GROUP, TOPOLOGY_VERSION, TOPOLOGY_PLURAL, name, got)
        got = custom.get_cluster_custom_object(TOPOLOGY_GROUP, TOPOLOGY_VERSION, TOPOLOGY_PLURAL, name)
        assert [lv.get("alias") for lv in got["spec"]["levels"]] == [None, "rack", None]


# --------------------------------------------------------------------------- ingest -> scheduler -> binder


def test_rack_constrained_gang_is_placed_within_one_rack(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns = kube_namespace
    sel = {"hourglass-e2e": ns}
    topo, queue = f"{ns}-dc", f"{ns}-q"
    # Rack r1: one node with 3 GPUs; r2: two nodes with 2 GPUs each; r3: one node with 1 GPU. A gang of 4
    # one-GPU pods fits only in r2 (r1's 3 GPUs and one more elsewhere would hold it, across racks).
    racks = {f"{ns}-n1": ("r1", 3), f"{ns}-n2": ("r2", 2), f"{ns}-n3": ("r2", 2), f"{ns}-n4": ("r3", 1)}
    rack_of = {node: rack for node, (rack, _) in racks.items()}
    constraint = {"topology": topo, "requiredTopologyLevel": RACK}
    with kube_api.api_client() as api:
        apply_crds(api)
        create_topology(api, topo, [BLOCK, RACK])
        for node, (rack, gpus) in racks.items():
            make_node(api, node, gpus=gpus, labels={**sel, BLOCK: "b1", RACK: rack})
        make_queue(api, queue, gpu_quota=8)
        make_podgroup(api, ns, "train", queue, 4, topologyConstraint=constraint)
        for i in range(4):
            make_pod(
                api,
                ns,
                f"train-{i}",
                gpus=1,
                queue=queue,
                node_selector=sel,
                annotations={"pod-group-name": "train"},
            )
        log = FileLog(tmp_path / "log")
        p = Pipeline(api, ns, log)
        p.ingest.start()
        try:
            p.settle(lambda: all("nodeName" in read_pod(api, ns, f"train-{i}")["spec"] for i in range(4)))
            nodes = {read_pod(api, ns, f"train-{i}")["spec"]["nodeName"] for i in range(4)}
            assert {rack_of[n] for n in nodes} == {"r2"}, nodes
            binds = last_decisions(log, "Bind")
            assert {binds[f"{ns}/train-{i}"]["node"] for i in range(4)} == nodes

            # A second gang of 4: 4 GPUs are free (3 in r1, 1 in r3) but no rack has 4, so it waits and says why.
            make_podgroup(api, ns, "late", queue, 4, topologyConstraint=constraint)
            for i in range(4):
                make_pod(
                    api,
                    ns,
                    f"late-{i}",
                    gpus=1,
                    queue=queue,
                    node_selector=sel,
                    annotations={"pod-group-name": "late"},
                )

            def late_told() -> bool:
                conds = read_pod(api, ns, "late-0").get("status", {}).get("conditions") or []
                return any(c["type"] == "PodScheduled" for c in conds)

            p.settle(late_told)
        finally:
            p.ingest.stop()
        for i in range(4):
            assert "nodeName" not in read_pod(api, ns, f"late-{i}")["spec"]
        cond = next(
            c for c in read_pod(api, ns, "late-0")["status"]["conditions"] if c["type"] == "PodScheduled"
        )
        assert cond["reason"] == "Unschedulable" and "Topology constraint not met" in cond["message"], cond
        assert f"one {RACK} domain" in cond["message"] and "has 3 of the 4 GPUs" in cond["message"], cond
        ups = [e for e in _events(log) if e.type == "TopologyUpserted" and e.name == topo]
        assert [e.levels for e in ups] == [[BLOCK, RACK]]
        assert not list(log.read(DEFAULT_TOPICS.deadletter, 0, 1000))


# --------------------------------------------------------------------------- the CRD absent, then installed


def _delete_topology_crd(api: Any) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext = client.ApiextensionsV1Api(api)
    try:
        ext.delete_custom_resource_definition(CRD_NAME)
    except ApiException as exc:
        if exc.status != 404:
            raise
    deadline = time.monotonic() + 60
    while True:
        try:
            ext.read_custom_resource_definition(CRD_NAME)
        except ApiException as exc:
            if exc.status == 404:
                break
            raise
        assert time.monotonic() < deadline, "the Topology CRD was not deleted in time"
        time.sleep(0.2)
    # The API server stops serving the resource a moment after the CRD is gone.
    while True:
        try:
            KubeApi(api).request("GET", f"/apis/{TOPOLOGY_GROUP}/{TOPOLOGY_VERSION}/{TOPOLOGY_PLURAL}")
        except KubeError as exc:
            if exc.status == 404:
                return
        assert time.monotonic() < deadline, "topologies are still served"
        time.sleep(0.2)


def _pump(ingest: KubeIngest, done: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "ingest did not deliver the expected events in time"
        ingest.step(0.2)


def test_without_the_topology_crd_ingest_says_so_once_and_keeps_flowing(
    kube_api: Any, kube_namespace: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ns = kube_namespace
    topo = f"{ns}-dc"
    state = tmp_path / "state.json"
    caplog.set_level(logging.INFO, logger="ingest.kube.watcher")
    with kube_api.api_client() as api:
        apply_crds(api)
        _delete_topology_crd(api)
        try:
            make_queue(api, f"{ns}-q")
            make_pod(api, ns, "a", queue=f"{ns}-q")
            with FileLog(tmp_path / "log") as log:
                ingest = KubeIngest(
                    KubeApi(api), log, state_path=state, namespace=ns, watch_timeout_s=5, absent_retry_s=0.3
                )
                ingest.start()
                try:
                    _pump(ingest, lambda: ("PodSubmitted", "a") in _counts(log, "a"))
                    _pump(ingest, lambda: ingest.stats.absent_lists >= 3)  # start, then the watch's retries
                    absent = [
                        r for r in caplog.records if "topologies.kai.scheduler installed?" in r.getMessage()
                    ]
                    assert len(absent) == 1 and absent[0].levelno == logging.WARNING
                    assert "every other kind keeps flowing" in absent[0].getMessage()
                    # The CRD is installed later: the Topology arrives without a restart.
                    apply_crds(api)
                    create_topology(api, topo, [BLOCK, RACK])
                    _pump(ingest, lambda: ("TopologyUpserted", topo) in _counts(log, topo))
                    assert any("is served and readable now" in r.getMessage() for r in caplog.records)
                finally:
                    ingest.stop()
                # A restart resumes the Topology watch from its stored resourceVersion: no relist, no duplicate
                # (only the storage kinds' in-memory caches are listed on every start).
                again = KubeIngest(KubeApi(api), log, state_path=state, namespace=ns, watch_timeout_s=5)
                again.start()
                try:
                    from kubernetes import client

                    client.CustomObjectsApi(api).delete_cluster_custom_object(
                        TOPOLOGY_GROUP, TOPOLOGY_VERSION, TOPOLOGY_PLURAL, topo
                    )
                    _pump(again, lambda: ("TopologyDeleted", topo) in _counts(log, topo))
                finally:
                    again.stop()
                assert again.stats.lists == len(STORAGE_RESOURCES) and again.stats.absent_lists == 0
                assert _counts(log, topo) == {("TopologyUpserted", topo): 1, ("TopologyDeleted", topo): 1}
        finally:
            apply_crds(api)


def test_without_permission_on_topologies_ingest_says_so_once_and_keeps_flowing(
    kube_api: Any, kube_namespace: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An ingest whose role predates Topologies (no rule for them): 403, one warning, the rest flows."""
    from kubernetes import client

    ns = kube_namespace
    user = f"{ns}-ingest"
    caplog.set_level(logging.INFO, logger="ingest.kube.watcher")
    with kube_api.api_client() as admin:
        apply_crds(admin)
        rbac = client.RbacAuthorizationV1Api(admin)
        rules = [
            {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["scheduling.run.ai"], "resources": ["queues"], "verbs": ["get", "list", "watch"]},
            {
                "apiGroups": ["scheduling.run.ai"],
                "resources": ["podgroups"],
                "verbs": ["get", "list", "watch", "create", "patch"],
            },
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        ]
        rbac.create_cluster_role({"metadata": {"name": user}, "rules": rules})
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": user},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
            }
        )
        make_queue(admin, f"{ns}-q")
        make_pod(admin, ns, "a", queue=f"{ns}-q")
        with kube_api.api_client() as api:
            api.set_default_header("Impersonate-User", user)  # the admin acts as the narrow ingest user
            as_user = KubeApi(api)
            deadline = time.monotonic() + 30
            while True:  # the RBAC authorizer sees a new binding after a moment
                try:
                    as_user.request("GET", "/api/v1/nodes", {"limit": 1})
                    break
                except Exception:
                    assert time.monotonic() < deadline, "the binding did not take effect"
                    time.sleep(0.3)
            with FileLog(tmp_path / "log") as log:
                ingest = KubeIngest(as_user, log, namespace=ns, watch_timeout_s=5, absent_retry_s=0.3)
                ingest.start()
                try:
                    _pump(ingest, lambda: ("PodSubmitted", "a") in _counts(log, "a"))
                    _pump(ingest, lambda: ingest.stats.absent_lists >= 3)
                finally:
                    ingest.stop()
                assert not [e for e in _events(log) if e.type.startswith("Topology")]
        forbidden = [r for r in caplog.records if "403 Forbidden" in r.getMessage()]
        # One line per optional kind the role does not cover: Topologies, and DRA's ResourceSlices.
        topology = [r for r in forbidden if r.getMessage().startswith("Topology:")]
        assert len(topology) == 1 and "grant it get, list and watch" in topology[0].getMessage()
        assert len([r for r in forbidden if r.getMessage().startswith("ResourceSlice:")]) == 1


def test_kai_topology_annotations_on_a_pytorchjob_keep_its_gang_in_one_rack(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    """KAI's way: the workload carries ``kai.scheduler/topology*`` annotations, the pod grouper copies them."""
    from kubernetes import client

    from tests.support.kai_workload import PYTORCHJOB_CRD, ensure_crd, operator_pods

    ns = kube_namespace
    sel = {"hourglass-e2e": ns}
    topo, queue = f"{ns}-dc", f"{ns}-q"
    racks = {f"{ns}-n1": ("r1", 3), f"{ns}-n2": ("r2", 2), f"{ns}-n3": ("r2", 2), f"{ns}-n4": ("r3", 1)}
    template = {
        "spec": {
            "schedulerName": "hourglass",
            "nodeSelector": sel,
            "containers": [
                {
                    "name": "pytorch",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "100m"}},
                }
            ],
        }
    }
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": "ddp",
            "namespace": ns,
            "labels": {"kai.scheduler/queue": queue},
            "annotations": {
                "kai.scheduler/topology": topo,
                "kai.scheduler/topology-required-placement": RACK,
            },
        },
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": 3, "template": template},
            }
        },
    }
    with kube_api.api_client() as api:
        apply_crds(api)
        ensure_crd(api, PYTORCHJOB_CRD)
        create_topology(api, topo, [BLOCK, RACK])
        for node, (rack, gpus) in racks.items():
            make_node(api, node, gpus=gpus, labels={**sel, BLOCK: "b1", RACK: rack})
        make_queue(api, queue, gpu_quota=8)
        core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
        created = co.create_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", job)
        pods = []
        for pod in operator_pods(created):
            core.create_namespaced_pod(ns, pod)
            pods.append(pod["metadata"]["name"])
        with FileLog(tmp_path / "log") as log:
            p = Pipeline(api, ns, log)
            p.ingest.start()
            try:
                p.settle(lambda: all("nodeName" in read_pod(api, ns, n)["spec"] for n in pods))
            finally:
                p.ingest.stop()
            assert not list(log.read(DEFAULT_TOPICS.deadletter, 0, 1000))
        nodes = {read_pod(api, ns, n)["spec"]["nodeName"] for n in pods}
        assert nodes == {f"{ns}-n2", f"{ns}-n3"}, nodes
        groups = co.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", ns, "podgroups")["items"]
        (pg,) = [g for g in groups if g["metadata"]["name"].startswith("pg-ddp-")]
        assert pg["spec"]["minMember"] == 4
        assert pg["spec"]["topologyConstraint"] == {"topology": topo, "requiredTopologyLevel": RACK}
