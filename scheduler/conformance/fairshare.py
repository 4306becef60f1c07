"""Run KAI conformance *fair-share* scenarios (``run.mode == "fair_share"``) against :mod:`proportion`.

File format: scheduler/conformance/scenarios/kai/SCHEMA.md, "Fair-share scenarios". Files give GPUs as (possibly
fractional) devices, CPU in millicores and memory in bytes, under the keys ``gpu``, ``cpu_millicores`` and
``memory_bytes``; the engine works in milli-GPU / millicores / bytes under ``gpu``, ``cpu``, ``memory``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from scheduler.engine.proportion import (
    RESOURCES,
    QueueDemand,
    ResourceQuota,
    divide,
    to_fraction,
    unassigned,
)

__all__ = ["FILE_KEYS", "check_fair_share_scenario", "fair_share_scenario_inputs", "from_engine", "to_engine"]

FILE_KEYS: dict[str, str] = {"gpu": "gpu", "cpu": "cpu_millicores", "memory": "memory_bytes"}
"""Engine resource name -> scenario-file key."""

_SCALE: dict[str, int] = {"gpu": 1000, "cpu": 1, "memory": 1}

# SCHEMA.md queue defaults for a resource entry's missing fields: (quota, limit, over_quota_weight).
# GPU defaults to quota 0 / weight 0 (how KAI's Go tests build queues); CPU and memory to unlimited / 1.
_DEFAULTS: dict[str, tuple[float | None, float | None, float]] = {
    "gpu": (0, None, 0),
    "cpu": (None, None, 1),
    "memory": (None, None, 1),
}


def to_engine(resource: str, amount: float | int) -> int:
    """File units -> engine units (GPU devices x 1000, rounded to an integer milli-GPU)."""
    return round(to_fraction(amount) * _SCALE[resource])


def from_engine(resource: str, amount: int) -> float:
    """Engine units -> file units."""
    return float(Fraction(amount, _SCALE[resource]))


def _optional(resource: str, amount: float | int | None) -> int | None:
    return None if amount is None else to_engine(resource, amount)


def fair_share_scenario_inputs(doc: dict[str, Any]) -> tuple[dict[str, int], list[QueueDemand], float]:
    """Build ``(total, queues, k_value)`` for :func:`scheduler.engine.proportion.divide` from a scenario document.

    List order is creation order (``QueueDemand.order`` = index). A resource missing from a queue entry
    means that queue requests none of it; its quota, limit and weight take the SCHEMA defaults (they still
    matter for a parent queue, whose request is its children's sum).
    """
    run = doc.get("run", {})
    if run.get("mode") != "fair_share":
        raise ValueError(f"not a fair-share scenario: run.mode = {run.get('mode')!r}")
    fs_input = doc["fair_share_input"]
    file_total: dict[str, Any] = fs_input.get("total", {})
    total = {r: to_engine(r, file_total.get(FILE_KEYS[r], 0)) for r in RESOURCES}

    queues: list[QueueDemand] = []
    for index, entry in enumerate(fs_input["queues"]):
        resources: dict[str, ResourceQuota] = {}
        requested: dict[str, int] = {}
        for r in RESOURCES:
            spec: dict[str, Any] = entry.get(FILE_KEYS[r], {})
            quota_d, limit_d, weight_d = _DEFAULTS[r]
            resources[r] = ResourceQuota.of(
                quota=_optional(r, spec.get("quota", quota_d)),
                limit=_optional(r, spec.get("limit", limit_d)),
                weight=spec.get("over_quota_weight", weight_d),
            )
            requested[r] = to_engine(r, spec.get("requested", 0))
        queues.append(
            QueueDemand(
                name=entry["name"],
                parent=entry.get("parent"),
                priority=int(entry.get("priority", 100)),
                order=index,
                resources=resources,
                requested=requested,
            )
        )
    return total, queues, float(run.get("k_value", 0.0))


def check_fair_share_scenario(doc: dict[str, Any]) -> list[str]:
    """Run one fair-share scenario; return human-readable mismatches (empty list = pass).

    Checks every share listed in ``expect.fair_share`` and, when present, ``expect.unassigned``, each within
    ``expect.tolerance`` (absolute, in file units).
    """
    total, queues, k_value = fair_share_scenario_inputs(doc)
    shares = divide(total, queues, k_value)
    expect = doc.get("expect", {})
    tolerance = float(expect.get("tolerance", 1e-6))
    engine_key = {file_key: r for r, file_key in FILE_KEYS.items()}
    problems: list[str] = []

    def compare(what: str, file_key: str, expected: float, got_engine: int) -> None:
        got = from_engine(engine_key[file_key], got_engine)
        if abs(got - float(expected)) > tolerance:
            problems.append(f"{what} {file_key}: expected {expected}, got {got}")

    for queue, expected_shares in expect.get("fair_share", {}).items():
        if queue not in shares:
            problems.append(f"fair_share {queue}: queue missing from the division result")
            continue
        for file_key, expected in expected_shares.items():
            if file_key not in engine_key:
                problems.append(f"fair_share {queue}: unknown resource key {file_key!r}")
                continue
            compare(f"fair_share {queue}", file_key, expected, shares[queue].fair_share[engine_key[file_key]])

    left = unassigned(total, shares)
    for file_key, expected in expect.get("unassigned", {}).items():
        if file_key not in engine_key:
            problems.append(f"unassigned: unknown resource key {file_key!r}")
            continue
        compare("unassigned", file_key, expected, left[engine_key[file_key]])
    return problems
