"""The cycle is a pure function of its inputs: same snapshot -> byte-identical cycle record.

Random clusters and workloads (drawn by hypothesis, outside the engine) are run twice in-process, and
once more in subprocesses under different PYTHONHASHSEED values; every serialized CycleRecord must match.
"""

from __future__ import annotations

import os
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.engine.cycle import run_cycle, settle
from scheduler.engine.record.decisions import CycleRecord
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import fold
from tests.support.paths import REPO_ROOT
from tests.support.synthetic import SyntheticSpec, synthetic_events


def _records(spec: SyntheticSpec, cycles: int = 2) -> list[bytes]:
    state = fold(synthetic_events(spec))
    out = []
    for c in range(cycles):
        rec, ssn = run_cycle(state, SessionConfig(), now_ms=1_000_000 + c * 1000)
        out.append(rec.dumps())
        from scheduler.engine.cycle import result_state

        state = settle(result_state(ssn))
    return out


specs = st.builds(
    SyntheticSpec,
    nodes=st.integers(1, 12),
    gpus_per_node=st.sampled_from([1, 2, 4, 8]),
    pending_pods=st.integers(1, 60),
    departments=st.integers(1, 3),
    queues_per_department=st.integers(1, 3),
    seed=st.integers(0, 10_000),
    # Real nodes: capacity held by other schedulers' pods, anti-affinity and spread constraints.
    foreign_fraction=st.sampled_from([0.0, 0.0, 0.25, 0.5]),
    constrained_fraction=st.sampled_from([0.0, 0.3, 0.7]),
    zones=st.integers(1, 4),
    # Topology-constrained gangs (required / preferred rack or block).
    topology_fraction=st.sampled_from([0.0, 0.0, 0.5, 1.0]),
    topology_shape=st.sampled_from([(1, 2, 2), (2, 2, 2)]),
    # Hierarchical PodGroups: leader + worker PodSets, minSubGroup, a required rack on the workers.
    subgroup_fraction=st.sampled_from([0.0, 0.0, 0.5, 1.0]),
)


@settings(max_examples=25, deadline=None)
@given(specs)
def test_same_inputs_same_record(spec: SyntheticSpec) -> None:
    first = _records(spec)
    second = _records(spec)
    assert first == second
    # The record parses back into the same bytes (the audit log round-trips exactly).
    assert [CycleRecord.loads(r).dumps() for r in first] == first


_CHILD = """
import sys
from tests.scheduler.engine.test_determinism import _records
from tests.support.synthetic import SyntheticSpec
for seed in (1, 2, 3):
    for r in _records(SyntheticSpec(nodes=6, gpus_per_node=4, pending_pods=40, departments=2,
                                    queues_per_department=2, seed=seed, topology_fraction=0.5 * (seed - 1),
                                    subgroup_fraction=0.5 * (seed - 1))):
        sys.stdout.buffer.write(r + b"\\n")
"""


def test_hash_seed_does_not_change_records() -> None:
    outs = []
    for hash_seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        outs.append(
            subprocess.run(
                [sys.executable, "-c", _CHILD], cwd=REPO_ROOT, env=env, capture_output=True, check=True
            ).stdout
        )
    assert outs[0] and outs[0] == outs[1] == outs[2]
