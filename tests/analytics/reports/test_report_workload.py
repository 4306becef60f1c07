"""``report`` shows, per node pool, the workload distribution fgd / frag-aware score against at the window's
end (analytics/reports/workload.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analytics.cli import main
from tests.support.trace_slices import SLICE, small_nodes_csv


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("workload")
    out = tmp / "run"
    nodes = str(small_nodes_csv(tmp / "nodes.csv"))
    assert (
        main(["simulate", "--trace-nodes", nodes, "--limit-tasks", str(SLICE), "--out", str(out), "--json"])
        == 0
    )
    return out


def _workload(run: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict[str, object]]:
    capsys.readouterr()
    assert main(["report", "--store", str(run), "--format", "json", *extra]) == 0
    doc = json.loads(capsys.readouterr().out)
    workload = doc["workload"]
    assert isinstance(workload, list)
    return workload


def test_the_distribution_follows_the_windows_recent_pods(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    early = _workload(run, capsys, "--to", "+3d")
    later = _workload(run, capsys, "--to", "+100d")
    for w in (early, later):
        assert [p["pool"] for p in w] == [""]  # the trace has no node pools: the default one
        (pool,) = w
        assert pool["prior"] is False and isinstance(pool["pods"], int) and pool["pods"] > 0
        types = pool["types"]
        assert isinstance(types, list)
        assert sum(t["weight"] for t in types) == pytest.approx(1.0, abs=1e-4)
    assert early[0]["types"] != later[0]["types"]  # other pods arrived in the last 7 days of each window


def test_a_pool_whose_history_left_the_window_shows_the_prior(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The run goes on ~54 days after its last submission: more than the 7-day window.
    (pool,) = _workload(run, capsys)
    assert pool["prior"] is True and pool["pods"] == 0
    assert len(pool["types"]) == 35  # the shipped trace's typical types


def test_the_terminal_report_shows_the_table_at_80_columns(
    run: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    capsys.readouterr()
    assert main(["report", "--store", str(run), "--to", "+100d"]) == 0
    out = capsys.readouterr().out
    assert "Workload scored against by fgd / frag-aware" in out
    assert "(default)" in out and "pods" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_the_html_report_lists_every_type(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "report.html"
    assert main(["report", "--store", str(run), "--to", "+100d", "--html", str(page)]) == 0
    text = page.read_text()
    assert "Workload scored against by fgd / frag-aware" in text
    (pool,) = _workload(run, capsys, "--to", "+100d")
    types = pool["types"]
    assert isinstance(types, list)
    assert text.count("<td>(default)</td>") == len(types)  # one row per type, the JSON's all
