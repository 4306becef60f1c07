"""Quantities written for people: durations in the unit that reads best."""

from __future__ import annotations


def duration(seconds: float) -> str:
    """Seconds as s, min, h or d (the summary's and whatif's tables)."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
