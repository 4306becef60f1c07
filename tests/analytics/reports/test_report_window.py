"""``hourglass report --from / --to`` past the store's data: refused when the window misses it entirely, cut
to it with a note when it reaches past it, never filled in with the last state held on forever.

The store: the two-queue scenario of the README (one 16-GPU node, always busy), shortened to two days.
Before, ``--from 30d --to 60d`` on it printed 30 days of a full cluster (16 GPUs x 720 h = 11,520 GPU-h,
100 % allocation) that never happened.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analytics.cli import main
from analytics.reports.report import ReportError, build_report
from tests.support.paths import REPO_ROOT

DAY = 86_400_000


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("window") / "run"
    scenario = REPO_ROOT / "examples" / "two-queue-oscillation.yaml"
    assert (
        main(["simulate", "--config", str(scenario), "--set", "duration=2d", "--json", "--out", str(out)])
        == 0
    )
    return out


def test_a_window_after_the_data_is_refused_in_one_line(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["report", "--store", str(run), "--from", "30d", "--to", "60d"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith("report: the window t+30d 00:00 → t+60d 00:00 is outside the store's data")
    assert "spans t+0d 00:00 → t+2d 00:00" in err


@pytest.mark.parametrize(
    ("from_", "to"), [("30d", None), ("3d", "9d"), (str(-5 * DAY), "0"), (str(-10 * DAY), str(-DAY))]
)
def test_every_window_without_data_is_refused(run: Path, from_: str, to: str | None) -> None:
    with pytest.raises(ReportError, match="outside the store's data, which spans"):
        build_report(run, from_, to)


def test_a_window_past_the_end_is_clipped_with_a_note(run: Path) -> None:
    whole = build_report(run)
    part = build_report(run, "1d", "60d")
    assert (part.window.from_ms, part.window.to_ms) == (DAY, whole.window.to_ms)
    assert any("reaches outside the store's data" in n and "clipped to t+1d 00:00" in n for n in part.notes)
    # One day of a 16-GPU cluster, not 59: the figures are those of the window inside the data.
    assert part.cluster.capacity_gpu_hours == pytest.approx(16 * 24, rel=1e-6)
    assert part.cluster.capacity_gpus == pytest.approx(16)
    got = sum(r.gpu_hours for r in part.queues)
    assert got <= part.cluster.capacity_gpu_hours + 1e-9
    assert got == pytest.approx(sum(r.gpu_hours for r in build_report(run, "1d").queues), rel=1e-12)


def test_a_window_before_the_start_is_clipped_too(run: Path) -> None:
    rep = build_report(run, str(-3 * DAY), "1d")
    assert (rep.window.from_ms, rep.window.to_ms) == (0, DAY)
    assert any("clipped to t+0d 00:00 → t+1d 00:00" in n for n in rep.notes)


def test_a_window_inside_the_data_has_no_note(run: Path) -> None:
    rep = build_report(run, "6h", "1d")
    assert (rep.window.from_ms, rep.window.to_ms) == (6 * 3_600_000, DAY)
    assert not any("clipped" in n for n in rep.notes)


def test_the_note_is_printed_with_the_tables(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["report", "--store", str(run), "--from", "1d", "--to", "60d"]) == 0
    assert "clipped to t+1d 00:00 → t+2d 00:00" in " ".join(capsys.readouterr().out.split())
