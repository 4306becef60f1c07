"""``workload_types: decayed``: each node pool's task-type distribution learnt from its own recent pods.

The fold keeps each pool's recent submissions (``ClusterState.workload_history``); a cycle weighs them by age
at its logical time (half-life, window, refresh period from the config), so the distribution follows the
recorded workload, differs per pool, falls back to the shipped prior only for a pool with no history, and a
replay re-derives it exactly from the recorded inputs.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from analytics.rerun.replay import as_recorded, load_source, replay
from ingest import events as ev
from ingest.filelog import FileLog
from ingest.log import Topics
from scheduler.engine.cycle import run_cycle
from scheduler.engine.record.decisions import config_hash
from scheduler.engine.scoring.fragmentation import (
    decay_weight,
    decayed_mass,
    decayed_task_types,
    default_task_types,
)
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import NODE_POOL_LABEL, PoolHistory, StateBuilder
from scheduler.service import Service
from tests.support.fairshare_inputs import append_events

S = 1000
H = 3600 * S
DAY = 86_400 * S


def _group(name: str, at: int, pool: str | None = None) -> ev.PodGroupUpserted:
    if pool is None:
        return ev.PodGroupUpserted(at_ms=at, name=name, namespace="ns", queue="q", created_at_ms=at)
    return ev.PodGroupUpserted(
        v=2, at_ms=at, name=name, namespace="ns", queue="q", created_at_ms=at, node_pool=pool
    )


def _pod(name: str, group: str, gpus: int, at: int) -> ev.PodSubmitted:
    return ev.PodSubmitted(
        at_ms=at,
        name=name,
        namespace="ns",
        pod_group=group,
        requests=ev.PodRequests(gpus=gpus),
        created_at_ms=at,
    )


def _history(group: str, gpus: int, pods: int, at: int, pool: str | None = None) -> list[ev.EventBase]:
    out: list[ev.EventBase] = [_group(group, at, pool)]
    for i in range(pods):
        name = f"{group}-{i}"
        out += [_pod(name, group, gpus, at), ev.PodDeleted(at_ms=at, name=name, namespace="ns")]
    return out


def _cluster(history: list[ev.EventBase], at: int, pool: str = "a") -> list[ev.EventBase]:
    """Two 8-GPU nodes of `pool`, n1 with 3 GPUs free and n2 with 6, after `history`; then a pending 2-GPU
    pod of the pool at `at` (the case tests/scheduler/engine/scoring/test_learnt_workload.py uses: a pool
    that runs 3-GPU pods keeps n2's six GPUs for two of them, one that runs 1-GPU pods does not care)."""
    labels = {NODE_POOL_LABEL: pool}
    out: list[ev.EventBase] = [
        ev.NodeUpserted(at_ms=0, name=n, cpu_millicores=64_000, memory_bytes=2**38, gpus=8, labels=labels)
        for n in ("n1", "n2")
    ]
    out += [ev.QueueUpserted(at_ms=0, name="q"), *history]
    for node, gpus in (("n1", 5), ("n2", 2)):
        name = f"fill-{node}"
        out += [_group(name, at, pool), _pod(name, name, gpus, at)]
        out.append(ev.PodBound(at_ms=at, name=name, namespace="ns", node=node))
    out += [_group("new", at, pool), _pod("new", "new", 2, at)]
    return out


def _fold(events: list[ev.EventBase]) -> StateBuilder:
    b = StateBuilder()
    for e in events:
        b.apply(e)
    return b


def _landing(events: list[ev.EventBase], config: SessionConfig, now_ms: int) -> str | None:
    record, _ = run_cycle(_fold(events).snapshot(), config, now_ms)
    nodes = [d.node for d in record.decisions if d.kind == "Bind" and d.pod == "ns/new"]
    return nodes[0] if nodes else None


def test_weights_halve_every_half_life_in_exact_integers() -> None:
    assert [decay_weight(a, H) for a in (-5, 0, H // 2, H, 2 * H, 3 * H)] == [
        1_000_000,
        1_000_000,
        750_000,
        500_000,
        250_000,
        125_000,
    ]
    ages = range(0, 30 * H, H // 7)
    weights = [decay_weight(a, H) for a in ages]
    assert all(a >= b for a, b in itertools.pairwise(weights)) and weights[-1] == 0


def test_the_mass_decays_with_age_and_leaves_the_window() -> None:
    one, three = (0, 1000, 1, ()), (0, 1000, 3, ())
    history = [(0, three), (0, three), (2 * H, one)]
    # At 2 h (refresh 10 min, half-life 1 h): the two 3-GPU pods weigh a quarter each, the fresh one a pod.
    assert decayed_mass(history, 2 * H + 5 * 60 * S, H, DAY, 600 * S) == {three: 500_000, one: 1_000_000}
    # Past the window (3 h) the old pods count nothing; the distribution is the recent one alone.
    assert decayed_mass(history, 5 * H, H, 3 * H, 600 * S) == {one: 125_000}
    types = decayed_task_types(history, 5 * H, H, 3 * H, 600 * S)
    assert [(t.num_gpu, t.weight) for t in types] == [(1, 1.0)]
    # No weight left at all: the shipped prior, and only then.
    assert decayed_task_types(history, 40 * DAY, H, DAY, 600 * S) == default_task_types()
    assert decayed_task_types([], 0, H, DAY, 600 * S) == default_task_types()


def test_the_fold_keeps_each_pools_history() -> None:
    events = [
        *_history("ga", 3, 5, 10 * S, pool="a"),
        *_history("gb", 1, 4, 20 * S, pool="b"),
        _group("plain", 30 * S),
        _pod("p0", "plain", 2, 30 * S),
    ]
    b = _fold(events)
    pools = dict(b.snapshot().workload_history)
    assert sorted(pools) == ["", "a", "b"]  # "" = the default pool (no label)
    assert pools["a"] == ((10 * S, (0, 1000, 3, ())),)  # the snapshot shows a pool's first pod at once
    assert list(b.history.recent["a"]) == [(10 * S, (0, 1000, 3, ()))] * 5
    assert list(b.history.recent["b"]) == [(20 * S, (0, 1000, 1, ()))] * 4
    assert pools[""] == ((30 * S, (0, 1000, 2, ())),)


def test_a_pools_snapshot_history_refreshes_in_steps_and_keeps_its_last_pods() -> None:
    h = PoolHistory()
    h.add("a", 0, (0, 1000, 1, ()))
    assert dict(h.frozen)["a"] == ((0, (0, 1000, 1, ())),)  # a pool's first pod is seen at once
    for i in range(h.HISTORY + h.REFRESH):  # the last of these refreshes the view
        h.add("a", i + 1, (0, 1000, 4, ()))
    frozen = dict(h.frozen)["a"]
    assert len(frozen) == h.HISTORY and frozen[0][1] == (0, 1000, 4, ())  # the first pod has left
    before = h.frozen
    h.add("a", 10**6, (0, 500, 1, ()))
    assert h.frozen is before  # between refreshes the snapshot holds still (scorer memos survive)
    h.add("b", 5, (0, 1000, 2, ()))
    assert sorted(dict(h.frozen)) == ["a", "b"]


@pytest.mark.parametrize("rule", ["fgd", "frag-aware"])
def test_the_placement_follows_the_pools_recent_workload(rule: str) -> None:
    config = SessionConfig(node_scoring=rule, workload_half_life_s=3600, workload_window_s=86_400)
    now = 2 * DAY
    three = _landing(_cluster(_history("h", 3, 1000, now - H, pool="a"), now), config, now)
    one = _landing(_cluster(_history("h", 1, 1000, now - H, pool="a"), now), config, now)
    assert three == "n2" and one != three
    # The same 3-GPU history recorded in another pool does not move this pool's placement ...
    elsewhere = _landing(_cluster(_history("h", 3, 1000, now - H, pool="b"), now), config, now)
    prior = _landing(_cluster([], now), replace(config, workload_types="prior"), now)
    assert elsewhere == prior
    # ... and neither does one that has left the window: older 3-GPU pods lose to recent 1-GPU ones.
    aged = [*_history("old", 3, 1000, 0, pool="a"), *_history("h", 1, 200, now - H, pool="a")]
    assert _landing(_cluster(aged, now), config, now) == one
    # With a window long enough to still hold them (a month), the 1,000 old pods win again.
    month = replace(config, workload_window_s=30 * 86_400, workload_half_life_s=30 * 86_400)
    assert _landing(_cluster(aged, now), month, now) == three


def test_the_settings_are_config_hashed_only_where_they_change_decisions() -> None:
    fgd = SessionConfig(node_scoring="fgd")
    assert config_hash(replace(fgd, workload_half_life_s=60)) != config_hash(fgd)
    assert config_hash(fgd.with_learnt_types()) == config_hash(
        replace(fgd.with_learnt_types(), workload_window_s=60)
    )
    assert config_hash(SessionConfig()) == config_hash(
        replace(SessionConfig(), workload_half_life_s=60)
    )  # kai
    # A log recorded when ``learnt`` was the default replays under today's config as it ran.
    assert as_recorded(fgd, config_hash(fgd.with_learnt_types())) == fgd.with_learnt_types()
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="workload_half_life_s"):
            SessionConfig(workload_half_life_s=bad)  # type: ignore[arg-type]


def test_a_service_run_with_decayed_pool_distributions_replays_exactly(tmp_path: Path) -> None:
    config = SessionConfig(node_scoring="frag-aware", workload_half_life_s=3600, workload_refresh_s=60)
    now = 2 * DAY
    history = [
        *_history("old", 1, 300, now - 20 * H, pool="a"),
        *_history("h", 3, 300, now - H, pool="a"),
        *_history("hb", 1, 300, now - H, pool="b"),
    ]
    topics = Topics()
    with FileLog(tmp_path) as log:
        append_events(log, _cluster(history, now))
        Service(log, topics, config).run(stop_when_idle=True)
    summary = replay(load_source(tmp_path, config=config), verify=True)
    assert summary.cycles > 0 and summary.mismatches == 0
    with FileLog(tmp_path) as log:
        decisions = b"".join(r.value for r in log.read(topics.decisions, 0, 1000))
    assert b'"node":"n2"' in decisions


def test_an_engine_config_file_sets_the_settings_and_refuses_bad_ones(tmp_path: Path) -> None:
    from scheduler.config import EngineConfigError, load_engine_config

    good = tmp_path / "engine.yaml"
    good.write_text("node_scoring: frag-aware\nworkload_half_life_s: 7200\nworkload_window_s: 172800\n")
    cfg = load_engine_config(good)
    assert (cfg.workload_types, cfg.workload_half_life_s, cfg.workload_window_s) == ("decayed", 7200, 172_800)
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload_refresh_s: 0\n")
    with pytest.raises(EngineConfigError, match="workload_refresh_s must be a whole number of seconds >= 1"):
        load_engine_config(bad)
