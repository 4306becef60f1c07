"""``hourglass check -f FILE --log LOG``: would this be scheduled right now, where, and if not why.

The log is a simulated run (``hourglass simulate --config``) cut at a known moment; the files are the
Kubernetes objects a user would apply. Exit codes: 0 placed now, 1 not now, 2 bad input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from analytics.cli import main
from analytics.rundir import read_events

H = 3_600_000
MIN = 60_000


def _scenario(gpus: int, queues: list[dict[str, Any]], workloads: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": 1,
        "name": "check",
        "duration": "200m",
        "cycle_period": "60s",
        "eviction_grace": "30s",
        "nodes": [{"count": 1, "gpus": gpus, "cpu": 64, "memory": 256, "name_prefix": "n"}],
        "queues": queues,
        "workloads": workloads,
    }


def _fixed(queue: str, name: str, gpus: int, jobs: list[tuple[str, str]]) -> dict[str, Any]:
    return {"queue": queue, "kind": "fixed", "gpus_per_pod": gpus, "name": name,
            "jobs": [{"at": at, "runtime": rt} for at, rt in jobs]}  # fmt: skip


# One 2-GPU node, queue team: three finished 1-hour runs, train-3 running since 3h, train-4 pending.
FULL = _scenario(
    2, [{"name": "team", "gpu": {"quota": 2, "weight": 1}}], [_fixed("team", "train", 2, [("0s", "1h")] * 5)]
)
# One 4-GPU node: queue b took all of it at 3h (reclaim protection 30 min); queue a is empty.
BORROWED = _scenario(
    4,
    [
        {"name": "a", "gpu": {"quota": 2, "weight": 1}},
        {"name": "b", "gpu": {"quota": 2, "weight": 1}, "reclaim_min_runtime_s": 1800},
    ],
    [_fixed("b", "warm", 4, [("0s", "1h")] * 3), _fixed("b", "long", 1, [("3h", "5h")] * 4)],
)

# One 4-GPU node, queue team: three finished 1-hour runs of the whole node, then a 2-GPU job from 3h.
HALF = _scenario(
    4,
    [{"name": "team", "gpu": {"quota": 4, "weight": 1}}],
    [_fixed("team", "warm", 4, [("0s", "1h")] * 3), _fixed("team", "long", 2, [("3h", "5h")])],
)


def _pod(
    name: str,
    queue: str,
    gpus: int = 0,
    *,
    ns: str | None = None,
    group: str | None = None,
    selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns or queue, "labels": {"kai.scheduler/queue": queue}}
    if group is not None:
        meta["annotations"] = {"pod-group-name": group}
    limits = {"nvidia.com/gpu": gpus} if gpus else {"cpu": 1}
    spec: dict[str, Any] = {
        "schedulerName": "kai-scheduler",
        "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}],
    }
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _group(name: str, queue: str, members: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": queue},
        "spec": {"queue": queue, "minMember": members},
    }


@dataclass(frozen=True)
class Case:
    name: str
    scenario: dict[str, Any]
    cut: str
    objects: list[dict[str, Any]]
    rc: int
    outcome: str
    says: list[str]  # phrases of the text answer


CASES = [
    Case(
        "a CPU pod fits on the node",
        FULL,
        "200m",
        [_pod("probe", "team")],
        0,
        "fits",
        ["team/probe fits on node n-0, by the allocate action"],
    ),
    Case(
        "the queue's GPUs are all in use",
        FULL,
        "200m",
        [_pod("probe", "team", 2)],
        1,
        "unschedulable",
        [
            "would NOT be scheduled now (cycle at 03:20): [PodSchedulingErrors]",
            "reclaim only brings the queue up to its fair share of 2 GPUs",
            "When (hourglass eta on the same state): at 05:00",
        ],
    ),
    Case(
        "larger than any node",
        FULL,
        "200m",
        [_pod("huge", "team", 4)],
        1,
        "unschedulable",
        ["the most free whole GPUs on any node is 0", "not expected to start within a year"],
    ),
    Case(
        "no such queue",
        FULL,
        "200m",
        [_pod("lost", "nowhere")],
        1,
        "unschedulable",
        ["[QueueDoesNotExist]", "create the queue"],
    ),
    Case(
        "node selector nobody matches",
        FULL,
        "200m",
        [_pod("picky", "team", selector={"gpu-model": "H100"})],
        1,
        "unschedulable",
        ["Nodes ruled out by:", "the pod's own constraints rule nodes out"],
    ),
    Case(
        "queue b is still protected by its reclaim min-runtime",
        BORROWED,
        "200m",
        [_pod("eval", "a", 2)],
        1,
        "unschedulable",
        [
            "queues over theirs, which reclaim takes from once their pods pass the min-runtime: b (+2 GPU)",
            "Who holds the GPUs on the nodes it may use: queue b 4 in 4 pod(s)",
        ],
    ),
    Case(
        "an elastic job: its minMember fits, the extra pod waits",
        HALF,
        "200m",
        [
            _group("elastic", "team", 1),
            _pod("e0", "team", 2, group="elastic"),
            _pod("e1", "team", 2, group="elastic"),
        ],
        0,
        "partial",
        [
            "1 of 2 pods would be placed now",
            "team/e0 fits on node n-0",
            "the rest wait: [PodSchedulingErrors]",
            "reclaim only brings the queue up to its fair share of 4 GPUs (it holds 4)",  # e0 counted
            "When (hourglass eta on the same state): at 04:00",  # the long job ends by the queue history (1 h runs)
        ],
    ),
    Case(
        "past the min-runtime: reclaim makes room",
        BORROWED,
        "240m",
        [_group("gang", "a", 2), _pod("w0", "a", 1, group="gang"), _pod("w1", "a", 1, group="gang")],
        0,
        "pipelined",
        [
            "a/w0 is pipelined to node n-0",
            "a/w1 is pipelined to node n-0",
            "It would evict 2 pod(s):",
            "by reclaim",
        ],
    ),
]


def _run(tmp: Path, scenario: dict[str, Any], cut: str) -> Path:
    cfg = tmp / "scenario.yaml"
    cfg.write_text(yaml.safe_dump({**scenario, "duration": cut}))
    out = tmp / "run"
    assert main(["simulate", "--config", str(cfg), "--out", str(out), "--json"]) == 0
    return out


def _check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["check", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_check(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path, case.scenario, case.cut)
    before = (run / "events.jsonl").read_bytes(), (run / "cycles.jsonl").read_bytes()
    f = tmp_path / "objects.yaml"
    f.write_text(yaml.safe_dump_all(case.objects))
    rc, out, err = _check(capsys, "-f", str(f), "--log", str(run))
    assert rc == case.rc, err
    flat = " ".join(out.split())  # the prose folds at the output's width
    for phrase in case.says:
        assert phrase in flat, (phrase, out)
    assert out.rstrip().endswith("Nothing was submitted.")
    rc, out, _ = _check(capsys, "-f", str(f), "--log", str(run), "--json", "--no-eta")
    body = json.loads(out)
    assert body["outcome"] == case.outcome
    assert body["eta"] is None
    assert before == ((run / "events.jsonl").read_bytes(), (run / "cycles.jsonl").read_bytes())


def test_pipelined_pods_start_where_check_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same gang submitted for real at the cut (a scenario job) is placed on the node check named."""
    run = _run(tmp_path, BORROWED, "240m")
    f = tmp_path / "gang.yaml"
    f.write_text(yaml.safe_dump_all([_group("gang", "a", 2), _pod("w0", "a", 1, group="gang"),
                                     _pod("w1", "a", 1, group="gang")]))  # fmt: skip
    rc, out, _ = _check(capsys, "-f", str(f), "--log", str(run), "--json", "--no-eta")
    assert rc == 0
    body = json.loads(out)
    real = {
        **BORROWED,
        "workloads": [*BORROWED["workloads"], {**_fixed("a", "gang", 1, [("4h", "1h")]), "pods": 2}],
    }
    full_dir = tmp_path / "full"
    full_dir.mkdir()
    full = _run(full_dir, real, "300m")
    binds = {
        e.uid: (e.at_ms, e.node)
        for _, e in read_events(full)
        if e.type == "PodBound" and e.uid.startswith("a/")
    }
    assert {binds[f"a/gang-0-{i}"][1] for i in range(2)} == {p["node"] for p in body["placements"].values()}
    assert {binds[f"a/gang-0-{i}"][0] for i in range(2)} == {4 * H + MIN}  # after the evicted pods' grace


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: Deployment\nmetadata: {name: d}\n", "can check Pods and PodGroups, not Deployment"),
        ("a: [1, 2\n", "not valid YAML"),
        ("", "no Pod or PodGroup in it"),
        ("kind: Pod\nmetadata: {namespace: team}\n", "a Pod without metadata.name"),
        (yaml.safe_dump(_group("g", "team", 2)), "a group alone says nothing about what it asks for"),
        (yaml.safe_dump(_pod("x", "team", group="ghost")), "names pod group 'ghost', which is neither"),
        (yaml.safe_dump(_pod("train-4", "team", 2)), "pod team/train-4 already exists in the log"),
        (yaml.safe_dump(_pod("x", "Bad_Queue")), "not a valid queue name"),
    ],
)
def test_bad_input(text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path, FULL, "200m")
    f = tmp_path / "objects.yaml"
    f.write_text(text)
    rc, _, err = _check(capsys, "-f", str(f), "--log", str(run))
    assert rc == 2
    assert message in err, err
