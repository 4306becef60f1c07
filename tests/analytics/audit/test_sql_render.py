"""`hourglass sql`'s table output at the output's width: whole values, never cut.

It used to print a rich table at least 120 columns wide whatever the terminal, and a ``SELECT *`` over
``decisions`` cut ids and messages to ``1f67e5e…``. Now a result that fits is a table with every cell
whole, and one that does not is printed a record at a time (``-[ row N ]`` blocks of ``column | value``).
"""

from __future__ import annotations

import io

import pytest
from rich.cells import cell_len

from analytics.audit.store import render

WIDE_COLUMNS = [f"column_{i}" for i in range(12)]
WIDE_ROW = tuple([f"value-{i}-" + "x" * 8 for i in range(11)] + [None])


def _render(columns: list[str], rows: list[tuple[object, ...]], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    render(columns, rows, "table", out)
    return out.getvalue()


def test_a_narrow_result_is_a_table_of_whole_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _render(["queue", "gpu_hours"], [("a", 1343.8666666666666), ("b", None)], monkeypatch)
    assert "┃ queue ┃" in text and "1343.8666666666666" in text and "NULL" in text
    assert text.endswith("(2 rows)\n") and "…" not in text


def test_a_wide_result_prints_every_value_whole_a_record_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _render(WIDE_COLUMNS, [WIDE_ROW, WIDE_ROW], monkeypatch)
    assert "…" not in text and "┃" not in text
    assert text.count("-[ row ") == 2 and text.endswith("(2 rows)\n")
    for name, value in zip(WIDE_COLUMNS, WIDE_ROW, strict=True):
        assert f"{name:<9} | {'NULL' if value is None else value}\n" in text
    assert all(cell_len(line) <= 80 for line in text.splitlines())


def test_long_prose_folds_under_its_column_and_loses_no_word(monkeypatch: pytest.MonkeyPatch) -> None:
    message = " ".join(f"word{i}" for i in range(60))
    token = "{" + "k" * 100 + "}"  # one unbreakable value (JSON without spaces): kept whole
    text = _render([*WIDE_COLUMNS, "message", "details"], [(*WIDE_ROW, message, token)], monkeypatch)
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("message"))
    folded = [lines[start]] + [line for line in lines[start + 1 :] if line.startswith(" " * 9 + " | ")]
    assert len(folded) > 1 and all(cell_len(line) <= 80 for line in folded)
    assert " ".join(line.split(" | ", 1)[1] for line in folded) == message
    assert f"details   | {token}" in text
