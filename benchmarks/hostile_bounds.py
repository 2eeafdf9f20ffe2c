"""Benchmark: the bounds of issue 28, items 3 to 6, each until it refuses.

* **Templates** (item 3): every growth attack (``l.extend(l)`` repeated, two lists
  extending each other, a macro or ``{% set %}`` block writing one long string a
  thousand times, ``Markup`` and ``bytes`` doubled, a generator listed...) rendered
  under the default bounds until ``TemplateResourceError``.
* **Patterns** (item 4): a 7.2 MB ``pattern`` and 600 nested groups refused as a
  tool is made; ``^(a+)+$`` against ``'a' * 30 + '!'`` (and 60) refused by the
  dispatcher's validation; a 300,000-character argument stopped by the match timeout.
* **Grammars** (items 5, 6): the grammar of the schemas llama.cpp used to refuse,
  and of a tool with a thousand optional parameters, in three families.

Each row: wall time of one run (a template renders in a child process, whose time
this process's CPU time would not count), and the peak of this process's Python
allocations in a second run under ``tracemalloc``. Target: < 1 s and < 100 MB each.

* **Real templates** (item 3, no slower): the render of a 20-turn conversation with
  10 tools through every real template (``tests/support/paths.py``; best of N each, summed),
  against the same sum with the renderer of the commit before the change
  (:data:`BEFORE_COMMIT`, unpacked from git and run in turns in the same process).

Run ``python -m benchmarks hostile_bounds [--quick]``.
"""

from __future__ import annotations

import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from tests.support.paths import SHARED_TEMPLATES

from .harness import print_table, scratch_folder, write_results
from .rendering import conversation

__all__ = ["BEFORE_COMMIT", "grammar_rows", "pattern_rows", "real_template_rows", "report",
           "run", "template_rows"]

BENCHMARK = "hostile_bounds"
TARGET_S = 1.0
TARGET_MB = 100.0
BEFORE_COMMIT = "54104ac"
"""The commit before item 3: its renderer is measured beside this tree's."""


def _measure(func: Callable[[], Any]) -> tuple[float, float, str]:
    """(seconds of wall time, peak MB under tracemalloc, what ended it)."""
    started = time.perf_counter()
    outcome = _outcome(func)
    seconds = time.perf_counter() - started
    tracemalloc.start()
    try:
        _outcome(func)
        peak = tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()
    return seconds, peak, outcome


def _outcome(func: Callable[[], Any]) -> str:
    try:
        func()
    except Exception as exc:  # the refusal is the result
        return type(exc).__name__
    return "done"


def _row(area: str, case: str, func: Callable[[], Any]) -> dict[str, Any]:
    seconds, peak, outcome = _measure(func)
    return {"benchmark": BENCHMARK, "area": area, "case": case, "outcome": outcome,
            "seconds": seconds, "peak_mb": peak,
            "meets_target": seconds < TARGET_S and peak < TARGET_MB}


# -- templates -----------------------------------------------------------------------------

def _loop(body: str, times: int = 64, setup: str = "") -> str:
    return setup + "{% for i in range(" + str(times) + ") %}" + body + "{% endfor %}"


BIG = "{% set big = 'x' * 1000000 %}"
TEMPLATE_ATTACKS = {
    "l.extend(l) repeated": _loop("{% set _ = l.extend(l) %}", setup="{% set l = [1] %}"),
    "two lists extending each other": _loop("{% set _ = a.extend(b) %}{% set _ = b.extend(a) %}",
                                            setup="{% set a = [1] %}{% set b = [2] %}"),
    "macro writing a long string 1,000 times": BIG + "{% macro f() %}{% for i in range(1000) %}"
                                               "{{ big }}{% endfor %}{% endmacro %}{{ f() }}",
    "{% set %} block likewise": BIG + "{% set x %}{% for i in range(1000) %}{{ big }}"
                                "{% endfor %}{% endset %}",
    "printing [big] * 1000": BIG + "{{ [big] * 1000 }}",
    "Markup + doubling": _loop("{% set ns.s = ns.s + ns.s %}",
                               setup="{% set ns = namespace(s='x' | e) %}"),
    "bytes + doubling": _loop("{% set ns.b = ns.b + ns.b %}",
                              setup="{% set ns = namespace(b='x'.encode()) %}"),
    "a generator listed": "{{ range(100000) | map('center', 1000) | list | length }}",
    "wordwrap with a long wrapstring":
        "{{ ('a ' * 100000) | wordwrap(1, wrapstring='x' * 10000) }}",
}


def template_rows() -> list[dict[str, Any]]:
    """One row per template attack, under the default bounds."""
    from toolwire.templates.chat_template import ChatTemplate

    def render(source: str) -> Callable[[], Any]:
        return lambda: ChatTemplate(source, lenient=True).render([])

    return [_row("template", name, render(source)) for name, source in TEMPLATE_ATTACKS.items()]


def _templates_before() -> Any:
    """The ``templates`` package of :data:`BEFORE_COMMIT`, importable beside this tree's
    (``None`` without git): its core unpacked under another package name."""
    import importlib
    import io
    import subprocess
    import tarfile
    from pathlib import Path

    folder = scratch_folder("toolwire-before-")
    try:
        archive = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent.parent),
                                  "archive", BEFORE_COMMIT, "core"], capture_output=True,
                                 check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "core").rename(folder / "toolwire_before")
    sys.path.insert(0, str(folder))
    return importlib.import_module("toolwire_before.templates.chat_template")


def real_template_rows(runs: int) -> list[dict[str, Any]]:
    """The summed best render of every real template, this tree's and the commit
    before's, in turns in one process (empty without the real templates)."""
    from toolwire.errors import TemplateError
    from toolwire.templates import chat_template

    before = _templates_before()
    messages, tools = conversation()
    pairs = []
    for path in sorted(SHARED_TEMPLATES.glob("*.jinja")):
        source = path.read_text(encoding="utf-8")
        template = chat_template.ChatTemplate(source)
        try:
            template.render(messages, tools=tools)
        except TemplateError:
            continue
        pairs.append((template, before.ChatTemplate(source) if before else None))
    if not pairs:
        return []
    best = [[float("inf"), float("inf")] for _ in pairs]
    for _ in range(runs):
        for (now, old), times in zip(pairs, best, strict=True):
            for index, template in enumerate((now, old)):
                if template is None:
                    continue
                started = time.perf_counter()
                template.render(messages, tools=tools)
                times[index] = min(times[index], time.perf_counter() - started)
    after = sum(t[0] for t in best) * 1000
    previous = sum(t[1] for t in best) * 1000 if before else float("nan")
    return [{"benchmark": BENCHMARK, "area": "real templates",
             "case": f"{len(pairs)} templates, 20 turns, 10 tools (best of {runs}, summed)",
             "outcome": "rendered", "ms": after, "before_ms": previous,
             "ratio": after / previous}]


# -- patterns ------------------------------------------------------------------------------

def pattern_rows() -> list[dict[str, Any]]:
    """The pattern attacks: refused when the tool is made, or by validation."""
    from toolwire import Tool, ToolRegistry
    from toolwire.conversation.dispatch import Dispatcher
    from toolwire.vocabulary.history import ToolCall

    def tool(pattern: str) -> Tool:
        return Tool({"name": "matcher", "parameters": {"type": "object", "properties": {
            "text": {"type": "string", "pattern": pattern}}}}, lambda **arguments: "ok")

    def check(pattern: str, text: str) -> Callable[[], Any]:
        dispatcher = Dispatcher(ToolRegistry([tool(pattern)]))
        return lambda: dispatcher.check(ToolCall("c1", "matcher", {"text": text}))

    return [
        _row("pattern", "a 7.2 MB pattern (tool made)", lambda: tool("a" * 7_200_000)),
        _row("pattern", "600 nested groups (tool made)", lambda: tool("(" * 600 + "a" + ")" * 600)),
        _row("pattern", "^(a+)+$ against 'a' * 30 + '!'", check("^(a+)+$", "a" * 30 + "!")),
        _row("pattern", "^(a+)+$ against 'a' * 60 + '!'", check("^(a+)+$", "a" * 60 + "!")),
        _row("pattern", "(a|aa)*b against 300,000 characters (match timeout)",
             check("(a|aa)*b", "a" * 300_000)),
    ]


# -- grammars ------------------------------------------------------------------------------

GRAMMAR_SCHEMAS: dict[str, dict[str, Any]] = {
    "at most 50 strings of at most 100 characters": {
        "type": "array", "maxItems": 50, "items": {"type": "string", "maxLength": 100}},
    "minLength 2001": {"type": "string", "minLength": 2001},
    "minItems 3000": {"type": "array", "minItems": 3000, "items": {"type": "integer"}},
}


def grammar_rows() -> list[dict[str, Any]]:
    """The grammars llama.cpp refused, and a thousand optional parameters."""
    from toolwire import grammar_for
    from toolwire.grammar import clear_grammar_cache

    def build(family: str, parameters: dict[str, Any]) -> Callable[[], Any]:
        def made() -> Any:
            clear_grammar_cache()
            return grammar_for(family, [{"name": "probe", "parameters": parameters}],
                               tool_choice="required")
        return made

    rows = []
    for family in ("hermes_json", "qwen_xml", "minimax_m3"):
        for name, value in GRAMMAR_SCHEMAS.items():
            parameters = {"type": "object", "properties": {"v": value}, "required": ["v"]}
            rows.append(_row("grammar", f"{family}: {name}", build(family, parameters)))
        wide = {"type": "object", "properties": {f"p{i}": {"type": "string"}
                                                 for i in range(1000)}}
        rows.append(_row("grammar", f"{family}: 1,000 optional parameters", build(family, wide)))
    return rows


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Every row."""
    return (template_rows() + pattern_rows() + grammar_rows()
            + real_template_rows(5 if quick else 20))


def report(rows: list[dict[str, Any]]) -> None:
    """Print the tables."""
    bounded = [r for r in rows if "seconds" in r]
    print_table(bounded, ["area", "case", "outcome", "seconds", "peak_mb", "meets_target"],
                f"Hostile inputs until refused (target < {TARGET_S:g} s, < {TARGET_MB:g} MB)")
    speed = [r for r in rows if "ms" in r]
    if speed:
        print_table(speed, ["case", "ms", "before_ms", "ratio"], "Real templates, before/after")


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    report(result)
    print(f"written: {write_results(BENCHMARK, result)}")
