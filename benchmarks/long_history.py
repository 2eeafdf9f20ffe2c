"""Benchmark: fitting a very long conversation into a local model's context.

A history of N short messages (user questions and assistant answers, every
tenth exchange with a tool call and its result) is fitted into a 4,096-token
context by ``LlamaCppBackend.fit_prompt``: the real Qwen3.5 template (or the
built-in default when the real templates are absent) rendered in the sandbox,
the real llama.cpp tokenizer of the tiny test model, and the pruning that drops
the oldest history. The figure is the time from request to encoded prompt;
the exponent is the slope of log(time) over log(N) (1.0 is linear).

Run ``python -m benchmarks.long_history [--quick]``.
"""

from __future__ import annotations

import sys
from typing import Any

from tests.support.paths import SHARED_TEMPLATES
from toolwire import Message, ModelRequest
from toolwire.vocabulary.history import ToolCall

from .harness import fit_exponent, print_table, scratch_folder, time_runs, write_results

__all__ = ["history", "run"]

BENCHMARK = "long_history"
SIZES = (4_000, 16_000, 32_000)
SHARED = SHARED_TEMPLATES / "Qwen3.5-4B.jinja"
N_CTX = 4096
MAX_TOKENS = 512


def history(n_messages: int) -> tuple[Message, ...]:
    """A system prompt, then ``n_messages`` short messages ending with a question."""
    messages = [Message.system("Be brief.")]
    exchange = 0
    while len(messages) < n_messages:
        messages.append(Message.user(f"Question {exchange}: what about item {exchange}?"))
        if exchange % 10 == 0:
            call = ToolCall(f"call_{exchange}", "lookup", {"item": exchange})
            messages.append(Message.assistant("", (call,)))
            messages.append(Message.tool_result(call, f"item {exchange} is in stock"))
        messages.append(Message.assistant(f"Item {exchange} is fine."))
        exchange += 1
    messages.append(Message.user("And overall?"))
    return tuple(messages)


def _template() -> tuple[str, str]:
    if SHARED.exists():
        return "Qwen3.5-4B.jinja", SHARED.read_text(encoding="utf-8")
    from toolwire.templates.default_template import DEFAULT_CHAT_TEMPLATE

    return "default (qwen xml)", DEFAULT_CHAT_TEMPLATE


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Time ``fit_prompt`` on each history size."""
    from toolwire.plugins.llama_cpp.backend import LlamaCppBackend
    from toolwire.testing import isolated_plugin_manager
    from toolwire.testing.tiny_gguf import write_tiny_gguf

    name, source = _template()
    model = write_tiny_gguf(scratch_folder("toolwire-bench-") / "tiny.gguf",
                            source)
    backend = LlamaCppBackend(model, n_ctx=N_CTX, max_tokens=MAX_TOKENS, n_threads=1,
                              progress=False, plugins=isolated_plugin_manager())
    rows: list[dict[str, Any]] = []
    for size in SIZES:
        request = ModelRequest(history(size))
        fitted, prompt = backend.fit_prompt(request)
        timing = time_runs(lambda request=request: backend.fit_prompt(request),
                           runs=1 if quick else 3, warmup=0)
        rows.append({"benchmark": BENCHMARK, "case": "fit_prompt", "template": name,
                     "messages": len(request.messages), "kept": len(fitted.messages),
                     "prompt_tokens": prompt.n_tokens, **timing,
                     "ms_per_1k_messages": timing["median_ms"] / len(request.messages) * 1000})
    exponent = fit_exponent([r["messages"] for r in rows], [r["median_ms"] for r in rows])
    for row in rows:
        row["exponent"] = round(exponent, 2)
    backend.close()
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """Print the table."""
    print_table(rows, ["messages", "kept", "prompt_tokens", "median_ms", "min_ms",
                       "ms_per_1k_messages", "runs", "exponent"],
                f"Fitting a long history into n_ctx {N_CTX} ({rows[0]['template']}, "
                "tiny model's llama.cpp tokenizer)")


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    report(result)
    print(f"written: {write_results(BENCHMARK, result)}")
