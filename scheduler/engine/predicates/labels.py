"""Label matching shared by the filters: node-selector expressions, label selectors, affinity terms."""

from __future__ import annotations

import re
from collections.abc import Mapping

from scheduler.engine.state import (
    LabelSelector,
    MatchExpression,
    Node,
    Pod,
    PodAffinityTerm,
    Taint,
    Toleration,
)

_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_INT64 = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def valid_label_key(key: str) -> bool:
    """A qualified name (``[prefix/]name``), as apimachinery's ``IsQualifiedName`` checks a label key."""
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix):
            return False
    else:
        return False
    return 0 < len(name) <= 63 and _NAME.fullmatch(name) is not None


def valid_label_value(value: str) -> bool:
    """Empty, or at most 63 characters of ``[A-Za-z0-9_.-]`` starting and ending alphanumeric."""
    return value == "" or (len(value) <= 63 and _NAME.fullmatch(value) is not None)


def parse_int64(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``: optional sign, decimal digits only, within int64."""
    if not _INT64.fullmatch(text):
        return None
    v = int(text)
    return v if _INT64_MIN <= v <= _INT64_MAX else None


# A node-selector term's ``matchFields`` requirement on the node's name, carried among its expressions
# under a key no label can have (ingest writes it only where allowed nodes cannot say the same).
FIELD_NODE_NAME = "@metadata.name"


def valid_node_requirement(e: MatchExpression) -> bool:
    """Whether kube-scheduler can parse a node-selector requirement (``labels.NewRequirement``; for the
    node-name field, ``In`` / ``NotIn`` with exactly one value); a term holding one it cannot parse
    matches no node."""
    if e.key == FIELD_NODE_NAME:
        return e.operator in ("In", "NotIn") and len(e.values) == 1
    if not valid_label_key(e.key):
        return False
    if e.operator in ("In", "NotIn"):
        ok = bool(e.values)
    elif e.operator in ("Exists", "DoesNotExist"):
        ok = not e.values
    elif e.operator in ("Gt", "Lt"):
        ok = len(e.values) == 1 and parse_int64(e.values[0]) is not None
    else:
        ok = False
    return ok and all(valid_label_value(v) for v in e.values)


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
    if e.operator in ("Gt", "Lt") and v is not None and len(e.values) == 1:
        a, b = parse_int64(v), parse_int64(e.values[0])
        if a is None or b is None:
            return False
        return a > b if e.operator == "Gt" else a < b
    return False


def node_term_matches(labels: Mapping[str, str], term: tuple[MatchExpression, ...], name: str = "") -> bool:
    """A node-selector term on the node `name` with `labels`: its requirements ANDed. As in kube-scheduler,
    an empty term matches no node, and neither does a term with a requirement that does not parse (bad
    key, value or operator)."""
    if not term or not all(valid_node_requirement(e) for e in term):
        return False
    return all(
        (name == e.values[0]) == (e.operator == "In")
        if e.key == FIELD_NODE_NAME
        else match_expression(labels, e)
        for e in term
    )


def node_terms_match(
    labels: Mapping[str, str], terms: tuple[tuple[MatchExpression, ...], ...], name: str = ""
) -> bool:
    """Required node affinity: terms ORed; no terms at all (no affinity stated) matches every node."""
    return not terms or any(node_term_matches(labels, t, name) for t in terms)


def selector_matches(sel: LabelSelector, labels: Mapping[str, str]) -> bool:
    """A label selector against a pod's labels (the empty selector matches everything, a missing one
    nothing)."""
    if sel.nothing:
        return False
    for k, v in sel.match_labels:
        if labels.get(k) != v:
            return False
    return all(match_expression(labels, e) for e in sel.match_expressions)


class AllNamespaces:
    """Every namespace, known or not (an empty ``namespaceSelector``, kube's ``labels.Everything()``)."""

    __slots__ = ()

    def __contains__(self, namespace: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "EVERY_NAMESPACE"


EVERY_NAMESPACE = AllNamespaces()
NamespaceSet = tuple[str, ...] | AllNamespaces
NO_NAMESPACES: Mapping[str, Mapping[str, str]] = {}


def _is_everything(sel: LabelSelector) -> bool:
    return not sel.nothing and not sel.match_labels and not sel.match_expressions


def term_namespaces(
    term: PodAffinityTerm, own_namespace: str, namespaces: Mapping[str, Mapping[str, str]] = NO_NAMESPACES
) -> NamespaceSet:
    """The namespaces a term of the pod placed now looks at (kube-scheduler's ``AffinityTerm`` after
    ``mergeAffinityTermNamespacesIfNotEmpty``): no list and no namespace selector, the pod's own namespace;
    else its list plus the known `namespaces` (name -> labels) the selector matches; an empty selector
    every namespace, known or not."""
    sel = term.namespace_selector
    if sel is None:
        return term.namespaces or (own_namespace,)
    if _is_everything(sel):
        return EVERY_NAMESPACE
    picked = set(term.namespaces)
    picked.update(n for n, labels in namespaces.items() if selector_matches(sel, labels))
    return tuple(sorted(picked))


def term_covers(
    term: PodAffinityTerm,
    own_namespace: str,
    namespace: str,
    labels: Mapping[str, str],
    namespace_labels: Mapping[str, str] | None = None,
) -> bool:
    """True when a pod (namespace, labels) is one of those `term` (stated by a pod in `own_namespace`)
    selects (``AffinityTerm.Matches``): its namespace is listed, or the term's namespace selector matches
    that namespace's labels (`namespace_labels`; an unknown namespace has none)."""
    sel = term.namespace_selector
    if sel is None:
        in_scope = namespace in (term.namespaces or (own_namespace,))
    else:
        in_scope = namespace in term.namespaces or selector_matches(sel, namespace_labels or {})
    return in_scope and selector_matches(term.selector, labels)


def tolerates(tol: Toleration, taint: Taint) -> bool:
    """``Toleration.ToleratesTaint`` of k8s.io/api: an effect, when named, must be the taint's; a key, when
    named, must be the taint's; then ``Exists`` tolerates any value and ``Equal`` only the same value."""
    if tol.effect and tol.effect != taint.effect:
        return False
    if tol.key and tol.key != taint.key:
        return False
    if tol.operator in ("", "Equal"):
        return tol.value == taint.value
    return tol.operator == "Exists"


def untolerated_taint(pod: Pod, node: Node) -> Taint | None:
    """The first NoSchedule / NoExecute taint of the node the pod does not tolerate, or None."""
    for taint in node.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(tol, taint) for tol in pod.tolerations):
            return taint
    return None


UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


def tolerates_cordon(pod: Pod) -> bool:
    """A cordoned node admits a pod that tolerates ``node.kubernetes.io/unschedulable:NoSchedule``
    (kube-scheduler's NodeUnschedulable filter)."""
    return any(tolerates(tol, UNSCHEDULABLE_TAINT) for tol in pod.tolerations)
