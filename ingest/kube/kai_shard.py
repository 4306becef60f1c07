"""KAI's scheduler configuration as it is: a ``kai.scheduler/v1`` ``SchedulingShard`` read with KAI's names.

``hourglass run --engine-config`` and ``hourglass fairshare --fairshare-config`` accept a SchedulingShard
YAML unchanged (``kubectl get schedulingshard default -o yaml`` works too). :func:`read_shard` maps each
field KAI documents (``pkg/apis/kai/v1/schedulingshard_types.go``, ``docs/operator/scheduling-shards.md``,
``docs/time-based-fairshare/README.md``) to the Hourglass setting with the same effect:

=====================================================  ==========================================
KAI field                                              Hourglass
=====================================================  ==========================================
``spec.kValue``                                        ``k_value`` (engine and fairshare)
``spec.usageDBConfig.usageParams.windowSize``          ``window_s``
``spec.usageDBConfig.usageParams.halfLifePeriod``      ``half_life_s`` (<= 0: no decay, as KAI)
``spec.usageDBConfig.usageParams.windowType``          ``window_type`` (sliding / tumbling)
``spec.usageDBConfig.usageParams.tumblingWindowStartTime``  ``tumbling_anchor_ms``
``spec.usageDBConfig.usageParams.fetchInterval``       ``refresh_s``
``spec.usageDBConfig.usageParams.stalenessPeriod``     ``staleness_s``
``spec.usageDBConfig.connectionString``                ``prometheus.url``
``spec.placementStrategy.gpu`` / ``.cpu``              ``gpu_placement`` / ``cpu_placement``
``spec.minRuntime.preemptMinRuntime`` / ``reclaim...``  ``default_preempt_min_runtime_ms`` / ``reclaim``
``spec.args["max-consolidation-preemptees"]``          ``max_consolidation_preemptees``
``spec.args["default-staleness-grace-period"]``        ``stale_grace_ms``
``spec.args["stuck-in-releasing-threshold"]``         ``stuck_in_releasing_ms`` (> 0, as KAI's flag)
``spec.partitionLabelValue`` / ``partitionLabelKey``     ``node_pool`` / ``node_pool_label`` (the shard's pool)
``spec.plugins.proportion.arguments.``                 ``saturation_multiplier`` (KAI's spelling, sic;
``relcaimerSaturationMultiplier``                      below 1 is 1, as KAI)
=====================================================  ==========================================

Time-based fair share follows KAI's default when reading a shard: **off** unless ``usageDBConfig`` is set
(KAI has no usage without a usage database, so its kValue has no effect); Hourglass's own default, with no
shard, is on (kValue 1.0 over the exact event-log ledger, which every Hourglass installation has).

Fields with no Hourglass equivalent that do not change where pods go are collected in one warning
(:attr:`ShardConfig.unsupported`): ``queueDepthPerAction`` (KAI caps the jobs tried per queue per action;
Hourglass tries every job, so it may place more in one cycle, never differently), ``plugins`` / ``actions`` overrides, other ``args``, ``clientType`` and
the other usage-DB client fields. Fields whose silent loss would change decisions are refused
(:class:`ShardError`): ``windowType: cron``, a ``queue-label-key`` other than ``kai.scheduler/queue`` and
``plugins.numa.enabled: true`` (KAI's NUMA-aware placement).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

__all__ = ["ShardConfig", "ShardError", "is_shard", "read_shard"]

_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h|d|w)")
_UNIT_S: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1,
    "m": 60,
    "h": 3600,
    "d": 86400,
    "w": 604800,
}
_QUEUE_LABEL: Final = "kai.scheduler/queue"


class ShardError(ValueError):
    """A SchedulingShard field Hourglass cannot honour and must not ignore; the message names it."""


@dataclass(frozen=True)
class ShardConfig:
    """What a SchedulingShard says, in Hourglass's terms."""

    engine: dict[str, Any] = field(default_factory=dict)  # SessionConfig fields
    fairshare: dict[str, Any] = field(default_factory=dict)  # FairshareConfig fields
    prometheus: dict[str, Any] | None = None  # the fairshare service's prometheus: mapping
    unsupported: tuple[str, ...] = ()  # field paths with no Hourglass equivalent (one warning)

    def warning(self, source: str) -> str | None:
        """The one warning listing every unsupported field, or None."""
        if not self.unsupported:
            return None
        return (
            f"{source}: KAI SchedulingShard field(s) without an Hourglass equivalent, ignored: "
            + ", ".join(self.unsupported)
            + " (docs/kai-compatibility.md)"
        )


def is_shard(data: object) -> bool:
    """A KAI SchedulingShard document (``kind: SchedulingShard``)."""
    return isinstance(data, dict) and data.get("kind") == "SchedulingShard"


def _seconds(path: str, raw: object) -> float:
    """A Kubernetes / Go duration (``1w``, ``10m``, ``1h30m``) in seconds; ShardError otherwise."""
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return float(raw)
    text = str(raw).strip()
    sign = -1 if text.startswith("-") else 1
    text = text.lstrip("+-")
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if pos == 0 or pos != len(text):
        raise ShardError(f"{path}: {raw!r} is not a duration such as 10m or 1w")
    return sign * total


def _placement(path: str, raw: object) -> str:
    if raw not in ("binpack", "spread"):
        raise ShardError(f"{path}: {raw!r} must be binpack or spread")
    return str(raw)


def _refuse_numa(plugins: object) -> None:
    """KAI's opt-in ``numa`` plugin (``docs/numa``) keeps a pod's resources within the NUMA zones the
    kubelet's topology manager will admit; Hourglass does not read NodeResourceTopology, so it would place
    pods the kubelet then rejects (TopologyAffinityError): refused rather than listed as ignored."""
    numa = plugins.get("numa") if isinstance(plugins, dict) else None
    if isinstance(numa, dict) and numa.get("enabled") is True:
        raise ShardError(
            "spec.plugins.numa.enabled: NUMA-aware placement is not supported (Hourglass does not read "
            "NodeResourceTopology); ignoring it would place pods across NUMA zones that KAI keeps apart"
        )


_SATURATION: Final = "relcaimerSaturationMultiplier"  # sic: the argument KAI v0.17's proportion plugin reads


def _plugins(plugins: object, engine: dict[str, Any], unsupported: list[str]) -> None:
    """``plugins.proportion.arguments.relcaimerSaturationMultiplier`` (KAI's reclaim sensitivity, read under
    that spelling by ``pkg/scheduler/plugins/proportion/proportion.go``) becomes ``saturation_multiplier``;
    every other plugin setting is listed in the warning. As KAI, a value below 1 is taken as 1."""
    if plugins is None:
        return
    if not isinstance(plugins, dict):
        raise ShardError(f"spec.plugins: must be a mapping, not {plugins!r}")
    for name in sorted(plugins):
        plugin = plugins[name]
        args = plugin.get("arguments") if isinstance(plugin, dict) else None
        if name != "proportion" or not isinstance(args, dict) or _SATURATION not in args:
            unsupported.append(f"spec.plugins.{name}")
            continue
        where = f"spec.plugins.proportion.arguments.{_SATURATION}"
        try:
            value = float(str(args[_SATURATION]))
        except ValueError:
            raise ShardError(f"{where}: {args[_SATURATION]!r} must be a number") from None
        engine["saturation_multiplier"] = max(value, 1.0)
        unsupported += [f"spec.plugins.proportion.{k}" for k in sorted(plugin) if k != "arguments"]
        unsupported += [f"spec.plugins.proportion.arguments.{k}" for k in sorted(args) if k != _SATURATION]


def read_shard(doc: dict[str, Any]) -> ShardConfig:
    """Map a SchedulingShard document to engine / fairshare settings (module doc); ShardError on a field
    whose loss would change decisions or a value that is not KAI's form."""
    spec = doc.get("spec") or {}
    if not isinstance(spec, dict):
        raise ShardError("spec: must be a mapping")
    engine: dict[str, Any] = {}
    fair: dict[str, Any] = {}
    prom: dict[str, Any] | None = None
    unsupported: list[str] = []
    handled = {"kValue", "usageDBConfig", "placementStrategy", "minRuntime", "args"}
    handled |= {"partitionLabelValue", "partitionLabelKey"}  # the shard's node pool, below
    handled |= {"plugins"}  # the saturation multiplier; the rest is listed by _plugins
    unsupported += [f"spec.{k}" for k in sorted(spec) if k not in handled]
    _refuse_numa(spec.get("plugins"))
    _plugins(spec.get("plugins"), engine, unsupported)
    # The shard's node pool (docs/deploy.md "Node pools and scheduling shards").
    for key, name in (("partitionLabelValue", "node_pool"), ("partitionLabelKey", "node_pool_label")):
        if key in spec:
            value = spec[key]
            if not isinstance(value, str):
                raise ShardError(f"spec.{key}: must be a string, not {value!r}")
            engine[name] = value

    usage = spec.get("usageDBConfig")
    if usage:
        k = spec.get("kValue", 1.0)
        params = usage.get("usageParams") or {}
        for key in sorted(usage):
            if key == "connectionString":
                prom = {"url": str(usage[key])}
            elif key != "usageParams":
                unsupported.append(f"spec.usageDBConfig.{key}")
        for key in sorted(params):
            where, value = f"spec.usageDBConfig.usageParams.{key}", params[key]
            if key == "windowSize":
                fair["window_s"] = _seconds(where, value)
            elif key == "halfLifePeriod":
                half = _seconds(where, value)
                fair["half_life_s"] = half if half > 0 else None  # KAI: <= 0 disables decay
            elif key == "windowType":
                if value == "cron":
                    raise ShardError(
                        f"{where}: cron windows are not supported (Hourglass has sliding and tumbling); "
                        "ignoring it would reset usage at other times than KAI does"
                    )
                if value not in ("sliding", "tumbling"):
                    raise ShardError(f"{where}: {value!r} must be sliding or tumbling")
                fair["window_type"] = value
            elif key == "tumblingWindowStartTime":
                try:
                    when = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
                except ValueError:
                    raise ShardError(f"{where}: {value!r} is not an RFC 3339 time") from None
                fair["tumbling_anchor_ms"] = int(when.timestamp() * 1000)
            elif key == "fetchInterval":
                fair["refresh_s"] = _seconds(where, value)
            elif key == "stalenessPeriod":
                fair["staleness_s"] = _seconds(where, value)
            else:
                unsupported.append(where)
    else:
        # KAI without a usage database has no usage history, so its kValue has no effect: off.
        k = 0.0
    if isinstance(k, bool) or not isinstance(k, int | float) or k < 0:
        raise ShardError(f"spec.kValue: {k!r} must be a number >= 0")
    engine["k_value"] = fair["k_value"] = float(k)

    placement = spec.get("placementStrategy") or {}
    for key in sorted(placement):
        if key in ("gpu", "cpu"):
            engine[f"{key}_placement"] = _placement(f"spec.placementStrategy.{key}", placement[key])
        else:
            unsupported.append(f"spec.placementStrategy.{key}")
    runtime = spec.get("minRuntime") or {}
    for key in sorted(runtime):
        where = f"spec.minRuntime.{key}"
        if key in ("preemptMinRuntime", "reclaimMinRuntime"):
            kind = key.removesuffix("MinRuntime")
            engine[f"default_{kind}_min_runtime_ms"] = round(_seconds(where, runtime[key]) * 1000)
        else:
            unsupported.append(where)
    args = spec.get("args") or {}
    for key in sorted(args):
        where, value = f"spec.args[{key}]", args[key]
        if key == "max-consolidation-preemptees":
            try:
                engine["max_consolidation_preemptees"] = int(str(value))
            except ValueError:
                raise ShardError(f"{where}: {value!r} must be a whole number") from None
        elif key == "default-staleness-grace-period":
            grace = _seconds(where, value)
            engine["stale_grace_ms"] = -1 if grace < 0 else round(grace * 1000)
        elif key == "stuck-in-releasing-threshold":
            threshold = round(_seconds(where, value) * 1000)
            if threshold <= 0:
                # KAI keeps its 2m default for a threshold <= 0 (pod_info.go ApplyOptions).
                engine.pop("stuck_in_releasing_ms", None)
            else:
                engine["stuck_in_releasing_ms"] = threshold
        elif key == "queue-label-key":
            if value != _QUEUE_LABEL:
                raise ShardError(
                    f"{where}: {value!r}: Hourglass reads the queue from the {_QUEUE_LABEL} label only; "
                    "ignoring the key would put pods in other queues than KAI does"
                )
        else:
            unsupported.append(where)
    return ShardConfig(engine, fair, prom, tuple(unsupported))
