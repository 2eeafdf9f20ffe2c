"""The completions backend end to end against a real engine: llama-cpp-python's own
OpenAI-compatible server (``python -m llama_cpp.server``) on 127.0.0.1.

The server runs the tiny random-weight model (``write_tiny_gguf``) carrying the
real Qwen3.5 template. Random weights cannot choose a tool, so every request
carries a GBNF grammar that forces the reply (``grammar_for``); the engine
samples under it and ends its turn when the text is complete. The path is
otherwise the real one: the model file read locally for its template and end
tokens -> the prompt rendered by toolwire -> tokens counted by the engine ->
``/v1/completions`` streaming -> toolwire's parser -> a real Python tool -> its
result rendered into the next prompt -> the answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_cpp.server.app")

import toolwire
from tests.support.cli import run_cli
from tests.support.llama_cpp_server import LlamaCppServer
from tests.support.paths import MISSING_TEMPLATES, SHARED_TEMPLATES
from toolwire import (
    CancelToken,
    Chat,
    DoneEvent,
    ErrorEvent,
    Message,
    ModelRequest,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
)
from toolwire.plugins.completions.backend import CompletionsBackend
from toolwire.testing.scripted import isolated_plugin_manager
from toolwire.testing.tiny_gguf import forcing_grammar as grammar_for
from toolwire.testing.tiny_gguf import write_tiny_gguf

pytestmark = pytest.mark.llama

QWEN = SHARED_TEMPLATES / "Qwen3.5-4B.jinja"
N_CTX = 4096
CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")

ran: list[dict[str, Any]] = []


@toolwire.tool
def get_weather(city: str, days: int = 1) -> str:
    """Weather forecast for a city.

    :param city: the city name
    :param days: how many days ahead
    """
    ran.append({"city": city, "days": days})
    return f"{city}: sunny for {days} days, 21°C"


class Script:
    """Grammar provider: the next forced reply per model turn; keeps each request."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.requests: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> str:
        self.requests.append(request)
        return grammar_for(self.replies.pop(0))


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not QWEN.is_file():
        pytest.skip(MISSING_TEMPLATES)
    return write_tiny_gguf(tmp_path_factory.mktemp("engine") / "qwen-tiny.gguf",
                           QWEN.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def engine(model: Path) -> Iterator[LlamaCppServer]:
    with LlamaCppServer(model, n_ctx=N_CTX) as server:
        yield server


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    ran.clear()
    yield


def backend(engine: LlamaCppServer, model: Path, script: Script | None = None,
            **options: Any) -> CompletionsBackend:
    options.setdefault("model_file", model)
    options.setdefault("n_ctx", N_CTX)
    options.setdefault("temperature", 0.0)
    options.setdefault("plugins", isolated_plugin_manager())
    options.setdefault("environ", {})
    return CompletionsBackend(engine.root, grammar=script, **options)


def test_the_full_loop_runs_a_tool_and_answers(engine: LlamaCppServer, model: Path) -> None:
    script = Script(CALL, "Paris: sunny, 21°C. 🙂")
    completions = backend(engine, model, script)
    assert completions.engine.kind == "llama_cpp_python"
    chat = Chat(completions, [get_weather], system_prompt="Answer briefly.")
    events = list(chat.send("What's the weather in Paris for 3 days?"))
    assert ran == [{"city": "Paris", "days": 3}]
    call = next(e for e in events if isinstance(e, ToolCallEvent))
    assert (call.name, dict(call.arguments)) == ("get_weather", {"city": "Paris", "days": 3})
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert result.content == "Paris: sunny for 3 days, 21°C" and not result.is_error
    answer = "".join(e.text for e in events if isinstance(e, TextEvent))
    assert answer == "Paris: sunny, 21°C. 🙂"
    done = events[-1]
    assert isinstance(done, DoneEvent) and (done.reason, done.turns) == ("stop", 2)
    assert not [e for e in events if isinstance(e, ErrorEvent)]
    second = script.requests[1].messages
    assert [m.role for m in second] == ["system", "user", "assistant", "tool"]
    assert second[-1].content == "Paris: sunny for 3 days, 21°C"


def test_prompt_tokens_are_counted_by_the_engines_tokenizer(engine: LlamaCppServer,
                                                            model: Path) -> None:
    import llama_cpp

    completions = backend(engine, model)
    request = ModelRequest((Message.system("Be brief."), Message.user("Héllo 中文 🙂")),
                           (get_weather,))
    _fitted, prompt = completions.fit_prompt(request)
    vocab = llama_cpp.Llama(str(model), vocab_only=True, verbose=False)
    local = vocab.tokenize(prompt.text.encode("utf-8"), add_bos=True, special=True)
    assert prompt.n_tokens == len(local)
    assert not completions._counter.estimating


def test_a_template_file_renders_the_same_prompt_as_the_model_file(
        engine: LlamaCppServer, model: Path) -> None:
    request = ModelRequest((Message.user("hi"),), (get_weather,))
    from_file = backend(engine, model, template=QWEN, model_file=None)
    from_model = backend(engine, model)
    assert from_file.template_choice(tools=True).key == str(QWEN)
    assert from_model.template_choice(tools=True).key == "tokenizer.chat_template"
    assert from_file.fit_prompt(request)[1].text == from_model.fit_prompt(request)[1].text


def test_a_reply_cut_at_max_tokens_ends_with_length(engine: LlamaCppServer,
                                                    model: Path) -> None:
    completions = backend(engine, model, Script("word " * 40), max_tokens=12)
    items = list(completions.stream_turn(ModelRequest((Message.user("talk"),)), CancelToken()))
    end = items[-1]
    assert isinstance(end, TurnEnd) and end.reason == "length"
    text = "".join(e.text for e in items if isinstance(e, TextEvent))
    assert text and ("word " * 40).startswith(text)


def test_cancel_mid_reply_stops_the_engine_and_the_session_goes_on(
        engine: LlamaCppServer, model: Path) -> None:
    long_reply = "Let me think about this carefully. " * 30 + CALL
    script = Script(long_reply, "Short answer.")
    chat = Chat(backend(engine, model, script, max_tokens=2500), [get_weather])
    cancel = CancelToken()
    seen: list[Any] = []
    started = time.perf_counter()
    for event in chat.send("go", cancel=cancel):
        seen.append(event)
        if isinstance(event, TextEvent):
            cancel.cancel()
    assert time.perf_counter() - started < 30
    done = seen[-1]
    assert isinstance(done, DoneEvent) and done.reason == "cancelled"
    assert ran == []
    # llama-cpp-python's server says so when the client closes the stream mid-reply
    assert engine.wait_for_log("Disconnected from client"), engine.log_text()[-2000:]
    again = list(chat.send("and now?"))
    assert "".join(e.text for e in again if isinstance(e, TextEvent)) == "Short answer."


def test_toolwire_chat_drives_the_engine_from_the_command_line(
        engine: LlamaCppServer, model: Path, tmp_path: Path) -> None:
    run = run_cli("chat", "--provider", "completions", "--base-url", f"{engine.root}/v1",
                  "--model-file", str(model), "--n-ctx", str(N_CTX), "--max-tokens", "8",
                  "--no-tools", "--json", "--message", "hello", cwd=tmp_path)
    events = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    assert events and events[-1]["type"] == "done", run.stderr
    # random weights without a grammar: text until the token limit (exit 1), never a crash
    assert events[-1]["reason"] in ("length", "stop")
    assert run.returncode == (0 if events[-1]["reason"] == "stop" else 1)
    assert not [e for e in events if e["type"] == "error" and e["kind"] != "length"]
    assert "Traceback" not in run.stderr
