"""preempt: not implemented yet (placeholder so the action registry loads)."""

from __future__ import annotations

from scheduler.session import Session

NAME = "preempt"


def run(ssn: Session) -> None:
    """Placeholder: does nothing until implemented."""
    return None
