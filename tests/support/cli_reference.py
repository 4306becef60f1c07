"""The ``hourglass`` command line as docs/cli.md lists it: one section per subcommand, one row per option,
read from the real parser (so a new flag without a line in the reference is seen by a test).
"""

from __future__ import annotations

import argparse
import re

HEADING = re.compile(r"^## `hourglass ([a-z-]+)`", re.M)


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    from analytics.cli import build_parser

    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def options(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """(invocation, help) of each argument of ``parser`` but ``--help``, in the parser's order."""
    fmt = parser._get_formatter()
    rows = []
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction) or a.help == argparse.SUPPRESS:
            continue
        invocation = fmt._format_action_invocation(a)
        text = " ".join(fmt._expand_help(a).split()) if a.help else ""
        rows.append((invocation, text))
    return rows


def section(name: str) -> str:
    """The docs/cli.md section of subcommand ``name``, as generated from the parser."""
    parser = _subparsers()[name]
    lines = [f"## `hourglass {name}`", ""]
    if parser.description:
        lines += [" ".join(parser.description.split()), ""]
    lines += ["| argument | meaning |", "|---|---|"]
    for invocation, text in options(parser):
        cell = text.replace("|", "\\|")
        lines.append(f"| `{invocation}` | {cell} |")
    return "\n".join(lines) + "\n"


def subcommands() -> list[str]:
    """Every subcommand name, sorted."""
    return sorted(_subparsers())


def option_strings(name: str) -> list[str]:
    """Every option string (``-f``, ``--file``) and positional name of subcommand ``name``."""
    out: list[str] = []
    for a in _subparsers()[name]._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        out += list(a.option_strings) or [str(a.metavar or a.dest)]
    return out


def documented_sections(text: str) -> dict[str, str]:
    """docs/cli.md's text split into its ``## `hourglass NAME``` sections, by NAME."""
    starts = [(m.group(1), m.start()) for m in HEADING.finditer(text)]
    ends = [s for _, s in starts[1:]] + [len(text)]
    return {name: text[start:end] for (name, start), end in zip(starts, ends, strict=True)}
