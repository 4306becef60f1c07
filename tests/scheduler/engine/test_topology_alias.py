"""KAI Topology ``levels[].alias``: kept through the event contract and resolved wherever a constraint names
a level, so a PodGroup may require ``rack`` for the level whose node label is ``example.com/rack``."""

from __future__ import annotations

import pytest

from ingest import events as ev
from ingest.kube import translate as kube
from scheduler.engine.cycle import run_cycle
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import StateBuilder

TOPOLOGY = {
    "apiVersion": "kai.scheduler/v1alpha1",
    "kind": "Topology",
    "metadata": {"name": "dc"},
    "spec": {
        "levels": [
            {"nodeLabel": "topology.kubernetes.io/zone", "alias": "zone"},
            {"nodeLabel": "example.com/rack", "alias": "rack"},
        ]
    },
}


def _node(name: str, rack: str) -> ev.NodeUpserted:
    labels = {"topology.kubernetes.io/zone": "z1", "example.com/rack": rack}
    return ev.NodeUpserted(
        uid="", at_ms=0, name=name, cpu_millicores=8000, memory_bytes=2**34, gpus=1, labels=labels
    )


@pytest.mark.parametrize("level", ["rack", "example.com/rack"], ids=["alias", "node-label"])
def test_a_level_named_by_its_alias_is_resolved(level: str) -> None:
    topology = ev.parse_event(ev.dump_event(kube.topology_upserted(TOPOLOGY, 0)))
    assert isinstance(topology, ev.TopologyUpserted)
    assert topology.aliases == {"zone": "topology.kubernetes.io/zone", "rack": "example.com/rack"}
    pg = kube.podgroup_upserted(
        {
            "metadata": {"name": "g", "namespace": "ns", "creationTimestamp": "1970-01-01T00:00:00Z"},
            "spec": {
                "queue": "q",
                "minMember": 2,
                "topologyConstraint": {"topology": "dc", "requiredTopologyLevel": level},
            },
        },
        0,
    )
    b = StateBuilder()
    for e in [
        _node("n1", "r1"),
        _node("n2", "r2"),
        _node("n3", "r2"),
        ev.QueueUpserted(uid="", at_ms=0, name="q"),
        topology,
        pg,
        *(
            ev.PodSubmitted(
                uid="",
                at_ms=0,
                name=f"g-{i}",
                namespace="ns",
                pod_group="g",
                created_at_ms=0,
                requests=ev.PodRequests(gpus=1),
            )
            for i in range(2)
        ),
    ]:
        b.apply(e)
    record, _ = run_cycle(b.snapshot(), SessionConfig(), 0)
    assert sorted((d.kind, d.node) for d in record.decisions) == [("Bind", "n2"), ("Bind", "n3")]


def test_bad_aliases_are_errors_naming_the_level() -> None:
    twice = {"spec": {"levels": [{"nodeLabel": "a", "alias": "x"}, {"nodeLabel": "b", "alias": "x"}]}}
    with pytest.raises(kube.InvalidObject, match=r"spec\.levels\[1\]\.alias.*two levels"):
        kube.topology_upserted({"metadata": {"name": "t"}, **twice}, 0)
    clash = {"spec": {"levels": [{"nodeLabel": "a"}, {"nodeLabel": "b", "alias": "a"}]}}
    with pytest.raises(kube.InvalidObject, match="another level's node label"):
        kube.topology_upserted({"metadata": {"name": "t"}, **clash}, 0)
