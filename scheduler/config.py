"""The engine's configuration as users write it: an engine config file, or a tenants file's ``engine`` section.

Both become one :class:`scheduler.engine.session.SessionConfig`; every name that changes decisions (the
node-scoring rule among them) is checked here, when the config is loaded, so an unknown one is refused with
the known names instead of failing mid-cycle.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ingest.kube.kai_shard import ShardError, is_shard, read_shard
from scheduler.engine import scoring
from scheduler.engine.session import SessionConfig

if TYPE_CHECKING:
    from ingest.tenants import EngineSpec


log = logging.getLogger(__name__)


class EngineConfigError(ValueError):
    """An engine config that cannot be used; the message names the file and the field."""


def load_engine_config(path: Path | str) -> SessionConfig:
    """A :class:`SessionConfig` from a JSON or YAML mapping of its fields, or from a KAI ``SchedulingShard``
    (KAI's field names, :mod:`ingest.kube.kai_shard`); clear errors otherwise."""
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise EngineConfigError(f"{p}: cannot read engine config: {exc}") from exc
    except RecursionError:  # PyYAML recurses per nesting level
        raise EngineConfigError(f"{p}: cannot read engine config: nested too deeply") from None
    if data is None:
        data = {}
    if is_shard(data):
        return _from_kai_shard(p, data)
    if not isinstance(data, dict):
        raise EngineConfigError(f"{p}: engine config must be a mapping of SessionConfig fields")
    known = set(SessionConfig.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise EngineConfigError(f"{p}: unknown engine config field(s) {unknown}; known: {sorted(known)}")
    for name, value in data.items():
        field = SessionConfig.__dataclass_fields__[name]
        if value is None and "None" in str(field.type):
            continue
        why = _engine_value_problem(field.default, value)
        if why is not None:
            raise EngineConfigError(f"{p}: {name} must be {why}, not {_short_repr(value)}")
    try:
        config = SessionConfig(**data)
        scoring.check_name(config.node_scoring)
    except (TypeError, ValueError) as exc:
        raise EngineConfigError(f"{p}: {exc}") from exc
    return config


def _from_kai_shard(p: Path, doc: dict[str, object]) -> SessionConfig:
    """A KAI SchedulingShard as the engine config (ingest/kube/kai_shard.py maps KAI's fields); the fields
    it cannot honour are logged in one warning."""
    try:
        shard = read_shard(doc)  # type: ignore[arg-type]
        config = SessionConfig(**shard.engine)
        scoring.check_name(config.node_scoring)
    except (ShardError, TypeError, ValueError) as exc:
        raise EngineConfigError(f"{p}: {exc}") from exc
    if (warning := shard.warning(str(p))) is not None:
        log.warning("%s", warning)
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


#: Ranges of engine config numbers: whole milliseconds, counts and budgets stay far inside int64 (and
#: the engine's exact integer arithmetic); factors stay finite.
_ENGINE_MAX_INT: Final = 10**15
_ENGINE_MAX_FLOAT: Final = 1e6


def _engine_value_problem(default: object, value: object) -> str | None:
    """Why ``value`` cannot replace an engine config field whose default is ``default`` (None if it can)."""
    if isinstance(default, bool) or isinstance(value, bool):
        if isinstance(value, bool) == isinstance(default, bool):
            return None
        if isinstance(default, bool):
            return "true or false"
        return "a whole number" if isinstance(default, int) else "a number"
    if isinstance(default, int):
        if not isinstance(value, int):
            return "a whole number"
        if not 0 <= value <= _ENGINE_MAX_INT:
            return f"a whole number from 0 to {_ENGINE_MAX_INT}"
    elif isinstance(default, float):
        if not isinstance(value, int | float):
            return "a number"
        if not 0 <= value <= _ENGINE_MAX_FLOAT:  # also refuses NaN
            return f"a number from 0 to {_ENGINE_MAX_FLOAT:g}"
    elif isinstance(default, str) and not (isinstance(value, str) and len(value) <= 100):
        return "a name"
    return None


def _short_repr(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
