"""An audit store works from any directory, and after its folder is moved or copied.

The store's views read its Parquet history; a store built with a relative path used to bake that path
into the views, so ``sql`` / ``report`` from another directory, or on a moved copy, failed with DuckDB's
"Cannot access file". A ``.duckdb`` file copied without its history is refused by name, never read as if
the archived days were empty.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analytics.audit.archive import archive
from analytics.audit.store import AuditStore, StoreError, load_run_dir, query
from analytics.audit.views import history_dir
from analytics.cli import main
from analytics.rundir import DirLog
from analytics.simulation.simulate import simulate
from ingest.tenants import DEFAULT_TENANTS, load_tenants
from ingest.trace import read_nodes
from tests.support.trace_slices import SLICE, first_tasks, small_nodes_csv

SQL = "SELECT count(*) AS n, count(DISTINCT cycle_id) AS c FROM decisions"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("moved")
    out = base / "run"
    simulate(
        first_tasks(SLICE),
        read_nodes(small_nodes_csv(base / "nodes.csv")),
        load_tenants(DEFAULT_TENANTS),
        log=DirLog(out),
    )
    return out


def _built_relative(run: Path, where: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store built from inside `where` with a relative path, its older days archived to Parquet."""
    monkeypatch.chdir(where)
    (where / "site").mkdir()
    with AuditStore(Path("site/audit.duckdb")) as store:
        load_run_dir(store, run)
        assert archive(store).days_archived > 0
    return where / "site"


def test_a_moved_store_opened_from_another_directory_reads_all_its_history(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    site = _built_relative(run, tmp_path, monkeypatch)
    want = query(site / "audit.duckdb", SQL)[1]
    assert want[0][0] > 0
    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    shutil.move(site, moved)
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.chdir(other)
    assert query(moved / "audit.duckdb", SQL)[1] == want
    assert main(["sql", "--store", str(moved / "audit.duckdb"), SQL]) == 0
    assert main(["report", "--store", str(moved / "audit.duckdb")]) == 0
    out = capsys.readouterr()
    assert "Cannot access" not in out.err and "Traceback" not in out.err
    monkeypatch.chdir(moved)  # and from inside it, by a relative path
    assert query(Path("audit.duckdb"), SQL)[1] == want


def test_a_copy_without_its_history_is_refused_by_name(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _built_relative(run, tmp_path, monkeypatch)
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(site / "audit.duckdb", lone / "audit.duckdb")
    assert not history_dir(lone / "audit.duckdb").exists()
    with pytest.raises(StoreError, match=r"history .* is missing"):
        query(lone / "audit.duckdb", SQL)
