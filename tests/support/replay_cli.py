"""``hourglass replay LOG --verify`` run as a user runs it, for the service tests (its own process, the
repository's root as working directory): the check that a log's records reproduce on fresh sessions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO_ROOT


def replay_verify(directory: Path) -> str:
    """Run ``hourglass replay DIRECTORY --verify``; assert it exits 0 and return its last line of output."""
    rep = subprocess.run(
        [sys.executable, "-m", "analytics.cli", "replay", str(directory), "--verify"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert rep.returncode == 0, rep.stdout[-2000:] + rep.stderr[-2000:]
    return rep.stdout.strip().splitlines()[-1]
