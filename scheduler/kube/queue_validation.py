"""The Queue admission rules of KAI's queue webhook (``pkg/admission/webhook/queuehooks/queue_validator.go``).

Served by ``hourglass webhook`` on :data:`VALIDATE_PATH` when a ValidatingWebhookConfiguration sends it
Queue requests (the chart's ``queueWebhook.enabled``):

* **CREATE / UPDATE** of a Queue without ``spec.resources`` is denied with KAI's message, ``resources must be
  specified``.
* **DELETE** of a Queue that still has child queues is denied: ``cannot delete queue <name>: it has child
  queues [<children>]``. Without this rule the children would be left pointing at a parent that is gone.
* **Quota warnings**, only with ``--enable-quota-validation`` (KAI's queue-controller flag of the same name,
  off by default): admission *warnings*, never a denial, which ``kubectl`` prints as ``Warning: …``:

  - a child's CPU, GPU or memory quota above its parent's, and the children's summed CPU quota above the
    parent's, when a Queue naming a ``parentQueue`` is created or updated;
  - each child's CPU quota above the parent's, and the children's summed CPU, GPU and memory quotas above
    the parent's, when a parent is updated.

  The messages are KAI's word for word (CPU and memory printed with no decimals, GPU with two).

Where Hourglass differs from KAI, and why:

* The children of a queue are the Queues whose ``spec.parentQueue`` names it, listed from the API server at
  admission time. KAI reads the parent's ``status.childQueues``, which its queue controller writes after the
  fact; a child created a moment ago is already counted here.
* An unlimited quota (``-1``) is read as unlimited: it never "is exceeded", and a child's unlimited quota
  exceeds any finite parent. KAI compares the raw numbers, so it warns that any child exceeds a parent of
  ``-1`` and lets a ``-1`` child lower the sum.
* A missing parent queue is a warning here (``parent queue … does not exist``), not a denial: KAI refuses
  to admit the child (``failed to get parent queue``), but Hourglass already accepts such a queue and holds
  its pods pending with a reason naming the missing parent, so the order in which manifests are applied
  does not matter.

:func:`validate` is pure: it answers from the request and a :class:`QueueLookup` of the other Queues.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

__all__ = [
    "MISSING_RESOURCES",
    "VALIDATE_PATH",
    "ApiQueueLookup",
    "QueueLookup",
    "Verdict",
    "validate",
]

VALIDATE_PATH: Final = "/validate-queues"
MISSING_RESOURCES: Final = "resources must be specified"  # KAI's missingResourcesError

_UNLIMITED: Final = -1.0


class QueueLookup(Protocol):
    """The other Queues, as the API server holds them at admission time."""

    def get(self, name: str) -> Mapping[str, Any] | None:
        """The Queue called ``name``, or None when there is none."""
        ...

    def children(self, name: str) -> Sequence[Mapping[str, Any]]:
        """The Queues whose ``spec.parentQueue`` is ``name``, ordered by name."""
        ...


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the webhook answers: allowed or not (with the reason), and the warnings shown to the user."""

    allowed: bool
    message: str = ""
    warnings: tuple[str, ...] = field(default_factory=tuple)


def _name(queue: Mapping[str, Any]) -> str:
    return str((queue.get("metadata") or {}).get("name") or "")


def _spec(queue: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = queue.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _resources(queue: Mapping[str, Any]) -> Mapping[str, Any] | None:
    res = _spec(queue).get("resources")
    return res if isinstance(res, Mapping) else None


def _quota(queue: Mapping[str, Any], resource: str) -> float:
    """``spec.resources.<resource>.quota`` as KAI's float (0 when unset; unlimited as +inf)."""
    entry = (_resources(queue) or {}).get(resource)
    raw = entry.get("quota", 0) if isinstance(entry, Mapping) else 0
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return 0.0  # the CRD schema refuses a non-number; ingest names the field if one gets through
    return math.inf if value == _UNLIMITED else value


def _fmt(value: float, decimals: int) -> str:
    return "unlimited" if math.isinf(value) else f"{value:.{decimals}f}"


def _child_warnings(child: Mapping[str, Any], parent: Mapping[str, Any], lookup: QueueLookup) -> list[str]:
    """KAI's ``validateParentChildQuota``: ``child`` (created or updated) against its parent."""
    pname = _name(parent)
    warnings: list[str] = []
    child_cpu, parent_cpu = _quota(child, "cpu"), _quota(parent, "cpu")
    if child_cpu > parent_cpu:
        warnings.append(
            f"child queue CPU quota ({_fmt(child_cpu, 0)}) exceeds parent queue {pname} CPU quota ({_fmt(parent_cpu, 0)})"
        )
    total_cpu = child_cpu + sum(
        _quota(sibling, "cpu")
        for sibling in lookup.children(pname)
        if _name(sibling) != _name(child) and _resources(sibling) is not None
    )
    if total_cpu > parent_cpu:
        warnings.append(
            f"total children CPU quota ({_fmt(total_cpu, 0)}) exceeds parent queue {pname} CPU quota"
            f" ({_fmt(parent_cpu, 0)})"
        )
    for resource, label, decimals in (("gpu", "GPU", 2), ("memory", "Memory", 0)):
        mine, theirs = _quota(child, resource), _quota(parent, resource)
        if mine > theirs:
            warnings.append(
                f"child queue {label} quota ({_fmt(mine, decimals)}) exceeds parent queue {pname} {label} quota"
                f" ({_fmt(theirs, decimals)})"
            )
    return warnings


def _parent_warnings(parent: Mapping[str, Any], lookup: QueueLookup) -> list[str]:
    """KAI's ``validateChildrenQuotaSum``: an updated parent against its children."""
    children = [c for c in lookup.children(_name(parent)) if _resources(c) is not None]
    if not children:
        return []
    warnings: list[str] = []
    parent_cpu = _quota(parent, "cpu")
    for child in children:
        cpu = _quota(child, "cpu")
        if cpu > parent_cpu:
            warnings.append(
                f"child queue {_name(child)} CPU quota ({_fmt(cpu, 0)}) exceeds parent CPU quota"
                f" ({_fmt(parent_cpu, 0)})"
            )
    for resource, label, decimals in (("cpu", "CPU", 0), ("gpu", "GPU", 2), ("memory", "Memory", 0)):
        total = sum(_quota(c, resource) for c in children)
        theirs = _quota(parent, resource)
        if total > theirs:
            warnings.append(
                f"total children {label} quota ({_fmt(total, decimals)}) exceeds parent {label} quota"
                f" ({_fmt(theirs, decimals)})"
            )
    return warnings


def validate(
    operation: str,
    queue: Mapping[str, Any] | None,
    old_queue: Mapping[str, Any] | None,
    lookup: QueueLookup,
    *,
    quota_validation: bool = False,
) -> Verdict:
    """KAI's Queue admission for one request.

    ``operation`` is the AdmissionReview's (``CREATE``, ``UPDATE``, ``DELETE``); ``queue`` its ``object``
    and ``old_queue`` its ``oldObject`` (the only one a DELETE carries). ``quota_validation`` turns on the
    parent/child quota warnings (KAI's ``--enable-quota-validation``).
    """
    if operation == "DELETE":
        gone = old_queue or queue or {}
        children = sorted(_name(c) for c in lookup.children(_name(gone)))
        if children:
            return Verdict(
                False, f"cannot delete queue {_name(gone)}: it has child queues [{' '.join(children)}]"
            )
        return Verdict(True)
    if operation not in ("CREATE", "UPDATE") or queue is None:
        return Verdict(True)
    if _resources(queue) is None:
        return Verdict(False, MISSING_RESOURCES, (MISSING_RESOURCES,))
    if not quota_validation:
        return Verdict(True)
    warnings: list[str] = []
    parent_name = _spec(queue).get("parentQueue")
    if isinstance(parent_name, str) and parent_name:
        parent = lookup.get(parent_name)
        if parent is None:
            warnings.append(f"parent queue {parent_name} does not exist")
        elif _resources(parent) is None:
            warnings.append(f"parent queue {parent_name} has no resources defined")
        else:
            warnings += _child_warnings(queue, parent, lookup)
    if operation == "UPDATE":
        warnings += _parent_warnings(queue, lookup)
    return Verdict(True, "", tuple(warnings))


class ApiQueueLookup:
    """:class:`QueueLookup` from the API server (``scheduling.run.ai/v2`` Queues, one list per request)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._custom = client.CustomObjectsApi(api_client)
        self._cache: list[Mapping[str, Any]] | None = None

    def _all(self) -> list[Mapping[str, Any]]:
        if self._cache is None:
            listed: Any = self._custom.list_cluster_custom_object("scheduling.run.ai", "v2", "queues")
            self._cache = sorted(listed.get("items") or [], key=_name)
        return self._cache

    def get(self, name: str) -> Mapping[str, Any] | None:
        """The Queue called ``name`` in this request's listing."""
        return next((q for q in self._all() if _name(q) == name), None)

    def children(self, name: str) -> Sequence[Mapping[str, Any]]:
        """The Queues naming ``name`` as their ``spec.parentQueue``."""
        return [q for q in self._all() if _spec(q).get("parentQueue") == name]
