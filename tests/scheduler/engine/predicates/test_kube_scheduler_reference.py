"""Property: on random pods and nodes, Hourglass's filter verdict equals a small reference written directly
from kube-scheduler v1.36's code paths for NodeUnschedulable, TaintToleration, NodeAffinity and NodePorts.

The reference below is a transcription of the Go, kept independent of the engine (its own regular
expressions, its own port table): ``Toleration.ToleratesTaint`` and ``FindMatchingUntoleratedTaint``
(k8s.io/api, pkg/apis/core/v1/helper), ``nodeunschedulable.Filter``, ``GetRequiredNodeAffinity`` /
``LazyErrorNodeSelector.Match`` with ``labels.NewRequirement`` validation (component-helpers,
apimachinery), and ``HostPortInfo.CheckConflict`` (kube-scheduler framework). kube-scheduler runs its
filters in another order than Hourglass, so the check is: a node passes in both, or Hourglass's reason
is one of the plugins the reference says fail.
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from ingest.fastdecode import LABEL_KEY
from scheduler.conformance.runner import filter_verdicts

# --- the reference, from the Go -------------------------------------------------------------------------

_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _is_qualified_name(key: str) -> bool:  # validation.IsQualifiedName
    parts = key.split("/")
    if len(parts) > 2:
        return False
    if len(parts) == 2:
        prefix, name = parts
        if not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            return False
    else:
        name = parts[0]
    return 0 < len(name) <= 63 and bool(_QUALIFIED_NAME.fullmatch(name))


def _is_label_value(v: str) -> bool:  # validation.IsValidLabelValue
    return v == "" or (len(v) <= 63 and bool(_QUALIFIED_NAME.fullmatch(v)))


def _parse_int(v: str) -> int | None:  # strconv.ParseInt(v, 10, 64)
    if not re.fullmatch(r"[+-]?[0-9]+", v):
        return None
    n = int(v)
    return n if -(2**63) <= n < 2**63 else None


def _new_requirement_ok(r: dict[str, Any]) -> bool:  # labels.NewRequirement
    key, op, vals = r["key"], r["operator"], r.get("values", [])
    ok = _is_qualified_name(key)
    if op in ("In", "NotIn"):
        ok = ok and len(vals) > 0
    elif op in ("Exists", "DoesNotExist"):
        ok = ok and len(vals) == 0
    elif op in ("Gt", "Lt"):
        ok = ok and len(vals) == 1 and all(_parse_int(v) is not None for v in vals)
    else:
        ok = False
    return ok and all(_is_label_value(v) for v in vals)


def _requirement_matches(r: dict[str, Any], labels: dict[str, str]) -> bool:  # Requirement.Matches
    key, op, vals = r["key"], r["operator"], r.get("values", [])
    if op == "In":
        return key in labels and labels[key] in vals
    if op == "NotIn":
        return key not in labels or labels[key] not in vals
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if key not in labels:
        return False
    have, want = _parse_int(labels[key]), _parse_int(vals[0])
    if have is None or want is None:
        return False
    return have > want if op == "Gt" else have < want


def ref_node_affinity(pod: dict[str, Any], labels: dict[str, str]) -> bool:
    """RequiredNodeAffinity.Match: the node selector, then the terms (a term that fails to parse is
    skipped, an empty one is dropped; no term left matches nothing)."""
    for k, v in pod.get("node_selector", {}).items():
        if k not in labels or labels[k] != v:
            return False
    terms = pod.get("node_affinity")
    if not terms:
        return True
    for term in terms:
        reqs = term["match_expressions"]
        if not reqs or not all(_new_requirement_ok(r) for r in reqs):
            continue
        if all(_requirement_matches(r, labels) for r in reqs):
            return True
    return False


def _tolerates(t: dict[str, Any], taint: dict[str, Any]) -> bool:  # Toleration.ToleratesTaint
    if t.get("effect") and t["effect"] != taint["effect"]:
        return False
    if t.get("key") and t["key"] != taint["key"]:
        return False
    op = str(t.get("operator", ""))
    if op in ("", "Equal"):
        return str(t.get("value", "")) == str(taint.get("value", ""))
    return op == "Exists"


def ref_taints(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """TaintToleration.Filter: no NoSchedule / NoExecute taint left untolerated."""
    tols = pod.get("tolerations", [])
    return all(
        taint["effect"] not in ("NoSchedule", "NoExecute") or any(_tolerates(t, taint) for t in tols)
        for taint in node.get("taints", [])
    )


def ref_unschedulable(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """NodeUnschedulable.Filter."""
    cordon = {"key": "node.kubernetes.io/unschedulable", "value": "", "effect": "NoSchedule"}
    return not node.get("unschedulable") or any(_tolerates(t, cordon) for t in pod.get("tolerations", []))


def ref_ports(pod: dict[str, Any], held: list[dict[str, Any]]) -> bool:
    """NodePorts.Filter: HostPortInfo.CheckConflict for each wanted port ("" host IP is 0.0.0.0)."""
    table: dict[str, set[tuple[str, int]]] = {}
    for p in held:
        table.setdefault(p.get("host_ip") or "0.0.0.0", set()).add((p.get("protocol", "TCP"), p["port"]))
    for p in pod.get("host_ports", []):
        ip, pp = p.get("host_ip") or "0.0.0.0", (p.get("protocol", "TCP"), p["port"])
        if ip == "0.0.0.0":
            if any(pp in s for s in table.values()):
                return False
        elif any(pp in table.get(k, set()) for k in ("0.0.0.0", ip)):
            return False
    return True


def reference(pod: dict[str, Any], node: dict[str, Any], held: list[dict[str, Any]]) -> set[str]:
    """The reason codes of the plugins that refuse the node (empty: it passes)."""
    fails = set()
    if not ref_unschedulable(pod, node):
        fails.add("NodeUnschedulable")
    if not ref_taints(pod, node):
        fails.add("TaintToleration")
    if not ref_node_affinity(pod, node.get("labels", {})):
        fails.add("NodeAffinity")
    if not ref_ports(pod, held):
        fails.add("HostPorts")
    return fails


# --- random pods and nodes ------------------------------------------------------------------------------

KEYS = ["zone", "gpu", "kernel", "example.com/tier", "bad key", "-lead"]
VALUES = ["a", "b", "", "1", "10", "007", "x y", "-", "-2", "+3", "abc"]
EFFECTS = ["NoSchedule", "NoExecute", "PreferNoSchedule"]


@st.composite
def requirement(draw: st.DrawFn) -> dict[str, Any]:
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
    out: dict[str, Any] = {"key": draw(st.sampled_from(KEYS)), "operator": op}
    if op in ("In", "NotIn"):
        out["values"] = draw(st.lists(st.sampled_from(VALUES), min_size=1, max_size=2))
    elif op in ("Gt", "Lt"):  # the event contract takes integer text only, as the API server does
        out["values"] = [draw(st.sampled_from(["1", "10", "007", "-2", "+3"]))]
    return out


@st.composite
def toleration(draw: st.DrawFn) -> dict[str, Any]:
    key = draw(st.sampled_from(["", "zone", "dedicated", "node.kubernetes.io/unschedulable"]))
    op = "Exists" if not key else draw(st.sampled_from(["Equal", "Exists"]))
    out: dict[str, Any] = {"key": key, "operator": op}
    if op == "Equal":
        out["value"] = draw(st.sampled_from(["", "a", "b"]))
    effect = draw(st.sampled_from([None, *EFFECTS]))
    if effect is not None:
        out["effect"] = effect
    return out


PORTS = st.fixed_dictionaries(
    {
        "port": st.sampled_from([80, 81]),
        "protocol": st.sampled_from(["TCP", "UDP"]),
        "host_ip": st.sampled_from(["", "0.0.0.0", "10.0.0.1", "10.0.0.2", "::"]),
    }
)


@st.composite
def incoming_pod(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {"cpu_millicores": 0, "memory_bytes": 0}
    selector = draw(
        st.dictionaries(st.sampled_from(["zone", "gpu"]), st.sampled_from(["a", "b", ""]), max_size=2)
    )
    if selector:
        out["node_selector"] = selector
    terms = draw(st.lists(st.lists(requirement(), min_size=1, max_size=3), max_size=2))
    if terms:
        out["node_affinity"] = [{"match_expressions": t} for t in terms]
    tols = draw(st.lists(toleration(), max_size=3))
    if tols:
        out["tolerations"] = tols
    ports = draw(st.lists(PORTS, max_size=2, unique_by=lambda p: (p["port"], p["protocol"], p["host_ip"])))
    if ports:
        out["host_ports"] = ports
    return out


@st.composite
def node(draw: st.DrawFn, name: str) -> dict[str, Any]:
    labels = draw(
        st.dictionaries(
            st.sampled_from(["zone", "gpu", "kernel", "example.com/tier"]),
            st.sampled_from([*VALUES[:7], "abc"]),
            max_size=4,
        )
    )
    taints = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "key": st.sampled_from(["zone", "dedicated"]),
                    "value": st.sampled_from(["", "a", "b"]),
                    "effect": st.sampled_from(EFFECTS),
                }
            ),
            max_size=2,
        )
    )
    return {"name": name, "labels": labels, "taints": taints, "unschedulable": draw(st.booleans())}


@st.composite
def cluster(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]], dict[str, Any]]:
    nodes = [draw(node(f"n{i}")) for i in range(draw(st.integers(1, 3)))]
    held = {n["name"]: draw(st.lists(PORTS, max_size=2)) for n in nodes}
    return nodes, held, draw(incoming_pod())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster())
def test_filter_verdicts_match_kube_scheduler_reference(
    c: tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]], dict[str, Any]],
) -> None:
    nodes, held, pod = c
    doc = {
        "run": {"mode": "filter", "task": "p"},
        "cluster": {
            "nodes": nodes,
            "foreign_pods": [
                {"name": f"holder-{n}-{i}", "node": n, "host_ports": [p]}
                for n, ps in held.items()
                for i, p in enumerate(ps)
            ],
        },
        "queues": [{"name": "q"}],
        "jobs": [{"name": "p", "queue": "q", "tasks": [{"name": "p"} | pod]}],
    }
    keys = [k for n in nodes for k in n.get("labels", {})]
    keys += [t["key"] for n in nodes for t in n.get("taints", [])]
    keys += [r["key"] for term in pod.get("node_affinity", []) for r in term["match_expressions"]]
    keys += [t["key"] for t in pod.get("tolerations", []) if t.get("key")]
    invalid = [k for k in keys if not LABEL_KEY.fullmatch(k)]
    try:
        got = filter_verdicts(doc)
    except ValidationError as e:
        # The API server refuses an invalid label key in any of these fields, so such a pod or node never
        # reaches kube-scheduler; Hourglass's contract refuses it the same way (a dead letter).
        assert invalid, e
        return
    assert not invalid, f"the contract accepted invalid label keys {invalid}"
    for n in nodes:
        want = reference(pod, n, held[n["name"]])
        verdict = got[n["name"]]
        if want:
            assert verdict in want, (n, pod, verdict, want)
        else:
            assert verdict is None, (n, pod, verdict)
