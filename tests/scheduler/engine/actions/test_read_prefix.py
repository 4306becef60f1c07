"""Partial jobs that start reading victims where the earlier ones stopped (``Solver._skip_read``).

A gang is solved partial job by partial job, each reading the shared victim order from the top until its
bounds pass. Where the recorded victims lie in what was read before and the bounds fail on all of it, the
solver skips those reads. Each workload runs the default cycle with the skip and with it switched off:
the records must be byte-identical and the work counters equal (the skipped bounds checks are still
counted as filtered), and the skip must have fired.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ingest import events as ev
from scheduler.engine.session import SessionConfig
from tests.support.solver_workloads import CASES, grouped_victims, same_with_and_without
from tests.support.synthetic import reclaim_large_events, synthetic_events


def _both(monkeypatch: pytest.MonkeyPatch, events: list[ev.Event], config: SessionConfig) -> int:
    """Run with and without the skip (the same records, counters and victims offered per node: what the
    skipped reads must still offer, less the recorded jobs); how often the skip fired."""
    return same_with_and_without(
        monkeypatch, events, config, "_skip_read", lambda s, out: out is not None, lambda s, *args: None
    )


@pytest.mark.parametrize("nodes", [4, 10, 24])
def test_kai_reclaim_large_decides_the_same_with_reads_skipped(
    monkeypatch: pytest.MonkeyPatch, nodes: int
) -> None:
    # Every partial job after the first skips (KAI's ReclaimLargeJobs: N/2 partial jobs).
    assert _both(monkeypatch, reclaim_large_events(nodes), SessionConfig()) == nodes // 2 - 1


@pytest.mark.parametrize(
    ("name", "elastic", "across", "fires"),
    [
        # whole groups of four tasks per entry: every partial job after the first skips
        ("gangs", lambda g: False, False, True),
        # pairs on neighbouring nodes: a pair that lost one node is partly put back, so a later partial
        # job's stream pushes the rest back and it reads from the top
        ("across", lambda g: False, True, False),
        # elastic victims give one task and are pushed back (they come first, being above their
        # minimum): nothing is plain enough to skip
        ("elastic", lambda g: True, False, False),
        ("mixed", lambda g: g % 3 == 0, False, False),
    ],
)
def test_grouped_victims_decide_the_same(
    monkeypatch: pytest.MonkeyPatch, name: str, elastic: Callable[[int], bool], across: bool, fires: bool
) -> None:
    fired = _both(monkeypatch, grouped_victims(8, elastic, across), SessionConfig())
    assert (fired > 0) is fires, name


@pytest.mark.parametrize(("spec", "job_budget", "action_budget"), CASES)
def test_contended_mixes_decide_the_same_with_reads_skipped(
    monkeypatch: pytest.MonkeyPatch, spec: Any, job_budget: int | None, action_budget: int | None
) -> None:
    config = SessionConfig(solver_job_budget=job_budget, solver_action_budget=action_budget)
    _both(monkeypatch, synthetic_events(spec), config)
