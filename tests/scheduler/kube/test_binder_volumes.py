"""The binder's part of kube-scheduler's VolumeBinding PreBind: a Bind that names volumes for the pod's
WaitForFirstConsumer claims (``details.volumes``) binds them before the pod, and refuses to bind the pod when
the chosen volume was taken meanwhile. The plan test needs no server; the others use the ``kube_api``
fixture (tests/support/kubeapi.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from scheduler.engine.record.decisions import Decision
from scheduler.kube.binder import Binder, BinderApi, BindPod, Memory, plan
from tests.support.cycle_records import bind, record
from tests.support.kube_objects import FAST, apply_crds, make_node, make_pod, pod_events, read_pod
from tests.support.volume_controller import volume_controller


def _bind_with_volumes(pod: str, node: str, volumes: dict[str, str]) -> Decision:
    return bind(pod, node).model_copy(update={"details": {"volumes": volumes}})


def test_plan_carries_the_chosen_volumes_and_nothing_for_other_binds() -> None:
    rec = record([_bind_with_volumes("ns/a", "n1", {"scratch": "", "data": "pv-1"}), bind("ns/b", "n2")], [])
    a, b = plan(rec, Memory(), now=0.0).actions
    assert isinstance(a, BindPod) and a.volumes == (("data", "pv-1"), ("scratch", ""))
    assert isinstance(b, BindPod) and b.volumes == ()


def _claim(core: Any, ns: str, name: str) -> None:
    core.create_namespaced_persistent_volume_claim(
        ns,
        {
            "metadata": {"name": name},
            "spec": {
                "storageClassName": "local",
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )


def _volume(core: Any, name: str, claim_ref: dict[str, str] | None = None) -> None:
    spec: dict[str, Any] = {
        "storageClassName": "local",
        "capacity": {"storage": "10Gi"},
        "accessModes": ["ReadWriteOnce"],
        "hostPath": {"path": "/tmp/x"},
    }
    if claim_ref:
        spec["claimRef"] = claim_ref
    core.create_persistent_volume({"metadata": {"name": name}, "spec": spec})


def test_volumes_are_bound_before_the_pod_and_a_taken_volume_stops_the_bind(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kube_namespace
    node = f"{ns}-n1"
    free, taken = f"{ns}-free", f"{ns}-taken"
    with kube_api.api_client() as api:
        core = client.CoreV1Api(api)
        apply_crds(api)
        make_node(api, node)
        for c in ("a-data", "a-scratch", "b-data"):
            _claim(core, ns, c)
        _volume(core, free)
        _volume(core, taken, {"namespace": ns, "name": "someone-else"})
        make_pod(api, ns, "a")
        make_pod(api, ns, "b")
        log = FileLog(tmp_path / "log")
        rec = record(
            [
                _bind_with_volumes(f"{ns}/a", node, {"a-data": free, "a-scratch": ""}),
                _bind_with_volumes(f"{ns}/b", node, {"b-data": taken}),
            ],
            [],
        )
        log.append(DEFAULT_TOPICS.decisions, None, rec.dumps())
        with volume_controller(api, ns):  # the bind waits for the claims to be bound, as PreBind does
            st = Binder(log, BinderApi(api), retry=FAST).run(stop_when_idle=True)

        assert read_pod(api, ns, "a")["spec"]["nodeName"] == node
        ref = core.read_persistent_volume(free).spec.claim_ref
        assert (ref.namespace, ref.name, ref.kind) == (ns, "a-data", "PersistentVolumeClaim")
        assert (
            core.read_persistent_volume(free).metadata.annotations["pv.kubernetes.io/bound-by-controller"]
            == "yes"
        )
        scratch = core.read_namespaced_persistent_volume_claim("a-scratch", ns).metadata.annotations
        assert scratch["volume.kubernetes.io/selected-node"] == node

        # b's volume belongs to another claim: b is not bound, the volume is untouched, the user is told.
        assert "nodeName" not in read_pod(api, ns, "b")["spec"]
        assert core.read_persistent_volume(taken).spec.claim_ref.name == "someone-else"
        assert (st.bound, st.dead_letters) == (1, 1)
        events = [e for e in pod_events(api, ns, "b") if e["reason"] == "FailedBinding"]
        assert events and f"volume {taken}" in events[0]["message"]
        # The PersistentVolume controller completed a's bindings before a was bound.
        for claim in ("a-data", "a-scratch"):
            got = core.read_namespaced_persistent_volume_claim(claim, ns)
            assert (
                got.spec.volume_name and got.metadata.annotations["pv.kubernetes.io/bind-completed"] == "yes"
            )


def test_a_bind_whose_claims_are_never_bound_times_out_and_leaves_the_pod_pending(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kube_namespace
    node = f"{ns}-n1"
    with kube_api.api_client() as api:
        core = client.CoreV1Api(api)
        apply_crds(api)
        make_node(api, node)
        _claim(core, ns, "c-scratch")
        make_pod(api, ns, "c")
        log = FileLog(tmp_path / "log")
        rec = record([_bind_with_volumes(f"{ns}/c", node, {"c-scratch": ""})], [])
        log.append(DEFAULT_TOPICS.decisions, None, rec.dumps())
        # No PersistentVolume controller or provisioner runs: the claim is never bound.
        st = Binder(log, BinderApi(api), retry=FAST, volume_bind_timeout_s=1.0).run(stop_when_idle=True)
        assert "nodeName" not in read_pod(api, ns, "c")["spec"]
        assert (st.bound, st.dead_letters) == (0, 1)
        dead = [json.loads(r.value) for r in log.read(DEFAULT_TOPICS.deadletter, 0, 10)]
        assert [d["reason_code"] for d in dead] == ["volume_bind_timeout"]
        events = [e for e in pod_events(api, ns, "c") if e["reason"] == "FailedBinding"]
        assert events and "timed out after 1s waiting for claims c-scratch" in events[0]["message"]
