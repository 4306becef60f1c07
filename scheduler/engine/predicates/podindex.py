"""Which pods sit where, by label: what inter-pod affinity and topology spread count.

The index holds every pod on a node (ours: allocated, pipelined, running, releasing; and pods of other
schedulers), with its namespace and labels. A count per node of the pods a selector matches is computed on
first use and kept current on every move, so a check costs one pass over the nodes' domains, not over all
pods. It is built lazily: a cycle with no inter-pod constraint never pays for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.engine.predicates.labels import NO_NAMESPACES, NamespaceSet, selector_matches, term_covers
from scheduler.engine.state import LabelSelector, PodAffinityTerm

SelectorKey = tuple[LabelSelector, NamespaceSet]


@dataclass(slots=True)
class Entry:
    namespace: str
    labels: Mapping[str, str]
    node: str
    releasing: bool
    anti: tuple[PodAffinityTerm, ...]  # its required anti-affinity terms (symmetric check)
    # Its terms that score an incoming pod they select (kube-scheduler's processExistingPod): required
    # affinity with HARD_POD_AFFINITY_WEIGHT, preferred affinity +weight, preferred anti-affinity -weight.
    soft: tuple[tuple[PodAffinityTerm, int], ...] = ()


HARD_POD_AFFINITY_WEIGHT = 1  # kube-scheduler's InterPodAffinityArgs.hardPodAffinityWeight default


def has_soft_terms(affinity: tuple[PodAffinityTerm, ...], anti: tuple[PodAffinityTerm, ...]) -> bool:
    """Whether a placed pod with these terms scores incoming pods (:func:`soft_terms` is not empty)."""
    return bool(affinity) or any(t.weight for t in anti)


def soft_terms(
    affinity: tuple[PodAffinityTerm, ...], anti: tuple[PodAffinityTerm, ...]
) -> tuple[tuple[PodAffinityTerm, int], ...]:
    """A placed pod's terms that score incoming pods, with their signed weights."""
    out = [(t, t.weight or HARD_POD_AFFINITY_WEIGHT) for t in affinity]
    out += [(t, -t.weight) for t in anti if t.weight]
    return tuple(out)


class PodIndex:
    """Pods on nodes, with per-selector counts by node: ``[active, releasing]``."""

    def __init__(self, namespaces: Mapping[str, Mapping[str, str]] = NO_NAMESPACES) -> None:
        self.namespaces = namespaces  # namespace -> its labels (what namespace selectors match)
        self.entries: dict[str, Entry] = {}
        self._counts: dict[SelectorKey, dict[str, list[int]]] = {}
        self.holders: dict[str, Entry] = {}  # pods with required anti-affinity terms
        self.soft_holders: dict[str, Entry] = {}  # pods with terms that score incoming pods (Entry.soft)
        # Their terms by the selector's first matchLabels pair, as the anti-affinity terms below.
        self._soft_by_label: dict[tuple[str, str], dict[tuple[str, int], None]] = {}
        self._soft_any: dict[tuple[str, int], None] = {}
        # Pods by one label (key, value), and cached selectors by their first matchLabels pair, so a
        # selector is counted from the pods that carry its label and a move updates only the selectors
        # that can match it (dicts as ordered sets: sums do not depend on order, iteration stays stable).
        self._by_label: dict[tuple[str, str], dict[str, None]] = {}
        self._sel_by_label: dict[tuple[str, str], list[SelectorKey]] = {}
        self._sel_any: list[SelectorKey] = []  # selectors without matchLabels: checked on every move
        # Holders' anti-affinity terms by their selector's first matchLabels pair (others: always checked).
        self._anti_by_label: dict[tuple[str, str], dict[tuple[str, int], None]] = {}
        self._anti_any: dict[tuple[str, int], None] = {}

    def _touch(self, e: Entry, sign: int) -> None:
        keys = list(self._sel_any)
        for kv in e.labels.items():
            keys.extend(self._sel_by_label.get(kv, ()))
        for key in keys:
            sel, nss = key
            if e.namespace in nss and selector_matches(sel, e.labels):
                c = self._counts[key].setdefault(e.node, [0, 0])
                c[1 if e.releasing else 0] += sign

    def _anti_bucket(self, uid: str, i: int, term: PodAffinityTerm) -> dict[tuple[str, int], None]:
        ml = term.selector.match_labels
        return self._anti_by_label.setdefault(ml[0], {}) if ml else self._anti_any

    def _soft_bucket(self, term: PodAffinityTerm) -> dict[tuple[str, int], None]:
        ml = term.selector.match_labels
        return self._soft_by_label.setdefault(ml[0], {}) if ml else self._soft_any

    def add(self, uid: str, e: Entry) -> None:
        self.entries[uid] = e
        if e.anti:
            self.holders[uid] = e
            for i, t in enumerate(e.anti):
                self._anti_bucket(uid, i, t)[(uid, i)] = None
        if e.soft:
            self.soft_holders[uid] = e
            for i, (t, _) in enumerate(e.soft):
                self._soft_bucket(t)[(uid, i)] = None
        for kv in e.labels.items():
            self._by_label.setdefault(kv, {})[uid] = None
        self._touch(e, 1)

    def remove(self, uid: str) -> None:
        e = self.entries.pop(uid, None)
        if e is None:
            return
        self.holders.pop(uid, None)
        self.soft_holders.pop(uid, None)
        for i, (t, _) in enumerate(e.soft):
            self._soft_bucket(t).pop((uid, i), None)
        for i, t in enumerate(e.anti):
            self._anti_bucket(uid, i, t).pop((uid, i), None)
        for kv in e.labels.items():
            bucket = self._by_label.get(kv)
            if bucket is not None:
                bucket.pop(uid, None)
        self._touch(e, -1)

    def counts(self, sel: LabelSelector, namespaces: NamespaceSet) -> dict[str, list[int]]:
        """Matching pods per node name, ``[active, releasing]``."""
        if sel.nothing:
            return {}
        key = (sel, namespaces)
        got = self._counts.get(key)
        if got is None:
            got = {}
            if sel.match_labels:
                first = sel.match_labels[0]
                candidates = [self.entries[u] for u in self._by_label.get(first, {})]
                self._sel_by_label.setdefault(first, []).append(key)
            else:
                candidates = list(self.entries.values())
                self._sel_any.append(key)
            for e in candidates:
                if e.namespace in namespaces and selector_matches(sel, e.labels):
                    c = got.setdefault(e.node, [0, 0])
                    c[1 if e.releasing else 0] += 1
            self._counts[key] = got
        return got

    def holders_against(self, namespace: str, labels: Mapping[str, str]) -> list[tuple[str, bool, str]]:
        """Existing pods whose required anti-affinity selects a pod (namespace, labels):
        ``(node, releasing, topology_key)`` per matching term."""
        refs: list[tuple[str, int]] = list(self._anti_any)
        for kv in labels.items():
            refs.extend(self._anti_by_label.get(kv, ()))
        refs.sort(key=lambda r: (r[0], r[1]))  # stable order whatever bucket a term came from
        out = []
        for uid, i in refs:
            e = self.holders[uid]
            t = e.anti[i]
            if term_covers(t, e.namespace, namespace, labels, self.namespaces.get(namespace)):
                out.append((e.node, e.releasing, t.topology_key))
        return out

    def soft_against(self, namespace: str, labels: Mapping[str, str]) -> list[tuple[str, str, int]]:
        """Placed pods' scoring terms (:attr:`Entry.soft`) that select a pod (namespace, labels):
        ``(node, topology_key, signed weight)`` per matching term, in (pod uid, term) order."""
        refs: list[tuple[str, int]] = list(self._soft_any)
        for kv in labels.items():
            refs.extend(self._soft_by_label.get(kv, ()))
        refs.sort()
        out = []
        ns_labels = self.namespaces.get(namespace)
        for uid, i in refs:
            e = self.soft_holders[uid]
            t, w = e.soft[i]
            if term_covers(t, e.namespace, namespace, labels, ns_labels):
                out.append((e.node, t.topology_key, w))
        return out
