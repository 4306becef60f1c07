"""Where ``hourglass simulate`` writes, checked before the run so a bad path costs no simulated day.

* ``--out DIR``: a new directory (parents created), an empty one, or — only with ``--force`` — a directory
  already holding files, whose run files are then replaced. A file, or a directory that cannot be written, is
  refused. Refusing by default keeps a second run from silently overwriting the first run's log and, with it,
  every audit store and report built from it.
* ``--plot FILE``: its directory must exist and be writable, the name must not be a directory, and the
  suffix must be a format matplotlib writes. An existing plot is replaced, as image tools do.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["OutputError", "check_out_dir", "check_plot_path"]


class OutputError(ValueError):
    """An output path ``simulate`` cannot or will not write; the message is the one line the user sees."""


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def _writable_dir(option: str, path: Path, directory: Path) -> None:
    """Refuse unless ``directory`` (where ``path`` would be created) is a directory this process can write."""
    if not directory.is_dir():
        raise OutputError(f"{option} {path}: {directory} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputError(f"{option} {path}: cannot write in {directory} (permission denied)")


def check_out_dir(path: Path, *, force: bool) -> None:
    """Refuse an ``--out`` directory the run could not write or would overwrite without ``force``."""
    if path.exists() and not path.is_dir():
        raise OutputError(f"--out {path}: is a file, not a directory")
    if path.is_dir():
        _writable_dir("--out", path, path)
        if not force and any(path.iterdir()):
            raise OutputError(
                f"--out {path}: the directory is not empty (pass --force to replace its run files)"
            )
        return
    _writable_dir("--out", path, _nearest_existing(path.parent))


def check_plot_path(path: Path) -> None:
    """Refuse a ``--plot`` file that cannot be written, before the run rather than after it."""
    from matplotlib.backend_bases import FigureCanvasBase

    if path.is_dir():
        raise OutputError(f"--plot {path}: is a directory, not a file")
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = path.suffix.removeprefix(".").lower()
    if suffix not in formats:
        raise OutputError(
            f"--plot {path}: unknown image format {path.suffix or '(no suffix)'!r}"
            f" (one of {', '.join('.' + f for f in sorted(formats))})"
        )
    parent = path.parent
    if not parent.exists():
        raise OutputError(f"--plot {path}: no directory {parent}")
    _writable_dir("--plot", path, parent)
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputError(f"--plot {path}: cannot overwrite it (permission denied)")
