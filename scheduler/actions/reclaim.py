"""reclaim: not implemented yet (placeholder so the action registry loads)."""

from __future__ import annotations

from scheduler.session import Session

NAME = "reclaim"


def run(ssn: Session) -> None:
    """Placeholder: does nothing until implemented."""
    return None
