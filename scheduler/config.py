"""The engine's configuration as users write it: an engine config file, or a tenants file's ``engine`` section.

Both become one :class:`scheduler.engine.session.SessionConfig`; every name that changes decisions (the
node-scoring rule among them) is checked here, when the config is loaded, so an unknown one is refused with
the known names instead of failing mid-cycle.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from scheduler.engine import scoring
from scheduler.engine.session import SessionConfig

if TYPE_CHECKING:
    from ingest.tenants import EngineSpec


class EngineConfigError(ValueError):
    """An engine config that cannot be used; the message names the file and the field."""


def load_engine_config(path: Path | str) -> SessionConfig:
    """A :class:`SessionConfig` from a JSON or YAML mapping of its fields; clear errors otherwise."""
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise EngineConfigError(f"{p}: cannot read engine config: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise EngineConfigError(f"{p}: engine config must be a mapping of SessionConfig fields")
    known = set(SessionConfig.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise EngineConfigError(f"{p}: unknown engine config field(s) {unknown}; known: {sorted(known)}")
    try:
        config = SessionConfig(**data)
        scoring.check_name(config.node_scoring)
    except (TypeError, ValueError) as exc:
        raise EngineConfigError(f"{p}: {exc}") from exc
    return config


def session_config(spec: EngineSpec) -> SessionConfig:
    """The engine configuration a tenants / scenario file's ``engine`` section describes."""
    scoring.check_name(spec.node_scoring)
    return SessionConfig(
        gpu_placement=spec.gpu_placement,
        cpu_placement=spec.cpu_placement,
        gpu_sharing_placement=spec.gpu_sharing_placement,
        node_scoring=spec.node_scoring,
        k_value=spec.k_value,
        default_preempt_min_runtime_ms=spec.default_preempt_min_runtime_s * 1000,
        default_reclaim_min_runtime_ms=spec.default_reclaim_min_runtime_s * 1000,
        solver_job_budget=spec.solver_job_budget,
        solver_action_budget=spec.solver_action_budget,
        topology_details=spec.topology_details,
    )
