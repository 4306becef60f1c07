"""Hierarchical PodGroups (issue 15 item 3): the contract, the fold, and properties of allocation.

The behaviour tables are the scenarios in scheduler/conformance/scenarios/hourglass/real-nodes/subgroups/ (written by
tools/real_node_scenarios.py); here each of them is also run without its subgroups to show it fails then,
and synthetic clusters with subgroups check that a PodSet's gang and a subgroup's required rack are never
broken and that the cycle stays deterministic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ingest.events import EventError, PodGroupUpserted, dump_event, parse_event
from ingest.kube import translate as kube
from ingest.kube.translate import InvalidObject
from scheduler.conformance import SCENARIOS_DIR
from scheduler.conformance.runner import run_doc
from scheduler.engine.cycle import open_session, run_actions, run_cycle
from scheduler.engine.session import ACTIVE_ALLOCATED, SessionConfig
from scheduler.engine.state import SubGroup, fold, subgroup_minimum
from tests.support.synthetic import SyntheticSpec, synthetic_events

SCENARIOS = sorted(
    (SCENARIOS_DIR / "hourglass" / "real-nodes" / "subgroups").glob("sg-*.json")
)
BASE = {
    "type": "PodGroupUpserted",
    "at_ms": 5,
    "name": "g",
    "namespace": "ns",
    "queue": "q",
    "created_at_ms": 1,
}


# --------------------------------------------------------------------------- contract


def test_v1_podgroup_bytes_unchanged() -> None:
    """A PodGroup without subgroups writes exactly the v1 bytes it always did."""
    raw = json.dumps(BASE | {"v": 1, "uid": "ns/g"}, sort_keys=True, separators=(",", ":")).encode()
    ev = parse_event(raw)
    assert ev.v == 1
    assert dump_event(ev) == b'{"at_ms":5,"created_at_ms":1,"min_member":1,"name":"g","namespace":"ns",' + (
        b'"preemptible":null,"priority":null,"priority_class":null,"queue":"q","type":"PodGroupUpserted",'
        b'"uid":"ns/g","v":1}'
    )


def test_subgroups_round_trip_as_v2() -> None:
    ev = parse_event(
        BASE
        | {
            "min_sub_group": 1,
            "subgroups": [
                {"name": "workers", "min_sub_group": 1},
                {"name": "w0", "parent": "workers", "min_member": 2},
                {
                    "name": "w1",
                    "parent": "workers",
                    "min_member": 2,
                    "topology": "dc",
                    "required_topology_level": "rack",
                },
            ],
        }
    )
    assert isinstance(ev, PodGroupUpserted) and ev.v == 2
    assert [s.name for s in ev.subgroups] == ["workers", "w0", "w1"]
    assert parse_event(dump_event(ev)) == ev


@pytest.mark.parametrize(
    ("subgroups", "extra", "text"),
    [
        ([{"name": "a"}, {"name": "a"}], {}, "subgroup 'a' is listed twice"),
        ([{"name": "a", "parent": "p"}], {}, "subgroup 'a' names parent 'p', which is not a subgroup"),
        (
            [{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}],
            {},
            "subgroups a -> b -> a form a cycle",
        ),
        ([{"name": "a", "parent": "a"}], {}, "subgroups a -> a form a cycle"),
        ([{"name": "a", "min_member": 1, "min_sub_group": 1}], {}, "mutually exclusive"),
        ([{"name": "a"}, {"name": "b"}], {"min_sub_group": 3}, "has min_sub_group 3 but 2 child subgroup(s)"),
        ([{"name": "a", "min_sub_group": 1}], {}, "subgroup 'a' has min_sub_group 1 but 0 child"),
        ([], {"min_sub_group": 1}, "min_sub_group needs subgroups"),
        (
            [{"name": "a", "required_topology_level": "rack"}],
            {},
            "a required or preferred topology level needs",
        ),
        ([{"name": "a", "min_member": -1}], {}, "greater than or equal to 0"),
    ],
)
def test_bad_subgroup_trees_are_dead_lettered(
    subgroups: list[dict[str, Any]], extra: dict[str, Any], text: str
) -> None:
    """KAI's webhook rules: the event is refused with a schema error naming the problem (the dead-letter
    record's reason), never a crash."""
    with pytest.raises(EventError) as e:
        parse_event(json.dumps(BASE | {"subgroups": subgroups} | extra))
    assert e.value.reason_code == "schema"
    assert text in e.value.message


def test_min_member_on_a_parent_is_ignored() -> None:
    """KAI ignores minMember on a subgroup with children (its Grove grouper writes 0 there)."""
    ev = parse_event(
        BASE | {"subgroups": [{"name": "p", "min_member": 0}, {"name": "c", "parent": "p", "min_member": 2}]}
    )
    (job,) = fold([ev]).jobs
    assert job.min_available == 2


def test_service_dead_letters_a_bad_tree_and_keeps_folding() -> None:
    """The fold's reader (the service's Folder) turns the bad PodGroup into a dead letter; the next event
    still folds."""
    from ingest.log import Record
    from scheduler.service import Folder

    folder = Folder("t")
    bad = json.dumps(BASE | {"subgroups": [{"name": "a"}, {"name": "a"}]}).encode()
    good = json.dumps(BASE | {"name": "h", "subgroups": [{"name": "a", "min_member": 2}]}).encode()
    dead = folder.feed(Record(0, None, bad))
    assert (
        dead is not None and dead.reason_code == "schema" and "subgroup 'a' is listed twice" in dead.message
    )
    assert folder.feed(Record(1, None, good)) is None
    (job,) = folder.snapshot().jobs
    assert (job.name, job.min_available, job.subgroups) == ("h", 2, (SubGroup("a", min_member=2),))


def test_fold_starts_the_stale_clock_when_a_podset_is_short() -> None:
    """3 of 4 pods still run, the job's total minimum, but subgroup a (minimum 2) has 1: the fold's stale-gang
    clock starts (the engine evicts after the grace period, scenario sg-09)."""

    def pod_event(name: str, sub: str) -> dict[str, Any]:
        return {
            "type": "PodSubmitted",
            "at_ms": 1,
            "name": name,
            "namespace": "ns",
            "pod_group": "g",
            "created_at_ms": 1,
            "labels": {"kai.scheduler/subgroup-name": sub},
            "requests": {"cpu_millicores": 100},
        }

    events = [BASE | {"subgroups": [{"name": "a", "min_member": 2}, {"name": "b", "min_member": 1}]}]
    events += [pod_event(n, n[0]) for n in ("a0", "a1", "b0", "b1")]
    events += [
        {"type": "PodBound", "at_ms": 2, "name": n, "namespace": "ns", "node": "n1"}
        for n in ("a0", "a1", "b0", "b1")
    ]
    (job,) = fold([parse_event(e) for e in events]).jobs
    assert job.stale_since_ms is None
    events.append({"type": "PodFinished", "at_ms": 7, "name": "a1", "namespace": "ns", "phase": "Failed"})
    (job,) = fold([parse_event(e) for e in events]).jobs
    assert (job.min_available, job.stale_since_ms) == (3, 7)


# --------------------------------------------------------------------------- kube translation


def _pg(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "g", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"queue": "q"} | spec,
    }


def test_podgroup_subgroups_translate() -> None:
    ev = kube.podgroup_upserted(
        _pg(
            minMember=9,
            minSubGroup=2,
            subGroups=[
                {
                    "name": "prefill",
                    "minMember": 2,
                    "topologyConstraint": {"topology": "dc", "requiredTopologyLevel": "rack"},
                },
                {"name": "decode", "minMember": 4},
            ],
        ),
        0,
    )
    assert ev.min_sub_group == 2
    assert [(s.name, s.min_member, s.topology, s.required_topology_level) for s in ev.subgroups] == [
        ("prefill", 2, "dc", "rack"),
        ("decode", 4, None, None),
    ]
    (job,) = fold([ev]).jobs
    assert job.min_available == 6  # the PodGroup's minMember (9) is not used with subgroups


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ({"subGroups": "x"}, "spec.subGroups='x': must be a list"),
        ({"subGroups": [{"name": "a", "minMember": "2"}]}, "spec.subGroups[0].minMember='2'"),
        ({"subGroups": [{"name": "a"}, {"name": "a"}]}, "subgroup 'a' is listed twice"),
        ({"subGroups": [{"name": "a", "parent": "zz"}]}, "names parent 'zz'"),
        ({"subGroups": [{"name": "a"}], "minSubGroup": -1}, "spec.minSubGroup=-1: must be an integer >= 0"),
    ],
)
def test_invalid_podgroup_subgroups(spec: dict[str, Any], text: str) -> None:
    with pytest.raises(InvalidObject) as e:
        kube.podgroup_upserted(_pg(**spec), 0)
    assert text in e.value.message


def test_subgroup_minimum() -> None:
    a, b = SubGroup("a", min_member=2), SubGroup("b", min_member=3)
    assert subgroup_minimum((a, b)) == 5
    assert subgroup_minimum((a, b), 1) == 2  # minSubGroup 1: the cheapest child
    nested = (
        SubGroup("p", min_sub_group=1),
        SubGroup("x", "p", 4),
        SubGroup("y", "p", 2),
        SubGroup("z", None, 0),
    )
    assert subgroup_minimum(nested) == 3  # p: y (2), z: max(0, 1)


# --------------------------------------------------------------------------- scenarios


def test_there_are_subgroup_scenarios() -> None:
    assert len(SCENARIOS) >= 8


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_each_subgroup_scenario_depends_on_its_subgroups(path: Path) -> None:
    """The scenario passes, and fails once its subgroups are dropped (one gang of the job's min_available)."""
    doc = json.loads(path.read_text())
    assert not run_doc(doc)[0]
    for j in doc["jobs"]:
        j.pop("subgroups", None)
        j.pop("min_sub_group", None)
        for t in j["tasks"]:
            t.pop("subgroup", None)
    assert run_doc(doc)[0]


def test_not_ready_message_names_the_short_subgroup() -> None:
    from scheduler.conformance.runner import NOW_MS, load_state

    path = next(p for p in SCENARIOS if p.stem.startswith("sg-14"))
    state, config = load_state(json.loads(path.read_text()))
    rec, _ = run_cycle(state, config, now_ms=NOW_MS)
    (d,) = [d for d in rec.decisions if d.kind == "Unschedulable"]
    assert d.reason == "NotReady"
    assert d.message.endswith("Waiting for 3 pods, currently 2 exist: subgroup a has 1 of 2"), d.message


# --------------------------------------------------------------------------- properties


@settings(max_examples=15, deadline=None)
@given(
    nodes=st.integers(4, 32),
    pods=st.integers(10, 100),
    seed=st.integers(0, 10_000),
    topology=st.sampled_from([0.0, 0.5]),
)
def test_podset_gangs_and_subgroup_racks_are_never_broken(
    nodes: int, pods: int, seed: int, topology: float
) -> None:
    """After allocate every job with subgroups that got pods has each required PodSet at its minimum, and a
    ``workers`` set that requires a rack has all its placed pods in one rack; a whole cycle (every action)
    gives the same record twice. (Only allocate is checked for racks: when reclaim shrinks an elastic
    victim with subgroups, the solver's re-placement of its pods is not topology-aware yet.)"""
    spec = SyntheticSpec(
        nodes=nodes,
        gpus_per_node=8,
        pending_pods=pods,
        departments=2,
        queues_per_department=2,
        seed=seed,
        topology_fraction=topology,
        topology_shape=(1, 2, 2),
        subgroup_fraction=1.0,
    )
    state = fold(synthetic_events(spec))
    assume(any(j.subgroups for j in state.jobs))  # tiny workloads may have no multi-pod gang
    rec, _ = run_cycle(state, SessionConfig(), now_ms=1_000_000)
    rec2, _ = run_cycle(state, SessionConfig(), now_ms=1_000_000)
    assert rec.dumps() == rec2.dumps()
    ssn = run_actions(open_session(state, SessionConfig(), 1_000_000), ("allocate",))
    for job in ssn.jobs:
        tree = job.subgroup_tree()
        if tree is None or not any(t.status in ACTIVE_ALLOCATED for t in job.tasks):
            continue
        assert tree.root.satisfied(), job.name
        workers = next((g for g in tree.root.children if g.name == "workers"), None)
        if workers is not None and workers.required_level is not None:
            racks = {
                t.node.spec.labels[workers.required_level]
                for t in workers.all_tasks()
                if t.node is not None and t.status in ACTIVE_ALLOCATED
            }
            assert len(racks) <= 1, (job.name, racks)
    for d in rec.decisions:
        if d.kind == "Unschedulable" and d.reason == "TopologyConstraint":
            assert "within one topology/" in d.message or "cannot be met" in d.message, d.message
