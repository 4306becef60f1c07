"""KAI's fair-share division (the proportion plugin's ``resource_division``), pure and deterministic.

Spec references: kai-spec.md §2.7 (accounting quantities), §3.1-3.3 (division algorithm, hierarchy,
special values), §4.1 (time-based fairshare ``P = max(0, W' + k(W' - U'))``), §10 rules 3 and 7-15.

Every resource (GPU, CPU, memory) is divided independently. Amounts are integers in engine units; all
intermediate arithmetic is exact (:class:`fractions.Fraction`), so results never depend on float drift,
on dict/set iteration order, or on the order rounds visit queues.

Hierarchy: top-level queues divide the cluster total; each parent's fair share is then divided among its
children, recursively. Queues whose parent is not in the input (or that sit on a parent cycle, and so can
never be reached from a top-level queue) are dropped together with their whole subtree (spec §10 rule 3).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

__all__ = [
    "RESOURCES",
    "UNITS",
    "QueueDemand",
    "QueueShare",
    "ResourceQuota",
    "allocatable_share",
    "divide",
    "requestable_share",
    "to_fraction",
    "unassigned",
]

RESOURCES: tuple[str, ...] = ("gpu", "cpu", "memory")
"""Divided resources. Engine units: gpu = milli-GPU (1 GPU = 1000), cpu = millicores, memory = bytes."""

UNITS: dict[str, int] = {"gpu": 1000, "cpu": 1, "memory": 1}
"""Whole unit (in engine units) to which over-quota grants are floored: 1 GPU, 1 millicore, 1 byte."""

DEFAULT_QUEUE_PRIORITY = 100


def to_fraction(value: int | float | Fraction | str) -> Fraction:
    """Exact rational for ``value``; floats go through their shortest repr, so ``0.1`` becomes 1/10."""
    if isinstance(value, float):
        return _float_fraction(value)
    return Fraction(value)


@functools.lru_cache(maxsize=4096)
def _float_fraction(value: float) -> Fraction:
    # Fraction(0.1) would be the binary approximation; the decimal the user wrote is what they mean.
    # Cached: every division reads each queue's usage again, mostly the same few values (often 0.0),
    # and parsing the repr was most of a division's time.
    return Fraction(repr(value))


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """A queue's settings for one resource, in engine units.

    ``quota`` is the deserved amount (None = unlimited, KAI's -1); ``limit`` is the hard cap
    (None = no cap, KAI's -1; 0 = nothing allowed); ``weight`` is the over-quota weight (0 = never
    receives over-quota or remainder resources).
    """

    quota: int | None
    limit: int | None
    weight: Fraction

    def __post_init__(self) -> None:
        if self.quota is not None and self.quota < 0:
            raise ValueError(f"quota must be None (unlimited) or >= 0, got {self.quota}")
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"limit must be None (no cap) or >= 0, got {self.limit}")
        if self.weight < 0:
            raise ValueError(f"over-quota weight must be >= 0, got {self.weight}")

    @classmethod
    def of(
        cls, quota: int | None = 0, limit: int | None = None, weight: int | float | Fraction = 0
    ) -> ResourceQuota:
        """Build a quota, accepting an int, float or Fraction weight (stored as an exact Fraction)."""
        return cls(quota=quota, limit=limit, weight=to_fraction(weight))


_MISSING_QUOTA = ResourceQuota(quota=0, limit=None, weight=Fraction(0))


@dataclass(frozen=True, slots=True)
class QueueDemand:
    """One queue's input to the division.

    ``resources`` missing a key means quota 0, no limit, weight 0 for that resource. ``requested``,
    ``allocated`` and ``allocated_non_preemptible`` are read for leaf queues only; a parent's values are
    the sums over its children. ``usage`` is the normalised historical usage U' per resource (0.0 if
    absent); parents use their own usage, not their children's. ``order`` is creation order (smaller =
    older) and only breaks remainder ties.
    """

    name: str
    parent: str | None
    priority: int = DEFAULT_QUEUE_PRIORITY
    order: int = 0
    resources: Mapping[str, ResourceQuota] = field(default_factory=dict)
    requested: Mapping[str, int] = field(default_factory=dict)
    allocated: Mapping[str, int] = field(default_factory=dict)
    allocated_non_preemptible: Mapping[str, int] = field(default_factory=dict)
    usage: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueShare:
    """One queue's division result plus the inputs that explain it (all keyed by :data:`RESOURCES`)."""

    name: str
    parent: str | None
    deserved: dict[str, int | None]
    limit: dict[str, int | None]
    weight: dict[str, Fraction]
    requested: dict[str, int]
    allocated: dict[str, int]
    allocated_non_preemptible: dict[str, int]
    fair_share: dict[str, int]
    fair_share_classic: dict[str, int]
    usage: dict[str, float]

    @property
    def k_adjustment(self) -> dict[str, int]:
        """What the kValue/usage term changed: ``fair_share - fair_share_classic`` per resource."""
        return {r: self.fair_share[r] - self.fair_share_classic[r] for r in RESOURCES}


def requestable_share(share: QueueShare, resource: str) -> int:
    """KAI ``GetRequestableShare``: ``min(requested, limit)``, or just ``requested`` with no limit."""
    return _requestable(share.requested[resource], share.limit[resource])


def allocatable_share(share: QueueShare, resource: str) -> int | None:
    """KAI ``GetAllocatableShare`` (spec §2.7); None means infinite.

    Unlimited deserved gives the limit; otherwise ``max(deserved, fair_share)`` capped by the limit.
    """
    deserved = share.deserved[resource]
    limit = share.limit[resource]
    if deserved is None:
        return limit
    amount = max(deserved, share.fair_share[resource])
    return amount if limit is None else min(amount, limit)


def unassigned(total: Mapping[str, int], shares: Mapping[str, QueueShare]) -> dict[str, int]:
    """Capacity no top-level queue was given: ``max(0, total - sum of top-level fair shares)``.

    Deserved amounts are not scaled down, so shares can add up to more than the total; then this is 0.
    """
    out: dict[str, int] = {}
    for r in RESOURCES:
        given = sum(s.fair_share[r] for s in shares.values() if s.parent is None)
        out[r] = max(0, total.get(r, 0) - given)
    return out


def _requestable(requested: int, limit: int | None) -> int:
    return requested if limit is None else min(requested, limit)


@dataclass(slots=True)
class _Member:
    """One sibling queue's view of one resource during a level's division."""

    name: str
    order: int
    priority: int
    deserved: int | None
    weight: Fraction
    requestable: int
    usage: Fraction
    fair_share: int = 0


def divide(
    total: Mapping[str, int], queues: Sequence[QueueDemand], k_value: float = 0.0
) -> dict[str, QueueShare]:
    """Divide ``total`` among the queue tree, per resource, the way KAI's proportion plugin does.

    Top-level queues (parent None) divide ``total``; each parent's fair share is then divided among its
    children, recursively, any depth. ``k_value`` weighs historical usage in the over-quota phase
    (values <= 0 mean 0). Queues whose parent is missing are dropped with their subtree (spec §10
    rule 3). Returns shares for every kept queue, in the input order.
    """
    _check_keys("total", total)
    names = [q.name for q in queues]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"duplicate queue names: {dupes}")
    for q in queues:
        _check_keys(f"queue {q.name!r} resources", q.resources)
        _check_keys(f"queue {q.name!r} requested", q.requested)

    kept = _reachable(queues)
    children: dict[str | None, list[QueueDemand]] = {}
    for q in kept:
        children.setdefault(q.parent, []).append(q)

    requested = _aggregate(kept, children, lambda q: q.requested)
    allocated = _aggregate(kept, children, lambda q: q.allocated)
    non_preemptible = _aggregate(kept, children, lambda q: q.allocated_non_preemptible)

    k = max(Fraction(0), to_fraction(k_value))
    fair = _divide_tree(total, children, requested, k)
    # The classic (k = 0) division is what KAI would give without time-based fairshare; keep it so a
    # record can show how much the usage term moved each queue.
    classic = fair if k == 0 else _divide_tree(total, children, requested, Fraction(0))

    shares: dict[str, QueueShare] = {}
    for q in kept:
        quotas = {r: q.resources.get(r, _MISSING_QUOTA) for r in RESOURCES}
        shares[q.name] = QueueShare(
            name=q.name,
            parent=q.parent,
            deserved={r: quotas[r].quota for r in RESOURCES},
            limit={r: quotas[r].limit for r in RESOURCES},
            weight={r: quotas[r].weight for r in RESOURCES},
            requested=requested[q.name],
            allocated=allocated[q.name],
            allocated_non_preemptible=non_preemptible[q.name],
            fair_share=fair[q.name],
            fair_share_classic=classic[q.name],
            usage={r: float(q.usage.get(r, 0.0)) for r in RESOURCES},
        )
    return shares


def _check_keys(what: str, mapping: Mapping[str, object]) -> None:
    # A misspelt key (e.g. "cpu_millicores") would silently divide as zero; fail loudly instead.
    unknown = sorted(k for k in mapping if k not in RESOURCES)
    if unknown:
        raise ValueError(f"{what}: unknown resource keys {unknown}; expected a subset of {RESOURCES}")


def _reachable(queues: Sequence[QueueDemand]) -> list[QueueDemand]:
    """Queues connected to a top-level queue, in input order (orphans, cycles and their subtrees drop)."""
    by_parent: dict[str | None, list[str]] = {}
    for q in queues:
        by_parent.setdefault(q.parent, []).append(q.name)
    keep: set[str] = set()
    stack = list(by_parent.get(None, []))
    while stack:
        name = stack.pop()
        if name in keep:
            continue
        keep.add(name)
        stack.extend(by_parent.get(name, []))
    return [q for q in queues if q.name in keep]


def _aggregate(
    kept: Sequence[QueueDemand],
    children: Mapping[str | None, Sequence[QueueDemand]],
    read: Callable[[QueueDemand], Mapping[str, int]],
) -> dict[str, dict[str, int]]:
    """Leaf values as given; a parent's value is the sum over its children (recursively)."""
    out: dict[str, dict[str, int]] = {}

    def visit(q: QueueDemand) -> dict[str, int]:
        kids = children.get(q.name, [])
        if kids:
            sums = dict.fromkeys(RESOURCES, 0)
            for kid in kids:
                for r, v in visit(kid).items():
                    sums[r] += v
            out[q.name] = sums
        else:
            values = read(q)
            out[q.name] = {r: int(values.get(r, 0)) for r in RESOURCES}
        return out[q.name]

    for root in children.get(None, []):
        visit(root)
    return {q.name: out[q.name] for q in kept}


def _divide_tree(
    total: Mapping[str, int],
    children: Mapping[str | None, Sequence[QueueDemand]],
    requested: Mapping[str, Mapping[str, int]],
    k: Fraction,
) -> dict[str, dict[str, int]]:
    """Fair share of every queue: each sibling group divides its parent's share (or the cluster total)."""
    fair: dict[str, dict[str, int]] = {}
    # Breadth-first from the roots, so a parent's share is known before its children divide it.
    pending: list[tuple[str | None, dict[str, int]]] = [(None, {r: int(total.get(r, 0)) for r in RESOURCES})]
    while pending:
        parent, level_total = pending.pop(0)
        siblings = children.get(parent, [])
        if not siblings:
            continue
        for q in siblings:
            fair[q.name] = {}
        for r in RESOURCES:
            members = [
                _Member(
                    name=q.name,
                    order=q.order,
                    priority=q.priority,
                    deserved=q.resources.get(r, _MISSING_QUOTA).quota,
                    weight=q.resources.get(r, _MISSING_QUOTA).weight,
                    requestable=_requestable(requested[q.name][r], q.resources.get(r, _MISSING_QUOTA).limit),
                    usage=to_fraction(q.usage.get(r, 0.0)),
                )
                for q in siblings
            ]
            _divide_resource(level_total[r], members, k, UNITS[r])
            for m in members:
                fair[m.name][r] = m.fair_share
        for q in siblings:
            pending.append((q.name, fair[q.name]))
    return fair


def _divide_resource(total: int, members: Sequence[_Member], k: Fraction, unit: int) -> int:
    """KAI ``setResourceShare`` for one resource over one sibling group; returns the amount left over.

    Sets ``fair_share`` on each member.
    """
    # 1. Deserved phase: everyone gets min(deserved, requestable) first, unaffected by priority.
    #    Deserved is not scaled down, so this may hand out more than ``total``.
    remaining = total
    for m in members:
        deserved = total if m.deserved is None else m.deserved
        give = min(deserved, m.requestable)
        m.fair_share += give
        remaining -= give
    if remaining <= 0:
        return 0

    # 2. Over-quota phase, one priority group at a time, highest priority first.
    priorities = sorted({m.priority for m in members}, reverse=True)
    groups = {p: [m for m in members if m.priority == p] for p in priorities}
    candidates: dict[int, dict[str, Fraction]] = {}
    rem = Fraction(remaining)
    for p in priorities:
        rem, candidates[p] = _divide_up_to_fair_share(rem, groups[p], k, unit)

    # 3. Remainder phase: units lost to flooring go, one each, to the largest fractional remainders
    #    (ties: older queue, then name), higher priority groups first. No cap check here (as in KAI).
    for p in priorities:
        if rem <= 0:
            break
        by_name = {m.name: m for m in groups[p]}
        ranked = sorted(candidates[p].items(), key=lambda kv: (-kv[1], by_name[kv[0]].order, kv[0]))
        for name, _fraction in ranked:
            if rem == 0:
                break
            give_units = min(Fraction(unit), rem)
            by_name[name].fair_share += int(give_units)
            rem -= give_units
    # Every grant is a whole number of engine units, so what is left is too.
    return int(rem)


def _divide_up_to_fair_share(
    amount: Fraction, group: Sequence[_Member], k: Fraction, unit: int
) -> tuple[Fraction, dict[str, Fraction]]:
    """KAI ``divideUpToFairShare``: weighted rounds inside one priority group.

    Returns what is left and the remainder candidates ``{queue: fractional leftover}``.
    """
    candidates: dict[str, Fraction] = {}
    while True:
        round_amount = amount  # C: every share in a round is computed from the start-of-round amount
        unsatisfied = [m for m in group if m.requestable > m.fair_share]
        weight_sum = sum((m.weight for m in unsatisfied), Fraction(0))
        if weight_sum == 0:
            break
        power: dict[str, Fraction] = {}
        for m in unsatisfied:
            w_norm = m.weight / weight_sum
            power[m.name] = max(Fraction(0), w_norm + k * (w_norm - m.usage))
        power_sum = sum(power.values(), Fraction(0))
        if power_sum == 0:
            break

        freed_surplus = False
        for m in unsatisfied:
            if amount == 0:
                break
            if m.weight == 0:
                continue  # weight 0 never gets over-quota resources (nor becomes a remainder candidate)
            remaining_request = m.requestable - m.fair_share
            share = round_amount * power[m.name] / power_sum
            if remaining_request <= share:
                give = Fraction(remaining_request)
                candidates.pop(m.name, None)  # satisfied: no longer owed a remainder unit
            else:
                # Unsatisfied queues are granted whole units only; the cut fraction may come back later.
                give = Fraction((share // unit) * unit)
                if share - give > 0:
                    candidates[m.name] = share - give
            if give == 0:
                continue
            m.fair_share += int(give)
            amount -= give
            freed_surplus = freed_surplus or remaining_request < share
        # Another round only helps if someone needed less than offered, freeing surplus for the rest.
        if not freed_surplus or amount == 0:
            break
    return amount, candidates
