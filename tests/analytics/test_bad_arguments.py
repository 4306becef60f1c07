"""Bad command-line input gets rc 2 and one line naming the thing, never a silent success."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytics.cli import main


def test_a_negative_task_limit_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--limit-tasks", "-3"])
    assert e.value.code == 2
    assert "--limit-tasks: must be at least 1, not -3" in capsys.readouterr().err


def test_conformance_on_a_directory_without_scenarios_is_not_a_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["conformance", str(tmp_path)]) == 2
    out = capsys.readouterr()
    assert "no scenario files" in out.err and str(tmp_path) in out.err
    assert "0 passed" not in out.out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--lease-renew-deadline", "20"], "run: leader election timing must satisfy"),
        (["bind", "--lease-name", "Bad_Name"], "bind: --lease-name 'Bad_Name' is not a DNS subdomain"),
        (["run", "--node-pool", "GPU_pool"], "not a DNS subdomain: set --lease-name"),
        (
            ["bind", "--kubeconfig", "/nonexistent/kubeconfig"],
            "bind: no kubeconfig file at /nonexistent/kubeconfig",
        ),
    ],
)
def test_bad_leader_election_settings_are_refused_before_the_log_is_opened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    log = tmp_path / "log"
    assert main([*argv[:1], "--log", str(log), "--leader-elect", *argv[1:]]) == 2
    assert message in capsys.readouterr().err
    assert not log.exists()
