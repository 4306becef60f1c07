"""``hourglass report``: the fairness report in the terminal, as CSV / JSON, and as an offline HTML page."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The command's flags."""
    p.add_argument(
        "--store", required=True, help="a run directory (hourglass simulate --out) or an audit .duckdb file"
    )
    p.add_argument(
        "--from",
        dest="from_",
        metavar="T",
        default=None,
        help="window start: ms, offset (36h, 2d) or ISO time",
    )
    p.add_argument(
        "--to", metavar="T", default=None, help="window end (exclusive), same forms; default: the store's end"
    )
    p.add_argument("--queue", default=None, help="focus on one queue, its ancestors and siblings, in words")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format")
    p.add_argument(
        "--html", default=None, metavar="FILE", help="also write a self-contained offline HTML page"
    )


def run_cli(args: argparse.Namespace) -> int:
    """``hourglass report``: build, print, and optionally write the HTML page."""
    from analytics.reports.report import ReportError, connect, render, report_from
    from analytics.reports.report_html import write_html

    try:
        con, db = connect(args.store)
        try:
            report = report_from(con, str(db), args.from_, args.to, args.queue)
            render(report, args.format)
            if args.html:
                from analytics.progress import status

                with status(f"writing {args.html}"):
                    write_html(report, Path(args.html), con)
                print(f"report: wrote {args.html}", file=sys.stderr)
        finally:
            con.close()
    except ReportError as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    return 0
