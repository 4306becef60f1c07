"""Writes the kube-scheduler conformance scenarios (scheduler/conformance/scenarios/kube-scheduler/).

Each case is translated by hand from a table test of kube-scheduler's own plugins (k8s.io/kubernetes
v1.36.3, ``pkg/scheduler/framework/plugins/<plugin>/*_test.go``): the same nodes, existing pods and incoming
pod, and the verdict kube-scheduler gives each node. ``source`` names the Go file, test function and case.
The scenarios run in the ``filter`` mode (scheduler/conformance/scenarios/kube-scheduler/SCHEMA.md): the verdict of every
filter on every node, as the reason code of docs/filters.md. A plugin's unit test runs that plugin alone;
where a node the plugin admits is refused by another default filter (the Go test says "in real case ..."),
the expected verdict is the whole chain's and ``note`` says so. Cases Hourglass cannot express (alpha
feature gates, scheduler configuration arguments) are left out and listed in SCHEMA.md.

The files are data, checked in; re-run ``PYTHONPATH=. python3 tools/kube_scheduler_scenarios.py`` after editing a
table (the sidecar cases read their requests through ingest).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "scheduler" / "conformance" / "scenarios" / "kube-scheduler"
VERSION = "k8s.io/kubernetes v1.36.3"
PLUGINS = "pkg/scheduler/framework/plugins"

Doc = dict[str, Any]
CASES: list[tuple[str, Doc]] = []  # (plugin directory, scenario)


def one_queue() -> list[Doc]:
    """The queues of every filter-mode scenario (this module's and the volume, storage and selector
    generators'): one queue, ``q``, with a GPU quota no case reaches."""
    return [
        {
            "name": "q",
            "parent": None,
            "priority": 100,
            "gpu": {"quota": 100, "limit": None, "over_quota_weight": 1},
        }
    ]


# --- builders -------------------------------------------------------------------------------------------


def N(name: str, taints: list[Doc] | None = None, **kw: Any) -> Doc:
    """A node; keyword arguments other than node fields are its labels."""
    fields = {
        k: kw.pop(k)
        for k in list(kw)
        if k in ("unschedulable", "cpu_millicores", "memory_bytes", "max_pods", "extended", "gpus")
    }
    labels = kw.pop("labels", {}) | {k: str(v) for k, v in kw.items()}
    out: Doc = {"name": name, "labels": labels} | fields
    if taints:
        out["taints"] = taints
    return out


def E(name: str, node: str, ns: str = "default", terminating: bool = False, **kw: Any) -> Doc:
    """An existing pod bound to `node` (a running pod of its own job)."""
    fields = {
        k: kw.pop(k)
        for k in list(kw)
        if k
        in ("pod_affinity", "pod_anti_affinity", "host_ports", "cpu_millicores", "memory_bytes", "extended")
    }
    labels = kw.pop("labels", {}) | {k: str(v) for k, v in kw.items()}
    return {
        "name": name,
        "status": "releasing" if terminating else "running",
        "node": node,
        "namespace": ns,
        "labels": labels,
        "cpu_millicores": 0,
        "memory_bytes": 0,
    } | fields


def pod(**kw: Any) -> Doc:
    """The incoming pod: task fields of the real-nodes schema (requests default to none, as in the Go tests)."""
    return {"cpu_millicores": 0, "memory_bytes": 0} | kw


def req(key: str, op: str, *values: str) -> Doc:
    out: Doc = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


def sel(*exprs: Doc, **labels: str) -> Doc:
    out: Doc = {}
    if labels:
        out["match_labels"] = labels
    if exprs:
        out["match_expressions"] = list(exprs)
    return out


def term(selector: Doc, topology_key: str, namespaces: list[str] | None = None) -> Doc:
    out: Doc = {"label_selector": selector, "topology_key": topology_key}
    if namespaces:
        out["namespaces"] = namespaces
    return out


def t_in(key: str, topology_key: str, *values: str) -> Doc:
    """st.PodAffinityIn / PodAntiAffinityIn."""
    return term(sel(req(key, "In", *values)), topology_key)


def t_not_in(key: str, topology_key: str, *values: str) -> Doc:
    return term(sel(req(key, "NotIn", *values)), topology_key)


def t_exists(key: str, topology_key: str) -> Doc:
    return term(sel(req(key, "Exists")), topology_key)


def spread(
    max_skew: int,
    key: str,
    selector: Doc | None,
    min_domains: int | None = None,
    affinity: str | None = None,
    taints: str | None = None,
) -> Doc:
    out: Doc = {"max_skew": max_skew, "topology_key": key, "label_selector": selector}  # None: missing
    if min_domains is not None:
        out["min_domains"] = min_domains
    if affinity is not None:
        out["node_affinity_policy"] = affinity
    if taints is not None:
        out["node_taints_policy"] = taints
    return out


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> Doc:
    return {"key": key, "value": value, "effect": effect}


def tol(key: str = "", value: str = "", effect: str | None = None, op: str = "Equal") -> Doc:
    out: Doc = {"key": key, "operator": op}
    if value:
        out["value"] = value
    if effect is not None:
        out["effect"] = effect
    return out


def port(spec: str) -> Doc:
    """``PROTOCOL/hostIP/port`` as the Go test's newPod writes it."""
    proto, ip, p = spec.split("/")
    out: Doc = {"port": int(p), "protocol": proto}
    if ip:
        out["host_ip"] = ip
    return out


def case(
    plugin: str,
    file: str,
    test: str,
    name: str,
    nodes: list[Doc],
    incoming: Doc,
    expect: Mapping[str, str | list[str] | None],
    existing: list[Doc] | None = None,
    note: str | None = None,
) -> None:
    """One scenario: `expect` maps each node to the reason code kube-scheduler's filters give it (None:
    every filter passes; a list: any of these codes, where kube-scheduler and Hourglass run two failing
    filters in a different order)."""
    jobs = [
        {"name": e["name"], "queue": "q", "priority": 50, "min_available": 1, "tasks": [e]}
        for e in existing or []
    ]
    jobs.append(
        {
            "name": "incoming",
            "queue": "q",
            "priority": 50,
            "min_available": 1,
            "tasks": [{"name": "incoming"} | incoming],
        }
    )
    source: Doc = {"repository": VERSION, "file": f"{PLUGINS}/{plugin}/{file}", "test": test, "case": name}
    if note:
        source["note"] = note
    doc: Doc = {
        "name": name,
        "source": source,
        "strict": True,
        "run": {"mode": "filter", "task": "incoming"},
        "cluster": {"nodes": nodes},
        "queues": one_queue(),
        "jobs": jobs,
        "expect": {"filter": expect},
    }
    CASES.append((plugin, doc))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:70].rstrip("-")


def write() -> int:
    """Write every case (one file each, numbered per plugin); returns how many."""
    # Only the plugin folders written here: other writers (kube_scheduler_scenarios_selectors.py) own theirs.
    for d in sorted({plugin for plugin, _ in CASES}):
        if (OUT / d).is_dir():
            shutil.rmtree(OUT / d)
    counts: dict[str, int] = {}
    for plugin, doc in CASES:
        if doc["name"].endswith(("invalid affinity label syntax", "invalid antiaffinity label syntax")):
            # kube-scheduler's PreFilter rejects the pod; Hourglass refuses it earlier, at its event
            # contract (a dead letter naming the field): the pod is never placed in either.
            doc = {**doc, "expect": {"refused": "label_selector.match_expressions.0.values.0"}}
        counts[plugin] = counts.get(plugin, 0) + 1
        path = OUT / plugin / f"{counts[plugin]:03d}-{_slug(doc['name'])}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n")
    return len(CASES)


# --- tainttoleration/taint_toleration_test.go TestTaintTolerationFilter --------------------------------


def _taints() -> None:
    f, t = "taint_toleration_test.go", "TestTaintTolerationFilter"
    rows: list[tuple[str, list[Doc], list[Doc], str | None]] = [
        (
            "A pod having no tolerations can't be scheduled onto a node with nonempty taints",
            [],
            [taint("dedicated", "user1")],
            "TaintToleration",
        ),
        (
            "A pod which can be scheduled on a dedicated node assigned to user1 with effect NoSchedule",
            [tol("dedicated", "user1", "NoSchedule")],
            [taint("dedicated", "user1")],
            None,
        ),
        (
            "A pod which can't be scheduled on a dedicated node assigned to user2 with effect NoSchedule",
            [tol("dedicated", "user2", "NoSchedule")],
            [taint("dedicated", "user1")],
            "TaintToleration",
        ),
        (
            "A pod can be scheduled onto the node, with a toleration uses operator Exists that tolerates the taints on the node",
            [tol("foo", effect="NoSchedule", op="Exists")],
            [taint("foo", "bar")],
            None,
        ),
        (
            "A pod has multiple tolerations, node has multiple taints, all the taints are tolerated, pod can be scheduled onto the node",
            [tol("dedicated", "user2", "NoSchedule"), tol("foo", effect="NoSchedule", op="Exists")],
            [taint("dedicated", "user2"), taint("foo", "bar")],
            None,
        ),
        (
            "A pod has a toleration that keys and values match the taint on the node, but (non-empty) effect doesn't match, "
            "can't be scheduled onto the node",
            [tol("foo", "bar", "PreferNoSchedule")],
            [taint("foo", "bar")],
            "TaintToleration",
        ),
        (
            "The pod has a toleration that keys and values match the taint on the node, the effect of toleration is empty, "
            "and the effect of taint is NoSchedule. Pod can be scheduled onto the node",
            [tol("foo", "bar")],
            [taint("foo", "bar")],
            None,
        ),
        (
            "The pod has a toleration that key and value don't match the taint on the node, "
            "but the effect of taint on node is PreferNoSchedule. Pod can be scheduled onto the node",
            [tol("dedicated", "user2", "NoSchedule")],
            [taint("dedicated", "user1", "PreferNoSchedule")],
            None,
        ),
        (
            "The pod has no toleration, but the effect of taint on node is PreferNoSchedule. Pod can be scheduled onto the node",
            [],
            [taint("dedicated", "user1", "PreferNoSchedule")],
            None,
        ),
    ]
    for name, tols, node_taints, want in rows:
        incoming = pod(tolerations=tols) if tols else pod()
        case("tainttoleration", f, t, name, [N("nodeA", taints=node_taints)], incoming, {"nodeA": want})


# --- nodeunschedulable/node_unschedulable_test.go TestNodeUnschedulable ---------------------------------


def _unschedulable() -> None:
    f, t = "node_unschedulable_test.go", "TestNodeUnschedulable"
    case(
        "nodeunschedulable",
        f,
        t,
        "Does not schedule pod to unschedulable node (node.Spec.Unschedulable==true)",
        [N("node", unschedulable=True)],
        pod(),
        {"node": "NodeUnschedulable"},
    )
    case("nodeunschedulable", f, t, "Schedule pod to normal node", [N("node")], pod(), {"node": None})
    case(
        "nodeunschedulable",
        f,
        t,
        "Schedule pod with toleration to unschedulable node (node.Spec.Unschedulable==true)",
        [N("node", unschedulable=True)],
        pod(tolerations=[tol("node.kubernetes.io/unschedulable", effect="NoSchedule")]),
        {"node": None},
    )


# --- nodeports/node_ports_test.go TestNodePorts --------------------------------------------------------


def _ports() -> None:
    f, t = "node_ports_test.go", "TestNodePorts"
    rows: list[tuple[str, list[str], list[str], str | None]] = [
        ("skip filter", [], [], None),
        ("other port", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/9090"], None),
        ("same udp port", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], "HostPorts"),
        ("same tcp port", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], "HostPorts"),
        ("different host ip", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.2/8080"], None),
        ("different protocol", ["UDP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], None),
        (
            "second udp port conflict",
            ["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"],
            ["UDP/127.0.0.1/8080"],
            "HostPorts",
        ),
        (
            "first tcp port conflict",
            ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"],
            ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"],
            "HostPorts",
        ),
        (
            "first tcp port conflict due to 0.0.0.0 hostIP",
            ["TCP/0.0.0.0/8001"],
            ["TCP/127.0.0.1/8001"],
            "HostPorts",
        ),
        (
            "TCP hostPort conflict due to 0.0.0.0 hostIP",
            ["TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"],
            ["TCP/127.0.0.1/8001"],
            "HostPorts",
        ),
        (
            "second tcp port conflict to 0.0.0.0 hostIP",
            ["TCP/127.0.0.1/8001"],
            ["TCP/0.0.0.0/8001"],
            "HostPorts",
        ),
        ("second different protocol", ["UDP/127.0.0.1/8001"], ["TCP/0.0.0.0/8001"], None),
        (
            "UDP hostPort conflict due to 0.0.0.0 hostIP",
            ["UDP/127.0.0.1/8001"],
            ["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"],
            "HostPorts",
        ),
    ]
    for name, mine, held, want in rows:
        existing = [E("m1", "node", host_ports=[port(p) for p in held])] if held else []
        incoming = pod(host_ports=[port(p) for p in mine]) if mine else pod()
        case("nodeports", f, t, name, [N("node")], incoming, {"node": want}, existing)
    case(
        "nodeports",
        f,
        t,
        "non-sidecar initContainer using hostPort",
        [N("node")],
        pod(),
        {"node": None},
        [E("m1", "node", host_ports=[port("TCP/0.0.0.0/8001")])],
        note="a plain init container's host port is not the pod's: ingest carries no port, so the pod holds none",
    )
    case(
        "nodeports",
        f,
        t,
        "TCP hostPort conflict from sidecar initContainer",
        [N("node")],
        pod(host_ports=[port("TCP//8001")]),
        {"node": "HostPorts"},
        [E("m1", "node", host_ports=[port("TCP/0.0.0.0/8001")])],
        note="a sidecar (restartPolicy Always) init container's host port is the pod's, as ingest carries it",
    )
    # node_ports_test.go TestFits: the same checks through the exported Fits helper.


# --- nodeaffinity/node_affinity_test.go TestNodeAffinity -----------------------------------------------


def na(*terms: list[Doc]) -> list[Doc]:
    """Required node affinity: each argument is one term's matchExpressions."""
    return [{"match_expressions": t} for t in terms]


def _node_affinity() -> None:
    f, t = "node_affinity_test.go", "TestNodeAffinity"
    NA = "NodeAffinity"
    rows: list[tuple[str, Doc, dict[str, str], str | None]] = [
        ("missing labels", pod(node_selector={"foo": "bar"}), {}, NA),
        ("same labels", pod(node_selector={"foo": "bar"}), {"foo": "bar"}, None),
        ("node labels are superset", pod(node_selector={"foo": "bar"}), {"foo": "bar", "baz": "blah"}, None),
        ("node labels are subset", pod(node_selector={"foo": "bar", "baz": "blah"}), {"foo": "bar"}, NA),
        (
            "Pod with matchExpressions using In operator that matches the existing node",
            pod(node_affinity=na([req("foo", "In", "bar", "value2")])),
            {"foo": "bar"},
            None,
        ),
        (
            "Pod with matchExpressions using Gt operator that matches the existing node",
            pod(node_affinity=na([req("kernel-version", "Gt", "0204")])),
            {"kernel-version": "0206"},
            None,
        ),
        (
            "Pod with matchExpressions using NotIn operator that matches the existing node",
            pod(node_affinity=na([req("mem-type", "NotIn", "DDR", "DDR2")])),
            {"mem-type": "DDR3"},
            None,
        ),
        (
            "Pod with matchExpressions using Exists operator that matches the existing node",
            pod(node_affinity=na([req("GPU", "Exists")])),
            {"GPU": "NVIDIA-GRID-K1"},
            None,
        ),
        (
            "Pod with affinity that don't match node's labels won't schedule onto the node",
            pod(node_affinity=na([req("foo", "In", "value1", "value2")])),
            {"foo": "bar"},
            NA,
        ),
        ("Pod with no Affinity will schedule onto a node", pod(), {"foo": "bar"}, None),
        ("Pod with Affinity but nil NodeSelector will schedule onto a node", pod(), {"foo": "bar"}, None),
        (
            "Pod with multiple matchExpressions ANDed that matches the existing node",
            pod(node_affinity=na([req("GPU", "Exists"), req("GPU", "NotIn", "AMD", "INTER")])),
            {"GPU": "NVIDIA-GRID-K1"},
            None,
        ),
        (
            "Pod with multiple matchExpressions ANDed that doesn't match the existing node",
            pod(node_affinity=na([req("GPU", "Exists"), req("GPU", "In", "AMD", "INTER")])),
            {"GPU": "NVIDIA-GRID-K1"},
            NA,
        ),
        (
            "Pod with multiple NodeSelectorTerms ORed in affinity, matches the node's labels and will schedule onto the node",
            pod(
                node_affinity=na(
                    [req("foo", "In", "bar", "value2")], [req("diffkey", "In", "wrong", "value2")]
                )
            ),
            {"foo": "bar"},
            None,
        ),
        (
            "Pod with an Affinity and a PodSpec.NodeSelector(the old thing that we are deprecating) both are satisfied, "
            "will schedule onto the node",
            pod(node_selector={"foo": "bar"}, node_affinity=na([req("foo", "Exists")])),
            {"foo": "bar"},
            None,
        ),
        (
            "Pod with an Affinity matches node's labels but the PodSpec.NodeSelector(the old thing that we are deprecating) "
            "is not satisfied, won't schedule onto the node",
            pod(node_selector={"foo": "bar"}, node_affinity=na([req("foo", "Exists")])),
            {"foo": "barrrrrr"},
            NA,
        ),
        (
            "Pod with an invalid value in Affinity term won't be scheduled onto the node",
            pod(node_affinity=na([req("foo", "NotIn", "invalid value: ___@#$%^")])),
            {"foo": "bar"},
            NA,
        ),
        (
            "Matches node selector correctly even if PreFilter is not called",
            pod(node_selector={"foo": "bar"}),
            {"foo": "bar", "baz": "blah"},
            None,
        ),
        (
            "Matches node affinity correctly even if PreFilter is not called",
            pod(node_affinity=na([req("GPU", "Exists"), req("GPU", "NotIn", "AMD", "INTER")])),
            {"GPU": "NVIDIA-GRID-K1"},
            None,
        ),
    ]
    for name, incoming, labels, want in rows:
        case("nodeaffinity", f, t, name, [N("node1", labels=labels)], incoming, {"node1": want})
    # matchFields metadata.name as the only requirement of the only term: ingest reads it as the pod's
    # allowed nodes.
    case(
        "nodeaffinity",
        f,
        t,
        "Pod with matchFields using In operator that matches the existing node",
        [N("node1")],
        pod(allowed_nodes=["node1"]),
        {"node1": None},
        note="a lone matchFields metadata.name In term is the scenario's allowed_nodes (ingest/kube/translate.py)",
    )
    case(
        "nodeaffinity",
        f,
        t,
        "Pod with matchFields using In operator that does not match the existing node",
        [N("node2")],
        pod(allowed_nodes=["node1"]),
        {"node2": NA},
        note="a lone matchFields metadata.name In term is the scenario's allowed_nodes (ingest/kube/translate.py)",
    )
    case(
        "nodeaffinity",
        f,
        t,
        "Pod with two terms of node.Name affinity",
        [N("node2")],
        pod(allowed_nodes=["node1", "node2"]),
        {"node2": None},
        note="two lone matchFields metadata.name In terms, ORed: allowed_nodes node1, node2",
    )


def _node_affinity_fields() -> None:
    """The matchFields cases: ingest keeps a node-name requirement in its term (key ``@metadata.name``)
    unless allowed nodes say the same."""
    f, t = "node_affinity_test.go", "TestNodeAffinity"
    na_ = "NodeAffinity"

    def name_in(n: str) -> Doc:
        return req("@metadata.name", "In", n)

    foo_bar = req("foo", "In", "bar")
    rows: list[tuple[str, list[list[Doc]], str, dict[str, str], str | None]] = [
        (
            "Pod with two terms: matchFields does not match, but matchExpressions matches",
            [[name_in("node1")], [name_in("node2"), foo_bar]],
            "node2",
            {"foo": "bar"},
            None,
        ),
        (
            "Pod with one term: matchFields does not match, but matchExpressions matches",
            [[name_in("node1"), foo_bar]],
            "node2",
            {"foo": "bar"},
            na_,
        ),
        (
            "Pod with one term: both matchFields and matchExpressions match",
            [[name_in("node1"), foo_bar]],
            "node1",
            {"foo": "bar"},
            None,
        ),
        (
            "Pod with two terms: both matchFields and matchExpressions do not match",
            [[name_in("node1")], [req("foo", "In", "not-match-to-bar")]],
            "node2",
            {"foo": "bar"},
            na_,
        ),
        (
            "Pod with two conflicting mach field requirements",
            [[name_in("node1"), name_in("node2")]],
            "node2",
            {"foo": "bar"},
            na_,
        ),
    ]
    note = (
        "matchFields metadata.name is the node-name requirement @metadata.name of its term (ingest/kube/translate.py)"
    )
    for name, terms, node_name, labels, want in rows:
        case(
            "nodeaffinity",
            f,
            t,
            name,
            [N(node_name, labels=labels)],
            pod(node_affinity=na(*terms)),
            {node_name: want},
            note=note,
        )
    case(
        "nodeaffinity",
        f,
        t,
        "Pod with empty MatchExpressions is not a valid value will match no objects and won't schedule onto the node",
        [N("node1", foo="bar")],
        pod(allowed_nodes=[]),
        {"node1": na_},
        note="a required node affinity whose only term is empty matches no node: ingest says so with an empty "
        "allowed_nodes list",
    )


# --- noderesources/fit_test.go TestEnoughRequests ------------------------------------------------------

A, B = "example.com/aaa", "example.com/bbb"
KA, KB = "kubernetes.io/something", "subdomain.kubernetes.io/something"
HP = "hugepages-2Mi"


def _fit_node(**extra: int) -> Doc:
    """makeAllocatableResources(10, 20, 32, 5, 20, 5): 10m CPU, 20 bytes, 32 pods, 5 aaa, 5 hugepages-2Mi."""
    return N("node", cpu_millicores=10, memory_bytes=20, max_pods=32, extended={A: 5, HP: 5} | extra)


def _fit() -> None:
    f, t = "fit_test.go", "TestEnoughRequests"
    note_init = "the pod's effective request is kube's max(sum of containers, largest init container)"
    # (name, effective request (cpu, memory, extended), used by the existing pod (cpu, memory, extended), want)
    rows: list[
        tuple[str, tuple[int, int, dict[str, int]], tuple[int, int, dict[str, int]], str | None, str | None]
    ] = [
        ("no resources requested always fits", (0, 0, {}), (10, 20, {}), None, None),
        (
            "too many resources fails",
            (1, 1, {}),
            (10, 20, {}),
            "InsufficientCPU",
            "kube reports CPU and memory; Hourglass names the first, CPU",
        ),
        (
            "too many resources fails due to init container cpu",
            (3, 1, {}),
            (8, 19, {}),
            "InsufficientCPU",
            note_init,
        ),
        (
            "too many resources fails due to highest init container cpu",
            (3, 1, {}),
            (8, 19, {}),
            "InsufficientCPU",
            note_init,
        ),
        (
            "too many resources fails due to init container memory",
            (1, 3, {}),
            (9, 19, {}),
            "Insufficientmemory",
            note_init,
        ),
        (
            "too many resources fails due to highest init container memory",
            (1, 3, {}),
            (9, 19, {}),
            "Insufficientmemory",
            note_init,
        ),
        (
            "init container fits because it's the max, not sum, of containers and init containers",
            (1, 1, {}),
            (9, 19, {}),
            None,
            note_init,
        ),
        (
            "multiple init containers fit because it's the max, not sum, of containers and init containers",
            (1, 1, {}),
            (9, 19, {}),
            None,
            note_init,
        ),
        ("both resources fit", (1, 1, {}), (5, 5, {}), None, None),
        ("one resource memory fits", (2, 1, {}), (9, 5, {}), "InsufficientCPU", None),
        ("one resource cpu fits", (1, 2, {}), (5, 19, {}), "Insufficientmemory", None),
        ("equal edge case", (5, 1, {}), (5, 19, {}), None, None),
        ("equal edge case for init container", (5, 1, {}), (5, 19, {}), None, note_init),
        ("extended resource fits", (0, 0, {A: 1}), (0, 0, {}), None, None),
        ("extended resource fits for init container", (0, 0, {A: 1}), (0, 0, {}), None, note_init),
        (
            "extended resource capacity enforced",
            (1, 1, {A: 10}),
            (0, 0, {}),
            "InsufficientExtendedResource",
            None,
        ),
        (
            "extended resource capacity enforced for init container",
            (1, 1, {A: 10}),
            (0, 0, {}),
            "InsufficientExtendedResource",
            note_init,
        ),
        (
            "extended resource allocatable enforced",
            (1, 1, {A: 1}),
            (0, 0, {A: 5}),
            "InsufficientExtendedResource",
            None,
        ),
        (
            "extended resource allocatable enforced for init container",
            (1, 1, {A: 1}),
            (0, 0, {A: 5}),
            "InsufficientExtendedResource",
            note_init,
        ),
        (
            "extended resource allocatable enforced for multiple containers",
            (2, 2, {A: 6}),
            (0, 0, {A: 2}),
            "InsufficientExtendedResource",
            None,
        ),
        (
            "extended resource allocatable admits multiple init containers",
            (1, 1, {A: 3}),
            (0, 0, {A: 2}),
            None,
            note_init,
        ),
        (
            "extended resource allocatable enforced for multiple init containers",
            (1, 1, {A: 6}),
            (0, 0, {A: 2}),
            "InsufficientExtendedResource",
            note_init,
        ),
        (
            "extended resource allocatable enforced for unknown resource",
            (1, 1, {B: 1}),
            (0, 0, {}),
            "ExtendedResourceMissing",
            None,
        ),
        (
            "extended resource allocatable enforced for unknown resource for init container",
            (1, 1, {B: 1}),
            (0, 0, {}),
            "ExtendedResourceMissing",
            note_init,
        ),
        (
            "kubernetes.io resource capacity enforced",
            (1, 1, {KA: 10}),
            (0, 0, {}),
            "ExtendedResourceMissing",
            None,
        ),
        (
            "kubernetes.io resource capacity enforced for init container",
            (1, 1, {KB: 10}),
            (0, 0, {}),
            "ExtendedResourceMissing",
            note_init,
        ),
        (
            "hugepages resource capacity enforced",
            (1, 1, {HP: 10}),
            (0, 0, {}),
            "InsufficientExtendedResource",
            None,
        ),
        (
            "hugepages resource capacity enforced for init container",
            (1, 1, {HP: 10}),
            (0, 0, {}),
            "InsufficientExtendedResource",
            note_init,
        ),
        (
            "hugepages resource allocatable enforced for multiple containers",
            (2, 2, {HP: 6}),
            (0, 0, {HP: 2}),
            "InsufficientExtendedResource",
            None,
        ),
        (
            "resources + pod overhead fits",
            (4, 14, {}),
            (5, 5, {}),
            None,
            "the pod's effective request includes its overhead (1m+3m, 1+13)",
        ),
        (
            "requests + overhead does not fit for memory",
            (2, 16, {}),
            (5, 5, {}),
            "Insufficientmemory",
            "the pod's effective request includes its overhead (1m+1m, 1+15)",
        ),
        (
            "skip checking extended resource request with quantity zero via resource groups",
            (1, 1, {}),
            (0, 0, {A: 6}),
            None,
            "a zero request of aaa is no request (ingest drops it)",
        ),
    ]
    for name, (cpu, mem, ext), (ucpu, umem, uext), want, note in rows:
        incoming = pod(cpu_millicores=cpu, memory_bytes=mem) | ({"extended": ext} if ext else {})
        used = E("existing", "node", cpu_millicores=ucpu, memory_bytes=umem)
        if uext:
            used["extended"] = uext
        # One case's existing pod holds 6 aaa of the node's 5 (kube's NodeInfo does not check): the scenario
        # gives the node that much, which changes nothing for a pod that asks for none.
        node = _fit_node(**{A: uext[A]}) if uext.get(A, 0) > 5 else _fit_node()
        case("noderesources", f, t, name, [node], incoming, {"node": want}, [used], note)


def _restartable_init() -> None:
    """fit_test.go TestRestartableInitContainers (SidecarContainers is GA): the request is ingest's reading of
    the Go pod spec (ingest.kube.translate.pod_requests), so these cases check the sidecar sum end to end."""
    from ingest.kube.translate import pod_requests

    f, t = "fit_test.go", "TestRestartableInitContainers"

    def spec(request: str | None, sidecar: str | None, with_sidecar: bool = True) -> Doc:
        def c(name: str, cpu: str | None, **kw: Any) -> Doc:
            return {"name": name, "resources": {"requests": {"cpu": cpu}} if cpu else {}} | kw

        out: Doc = {"containers": [c("regular", request)]}
        if with_sidecar:
            out["initContainers"] = [c("restartable-init", sidecar, restartPolicy="Always")]
        return out

    rows = [
        (
            "allow pod without restartable init containers if sidecar containers is enabled",
            spec(None, None, False),
            None,
        ),
        (
            "allow pod with restartable init containers if sidecar containers is enabled",
            spec(None, None),
            None,
        ),
        (
            "allow pod if the total requested resources do not exceed the node's allocatable resources",
            spec("1m", "1m"),
            None,
        ),
        (
            "not allow pod if the total requested resources do exceed the node's allocatable resources",
            spec("1m", "2m"),
            "InsufficientCPU",
        ),
    ]
    for name, pod_spec, want in rows:
        r = pod_requests({"metadata": {"name": "p", "namespace": "default"}, "spec": pod_spec})
        node = N(
            "node", cpu_millicores=2, memory_bytes=0, max_pods=1
        )  # makeAllocatableResources(2, 0, 1, 0, 0, 0)
        incoming = pod(cpu_millicores=r.cpu_millicores, memory_bytes=r.memory_bytes)
        case(
            "noderesources",
            f,
            t,
            name,
            [node],
            incoming,
            {"node": want},
            note="the pod's request is what ingest reads from the Go pod spec: containers plus sidecars",
        )


# --- interpodaffinity/filtering_test.go -----------------------------------------------------------------

IPA, ANTI, EXIST = "InterPodAffinity", "InterPodAntiAffinity", "ExistingPodsAntiAffinity"


def _interpod_single() -> None:
    f, t = "filtering_test.go", "TestRequiredAffinitySingleNode"
    node1 = [N("node1", region="r1", zone="z11")]
    scan = {"service": "securityscan"}
    s1 = {"security": "S1"}
    existing = [E("pod", "node1", labels=scan)]
    rows: list[tuple[str, Doc, list[Doc], str | None]] = [
        (
            "A pod that has no required pod affinity scheduling rules can schedule onto a node with no existing pods",
            pod(),
            [],
            None,
        ),
        (
            "satisfies with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using In operator that matches the existing pod",
            pod(labels=s1, pod_affinity=[t_in("service", "region", "securityscan", "value2")]),
            existing,
            None,
        ),
        (
            "satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using not in operator in labelSelector that matches the existing pod",
            pod(labels=s1, pod_affinity=[t_not_in("service", "region", "securityscan3", "value3")]),
            existing,
            None,
        ),
        (
            "Does not satisfy the PodAffinity with labelSelector because of diff Namespace",
            pod(
                labels=s1,
                pod_affinity=[
                    term(sel(req("service", "In", "securityscan", "value2")), "region", ["diffnamespace"])  # a namespace is a DNS-1123 label: the Go case's name, lowercased
                ],
            ),
            [E("pod", "node1", ns="ns", labels=scan)],
            IPA,
        ),
        (
            "Doesn't satisfy the PodAffinity because of unmatching labelSelector with the existing pod",
            pod(labels=scan, pod_affinity=[t_in("service", "region", "antivirusscan", "value2")]),
            existing,
            IPA,
        ),
        (
            "satisfies the PodAffinity with different label Operators in multiple RequiredDuringSchedulingIgnoredDuringExecution ",
            pod(
                labels=s1,
                pod_affinity=[
                    term(sel(req("service", "Exists"), req("wrongkey", "DoesNotExist")), "region"),
                    term(
                        sel(req("service", "In", "securityscan"), req("service", "NotIn", "WrongValue")),
                        "region",
                    ),
                ],
            ),
            existing,
            None,
        ),
        (
            "The labelSelector requirements(items of matchExpressions) are ANDed, the pod cannot schedule onto the node because one of the matchExpression item don't match.",
            pod(
                labels=s1,
                pod_affinity=[
                    term(sel(req("service", "Exists"), req("wrongkey", "DoesNotExist")), "region"),
                    term(
                        sel(req("service", "In", "securityscan2"), req("service", "NotIn", "WrongValue")),
                        "region",
                    ),
                ],
            ),
            existing,
            IPA,
        ),
        (
            "satisfies the PodAffinity and PodAntiAffinity with the existing pod",
            pod(
                labels=s1,
                pod_affinity=[t_in("service", "region", "securityscan", "value2")],
                pod_anti_affinity=[t_in("service", "node", "antivirusscan", "value2")],
            ),
            existing,
            None,
        ),
        (
            "satisfies the PodAffinity and PodAntiAffinity and PodAntiAffinity symmetry with the existing pod",
            pod(
                labels=s1,
                pod_affinity=[t_in("service", "region", "securityscan", "value2")],
                pod_anti_affinity=[t_in("service", "node", "antivirusscan", "value2")],
            ),
            [
                E(
                    "pod",
                    "node1",
                    labels=scan,
                    pod_anti_affinity=[t_in("service", "node", "antivirusscan", "value2")],
                )
            ],
            None,
        ),
        (
            "satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the existing pod",
            pod(
                labels=s1,
                pod_affinity=[t_in("service", "region", "securityscan", "value2")],
                pod_anti_affinity=[t_in("service", "zone", "securityscan", "value2")],
            ),
            existing,
            ANTI,
        ),
        (
            "satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy PodAntiAffinity symmetry with the existing pod",
            pod(
                labels=scan,
                pod_affinity=[t_in("service", "region", "securityscan", "value2")],
                pod_anti_affinity=[t_in("service", "node", "antivirusscan", "value2")],
            ),
            [
                E(
                    "pod",
                    "node1",
                    labels=scan,
                    pod_anti_affinity=[t_in("service", "zone", "securityscan", "value2")],
                )
            ],
            EXIST,
        ),
        (
            "pod matches its own Label in PodAffinity and that matches the existing pod Labels",
            pod(labels=scan, pod_affinity=[t_not_in("service", "region", "securityscan", "value2")]),
            [E("pod", "node2", labels=scan)],
            IPA,
        ),
        (
            "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. doesn't satisfy PodAntiAffinity symmetry with the existing pod",
            pod(labels=scan),
            [
                E(
                    "pod",
                    "node1",
                    labels=scan,
                    pod_anti_affinity=[t_in("service", "zone", "securityscan", "value2")],
                )
            ],
            EXIST,
        ),
        (
            "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. satisfy PodAntiAffinity symmetry with the existing pod",
            pod(labels=scan),
            [
                E(
                    "pod",
                    "node1",
                    labels=scan,
                    pod_anti_affinity=[t_not_in("service", "zone", "securityscan", "value2")],
                )
            ],
            None,
        ),
        (
            "satisfies the PodAntiAffinity with existing pod but doesn't satisfy PodAntiAffinity symmetry with incoming pod",
            pod(
                labels=scan, pod_anti_affinity=[t_exists("service", "region"), t_exists("security", "region")]
            ),
            [E("pod", "node1", labels=s1, pod_anti_affinity=[t_exists("security", "zone")])],
            ANTI,
        ),
        (
            "PodAntiAffinity symmetry check a1: incoming pod and existing pod partially match each other on AffinityTerms",
            pod(labels=scan, pod_anti_affinity=[t_exists("service", "zone"), t_exists("security", "zone")]),
            [E("pod", "node1", labels=s1, pod_anti_affinity=[t_exists("security", "zone")])],
            ANTI,
        ),
        (
            "PodAntiAffinity symmetry check a2: incoming pod and existing pod partially match each other on AffinityTerms",
            pod(labels=s1, pod_anti_affinity=[t_exists("security", "zone")]),
            [
                E(
                    "pod",
                    "node1",
                    labels=scan,
                    pod_anti_affinity=[t_exists("service", "zone"), t_exists("security", "zone")],
                )
            ],
            EXIST,
        ),
        (
            "PodAntiAffinity symmetry check b1: incoming pod and existing pod partially match each other on AffinityTerms",
            pod(
                labels={"abc": "", "xyz": ""},
                pod_anti_affinity=[t_exists("abc", "zone"), t_exists("def", "zone")],
            ),
            [
                E(
                    "pod",
                    "node1",
                    labels={"def": "", "xyz": ""},
                    pod_anti_affinity=[t_exists("abc", "zone"), t_exists("def", "zone")],
                )
            ],
            ANTI,
        ),
        (
            "PodAntiAffinity symmetry check b2: incoming pod and existing pod partially match each other on AffinityTerms",
            pod(
                labels={"def": "", "xyz": ""},
                pod_anti_affinity=[t_exists("abc", "zone"), t_exists("def", "zone")],
            ),
            [
                E(
                    "pod",
                    "node1",
                    labels={"abc": "", "xyz": ""},
                    pod_anti_affinity=[t_exists("abc", "zone"), t_exists("def", "zone")],
                )
            ],
            ANTI,
        ),
        (
            "PodAffinity fails PreFilter with an invalid affinity label syntax",
            pod(
                labels=scan,
                pod_affinity=[
                    t_in("service", "region", "{{.bad-value.}}"),
                    t_in("service", "node", "antivirusscan", "value2"),
                ],
            ),
            [],
            IPA,
        ),
        (
            "PodAntiAffinity fails PreFilter with an invalid antiaffinity label syntax",
            pod(
                labels=scan,
                pod_affinity=[t_in("service", "region", "foo"), t_in("service", "node", "{{.bad-value.}}")],
            ),
            [],
            IPA,
        ),
    ]
    nodes_with_2 = [*node1, N("node2")]
    for name, incoming, ex, want in rows:
        nodes = nodes_with_2 if any(e["node"] == "node2" for e in ex) else node1
        note = None
        if nodes is nodes_with_2:
            note = "the existing pod is bound to node2, which the Go snapshot does not hold; here node2 has no labels"
        case("interpodaffinity", f, t, name, nodes, incoming, {"node1": want}, ex, note)


def _interpod_multi() -> None:
    f, t = "filtering_test.go", "TestRequiredAffinityMultipleNodes"
    china, china_az1, india = {"region": "China"}, {"region": "China", "az": "az1"}, {"region": "India"}

    def ab(zb: str = "z2", za: str = "z1", rb: str = "r1") -> list[Doc]:
        return [
            N("nodeA", region="r1", zone=za, hostname="nodeA"),
            N("nodeB", region=rb, zone=zb, hostname="nodeB"),
        ]

    rows: list[tuple[str, Doc, list[Doc], list[Doc], dict[str, str | None]]] = [
        (
            "A pod can be scheduled onto all the nodes that have the same topology key & label value with one of them has an existing pod that matches the affinity rules",
            pod(pod_affinity=[t_in("foo", "region", "bar")]),
            [E("p1", "node1", foo="bar")],
            [N("node1", labels=china), N("node2", labels=china_az1), N("node3", labels=india)],
            {"node1": None, "node2": None, "node3": IPA},
        ),
        (
            "The affinity rule is to schedule all of the pods of this collection to the same zone. The first pod of the collection "
            "should not be blocked from being scheduled onto any node, even there's no existing pod that matches the rule anywhere.",
            pod(
                labels={"foo": "bar", "service": "securityscan"},
                pod_affinity=[t_in("foo", "zone", "bar"), t_in("service", "zone", "securityscan")],
            ),
            [E("p1", "nodeA", foo="bar")],
            [N("nodeA", zone="az1", hostname="h1"), N("nodeB", zone="az2", hostname="h2")],
            {"nodeA": None, "nodeB": None},
        ),
        (
            "The first pod of the collection can only be scheduled on nodes labelled with the requested topology keys",
            pod(
                labels={"foo": "bar", "service": "securityscan"},
                pod_affinity=[t_in("foo", "zone", "bar"), t_in("service", "zone", "securityscan")],
            ),
            [E("p1", "nodeA", foo="bar")],
            [N("nodeA", zoneLabel="az1", hostname="h1"), N("nodeB", zoneLabel="az2", hostname="h2")],
            {"nodeA": IPA, "nodeB": IPA},
        ),
        (
            "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA and nodeB.",
            pod(pod_anti_affinity=[t_in("foo", "region", "abc")]),
            [E("p", "nodeA", foo="abc")],
            [N("nodeA", region="r1", hostname="nodeA"), N("nodeB", region="r1", hostname="nodeB")],
            {"nodeA": ANTI, "nodeB": ANTI},
        ),
        (
            "This test ensures that anti-affinity matches a pod when any term of the anti-affinity rule matches a pod.",
            pod(pod_anti_affinity=[t_in("foo", "region", "abc"), t_in("service", "zone", "securityscan")]),
            [E("p", "nodeA", foo="abc", service="securityscan")],
            [
                N("nodeA", region="r1", zone="z1", hostname="nodeA"),
                N("nodeB", region="r1", zone="z2", hostname="nodeB"),
            ],
            {"nodeA": ANTI, "nodeB": ANTI},
        ),
        (
            "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA and nodeB but can be scheduled onto nodeC",
            pod(pod_anti_affinity=[t_in("foo", "region", "abc")]),
            [E("p", "nodeA", foo="abc")],
            [N("nodeA", labels=china), N("nodeB", labels=china_az1), N("nodeC", labels=india)],
            {"nodeA": ANTI, "nodeB": ANTI, "nodeC": None},
        ),
        (
            "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA, nodeB, but can be scheduled onto nodeC (NodeC has an existing pod that match the inter pod affinity rule but in different namespace)",
            pod(namespace="ns1", labels={"foo": "123"}, pod_anti_affinity=[t_in("foo", "region", "bar")]),  # "NS1" lowercased (DNS-1123)
            [
                E("p1", "nodeA", ns="ns1", foo="bar"),
                E("p2", "nodeC", ns="ns2", pod_anti_affinity=[t_in("foo", "region", "123")]),
            ],
            [N("nodeA", labels=china), N("nodeB", labels=china_az1), N("nodeC", labels=india)],
            {"nodeA": ANTI, "nodeB": ANTI, "nodeC": None},
        ),
        (
            "Test existing pod's anti-affinity: if an existing pod has a term with invalid topologyKey, labelSelector of the term is firstly checked, and then topologyKey of the term is also checked",
            pod(labels={"foo": ""}),
            [E("p", "nodeA", pod_anti_affinity=[t_exists("foo", "invalid-node-label")])],
            [
                N("nodeA", region="r1", zone="z1", hostname="nodeA"),
                N("nodeB", region="r1", zone="z1", hostname="nodeB"),
            ],
            {"nodeA": None, "nodeB": None},
        ),
        (
            "Test incoming pod's anti-affinity: even if labelSelector matches, we still check if topologyKey matches",
            pod(pod_anti_affinity=[t_exists("foo", "invalid-node-label")]),
            [E("p", "nodeA", foo="")],
            [
                N("nodeA", region="r1", zone="z1", hostname="nodeA"),
                N("nodeB", region="r1", zone="z1", hostname="nodeB"),
            ],
            {"nodeA": None, "nodeB": None},
        ),
        (
            "Test existing pod's anti-affinity: incoming pod wouldn't considered as a fit as it violates each existingPod's terms on all nodes",
            pod(labels={"foo": "", "bar": ""}),
            [
                E("p1", "nodeA", pod_anti_affinity=[t_exists("foo", "zone")]),
                E("p2", "nodeA", pod_anti_affinity=[t_exists("bar", "region")]),
            ],
            ab(),
            {"nodeA": EXIST, "nodeB": EXIST},
        ),
        (
            "Test incoming pod's anti-affinity: incoming pod wouldn't considered as a fit as it at least violates one anti-affinity rule of existingPod",
            pod(pod_anti_affinity=[t_exists("foo", "zone"), t_exists("bar", "region")]),
            [E("p1", "nodeA", foo=""), E("p2", "nodeB", bar="")],
            ab(),
            {"nodeA": ANTI, "nodeB": ANTI},
        ),
        (
            "Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when one term has invalid topologyKey",
            pod(labels={"foo": "", "bar": ""}),
            [
                E(
                    "p",
                    "nodeA",
                    pod_anti_affinity=[t_exists("foo", "invalid-node-label"), t_exists("bar", "zone")],
                )
            ],
            ab(),
            {"nodeA": EXIST, "nodeB": None},
        ),
        (
            "Test incoming pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when one term has invalid topologyKey",
            pod(pod_anti_affinity=[t_exists("foo", "invalid-node-label"), t_exists("bar", "zone")]),
            [E("podA", "nodeA", foo="", bar="")],
            ab(),
            {"nodeA": ANTI, "nodeB": None},
        ),
        (
            "Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when all terms have valid topologyKey",
            pod(labels={"foo": "", "bar": ""}),
            [E("p", "nodeA", pod_anti_affinity=[t_exists("foo", "region"), t_exists("bar", "zone")])],
            ab(),
            {"nodeA": EXIST, "nodeB": EXIST},
        ),
        (
            "Test incoming pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when all terms have valid topologyKey",
            pod(pod_anti_affinity=[t_exists("foo", "region"), t_exists("bar", "zone")]),
            [E("p", "nodeA", foo="", bar="")],
            ab(),
            {"nodeA": ANTI, "nodeB": ANTI},
        ),
        (
            "Test existing pod's anti-affinity: existingPod on nodeA and nodeB has at least one anti-affinity term matches incoming pod, so incoming pod can only be scheduled to nodeC",
            pod(labels={"foo": "", "bar": ""}),
            [
                E("p1", "nodeA", pod_anti_affinity=[t_exists("foo", "zone"), t_exists("labelA", "zone")]),
                E("p2", "nodeB", pod_anti_affinity=[t_exists("bar", "zone"), t_exists("labelB", "zone")]),
            ],
            [*ab(), N("nodeC", region="r1", zone="z3", hostname="nodeC")],
            {"nodeA": EXIST, "nodeB": EXIST, "nodeC": None},
        ),
        (
            "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all topologyKeys match",
            pod(pod_affinity=[t_exists("foo", "region"), t_exists("bar", "zone")]),
            [E("pod1", "nodeA", foo="", bar="")],
            ab(zb="z1"),
            {"nodeA": None, "nodeB": None},
        ),
        (
            "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all topologyKeys match, and the match logic should be satisfied on the same pod",
            pod(pod_affinity=[t_exists("foo", "region"), t_exists("bar", "zone")]),
            [E("pod1", "nodeA", foo=""), E("pod2", "nodeB", bar="")],
            ab(),
            {"nodeA": IPA, "nodeB": IPA},
        ),
    ]
    for name, incoming, ex, nodes, want in rows:
        case("interpodaffinity", f, t, name, nodes, incoming, want, ex)


# --- podtopologyspread/filtering_test.go ----------------------------------------------------------------

PTS, MISSING = "PodTopologySpread", "PodTopologySpreadMissingLabel"
FOO = sel(req("foo", "Exists"))
BAR = sel(req("bar", "Exists"))
UNSCHEDULABLE_TAINT = [taint("node.kubernetes.io/unschedulable")]
IN_REAL_CASE = "the Go test runs PodTopologySpread alone; the expectation here is the whole filter chain's"


def four(**extra: dict[str, str]) -> list[Doc]:
    """node-a, node-b in zone1 and node-x, node-y in zone2, each labelled node=<name>."""
    out = []
    for name, zone in (("node-a", "zone1"), ("node-b", "zone1"), ("node-x", "zone2"), ("node-y", "zone2")):
        out.append(N(name, labels={"zone": zone, "node": name} | extra.get(name, {})))
    return out


def foo_pods(*where: str, **labels: str) -> list[Doc]:
    """Existing pods labelled foo (plus `labels`): each argument is ``name@node``."""
    out = []
    for w in where:
        name, node = w.split("@")
        out.append(E(name, node, labels={"foo": ""} | labels))
    return out


def S(*codes: str) -> dict[str, str | None]:
    """Verdicts for node-a, node-b, node-x, node-y: "" passes."""
    return {n: (c or None) for n, c in zip(("node-a", "node-b", "node-x", "node-y"), codes, strict=True)}


def _spread_single() -> None:
    f, t = "filtering_test.go", "TestSingleConstraint"
    foo = {"foo": ""}
    spread_pods_2103 = foo_pods(
        "p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-y1@node-y", "p-y2@node-y", "p-y3@node-y"
    )
    rows: list[tuple[str, Doc, list[Doc], list[Doc], dict[str, str | None], str | None]] = [
        (
            "no existing pods",
            pod(labels=foo, topology_spread=[spread(1, "zone", FOO)]),
            four(),
            [],
            S("", "", "", ""),
            None,
        ),
        (
            "no existing pods, incoming pod doesn't match itself",
            pod(labels=foo, topology_spread=[spread(1, "zone", BAR)]),
            four(),
            [],
            S("", "", "", ""),
            None,
        ),
        (
            "existing pods in a different namespace do not count",
            pod(labels=foo, topology_spread=[spread(1, "zone", FOO)]),
            four(),
            [
                E("p-a1", "node-a", ns="ns1", foo=""),
                E("p-b1", "node-a", ns="ns2", foo=""),
                *foo_pods("p-x1@node-x", "p-y1@node-y"),
            ],
            S("", "", PTS, PTS),
            None,
        ),
        (
            "existing pods do not match null selector",
            pod(labels=foo, topology_spread=[spread(1, "zone", None)]),
            four(),
            foo_pods("p-x1@node-x", "p-y1@node-y"),
            S("", "", "", ""),
            None,
        ),
        (
            "pods spread across zones as 3/3, all nodes fit",
            pod(labels=foo, topology_spread=[spread(1, "zone", FOO)]),
            four(),
            spread_pods_2103,
            S("", "", "", ""),
            None,
        ),
        (
            "pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
            pod(labels=foo, topology_spread=[spread(1, "zone", FOO)]),
            [
                N("node-a", zone="zone1", node="node-a"),
                N("node-b", zon="zone1", node="node-b"),
                N("node-x", zone="zone2", node="node-x"),
                N("node-y", zone="zone2", node="node-y"),
            ],
            foo_pods("p-a1@node-a", "p-b1@node-b", "p-x1@node-x", "p-y1@node-y"),
            S("", MISSING, PTS, PTS),
            None,
        ),
        (
            "pods spread across nodes as 2/1/0/3, only node-x fits",
            pod(labels=foo, topology_spread=[spread(1, "node", FOO)]),
            four(),
            spread_pods_2103,
            S(PTS, PTS, "", PTS),
            None,
        ),
        (
            "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
            pod(labels=foo, topology_spread=[spread(2, "node", FOO)]),
            four(),
            spread_pods_2103,
            S(PTS, "", "", PTS),
            None,
        ),
        (
            "pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
            pod(labels={"bar": ""}, topology_spread=[spread(1, "node", FOO)]),
            four(),
            spread_pods_2103,
            S(PTS, "", "", PTS),
            None,
        ),
        (
            "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
            pod(
                labels=foo,
                node_affinity=na([req("node", "In", "node-a", "node-y")]),
                topology_spread=[spread(1, "node", FOO)],
            ),
            four(),
            spread_pods_2103,
            S("", "NodeAffinity", "NodeAffinity", PTS),
            IN_REAL_CASE,
        ),
        (
            "incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits",
            pod(
                labels=foo,
                node_affinity=na([req("node", "NotIn", "node-b")]),
                topology_spread=[spread(1, "zone", FOO)],
            ),
            four(),
            foo_pods("p-b1@node-b", "p-b2@node-b", "p-y1@node-y"),
            S("", "NodeAffinity", PTS, PTS),
            IN_REAL_CASE,
        ),
    ]
    for name, incoming, nodes, ex, want, note in rows:
        case("podtopologyspread", f, t, name, nodes, incoming, want, ex, note)
    case(
        "podtopologyspread",
        f,
        t,
        "pod cannot be scheduled as all nodes don't have label 'rack'",
        [N("node-a", zone="zone1", node="node-a"), N("node-x", zone="zone2", node="node-x")],
        pod(labels=foo, topology_spread=[spread(1, "rack", FOO)]),
        {"node-a": MISSING, "node-x": MISSING},
    )
    case(
        "podtopologyspread",
        f,
        t,
        "terminating Pods should be excluded",
        [N("node-a", node="node-a"), N("node-b", node="node-b")],
        pod(labels=foo, topology_spread=[spread(1, "node", FOO)]),
        {"node-a": None, "node-b": PTS},
        [E("p-a", "node-a", terminating=True, foo=""), E("p-b", "node-b", foo="")],
        note="a terminating pod is a releasing one",
    )
    abc = [N(n, node=n) for n in ("node-a", "node-b", "node-c")]
    abc_pods = foo_pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-b2@node-b", "p-c1@node-c")
    case(
        "podtopologyspread",
        f,
        t,
        "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains < minDomains, then the third node fits",
        abc,
        pod(labels=foo, topology_spread=[spread(2, "node", FOO, min_domains=4)]),
        {"node-a": PTS, "node-b": PTS, "node-c": None},
        abc_pods,
    )
    case(
        "podtopologyspread",
        f,
        t,
        "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains > minDomains, then the all nodes fit",
        abc,
        pod(labels=foo, topology_spread=[spread(2, "node", FOO, min_domains=2)]),
        {"node-a": None, "node-b": None, "node-c": None},
        abc_pods,
    )
    zone_pods = foo_pods("p-b1@node-a", "p-b2@node-b", "p-y1@node-y")
    case(
        "podtopologyspread",
        f,
        t,
        "pods spread across zone as 2/1, maxSkew is 2 and the number of domains < minDomains, then the third and fourth nodes fit",
        four(),
        pod(labels=foo, topology_spread=[spread(2, "zone", FOO, min_domains=3)]),
        S(PTS, PTS, "", ""),
        zone_pods,
    )
    case(
        "podtopologyspread",
        f,
        t,
        "pods spread across zone as 2/1, maxSkew is 2 and the number of domains > minDomains, then the all nodes fit",
        four(),
        pod(labels=foo, topology_spread=[spread(2, "zone", FOO, min_domains=1)]),
        S("", "", "", ""),
        zone_pods,
    )

    def policy_nodes(taint_y: bool = False) -> list[Doc]:
        out = [N(n, labels={"node": n, "foo": ""}) for n in ("node-a", "node-b", "node-x")]
        out.append(N("node-y", labels={"node": "node-y"}, taints=UNSCHEDULABLE_TAINT if taint_y else None))
        return out

    # The four nodes are labelled node=<name> and foo, except node-y (no foo; tainted in the taints cases).
    pods_aby = foo_pods("p-b1@node-a", "p-b2@node-b", "p-y1@node-y")
    policy_rows: list[tuple[str, Doc, bool, dict[str, str | None], str | None]] = [
        (
            "NodeAffinityPolicy honored with labelSelectors",
            pod(labels=foo, node_selector={"foo": ""}, topology_spread=[spread(1, "node", FOO)]),
            False,
            S(PTS, PTS, "", "NodeAffinity"),
            IN_REAL_CASE,
        ),
        (
            "NodeAffinityPolicy ignored with labelSelectors",
            pod(
                labels=foo,
                node_selector={"foo": ""},
                topology_spread=[spread(1, "node", FOO, affinity="Ignore")],
            ),
            False,
            S(PTS, PTS, "", "NodeAffinity"),
            IN_REAL_CASE,
        ),
        (
            "NodeAffinityPolicy honored with nodeAffinity",
            pod(
                labels=foo, node_affinity=na([req("foo", "In", "")]), topology_spread=[spread(1, "node", FOO)]
            ),
            False,
            S(PTS, PTS, "", "NodeAffinity"),
            IN_REAL_CASE,
        ),
        (
            "NodeAffinityPolicy ignored with labelSelectors (nodeAffinity)",
            pod(
                labels=foo,
                node_affinity=na([req("foo", "In", "")]),
                topology_spread=[spread(1, "node", FOO, affinity="Ignore")],
            ),
            False,
            S(PTS, PTS, "", "NodeAffinity"),
            IN_REAL_CASE + "; the Go case name repeats the previous one, suffixed here",
        ),
        (
            "NodeTaintsPolicy honored",
            pod(labels=foo, topology_spread=[spread(1, "node", FOO, taints="Honor")]),
            True,
            S(PTS, PTS, "", "TaintToleration"),
            IN_REAL_CASE,
        ),
        (
            "NodeTaintsPolicy ignored",
            pod(labels=foo, topology_spread=[spread(1, "node", FOO)]),
            True,
            S(PTS, PTS, "", "TaintToleration"),
            IN_REAL_CASE,
        ),
    ]
    for name, incoming, taint_y, want, note in policy_rows:
        nodes = policy_nodes(taint_y)
        case("podtopologyspread", f, t, name, nodes, incoming, want, pods_aby, note)


def _spread_multi() -> None:
    f, t = "filtering_test.go", "TestMultipleConstraints"
    foo, foobar = {"foo": ""}, {"foo": "", "bar": ""}
    zone_node = [spread(1, "zone", FOO), spread(1, "node", FOO)]
    zone_foo_node_bar = [spread(1, "zone", FOO), spread(1, "node", BAR)]
    p2103 = foo_pods("p-a1@node-a", "p-a2@node-a", "p-b1@node-b", "p-y1@node-y", "p-y2@node-y", "p-y3@node-y")
    zone_bar_foo_pods = [
        E("p-a1", "node-a", labels=foobar),
        *foo_pods("p-a2@node-a"),
        E("p-b1", "node-b", labels=foobar),
        *foo_pods("p-y1@node-y"),
        E("p-y2", "node-y", labels=foobar),
        *foo_pods("p-y3@node-y"),
    ]
    incl = {"node-a": {"foo": ""}, "node-b": {}, "node-x": {"foo": ""}, "node-y": {"foo": ""}}
    rows: list[tuple[str, Doc, list[Doc], list[Doc], dict[str, str | None], str | None]] = [
        (
            "two Constraints on zone and node, spreads = [3/3, 2/1/0/3]",
            pod(labels=foo, topology_spread=zone_node),
            four(),
            p2103,
            S(PTS, PTS, "", PTS),
            None,
        ),
        (
            "two Constraints on zone and node, spreads = [3/4, 2/1/0/4]",
            pod(labels=foo, topology_spread=zone_node),
            four(),
            p2103 + foo_pods("p-y4@node-y"),
            S(PTS, PTS, PTS, PTS),
            None,
        ),
        (
            "Constraints hold different labelSelectors, spreads = [1/0, 1/0/0/1]",
            pod(labels=foobar, topology_spread=zone_foo_node_bar),
            four(),
            [*foo_pods("p-a1@node-a"), E("p-y1", "node-y", bar="")],
            S(PTS, PTS, "", PTS),
            None,
        ),
        (
            "Constraints hold different labelSelectors, spreads = [1/0, 0/0/1/1]",
            pod(labels=foobar, topology_spread=zone_foo_node_bar),
            four(),
            [*foo_pods("p-a1@node-a"), E("p-x1", "node-x", bar=""), E("p-y1", "node-y", bar="")],
            S(PTS, PTS, PTS, PTS),
            None,
        ),
        (
            "Constraints hold different labelSelectors, spreads = [2/3, 1/0/0/1]",
            pod(labels=foobar, topology_spread=zone_foo_node_bar),
            four(),
            [
                *foo_pods("p-a1@node-a"),
                E("p-a2", "node-a", labels=foobar),
                *foo_pods("p-y1@node-y"),
                E("p-y2", "node-y", labels=foobar),
                *foo_pods("p-y3@node-y"),
            ],
            S(PTS, "", PTS, PTS),
            None,
        ),
        (
            "Constraints hold different labelSelectors but pod doesn't match itself on 'zone' constraint",
            pod(labels={"bar": ""}, topology_spread=zone_foo_node_bar),
            four(),
            [*foo_pods("p-a1@node-a"), E("p-x1", "node-x", bar=""), E("p-y1", "node-y", bar="")],
            S("", "", PTS, PTS),
            None,
        ),
        (
            "two Constraints on zone and node, absence of label 'node' on node-x, spreads = [1/1, 1/0/0/1]",
            pod(labels=foo, topology_spread=zone_node),
            [
                N("node-a", zone="zone1", node="node-a"),
                N("node-b", zone="zone1", node="node-b"),
                N("node-x", zone="zone2"),
                N("node-y", zone="zone2", node="node-y"),
            ],
            foo_pods("p-a1@node-a", "p-y3@node-y"),
            S(PTS, "", MISSING, PTS),
            None,
        ),
        (
            "two node inclusion Constraints, zone: honor/ignore, node: ignore/ignore",
            pod(
                labels=foo,
                node_selector={"foo": ""},
                topology_spread=[spread(1, "zone", FOO), spread(1, "node", FOO, affinity="Ignore")],
            ),
            four(**{"node-a": {"foo": ""}, "node-b": {"foo": ""}, "node-x": {"foo": ""}}),
            foo_pods("p-a1@node-a", "p-b1@node-b", "p-y1@node-y"),
            S(PTS, PTS, "", "NodeAffinity"),
            IN_REAL_CASE,
        ),
        (
            "two node inclusion Constraints, zone: honor/honor, node: honor/ignore",
            pod(labels=foo, topology_spread=[spread(1, "zone", FOO, taints="Honor"), spread(1, "node", FOO)]),
            four(**{"node-a": {"foo": ""}, "node-b": {"foo": ""}, "node-x": {"foo": ""}}),
            foo_pods("p-a1@node-a", "p-b1@node-b", "p-y1@node-y"),
            S(PTS, PTS, "", "TaintToleration"),
            IN_REAL_CASE,
        ),
        (
            "two node inclusion Constraints, zone: honor/ignore, node: honor/ignore",
            pod(labels=foo, node_selector={"foo": ""}, topology_spread=zone_node),
            four(**incl),
            foo_pods("p-a1@node-a", "p-b1@node-b", "p-y1@node-y"),
            S(PTS, "NodeAffinity", "", "TaintToleration"),
            IN_REAL_CASE,
        ),
        (
            "two node inclusion Constraints, zone: honor/honor, node: ignore/ignore",
            pod(
                labels=foo,
                node_selector={"foo": ""},
                topology_spread=[
                    spread(1, "zone", FOO, taints="Honor"),
                    spread(1, "node", FOO, affinity="Ignore"),
                ],
            ),
            four(**incl),
            foo_pods("p-a1@node-a", "p-b1@node-b", "p-y1@node-y"),
            S(PTS, "NodeAffinity", "", "TaintToleration"),
            IN_REAL_CASE,
        ),
        (
            "two Constraints on zone, spreads = [3/3, 2/1]",
            pod(labels=foobar, topology_spread=[spread(1, "zone", BAR), spread(1, "zone", FOO)]),
            four(),
            zone_bar_foo_pods,
            S(PTS, PTS, "", ""),
            None,
        ),
        (
            "two Constraints on zone, spreads = [3/4, 2/1]",
            pod(labels=foobar, topology_spread=[spread(1, "zone", BAR), spread(1, "zone", FOO)]),
            four(),
            zone_bar_foo_pods + foo_pods("p-y4@node-y"),
            S(PTS, PTS, PTS, PTS),
            None,
        ),
    ]
    taint_y = {"node inclusion"}
    for name, incoming, nodes, ex, want, note in rows:
        if want.get("node-y") == "TaintToleration" and any(s in name for s in taint_y):
            nodes[3]["taints"] = UNSCHEDULABLE_TAINT
        case("podtopologyspread", f, t, name, nodes, incoming, want, ex, note)


def main() -> None:
    """Build every table and write the files."""
    _taints()
    _unschedulable()
    _ports()
    _node_affinity()
    _node_affinity_fields()
    _fit()
    _restartable_init()
    _interpod_single()
    _interpod_multi()
    _spread_single()
    _spread_multi()
    print(f"wrote {write()} scenarios under {OUT}")


if __name__ == "__main__":
    main()
