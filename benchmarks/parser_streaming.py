"""Benchmark: streaming a reply through each built-in parser.

Shapes: plain text, many small calls, one call with a single huge multi-line
string argument, and text with many ``<`` that are not tags; sizes 1 KB to 1 MB;
deltas of 1 character, 4 (a token) and 64 (speculative decoding). For each:
microseconds per delta, total time, and the scaling exponent (slope of log time
over log size). In the same run, a baseline re-parses the whole accumulated text
on every delta with the same parser (as servers with quadratic parsers do); it is
estimated from evenly spaced sampled re-parses, since running it fully at 1 MB
would take hours. Also the non-streaming parse of the whole reply.

Run ``python -m benchmarks.parser_streaming [--quick]``.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.support.paths import SHARED_TEMPLATES
from toolwire.parse.protocol import ParserSpec, StreamParser
from toolwire.testing import isolated_plugin_manager

from .harness import fit_exponent, print_table, time_runs, write_results

__all__ = ["SHAPES", "run", "template_renderer"]

BENCHMARK = "parser_streaming"
SIZES = (1_000, 10_000, 100_000, 1_000_000)
DELTAS = (1, 4, 64)
TOOLS: dict[str, Any] = {
    "write_file": {"type": "object", "properties": {"path": {"type": "string"},
                                                     "content": {"type": "string"}}},
    "search": {"type": "object", "properties": {"query": {"type": "string"},
                                                 "limit": {"type": "integer"}}},
}
_CODE_LINE = "for (int i = 0; i < n; i++) {\n    if (a[i] < b) { x <<= 1; }\n}\n"
_PROSE = "The quick brown fox jumps over the lazy dog, and then it rests. "
_ANGLES = "if a < b and c<d then e <= f; x << 2 < y; <not a tag> </nor this> "


def _qwen_call(name: str, args: dict[str, Any]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


CALL_RENDERERS: dict[str, Callable[[str, dict[str, Any]], str]] = {"qwen_xml": _qwen_call}
"""Families measured on the full matrix, with a hand-written call renderer."""

FAMILY_TEMPLATES: dict[str, str] = {
    "hermes_json": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "llama3_json": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "mistral": "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
    "deepseek": "deepseek-ai-DeepSeek-V3.1.jinja", "apriel": "unsloth-Apriel-1.5.jinja",
    "command_r7b": "Cohere2MoE.jinja", "glm_xml": "GLM-4.6.jinja",
    "minimax_xml": "MiniMax-M2.jinja", "dsml": "deepseek-ai-DeepSeek-V3.2.jinja",
    "kimi_k2": "Kimi-K2-Instruct.jinja", "harmony": "openai-gpt-oss-120b.jinja",
    "gemma4": "google-gemma-4-31B-it.jinja", "seed_xml": "ByteDance-Seed-OSS.jinja",
    "solar": "upstage-Solar-Open-100B.jinja", "pythonic": "LFM2.5-8B-A1B.jinja",
}
"""Other built-in families, measured on the headline cases with calls rendered through a
real template (``tests/support/paths.py``; skipped when the real templates are absent)."""


def _repeat_to(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _shape_text(shape: str, size: int, render: Callable[[str, dict[str, Any]], str]) -> str:
    if shape == "plain_text":
        return _repeat_to(_PROSE, size)
    if shape == "angle_text":
        return _repeat_to(_ANGLES, size)
    if shape == "huge_argument":
        shell = render("write_file", {"path": "big.c", "content": ""})
        return render("write_file", {"path": "big.c",
                                     "content": _repeat_to(_CODE_LINE, max(size - len(shell), 1))})
    if shape == "many_calls":
        parts, total, i = [], 0, 0
        while total < size:
            piece = render("search", {"query": f"term {i}", "limit": i % 50}) + "\n"
            parts.append(piece)
            total += len(piece)
            i += 1
        return "".join(parts)
    raise ValueError(shape)


SHAPES = ("plain_text", "many_calls", "huge_argument", "angle_text")


def _stream(spec: ParserSpec, deltas: list[str]) -> int:
    parser: StreamParser = spec.create(TOOLS)
    count = 0
    for delta in deltas:
        count += len(parser.feed(delta))
    count += len(parser.close())
    return count


def _reparse_estimate(spec: ParserSpec, text: str, step: int, samples: int) -> tuple[float, int]:
    """Estimated total ms of re-parsing the accumulated text after every delta."""
    ends = list(range(step, len(text) + step, step))
    chosen = ends[:: max(len(ends) // samples, 1)]
    times = []
    for end in chosen:
        start = time.perf_counter()
        parser = spec.create(TOOLS)
        parser.feed(text[:end])
        parser.close()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.fmean(times) * len(ends), len(chosen)


def _families(names: Iterable[str]) -> list[ParserSpec]:
    plugins = isolated_plugin_manager()
    return [plugins.parser(n) for n in names if n in plugins.parsers()]


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Measure every built-in parser; return the rows."""
    sizes = SIZES[:3] if quick else SIZES
    rows: list[dict[str, Any]] = []
    for spec in _families(CALL_RENDERERS):
        render = CALL_RENDERERS[spec.name]
        for shape in SHAPES:
            for step in DELTAS:
                totals = []
                for size in sizes:
                    text = _shape_text(shape, size, render)
                    deltas = [text[i:i + step] for i in range(0, len(text), step)]
                    runs = 1 if quick or (size >= 1_000_000 and step == 1) else 3
                    timing = time_runs(lambda d=deltas, p=spec: _stream(p, d), runs=runs,
                                       warmup=0 if size >= 1_000_000 else 1)
                    totals.append(timing["median_ms"])
                    row: dict[str, Any] = {
                        "benchmark": BENCHMARK, "family": spec.name, "case": "stream",
                        "shape": shape, "size": size, "delta": step, "deltas": len(deltas),
                        **timing, "us_per_delta": timing["median_ms"] * 1000 / len(deltas)}
                    if size == sizes[-1]:
                        estimate, sampled = _reparse_estimate(spec, text, step,
                                                              samples=20 if quick else 60)
                        row.update(reparse_est_ms=estimate, reparse_samples=sampled,
                                   ratio=estimate / timing["median_ms"])
                    rows.append(row)
                rows.append({"benchmark": BENCHMARK, "family": spec.name, "case": "exponent",
                             "shape": shape, "delta": step,
                             "exponent": fit_exponent(sizes, totals)})
            text = _shape_text(shape, sizes[-1], render)
            whole = time_runs(lambda t=text, p=spec: _stream(p, [t]),
                              runs=3 if quick else 7)
            rows.append({"benchmark": BENCHMARK, "family": spec.name, "case": "whole",
                         "shape": shape, "size": sizes[-1], **whole})
    rows.extend(run_families(quick))
    return rows


def _template_renderer(family: str, spec: ParserSpec
                       ) -> Callable[[str, dict[str, Any]], str] | None:
    path = SHARED_TEMPLATES / FAMILY_TEMPLATES[family]
    return template_renderer(path, spec) if path.exists() else None


def template_renderer(path: Path, spec: ParserSpec) -> Callable[[str, dict[str, Any]], str]:
    """``render(name, arguments)``: one call rendered through the template at ``path``."""
    from toolwire.testing import AssistantTurnRenderer

    renderer = AssistantTurnRenderer(path.read_text(encoding="utf-8"),
                                     make_call_id=spec.make_call_id)
    tools = [{"type": "function", "function": {"name": n, "description": n, "parameters": p}}
             for n, p in TOOLS.items()]

    def render(name: str, args: dict[str, Any]) -> str:
        return renderer.render([(name, args)], tools=tools).text

    return render


def run_families(quick: bool = False) -> list[dict[str, Any]]:
    """The other built-in parsers on the headline cases: a 100 KB and a 1 MB reply with
    one huge string argument, and plain text, in 4-character deltas."""
    plugins = isolated_plugin_manager()
    rows: list[dict[str, Any]] = []
    sizes = (100_000,) if quick else (100_000, 1_000_000)
    for family in FAMILY_TEMPLATES:
        if family not in plugins.parsers():
            continue
        spec = plugins.parser(family)
        render = _template_renderer(family, spec)
        if render is None:
            continue
        for shape in ("huge_argument", "plain_text"):
            for size in sizes:
                text = _shape_text(shape, size, render)
                deltas = [text[i:i + 4] for i in range(0, len(text), 4)]
                timing = time_runs(lambda d=deltas, p=spec: _stream(p, d), runs=3, warmup=0)
                rows.append({"benchmark": BENCHMARK, "family": family, "case": "family",
                             "shape": shape, "size": size, "delta": 4, "deltas": len(deltas),
                             **timing,
                             "us_per_delta": timing["median_ms"] * 1000 / len(deltas)})
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """Print the rows as tables."""
    stream = [r for r in rows if r["case"] == "stream"]
    print_table(stream, ["family", "shape", "size", "delta", "deltas", "median_ms", "min_ms",
                         "max_ms", "us_per_delta", "reparse_est_ms", "ratio"],
                "Streaming parse (median of runs; re-parse baseline estimated at the largest size)")
    print_table([r for r in rows if r["case"] == "exponent"],
                ["family", "shape", "delta", "exponent"], "Scaling exponent (1.0 = linear)")
    print_table([r for r in rows if r["case"] == "whole"],
                ["family", "shape", "size", "median_ms", "min_ms", "max_ms"],
                "Non-streaming parse of the whole reply")
    families = [r for r in rows if r["case"] == "family"]
    if families:
        print_table(families, ["family", "shape", "size", "deltas", "median_ms",
                               "us_per_delta"],
                    "Other built-in parsers, 4-character deltas (calls rendered by their "
                    "real template)")


def main(argv: list[str]) -> None:
    rows = run(quick="--quick" in argv)
    report(rows)
    print(f"\nwritten: {write_results(BENCHMARK, rows)}")


if __name__ == "__main__":
    main(sys.argv[1:])
