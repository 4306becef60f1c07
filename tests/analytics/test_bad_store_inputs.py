"""A ``--store`` that is not an audit store: rc 2 and one line naming it, no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytics.cli import main

CASES = [
    (["sql", "--store", "{dir}", "SELECT 1"], "not a run directory (no cycles.jsonl or audit.duckdb"),
    (["report", "--store", "{dir}"], "not a run directory (no cycles.jsonl or audit.duckdb"),
    (["explain", "x", "--store", "{dir}"], "not a run directory (no cycles.jsonl or audit.duckdb"),
    (["sql", "--store", "{file}", "SELECT 1"], "notes.duckdb: not a DuckDB audit store"),
    (["report", "--store", "{file}"], "notes.duckdb: not a DuckDB audit store"),
    (["explain", "x", "--store", "{file}"], "notes.duckdb: not a DuckDB audit store"),
]


@pytest.mark.parametrize(
    ("argv", "needle"), CASES, ids=[f"{a[0]}-{a[a.index('--store') + 1]}" for a, _ in CASES]
)
def test_bad_store_is_one_line_rc_2(
    argv: list[str],
    needle: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.duckdb").write_text("not a database\n")
    args = [a.format(dir=".", file="notes.duckdb") for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.duckdb"]  # no empty store left behind
