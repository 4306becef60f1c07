"""Fewer cyclic garbage-collector passes for the long in-process runs (simulate, replay, whatif, eta)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_tuned() -> Iterator[None]:
    """Fewer cyclic-GC passes while the simulation runs; restored afterwards.

    Every cycle builds a fresh session (a ``NodeInfo`` per node, ~1,200 on the default trace), so the
    young generation fills every few hundred microseconds and each collection re-traverses everything the
    run keeps alive: a large share of the run's CPU time. Freezing what exists at the start (the loaded
    trace) and collecting the young generation less often removes most of it; output is unaffected.
    """
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()
