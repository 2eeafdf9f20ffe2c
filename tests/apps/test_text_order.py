"""Text leaves every surface in the order the model wrote it (issue 39, item 6).

The OpenAI endpoint holds the latest text back for one item, since its end may be markup
of a call the token limit cut; markup the parser gives back as text after other text
must still come after that text. Checked on the surfaces a reply reaches, against the
parser's own reading of the same reply in the same deltas: ``/v1/chat/completions``
(streamed and not), ``/v1/responses`` and ``/v1/messages``, the dashboard's ``/v1/chat``
event stream and the chat loop, over random replies made of a family's markup, its near
misses and text, random chunkings and both ends (``stop``, ``length``).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.apps.test_server import chat_stream, running_server, user
from tests.support.families import plugins
from tests.support.openai_clients import every_reading, joined_chunks, raw_sse
from toolwire import Chat
from toolwire.apps.server.app import create_app
from toolwire.apps.server.completion_stream import CompletionBuilder
from toolwire.events import DiagnosticEvent, Event, TextEvent
from toolwire.families.pipeline import build_pipeline
from toolwire.parse.protocol import EndReason
from toolwire.testing import ScriptedBackend, isolated_plugin_manager
from toolwire.testing import strategies as tws
from toolwire.vocabulary.backend import ModelRequest, TurnEnd
from toolwire.vocabulary.schema import tool_parameters_by_name

MODEL = "scripted"
SEARCH: Any = {"type": "function", "function": {
    "name": "search", "description": "Search.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}
FAMILIES = ("kimi_k2", "qwen_xml", "hermes_json", "deepseek", "gemma4")
GIVEN_BACK = {"truncated_call", "unclosed_call", "malformed_call"}
K2_NOISE = "Reasoning. <|tool_calls_section_begin|> spurious noise here"


class _Script:
    """The reply a model turn after the user's message writes (one after a tool's
    result writes none, so the loop ends; so does the loop's final turn, whose prompt
    for an answer is a user message after the tool's result)."""

    def __init__(self) -> None:
        self.reply = ""

    def __call__(self, request: ModelRequest) -> str:
        answered = any(m.role == "tool" for m in request.messages)
        return self.reply if request.messages[-1].role == "user" and not answered else ""


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, ScriptedBackend, _Script]]:
    script = _Script()
    backend = ScriptedBackend([script] * 100_000, family="kimi_k2")

    def make_chat(history: Any, system: str | None) -> Chat:
        return Chat(backend, history=history, system_prompt=system, max_tool_iters=2,
                    plugins=isolated_plugin_manager())

    with running_server(create_app(make_chat, backend=backend, model=MODEL)) as base:
        yield base, backend, script


def _use(server: tuple[str, ScriptedBackend, _Script], family: str, reply: str, step: int,
         end: str) -> str:
    base, backend, script = server
    backend._spec = plugins().parser(family)  # the family under test (one shared server)
    backend.chunk_size, backend.finish_reason = step, end
    script.reply = reply
    return base


def _parser_text(family: str, reply: str, step: int, end: EndReason) -> tuple[str, list[Event]]:
    """The text the family's pipeline reads from ``reply`` in ``step``-character deltas."""
    pieces = [reply[i:i + step] for i in range(0, len(reply), step)] or [""]
    pipeline = build_pipeline(plugins().parser(family), tool_parameters_by_name([SEARCH]),
                              plugins=plugins(), prompt_tail="\n")
    events = [e for piece in pieces for e in pipeline.feed(piece)]
    events += pipeline.close(end_reason=end)
    return "".join(e.text for e in events if isinstance(e, TextEvent)), events


def _content_of(base: str, stream: bool) -> tuple[str, str | None]:
    body = {"model": MODEL, "messages": [user("go")], "tools": [SEARCH]}
    if stream:
        status, _, frames = raw_sse(base, body)
        assert status == 200, frames
        reading = joined_chunks(f for f in frames[:-1])
        return reading.content, reading.finish
    conn = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]), timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        answer = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    choice = answer["choices"][0]
    return choice["message"]["content"] or "", choice["finish_reason"]


def _agent_text(base: str, api: str) -> str:
    """The reply's text as the Responses or the Messages API gives it (not streamed)."""
    function = SEARCH["function"]
    if api == "responses":
        path, body = "/v1/responses", {"model": MODEL, "input": "go", "tools": [
            {"type": "function", "name": function["name"],
             "parameters": function["parameters"]}]}
    else:
        path, body = "/v1/messages", {"model": MODEL, "max_tokens": 4096, "messages": [
            {"role": "user", "content": "go"}], "tools": [
            {"name": function["name"], "input_schema": function["parameters"]}]}
    conn = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]), timeout=30)
    try:
        conn.request("POST", path, body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        answer = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    if api == "responses":
        return "".join(part["text"] for item in answer["output"] if item["type"] == "message"
                       for part in item["content"] if part["type"] == "output_text")
    return "".join(block["text"] for block in answer["content"] if block["type"] == "text")


def _kept_in_order(text: str, content: str, events: list[Event], end: str) -> None:
    """The content is the parser's text, less (at a length end) markup given back at its
    end: never reordered."""
    if end == "stop":
        assert content == text, (content, text)
        return
    assert text.startswith(content), (content, text)
    rest = text[len(content):]
    raws = [e.raw for e in events if isinstance(e, DiagnosticEvent) and e.code in GIVEN_BACK]
    while rest and raws:
        raw = raws.pop()
        if raw and rest.endswith(raw):
            rest = rest[:len(rest) - len(raw)]
    assert not rest.strip(), (rest, content, text)


def test_the_k2_example_keeps_its_text_in_order_on_every_surface(
        server: tuple[str, ScriptedBackend, _Script]) -> None:
    for step in (4, len(K2_NOISE)):
        base = _use(server, "kimi_k2", K2_NOISE, step, "stop")
        for way, reading in every_reading(base, {"model": MODEL, "messages": [user("go")],
                                                 "tools": [SEARCH]}).items():
            assert reading.content == K2_NOISE, (way, step, reading.content)
        _use(server, "kimi_k2", K2_NOISE, step, "stop")
        _, items = chat_stream(base, [user("go")])
        assert "".join(i["text"] for i in items if i["type"] == "text") == K2_NOISE


def test_the_builder_releases_given_back_markup_after_the_text_before_it() -> None:
    events = [TextEvent("Reasoning."), TextEvent(" <|tool_calls_section_begin|> noise"),
              DiagnosticEvent("malformed_call", "not a call", "<|tool_calls_section_begin|> noise")]
    builder = CompletionBuilder("chatcmpl-x", 0, MODEL, make_call_id=str)
    chunks = [c for e in events for c in builder.feed(e)]
    builder.feed(TurnEnd("stop"))
    chunks += builder.closing_chunks()
    assert joined_chunks(chunks).content == "Reasoning. <|tool_calls_section_begin|> noise"


def _replies(family: str) -> st.SearchStrategy[str]:
    fmt = plugins().parser(family).format
    pieces = st.one_of(st.sampled_from(tws.markup_fragments(fmt.markup)),
                       st.text(alphabet="ab .\n{}\"", max_size=6),
                       st.sampled_from(["Reasoning. ", "search", '{"query": "x"}']))
    return st.lists(pieces, min_size=1, max_size=12).map("".join)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), family=st.sampled_from(FAMILIES), step=st.sampled_from([1, 3, 64]),
       end=st.sampled_from(["stop", "length"]))
def test_text_leaves_every_surface_in_the_order_the_model_wrote_it(
        server: tuple[str, ScriptedBackend, _Script], data: st.DataObject, family: str,
        step: int, end: EndReason) -> None:
    reply = data.draw(_replies(family), label="reply")
    text, events = _parser_text(family, reply, step, end)
    base = _use(server, family, reply, step, end)
    streamed, finish = _content_of(base, stream=True)
    base = _use(server, family, reply, step, end)
    whole, _ = _content_of(base, stream=False)
    assert streamed == whole, (streamed, whole)
    _kept_in_order(text, whole, events, end)
    for api in ("responses", "messages"):  # the same reply assembler, the same text
        base = _use(server, family, reply, step, end)
        assert _agent_text(base, api) == whole, api
    # the dashboard's stream and the loop pass text on as the parser gives it
    base = _use(server, family, reply, step, end)
    _, items = chat_stream(base, [user("go")])
    assert "".join(i["text"] for i in items if i["type"] == "text") == text
    _use(server, family, reply, step, end)
    chat = Chat(server[1], max_tool_iters=2, plugins=isolated_plugin_manager())
    said = "".join(e.text for e in chat.send("go") if isinstance(e, TextEvent))
    assert said == text
    assert finish in ("stop", "length", "tool_calls")
