"""PrometheusSource against a real Prometheus holding several days of backfilled, known allocation history.

The history is a set of step functions written as OpenMetrics and turned into TSDB blocks with promtool,
so every value and every resource-second integral read back can be checked against the exact answer.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from pydantic import ValidationError

from fairshare.config import FairshareConfig
from fairshare.decay import usage_at
from fairshare.prometheus import PrometheusSource, PrometheusSourceConfig
from fairshare.source import ALLOCATION_SCHEMA, CAPACITY_SCHEMA, SourceUnavailable, UsageSource
from tests.support.promserver import (
    PrometheusFactory,
    PrometheusServer,
    Steps,
    openmetrics_history,
    step_integral,
)

DAY = 86_400
DAYS = 4
SCALE = {"gpu": 1000.0, "cpu": 1000.0, "memory": 1.0}

# History ends on an hour boundary at least 2 h before now: backfilled blocks must be older than the head.
END_S = (int(time.time()) // 3600 - 2) * 3600
START_S = END_S - DAYS * DAY
INTERVAL_S = 60

# queue -> resource -> step function in base units (GPUs, cores, bytes). Breakpoints deliberately fall
# between samples (…+1234 s) so sampling error is real and bounded.
ALLOCATION: dict[str, dict[str, Steps | float]] = {
    "team-a": {
        "gpu": [(START_S, 2.0), (START_S + DAY + 1234, 4.5), (START_S + 2 * DAY + 30, 0.0)],
        "cpu": 16.0,
        "memory": 64e9,
    },
    "team-b": {"gpu": [(START_S + 3600, 1.25)], "cpu": [(START_S, 4.0), (START_S + 3 * DAY, 8.0)]},
    "solo": {"gpu": 0.5},
    "org": {"gpu": 5.75},  # a parent: the default queries read leaf queues only
}
PARENTS = {"team-a": "org", "team-b": "org"}
CAPACITY: dict[str, Steps | float] = {
    "gpu": [(START_S, 8.0), (START_S + 2 * DAY, 16.0)],
    "cpu": 128.0,
    "memory": 1e12,
}
LEAVES = ["solo", "team-a", "team-b"]


def _value_at(steps: Steps | float, t: int) -> float | None:
    if isinstance(steps, int | float):
        return float(steps)
    value = None
    for at, v in steps:
        if at <= t:
            value = v
    return value


def _jumps(steps: Steps | float) -> float:
    """Sum of |jumps| of a step function: sampling at step s misses at most |jump| x s per breakpoint."""
    if isinstance(steps, int | float):
        return 0.0
    total, prev = 0.0, 0.0
    for _, v in sorted(steps):
        total += abs(v - prev)
        prev = v
    return total


def _history(tmp: Path) -> Path:
    return openmetrics_history(
        tmp / "history.om",
        start_s=START_S,
        end_s=END_S,
        allocation=ALLOCATION,
        capacity=CAPACITY,
        interval_s=INTERVAL_S,
        parents=PARENTS,
    )


@pytest.fixture(scope="module")
def history_server(
    prometheus_server_module: PrometheusFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    """One Prometheus with the whole history backfilled, shared by the module (the backfill takes seconds)."""
    om = _history(tmp_path_factory.mktemp("history"))
    # KAI's own metric names for the same history, to prove the documented KAI configuration works.
    kai = ["# TYPE kai_queue_allocated_gpus gauge"]
    for q in ("team-a", "org"):
        steps = ALLOCATION[q]["gpu"]
        for t in range(START_S, END_S, INTERVAL_S):
            v = _value_at(steps, t)
            kai.append(f'kai_queue_allocated_gpus{{queue_name="{q}"}} {v} {t}')
    kai.append("# TYPE kube_node_status_capacity gauge")
    for node in ("n1", "n2"):  # capacity split over two nodes, summed by the query
        for t in range(START_S, END_S, INTERVAL_S):
            v = _value_at(CAPACITY["gpu"], t)
            assert v is not None
            kai.append(f'kube_node_status_capacity{{node="{node}",resource="nvidia_com_gpu"}} {v / 2} {t}')
    text = om.read_text().replace("# EOF\n", "\n".join(kai) + "\n# EOF\n")
    om.write_text(text)
    yield prometheus_server_module(history=om)


def _source(server: PrometheusServer, **kw: object) -> PrometheusSource:
    return PrometheusSource(PrometheusSourceConfig.model_validate({"url": server.url, "retries": 0, **kw}))


def test_implements_the_usage_source_interface() -> None:
    source = PrometheusSource(PrometheusSourceConfig(step_s=30))
    assert isinstance(source, UsageSource)
    assert (source.kind, source.step_ms) == ("sampled", 30_000)


def test_backfilled_history_reads_back_exactly_in_engine_units(history_server: PrometheusServer) -> None:
    source = _source(history_server, step_s=60)
    alloc = source.allocation(START_S * 1000, END_S * 1000)
    cap = source.capacity(START_S * 1000, END_S * 1000)
    assert alloc.schema == pl.Schema(ALLOCATION_SCHEMA)
    assert cap.schema == pl.Schema(CAPACITY_SCHEMA)
    assert alloc.equals(alloc.sort(["queue", "resource", "ts_ms"]))
    assert cap.equals(cap.sort(["resource", "ts_ms"]))
    # leaf queues only: the parent "org" is filtered out by the default query
    assert sorted(alloc["queue"].unique().to_list()) == LEAVES
    assert alloc["ts_ms"].min() == START_S * 1000
    assert alloc["ts_ms"].max() == END_S * 1000 - 60_000
    assert (alloc["ts_ms"] % 60_000 == 0).all()
    # the grid matches the samples, so every value is the step function's value, scaled to engine units
    bad = []
    for ts, queue, res, value in alloc.iter_rows():
        want = _value_at(ALLOCATION[queue][res], ts // 1000)
        if want is None or value != want * SCALE[res]:
            bad.append((ts, queue, res, value, want))
    assert bad == []
    for ts, res, value in cap.iter_rows():
        assert value == _value_at(CAPACITY[res], ts // 1000) * SCALE[res]  # type: ignore[operator]
    # team-b had no GPU series before its first step: no rows rather than zeros
    b_gpu = alloc.filter((pl.col("queue") == "team-b") & (pl.col("resource") == "gpu"))
    assert b_gpu["ts_ms"].min() == (START_S + 3600) * 1000
    assert alloc.filter(pl.col("queue") == "team-a").height == 3 * DAYS * 1440


@pytest.mark.parametrize("step_s", [60, 300, 3600])
def test_resource_seconds_match_the_known_integral(history_server: PrometheusServer, step_s: int) -> None:
    source = _source(history_server, step_s=step_s)
    alloc = source.allocation(START_S * 1000, END_S * 1000)
    cap = source.capacity(START_S * 1000, END_S * 1000)
    sums = alloc.group_by(["queue", "resource"]).agg(pl.col("value").sum())
    got = {(q, r): v * step_s for q, r, v in sums.iter_rows()}  # each sample holds one step
    for queue in LEAVES:
        for res, steps in ALLOCATION[queue].items():
            exact = step_integral(steps, START_S, END_S) * SCALE[res]
            bound = _jumps(steps) * step_s * SCALE[res]
            assert abs(got.get((queue, res), 0.0) - exact) <= bound, (queue, res, step_s)
    for res, steps in CAPACITY.items():
        got_cap = float(cap.filter(pl.col("resource") == res)["value"].sum()) * step_s
        exact = step_integral(steps, START_S, END_S) * SCALE[res]
        assert abs(got_cap - exact) <= _jumps(steps) * step_s * SCALE[res]
    # a concrete number: team-a held 2 GPUs for 1 day + 1234 s, then 4.5 GPUs until day 2 + 30 s
    exact_a = (2.0 * (DAY + 1234) + 4.5 * (DAY + 30 - 1234)) * 1000
    assert abs(got[("team-a", "gpu")] - exact_a) <= (2.0 + 2.5 + 4.5) * step_s * 1000


def test_a_range_beyond_the_points_limit_is_split_into_several_queries(
    history_server: PrometheusServer,
) -> None:
    # 4 days at 30 s is 11,520 points per series: Prometheus refuses that in one query...
    client = PrometheusConnect(url=history_server.url)
    with pytest.raises(PrometheusApiClientException, match="11,000 points"):
        client.custom_query_range(
            'hourglass_queue_allocated{queue="solo"}',
            start_time=datetime.fromtimestamp(START_S, UTC),
            end_time=datetime.fromtimestamp(END_S - 30, UTC),
            step="30",
        )
    # ...the source splits it, and the chunk size does not change the answer
    default = _source(history_server, step_s=30).allocation(START_S * 1000, END_S * 1000)
    small = _source(history_server, step_s=30, max_points_per_query=997).allocation(
        START_S * 1000, END_S * 1000
    )
    solo = default.filter(pl.col("queue") == "solo")
    assert solo.height == DAYS * DAY // 30
    assert solo["ts_ms"].n_unique() == solo.height
    assert default.equals(small)


def test_an_unaligned_range_samples_the_step_grid_inside_it(history_server: PrometheusServer) -> None:
    source = _source(history_server, step_s=300)
    start_ms, end_ms = START_S * 1000 + 12_345, START_S * 1000 + 3_600_000 + 1
    alloc = source.allocation(start_ms, end_ms)
    ts = sorted(alloc.filter(pl.col("queue") == "solo")["ts_ms"].to_list())
    assert ts[0] == START_S * 1000 + 300_000 and ts[-1] == START_S * 1000 + 3_600_000
    assert all(start_ms <= t < end_ms and t % 300_000 == 0 for t in ts)
    assert source.allocation(start_ms, start_ms).is_empty()
    assert source.capacity(end_ms, start_ms).schema == pl.Schema(CAPACITY_SCHEMA)


def test_kai_compatible_queries(history_server: PrometheusServer) -> None:
    cfg = {
        "step_s": 600,
        "queue_label": "queue_name",
        "allocation_queries": {"gpu": "sum by (queue_name) (kai_queue_allocated_gpus)"},
        "capacity_queries": {"gpu": 'sum(kube_node_status_capacity{resource="nvidia_com_gpu"})'},
    }
    source = _source(history_server, **cfg)
    alloc = source.allocation(START_S * 1000, END_S * 1000)
    cap = source.capacity(START_S * 1000, END_S * 1000)
    assert sorted(alloc["queue"].unique().to_list()) == ["org", "team-a"]  # KAI exports parents too
    assert set(alloc["resource"].to_list()) == {"gpu"}
    first = alloc.filter(pl.col("queue") == "team-a")["value"][0]
    assert first == 2000.0
    assert cap["value"][0] == 8000.0 and cap["value"][-1] == 16_000.0


def test_averaging_query_with_the_step_placeholder(history_server: PrometheusServer) -> None:
    # avg_over_time over each step instead of one sample per step: the 4.5 GPU step shows as a partial
    # average in the hour it started (1234 s into day 1 -> sampled from the next minute on).
    source = _source(
        history_server,
        step_s=3600,
        allocation_queries={
            "gpu": 'sum by (queue) (avg_over_time(hourglass_queue_allocated{resource="gpu",queue="team-a"}[$step]))'
        },
        capacity_queries={},
    )
    alloc = source.allocation((START_S + DAY) * 1000, (START_S + DAY + 7200) * 1000)
    values = alloc["value"].to_list()
    assert values[0] == 2000.0
    assert 2000.0 < values[1] < 4500.0


def test_unreachable_server_names_the_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    source = PrometheusSource(PrometheusSourceConfig(url=url, retries=0))
    with pytest.raises(SourceUnavailable, match=r"cannot connect.*[Rr]efused") as err:
        source.allocation(0, 3_600_000)
    assert url in str(err.value)
    assert "hourglass_queue_allocated" in str(err.value)


def test_a_server_that_never_answers_times_out() -> None:
    with socket.socket() as listener:  # accepts connections (kernel backlog) and never replies
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        source = PrometheusSource(PrometheusSourceConfig(url=url, retries=0, timeout_s=0.5))
        t0 = time.monotonic()
        with pytest.raises(SourceUnavailable, match=r"timed out after 0\.5 s") as err:
            source.capacity(0, 3_600_000)
        assert time.monotonic() - t0 < 5
    assert url in str(err.value)


@pytest.mark.parametrize(
    ("field", "query", "why"),
    [
        ("allocation_queries", "sum((", "HTTP error.*parse error"),
        ("allocation_queries", "sum(hourglass_queue_allocated)", "has no label 'queue'"),
        ("allocation_queries", 'hourglass_queue_allocated{resource=~"gpu|cpu"}', "two series for queue"),
        ("capacity_queries", "hourglass_cluster_capacity", "returned 3 series, expected one"),
        ("capacity_queries", 'sum(hourglass_cluster_capacity{resource="gpu"}) * 0 / 0', "non-finite value"),
    ],
)
def test_bad_queries_and_results_raise_a_specific_error(
    history_server: PrometheusServer, field: str, query: str, why: str
) -> None:
    other = "capacity_queries" if field == "allocation_queries" else "allocation_queries"
    source = _source(history_server, **{field: {"gpu": query}, other: {}})
    read = source.allocation if field == "allocation_queries" else source.capacity
    with pytest.raises(SourceUnavailable, match=why) as err:
        read(START_S * 1000, (START_S + 3600) * 1000)
    assert history_server.url in str(err.value)
    assert query in str(err.value)


def test_prometheus_stopped_and_restarted(prometheus_server: PrometheusFactory, tmp_path: Path) -> None:
    end = (int(time.time()) // 3600 - 2) * 3600
    om = openmetrics_history(
        tmp_path / "small.om",
        start_s=end - 7200,
        end_s=end,
        allocation={"q": {"gpu": 3.0}},
        capacity={"gpu": 4.0},
    )
    prom = prometheus_server(history=om)
    source = PrometheusSource(PrometheusSourceConfig(url=prom.url, retries=0))
    before = source.allocation((end - 7200) * 1000, end * 1000)
    assert before.height == 120 and set(before["value"].to_list()) == {3000.0}
    prom.stop()
    with pytest.raises(SourceUnavailable, match="cannot connect"):
        source.allocation((end - 7200) * 1000, end * 1000)
    prom.start()  # same port, same data
    assert source.allocation((end - 7200) * 1000, end * 1000).equals(before)


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"allocation_queries": {"gpus": "x"}}, "unknown resource.*'gpus'.*allowed"),
        ({"url": "127.0.0.1:9090"}, "must start with http"),
        ({"max_points_per_query": 20_000}, "less than or equal to 11000"),
        ({"step_s": 0}, "greater than 0"),
        ({"capacity_queries": {"cpu": " "}}, "query for 'cpu' is empty"),
        ({"engine_per_unit": {"gpu": 1000.0}}, "'cpu' is queried but has no engine_per_unit"),
    ],
)
def test_config_errors_are_specific(cfg: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        PrometheusSourceConfig.model_validate(cfg)


@pytest.mark.parametrize(
    ("result", "why"),
    [
        ({"resultType": "vector"}, "expected a matrix"),
        ([{"metric": {"queue": "q"}}], "a series without 'values'"),
        ([{"metric": "q", "values": []}], "'metric' is not an object"),
        ([{"metric": {"queue": "q"}, "values": [[1700000000, "1"], [1700000060]]}], "malformed samples"),
        ([{"metric": {"queue": "q"}, "values": [[1700000000, "one"]]}], "malformed value 'one'"),
        ([{"metric": {"queue": "q"}, "values": [[1700000000, "+Inf"]]}], "non-finite value '\\+Inf'"),
    ],
)
def test_a_malformed_result_is_rejected_with_the_reason(result: object, why: str) -> None:
    # The parser of what a server sent, fed directly: a real Prometheus does not send these.
    source = PrometheusSource(PrometheusSourceConfig(url="http://prometheus.example:9090"))
    with pytest.raises(SourceUnavailable, match=why) as err:
        source._parse("up", result)
    assert "http://prometheus.example:9090" in str(err.value) and "'up'" in str(err.value)


def test_decayed_usage_from_prometheus_matches_the_known_history(history_server: PrometheusServer) -> None:
    """PrometheusSource feeds fairshare.decay: a window over the whole history gives the known integrals."""
    step_s = 300
    source = _source(history_server, step_s=step_s)
    lo, hi = START_S * 1000, END_S * 1000
    alloc = source.allocation(lo - source.step_ms, hi)
    cap = source.capacity(lo - source.step_ms, hi)
    cfg = FairshareConfig(window_s=DAYS * DAY, half_life_s=None)
    usage = usage_at(alloc, cap, hi, cfg, kind=source.kind, step_ms=source.step_ms)
    a_gpu = step_integral(ALLOCATION["team-a"]["gpu"], START_S, END_S) * 1000
    assert abs(usage.raw["team-a"]["gpu"] - a_gpu) <= _jumps(ALLOCATION["team-a"]["gpu"]) * step_s * 1000
    cap_gpu = step_integral(CAPACITY["gpu"], START_S, END_S) * 1000
    assert abs(usage.capacity["gpu"] - cap_gpu) <= 8.0 * step_s * 1000
    assert usage.normalised["solo"]["gpu"] == pytest.approx(0.5 * DAYS * DAY * 1000 / usage.capacity["gpu"])
    assert "org" not in usage.raw
