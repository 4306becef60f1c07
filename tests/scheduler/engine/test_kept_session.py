"""The session kept between cycles (scheduler/engine/kept.py) equals the one built afresh, every cycle.

Random clusters (the synthetic mix, with foreign pods and constraints) go through many cycles; between two
cycles random events arrive: the last cycle's placements are bound and its evictions released, pods
finish, are deleted or submitted, pod groups are deleted, nodes change or go, queues change or go,
foreign pods come and go, time moves. Each cycle opens a session both ways and compares everything a
session holds, then runs the actions on each and compares the records byte for byte.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest import events as ev
from ingest.events import dump_event
from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from scheduler.engine.cycle import open_session, run_actions, run_cycle
from scheduler.engine.kept import Changes, KeptSession, run_kept_cycle
from scheduler.engine.record.decisions import make_record
from scheduler.engine.session import Session, SessionConfig
from scheduler.engine.state import SUBGROUP_LABEL, Node, PodStatus, StateBuilder
from scheduler.metrics import SchedulerMetrics
from scheduler.service import Service
from tests.support.replay_cli import replay_verify
from tests.support.session_fingerprint import fingerprint
from tests.support.synthetic import SyntheticSpec, synthetic_events


def _split(uid: str) -> tuple[str, str]:
    ns, name = uid.split("/", 1)
    return ns, name


def _node_again(n: Node, t: int, *, unschedulable: bool) -> ev.NodeUpserted:
    """Node *n* upserted again at *t*, as folded, but for *unschedulable*."""
    return ev.NodeUpserted(
        at_ms=t,
        name=n.name,
        cpu_millicores=n.cpu,
        memory_bytes=n.memory,
        gpus=n.gpus,
        gpu_memory_mib=n.gpu_memory_mib,
        gpu_model=n.gpu_model,
        labels=dict(n.labels),
        unschedulable=unschedulable,
    )


def _built(spec: SyntheticSpec) -> StateBuilder:
    """A builder that folded the synthetic cluster of *spec*."""
    b = StateBuilder()
    for e in synthetic_events(spec):
        b.apply(e)
    return b


def _arrive(b: StateBuilder, changes: Changes, events: Iterable[ev.Event]) -> None:
    """Fold *events* into *b*, noting each in *changes* (what the service's folder does)."""
    for e in events:
        changes.note(e)
        b.apply(e)


def _same_record_both_ways(
    kept: KeptSession, b: StateBuilder, changes: Changes, t: int
) -> tuple[Changes, Session]:
    """One cycle at *t*: the kept session's record (:func:`run_kept_cycle`) equals :func:`run_cycle`'s,
    byte for byte. Returns the changes to note for the next cycle and run_cycle's session."""
    state = b.snapshot()
    expected, ssn = run_cycle(state, SessionConfig(), t)
    got, _ = run_kept_cycle(kept, state, SessionConfig(), t, builder=b, changes=changes)
    assert got.dumps() == expected.dumps(), f"cycle at {t}: {kept.last_reason}"
    return Changes(b.offset), ssn


JOB_EXISTS = ev.LabelSelector(match_expressions=[ev.LabelSelectorRequirement(key="job", operator="Exists")])
HOST = "kubernetes.io/hostname"


def churn(rng: random.Random, b: StateBuilder, ssn: Session, t: int, k: int) -> list[ev.Event]:
    """Random events between two cycles; `ssn` is the last cycle's session after its actions."""
    out: list[ev.Event] = []
    # The cluster carries out (some of) the last cycle's decisions; some binds name no devices (a pod
    # bound without the binder's annotation), which the session then chooses for them.
    for task in ssn.tasks:
        ns, name = _split(task.uid)
        if task.status is PodStatus.ALLOCATED and task.node is not None and rng.random() < 0.8:
            devices = list(task.devices) if rng.random() < 0.8 else []
            out.append(
                ev.PodBound(at_ms=t, name=name, namespace=ns, node=task.node.name, gpu_devices=devices)
            )
        elif task.status is PodStatus.RELEASING and task.orig_status is not PodStatus.RELEASING:
            out.append(ev.PodReleasing(at_ms=t, name=name, namespace=ns, reason="evicted"))
    pods = list(b.pods.values())
    for p in rng.sample(pods, min(len(pods), rng.randint(0, 4))):
        ns, name = _split(p.uid)
        roll = rng.random()
        if roll < 0.4:
            out.append(
                ev.PodFinished(at_ms=t, name=name, namespace=ns, phase=rng.choice(["Succeeded", "Failed"]))
            )
        elif roll < 0.7:
            out.append(ev.PodDeleted(at_ms=t, name=name, namespace=ns))
        elif p.node is not None:
            out.append(ev.PodReleasing(at_ms=t, name=name, namespace=ns, reason="evicted"))
    jobs = list(b.jobs.values())
    if jobs and rng.random() < 0.3:
        j = rng.choice(jobs)
        ns, name = _split(j.uid)
        out.append(ev.PodGroupDeleted(at_ms=t, name=name, namespace=ns))
    if jobs and rng.random() < 0.3:  # a pod group changes (priority), its pods stay
        j = rng.choice(jobs)
        ns, name = _split(j.uid)
        out.append(
            ev.PodGroupUpserted(
                at_ms=t,
                name=name,
                namespace=ns,
                queue=j.queue,
                min_member=j.min_available,
                priority=rng.choice([50, 100, 125]),
                created_at_ms=j.created_ms,
            )
        )
    leaves = [q.name for q in b.queues.values() if q.parent is not None] or ["team-00-00"]
    for n in range(rng.randint(0, 3)):  # new pod groups
        name = f"new-{k}-{n}"
        size = rng.choice([1, 1, 2, 4])
        q = rng.choice(leaves)
        # A 4-pod group is a leader and three elastic workers (KAI subgroups, each its own gang).
        subgroups = (
            [ev.SubGroup(name="leader", min_member=1), ev.SubGroup(name="workers", min_member=1)]
            if size == 4
            else []
        )
        out.append(
            ev.PodGroupUpserted(
                at_ms=t,
                name=name,
                namespace="churn",
                queue=q,
                min_member=size,
                created_at_ms=t,
                subgroups=subgroups,
            )
        )
        req = rng.choice(
            [
                ev.PodRequests(cpu_millicores=1000, memory_bytes=2**30, gpus=1),
                ev.PodRequests(cpu_millicores=500, memory_bytes=2**30),
                ev.PodRequests(cpu_millicores=500, memory_bytes=2**30, gpu_fraction_milli=500),
                ev.PodRequests(cpu_millicores=500, memory_bytes=2**30, gpu_memory_mib=20_000),
                ev.PodRequests(cpu_millicores=2000, memory_bytes=2**30, gpus=2),
            ]
        )
        for i in range(size):
            out.append(
                ev.PodSubmitted(
                    v=2,
                    at_ms=t,
                    name=f"{name}-{i}",
                    namespace="churn",
                    pod_group=name,
                    queue=q,
                    requests=req,
                    created_at_ms=t,
                    labels={"app": name}
                    | ({SUBGROUP_LABEL: "leader" if i == 0 else "workers"} if subgroups else {}),
                    host_ports=[ev.HostPort(port=8080)] if rng.random() < 0.1 else [],
                    scheduling_gates=["wait"] if rng.random() < 0.1 else [],
                )
            )
    for p in b.pods.values():
        if p.gated and rng.random() < 0.5:
            ns, name = _split(p.uid)
            out.append(ev.PodUngated(at_ms=t, name=name, namespace=ns))
    nodes = list(b.nodes.values())
    roll = rng.random()
    if nodes and roll < 0.1:  # cordoned or uncordoned
        n = rng.choice(nodes)
        out.append(_node_again(n, t, unschedulable=not n.unschedulable))
    elif nodes and roll < 0.15:
        out.append(ev.NodeRemoved(at_ms=t, name=rng.choice(nodes).name))
    elif nodes and roll < 0.4:  # a heartbeat: the same node again
        n = rng.choice(nodes)
        out.append(_node_again(n, t, unschedulable=n.unschedulable))
    queues = list(b.queues.values())
    roll = rng.random()
    if queues and roll < 0.1:
        q = rng.choice(queues)
        out.append(
            ev.QueueUpserted(
                at_ms=t,
                name=q.name,
                parent=q.parent,
                priority=q.priority,
                resources=ev.QueueResources(
                    gpu=ev.QueueResource(quota=rng.choice([0, 1000, 4000]), over_quota_weight=1)
                ),
            )
        )
    elif queues and roll < 0.13:
        out.append(ev.QueueDeleted(at_ms=t, name=rng.choice(leaves)))
    if nodes and rng.random() < 0.3:
        n = rng.choice(nodes)
        out.append(
            ev.ForeignPodUpserted(
                at_ms=t,
                name=f"ds-{rng.randint(0, 3)}",
                namespace="kube-system",
                node=n.name,
                requests=ev.PodRequests(cpu_millicores=100, memory_bytes=2**20, gpus=rng.choice([0, 0, 1])),
                labels={"app": "ds"},
                # Their own terms (existing pods' anti-affinity filters; their preferred terms and required
                # affinity score the pods they select): none, required or preferred anti-affinity, affinity.
                **rng.choice(
                    [
                        {},
                        {
                            "pod_anti_affinity": [
                                ev.PodAffinityTerm(label_selector=JOB_EXISTS, topology_key=HOST)
                            ]
                        },
                        {
                            "pod_anti_affinity": [
                                ev.PodAffinityTerm(label_selector=JOB_EXISTS, topology_key="zone", weight=50)
                            ]
                        },
                        {
                            "pod_affinity": [
                                ev.PodAffinityTerm(label_selector=JOB_EXISTS, topology_key="zone")
                            ]
                        },
                    ]
                ),
            )
        )
    if b.foreign and rng.random() < 0.2:
        ns, name = _split(rng.choice(list(b.foreign)))
        out.append(ev.PodFinished(at_ms=t, name=name, namespace=ns, phase="Succeeded"))
    out.append(ev.ClockTick(at_ms=t))
    return out


specs = st.builds(
    SyntheticSpec,
    nodes=st.integers(1, 8),
    gpus_per_node=st.sampled_from([1, 2, 4, 8]),
    pending_pods=st.integers(1, 40),
    running_fraction=st.sampled_from([0.0, 0.5, 0.8]),
    departments=st.integers(1, 3),
    queues_per_department=st.integers(1, 3),
    seed=st.integers(0, 10_000),
    foreign_fraction=st.sampled_from([0.0, 0.0, 0.25, 0.5]),
    constrained_fraction=st.sampled_from([0.0, 0.3, 0.7]),
    zones=st.integers(1, 3),
    topology_fraction=st.sampled_from([0.0, 0.0, 0.5]),
    topology_shape=st.sampled_from([(1, 2, 2), (2, 2, 2)]),
)


@settings(max_examples=30, deadline=None)
@given(specs, st.integers(0, 2**32), st.integers(3, 8))
def test_kept_session_equals_a_fresh_one_every_cycle(spec: SyntheticSpec, seed: int, cycles: int) -> None:
    _kept_equals_fresh(spec, seed, cycles, SessionConfig())


@settings(max_examples=30, deadline=None)
@given(specs, st.integers(0, 2**32), st.integers(3, 8), st.sampled_from(["frag-aware", "fgd"]))
def test_kept_session_equals_a_fresh_one_under_fragmentation_scoring(
    spec: SyntheticSpec, seed: int, cycles: int, scoring: str
) -> None:
    """The fragmentation rules keep per-node views by the node's stamp across a kept session's cycles; a
    node rebuilt whole (a foreign GPU pod changed) must not meet a view of its earlier self."""
    _kept_equals_fresh(spec, seed, cycles, SessionConfig(node_scoring=scoring))


def _kept_equals_fresh(spec: SyntheticSpec, seed: int, cycles: int, config: SessionConfig) -> None:
    rng = random.Random(seed)
    events = synthetic_events(spec)
    b = StateBuilder()
    cut = rng.randint(len(events) // 2, len(events))  # the first cycle sees part of the cluster
    for e in events[:cut]:
        b.apply(e)
    pending = events[cut:]
    kept = KeptSession()
    changes = Changes(b.offset)
    t = 1_000_000
    for k in range(cycles):
        state = b.snapshot()
        usage = {"team-00-00": {"gpu": 0.5}} if k % 3 == 2 else None
        fresh = open_session(state, config, t, usage)
        record, ssn = run_cycle(state, config, t, usage, "u" if usage else None)
        ours = kept.open(state, config, t, usage, builder=b, changes=changes)
        changes = Changes(b.offset)
        assert fingerprint(ours) == fingerprint(fresh), f"cycle {k}: {kept.last_reason}"
        run_actions(ours)
        mine = make_record(
            ours, state.events_offset, "u" if usage else None, usage_available=usage is not None
        )
        kept.close()
        assert mine.dumps() == record.dumps(), f"cycle {k}"
        t += 1000
        _arrive(b, changes, pending + churn(rng, b, ssn, t, k))
        pending = []
    assert kept.patched + kept.fresh == cycles


def test_run_kept_cycle_gives_run_cycles_records() -> None:
    """The service's entry point: records equal run_cycle's, and most sessions are patched, not rebuilt."""
    rng = random.Random(7)
    b = _built(
        SyntheticSpec(
            nodes=10, gpus_per_node=8, pending_pods=80, departments=2, queues_per_department=2, seed=3
        )
    )
    kept = KeptSession()
    changes = Changes(b.offset)
    t = 1_000_000
    for k in range(12):
        changes, ssn = _same_record_both_ways(kept, b, changes, t)
        t += 1000
        wide = (ev.NodeUpserted, ev.NodeRemoved, ev.QueueUpserted, ev.QueueDeleted)
        _arrive(
            b,
            changes,
            [e for e in churn(random.Random(rng.random()), b, ssn, t, k) if not isinstance(e, wide)],
        )
    assert kept.fresh == 1 and kept.patched == 11, kept.last_reason


@pytest.mark.parametrize("with_metrics", [False, True], ids=["plain", "metrics"])
def test_service_with_kept_sessions_replays_with_zero_mismatches(tmp_path: Path, with_metrics: bool) -> None:
    """The real service on the embedded file log, 30 cycles with churn between them (its placements bound,
    its evictions released, pods coming and going, nodes and queues changing now and then): most sessions
    are patched, and ``hourglass replay LOG --verify`` (fresh sessions) reproduces every record. With
    metrics (``hourglass run --metrics-port``) the cycle is timed and opened the same way."""
    rng = random.Random(11)
    events = synthetic_events(
        SyntheticSpec(
            nodes=8,
            gpus_per_node=4,
            pending_pods=120,
            running_fraction=0.5,
            departments=2,
            queues_per_department=2,
            seed=5,
            foreign_fraction=0.25,
            constrained_fraction=0.3,
            zones=2,
        )
    )
    directory = tmp_path / "log"
    with FileLog(directory) as log:
        log.append_many(DEFAULT_TOPICS.events, [(e.uid.encode(), dump_event(e)) for e in events])
        metrics = SchedulerMetrics.create() if with_metrics else None
        svc = Service(log, DEFAULT_TOPICS, SessionConfig(), batch_size=100_000, metrics=metrics)
        assert svc.step()
        t = max(e.at_ms for e in events)
        for k in range(29):
            t += 1000
            last = svc.kept.session
            assert last is not None
            churned = churn(rng, svc.folder.builder, last, t, k)
            log.append_many(DEFAULT_TOPICS.events, [(e.uid.encode(), dump_event(e)) for e in churned])
            assert svc.step()
        stats = svc.stats
        assert stats.cycles_appended == 30 and stats.dead_letters == 0
        assert svc.kept.fresh + svc.kept.patched == 30
        assert svc.kept.patched >= 15, svc.kept.last_reason
        if metrics is not None:  # KAI's proportion plugin latency is observed for patched sessions too
            assert "divide" in svc.kept.timings or svc.kept.last_reason
            value = metrics.registry.get_sample_value(
                "kai_plugin_scheduling_latency_milliseconds",
                {"plugin": "proportion", "OnSession": "OnSessionOpen"},
            )
            assert value is not None and value >= 0
    assert replay_verify(directory) == "replay: 30 cycles, 0 mismatches"


def test_changes_name_pods_and_groups_and_give_up_on_wide_events() -> None:
    """What the folder notes: a pod event names its pod, a submission its group too, a group event its
    group; a removed node (which fails all its pods) or an unknown kind asks for a fresh session."""
    c = Changes(41)
    c.note(ev.PodSubmitted(at_ms=1, name="p-0", namespace="ns", pod_group="g", created_at_ms=1))
    c.note(ev.PodBound(at_ms=2, name="p-1", namespace="ns", node="n", gpu_devices=[]))
    c.note(ev.PodGroupDeleted(at_ms=3, name="h", namespace="ns"))
    c.note(ev.NodeUpserted(at_ms=4, name="n", cpu_millicores=1, memory_bytes=1))
    c.note(ev.ClockTick(at_ms=5))
    assert (c.since, c.pods, c.jobs, c.everything) == (41, {"ns/p-0", "ns/p-1"}, {"ns/g", "ns/h"}, False)
    c.note(ev.NodeRemoved(at_ms=6, name="n"))
    assert c.everything
    unknown = Changes(0)
    unknown.note(object())
    assert unknown.everything


def test_a_removed_node_or_a_changed_queue_opens_afresh_and_the_next_cycle_patches_again() -> None:
    b = _built(
        SyntheticSpec(
            nodes=4,
            gpus_per_node=4,
            pending_pods=20,
            running_fraction=0.5,
            departments=1,
            queues_per_department=2,
            seed=1,
        )
    )
    kept = KeptSession()
    reasons = []
    t = b.latest_ms  # a tick never goes back before the fold's latest time
    follow: list[list[ev.Event]] = [
        [ev.NodeRemoved(at_ms=t + 1, name="node-00003")],
        [ev.ClockTick(at_ms=t + 2)],
        [
            ev.QueueUpserted(
                at_ms=t + 3, name="dept-00", resources=ev.QueueResources(gpu=ev.QueueResource(quota=0))
            )
        ],
        [ev.ClockTick(at_ms=t + 4)],
    ]
    changes = Changes(b.offset)
    for k, batch in enumerate([[], *follow]):
        _arrive(b, changes, batch)
        changes, _ = _same_record_both_ways(kept, b, changes, 1000 + k)
        reasons.append(kept.last_reason.split(" ")[0] if kept.last_reason else "patched")
    assert reasons == ["no", "an", "patched", "queues", "patched"]


def test_a_node_rebuilt_whole_never_takes_back_an_earlier_stamp() -> None:
    """Per-node views (fragmentation's node keys and kinds, placement's kind column) are kept by the node's
    ``stamp`` for the life of a kept session. A node rebuilt whole because a foreign GPU pod on it changed
    is a new state, so its stamp must be one it never had: restarting from 0 could meet a view of an earlier
    state at the same count."""
    b = _built(SyntheticSpec(nodes=4, gpus_per_node=8, pending_pods=8, foreign_fraction=0.5, seed=1))
    config = SessionConfig(node_scoring="frag-aware")
    kept = KeptSession()
    changes = Changes(b.offset)
    ssn = kept.open(b.snapshot(), config, 1_000_000, None, builder=b, changes=changes)
    node = ssn.node_by_name["node-00000"]
    before = node.stamp
    kept.close()
    (other,) = [fp for fp in b.snapshot().foreign_pods if fp.node == node.name]
    changes = Changes(b.offset)
    _arrive(
        b,
        changes,
        [
            ev.ForeignPodUpserted(
                at_ms=1_000_500,
                name=other.name,
                namespace=other.namespace,
                node=node.name,
                requests=ev.PodRequests(cpu_millicores=1000, memory_bytes=2**30, gpus=other.request.gpus + 1),
                labels={"app": "other"},
            )
        ],
    )
    again = kept.open(b.snapshot(), config, 1_001_000, None, builder=b, changes=changes)
    assert kept.patched == 1, kept.last_reason  # patched, with the node rebuilt
    assert again.node_by_name[node.name].stamp > before
    kept.close()
