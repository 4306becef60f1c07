"""``hourglass simulate --config FILE`` with topologies: node domains, workload constraints, gang placement.

A scenario declares KAI topologies, lays its nodes out in blocks and racks, and gives workloads a required
or preferred level; the simulator puts the constraint on each job's pod group and the summary says how
spread the gangs were. Run through the command line, read back from the run's event log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analytics.cli import main
from analytics.rundir import read_events
from analytics.simulation.scenario import ScenarioError, load_scenario
from ingest import events as ev
from tests.support.paths import REPO_ROOT
from tests.support.topology_builders import BLOCK, HOST, RACK, racks_scenario, simulate_json, write_scenario

EXAMPLE = REPO_ROOT / "examples" / "topology-racks.yaml"


def _gang_domains(out: Path, level: str) -> dict[str, set[str]]:
    """Per gang of the run (pod group with 2+ pods): the values of *level* on the nodes its pods first
    ran on (a gang that never started is left out)."""
    events = [e for _, e in read_events(out)]
    labels = {e.name: e.labels for e in events if isinstance(e, ev.NodeUpserted)}
    sizes = {e.name: e.min_member for e in events if isinstance(e, ev.PodGroupUpserted)}
    first: dict[str, str] = {}
    for e in events:
        if isinstance(e, ev.PodBound):
            first.setdefault(e.name, e.node)
    by_gang: dict[str, set[str]] = {}
    for pod, node in first.items():
        gang = pod.rsplit("-", 1)[0]
        if sizes.get(gang, 1) > 1:
            by_gang.setdefault(gang, set()).add(labels[node][level])
    return {g: v for g, v in by_gang.items() if sum(1 for p in first if p.rsplit("-", 1)[0] == g) == sizes[g]}


# --------------------------------------------------------------------------- placement


@pytest.mark.parametrize(
    ("constraint", "one_rack", "one_block"),
    [
        # required rack: every gang within one rack (and so one block)
        ({"topology": "dc", "required_level": RACK}, "all", "all"),
        # the topology may be left out when the scenario declares only one
        ({"required_level": RACK}, "all", "all"),
        # required block: every gang within one block, racks may differ
        ({"required_level": BLOCK}, "any", "all"),
        # preferred rack, required block
        ({"required_level": BLOCK, "preferred_level": RACK}, "any", "all"),
        # no constraint: nothing promised
        (None, "any", "any"),
    ],
)
def test_a_constraint_keeps_every_gang_within_its_domain(
    tmp_path: Path, constraint: dict[str, Any] | None, one_rack: str, one_block: str
) -> None:
    out = tmp_path / "run"
    summary = simulate_json(write_scenario(tmp_path, racks_scenario(constraint)), out)
    events = [e for _, e in read_events(out)]
    assert [(e.name, e.levels) for e in events if isinstance(e, ev.TopologyUpserted)] == [
        ("dc", [BLOCK, RACK, HOST])
    ]
    gangs = [e for e in events if isinstance(e, ev.PodGroupUpserted) and e.min_member == 2]
    assert gangs
    c = constraint or {}
    for g in gangs:
        assert (g.topology, g.required_topology_level, g.preferred_topology_level) == (
            "dc" if c else None,
            c.get("required_level"),
            c.get("preferred_level"),
        )
    racks, blocks = _gang_domains(out, RACK), _gang_domains(out, BLOCK)
    assert len(racks) >= 10
    if one_rack == "all":
        assert all(len(v) == 1 for v in racks.values()), racks
    if one_block == "all":
        assert all(len(v) == 1 for v in blocks.values()), blocks
    # The summary counts the same thing.
    (topo,) = summary["topology"]
    by_level = {lv["level"]: {q["queue"]: q for q in lv["queues"]} for lv in topo["levels"]}
    rack_row = by_level[RACK]["train"]
    assert rack_row["gangs"] == len(racks)
    assert rack_row["within_one"] == sum(1 for v in racks.values() if len(v) == 1)
    assert by_level[BLOCK]["train"]["within_one"] == sum(1 for v in blocks.values() if len(v) == 1)
    assert by_level[HOST]["train"]["mean_domains"] == 2  # two whole-node pods: two hosts


def test_a_gang_larger_than_any_rack_waits_with_the_topology_reason(tmp_path: Path) -> None:
    doc = racks_scenario({"required_level": RACK})
    doc["workloads"] = [
        {
            "queue": "train",
            "kind": "fixed",
            "name": "big",
            "pods": 3,
            "gpus_per_pod": 8,
            "jobs": [{"at": 0, "runtime": "1h"}],
            "topology_constraint": {"required_level": RACK},
        }
    ]
    summary = simulate_json(write_scenario(tmp_path, doc), tmp_path / "run")
    train = next(q for q in summary["queues"] if q["name"] == "train")
    assert train["started"] == 0
    assert train["pending_reasons"] == {"TopologyConstraint": 3}
    # Within one block (4 nodes) it fits at once.
    doc["workloads"][0]["topology_constraint"] = {"required_level": BLOCK}
    summary = simulate_json(write_scenario(tmp_path, doc, "b.yaml"), tmp_path / "run-b")
    train = next(q for q in summary["queues"] if q["name"] == "train")
    assert train["started"] == 3 and train["mean_wait_s"] == 0


def test_node_domains_count_on_across_entries_and_nodes_carry_their_hostname(tmp_path: Path) -> None:
    doc = racks_scenario(None)
    doc["nodes"] = [
        {"count": 3, "gpus": 8, "domains": [{"label": BLOCK, "nodes": 2}, {"label": RACK, "nodes": 1}]},
        {"count": 2, "gpus": 0, "labels": {BLOCK: "cpu-block", RACK: "cpu-rack"}},
    ]
    nodes = load_scenario(write_scenario(tmp_path, doc)).node_events()
    assert [(n.name, n.labels.get(BLOCK), n.labels.get(RACK), n.labels[HOST]) for n in nodes] == [
        ("node-0", "block-0", "rack-0", "node-0"),
        ("node-1", "block-0", "rack-1", "node-1"),
        ("node-2", "block-1", "rack-2", "node-2"),
        ("node-3", "cpu-block", "cpu-rack", "node-3"),
        ("node-4", "cpu-block", "cpu-rack", "node-4"),
    ]
    # Without topologies nodes are labelled as before (no hostname), so older scenario logs are unchanged.
    plain = racks_scenario(None)
    del plain["topologies"], plain["nodes"][0]["domains"]
    plain["workloads"][0].pop("topology_constraint")
    assert load_scenario(write_scenario(tmp_path, plain, "p.yaml")).node_events()[0].labels == {
        "gpu-model": "sim-gpu"
    }


def test_a_topology_run_is_reproducible_and_replays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_scenario(
        tmp_path, racks_scenario({"required_level": RACK, "preferred_level": HOST}, duration="3h")
    )
    out, again = tmp_path / "run", tmp_path / "again"
    simulate_json(path, out)
    simulate_json(path, again)
    assert (again / "events.jsonl").read_bytes() == (out / "events.jsonl").read_bytes()
    assert (again / "cycles.jsonl").read_bytes() == (out / "cycles.jsonl").read_bytes()
    capsys.readouterr()
    assert main(["replay", str(out), "--verify"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith(", 0 mismatches")


# --------------------------------------------------------------------------- the example


def test_the_example_required_rack_costs_waiting_and_preferred_packs_most_gangs(tmp_path: Path) -> None:
    """The shipped example over 12 h: a required rack places every gang in one rack but makes gangs wait
    longer than a preferred rack, which still keeps more gangs in one rack than no constraint."""
    rows: dict[str, dict[str, Any]] = {}
    variants = {
        "required": [],
        "preferred": [
            "--set",
            "workloads.0.topology_constraint.required_level=null",
            "--set",
            f"workloads.0.topology_constraint.preferred_level={RACK}",
        ],
        "none": ["--set", "workloads.0.topology_constraint=null"],
    }
    for name, args in variants.items():
        summary = simulate_json(EXAMPLE, tmp_path / name, "--set", "duration=12h", *args)
        train = next(q for q in summary["queues"] if q["name"] == "train")
        rack = next(lv for lv in summary["topology"][0]["levels"] if lv["level"] == RACK)["queues"][0]
        rows[name] = {"wait": train["mean_wait_s"], "one_rack": rack["within_one"] / rack["gangs"]}
    assert rows["required"]["one_rack"] == 1.0
    assert rows["required"]["wait"] > rows["preferred"]["wait"]
    assert rows["preferred"]["one_rack"] > rows["none"]["one_rack"]


# --------------------------------------------------------------------------- errors


def _with(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    node: Any = doc
    *parts, last = path.split(".")
    for p in parts:
        node = node[int(p)] if isinstance(node, list) else node[p]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("topologies.0.levels", [], "topologies[0].levels: List should have at least 1 item"),
        (
            "topologies.0.levels",
            [BLOCK, RACK, BLOCK],
            "topologies[0]: levels[2]: 'sim.io/block' is listed twice",
        ),
        ("topologies.0.levels", [BLOCK, "bad key!"], "topologies[0].levels[1]: String should match pattern"),
        (
            "topologies.0.levels",
            [BLOCK, RACK, "sim.io/row"],
            "topologies[0].levels[2]: no node carries label 'sim.io/row'",
        ),
        (
            "topologies",
            [{"name": "dc", "levels": [BLOCK]}, {"name": "dc", "levels": [RACK]}],
            "topologies[1].name: 'dc' is declared twice",
        ),
        (
            "nodes.0.domains.1.label",
            "sim.io/row",
            "nodes[0].domains[1].label: 'sim.io/row' is not a level of any topology",
        ),
        ("nodes.0.domains.1.nodes", 3, "domains[1].nodes: 3 does not divide 4"),
        (
            "nodes.0.labels",
            {"kubernetes.io/hostname": "x"},
            "'kubernetes.io/hostname' is set by the simulator",
        ),
        (
            "workloads.0.topology_constraint",
            {"topology": "zz", "required_level": RACK},
            "workloads[0].topology_constraint.topology: 'zz' is not declared (topologies: ['dc'])",
        ),
        (
            "workloads.0.topology_constraint",
            {"required_level": "sim.io/row"},
            "workloads[0].topology_constraint.required_level: 'sim.io/row' is not a level of topology 'dc'",
        ),
        (
            "workloads.0.topology_constraint",
            {"required_level": RACK, "preferred_level": BLOCK},
            "preferred_level: 'sim.io/block' is wider than the required level 'sim.io/rack'",
        ),
        (
            "workloads.0.topology_constraint",
            {"required": RACK},
            "workloads[0].poisson.topology_constraint.required: Extra inputs are not permitted",
        ),
        ("topologies", [], "workloads[0].topology_constraint: the scenario declares no topologies"),
    ],
)
def test_an_invalid_topology_spec_names_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str, value: Any, message: str
) -> None:
    doc = _with(racks_scenario({"required_level": RACK}), path, value)
    if path == "topologies" and not value:
        del doc["nodes"][0]["domains"]
    file = write_scenario(tmp_path, doc)
    with pytest.raises(ScenarioError) as exc:
        load_scenario(file)
    assert str(exc.value).startswith(f"{file}: ")
    assert message.replace("Value error, ", "") in str(exc.value).replace("Value error, ", "")
    assert main(["simulate", "--config", str(file)]) == 2
    assert capsys.readouterr().err.startswith(f"simulate: {file}: ")


def test_two_topologies_need_the_constraint_to_name_one(tmp_path: Path) -> None:
    doc = racks_scenario({"required_level": RACK})
    doc["topologies"].append({"name": "racks", "levels": [RACK]})
    with pytest.raises(
        ScenarioError,
        match=r"topology_constraint\.topology: name one of the scenario's topologies \['dc', 'racks'\]",
    ):
        load_scenario(write_scenario(tmp_path, doc))
    doc["workloads"][0]["topology_constraint"]["topology"] = "racks"
    run = load_scenario(write_scenario(tmp_path, doc, "ok.yaml")).build()
    assert [t.name for t in run.topologies] == ["dc", "racks"]
    assert {(j.topology, j.required_level) for j in run.jobs if j.queue == "train"} == {("racks", RACK)}


def test_a_fixed_job_may_replace_its_workloads_constraint(tmp_path: Path) -> None:
    doc = racks_scenario({"required_level": RACK})
    doc["workloads"][1] = {
        "queue": "batch",
        "kind": "fixed",
        "name": "f",
        "pods": 2,
        "gpus_per_pod": 1,
        "topology_constraint": {"required_level": RACK},
        "jobs": [
            {"at": 0, "runtime": "1h"},
            {"at": 0, "runtime": "1h", "topology_constraint": {}},  # no levels: no constraint
            {"at": 0, "runtime": "1h", "topology_constraint": {"preferred_level": BLOCK}},
        ],
    }
    run = load_scenario(write_scenario(tmp_path, doc)).build()
    fixed = {
        j.name: (j.topology, j.required_level, j.preferred_level) for j in run.jobs if j.queue == "batch"
    }
    assert fixed == {"f-0": ("dc", RACK, None), "f-1": (None, None, None), "f-2": ("dc", None, BLOCK)}
    doc["workloads"][1]["jobs"][2]["topology_constraint"] = {"required_level": "sim.io/row"}
    with pytest.raises(
        ScenarioError, match=r"workloads\[1\]\.jobs\[2\]\.topology_constraint\.required_level: 'sim.io/row'"
    ):
        load_scenario(write_scenario(tmp_path, doc, "bad.yaml"))
