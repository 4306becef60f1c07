"""`hourglass sql` limits: a time limit, a row limit for printed results, DuckDB's memory and threads, Ctrl-C."""

from __future__ import annotations

import _thread
import threading
import time
from pathlib import Path

import pytest

from analytics.audit.store import AuditStore, QueryLimits, StoreError, run_query
from analytics.cli import main

FOREVER = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"
HUGE = "SELECT * FROM range(100000000)"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("sql") / "audit.duckdb"
    with AuditStore(db):
        pass
    return db


def test_a_runaway_query_is_cancelled_at_the_time_limit(store: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=r"query cancelled: it ran past the 0\.5 s time limit"):
        run_query(store, FOREVER, QueryLimits(timeout_s=0.5))
    assert time.monotonic() - t0 < 3


def test_rows_past_the_limit_are_never_fetched(store: Path) -> None:
    t0 = time.monotonic()
    result = run_query(store, HUGE, QueryLimits(max_rows=1000))
    assert len(result.rows) == 1000 and result.truncated and result.columns == ["range"]
    assert time.monotonic() - t0 < 3  # streamed: the 10^8 rows are not materialised first
    exact = run_query(store, "SELECT * FROM range(1000)", QueryLimits(max_rows=1000))
    assert len(exact.rows) == 1000 and not exact.truncated


def test_duckdb_memory_and_threads_are_the_sandboxs(store: Path) -> None:
    result = run_query(
        store,
        "SELECT current_setting('memory_limit'), current_setting('threads')",
        QueryLimits(memory_limit="64MB", threads=1),
    )
    ((memory, threads),) = result.rows
    assert memory.replace(" ", "") in ("61.0MiB", "64.0MB", "61.0MB") and threads == 1, (memory, threads)
    with pytest.raises(StoreError, match=r"Out of Memory|memory"):
        run_query(
            store,
            "SELECT list(i) FROM range(30000000) t(i)",  # one value holding 240 MB
            QueryLimits(memory_limit="64MB", threads=1),
        )
    with pytest.raises(StoreError, match="bad memory limit"):
        run_query(store, "SELECT 1", QueryLimits(memory_limit="lots"))


def test_ctrl_c_cancels_the_query(store: Path) -> None:
    timer = threading.Timer(0.5, _thread.interrupt_main)  # what SIGINT does to the main thread
    timer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(StoreError, match="query cancelled: interrupted"):
            run_query(store, FOREVER, QueryLimits(timeout_s=60))
    finally:
        timer.cancel()
    assert time.monotonic() - t0 < 3


def test_the_command_notes_a_cut_result_and_refuses_bad_limits(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sql", "--store", str(store), "--format", "csv", "--max-rows", "5", HUGE]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["range", "0", "1", "2", "3", "4"]
    assert "showing the first 5 rows; the query returned more" in err
    assert main(["sql", "--store", str(store), "--timeout", "0.3", FOREVER]) == 2
    assert capsys.readouterr().err.strip() == "sql: query cancelled: it ran past the 0.3 s time limit"
    for bad in (["--timeout", "0"], ["--timeout", "1e20"], ["--max-rows", "-1"], ["--threads", "0"]):
        with pytest.raises(SystemExit) as ex:
            main(["sql", "--store", str(store), *bad, "SELECT 1"])
        assert ex.value.code == 2
