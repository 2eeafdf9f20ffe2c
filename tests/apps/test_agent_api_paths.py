"""One path for three APIs, and what sits around them (issue 38, items 3 and 4).

* The same conversation sent through ``/v1/chat/completions``, ``/v1/responses``
  and ``/v1/messages`` renders the same prompt for the model, through the real
  template of every family whose template renders calls (the family's own call
  ids too: ids from other providers are rewritten the same way).
* Chat completions writes reasoning as ``reasoning`` beside ``reasoning_content``
  and reads both back; ``GET /health``; ``GET /metrics`` in the Prometheus text
  format; an unknown route answers in its API's error shape, as JSON; a full queue
  is a ``429`` in each API's shape.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.apps.test_server import json_request, request, running_server, wait_for
from tests.families.test_bfcl_round_trip import FAMILY_TEMPLATES
from tests.support.templates import family_template
from toolwire import CancelToken, TemplateError, TextEvent, TurnEnd
from toolwire.apps.server.app import create_app
from toolwire.apps.server.call_id_forms import CallIdForm
from toolwire.apps.server.completion_request import parse_completion_request
from toolwire.apps.server.messages_request import parse_messages_request
from toolwire.apps.server.model_route import model_request_for
from toolwire.apps.server.responses_request import parse_responses_request
from toolwire.backends.templated import EncodedPrompt, TemplatedBackend, TemplateSource
from toolwire.limits import ServerLimits
from toolwire.testing import ScriptedBackend, isolated_plugin_manager
from toolwire.vocabulary.backend import ModelRequest

PLUGINS = isolated_plugin_manager()
TEMPLATES = {**FAMILY_TEMPLATES, "minimax_m3": "MiniMax-M3.jinja",
             "command_r_plus": "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
             "functionary_v3_2": "meetkai-functionary-medium-v3.2.jinja"}
"""A real template of every family (the BFCL round trip's, and those it covers elsewhere)."""
SCHEMA: Any = {"type": "object", "properties": {"name": {"type": "string",
                                                         "description": "who to look up"},
                                                "limit": {"type": "integer",
                                                          "description": "how many"}},
               "required": ["name"], "additionalProperties": False}
DESCRIPTION = "Look a person up in the team list."
ARGS = ({"name": "alex", "limit": 2}, {"name": "sam"})
IDS = ("toolu_01A09q90qw90lq917835lq9", "call_9kYt2QxTq8mZ1vB4nR7wL0aS")
VARIANTS = ((True, 2), (True, 1), (False, 1))
"""(the assistant writes text and reasoning before its calls, how many calls): each
family's template renders at least one (some refuse parallel calls, or text beside a
call); the conversation ends with the calls' results, the turn an agent asks most."""


def chat_body(said: bool, calls: int) -> dict[str, Any]:
    assistant: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "lookup", "arguments": json.dumps(a)}}
        for i, a in zip(IDS[:calls], ARGS, strict=False)]}
    if said:
        assistant.update(content="Looking them up.", reasoning_content="Two calls.")
    return {"model": "m", "tools": [{"type": "function", "function": {
        "name": "lookup", "description": DESCRIPTION, "parameters": SCHEMA}}],
        "messages": [
            {"role": "system", "content": "You help."},
            {"role": "user", "content": "Who are Alex and Sam?"}, assistant,
            *({"role": "tool", "tool_call_id": i, "content": f"result {n}"}
              for n, i in enumerate(IDS[:calls]))]}


def responses_body(said: bool, calls: int) -> dict[str, Any]:
    spoken: list[dict[str, Any]] = [
        {"type": "reasoning", "id": "rs_1",
         "summary": [{"type": "summary_text", "text": "Two calls."}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Looking them up."}]}] if said else []
    return {"model": "m", "tools": [{"type": "function", "name": "lookup",
                                     "description": DESCRIPTION, "parameters": SCHEMA}],
            "instructions": "You help.", "input": [
                {"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": "Who are Alex and Sam?"}]},
                *spoken,
                *({"type": "function_call", "call_id": i, "name": "lookup",
                   "arguments": json.dumps(a)} for i, a in zip(IDS[:calls], ARGS, strict=False)),
                *({"type": "function_call_output", "call_id": i, "output": f"result {n}"}
                  for n, i in enumerate(IDS[:calls]))]}


def messages_body(said: bool, calls: int) -> dict[str, Any]:
    spoken: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": "Two calls.", "signature": "x"},
        {"type": "text", "text": "Looking them up."}] if said else []
    return {"model": "m", "max_tokens": 100, "system": "You help.",
            "tools": [{"name": "lookup", "description": DESCRIPTION, "input_schema": SCHEMA}],
            "messages": [
                {"role": "user", "content": "Who are Alex and Sam?"},
                {"role": "assistant", "content": [
                    *spoken, *({"type": "tool_use", "id": i, "name": "lookup", "input": a}
                               for i, a in zip(IDS[:calls], ARGS, strict=False))]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": i, "content": f"result {n}"}
                    for n, i in enumerate(IDS[:calls])]}]}


class RenderOnly(TemplatedBackend):
    """A template, rendered and counted as a turn renders it, with no model behind it."""

    def __init__(self, source: str, family: str) -> None:
        super().__init__(templates=lambda tools: TemplateSource("test", source), n_ctx=1 << 20,
                         max_tokens=16, family=family, plugins=PLUGINS)

    def encode_prompt(self, text: str) -> EncodedPrompt:
        return EncodedPrompt(text, len(text))


def prompts(family: str, said: bool, calls: int) -> dict[str, str]:
    """The prompt each API's body renders through the family's real template (or the
    template's refusal, as ``error: ...``)."""
    backend = RenderOnly(family_template(TEMPLATES[family]), family)
    form = CallIdForm.of(backend.make_call_id)
    limits = ServerLimits()
    requests = {"chat": parse_completion_request(chat_body(said, calls), limits),
                "responses": parse_responses_request(responses_body(said, calls), limits)[0],
                "messages": parse_messages_request(messages_body(said, calls), limits)[0]}
    rendered = {}
    for api, parsed in requests.items():
        try:
            rendered[api] = backend.fit_prompt(model_request_for(parsed, form),
                                               whole=True)[1].text
        except TemplateError as exc:
            rendered[api] = f"error: {exc}"
    return rendered


@pytest.mark.parametrize("family", sorted(PLUGINS.parsers()))
def test_a_conversation_renders_the_same_prompt_through_every_api(family: str) -> None:
    assert family in TEMPLATES, f"add a real template of {family} to TEMPLATES"
    rendered = 0
    for said, calls in VARIANTS:
        prompt = prompts(family, said, calls)
        assert prompt["responses"] == prompt["chat"], (said, calls)
        assert prompt["messages"] == prompt["chat"], (said, calls)
        if not prompt["chat"].startswith("error: "):
            rendered += 1
            assert "result 0" in prompt["chat"]
    assert rendered, "the template renders none of the conversations"


def test_the_three_bodies_read_into_one_conversation() -> None:
    limits = ServerLimits()
    for said, calls in VARIANTS:
        chat = parse_completion_request(chat_body(said, calls), limits)
        for other in (parse_responses_request(responses_body(said, calls), limits)[0],
                      parse_messages_request(messages_body(said, calls), limits)[0]):
            assert other.messages == chat.messages
            assert [t.schema for t in other.tools] == [t.schema for t in chat.tools]


# -- around the APIs ---------------------------------------------------------------------


REASONING_REPLY = "<think>\nA short thought.\n</think>\nThe answer."


@pytest.fixture
def server() -> Iterator[tuple[str, ScriptedBackend]]:
    backend = ScriptedBackend([REASONING_REPLY] * 20)
    with running_server(create_app(lambda h, s: None, backend=backend, model="m")) as base:
        yield base, backend


def test_chat_completions_writes_reasoning_beside_reasoning_content_and_reads_both(
        server: tuple[str, ScriptedBackend]) -> None:
    base, backend = server
    ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    status, body = json_request(base, "POST", "/v1/chat/completions", ask)
    message = body["choices"][0]["message"]
    assert status == 200 and message["reasoning"] == message["reasoning_content"] == \
        "A short thought."
    conn, response = request(base, "POST", "/v1/chat/completions", {**ask, "stream": True})
    frames = response.read().decode().split("\n\n")
    conn.close()
    chunks = [json.loads(f[6:]) for f in frames if f.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    pieces = [d for d in deltas if "reasoning" in d or "reasoning_content" in d]
    assert pieces and all(d["reasoning"] == d["reasoning_content"] for d in pieces)
    for key in ("reasoning", "reasoning_content"):
        json_request(base, "POST", "/v1/chat/completions", {**ask, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "The answer.", key: "Earlier thought."},
            {"role": "user", "content": "again"}]})
        assert backend.requests[-1].messages[1].reasoning == "Earlier thought."


def test_health_answers_beside_healthz(server: tuple[str, ScriptedBackend]) -> None:
    base, _ = server
    for path in ("/health", "/healthz"):
        status, body = json_request(base, "GET", path)
        assert status == 200 and body["status"] == "ok"


def test_metrics_count_requests_tokens_times_and_diagnostics_by_api(
        server: tuple[str, ScriptedBackend]) -> None:
    base, _ = server
    json_request(base, "POST", "/v1/chat/completions",
                 {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    json_request(base, "POST", "/v1/responses", {"model": "m", "input": "hi"})
    json_request(base, "POST", "/v1/messages",
                 {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
    json_request(base, "POST", "/v1/messages", {"model": "nope", "max_tokens": 8,
                                                "messages": []})
    conn = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]), timeout=10)
    conn.request("GET", "/metrics")
    response = conn.getresponse()
    text = response.read().decode()
    conn.close()
    assert response.status == 200
    assert response.getheader("Content-Type", "").startswith("text/plain; version=0.0.4")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}

    def value(name: str, **labels: str) -> float:
        return samples.get((name, tuple(sorted(labels.items()))), 0.0)

    for route in ("/v1/chat/completions", "/v1/responses"):
        assert value("toolwire_http_requests_total", route=route, method="POST",
                     status="200") == 1
    assert value("toolwire_http_requests_total", route="/v1/messages", method="POST",
                 status="400") == 1
    assert value("toolwire_http_errors_total", route="/v1/messages", status="400") == 1
    for api in ("chat_completions", "responses", "messages"):
        assert value("toolwire_completion_tokens_total", api=api) > 0
        assert value("toolwire_time_to_first_token_seconds_count", api=api) == 1
    assert value("toolwire_queue_waiting") == 0 and value("toolwire_model_worker_restarts") == 0


def test_metrics_count_the_parsers_diagnostics_by_code() -> None:
    backend = ScriptedBackend(["Sure.\n<tool_call>\n<function=lookup>\n<parameter=name>\nx"])
    with running_server(create_app(lambda h, s: None, backend=backend, model="m")) as base:
        json_request(base, "POST", "/v1/messages", {
            "model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"name": "lookup", "input_schema": SCHEMA}]})
        conn = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]), timeout=10)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
    counted = {s.labels["code"]: s.value for family in text_string_to_metric_families(text)
               for s in family.samples if s.name == "toolwire_parser_diagnostics_total"}
    assert counted.get("unclosed_call", 0) == 1, counted


def test_an_unknown_route_answers_in_its_apis_error_shape_as_json(
        server: tuple[str, ScriptedBackend]) -> None:
    base, _ = server
    status, body = json_request(base, "GET", "/v1/messages/batches")
    assert status == 404 and body["type"] == "error" and body["error"]["type"] == \
        "not_found_error"
    status, body = json_request(base, "GET", "/v1/embeddings")
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body = json_request(base, "GET", "/v1/responses/resp_1")
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body = json_request(base, "GET", "/nowhere")
    assert status == 404 and isinstance(body["error"], str)
    status, body = json_request(base, "GET", "/v1/messages")
    assert status == 405 and body["error"]["type"] == "invalid_request_error"


class Holding(ScriptedBackend):
    """Holds its turn until released, so the queue fills behind it."""

    def __init__(self) -> None:
        super().__init__([])
        self.started = threading.Event()
        self.release = threading.Event()

    def stream_turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Any]:
        self.started.set()
        while not self.release.wait(0.05):
            if cancel.cancelled:
                break
        yield TextEvent("ok")
        yield TurnEnd("stop")


def post_only(base: str, path: str, body: Any) -> http.client.HTTPConnection:
    """Send a request without waiting for its answer."""
    conn = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]), timeout=30)
    conn.request("POST", path, body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json"})
    return conn


def test_a_full_queue_is_a_429_in_every_apis_shape() -> None:
    backend = Holding()
    app = create_app(lambda h, s: None, backend=backend, model="m",
                     limits=ServerLimits(max_waiting=1))
    with running_server(app) as base:
        ask = [{"role": "user", "content": "hi"}]
        held = [post_only(base, "/v1/chat/completions", {"model": "m", "messages": ask})]
        wait_for(backend.started.is_set)
        held.append(post_only(base, "/v1/responses", {"model": "m", "input": "hi"}))
        wait_for(lambda: app.state.toolwire.queue.waiting == 1)
        answers = {path: json_request(base, "POST", path, body) for path, body in (
            ("/v1/chat/completions", {"model": "m", "messages": ask}),
            ("/v1/responses", {"model": "m", "input": "hi"}),
            ("/v1/messages", {"model": "m", "max_tokens": 8, "messages": ask}))}
        backend.release.set()
        for conn in held:
            assert conn.getresponse().status == 200
            conn.close()
    assert answers["/v1/chat/completions"][0] == answers["/v1/responses"][0] == 429
    assert answers["/v1/responses"][1]["error"]["code"] == "queue_full"
    status, body = answers["/v1/messages"]
    assert status == 429 and body["error"]["type"] == "rate_limit_error"
