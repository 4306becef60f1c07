"""The bytes of a v3 cycle record: the same content as a v2 record, without what a reader can put back.

A v2 record (what :func:`scheduler.engine.record.decisions.make_record` makes, and what logs held before v3)
writes every field of every decision. On the decision history's scenario (``docs/history.md``) a third of a
delta's bytes was fields at their default (``"pod":null``, ``"gpu_devices":[]``, ``"details":{}`` …) and
another third the messages of pending jobs, which in one record are nearly all the same sentence with a
different pod name in it. A v3 record is written as:

* **no field at its default**: a decision's fields equal to the :class:`~scheduler.engine.record.decisions.
  Decision` default, and the record's ``base``, ``usage_snapshot_id``, ``usage_available`` and empty lists
  (:data:`RECORD_DEFAULTS`); ``v``, ``kind``, ``cycle_id``, ``events_offset``, ``logical_time_ms`` and
  ``config_hash`` are always written (readers that parse raw JSON use them);
* **a message said twice is written once**: ``message_templates`` lists each message that two or more
  decisions of the record share, with the decision's ``details.task`` (the pod the message is about) as
  :data:`TASK`; such a decision's ``message`` is the template's index (an integer, which a v2 message
  never is).

:func:`encode` and :func:`decode` work on the record's JSON object (``dict``), each record by itself: the
binder and the PodGroup status writer read one record at a time. ``decode(encode(x)) == x`` for every
record; a message that cannot be templated exactly (it contains :data:`TASK` itself) is written as it is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["RECORD_DEFAULTS", "TASK", "TEMPLATES", "decode", "encode"]

# What stands for the pod's name in a template.
TASK: Final = "{task}"
TEMPLATES: Final = "message_templates"
# The record fields a v3 record leaves out at these values (JSON values, as model_dump(mode="json") gives).
RECORD_DEFAULTS: Final[Mapping[str, Any]] = {
    "base": None,
    "usage_snapshot_id": None,
    "usage_available": True,
    "queues": [],
    "decisions": [],
    "cleared": [],
    "queues_removed": [],
}


def _task(d: Mapping[str, Any]) -> str | None:
    details = d.get("details")
    task = details.get("task") if isinstance(details, dict) else None
    return task if isinstance(task, str) and task else None


def _template(d: Mapping[str, Any]) -> str | None:
    """The message of *d* with its pod's name as :data:`TASK`; None if it has no message or cannot be
    templated exactly."""
    message = d.get("message")
    if not isinstance(message, str) or TASK in message:
        return None
    task = _task(d)
    if task is None:
        return message
    template = message.replace(task, TASK)
    return template if template.replace(TASK, task) == message else None


def encode(data: Mapping[str, Any], decision_defaults: Mapping[str, Any]) -> dict[str, Any]:
    """A v2 record's JSON object (every field) as the v3 record's: defaults out, shared messages once."""
    decisions = list(data.get("decisions", []))
    shapes = [_template(d) for d in decisions]
    counts = Counter(s for s in shapes if s is not None)
    index: dict[str, int] = {}
    for s in shapes:  # in decision order: the record's canonical order makes the indices deterministic
        if s is not None and counts[s] > 1 and s not in index:
            index[s] = len(index)
    out_decisions = []
    for d, s in zip(decisions, shapes, strict=True):
        slim = {k: v for k, v in d.items() if k not in decision_defaults or v != decision_defaults[k]}
        if s is not None and s in index:
            slim["message"] = index[s]
        out_decisions.append(slim)
    out = {k: v for k, v in data.items() if k not in RECORD_DEFAULTS or v != RECORD_DEFAULTS[k]}
    if out_decisions:
        out["decisions"] = out_decisions
    if index:
        out[TEMPLATES] = list(index)
    return out


def decode(data: Mapping[str, Any], decision_defaults: Mapping[str, Any]) -> dict[str, Any]:
    """A v3 record's JSON object with every field back (the inverse of :func:`encode`).

    Raises ValueError for a message index with no template.
    """
    out = {k: _copy(v) for k, v in RECORD_DEFAULTS.items()}
    out.update((k, v) for k, v in data.items() if k != TEMPLATES)
    templates = data.get(TEMPLATES, [])
    if not isinstance(templates, list) or not all(isinstance(t, str) for t in templates):
        raise ValueError(f"{TEMPLATES} must be a list of strings")
    decisions = []
    for d in out["decisions"]:
        if not isinstance(d, dict):
            decisions.append(d)  # the model's validation says what is wrong with it
            continue
        full = {k: _copy(v) for k, v in decision_defaults.items()}
        full.update(d)
        ref = full.get("message")
        if isinstance(ref, int) and not isinstance(ref, bool):
            if not 0 <= ref < len(templates):
                raise ValueError(
                    f"decision message refers to template {ref}; the record has {len(templates)}"
                )
            task = _task(full)
            full["message"] = templates[ref].replace(TASK, task) if task is not None else templates[ref]
        decisions.append(full)
    out["decisions"] = decisions
    return out


def _copy(v: Any) -> Any:
    # Defaults are shared: a list or dict handed out must not be one another record could change.
    return type(v)() if isinstance(v, list | dict) else v
