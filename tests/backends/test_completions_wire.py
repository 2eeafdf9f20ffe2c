"""The completions backend against a loopback stand-in engine: the error paths, what it
sends to each engine, and exact parsing whatever the chunking.

The stand-in (``tests/support/completions_wire_server.py``) is a real HTTP
server on 127.0.0.1 that streams scripted replies in both wire shapes
(``/v1/completions`` and llama-server's ``/completion``) and can say it is vLLM,
SGLang, llama-server or llama-cpp-python. The real engine, llama-cpp-python's
server, is in ``test_completions_real.py``.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import toolwire
from tests.support.completions_wire_server import (
    EngineStandIn,
    completion_chunk,
    completion_chunks,
    llama_chunks,
    llama_stream,
    models_listing,
)
from tests.support.openai_wire_server import Fail, Hang, Stream, free_port
from tests.support.paths import MISSING_TEMPLATES, SHARED_TEMPLATES
from toolwire import (
    BackendError,
    CancelToken,
    Chat,
    DiagnosticEvent,
    DoneEvent,
    ErrorEvent,
    Message,
    ModelRequest,
    TextEvent,
    ToolCallEndEvent,
    ToolResultEvent,
    TurnEnd,
)
from toolwire.plugins.completions.backend import CompletionsBackend
from toolwire.testing.scripted import isolated_plugin_manager

QWEN = SHARED_TEMPLATES / "Qwen3.5-4B.jinja"
QWEN_SOURCE = QWEN.read_text(encoding="utf-8") if QWEN.is_file() else ""
REPLY = ("Let me check São Paulo.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
         "São Paulo\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")
EXPECTED_CALL = ("get_weather", {"city": "São Paulo", "days": 3})

ran: list[dict[str, Any]] = []


@toolwire.tool
def get_weather(city: str, days: int = 1) -> str:
    """Weather forecast for a city.

    :param city: the city name
    :param days: how many days ahead
    """
    ran.append({"city": city, "days": days})
    return f"{city}: sunny for {days} days"


@pytest.fixture(autouse=True)
def _needs_templates() -> Iterator[None]:
    if not QWEN_SOURCE:
        pytest.skip(MISSING_TEMPLATES)
    ran.clear()
    yield


@pytest.fixture
def engine() -> Iterator[EngineStandIn]:
    with EngineStandIn() as server:
        yield server


def make(server: EngineStandIn, **options: Any) -> CompletionsBackend:
    options.setdefault("template", QWEN)
    options.setdefault("n_ctx", 8192)
    options.setdefault("plugins", isolated_plugin_manager())
    options.setdefault("retry_backoff", 0.0)
    options.setdefault("environ", {})
    return CompletionsBackend(server.root, **options)


def turn(backend: CompletionsBackend, text: str = "Weather in São Paulo?",
         cancel: CancelToken | None = None) -> list[Any]:
    request = ModelRequest((Message.user(text),), (get_weather,))
    return list(backend.stream_turn(request, cancel or CancelToken()))


def summary(items: list[Any]) -> tuple[str, list[tuple[str, dict[str, Any]]], str]:
    text = "".join(e.text for e in items if isinstance(e, TextEvent))
    calls = [(e.name, dict(e.arguments)) for e in items if isinstance(e, ToolCallEndEvent)]
    end = items[-1]
    assert isinstance(end, TurnEnd)
    return text, calls, end.reason


def errors(items: list[Any]) -> list[ErrorEvent]:
    return [e for e in items if isinstance(e, ErrorEvent)]


def diagnostics(items: list[Any], code: str) -> list[DiagnosticEvent]:
    return [e for e in items if isinstance(e, DiagnosticEvent) and e.code == code]


def pieces_at(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(set(cuts)), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


# -- exact parsing, whatever the chunking ---------------------------------------------


def llama_server_routes(eos: str = "<|im_end|>") -> dict[tuple[str, str], tuple[int, Any]]:
    return {("GET", "/v1/models"): (200, models_listing("llamacpp", "qwen.gguf")),
            ("GET", "/props"): (200, {"default_generation_settings": {"n_ctx": 8192},
                                      "chat_template": QWEN_SOURCE, "bos_token": "<s>",
                                      "eos_token": eos}),
            ("POST", "/tokenize"): (200, {"tokens": [1, 2, 3]})}


def test_a_call_split_at_every_offset_parses_the_same_on_v1_completions(
        engine: EngineStandIn) -> None:
    backend = make(engine)
    for cut in range(len(REPLY) + 1):
        engine.enqueue(Stream(completion_chunks(pieces_at(REPLY, [cut]))))
        text, calls, reason = summary(turn(backend))
        assert (text.strip(), calls, reason) == ("Let me check São Paulo.", [EXPECTED_CALL],
                                                 "tool_calls"), cut
    assert engine.pending() == 0


def test_a_call_and_a_leaked_end_marker_split_at_every_offset_on_llama_native() -> None:
    reply = REPLY + "<|im_end|>"
    with EngineStandIn(llama_server_routes()) as server:
        backend = make(server, template=None)
        assert backend.api == "llama"
        for cut in range(len(reply) + 1):
            server.enqueue(llama_stream(pieces_at(reply, [cut])))
            text, calls, reason = summary(turn(backend))
            assert (text.strip(), calls, reason) == ("Let me check São Paulo.", [EXPECTED_CALL],
                                                     "tool_calls"), cut


@pytest.fixture(scope="module")
def standin_llama_server() -> Iterator[tuple[EngineStandIn, dict[str, CompletionsBackend]]]:
    if not QWEN_SOURCE:  # set up before the autouse check: the engine serves this template
        pytest.skip(MISSING_TEMPLATES)
    with EngineStandIn(llama_server_routes()) as server:
        yield server, {api: make(server, template=None, api=api)
                       for api in ("completions", "llama")}


@given(cuts=st.lists(st.integers(0, len(REPLY) + len("<|im_end|>\n")), max_size=24),
       native=st.booleans())
def test_any_chunking_gives_the_same_calls_and_text(
        standin_llama_server: tuple[EngineStandIn, dict[str, CompletionsBackend]],
        cuts: list[int], native: bool) -> None:
    server, backends = standin_llama_server
    reply = REPLY + "<|im_end|>\n"
    pieces = pieces_at(reply, cuts)
    server.enqueue(llama_stream(pieces) if native else Stream(completion_chunks(pieces)))
    text, calls, reason = summary(turn(backends["llama" if native else "completions"]))
    assert (text.strip(), calls, reason) == ("Let me check São Paulo.", [EXPECTED_CALL],
                                             "tool_calls")


def test_an_end_marker_in_the_middle_of_a_reply_ends_nothing_and_is_never_text(
        engine: EngineStandIn) -> None:
    # the engine did not stop on it: the reply goes on past it (issue 30: the
    # template's end-of-turn token never reaches the text; a stray_markup says so)
    engine.routes.update(llama_server_routes())
    backend = make(engine, template=None, api="completions")
    engine.enqueue(Stream(completion_chunks(["a <|im_end|>", " b<|im_", "end|>"])))
    items = turn(backend)
    text, _calls, reason = summary(items)
    assert (text.split(), reason) == (["a", "b"], "stop")
    assert [d.raw for d in diagnostics(items, "stray_markup")] == ["<|im_end|>"]


# -- the full loop --------------------------------------------------------------------


def test_the_chat_runs_the_call_and_answers_with_its_result_in_the_prompt(
        engine: EngineStandIn) -> None:
    engine.enqueue(Stream(completion_chunks([REPLY])),
                   Stream(completion_chunks(["It is sunny in São Paulo."], usage=(50, 7))))
    chat = Chat(make(engine), [get_weather])
    events = list(chat.send("Weather in São Paulo for 3 days?"))
    assert ran == [{"city": "São Paulo", "days": 3}]
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert result.content == "São Paulo: sunny for 3 days"
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "stop"
    second = engine.requests[1].body["prompt"]
    assert "<tool_response>\nSão Paulo: sunny for 3 days\n</tool_response>" in second
    assert second.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert "".join(e.text for e in events if isinstance(e, TextEvent)).endswith(
        "It is sunny in São Paulo.")


def test_the_session_survives_a_failed_turn(engine: EngineStandIn) -> None:
    engine.enqueue(Fail.error(500, "engine fell over"),
                   Stream(completion_chunks(["Back again."])))
    chat = Chat(make(engine, max_retries=0), [get_weather])
    first = list(chat.send("hello?"))
    assert [e.kind for e in errors(first)] == ["server"]
    assert isinstance(first[-1], DoneEvent) and first[-1].reason == "error"
    second = list(chat.send("still there?"))
    assert "".join(e.text for e in second if isinstance(e, TextEvent)) == "Back again."
    assert "still there?" in engine.requests[1].body["prompt"]


# -- what each engine is sent -----------------------------------------------------------


def test_vllm_gets_its_grammar_field_special_tokens_and_counts_with_its_tokenizer(
        engine: EngineStandIn) -> None:
    engine.routes.update({
        ("GET", "/v1/models"): (200, models_listing("vllm", "Qwen/Qwen3.5-4B", 32768)),
        ("POST", "/tokenize"): (200, {"count": 123, "max_model_len": 32768, "tokens": []})})
    backend = make(engine, n_ctx=None, grammar='root ::= "x"', temperature=0.2, seed=5)
    assert (backend.engine.kind, backend.n_ctx, backend.api) == ("vllm", 32768, "completions")
    engine.enqueue(Stream(completion_chunks(["x"], usage=(123, 1))))
    items = turn(backend)
    end = items[-1]
    assert isinstance(end, TurnEnd) and end.usage == {"prompt_tokens": 123,
                                                      "completion_tokens": 1}
    body = engine.requests[0].body
    assert engine.requests[0].path == "/v1/completions"
    assert body["model"] == "Qwen/Qwen3.5-4B"
    assert body["structured_outputs"] == {"grammar": 'root ::= "x"'}
    assert body["skip_special_tokens"] is False
    assert body["spaces_between_special_tokens"] is False
    assert (body["temperature"], body["seed"], body["stream"]) == (0.2, 5, True)
    assert "top_p" not in body and "stop" not in body
    assert body["prompt"].startswith("<|im_start|>system\n")
    tokenize = engine.routed[-1]
    assert tokenize.path == "/tokenize"
    assert tokenize.body == {"model": "Qwen/Qwen3.5-4B", "add_special_tokens": True,
                             "prompt": body["prompt"]}


def test_sglang_gets_its_grammar_as_ebnf(engine: EngineStandIn) -> None:
    engine.routes.update({("GET", "/v1/models"): (200, models_listing("sglang", "m", 4096)),
                          ("POST", "/tokenize"): (200, {"count": 9, "tokens": []})})
    backend = make(engine, grammar=lambda request: 'root ::= "y"')
    engine.enqueue(Stream(completion_chunks(["y"])))
    turn(backend)
    assert engine.requests[0].body["ebnf"] == 'root ::= "y"'


def test_llama_server_publishes_the_template_and_gets_the_native_endpoint() -> None:
    with EngineStandIn(llama_server_routes()) as server:
        backend = make(server, template=None, n_ctx=None, grammar='root ::= "z"',
                       max_tokens=77, top_p=0.9)
        assert backend.template_choice(tools=True).key.endswith("GET /props chat_template")
        assert (backend.api, backend.n_ctx) == ("llama", 8192)
        server.enqueue(llama_stream(["z"], predicted=1))
        items = turn(backend)
        request = server.requests[0]
        assert request.path == "/completion"
        body = request.body
        assert (body["n_predict"], body["top_p"], body["grammar"]) == (77, 0.9, 'root ::= "z"')
        assert "<|im_start|>" in body["preserved_tokens"]
        assert "<|im_end|>" not in body["preserved_tokens"]
        assert "stop" not in body  # the template's end marker is the model's EOS
        end = items[-1]
        assert isinstance(end, TurnEnd) and end.usage == {"prompt_tokens": 3,
                                                          "completion_tokens": 1}
        tokenize = next(r for r in server.routed if r.path == "/tokenize")
        assert tokenize.body == {"content": body["prompt"], "add_special": True,
                                 "parse_special": True}


def test_llama_cpp_python_gets_grammar_and_its_count_endpoint(engine: EngineStandIn) -> None:
    engine.routes.update({("GET", "/v1/models"): (200, models_listing("me", "/m.gguf")),
                          ("POST", "/extras/tokenize/count"): (200, {"count": 42})})
    backend = make(engine, grammar='root ::= "w"')
    engine.enqueue(Stream(completion_chunks(["w"])))
    items = turn(backend)
    assert engine.requests[0].body["grammar"] == 'root ::= "w"'
    assert "skip_special_tokens" not in engine.requests[0].body
    end = items[-1]
    assert isinstance(end, TurnEnd) and end.usage == {"prompt_tokens": 42,
                                                      "completion_tokens": 1}


def test_an_engine_that_cannot_be_constrained_is_said_so_once(engine: EngineStandIn) -> None:
    backend = make(engine, n_ctx=None, grammar='root ::= "v"')
    engine.enqueue(Stream(completion_chunks(["v"])), Stream(completion_chunks(["v"])))
    first, second = turn(backend), turn(backend)
    assert len(diagnostics(first, "grammar_unsupported")) == 1
    assert diagnostics(second, "grammar_unsupported") == []
    assert len(diagnostics(first, "token_count_estimated")) == 1
    assert len(diagnostics(first, "context_size_assumed")) == 1
    assert all(not diagnostics(second, code) for code in
               ("token_count_estimated", "context_size_assumed"))
    assert all(set(r.body) & {"grammar", "ebnf", "structured_outputs"} == set()
               for r in engine.requests)
    end = first[-1]
    assert isinstance(end, TurnEnd) and (end.reason, backend.n_ctx) == ("stop", 4096)


def test_a_failing_grammar_callable_is_a_grammar_error(engine: EngineStandIn) -> None:
    def broken(request: ModelRequest) -> str:
        raise RuntimeError("no grammar today")

    items = turn(make(engine, grammar=broken))
    assert [(e.kind, "no grammar today" in e.message) for e in errors(items)] == [
        ("grammar", True)]
    assert engine.requests == []


def test_the_native_api_is_refused_for_an_engine_that_is_not_llama_server(
        engine: EngineStandIn) -> None:
    engine.routes[("GET", "/v1/models")] = (200, models_listing("vllm"))
    with pytest.raises(BackendError, match="use --api completions") as caught:
        make(engine, api="llama")
    assert caught.value.kind == "config"


def test_stream_options_rejected_is_retried_without(engine: EngineStandIn) -> None:
    engine.enqueue(Fail.error(400, "Unrecognized request argument: stream_options"),
                   Stream(completion_chunks(["ok"])))
    backend = make(engine)
    text, _calls, reason = summary(turn(backend))
    assert (text, reason) == ("ok", "stop")
    assert "stream_options" in engine.requests[0].body
    assert "stream_options" not in engine.requests[1].body


@pytest.mark.parametrize("api", ["completions", "llama"])
def test_the_key_goes_out_as_a_bearer_token_and_none_when_there_is_none(
        engine: EngineStandIn, api: str) -> None:
    reply = llama_stream(["k"]) if api == "llama" else Stream(completion_chunks(["k"]))
    engine.enqueue(reply, llama_stream(["k"]) if api == "llama" else
                   Stream(completion_chunks(["k"])))
    turn(make(engine, api=api, environ={"TOOLWIRE_ENGINE_API_KEY": "sk-env",
                                        "TOOLWIRE_SERVE_API_KEY": "serve-key",
                                        "OPENAI_API_KEY": "sk-openai"}))
    turn(make(engine, api=api))
    with_key, without = engine.requests
    assert with_key.headers["authorization"] == "Bearer sk-env"
    assert "authorization" not in without.headers


def test_the_key_also_goes_to_the_engines_own_endpoints(engine: EngineStandIn) -> None:
    engine.routes.update({("GET", "/v1/models"): (200, models_listing("vllm", "m", 4096)),
                          ("POST", "/tokenize"): (200, {"count": 5})})
    engine.enqueue(Stream(completion_chunks(["k"])))
    turn(make(engine, api_key="sk-given"))
    assert {r.path: r.headers.get("authorization") for r in engine.routed} == {
        "/v1/models": "Bearer sk-given", "/tokenize": "Bearer sk-given"}


def test_a_hostile_engine_description_is_ignored_not_trusted(engine: EngineStandIn) -> None:
    engine.routes.update({
        ("GET", "/v1/models"): (200, {"data": [{"owned_by": 5, "max_model_len": "huge"}]}),
        ("GET", "/props"): (200, {"chat_template": 12, "default_generation_settings": []})})
    backend = make(engine, n_ctx=None)
    assert (backend.engine.chat_template, backend.n_ctx) == (None, 4096)
    engine.routes[("POST", "/tokenize")] = (200, {"tokens": "many"})
    engine.enqueue(Stream(completion_chunks(["fine"])))
    assert summary(turn(backend))[0] == "fine"


def test_an_unreadable_tokenize_answer_falls_back_to_the_estimate(
        engine: EngineStandIn) -> None:
    engine.routes.update({("GET", "/v1/models"): (200, models_listing("vllm", "m", 9000)),
                          ("POST", "/tokenize"): (200, {"nothing": True})})
    backend = make(engine)
    engine.enqueue(Stream(completion_chunks(["a"])), Stream(completion_chunks(["b"])))
    turn(backend)
    second = turn(backend)
    tokenize_calls = [r for r in engine.routed if r.path == "/tokenize"]
    assert len(tokenize_calls) == 1  # not asked again
    prompt = engine.requests[1].body["prompt"]
    end = second[-1]
    assert isinstance(end, TurnEnd)
    assert end.usage is not None and end.usage["prompt_tokens"] == -(-len(
        prompt.encode()) // 3)
    assert len(diagnostics(second, "token_count_estimated")) == 1


# -- the template and the stop markers -----------------------------------------------


def test_the_template_file_wins_over_the_engine_and_the_engine_over_the_model_file(
        tmp_path: Path) -> None:
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": "{{ 'from the file' }}",
                                  "eos_token": "<|im_end|>"}))
    with EngineStandIn(llama_server_routes()) as server:
        assert make(server).template_choice(tools=False).key == str(QWEN)
        assert "GET /props" in make(server, template=None, model_file=config).template_choice(
            tools=False).key
    with EngineStandIn() as server:
        chosen = make(server, template=None, model_file=config).template_choice(tools=False)
        assert chosen.source == "{{ 'from the file' }}"


def test_no_template_anywhere_says_how_to_give_one(engine: EngineStandIn) -> None:
    with pytest.raises(BackendError, match="--template PATH") as caught:
        make(engine, template=None)
    assert caught.value.kind == "config"


def test_an_unreachable_engine_and_no_template_says_the_engine_could_not_be_asked() -> None:
    with pytest.raises(BackendError, match="could not be asked") as caught:
        CompletionsBackend(f"http://127.0.0.1:{free_port()}", environ={})
    assert caught.value.kind == "config" and "--template PATH" in str(caught.value)


@pytest.mark.parametrize(("eos", "stops"), [("<|im_end|>", None),
                                            ("<|endoftext|>", ["<|im_end|>"])])
def test_the_end_marker_is_a_stop_only_when_it_is_not_the_models_eos(
        engine: EngineStandIn, tmp_path: Path, eos: str, stops: list[str] | None) -> None:
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": QWEN_SOURCE, "eos_token": {"content": eos}}))
    backend = make(engine, template=None, model_file=config)
    engine.enqueue(Stream(completion_chunks(["a"])))
    turn(backend)
    assert engine.requests[0].body.get("stop") == stops


def test_no_stop_is_sent_when_the_models_end_tokens_are_unknown(engine: EngineStandIn) -> None:
    engine.enqueue(Stream(completion_chunks(["a"])))
    turn(make(engine, stop=["USER:"]))
    assert engine.requests[0].body["stop"] == ["USER:"]


def test_a_gguf_model_file_gives_template_and_end_tokens(engine: EngineStandIn,
                                                          tmp_path: Path) -> None:
    from toolwire.testing.tiny_gguf import write_tiny_gguf

    model = write_tiny_gguf(tmp_path / "m.gguf", QWEN_SOURCE, eos_token="<|endoftext|>")
    backend = make(engine, template=None, model_file=model)
    assert backend.template_choice(tools=True).key == "tokenizer.chat_template"
    assert backend.stops == ("<|im_end|>",)


def test_a_model_file_that_is_neither_gguf_nor_json_is_a_config_error(
        engine: EngineStandIn, tmp_path: Path) -> None:
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"\x00\x01not a model")
    with pytest.raises(BackendError, match="neither a GGUF file nor") as caught:
        make(engine, template=None, model_file=bad)
    assert caught.value.kind == "config"


# -- errors, each a typed event --------------------------------------------------------


def both_apis(pieces: list[str], **options: Any) -> dict[str, Stream]:
    return {"completions": Stream(completion_chunks(pieces), **options),
            "llama": Stream(llama_chunks(pieces), done=False, **options)}


@pytest.fixture(params=["completions", "llama"])
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_connection_refused(api: str) -> None:
    backend = CompletionsBackend(f"http://127.0.0.1:{free_port()}", api=api, template=QWEN,
                                 plugins=isolated_plugin_manager(), environ={})
    items = turn(backend)
    assert [e.kind for e in errors(items)] == ["connection"]
    assert "Is the server running" in errors(items)[0].message
    assert len(diagnostics(items, "engine_unreachable")) == 1
    assert isinstance(items[-1], TurnEnd) and items[-1].reason == "error"


@pytest.mark.parametrize(("status", "kind"), [(401, "auth"), (403, "auth"), (404, "not_found"),
                                              (400, "bad_request")])
def test_refusals_are_typed(engine: EngineStandIn, api: str, status: int, kind: str) -> None:
    engine.enqueue(Fail.error(status, "nope"))
    items = turn(make(engine, api=api))
    assert [e.kind for e in errors(items)] == [kind]
    assert "nope" in errors(items)[0].message
    if status == 401:
        assert "TOOLWIRE_ENGINE_API_KEY" in errors(items)[0].message


def test_a_prompt_the_engine_finds_too_long_is_a_context_error(engine: EngineStandIn,
                                                               api: str) -> None:
    engine.enqueue(Fail.error(400, "This model's maximum context length is 4096 tokens"))
    assert [e.kind for e in errors(turn(make(engine, api=api)))] == ["context"]


def test_429_retry_after_zero_then_success(engine: EngineStandIn, api: str) -> None:
    engine.enqueue(Fail.error(429, "slow down", {"retry-after": "0"}),
                   both_apis(["fine"])[api])
    items = turn(make(engine, api=api))
    notes = diagnostics(items, "retrying")
    assert len(notes) == 1 and "HTTP 429" in notes[0].message
    assert items.index(notes[0]) < next(i for i, e in enumerate(items)
                                        if isinstance(e, TextEvent))
    assert summary(items)[0] == "fine"


def test_429_retries_are_bounded(engine: EngineStandIn, api: str) -> None:
    engine.enqueue(*[Fail.error(429, "slow down", {"retry-after": "0"})] * 3)
    items = turn(make(engine, api=api, max_retries=2))
    assert [e.kind for e in errors(items)] == ["rate_limit"]
    assert "after 2 retries" in errors(items)[0].message
    assert len(engine.requests) == 3


def test_429_asking_more_than_the_wait_budget_fails_at_once(engine: EngineStandIn,
                                                            api: str) -> None:
    engine.enqueue(Fail.error(429, "later", {"retry-after": "120"}))
    started = time.perf_counter()
    items = turn(make(engine, api=api, max_retry_wait=5))
    assert [e.kind for e in errors(items)] == ["rate_limit"]
    assert time.perf_counter() - started < 5  # not the 120 s asked, nor the 5 s budget


def test_5xx_is_retried_then_reported(engine: EngineStandIn, api: str) -> None:
    engine.enqueue(Fail.error(503, "busy"), Fail.error(500, "broken"))
    items = turn(make(engine, api=api, max_retries=1))
    assert [e.kind for e in errors(items)] == ["server"]
    assert len(engine.requests) == 2


def test_a_stream_cut_mid_reply_keeps_what_arrived(engine: EngineStandIn, api: str) -> None:
    engine.enqueue(both_apis(["Hello ", "there, ", "friend"], drop_after=2)[api])
    items = turn(make(engine, api=api))
    assert summary(items)[0].rstrip() == "Hello there,"  # the parser held the space back
    assert [e.kind for e in errors(items)] == ["stream_cut"]
    assert "kept" in errors(items)[0].message


def test_a_stream_cut_drops_a_half_written_call(engine: EngineStandIn, api: str) -> None:
    engine.enqueue(both_apis([REPLY[:60], REPLY[60:]], drop_after=1)[api])
    _text, calls, reason = summary(turn(make(engine, api=api)))
    assert (calls, reason) == ([], "error")
    assert ran == []


def test_a_stream_ending_before_its_end_is_a_cut(engine: EngineStandIn, api: str) -> None:
    chunks: list[Any] = ([completion_chunk("half")] if api == "completions"
                         else [{"content": "half", "stop": False}])
    engine.enqueue(Stream(chunks, done=api == "completions"))
    items = turn(make(engine, api=api))
    assert summary(items)[0] == "half"
    assert [e.kind for e in errors(items)] == ["stream_cut"]


def test_a_cut_after_the_end_counts_as_complete(engine: EngineStandIn) -> None:
    engine.enqueue(Stream(completion_chunks(["done"], usage=(3, 1)), drop_after=2))
    text, _calls, reason = summary(turn(make(engine)))
    assert (text, reason) == ("done", "stop")


def test_an_error_inside_the_stream_is_a_server_error(engine: EngineStandIn, api: str) -> None:
    error = {"error": {"message": "the engine ran out of memory", "code": 500}}
    engine.enqueue(Stream([completion_chunk("so far") if api == "completions"
                           else {"content": "so far", "stop": False}, error],
                          done=False))
    items = turn(make(engine, api=api))
    assert summary(items)[0] == "so far"
    assert [e.kind for e in errors(items)] == ["server"]
    assert "out of memory" in errors(items)[0].message


def test_garbage_in_the_stream_is_a_bad_response(engine: EngineStandIn, api: str) -> None:
    engine.enqueue(Stream(["{not json"], done=False))
    items = turn(make(engine, api=api))
    assert [e.kind for e in errors(items)] == ["bad_response"]


def test_an_engine_that_never_answers_times_out(engine: EngineStandIn, api: str) -> None:
    engine.enqueue(Hang(10))
    started = time.perf_counter()
    items = turn(make(engine, api=api, timeout=0.5))
    assert [e.kind for e in errors(items)] == ["timeout"]
    assert time.perf_counter() - started < 5


def test_a_stream_that_stalls_times_out_and_keeps_the_text(engine: EngineStandIn,
                                                           api: str) -> None:
    engine.enqueue(both_apis(["before ", "after"], stall_at=1, stall=10)[api])
    items = turn(make(engine, api=api, timeout=0.5))
    assert summary(items)[0].rstrip() == "before"
    assert [e.kind for e in errors(items)] == ["timeout"]
    assert "stalled" in errors(items)[0].message and "kept" in errors(items)[0].message


def test_a_length_finish_is_length(engine: EngineStandIn, api: str) -> None:
    engine.enqueue(Stream(completion_chunks(["cut"], finish="length")) if api == "completions"
                   else llama_stream(["cut"], stop_type="limit"))
    assert summary(turn(make(engine, api=api)))[2] == "length"


# -- cancellation ---------------------------------------------------------------------


def test_cancel_mid_reply_closes_the_stream_and_runs_no_tool(engine: EngineStandIn,
                                                             api: str) -> None:
    pieces = ["Thinking ", *[REPLY[i:i + 4] for i in range(0, len(REPLY), 4)]]
    engine.enqueue(both_apis(pieces, delay=0.05)[api])
    chat = Chat(make(engine, api=api), [get_weather])
    cancel = CancelToken()
    seen: list[Any] = []
    for event in chat.send("go", cancel=cancel):
        seen.append(event)
        if isinstance(event, TextEvent):
            cancel.cancel()
    done = seen[-1]
    assert isinstance(done, DoneEvent) and done.reason == "cancelled"
    assert ran == []
    assert engine.client_gone.wait(5), "the stream was not closed"


def test_cancel_while_the_engine_is_silent_returns_at_once(engine: EngineStandIn,
                                                           api: str) -> None:
    engine.enqueue(Hang(10))
    backend = make(engine, api=api)
    cancel = CancelToken()
    threading.Timer(0.3, cancel.cancel).start()
    started = time.perf_counter()
    items = turn(backend, cancel=cancel)
    assert isinstance(items[-1], TurnEnd) and items[-1].reason == "cancelled"
    assert time.perf_counter() - started < 5  # (a hang of 10 s, a wait of 20: not waited out)
    assert errors(items) == []


def test_cancel_while_waiting_to_retry(engine: EngineStandIn) -> None:
    engine.enqueue(Fail.error(503, "busy", {"retry-after": "20"}))
    backend = make(engine, max_retry_wait=60)
    cancel = CancelToken()
    threading.Timer(0.3, cancel.cancel).start()
    started = time.perf_counter()
    items = turn(backend, cancel=cancel)
    assert isinstance(items[-1], TurnEnd) and items[-1].reason == "cancelled"
    assert time.perf_counter() - started < 5  # (a hang of 10 s, a wait of 20: not waited out)
    assert len(engine.requests) == 1


def test_cancel_before_the_turn_sends_nothing(engine: EngineStandIn) -> None:
    cancel = CancelToken()
    cancel.cancel()
    items = turn(make(engine), cancel=cancel)
    assert isinstance(items[-1], TurnEnd) and items[-1].reason == "cancelled"
    assert engine.requests == []
