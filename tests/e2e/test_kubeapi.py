"""The real Kubernetes API semantics Hourglass relies on, against a real kube-apiserver + etcd.

These pin down what the watcher (list + watch, resourceVersion, bookmarks, 410 Gone), the binder (the
binding subresource, 201 then 409) and the deploy manifests (CRD schema validation, RBAC) may assume,
with the kubernetes Python client the project uses. See docs/kube-apiserver.md.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client import ApiException

from tests.support.kubeapi import KubeAPI
from tests.support.paths import REPO_ROOT

GPU = "nvidia.com/gpu"
# The generated client's models are typed, its watch helper is not; the tests read fields loosely.
_Watch: Any = watch.Watch


@pytest.fixture
def api(kube_api: KubeAPI) -> Iterator[Any]:
    with kube_api.api_client() as api_client:
        yield api_client


def _pod(name: str, gpus: int = 1, labels: dict[str, str] | None = None) -> Any:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels or {}),
        spec=client.V1PodSpec(
            scheduler_name="hourglass",
            automount_service_account_token=False,
            containers=[
                client.V1Container(
                    name="main",
                    image="registry.k8s.io/pause:3.10",
                    # Extended resources: requests must equal limits, so limits alone is enough.
                    resources=client.V1ResourceRequirements(limits={GPU: str(gpus)}),
                )
            ],
        ),
    )


def _binding(pod: str, node: str) -> Any:
    return client.V1Binding(
        metadata=client.V1ObjectMeta(name=pod),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )


def _make_gpu_node(core: Any, name: str, gpus: int) -> None:
    """Create a node, then set its capacity the way a kubelet does: through the status subresource."""
    resources = {GPU: str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels={"hourglass-test": "1"})))
    core.patch_node_status(name, {"status": {"capacity": resources, "allocatable": resources}})


def test_node_status_changes_only_through_the_status_subresource(api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    name = f"gpu-node-{uuid.uuid4().hex[:8]}"
    created = core.create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(name=name),
            status=client.V1NodeStatus(allocatable={GPU: "8"}, capacity={GPU: "8"}),
        )
    )
    # Unlike pods, a node keeps the status it is created with (kubelets register that way).
    assert created.status.allocatable == {GPU: "8"}
    # TaintNodesByCondition marks every new node not-ready until a kubelet says otherwise.
    taints = {(t.key, t.effect) for t in created.spec.taints or []}
    assert ("node.kubernetes.io/not-ready", "NoSchedule") in taints

    # A patch of the node itself silently drops status changes...
    core.patch_node(name, {"metadata": {"labels": {"pool": "a100"}}, "status": {"allocatable": {GPU: "4"}}})
    node = core.read_node(name)
    assert node.metadata.labels["pool"] == "a100"
    assert node.status.allocatable == {GPU: "8"}

    # ...only the status subresource changes capacity / allocatable.
    resources = {GPU: "4", "cpu": "64", "memory": "512Gi", "pods": "110"}
    core.patch_node_status(name, {"status": {"capacity": resources, "allocatable": resources}})
    node = core.read_node(name)
    assert node.status.allocatable[GPU] == "4"
    assert node.status.capacity["memory"] == "512Gi"
    core.delete_node(name)


def test_pending_pod_is_bound_once_through_the_binding_subresource(api: Any, kube_namespace: str) -> None:
    core: Any = client.CoreV1Api(api)
    node, other = f"gpu-node-{uuid.uuid4().hex[:8]}", f"gpu-node-{uuid.uuid4().hex[:8]}"
    _make_gpu_node(core, node, 8)
    _make_gpu_node(core, other, 8)

    core.create_namespaced_pod(kube_namespace, _pod("train-0", gpus=2))
    pending = core.read_namespaced_pod("train-0", kube_namespace)
    # No default scheduler runs and schedulerName is ours: the pod waits for us, unbound.
    assert pending.spec.scheduler_name == "hourglass"
    assert pending.spec.node_name is None
    assert pending.status.phase == "Pending"
    assert pending.spec.service_account_name is None  # ServiceAccount admission is off (no controller)

    # The generated client cannot parse the 201 Status the server returns for a binding, so read the
    # raw response (see research/dependency-notes.md, "Binding quirk").
    response = core.create_namespaced_pod_binding(
        "train-0", kube_namespace, _binding("train-0", node), _preload_content=False
    )
    assert response.status == 201
    assert json.loads(response.data)["status"] == "Success"

    bound = core.read_namespaced_pod("train-0", kube_namespace)
    assert bound.spec.node_name == node
    scheduled = {c.type: c.status for c in bound.status.conditions or []}
    assert scheduled.get("PodScheduled") == "True"

    # A second bind, to the same node or another one, is a conflict: the binder must treat 409 as
    # "already bound" and read the pod to see where.
    for target in (node, other):
        with pytest.raises(ApiException) as conflict:
            core.create_namespaced_pod_binding(
                "train-0", kube_namespace, _binding("train-0", target), _preload_content=False
            )
        assert conflict.value.status == 409
    assert core.read_namespaced_pod("train-0", kube_namespace).spec.node_name == node

    # POST /namespaces/{ns}/bindings is the same operation.
    core.create_namespaced_pod(kube_namespace, _pod("train-1"))
    response = core.create_namespaced_binding(
        kube_namespace, _binding("train-1", other), _preload_content=False
    )
    assert response.status == 201
    assert core.read_namespaced_pod("train-1", kube_namespace).spec.node_name == other

    for name in (node, other):
        core.delete_node(name)


def test_list_then_watch_from_its_resource_version_with_bookmarks(api: Any, kube_namespace: str) -> None:
    core: Any = client.CoreV1Api(api)
    core.create_namespaced_pod(kube_namespace, _pod("before-list"))
    listed = core.list_namespaced_pod(kube_namespace)
    list_rv = listed.metadata.resource_version
    assert [p.metadata.name for p in listed.items] == ["before-list"]

    created = core.create_namespaced_pod(kube_namespace, _pod("after-list", labels={"queue": "a"}))
    patched = core.patch_namespaced_pod(
        "after-list", kube_namespace, {"metadata": {"labels": {"queue": "b"}}}
    )
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version) > int(list_rv)

    # Watch from the list's resourceVersion: exactly the changes after the list, in order. Then a pod
    # in another namespace moves the pods resourceVersion past this watch's last event, and the
    # server tells the watch so with a BOOKMARK (sent 2 s before the watch's timeout). Without such a
    # change there is nothing newer to bookmark and none is sent.
    events: list[dict[str, Any]] = []
    elsewhere: Any = None
    try:
        for event in _Watch().stream(
            core.list_namespaced_pod,
            kube_namespace,
            resource_version=list_rv,
            allow_watch_bookmarks=True,
            timeout_seconds=10,  # slack for a loaded machine: the bump must land before the bookmark is due
        ):
            events.append(event)
            if len(events) == 2:
                elsewhere = core.create_namespaced_pod("default", _pod(f"bump-{uuid.uuid4().hex[:8]}"))
    finally:
        if elsewhere is not None:
            core.delete_namespaced_pod(elsewhere.metadata.name, "default", grace_period_seconds=0)
    assert elsewhere is not None, f"expected 2 events, got {[e['type'] for e in events]}"
    changes = [(e["type"], e["raw_object"]["metadata"]["name"]) for e in events if e["type"] != "BOOKMARK"]
    assert changes == [("ADDED", "after-list"), ("MODIFIED", "after-list")]
    assert events[1]["object"].metadata.labels == {"queue": "b"}  # typed objects for real events
    bookmarks = [e["raw_object"] for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks, "no BOOKMARK event before the watch timed out"
    # A bookmark is a bare object of the watched kind: only metadata.resourceVersion is meaningful.
    assert bookmarks[-1]["kind"] == "Pod"
    assert int(bookmarks[-1]["metadata"]["resourceVersion"]) >= int(elsewhere.metadata.resource_version)


def test_watch_from_a_too_old_resource_version_is_gone(api: Any, kube_namespace: str) -> None:
    core: Any = client.CoreV1Api(api)
    core.create_namespaced_pod(kube_namespace, _pod("p"))
    # resourceVersion "1" predates the watch cache's window (it starts at the resourceVersion of its
    # initial list; apiserver.sh gives etcd some history first, as any real cluster has): the server
    # answers with an ERROR event carrying a 410 Status, which watch.stream raises as ApiException
    # (timeout_seconds disables its single retry). The watcher must then relist.
    with pytest.raises(ApiException) as gone:
        for _ in _Watch().stream(
            core.list_namespaced_pod, kube_namespace, resource_version="1", timeout_seconds=5
        ):
            pass
    assert gone.value.status == 410
    assert "too old resource version" in str(gone.value.reason)


def _widget_crd(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["gpus"],
                                    "properties": {
                                        "gpus": {"type": "integer", "minimum": 0},
                                        "queue": {"type": "string", "minLength": 1},
                                    },
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


def _wait_established(ext: Any, name: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        crd = ext.read_custom_resource_definition(name)
        conditions = {c.type: c.status for c in crd.status.conditions or []}
        if conditions.get("Established") == "True":
            return
        assert time.monotonic() < deadline, f"CRD {name} not Established after {timeout_s} s: {conditions}"
        time.sleep(0.1)


def test_custom_resource_schema_is_enforced(api: Any, kube_namespace: str) -> None:
    ext: Any = client.ApiextensionsV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    group = f"t{uuid.uuid4().hex[:8]}.hourglass.test"
    crd = ext.create_custom_resource_definition(
        client.V1CustomResourceDefinition.from_dict(_widget_crd(group))
    )
    _wait_established(ext, crd.metadata.name)

    def widget(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}

    # Discovery of a brand-new group can lag a moment behind Established.
    deadline = time.monotonic() + 30
    while True:
        try:
            custom.create_namespaced_custom_object(
                group, "v1", kube_namespace, "widgets", widget("ok", {"gpus": 2, "queue": "team-a"})
            )
            break
        except ApiException as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    stored = custom.get_namespaced_custom_object(group, "v1", kube_namespace, "widgets", "ok")
    assert stored["spec"] == {"gpus": 2, "queue": "team-a"}

    for bad_spec, field in (({"gpus": -1}, "spec.gpus"), ({"gpus": "two"}, "spec.gpus"), ({}, "spec.gpus")):
        with pytest.raises(ApiException) as invalid:
            custom.create_namespaced_custom_object(
                group, "v1", kube_namespace, "widgets", widget("bad", bad_spec)
            )
        assert invalid.value.status == 422
        assert field in str(invalid.value.body)
    ext.delete_custom_resource_definition(crd.metadata.name)


def test_deploy_crds_are_accepted_by_a_real_apiserver(api: Any) -> None:
    ext: Any = client.ApiextensionsV1Api(api)
    paths = sorted((REPO_ROOT / "deploy" / "crds").glob("*.yaml"))
    if not paths:
        pytest.skip("no CRDs under deploy/crds")
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            name = doc["metadata"]["name"]
            try:
                ext.create_custom_resource_definition(client.V1CustomResourceDefinition.from_dict(doc))
            except ApiException as exc:
                if exc.status != 409:  # already applied by an earlier run against the same cluster
                    raise AssertionError(f"{path.name}: {exc.status} {exc.body}") from exc
            _wait_established(ext, name)


def test_rbac_is_enforced_for_a_user_without_bindings(
    kube_api: KubeAPI, api: Any, kube_namespace: str
) -> None:
    if kube_api.user_token is None:
        pytest.skip("needs the fixture's unprivileged token (KUBECONFIG_HOURGLASS_TEST points elsewhere)")
    with kube_api.api_client(token=kube_api.user_token) as user_api:
        as_user: Any = client.CoreV1Api(user_api)
        with pytest.raises(ApiException) as denied:
            as_user.list_namespaced_pod(kube_namespace)
        assert denied.value.status == 403

        rbac: Any = client.RbacAuthorizationV1Api(api)
        rbac.create_namespaced_role(
            kube_namespace,
            client.V1Role(
                metadata=client.V1ObjectMeta(name="pod-reader"),
                rules=[
                    client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list", "watch"])
                ],
            ),
        )
        rbac.create_namespaced_role_binding(
            kube_namespace,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name="pod-reader"),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"
                ),
                subjects=[
                    client.RbacV1Subject(
                        kind="User", name="hourglass-tester", api_group="rbac.authorization.k8s.io"
                    )
                ],
            ),
        )
        # The authorizer reads roles from an informer cache: allow it a moment to catch up.
        deadline = time.monotonic() + 10
        while True:
            try:
                assert as_user.list_namespaced_pod(kube_namespace).items == []
                break
            except ApiException as exc:
                if exc.status != 403 or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with pytest.raises(ApiException) as still_denied:
            as_user.create_namespaced_pod(kube_namespace, _pod("nope"))
        assert still_denied.value.status == 403
