"""Bad configuration gets one clear line naming the field, exit code 2: no traceback, no pydantic dump."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytics.cli import main

NESTED = "a: " + "[" * 1000 + "]" * 1000 + "\n"  # past the parser's recursion limit


@pytest.mark.parametrize(
    ("command", "file", "text", "wants"),
    [
        ("run", "--fairshare-config", "window_s: 100000000000000000000\n", ["window_s", "ten years"]),
        ("run", "--fairshare-config", "window_s: 1.0e+20\n", ["window_s"]),
        ("run", "--fairshare-config", "half_life_s: 99999999999999\n", ["half_life_s", "ten years"]),
        ("run", "--fairshare-config", "k_value: .inf\n", ["k_value", "finite"]),
        ("run", "--fairshare-config", "k_value: 1e300\n", ["k_value", "at most"]),
        ("run", "--fairshare-config", "tumbling_anchor_ms: 9223372036854775807\n", ["tumbling_anchor_ms"]),
        ("run", "--fairshare-config", NESTED, ["nested too deeply"]),
        ("fairshare", "--fairshare-config", NESTED, ["nested too deeply"]),
        ("run", "--engine-config", NESTED, ["nested too deeply"]),
        ("run", "--engine-config", "stale_grace_ms: 1e20\n", ["stale_grace_ms", "whole number"]),
        (
            "run",
            "--engine-config",
            "stale_grace_ms: 100000000000000000000\n",
            ["stale_grace_ms", "from 0 to"],
        ),
        ("run", "--engine-config", "saturation_multiplier: .nan\n", ["saturation_multiplier"]),
        ("run", "--engine-config", "fair_share_enabled: 1\n", ["fair_share_enabled", "true or false"]),
        (
            "fairshare",
            "--fairshare-config",
            "prometheus:\n  step_s: -1\n  url: prom:9090\n  deadline_s: 1e9\n  bogus: 1\n",
            [
                "prometheus.step_s = -1",
                "prometheus.url = 'prom:9090'",
                "prometheus.deadline_s",
                "prometheus.bogus",
            ],
        ),
    ],
)
def test_bad_settings_give_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    file: str,
    text: str,
    wants: list[str],
) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(text)
    extra = ["--source", "prometheus", "--once"] if command == "fairshare" else ["--once"]
    assert main([command, "--log", str(tmp_path / "log"), file, str(cfg), *extra]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if " INFO " not in line]
    assert len(err) == 1, err
    assert err[0].startswith(f"{command}: ") and "Traceback" not in err[0] and "pydantic.dev" not in err[0]
    for want in wants:
        assert want in err[0], err[0]
    assert len(err[0]) < 1000


def test_run_once_exits_when_nothing_is_new(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--log", str(tmp_path / "log"), "--once"]) == 0
    assert "0 records read" in capsys.readouterr().out
