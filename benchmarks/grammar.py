"""Benchmark: grammar-constrained tool calls (issue 17).

* **Build time** of :func:`toolwire.grammar_for` for 1, 10 and 50 tools (schemas
  with strings, bounded integers, enums, arrays, nested objects and an optional
  number), per family and ``tool_choice``: the first build (cache cleared) and a
  cached one (targets: cached <= 1 ms; first <= 50 ms for 10 tools). Also what
  llama.cpp takes to parse the grammar (the local backend validates it once a
  turn and builds the sampler from it), and the grammar's size.
* **Tokens per second** on the tiny random-weight model (real llama.cpp):
  the cost per decoded token of ``Llama.generate`` on the backend's model with no
  grammar, under the ``"required"`` grammar of one call and of parallel calls as
  the backend samples it (the chosen token checked first,
  ``toolwire.plugins.llama_cpp.grammar_sampling``), and under the same grammar in
  llama-cpp-python's own chain ("in the chain": every vocabulary token checked at
  every step); the same token count in every case (end-of-generation tokens do
  not stop it); on the tiny model's 363-token vocabulary and on a 32,000-token one
  (made-up token texts added to the same model, since the grammar's cost grows
  with the vocabulary while a random-weight model's own cost hardly does). Random
  weights pick a token the grammar rejects far more often than a trained model,
  so the checked sampler's figures here are its worst case. And
  ``LlamaCppBackend.stream_turn`` under ``"auto"`` (the family's real chat
  template; toolwire's watch for the opening marker on every piece and the
  switch) against the same turns with the tool grammars off. Target: overhead
  <= 15 %.
* **llama.cpp's lazy trigger patterns**, for comparison: the time per token of
  free text at growing reply lengths under ``llama_sampler_init_grammar_lazy_patterns``
  with the trigger patterns :class:`toolwire.grammar.ToolGrammar` carries, against
  no grammar. llama.cpp matches every pattern against the whole text so far at
  each token, so the cost grows with the reply; this is why toolwire watches for
  the marker in Python (one ``endswith`` per token) and switches the sampler.

The machine has 2 cores shared with other work: every figure is the best of N
runs (min time, max rate), the runs of the compared cases interleaved.

Run ``python -m benchmarks grammar [--quick]``.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.paths import SHARED_TEMPLATES

from .harness import print_table, scratch_folder

__all__ = ["run"]

BENCHMARK = "grammar"
BUILD_FAMILIES = ("qwen_xml", "hermes_json", "llama3_json", "pythonic")
RATE_TEMPLATES = {"qwen_xml": "Qwen3.5-4B.jinja",
                  "hermes_json": "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"}


def make_tools(count: int) -> list[dict[str, Any]]:
    """``count`` OpenAI tool schemas, each with parameters of every kind."""
    tools = []
    for i in range(count):
        tools.append({"type": "function", "function": {
            "name": f"tool_{i:02d}", "description": f"Tool number {i}.",
            "parameters": {"type": "object", "properties": {
                "query": {"type": "string", "description": "what to look for"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 500},
                "mode": {"type": "string", "enum": ["fast", "exact", f"mode_{i}"]},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
                "options": {"type": "object", "properties": {
                    "verbose": {"type": "boolean"}, "depth": {"type": "integer"}},
                    "required": ["verbose"]},
                "score": {"type": "number"},
            }, "required": ["query", "mode"]}}})
    return tools


def _best_ms(func: Callable[[], Any], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def _llama_parse_ms(gbnf: str, vocab: Any, runs: int) -> float:
    import llama_cpp

    def parse() -> None:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
        assert sampler, "llama.cpp refused the grammar"
        llama_cpp.llama_sampler_free(sampler)

    return _best_ms(parse, runs)


def build_rows(runs: int, vocab: Any) -> list[dict[str, Any]]:
    """First and cached build times per family, tool count and choice."""
    from toolwire import grammar_for
    from toolwire.grammar import clear_grammar_cache
    from toolwire.hooks.manager import default_plugin_manager

    plugins = default_plugin_manager()
    rows = []
    for family in BUILD_FAMILIES:
        for count in (1, 10, 50):
            tools = make_tools(count)
            for choice in ("required", "auto"):
                def build(tools: list[dict[str, Any]] = tools, choice: str = choice,
                          family: str = family) -> Any:
                    return grammar_for(family, tools, tool_choice=choice, plugins=plugins)

                def first() -> Any:
                    clear_grammar_cache()
                    return build()

                first_ms = _best_ms(first, runs)
                grammar = build()
                cached_ms = _best_ms(build, runs * 20)
                texts = [grammar.gbnf, *(text for _, text in grammar.continuations)]
                parse_ms = sum(_llama_parse_ms(t, vocab, runs) for t in texts) \
                    if vocab is not None else None
                rows.append({"benchmark": BENCHMARK, "case": "build", "family": family,
                             "tools": count, "tool_choice": choice, "first_ms": first_ms,
                             "cached_ms": cached_ms, "llama_parse_ms": parse_ms,
                             "gbnf_chars": sum(len(t) for t in texts),
                             "rules": sum(t.count("\n") for t in texts)})
    return rows


# -- tokens per second on the tiny model ------------------------------------------------


def _tiny_backend(family: str, folder: Path, max_tokens: int) -> Any:
    from toolwire.plugins.llama_cpp import LlamaCppBackend
    from toolwire.testing import write_tiny_gguf
    from toolwire.testing.tiny_gguf import TINY_BACKEND_OPTIONS

    source = (SHARED_TEMPLATES / RATE_TEMPLATES[family]).read_text(encoding="utf-8")
    path = write_tiny_gguf(folder / f"{family}.gguf", source, sample_bytes=False)
    return LlamaCppBackend(path, n_ctx=8192, max_tokens=max_tokens, temperature=1.0,
                           **TINY_BACKEND_OPTIONS)


def _turn(backend: Any, tools: list[Any], choice: str, seed: int) -> tuple[int, float]:
    """One turn through ``stream_turn``: (completion tokens, generation seconds)."""
    from toolwire import CancelToken, Message, ModelRequest, TurnEnd

    backend.llama.set_seed(seed)
    request = ModelRequest((Message.user("Use a tool."),), tuple(tools), tool_choice=choice)
    end = None
    for item in backend.stream_turn(request, CancelToken()):
        if isinstance(item, TurnEnd):
            end = item
    assert end is not None and end.reason != "error", end
    return int(end.usage["completion_tokens"]), float(end.timings["generation"])


def _decode_us(llama: Any, prompt: list[int], grammar: str | None, count: int,
               seeds: range, *, in_chain: bool = False) -> float:
    """Best microseconds per token of ``count`` tokens sampled by ``Llama.generate``
    under ``grammar`` (end-of-generation tokens do not stop it, so every case decodes
    the same number of tokens); ``in_chain``: llama-cpp-python's own sampler, the
    grammar in its chain, instead of the backend's checked one."""
    from llama_cpp.llama_grammar import LlamaGrammar

    if in_chain:  # the class's method, not the one the backend installed on the model
        installed = llama.__dict__.pop("_init_sampler", None)
        try:
            return _decode_us(llama, prompt, grammar, count, seeds)
        finally:
            if installed is not None:
                llama._init_sampler = installed
    best = float("inf")
    for seed in seeds:
        llama.set_seed(seed)
        compiled = LlamaGrammar.from_string(grammar, verbose=False) if grammar else None
        stream = llama.generate(prompt, temp=1.0, top_p=0.95, top_k=40, min_p=0.05,
                                reset=True, grammar=compiled)
        started = None
        produced = 0
        for _ in stream:
            if started is None:
                started = time.perf_counter()  # the prompt is evaluated by now
            produced += 1
            if produced >= count:
                break
        stream.close()
        assert started is not None and produced == count
        best = min(best, (time.perf_counter() - started) / (count - 1))
        REJECTED[grammar is not None] = getattr(llama._sampler, "rejected", None)
    return best * 1e6


REJECTED: dict[bool, int | None] = {}
"""How many sampled tokens the checked sampler's grammar rejected in the last run."""


def _sampler_rows(llama: Any, vocab: int, family: str, grammars: dict[str, str | None],
                  runs: int, count: int) -> list[dict[str, Any]]:
    """Per-token cost of ``Llama.generate`` under each grammar (interleaved, best of N)."""
    # a short prompt: the decode cost per token hardly depends on it
    prompt = llama.tokenize(b"<|im_start|>user\nUse a tool.<|im_end|>\n"
                            b"<|im_start|>assistant\n", special=True)
    best = {name: float("inf") for name in grammars}
    rejected: dict[str, list[int]] = {name: [] for name in grammars}
    for run in range(runs):  # each round runs every case once
        for name, gbnf in grammars.items():
            chained = name.endswith("in the chain")
            best[name] = min(best[name], _decode_us(llama, list(prompt), gbnf, count,
                                                    range(run, run + 1), in_chain=chained))
            found = REJECTED.get(True) if gbnf and not chained else None
            if found is not None:
                rejected[name].append(found)
    base = best["no grammar"]
    return [{"benchmark": BENCHMARK, "case": "rate", "family": family, "vocab": vocab,
             "path": "llama.cpp sampler", "mode": name, "tokens": count, "us_per_token": us,
             "tokens_per_s": 1e6 / us, "overhead_pct": 100 * (us / base - 1),
             "rejected_pct": (100 * sum(rejected[name]) / (count * len(rejected[name]))
                              if rejected[name] else None)}
            for name, us in best.items()]


def _big_vocabulary(size: int) -> list[str]:
    """``size`` made-up token texts, to give the tiny model a real model's vocabulary size."""
    import random

    rng = random.Random(1)
    alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_<>/=\"{}[]:,.\n"
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(alphabet) for _ in range(rng.randint(2, 7))))
    return sorted(words)


def rate_rows(runs: int, count: int, folder: Path, big_vocab: int) -> list[dict[str, Any]]:
    """Decode cost per token: the sampler under the grammar (the tiny vocabulary and a
    ``big_vocab`` one), and the backend's lazy switch under "auto"."""
    from toolwire import Tool, grammar_for
    from toolwire.hooks.manager import default_plugin_manager
    from toolwire.plugins.llama_cpp import LlamaCppBackend
    from toolwire.testing import write_tiny_gguf

    def never(**arguments: Any) -> str:
        raise AssertionError("not run")

    schemas = make_tools(3)
    tools = [Tool(t["function"], never) for t in schemas]
    plugins = default_plugin_manager()
    grammars = {family: {"no grammar": None,
                         "required, 1 call": grammar_for(family, schemas, plugins=plugins,
                                                         parallel_tool_calls=False).gbnf,
                         "required": grammar_for(family, schemas, plugins=plugins).gbnf}
                for family in RATE_TEMPLATES}
    for family in RATE_TEMPLATES:  # what llama-cpp-python's own chain costs
        grammars[family]["required, in the chain"] = grammars[family]["required"]
    rows = []
    for family in RATE_TEMPLATES:
        backend = _tiny_backend(family, folder, count)
        try:
            vocab = int(backend.llama.n_vocab())
            rows += _sampler_rows(backend.llama, vocab, family, grammars[family], runs, count)
            # the backend's whole turn under "auto": free text, the watch for the opening
            # marker on every piece, the switch; the same seeds with tool grammars off
            lazy: dict[bool, list[tuple[int, float]]] = {False: [], True: []}
            for seed in range(3 * runs):
                for switch in (False, True):
                    backend.tool_grammars = switch
                    lazy[switch].append(_turn(backend, tools, "auto", seed=seed))
        finally:
            backend.close()
        per = {}
        for switch, outcomes in lazy.items():
            tokens = sum(t - 1 for t, _ in outcomes)
            per[switch] = sum(s for _, s in outcomes) * 1e6 / max(tokens, 1)
            rows.append({"benchmark": BENCHMARK, "case": "rate", "family": family,
                         "vocab": vocab, "path": "stream_turn",
                         "mode": "auto (lazy switch)" if switch else "auto, grammars off",
                         "tokens": tokens, "us_per_token": per[switch],
                         "tokens_per_s": 1e6 / per[switch],
                         "overhead_pct": 100 * (per[switch] / per[False] - 1)})
    if big_vocab:
        source = (SHARED_TEMPLATES / RATE_TEMPLATES["qwen_xml"]).read_text(encoding="utf-8")
        path = write_tiny_gguf(folder / "big-vocab.gguf", source, sample_bytes=False,
                               extra_tokens=_big_vocabulary(big_vocab))
        backend = LlamaCppBackend(path, n_ctx=2048, max_tokens=count, n_threads=1)
        try:
            vocab = int(backend.llama.n_vocab())
            for family in RATE_TEMPLATES:
                rows += _sampler_rows(backend.llama, vocab, family, grammars[family],
                                      max(2, runs // 2), max(100, count // 4))
        finally:
            backend.close()
    return rows


# -- llama.cpp's lazy trigger patterns ------------------------------------------------------


def _lazy_sampler(llama: Any, gbnf: str, patterns: tuple[str, ...]) -> Any:
    """The sampling chain ``Llama.generate`` builds, with a lazy-pattern grammar."""
    import llama_cpp
    from llama_cpp import _internals

    sampler = _internals.LlamaSampler()
    raw = (ctypes.c_char_p * len(patterns))(*(p.encode("utf-8") for p in patterns))
    tokens = (llama_cpp.llama_token * 0)()
    grammar = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
        llama._model.vocab, gbnf.encode("utf-8"), b"root", raw, len(patterns), tokens, 0)
    assert grammar, "llama.cpp refused the lazy grammar"
    llama_cpp.llama_sampler_chain_add(sampler.sampler, grammar)
    for add in (lambda: sampler.add_top_k(40), lambda: sampler.add_top_p(0.95, 1),
                lambda: sampler.add_min_p(0.05, 1), lambda: sampler.add_temp(1.0),
                lambda: sampler.add_dist(1234)):
        add()
    return sampler


def _token_times(llama: Any, prompt: list[int], count: int, sampler: Any | None,
                 unreachable: str) -> tuple[list[float], str]:
    """Seconds of each of ``count`` tokens of free text, and the text."""
    original = llama._init_sampler
    if sampler is not None:
        llama._init_sampler = lambda **kwargs: sampler
    times: list[float] = []
    pieces: list[bytes] = []
    try:
        llama.set_seed(7)
        stream = llama.generate(prompt, temp=1.0, top_p=0.95, top_k=40, min_p=0.05,
                                reset=True)
        last = time.perf_counter()
        for token in stream:
            now = time.perf_counter()
            times.append(now - last)
            last = now
            pieces.append(llama.detokenize([token], special=True))
            if len(times) >= count:
                break
        stream.close()
    finally:
        llama._init_sampler = original
    text = b"".join(pieces).decode("utf-8", "replace")
    assert unreachable not in text
    return times, text


def lazy_rows(runs: int, count: int, folder: Path) -> list[dict[str, Any]]:
    """Per-token time of free text by reply position: lazy patterns against none."""
    from toolwire import grammar_for
    from toolwire.hooks.manager import default_plugin_manager

    backend = _tiny_backend("qwen_xml", folder, count)
    llama = backend.llama
    tools = make_tools(3)
    grammar = grammar_for("qwen_xml", tools, tool_choice="auto",
                          plugins=default_plugin_manager())
    # the real patterns, with a marker the model never writes, so no call starts and the
    # patterns are matched at every token of a long reply (as in a long free answer)
    marker = grammar.triggers[0]
    unreachable = "\u2603\u2603call\u2603"
    patterns = tuple(p.replace(f"({marker})", f"({unreachable})")
                     for p in grammar.trigger_patterns)
    assert all(unreachable in p for p in patterns), patterns
    gbnf = grammar.gbnf.replace(f'"{marker}"', f'"{unreachable}"')
    prompt = llama.tokenize(b"<|im_start|>user\nTalk.<|im_end|>\n<|im_start|>assistant\n"
, special=True)
    windows = [w for w in (100, 250, 500, 750, 1000) if w <= count]
    per_case: dict[str, list[list[float]]] = {"no grammar": [], "llama.cpp lazy patterns": []}
    try:
        for _ in range(runs):
            per_case["no grammar"].append(_token_times(llama, prompt, count, None,
                                                       unreachable)[0])
            sampler = _lazy_sampler(llama, gbnf, patterns)
            per_case["llama.cpp lazy patterns"].append(
                _token_times(llama, prompt, count, sampler, unreachable)[0])
    finally:
        backend.close()
    rows = []
    for name, series in per_case.items():
        for end in windows:
            start = max(0, end - 100)
            # the best run's mean over the 100 tokens before ``end``
            us = min(sum(s[start:end]) / (end - start) for s in series if len(s) >= end) * 1e6
            rows.append({"benchmark": BENCHMARK, "case": "lazy", "mode": name,
                         "tokens_so_far": end, "us_per_token": us})
    base = {r["tokens_so_far"]: r["us_per_token"] for r in rows if r["mode"] == "no grammar"}
    for row in rows:
        row["added_us"] = row["us_per_token"] - base[row["tokens_so_far"]]
    return rows


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Build times, decode rates and the lazy-pattern comparison; return the rows."""
    runs = 3 if quick else 5
    folder = scratch_folder("toolwire-bench-grammar-")
    vocab_model = None
    try:
        import llama_cpp  # noqa: F401

        vocab_model = _tiny_backend("qwen_xml", folder, 16)
    except ImportError:
        pass
    try:
        rows = build_rows(runs, vocab_model.llama._model.vocab if vocab_model else None)
    finally:
        if vocab_model is not None:
            vocab_model.close()
    if vocab_model is not None:
        rows += rate_rows(3 if quick else 5, 200 if quick else 400, folder,
                          big_vocab=0 if quick else 32_000)
        # past 1000 tokens a token under the lazy patterns costs tens of milliseconds
        rows += lazy_rows(1 if quick else 2, 500 if quick else 1000, folder)
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """Print the rows as tables."""
    print_table([r for r in rows if r["case"] == "build"],
                ["family", "tools", "tool_choice", "first_ms", "cached_ms", "llama_parse_ms",
                 "gbnf_chars", "rules"],
                "Grammar build (best of N; targets: cached <= 1 ms, first <= 50 ms for 10 "
                "tools; llama_parse_ms: llama.cpp parsing it, every continuation included)")
    print_table([r for r in rows if r["case"] == "rate"],
                ["family", "vocab", "path", "mode", "tokens", "us_per_token", "tokens_per_s",
                 "overhead_pct", "rejected_pct"],
                "Decode cost on the tiny model, 3 tools (llama.cpp sampler: best of N; "
                "stream_turn: all tokens of 3N seeds; target overhead <= 15 %; rejected_pct: "
                "sampled tokens the grammar rejected, each sampled again over the whole "
                "vocabulary)")
    print_table([r for r in rows if r["case"] == "lazy"],
                ["mode", "tokens_so_far", "us_per_token", "added_us"],
                "Free text under llama.cpp's lazy trigger patterns (qwen_xml patterns; "
                "mean of the 100 tokens before the position, best of N)")
