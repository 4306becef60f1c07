"""``hourglass simulate --config FILE`` with KAI subgroups: PodSets, SubGroupSets, per-subgroup minimums.

A scenario gives a workload ``subgroups`` (a LeaderWorkerSet's leader and workers, replicas of a
disaggregated server, ...); the simulator puts them on each job's pod group and labels each pod with the
PodSet it joins, so the engine gangs each PodSet on its own minimum. Each case states the cluster, the job
and which of its pods must start; the outcome is read back from the run's event log, and the run's
records replay on fresh sessions.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from analytics.cli import main
from analytics.rundir import read_events
from analytics.simulation.scenario import ScenarioError, parse_scenario
from ingest import events as ev
from scheduler.engine.state import SUBGROUP_LABEL
from tests.support.paths import REPO_ROOT


def _doc(job: dict[str, Any], gpus: int = 8, **extra: Any) -> dict[str, Any]:
    """Two nodes of ``gpus // 2`` GPUs; one fixed job of 1-GPU pods in queue ``train`` at t = 0."""
    doc: dict[str, Any] = {
        "version": 1,
        "duration": "2h",
        "cycle_period": "60s",
        "nodes": [{"count": 2, "gpus": gpus // 2, "name_prefix": "gpu"}],
        "queues": [{"name": "train", "gpu": {"quota": gpus, "limit": gpus}}],
        "workloads": [
            {
                "queue": "train",
                "kind": "fixed",
                "name": "lws",
                "gpus_per_pod": 1,
                "jobs": [{"at": "0s", "runtime": "1h"}],
                **job,
            }
        ],
    }
    doc.update(extra)
    return doc


def _simulate(tmp_path: Path, doc: dict[str, Any]) -> list[ev.EventBase]:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    out = tmp_path / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["simulate", "--config", str(path), "--out", str(out), "--json"]) == 0
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert main(["replay", str(out), "--verify"]) == 0, printed.getvalue()
    return [e for _, e in read_events(out)]


def _started_at_first_bind(events: list[ev.EventBase]) -> dict[str, str]:
    """The pods bound at the first bind's time -> the PodSet each was submitted in (its label)."""
    label = {e.name: e.labels.get(SUBGROUP_LABEL, "") for e in events if isinstance(e, ev.PodSubmitted)}
    binds = [e for e in events if isinstance(e, ev.PodBound)]
    assert binds, "nothing started"
    return {e.name: label[e.name] for e in binds if e.at_ms == binds[0].at_ms}


# A job that does not fit whole (more pods than GPUs) starts when each PodSet can reach its own minimum.
CASES: list[tuple[str, dict[str, Any], int, dict[str, int] | None]] = [
    (
        "leader and elastic workers: the leader and as many workers as fit start together",
        {"subgroups": [{"name": "leader", "pods": 1}, {"name": "workers", "pods": 12, "min_member": 4}]},
        8,
        {"leader": 1, "workers": 7},
    ),
    (
        "leader and workers all required: 13 pods on 8 GPUs never start",
        {"subgroups": [{"name": "leader", "pods": 1}, {"name": "workers", "pods": 12}]},
        8,
        None,
    ),
    (
        "PodSets under a SubGroupSet: each reaches its own minimum, the rest waits",
        {
            "subgroups": [
                {"name": "replicas"},
                {"name": "r0", "parent": "replicas", "pods": 4},
                {"name": "r1", "parent": "replicas", "pods": 4, "min_member": 2},
            ]
        },
        6,
        {"r0": 4, "r1": 2},
    ),
]


@pytest.mark.parametrize(("title", "job", "gpus", "expected"), CASES, ids=[c[0][:40] for c in CASES])
def test_subgroup_minimums_decide_what_starts(
    tmp_path: Path, title: str, job: dict[str, Any], gpus: int, expected: dict[str, int] | None
) -> None:
    events = _simulate(tmp_path, _doc(job, gpus))
    groups = [e for e in events if isinstance(e, ev.PodGroupUpserted)]
    assert [sg.name for sg in groups[0].subgroups] == [sg["name"] for sg in job["subgroups"]]
    submitted = [e for e in events if isinstance(e, ev.PodSubmitted)]
    assert len(submitted) == sum(sg.get("pods", 0) for sg in job["subgroups"])
    if expected is None:
        assert not any(isinstance(e, ev.PodBound) for e in events), title
        return
    assert Counter(_started_at_first_bind(events).values()) == expected, title


def test_keep_pending_and_poisson_jobs_carry_their_subgroups(tmp_path: Path) -> None:
    shape = {
        "gpus_per_pod": 1,
        "subgroups": [{"name": "leader", "pods": 1}, {"name": "workers", "pods": 3, "min_member": 1}],
    }
    doc = _doc({})
    doc["workloads"] = [
        {"queue": "train", "kind": "keep_pending", "name": "kp", "runtime": "30m", **shape},
        {
            "queue": "train",
            "kind": "poisson",
            "name": "po",
            "arrivals_per_hour": 2,
            "runtime": "20m",
            "seed": 1,
            **shape,
        },
    ]
    events = _simulate(tmp_path, doc)
    groups = [e for e in events if isinstance(e, ev.PodGroupUpserted)]
    assert {g.name.split("-")[0] for g in groups} == {"kp", "po"}
    for g in groups:
        assert [(sg.name, sg.min_member) for sg in g.subgroups] == [("leader", 1), ("workers", 1)]
    for e in events:
        if isinstance(e, ev.PodSubmitted):
            k = int(e.name.rsplit("-", 1)[1])
            assert e.labels[SUBGROUP_LABEL] == ("leader" if k == 0 else "workers"), e.name


def test_subgroup_topology_constraints_reach_the_pod_group() -> None:
    doc = _doc(
        {
            "subgroups": [
                {"name": "leader", "pods": 1},
                {"name": "workers", "pods": 4, "topology_constraint": {"required_level": "sim.io/rack"}},
            ],
            "min_sub_group": 2,
        },
        topologies=[{"name": "dc", "levels": ["sim.io/rack", "kubernetes.io/hostname"]}],
    )
    doc["nodes"][0]["domains"] = [{"label": "sim.io/rack", "nodes": 1}]
    run = parse_scenario(doc).build()
    (job,) = run.jobs
    assert job.pods == 5 and job.pod_subgroups == ("leader", "workers", "workers", "workers", "workers")
    workers = job.subgroups[1]
    assert (workers.topology, workers.required_topology_level) == ("dc", "sim.io/rack")
    assert job.subgroups[0].topology is None
    assert job.min_sub_group == 2  # KAI's minSubGroup (design-only in KAI) reaches the pod group as written


BAD: list[tuple[dict[str, Any], str]] = [
    ({"pods": 3, "subgroups": [{"name": "a", "pods": 2}]}, "pods: 3, but the subgroups' pods add up to 2"),
    ({"subgroups": [{"name": "a"}]}, "subgroups[0].pods: the pods of this PodSet"),
    (
        {"subgroups": [{"name": "a", "pods": 2, "min_member": 3}]},
        "subgroups[0].min_member: 3 exceeds its 2 pods",
    ),
    ({"subgroups": [{"name": "a", "pods": 1, "parent": "x"}]}, "names parent 'x', which is not a subgroup"),
    ({"subgroups": [{"name": "a", "pods": 1}, {"name": "a", "pods": 1}]}, "subgroup 'a' is listed twice"),
    (
        {"subgroups": [{"name": "s", "pods": 2}, {"name": "c", "parent": "s", "pods": 1}]},
        "subgroups[0] ('s') has child subgroups",
    ),
    ({"min_sub_group": 1}, "min_sub_group needs subgroups"),
    (
        {"subgroups": [{"name": "a", "pods": 1}], "min_sub_group": 2},
        "min_sub_group 2",
    ),
    (
        {"subgroups": [{"name": "a", "pods": 1, "topology_constraint": {"required_level": "x"}}]},
        "subgroups[0].topology_constraint: the scenario declares no topologies",
    ),
]


@pytest.mark.parametrize(("job", "message"), BAD, ids=[m[:40] for _, m in BAD])
def test_bad_subgroups_are_named(job: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(_doc(job), "s.yaml").build()
    assert message in str(err.value)
    assert str(err.value).startswith("s.yaml: workloads")


EXAMPLE = REPO_ROOT / "examples" / "lws-subgroups.yaml"


def _summary(*args: str) -> dict[str, Any]:
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert main(["simulate", "--config", str(EXAMPLE), "--json", "--set", "duration=6h", *args]) == 0
    out: dict[str, Any] = json.loads(printed.getvalue())
    return {q["name"]: q for q in out["queues"]}


def test_the_example_replicas_wait_less_with_elastic_workers() -> None:
    """examples/lws-subgroups.yaml: a replica whose workers are elastic (min 4 of 8) starts sooner than
    one that needs all 8 workers, on the same arrivals."""
    elastic = _summary()
    whole = _summary("--set", "workloads.0.subgroups.1.min_member=8")
    assert elastic["serve"]["tasks"] == whole["serve"]["tasks"] > 50
    assert elastic["serve"]["mean_wait_s"] < whole["serve"]["mean_wait_s"] / 2
