"""Tables that fit the terminal: how wide the output is, and rich tables laid out to that width with every
number whole.

Width: a terminal's own width; when the output is not a terminal (a pipe, a file), ``COLUMNS`` if it is set,
else :data:`DEFAULT_WIDTH` (rich alone would assume 80 and cut numbers). A table wider than that first folds
its text cells (reasons, labels), breaking a word too long for its column between the words of its
CamelCase (``PodScheduling`` / ``Errors``) rather than mid-word; numbers and queue names are never broken
(such a column is at least as wide as its widest cell); if those alone do not fit, the least important columns are left out and the caller
prints a note naming them (:func:`dropped_note`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = ["DEFAULT_WIDTH", "Col", "console", "dropped_note", "fitted_table", "output_width", "wrap_lines"]

#: Columns assumed when the output is not a terminal and ``COLUMNS`` is not set.
DEFAULT_WIDTH = 100
#: A text column is folded down to no fewer than this many characters before columns are left out.
_TEXT_MIN = 10


def console(file: IO[str] | None = None) -> Console:
    """A rich console as wide as the output (module doc): the terminal, else ``COLUMNS``, else 100."""
    from rich.console import Console

    con = Console(file=file)
    if not con.is_terminal and not os.environ.get("COLUMNS", "").strip().isdigit():
        con = Console(file=file, width=DEFAULT_WIDTH)
    return con


def output_width(file: IO[str] | None = None) -> int:
    """How many columns the output has (module doc): the terminal's, else ``COLUMNS``, else 100."""
    return int(console(file).width)


def wrap_lines(lines: Sequence[str], width: int) -> list[str]:
    """Prose lines folded at word boundaries to *width*; a continuation is indented four more than its
    line, so indented blocks stay readable. Words longer than the room left (ids, paths) are kept whole:
    a cut id is worse than a long line."""
    import textwrap

    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip(" "))]
        out.extend(
            textwrap.wrap(
                line.strip(" "),
                width=width,
                initial_indent=lead,
                subsequent_indent=lead + "    ",
                break_long_words=False,
                break_on_hyphens=False,
            )
            or [line]
        )
    return out


@dataclass(frozen=True)
class Col:
    """One column of a :func:`fitted_table`.

    ``whole``: never broken (no wrapping, at least as wide as its widest cell): numbers, and names a reader
    looks up; else text, folded when the table is too wide. ``drop``: 0 = always shown; otherwise columns are left out highest ``drop`` first
    (the last column first among equals) until the rest fits.
    """

    header: str
    justify: Literal["left", "right", "center"] = "right"
    whole: bool = True
    drop: int = 0


def _min_width(col: Col, cells: Sequence[str], show_header: bool, stacked: bool = False) -> int:
    """The narrowest the column can be; *stacked*: its header one word a line (see :func:`fitted_table`)."""
    from rich.cells import cell_len

    if col.whole:  # its header does not wrap either (a no_wrap column), unless stacked by hand
        head = max(cell_len(w) for w in col.header.split()) if stacked else cell_len(col.header)
        return max([cell_len(c) for c in cells] + [head if show_header else 0, 1])
    words = [cell_len(w) for w in col.header.split()] if show_header else []
    widest = max([cell_len(c) for c in cells] + words + [1])
    return min(widest, max([_TEXT_MIN, *words]))


def fitted_table(
    cols: Sequence[Col],
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    row_styles: Sequence[str | None] | None = None,
    show_header: bool = True,
    title: str | None = None,
    section_ends: Sequence[bool] | None = None,
) -> tuple[Table, list[str]]:
    """A rich table of *rows* (cells already formatted) no wider than *width*, and the headers of the
    columns left out to get there (module doc). With rich's default box each column takes its width plus
    three (padding and a rule), and the table one more. *section_ends*: a rule under each row marked True."""
    from rich.table import Table

    keep = list(range(len(cols)))

    def need() -> int:
        return 1 + sum(mins[i] + 3 for i in keep)

    # Headers of whole columns on one line if the table fits so, else one word a line (a column's
    # no_wrap keeps rich from wrapping its header), before any column is left out.
    stacked = False
    mins = [_min_width(c, [r[i] for r in rows], show_header) for i, c in enumerate(cols)]
    if need() > width:
        stacked = True
        mins = [_min_width(c, [r[i] for r in rows], show_header, True) for i, c in enumerate(cols)]

    while need() > width and any(cols[i].drop for i in keep):
        keep.remove(max((i for i in keep if cols[i].drop), key=lambda i: (cols[i].drop, i)))
    text = [i for i in keep if not cols[i].whole]
    if text:
        # The most a text column can get once the whole columns have theirs: longer words are broken
        # between their CamelCase words here, where rich would fold them at the edge.
        room = (width - 1 - sum(mins[i] + 3 for i in keep if cols[i].whole)) // len(text) - 3
        rows = [[_break_words(cell, room) if i in text else cell for i, cell in enumerate(r)] for r in rows]
    table = Table(title=title, title_justify="left", show_header=show_header)
    for i in keep:
        c = cols[i]
        table.add_column(
            "\n".join(c.header.split()) if stacked and c.whole else c.header,
            justify=c.justify,
            no_wrap=c.whole,
            overflow="fold",
            min_width=mins[i] if c.whole else None,
        )
    for n, r in enumerate(rows):
        table.add_row(
            *(r[i] for i in keep),
            style=row_styles[n] if row_styles is not None else None,
            end_section=bool(section_ends[n]) if section_ends is not None else False,
        )
    return table, [cols[i].header for i in range(len(cols)) if i not in keep]


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _break_words(cell: str, limit: int) -> str:
    """*cell* with each word longer than *limit* split (by a space) between the words of its CamelCase,
    packed greedily into pieces of at most *limit*; a word with no such place is left for rich to fold."""
    if limit < 1 or all(len(w) <= limit for w in cell.split()):
        return cell
    out = []
    for word in cell.split(" "):
        if len(word) <= limit:
            out.append(word)
            continue
        pieces: list[str] = []
        for part in _CAMEL.split(word):
            if pieces and len(pieces[-1]) + len(part) <= limit:
                pieces[-1] += part
            else:
                pieces.append(part)
        out.append(" ".join(pieces))
    return " ".join(out)


def dropped_note(dropped: Sequence[str], width: int, where: str) -> str | None:
    """The note printed under a table that left columns out, or None if it left none out."""
    if not dropped:
        return None
    names = ", ".join(f'"{d}"' for d in dropped)
    return f"note: left out to fit {width} columns: {names} ({where}, or a wider terminal / COLUMNS)"
