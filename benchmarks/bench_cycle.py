"""Cycle benchmark on a synthetic cluster: fold rate, fair-share time, each action, the whole cycle.

Default size (the issue's target workload): 1,000 nodes x 8 GPUs, 10,000 pending pods (whole-GPU,
multi-GPU gangs, fractional), 100 leaf queues under 10 departments. ``--filters`` runs it twice, plain and
with real-node features (20 % of capacity held by pods of other schedulers, 30 % of jobs with hostname
anti-affinity or zone spread), and prints what the filters cost per cycle. ``--topology F`` runs it
plain and with a Topology of 4 zones x 8 blocks x 8 racks and F of the multi-pod gangs constrained to a
rack or block (required or preferred), and prints what topology costs per cycle. Every figure is one line
``bench: NAME key=value ... seconds=S``.

    python benchmarks/bench_cycle.py [--nodes N] [--pods P] [--foreign F] [--constrained C] [--filters]
                                     [--topology F] [--placement binpack|spread] [--actions A,B]
                                     [--scoring kai|bestfit|fgd|frag-aware]
                                     [--solver-job-budget N|none] [--solver-action-budget N|none]
                                     [--dump-record FILE]

``--solver-job-budget`` / ``--solver-action-budget`` set the reclaim / preempt search budget (engine config
fields of the same names, docs/service.md; ``none`` = unbounded, the search before issue 12's budget).
``--scoring`` picks the node-scoring rule (``node_scoring``; ``fgd`` / ``frag-aware`` score against the
workload learnt from the synthetic log, docs/placement-benchmark.md). ``--dump-record FILE`` writes the cycle's record (plain or custom run) to FILE, so that two builds' decisions
can be compared byte for byte (``benchmarks/compare_records.sh``).
"""

from __future__ import annotations

import argparse
import time

from scheduler.engine import scoring
from scheduler.engine.cycle import ACTIONS, DEFAULT_ORDER, open_session
from scheduler.engine.record.decisions import make_record
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import fold
from tests.support.synthetic import SyntheticSpec, synthetic_events


def run(
    spec: SyntheticSpec,
    label: str,
    actions: tuple[str, ...] = DEFAULT_ORDER,
    config: SessionConfig | None = None,
    dump: str | None = None,
) -> float:
    """One cycle on `spec`'s workload; prints its figures and returns the full cycle's seconds.

    `config` carries the node-level placement (binpack | spread) and the search budget. Each action's line
    also gives its CPU time (``cpu_seconds``, this process only), steadier than wall time on a busy machine.
    `dump` names a file the cycle's record is written to (``CycleRecord.dumps``), to compare two builds.
    """
    config = config or SessionConfig()
    events = synthetic_events(spec)
    size = (
        f"workload={label} nodes={spec.nodes} gpus_per_node={spec.gpus_per_node} pending={spec.pending_pods} "
        f"foreign={spec.foreign_fraction:g} constrained={spec.constrained_fraction:g} "
        f"topology={spec.topology_fraction:g} placement={config.gpu_placement} actions={'+'.join(actions)}"
    )
    if config.node_scoring != "kai":  # the default keeps its lines as they were
        size += f" scoring={config.node_scoring}"
    size += f" solver_job_budget={config.solver_job_budget} solver_action_budget={config.solver_action_budget}"
    t0 = time.perf_counter()
    state = fold(events)
    t1 = time.perf_counter()
    ssn = open_session(state, config=config, now_ms=10**9)
    t2 = time.perf_counter()
    print(f"bench: fold {size} events={len(events)} rate={len(events) / (t1 - t0):.0f} seconds={t1 - t0:.3f}")
    print(f"bench: session {size} seconds={t2 - t1:.3f}")
    for name in actions:
        a0, c0 = time.perf_counter(), time.process_time()
        ACTIONS[name](ssn)
        cpu = time.process_time() - c0
        work = "".join(
            f"{k.split('.', 1)[1]}={v} " for k, v in sorted(ssn.work.items()) if k.startswith(f"{name}.")
        )
        print(f"bench: {name} {size} {work}cpu_seconds={cpu:.3f} seconds={time.perf_counter() - a0:.3f}")
    r0 = time.perf_counter()
    rec = make_record(ssn, state.events_offset)
    t3 = time.perf_counter()
    binds = sum(1 for d in rec.decisions if d.kind == "Bind")
    if dump is not None:
        with open(dump, "wb") as f:
            f.write(rec.dumps())
    print(f"bench: record {size} decisions={len(rec.decisions)} binds={binds} seconds={t3 - r0:.3f}")
    print(f"bench: cycle {size} binds={binds} seconds={t3 - t1:.3f}")
    return t3 - t1


def _budget(text: str) -> int | None:
    """A search budget argument: a whole number, or ``none`` for no bound."""
    if text.lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or 'none', not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a budget is >= 0, not {value}")
    return value


def main() -> None:
    """Parse the size, run the cycle(s), print ``bench:`` lines."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--foreign", type=float, default=0.0, help="share of capacity held by foreign pods")
    ap.add_argument("--constrained", type=float, default=0.0, help="share of jobs with anti-affinity/spread")
    ap.add_argument("--filters", action="store_true", help="plain vs 20%% foreign + 30%% constrained")
    ap.add_argument(
        "--topology", type=float, default=0.0, help="plain vs this share of gangs topology-constrained"
    )
    ap.add_argument(
        "--actions",
        default=",".join(DEFAULT_ORDER),
        help="actions to run, in order",
    )
    ap.add_argument(
        "--placement", choices=("binpack", "spread"), default="binpack", help="node placement, GPU and CPU"
    )
    ap.add_argument("--solver-job-budget", type=_budget, default=SessionConfig().solver_job_budget)
    ap.add_argument("--solver-action-budget", type=_budget, default=SessionConfig().solver_action_budget)
    ap.add_argument("--dump-record", metavar="FILE", help="write the (plain) cycle's record to FILE")
    ap.add_argument("--scoring", choices=scoring.names(), default="kai", help="node-scoring rule")
    a = ap.parse_args()
    cfg = SessionConfig(
        node_scoring=a.scoring,
        gpu_placement=a.placement,
        cpu_placement=a.placement,
        solver_job_budget=a.solver_job_budget,
        solver_action_budget=a.solver_action_budget,
    )
    actions = tuple(x for x in a.actions.split(",") if x)
    base = SyntheticSpec(nodes=a.nodes, gpus_per_node=a.gpus, pending_pods=a.pods)
    if a.topology:
        plain = run(base, "plain", actions, cfg)
        topo = run(
            SyntheticSpec(
                nodes=a.nodes, gpus_per_node=a.gpus, pending_pods=a.pods, topology_fraction=a.topology
            ),
            "topology",
            actions,
            cfg,
        )
        print(
            f"bench: topology_cost nodes={a.nodes} pending={a.pods} topology={a.topology:g} "
            f"actions={'+'.join(actions)} plain_seconds={plain:.3f} topology_seconds={topo:.3f} "
            f"seconds={topo - plain:.3f}"
        )
        return
    if not a.filters:
        run(
            SyntheticSpec(
                nodes=a.nodes,
                gpus_per_node=a.gpus,
                pending_pods=a.pods,
                foreign_fraction=a.foreign,
                constrained_fraction=a.constrained,
            ),
            "custom" if a.foreign or a.constrained else "plain",
            actions,
            cfg,
            a.dump_record,
        )
        return
    plain = run(base, "plain", actions, cfg)
    real = run(
        SyntheticSpec(
            nodes=a.nodes,
            gpus_per_node=a.gpus,
            pending_pods=a.pods,
            foreign_fraction=0.2,
            constrained_fraction=0.3,
        ),
        "filters",
        actions,
        cfg,
    )
    print(
        f"bench: filters_cost nodes={a.nodes} pending={a.pods} foreign=0.2 constrained=0.3 "
        f"actions={'+'.join(actions)} plain_seconds={plain:.3f} filters_seconds={real:.3f} seconds={real - plain:.3f}"
    )


if __name__ == "__main__":
    main()
