"""Tests for scheduler.engine.proportion: KAI fair-share division (spec §2.7, §3, §4.1, §4.7)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.conformance import SCENARIOS_DIR
from scheduler.conformance.fairshare import check_fair_share_scenario, fair_share_scenario_inputs
from scheduler.engine.proportion import (
    RESOURCES,
    UNITS,
    QueueDemand,
    QueueShare,
    ResourceQuota,
    allocatable_share,
    divide,
    requestable_share,
    unassigned,
)

G = 1000  # one GPU in engine units (milli-GPU)
SCENARIOS = sorted((SCENARIOS_DIR / "kai" / "fair-share").glob("*.json"))


def gq(
    name: str,
    quota: int | None,
    request: int,
    weight: float = 1,
    limit: int | None = None,
    *,
    parent: str | None = None,
    priority: int = 100,
    order: int = 0,
    usage: float = 0.0,
) -> QueueDemand:
    """A queue with only GPU settings; amounts in whole GPUs."""
    return QueueDemand(
        name=name,
        parent=parent,
        priority=priority,
        order=order,
        resources={
            "gpu": ResourceQuota.of(
                None if quota is None else quota * G, None if limit is None else limit * G, weight
            )
        },
        requested={"gpu": request * G},
        usage={"gpu": usage},
    )


def mq(
    name: str, quota: int | None, limit: int | None, weight: float, request: int, order: int
) -> QueueDemand:
    """A top-level queue with GPU settings in milli-GPU."""
    return QueueDemand(
        name,
        None,
        order=order,
        resources={"gpu": ResourceQuota.of(quota, limit, weight)},
        requested={"gpu": request},
    )


def gpus(shares: dict[str, QueueShare]) -> dict[str, float]:
    return {name: s.fair_share["gpu"] / G for name, s in shares.items()}


# --- conformance files -------------------------------------------------------------------------------


def test_all_fair_share_scenarios_present() -> None:
    assert len(SCENARIOS) == 36


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_conformance_fair_share(path: Path) -> None:
    doc = json.loads(path.read_text())
    assert check_fair_share_scenario(doc) == []


def test_scenario_inputs_convert_units() -> None:
    doc: dict[str, Any] = {
        "run": {"mode": "fair_share", "k_value": 0},
        "fair_share_input": {
            "total": {"gpu": 3.5, "cpu_millicores": 2000},
            "queues": [
                {
                    "name": "a",
                    "parent": None,
                    "priority": 7,
                    "gpu": {"quota": 1.5, "limit": None, "over_quota_weight": 0.5, "requested": 32.55},
                },
                {"name": "b", "parent": "a", "cpu_millicores": {"requested": 300}},
            ],
        },
    }
    total, queues, k = fair_share_scenario_inputs(doc)
    assert total == {"gpu": 3500, "cpu": 2000, "memory": 0}
    assert k == 0.0
    a, b = queues
    assert (a.priority, a.order, b.order, b.parent) == (7, 0, 1, "a")
    assert a.resources["gpu"] == ResourceQuota(1500, None, Fraction(1, 2))
    assert a.requested["gpu"] == 32550
    # SCHEMA defaults for fields a resource entry leaves out: CPU quota unlimited, weight 1.
    assert b.resources["cpu"] == ResourceQuota(None, None, Fraction(1))
    assert b.resources["gpu"] == ResourceQuota(0, None, Fraction(0))


def test_check_reports_mismatch() -> None:
    doc = json.loads(SCENARIOS[0].read_text())
    queue = next(iter(doc["expect"]["fair_share"]))
    key = next(iter(doc["expect"]["fair_share"][queue]))
    doc["expect"]["fair_share"][queue][key] += 1
    problems = check_fair_share_scenario(doc)
    assert len(problems) == 1 and queue in problems[0]


# --- spec §3.6 worked examples -----------------------------------------------------------------------

# §3.6 A: both queues deserved 2, request 6, weight 2, no limit, unless the row changes it.
TWO_QUEUES = [
    # (total, overrides q1, overrides q2, expected q1, expected q2, unassigned)
    (15, {}, {}, 6, 6, 3),
    (12, {}, {}, 6, 6, 0),
    (8, {"weight": 1}, {"weight": 3}, 3, 5, 0),
    (12, {"limit": 5}, {}, 5, 6, 1),
    (11, {"weight": 1, "request": 10}, {"weight": 4, "request": 10}, 3, 8, 0),
    (11, {}, {}, 6, 5, 0),  # remainders tie at 0.5: the older queue wins
    (4, {"priority": 1}, {"priority": 2}, 2, 2, 0),
    (6, {"priority": 1}, {"priority": 2}, 2, 4, 0),
    (6, {"priority": 1, "weight": 100}, {"priority": 2, "weight": 1}, 2, 4, 0),
]


@pytest.mark.parametrize(("total", "o1", "o2", "e1", "e2", "left"), TWO_QUEUES)
def test_spec_two_queues(
    total: int, o1: dict[str, Any], o2: dict[str, Any], e1: int, e2: int, left: int
) -> None:
    base: dict[str, Any] = {"quota": 2, "request": 6, "weight": 2}
    q1 = gq("q1", **{**base, **o1}, order=0)
    q2 = gq("q2", **{**base, **o2}, order=1)
    shares = divide({"gpu": total * G}, [q1, q2])
    assert gpus(shares) == {"q1": e1, "q2": e2}
    assert unassigned({"gpu": total * G}, shares)["gpu"] == left * G


def test_spec_remainder_with_priorities_3_2_0() -> None:
    queues = [
        gq("q1", 2, 5, weight=2, priority=2, order=0),
        gq("q2", 2, 5, weight=2, priority=2, order=1),
        gq("q3", 1, 0, weight=2, priority=1, order=2),
    ]
    assert gpus(divide({"gpu": 5 * G}, queues)) == {"q1": 3, "q2": 2, "q3": 0}


def test_spec_simulator_70_30() -> None:
    queues = [gq("a", 10, 100, weight=3), gq("b", 10, 100, weight=1, order=1)]
    assert gpus(divide({"gpu": 100 * G}, queues)) == {"a": 70, "b": 30}


def test_remainder_tie_breaks_on_name_when_order_equal() -> None:
    queues = [gq("zeta", 2, 6, weight=2), gq("alpha", 2, 6, weight=2)]
    assert gpus(divide({"gpu": 11 * G}, queues)) == {"zeta": 5, "alpha": 6}


def test_remainder_unit_is_not_capped_by_request() -> None:
    # KAI quirk (§3.1 step 3): the remainder unit has no cap check, so q-small ends 0.2 GPU above its request.
    small = mq("small", 0, None, 1, 1800, order=0)
    big = gq("big", 0, 10, order=1)
    shares = divide({"gpu": 3 * G}, [small, big])
    assert gpus(shares) == {"small": 2, "big": 1}


def test_satisfied_queue_loses_its_remainder_candidacy() -> None:
    # multi-resource-09 in file units: q1's 0.379 remainder from round 1 must not earn it a unit after
    # round 2 satisfies it.
    queues = [
        mq("q1", 12000, None, 12, 32550, order=0),
        mq("q2", 7000, None, 7, 9500, order=1),
        mq("q3", 2000, 2000, 2, 1650, order=2),
    ]
    shares = divide({"gpu": 45 * G}, queues)
    assert {n: s.fair_share["gpu"] for n, s in shares.items()} == {"q1": 32550, "q2": 9500, "q3": 1650}


# --- special values (§3.3) ---------------------------------------------------------------------------


def test_limit_zero_gets_nothing() -> None:
    shares = divide({"gpu": 10 * G}, [gq("a", 5, 8, weight=1, limit=0), gq("b", 0, 3, order=1)])
    assert gpus(shares) == {"a": 0, "b": 3}
    assert requestable_share(shares["a"], "gpu") == 0
    assert allocatable_share(shares["a"], "gpu") == 0


def test_no_limit_takes_all_it_requests() -> None:
    assert gpus(divide({"gpu": 10 * G}, [gq("a", 0, 9, limit=None)])) == {"a": 9}


def test_unlimited_quota_deserves_level_total() -> None:
    # Both deserve min(levelTotal, request) = 10; deserved is not scaled down, so shares exceed the total.
    total = {"gpu": 10 * G}
    shares = divide(total, [gq("a", None, 15, weight=0), gq("b", None, 12, weight=0, order=1)])
    assert gpus(shares) == {"a": 10, "b": 10}
    assert unassigned(total, shares)["gpu"] == 0
    assert allocatable_share(shares["a"], "gpu") is None  # quota -1 and limit -1: infinite


def test_zero_weight_gets_only_deserved() -> None:
    shares = divide({"gpu": 10 * G}, [gq("a", 3, 8, weight=0), gq("b", 0, 2, order=1)])
    assert gpus(shares) == {"a": 3, "b": 2}
    assert unassigned({"gpu": 10 * G}, shares)["gpu"] == 5 * G


def test_deep_hierarchy_children_divide_parent_share() -> None:
    queues = [
        gq("A", 10, 0, weight=1),  # parents' requests are ignored: they are summed from the children
        gq("B", 0, 10, weight=1, order=1),
        gq("A1", 2, 0, weight=1, parent="A", order=2),
        gq("A2", 0, 6, weight=3, parent="A", order=3),
        gq("A1x", 0, 999, weight=1, parent="A1", order=4),
        gq("l1", 1, 5, weight=1, parent="A1x", order=5),
        gq("l2", 1, 5, weight=2, parent="A1x", order=6),
        gq("orphan", 5, 5, parent="nope", order=7),
        gq("orphan-child", 5, 5, parent="orphan", order=8),
    ]
    shares = divide({"gpu": 20 * G}, queues)
    # Top: A 10 + 5, B 0 + 5. Under A (15): A1 2 + 3 + 4, A2 0 + 6. Under A1 (9): A1x 9.
    # Under A1x (9): l1 1 + 2 + 1, l2 1 + 4.
    assert gpus(shares) == {"A": 15, "B": 5, "A1": 9, "A2": 6, "A1x": 9, "l1": 4, "l2": 5}
    assert list(shares) == ["A", "B", "A1", "A2", "A1x", "l1", "l2"]  # input order, orphans dropped
    assert shares["A"].requested["gpu"] == 16 * G
    assert shares["A1x"].requested["gpu"] == 10 * G


def test_parent_aggregates_allocated_and_non_preemptible() -> None:
    leaf = QueueDemand(
        "leaf",
        "p",
        requested={"cpu": 7},
        allocated={"cpu": 5, "memory": 3},
        allocated_non_preemptible={"cpu": 2},
    )
    shares = divide({"cpu": 100}, [QueueDemand("p", None, allocated={"cpu": 999}), leaf])
    assert shares["p"].allocated == {"gpu": 0, "cpu": 5, "memory": 3}
    assert shares["p"].allocated_non_preemptible == {"gpu": 0, "cpu": 2, "memory": 0}
    assert shares["p"].requested["cpu"] == 7


def test_missing_resource_key_defaults() -> None:
    shares = divide({"cpu": 100}, [QueueDemand("a", None, requested={"cpu": 50})])
    s = shares["a"]
    assert (s.deserved["cpu"], s.limit["cpu"], s.weight["cpu"]) == (0, None, Fraction(0))
    assert s.fair_share == {"gpu": 0, "cpu": 0, "memory": 0}


def test_allocatable_share_rules() -> None:
    shares = divide({"gpu": 10 * G}, [gq("a", 2, 9, limit=6), gq("b", None, 1, limit=4, order=1)])
    assert allocatable_share(shares["a"], "gpu") == 6 * G  # max(deserved 2, fair share 8 -> capped 6)
    assert allocatable_share(shares["b"], "gpu") == 4 * G  # unlimited quota -> the limit
    assert requestable_share(shares["a"], "gpu") == 6 * G


def test_invalid_inputs_raise() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        divide({}, [QueueDemand("a", None), QueueDemand("a", None)])
    with pytest.raises(ValueError, match="unknown resource"):
        divide({"cpu_millicores": 5}, [])
    with pytest.raises(ValueError, match="quota"):
        ResourceQuota.of(-1)


def test_float_weight_is_exact_decimal() -> None:
    assert ResourceQuota.of(0, None, 0.1).weight == Fraction(1, 10)


# --- time-based fairshare (§4.1, §4.7) ---------------------------------------------------------------


def test_time_based_example_4_7() -> None:
    queues = [gq("q1", 0, 100, usage=0.6), gq("q2", 0, 100, usage=0.2, order=1)]
    shares = divide({"gpu": 10 * G}, queues, k_value=1.0)
    assert gpus(shares) == {"q1": 3, "q2": 7}
    assert {n: s.fair_share_classic["gpu"] for n, s in shares.items()} == {"q1": 5 * G, "q2": 5 * G}
    assert shares["q1"].k_adjustment == {"gpu": -2 * G, "cpu": 0, "memory": 0}
    assert shares["q2"].k_adjustment["gpu"] == 2 * G


@pytest.mark.parametrize("k", [1.0, 0.0, -3.0])
def test_zero_usage_or_no_k_equals_classic(k: float) -> None:
    queues = [gq("a", 2, 10, weight=1), gq("b", 2, 10, weight=4, order=1), gq("c", 0, 3, weight=2, order=2)]
    with_k = divide({"gpu": 11 * G}, queues, k_value=k)
    classic = divide({"gpu": 11 * G}, queues)
    for name, share in with_k.items():
        assert share.fair_share == share.fair_share_classic == classic[name].fair_share
        assert share.k_adjustment == dict.fromkeys(RESOURCES, 0)


def test_negative_k_is_ignored_even_with_usage() -> None:
    queues = [gq("q1", 0, 100, usage=0.6), gq("q2", 0, 100, usage=0.2, order=1)]
    assert gpus(divide({"gpu": 10 * G}, queues, k_value=-1.0)) == {"q1": 5, "q2": 5}


# --- properties --------------------------------------------------------------------------------------

_amount = st.integers(min_value=0, max_value=40)
_weights = st.sampled_from([0, 0, 1, 1, 2, 3, 0.5])


@st.composite
def _forest(draw: st.DrawFn) -> tuple[dict[str, int], list[QueueDemand], float]:
    n = draw(st.integers(min_value=1, max_value=8))
    queues: list[QueueDemand] = []
    for i in range(n):
        # Parents come earlier in the list, so the input is a forest; an occasional orphan exercises dropping.
        pick = draw(st.integers(min_value=0, max_value=9))
        parent: str | None = None
        if pick == 0:
            parent = "missing"
        elif pick >= 5 and queues:
            parent = draw(st.sampled_from([q.name for q in queues]))
        resources: dict[str, ResourceQuota] = {}
        requested: dict[str, int] = {}
        usage: dict[str, float] = {}
        for r in RESOURCES:
            fine = 100 if r == "gpu" else 1  # GPU requests in 0.1-GPU steps to exercise fractions
            quota = None if draw(st.integers(min_value=0, max_value=5)) == 0 else draw(_amount)
            limit = draw(st.none() | _amount)
            resources[r] = ResourceQuota.of(
                None if quota is None else quota * UNITS[r],
                None if limit is None else limit * UNITS[r],
                draw(_weights),
            )
            requested[r] = draw(st.integers(min_value=0, max_value=400)) * fine
            usage[r] = draw(st.floats(min_value=0.0, max_value=1.0))
        queues.append(
            QueueDemand(
                name=f"q{i}",
                parent=parent,
                priority=draw(st.sampled_from([100, 100, 100, 1, 2])),
                order=draw(st.integers(min_value=0, max_value=3)),
                resources=resources,
                requested=requested,
                usage=usage,
            )
        )
    total = {r: draw(st.integers(min_value=0, max_value=60)) * UNITS[r] for r in RESOURCES}
    k = draw(st.sampled_from([0.0, 0.0, 0.5, 1.0, 3.0]))
    return total, queues, k


def _levels(
    total: dict[str, int], shares: dict[str, QueueShare]
) -> list[tuple[dict[str, int], list[QueueShare]]]:
    """Each sibling group with the total it divided (cluster total, or the parent's fair share)."""
    groups: dict[str | None, list[QueueShare]] = {}
    for s in shares.values():
        groups.setdefault(s.parent, []).append(s)
    return [
        (total if parent is None else shares[parent].fair_share, siblings)
        for parent, siblings in groups.items()
    ]


def _deserved_grant(s: QueueShare, r: str, level_total: int) -> int:
    deserved = s.deserved[r]
    return min(level_total if deserved is None else deserved, requestable_share(s, r))


@settings(max_examples=300, deadline=None)
@given(_forest())
def test_property_division_invariants(case: tuple[dict[str, int], list[QueueDemand], float]) -> None:
    total, queues, k = case
    shares = divide(total, queues, k)

    # Deterministic, and independent of input order (KAI iterates Go maps, so order must not matter).
    assert divide(total, queues, k) == shares
    reordered = divide(total, list(reversed(queues)), k)
    assert {n: reordered[n] for n in shares} == shares
    # The classic result is exactly the k = 0 division.
    plain = divide(total, queues, 0.0)
    assert {n: s.fair_share_classic for n, s in shares.items()} == {n: s.fair_share for n, s in plain.items()}

    for level_total, siblings in _levels(total, shares):
        for r in RESOURCES:
            grants = {s.name: _deserved_grant(s, r, level_total[r]) for s in siblings}
            left_after_deserved = max(0, level_total[r] - sum(grants.values()))
            over_quota = sum(s.fair_share[r] - grants[s.name] for s in siblings)
            assert over_quota <= left_after_deserved
            for s in siblings:
                fs = s.fair_share[r]
                assert fs >= grants[s.name]  # deserved is always granted first
                if s.weight[r] == 0:
                    assert fs == grants[s.name]  # no over-quota, no remainder unit
                # Over-quota grants stop at the request; only a remainder unit (< 1 whole unit) can overshoot.
                assert fs < requestable_share(s, r) + UNITS[r]
                if UNITS[r] == 1:
                    assert fs <= requestable_share(s, r)
            if k == 0 and level_total[r] - sum(s.fair_share[r] for s in siblings) > 0:
                # With plain weights nothing is left over while a weighted queue still wants more.
                assert all(s.fair_share[r] >= requestable_share(s, r) for s in siblings if s.weight[r] > 0)


@settings(max_examples=100, deadline=None)
@given(_forest())
def test_property_zero_usage_matches_classic(case: tuple[dict[str, int], list[QueueDemand], float]) -> None:
    total, queues, _ = case
    zeroed = [QueueDemand(q.name, q.parent, q.priority, q.order, q.resources, q.requested) for q in queues]
    for s in divide(total, zeroed, 1.0).values():
        assert s.fair_share == s.fair_share_classic
