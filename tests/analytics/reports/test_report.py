"""``hourglass report``: its numbers against an independent computation from the raw run files.

Two small runs on the 5-node, 16-GPU slice of ``tests/support/trace_slices.py`` (tasks wait, get preempted):

* ``default``: the default tenants, whose GPU quotas (6,000 GPUs) dwarf the cluster, so fair shares are
  capped at capacity by the report;
* ``small_quota``: quotas that fit the cluster and ``k_value: 0.5``, so the over-quota division and the
  time-based (kValue) term shape the fair share.

The expected figures are computed here in plain Python from ``events.jsonl`` (GPU-/CPU-hours as integrals
of what each pod held between ``PodBound`` and ``PodFinished``, waits, evictions) and ``cycles.jsonl``
(fair-share integrals), never from the report's SQL.
"""

from __future__ import annotations

import io
import itertools
import json
import math
import re
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml

from analytics.audit.store import SCHEMA, query, resolve_store
from analytics.audit.views import history_dir
from analytics.cli import main
from analytics.reports.report import (
    Report,
    ReportError,
    build_report,
    jain_index,
    nearest_rank,
    parse_time,
    render,
)
from analytics.rundir import DirLog, read_cycles
from analytics.simulation.simulate import simulate
from ingest.tenants import DEFAULT_TENANTS, load_tenants
from ingest.trace import read_nodes
from tests.support.paths import REPO_ROOT
from tests.support.trace_slices import first_tasks, small_nodes_csv

TASKS = 120
H = 3_600_000
DAY = 86_400_000


def _small_quota_tenants(path: Path) -> Path:
    cfg = yaml.safe_load(DEFAULT_TENANTS.read_text())
    quotas = {
        "research": 4,
        "research-vision": 2,
        "research-nlp": 2,
        "production": 4,
        "production-inference": 2,
        "production-recsys": 2,
    }  # fmt: skip
    for q in cfg["queues"]:
        q["gpu"]["quota"] = quotas[q["name"]]
        q["gpu"].pop("limit", None)
    cfg["engine"]["k_value"] = 1.0
    cfg["engine"]["usage_refresh_s"] = 3600
    path.write_text(yaml.safe_dump(cfg))
    return path


def _simulate(base: Path, tenants: Path) -> tuple[Path, dict[str, Any]]:
    out = base / "run"
    nodes = read_nodes(small_nodes_csv(base / "nodes.csv"))
    res = simulate(first_tasks(TASKS), nodes, load_tenants(tenants), log=DirLog(out))
    return out, res.summary


@pytest.fixture(scope="module")
def default(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    return _simulate(tmp_path_factory.mktemp("report-default"), DEFAULT_TENANTS)


@pytest.fixture(scope="module")
def small_quota(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    base = tmp_path_factory.mktemp("report-small-quota")
    return _simulate(base, _small_quota_tenants(base / "tenants.yaml"))


RUNS = ("default", "small_quota")


def _get(request: pytest.FixtureRequest, name: str) -> tuple[Path, dict[str, Any]]:
    run: tuple[Path, dict[str, Any]] = request.getfixturevalue(name)
    return run


# --------------------------------------------------------------------------- the independent computation


class Raw:
    """What the run files say, computed without SQL."""

    def __init__(self, run: Path) -> None:
        self.events = [json.loads(line) for line in (run / "events.jsonl").open()]
        # Full decision sets (cycles.jsonl holds checkpoints and deltas).
        self.cycles = [r.model_dump(mode="json") for r in read_cycles(run)]
        self.end = max(max(e["at_ms"] for e in self.events), max(c["logical_time_ms"] for c in self.cycles))
        self.capacity = sum(e["gpus"] * 1000 for e in self.events if e["type"] == "NodeUpserted")
        self.parent: dict[str, str | None] = {}
        for e in self.events:
            if e["type"] == "QueueUpserted":
                self.parent[e["name"]] = e.get("parent")
        # pod runs: (queue, gpu milli, cpu millicores, start, end)
        self.runs: list[tuple[str, int, int, int, int]] = []
        submitted: dict[str, dict[str, Any]] = {}
        open_runs: dict[str, tuple[str, int, int, int]] = {}
        self.job_created: dict[str, tuple[str, int]] = {}
        self.first_bind: dict[str, int] = {}
        self.evicted: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for e in self.events:
            uid = e.get("uid")
            if e["type"] == "PodSubmitted":
                submitted[uid] = e
                job = f"{e['namespace']}/{e['pod_group']}"
                self.job_created.setdefault(job, (e["queue"], e["created_at_ms"]))
            elif e["type"] == "PodBound":
                s = submitted[uid]
                r = s["requests"]
                per = r["gpu_fraction_milli"] or 1000
                open_runs[uid] = (s["queue"], per * len(e["gpu_devices"]), r["cpu_millicores"], e["at_ms"])
                job = f"{s['namespace']}/{s['pod_group']}"
                self.first_bind.setdefault(job, e["at_ms"])
            elif e["type"] in ("PodFinished", "PodDeleted") and uid in open_runs:
                q, g, c, t0 = open_runs.pop(uid)
                self.runs.append((q, g, c, t0, e["at_ms"]))
            elif e["type"] == "PodReleasing":
                self.evicted[submitted[uid]["queue"]][e["reason"]] += 1
        for q, g, c, t0 in open_runs.values():
            self.runs.append((q, g, c, t0, self.end))

    def ancestors_and_self(self, q: str) -> list[str]:
        out = [q]
        while self.parent.get(out[-1]) is not None:
            out.append(self.parent[out[-1]] or "")
        return out

    def gpu_hours(self, lo: int = 0, hi: int | None = None) -> dict[str, float]:
        hi = self.end if hi is None else hi
        out: dict[str, float] = defaultdict(float)
        for q, g, _, t0, t1 in self.runs:
            held = max(0, min(t1, hi) - max(t0, lo))
            for a in self.ancestors_and_self(q):
                out[a] += g * held / 1000 / H
        return out

    def cpu_hours(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for q, _, c, t0, t1 in self.runs:
            for a in self.ancestors_and_self(q):
                out[a] += c * (t1 - t0) / 1000 / H
        return out

    def fair_share_gpu_hours(
        self, capped: bool, lo: int = 0, hi: int | None = None, classic: bool = False
    ) -> dict[str, float]:
        """Each record's fair share held until the next record; capped: scaled so the top queues fit;
        classic: the division without the kValue term (scaled by the same factor as the engine's)."""
        key = "fair_share_classic" if classic else "fair_share"
        hi = self.end if hi is None else hi
        out: dict[str, float] = defaultdict(float)
        for i, c in enumerate(self.cycles):
            t0 = c["logical_time_ms"]
            t1 = self.cycles[i + 1]["logical_time_ms"] if i + 1 < len(self.cycles) else self.end
            held = max(0, min(t1, hi) - max(t0, lo))
            top = sum(q["fair_share"]["gpu"] for q in c["queues"] if q["parent"] is None)
            scale = self.capacity / top if capped and top > self.capacity else 1.0
            for q in c["queues"]:
                out[q["name"]] += q[key]["gpu"] * scale * held / 1000 / H
        return out

    def waits_s(self, queue: str) -> list[float]:
        return sorted(
            (self.first_bind[job] - created) / 1000
            for job, (q, created) in self.job_created.items()
            if job in self.first_bind and queue in self.ancestors_and_self(q)
        )


@pytest.fixture(scope="module")
def raw_default(default: tuple[Path, dict[str, Any]]) -> Raw:
    return Raw(default[0])


@pytest.fixture(scope="module")
def raw_small_quota(small_quota: tuple[Path, dict[str, Any]]) -> Raw:
    return Raw(small_quota[0])


def _raw(request: pytest.FixtureRequest, name: str) -> Raw:
    r: Raw = request.getfixturevalue(f"raw_{name}")
    return r


_WHOLE: dict[Path, Report] = {}


def _report(run: Path, **kw: Any) -> Report:
    """The report over *run* (the whole-span one computed once per run: many tests read it)."""
    if kw:
        return build_report(run, kw.get("from_"), kw.get("to"), kw.get("queue"))
    if run not in _WHOLE:
        _WHOLE[run] = build_report(run)
    return _WHOLE[run]


# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize("name", RUNS)
def test_gpu_and_cpu_hours_are_the_integral_of_what_pods_held(
    name: str, request: pytest.FixtureRequest
) -> None:
    run, summary = _get(request, name)
    raw = _raw(request, name)
    rep = _report(run)
    gpu, cpu = raw.gpu_hours(), raw.cpu_hours()
    assert {r.name for r in rep.queues} == set(raw.parent)
    for r in rep.queues:
        assert r.gpu_hours == pytest.approx(gpu[r.name], rel=1e-9, abs=1e-9), r.name
        assert r.cpu_hours == pytest.approx(cpu[r.name], rel=1e-9, abs=1e-9), r.name
    # The simulator's own accounting (a third computation) agrees to its rounding.
    for q in summary["queues"]:
        assert next(r for r in rep.queues if r.name == q["name"]).gpu_hours == pytest.approx(
            q["gpu_hours"], abs=1e-3
        )
    assert sum(r.gpu_hours for r in rep.queues if r.parent is None) > 0


@pytest.mark.parametrize("name", RUNS)
def test_a_window_clips_every_run(name: str, request: pytest.FixtureRequest) -> None:
    run, _ = _get(request, name)
    raw = _raw(request, name)
    lo, hi = raw.end // 3, raw.end // 3 + 7 * DAY + 12_345
    rep = _report(run, from_=str(lo), to=str(hi))
    assert (rep.window.from_ms, rep.window.to_ms) == (lo, hi)
    gpu = raw.gpu_hours(lo, hi)
    fair = raw.fair_share_gpu_hours(capped=True, lo=lo, hi=hi)
    for r in rep.queues:
        assert r.gpu_hours == pytest.approx(gpu[r.name], rel=1e-9, abs=1e-9), r.name
        assert r.fair_share_gpu_hours == pytest.approx(fair[r.name], rel=1e-9, abs=1e-9), r.name
    whole = _report(run)
    assert sum(r.gpu_hours for r in rep.queues) < sum(r.gpu_hours for r in whole.queues)


@pytest.mark.parametrize("name", RUNS)
def test_received_over_fair_share(name: str, request: pytest.FixtureRequest) -> None:
    run, summary = _get(request, name)
    raw = _raw(request, name)
    rep = _report(run)
    gpu = raw.gpu_hours()
    capped = raw.fair_share_gpu_hours(capped=True)
    uncapped = raw.fair_share_gpu_hours(capped=False)
    for r in rep.queues:
        assert r.fair_share_gpu_hours == pytest.approx(capped[r.name], rel=1e-9), r.name
        assert r.fair_share_uncapped_gpu_hours == pytest.approx(uncapped[r.name], rel=1e-9), r.name
        assert r.received_over_fair_share == pytest.approx(gpu[r.name] / capped[r.name], rel=1e-9), r.name
    for q in summary["queues"]:  # the simulator integrates the same capped fair share (analytics.fairness)
        row = next(r for r in rep.queues if r.name == q["name"])
        assert row.fair_share_gpu_hours == pytest.approx(q["fair_share_gpu_hours"], abs=1e-3)


def test_fair_share_is_capped_only_when_quotas_exceed_the_cluster(
    default: tuple[Path, dict[str, Any]], small_quota: tuple[Path, dict[str, Any]]
) -> None:
    big = _report(default[0])
    assert big.cluster.fair_share_capped_fraction > 0
    assert any("scaled down to the cluster's capacity" in n for n in big.notes)
    top = [r for r in big.queues if r.parent is None]
    assert sum(r.fair_share_gpus for r in top) <= big.cluster.capacity_gpus + 1e-9
    # Uncapped, the default tenants' queues look starved: the cap is what makes the ratio meaningful.
    assert all(r.fair_share_uncapped_gpu_hours >= r.fair_share_gpu_hours for r in big.queues)
    small = _report(small_quota[0])
    assert small.cluster.fair_share_capped_fraction == 0
    assert not any("scaled down" in n for n in small.notes)
    for r in small.queues:
        assert r.fair_share_gpu_hours == pytest.approx(r.fair_share_uncapped_gpu_hours)


def test_kvalue_term_changes_the_fair_share_and_usage_decays(
    small_quota: tuple[Path, dict[str, Any]],
) -> None:
    rep = _report(small_quota[0])
    moved = [
        r
        for r in rep.queues
        if abs(r.fair_share_gpu_hours - r.fair_share_classic_gpu_hours)
        > 1e-3 * r.fair_share_classic_gpu_hours
    ]
    assert moved and all(r.leaf for r in moved)  # the usage term moves shares between siblings
    assert any(r.usage_end > 0 for r in rep.queues)
    assert all(0 <= r.usage_end <= 1 for r in rep.queues)


@pytest.mark.parametrize("name", RUNS)
def test_jains_index_by_its_formula(name: str, request: pytest.FixtureRequest) -> None:
    run, _ = _get(request, name)
    raw = _raw(request, name)
    rep = _report(run)
    gpu = raw.gpu_hours()
    fair = raw.fair_share_gpu_hours(capped=True, classic=True)
    leaves = [q for q in raw.parent if q not in raw.parent.values()]
    xs = [gpu[q] / fair[q] for q in leaves if fair[q] > 0]
    expected = sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))
    assert rep.cluster.jain_queues == len(xs) >= 4
    assert rep.cluster.jain_index == pytest.approx(expected, rel=1e-9)
    assert 1 / len(xs) <= rep.cluster.jain_index <= 1
    # How it moved: one figure per bucket, each a valid index, buckets tiling the window.
    trend = rep.jain_trend
    assert trend and trend[0]["from_ms"] == rep.window.from_ms and trend[-1]["to_ms"] == rep.window.to_ms
    assert all(a["to_ms"] == b["from_ms"] for a, b in itertools.pairwise(trend))
    for b in trend:
        if b["jain_index"] is not None:
            assert 1 / b["queues"] - 1e-12 <= b["jain_index"] <= 1 + 1e-12
    # A window ending one ms past a bucket boundary has no row of that one ms: it joins the last bucket.
    span = trend[0]["to_ms"] - trend[0]["from_ms"]
    assert len(trend) == 1 or trend[-1]["to_ms"] - trend[-1]["from_ms"] >= span // 10
    for b in (trend[len(trend) // 2], trend[-1]):
        _bucket_index_by_its_formula(raw, leaves, b)


def _bucket_index_by_its_formula(raw: Any, leaves: list[str], b: dict[str, Any]) -> None:
    part = raw.gpu_hours(b["from_ms"], b["to_ms"])
    part_fair = raw.fair_share_gpu_hours(capped=True, lo=b["from_ms"], hi=b["to_ms"], classic=True)
    ys = [part[q] / part_fair[q] for q in leaves if part_fair[q] > 0]
    assert b["queues"] == len(ys)
    assert b["jain_index"] == pytest.approx(jain_index(ys), rel=1e-9)


def test_jain_index_formula_edges() -> None:
    assert jain_index([3.0, 3.0, 3.0]) == pytest.approx(1.0)
    assert jain_index([5.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain_index([]) is None
    assert nearest_rank([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    assert nearest_rank([1.0, 2.0, 3.0, 4.0], 0.99) == 4.0


@pytest.mark.parametrize("name", RUNS)
def test_wait_percentiles_and_evictions(name: str, request: pytest.FixtureRequest) -> None:
    run, _ = _get(request, name)
    raw = _raw(request, name)
    rep = _report(run)
    for r in rep.queues:
        waits = raw.waits_s(r.name)
        assert r.jobs_started == len(waits)
        for q, got in ((0.5, r.wait_p50_s), (0.9, r.wait_p90_s), (0.99, r.wait_p99_s)):
            assert got == waits[max(math.ceil(q * len(waits)) - 1, 0)], (r.name, q)
        assert r.jobs_waited_over_1h == sum(1 for w in waits if w > 3600)
        suffered = defaultdict(int)
        for leaf, by_kind in raw.evicted.items():
            if r.name in raw.ancestors_and_self(leaf):
                for kind, n in by_kind.items():
                    suffered[kind] += n
        assert {k: v for k, v in r.evictions_suffered.items() if v} == dict(suffered), r.name
    total = sum(sum(v.values()) for v in raw.evicted.values())
    assert sum(rep.cluster.evictions.values()) == total
    caused = sum(sum(r.evictions_caused.values()) for r in rep.queues if r.parent is None)
    assert caused == total  # every preemption names a workload placed in the same cycle


def test_cluster_allocation_idle_and_fragmentation(
    default: tuple[Path, dict[str, Any]], raw_default: Raw
) -> None:
    run, summary = default
    rep = _report(run)
    c = rep.cluster
    held = sum(g * (t1 - t0) for _, g, _, t0, t1 in raw_default.runs)
    assert c.capacity_gpus == pytest.approx(raw_default.capacity / 1000)
    assert c.allocation_ratio == pytest.approx(held / (raw_default.capacity * raw_default.end), rel=1e-9)
    assert c.idle_gpus == pytest.approx(
        (raw_default.capacity * raw_default.end - held) / raw_default.end / 1000
    )
    # The simulator tracks fragmented GPUs device by device as it runs; the views derive them from the log.
    sc = summary["cluster"]
    assert c.fragmented_gpus == pytest.approx(sc["mean_fragmented_gpus"], abs=1e-3)
    assert c.fragmented_gpus_at_end == pytest.approx(sc["fragmented_gpus_at_end"])
    assert c.fragmentation_probe == sc["fragmentation_probe"]
    assert c.allocation_ratio == pytest.approx(sc["mean_allocation_ratio"], abs=1e-6)


def test_pending_reasons_are_job_hours_per_reason(
    default: tuple[Path, dict[str, Any]], raw_default: Raw
) -> None:
    rep = _report(default[0])
    # The job-hours pending per reason: each Unschedulable decision holds until the next cycle.
    expected: dict[str, float] = defaultdict(float)
    cyc = raw_default.cycles
    for i, c in enumerate(cyc):
        t1 = cyc[i + 1]["logical_time_ms"] if i + 1 < len(cyc) else raw_default.end
        for d in c["decisions"]:
            if d["kind"] == "Unschedulable":
                expected[d["queue"]] += (t1 - c["logical_time_ms"]) / H
    for r in rep.queues:
        if r.leaf:
            assert sum(p["job_hours"] for p in r.pending_reasons) == pytest.approx(expected[r.name], rel=1e-9)
    assert any(r.pending_reasons for r in rep.queues)
    assert all(p["message"] for r in rep.queues for p in r.pending_reasons)


# --------------------------------------------------------------------------- every number from SQL


def test_views_rederive_the_report_with_hourglass_sql(default: tuple[Path, dict[str, Any]]) -> None:
    run, _ = default
    rep = _report(run)
    cols, rows = query(
        run,
        "SELECT queue, sum(gpu_milli * (coalesce(end_ms, (SELECT last_ms FROM run_span)) - start_ms))"
        " / 1000 / 3600000.0 AS gpu_hours FROM pod_runs GROUP BY queue",
    )
    assert cols == ["queue", "gpu_hours"]
    by = {r.name: r for r in rep.queues}
    assert rows and all(by[q].gpu_hours == pytest.approx(v, rel=1e-9) for q, v in rows)
    _, rows = query(
        run,
        "SELECT queue, sum(gpu_fair_share_capped * held_ms) / 1000 / 3600000.0 FROM queue_intervals GROUP BY queue",
    )
    assert all(by[q].fair_share_gpu_hours == pytest.approx(v, rel=1e-9) for q, v in rows)
    _, rows = query(run, "SELECT queue, kind, count(*) FROM evictions GROUP BY ALL")
    assert all(by[q].evictions_suffered[k] >= n for q, k, n in rows)


def test_a_store_written_before_the_views_gets_them(
    default: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    old = tmp_path / "old.duckdb"
    src = resolve_store(default[0])
    if history_dir(src).is_dir():  # the days already moved to Parquet come along
        shutil.copytree(history_dir(src), history_dir(old))
    con = duckdb.connect(str(old))
    con.execute(SCHEMA)  # the tables only, as the store was before analytics/audit/views.py
    con.execute(f"ATTACH '{resolve_store(default[0])}' AS src (READ_ONLY)")
    for t in (
        "store_meta", "recent_events", "recent_cycles", "recent_decisions", "recent_pending", "pending_open",
        "recent_queue_spans", "queue_open", "daily_queue", "events_carry", "cycles_carry", "archived_span",
    ):  # fmt: skip
        con.execute(f"INSERT INTO {t} SELECT * FROM src.{t}")
    con.close()
    assert query(old, "SELECT count(*) FROM duckdb_views() WHERE view_name = 'pod_runs'")[1][0][0] == 0
    rep = _report(old)
    # (the same rows summed in another order: equal up to float rounding)
    assert rep.queues and rep.cluster.jain_index == pytest.approx(_report(default[0]).cluster.jain_index, rel=1e-12)
    assert query(old, "SELECT count(*) FROM pod_runs")[1][0][0] > 0


# --------------------------------------------------------------------------- the command line


def test_cli_table_names_the_window_and_the_store(
    default: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    run, _ = default
    assert main(["report", "--store", str(run), "--from", "2d", "--to", "30d"]) == 0
    out = capsys.readouterr().out
    assert str(run / "audit.duckdb") in out
    assert "window t+2d 00:00 → t+30d 00:00" in out
    for q in ("research-nlp", "production-inference", "Jain's index", "allocation ratio", "fragmented GPUs"):
        assert q in out


def test_cli_json_and_csv(default: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = default
    assert main(["report", "--store", str(run), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["store"].endswith("audit.duckdb") and doc["window"]["from_ms"] == 0
    assert {q["name"] for q in doc["queues"]} >= {"research", "research-nlp"}
    assert doc["cluster"]["jain_index"] is not None and doc["jain_trend"]
    assert main(["report", "--store", str(run), "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("queue,parent,leaf,deserved_gpus") and len(lines) == 1 + len(doc["queues"])


def test_queue_focus_speaks_plainly(
    default: tuple[Path, dict[str, Any]], raw_default: Raw, capsys: pytest.CaptureFixture[str]
) -> None:
    run, _ = default
    assert main(["report", "--store", str(run), "--queue", "research-nlp"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the story wraps at the output's width
    gpu = raw_default.gpu_hours()["research-nlp"]
    assert f"You received {gpu:,.0f} GPU-hours" in out
    assert "Sibling research-vision" in out and "Parent research" in out
    assert "waited > 1 h" in out and "pending because" in out
    rep = _report(run, queue="research-nlp")
    # The queue, its ancestor, its sibling, and the ancestor's siblings: not the cousins.
    assert {r.name for r in rep.queues} == {"research", "research-nlp", "research-vision", "production"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--queue", "nope"], "unknown queue 'nope'"),
        (["--from", "yesterday-ish"], "cannot read the time 'yesterday-ish'"),
        (["--from", "10d", "--to", "5d"], "empty window"),
        (["--format", "json", "--to", "0"], "empty window"),
    ],
)
def test_cli_bad_input_is_a_clear_error(
    default: tuple[Path, dict[str, Any]], argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--store", str(default[0]), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("report: ") and message in err


def test_cli_missing_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--store", str(tmp_path / "nothing")]) == 2
    assert "no such store" in capsys.readouterr().err
    (tmp_path / "junk.duckdb").write_text("not a database")
    assert main(["report", "--store", str(tmp_path / "junk.duckdb")]) == 2


def test_parse_time_forms() -> None:
    assert parse_time("36h", 0) == 36 * H
    assert parse_time("+2d", 1000) == 1000 + 2 * DAY
    assert parse_time("90m", 0) == 90 * 60_000
    assert parse_time("12345", 0) == 12345
    assert parse_time("2026-01-02T00:00:00Z", 0) == parse_time("2026-01-02", 0) == 1_767_312_000_000
    with pytest.raises(ReportError):
        parse_time("soon", 0)


def test_render_rejects_an_unknown_format(default: tuple[Path, dict[str, Any]]) -> None:
    with pytest.raises(ReportError, match="unknown format"):
        render(_report(default[0]), "xml", io.StringIO())


def test_the_queries_in_docs_report_md_rederive_the_report(default: tuple[Path, dict[str, Any]]) -> None:
    run, _ = default
    text = (REPO_ROOT / "docs" / "report.md").read_text()
    block = re.search(r"```sql\n(.*?)```", text, re.S)
    assert block is not None
    results = [query(run, s.strip()) for s in block.group(1).split(";") if s.strip()]
    assert len(results) == 5
    by = {r.name: r for r in _report(run).queues}
    ratio = dict(results[1][1])
    p90 = dict(results[2][1])
    for q in ("research-nlp", "research-vision", "production-inference", "production-recsys"):
        assert ratio[q] == pytest.approx(by[q].received_over_fair_share, rel=1e-9)
        assert p90[q] == by[q].wait_p90_s
    assert results[4][1][0][0] == pytest.approx(_report(run).cluster.fragmented_gpus, rel=1e-9)


def test_an_empty_store_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from analytics.audit.store import AuditStore

    AuditStore(tmp_path / "empty.duckdb").close()
    assert main(["report", "--store", str(tmp_path / "empty.duckdb")]) == 2
    assert "holds no events and no cycles" in capsys.readouterr().err


def test_a_window_of_milliseconds_says_so_instead_of_bare_zeros(tmp_path: Path) -> None:
    from analytics.audit.store import AuditStore, load_cycles, load_events
    from ingest.events import dump_event
    from scheduler.engine.cycle import run_cycle
    from scheduler.engine.state import fold
    from tests.support.synthetic import SyntheticSpec, synthetic_events

    events = synthetic_events(SyntheticSpec(nodes=2, pending_pods=10, departments=1, queues_per_department=2))
    record, _ = run_cycle(fold(events), now_ms=events[-1].at_ms)
    db = tmp_path / "audit.duckdb"
    with AuditStore(db) as store:
        load_events(store, [(i, dump_event(e)) for i, e in enumerate(events)])
        load_cycles(store, [record.dumps()])
    rep = build_report(db)
    assert rep.window.to_ms - rep.window.from_ms < 60_000
    assert any("window is only" in n for n in rep.notes)


def test_a_window_one_ms_past_a_bucket_boundary_has_no_empty_last_row(tmp_path: Path) -> None:
    """The window ends one ms past the last record; a run that ends on a bucket boundary (two days of
    examples/two-queue-oscillation.yaml: day buckets) would get a last row of that one ms, with no index
    and 0 % allocation. It joins the bucket before it."""
    from analytics.reports.report import MS_PER_DAY
    from tests.support.paths import REPO_ROOT

    run = tmp_path / "run"
    example = str(REPO_ROOT / "examples" / "two-queue-oscillation.yaml")
    assert main(["simulate", "--config", example, "--set", "duration=2d", "--out", str(run), "--json"]) == 0
    rep = _report(run)
    trend = rep.jain_trend
    assert rep.window.to_ms % MS_PER_DAY == 1  # the case is real
    assert [(b["from_ms"], b["to_ms"]) for b in trend] == [(0, MS_PER_DAY), (MS_PER_DAY, rep.window.to_ms)]
    assert all(b["jain_index"] is not None and b["allocation_ratio"] > 0.9 for b in trend)
