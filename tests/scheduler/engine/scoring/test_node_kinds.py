"""Scoring one node of each kind gives the choice of scoring every node.

Under the fragmentation rules, ``ordered_fits(best_only=True)`` fits and scores nodes of one kind
(``fragmentation.node_key``) once; the first fit (node and devices) and the histogram of reasons must be
those of the full scan, on clusters where many nodes are alike and some are not.
"""

from __future__ import annotations

import pytest

from scheduler.engine import placement
from scheduler.engine.cycle import open_session
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import fold
from tests.support.synthetic import SyntheticSpec, synthetic_events


@pytest.mark.parametrize("rule", ["fgd", "frag-aware", "bestfit"])
@pytest.mark.parametrize("seed", [1, 2])
def test_best_of_kinds_is_best_of_all(rule: str, seed: int) -> None:
    spec = SyntheticSpec(nodes=40, pending_pods=300, seed=seed, foreign_fraction=0.2)
    ssn = open_session(fold(synthetic_events(spec)), config=SessionConfig(node_scoring=rule), now_ms=10**9)
    checked = 0
    for task in ssn.tasks:
        if task.node is not None or task.constrained:
            continue
        for allow_idle in (True, False):
            full, why_full = placement.ordered_fits(ssn, task, ssn.nodes, allow_idle)
            best, why_best = placement.ordered_fits(ssn, task, ssn.nodes, allow_idle, best_only=True)
            assert bool(full) == bool(best)
            assert why_full == why_best
            if full:
                assert (best[0].node.name, best[0].devices, best[0].idle) == (
                    full[0].node.name,
                    full[0].devices,
                    full[0].idle,
                )
                assert len(best) <= len(full)
            checked += 1
    assert checked > 100


def test_kinds_collapse_alike_nodes() -> None:
    spec = SyntheticSpec(nodes=64, pending_pods=50, seed=3)
    ssn = open_session(fold(synthetic_events(spec)), config=SessionConfig(node_scoring="fgd"), now_ms=10**9)
    task = next(t for t in ssn.tasks if t.node is None and not t.constrained)
    full, _ = placement.ordered_fits(ssn, task, ssn.nodes)
    best, _ = placement.ordered_fits(ssn, task, ssn.nodes, best_only=True)
    assert len(best) < len(full) // 2  # most nodes of a fresh synthetic cluster are of a few kinds
