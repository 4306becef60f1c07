"""Writes the kube-scheduler scenarios for namespace selectors, label keys and scheduling gates.

Same format and builders as ``tools/kube_scheduler_scenarios.py`` (scheduler/conformance/scenarios/
kube-scheduler/SCHEMA.md), in directories of their own so the two writers never overwrite each other:

- ``interpodaffinity-selectors/``: ``namespaceSelector`` on inter-pod (anti-)affinity terms and the
  ``matchLabelKeys`` / ``mismatchLabelKeys`` kube-apiserver merges into a term's label selector;
- ``podtopologyspread-matchlabelkeys/``: ``matchLabelKeys`` on topology spread constraints;
- ``schedulinggates/``: the SchedulingGates plugin's PreEnqueue (a gated pod is not scheduled at all).

Sources are kube-scheduler's plugin test tables and, where those only check an intermediate state (the
PreFilter state) or have no case, the scheduler integration tables of the same release
(``test/integration/scheduler/filters``), whose verdicts are whole-scheduler ones. Where a Go test names a
namespace that is not a DNS-1123 label (``subteam1.team1``), the scenario writes ``subteam1-team1``.

Re-run ``PYTHONPATH=. python3 tools/kube_scheduler_scenarios_selectors.py`` after editing a table.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import kube_scheduler_scenarios as ks
from kube_scheduler_scenarios import E, N, pod, req, sel, spread

Doc = dict[str, Any]
INTEGRATION = "test/integration/scheduler/filters/filters_test.go"
DIRS = ("interpodaffinity-selectors", "podtopologyspread-matchlabelkeys", "schedulinggates")
OUT: list[tuple[str, Doc]] = []
IPA, ANTI, PTS = "InterPodAffinity", "InterPodAntiAffinity", "PodTopologySpread"


def _case(
    directory: str,
    plugin: str,
    file: str,
    test: str,
    name: str,
    nodes: list[Doc],
    incoming: Doc,
    expect: dict[str, str | None],
    existing: list[Doc] | None = None,
    namespaces: dict[str, dict[str, str]] | None = None,
    note: str | None = None,
) -> None:
    """One filter-mode case, built by the main writer's ``case`` (``file`` relative to the plugin folder,
    or a path from the repository root when ``plugin`` is empty), plus the cluster's namespaces."""
    ks.case(plugin, file, test, name, nodes, incoming, expect, existing, note)
    _, doc = ks.CASES.pop()
    if not plugin:
        doc["source"]["file"] = file
    if namespaces:
        doc["cluster"]["namespaces"] = [{"name": n, "labels": labels} for n, labels in namespaces.items()]
    OUT.append((directory, doc))


def ns_term(selector: Doc, topology_key: str, ns_selector: Doc | None, **extra: Any) -> Doc:
    """An affinity term with a namespace selector (and any other term field: namespaces, label keys)."""
    out: Doc = {"label_selector": selector, "topology_key": topology_key} | extra
    if ns_selector is not None:
        out["namespace_selector"] = ns_selector
    return out


# --- interpodaffinity/filtering_test.go TestRequiredAffinitySingleNode: namespaceSelector ------------------

_SCORING_NAMESPACES = {  # interpodaffinity/scoring_test.go's `namespaces`, shared by the plugin's tests
    "subteam1-team1": {"team": "team1"},
    "subteam2-team1": {"team": "team1"},
    "subteam1-team2": {"team": "team2"},
    "subteam2-team2": {"team": "team2"},
}
_DOTTED = "the Go test's namespace subteamN.teamM is written subteamN-teamM (a namespace is a DNS-1123 label)"


def _interpod_namespace_selector() -> None:
    f, t = "filtering_test.go", "TestRequiredAffinitySingleNode"
    node1 = [N("node1", region="r1", zone="z11")]
    scan = sel(req("service", "In", "securityscan", "value2"))
    team1 = sel(req("team", "In", "team1"))
    s1 = {"security": "S1"}

    def existing(ns: str) -> list[Doc]:
        return [E("pod", "node1", ns=ns, service="securityscan")]

    rows: list[tuple[str, Doc, str, str | None]] = [
        (
            "affinity with NamespaceSelector",
            pod(labels=s1, pod_affinity=[ns_term(scan, "region", team1)]),
            "subteam1-team1",
            None,
        ),
        (
            "affinity with non-matching NamespaceSelector",
            pod(labels=s1, pod_affinity=[ns_term(scan, "region", team1)]),
            "subteam1-team2",
            IPA,
        ),
        (
            "anti-affinity with matching NamespaceSelector",
            pod(namespace="subteam1-team1", labels=s1, pod_anti_affinity=[ns_term(scan, "zone", team1)]),
            "subteam2-team1",
            ANTI,
        ),
        (
            "anti-affinity with matching all NamespaceSelector",
            pod(namespace="subteam1-team1", labels=s1, pod_anti_affinity=[ns_term(scan, "zone", {})]),
            "subteam2-team1",
            ANTI,
        ),
        (
            "anti-affinity with non-matching NamespaceSelector",
            pod(namespace="subteam1-team1", labels=s1, pod_anti_affinity=[ns_term(scan, "zone", team1)]),
            "subteam1-team2",
            None,
        ),
    ]
    for name, incoming, ns, want in rows:
        _case(
            "interpodaffinity-selectors",
            "interpodaffinity",
            f,
            t,
            name,
            node1,
            incoming,
            {"node1": want},
            existing(ns),
            _SCORING_NAMESPACES,
            _DOTTED,
        )


# --- test/integration/scheduler/filters TestInterPodAffinityWithNamespaceSelector -------------------------

_INTEGRATION_NAMESPACES = {"ns1": {"team": "team1"}, "ns2": {"team": "team1"}, "ns3": {"team": "team2"}}
_WHOLE = "an integration test: the verdicts are the whole scheduler's, per node"


def _interpod_namespace_selector_integration() -> None:
    t = "TestInterPodAffinityWithNamespaceSelector"
    nodes = [N(f"testnode-{i}", region="r1", zone="z11") for i in range(2)]
    term = ns_term(sel(req("service", "In", "securityscan")), "region", sel(req("team", "In", "team1")))
    for name, ns, want in (("MatchingNamespaces", "ns2", None), ("MismatchingNamespaces", "ns3", IPA)):
        _case(
            "interpodaffinity-selectors",
            "",
            INTEGRATION,
            t,
            name,
            nodes,
            pod(namespace="ns1", pod_affinity=[term]),
            {"testnode-0": want, "testnode-1": want},
            [E("fakename2", "testnode-0", ns=ns, service="securityscan")],
            _INTEGRATION_NAMESPACES,
            _WHOLE,
        )


# --- test/integration/scheduler/filters TestInterPodAffinity: matchLabelKeys / mismatchLabelKeys -----------


def _interpod_label_keys() -> None:
    t = "TestInterPodAffinity"
    gig = 1_000_000_000
    nodes = [
        N("testnode-0", region="r1", zone="z11", node="n1", memory_bytes=gig),
        N("anothernode-0", region="r1", zone="z11", node="n2", memory_bytes=gig),
    ]
    foo = sel(req("foo", "Exists"))
    labels = {"foo": "", "bar": "a"}
    note = _WHOLE + "; the incoming pod is in ns1 like the existing ones"

    def on(node: str, name: str, bar: str, memory: int = 0) -> Doc:
        return E(name, node, ns="ns1", memory_bytes=memory, labels={"foo": "", "bar": bar})

    for key, bars in (("match_label_keys", ("fuga", "hoge")), ("mismatch_label_keys", ("a", "a"))):
        word = "matchLabelKeys" if key == "match_label_keys" else "mismatchLabelKeys"
        op = "In" if key == "match_label_keys" else "NotIn"
        _case(
            "interpodaffinity-selectors",
            "",
            INTEGRATION,
            t,
            f"anti affinity: {word} is merged into LabelSelector with {op} operator (feature flag: enabled)",
            nodes,
            pod(
                namespace="ns1",
                labels=labels,
                pod_anti_affinity=[ns_term(foo, "zone", None, **{key: ["bar"]})],
            ),
            {"testnode-0": None, "anothernode-0": None},
            [on("testnode-0", "pod1", bars[0]), on("testnode-0", "pod2", bars[1])],
            _INTEGRATION_NAMESPACES,
            note,
        )
    for key, (full, other) in (("match_label_keys", ("a", "hoge")), ("mismatch_label_keys", ("fuga", "a"))):
        word = "matchLabelKeys" if key == "match_label_keys" else "mismatchLabelKeys"
        op = "In" if key == "match_label_keys" else "NotIn"
        _case(
            "interpodaffinity-selectors",
            "",
            INTEGRATION,
            t,
            f"affinity: {word} is merged into LabelSelector with {op} operator (feature flag: enabled)",
            nodes,
            pod(
                namespace="ns1",
                labels=labels,
                memory_bytes=gig,
                pod_affinity=[ns_term(foo, "node", None, **{key: ["bar"]})],
            ),
            # The only pod the merged selector picks fills anothernode-0's memory.
            {"testnode-0": IPA, "anothernode-0": "Insufficientmemory"},
            [
                on("anothernode-0", "pod1", full, gig),
                on("testnode-0", "pod2", other),
                on("testnode-0", "pod3", "fuga" if other == "hoge" else other),
            ],
            _INTEGRATION_NAMESPACES,
            note,
        )


# --- podtopologyspread: matchLabelKeys -------------------------------------------------------------------


def _spread_match_label_keys() -> None:
    f, t = "filtering_test.go", "TestPreFilterState"
    note = (
        "the Go test checks the PreFilter state (merged selector, counts per zone); the verdicts are what"
        " Filter gives with that state"
    )
    foo = sel(req("foo", "Exists"))

    def mlk(selector: Doc | None, *keys: str) -> Doc:
        return spread(1, "zone", selector) | {"match_label_keys": list(keys)}

    five_foo_a = [
        E(name, node, labels={"foo": "a"})
        for name, node in (
            ("p-a1", "node-a"),
            ("p-a2", "node-a"),
            ("p-b1", "node-b"),
            ("p-y1", "node-y"),
            ("p-y2", "node-y"),
        )
    ]
    rows: list[tuple[str, Doc, list[Doc], tuple[str, ...]]] = [
        (
            "matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
            pod(labels={"foo": "", "bar": "a"}, topology_spread=[mlk(foo, "bar")]),
            [
                E("p-a1", "node-a", foo=""),
                E("p-a2", "node-a", foo="", bar="a"),
                E("p-b1", "node-b", foo=""),
                E("p-y1", "node-y", foo="", bar="a"),
                E("p-y2", "node-y", bar=""),
            ],
            ("", "", "", ""),
        ),
        (
            "matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
            pod(labels={"foo": "a"}, topology_spread=[mlk({}, "foo")]),
            five_foo_a,
            (PTS, PTS, "", ""),
        ),
        (
            "key in matchLabelKeys is ignored when LabelSelector is nil when feature gate enabled",
            pod(labels={"foo": ""}, topology_spread=[mlk(None, "bar")]),
            five_foo_a,
            ("", "", "", ""),
        ),
        (
            "key in matchLabelKeys is ignored when it isn't exist in pod.labels",
            pod(labels={"foo": ""}, topology_spread=[mlk(foo, "bar")]),
            five_foo_a,
            (PTS, PTS, "", ""),
        ),
    ]
    for name, incoming, existing, want in rows:
        _case(
            "podtopologyspread-matchlabelkeys",
            "podtopologyspread",
            f,
            t,
            name,
            ks.four(),
            incoming,
            ks.S(*want),
            existing,
            note=note,
        )

    # test/integration/scheduler/filters TestPodTopologySpreadFilter (nodes node-0..3, zone-0 / zone-1).
    nodes = [N(f"node-{i}", node=f"node-{i}", zone=f"zone-{i // 2}") for i in range(4)]
    rows_i: list[tuple[str, Doc, list[Doc], tuple[str | None, ...]]] = [
        (
            "matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty, pods spread across zone as 0/1",
            pod(labels={"foo": "", "bar": ""}, topology_spread=[mlk(foo, "bar")]),
            [E("p1a", "node-0", foo=""), E("p2a", "node-1", foo=""), E("p3a", "node-2", foo="", bar="")],
            (None, None, PTS, PTS),
        ),
        (
            "matchLabelKeys ANDed with LabelSelector when LabelSelector is empty, pods spread across zone as 2/1",
            pod(labels={"foo": ""}, topology_spread=[mlk({}, "foo")]),
            [E("p1a", "node-0", foo=""), E("p2a", "node-1", foo=""), E("p3a", "node-2", foo="")],
            (PTS, PTS, None, None),
        ),
    ]
    for name, incoming, existing, want_i in rows_i:
        _case(
            "podtopologyspread-matchlabelkeys",
            "",
            INTEGRATION,
            "TestPodTopologySpreadFilter",
            name,
            nodes,
            incoming,
            {f"node-{i}": w for i, w in enumerate(want_i)},
            existing,
            note=_WHOLE + " (candidateNodes: the nodes that pass)",
        )


# --- schedulinggates/scheduling_gates_test.go TestPreEnqueue ---------------------------------------------


def _scheduling_gates() -> None:
    for name, gates in (
        ("pod does not carry scheduling gates", []),
        ("pod carries scheduling gates", ["foo", "bar"]),
    ):
        task: Doc = {"name": "p", "status": "pending", "cpu_millicores": 0, "memory_bytes": 0}
        if gates:
            task["scheduling_gates"] = gates
        expect: Doc = {"tasks": {"p": {"status": "pending" if gates else "allocated", "node": None}}}
        if gates:
            # PreEnqueue keeps the pod out of the queue: no attempt, so no Unschedulable decision either.
            expect["tasks"]["p"].pop("node")
            expect["no_decision"] = ["p"]
        else:
            expect["tasks"]["p"]["node"] = "node1"
        doc: Doc = {
            "name": name,
            "source": {
                "repository": ks.VERSION,
                "file": f"{ks.PLUGINS}/schedulinggates/scheduling_gates_test.go",
                "test": "TestPreEnqueue",
                "case": name,
                "note": "the Go test asks PreEnqueue alone; here one allocate pass runs on a node that fits",
            },
            "strict": True,
            "run": {"mode": "single_pass", "phase": "allocate"},
            "cluster": {"nodes": [N("node1")]},
            "queues": ks.one_queue(),
            "jobs": [{"name": "p", "queue": "q", "priority": 50, "min_available": 1, "tasks": [task]}],
            "expect": expect,
        }
        OUT.append(("schedulinggates", doc))


def write() -> int:
    """Write every case (one file each, numbered per directory); returns how many."""
    for d in DIRS:
        if (ks.OUT / d).exists():
            shutil.rmtree(ks.OUT / d)
    counts: dict[str, int] = {}
    for directory, doc in OUT:
        counts[directory] = counts.get(directory, 0) + 1
        path = ks.OUT / directory / f"{counts[directory]:03d}-{ks._slug(doc['name'])}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n")
    return len(OUT)


def main() -> None:
    """Build every table and write the files."""
    _interpod_namespace_selector()
    _interpod_namespace_selector_integration()
    _interpod_label_keys()
    _spread_match_label_keys()
    _scheduling_gates()
    print(f"wrote {write()} scenarios under {ks.OUT}")


if __name__ == "__main__":
    main()
