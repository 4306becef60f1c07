"""Required inter-pod affinity and anti-affinity (kube-scheduler's InterPodAffinity filter), and the
preferred terms as a node score.

A required affinity term passes on a node whose topology domain (its value of the term's topology key)
holds a running or placed pod that *all* the pod's required affinity terms select (kube-scheduler counts only
such pods); as in Kubernetes, when no pod anywhere matches all the terms but the pod matches them itself, it
may go anywhere that has the keys (the first pod of a group). A required
anti-affinity term fails on a node whose domain holds a selected pod; a pod only being evicted there
(releasing) lets the node be used once it is gone (pipelining), which is how reclaim and preemption free a
domain. Existing pods' required anti-affinity is checked the other way round (symmetry). Pods of other
schedulers count like ours.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scheduler.engine.predicates.labels import selector_matches, term_namespaces
from scheduler.engine.state import PodAffinityTerm

if TYPE_CHECKING:
    from scheduler.engine.session import NodeInfo, Session, TaskInfo

AFFINITY = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"


def domain_counts(ssn: Session, by_node: Mapping[str, list[int]], key: str) -> dict[str, list[int]]:
    """Per-node counts summed per topology domain (the nodes' values of label `key`)."""
    out: dict[str, list[int]] = {}
    for name, (a, r) in by_node.items():
        node = ssn.node_by_name.get(name)
        if node is None or (a == 0 and r == 0):
            continue
        v = node.spec.labels.get(key)
        if v is None:
            continue
        c = out.setdefault(v, [0, 0])
        c[0] += a
        c[1] += r
    return out


@dataclass(slots=True)
class InterPodView:
    """What one task's inter-pod checks need, computed once per placement attempt."""

    affinity: list[tuple[str, dict[str, list[int]]]]  # (topology key, matching pods per domain)
    self_affinity_ok: bool  # no pod matches any affinity term, and the task matches its own terms
    anti: list[tuple[str, dict[str, list[int]]]]
    against: list[tuple[str, bool, str]]  # existing holders: (node, releasing, topology key)


def view(ssn: Session, task: TaskInfo) -> InterPodView:
    """The task's required terms resolved against the pods on nodes now."""
    pod = task.pod
    idx = ssn.pod_index()
    required = [t for t in pod.pod_affinity if not t.weight]
    # kube-scheduler counts, for every required affinity term, only the pods that match *all* of them
    # (podMatchesAllAffinityTerms): two terms are not satisfied by two different pods.
    if len(required) == 1:
        t = required[0]
        matching = idx.counts(t.selector, term_namespaces(t, pod.namespace, idx.namespaces))
    else:
        matching = _matching_all(ssn, required, pod.namespace)
    aff = [(t.topology_key, domain_counts(ssn, matching, t.topology_key)) for t in required]
    any_match = any(c[0] for _, dc in aff for c in dc.values())
    self_ok = (
        bool(required)
        and not any_match
        and all(_selects_self(t, pod.namespace, pod.labels, idx.namespaces) for t in required)
    )
    anti = [
        (
            t.topology_key,
            domain_counts(
                ssn, idx.counts(t.selector, term_namespaces(t, pod.namespace, idx.namespaces)), t.topology_key
            ),
        )
        for t in pod.pod_anti_affinity
        if not t.weight
    ]
    return InterPodView(aff, self_ok, anti, idx.holders_against(pod.namespace, pod.labels))


def _matching_all(ssn: Session, terms: list[PodAffinityTerm], namespace: str) -> dict[str, list[int]]:
    """Pods on nodes that every term selects, per node name: ``[active, releasing]``."""
    out: dict[str, list[int]] = {}
    if not terms:
        return out
    idx = ssn.pod_index()
    scopes = [term_namespaces(t, namespace, idx.namespaces) for t in terms]
    for e in idx.entries.values():
        if all(
            e.namespace in scope and selector_matches(t.selector, e.labels)
            for t, scope in zip(terms, scopes, strict=True)
        ):
            c = out.setdefault(e.node, [0, 0])
            c[1 if e.releasing else 0] += 1
    return out


def _selects_self(
    t: PodAffinityTerm, namespace: str, labels: Mapping[str, str], namespaces: Mapping[str, Mapping[str, str]]
) -> bool:
    return namespace in term_namespaces(t, namespace, namespaces) and selector_matches(t.selector, labels)


def reason(ssn: Session, v: InterPodView, node: NodeInfo) -> tuple[str | None, bool]:
    """(reason, idle) for one node."""
    labels = node.spec.labels
    idle = True
    for key, dc in v.affinity:
        val = labels.get(key)
        if val is None:
            return AFFINITY, False
        if v.self_affinity_ok:
            continue
        c = dc.get(val)
        if c is None or c[0] == 0:
            return AFFINITY, False
    for key, dc in v.anti:
        val = labels.get(key)
        if val is None:
            continue
        c = dc.get(val)
        if c is not None:
            if c[0]:
                return ANTI_AFFINITY, False
            if c[1]:
                idle = False
    for holder_node, releasing, key in v.against:
        val = labels.get(key)
        other = ssn.node_by_name.get(holder_node)
        if val is not None and other is not None and other.spec.labels.get(key) == val:
            if not releasing:
                return EXISTING_ANTI_AFFINITY, False
            idle = False
    return None, idle


def preference(ssn: Session, task: TaskInfo, nodes: list[NodeInfo]) -> list[float]:
    """Summed weights of preferred affinity terms (minus preferred anti-affinity) the nodes' domains
    satisfy, one matching pod counting once per term per domain (as kube-scheduler weighs them)."""
    pod = task.pod
    idx = ssn.pod_index()
    terms = [(t, 1) for t in pod.pod_affinity if t.weight] + [
        (t, -1) for t in pod.pod_anti_affinity if t.weight
    ]
    out = [0.0] * len(nodes)
    for t, sign in terms:
        dc = domain_counts(
            ssn, idx.counts(t.selector, term_namespaces(t, pod.namespace, idx.namespaces)), t.topology_key
        )
        for i, n in enumerate(nodes):
            val = n.spec.labels.get(t.topology_key)
            c = dc.get(val) if val is not None else None
            if c is not None and c[0]:
                out[i] += sign * t.weight * c[0]
    return out


def existing_preference(
    ssn: Session, existing: list[tuple[str, str, int]], nodes: list[NodeInfo]
) -> list[float]:
    """Summed signed weights of placed pods' scoring terms that select the incoming pod (from
    :meth:`PodIndex.soft_against`), each counted on the nodes that share its holder node's topology domain."""
    pairs: dict[tuple[str, str], int] = {}
    for holder_node, key, weight in existing:
        holder = ssn.node_by_name.get(holder_node)
        val = holder.spec.labels.get(key) if holder is not None else None
        if val is not None:
            pairs[(key, val)] = pairs.get((key, val), 0) + weight
    out = [0.0] * len(nodes)
    for (key, val), weight in pairs.items():
        for i, n in enumerate(nodes):
            if n.spec.labels.get(key) == val:
                out[i] += weight
    return out
