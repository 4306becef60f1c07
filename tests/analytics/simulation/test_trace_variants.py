"""The placement benchmark's workload and node-mix variants of the shipped Alibaba trace."""

from __future__ import annotations

import pytest

from analytics.simulation import trace_variants as tv
from analytics.simulation.placement_benchmark import run_seed
from ingest.trace import read_nodes, read_pods


@pytest.fixture(scope="module")
def trace() -> tuple[list, list]:
    return read_pods(), read_nodes()


def _gpu(tasks: list) -> list:
    return [t for t in tasks if t.num_gpu]


def test_default_is_the_trace(trace: tuple[list, list]) -> None:
    tasks, nodes = trace
    assert tv.variant_tasks("default", tasks, nodes) == sorted(tasks, key=lambda t: t.name)
    assert tv.variant_nodes("default", nodes) == nodes


def test_multigpu_appends_copies_of_multi_gpu_tasks(trace: tuple[list, list]) -> None:
    tasks, nodes = trace
    out = tv.variant_tasks("multigpu", tasks, nodes)
    added = out[len(tasks) :]
    assert out[: len(tasks)] == sorted(tasks, key=lambda t: t.name)
    assert added and all(t.num_gpu > 1 and "-mgpu-" in t.name for t in added)
    multi = sum(t.gpu_request_milli for t in out if t.num_gpu > 1)
    assert multi / sum(t.gpu_request_milli for t in out) == pytest.approx(tv.MULTIGPU_SHARE, abs=0.005)
    # the default trace has 7 % of its GPU request in multi-GPU tasks
    assert (
        sum(t.gpu_request_milli for t in tasks if t.num_gpu > 1) / sum(t.gpu_request_milli for t in tasks)
        < 0.08
    )


def test_gpushare_turns_whole_gpu_tasks_into_shares_seen_in_the_trace(trace: tuple[list, list]) -> None:
    tasks, nodes = trace
    out = tv.variant_tasks("gpushare", tasks, nodes)
    shares = {t.gpu_milli for t in tasks if t.num_gpu == 1 and t.gpu_milli < 1000}
    sharing = [t for t in _gpu(out) if t.num_gpu == 1 and t.gpu_milli < 1000]
    assert len(sharing) / len(_gpu(out)) == pytest.approx(tv.GPUSHARE_SHARE, abs=0.001)
    assert {t.gpu_milli for t in sharing} <= shares
    before = {t.name: t for t in tasks}
    changed = [t for t in out if t != before[t.name]]
    assert changed and all(before[t.name].gpu_milli == 1000 and before[t.name].num_gpu == 1 for t in changed)


def test_gpuspec_constrains_a_third_of_gpu_tasks_to_a_model_that_can_serve_them(
    trace: tuple[list, list],
) -> None:
    tasks, nodes = trace
    out = tv.variant_tasks("gpuspec", tasks, nodes)
    spec = [t for t in _gpu(out) if t.gpu_spec]
    assert len(spec) / len(_gpu(out)) == pytest.approx(tv.GPUSPEC_SHARE, abs=0.001)
    largest: dict[str, int] = {}
    for n in nodes:
        if n.gpu_model:
            largest[n.gpu_model] = max(largest.get(n.gpu_model, 0), n.gpus)
    assert all(len(t.gpu_spec) == 1 and largest[t.gpu_spec[0]] >= t.num_gpu for t in spec)
    assert len({t.gpu_spec for t in spec}) > 3


def test_nodes_merges_two_gpu_nodes_and_keeps_the_gpus(trace: tuple[list, list]) -> None:
    _, nodes = trace
    out = tv.variant_nodes("nodes", nodes)
    assert sum(n.gpus for n in out) == sum(n.gpus for n in nodes) == 6212
    assert sum(n.cpu_millicores for n in out) == sum(n.cpu_millicores for n in nodes)
    assert sum(1 for n in out if n.gpus == 2) <= 2  # one odd node per 2-GPU model at most
    pairs = sum(sum(1 for n in nodes if n.gpus == 2 and n.gpu_model == m) // 2 for m in ("P100", "T4"))
    assert pairs == 193 + 65 and len(out) == len(nodes) - pairs
    assert len({n.name for n in out}) == len(out)


def test_variants_are_fixed(trace: tuple[list, list]) -> None:
    tasks, nodes = trace
    for v in tv.VARIANTS:
        assert tv.variant_tasks(v, tasks, nodes) == tv.variant_tasks(v, list(reversed(tasks)), nodes)


def test_unknown_variant_is_refused(trace: tuple[list, list]) -> None:
    tasks, nodes = trace
    with pytest.raises(ValueError, match=r"unknown variant 'bogus'.*multigpu"):
        tv.variant_tasks("bogus", tasks, nodes)


def test_benchmark_runs_a_variant() -> None:
    r = run_seed("bestfit", 42, limit=300, variant="nodes")
    assert r.capacity_milli == 6212 * 1000 and r.placed == 300


def test_until_stops_at_the_first_task_past_the_mark() -> None:
    r = run_seed("bestfit", 42, limit=600, until=2)
    assert 100 * r.arrived[-1] > 2 * r.capacity_milli >= 100 * r.arrived[-2]
    assert r.tasks == len(r.arrived) < 600
