"""Property: on random namespaces, pods and nodes, Hourglass's InterPodAffinity verdict equals a reference
transcribed from kube-apiserver's and kube-scheduler v1.36's code paths, for terms with ``namespaces``,
``namespaceSelector``, ``matchLabelKeys`` and ``mismatchLabelKeys``.

The reference, kept independent of the engine: kube-apiserver's ``applyMatchLabelKeysAndMismatchLabelKeys``
(pkg/registry/core/pod/strategy.go) merges the label keys at creation; kube-scheduler's ``newAffinityTerm`` /
``getNamespacesFromPodAffinityTerm`` (kube-scheduler framework/types.go) and ``AffinityTerm.Matches``;
``mergeAffinityTermNamespacesIfNotEmpty`` and ``GetNamespaceLabelsSnapshot`` (interpodaffinity/plugin.go);
``podMatchesAllAffinityTerms``, the PreFilter counts and ``satisfyPodAffinity`` / ``satisfyPodAntiAffinity``
/ ``satisfyExistingPodsAntiAffinity`` in the order ``Filter`` runs them (interpodaffinity/filtering.go).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.conformance.runner import filter_verdicts

# --- the reference, from the Go -------------------------------------------------------------------------

EVERYTHING, NOTHING = "everything", "nothing"


def _as_selector(s: dict[str, Any] | None) -> Any:
    """metav1.LabelSelectorAsSelector: nil -> Nothing, {} -> Everything, else the requirements."""
    if s is None:
        return NOTHING
    reqs = [(k, "In", [v]) for k, v in s.get("match_labels", {}).items()]
    reqs += [(e["key"], e["operator"], e.get("values", [])) for e in s.get("match_expressions", [])]
    return reqs or EVERYTHING


def _matches(sel: Any, labels: dict[str, str] | None) -> bool:
    """labels.Selector.Matches (a nil label set has no labels)."""
    if sel == NOTHING:
        return False
    if sel == EVERYTHING:
        return True
    labels = labels or {}
    for key, op, values in sel:
        have = key in labels
        if op == "In" and not (have and labels[key] in values):
            return False
        if op == "NotIn" and have and labels[key] in values:
            return False
        if op == "Exists" and not have:
            return False
        if op == "DoesNotExist" and have:
            return False
    return True


def _apiserver_merge(term: dict[str, Any], labels: dict[str, str]) -> dict[str, Any] | None:
    """applyMatchLabelKeysAndMismatchLabelKeys: the term's label selector as stored."""
    sel = term.get("label_selector")
    if sel is None:
        return None
    extra = [
        {"key": k, "operator": "In", "values": [labels[k]]}
        for k in term.get("match_label_keys", [])
        if k in labels
    ]
    extra += [
        {"key": k, "operator": "NotIn", "values": [labels[k]]}
        for k in term.get("mismatch_label_keys", [])
        if k in labels
    ]
    return {**sel, "match_expressions": [*sel.get("match_expressions", []), *extra]}


def _affinity_term(pod: dict[str, Any], term: dict[str, Any]) -> dict[str, Any]:
    """newAffinityTerm: namespaces (the pod's own when neither list nor selector), selector, ns selector."""
    ns_sel = term.get("namespace_selector")
    names = set(term.get("namespaces", []))
    if not names and "namespace_selector" not in term:
        names = {pod["namespace"]}
    return {
        "namespaces": names,
        "selector": _as_selector(_apiserver_merge(term, pod["labels"])),
        "ns_selector": _as_selector(ns_sel) if "namespace_selector" in term else NOTHING,
        "key": term["topology_key"],
    }


def _merge_namespaces(t: dict[str, Any], namespaces: dict[str, dict[str, str]]) -> dict[str, Any]:
    """mergeAffinityTermNamespacesIfNotEmpty: a non-Everything selector becomes the namespaces it lists."""
    if t["ns_selector"] == EVERYTHING:
        return t
    listed = {n for n, labels in namespaces.items() if _matches(t["ns_selector"], labels)}
    return {**t, "namespaces": t["namespaces"] | listed, "ns_selector": NOTHING}


def _term_matches(t: dict[str, Any], pod: dict[str, Any], ns_labels: dict[str, str] | None) -> bool:
    """AffinityTerm.Matches."""
    in_scope = pod["namespace"] in t["namespaces"] or _matches(t["ns_selector"], ns_labels)
    return in_scope and _matches(t["selector"], pod["labels"])


def reference(
    incoming: dict[str, Any],
    existing: list[dict[str, Any]],
    nodes: dict[str, dict[str, str]],
    namespaces: dict[str, dict[str, str]],
) -> dict[str, str | None]:
    """The reason InterPodAffinity's Filter gives on each node (None: passes)."""
    aff = [
        _merge_namespaces(_affinity_term(incoming, t), namespaces) for t in incoming.get("pod_affinity", [])
    ]
    anti = [
        _merge_namespaces(_affinity_term(incoming, t), namespaces)
        for t in incoming.get("pod_anti_affinity", [])
    ]
    ns_labels = namespaces.get(incoming["namespace"])  # GetNamespaceLabelsSnapshot: none if unknown
    existing_anti: dict[tuple[str, str], int] = {}
    aff_counts: dict[tuple[str, str], int] = {}
    anti_counts: dict[tuple[str, str], int] = {}
    for e in existing:
        node_labels = nodes[e["node"]]
        for raw in e.get("pod_anti_affinity", []):
            t = _affinity_term(e, raw)
            if t["key"] in node_labels and _term_matches(t, incoming, ns_labels):
                pair = (t["key"], node_labels[t["key"]])
                existing_anti[pair] = existing_anti.get(pair, 0) + 1
        if aff and all(_term_matches(t, e, None) for t in aff):
            for t in aff:
                if t["key"] in node_labels:
                    pair = (t["key"], node_labels[t["key"]])
                    aff_counts[pair] = aff_counts.get(pair, 0) + 1
        for t in anti:
            if t["key"] in node_labels and _term_matches(t, e, None):
                pair = (t["key"], node_labels[t["key"]])
                anti_counts[pair] = anti_counts.get(pair, 0) + 1
    out: dict[str, str | None] = {}
    for name, labels in nodes.items():
        ok, pods_exist = True, True
        for t in aff:
            if t["key"] not in labels:
                ok = False
                break
            if aff_counts.get((t["key"], labels[t["key"]]), 0) <= 0:
                pods_exist = False
        if ok and not pods_exist:
            ok = not aff_counts and bool(aff) and all(_term_matches(t, incoming, None) for t in aff)
        if not ok:
            out[name] = "InterPodAffinity"
        elif any(t["key"] in labels and anti_counts.get((t["key"], labels[t["key"]]), 0) > 0 for t in anti):
            out[name] = "InterPodAntiAffinity"
        elif any(existing_anti.get(pair, 0) > 0 for pair in labels.items()):
            out[name] = "ExistingPodsAntiAffinity"
        else:
            out[name] = None
    return out


# --- random clusters ------------------------------------------------------------------------------------

NAMESPACES = ["a1", "a2", "b1", "ghost"]  # "ghost" never has a Namespace object
LABEL = st.dictionaries(st.sampled_from(["app", "tier"]), st.sampled_from(["x", "y"]), min_size=1, max_size=2)


@st.composite
def selector(draw: st.DrawFn, keys: list[str], values: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    labels = draw(st.dictionaries(st.sampled_from(keys), st.sampled_from(values), max_size=1))
    if labels:
        out["match_labels"] = labels
    exprs = []
    for _ in range(draw(st.integers(0, 1))):
        op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]))
        e: dict[str, Any] = {"key": draw(st.sampled_from(keys)), "operator": op}
        if op in ("In", "NotIn"):
            e["values"] = [draw(st.sampled_from(values))]
        exprs.append(e)
    if exprs:
        out["match_expressions"] = exprs
    return out


@st.composite
def term(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {
        # A missing selector (selects nothing) now and then; mostly one that may select someone.
        "label_selector": None
        if draw(st.integers(0, 5)) == 0
        else draw(selector(["app", "tier"], ["x", "y"])),
        "topology_key": draw(st.sampled_from(["zone", "rack"])),
    }
    names = draw(st.lists(st.sampled_from(NAMESPACES), max_size=1))
    if names:
        out["namespaces"] = names
    kind = draw(st.integers(0, 3))
    if kind == 1:
        out["namespace_selector"] = {}
    elif kind >= 2:
        out["namespace_selector"] = draw(selector(["team"], ["t1", "t2"]))
    mk = draw(st.lists(st.sampled_from(["app", "tier"]), max_size=1))
    if mk:
        out["match_label_keys"] = mk
    mmk = [k for k in draw(st.lists(st.sampled_from(["app", "tier"]), max_size=1)) if k not in mk]
    if mmk:
        out["mismatch_label_keys"] = mmk
    return out


@st.composite
def cluster(draw: st.DrawFn) -> dict[str, Any]:
    # Small spaces of labels, namespaces and keys, so terms often select someone (and the namespace rules
    # decide): three Namespace objects, mostly labelled, and "ghost" that has none.
    namespaces = {
        n: draw(st.sampled_from([{"team": "t1"}, {"team": "t2"}, {}]))
        for n in NAMESPACES[:3]
        if draw(st.integers(0, 5))
    }
    nodes: dict[str, dict[str, str]] = {}
    for i in range(draw(st.integers(1, 3))):
        labels = {"zone": draw(st.sampled_from(["z1", "z2"])), "rack": draw(st.sampled_from(["r1", "r2"]))}
        # Now and then a node without one of the topology keys.
        nodes[f"n{i}"] = {k: v for k, v in labels.items() if draw(st.integers(0, 5)) or k == "rack"}
        if not draw(st.integers(0, 5)):
            nodes[f"n{i}"].pop("rack")
    existing = []
    for i in range(draw(st.integers(0, 4))):
        e: dict[str, Any] = {
            "name": f"e{i}",
            "namespace": draw(st.sampled_from(NAMESPACES)),
            "labels": draw(LABEL),
            "node": draw(st.sampled_from(sorted(nodes))),
        }
        if draw(st.integers(0, 2)):
            e["pod_anti_affinity"] = [draw(term())]
        existing.append(e)
    incoming: dict[str, Any] = {"namespace": draw(st.sampled_from(NAMESPACES)), "labels": draw(LABEL)}
    aff = draw(st.lists(term(), max_size=2))
    if aff:
        incoming["pod_affinity"] = aff
    anti = draw(st.lists(term(), max_size=1))
    if anti:
        incoming["pod_anti_affinity"] = anti
    return {"namespaces": namespaces, "nodes": nodes, "existing": existing, "incoming": incoming}


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster())
def test_interpod_verdicts_match_the_kube_reference(c: dict[str, Any]) -> None:
    doc = {
        "run": {"mode": "filter", "task": "p"},
        "cluster": {
            "nodes": [{"name": n, "labels": labels} for n, labels in c["nodes"].items()],
            "namespaces": [{"name": n, "labels": labels} for n, labels in c["namespaces"].items()],
        },
        "queues": [{"name": "q"}],
        "jobs": [
            *({"name": e["name"], "queue": "q", "tasks": [{"status": "running"} | e]} for e in c["existing"]),
            {"name": "p", "queue": "q", "tasks": [{"name": "p"} | c["incoming"]]},
        ],
    }
    want = reference(c["incoming"], c["existing"], c["nodes"], c["namespaces"])
    assert filter_verdicts(doc) == want, c
