"""Benchmark: toolwire in the engines' parser slots against the engines' own parsers.

Run in an engine's venv (``scripts/ensure_engines``):
``.venv-engines/vllm/bin/python -m benchmarks.engine_adapters vllm`` and
``.venv-engines/sglang/bin/python -m benchmarks.engine_adapters sglang``
(``--quick``: 100 kB replies). Each writes ``benchmarks/results/engine_adapters_<engine>.json``.

* **Per-delta cost**, the same 1 MB Qwen3-Coder reply in 4-character deltas (a
  token's worth) in the same run, for three shapes (text, many small calls, one call
  with a huge argument): vLLM through its own streaming interface (one
  ``ChatStreamProcessor.step`` per delta, as its chat route drives it) with
  ``--tool-call-parser toolwire`` against ``qwen3_coder``, and the parser slot alone
  (``extract_tool_calls_streaming`` given what vLLM gives each: ours the delta, the
  legacy ``qwen3_coder`` the growing text too), beside toolwire's bare pipeline;
  SGLang through its ``FunctionCallParser.parse_stream_chunk`` with ``toolwire``
  against its ``qwen3_coder`` detector. Each pair is timed alternately, the best of
  the runs kept.
* **vLLM start**: what registering toolwire through ``vllm.general_plugins`` adds to
  building ``vllm serve``'s argument parser (where vLLM loads its plugins), and what
  the first parser build (at start, vLLM checks the parsers against the tokenizer)
  costs; each in fresh processes, toolwire's plugin on and off.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from tests.support.paths import SHARED_TEMPLATES

from .harness import print_table, write_results

__all__ = ["run"]

TEMPLATE = SHARED_TEMPLATES / "Qwen3-Coder.jinja"
TOOLS = [{"type": "function", "function": {
    "name": name, "parameters": {"type": "object", "properties": props}}}
    for name, props in (("write_file", {"path": {"type": "string"},
                                        "content": {"type": "string"}}),
                        ("search", {"query": {"type": "string"},
                                    "limit": {"type": "integer"}}))]
_CODE = "for (int i = 0; i < n; i++) {\n    if (a[i] < b) { x <<= 1; }\n}\n"
_PROSE = "The quick brown fox jumps over the lazy dog, and then it rests. "
DELTA = 4


def _call(name: str, args: dict[str, Any]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>\n"


def replies(size: int) -> dict[str, str]:
    """The measured shapes, each ``size`` characters."""
    small = _call("search", {"query": "fox", "limit": 3})
    return {
        "text": (_PROSE * (size // len(_PROSE) + 1))[:size],
        "many calls": small * (size // len(small)),
        "huge argument": _call("write_file", {"path": "a.c", "content": (
            _CODE * (size // len(_CODE)))}),
    }


def _deltas(text: str) -> list[str]:
    return [text[i:i + DELTA] for i in range(0, len(text), DELTA)]


def _best_of(runs: int, func: Callable[[], float]) -> float:
    return min(func() for _ in range(runs))


# -- vLLM ---------------------------------------------------------------------------------


def _vllm_rows(size: int, runs: int) -> list[dict[str, Any]]:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm.entrypoints.openai.chat_completion.stream_processor import ChatStreamProcessor
    from vllm.parser import ParserManager

    from tests.engines.tokenizer import byte_tokenizer, token_ids
    from tests.engines.vllm_harness import chat_request  # registers toolwire, as vLLM would
    from toolwire.engines.served_family import ServedFamily

    tokenizer = byte_tokenizer(TEMPLATE.read_text(encoding="utf-8"))
    served = ServedFamily.choose(TEMPLATE.read_text(encoding="utf-8"))
    request = chat_request(TOOLS)
    prompt = token_ids("prompt")
    rows = []
    for shape, text in replies(size).items():
        deltas = [(d, token_ids(d)) for d in _deltas(text)]
        timings: dict[str, float] = {}

        def once(name: str, deltas: list[tuple[str, list[int]]] = deltas) -> float:
            cls = ParserManager.get_parser(tool_parser_name=name, enable_auto_tools=True,
                                           tokenizer=tokenizer)
            parser = cls(tokenizer, request.tools, chat_template_kwargs={},
                         model_config=None)
            processor = ChatStreamProcessor(request, parser, enable_auto_tools=True,
                                            parser_cls=cls)
            start = time.perf_counter()
            last = len(deltas) - 1
            for i, (delta, ids) in enumerate(deltas):
                processor.step(delta, ids, "stop" if i == last else None, prompt)
            return (time.perf_counter() - start) / len(deltas) * 1e6

        def slot(name: str, deltas: list[tuple[str, list[int]]] = deltas) -> float:
            """The parser slot alone, given what vLLM gives it: an engine-based parser
            the delta, a legacy one (qwen3_coder) the growing text too."""
            cls = ParserManager.get_parser(tool_parser_name=name, enable_auto_tools=True,
                                           tokenizer=tokenizer)
            parser = cls(tokenizer, request.tools, chat_template_kwargs={},
                         model_config=None).tool_parser
            growing = not parser.engine_based_streaming
            previous, previous_ids = "", []
            start = time.perf_counter()
            for delta, ids in deltas:
                current = previous + delta if growing else delta
                current_ids = previous_ids + ids if growing else ids
                parser.extract_tool_calls_streaming(previous, current, delta, previous_ids,
                                                    current_ids, ids, request)
                if growing:
                    previous, previous_ids = current, current_ids
            if not growing:
                parser.finish_streaming()
            return (time.perf_counter() - start) / len(deltas) * 1e6

        def bare(deltas: list[tuple[str, list[int]]] = deltas) -> float:
            """toolwire's pipeline alone, no engine record made."""
            pipeline = served.pipeline(TOOLS)
            start = time.perf_counter()
            for delta, _ in deltas:
                pipeline.feed(delta)
            pipeline.close()
            return (time.perf_counter() - start) / len(deltas) * 1e6

        for _ in range(runs):  # alternate, so both see the same load
            for name in ("toolwire", "qwen3_coder"):
                timings[name] = min(timings.get(name, float("inf")), once(name))
                timings["slot " + name] = min(timings.get("slot " + name, float("inf")),
                                              slot(name))
            timings["bare"] = min(timings.get("bare", float("inf")), bare())
        rows.append({"engine": "vllm", "shape": shape, "size": size, "deltas": len(deltas),
                     "toolwire_us": timings["toolwire"],
                     "engine_parser_us": timings["qwen3_coder"],
                     "speedup": timings["qwen3_coder"] / timings["toolwire"]})
        rows.append({"engine": "vllm", "shape": shape + " (parser slot alone)", "size": size,
                     "deltas": len(deltas), "toolwire_us": timings["slot toolwire"],
                     "engine_parser_us": timings["slot qwen3_coder"],
                     "speedup": timings["slot qwen3_coder"] / timings["slot toolwire"],
                     "bare_pipeline_us": timings["bare"]})
    return rows


_START_SNIPPET = """
import os, time
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
from vllm.entrypoints.common.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
t0 = time.perf_counter()
make_arg_parser(FlexibleArgumentParser())
t1 = time.perf_counter()
from vllm.parser import ParserManager
from tests.engines.tokenizer import byte_tokenizer
tok = byte_tokenizer(open({template!r}).read())
t2 = time.perf_counter()
if {build!r}:
    ParserManager.get_parser(tool_parser_name="toolwire", reasoning_parser_name="toolwire",
                             enable_auto_tools=True, tokenizer=tok)
t3 = time.perf_counter()
print((t1 - t0) * 1e3, (t3 - t2) * 1e3)
"""


def _vllm_start_rows(runs: int) -> list[dict[str, Any]]:
    results: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    for _ in range(runs):
        for mode in ("off", "on"):
            env = dict(os.environ)
            if mode == "off":
                env["VLLM_PLUGINS"] = ""  # an allowlist naming no plugin
            code = _START_SNIPPET.format(template=str(TEMPLATE), build=mode == "on")
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 env=env, check=True).stdout.split()
            results[mode].append((float(out[-2]), float(out[-1])))
    parser_off = statistics.median(a for a, _ in results["off"])
    parser_on = statistics.median(a for a, _ in results["on"])
    build = statistics.median(b for _, b in results["on"])
    return [{"engine": "vllm", "measure": "argument parser built, toolwire's plugin on",
             "ms": parser_on, "runs": runs},
            {"engine": "vllm", "measure": "argument parser built, no plugin", "ms": parser_off,
             "runs": runs},
            {"engine": "vllm", "measure": "added by toolwire's plugin",
             "ms": parser_on - parser_off, "runs": runs},
            {"engine": "vllm", "measure": "first parser build (tool + reasoning, at start)",
             "ms": build, "runs": runs}]


# -- SGLang -------------------------------------------------------------------------------


def _sglang_rows(size: int, runs: int) -> list[dict[str, Any]]:
    from sglang.srt.entrypoints.openai.protocol import Tool
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    from tests.engines.tokenizer import byte_tokenizer
    from toolwire.engines.sglang.detector import register

    register()
    tokenizer = byte_tokenizer(TEMPLATE.read_text(encoding="utf-8"))
    tools = [Tool.model_validate(t) for t in TOOLS]
    rows = []
    for shape, text in replies(size).items():
        deltas = _deltas(text)
        timings: dict[str, float] = {}

        def once(name: str, deltas: list[str] = deltas) -> float:
            parser = FunctionCallParser(tools, name, tokenizer=tokenizer)
            start = time.perf_counter()
            for delta in deltas:
                parser.parse_stream_chunk(delta)
            parser.parse_stream_end()
            return (time.perf_counter() - start) / len(deltas) * 1e6

        for _ in range(runs):
            for name in ("toolwire", "qwen3_coder"):
                timings[name] = min(timings.get(name, float("inf")), once(name))
        rows.append({"engine": "sglang", "shape": shape, "size": size, "deltas": len(deltas),
                     "toolwire_us": timings["toolwire"],
                     "engine_parser_us": timings["qwen3_coder"],
                     "speedup": timings["qwen3_coder"] / timings["toolwire"]})
    return rows


def run(quick: bool = False, engine: str = "vllm") -> list[dict[str, Any]]:
    """The rows for ``engine`` (``vllm`` or ``sglang``)."""
    size = 100_000 if quick else 1_000_000
    runs = 2
    if engine == "vllm":
        return _vllm_rows(size, runs) + _vllm_start_rows(3 if quick else 5)
    return _sglang_rows(size, runs)


def report(rows: list[dict[str, Any]]) -> None:
    print_table([r for r in rows if "shape" in r],
                ["engine", "shape", "size", "deltas", "toolwire_us", "engine_parser_us",
                 "speedup", "bare_pipeline_us"],
                title="µs per 4-character delta through the engine's streaming interface, "
                      "toolwire against the engine's qwen3_coder (best of the runs; the "
                      "machine is shared)")
    start = [r for r in rows if "measure" in r]
    if start:
        print_table(start, ["engine", "measure", "ms", "runs"],
                    title="vllm serve's start (fresh processes, medians)")


def main(argv: list[str]) -> int:
    engine = next((a for a in argv if not a.startswith("--")), "vllm")
    rows = run(quick="--quick" in argv, engine=engine)
    report(rows)
    print(write_results(f"engine_adapters_{engine}", rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
