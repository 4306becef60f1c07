"""Progress of the long commands as a user sees it: on stderr, only when stderr is a terminal, never on
stdout. Each case runs the command in a child process whose stderr is a pseudo-terminal (progress expected)
or a pipe (nothing expected), with stdout always a pipe that must carry the results alone."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from analytics.cli import main
from tests.support.paths import REPO_ROOT

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_BAR = "━"

# placement-benchmark with the seeds themselves replaced: the test is about where the output goes.
_BENCHMARK = """
import sys, time
import analytics.simulation.placement_benchmark as pb
from analytics.cli import main

def fake(policy, seeds, pods, nodes, jobs=1, on_result=None, **options):
    out = []
    for s in seeds:
        time.sleep(0.3)  # long enough for the bar to be drawn
        r = pb.SeedResult(policy, s, 10, 9, 1, 1000, arrived=[1000, 1300], allocated=[900, 950], seconds=0.3)
        out.append(r)
        on_result(r)
    return out

pb.run_benchmark = fake
sys.exit(main(["placement-benchmark", "--seeds", "2", "--policy", "fgd"]))
"""


def _run(code: str, *, tty_stderr: bool) -> tuple[int, str, str]:
    """Run ``code`` in a child Python: (rc, stdout, stderr without terminal control sequences)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "100"}
    env.pop("FORCE_COLOR", None)
    env.pop("TTY_COMPATIBLE", None)
    if not tty_stderr:
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=False
        )
        return proc.returncode, proc.stdout, proc.stderr
    master, slave = pty.openpty()
    with subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=slave, env=env, text=True
    ) as child:
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        out = child.stdout.read() if child.stdout else ""
        rc = child.wait(timeout=300)
    os.close(master)
    return rc, out, _ANSI.sub("", b"".join(chunks).decode(errors="replace"))


def _seed_lines(out: str) -> list[str]:
    return [line.split(":")[0] for line in out.splitlines()]


def test_placement_benchmark_keeps_stdout_for_results_when_piped() -> None:
    rc, out, err = _run(_BENCHMARK, tty_stderr=False)
    assert rc == 0, err
    lines = _seed_lines(out)
    assert len(lines) == 3 and lines[0].startswith("seed ") and lines[1].startswith("seed "), out
    assert lines[2] == "unallocated@100%"
    assert _BAR not in out and "/2 seeds" not in out
    assert err == ""


def test_placement_benchmark_draws_its_bar_on_a_terminal_stderr() -> None:
    rc, out, err = _run(_BENCHMARK, tty_stderr=True)
    assert rc == 0, err
    assert _BAR in err and "seeds" in err
    assert _BAR not in out and len(out.splitlines()) == 3  # two seeds and the median, nothing else


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("progress") / "run"
    assert main(["simulate", "--limit-tasks", "40", "--out", str(out), "--json"]) == 0
    return out


def _fresh_copy(run: Path, tmp_path: Path) -> Path:
    """The run's files without a store: the next use builds it."""
    copy = tmp_path / "run"
    copy.mkdir()
    for name in ("events.jsonl", "cycles.jsonl", "usage.jsonl", "manifest.json"):
        if (run / name).exists():
            (copy / name).write_bytes((run / name).read_bytes())
    return copy


@pytest.mark.parametrize("tty_stderr", [True, False], ids=["terminal", "piped"])
def test_the_first_store_build_says_what_it_builds(small_run: Path, tmp_path: Path, tty_stderr: bool) -> None:
    run = _fresh_copy(small_run, tmp_path)
    code = f"""
        import sys
        from analytics.cli import main
        sys.exit(main(["sql", "--store", {str(run)!r}, "SELECT count(*) AS n FROM cycles"]))
    """
    rc, out, err = _run(textwrap.dedent(code), tty_stderr=tty_stderr)
    assert rc == 0, err
    assert (run / "audit.duckdb").exists()
    assert "building the audit store" not in out
    assert ("building the audit store" in err) is tty_stderr, err
    if not tty_stderr:
        assert err == ""


@pytest.mark.parametrize("tty_stderr", [True, False], ids=["terminal", "piped"])
def test_report_html_shows_progress_only_on_a_terminal(
    small_run: Path, tmp_path: Path, tty_stderr: bool
) -> None:
    page = tmp_path / "report.html"
    code = f"""
        import sys
        from analytics.cli import main
        sys.exit(main(["report", "--store", {str(small_run)!r}, "--format", "csv", "--html", {str(page)!r}]))
    """
    rc, out, err = _run(textwrap.dedent(code), tty_stderr=tty_stderr)
    assert rc == 0, err
    assert page.exists()
    assert f"writing {page}" not in out
    assert (f"writing {page}" in err) is tty_stderr, err
