"""KAI Scheduler's own example manifests as reproduced in examples/kai-workload/kai-docs/ (one file per KAI
``docs/`` file, same path), with the one change a KAI user makes to move to Hourglass."""

from __future__ import annotations

from typing import Any

import yaml

from tests.support.paths import REPO_ROOT

KAI_DOCS_DIR = REPO_ROOT / "examples" / "kai-workload" / "kai-docs"


def kai_example(path: str) -> list[dict[str, Any]]:
    """The documents of KAI's ``docs/<path>`` with ``schedulerName: kai-scheduler`` made ``hourglass`` and
    nothing else changed."""
    text = (KAI_DOCS_DIR / path).read_text()
    assert "schedulerName: kai-scheduler" in text or "kind: Queue" in text, path
    return [
        d
        for d in yaml.safe_load_all(text.replace("schedulerName: kai-scheduler", "schedulerName: hourglass"))
        if d
    ]
