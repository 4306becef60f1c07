"""``report`` shows fragmented GPUs over time per node pool (analytics/reports/pool_fragmentation.py):
each pool's own curve, in the terminal at 80 columns, the JSON and the HTML page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analytics.audit.store import AuditStore, load_events
from analytics.cli import main
from analytics.reports.pool_fragmentation import bucket_bounds, sparkline
from ingest import events as ev
from scheduler.engine.state import NODE_POOL_LABEL

H = 3_600_000


def _bound_for(name: str, node: str, start_h: int, end_h: int) -> list[ev.EventBase]:
    """A one-GPU pod on device 0 of `node` from `start_h` to `end_h` (hours)."""
    at = start_h * H
    return [
        ev.PodGroupUpserted(at_ms=at, name=name, namespace="ns", queue="q", created_at_ms=at),
        ev.PodSubmitted(
            at_ms=at,
            name=name,
            namespace="ns",
            pod_group=name,
            requests=ev.PodRequests(gpus=1),
            created_at_ms=at,
        ),
        ev.PodBound(at_ms=at, name=name, namespace="ns", node=node, gpu_devices=[0]),
        ev.PodFinished(at_ms=end_h * H, name=name, namespace="ns", phase="Succeeded"),
    ]


def _events() -> list[ev.EventBase]:
    """Two 4-GPU nodes, a1 in pool a and b1 in pool b, and a workload of mostly 4-GPU pods (the probe):
    a one-GPU pod strands 3 GPUs on a1 in hours [1, 3) and on b1 in hours [2, 4); 6 hours in all."""
    out: list[ev.EventBase] = [ev.QueueUpserted(at_ms=0, name="q")]
    for node, pool in (("a1", "a"), ("b1", "b")):
        out.append(
            ev.NodeUpserted(
                at_ms=0,
                name=node,
                cpu_millicores=64_000,
                memory_bytes=2**38,
                gpus=4,
                labels={NODE_POOL_LABEL: pool},
            )
        )
    for i in range(3):  # never bound: they only make 4 GPUs the most common request
        out.append(
            ev.PodSubmitted(
                at_ms=0,
                name=f"big-{i}",
                namespace="ns",
                pod_group=f"big-{i}",
                requests=ev.PodRequests(gpus=4),
                created_at_ms=0,
            )
        )
    out += _bound_for("small-a", "a1", 1, 3) + _bound_for("small-b", "b1", 2, 4)
    out.append(ev.ClockTick(at_ms=6 * H))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("pools") / "audit.duckdb"
    with AuditStore(db) as s:
        load_events(s, ((i, ev.dump_event(e)) for i, e in enumerate(_events())))
    return db


def _report(store: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    capsys.readouterr()
    assert main(["report", "--store", str(store), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert isinstance(doc, dict)
    return doc


def test_each_pool_has_its_own_curve(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _report(store, capsys)
    pools = doc["pool_fragmentation"]
    assert isinstance(pools, list)
    assert [p["pool"] for p in pools] == ["a", "b"]
    curves = {p["pool"]: [round(b["fragmented_gpus"], 6) for b in p["buckets"]] for p in pools}
    # Hourly buckets over the 6-hour window: 3 stranded GPUs in each pool's own two hours. Merged pools
    # would give both [0, 3, 6, 3, 0, 0].
    assert curves == {"a": [0, 3, 3, 0, 0, 0], "b": [0, 0, 3, 3, 0, 0]}
    for p in pools:
        assert p["nodes"] == 1 and p["gpus"] == 4
        assert p["fragmented_gpus"] == pytest.approx(1.0)  # 3 GPUs for 2 of 6 hours
        assert p["fragmented_gpus_at_end"] == 0
    cluster = doc["cluster"]
    assert isinstance(cluster, dict)
    # The pools split the cluster's figure: their means add up to it.
    assert sum(p["fragmented_gpus"] for p in pools) == pytest.approx(cluster["fragmented_gpus"])


def test_the_terminal_table_fits_80_columns(
    store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    capsys.readouterr()
    assert main(["report", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "Fragmented GPUs per node pool" in out
    rows = {line.split()[1]: line for line in out.splitlines() if line.split()[1:2] in (["a"], ["b"])}
    assert "▁█████▁" not in out  # each pool's bars are its own
    assert "▁██▁▁▁" in rows["a"] and "▁▁██▁▁" in rows["b"]
    assert max(len(line) for line in out.splitlines()) <= 80


def test_the_html_report_draws_a_curve_per_pool(store: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    assert main(["report", "--store", str(store), "--html", str(page)]) == 0
    text = page.read_text()
    assert "Fragmented GPUs per node pool" in text
    assert "pool a" in text and "pool b" in text


def test_bucket_bounds_and_sparkline() -> None:
    assert bucket_bounds(0, 25, 10) == [(0, 10), (10, 20), (20, 25)]
    assert bucket_bounds(0, 20, 10) == [(0, 10), (10, 20)]
    assert bucket_bounds(0, 20_500, 10_000) == [(0, 10_000), (10_000, 20_500)]  # a sliver joins the last
    assert sparkline([0, 1, 2], 2, 10) == "▁▅█"
    assert sparkline([0, 0, 2, 2], 2, 2) == "▁█"  # averaged two by two to fit
    assert sparkline([0, 0], 0, 5) == "▁▁"
