"""Rewrite the results table of docs/derived.md from a derived-conformance run.

``scripts/derived_conformance.py --json OUT`` writes one row per template; this
script turns them into the summary line and the table between the markers
``<!-- derived-table:start -->`` and ``<!-- derived-table:end -->`` of
docs/derived.md, and keeps the rows as benchmarks/results/derived_conformance.json
(``tests/families/test_derive.py`` checks the page agrees with that file). Usage::

    python scripts/derived_conformance.py --examples 15 --json /tmp/derived.json
    python scripts/derived_table.py /tmp/derived.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "derived.md"
RESULTS = ROOT / "benchmarks" / "results" / "derived_conformance.json"
START, END = "<!-- derived-table:start -->", "<!-- derived-table:end -->"
NO_CALLS = "renders no tool call"


def _renders_calls(row: dict[str, Any]) -> bool:
    return row["result"] != "not derived" or NO_CALLS not in row.get("reason", "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _kind(row: dict[str, Any]) -> str:
    names = {"JsonArguments": "json", "TaggedArguments": "tagged", "CallObjects": "call objects",
             "PythonicCalls": "pythonic", "GrammarArguments": "object literal"}
    return "+".join(names.get(k, k) for k in (row.get("format") or "").split("+")) or "-"


def _verdict(row: dict[str, Any]) -> str:
    if row["result"] == "pass":
        return "pass"
    if row["result"] == "fail":
        return "fails " + ", ".join(row.get("failed", []))
    reason = row.get("reason", "")
    return "not derived: " + reason.split(" [missing rule:")[0][:160] + (
        f" (missing rule: {reason.split('[missing rule: ')[1].split(':')[0]})"
        if "[missing rule: " in reason else "")


def render(rows: list[dict[str, Any]]) -> str:
    """The summary line and the table for ``rows`` (what goes between the markers)."""
    calls = [r for r in rows if _renders_calls(r)]
    derived = [r for r in rows if r["result"] != "not derived"]
    passed = [r for r in rows if r["result"] == "pass"]
    lines = [
        f"{len(rows)} templates: {len(calls)} render calls, {len(derived)} derive, "
        f"**{len(passed)} pass every `check_parser` property** with every dedicated parser "
        f"plugin disabled (`python scripts/derived_conformance.py --examples 15`, only the "
        f"core's `<think>` filter loaded).",
        "",
        "| template | arguments | conformance / reason |",
        "|---|---|---|",
    ]
    lines += [f"| {r['template']} | {_kind(r)} | {_cell(_verdict(r))} |"
              for r in sorted(rows, key=lambda r: r["template"])]
    return "\n".join(lines)


def rewrite(doc: str, rows: list[dict[str, Any]]) -> str:
    """``doc`` with the text between the markers replaced by :func:`render`."""
    head, start, rest = doc.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise ValueError(f"the page lacks the markers {START} and {END}")
    return f"{head}{START}\n{render(rows)}\n{END}{tail}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="the JSON scripts/derived_conformance.py wrote")
    parser.add_argument("--doc", default=str(DOC))
    args = parser.parse_args(argv)
    rows = json.loads(Path(args.results).read_text(encoding="utf-8"))
    kept = [{k: v for k, v in r.items() if k != "failures"} for r in rows]
    RESULTS.write_text(json.dumps(kept, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    doc = Path(args.doc)
    doc.write_text(rewrite(doc.read_text(encoding="utf-8"), kept), encoding="utf-8")
    print(render(kept).splitlines()[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
