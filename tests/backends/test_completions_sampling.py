"""The completions backend sends a turn's own sampling settings and its ``tool_choice``
grammar to the engine.

Two engines: the loopback stand-in (``tests/support/completions_wire_server.py``)
shows the exact request body for ``/v1/completions`` and llama-server's
``/completion``; the real llama-cpp-python server with the tiny random-weight model
shows the engine acting on them: a request's ``max_tokens`` cuts the reply, its
seed makes a reply at temperature 1 reproducible, and ``tool_choice="required"``
or a named tool gives a valid call with no ``grammar=`` option (the backend writes
the grammar from the family's record and sends it itself, issue 19).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import toolwire
from tests.support.completions_wire_server import (
    EngineStandIn,
    completion_chunks,
    llama_stream,
    models_listing,
)
from tests.support.openai_wire_server import Stream
from tests.support.paths import MISSING_TEMPLATES, SHARED_TEMPLATES
from toolwire import (
    CancelToken,
    ErrorEvent,
    Message,
    ModelRequest,
    SamplingOverrides,
    TextEvent,
    ToolCallEndEvent,
    TurnEnd,
    grammar_for,
)
from toolwire.plugins.completions.backend import CompletionsBackend
from toolwire.testing.scripted import isolated_plugin_manager

QWEN = SHARED_TEMPLATES / "Qwen3.5-4B.jinja"
QWEN_SOURCE = QWEN.read_text(encoding="utf-8") if QWEN.is_file() else ""
# the real engine's model speaks Hermes JSON: random weights close a JSON string with
# one likely token, a Qwen XML value only with an unlikely run of them
HERMES = SHARED_TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja"
OWN_MAX_TOKENS = 500


@toolwire.tool
def get_weather(city: str, days: int = 1) -> str:
    """Weather forecast for a city.

    :param city: the city name
    :param days: how many days ahead
    """
    return f"{city}: sunny for {days} days"


@toolwire.tool
def count_lines(path: str, limit: int) -> int:
    """Count the lines of a file.

    :param path: the file
    :param limit: the most lines to count
    """
    return 0


TOOLS = (get_weather, count_lines)


@pytest.fixture(autouse=True)
def _needs_templates() -> None:
    if not QWEN_SOURCE:
        pytest.skip(MISSING_TEMPLATES)


def request(sampling: SamplingOverrides | None = None, **options: Any) -> ModelRequest:
    return ModelRequest((Message.user("Weather in Paris?"),), TOOLS,
                        sampling=sampling or SamplingOverrides(), **options)


def run(backend: CompletionsBackend, turn: ModelRequest) -> list[Any]:
    return list(backend.stream_turn(turn, CancelToken()))


# -- what goes on the wire --------------------------------------------------------------


def wire_backend(server: EngineStandIn, **options: Any) -> CompletionsBackend:
    options.setdefault("template", QWEN)
    options.setdefault("n_ctx", 8192)
    return CompletionsBackend(server.root, plugins=isolated_plugin_manager(), environ={},
                              retry_backoff=0.0, max_tokens=OWN_MAX_TOKENS, **options)


def llama_server() -> EngineStandIn:
    return EngineStandIn({
        ("GET", "/v1/models"): (200, models_listing("llamacpp", "qwen.gguf")),
        ("GET", "/props"): (200, {"default_generation_settings": {"n_ctx": 8192},
                                  "chat_template": QWEN_SOURCE, "bos_token": "<s>",
                                  "eos_token": "<|im_end|>"}),
        ("POST", "/tokenize"): (200, {"tokens": [1, 2, 3]})})


def test_a_turns_sampling_replaces_the_backends_own_on_v1_completions() -> None:
    with EngineStandIn() as server:
        backend = wire_backend(server, temperature=0.7, top_p=0.9, seed=1)
        server.enqueue(Stream(completion_chunks(["a"])), Stream(completion_chunks(["b"])))
        run(backend, request(SamplingOverrides(temperature=0.0, top_p=0.5, max_tokens=3,
                                               seed=42)))
        run(backend, request())
    seeded, own = (r.body for r in server.requests)
    assert (seeded["temperature"], seeded["top_p"], seeded["seed"], seeded["max_tokens"]) \
        == (0.0, 0.5, 42, 3)
    assert (own["temperature"], own["top_p"], own["seed"], own["max_tokens"]) \
        == (0.7, 0.9, 1, OWN_MAX_TOKENS)


def test_fields_neither_side_sets_are_not_sent() -> None:
    with EngineStandIn() as server:
        backend = wire_backend(server)
        server.enqueue(Stream(completion_chunks(["a"])))
        run(backend, request(SamplingOverrides(seed=-5)))
    body = server.requests[0].body
    assert body["seed"] == -5
    assert "temperature" not in body and "top_p" not in body


def test_a_max_tokens_above_the_backends_own_is_capped_by_it() -> None:
    with EngineStandIn() as server:
        backend = wire_backend(server)
        server.enqueue(Stream(completion_chunks(["a"])))
        run(backend, request(SamplingOverrides(max_tokens=OWN_MAX_TOKENS * 4)))
    assert server.requests[0].body["max_tokens"] == OWN_MAX_TOKENS


def test_llama_server_gets_the_turns_sampling_and_n_predict() -> None:
    with llama_server() as server:
        backend = wire_backend(server, template=None, n_ctx=None, temperature=0.7)
        server.enqueue(llama_stream(["z"], predicted=1))
        run(backend, request(SamplingOverrides(temperature=1.5, top_p=0.25, max_tokens=9,
                                               seed=7)))
    body = server.requests[0].body
    assert server.requests[0].path == "/completion"
    assert (body["temperature"], body["top_p"], body["seed"], body["n_predict"]) \
        == (1.5, 0.25, 7, 9)


@pytest.mark.parametrize("choice", ["required", {"type": "function",
                                                 "function": {"name": "count_lines"}}])
def test_a_forcing_tool_choice_sends_its_grammar_without_a_grammar_option(choice: Any) -> None:
    models = models_listing("me", "/m.gguf")  # llama-cpp-python: takes a GBNF grammar
    expected = grammar_for("qwen_xml", [t.openai_schema() for t in TOOLS], tool_choice=choice,
                           parallel_tool_calls=False).gbnf
    with EngineStandIn({("GET", "/v1/models"): (200, models),
                        ("POST", "/extras/tokenize/count"): (200, {"count": 42})}) as server:
        backend = wire_backend(server)
        assert backend.grammar is None
        server.enqueue(Stream(completion_chunks(["x"])))
        run(backend, request(tool_choice=choice, parallel_tool_calls=False))
    assert server.requests[0].body["grammar"] == expected


def test_llama_server_gets_the_forced_grammar_whole_not_lazy() -> None:
    with llama_server() as server:
        backend = wire_backend(server, template=None, n_ctx=None)
        server.enqueue(llama_stream(["z"], predicted=1))
        run(backend, request(tool_choice="required"))
    body = server.requests[0].body
    assert "<function=" in body["grammar"] and "grammar_lazy" not in body


# -- a real engine: llama-cpp-python's server --------------------------------------------


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    pytest.importorskip("llama_cpp.server.app")
    from tests.support.llama_cpp_server import LlamaCppServer
    from toolwire.testing import write_tiny_gguf

    if not HERMES.is_file():
        pytest.skip(MISSING_TEMPLATES)
    source = HERMES.read_text(encoding="utf-8")
    extra = sorted({c for c in source if ord(c) > 127})
    # sample_bytes=False: llama.cpp's grammar lets some invalid UTF-8 through, which
    # random weights write and real models do not (toolwire.testing.tiny_gguf)
    model = write_tiny_gguf(tmp_path_factory.mktemp("sampling-engine") / "qwen-tiny.gguf",
                            source, sample_bytes=False, extra_tokens=extra)
    with LlamaCppServer(model, n_ctx=8192) as server:
        yield server, model


def real_backend(engine: tuple[Any, Path], **options: Any) -> CompletionsBackend:
    server, model = engine
    options.setdefault("max_tokens", 1500)
    return CompletionsBackend(server.root, model_file=model, n_ctx=8192, temperature=1.0,
                              plugins=isolated_plugin_manager(), environ={}, **options)


def text_of(items: list[Any]) -> tuple[str, str]:
    end = items[-1]
    assert isinstance(end, TurnEnd), items
    assert not [e for e in items if isinstance(e, ErrorEvent)], items
    return "".join(e.text for e in items if isinstance(e, TextEvent)), end.reason


@pytest.mark.llama
def test_the_real_engine_cuts_the_reply_at_the_turns_max_tokens(
        engine: tuple[Any, Path]) -> None:
    items = run(real_backend(engine), ModelRequest(
        (Message.user("talk"),), sampling=SamplingOverrides(max_tokens=3, temperature=0.0)))
    end = items[-1]
    assert isinstance(end, TurnEnd) and end.reason == "length"
    assert end.usage is not None and end.usage["completion_tokens"] <= 3


@pytest.mark.llama
def test_the_real_engine_repeats_a_seeded_reply_at_temperature_one(
        engine: tuple[Any, Path]) -> None:
    backend = real_backend(engine)

    def seeded(seed: int) -> tuple[str, str]:
        return text_of(run(backend, ModelRequest(
            (Message.user("talk"),), sampling=SamplingOverrides(max_tokens=24, seed=seed))))

    first = seeded(11)
    assert first[0]
    assert seeded(11) == first
    assert len({seeded(s)[0] for s in (11, 12, 13)}) > 1


@pytest.mark.llama
@pytest.mark.parametrize("choice, names", [
    ("required", {"get_weather", "count_lines"}),
    ({"type": "function", "function": {"name": "count_lines"}}, {"count_lines"}),
])
def test_the_real_engine_under_a_forcing_choice_writes_one_valid_call(
        engine: tuple[Any, Path], choice: Any, names: set[str]) -> None:
    backend = real_backend(engine)
    schemas = {t.name: t.parameters for t in TOOLS}
    for seed in (1, 2):
        items = run(backend, request(SamplingOverrides(seed=seed), tool_choice=choice,
                                     parallel_tool_calls=False))
        calls = [e for e in items if isinstance(e, ToolCallEndEvent)]
        end = items[-1]
        assert isinstance(end, TurnEnd) and end.reason == "tool_calls", items
        assert len(calls) == 1 and calls[0].name in names, items
        jsonschema.validate(dict(calls[0].arguments), schemas[calls[0].name])


def test_a_turns_top_k_reaches_both_engine_apis() -> None:
    with EngineStandIn() as server:
        backend = wire_backend(server)
        server.enqueue(Stream(completion_chunks(["a"])))
        run(backend, request(SamplingOverrides(top_k=5)))
    assert server.requests[0].body["top_k"] == 5
    with llama_server() as server:
        backend = wire_backend(server, template=None, n_ctx=None)
        server.enqueue(llama_stream(["z"], predicted=1))
        run(backend, request(SamplingOverrides(top_k=5)))
    assert server.requests[0].body["top_k"] == 5
