"""``hourglass report --html``: the page of a default-trace simulation in a real headless Chromium.

The run: ``hourglass simulate --out DIR`` on its defaults — the whole shipped trace (8,152 tasks, 1,213
nodes, ~149 simulated days) with the default tenants — as a user would first run it. Chromium (Debian's
package, ``tools/chromium/install.sh``) is driven directly: ``--dump-dom`` for the DOM after load,
``--log-net-log`` for every request the browser made, ``--screenshot`` for a PNG people can look at
(copied to ``docs/img/report.png`` when ``HOURGLASS_UPDATE_SCREENSHOT`` is set). Without Chromium these
tests skip, except under ``CI`` where they fail.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from analytics.cli import main
from analytics.reports.report_html import PLOTS
from tests.support.chromium import chromium_or_skip
from tests.support.paths import REPO_ROOT

SCREENSHOT = REPO_ROOT / "docs" / "img" / "report.png"
WIDTH, HEIGHT = 1300, 3350


@pytest.fixture(scope="module")
def chromium() -> str:
    return chromium_or_skip()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report-html") / "run"
    assert main(["simulate", "--out", str(out)]) == 0  # the default trace, default tenants (~30 s)
    return out


@pytest.fixture(scope="module")
def page(run: Path) -> Path:
    out = run.parent / "report.html"
    assert main(["report", "--store", str(run), "--html", str(out)]) == 0
    return out


def _browse(chromium: str, tmp: Path, url: str, *extra: str) -> tuple[str, list[str]]:
    """Open *url* headless; returns (stdout, URLs of the requests the page made)."""
    netlog = tmp / f"netlog-{len(list(tmp.glob('netlog-*')))}.json"
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",  # tests run as root in CI containers
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        # Any host name the page asked for resolves nowhere: a request can show up, never succeed.
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--log-net-log={netlog}",
        f"--user-data-dir={tmp / 'profile'}",
        *extra,
        url,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, _page_requests(netlog)


def _page_requests(netlog: Path) -> list[str]:
    """URLs the page (a file:// document) requested: the browser's own housekeeping is not the page's."""
    log: dict[str, Any] = json.loads(netlog.read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for e in log["events"]:
        p = e.get("params", {})
        from_page = str(p.get("network_isolation_key", "")).startswith("file://")
        if e["type"] == start and from_page and not str(p.get("url", "")).startswith("file:"):
            urls.append(p["url"])
    return urls


def test_the_page_references_nothing_outside_itself(page: Path) -> None:
    text = page.read_text()
    assert not re.search(r"""(?:src|href|xlink:href|action)\s*=\s*["']?\s*(?:https?:|//)""", text, re.I)
    assert not re.search(r"url\(\s*['\"]?\s*(?:https?:|//)", text, re.I)
    assert "<script" not in text.lower() and "<link" not in text.lower() and "@import" not in text
    for pid in PLOTS:
        assert f'id="plot-{pid}"' in text
    assert "Store <code>" in text and "window t+0d 00:00" in text


def test_a_focused_page_tells_the_queue_its_story(run: Path) -> None:
    out = run.parent / "focus.html"
    assert main(["report", "--store", str(run), "--html", str(out), "--queue", "research-nlp"]) == 0
    text = out.read_text()
    assert "Queue research-nlp (in research)" in text and "You received" in text
    assert (
        "production-recsys" not in text.split('<figure id="plot-allocation">')[0]
    )  # a cousin: not in the tables


def test_chromium_renders_every_plot_without_a_network_request(
    chromium: str, page: Path, tmp_path: Path
) -> None:
    dom, requests = _browse(chromium, tmp_path, page.as_uri(), "--dump-dom")
    assert requests == []
    figures = re.findall(r'<figure id="plot-([\w-]+)">(.*?)</figure>', dom, re.S)
    assert [f[0] for f in figures] == list(PLOTS)
    for pid, body in figures:
        assert body.count("<svg") == 1, pid
        assert body.count("<path") + body.count("<use") > 20, f"plot {pid} looks empty"
    assert "<table>" in dom and "research-nlp" in dom


def test_the_network_check_sees_a_request_when_there_is_one(chromium: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><img src="http://example.test/x.png"><p>x</p></body></html>')
    _, requests = _browse(chromium, tmp_path, bad.as_uri(), "--dump-dom")
    assert requests == ["http://example.test/x.png"]


def test_screenshot(chromium: str, page: Path, tmp_path: Path) -> None:
    from PIL import Image

    png = tmp_path / "report.png"
    _browse(chromium, tmp_path, page.as_uri(), f"--screenshot={png}", f"--window-size={WIDTH},{HEIGHT}")
    with Image.open(png) as im:
        assert im.size == (WIDTH, HEIGHT)
        colours = im.convert("RGB").getcolors(maxcolors=1 << 20) or []
        assert len(colours) > 50  # plots in colour, not a blank or error page
        # The plots reach down the page: the bottom third is not empty.
        bottom = im.convert("L").crop((0, HEIGHT * 2 // 3 - 400, WIDTH, HEIGHT * 2 // 3)).getextrema()
        assert bottom[0] < 128
    if os.environ.get("HOURGLASS_UPDATE_SCREENSHOT"):
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, SCREENSHOT)


def test_the_plotted_series_average_to_the_reported_figures(run: Path) -> None:
    """Each bucket is a time-weighted mean, so the buckets average back to the report's means."""
    from analytics.reports.report import connect, report_from
    from analytics.reports.report_html import series

    con, db = connect(run)
    try:
        rep = report_from(con, str(db), "10d", "100d", None)
        data = series(con, rep)
    finally:
        con.close()
    t = data["t_ms"]
    lengths = [b - a for a, b in itertools.pairwise(t)]
    total = sum(lengths)
    assert t[0] == rep.window.from_ms and t[-1] == rep.window.to_ms and len(lengths) <= 300

    def mean(values: list[float]) -> float:
        return sum(v * n for v, n in zip(values, lengths, strict=True)) / total

    assert mean(data["fragmented"]) == pytest.approx(rep.cluster.fragmented_gpus, rel=1e-9, abs=1e-12)
    assert mean(data["capacity"]) == pytest.approx(rep.cluster.capacity_gpus, rel=1e-9)
    for r in rep.queues:
        q = data["queues"][r.name]
        assert mean(q["allocated"]) == pytest.approx(r.allocated_gpus, rel=1e-9, abs=1e-12), r.name
        assert mean(q["fair"]) == pytest.approx(r.fair_share_gpus, rel=1e-9, abs=1e-12), r.name
