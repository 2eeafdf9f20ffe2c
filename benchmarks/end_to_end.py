"""Benchmark: toolwire's streaming path over raw llama-cpp-python token streaming.

Both run the tiny test model (random weights, output forced by a grammar to the
same tool call with a multi-line string argument) on the same prompt tokens:

* raw: ``Llama.generate`` + ``detokenize`` per token, the loop a user would write;
* toolwire: ``LlamaCppBackend.stream_turn``: render the template, tokenize,
  generate, decode UTF-8 incrementally, stream through the filters and parser,
  emit events.

The ratio is the overhead toolwire adds (target <= 5 %). The tiny model makes
tokens nearly free, so this is the harshest case: with a real model each token
costs milliseconds and the overhead shrinks in proportion.
"""

from __future__ import annotations

import sys
from typing import Any

from toolwire import CancelToken, Message, ModelRequest, tool

from .harness import print_table, scratch_folder, time_runs, write_results

__all__ = ["run"]

BENCHMARK = "end_to_end"


@tool
def write_file(path: str, content: str) -> str:
    """Write a file.

    :param path: where
    :param content: what
    """
    return "ok"


def _reply(lines: int) -> str:
    body = "".join(f"def f{i}(x):\n    return x * {i}  # < not a tag\n" for i in range(lines))
    return ("Writing it now.\n\n<tool_call>\n<function=write_file>\n<parameter=path>\nm.py\n"
            f"</parameter>\n<parameter=content>\n{body}</parameter>\n</function>\n</tool_call>")


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Time both paths on the same forced output."""
    from toolwire.plugins.llama_cpp.backend import LlamaCppBackend
    from toolwire.templates.default_template import DEFAULT_CHAT_TEMPLATE
    from toolwire.testing.tiny_gguf import forcing_grammar as grammar_for
    from toolwire.testing.tiny_gguf import write_tiny_gguf

    reply = _reply(20 if quick else 60)
    grammar_text = grammar_for(reply)
    workdir = scratch_folder("toolwire-bench-")
    model = write_tiny_gguf(workdir / "tiny.gguf", DEFAULT_CHAT_TEMPLATE)
    backend = LlamaCppBackend(model, grammar=grammar_text, temperature=0.0, n_threads=1,
                              max_tokens=4096, n_ctx=8192, progress=False)
    request = ModelRequest((Message.user("write m.py"),), (write_file,))
    tokens = list(backend.fit_prompt(request)[1].tokens or ())
    runtime: Any = backend._runtime  # the raw model under the backend
    llm = runtime.model
    grammar = runtime.grammar(grammar_text)

    def raw() -> int:
        out = []
        generated = llm.generate(tokens, temp=0.0, top_p=0.95, top_k=40, min_p=0.05,
                                 repeat_penalty=1.0, grammar=grammar)
        try:
            for token in generated:
                if runtime.is_eog(token):
                    break
                out.append(llm.detokenize([token]))
        finally:
            generated.close()
        return len(out)

    def wired() -> int:
        return sum(1 for _ in backend.stream_turn(request, CancelToken()))

    produced = raw()
    runs = 3 if quick else 9
    raw_t = time_runs(raw, runs=runs)
    wired_t = time_runs(wired, runs=runs)
    overhead = wired_t["median_ms"] / raw_t["median_ms"] - 1
    return [
        {"benchmark": BENCHMARK, "case": "raw llama-cpp-python", "tokens": produced,
         **raw_t, "ms_per_token": raw_t["median_ms"] / produced},
        {"benchmark": BENCHMARK, "case": "toolwire stream_turn", "tokens": produced,
         **wired_t, "ms_per_token": wired_t["median_ms"] / produced,
         "overhead_pct": overhead * 100},
    ]


def report(rows: list[dict[str, Any]]) -> None:
    """Print the table."""
    print_table(rows, ["case", "tokens", "median_ms", "min_ms", "max_ms", "ms_per_token",
                       "overhead_pct"], "End-to-end overhead on the tiny model (target <= 5 %)")


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    report(result)
    print(f"written: {write_results(BENCHMARK, result)}")
