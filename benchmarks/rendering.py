"""Benchmark: chat-template rendering, first (compile) and cached.

A 20-turn conversation with 10 tools (each turn: a user message, an assistant
call, its tool result, an assistant answer) through the Qwen3.5 template when
the real templates are present (``tests/support/paths.py``), else through the built-in
default template. Target: cached render <= 2 ms.

Hostile templates (issue 23, item 6): each attack of the issue (values doubled
by ``*``, ``~`` and ``+``, one operation asked for a huge value, nested loops)
rendered under the default bounds, timed until it is refused with a
``TemplateError``. Target: refused within 0.25 s (the loops: at the time budget
the row names, 1 s here).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from tests.support.paths import SHARED_TEMPLATES
from toolwire.errors import TemplateError
from toolwire.templates.chat_template import ChatTemplate, RenderLimits, get_chat_template

from .harness import print_table, time_runs, write_results

__all__ = ["conversation", "run"]

BENCHMARK = "rendering"
SHARED = SHARED_TEMPLATES / "Qwen3.5-4B.jinja"


def _template() -> tuple[str, str]:
    if SHARED.exists():
        return "Qwen3.5-4B.jinja", SHARED.read_text(encoding="utf-8")
    from toolwire.templates.default_template import DEFAULT_CHAT_TEMPLATE

    return "default (qwen xml)", DEFAULT_CHAT_TEMPLATE


ATTACKS = {
    "integer * squaring": "{% set ns = namespace(v=3) %}{% for i in range(40) %}"
                          "{% set ns.v = ns.v * ns.v %}{% endfor %}{{ ns.v > 0 }}",
    "string ~ doubling": "{% set ns = namespace(v='x') %}{% for i in range(60) %}"
                         "{% set ns.v = ns.v ~ ns.v %}{% endfor %}{{ ns.v | length }}",
    "list + doubling": "{% set ns = namespace(v=[1]) %}{% for i in range(60) %}"
                       "{% set ns.v = ns.v + ns.v %}{% endfor %}{{ ns.v | length }}",
    "center(10**9)": "{{ 'x'.center(10 ** 9) }}",
    "format width 10**9": "{{ '{:>1000000000}'.format('x') }}",
    "tojson(indent=10**8)": "{{ messages | tojson(indent=100000000) }}",
    "7 ** 10**7": "{{ 7 ** 10000000 }}",
    "'a' * 10**10": "{{ 'a' * 10 ** 10 }}",
}
LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
ATTACK_TARGET_S = 0.25


def _refusal_seconds(source: str, limits: RenderLimits | None = None) -> float:
    """Seconds from compiling ``source`` until its render is refused."""
    started = time.perf_counter()
    try:
        template = ChatTemplate(source) if limits is None else ChatTemplate(source, limits=limits)
        template.render([{"role": "user", "content": "hi"}])
    except TemplateError:
        return time.perf_counter() - started
    raise AssertionError(f"not refused: {source}")


def attacks(runs: int) -> list[dict[str, Any]]:
    """One row per attack: how long until it is refused."""
    cases = [(name, source, None, ATTACK_TARGET_S) for name, source in ATTACKS.items()]
    cases.append(("nested large loops (1 s budget)", LOOPS, RenderLimits(max_seconds=1.0), 1.25))
    rows = []
    for name, source, limits, target in cases:
        samples = sorted(_refusal_seconds(source, limits) for _ in range(runs))
        rows.append({"benchmark": BENCHMARK, "case": f"attack refused: {name}",
                     "template": "hostile", "median_ms": samples[len(samples) // 2] * 1000,
                     "min_ms": samples[0] * 1000, "max_ms": samples[-1] * 1000, "runs": runs,
                     "target_ms": target * 1000, "meets_target": samples[-1] <= target})
    return rows


def conversation(turns: int = 20, n_tools: int = 10) -> tuple[list[dict[str, Any]],
                                                               list[dict[str, Any]]]:
    """Messages and tools shaped like a real agent session."""
    tools = [{"type": "function", "function": {
        "name": f"tool_{i}", "description": f"Tool number {i}: does a useful thing.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "what to look for"},
            "limit": {"type": "integer", "description": "how many"},
            "flags": {"type": "array", "items": {"type": "string"}}},
            "required": ["query"]}}} for i in range(n_tools)]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief and exact."}]
    for t in range(turns):
        call_id = f"call_{t}"
        messages += [
            {"role": "user", "content": f"Question {t}: what about item {t}?"},
            {"role": "assistant", "content": "", "tool_calls": [{
                "id": call_id, "type": "function", "function": {
                    "name": f"tool_{t % n_tools}",
                    "arguments": {"query": f"item {t}", "limit": t, "flags": ["a", "b"]}}}]},
            {"role": "tool", "tool_call_id": call_id, "content": f"result for item {t}\n" * 3},
            {"role": "assistant", "content": f"Item {t} is fine."},
        ]
    messages.append({"role": "user", "content": "And overall?"})
    return messages, tools


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Time compile+first render and cached renders."""
    name, source = _template()
    messages, tools = conversation()

    def first() -> None:
        ChatTemplate(source).render(messages, tools=tools, enable_thinking=False)

    def cached() -> None:
        get_chat_template(source).render(messages, tools=tools, enable_thinking=False)

    rows = [
        {"benchmark": BENCHMARK, "case": "first render (compile)", "template": name,
         **time_runs(first, runs=5 if quick else 15)},
        {"benchmark": BENCHMARK, "case": "cached render", "template": name,
         **time_runs(cached, runs=50 if quick else 300, warmup=3)},
    ]
    prompt = get_chat_template(source).render(messages, tools=tools, enable_thinking=False)
    for row in rows:
        row["prompt_chars"] = len(prompt)
    return rows + attacks(3 if quick else 5)


def report(rows: list[dict[str, Any]]) -> None:
    """Print the table."""
    print_table(rows, ["case", "template", "prompt_chars", "median_ms", "min_ms", "max_ms",
                       "runs", "meets_target"],
                "Template rendering: 20 turns, 10 tools (target cached <= 2 ms), and hostile "
                f"templates (target: refused within {ATTACK_TARGET_S:g} s)")


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    report(result)
    print(f"written: {write_results(BENCHMARK, result)}")
