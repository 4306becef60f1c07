"""80-column terminals: ``simulate``'s and ``report``'s tables fit the width and print every number whole.

Before, ``simulate`` forced 110 columns when piped and cut numbers (``24,06…``) at 80, and ``report``
forced at least 170 columns, so its tables wrapped on any ordinary terminal. Here both render with
``COLUMNS=80`` (as the command lines do when their output is not a terminal), and every line must be at
most 80 characters, no cell may be cut (``…``), and every figure of every queue must be printed exactly as
the code formats it, or its column be named in the "left out" note.

The recording: the first 120 tasks of the shipped trace on its 5-node, 16-GPU slice (hierarchical queue
names, GPU-hours in the tens of thousands).
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len

from analytics.humanize import duration
from analytics.reports.report import _ev, _num, _pct, build_report, fmt_duration, render
from analytics.rundir import DirLog
from analytics.simulation.cli import render_summary
from analytics.simulation.simulate import simulate
from analytics.terminal import DEFAULT_WIDTH, console
from ingest.tenants import DEFAULT_TENANTS, load_tenants
from ingest.trace import read_nodes
from tests.support.trace_slices import first_tasks, small_nodes_csv

WIDTH = 80


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    base = tmp_path_factory.mktemp("narrow")
    nodes = read_nodes(small_nodes_csv(base / "nodes.csv"))
    res = simulate(first_tasks(120), nodes, load_tenants(DEFAULT_TENANTS), log=DirLog(base / "run"))
    return base / "run", res.summary


def _section(text: str, title: str, end: str) -> str:
    return text[text.index(title) : text.index(end, text.index(title) + len(title))]


def _left_out(text: str) -> str:
    """The "left out" notes, unwrapped."""
    flat = " ".join(text.split())
    return " ".join(re.findall(r"note: left out to fit \d+ columns: (.*?) \(", flat))


def _assert_fits(text: str) -> None:
    assert "…" not in text
    for line in text.splitlines():
        assert cell_len(line) <= WIDTH, line


def _assert_whole(section: str, name: str, figures: dict[str, str], left_out: str) -> None:
    """Each figure of queue *name* is in its row as printed by the code, or its column was left out."""
    row = next(line for line in section.splitlines() if re.search(rf"│ +{re.escape(name)} +│", line))
    for header, value in figures.items():
        if f'"{header}"' in left_out:
            continue
        cells = [c.strip() for c in row.split("│")]
        assert value in cells, (name, header, value, row)


def test_console_width_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert console(io.StringIO()).width == DEFAULT_WIDTH
    monkeypatch.setenv("COLUMNS", "80")
    assert console(io.StringIO()).width == 80


def test_simulate_tables_fit_80_columns(
    recording: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, summary = recording
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    out = io.StringIO()
    render_summary(summary, console(out))
    text = out.getvalue()
    _assert_fits(text)
    queues = _section(text, "Queues", "Cluster")
    left_out = _left_out(text)
    assert left_out, "at 80 columns some column has to give way"
    assert max(cell_len(line) for line in text.splitlines()) > WIDTH - 10  # the width is used
    big = max(q["gpu_hours"] for q in summary["queues"])
    assert f"{big:,.1f}" in queues and big >= 10_000  # the kind of number that used to lose its tail
    for q in summary["queues"]:
        ratio = q["received_over_fair_share"]
        _assert_whole(
            queues,
            q["name"],
            {
                "tasks": f"{q['tasks']:,}",
                "GPU-h": f"{q['gpu_hours']:,.1f}",
                "fair GPU-h": f"{q['fair_share_gpu_hours']:,.1f}",
                "recv/fair": "-" if ratio is None else f"{ratio:.0%}",
                "wait mean": duration(q["mean_wait_s"]),
                "wait p95": duration(q["p95_wait_s"]),
                "pending": f"{q['pending_at_end']:,}",
                "evicted": f"{q['evictions']:,}",
            },
            left_out,
        )
    c = summary["cluster"]
    cluster = _section(text, "Cluster", "simulated events")
    for value in (f"{c['gpu_hours_allocated']:,.1f}", f"{c['nodes']:,} / {c['gpus']:,}"):
        assert value in cluster


def test_report_tables_fit_80_columns(
    recording: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    run, _ = recording
    rep = build_report(run)
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    out = io.StringIO()
    render(rep, "table", out)
    text = out.getvalue()
    _assert_fits(text)
    left_out = _left_out(text)
    entitled = _section(text, "What each queue was entitled to", "What each queue received")
    received = _section(text, "What each queue received", "Cluster")
    for r in rep.queues:
        _assert_whole(
            entitled,
            r.name,
            {
                "deserved": _num(r.deserved_gpus),
                "fair share": _num(r.fair_share_gpus),
                "fair (no kValue)": _num(r.fair_share_classic_gpus),
                "allocated": _num(r.allocated_gpus),
                "requested": _num(r.requested_gpus),
                "decayed usage": f"{r.usage_end:.3f}",
            },
            left_out,
        )
        _assert_whole(
            received,
            r.name,
            {
                "GPU-h": _num(r.gpu_hours),
                "CPU core-h": _num(r.cpu_hours),
                "fair-share GPU-h": _num(r.fair_share_gpu_hours),
                "received ÷ fair": _pct(r.received_over_fair_share),
                "of cluster": _pct(r.cluster_share),
                "wait p50": fmt_duration(r.wait_p50_s),
                "p90": fmt_duration(r.wait_p90_s),
                "p99": fmt_duration(r.wait_p99_s),
                "waiting at end": str(r.jobs_waiting_at_end),
                "evicted r/p/c": _ev(r.evictions_suffered),
                "caused r/p/c": _ev(r.evictions_caused),
            },
            left_out,
        )
    c = rep.cluster
    cluster = _section(text, "Cluster", "Jain's index (")
    assert f"{c.gpu_hours_allocated:,.1f} / {c.capacity_gpu_hours:,.1f}" in cluster


def test_a_wide_terminal_shows_every_column(
    recording: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    run, summary = recording
    monkeypatch.setenv("COLUMNS", "200")
    out = io.StringIO()
    render_summary(summary, console(out))
    render(build_report(run), "table", out)
    assert "left out" not in out.getvalue()
    assert "CPU core-h" in out.getvalue() and "wait mean" in out.getvalue()


def test_wrap_lines_folds_prose_and_keeps_ids_whole() -> None:
    from analytics.terminal import wrap_lines

    long_id = "c" * 90
    lines = ["short", "  " + " ".join(["word"] * 40), f"id {long_id} end"]
    out = wrap_lines(lines, 40)
    assert out[0] == "short"
    body = [line for line in out if line.lstrip().startswith("word")]
    assert body[0].startswith("  word") and all(b.startswith("      word") for b in body[1:])
    assert all(len(line) <= 40 for line in body)
    assert any(line.strip() == long_id for line in out)  # too long to fit: whole on a line of its own
    assert " ".join(" ".join(out).split()) == " ".join(" ".join(lines).split())


def test_explain_prose_fits_80_columns(
    recording: tuple[Path, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`explain` prints long reasons and advice; at 80 columns every line fits and no word is lost."""
    from analytics.cli import main
    from analytics.reports.explain import explain

    run, _ = recording
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    pods = ["openb-pod-0017", "openb-pod-0113"]
    widest = 0
    for pod in pods:
        assert main(["explain", pod, "--store", str(run)]) == 0
        out = capsys.readouterr().out
        _assert_fits(out)
        assert " ".join(out.split()) == " ".join(explain(run, pod).text().split())
        widest = max(widest, max(len(line) for line in explain(run, pod).lines))
    assert widest > WIDTH  # the case is real: unfolded, some line would not fit


def test_whatif_tables_fit_80_columns(
    recording: tuple[Path, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`whatif` printed 118-column tables and unfolded notes whatever the width; at 80 columns both runs'
    figures of every queue are printed whole, or their column is named in the note."""
    import json

    from analytics.cli import main
    from analytics.rerun.whatif_html import FIGURES, HEAD, fmt

    run, _ = recording
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    assert main(["whatif", str(run), "--set", "fairshare.k_value=0", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["whatif", str(run), "--set", "fairshare.k_value=0"]) == 0
    text = capsys.readouterr().out
    _assert_fits(text)
    left_out = _left_out(text)
    assert left_out and '"recv/fair"' not in left_out
    lines = text.splitlines()
    for name, sides in doc["queues"].items():
        at = next(i for i, line in enumerate(lines) if re.search(rf"│ +{re.escape(name)} +│ recorded", line))
        for line, side in ((lines[at], sides["recorded"]), (lines[at + 1], sides["whatif"])):
            cells = [c.strip() for c in line.split("│")]
            for key in FIGURES:
                if f'"{HEAD[key]}"' not in left_out:
                    assert fmt(key, side.get(key)) in cells, (name, key, line)
    assert "never finished by themselves" in " ".join(text.split())


def test_a_long_reason_breaks_between_its_camelcase_words() -> None:
    """A reason code wider than its column is broken where its CamelCase words meet (``PodScheduling`` /
    ``Errors``), not at the column's edge (``PodSchedulingErr`` / ``ors``): each piece is whole words of
    the code, and a search for any of them finds it."""
    from analytics.terminal import Col, fitted_table

    cols = (Col("queue", "left"), Col("GPU-h"), Col("typical pending reason", "left", whole=False))
    codes = ["PodSchedulingErrors", "NonPreemptibleOverQuota"]
    rows = [["production-inference", "12,345.6", codes[0]], ["b", "1.0", codes[1]]]
    for width in (52, 56, 80):  # the reason column gets 14, 18 and all it needs
        table, dropped = fitted_table(cols, rows, width)
        out = io.StringIO()
        console(out).print(table, width=width)
        text = out.getvalue()
        assert not dropped and all(cell_len(line) <= width for line in text.splitlines()), text
        body = text[text.index("┡") :]
        lines = [line.split("│") for line in body.splitlines() if line.count("│") == 4]
        pieces: list[list[str]] = []
        for line in lines:
            if line[1].strip():  # a row's first line names its queue
                pieces.append([])
            pieces[-1].append(line[3].strip())
        assert ["".join(p) for p in pieces] == codes, text
        for p in pieces:
            assert all(piece[:1].isupper() for piece in p), text  # each piece starts a CamelCase word
            assert (len(p) == 1) == (width == 80), text
