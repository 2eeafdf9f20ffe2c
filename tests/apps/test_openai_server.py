"""``/v1/chat/completions`` and ``/v1/models`` spoken to by the real ``openai`` SDK.

The model tests run a real ``toolwire serve --demo`` process (the tiny llama.cpp
model whose output a grammar forces: a ``search_text`` call, then an answer
quoting the tool result) on 127.0.0.1, with the API key from the environment.
Concurrency, cancellation and error tests use uvicorn in a thread with
:class:`ScriptedBackend` stand-ins.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.apps.test_server import (
    ANSWER,
    CALL,
    GatedBackend,
    json_request,
    lookup,
    request,
    running_server,
    scripted_app,
    wait_for,
)
from tests.support.paths import DOCS
from tests.support.tiers import needs
from toolwire.apps.server.app import create_app
from toolwire.apps.server.served_model import LoadedModel, ServedModel
from toolwire.events import ErrorEvent, Event, TextEvent
from toolwire.limits import ServerLimits
from toolwire.testing import ScriptedBackend
from toolwire.vocabulary.backend import ModelRequest, TurnEnd
from toolwire.vocabulary.cancel import CancelToken

KEY = "test-key-1234"
SEARCH_TOOL = {"type": "function", "function": {
    "name": "search_text", "description": "Search the notes for a pattern.",
    "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}},
                   "required": ["pattern"]}}}
QUESTION = [{"role": "user", "content": "What do my notes say about Alex?"}]
NOTES_RESULT = "notes/people.md:3: Alex: maintains the parser plugins; prefers Qwen3.5."


def run_search_text(pattern: str) -> str:
    """The client's own tool: what the demo workspace would answer."""
    return NOTES_RESULT if pattern == "Alex" else "no match"


# -- a real `toolwire serve --demo` process ---------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
@needs("process")
def demo_server() -> Iterator[str]:
    """``toolwire serve --demo`` with ``TOOLWIRE_SERVE_API_KEY`` set; yields the base URL."""
    pytest.importorskip("llama_cpp")
    port = free_port()
    env = {**os.environ, "TOOLWIRE_LOAD_PLUGINS": "", "TOOLWIRE_SERVE_API_KEY": KEY}
    proc = subprocess.Popen([sys.executable, "-m", "toolwire.apps.cli.main", "serve", "--demo",
                             "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env)
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited: {proc.stderr.read()}")  # type: ignore[union-attr]
        try:
            return json_request(base, "GET", "/healthz")[0] == 200
        except OSError:
            return False

    try:
        wait_for(ready, timeout=60)
        yield base
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr
        assert "OpenAI API: http://127.0.0.1" in stderr and "'toolwire-demo'" in stderr


def sdk(base: str, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=60)


def async_sdk(base: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0, timeout=60)


def joined_stream(chunks: list[ChatCompletionChunk]) -> dict[str, Any]:
    """A streamed completion put back together as the non-streamed message."""
    content, calls, finish, usage = "", {}, None, None
    for chunk in chunks:
        assert isinstance(chunk, ChatCompletionChunk)
        usage = chunk.usage or usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for call in choice.delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"id": None, "name": None, "arguments": ""})
                if call.id:
                    assert entry["id"] is None, "the id comes once, first"
                    entry["id"], entry["name"] = call.id, call.function.name  # type: ignore
                    assert call.type == "function"
                else:
                    assert entry["id"] is not None, "the header comes before the arguments"
                entry["arguments"] += (call.function.arguments or "") if call.function else ""
    return {"content": content, "calls": [calls[i] for i in sorted(calls)], "finish": finish,
            "usage": usage}


def test_models_lists_the_served_model(demo_server: str) -> None:
    models = sdk(demo_server).models.list()
    assert [m.id for m in models.data] == ["toolwire-demo"]
    assert sdk(demo_server).models.retrieve("toolwire-demo").owned_by == "toolwire"


def test_a_tool_call_comes_back_with_json_arguments_and_an_id(demo_server: str) -> None:
    completion = sdk(demo_server).chat.completions.create(
        model="toolwire-demo", messages=QUESTION, tools=[SEARCH_TOOL])  # type: ignore[list-item]
    assert isinstance(completion, ChatCompletion)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "search_text"
    assert json.loads(call.function.arguments) == {"pattern": "Alex"}
    assert call.id.startswith("call_") and len(call.id) > 8
    assert choice.message.content == "I will search the notes."
    assert completion.usage is not None and completion.usage.prompt_tokens > 0
    assert completion.usage.total_tokens == (completion.usage.prompt_tokens
                                             + completion.usage.completion_tokens)


def test_the_streamed_call_joins_to_the_non_streamed_one(demo_server: str) -> None:
    client = sdk(demo_server)
    whole = client.chat.completions.create(model="toolwire-demo", messages=QUESTION,
                                           tools=[SEARCH_TOOL])  # type: ignore[list-item]
    chunks = list(client.chat.completions.create(
        model="toolwire-demo", messages=QUESTION, tools=[SEARCH_TOOL],  # type: ignore[list-item]
        stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    joined = joined_stream(chunks)
    message = whole.choices[0].message
    assert joined["content"] == message.content
    assert [(c["name"], c["arguments"]) for c in joined["calls"]] == \
        [(c.function.name, c.function.arguments) for c in message.tool_calls or []]
    assert joined["finish"] == "tool_calls"
    # the usage chunk comes last, with no choices
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens  # type: ignore


def test_an_agent_loop_runs_the_tool_and_gets_the_answer(demo_server: str) -> None:
    """The client runs the tool and sends its result back, as agent frameworks do."""
    async def agent() -> tuple[str | None, str]:
        client = async_sdk(demo_server)
        messages: list[Any] = list(QUESTION)
        for _ in range(3):
            completion = await client.chat.completions.create(
                model="toolwire-demo", messages=messages, tools=[SEARCH_TOOL])  # type: ignore
            choice = completion.choices[0]
            if choice.finish_reason != "tool_calls":
                return choice.message.content, choice.finish_reason
            messages.append(choice.message.model_dump(exclude_none=True))
            for call in choice.message.tool_calls or []:
                arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": run_search_text(**arguments)})
        raise AssertionError("no answer after three turns")

    content, finish = asyncio.run(agent())
    assert finish == "stop"
    assert content == f"Your notes mention Alex here:\n{NOTES_RESULT}"


def test_the_async_client_streams_the_answer_after_a_tool_result(demo_server: str) -> None:
    history: list[Any] = [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "search_text", "arguments": '{"pattern": "Alex"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": NOTES_RESULT}]

    async def stream() -> list[ChatCompletionChunk]:
        client = async_sdk(demo_server)
        response = await client.chat.completions.create(
            model="toolwire-demo", messages=history, tools=[SEARCH_TOOL],  # type: ignore
            stream=True)
        return [chunk async for chunk in response]

    joined = joined_stream(asyncio.run(stream()))
    assert joined["content"] == f"Your notes mention Alex here:\n{NOTES_RESULT}"
    assert joined["calls"] == [] and joined["finish"] == "stop" and joined["usage"] is None


def test_the_raw_stream_is_sse_data_frames_ending_with_done(demo_server: str) -> None:
    body = {"model": "toolwire-demo", "messages": QUESTION, "tools": [SEARCH_TOOL],
            "stream": True}
    conn, response = request(demo_server, "POST", "/v1/chat/completions", body,
                             headers={"Authorization": f"Bearer {KEY}"})
    raw = response.read().decode("utf-8")
    conn.close()
    assert response.status == 200
    assert response.getheader("Content-Type", "").startswith("text/event-stream")
    assert raw.endswith("\n\ndata: [DONE]\n\n")
    frames = raw.split("\n\n")[:-1]
    assert frames[-1] == "data: [DONE]"
    for frame in frames[:-1]:
        assert frame.startswith("data: {") and "\n" not in frame
        chunk = ChatCompletionChunk.model_validate(json.loads(frame.removeprefix("data: ")))
        assert chunk.object == "chat.completion.chunk" and chunk.model == "toolwire-demo"
    last = json.loads(frames[-2].removeprefix("data: "))
    assert last["choices"][0]["finish_reason"] == "tool_calls"


def test_every_v1_route_needs_the_key_when_one_is_set(demo_server: str) -> None:
    with pytest.raises(openai.AuthenticationError) as refused:
        sdk(demo_server, key="wrong").models.list()
    assert refused.value.status_code == 401
    assert refused.value.code == "invalid_api_key"  # type: ignore[attr-defined]
    status, body = json_request(demo_server, "POST", "/v1/chat",
                                {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 401 and "API key" in body["error"]
    assert json_request(demo_server, "GET", "/healthz")[0] == 200  # not a /v1 route


# -- scripted backends: queueing, cancelling, the options enforced here -----------------------


def completions(base: str, **body: Any) -> tuple[int, Any]:
    payload = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], **body}
    return json_request(base, "POST", "/v1/chat/completions", payload)


def test_requests_are_served_one_at_a_time_in_arrival_order() -> None:
    backend = GatedBackend(["one", "two", "three"])
    app = scripted_app(backend)
    queue = app.state.toolwire.queue
    results: dict[str, str] = {}
    with running_server(app) as base:
        def ask(text: str) -> None:
            status, body = json_request(base, "POST", "/v1/chat/completions", {
                "model": "scripted", "messages": [{"role": "user", "content": text}]})
            results[text] = body["choices"][0]["message"]["content"] if status == 200 else ""

        threads = []
        for waiting, text in enumerate(("a", "b", "c")):
            threads.append(threading.Thread(target=ask, args=(text,)))
            threads[-1].start()
            wait_for(lambda n=waiting: queue.active == 1 and queue.waiting == n)
        assert backend.started.wait(10) and len(backend.requests) == 0
        backend.release.set()
        for thread in threads:
            thread.join(30)
    assert [r.messages[-1].content for r in backend.requests] == ["a", "b", "c"]
    assert results == {"a": "one", "b": "two", "c": "three"}


def post_only(base: str, body: Any) -> http.client.HTTPConnection:
    """Send a chat-completions request without waiting for its answer."""
    conn = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]), timeout=30)
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json"})
    return conn


def test_a_full_queue_is_429_and_a_disconnect_cancels_the_generation() -> None:

    backend = GatedBackend([ANSWER, ANSWER])
    app = scripted_app(backend, limits=ServerLimits(max_waiting=1))
    state = app.state.toolwire
    with running_server(app) as base:
        body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}],
                "stream": True}
        first_conn = post_only(base, body)
        assert backend.started.wait(10)
        second_conn = post_only(base, body)
        wait_for(lambda: state.queue.waiting == 1)
        with pytest.raises(openai.RateLimitError) as full:
            openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0).chat.completions \
                .create(model="scripted", messages=[{"role": "user", "content": "x"}])
        assert full.value.status_code == 429 and full.value.code == "queue_full"  # type: ignore
        # the first client goes away: its generation is cancelled, the second runs
        first_conn.close()
        wait_for(lambda: backend.tokens[0].cancelled)
        assert backend.tokens[0].reason == "disconnected"
        backend.release.set()
        second = second_conn.getresponse()
        assert second.status == 200
        rest = second.read().decode()
        second_conn.close()
    assert rest.endswith("data: [DONE]\n\n") and "Alex is a colleague." in "".join(
        json.loads(f[6:])["choices"][0]["delta"].get("content") or ""
        for f in rest.split("\n\n") if f.startswith("data: {") and '"choices":[{' in f)
    assert backend.closed_early == 1


def test_a_non_streaming_client_that_disconnects_cancels_too() -> None:
    backend = GatedBackend([ANSWER])
    with running_server(scripted_app(backend)) as base:
        sock = socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])))
        payload = json.dumps({"model": "scripted",
                              "messages": [{"role": "user", "content": "hi"}]}).encode()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: "
                     + str(len(payload)).encode() + b"\r\n\r\n" + payload)
        assert backend.started.wait(10)
        sock.close()
        wait_for(lambda: backend.tokens[0].cancelled)
        assert backend.tokens[0].reason == "disconnected"
        wait_for(lambda: json_request(base, "GET", "/healthz")[1]["busy"] is False)


def test_parallel_tool_calls_false_answers_only_the_first_call() -> None:
    two = CALL + "\n" + CALL.split("Let me look.\n", 1)[1].replace("alex", "sam")
    with running_server(scripted_app(ScriptedBackend([two, two]))) as base:
        status, body = completions(base, tools=[lookup.openai_schema()])
        assert status == 200
        assert [json.loads(c["function"]["arguments"])["name"]
                for c in body["choices"][0]["message"]["tool_calls"]] == ["alex", "sam"]
        status, body = completions(base, tools=[lookup.openai_schema()],
                                   parallel_tool_calls=False)
    assert status == 200 and body["choices"][0]["finish_reason"] == "tool_calls"
    assert [json.loads(c["function"]["arguments"])["name"]
            for c in body["choices"][0]["message"]["tool_calls"]] == ["alex"]


def test_stop_strings_end_the_text_and_tool_choice_none_offers_no_tools() -> None:
    backend = ScriptedBackend(["Alex is a colleague. STOP and more", "plain"])
    with running_server(scripted_app(backend)) as base:
        status, body = completions(base, stop=["STOP"], tools=[lookup.openai_schema()],
                                   tool_choice="none")
        assert status == 200
        assert body["choices"][0]["message"]["content"] == "Alex is a colleague. "
        assert body["choices"][0]["finish_reason"] == "stop"
        status, body = completions(base, tools=[lookup.openai_schema()], tool_choice="auto")
    assert status == 200
    assert backend.requests[0].tools == () and [t.name for t in backend.requests[1].tools] == \
        ["lookup"]


def test_reasoning_comes_back_as_reasoning_content() -> None:
    backend = ScriptedBackend(["<think>check the list</think>Alex is a colleague.",
                               "<think>check the list</think>Alex is a colleague."])
    with running_server(scripted_app(backend)) as base:
        _, body = completions(base)
        client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
        chunks = list(client.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "hi"}], stream=True))
    message = body["choices"][0]["message"]
    assert message["reasoning_content"] == "check the list"
    assert message["content"] == "Alex is a colleague."
    streamed = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or ""
                       for c in chunks if c.choices)
    assert streamed == "check the list"


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
    ({"model": "scripted"}, "messages"),
    ({"model": "scripted", "messages": [{"role": "robot", "content": "x"}]}, "messages"),
    ({"model": "scripted", "messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0]"),
    ({"model": "scripted", "messages": [{"role": "user", "content": "x"}],
      "tool_choice": {"type": "function", "function": {"name": "missing"}}}, "tool_choice"),
    ({"model": "scripted", "messages": [{"role": "user", "content": "x"}],
      "temperature": 7}, "temperature"),
    ({"model": "scripted", "messages": [{"role": "user", "content": "x"}],
      "max_tokens": 0}, "max_tokens"),
    ({"model": "scripted", "messages": [{"role": "user", "content": "x"}],
      "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"model": "scripted", "messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
    ({"model": "scripted", "messages": [{"role": "user", "content": "x"}],
      "stream": "yes"}, "stream"),
])
def test_a_bad_field_is_400_naming_it(idle_openai: str, body: dict[str, Any],
                                      param: str) -> None:
    status, answer = json_request(idle_openai, "POST", "/v1/chat/completions", body)
    assert status == 400
    assert answer["error"]["param"] == param and answer["error"]["type"] == \
        "invalid_request_error"
    assert answer["error"]["message"].startswith(param)


@pytest.fixture(scope="module")
def idle_openai() -> Iterator[str]:
    app = scripted_app(ScriptedBackend([]), limits=ServerLimits(max_body_bytes=4096))
    with running_server(app) as base:
        yield base


def test_the_sdk_raises_its_typed_errors(idle_openai: str) -> None:
    client = openai.OpenAI(base_url=idle_openai + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert missing.value.code == "model_not_found"  # type: ignore[attr-defined]
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="scripted", messages=[])
    assert bad.value.param == "messages"  # type: ignore[attr-defined]
    with pytest.raises(openai.APIStatusError) as large:
        client.chat.completions.create(model="scripted",
                                       messages=[{"role": "user", "content": "x" * 5000}])
    assert large.value.status_code == 413
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")


def test_raw_error_cases_have_the_openai_error_object(idle_openai: str) -> None:
    for raw, status in ((b"{not json", 400), (b"[" * 1000 + b"]" * 1000, 400),
                        (b"x" * 5000, 413)):
        got, body = json_request(idle_openai, "POST", "/v1/chat/completions", raw=raw)
        assert got == status and set(body["error"]) == {"message", "type", "param", "code"}
    got, body = json_request(idle_openai, "POST", "/v1/chat/completions", raw=b"{}",
                             headers={"Content-Type": "text/plain"})
    assert got == 415 and body["error"]["code"] == "unsupported_media_type"


def test_a_model_still_loading_is_503_then_served() -> None:
    served = ServedModel(label="loading", model_id="scripted")
    app = create_app(served=served)
    with running_server(app) as base:
        status, body = completions(base)
        assert status == 503 and body["error"]["code"] == "model_loading"
        assert json_request(base, "GET", "/healthz") == (503, {"status": "loading",
                                                              "model": "loading"})
        assert json_request(base, "POST", "/v1/chat", {
            "messages": [{"role": "user", "content": "hi"}]})[0] == 503
        backend = ScriptedBackend(["ready now"])
        served.set_ready(LoadedModel(lambda history, system: None,  # type: ignore[arg-type]
                                     backend, "ready", "scripted"))
        status, body = completions(base)
    assert status == 200 and body["choices"][0]["message"]["content"] == "ready now"


class FailingAfterText(ScriptedBackend):
    """Writes some text, then the turn fails."""

    def stream_turn(self, request: ModelRequest,
                    cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        yield TextEvent("Alex is")
        yield ErrorEvent("backend", "the runtime crashed")
        yield TurnEnd("error")


def test_an_error_before_any_output_has_the_same_status_streamed_or_not() -> None:
    with running_server(scripted_app(ScriptedBackend([]))) as base:
        streamed = json_request(base, "POST", "/v1/chat/completions", {
            "model": "scripted", "messages": [{"role": "user", "content": "hi"}],
            "stream": True})
        whole = completions(base)
    assert streamed == whole
    assert whole[0] == 500 and whole[1]["error"]["code"] == "script_exhausted"


def test_an_error_mid_stream_is_an_error_frame_then_done() -> None:
    with running_server(scripted_app(FailingAfterText([]))) as base:
        conn, response = request(base, "POST", "/v1/chat/completions", {
            "model": "scripted", "messages": [{"role": "user", "content": "hi"}],
            "stream": True})
        raw = response.read().decode()
        conn.close()
    assert response.status == 200
    frames = raw.split("\n\n")[:-1]
    assert frames[-1] == "data: [DONE]"
    assert json.loads(frames[1].removeprefix("data: "))["choices"][0]["delta"] == \
        {"content": "Alex is"}
    error = json.loads(frames[-2].removeprefix("data: "))["error"]
    assert error["code"] == "backend" and error["type"] == "server_error"


def test_shutdown_cancels_generations_in_flight() -> None:
    backend = GatedBackend([ANSWER])
    app = scripted_app(backend)
    with running_server(app) as base:
        conn = post_only(base, {"model": "scripted", "stream": True,
                                "messages": [{"role": "user", "content": "hi"}]})
        assert backend.started.wait(10)
        from toolwire.apps.server.app import cancel_replies

        cancel_replies(app)
        wait_for(lambda: backend.tokens[0].cancelled)
        conn.getresponse().read()
        conn.close()
    assert backend.tokens[0].reason == "shutdown"


@pytest.mark.process
def test_the_documented_client_example_runs(demo_server: str) -> None:
    example = DOCS / "examples" / "openai_client.py"
    env = {**os.environ, "TOOLWIRE_URL": demo_server + "/v1", "TOOLWIRE_SERVE_API_KEY": KEY}
    proc = subprocess.run([sys.executable, str(example)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["Your notes mention Alex here:", NOTES_RESULT]
    assert 'call 0: search_text({"pattern": "Alex"}' in proc.stdout
