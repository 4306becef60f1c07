"""Namespaces and the affinity / spread fields that depend on them, from Kubernetes objects to events:
``NamespaceUpserted`` / ``NamespaceDeleted`` (translate and the watcher, against the real kube-apiserver),
a term's ``namespaceSelector`` (null and ``{}`` differ) and ``matchLabelKeys``.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ingest.events import NamespaceUpserted, PodSubmitted, dump_event, parse_event
from ingest.filelog import FileLog
from ingest.kube import translate as kube
from ingest.kube.client import KubeApi
from ingest.kube.translate import InvalidObject
from ingest.kube.watcher import NAMESPACES, KubeIngest, absent_message
from ingest.log import DEFAULT_TOPICS
from tests.support.kube_objects import apply_crds

SCAN = {"matchLabels": {"service": "scan"}}


def _pod(spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns1", "labels": labels or {"service": "scan", "bar": "a"}},
        "spec": {"containers": [{"name": "main"}], **spec},
    }


def _affinity(term: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}


# --- translate ------------------------------------------------------------------------------------------


def test_a_namespace_becomes_its_name_and_labels() -> None:
    ev = kube.namespace_upserted({"metadata": {"name": "team-a", "labels": {"team": "a"}}}, 7)
    assert (ev.name, ev.labels, ev.at_ms, ev.v) == ("team-a", {"team": "a"}, 7, 2)
    assert kube.namespace_deleted({"metadata": {"name": "team-a"}}, 8).name == "team-a"


def test_a_namespace_with_a_bad_label_is_an_invalid_object() -> None:
    with pytest.raises(InvalidObject, match="labels"):
        kube.namespace_upserted({"metadata": {"name": "team-a", "labels": {"bad key": "x"}}}, 0)


@pytest.mark.parametrize(
    ("selector", "want"),
    [
        ("absent", None),  # not set: the pod's own namespace (with no namespaces list)
        (None, None),  # null: the same
        ({}, {"match_labels": {}, "match_expressions": []}),  # every namespace
        (
            {"matchExpressions": [{"key": "team", "operator": "In", "values": ["t1"]}]},
            {"match_labels": {}, "match_expressions": [{"key": "team", "operator": "In", "values": ["t1"]}]},
        ),
    ],
)
def test_namespace_selector_is_carried_null_and_empty_apart(selector: Any, want: Any) -> None:
    term: dict[str, Any] = {"labelSelector": SCAN, "topologyKey": "zone"}
    if selector != "absent":
        term["namespaceSelector"] = selector
    got = kube.pod_submitted(_pod(_affinity(term)), "pg", 1).pod_affinity[0].namespace_selector
    assert (got.model_dump() if got is not None else None) == want


def test_affinity_label_keys_are_not_merged_again_but_spread_label_keys_are_carried() -> None:
    """kube-apiserver merged an affinity term's matchLabelKeys into its labelSelector when the pod was
    created (what ingest reads is already merged); kube-scheduler merges a spread constraint's itself."""
    term = {
        "labelSelector": {"matchExpressions": [{"key": "bar", "operator": "In", "values": ["a"]}]},
        "topologyKey": "zone",
        "matchLabelKeys": ["bar"],
    }
    spread = {
        "maxSkew": 1,
        "topologyKey": "zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": SCAN,
        "matchLabelKeys": ["bar"],
    }
    ev = kube.pod_submitted(_pod(_affinity(term) | {"topologySpreadConstraints": [spread]}), "pg", 1)
    assert ev.pod_affinity[0].match_label_keys == []
    assert ev.topology_spread[0].match_label_keys == ["bar"]


# --- the contract ---------------------------------------------------------------------------------------


def _submitted(**kw: Any) -> PodSubmitted:
    return PodSubmitted.model_validate(
        {"at_ms": 0, "name": "p", "namespace": "ns1", "pod_group": "g", "created_at_ms": 0} | kw
    )


def test_terms_without_the_new_fields_serialise_as_before() -> None:
    """Records stay byte-identical for pods that do not use namespaceSelector or label keys."""
    ev = _submitted(
        pod_affinity=[{"label_selector": {"match_labels": {"a": "b"}}, "topology_key": "zone"}],
        topology_spread=[{"max_skew": 1, "topology_key": "zone"}],
    )
    raw = dump_event(ev)
    for new in (b"namespace_selector", b"match_label_keys", b"mismatch_label_keys"):
        assert new not in raw
    assert parse_event(raw) == ev


def test_the_new_fields_round_trip() -> None:
    ev = _submitted(
        labels={"bar": "a"},
        pod_anti_affinity=[
            {
                "label_selector": {},
                "topology_key": "zone",
                "namespace_selector": {},
                "match_label_keys": ["bar"],
                "mismatch_label_keys": ["baz"],
            }
        ],
        topology_spread=[{"max_skew": 1, "topology_key": "zone", "match_label_keys": ["bar"]}],
    )
    assert parse_event(dump_event(ev)) == ev
    assert b'"namespace_selector":{"match_expressions":[],"match_labels":{}}' in dump_event(ev)


@pytest.mark.parametrize(
    ("term", "where"),
    [
        ({"match_label_keys": ["bad key"]}, "match_label_keys"),
        ({"mismatch_label_keys": ["k"] * 257}, "mismatch_label_keys"),
        ({"namespace_selector": {"match_labels": {"team": "bad value!"}}}, "namespace_selector"),
    ],
)
def test_bad_term_fields_are_refused_naming_the_field(term: dict[str, Any], where: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as e:
        _submitted(pod_affinity=[{"label_selector": {}, "topology_key": "zone"} | term])
    assert any(where in ".".join(str(p) for p in err["loc"]) for err in e.value.errors())


def test_a_namespace_name_must_be_a_dns_label() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        NamespaceUpserted(name="team.a", at_ms=0)


def test_a_namespace_list_that_is_forbidden_is_logged_with_what_it_means() -> None:
    msg = absent_message(NAMESPACES, 403, 30)
    assert "namespaces" in msg and "namespaceSelector" in msg and "every 30s" in msg
    assert NAMESPACES.may_be_absent


# --- the watcher, on the real kube-apiserver ------------------------------------------------------------


def test_ingest_emits_namespace_labels_and_their_changes(kube_api: Any, tmp_path: Path) -> None:
    from kubernetes import client

    name = f"hg-ns-{uuid.uuid4().hex[:10]}"
    with kube_api.api_client() as raw:
        apply_crds(raw)
        core = client.CoreV1Api(raw)
        core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"team": "t1"}))
        )
        api = KubeApi(raw)
        try:
            with FileLog(tmp_path / "log") as log:
                ingest = KubeIngest(
                    api, log, state_path=tmp_path / "state.json", namespace=name, watch_timeout_s=5
                )
                ingest.start()
                try:

                    def labels_seen() -> list[dict[str, str]]:
                        evs = [parse_event(r.value) for r in log.read(DEFAULT_TOPICS.events, 0)]
                        return [
                            dict(e.labels) for e in evs if e.type == "NamespaceUpserted" and e.name == name
                        ]

                    assert labels_seen() and labels_seen()[-1]["team"] == "t1"
                    core.patch_namespace(name, {"metadata": {"labels": {"team": "t2"}}})
                    deadline = time.monotonic() + 30
                    while labels_seen()[-1]["team"] != "t2":
                        assert time.monotonic() < deadline, labels_seen()
                        ingest.step(0.2)
                    assert [s["team"] for s in labels_seen()] == ["t1", "t2"]
                finally:
                    ingest.stop()
        finally:
            core.delete_namespace(name)
