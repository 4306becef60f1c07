"""docs/reliability.md's limits table and name rules are the contract's: checked from the models, so
neither can drift from the other."""

from __future__ import annotations

import re
import types
import typing
from collections import defaultdict
from typing import Any

import annotated_types as at
from pydantic import BaseModel

from ingest import events
from ingest.events import LIMITS
from tests.support.paths import REPO_ROOT

DOC = REPO_ROOT / "docs" / "reliability.md"
_NUMBER = r"-?[0-9][0-9,.e^]*(?:-1)?"
_RANGE = re.compile(rf"({_NUMBER}) \.\. ({_NUMBER})")


def _number(text: str) -> int | float:
    """``4,102,444,800,000``, ``2^40``, ``-2^31``, ``2^31-1``, ``1e6`` as the doc writes them."""
    text = text.replace(",", "")
    sign = -1 if text.startswith("-") else 1
    text = text.lstrip("-")
    minus_one = text.endswith("-1") and "^" in text
    text = text.removesuffix("-1") if minus_one else text
    if "^" in text:
        base, exp = text.split("^")
        value: int | float = int(base) ** int(exp)
    elif "e" in text:
        value = float(text)
    else:
        value = int(text)
    return sign * (value - 1 if minus_one else value)


def _bounds(metadata: list[Any]) -> tuple[Any, Any]:
    lo: Any = None
    hi: Any = None
    for m in metadata:
        if isinstance(m, at.Ge):
            lo = m.ge
        elif isinstance(m, at.Gt):
            lo = m.gt + 1  # type: ignore[operator]
        elif isinstance(m, at.Le):
            hi = m.le
        elif isinstance(m, at.Lt):
            hi = m.lt - 1  # type: ignore[operator]
    return lo, hi


def _walk(tp: Any, name: str, out: dict[str, set[tuple[Any, Any]]], seen: set[type]) -> None:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        base, *extra = typing.get_args(tp)
        meta = [m for a in extra for m in (getattr(a, "metadata", None) or [a])]
        if base in (int, float):
            out[name].add(_bounds(meta))
        else:
            _walk(base, name, out, seen)
    elif origin in (typing.Union, types.UnionType, list, dict, tuple):
        for arg in typing.get_args(tp):
            _walk(arg, name, out, seen)
    elif isinstance(tp, type) and issubclass(tp, BaseModel) and tp not in seen:
        seen.add(tp)
        for fname, f in tp.model_fields.items():
            if f.annotation in (int, float) and f.metadata:
                out[fname].add(_bounds(f.metadata))
            else:
                _walk(f.annotation, fname, out, seen)


def contract_ranges() -> dict[str, set[tuple[Any, Any]]]:
    """Every bounded number in every event model, by field name: the set of (min, max) it has."""
    out: dict[str, set[tuple[Any, Any]]] = defaultdict(set)
    seen: set[type] = set()
    for obj in vars(events).values():
        if isinstance(obj, type) and issubclass(obj, BaseModel):
            _walk(obj, "", out, seen)
    out.pop("", None)
    # A 64-bit "any non-negative int" bound is the store's type, not a contract limit.
    return {k: v for k, v in out.items() if v != {(0, 2**63 - 1)}}


def doc_ranges() -> dict[str, set[tuple[Any, Any]]]:
    """The limits table: for each field named (in backticks) in a row, the ranges the row gives."""
    text = DOC.read_text()
    table = text[text.index("| Input | Range |") : text.index("**Names**")]
    out: dict[str, set[tuple[Any, Any]]] = defaultdict(set)
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            continue
        what, rng = (c.strip() for c in line.strip("|").split("|"))
        ranges = {(_number(a), _number(b)) for a, b in _RANGE.findall(rng)}
        assert ranges, f"no range in row {line!r}"
        for name in re.findall(r"`([a-z_]+)`", what):
            out[name] |= ranges
    return out


def test_every_bounded_field_is_in_the_table_with_its_range() -> None:
    code, doc = contract_ranges(), doc_ranges()
    assert len(code) >= 20  # the walk found the models' fields
    missing = sorted(set(code) - set(doc))
    assert not missing, f"fields with a range but no row in docs/reliability.md: {missing}"
    wrong = {k: (sorted(code[k]), sorted(doc[k])) for k in code if code[k] != doc[k]}
    assert not wrong, f"code range vs documented range: {wrong}"
    assert not set(doc) - set(code), f"rows naming no bounded field: {sorted(set(doc) - set(code))}"


def test_the_name_rules_give_the_contracts_lengths() -> None:
    text = DOC.read_text()
    rules = " ".join(text[text.index("**Names**") : text.index("**Repeated keys.**")].split())
    for phrase in (
        f"DNS-1123 subdomains (at most {LIMITS.NAME} characters)",
        f"DNS-1123 labels (at most {LIMITS.LABEL} characters",
        f"DNS prefix of at most {LIMITS.NAME} characters, `/`, then a name of at most {LIMITS.LABEL}",
        f"label values (at most {LIMITS.LABEL} characters)",
        f"uids are at most {LIMITS.UID} characters",
        f"at most {LIMITS.TEXT:,}",
        f"at most {LIMITS.LIST} entries",
    ):
        assert phrase in rules, phrase


def test_the_table_parser_reads_the_docs_notations() -> None:
    assert [_number(t) for t in ("4,102,444,800,000", "2^40", "-2^31", "2^31-1", "1e6", "255")] == [
        4_102_444_800_000,
        2**40,
        -(2**31),
        2**31 - 1,
        1e6,
        255,
    ]
