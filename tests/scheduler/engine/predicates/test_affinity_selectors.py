"""namespaceSelector on inter-pod (anti-)affinity terms and matchLabelKeys / mismatchLabelKeys merged into
label selectors: what the fold makes of a pod event, and what the filters then decide.

The merge cases are kube-apiserver's own (k8s.io/kubernetes v1.36.3, pkg/registry/core/pod/strategy_test.go
``Test_mutatePodAffinity`` and ``Test_mutateTopologySpreadConstraints``): the selector the fold builds is the
one the API server stores. The namespace cases follow kube-scheduler's ``AffinityTerm.Matches`` and
``mergeAffinityTermNamespacesIfNotEmpty`` (interpodaffinity/plugin.go) where its own test tables have no case
(tools/kube_scheduler_scenarios_selectors.py translates those that exist).
"""

from __future__ import annotations

from typing import Any

import pytest

from ingest.events import NamespaceDeleted, NamespaceUpserted, PodSubmitted
from scheduler.conformance.runner import filter_verdicts
from scheduler.engine.state import LabelSelector, MatchExpression, StateBuilder, placement_fields

KYOTO = {"country": "Japan", "city": "Kyoto"}


def _fields(**pod: Any) -> dict[str, Any]:
    ev = PodSubmitted.model_validate(
        {"at_ms": 0, "name": "p", "namespace": "default", "pod_group": "g", "created_at_ms": 0} | pod
    )
    return placement_fields(ev)


def _term(**kw: Any) -> dict[str, Any]:
    return {"label_selector": {"match_labels": {"region": "Asia"}}, "topology_key": "zone"} | kw


# --- kube-apiserver's merge (strategy_test.go) ----------------------------------------------------------


def test_match_label_keys_merge_with_in_and_mismatch_label_keys_with_not_in() -> None:
    """Test_mutatePodAffinity "matchLabelKeys are merged into labelSelector with In and mismatchLabelKeys are
    merged with NotIn" (required and preferred, affinity and anti-affinity alike)."""
    term = _term(match_label_keys=["country"], mismatch_label_keys=["city"])
    got = _fields(
        labels=KYOTO,
        pod_affinity=[term, term | {"weight": 10}],
        pod_anti_affinity=[term, term | {"weight": 10}],
    )
    want = LabelSelector(
        (("region", "Asia"),),
        (MatchExpression("country", "In", ("Japan",)), MatchExpression("city", "NotIn", ("Kyoto",))),
    )
    assert [t.selector for t in got["pod_affinity"] + got["pod_anti_affinity"]] == [want] * 4


def test_keys_not_in_pod_labels_are_ignored() -> None:
    """Test_mutatePodAffinity "keys, which are not found in Pod labels, are ignored"."""
    got = _fields(labels=KYOTO, pod_affinity=[_term(match_label_keys=["city", "not-found"])])
    assert got["pod_affinity"][0].selector == LabelSelector(
        (("region", "Asia"),), (MatchExpression("city", "In", ("Kyoto",)),)
    )


def test_label_keys_are_ignored_when_the_label_selector_is_nil() -> None:
    """Test_mutatePodAffinity "matchLabelKeys is ignored if the labelSelector is nil": the term still
    selects no pod."""
    term = {"label_selector": None, "topology_key": "zone"}
    got = _fields(labels=KYOTO, pod_affinity=[term | {"match_label_keys": ["country"]}])
    assert got["pod_affinity"][0].selector == LabelSelector(nothing=True)


def test_spread_match_label_keys_merge_with_in() -> None:
    """Test_mutateTopologySpreadConstraints "matchLabelKeys are merged into labelSelector with In" and "keys,
    which are not found in Pod labels, are ignored" and "matchLabelKeys is ignored if the labelSelector is
    nil"."""
    tokyo = {"country": "Japan", "city": "Tokyo"}
    host = "kubernetes.io/hostname"
    got = _fields(
        labels=tokyo,
        topology_spread=[
            {
                "max_skew": 1,
                "topology_key": host,
                "label_selector": {},
                "match_label_keys": ["country", "city"],
            },
            {
                "max_skew": 1,
                "topology_key": host,
                "label_selector": {},
                "match_label_keys": ["country", "not-found"],
            },
            {"max_skew": 1, "topology_key": host, "label_selector": None, "match_label_keys": ["country"]},
        ],
    )
    japan = MatchExpression("country", "In", ("Japan",))
    assert [c.selector for c in got["topology_spread"]] == [
        LabelSelector((), (japan, MatchExpression("city", "In", ("Tokyo",)))),
        LabelSelector((), (japan,)),
        LabelSelector(nothing=True),
    ]


def test_a_key_in_both_match_and_mismatch_label_keys_is_refused() -> None:
    """kube-apiserver refuses such a term (ValidatePodAffinityTermSelector): so does the contract."""
    with pytest.raises(ValueError, match="in both match_label_keys and mismatch_label_keys"):
        _fields(labels=KYOTO, pod_affinity=[_term(match_label_keys=["city"], mismatch_label_keys=["city"])])


# --- namespaces in the fold -----------------------------------------------------------------------------


def test_namespace_labels_are_folded_and_forgotten() -> None:
    b = StateBuilder()
    b.apply(NamespaceUpserted(name="ns-b", labels={"team": "t1"}, at_ms=1))
    b.apply(NamespaceUpserted(name="ns-a", labels={}, at_ms=2))
    b.apply(NamespaceUpserted(name="ns-b", labels={"team": "t2"}, at_ms=3))
    assert [(n, dict(labels)) for n, labels in b.snapshot().namespaces] == [
        ("ns-a", {}),
        ("ns-b", {"team": "t2"}),
    ]
    b.apply(NamespaceDeleted(name="ns-b", at_ms=4))
    assert [n for n, _ in b.snapshot().namespaces] == ["ns-a"]
    assert [n for n, _ in b.fork().snapshot().namespaces] == ["ns-a"]


# --- the filters ----------------------------------------------------------------------------------------

TEAMS = [
    {"name": "a1", "labels": {"team": "team1"}},
    {"name": "a2", "labels": {"team": "team1"}},
    {"name": "b1", "labels": {"team": "team2"}},
]
SCAN = {"match_labels": {"service": "scan"}}


def _doc(incoming: dict[str, Any], existing: list[dict[str, Any]]) -> dict[str, Any]:
    """Nodes n1 (zone z1, holding the existing pods) and n2 (zone z2); the pending task ``p``."""
    jobs = [
        {"name": e["name"], "queue": "q", "tasks": [{"status": "running", "node": "n1"} | e]}
        for e in existing
    ]
    return {
        "run": {"mode": "filter", "task": "p"},
        "cluster": {
            "nodes": [{"name": "n1", "labels": {"zone": "z1"}}, {"name": "n2", "labels": {"zone": "z2"}}],
            "namespaces": TEAMS,
        },
        "queues": [{"name": "q"}],
        "jobs": [*jobs, {"name": "p", "queue": "q", "tasks": [{"name": "p"} | incoming]}],
    }


def _holder(ns_selector: dict[str, Any] | None, **kw: Any) -> dict[str, Any]:
    """An existing pod on n1 whose required anti-affinity selects pods labelled service=scan."""
    term: dict[str, Any] = {"label_selector": SCAN, "topology_key": "zone"} | kw
    if ns_selector is not None:
        term["namespace_selector"] = ns_selector
    return {"name": "holder", "namespace": "a1", "pod_anti_affinity": [term]}


@pytest.mark.parametrize(
    ("ns_selector", "namespace", "want"),
    [
        ({"match_labels": {"team": "team1"}}, "a2", "ExistingPodsAntiAffinity"),  # labels match
        ({"match_labels": {"team": "team1"}}, "b1", None),  # labels differ
        ({"match_labels": {"team": "team1"}}, "unknown", None),  # no Namespace object: no labels
        ({}, "b1", "ExistingPodsAntiAffinity"),  # {} is every namespace
        ({}, "unknown", "ExistingPodsAntiAffinity"),
        (None, "a2", None),  # no selector and no list: the holder's own namespace only
        (None, "a1", "ExistingPodsAntiAffinity"),
        (
            {"match_expressions": [{"key": "team", "operator": "DoesNotExist"}]},
            "unknown",
            "ExistingPodsAntiAffinity",
        ),
    ],
)
def test_existing_pods_anti_affinity_matches_the_incoming_pods_namespace_labels(
    ns_selector: dict[str, Any] | None, namespace: str, want: str | None
) -> None:
    """Symmetry: an existing pod's term is matched against the incoming pod's namespace labels
    (``GetNamespaceLabelsSnapshot``: an unknown namespace has none)."""
    doc = _doc({"namespace": namespace, "labels": {"service": "scan"}}, [_holder(ns_selector)])
    assert filter_verdicts(doc) == {"n1": want, "n2": None}


def test_existing_pods_term_namespaces_and_selector_are_ored() -> None:
    doc = _doc(
        {"namespace": "b1", "labels": {"service": "scan"}},
        [_holder({"match_labels": {"team": "nobody"}}, namespaces=["b1"])],
    )
    assert filter_verdicts(doc) == {"n1": "ExistingPodsAntiAffinity", "n2": None}


def test_incoming_terms_count_only_known_namespaces_the_selector_matches() -> None:
    """``mergeAffinityTermNamespacesIfNotEmpty`` lists Namespace objects: a pod in a namespace the cluster
    has no object for is not counted, even by a selector that matches empty labels (DoesNotExist)."""
    absent = {"match_expressions": [{"key": "team", "operator": "DoesNotExist"}]}
    term = {"label_selector": SCAN, "topology_key": "zone", "namespace_selector": absent}
    scan_in = [{"name": "e", "namespace": "ghost", "labels": {"service": "scan"}}]
    assert filter_verdicts(_doc({"namespace": "a1", "pod_anti_affinity": [term]}, scan_in)) == {
        "n1": None,
        "n2": None,
    }
    # The same pod in a known namespace without the label is counted.
    known = [{"name": "e", "namespace": "a1", "labels": {"service": "scan"}}]
    doc = _doc({"namespace": "a1", "pod_anti_affinity": [term]}, known)
    doc["cluster"]["namespaces"] = [*TEAMS[1:], {"name": "a1", "labels": {}}]
    assert filter_verdicts(doc) == {"n1": "InterPodAntiAffinity", "n2": None}


def test_incoming_term_namespaces_list_and_selector_are_unioned() -> None:
    """scoring_test.go "Affinity with pods matching both NamespaceSelector and Namespaces fields", as a
    required term: a pod in the listed namespace and one in a selected namespace both count."""
    term = {
        "label_selector": SCAN,
        "topology_key": "zone",
        "namespaces": ["b1"],
        "namespace_selector": {"match_labels": {"team": "team1"}},
    }
    for ns in ("b1", "a2"):
        existing = [{"name": "e", "namespace": ns, "labels": {"service": "scan"}}]
        assert filter_verdicts(_doc({"namespace": "a1", "pod_affinity": [term]}, existing)) == {
            "n1": None,
            "n2": "InterPodAffinity",
        }


def test_an_empty_namespace_selector_with_no_match_selects_nothing_but_the_first_pod_rule_still_applies() -> (
    None
):
    """A selector naming no existing namespace: no pod counts; the pod may still start where it matches
    its own term (its namespace must be among the selected ones, as kube-scheduler checks it)."""
    term = {
        "label_selector": SCAN,
        "topology_key": "zone",
        "namespace_selector": {"match_labels": {"team": "x"}},
    }
    existing = [{"name": "e", "namespace": "a1", "labels": {"service": "scan"}}]
    got = filter_verdicts(
        _doc({"namespace": "a1", "labels": {"service": "scan"}, "pod_affinity": [term]}, existing)
    )
    assert got == {"n1": "InterPodAffinity", "n2": "InterPodAffinity"}
    term["namespace_selector"] = {"match_labels": {"team": "team1"}}
    got = filter_verdicts(
        _doc({"namespace": "a1", "labels": {"service": "scan"}, "pod_affinity": [term]}, [])
    )
    assert got == {"n1": None, "n2": None}


# --- the ScheduleAnyway score (podtopologyspread/scoring_test.go TestPodTopologySpreadScore) --------------


def _spread_preference(
    incoming: dict[str, Any], existing: list[tuple[str, dict[str, str]]]
) -> dict[str, float]:
    """Hourglass's raw ScheduleAnyway preference per node on scoring_test.go's four nodes."""
    from scheduler.conformance.runner import NOW_MS, load_state
    from scheduler.engine.cycle import open_session
    from scheduler.engine.predicates import spread

    host = "kubernetes.io/hostname"
    nodes = [
        {"name": f"node-{x}", "labels": {"zone": z, host: f"node-{x}"}}
        for x, z in (("a", "zone1"), ("b", "zone1"), ("c", "zone2"), ("d", "zone2"))
    ]
    jobs = [
        {"name": f"e{i}", "queue": "q", "tasks": [{"status": "running", "node": n, "labels": labels}]}
        for i, (n, labels) in enumerate(existing)
    ]
    doc = {
        "cluster": {"nodes": nodes},
        "run": {"mode": "filter", "task": "p"},
        "queues": [{"name": "q"}],
        "jobs": [*jobs, {"name": "p", "queue": "q", "tasks": [{"name": "p"} | incoming]}],
    }
    state, config = load_state(doc)
    ssn = open_session(state, config, NOW_MS)
    task = next(t for t in ssn.tasks if t.pod.name == "p")
    raw = spread.preference(spread.resolve(ssn, task, "ScheduleAnyway"), ssn.nodes)
    return {n.name: v for n, v in zip(ssn.nodes, raw, strict=True)}


def _anyway(key: str, selector: dict[str, Any], *keys: str) -> dict[str, Any]:
    out: dict[str, Any] = {"max_skew": 1, "topology_key": key, "when_unsatisfiable": "ScheduleAnyway"}
    return out | {"label_selector": selector, "match_label_keys": list(keys)}


def test_spread_score_merges_match_label_keys_into_a_non_empty_selector() -> None:
    """ "matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty": kube scores node-d 100,
    node-a and node-c 60, node-b 20; Hourglass ranks them the same."""
    exists = {"match_expressions": [{"key": "foo", "operator": "Exists"}]}
    bar = {"match_expressions": [{"key": "bar", "operator": "Exists"}]}
    got = _spread_preference(
        {
            "labels": {"foo": "", "bar": "", "baz": ""},
            "topology_spread": [
                _anyway("zone", exists),
                _anyway("kubernetes.io/hostname", bar, "baz"),
            ],
        },
        [
            ("node-a", {"foo": ""}),
            ("node-b", {"foo": "", "bar": "", "baz": ""}),
            ("node-c", {"foo": ""}),
            ("node-c", {"bar": ""}),
            ("node-c", {"bar": "", "baz": ""}),
        ],
    )
    assert got["node-d"] > got["node-a"] == got["node-c"] > got["node-b"], got


def test_spread_score_merges_match_label_keys_into_an_empty_selector() -> None:
    """ "matchLabelKeys ANDed with LabelSelector when LabelSelector is empty" (an empty selector alone counts
    no pod): the same ranking, node-d 100, node-a and node-c 60, node-b 20."""
    got = _spread_preference(
        {
            "labels": {"foo": "", "bar": ""},
            "topology_spread": [_anyway("zone", {}, "foo"), _anyway("kubernetes.io/hostname", {}, "bar")],
        },
        [
            ("node-a", {"foo": ""}),
            ("node-b", {"foo": "", "bar": ""}),
            ("node-c", {"foo": ""}),
            ("node-c", {"bar": ""}),
        ],
    )
    assert got["node-d"] > got["node-a"] == got["node-c"] > got["node-b"], got
