"""Topology spread constraints (kube-scheduler's PodTopologySpread).

``DoNotSchedule`` is a filter: counting the pods the constraint selects (in the pod's namespace, not being
evicted) per domain over the eligible nodes only (pods on other nodes of a domain do not count) — nodes that have every constraint's topology key and, per
``nodeAffinityPolicy`` (default Honor) / ``nodeTaintsPolicy`` (default Ignore), match the pod's node
affinity / tolerate the node's taints — a node passes when ``count(its domain) + (1 if the pod matches its
own selector) - min count over domains <= maxSkew``. With fewer domains than ``minDomains`` the minimum is
0. A node without the topology key fails. ``ScheduleAnyway`` becomes a node score: fewer selected pods in
the node's domain is better.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from scheduler.engine.predicates.labels import node_terms_match, selector_matches, untolerated_taint
from scheduler.engine.state import LabelSelector, SpreadConstraint

if TYPE_CHECKING:
    from scheduler.engine.session import NodeInfo, Session, TaskInfo

REASON = "node(s) didn't match pod topology spread constraints"
MISSING_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"


@dataclass(slots=True)
class Resolved:
    constraint: SpreadConstraint
    counts: dict[str, int]  # selected pods per domain value (eligible nodes only; absent = 0)
    minimum: int
    self_match: int


def _tolerates(task: TaskInfo, node: NodeInfo) -> bool:
    return untolerated_taint(task.pod, node.spec) is None


def _eligible(task: TaskInfo, node: NodeInfo, c: SpreadConstraint, keys: tuple[str, ...]) -> bool:
    labels = node.spec.labels
    if any(k not in labels for k in keys):
        return False
    pod = task.pod
    if c.node_affinity_policy == "Honor":
        if any(labels.get(k) != v for k, v in pod.node_selector.items()):
            return False
        if not node_terms_match(labels, pod.affinity, node.name):
            return False
        if pod.allowed_nodes is not None and node.name not in pod.allowed_nodes:
            return False
    return not (c.node_taints_policy == "Honor" and not _tolerates(task, node))


def _eligible_nodes(
    ssn: Session, task: TaskInfo, c: SpreadConstraint, keys: tuple[str, ...]
) -> list[tuple[str, str]]:
    """The nodes eligible for counting, ``(node name, domain)`` in node order. Nodes do not change within
    a session, so this is cached per (constraint policies, the pod's node selection, tolerations when
    honoured)."""
    pod = task.pod
    key = (
        "spread-nodes",
        c.topology_key,
        keys,
        c.node_affinity_policy,
        c.node_taints_policy,
        tuple(sorted(pod.node_selector.items())) if c.node_affinity_policy == "Honor" else None,
        pod.affinity if c.node_affinity_policy == "Honor" else None,
        pod.allowed_nodes if c.node_affinity_policy == "Honor" else None,
        pod.tolerations if c.node_taints_policy == "Honor" else None,
    )
    got = ssn.static_cache.get(key)
    if got is None:
        got = [(n.name, n.spec.labels[c.topology_key]) for n in ssn.nodes if _eligible(task, n, c, keys)]
        ssn.static_cache[key] = got
    assert isinstance(got, list)
    return got


def resolve(ssn: Session, task: TaskInfo, which: str) -> list[Resolved]:
    """The task's constraints of kind `which` (DoNotSchedule / ScheduleAnyway) against the pods now."""
    pod = task.pod
    cons = [c for c in pod.topology_spread if c.when_unsatisfiable == which]
    if not cons:
        return []
    keys = tuple(c.topology_key for c in pod.topology_spread)
    idx = ssn.pod_index()
    out = []
    for c in cons:
        # Only pods on eligible nodes count (kube-scheduler's calPreFilterState): a domain's pods on a node
        # the pod could not use under the policies do not raise its count. An empty selector counts no pod
        # (countPodsMatchSelector), though the pod itself still matches it.
        by_node = idx.counts(c.selector, (pod.namespace,)) if not _empty(c.selector) else {}
        counts: dict[str, int] = {}
        for name, v in _eligible_nodes(ssn, task, c, keys):
            got = by_node.get(name)
            counts[v] = counts.get(v, 0) + (got[0] if got else 0)
        minimum = min(counts.values(), default=0)
        if c.min_domains is not None and len(counts) < c.min_domains:
            minimum = 0
        self_match = 1 if selector_matches(c.selector, pod.labels) else 0
        out.append(Resolved(c, counts, minimum, self_match))
    return out


def _empty(sel: LabelSelector) -> bool:
    return sel.nothing or (not sel.match_labels and not sel.match_expressions)


def reason(resolved: list[Resolved], node: NodeInfo) -> str | None:
    """The filter on one node."""
    labels = node.spec.labels
    for r in resolved:
        if r.constraint.topology_key not in labels:
            return MISSING_LABEL
    for r in resolved:
        v = labels[r.constraint.topology_key]
        if r.counts.get(v, 0) + r.self_match - r.minimum > r.constraint.max_skew:
            return REASON
    return None


def preference(resolved: list[Resolved], nodes: list[NodeInfo]) -> list[float]:
    """ScheduleAnyway: minus the selected pods in each node's domain (higher is better)."""
    out = [0.0] * len(nodes)
    for r in resolved:
        for i, n in enumerate(nodes):
            v = n.spec.labels.get(r.constraint.topology_key)
            out[i] -= r.counts.get(v, 0) if v is not None else max(r.counts.values(), default=0) + 1
    return out
