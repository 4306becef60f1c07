"""Claims as kube-scheduler's volume plugins read them (ingest/kube/volumes.py): which volumes an unbound
WaitForFirstConsumer claim could bind to (``FindMatchingVolume``'s node-independent checks, component-helpers
``storage/volume/pv_helpers.go``), where its class provisions, and a bound volume's zone labels."""

from __future__ import annotations

from typing import Any

import pytest

from ingest.events import PodSubmitted, VolumeClaim, dump_event
from ingest.kube import volumes

WAIT = {"volumeBindingMode": "WaitForFirstConsumer", "provisioner": "kubernetes.io/no-provisioner"}


def _pvc(name: str = "data", size: str = "1Gi", cls: str = "local", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": "u1"},
        "spec": {"storageClassName": cls, "resources": {"requests": {"storage": size}}, **spec},
    }


def _pv(
    name: str, size: str = "10Gi", cls: str = "local", phase: str = "Available", **spec: Any
) -> dict[str, Any]:
    meta = spec.pop("metadata", {})
    return {
        "metadata": {"name": name, **meta},
        "spec": {"storageClassName": cls, "capacity": {"storage": size}, **spec},
        "status": {"phase": phase},
    }


def _names(pvc: dict[str, Any], pvs: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for c in volumes.candidates(pvc, pvs)]


def test_candidates_smallest_first_then_by_name() -> None:
    pvs = [_pv("big", "100Gi"), _pv("b", "5Gi"), _pv("a", "5Gi"), _pv("tiny", "500Mi")]
    assert _names(_pvc(size="1Gi"), pvs) == ["a", "b", "big"]


@pytest.mark.parametrize(
    ("why", "pv", "pvc_spec"),
    [
        ("other class", _pv("x", cls="fast"), {}),
        ("not Available", _pv("x", phase="Released"), {}),
        ("too small", _pv("x", size="500Mi"), {}),
        ("bound to another claim", _pv("x", claimRef={"namespace": "ns", "name": "other"}), {}),
        ("block volume for a filesystem claim", _pv("x", volumeMode="Block"), {}),
        ("being deleted", _pv("x", metadata={"deletionTimestamp": "2026-01-01T00:00:00Z"}), {}),
        ("access mode missing", _pv("x", accessModes=["ReadWriteOnce"]), {"accessModes": ["ReadWriteMany"]}),
        (
            "selector does not match",
            _pv("x", metadata={"labels": {"tier": "hdd"}}),
            {"selector": {"matchLabels": {"tier": "ssd"}}},
        ),
        ("other volume attributes class", _pv("x"), {"volumeAttributesClassName": "gold"}),
    ],
)
def test_a_volume_that_cannot_serve_the_claim_is_no_candidate(
    why: str, pv: dict[str, Any], pvc_spec: dict[str, Any]
) -> None:
    assert _names(_pvc(**pvc_spec), [pv]) == [], why


def test_access_modes_and_selector_that_match() -> None:
    pv = _pv("x", accessModes=["ReadWriteOnce", "ReadOnlyMany"], metadata={"labels": {"tier": "ssd"}})
    pvc = _pvc(
        accessModes=["ReadWriteOnce"],
        selector={"matchExpressions": [{"key": "tier", "operator": "In", "values": ["ssd", "nvme"]}]},
    )
    assert _names(pvc, [pv]) == ["x"]


def test_a_volume_pre_bound_to_the_claim_is_its_only_candidate() -> None:
    pre = _pv("pre", "100Gi", phase="Pending", claimRef={"namespace": "ns", "name": "data", "uid": "u1"})
    assert _names(_pvc(), [_pv("small", "2Gi"), pre]) == ["pre"]
    wrong_uid = _pv("pre", claimRef={"namespace": "ns", "name": "data", "uid": "u0"})
    assert _names(_pvc(), [wrong_uid]) == []


def test_wait_for_first_consumer_claim_and_its_class() -> None:
    affinity = {
        "required": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "h", "operator": "In", "values": ["n2"]}]}]
        }
    }
    got = VolumeClaim.model_validate(
        volumes.claim("data", _pvc(size="1G"), None, WAIT, [_pv("x", nodeAffinity=affinity)])
    )
    assert got.binding_mode == "WaitForFirstConsumer" and not got.bound and not got.provision
    assert got.request_bytes == 1_000_000_000
    assert [c.name for c in got.candidates] == ["x"]
    assert got.candidates[0].node_affinity[0].match_expressions[0].values == ["n2"]

    topo = [{"matchLabelExpressions": [{"key": "zone", "values": ["a", "b"]}]}]
    sc = {
        "volumeBindingMode": "WaitForFirstConsumer",
        "provisioner": "csi.example.com",
        "allowedTopologies": topo,
    }
    prov = VolumeClaim.model_validate(volumes.claim("data", _pvc(), None, sc, []))
    assert prov.provision and prov.allowed_topologies[0].match_expressions[0].values == ["a", "b"]
    # A class whose allowed topologies are all empty terms provisions nowhere.
    nowhere = {**sc, "allowedTopologies": [{"matchLabelExpressions": []}]}
    assert "provision" not in volumes.claim("data", _pvc(), None, nowhere, [])
    # A class without a provisioner (or kubernetes.io/no-provisioner) provisions nothing.
    assert "provision" not in volumes.claim(
        "data", _pvc(), None, {"volumeBindingMode": "WaitForFirstConsumer"}, []
    )


def test_bound_claims_carry_zone_labels_and_pre_bound_claims_wait() -> None:
    done = {"pv.kubernetes.io/bind-completed": "yes"}
    pvc = {
        "metadata": {"name": "data", "namespace": "ns", "annotations": done},
        "spec": {"volumeName": "pv-1"},
    }
    labels = {
        "topology.kubernetes.io/zone": "a__b",
        "failure-domain.beta.kubernetes.io/region": "r",
        "team": "x",
    }
    got = volumes.claim("data", pvc, {"metadata": {"name": "pv-1", "labels": labels}}, None)
    assert got["bound"] and got["zone_labels"] == {
        "topology.kubernetes.io/zone": "a__b",
        "failure-domain.beta.kubernetes.io/region": "r",
    }
    # Bound to a volume that does not exist, or pre-bound without the binding completed: the pod waits.
    assert volumes.claim("data", pvc, None, None) == {"claim": "data", "bound": False}
    pre = {"metadata": {"name": "data", "namespace": "ns"}, "spec": {"volumeName": "pv-1"}}
    assert volumes.claim("data", pre, {"metadata": {"name": "pv-1"}}, None) == {
        "claim": "data",
        "bound": False,
    }


def test_claims_without_the_new_fields_serialise_as_before() -> None:
    ev = PodSubmitted(
        at_ms=0,
        name="p",
        namespace="ns",
        pod_group="g",
        created_at_ms=0,
        volumes=[VolumeClaim(claim="data", bound=False, binding_mode="WaitForFirstConsumer")],
    )
    assert (
        b'"volumes":[{"binding_mode":"WaitForFirstConsumer","bound":false,"claim":"data","node_affinity":[]}]'
        in dump_event(ev)
    )


def test_prebind_volume_is_what_kube_scheduler_writes() -> None:
    pvc = {"metadata": {"name": "data", "namespace": "ns", "uid": "u1", "resourceVersion": "7"}}
    out = volumes.prebind_volume(_pv("x", metadata={"annotations": {"keep": "me"}}), pvc)
    assert out["spec"]["claimRef"] == {
        "kind": "PersistentVolumeClaim",
        "apiVersion": "v1",
        "namespace": "ns",
        "name": "data",
        "uid": "u1",
        "resourceVersion": "7",
    }
    assert out["metadata"]["annotations"] == {"keep": "me", "pv.kubernetes.io/bound-by-controller": "yes"}
