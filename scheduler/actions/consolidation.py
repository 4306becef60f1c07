"""consolidation: not implemented yet (placeholder so the action registry loads)."""

from __future__ import annotations

from scheduler.session import Session

NAME = "consolidation"


def run(ssn: Session) -> None:
    """Placeholder: does nothing until implemented."""
    return None
