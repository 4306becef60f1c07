"""PodGroup ``status.schedulingConditions``, written by the binder the way KAI's scheduler writes them.

KAI (``pkg/scheduler/cache/status_updater/default_status_updater.go``) tells users why a PodGroup waits
through one condition per node pool on the PodGroup's status::

    {type: UnschedulableOnNodePool, nodePool: default, reason: Unschedulable, status: "True",
     message: <why>, reasons: [{reason: <UnschedulableReason>, message: <why>}],
     transitionID: "<previous max + 1>", lastTransitionTime: <RFC 3339>}

and removes them once no pod of the group is pending. This module keeps that contract:

* :func:`plan_conditions` (pure): from one cycle record and what was last written, the PodGroups whose
  condition must be set (their reason or message changed) and those whose conditions must be cleared
  (a job that had a condition is bound, or a delta record clears it);
* :func:`next_conditions` (pure): KAI's squash rule. Conditions of the same node pool are replaced by
  the new one, appended last; ``transitionID`` is the last condition's id + 1; nothing is written when
  the last condition already says the same (type, node pool, reason, message, status);
* :class:`ConditionWriter` reads the PodGroup, applies :func:`next_conditions` and writes the status
  subresource with the read ``resourceVersion`` (a concurrent write answers 409: read again, retry).

Jobs that are ``NotReady`` (fewer pods than ``minMember`` exist) get no condition, as in KAI; nor do jobs the
cycle did not reach (``NotAttempted``, a Hourglass reason). Writes are best effort, like Events: a PodGroup
that does not exist (404) is skipped, another 4xx is logged and counted, never dead-lettered.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from scheduler.engine.record.decisions import CycleRecord
from scheduler.engine.record.delta import render

__all__ = [
    "CONDITION_TYPE",
    "DEFAULT_NODE_POOL",
    "NO_CONDITION_REASONS",
    "REASON_UNSCHEDULABLE",
    "ClearConditions",
    "ConditionMemory",
    "ConditionWriter",
    "SetCondition",
    "next_conditions",
    "plan_conditions",
    "scheduling_condition",
]

log = logging.getLogger(__name__)

CONDITION_TYPE: Final = "UnschedulableOnNodePool"  # KAI's only SchedulingConditionType
REASON_UNSCHEDULABLE: Final = "Unschedulable"  # KAI's PodGroupReasonUnschedulable
DEFAULT_NODE_POOL: Final = "default"  # KAI's node pool name when the PodGroup has no node-pool label
NO_CONDITION_REASONS: Final = frozenset({"NotReady", "NotAttempted"})
PODGROUP_GROUP: Final = "scheduling.run.ai"
PODGROUP_VERSION: Final = "v2alpha2"
PODGROUP_PLURAL: Final = "podgroups"
_QUEUE_REASONS: Final = frozenset(
    {"NonPreemptibleOverQuota", "OverLimit", "QueueDoesNotExist", "QueueNotLeaf"}
)
_CONFLICT_RETRIES: Final = 3


@dataclass(frozen=True, slots=True)
class SetCondition:
    """Set the node pool's scheduling condition of one PodGroup (``job`` is ``namespace/name``)."""

    job: str
    reason: str  # the UnschedulableReason (OverLimit, PodSchedulingErrors, ...)
    message: str
    queue: str | None


@dataclass(frozen=True, slots=True)
class ClearConditions:
    """Remove every scheduling condition of one PodGroup: none of its pods is pending any more."""

    job: str


@dataclass(frozen=True, slots=True)
class ConditionMemory:
    """What the binder last wrote: job -> (reason, message) of its condition."""

    written: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    at: Mapping[str, float] = field(default_factory=dict)  # job -> clock time of its last write


def scheduling_condition(
    reason: str, message: str, queue: str | None, node_pool: str = DEFAULT_NODE_POOL
) -> dict[str, Any]:
    """The condition KAI writes for a PodGroup that cannot be scheduled (without id and time)."""
    explanation: dict[str, Any] = {"reason": reason, "message": message}
    if reason in _QUEUE_REASONS and queue:
        explanation["details"] = {"queueDetails": {"name": queue}}
    return {
        "type": CONDITION_TYPE,
        "nodePool": node_pool,
        "reason": REASON_UNSCHEDULABLE,
        "message": message,
        "status": "True",
        "reasons": [explanation],
    }


def _same(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> bool:
    if a is None:
        return False
    keys = ("type", "nodePool", "reason", "message", "status")
    return all(a.get(k) == b.get(k) for k in keys)


def next_conditions(
    existing: Sequence[Mapping[str, Any]], condition: Mapping[str, Any], now_rfc3339: str
) -> list[dict[str, Any]] | None:
    """The PodGroup's conditions after setting ``condition``, or None when nothing needs writing (KAI's rule)."""
    last = existing[-1] if existing else None
    pool = condition.get("nodePool")
    mine = [i for i, c in enumerate(existing) if c.get("nodePool") == pool]
    if _same(last, condition) and mine and mine[-1] == len(existing) - 1:
        return None
    try:
        last_id = int(str(last.get("transitionID", "0"))) if last is not None else 0
    except ValueError:
        last_id = 0
    new = {**condition, "transitionID": str(max(last_id, 0) + 1), "lastTransitionTime": now_rfc3339}
    return [dict(c) for c in existing if c.get("nodePool") != pool] + [new]


def plan_conditions(
    record: CycleRecord, memory: ConditionMemory, now: float = 0.0, message_interval_s: float = 0.0
) -> tuple[list[SetCondition | ClearConditions], ConditionMemory]:
    """The condition writes one record needs, and the memory after them.

    A job gets :class:`SetCondition` when its Unschedulable reason or message differs from what was last
    written, unless the same record binds or pipelines some of its pods (KAI writes no condition for a job
    with allocated pods). A job that had a condition gets :class:`ClearConditions` once a record shows it no longer
    pending: a full record that does not list it as Unschedulable, or a delta record that clears it.
    Messages are the decisions' full messages (:func:`scheduler.engine.record.delta.render`). A change of the
    message alone is written at most once per ``message_interval_s`` of ``now`` (a new reason at once): a
    message that only counts (free GPUs, gang members) would otherwise rewrite the PodGroup every cycle.
    """
    record = render(record)
    actions: list[SetCondition | ClearConditions] = []
    written = dict(memory.written)
    at = dict(memory.at)
    pending: set[str] = set()
    placing = {d.job for d in record.decisions if d.kind in ("Bind", "Pipeline")}
    for d in record.decisions:
        if d.kind != "Unschedulable" or "/" not in d.job:
            continue
        pending.add(d.job)
        reason = d.reason or "Unschedulable"
        if reason in NO_CONDITION_REASONS or d.job in placing:
            continue  # KAI: no condition for a job not ready, nor while some of its pods are being placed
        message = d.message or reason
        prev = written.get(d.job)
        if (
            prev is None
            or prev[0] != reason
            or (prev[1] != message and now - at.get(d.job, 0.0) >= message_interval_s)
        ):
            actions.append(SetCondition(d.job, reason, message, d.queue))
            written[d.job] = (reason, message)
            at[d.job] = now
    if record.is_full:
        gone = [job for job in written if job not in pending]
    else:
        gone = [job for job in record.cleared if job in written and job not in pending]
    for job in sorted(gone):
        actions.append(ClearConditions(job))
        del written[job]
        at.pop(job, None)
    return actions, ConditionMemory(written, at)


def _now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ConditionWriter:
    """Reads and writes PodGroup status through ``kubernetes.client.CustomObjectsApi``-shaped calls.

    ``call`` runs one client call and maps failures to ``ingest.kube.client.KubeError`` (``ingest.kube.client.call``).
    """

    def __init__(self, custom: Any, call: Any) -> None:
        self.custom = custom
        self.call = call

    def _read(self, namespace: str, name: str) -> dict[str, Any]:
        r = self.call(
            self.custom.get_namespaced_custom_object,
            PODGROUP_GROUP,
            PODGROUP_VERSION,
            namespace,
            PODGROUP_PLURAL,
            name,
        )
        obj: dict[str, Any] = json.loads(r.data)
        return obj

    def _write(
        self, namespace: str, name: str, version: str, conditions: list[dict[str, Any]] | None
    ) -> None:
        body = {"metadata": {"resourceVersion": version}, "status": {"schedulingConditions": conditions}}
        self.call(
            self.custom.patch_namespaced_custom_object_status,
            PODGROUP_GROUP,
            PODGROUP_VERSION,
            namespace,
            PODGROUP_PLURAL,
            name,
            body,
            _content_type="application/merge-patch+json",
        )

    def apply(self, action: SetCondition | ClearConditions) -> bool:
        """Make the write; False when nothing had to change. Raises ``ingest.kube.client.KubeError``."""
        namespace, _, name = action.job.partition("/")
        for attempt in range(_CONFLICT_RETRIES):
            obj = self._read(namespace, name)
            existing = list((obj.get("status") or {}).get("schedulingConditions") or [])
            version = str(obj.get("metadata", {}).get("resourceVersion", ""))
            if isinstance(action, SetCondition):
                cond = scheduling_condition(action.reason, action.message, action.queue)
                new = next_conditions(existing, cond, _now_rfc3339())
                if new is None:
                    return False
            else:
                if not existing:
                    return False
                new = None  # merge patch: null removes the field
            try:
                self._write(namespace, name, version, new)
                return True
            except Exception as e:  # ingest.kube.client.KubeError; 409 = someone wrote in between
                if getattr(e, "status", None) != 409 or attempt == _CONFLICT_RETRIES - 1:
                    raise
        return False  # pragma: no cover
