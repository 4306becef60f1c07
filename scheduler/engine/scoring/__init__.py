"""Node-scoring rules, by the name ``SessionConfig.node_scoring`` gives: the one table of them.

Like KAI's ``plugins/factory.go``, every rule is listed here explicitly, so which rules exist never depends
on which modules happen to have been imported (a replay or a service started from a bare import scores with
``fgd`` exactly as the CLI does). An unknown name is refused with the known ones (:func:`lookup`,
:func:`check_name`) when a config is loaded.

* ``kai``: KAI's summed node scores (:mod:`scheduler.engine.scoring.kai`), the default;
* ``bestfit``, ``fgd``, ``frag-aware``, ``frag-aware-models``: fragmentation-aware rules (:mod:`scheduler.engine.scoring.fragmentation`).

``fgd`` and ``frag-aware`` score against a task-type distribution; the table's entries use the shipped
trace's (read on first use). :func:`task_types_in_use` swaps in another distribution for the placement
benchmark's protocol, within a ``with`` block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scheduler.engine.scoring import fragmentation
from scheduler.engine.scoring.kai import kai_scores
from scheduler.engine.session import FRAGMENTATION_RULES

if TYPE_CHECKING:
    from scheduler.engine.scoring.fit import Fit
    from scheduler.engine.session import Session, TaskInfo

NodeScorer = Callable[["Session", "TaskInfo", Sequence["Fit"]], list[float]]
"""Scores for the fits of one task, higher is better (ties go to the node name)."""

DeviceChooser = Callable[["Session", "TaskInfo", "Fit"], "Fit"]
"""Re-chooses a Fit's GPU devices inside its node before scoring (e.g. FGD's least-fragmenting GPU)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One node-scoring rule: its scores and, optionally, its choice of devices inside a node."""

    score: NodeScorer
    choose_devices: DeviceChooser | None = None


class UnknownScoring(ValueError):
    """A config names a node-scoring rule this table does not have."""


def _fragmentation_rules(
    types: Sequence[fragmentation.TaskType] | None,
    models_types: Sequence[fragmentation.TaskType] | None = None,
) -> dict[str, Rule]:
    fgd, aware = fragmentation.policies(types)
    models = fragmentation.model_aware_policy(types if models_types is None else models_types)
    return {
        "fgd": Rule(fgd.scores, fgd.choose),
        "frag-aware": Rule(aware.scores, aware.choose),
        "frag-aware-models": Rule(models.scores, models.choose),
    }


_RULES: dict[str, Rule] = {
    "kai": Rule(kai_scores),
    "bestfit": Rule(fragmentation.bestfit_scores),
    **_fragmentation_rules(None),
}


def names() -> tuple[str, ...]:
    """The known rule names, sorted."""
    return tuple(sorted(_RULES))


def lookup(name: str) -> Rule:
    """The rule called `name`; :class:`UnknownScoring` naming the known ones otherwise."""
    rule = _RULES.get(name)
    if rule is None:
        raise UnknownScoring(f"unknown node_scoring {name!r} (known: {', '.join(names())})")
    return rule


def check_name(name: str) -> str:
    """`name` when it is a known rule (for config validators); :class:`UnknownScoring` otherwise."""
    lookup(name)
    return name


def is_plain_kai(name: str) -> bool:
    """Whether `name` scores exactly as ``kai`` does with no device chooser (the vectorised paths' case)."""
    rule = _RULES.get(name)
    return rule is not None and rule.score is kai_scores and rule.choose_devices is None


@contextmanager
def task_types_in_use(
    types: Sequence[fragmentation.TaskType],
    models_types: Sequence[fragmentation.TaskType] | None = None,
) -> Iterator[tuple[Rule, Rule]]:
    """Within the block, the fragmentation rules score against `types` (the benchmark protocol's per-trace
    distribution), ``frag-aware-models`` against `models_types` when given (the same trace at its own
    coverage); the shipped distribution is back afterwards. Yields ``fgd`` and ``frag-aware``."""
    saved = {k: _RULES[k] for k in FRAGMENTATION_RULES}
    _RULES.update(_fragmentation_rules(types, models_types))
    try:
        yield _RULES["fgd"], _RULES["frag-aware"]
    finally:
        _RULES.update(saved)


__all__ = [
    "FRAGMENTATION_RULES",
    "DeviceChooser",
    "NodeScorer",
    "Rule",
    "UnknownScoring",
    "check_name",
    "is_plain_kai",
    "lookup",
    "names",
    "task_types_in_use",
]
