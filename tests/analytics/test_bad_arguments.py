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
