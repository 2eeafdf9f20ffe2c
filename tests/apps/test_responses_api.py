"""``POST /v1/responses``: OpenAI's Responses API on the served model (issue 38, item 1).

The real app under uvicorn on 127.0.0.1, spoken to by the real ``openai`` SDK
(``responses.create``, ``responses.stream``) and the OpenAI Agents SDK's default
model; the model is a :class:`~toolwire.testing.ScriptedBackend` whose raw replies
go through the real ``qwen_xml`` parser, and whose requests show what the model
was sent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.apps.test_server import json_request, request, running_server, sse_items
from toolwire import ErrorEvent, TurnEnd
from toolwire.apps.server.app import create_app
from toolwire.testing import ScriptedBackend
from toolwire.vocabulary.backend import ModelRequest

THINK_AND_CALL = ("<think>\nThe notes will say.\n</think>\nLet me look.\n<tool_call>\n"
                  "<function=lookup>\n<parameter=name>\nalex\n</parameter>\n<parameter=limit>\n"
                  "3\n</parameter>\n</function>\n</tool_call>")
ANSWER = "Alex is a colleague."
LOOKUP: Any = {"type": "function", "name": "lookup", "description": "Look a person up.",
               "parameters": {"type": "object",
                              "properties": {"name": {"type": "string"},
                                             "limit": {"type": "integer"}},
                              "required": ["name"]}}
ASK = "Who is Alex?"


def sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=30)


def test_a_function_call_comes_back_as_an_item_with_typed_arguments_and_its_reasoning(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, backend, replies = replying_server
    replies.append(THINK_AND_CALL)
    response = sdk(base).responses.create(model="m", input=ASK, tools=[LOOKUP])
    assert response.status == "completed"
    assert [item.type for item in response.output] == ["reasoning", "message", "function_call"]
    reasoning, _message, call = response.output
    assert reasoning.summary[0].text == "The notes will say."  # type: ignore[union-attr]
    assert response.output_text == "Let me look."
    assert call.name == "lookup" and json.loads(call.arguments) == {  # type: ignore[union-attr]
        "name": "alex", "limit": 3}
    assert call.call_id.startswith("call_")  # type: ignore[union-attr]
    (sent,) = backend.requests
    assert [m.role for m in sent.messages] == ["user"] and sent.messages[0].content == ASK
    assert [t.name for t in sent.tools] == ["lookup"]


def ask(client: openai.OpenAI, stream: bool, **body: Any) -> Any:
    """``responses.create``, or the final response of ``responses.stream``."""
    if not stream:
        return client.responses.create(**body)
    with client.responses.stream(**body) as events:
        return events.get_final_response()


@pytest.mark.parametrize("stream", [False, True])
def test_a_function_call_output_round_trip_reaches_the_model_as_the_calls_result(
        replying_server: tuple[str, ScriptedBackend, list[Any]], stream: bool) -> None:
    base, backend, replies = replying_server
    replies += [THINK_AND_CALL, ANSWER]
    client = sdk(base)
    first = ask(client, stream, model="m", instructions="Be brief.", input=ASK, tools=[LOOKUP],
                store=False)
    call = first.output[-1]
    follow = [{"role": "user", "content": ASK},
              *[item.model_dump(exclude_none=True) for item in first.output],
              {"type": "function_call_output", "call_id": call.call_id,  # type: ignore[union-attr]
               "output": "alex: a colleague"}]
    second = ask(client, stream, model="m", instructions="Be brief.", input=follow,
                 tools=[LOOKUP], store=False)
    assert second.output_text == ANSWER and second.status == "completed"
    messages = backend.requests[1].messages
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool"]
    assistant, result = messages[2], messages[3]
    assert assistant.reasoning == "The notes will say." and assistant.content == "Let me look."
    assert [(c.name, dict(c.arguments)) for c in assistant.tool_calls] == [
        ("lookup", {"name": "alex", "limit": 3})]
    assert result.content == "alex: a colleague" and result.tool_call_id == \
        assistant.tool_calls[0].id


def test_the_stream_sends_every_typed_event_in_order_and_joins_to_the_whole_response(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, _, replies = replying_server
    replies += [THINK_AND_CALL, THINK_AND_CALL]
    client = sdk(base)
    whole = client.responses.create(model="m", input=ASK, tools=[LOOKUP])
    with client.responses.stream(model="m", input=ASK, tools=[LOOKUP]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    for needed in ("response.output_item.added", "response.reasoning_summary_part.added",
                   "response.reasoning_summary_text.delta", "response.content_part.added",
                   "response.output_text.delta", "response.output_text.done",
                   "response.function_call_arguments.delta",
                   "response.function_call_arguments.done", "response.output_item.done"):
        assert needed in kinds, needed
    deltas = "".join(e.delta for e in events  # type: ignore[union-attr]
                     if e.type == "response.function_call_arguments.delta")
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert deltas == done[0].arguments == whole.output[-1].arguments  # type: ignore[union-attr]
    text = "".join(e.delta for e in events  # type: ignore[union-attr]
                   if e.type == "response.output_text.delta")
    assert text == final.output_text == whole.output_text
    assert [i.type for i in final.output] == [i.type for i in whole.output]
    assert final.usage is not None and final.usage.output_tokens > 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_json_schema_text_format_reaches_the_model_as_its_response_format(
        replying_server: tuple[str, ScriptedBackend, list[Any]], stream: bool) -> None:
    base, backend, replies = replying_server
    replies.append('{"city": "Paris"}')
    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"], "additionalProperties": False}
    response = ask(
        sdk(base), stream, model="m", input="Where?",
        text={"format": {"type": "json_schema", "name": "place", "schema": schema,
                         "strict": True}})
    assert json.loads(response.output_text) == {"city": "Paris"}
    wanted = backend.requests[0].response_format
    assert wanted is not None and wanted.type == "json_schema" and wanted.schema == schema
    assert wanted.strict and wanted.name == "place"


def test_a_namespace_is_flattened_and_its_calls_come_back_with_their_names(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, backend, replies = replying_server
    replies.append('<tool_call>\n<function=agents__spawn>\n<parameter=task>\nlook\n'
                   '</parameter>\n</function>\n</tool_call>')
    spawn = {"type": "function", "name": "spawn", "strict": False,
             "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}
    tools: Any = [{**spawn, "description": "the top-level one"},
                  {"type": "namespace", "name": "agents", "description": "sub-agents",
                   "tools": [spawn, {**spawn, "name": "close"}]}]
    response = sdk(base).responses.create(model="m", input="go", tools=tools)
    (call,) = response.output
    assert (call.name, call.namespace) == ("spawn", "agents")  # type: ignore[union-attr]
    assert [t.name for t in backend.requests[0].tools] == ["spawn", "agents__spawn", "close"]
    # the call sent back in the next request is the model's call again
    replies.append(ANSWER)
    sdk(base).responses.create(model="m", tools=tools, input=[
        {"role": "user", "content": "go"}, call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id,  # type: ignore[union-attr]
         "output": "done"}])
    assert backend.requests[1].messages[1].tool_calls[0].name == "agents__spawn"


def test_a_built_in_tool_is_left_out_and_reported_and_naming_it_is_a_400(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, backend, replies = replying_server
    replies.append(ANSWER)
    tools: Any = [LOOKUP, {"type": "web_search", "external_web_access": False}]
    status, body = json_request(base, "POST", "/v1/responses",
                                {"model": "m", "input": "hi", "tools": tools})
    assert status == 200 and [t.name for t in backend.requests[0].tools] == ["lookup"]
    assert body["ignored_tools"][0]["type"] == "web_search"
    with pytest.raises(openai.BadRequestError) as refused:
        sdk(base).responses.create(model="m", input="hi", tools=tools,
                                   tool_choice={"type": "web_search"})  # type: ignore[arg-type]
    assert refused.value.body["param"] == "tool_choice"  # type: ignore[index]
    assert len(backend.requests) == 1


def test_previous_response_id_is_a_clear_400_since_nothing_is_stored(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, backend, _ = replying_server
    with pytest.raises(openai.BadRequestError) as refused:
        sdk(base).responses.create(model="m", input="hi", previous_response_id="resp_1")
    assert refused.value.body["param"] == "previous_response_id"  # type: ignore[index]
    assert "whole conversation" in str(refused.value)
    with pytest.raises(openai.NotFoundError):
        sdk(base).responses.retrieve("resp_1")
    assert backend.requests == []


def test_a_call_the_token_limit_cut_is_never_a_call_and_the_response_is_incomplete() -> None:
    cut = "Looking.\n<tool_call>\n<function=lookup>\n<parameter=name>\nal"
    for stream in (False, True):
        backend = ScriptedBackend([cut], finish_reason="length")
        with running_server(create_app(lambda h, s: None, backend=backend, model="m")) as base:
            body = {"model": "m", "input": ASK, "tools": [LOOKUP], "max_output_tokens": 16,
                    "stream": stream}
            if stream:
                conn, response = request(base, "POST", "/v1/responses", body)
                items = list(sse_items(response))
                conn.close()
                assert items[-1]["type"] == "response.incomplete"
                result = items[-1]["response"]
                assert "response.function_call_arguments.delta" not in {i["type"] for i in items}
            else:
                status, result = json_request(base, "POST", "/v1/responses", body)
                assert status == 200
        assert result["status"] == "incomplete"
        assert result["incomplete_details"] == {"reason": "max_output_tokens"}
        assert [item["type"] for item in result["output"]] == ["message"]
        assert result["output"][0]["content"][0]["text"].strip() == "Looking."  # no markup
        assert result["dropped_tool_calls"] == [{"name": "lookup", "reason": "length"}]
        assert backend.requests[0].sampling.max_tokens == 16


def test_reasoning_effort_and_sampling_reach_the_model_and_unknown_fields_are_accepted(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, backend, replies = replying_server
    replies += [ANSWER, ANSWER]
    status, body = json_request(base, "POST", "/v1/responses", {
        "model": "m", "input": [{"type": "message", "role": "developer",
                                 "content": [{"type": "input_text", "text": "Be brief."}]},
                                {"type": "message", "role": "user",
                                 "content": [{"type": "input_text", "text": "hi"}]}],
        "reasoning": {"effort": "high", "summary": "auto"}, "temperature": 0.3, "top_p": 0.9,
        "include": ["reasoning.encrypted_content"], "metadata": {"k": "v"}, "store": False,
        "prompt_cache_key": "abc", "client_metadata": {"thread": "t"}, "some_future_field": 1,
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [LOOKUP]})
    assert status == 200, body
    sent = backend.requests[0]
    assert [(m.role, m.content) for m in sent.messages] == [("system", "Be brief."),
                                                            ("user", "hi")]
    assert (sent.reasoning.enabled, sent.reasoning.effort) == (True, "high")
    assert (sent.sampling.temperature, sent.sampling.top_p) == (0.3, 0.9)
    assert body["metadata"] == {"k": "v"} and body["model"] == "m"
    json_request(base, "POST", "/v1/responses",
                 {"model": "m", "input": "hi", "reasoning": {"effort": "none"}})
    assert backend.requests[1].reasoning.enabled is False


def test_an_image_part_is_refused_clearly_as_the_model_reads_text_only(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, backend, _ = replying_server
    status, body = json_request(base, "POST", "/v1/responses", {"model": "m", "input": [
        {"role": "user", "content": [{"type": "input_image", "image_url": "data:x"}]}]})
    assert status == 400 and body["error"]["param"] == "input"
    assert "reads text only" in body["error"]["message"] and backend.requests == []


def test_an_error_before_the_first_event_has_its_real_status_streamed_or_not() -> None:
    class Overflow(ScriptedBackend):
        def stream_turn(self, request: ModelRequest, cancel: Any) -> Iterator[Any]:
            yield ErrorEvent("context", "the prompt needs 9000 tokens but only 100 fit")
            yield TurnEnd("error")

    backend = Overflow([])
    with running_server(create_app(lambda h, s: None, backend=backend, model="m")) as base:
        for stream in (False, True):
            conn, response = request(base, "POST", "/v1/responses",
                                     {"model": "m", "input": "hi", "stream": stream})
            body = json.loads(response.read())
            conn.close()
            assert response.status == 400
            assert body["error"]["code"] == "context_length_exceeded"
            assert body["error"]["param"] == "input"


def test_a_wrong_model_is_a_404_in_openais_shape(
        replying_server: tuple[str, ScriptedBackend, list[Any]]) -> None:
    base, _, _ = replying_server
    with pytest.raises(openai.NotFoundError) as missing:
        sdk(base).responses.create(model="gpt-5", input="hi")
    assert missing.value.body["code"] == "model_not_found"  # type: ignore[index]


@pytest.mark.parametrize("stream", [False, True])
def test_the_agents_sdk_default_model_runs_a_tool_and_answers_with_its_result(
        replying_server: tuple[str, ScriptedBackend, list[Any]], stream: bool) -> None:
    agents = pytest.importorskip("agents")
    base, backend, replies = replying_server
    replies += ['<tool_call>\n<function=lookup_person>\n<parameter=name>\nalex\n</parameter>\n'
                '</function>\n</tool_call>',
                lambda request: f"Found: {request.messages[-1].content}"]
    ran: list[str] = []

    @agents.function_tool
    def lookup_person(name: str) -> str:
        """Look a person up in the team list.

        Args:
            name: who to look up
        """
        ran.append(name)
        return f"{name} maintains the parsers"

    agents.set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    model = agents.OpenAIResponsesModel(model="m", openai_client=client)
    agent = agents.Agent(name="helper", instructions="Use the tools.", model=model,
                         tools=[lookup_person])
    if stream:
        async def streamed() -> Any:
            run = agents.Runner.run_streamed(agent, "Who is alex?")
            kinds = [event.type async for event in run.stream_events()]
            assert "raw_response_event" in kinds
            return run

        result = asyncio.run(streamed())
    else:
        result = agents.Runner.run_sync(agent, "Who is alex?")
    assert ran == ["alex"]
    assert result.final_output == "Found: alex maintains the parsers"
    assert backend.requests[1].messages[-1].role == "tool"


def test_the_documented_agents_sdk_example_runs(
        replying_server: tuple[str, ScriptedBackend, list[Any]], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import runpy

    from tests.support.paths import DOCS

    pytest.importorskip("agents")
    base, backend, replies = replying_server
    replies += ['<tool_call>\n<function=search_text>\n<parameter=pattern>\nAlex\n</parameter>\n'
                '</function>\n</tool_call>',
                lambda request: f"The notes say: {request.messages[-1].content}"]
    monkeypatch.setenv("TOOLWIRE_URL", base + "/v1")
    monkeypatch.setenv("TOOLWIRE_MODEL", "m")
    runpy.run_path(str(DOCS / "examples" / "agents_sdk_client.py"), run_name="__main__")
    assert capsys.readouterr().out.strip() == (
        "The notes say: notes/people.md:3: Alex: maintains the parser plugins; prefers Qwen3.5.")
    assert [m.role for m in backend.requests[1].messages] == ["system", "user", "assistant",
                                                               "tool"]
