"""The README's walk-through, run as a user runs it, against the figures the README quotes.

Every ``hourglass`` command of the README's two-queue example runs from the README's own text (so a
changed command is tested as written), and the figures its comments quote are read from the README and
checked against what the command prints: the README cannot drift from the product unnoticed.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()


def _block_after(marker: str) -> list[tuple[list[str], str]]:
    """(argv, comment) of each command in the first ```bash block after `marker`."""
    start = README.index("```bash", README.index(marker)) + len("```bash")
    text = README[start : README.index("```", start)]
    out: list[tuple[list[str], str]] = []
    pending = ""
    for line in text.strip().splitlines():
        pending = f"{pending}\n{line}" if pending else line
        try:
            argv = shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on on the next line
            continue
        comment = pending.split(" # ", 1)[1].strip() if " # " in pending.splitlines()[-1] else ""
        if argv:
            out.append((argv, comment))
        pending = ""
    return out


WALK = _block_after("For example, on the two-queue scenario below")


def _run(argv: list[str], cwd: Path) -> str:
    assert argv[0] == "hourglass", argv
    args = [a.replace("examples/", str(REPO_ROOT / "examples") + "/") for a in argv[1:]]
    done = subprocess.run(
        [sys.executable, "-m", "analytics.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT), "HOME": str(cwd), "COLUMNS": "200"},
    )
    assert done.returncode == 0, f"{shlex.join(argv)}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


@pytest.mark.timeout(900)
def test_the_two_queue_walk_through_prints_what_the_readme_says(tmp_path: Path) -> None:
    commands = [c for c in WALK if c[0][1] != "report" or "--html" not in c[0]] + [
        c for c in WALK if c[0][1] == "report" and "--html" in c[0]
    ]
    assert [argv[1] for argv, _ in WALK][:2] == ["simulate", "explain"], "the walk-through starts with a run"
    seen = set()
    for argv, comment in commands:
        out = _run(argv, tmp_path)
        verb = argv[1]
        seen.add(verb)
        if verb == "explain":
            # "PENDING: needs 16 GPUs, queue b holds them" / "evicted by reclaim at t=5 min, on behalf of b"
            first = comment.split(":")[0].split()[0]
            assert first.lower() in out.lower(), (comment, out[:500])
            if "reclaim" in comment:
                assert "reclaim" in out and "b-w" in out
            if "16 GPUs" in comment:
                assert "16 GPU(s)" in out
        elif verb == "sql":
            # "a 1343.87, b 1344.0: = simulate"
            quoted = dict(re.findall(r"\b([ab]) (\d+(?:\.\d+)?)", comment))
            assert quoted, comment
            for queue, value in quoted.items():
                row = re.search(rf"│ {queue}\s+│ ([\d.]+)", out)
                assert row is not None, out
                assert round(float(row.group(1)), 2) == pytest.approx(float(value)), (
                    queue,
                    row.group(1),
                    value,
                )
        elif verb == "replay":
            assert comment in out.strip().splitlines(), (comment, out[-300:])
    assert {"simulate", "explain", "sql", "replay", "whatif", "report"} <= seen


def test_the_conformance_result_the_readme_quotes() -> None:
    quoted = re.search(r"```\n(conformance: \d+ passed, \d+ failed)\n```", README)
    assert quoted is not None
    out = subprocess.run(
        [sys.executable, "-m", "analytics.cli", "conformance"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.stdout.strip().splitlines()[-1] == quoted.group(1)
