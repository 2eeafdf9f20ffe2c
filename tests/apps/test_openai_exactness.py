"""What ``/v1/chat/completions`` sends is exactly what the parser read (issue 29).

Every case goes through the real ``openai`` SDK (sync and async, streamed and
not) and raw server-sent events, against a real server on 127.0.0.1 whose
scripted backend replays raw model text through the family's real parser; the
five readings must agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.apps.test_server import running_server
from tests.support.families import parse_text
from tests.support.openai_clients import Reading, every_reading, raw_sse
from toolwire.apps.server.app import create_app
from toolwire.testing import ScriptedBackend

MODEL = "scripted"
WEATHER: Any = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
LABEL: Any = {"type": "function", "function": {
    "name": "label_it", "parameters": {"type": "object", "properties": {
        "label": {"type": ["string", "null"]}, "count": {"type": "integer"},
        "note": {"type": "string"}}}}}
ASK: Any = [{"role": "user", "content": "The weather in Tokyo and Osaka?"}]
READINGS = 5


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(backend)``: a real server on 127.0.0.1 for the scripted backend."""
    stack: list[Any] = []

    def start(backend: Any) -> str:
        app = create_app(lambda history, system: None,  # type: ignore[arg-type,return-value]
                         backend=backend, model=MODEL)
        manager = running_server(app)
        stack.append(manager)
        return manager.__enter__()

    yield start
    for manager in reversed(stack):
        manager.__exit__(None, None, None)


def agreed(readings: dict[str, Reading]) -> Reading:
    """The one reading all five clients agree on."""
    first = readings["sync"]
    for way, reading in readings.items():
        assert reading.what() == first.what(), (way, reading, first)
    return first


def read_all(serve: Any, reply: str, body: dict[str, Any], **options: Any) -> Reading:
    backend = ScriptedBackend([reply] * READINGS, **options)
    base = serve(backend)
    return agreed(every_reading(base, {"model": MODEL, "messages": ASK, **body}))


# -- 1. a call cut by the token limit is not a call ------------------------------------------

TOKYO_XML = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nTokyo\n</parameter>\n"
             "</function>\n</tool_call>")
CUT_REPLIES = [
    # (family, the reply the token limit cut, the complete calls before the cut)
    ("qwen_xml", f"Sure.\n{TOKYO_XML}\n<tool_call>\n<function=get_weather>\n"
                 "<parameter=city>\nOsa", ["Tokyo"]),
    ("qwen_xml", f"Sure.\n{TOKYO_XML}\n<tool_call>\n<func", ["Tokyo"]),
    ("qwen_xml", "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nTok", []),
    ("hermes_json", 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo"}}'
                    '\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": '
                    '{"city": "Os', ["Tokyo"]),
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Tokyo"}}, '
                '{"name": "get_we', ["Tokyo"]),
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Tokyo"}}, '
                '{"name": "get_weather", "arguments": {"city": "Osa', ["Tokyo"]),
    # a cut inside harmony's header (issue 39, item 5): held back like any unfinished call
    ("harmony", "<|channel|>analysis<|message|>Sure.<|end|><|start|>assistant "
                "to=functions.get_weather<|channel|>commentary <|constrain|>json", []),
]


@pytest.mark.parametrize(("family", "reply", "complete"), CUT_REPLIES)
def test_a_call_cut_by_the_token_limit_is_dropped_and_said_so(
        serve: Any, family: str, reply: str, complete: list[str]) -> None:
    reading = read_all(serve, reply, {"tools": [WEATHER]}, family=family,
                       finish_reason="length")
    assert reading.status == 200 and reading.finish == "length"
    assert [(name, json.loads(arguments)) for name, arguments in reading.calls] == \
        [("get_weather", {"city": city}) for city in complete]
    for marker in ("<tool_call", "<func", "[TOOL_CALLS]", "{", "get_we", "<|"):
        assert marker not in reading.content, reading.content
    assert reading.content.strip() in ("", "Sure.")
    (dropped,) = reading.dropped
    assert dropped["reason"] == "length" and dropped["name"] in ("get_weather", "")


@pytest.mark.parametrize("choice", ["required", {"type": "function",
                                                  "function": {"name": "get_weather"}}])
@pytest.mark.parametrize(("family", "reply"), [
    ("hermes_json", "<"), ("hermes_json", "<tool"), ("hermes_json", "<tool_"),
    ("hermes_json", "<tool_call"), ("qwen_xml", "<tool_"), ("qwen_xml", "\n<tool_call>\n<fun")])
def test_a_forced_call_cut_inside_its_opening_marker_is_not_text(
        serve: Any, family: str, reply: str, choice: Any) -> None:
    # the grammar makes a forced reply's first tokens markup: cut there, it is a call cut
    reading = read_all(serve, reply, {"tools": [WEATHER], "tool_choice": choice},
                       family=family, finish_reason="length")
    assert (reading.status, reading.finish, reading.content, reading.calls) == \
        (200, "length", "", [])
    assert reading.dropped == [{"name": "", "reason": "length"}]


def test_complete_calls_of_a_reply_cut_after_them_are_returned_with_length(serve: Any) -> None:
    reply = f"Sure.\n{TOKYO_XML}\nAnd now some text that was c"
    reading = read_all(serve, reply, {"tools": [WEATHER]}, finish_reason="length")
    assert reading.finish == "length" and reading.dropped == []
    assert reading.calls == [("get_weather", '{"city": "Tokyo"}')]
    assert reading.content == parse_text("qwen_xml", reply, [WEATHER]).content


def test_plain_text_cut_by_the_token_limit_is_all_kept(serve: Any) -> None:
    reading = read_all(serve, "The weather in Tokyo is <b>sunny</b> and warm, in Os",
                       {"tools": [WEATHER]}, finish_reason="length")
    assert reading.content == "The weather in Tokyo is <b>sunny</b> and warm, in Os"
    assert reading.finish == "length" and reading.calls == [] and reading.dropped == []


# -- 2. no duplicate keys, no drift ------------------------------------------------------------


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), keys
    return dict(pairs)


@pytest.mark.parametrize(("written", "typed"), [
    ("<parameter=label>\nnull\n</parameter>\n<parameter=note>\nhi\n</parameter>\n",
     {"label": None, "note": "hi"}),
    ("<parameter=count>\n42\n</parameter>\n<parameter=label>\nx\n</parameter>\n",
     {"count": 42, "label": "x"}),
    ("<parameter=note>\nnull\n</parameter>\n", {"note": "null"}),
])
def test_a_typed_value_is_sent_once_and_typed(serve: Any, written: str,
                                              typed: dict[str, Any]) -> None:
    reply = f"<tool_call>\n<function=label_it>\n{written}</function>\n</tool_call>"
    reading = read_all(serve, reply, {"tools": [LABEL]}, chunk_size=1)
    ((name, arguments),) = reading.calls
    assert name == "label_it" and reading.finish == "tool_calls"
    assert json.loads(arguments, object_pairs_hook=_no_duplicates) == typed
    assert arguments == json.dumps(typed, ensure_ascii=False)


def test_json_arguments_are_the_typed_value_whatever_the_model_spacing(serve: Any) -> None:
    reply = ('<tool_call>\n{"name": "label_it", "arguments": {"count" :  7,"note":"\\u00e9",'
             '"label": null}}\n</tool_call>')
    reading = read_all(serve, reply, {"tools": [LABEL]}, family="hermes_json", chunk_size=2)
    assert reading.calls == [("label_it", '{"count": 7, "note": "é", "label": null}')]


# -- 3. errors with the right status, before the stream starts ----------------------------------


def test_a_grammar_that_cannot_enforce_the_choice_is_400_streamed_or_not(serve: Any) -> None:
    class NoGrammar(ScriptedBackend):
        def stream_turn(self, request: Any, cancel: Any) -> Any:
            from toolwire.events import ErrorEvent
            from toolwire.vocabulary.backend import TurnEnd

            yield ErrorEvent("grammar", "tool_choice 'required' cannot be enforced: tool "
                                        "'get_weather', /properties/city ('not')")
            yield TurnEnd("error")

    base = serve(NoGrammar([]))
    readings = every_reading(base, {"model": MODEL, "messages": ASK, "tools": [WEATHER],
                                    "tool_choice": "required"})
    assert agreed(readings).status == 400
    assert readings["sync"].error == ("tool_choice", "grammar_unsupported")


def test_a_context_overflow_is_400_for_a_streaming_client_too(serve: Any) -> None:
    class Overflow(ScriptedBackend):
        def stream_turn(self, request: Any, cancel: Any) -> Any:
            from toolwire.events import ErrorEvent
            from toolwire.vocabulary.backend import TurnEnd

            yield ErrorEvent("context", "the prompt needs 9000 tokens but only 4096 fit")
            yield TurnEnd("error")

    readings = every_reading(serve(Overflow([])), {"model": MODEL, "messages": ASK})
    assert agreed(readings).status == 400
    assert readings["raw-sse"].error == ("messages", "context_length_exceeded")


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/v1/nothing", 404), ("POST", "/v1/completions", 404),
    ("GET", "/v1/chat/completions", 405), ("DELETE", "/v1/models", 405),
])
def test_unknown_routes_and_methods_answer_openais_error_object(
        serve: Any, method: str, path: str, status: int) -> None:
    import http.client

    base = serve(ScriptedBackend([]))
    conn = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]), timeout=10)
    conn.request(method, path)
    response = conn.getresponse()
    body = json.loads(response.read())
    conn.close()
    assert response.status == status
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["code"] == ("not_found" if status == 404 else "method_not_allowed")
    if status == 405:
        assert response.getheader("Allow")


def test_the_sdk_raises_not_found_for_an_unknown_route(serve: Any) -> None:
    import openai

    base = serve(ScriptedBackend([]))
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.NotFoundError) as missing:
        client.embeddings.create(model=MODEL, input="hi")
    assert missing.value.code == "not_found"  # type: ignore[attr-defined]


# -- the raw stream --------------------------------------------------------------------------


def test_a_stream_starts_with_the_role_and_each_call_comes_whole(serve: Any) -> None:
    two = f"Sure.\n{TOKYO_XML}\n{TOKYO_XML.replace('Tokyo', 'Osaka')}"
    base = serve(ScriptedBackend([two]))
    status, headers, frames = raw_sse(base, {"model": MODEL, "messages": ASK,
                                             "tools": [WEATHER]})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert frames[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    calls = [d for f in frames[:-1] for d in f["choices"][0]["delta"].get("tool_calls", [])]
    assert [(c["index"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == \
        [(0, "get_weather", '{"city": "Tokyo"}'), (1, "get_weather", '{"city": "Osaka"}')]
    assert all(c["id"] and c["type"] == "function" for c in calls)
    assert frames[-2]["choices"][0]["finish_reason"] == "tool_calls"


# -- 7. the deprecated functions and function_call -----------------------------------------------

LEGACY_FUNCTION = WEATHER["function"]


def test_legacy_functions_get_a_function_call_back(serve: Any) -> None:
    two = f"Sure.\n{TOKYO_XML}\n{TOKYO_XML.replace('Tokyo', 'Osaka')}"
    reading = read_all(serve, two, {"functions": [LEGACY_FUNCTION]})
    assert reading.finish == "function_call"
    assert reading.calls == [("get_weather", '{"city": "Tokyo"}')]  # one call at most


def test_a_named_function_call_becomes_a_named_tool_choice(serve: Any) -> None:
    backend = ScriptedBackend([TOKYO_XML])
    base = serve(backend)
    import openai

    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    reply = client.chat.completions.create(model=MODEL, messages=ASK,
                                           functions=[LEGACY_FUNCTION],
                                           function_call={"name": "get_weather"})
    message = reply.choices[0].message
    assert message.function_call is not None and message.tool_calls is None
    assert json.loads(message.function_call.arguments) == {"city": "Tokyo"}
    (request,) = backend.requests
    assert request.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    assert [t.name for t in request.tools] == ["get_weather"] and not request.parallel_tool_calls


def test_function_messages_are_read_as_the_results_of_the_calls_they_answer(serve: Any) -> None:
    backend = ScriptedBackend(["It is sunny in Tokyo and rainy in Osaka."])
    base = serve(backend)
    history = [*ASK,
               {"role": "assistant", "content": None,
                "function_call": {"name": "get_weather", "arguments": '{"city": "Tokyo"}'}},
               {"role": "function", "name": "get_weather", "content": "sunny"},
               {"role": "assistant", "content": None,
                "function_call": {"name": "get_weather", "arguments": '{"city": "Osaka"}'}},
               {"role": "function", "name": "get_weather", "content": "rainy"}]
    import openai

    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    reply = client.chat.completions.create(model=MODEL, messages=history,  # type: ignore
                                           functions=[LEGACY_FUNCTION])
    assert reply.choices[0].finish_reason == "stop"
    messages = backend.requests[0].messages
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert [(m.tool_call_id, m.content) for m in messages if m.role == "tool"] == [
        (messages[1].tool_calls[0].id, "sunny"), (messages[3].tool_calls[0].id, "rainy")]
    assert messages[3].tool_calls[0].arguments == {"city": "Osaka"}


@pytest.mark.parametrize(("body", "param"), [
    ({"functions": [LEGACY_FUNCTION], "tools": [WEATHER]}, "functions"),
    ({"functions": [LEGACY_FUNCTION], "function_call": {"name": "nope"}}, "function_call"),
    ({"functions": [{"parameters": {}}]}, "functions[0]"),
    ({"messages": [*ASK, {"role": "function", "name": "get_weather", "content": "x"}],
      "functions": [LEGACY_FUNCTION]}, "messages"),
])
def test_malformed_legacy_fields_are_400_naming_them(serve: Any, body: dict[str, Any],
                                                     param: str) -> None:
    readings = every_reading(serve(ScriptedBackend([])), {"model": MODEL, "messages": ASK,
                                                          **body})
    assert agreed(readings).status == 400 and readings["sync"].error is not None
    assert readings["sync"].error[0] == param
