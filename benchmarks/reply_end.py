"""Benchmark: what dropping a final end token costs a reply's pipeline, per delta.

A reply (plain text, 4 characters a delta) through the qwen_xml pipeline of its real
template, three ways: without the end-token wrapper (main before issue 41's fold),
with it for the template's end-of-turn token, and with it for six runtime end tokens
as well (a llama.cpp vocabulary's EOG tokens). Median of 30 runs, three rounds.

Run ``python -m benchmarks reply_end [--quick]``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from tests.support.templates import shared_template
from toolwire.families.pipeline import build_pipeline
from toolwire.parse.end_tokens import FinalEndTokenTrim
from toolwire.testing import isolated_plugin_manager

from .harness import print_table

__all__ = ["run"]

ENDS = ("<|im_end|>", "<|endoftext|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
        "<|fim_prefix|>")
TEXT = "The weather in Paris is mild today, with a light breeze and some clouds. " * 40


def _per_delta(source: str, end_tokens: tuple[str, ...], unwrap: bool) -> float:
    plugins = isolated_plugin_manager()
    pipeline = build_pipeline(plugins.parser("qwen_xml"), {}, plugins=plugins,
                              chat_template=source, prompt_tail="<|im_start|>assistant\n",
                              end_tokens=end_tokens)
    if unwrap:  # the reader as it was before the fold
        pipeline._stages = [s._parser if isinstance(s, FinalEndTokenTrim) else s
                            for s in pipeline._stages]
    deltas = [TEXT[i:i + 4] for i in range(0, len(TEXT), 4)]
    start = time.perf_counter()
    for delta in deltas:
        pipeline.feed(delta)
    pipeline.close()
    return (time.perf_counter() - start) / len(deltas) * 1e6


def run(quick: bool = False) -> list[dict[str, Any]]:
    source = shared_template("Qwen3.5-4B.jinja")
    _per_delta(source, (), False)  # the template's renders and the plugins, once
    runs = 5 if quick else 30
    rows = []
    for case, ends, unwrap in (("without the wrapper (before)", (), True),
                               ("template's end-of-turn token", (), False),
                               ("and six runtime end tokens", ENDS, False)):
        rounds = [statistics.median(_per_delta(source, ends, unwrap) for _ in range(runs))
                  for _ in range(3)]
        rows.append({"case": case, "us_per_delta": round(min(rounds), 2),
                     "rounds_us": [round(r, 2) for r in rounds]})
    print_table(rows, ["case", "us_per_delta", "rounds_us"], "reply end tokens, per delta")
    return rows
