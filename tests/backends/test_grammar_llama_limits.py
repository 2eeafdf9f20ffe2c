"""A grammar llama.cpp would refuse never fails a turn (issue 28, item 5).

llama.cpp's grammar parser refuses a repetition count over 2,000, and one whose
count times the rules the repeated part makes reaches 2,000
(``MAX_REPETITION_THRESHOLD`` in ``src/llama-grammar.cpp``): ordinary schemas (an
array of at most 50 strings of at most 100 characters, ``minLength`` 2001,
``minItems`` 3000) gave grammars it refused, and every local turn failed. Every
grammar of every family, for schemas with any bounds, is accepted by the real
llama.cpp here (the grammar relaxes what it cannot hold; dispatch validates the
real schema), and a local turn with such a tool answers under ``"auto"`` and
``"required"``. A tool with a thousand optional parameters (item 6) gives a
grammar in every family and a ``200`` from ``/v1/chat/completions``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.apps.test_server import running_server
from tests.support.families import plugins
from tests.support.templates import shared_template
from tests.support.tiers import needs
from toolwire import (
    CancelToken,
    Chat,
    ErrorEvent,
    Message,
    ModelRequest,
    Tool,
    TurnEnd,
    grammar_for,
)
from toolwire.apps.server.app import create_app
from toolwire.parse.record import CallFormat
from toolwire.testing import isolated_plugin_manager, write_tiny_gguf
from toolwire.testing.tiny_gguf import TINY_BACKEND_OPTIONS

llama_cpp = pytest.importorskip("llama_cpp")
httpx = pytest.importorskip("httpx2")

from toolwire.plugins.llama_cpp import LlamaCppBackend  # noqa: E402

RECORD_FAMILIES = sorted(name for name, spec in plugins().parsers().items()
                         if isinstance(spec.format, CallFormat)
                         and name != "gemma4")  # gemma4's own value syntax: no grammar


def _string(low: int = 0, high: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    if low:
        schema["minLength"] = low
    if high is not None:
        schema["maxLength"] = high
    return schema


def _array(items: dict[str, Any], low: int = 0, high: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "items": items}
    if low:
        schema["minItems"] = low
    if high is not None:
        schema["maxItems"] = high
    return schema


LARGE_BOUNDS = {
    "at most 50 strings of at most 100 characters": _array(_string(high=100), high=50),
    "minLength 2001": _string(low=2001),
    "minItems 3000": _array({"type": "integer"}, low=3000),
    "maxLength 5000": _string(high=5000),
    "exactly 2500 items": _array({"type": "boolean"}, low=2500, high=2500),
    "200 arrays of 200 strings of 200 characters": _array(_array(_string(high=200), high=200),
                                                          high=200),
    "objects of long strings, many": _array({"type": "object", "properties": {
        "a": _string(low=1999, high=2001), "b": _array(_string(high=300), high=1000)},
        "required": ["a"]}, low=10, high=1500),
    "a choice of bounded strings in an array": _array(
        {"anyOf": [_string(high=150), _array(_string(high=40), high=60)]}, high=80),
}


@pytest.fixture(scope="module")
@needs("model")
def vocab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    backend = LlamaCppBackend(write_tiny_gguf(tmp_path_factory.mktemp("vocab") / "m.gguf"),
                              n_ctx=512, max_tokens=8, n_threads=1)
    yield backend.llama._model.vocab
    backend.close()


def _tools(value: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "probe", "parameters": {"type": "object", "properties": {
        "v": value, "q": _string(high=20)}, "required": ["v"]}}]


def _grammar_texts(family: str, tools: list[dict[str, Any]], choice: Any) -> list[str]:
    grammar = grammar_for(family, tools, plugins=plugins(), tool_choice=choice)
    return [grammar.gbnf, *(text for _, text in grammar.continuations),
            *([grammar.start] if grammar.start else [])]


def _refused_by_llama_cpp(vocab: Any, texts: list[str]) -> list[str]:
    refused = []
    for text in texts:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, text.encode("utf-8"), b"root")
        if not sampler:
            refused.append(text)
        else:
            llama_cpp.llama_sampler_free(sampler)
    return refused


@pytest.mark.parametrize("case", sorted(LARGE_BOUNDS))
@pytest.mark.parametrize("family", RECORD_FAMILIES)
def test_every_family_writes_grammars_llama_cpp_accepts_whatever_the_bounds(
        family: str, case: str, vocab: Any) -> None:
    for choice in ("required", "auto", {"type": "function", "function": {"name": "probe"}}):
        texts = _grammar_texts(family, _tools(LARGE_BOUNDS[case]), choice)
        assert _refused_by_llama_cpp(vocab, texts) == [], (family, case, choice)


COUNTS = st.one_of(st.integers(0, 12), st.integers(1990, 2010), st.integers(0, 5000))


@st.composite
def _bounded(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    low, high = sorted((draw(COUNTS), draw(COUNTS)))
    kind = draw(st.sampled_from(["string", "array"] if depth < 2 else ["string"]))
    if kind == "string":
        return _string(low, high if draw(st.booleans()) else None)
    return _array(draw(_bounded(depth + 1)), low, high if draw(st.booleans()) else None)


@pytest.mark.parametrize("family", ["hermes_json", "qwen_xml", "pythonic", "minimax_m3"])
def test_any_counts_in_nested_arrays_and_strings_give_grammars_llama_cpp_accepts(
        family: str, vocab: Any) -> None:
    @settings(max_examples=25, deadline=None)
    @given(value=_bounded())
    def check(value: dict[str, Any]) -> None:
        texts = _grammar_texts(family, _tools(value), "required")
        assert _refused_by_llama_cpp(vocab, texts) == []

    check()


TWO_TOOLS = [*_tools(_string(high=20)), {"name": "other", "parameters": {"type": "object"}}]


@pytest.mark.parametrize("max_calls", [700, 1500, 1999, 2000, 2001, 5000])
@pytest.mark.parametrize("family", RECORD_FAMILIES)
def test_many_parallel_calls_give_grammars_llama_cpp_accepts(
        family: str, max_calls: int, vocab: Any) -> None:
    """The calls' repetition is written as every repetition is: from about 700 calls on
    (the repeated call and its separator make several rules) llama.cpp refused it."""
    for choice in ("required", "auto"):
        grammar = grammar_for(family, TWO_TOOLS, plugins=plugins(), tool_choice=choice,
                              max_calls=max_calls)
        texts = [grammar.gbnf, *(text for _, text in grammar.continuations),
                 *([grammar.start] if grammar.start else [])]
        assert _refused_by_llama_cpp(vocab, texts) == [], (family, max_calls, choice)


def test_a_call_count_llama_cpp_holds_is_kept_in_the_grammar() -> None:
    """Relaxing is only for counts over MAX_REPEAT: 1,999 calls stay 1,999."""
    grammar = grammar_for("hermes_json", TWO_TOOLS, plugins=plugins(),
                          tool_choice="required", max_calls=1999)
    assert "{0,1998}" in grammar.gbnf and "{0,1999}" not in grammar.gbnf


@pytest.fixture(scope="module")
@needs("model")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaCppBackend]:
    path = write_tiny_gguf(tmp_path_factory.mktemp("turns") / "m.gguf", sample_bytes=False)
    made = LlamaCppBackend(path, n_ctx=4096, max_tokens=60, temperature=1.0,
                           **TINY_BACKEND_OPTIONS)
    yield made
    made.close()


@pytest.mark.parametrize("choice", ["auto", "required"])
@pytest.mark.parametrize("case", ["at most 50 strings of at most 100 characters",
                                  "minLength 2001", "minItems 3000"])
def test_a_local_turn_with_such_a_tool_answers(backend: LlamaCppBackend, case: str,
                                               choice: str) -> None:
    tool = Tool(_tools(LARGE_BOUNDS[case])[0], lambda **arguments: "ok")
    request = ModelRequest((Message.user("Use the tool."),), (tool,), tool_choice=choice)
    events = list(backend.stream_turn(request, CancelToken()))
    assert [e for e in events if isinstance(e, ErrorEvent)] == []
    assert isinstance(events[-1], TurnEnd)


# ---------------------------------------------------------------------------
# A tool with a thousand optional parameters (issue 28, item 6).

THOUSAND = [{"name": "wide", "parameters": {"type": "object", "properties": {
    f"p{i}": {"type": "string"} for i in range(1000)}}}]


@pytest.mark.parametrize("family", RECORD_FAMILIES)
def test_a_thousand_optional_parameters_give_a_grammar_in_every_family(family: str) -> None:
    # the members' rules were written by a recursion as deep as the parameters
    grammar = grammar_for(family, THOUSAND, plugins=plugins(), tool_choice="required")
    assert grammar.gbnf.count("p999") >= 1


def test_a_thousand_optional_parameters_give_grammars_llama_cpp_accepts(vocab: Any) -> None:
    for choice in ("required", "auto"):
        texts = _grammar_texts("hermes_json", THOUSAND, choice)
        assert _refused_by_llama_cpp(vocab, texts) == []


@pytest.mark.model
def test_a_completions_request_with_a_thousand_optional_parameters_answers(
        tmp_path: Path) -> None:
    source = shared_template("Qwen-Qwen2.5-7B-Instruct.jinja")
    path = write_tiny_gguf(tmp_path / "m.gguf", source, sample_bytes=False,
                           extra_tokens=sorted({c for c in source if ord(c) > 127}))
    local = LlamaCppBackend(path, n_ctx=32768, max_tokens=24, temperature=1.0,
                            **TINY_BACKEND_OPTIONS)

    def make_chat(history: Any, system: str | None) -> Chat:
        return Chat(local, history=history, system_prompt=system,
                    plugins=isolated_plugin_manager())

    tools = [{"type": "function", "function": THOUSAND[0]}]
    try:
        with running_server(create_app(make_chat, backend=local, model="tiny")) as base:
            for choice in ("auto", "required"):
                answer = httpx.post(base + "/v1/chat/completions", timeout=300, json={
                    "model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                    "tools": tools, "tool_choice": choice})
                assert answer.status_code == 200, answer.text
    finally:
        local.close()
