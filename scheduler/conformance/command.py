"""``hourglass conformance``: the shipped scenario files (or a directory of them) through the engine."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scheduler.conformance import SCENARIOS_DIR


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The command's flags."""
    p.add_argument("dir", nargs="?", default=str(SCENARIOS_DIR), help="directory of scenario files")


def run_cli(args: argparse.Namespace) -> int:
    """``hourglass conformance``: run every scenario file under the directory; rc 1 on any failure."""
    from scheduler.conformance.runner import run_file, scenario_files

    root = Path(args.dir)
    if not root.exists():
        print(f"conformance: no such directory: {root}", file=sys.stderr)
        return 2
    files = list(scenario_files(root))
    if not files:
        # 0 passed, 0 failed would read as success: nothing was checked.
        print(f"conformance: no scenario files (*.json) under {root}", file=sys.stderr)
        return 2
    passed = failed = soft = 0
    for path in files:
        res = run_file(path)
        if res.passed:
            passed += 1
            continue
        detail = res.error or "; ".join(res.diffs[:3]) + (
            f" (+{len(res.diffs) - 3} more)" if len(res.diffs) > 3 else ""
        )
        if res.strict:
            failed += 1
            print(f"FAIL {path.relative_to(root)}: {detail}")
        else:
            soft += 1
            print(f"non-strict mismatch {path.relative_to(root)}: {detail}")
    if soft:
        print(f"non-strict mismatches (not counted as failures): {soft}")
    print(f"conformance: {passed} passed, {failed} failed")
    return 1 if failed else 0
