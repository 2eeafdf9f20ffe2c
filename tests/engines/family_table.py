"""docs/engines.md's table of which toolwire family replaces which engine parser."""

from __future__ import annotations

import re

from tests.support.paths import DOCS

__all__ = ["engine_names", "table_rows"]


def table_rows() -> list[tuple[list[str], list[str], list[str]]]:
    """``(families, vLLM names, SGLang names)`` per row of the table."""
    text = (DOCS / "engines.md").read_text(encoding="utf-8")
    section = text.split("### Which toolwire family replaces which engine parser", 1)[1]
    section = section.split("\n### ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        rows.append(tuple(re.findall(r"`([^`]+)`", cell) for cell in cells))
    return rows  # type: ignore[return-value]


def engine_names(column: int) -> set[str]:
    """Every engine parser name in a column (1: vLLM, 2: SGLang)."""
    return {name for row in table_rows() for name in row[column]}
