"""``toolwire serve``'s model worker: a native crash never takes the server down (issue 31,
item 2).

The worker is a real process running the tiny real llama.cpp model; the crash is real
too: a test-only hook makes the worker call ``abort()`` in the middle of a reply whose
last user message holds a marker. The server is the real app under uvicorn on
127.0.0.1.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.apps.test_server import (
    chat_stream,
    json_request,
    request,
    running_server,
    user,
    wait_for,
)
from toolwire import (
    CancelToken,
    Chat,
    ErrorEvent,
    Message,
    ModelRequest,
    ReasoningRequest,
    SamplingOverrides,
    TextEvent,
    Tool,
    ToolCall,
    TurnEnd,
    default_plugin_manager,
)
from toolwire.apps.server.app import create_app
from toolwire.backends.model_worker import (
    CRASH_KIND,
    CrashBackoff,
    WorkerBackend,
    WorkerSpec,
)
from toolwire.backends.worker_main import ABORT_HOOK_VARIABLE
from toolwire.backends.worker_wire import (
    decode_end,
    decode_request,
    encode_end,
    encode_request,
)
from toolwire.errors import BackendError
from toolwire.templates.default_template import DEFAULT_CHAT_TEMPLATE
from toolwire.testing.tiny_gguf import write_tiny_gguf
from toolwire.vocabulary.backend import ResponseFormat

llama_cpp = pytest.importorskip("llama_cpp")

pytestmark = pytest.mark.llama

CRASH = "CRASH-THE-WORKER-NOW"
OPTIONS: dict[str, Any] = {"n_ctx": 512, "max_tokens": 12, "temperature": 0.0, "seed": 3,
                           "n_threads": 1, "progress": False}
LOOKUP = Tool({"name": "lookup", "description": "Look a person up.",
               "parameters": {"type": "object", "properties": {"name": {"type": "string"}},
                              "required": ["name"]}}, lambda name: name, read_only=True)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("worker") / "tiny.gguf",
                           DEFAULT_CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def worker(model: Path) -> Iterator[WorkerBackend]:
    os.environ[ABORT_HOOK_VARIABLE] = CRASH  # inherited by every worker this module starts
    backend = WorkerBackend(WorkerSpec("llama_cpp", {"model_path": str(model), **OPTIONS},
                                       label="tiny.gguf"), default_plugin_manager()).start()
    try:
        yield backend
    finally:
        backend.close()
        os.environ.pop(ABORT_HOOK_VARIABLE, None)


def _turn(backend: Any, text: str, cancel: CancelToken | None = None) -> list[Any]:
    return list(backend.stream_turn(ModelRequest((Message.user(text),)), cancel or CancelToken()))


def _ready(backend: WorkerBackend) -> None:
    wait_for(lambda: backend.state == "ready", timeout=120)


# -- the wire ---------------------------------------------------------------------------------


def test_a_request_crosses_the_pipe_whole_but_for_the_tools_functions() -> None:
    call = ToolCall("call_1", "lookup", {"name": "alex", "n": [1, 2.5, None]})
    request = ModelRequest(
        (Message.system("be brief"), Message.user("who is alex?"),
         Message.assistant("looking", [call], reasoning="think"),
         Message.tool_result(call, "a colleague", is_error=False)),
        (LOOKUP,), final_turn=True,
        tool_choice={"type": "function", "function": {"name": "lookup"}},
        parallel_tool_calls=False,
        sampling=SamplingOverrides(temperature=0.2, seed=-5, top_k=7),
        response_format=ResponseFormat("json_schema", {"type": "object"}, "answer", True),
        logprobs=3, reasoning=ReasoningRequest(enabled=True, effort="low", budget=64))
    back = decode_request(json.loads(json.dumps(encode_request(request))))
    assert [t.schema for t in back.tools] == [t.schema for t in request.tools]
    assert back.tools[0].read_only
    # every field of the request, including ones added later, crosses the pipe
    for field in attrs.fields(ModelRequest):
        if field.name != "tools":
            assert getattr(back, field.name) == getattr(request, field.name), field.name
            assert getattr(request, field.name) != field.default, f"set {field.name} above"
    with pytest.raises(RuntimeError, match="runs in the server"):
        back.tools[0].function(name="x")
    end = TurnEnd("tool_calls", usage={"prompt_tokens": 3}, timings={"load": 0.5})
    assert decode_end(json.loads(json.dumps(encode_end(end)))) == end
    with pytest.raises(ValueError):
        decode_request({"messages": []})


# -- the backend ------------------------------------------------------------------------------


def test_a_turn_in_the_worker_gives_what_the_same_backend_gives_in_process(
        worker: WorkerBackend, model: Path) -> None:
    from toolwire.plugins.llama_cpp import LlamaCppBackend

    local = LlamaCppBackend(model, **OPTIONS)
    try:
        request = ModelRequest((Message.user("tell me about alex"),), (LOOKUP,))
        here = list(local.stream_turn(request, CancelToken()))
        there = list(worker.stream_turn(request, CancelToken()))
    finally:
        local.close()
    assert [e for e in there if not isinstance(e, TurnEnd)] == [
        e for e in here if not isinstance(e, TurnEnd)]
    assert isinstance(there[-1], TurnEnd) and isinstance(here[-1], TurnEnd)
    assert there[-1].reason == here[-1].reason and there[-1].usage == here[-1].usage
    assert worker.make_call_id(0).startswith("call_")  # qwen_xml's ids, as in-process


def test_the_worker_counts_a_prompts_tokens_as_the_backend_does_in_process(
        worker: WorkerBackend, model: Path) -> None:
    from toolwire.plugins.llama_cpp import LlamaCppBackend

    local = LlamaCppBackend(model, **OPTIONS)
    try:
        request = ModelRequest((Message.system("be brief"), Message.user("who is alex?")),
                               (LOOKUP,))
        here, there = local.prompt_tokens(request), worker.prompt_tokens(request)
        bare = worker.prompt_tokens(ModelRequest(request.messages))
        turn = list(worker.stream_turn(request, CancelToken()))
    finally:
        local.close()
    assert worker.counts_tokens and here == there > bare  # the tool block counts
    assert isinstance(turn[-1], TurnEnd) and turn[-1].usage is not None
    assert turn[-1].usage["prompt_tokens"] == there


def test_a_crash_ends_that_turn_with_a_model_crashed_error_and_the_worker_restarts(
        worker: WorkerBackend) -> None:
    _ready(worker)
    before = worker.restarts
    items = _turn(worker, f"{CRASH} please")
    assert isinstance(items[0], TextEvent)  # what came before the crash is kept
    (error,) = [e for e in items if isinstance(e, ErrorEvent)]
    assert error.kind == CRASH_KIND and "SIGABRT" in error.message
    assert "send the message again" in error.message and "--no-repack" in error.message
    assert items[-1] == TurnEnd("error")
    assert worker.last_exit.startswith("SIGABRT")
    after = _turn(worker, "hello again")  # waits for the new worker
    assert isinstance(after[-1], TurnEnd) and after[-1].reason in ("stop", "length")
    assert worker.restarts == before + 1 and worker.status()["state"] == "ready"


def test_text_that_is_not_valid_utf8_never_costs_the_worker_its_life(
        worker: WorkerBackend) -> None:
    """A Latin-1 file name in a tool's result (issue 40, item 2): the turn runs in the
    same worker; before, the pipe's encode error was taken for a dead worker."""
    _ready(worker)
    before = (worker.restarts, worker.status()["pid"])
    call = ToolCall("call_1", "lookup", {"name": "caf\udce9"})
    request = ModelRequest((Message.user("list"), Message.assistant("", [call]),
                            Message.tool_result(call, "caf\udce9.txt"),
                            Message.user("and \ud800?")), (LOOKUP,))
    items = list(worker.stream_turn(request, CancelToken()))
    assert not [e for e in items if isinstance(e, ErrorEvent)]
    assert items[-1].reason in ("stop", "length", "tool_calls")
    assert (worker.restarts, worker.status()["pid"]) == before


def test_the_crash_backoff_restarts_at_once_then_doubles_and_resets_after_a_turn() -> None:
    backoff = CrashBackoff(first_delay=1.0, max_delay=6.0)
    assert [backoff.crashed() for _ in range(6)] == [0.0, 1.0, 2.0, 4.0, 6.0, 6.0]
    assert 5.0 < backoff.waiting() <= 6.0
    backoff.turn_ended()
    assert backoff.waiting() == 0.0 and backoff.crashed() == 0.0


def _crash_turn(backend: WorkerBackend) -> list[Any]:
    return _turn(backend, f"{CRASH} please")


def test_a_request_that_crashes_the_worker_every_time_is_refused_while_it_backs_off(
        model: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 40, item 5: 93 model loads a minute, and not one log line, before."""
    monkeypatch.setenv(ABORT_HOOK_VARIABLE, CRASH)
    caplog.set_level(logging.WARNING, logger="toolwire.apps.server")
    spec = WorkerSpec("llama_cpp", {"model_path": str(model), **OPTIONS}, label="tiny.gguf")
    backend = WorkerBackend(spec, default_plugin_manager(),
                            backoff=CrashBackoff(first_delay=600.0)).start()
    try:
        _crash_turn(backend)
        _ready(backend)  # one crash: a new worker at once
        _crash_turn(backend)
        started = time.monotonic()
        refused = _crash_turn(backend)  # the second in a row: no worker for ten minutes
        assert time.monotonic() - started < 30  # at once, not after a model load
        (error,) = [e for e in refused if isinstance(e, ErrorEvent)]
        assert error.kind == CRASH_KIND and "crashed 2 times in a row" in error.message
        assert "SIGABRT" in error.message and "started again in" in error.message
        assert backend.restarts == 1 and backend.status()["state"] == "restarting"
    finally:
        backend.close()
    # Closed during its ten-minute back-off, it starts no worker afterwards: the waiting
    # restart ends with the close (it used to start one ten minutes later, in another test).
    wait_for(lambda: not [t for t in threading.enumerate()
                          if t.name == "toolwire-worker-restart"], timeout=30)
    lines = [r.getMessage() for r in caplog.records if "model worker" in r.getMessage()]
    assert len(lines) == 2 and all("SIGABRT" in line for line in lines)
    assert "starts now" in lines[0] and "2 crashes in a row" in lines[1]


def test_a_turn_that_ends_between_two_crashes_restarts_the_count(
        model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ABORT_HOOK_VARIABLE, CRASH)
    spec = WorkerSpec("llama_cpp", {"model_path": str(model), **OPTIONS}, label="tiny.gguf")
    backend = WorkerBackend(spec, default_plugin_manager(),
                            backoff=CrashBackoff(first_delay=600.0)).start()
    try:
        for _ in range(3):
            _crash_turn(backend)
            _ready(backend)
            assert _turn(backend, "hello")[-1].reason in ("stop", "length")
        assert backend.restarts == 3 and backend.backoff.crashes == 0
    finally:
        backend.close()


def test_a_turn_cancelled_or_left_early_ends_in_the_worker_and_the_next_is_clean(
        model: Path) -> None:
    # a reply long enough (hundreds of tokens) that the cancel sent after its first piece lands
    # before it ends, however slow the machine: the module's worker stops at 12 tokens,
    # which a loaded machine's pipe can deliver whole before the cancel arrives
    spec = WorkerSpec("llama_cpp", {"model_path": str(model), **OPTIONS, "max_tokens": 400})
    worker = WorkerBackend(spec, default_plugin_manager()).start()
    try:
        _cancel_then_leave_early(worker)
    finally:
        worker.close()


PROMPT = "tell me about alex"


def _cancel_then_leave_early(worker: WorkerBackend) -> None:
    _ready(worker)
    expected = _turn(worker, PROMPT)
    assert len(expected) > 100  # a long reply to cut (the tiny model writes 350 tokens)
    token = CancelToken()
    cancelled = []
    for item in worker.stream_turn(ModelRequest((Message.user(PROMPT),)), token):
        cancelled.append(item)
        token.cancel("user")
    assert cancelled[-1].reason == "cancelled"
    stream = worker.stream_turn(ModelRequest((Message.user(PROMPT),)), CancelToken())
    next(stream)
    stream.close()  # the caller went away mid-reply
    again = _turn(worker, PROMPT)
    assert again[:-1] == expected[:-1]  # the same reply: nothing of the other turns leaked
    assert (again[-1].reason, again[-1].usage) == (expected[-1].reason, expected[-1].usage)


def test_a_worker_that_cannot_load_its_model_raises_the_workers_error(tmp_path: Path) -> None:
    spec = WorkerSpec("llama_cpp", {"model_path": str(tmp_path / "absent.gguf"), **OPTIONS})
    with pytest.raises(BackendError, match="does not exist") as raised:
        WorkerBackend(spec, default_plugin_manager()).start()
    assert raised.value.kind == "load"


_ORPHAN = """
import sys, time
from toolwire import default_plugin_manager
from toolwire.backends.model_worker import WorkerBackend, WorkerSpec
spec = WorkerSpec("llama_cpp", {"model_path": sys.argv[1], "n_ctx": 256, "max_tokens": 4,
                                "n_threads": 1, "progress": False})
backend = WorkerBackend(spec, default_plugin_manager()).start()
print(backend.status()["pid"], flush=True)
time.sleep(120)
"""


def test_the_worker_never_outlives_the_server(model: Path) -> None:
    server = subprocess.Popen([sys.executable, "-c", _ORPHAN, str(model)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        pid = int(server.stdout.readline())
    finally:
        server.kill()  # no cleanup runs: only the closed pipe tells the worker
        server.wait(10)

    def gone() -> bool:
        try:
            waited, _ = os.waitpid(pid, os.WNOHANG)  # reaped here if it became our child
        except ChildProcessError:
            waited = 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return bool(waited)

    wait_for(gone, timeout=20)


# -- the server -------------------------------------------------------------------------------


def _app(backend: Any) -> Any:
    def make_chat(history: Sequence[Message], system: str | None) -> Chat:
        return Chat(backend, tools=[LOOKUP], history=history, system_prompt=system,
                    max_tool_iters=2, plugins=default_plugin_manager())

    return create_app(make_chat, model="tiny.gguf", model_id="tiny")


def _completion(base: str, text: str, *, stream: bool = False) -> tuple[int, Any, Any]:
    conn, response = request(base, "POST", "/v1/chat/completions", {
        "model": "tiny", "messages": [user(text)], "stream": stream, "max_tokens": 8})
    try:
        if stream:
            return response.status, list(sse_items_or_done(response)), response
        return response.status, json.loads(response.read()), response
    finally:
        conn.close()


def sse_items_or_done(response: http.client.HTTPResponse) -> Iterator[Any]:
    for raw in response.read().decode("utf-8").split("\n\n"):
        data = raw.removeprefix("data: ").strip()
        if data:
            yield data if data == "[DONE]" else json.loads(data)


def test_a_crash_ends_one_reply_and_every_other_client_and_the_dashboard_go_on(
        worker: WorkerBackend) -> None:
    _ready(worker)
    with running_server(_app(worker)) as base:
        results: dict[str, Any] = {}

        def crash() -> None:
            results["crash"] = chat_stream(base, [user(f"{CRASH} now")])[1]

        def other() -> None:
            time.sleep(0.05)  # in line behind the crash
            results["other"] = chat_stream(base, [user("hello"), {"role": "assistant",
                                                                   "content": "hi"},
                                                  user("and now?")])[1]

        threads = [threading.Thread(target=crash), threading.Thread(target=other)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        crashed = results["crash"]
        errors = [i for i in crashed if i["type"] == "error"]
        assert [e["kind"] for e in errors] == [CRASH_KIND]
        assert crashed[-1]["type"] == "done" and crashed[-1]["reason"] == "error"
        other = results["other"]  # the tiny model's 12 tokens end as "length"
        assert other[-1]["type"] == "done" and other[-1]["reason"] in ("stop", "length")
        assert [i["kind"] for i in other if i["type"] == "error"] in ([], ["length"])
        conn, page = request(base, "GET", "/")  # the dashboard
        try:
            assert page.status == 200 and b"<html" in page.read().lower()
        finally:
            conn.close()
        code, health = json_request(base, "GET", "/healthz")
        assert code == 200 and health["worker"]["state"] == "ready"
        assert health["worker"]["last_exit"].startswith("SIGABRT")


def test_a_crash_answers_the_openai_route_with_503_and_the_next_request_succeeds(
        worker: WorkerBackend) -> None:
    _ready(worker)
    with running_server(_app(worker)) as base:
        status, body, response = _completion(base, f"{CRASH} please")
        assert status == 503 and response.getheader("Retry-After") == "1"
        assert body["error"]["code"] == CRASH_KIND and body["error"]["type"] == "server_error"
        assert "SIGABRT" in body["error"]["message"]
        status, chunks, _ = _completion(base, f"{CRASH} again", stream=True)
        assert status == 200 and chunks[-1] == "[DONE]"
        assert chunks[-2]["error"]["code"] == CRASH_KIND
        _ready(worker)  # two crashes in a row: the new worker comes after the back-off
        status, body, _ = _completion(base, "hello")
        assert status == 200 and body["choices"][0]["finish_reason"] in ("stop", "length")


_SERVE = """
import argparse, sys
from toolwire import PluginManager
from toolwire.apps.cli.serve import register as add_serve_command
parser = argparse.ArgumentParser(prog="toolwire")
add_serve_command(parser.add_subparsers())
args = parser.parse_args(sys.argv[1:])
sys.exit(args.run(args, PluginManager()))
"""


def test_toolwire_serve_runs_a_local_model_in_a_worker_that_survives_a_crash(
        model: Path, tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "TOOLWIRE_LOAD_PLUGINS": "", ABORT_HOOK_VARIABLE: CRASH}
    proc = subprocess.Popen([sys.executable, "-c", _SERVE, "serve", "--model", str(model),
                             "--port", str(port), "--max-tokens", "8", "--threads", "1",
                             "--workspace", str(tmp_path), "--no-tools"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"serve exited early: {proc.stderr.read()}")  # type: ignore[union-attr]
            try:
                return json_request(base, "GET", "/healthz")[0] == 200
            except OSError:
                return False

        wait_for(up, timeout=120)
        first_pid = json_request(base, "GET", "/healthz")[1]["worker"]["pid"]
        _, crashed = chat_stream(base, [user(f"{CRASH} now")])
        assert [i["kind"] for i in crashed if i["type"] == "error"] == [CRASH_KIND]
        _, answered = chat_stream(base, [user("hello")])
        assert answered[-1]["type"] == "done" and answered[-1]["reason"] in ("stop", "length")
        health = json_request(base, "GET", "/healthz")[1]
        assert health["worker"]["restarts"] == 1 and health["worker"]["pid"] != first_pid
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
