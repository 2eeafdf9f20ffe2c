"""Benchmark: deriving a family's record from a chat template, first and cached.

For every real chat template (the folder ``tests/support/paths.py`` names): compiling it
(paid once by any backend that renders with it), the first derivation (the probes
rendered, the markers read off them, the record checked against a richer turn) and a
cached one (the outcome looked up by the template's sha256). Refusals are timed too: a
template that renders no call is refused once, then from the cache.

Run ``python -m benchmarks derivation [--quick]``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from tests.support.paths import SHARED_TEMPLATES
from toolwire.errors import DerivationError
from toolwire.families.derive import clear_derivation_cache, derive_format
from toolwire.templates.chat_template import get_chat_template

from .harness import print_table

__all__ = ["run"]

BENCHMARK = "derivation"


def _ms(func: Any) -> float:
    start = time.perf_counter()
    func()
    return (time.perf_counter() - start) * 1000


def _derive(source: str) -> str:
    try:
        fmt = derive_format(source)
    except DerivationError:
        return "(refused)"
    return "+".join(type(k).__name__ for k in fmt.kinds)


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Time derivation on every shared template; return the rows."""
    paths = sorted(SHARED_TEMPLATES.glob("*.jinja"))
    if quick:
        paths = paths[::4]
    runs = 1 if quick else 3
    rows: list[dict[str, Any]] = []
    for path in paths:
        source = path.read_text(encoding="utf-8")
        compile_ms = _ms(lambda s=source: get_chat_template(s))
        firsts, cached = [], []
        outcome = ""
        for _ in range(runs):
            clear_derivation_cache()
            firsts.append(_ms(lambda s=source: _derive(s)))
            cached.append(min(_ms(lambda s=source: _derive(s)) for _ in range(20)))
            outcome = _derive(source)
        rows.append({"benchmark": BENCHMARK, "case": "template", "template": path.name,
                     "arguments": outcome, "compile_ms": compile_ms,
                     "first_ms": min(firsts), "cached_ms": min(cached)})
    templates = list(rows)
    for subset, chosen in (("derived", [r for r in templates if r["arguments"] != "(refused)"]),
                           ("refused", [r for r in templates if r["arguments"] == "(refused)"])):
        for column in ("first_ms", "cached_ms"):
            values = sorted(r[column] for r in chosen)
            if values:
                rows.append({"benchmark": BENCHMARK, "case": "summary", "subset": subset,
                             "measure": column, "templates": len(values),
                             "median": statistics.median(values),
                             "p90": values[min(len(values) - 1, int(len(values) * 0.9))],
                             "max": values[-1]})
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """Print the per-template table and the summary."""
    print_table([r for r in rows if r["case"] == "template"],
                ("template", "arguments", "compile_ms", "first_ms", "cached_ms"),
                title="Deriving the record from each template (ms; first = cache cleared)")
    print_table([r for r in rows if r["case"] == "summary"],
                ("subset", "measure", "templates", "median", "p90", "max"),
                title="Summary (ms)")
