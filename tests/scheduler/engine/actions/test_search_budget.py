"""The reclaim / preempt search budget (``SessionConfig.solver_job_budget`` / ``solver_action_budget``).

A budget never cut changes nothing (same decisions as the unbounded search); a cut job says so in its
Unschedulable decision; configs recorded before the budget existed keep their hash and replay unbounded.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.reports.explain import advice
from analytics.rerun.replay import as_recorded, engine_config
from ingest.tenants import EngineSpec
from scheduler.config import EngineConfigError, load_engine_config, session_config
from scheduler.engine.actions import solver
from scheduler.engine.actions.budget import REASON
from scheduler.engine.cycle import open_session, result_state, run_actions, settle
from scheduler.engine.record.decisions import Decision, config_hash, make_record
from scheduler.engine.session import SessionConfig
from scheduler.engine.state import ClusterState, fold
from tests.support.paths import FIXTURES
from tests.support.synthetic import SyntheticSpec, reclaim_large_events, synthetic_events

# A small contended workload whose reclaim succeeds for two jobs after 7 and 1 simulated scenarios and fails
# two after 19 each (found by scanning seeds; the figures are asserted below).
CONTENDED = SyntheticSpec(
    nodes=6, gpus_per_node=8, pending_pods=60, departments=2, queues_per_department=2, seed=5
)


def _busy(spec: SyntheticSpec) -> ClusterState:
    """The workload after one allocate cycle: running jobs (victims) and the rest pending."""
    ssn = open_session(fold(synthetic_events(spec)), now_ms=1_000_000)
    run_actions(ssn, ("allocate",))
    return settle(result_state(ssn))


class _Counts:
    """Simulations per reclaim / preempt attempt, recorded around Solver.solve."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.attempts: list[tuple[str, str, bool, int]] = []
        orig = solver.Solver.solve

        def solve(s: solver.Solver, job: Any, victims: Any) -> Any:
            before = s.ssn.work[f"{s.action}.simulations"]
            out = orig(s, job, victims)
            self.attempts.append(
                (s.action, job.uid, out is not None, s.ssn.work[f"{s.action}.simulations"] - before)
            )
            return out

        monkeypatch.setattr(solver.Solver, "solve", solve)


def _cycle(state: ClusterState, config: SessionConfig) -> tuple[list[Decision], dict[str, int]]:
    ssn = open_session(state, config=config, now_ms=2_000_000)
    run_actions(ssn)
    return make_record(ssn, 0).decisions, dict(ssn.work)


def _cut(decisions: list[Decision]) -> dict[str, Decision]:
    return {d.job: d for d in decisions if d.kind == "Unschedulable" and d.reason == REASON}


def test_contended_workload_needs_the_figures_the_table_assumes(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = _Counts(monkeypatch)
    _cycle(_busy(CONTENDED), SessionConfig().unbudgeted())
    reclaim = [(ok, n) for action, _, ok, n in counts.attempts if action == "reclaim"]
    assert sorted(n for ok, n in reclaim if ok) == [1, 7]
    assert sorted(n for ok, n in reclaim if not ok) == [19, 19]


@pytest.mark.parametrize(
    ("job_budget", "action_budget", "same_as_unbounded", "cut_messages"),
    [
        (None, None, True, ()),
        (19, None, True, ()),  # what the longest attempt uses: nothing is cut
        (256, 1024, True, ()),  # the defaults
        (19, 44, True, ()),  # the failed simulations (6 + 0 + 19 + 19) just fit
        (6, None, False, ("reclaim search stopped after 6 scenarios: the per-job budget of 6",)),
        (None, 10, False, ("reclaim search stopped after ", "the reclaim action's budget of 10 failed scenarios")),
        (0, None, False, ("reclaim search stopped after 0 scenarios: the per-job budget of 0",)),
    ],
)
def test_budget_cuts_only_what_it_must_and_says_so(
    job_budget: int | None, action_budget: int | None, same_as_unbounded: bool, cut_messages: tuple[str, ...]
) -> None:
    state = _busy(CONTENDED)
    base, _ = _cycle(state, SessionConfig().unbudgeted())
    got, work = _cycle(state, SessionConfig(solver_job_budget=job_budget, solver_action_budget=action_budget))
    assert (got == base) is same_as_unbounded
    cut = _cut(got)
    if not cut_messages:
        assert not cut and not work.get("reclaim.cut")
        return
    assert cut, "a cut search must show in the job's Unschedulable decision"
    assert any(all(m in d.message for m in cut_messages) for d in cut.values()), [
        d.message for d in cut.values()
    ]
    for d in cut.values():
        assert "not proven unschedulable" in d.message
        assert d.details["action"] in ("reclaim", "preempt")
    if job_budget is not None:
        assert all(d.details["scenarios"] <= job_budget for d in cut.values())
    if action_budget is not None:
        assert work.get("reclaim.wasted", 0) <= action_budget


def test_after_a_cut_every_later_job_is_told() -> None:
    decisions, work = _cycle(_busy(CONTENDED), SessionConfig(solver_job_budget=None, solver_action_budget=5))
    assert work["reclaim.wasted"] == 5 and work["reclaim.attempts"] == 1
    cut = _cut(decisions)
    first = [d for d in cut.values() if "like" not in d.details]
    assert len(first) == 1 and first[0].message.startswith(
        "reclaim search stopped after 5 scenarios: the reclaim action's budget of 5 failed scenarios"
    )
    # The jobs after it with the same signature are not searched again, but each is told why.
    later = [d for d in cut.values() if "like" in d.details]
    assert len(later) == work["reclaim.cut"] - 1 >= 2
    for d in later:
        assert d.details["like"] == first[0].job and d.details["scenarios"] == 0
        assert d.message.startswith("reclaim search skipped: the search for ")
        assert "not proven unschedulable" in d.message


@settings(max_examples=12, deadline=None)
@given(
    st.builds(
        SyntheticSpec,
        nodes=st.integers(2, 8),
        gpus_per_node=st.sampled_from([2, 4, 8]),
        pending_pods=st.integers(10, 80),
        departments=st.integers(1, 3),
        queues_per_department=st.integers(1, 3),
        seed=st.integers(0, 10_000),
    ),
    st.integers(0, 20),
    st.integers(0, 60),
)
def test_budget_property(spec: SyntheticSpec, job_budget: int, action_budget: int) -> None:
    """A budget at or above what the unbounded search used gives the unbounded search's decisions; any
    budget bounds the work, and a job whose search it cut says so."""
    state = _busy(spec)
    base, base_work = _cycle(state, SessionConfig().unbudgeted())
    got, work = _cycle(state, SessionConfig(solver_job_budget=job_budget, solver_action_budget=action_budget))
    for action in ("reclaim", "preempt"):
        assert work.get(f"{action}.wasted", 0) <= action_budget
    cut = _cut(got)
    assert all(d.details["scenarios"] <= job_budget for d in cut.values())
    if not work.get("reclaim.cut", 0) and not work.get("preempt.cut", 0):
        assert got == base  # the budget never stopped a search: it is the unbounded search
    # Above what the unbounded search used (at exactly that, a later job that would have failed on the
    # bounds without simulating is told the budget was used up, which is also true).
    roomy = max(base_work.get("reclaim.simulations", 0), base_work.get("preempt.simulations", 0)) + 1
    assert _cycle(state, SessionConfig(solver_job_budget=roomy, solver_action_budget=roomy))[0] == base


def test_unbounded_search_when_nothing_is_cut() -> None:
    state = _busy(CONTENDED)
    base, work = _cycle(state, SessionConfig().unbudgeted())
    total = work["reclaim.simulations"] + 1
    got, _ = _cycle(state, SessionConfig(solver_job_budget=total, solver_action_budget=total))
    assert got == base and not _cut(got)


def test_configs_recorded_without_the_budget_keep_their_hash_and_replay_unbounded() -> None:
    cfg = SessionConfig()
    old = asdict(cfg)
    del old["solver_job_budget"], old["solver_action_budget"], old["workload_types"]  # newer fields
    del old["solver_job_budget_counts"]
    del old["node_pool"], old["node_pool_label"]
    del old["workload_half_life_s"], old["workload_window_s"], old["workload_refresh_s"]  # read only by fgd
    old_hash = config_hash(cfg.unbudgeted())
    import hashlib

    blob = json.dumps(old, sort_keys=True, separators=(",", ":")).encode()
    assert old_hash == hashlib.sha256(blob).hexdigest()[:16]
    assert config_hash(cfg) != old_hash  # the budget is part of a new run's recorded config
    manifest = {"engine_config": old, "engine_config_hash": old_hash}
    replayed = engine_config(manifest)
    assert replayed.solver_job_budget is None and replayed.solver_action_budget is None
    # A log's cycles carry only the hash: the default config matches them once its budget is dropped.
    assert as_recorded(cfg, old_hash) == cfg.unbudgeted()
    assert as_recorded(cfg, config_hash(cfg)) == cfg
    assert as_recorded(cfg, "0123456789abcdef") == cfg  # a real mismatch is left to the caller's error
    fixture = json.loads((FIXTURES / "v1-run" / "manifest.json").read_text())
    assert engine_config(fixture).solver_action_budget is None


@pytest.mark.parametrize("value", [-1, 1.5, "many", True])
def test_bad_budget_is_a_clear_error(tmp_path: Path, value: object) -> None:
    with pytest.raises(ValueError, match="solver_job_budget must be a whole number of scenarios"):
        SessionConfig(solver_job_budget=value)  # type: ignore[arg-type]
    f = tmp_path / "engine.json"
    f.write_text(json.dumps({"solver_action_budget": value}))
    with pytest.raises(EngineConfigError, match="solver_action_budget must be a whole number"):
        load_engine_config(f)


def test_explain_advises_on_a_cut_search() -> None:
    text = advice(REASON, {"action": "preempt"}, None, None, [])
    assert "preempt search was stopped by the engine's search budget" in text and "solver_job_budget" in text


def test_tenants_engine_section_sets_the_budget() -> None:
    assert session_config(EngineSpec()).solver_job_budget == SessionConfig().solver_job_budget
    cfg = session_config(EngineSpec(solver_job_budget=8, solver_action_budget=None))
    assert (cfg.solver_job_budget, cfg.solver_action_budget) == (8, None)
    with pytest.raises(ValueError, match="solver_job_budget"):
        EngineSpec(solver_job_budget=-1)


def test_a_gang_larger_than_the_job_budget_reclaims_when_only_failed_scenarios_count() -> None:
    """KAI's ReclaimLargeJobs at 10 nodes: a 5-pod gang solved partial job by partial job, one simulation
    each. A job budget of 3 cut it when every simulation counted (a gang of more pods than the budget could
    never reclaim); counting failed simulations only, as the action budget does, it reclaims as KAI does."""
    state = fold(reclaim_large_events(10))

    def reclaim(config: SessionConfig) -> tuple[dict[str, int], list[Decision]]:
        ssn = open_session(state, config=config, now_ms=10**9)
        run_actions(ssn, ("reclaim",))
        decisions = make_record(ssn, 0).decisions
        kinds: dict[str, int] = {}
        for d in decisions:
            kinds[d.kind] = kinds.get(d.kind, 0) + 1
        return kinds, decisions

    assert SessionConfig().solver_job_budget_counts == "failed"
    kinds, decisions = reclaim(SessionConfig(solver_job_budget=3))
    assert kinds.get("Pipeline") == 5 and kinds.get("Evict") == 40 and not _cut(decisions)
    assert (kinds, decisions) == reclaim(SessionConfig(solver_job_budget=None))
    kinds, decisions = reclaim(SessionConfig(solver_job_budget=3).counting_every_scenario())
    assert "Pipeline" not in kinds and "Evict" not in kinds
    (cut,) = _cut(decisions).values()
    assert "stopped after 3 scenarios: the per-job budget of 3 scenarios" in cut.message


def test_configs_recorded_before_failed_counting_replay_counting_every_scenario() -> None:
    cfg = SessionConfig()
    every = cfg.counting_every_scenario()
    assert config_hash(every) != config_hash(cfg)
    assert as_recorded(cfg, config_hash(every)) == every
    old = asdict(every)
    del old["solver_job_budget_counts"]
    assert engine_config({"engine_config": old, "engine_config_hash": config_hash(every)}) == every
    with pytest.raises(ValueError, match="solver_job_budget_counts must be 'failed' or 'all', not 'some'"):
        SessionConfig(solver_job_budget_counts="some")
