"""One definition of "received ÷ fair share" (:mod:`analytics.fairness`), the same number in every output.

The recording: the first 120 tasks of the shipped trace on its 5-node, 16-GPU slice with the default tenants,
whose GPU quotas (6,000 GPUs) dwarf the cluster, so the engine's fair shares add up to far more than the
cluster has and the cap decides the figure. Before, ``simulate`` divided by the engine's uncapped fair share
and ``report`` by the capped one (48 % against 70 % on the README's contended run); ``whatif`` did as
``simulate``. Here ``simulate`` (its JSON summary and its table), ``report`` (its rows and its table) and
``whatif`` (the recorded side and a what-if that changes nothing) must agree on every queue, and match the
definition computed here from the cycle records.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from analytics.cli import main
from analytics.fairness import capacity_scale, capped_fair_shares, received_over_fair_share
from analytics.reports.report import build_report
from analytics.rerun.whatif import outcomes
from analytics.rundir import read_cycles
from analytics.simulation.cli import render_summary
from analytics.simulation.simulate import simulate
from ingest.tenants import DEFAULT_TENANTS, load_tenants
from ingest.trace import read_nodes
from tests.support.trace_slices import first_tasks, small_nodes_csv

TASKS = 120
MILLI_GPU_MS_PER_HOUR = 1000 * 3_600_000


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    from analytics.rundir import DirLog

    base = tmp_path_factory.mktemp("fairness")
    nodes = read_nodes(small_nodes_csv(base / "nodes.csv"))
    res = simulate(first_tasks(TASKS), nodes, load_tenants(DEFAULT_TENANTS), log=DirLog(base / "run"))
    return base / "run", res.summary


def _by_definition(run: Path, summary: dict[str, Any]) -> dict[str, float | None]:
    """Received ÷ fair share from the cycle records and the summary's GPU-hours, by the module doc's words."""
    capacity = summary["cluster"]["gpus"] * 1000
    end = summary["simulated_seconds"] * 1000
    records = list(read_cycles(run))
    fair: dict[str, float] = {}
    for i, rec in enumerate(records):
        until = records[i + 1].logical_time_ms if i + 1 < len(records) else end
        shares = {q.name: int(q.fair_share["gpu"]) for q in rec.queues}
        top = [q.name for q in rec.queues if q.parent is None]
        for q, v in capped_fair_shares(shares, top, capacity).items():
            fair[q] = fair.get(q, 0.0) + v * (until - rec.logical_time_ms)
    return {
        q["name"]: received_over_fair_share(q["gpu_hours"], fair[q["name"]] / MILLI_GPU_MS_PER_HOUR)
        for q in summary["queues"]
    }


def test_the_cap_decides_this_recording(recording: tuple[Path, dict[str, Any]]) -> None:
    run, _ = recording
    rep = build_report(run)
    assert rep.cluster.fair_share_capped_fraction > 0.1
    # Capped and uncapped differ by far more than any rounding: the test below can tell them apart.
    assert all(
        r.fair_share_uncapped_gpu_hours > 1.1 * r.fair_share_gpu_hours for r in rep.queues if r.gpu_hours
    )


def test_capacity_scale() -> None:
    assert capacity_scale(6_000_000, 16_000) == pytest.approx(16_000 / 6_000_000)
    assert capacity_scale(16_000, 16_000) == 1.0
    assert capacity_scale(8_000, 16_000) == 1.0
    assert capacity_scale(8_000, 0) == 1.0  # no node seen: left as recorded
    assert capped_fair_shares({"a": 3000, "a1": 1000, "b": 1000}, ["a", "b"], 2000) == {
        "a": 1500.0,
        "a1": 500.0,
        "b": 500.0,
    }
    assert received_over_fair_share(3.0, 0) is None
    assert received_over_fair_share(3.0, 4.0) == 0.75


def test_simulate_report_and_whatif_agree(recording: tuple[Path, dict[str, Any]]) -> None:
    run, summary = recording
    want = _by_definition(run, summary)
    sim = {q["name"]: q["received_over_fair_share"] for q in summary["queues"]}
    rep = {r.name: r.received_over_fair_share for r in build_report(run).queues}
    recorded = {q: v["received_over_fair"] for q, v in outcomes(run).queues.items()}
    assert set(sim) == set(rep) == set(recorded) == set(want)
    assert any(v is not None and v > 0 for v in want.values())
    for q, w in want.items():
        for source, got in (("simulate", sim[q]), ("report", rep[q]), ("whatif", recorded[q])):
            if w is None:
                assert got is None, (source, q)
            else:
                assert got == pytest.approx(w, rel=1e-6), (source, q)


def test_the_printed_tables_show_the_same_percentages(
    recording: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    run, summary = recording
    out = io.StringIO()
    render_summary(summary, Console(file=out, width=200))
    sim_rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"│ +(\S+) .*?│ +(\d+%|-) │(?:[^│]*│){4}\n", out.getvalue())
    }
    capsys.readouterr()
    assert main(["report", "--store", str(run)]) == 0
    printed = capsys.readouterr().out
    for q in summary["queues"]:
        ratio = q["received_over_fair_share"]
        if ratio is None or ratio < 0.1:
            continue
        pct = f"{ratio:.0%}"
        assert sim_rows[q["name"]] == pct, q["name"]
        received = printed[printed.index("What each queue received") : printed.index("Cluster")]
        report_row = next(line for line in received.splitlines() if f" {q['name']} " in line)
        assert pct in report_row, (q["name"], report_row)


def test_whatif_that_changes_nothing_reports_the_recorded_ratio(
    recording: tuple[Path, dict[str, Any]],
) -> None:
    run, summary = recording
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["whatif", str(run), "--set", "fairshare.k_value=1", "--json"]) == 0
    got = json.loads(buf.getvalue())
    for q in summary["queues"]:
        side = got["queues"][q["name"]]
        for label in ("recorded", "whatif"):
            w = q["received_over_fair_share"]
            v = side[label]["received_over_fair"]
            assert (v is None) if w is None else v == pytest.approx(w, rel=1e-6), (label, q["name"])
