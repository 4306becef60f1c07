"""Label matching shared by the filters: node-selector expressions, label selectors, affinity terms."""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.engine.state import LabelSelector, MatchExpression, Node, Pod, PodAffinityTerm, Taint


def match_expression(labels: Mapping[str, str], e: MatchExpression) -> bool:
    """One ``matchExpressions`` entry (node-selector operators, which include Gt / Lt)."""
    v = labels.get(e.key)
    if e.operator == "In":
        return v is not None and v in e.values
    if e.operator == "NotIn":
        return v is None or v not in e.values
    if e.operator == "Exists":
        return v is not None
    if e.operator == "DoesNotExist":
        return v is None
    if e.operator in ("Gt", "Lt") and v is not None and e.values:
        try:
            a, b = int(v), int(e.values[0])
        except ValueError:
            return False
        return a > b if e.operator == "Gt" else a < b
    return False


def node_term_matches(labels: Mapping[str, str], term: tuple[MatchExpression, ...]) -> bool:
    """A node-selector term: its expressions ANDed."""
    return all(match_expression(labels, e) for e in term)


def node_terms_match(labels: Mapping[str, str], terms: tuple[tuple[MatchExpression, ...], ...]) -> bool:
    """Required node affinity: terms ORed; no terms matches every node."""
    return not terms or any(node_term_matches(labels, t) for t in terms)


def selector_matches(sel: LabelSelector, labels: Mapping[str, str]) -> bool:
    """A label selector against a pod's labels (the empty selector matches everything)."""
    for k, v in sel.match_labels:
        if labels.get(k) != v:
            return False
    return all(match_expression(labels, e) for e in sel.match_expressions)


def term_namespaces(term: PodAffinityTerm, own_namespace: str) -> tuple[str, ...]:
    """The namespaces a term looks at: its own list, or the namespace of the pod that states it."""
    return term.namespaces or (own_namespace,)


def term_covers(term: PodAffinityTerm, own_namespace: str, namespace: str, labels: Mapping[str, str]) -> bool:
    """True when a pod (namespace, labels) is one of those `term` (stated by a pod in `own_namespace`)
    selects."""
    return namespace in term_namespaces(term, own_namespace) and selector_matches(term.selector, labels)


def untolerated_taint(pod: Pod, node: Node) -> Taint | None:
    """The first NoSchedule / NoExecute taint of the node the pod does not tolerate, or None."""
    for taint in node.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(
            (tol.key == "" and tol.operator == "Exists")
            or (
                tol.key == taint.key
                and (tol.operator == "Exists" or tol.value == taint.value)
                and (tol.effect is None or tol.effect == taint.effect)
            )
            for tol in pod.tolerations
        ):
            return taint
    return None
