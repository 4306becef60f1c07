"""Open intervals are cut at UTC midnight with bounded work per record, whatever the clock jumps."""

from __future__ import annotations

import itertools

import pytest

from analytics.audit.history import DAY_MS, Intervals
from tests.support.cycle_records import pending, queue, record


def _cuts(t0: int, t1: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]], int, int]:
    """Feed one pending job and one queue at ``t0`` and the same again at ``t1``: the closed rows'
    (start_ms, end_ms) of each, and where the open intervals now start."""
    iv = Intervals()
    for t in (t0, t1):
        assert iv.feed(record([pending(["p"])], [queue("q")], t=t))
    _, _, closed_pending, closed_queues = iv.drain()
    spans = [[(r["start_ms"], r["end_ms"]) for r in rows] for rows in (closed_pending, closed_queues)]
    return spans[0], spans[1], iv.pending["p"].start_ms, iv.queues["q"].start_ms


@pytest.mark.parametrize("days", [1, 2, 3, 3653, 47_000])
def test_a_clock_jump_cuts_each_open_interval_at_most_twice(days: int) -> None:
    t0 = 5 * DAY_MS + 3_600_000  # day 5, 01:00
    t1 = (5 + days) * DAY_MS + 7_200_000  # `days` midnights later, 02:00
    pend, queues, pend_open, queue_open = _cuts(t0, t1)
    first, last = 6 * DAY_MS, (5 + days) * DAY_MS
    # The day of the last record and the day of the new one stand alone; whole days without any record
    # between them are one row (so a jump to 2100 costs two rows per open interval, not 47,000).
    want = [(t0, first)] if first == last else [(t0, first), (first, last)]
    assert pend == queues == want
    assert pend_open == queue_open == last
    # Contiguous: every millisecond from t0 on is covered once.
    assert all(a[1] == b[0] for a, b in itertools.pairwise(want))


def test_no_midnight_no_cut() -> None:
    pend, queues, pend_open, _ = _cuts(1000, DAY_MS - 1)
    assert pend == queues == [] and pend_open == 1000
