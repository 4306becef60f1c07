"""Misspelt Queue / PodGroup fields are reported, not dropped without a word (ingest/kube/translate.py).

The PodGroup is KAI's docs' own typo: ``subgroups`` for ``subGroups``. KAI's structural schema prunes such
a field; ours keeps unknown spec fields (so applying it over a newer KAI CRD never prunes a field KAI
added), so ingest names each one in a ``HourglassUnknownField`` Warning Event instead.
"""

from __future__ import annotations

from typing import Any

import yaml

from ingest.kube import translate as kube
from tests.support.paths import REPO_ROOT


def test_kai_docs_typo_subgroups_is_named_with_the_right_spelling() -> None:
    pg = {
        "metadata": {"name": "pg", "namespace": "ns"},
        "spec": {
            "queue": "q",
            "minMember": 2,
            "subgroups": [{"name": "a", "minMember": 1}],
            "subGroups": [{"name": "b", "minmember": 1, "topologyConstraint": {"topolgy": "t"}}],
        },
    }
    assert kube.unknown_fields("PodGroup", pg) == [
        "unknown field spec.subgroups (did you mean subGroups?): KAI's schema has no such field; it is ignored",
        "unknown field spec.subGroups[0].minmember (did you mean minMember?): KAI's schema has no such field;"
        " it is ignored",
        "unknown field spec.subGroups[0].topologyConstraint.topolgy: KAI's schema has no such field; it is"
        " ignored",
    ]


def test_queue_unknown_field_and_a_clean_object_has_none() -> None:
    q = {"metadata": {"name": "q"}, "spec": {"displayname": "Team A", "resources": {}}}
    assert kube.unknown_fields("Queue", q) == [
        "unknown field spec.displayname (did you mean displayName?): KAI's schema has no such field; it is ignored"
    ]
    assert kube.unknown_fields("Queue", {"spec": {"displayName": "A", "resources": {}}}) == []
    assert kube.unknown_fields("Topology", {"spec": {"anything": 1}}) == []


def _crd_fields(name: str) -> tuple[set[str], set[str]]:
    doc: Any = yaml.safe_load((REPO_ROOT / "deploy" / "crds" / name).read_text())
    spec = doc["spec"]["versions"][-1]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    items = spec.get("subGroups", {}).get("items", {}).get("properties", {})
    return set(spec), set(items)


def test_known_fields_are_exactly_the_crds() -> None:
    pg, sub = _crd_fields("scheduling.run.ai_podgroups.yaml")
    known: Any = kube._KNOWN_SPEC  # the lists must follow the CRDs
    assert set(known["PodGroup"]) == pg
    assert set(kube._KNOWN_SUBGROUP) == sub
    queue, _ = _crd_fields("scheduling.run.ai_queues.yaml")
    assert set(known["Queue"]) == queue
