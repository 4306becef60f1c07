"""One fair-share setting for `hourglass run` and `hourglass fairshare` (fairshare/settings.py).

* KAI's defaults: time-based fair share is on (kValue 1, a 1-week sliding window, no half-life).
* Layers: flag > HOURGLASS_FAIRSHARE_* env > --fairshare-config file > default, the same for both services.
* A bad value is an error naming field, value and where it came from, never a traceback.
* End to end: the same environment drives both processes; the scheduler's bind order follows k_value.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fairshare.config import FairshareConfigError
from fairshare.settings import FairshareSettings, load_settings
from ingest import events as ev
from ingest.events import dump_event
from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS, Log
from scheduler.engine.record.decisions import CycleRecord, config_hash
from scheduler.engine.session import SessionConfig
from tests.support.paths import REPO_ROOT

S = 1000


def test_defaults_are_kais_and_time_based_fair_share_is_on() -> None:
    s = load_settings(environ={}).settings
    assert (s.k_value, s.half_life_s, s.window_s, s.window_type, s.refresh_s, s.staleness_s) == (
        1.0,
        None,
        7 * 24 * 3600,
        "sliding",
        60,
        300,
    )
    # The engine's own default agrees, so `hourglass replay` without --engine-config matches `run`.
    assert SessionConfig().k_value == s.k_value


@pytest.mark.parametrize(
    ("file", "env", "cli", "expect", "origin"),
    [
        (None, {}, {}, 1.0, "default"),
        ("k_value: 0.5\n", {}, {}, 0.5, "file"),
        ("k_value: 0.5\n", {"HOURGLASS_FAIRSHARE_K_VALUE": "2"}, {}, 2.0, "env HOURGLASS_FAIRSHARE_K_VALUE"),
        ("k_value: 0.5\n", {"HOURGLASS_FAIRSHARE_K_VALUE": "2"}, {"k_value": "3"}, 3.0, "flag --k-value"),
        (None, {"hourglass_fairshare_k_value": "0"}, {}, 0.0, "env HOURGLASS_FAIRSHARE_K_VALUE"),
    ],
    ids=["default", "file", "env-over-file", "flag-over-env", "env-lower-case-off"],
)
def test_flag_over_env_over_file_over_default(
    tmp_path: Path, file: str | None, env: dict[str, str], cli: dict[str, Any], expect: float, origin: str
) -> None:
    path = None
    if file is not None:
        path = tmp_path / "fs.yaml"
        path.write_text(file)
    loaded = load_settings(path, cli, environ=env)
    assert loaded.settings.k_value == expect
    got = loaded.origins.get("k_value", "default")
    assert got == (f"file {path}" if origin == "file" else origin)


def test_each_field_has_its_env_var_and_null_means_none(tmp_path: Path) -> None:
    path = tmp_path / "fs.yaml"
    path.write_text("half_life_s: 600\nprometheus: {url: 'http://p:9090'}\n")
    env = {
        "HOURGLASS_FAIRSHARE_HALF_LIFE_S": "null",
        "HOURGLASS_FAIRSHARE_WINDOW_S": "3600",
        "HOURGLASS_FAIRSHARE_WINDOW_TYPE": "tumbling",
        "HOURGLASS_FAIRSHARE_TUMBLING_ANCHOR_MS": "1000",
        "HOURGLASS_FAIRSHARE_REFRESH_S": "5",
        "HOURGLASS_FAIRSHARE_STALENESS_S": "0",
        "PATH": "/bin",  # unrelated variables are ignored
    }
    loaded = load_settings(path, environ=env)
    s = loaded.settings
    assert (s.half_life_s, s.window_s, s.window_type, s.tumbling_anchor_ms, s.refresh_s, s.staleness_s) == (
        None,
        3600,
        "tumbling",
        1000,
        5,
        0,
    )
    assert loaded.prometheus == {"url": "http://p:9090"}
    assert "window_s=3600 (env HOURGLASS_FAIRSHARE_WINDOW_S)" in loaded.describe()


@pytest.mark.parametrize(
    ("file", "env", "cli", "message"),
    [
        (
            None,
            {"HOURGLASS_FAIRSHARE_K_VALUE": "-1"},
            {},
            "k_value = '-1' (from env HOURGLASS_FAIRSHARE_K_VALUE)",
        ),
        (
            None,
            {},
            {"k_value": "lots"},
            "k_value = 'lots' (from flag --k-value): Input should be a valid number",
        ),
        (None, {}, {"window_s": "0"}, "window_s = '0' (from flag --window): must be > 0 seconds"),
        ("window_type: cron\n", {}, {}, "window_type = 'cron' (from file"),
        (
            None,
            {"HOURGLASS_FAIRSHARE_KVALUE": "2"},
            {},
            "unknown environment variable(s) HOURGLASS_FAIRSHARE_KVALUE",
        ),
        ("kvalue: 2\n", {}, {}, "unknown setting(s) kvalue"),
        ("- 1\n", {}, {}, "expected a mapping of settings, got list"),
        (None, {"HOURGLASS_FAIRSHARE_K_VALUE": "inf"}, {}, "k_value must be finite"),
    ],
    ids=[
        "negative-env",
        "not-a-number-flag",
        "zero-window",
        "cron-file",
        "misspelt-env",
        "misspelt-file",
        "not-a-mapping",
        "infinite",
    ],
)
def test_bad_values_name_field_value_and_source(
    tmp_path: Path, file: str | None, env: dict[str, str], cli: dict[str, Any], message: str
) -> None:
    path = None
    if file is not None:
        path = tmp_path / "fs.yaml"
        path.write_text(file)
    with pytest.raises(FairshareConfigError) as info:
        load_settings(path, cli, environ=env)
    assert message in str(info.value)


def test_direct_construction_ignores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Library callers and tests get exactly what they pass, whatever the process environment says."""
    monkeypatch.setenv("HOURGLASS_FAIRSHARE_K_VALUE", "7")
    assert FairshareSettings().k_value == 1.0
    assert load_settings().settings.k_value == 7.0  # only load_settings reads os.environ


# ----------------------------------------------------------------------------- both services, end to end


def _append(log: Log, events: list[ev.EventBase]) -> None:
    log.append_many(DEFAULT_TOPICS.events, [(e.uid.encode(), dump_event(e)) for e in events])


def _history() -> list[ev.EventBase]:
    """Queue `a` held the whole 4-GPU node for 100 s; then `a` and `b` each submit a 4-GPU job."""

    def job(queue: str, name: str, at: int) -> list[ev.EventBase]:
        return [
            ev.PodGroupUpserted(at_ms=at, name=name, namespace="ns", queue=queue, created_at_ms=at),
            ev.PodSubmitted(
                at_ms=at,
                name=name,
                namespace="ns",
                pod_group=name,
                requests=ev.PodRequests(gpus=4),
                created_at_ms=at,
            ),
        ]

    return [
        ev.NodeUpserted(at_ms=0, name="n1", cpu_millicores=8000, memory_bytes=2**34, gpus=4),
        ev.QueueUpserted(at_ms=0, name="a"),
        ev.QueueUpserted(at_ms=0, name="b"),
        *job("a", "old", 0),
        ev.PodBound(at_ms=0, name="old", namespace="ns", node="n1"),
        ev.PodFinished(at_ms=100 * S, name="old", namespace="ns", phase="Succeeded"),
        *job("a", "a2", 100 * S),
        *job("b", "b2", 100 * S),
    ]


def _hourglass(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import os

    full = {k: v for k, v in os.environ.items() if not k.upper().startswith("HOURGLASS_FAIRSHARE_")} | env
    return subprocess.run(
        [sys.executable, "-m", "analytics.cli", *args],
        cwd=REPO_ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("env", "flags", "k_value", "first_bound"),
    [
        ({}, [], 1.0, "b"),  # defaults: time-based fair share on, `a` used the cluster, `b` goes first
        ({"HOURGLASS_FAIRSHARE_K_VALUE": "0"}, [], 0.0, "a"),  # off by env: classic order, `a` first
        ({"HOURGLASS_FAIRSHARE_K_VALUE": "0"}, ["--k-value", "2"], 2.0, "b"),  # the flag beats env
    ],
    ids=["default-on", "env-off", "flag-over-env"],
)
def test_one_setting_drives_fairshare_and_the_scheduler(
    tmp_path: Path, env: dict[str, str], flags: list[str], k_value: float, first_bound: str
) -> None:
    logdir = tmp_path / "log"
    cfg = tmp_path / "fs.yaml"
    cfg.write_text("window_s: 3600\nhalf_life_s: 600\n")
    with FileLog(logdir) as log:
        _append(log, _history())
    common = ["--log", str(logdir), "--fairshare-config", str(cfg), *flags]
    fs = _hourglass(["fairshare", "--once", *common], env)
    assert fs.returncode == 0, fs.stderr
    assert f"k_value={k_value!r}" in fs.stderr  # the settings line it logs
    run = _hourglass(["run", "--stop-when-idle", "--period", "0", *common], env)
    assert run.returncode == 0, run.stderr
    assert f"k_value={k_value!r}" in run.stderr
    with FileLog(logdir) as log:
        records = [
            CycleRecord.model_validate_json(r.value) for r in log.read(DEFAULT_TOPICS.decisions, 0, 1000)
        ]
    assert {r.config_hash for r in records} == {config_hash(SessionConfig(k_value=k_value))}
    binds = [d.queue for r in records for d in r.decisions if d.kind == "Bind"]
    assert binds[0] == first_bound


@pytest.mark.parametrize(
    ("args", "engine", "message"),
    [
        (["--k-value", "-0.5"], None, "k_value = '-0.5' (from flag --k-value): k_value must be >= 0"),
        (["--window-type", "cron"], None, "window_type = 'cron' (from flag --window-type)"),
        ([], "k_value: 0.5\n", "sets k_value 0.5, but the fair-share settings give 1.0 (default)"),
    ],
    ids=["negative-k", "bad-window-type", "engine-config-disagrees"],
)
def test_run_refuses_bad_or_conflicting_settings(
    tmp_path: Path, args: list[str], engine: str | None, message: str
) -> None:
    extra = []
    if engine is not None:
        (tmp_path / "engine.yaml").write_text(engine)
        extra = ["--engine-config", str(tmp_path / "engine.yaml")]
    out = _hourglass(["run", "--log", str(tmp_path / "log"), "--stop-when-idle", *args, *extra], {})
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_run_accepts_an_engine_config_that_agrees(tmp_path: Path) -> None:
    (tmp_path / "engine.yaml").write_text("k_value: 0.5\nstale_grace_ms: 1000\n")
    out = _hourglass(
        ["run", "--log", str(tmp_path / "log"), "--stop-when-idle", "--engine-config", str(tmp_path / "engine.yaml")],
        {"HOURGLASS_FAIRSHARE_K_VALUE": "0.5"},
    )
    assert out.returncode == 0, out.stderr
