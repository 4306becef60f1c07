"""Moves made as one batch (``Statement.evict_all``, ``Statement.rollback``) leave a session exactly as the
same moves made one at a time: the free index and the claimed GPUs are brought up to date once per node at
the end of a batch instead of after every move."""

from __future__ import annotations

import random
from typing import Any

import pytest

from scheduler.engine.cycle import ACTIONS, open_session
from scheduler.engine.session import ACTIVE_ALLOCATED, Session, Statement
from scheduler.engine.state import fold
from tests.support.session_fingerprint import fingerprint
from tests.support.synthetic import SyntheticSpec, synthetic_events

KEYS = ("nodes", "tasks", "queues", "free_index", "unclaimed", "pod_index")


def _open(seed: int) -> Session:
    spec = SyntheticSpec(
        nodes=12, gpus_per_node=8, pending_pods=150, departments=2, queues_per_department=2, seed=seed
    )
    ssn = open_session(fold(synthetic_events(spec)), now_ms=10**9)
    ACTIONS["allocate"](ssn)  # pods on nodes to move
    ssn.unclaimed_gpu_milli()  # kept current from here on
    ssn.pod_index()
    return ssn


def _seen(ssn: Session) -> dict[str, Any]:
    f = fingerprint(ssn)
    return {**{k: f[k] for k in KEYS}, "version": ssn.version}


def _one_by_one(stmt: Statement, cp: int) -> None:
    """Statement.rollback as it was before batches: each move on its own."""
    while len(stmt.ops) > cp:
        op = stmt.ops.pop()
        stmt.ssn._set(op.task, op.prev_status, op.prev_node, op.prev_devices, op.prev_portion)
        if op.kind == "evict":
            op.task.virtual = False


def _moves(ssn: Session, stmt: Statement, rng: random.Random, batched: bool) -> None:
    """Evict a random sample of running tasks, then move some of them onto other nodes' free devices."""
    running = [t for t in ssn.tasks if t.status in ACTIVE_ALLOCATED and t.node is not None]
    victims = rng.sample(running, k=min(40, len(running)))
    if batched:
        stmt.evict_all(victims, "test", lambda t: f"evicted {t.uid}", virtual=True)
    else:
        for t in victims:
            stmt.evict(t, "test", f"evicted {t.uid}", virtual=True)
    for t in victims[: len(victims) // 2]:
        if t.shared or not t.request.gpus:
            continue
        for n in ssn.nodes:
            free = [d for d in range(n.gpus) if not n.dev_alloc[d] and not n.dev_pipe[d] and not n.dev_rel[d]]
            if n is not t.node and len(free) >= t.request.gpus:
                stmt.place(t, n, tuple(free[: t.request.gpus]), 0, True, "test")
                break


@pytest.mark.parametrize("seed", range(6))
def test_batched_moves_leave_the_session_as_single_moves_do(seed: int) -> None:
    fresh = _seen(_open(seed))
    a, b = _open(seed), _open(seed)
    sa, sb = a.statement(), b.statement()
    _moves(a, sa, random.Random(seed), batched=True)
    _moves(b, sb, random.Random(seed), batched=False)
    assert sa.ops and _seen(a) == _seen(b)
    cp = len(sa.ops) // 2
    sa.rollback(cp)
    _one_by_one(sb, cp)
    assert _seen(a) == _seen(b)
    sa.rollback(0)
    _one_by_one(sb, 0)
    assert _seen(a) == _seen(b)
    # Back where it began; the pod index as a mapping (a moved pod's entry goes to its end, batch or not).
    back, first = _seen(a), dict(fresh)
    for f in (back, first):
        f.pop("version")
        f["pod_index"] = sorted(f["pod_index"])
    assert back == first
