"""Contended workloads on which the victim solver's proofs and shortcuts fire, shared by the solver tests."""

from __future__ import annotations

from tests.support.synthetic import SyntheticSpec

SMALL = dict(nodes=12, gpus_per_node=8, pending_pods=120, departments=3, queues_per_department=3)

# (workload, solver_job_budget, solver_action_budget): contended synthetic mixes where reclaim searches
# (each proves some of its simulations hopeless), with budgets that cut searches and budgets that do not.
CASES = [
    (SyntheticSpec(nodes=40, pending_pods=400, seed=0), 64, 256),
    (SyntheticSpec(nodes=40, pending_pods=400, seed=1), 64, 256),
    (SyntheticSpec(nodes=40, pending_pods=400, seed=2), 8, 32),
    (SyntheticSpec(**SMALL, seed=0), None, None),  # type: ignore[arg-type]
    (SyntheticSpec(**SMALL, seed=2), None, None),  # type: ignore[arg-type]
    (SyntheticSpec(**SMALL, seed=2), 4, 16),  # type: ignore[arg-type]
    # victims the validator may not lose stranded or lost during simulations (the shortcuts fire)
    (SyntheticSpec(nodes=100, pending_pods=1000, seed=0), 64, 256),
    (SyntheticSpec(nodes=40, pending_pods=400, departments=4, queues_per_department=4, seed=2), 64, 256),
]
