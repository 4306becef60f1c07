"""What every offline HTML page of Hourglass shares: the style sheet, inline SVG figures, escaped tables."""

from __future__ import annotations

import html
import io
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

CSS: Final = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1280px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.8em; }
table { border-collapse: collapse; font-size: 12px; margin: .5em 0; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 7px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.meta { color: #555; } .note { color: #555; font-size: 12.5px; }
pre.story { white-space: pre-wrap; background: #f6f6f6; padding: .8em; }
figure { margin: 1em 0; } figcaption { font-weight: 600; margin-bottom: .3em; }
svg { max-width: 100%; height: auto; }
"""
"""The pages' style sheet."""


def svg(fig: Figure, left_chars: int = 0, legend_rows: int = 0) -> str:
    """The figure as an inline <svg>; fixed margins (room for *left_chars* of y tick labels, and for
    *legend_rows* rows of a legend above the plot area: see :func:`legend_above`).

    Margins are set, not measured: ``bbox_inches="tight"`` and ``tight_layout`` each cost another
    rendering pass with text measuring, which dominated the page's time on big stores.
    """
    w, h = fig.get_size_inches()
    left = (0.75 + 0.065 * left_chars) / w
    fig.subplots_adjust(
        left=left, right=1 - 0.2 / w, top=1 - (0.3 + LEGEND_ROW_IN * legend_rows) / h, bottom=0.55 / h
    )
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})  # no date: the same store gives the same page
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and DOCTYPE: the SVG sits inside HTML


LEGEND_ROW_IN: Final = 0.24
"""Height of one legend row above a plot, in inches (small font)."""


def legend_above(ax: Axes, ncol: int, **kwargs: Any) -> int:
    """Put *ax*'s legend above its plot area, in *ncol* columns, where it cannot cover data; returns the
    number of legend rows, for :func:`svg`'s ``legend_rows``. Nothing to label: no legend, 0 rows."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return 0
    ax.legend(
        handles,
        labels,
        loc="lower left",
        bbox_to_anchor=(0.0, 1.01),
        ncol=ncol,
        fontsize="small",
        frameon=False,
        borderaxespad=0.0,
        **kwargs,
    )
    return -(-len(handles) // ncol)


def table(head: list[str], rows: list[list[str]]) -> str:
    """An escaped HTML table: one header row, then the rows."""
    h = "".join(f"<th>{html.escape(x)}</th>" for x in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"
