"""PodGroup ``status.schedulingConditions``: KAI's condition, written by the binder.

Pure tests pin KAI's rules (one condition per node pool, appended last, ``transitionID`` + 1, no write when
the last one says the same, none for NotReady jobs, cleared when the job is no longer pending). The API test
runs the binder against a real kube-apiserver with the PodGroup CRD from ``deploy/crds`` and reads the
status back as a KAI user (``kubectl get pg -o yaml``) would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from scheduler.engine.record.decisions import CycleRecord, Decision
from scheduler.kube.binder import Binder, BinderApi, RetryPolicy
from scheduler.kube.podgroup_status import (
    ClearConditions,
    ConditionMemory,
    SetCondition,
    next_conditions,
    plan_conditions,
    scheduling_condition,
)
from tests.support.crds import deploy_crds, server_side_apply
from tests.support.kube_objects import pod_events

FAST = RetryPolicy(attempts=3, base_s=0.01)
NOW = "2026-11-25T12:00:00Z"


def cond(pool: str, message: str, tid: str, reason: str = "Unschedulable") -> dict[str, Any]:
    return {
        "type": "UnschedulableOnNodePool",
        "nodePool": pool,
        "reason": reason,
        "message": message,
        "status": "True",
        "transitionID": tid,
        "lastTransitionTime": "2026-11-25T11:00:00Z",
    }


def new(pool: str, message: str) -> dict[str, Any]:
    return {**scheduling_condition("OverLimit", message, "team-a", pool)}


#: (name, existing conditions, new condition, expected (nodePool, message, transitionID) list or None)
NEXT_CASES: list[tuple[str, list[dict[str, Any]], dict[str, Any], list[tuple[str, str, str]] | None]] = [
    ("first condition gets id 1", [], new("default", "m1"), [("default", "m1", "1")]),
    ("same as the last one: no write", [cond("default", "m1", "4")], new("default", "m1"), None),
    (
        "message changed: replaced, id + 1",
        [cond("default", "m1", "4")],
        new("default", "m2"),
        [("default", "m2", "5")],
    ),
    (
        "other pool kept, ours squashed and appended last",
        [cond("default", "m1", "1"), cond("pool-b", "x", "2")],
        new("default", "m1"),
        [("pool-b", "x", "2"), ("default", "m1", "3")],
    ),
    (
        "several of ours squashed into one",
        [cond("default", "a", "1"), cond("default", "b", "2")],
        new("default", "c"),
        [("default", "c", "3")],
    ),
    (
        "a bad transitionID counts as 0",
        [cond("default", "m1", "x")],
        new("default", "m2"),
        [("default", "m2", "1")],
    ),
]


@pytest.mark.parametrize(
    ("name", "existing", "condition", "expected"), NEXT_CASES, ids=[c[0] for c in NEXT_CASES]
)
def test_next_conditions_follow_kais_squash_rule(
    name: str,
    existing: list[dict[str, Any]],
    condition: dict[str, Any],
    expected: list[tuple[str, str, str]] | None,
) -> None:
    out = next_conditions(existing, condition, NOW)
    if expected is None:
        assert out is None
        return
    assert out is not None
    assert [(c["nodePool"], c["message"], c["transitionID"]) for c in out] == expected
    assert out[-1]["lastTransitionTime"] == NOW
    assert out[-1]["reasons"] == [
        {
            "reason": "OverLimit",
            "message": condition["message"],
            "details": {"queueDetails": {"name": "team-a"}},
        }
    ]


def pending(job: str, reason: str = "PodSchedulingErrors", message: str = "no node fits") -> Decision:
    return Decision(
        kind="Unschedulable", job=job, queue="team-a", pods=[f"{job}-0"], reason=reason, message=message
    )


def bind(job: str, node: str = "n1") -> Decision:
    return Decision(kind="Bind", job=job, queue="team-a", pod=f"{job}-0", node=node, action="allocate")


def record(decisions: list[Decision], t: int = 1, **kw: Any) -> CycleRecord:
    return CycleRecord(
        cycle_id=f"c{t}",
        events_offset=t,
        usage_snapshot_id=None,
        config_hash="h",
        logical_time_ms=t,
        queues=[],
        decisions=decisions,
        **kw,
    )


def test_plan_sets_on_change_skips_not_ready_and_clears_once_no_longer_pending() -> None:
    steps: list[tuple[CycleRecord, list[SetCondition | ClearConditions]]] = [
        (
            record([pending("ns/a"), pending("ns/b", "NotReady", "waiting for 2 pods")]),
            [SetCondition("ns/a", "PodSchedulingErrors", "no node fits", "team-a")],
        ),
        (record([pending("ns/a"), pending("ns/b", "NotReady", "waiting")], 2), []),  # unchanged: no write
        (
            record([pending("ns/a", "OverLimit", "over"), pending("ns/b", "OverLimit", "over")], 3),
            [
                SetCondition("ns/a", "OverLimit", "over", "team-a"),
                SetCondition("ns/b", "OverLimit", "over", "team-a"),
            ],
        ),
        (record([bind("ns/a"), pending("ns/b", "OverLimit", "over")], 4), [ClearConditions("ns/a")]),
        (record([], 5, kind="delta", base="c4", cleared=["ns/b"]), [ClearConditions("ns/b")]),
        (record([], 6), []),  # nothing written any more: nothing to clear
        # An elastic job gets some pods placed while others still wait: no condition (KAI: allocated pods).
        (record([bind("ns/e"), pending("ns/e", "PodSchedulingErrors", "1 of 3 pods fit")], 7), []),
    ]
    memory = ConditionMemory()
    for i, (rec, expected) in enumerate(steps):
        actions, memory = plan_conditions(rec, memory)
        assert actions == expected, f"step {i}"


# --------------------------------------------------------------------------- real kube-apiserver


@pytest.fixture
def api(kube_api: Any) -> Iterator[Any]:
    with kube_api.api_client() as client_:
        server_side_apply(client_, deploy_crds())
        yield client_


def _pg(api: Any, ns: str, name: str) -> dict[str, Any]:
    from kubernetes import client

    r: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", ns, "podgroups", name, _preload_content=False
    )
    return dict(json.loads(r.data))


def test_a_message_only_change_is_written_once_per_interval_a_new_reason_at_once() -> None:
    mem = ConditionMemory()
    acts, mem = plan_conditions(record([pending("ns/a", message="largest free: 3 GPUs")]), mem, 0.0, 60.0)
    assert len(acts) == 1
    for t in range(1, 30):  # the free GPUs move every cycle: no rewrite of the PodGroup
        acts, mem = plan_conditions(
            record([pending("ns/a", message=f"largest free: {t % 4} GPUs")], t), mem, t, 60.0
        )
        assert acts == []
    acts, mem = plan_conditions(
        record([pending("ns/a", message="largest free: 1 GPUs")], 61), mem, 61.0, 60.0
    )
    assert acts == [SetCondition("ns/a", "PodSchedulingErrors", "largest free: 1 GPUs", "team-a")]
    acts, mem = plan_conditions(record([pending("ns/a", "OverLimit", "over")], 62), mem, 62.0, 60.0)
    assert acts == [SetCondition("ns/a", "OverLimit", "over", "team-a")]


def test_binder_writes_and_clears_kais_scheduling_condition(
    api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kube_namespace
    custom = client.CustomObjectsApi(api)
    for name in ("train", "other"):
        custom.create_namespaced_custom_object(
            "scheduling.run.ai",
            "v2alpha2",
            ns,
            "podgroups",
            {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {"name": name},
                "spec": {"minMember": 1, "queue": "team-a"},
            },
        )
    log = FileLog(tmp_path / "log")
    b = Binder(log, BinderApi(api), retry=FAST)
    job = f"{ns}/train"

    def apply(rec: CycleRecord) -> None:
        log.append(DEFAULT_TOPICS.decisions, None, rec.dumps())
        b.run(stop_when_idle=True)

    apply(
        record([pending(job, "OverLimit", "queue team-a would exceed its GPU limit"), pending(f"{ns}/gone")])
    )
    [c] = _pg(api, ns, "train")["status"]["schedulingConditions"]
    assert {k: c[k] for k in ("type", "nodePool", "reason", "status", "transitionID")} == {
        "type": "UnschedulableOnNodePool",
        "nodePool": "default",
        "reason": "Unschedulable",
        "status": "True",
        "transitionID": "1",
    }
    assert c["message"] == "queue team-a would exceed its GPU limit"
    assert c["reasons"] == [
        {
            "reason": "OverLimit",
            "message": "queue team-a would exceed its GPU limit",
            "details": {"queueDetails": {"name": "team-a"}},
        }
    ]
    assert c["lastTransitionTime"].endswith("Z")
    assert b.stats.podgroups_missing == 1  # ns/gone has no PodGroup object: skipped, not dead-lettered
    # KAI's record_job_status_event_test.go ("job over capacity"): the PodGroup's Event carries the
    # condition's message (markPodGroupUnschedulable: Normal, reason Unschedulable), on the PodGroup itself.
    [ev] = pod_events(api, ns, "train")
    assert (ev["type"], ev["reason"], ev["message"]) == (
        "Normal",
        "Unschedulable",
        "queue team-a would exceed its GPU limit",
    )
    assert ev["involvedObject"]["kind"] == "PodGroup"
    assert ev["involvedObject"]["uid"] == _pg(api, ns, "train")["metadata"]["uid"]

    apply(record([pending(job, "OverLimit", "queue team-a would exceed its GPU limit")], 2))
    assert b.stats.podgroup_conditions == 1  # unchanged: no second write

    # A restarted binder (empty memory) sees the same condition on the object and writes nothing.
    b = Binder(log, BinderApi(api), retry=FAST)
    apply(record([pending(job, "OverLimit", "queue team-a would exceed its GPU limit")], 3))
    assert b.stats.podgroup_conditions == 0
    assert _pg(api, ns, "train")["status"]["schedulingConditions"][0]["transitionID"] == "1"

    apply(record([pending(job, "PodSchedulingErrors", "no node has 4 free GPUs")], 4))
    [c] = _pg(api, ns, "train")["status"]["schedulingConditions"]
    assert (c["transitionID"], c["reasons"][0]["reason"]) == ("2", "PodSchedulingErrors")
    [ev] = pod_events(api, ns, "train")  # one Event per (object, reason): its message follows the condition
    assert (ev["message"], ev["count"]) == ("no node has 4 free GPUs", 2)

    # The job is placed: once a record no longer lists it as pending, its conditions are removed.
    apply(record([bind(job)], 5))
    assert "schedulingConditions" not in _pg(api, ns, "train").get("status", {})
    assert b.stats.podgroup_conditions_cleared == 1
    assert "status" not in _pg(api, ns, "other") or not _pg(api, ns, "other")["status"].get(
        "schedulingConditions"
    )
    assert b.stats.dead_letters == 0
