"""KAI's SchedulingShard read unchanged by `run --engine-config` and `fairshare --fairshare-config`.

The documents are KAI's own examples: the "Advanced Shard Configuration" of
``docs/operator/scheduling-shards.md`` and the scheduler configuration of
``docs/time-based-fairshare/README.md`` (usageDBConfig with windowSize / windowType / halfLifePeriod, kValue).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from fairshare.config import FairshareConfigError
from fairshare.settings import load_settings
from ingest.kube.kai_shard import ShardError, read_shard
from scheduler.config import EngineConfigError, load_engine_config

ADVANCED = """\
apiVersion: kai.scheduler/v1
kind: SchedulingShard
metadata:
  name: gpu-shard
spec:
  partitionLabelValue: gpu-nodes
  args:
    leader-elect: "true"
    log-level: "3"
  placementStrategy:
    gpu: spread
    cpu: binpack
  queueDepthPerAction:
    preempt: 15
    reclaim: 8
    allocate: 25
  minRuntime:
    preemptMinRuntime: "10m"
    reclaimMinRuntime: "5m"
"""

TIME_BASED = """\
apiVersion: kai.scheduler/v1
kind: SchedulingShard
metadata:
  name: default
spec:
  kValue: 0.5
  usageDBConfig:
    clientType: prometheus
    connectionString: http://prometheus-operated.kai-scheduler.svc.cluster.local:9090
    usageParams:
      windowSize: 1w
      windowType: sliding
      halfLifePeriod: 10m
  args:
    max-consolidation-preemptees: "4"
    default-staleness-grace-period: 2m
"""


def _file(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "shard.yaml"
    p.write_text(text)
    return p


def test_engine_config_from_kais_advanced_shard_example(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        cfg = load_engine_config(_file(tmp_path, ADVANCED))
    assert (cfg.gpu_placement, cfg.cpu_placement) == ("spread", "binpack")
    assert (cfg.default_preempt_min_runtime_ms, cfg.default_reclaim_min_runtime_ms) == (600_000, 300_000)
    assert cfg.k_value == 0.0  # no usageDBConfig: KAI has no usage history, time-based fair share is off
    assert (cfg.node_pool, cfg.node_pool_label) == (
        "gpu-nodes",
        "kai.scheduler/node-pool",
    )  # the shard's pool
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # every unsupported field in one warning
    for name in (
        "spec.queueDepthPerAction",
        "spec.args[leader-elect]",
        "spec.args[log-level]",
    ):
        assert name in warnings[0]
    assert "partitionLabelValue" not in warnings[0]


def test_time_based_fairshare_shard_for_both_services(tmp_path: Path) -> None:
    path = _file(tmp_path, TIME_BASED)
    cfg = load_engine_config(path)
    assert (cfg.k_value, cfg.max_consolidation_preemptees, cfg.stale_grace_ms) == (0.5, 4, 120_000)
    loaded = load_settings(path, environ={})
    s = loaded.settings
    assert (s.k_value, s.window_s, s.window_type, s.half_life_s) == (0.5, 604_800, "sliding", 600)
    assert loaded.prometheus == {"url": "http://prometheus-operated.kai-scheduler.svc.cluster.local:9090"}
    assert read_shard(yaml.safe_load(TIME_BASED)).unsupported == ("spec.usageDBConfig.clientType",)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"usageDBConfig": {"usageParams": {"windowType": "cron"}}}, "cron windows are not supported"),
        ({"args": {"queue-label-key": "team"}}, "queue-label-key"),
        ({"placementStrategy": {"gpu": "pack"}}, "binpack or spread"),
        ({"minRuntime": {"preemptMinRuntime": "soon"}}, "not a duration"),
        # KAI's docs/numa "Enable NUMA in KAI" shard, as written there.
        ({"plugins": {"numa": {"enabled": True}}}, r"spec\.plugins\.numa\.enabled: NUMA-aware placement"),
    ],
    ids=["cron-window", "queue-label-key", "bad-placement", "bad-duration", "numa-plugin"],
)
def test_fields_that_would_change_decisions_are_refused_naming_them(
    tmp_path: Path, patch: dict[str, object], message: str
) -> None:
    doc = {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard", "spec": patch}
    with pytest.raises(ShardError, match=message):
        read_shard(doc)
    path = _file(tmp_path, yaml.safe_dump(doc))
    with pytest.raises(EngineConfigError, match=message):
        load_engine_config(path)
    if "usageDBConfig" in patch:
        with pytest.raises(FairshareConfigError, match=message):
            load_settings(path, environ={})


def test_half_life_zero_or_negative_is_no_decay_as_kai() -> None:
    doc = {"kind": "SchedulingShard", "spec": {"usageDBConfig": {"usageParams": {"halfLifePeriod": "0s"}}}}
    shard = read_shard(doc)
    assert shard.fairshare["half_life_s"] is None and shard.fairshare["k_value"] == 1.0  # kValue default


def test_a_disabled_numa_plugin_is_only_listed_in_the_warning() -> None:
    shard = read_shard({"kind": "SchedulingShard", "spec": {"plugins": {"numa": {"enabled": False}}}})
    assert shard.unsupported == ("spec.plugins.numa",)


@pytest.mark.parametrize(("value", "expect"), [("1.2", 1.2), ("0.5", 1.0)], ids=["conservative", "below-one"])
def test_reclaim_sensitivity_is_the_argument_kais_proportion_plugin_reads(
    tmp_path: Path, value: str, expect: float
) -> None:
    """KAI v0.17 proportion.go reads ``relcaimerSaturationMultiplier`` (>= 1, else 1); docs/fairness spells
    it ``reclaimerUtilizationMultiplier``, which the plugin does not read: that one is only listed."""
    args = {"relcaimerSaturationMultiplier": value, "reclaimerUtilizationMultiplier": "1.5"}
    doc = {
        "kind": "SchedulingShard",
        "spec": {"plugins": {"proportion": {"arguments": args}, "topology": {}}},
    }
    shard = read_shard(doc)
    assert shard.engine["saturation_multiplier"] == expect
    assert shard.unsupported == (
        "spec.plugins.proportion.arguments.reclaimerUtilizationMultiplier",
        "spec.plugins.topology",
    )
    assert load_engine_config(_file(tmp_path, yaml.safe_dump(doc))).saturation_multiplier == expect


def test_stuck_in_releasing_threshold_is_read_from_the_shard_args(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``args.stuck-in-releasing-threshold`` (KAI ``cmd/scheduler/app/options/options.go``) sets the
    engine's threshold and is not in the unknown-fields warning; <= 0 keeps KAI's 2m default
    (``pkg/scheduler/api/pod_info/pod_info.go`` ApplyOptions)."""
    text = TIME_BASED + "    stuck-in-releasing-threshold: 5m\n"
    with caplog.at_level(logging.WARNING):
        cfg = load_engine_config(_file(tmp_path, text))
    assert cfg.stuck_in_releasing_ms == 300_000
    assert not any("stuck-in-releasing" in r.getMessage() for r in caplog.records)
    zero = load_engine_config(_file(tmp_path, TIME_BASED + '    stuck-in-releasing-threshold: "0"\n'))
    assert zero.stuck_in_releasing_ms == 120_000
