"""Benchmark: choosing the parser for a chat template, with each claim verified.

For every real chat template (the folder ``tests/support/paths.py`` names): compiling it
(paid once by any backend that renders with it), the first selection (scores, then each
claim's probe rendered and read back, or the derivation), and a cached selection (the
verdict looked up by template hash). Also the first selection without verification, to
show what verifying adds.

Run ``python -m benchmarks parser_selection [--quick]``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from tests.support.paths import SHARED_TEMPLATES
from toolwire.errors import ParserConflictError, ParserNotFoundError
from toolwire.families.selection import clear_selection_cache, select_parser
from toolwire.hooks.manager import default_plugin_manager
from toolwire.templates.chat_template import get_chat_template

from .harness import print_table

__all__ = ["run"]

BENCHMARK = "parser_selection"


def _ms(func: Any) -> float:
    start = time.perf_counter()
    func()
    return (time.perf_counter() - start) * 1000


def _cpu_ms(func: Any) -> float:
    start = time.process_time()
    func()
    return (time.process_time() - start) * 1000


def _select(source: str, verify: bool) -> str:
    try:
        return select_parser(source, default_plugin_manager(), verify=verify).spec.name
    except (ParserNotFoundError, ParserConflictError):
        return "(none)"


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Time selection on every shared template; return the rows."""
    paths = sorted(SHARED_TEMPLATES.glob("*.jinja"))
    if quick:
        paths = paths[::4]
    rows: list[dict[str, Any]] = []
    runs = 1 if quick else 3
    default_plugin_manager()  # plugins load once per process, not per selection
    for path in paths:
        source = path.read_text(encoding="utf-8")
        compile_ms = _ms(lambda s=source: get_chat_template(s))
        firsts, first_cpu, unverified, cached = [], [], [], []
        family = ""
        for _ in range(runs):
            clear_selection_cache()
            unverified.append(_ms(lambda s=source: _select(s, False)))
            clear_selection_cache()
            firsts.append(_ms(lambda s=source: _select(s, True)))
            clear_selection_cache()
            first_cpu.append(_cpu_ms(lambda s=source: _select(s, True)))
            cached.append(min(_ms(lambda s=source: _select(s, True)) for _ in range(20)))
            family = _select(source, True)
        rows.append({"benchmark": BENCHMARK, "case": "template", "template": path.name,
                     "family": family, "compile_ms": compile_ms,
                     "unverified_ms": min(unverified), "first_ms": min(firsts),
                     "first_cpu_ms": min(first_cpu),
                     "cached_ms": min(cached)})
    templates = list(rows)
    if templates:
        for column in ("compile_ms", "unverified_ms", "first_ms", "first_cpu_ms", "cached_ms"):
            values = sorted(r[column] for r in templates)
            rows.append({"benchmark": BENCHMARK, "case": "summary", "measure": column,
                         "templates": len(values), "median": statistics.median(values),
                         "p90": values[min(len(values) - 1, int(len(values) * 0.9))],
                         "max": values[-1]})
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """Print the rows as tables."""
    print_table([r for r in rows if r["case"] == "template"],
                ["template", "family", "compile_ms", "unverified_ms", "first_ms", "first_cpu_ms",
                 "cached_ms"],
                "Parser selection per template (ms; first = scores + verified claims or "
                "derivation, template already compiled; first_cpu = its process time, which "
                "other work on a loaded machine does not inflate)")
    print_table([r for r in rows if r["case"] == "summary"],
                ["measure", "templates", "median", "p90", "max"], "Summary (ms)")
