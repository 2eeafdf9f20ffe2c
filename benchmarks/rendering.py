"""Benchmark: chat-template rendering, first (compile) and cached.

A 20-turn conversation with 10 tools (each turn: a user message, an assistant
call, its tool result, an assistant answer) through the Qwen3.5 template when
``shared/templates`` is beside the repository, else through the built-in
default template. Target: cached render <= 2 ms.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from toolwire.templates.chat_template import ChatTemplate, get_chat_template

from .harness import print_table, time_runs, write_results

__all__ = ["conversation", "run"]

BENCHMARK = "rendering"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "templates" / "Qwen3.5-4B.jinja"


def _template() -> tuple[str, str]:
    if SHARED.exists():
        return "Qwen3.5-4B.jinja", SHARED.read_text(encoding="utf-8")
    from toolwire.plugins.llama_cpp.backend import DEFAULT_CHAT_TEMPLATE

    return "default (qwen xml)", DEFAULT_CHAT_TEMPLATE


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
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """Print the table."""
    print_table(rows, ["case", "template", "prompt_chars", "median_ms", "min_ms", "max_ms",
                       "runs"], "Template rendering: 20 turns, 10 tools (target cached <= 2 ms)")


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    report(result)
    print(f"written: {write_results(BENCHMARK, result)}")
