"""Where the tests find the repository's files, whatever folder a test module sits in."""

from __future__ import annotations

from pathlib import Path

#: The repository's root (the folder holding tests/, deploy/, examples/ ...).
REPO_ROOT = Path(__file__).resolve().parents[2]

#: Recorded inputs the tests read (a v1 run directory, third-party CRDs).
FIXTURES = REPO_ROOT / "tests" / "fixtures"
