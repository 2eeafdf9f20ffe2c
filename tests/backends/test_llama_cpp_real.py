"""The llama_cpp backend end to end with real llama.cpp and a real chat template.

A tiny random-weight model (``write_tiny_gguf``) carries the real Qwen3.5
template in its metadata. Its output is forced with a grammar (``grammar_for``)
so every path is exact: metadata -> template -> tokens -> llama.cpp generation
-> streaming parse -> a real Python tool -> the result rendered back -> the next
turn. Nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import io
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_cpp")

import toolwire
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
    NoParserEvent,
    ReasoningEvent,
    TextEvent,
    ToolCallEvent,
    ToolCallStartEvent,
    ToolResultEvent,
    TurnEnd,
)
from toolwire.plugins.llama_cpp import tool_block_cost
from toolwire.plugins.llama_cpp.backend import LlamaCppBackend
from toolwire.testing.scripted import isolated_plugin_manager
from toolwire.testing.tiny_gguf import CHATML_TEMPLATE, TINY_BACKEND_OPTIONS, write_tiny_gguf
from toolwire.testing.tiny_gguf import forcing_grammar as grammar_for

pytestmark = pytest.mark.llama

TEMPLATES = SHARED_TEMPLATES
QWEN = "Qwen3.5-4B.jinja"


@pytest.fixture(scope="module")
def qwen_template() -> str:
    path = TEMPLATES / QWEN
    if not TEMPLATES.is_dir():
        pytest.skip(MISSING_TEMPLATES)
    return path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def qwen_model(tmp_path_factory: pytest.TempPathFactory, qwen_template: str) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("real") / "qwen-tiny.gguf", qwen_template)


class Script:
    """Grammar provider: the next forced reply per model turn; keeps each request."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.requests: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> str:
        self.requests.append(request)
        return grammar_for(self.replies.pop(0))


def backend(path: Path, script: Script | None = None, **options: Any) -> LlamaCppBackend:
    options.setdefault("seed", 7)
    for key, value in TINY_BACKEND_OPTIONS.items():
        options.setdefault(key, value)
    options.setdefault("plugins", isolated_plugin_manager())
    options.setdefault("progress", False)
    return LlamaCppBackend(path, grammar=script, **options)


def call(name: str, **args: str) -> str:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


ran: list[tuple[str, dict[str, Any]]] = []


@toolwire.tool
def get_weather(city: str, days: int = 1) -> str:
    """Weather forecast for a city.

    :param city: the city name
    :param days: how many days ahead
    """
    ran.append(("get_weather", {"city": city, "days": days}))
    return f"{city}: sunny for {days} days, 21°C"


@toolwire.tool
def save_note(title: str, body: str) -> str:
    """Save a note.

    :param title: a short title
    :param body: the note's full text
    """
    ran.append(("save_note", {"title": title, "body": body}))
    return f"saved {title!r} ({len(body)} characters)"


@toolwire.tool
def search(query: str, limit: int = 5) -> str:
    """Search the web.

    :param query: what to look for
    :param limit: how many results
    """
    return "nothing"


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    ran.clear()
    yield


def texts(events: list[Any]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextEvent))


def test_tool_round_trip_through_chat(qwen_model: Path) -> None:
    script = Script(call("get_weather", city="Paris", days="3"), "Paris: sunny, 21°C. 🙂")
    model = backend(qwen_model, script)
    chat = Chat(model, [get_weather], system_prompt="Answer briefly.")
    started = time.perf_counter()
    events = list(chat.send("What's the weather in Paris for 3 days?"))
    elapsed = time.perf_counter() - started
    assert ran == [("get_weather", {"city": "Paris", "days": 3})]
    kinds = [e.type for e in events]
    assert kinds.index("tool_call_start") < kinds.index("tool_call") < kinds.index("tool_result")
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert result.content == "Paris: sunny for 3 days, 21°C" and not result.is_error
    assert texts(events) == "Paris: sunny, 21°C. 🙂"
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "stop" and done.turns == 2
    assert done.usage is not None and done.usage["completion_tokens"] > 0
    # the tool result went back to the model through the real template
    prompt = model.fit_prompt(script.requests[1])[1].text
    assert "<tool_response>\nParis: sunny for 3 days, 21°C\n</tool_response>" in prompt
    assert "<function=get_weather>\n<parameter=city>\nParis\n</parameter>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert elapsed < 5


def test_several_calls_in_one_turn(qwen_model: Path) -> None:
    reply = call("get_weather", city="Oslo") + "\n" + call("get_weather", city="Lima", days="2")
    model = backend(qwen_model, Script(reply, "Both sunny."))
    events = list(Chat(model, [get_weather]).send("Oslo and Lima?"))
    assert ran == [("get_weather", {"city": "Oslo", "days": 1}),
                   ("get_weather", {"city": "Lima", "days": 2})]
    assert [e.index for e in events if isinstance(e, ToolCallEvent)] == [0, 1]
    assert texts(events) == "Both sunny."


def test_multiline_string_argument_arrives_verbatim(qwen_model: Path) -> None:
    body = ("Shopping:\n  - crème fraîche\n  - 中文 tofu\n\n\tindented <b>tag</b>\n"
            "emoji 🙂 and a \"quote\" \\ backslash  ")
    model = backend(qwen_model, Script(call("save_note", title="list", body=body), "Saved."))
    list(Chat(model, [save_note]).send("save my list"))
    assert ran == [("save_note", {"title": "list", "body": body})]


def test_max_tokens_keeps_the_partial_reply(qwen_model: Path) -> None:
    model = backend(qwen_model, Script("A long answer that will not fit"), max_tokens=10)
    chat = Chat(model)
    events = list(chat.send("talk"))
    assert texts(events) == "A long ans"
    assert [e.kind for e in events if isinstance(e, ErrorEvent)] == ["length"]
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "length"
    assert chat.history[-1].content == "A long ans"


def test_cancel_before_the_tool_runs(qwen_model: Path) -> None:
    model = backend(qwen_model, Script(call("get_weather", city="Rome"), "ok"))
    chat = Chat(model, [get_weather])
    cancel = CancelToken()
    events = []
    for event in chat.send("Rome?", cancel=cancel):
        events.append(event)
        if isinstance(event, ToolCallStartEvent):
            cancel.cancel()
    assert ran == []
    assert isinstance(events[-1], DoneEvent) and events[-1].reason == "cancelled"
    assert not any(isinstance(e, ToolCallEvent | ToolResultEvent) for e in events)
    # the model is free again and the chat goes on
    model.grammar = Script("Fine.")
    assert chat.ask("and now?") == "Fine."


def test_reasoning_block_with_thinking_enabled(qwen_model: Path) -> None:
    model = backend(qwen_model, Script("Let me think.\n</think>\n\nThe answer."),
                    enable_thinking=True)
    events = list(Chat(model).send("question"))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningEvent))
    assert reasoning == "Let me think."
    assert texts(events) == "The answer."


def test_gguf_without_chat_template_uses_the_default(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "bare.gguf", None)
    model = backend(path, Script(call("get_weather", city="Kyiv"), "Sunny.", "Hi."))
    chat = Chat(model, [get_weather])
    events = list(chat.send("Kyiv?"))
    notes = [e for e in events if isinstance(e, DiagnosticEvent)]
    assert [n.code for n in notes] == ["default_chat_template"]
    assert "no chat template" in notes[0].message
    assert ran == [("get_weather", {"city": "Kyiv", "days": 1})]
    assert texts(events) == "Sunny."
    assert model.template_choice(tools=True).key == "default"
    later = list(chat.send("hello"))  # said once only
    assert not any(isinstance(e, DiagnosticEvent) for e in later)


def test_an_unclaimed_template_given_by_the_user_chats_without_a_parser(
        tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "plain.gguf", CHATML_TEMPLATE)
    model = backend(path, Script('<tool_call>{"name": "x"}</tool_call>'),
                    chat_template=CHATML_TEMPLATE)
    events = list(Chat(model, [get_weather]).send("hi"))
    assert [e.type for e in events if isinstance(e, NoParserEvent)] == ["no_parser"]
    assert texts(events) == '<tool_call>{"name": "x"}</tool_call>'
    assert ran == []


def test_a_file_template_no_parser_reads_uses_the_json_tools_template_for_tool_turns(
        tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "plain.gguf", CHATML_TEMPLATE)
    json_call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Kyiv"}}\n</tool_call>'
    model = backend(path, Script(json_call, "Sunny.", "Hi."))
    chat = Chat(model, [get_weather])
    events = list(chat.send("Kyiv?"))
    notes = [e for e in events if isinstance(e, DiagnosticEvent)]
    assert [n.code for n in notes] == ["default_tool_template"]
    assert "plain.gguf's chat template (tokenizer.chat_template) cannot carry tool calls" in \
        notes[0].message
    assert not any(isinstance(e, NoParserEvent) for e in events)
    assert ran == [("get_weather", {"city": "Kyiv", "days": 1})]
    assert texts(events) == "Sunny."
    assert model.template_choice(tools=True).key == "toolwire json tools"
    assert model.template_choice(tools=True).parser.name == "hermes_json"  # type: ignore[union-attr]
    assert model.template_choice(tools=False).source == CHATML_TEMPLATE  # its own, untouched
    assert not any(isinstance(e, DiagnosticEvent) for e in chat.send("hello"))  # said once
    forced = backend(path, family="qwen_xml")  # a family the user chose keeps the template
    assert forced.template_choice(tools=True).source == CHATML_TEMPLATE


def test_template_that_raises_is_an_error_event_and_the_session_goes_on(
        tmp_path: Path) -> None:
    template = ("{% for m in messages %}{% if 'boom' in m.content %}"
                "{{ raise_exception('this template refuses boom') }}{% endif %}{% endfor %}"
                + CHATML_TEMPLATE)
    path = write_tiny_gguf(tmp_path / "raises.gguf", template)
    model = backend(path, Script("Still here."))
    chat = Chat(model)
    events = list(chat.send("boom"))
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert [e.kind for e in errors] == ["template"]
    assert "this template refuses boom" in errors[0].message
    assert isinstance(events[-1], DoneEvent) and events[-1].reason == "error"
    chat_ok = Chat(model)
    assert chat_ok.ask("hello") == "Still here."


def test_bad_grammar_is_an_error_event_and_the_model_stays_usable(qwen_model: Path) -> None:
    model = backend(qwen_model)
    model.grammar = 'root ::= "unterminated'
    chat = Chat(model)
    events = list(chat.send("hi"))
    assert [e.kind for e in events if isinstance(e, ErrorEvent)] == ["grammar"]
    model.grammar = grammar_for("ok")
    assert chat.ask("again") == "ok"


def test_prompt_gets_exactly_one_bos_from_the_real_tokenizer(tmp_path: Path) -> None:
    writes_bos = write_tiny_gguf(tmp_path / "bos.gguf", "{{ bos_token }}" + CHATML_TEMPLATE,
                                 add_bos=True)
    silent = write_tiny_gguf(tmp_path / "nobos.gguf", CHATML_TEMPLATE, add_bos=True)
    messages = [toolwire.Message.user("hi")]
    for path in (writes_bos, silent):
        model = backend(path)
        tokens = model.tokenize(model.render(messages, None))
        bos = model.llama.token_bos()
        assert tokens[0] == bos and tokens[1] != bos
    model = backend(silent)
    assert len(model.tokenize("<|im_start|>")) == 2  # BOS + the markup as one special token


def test_default_n_ctx_is_the_trained_length_capped_at_8192(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "long.gguf", context_length=32768)
    model = backend(path)
    assert model.n_ctx == 8192 and model.llama.n_ctx() == 8192


def test_missing_model_file_is_a_clear_error_at_create(tmp_path: Path) -> None:
    spec = isolated_plugin_manager().backend("llama_cpp")
    with pytest.raises(BackendError, match="does not exist") as info:
        spec.create(model_path=str(tmp_path / "nope.gguf"))
    assert info.value.kind == "not_found"


def test_context_overflow_error_event(qwen_model: Path) -> None:
    model = backend(qwen_model, Script("never"), n_ctx=512, max_tokens=128)
    events = list(Chat(model, [get_weather, save_note, search]).send("hi"))
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert [e.kind for e in errors] == ["context"]
    assert "tokens over" in errors[0].message and "only 384 fit" in errors[0].message
    assert isinstance(events[-1], DoneEvent) and events[-1].reason == "error"


def test_asend_with_the_real_model(qwen_model: Path) -> None:
    model = backend(qwen_model, Script(call("get_weather", city="Cairo"), "Hot."))
    chat = Chat(model, [get_weather])

    async def collect() -> list[Any]:
        return [e async for e in chat.asend("Cairo?")]

    events = asyncio.run(collect())
    assert ran == [("get_weather", {"city": "Cairo", "days": 1})]
    assert texts(events) == "Hot."


def test_tool_block_cost_on_the_real_template(qwen_model: Path) -> None:
    report = tool_block_cost(qwen_model, [get_weather, save_note, search])
    assert report["template"] == "tokenizer.chat_template" and report["tools"] == 3
    assert report["with_tools"] - report["without_tools"] == report["tool_block"] > 500
    model = backend(qwen_model)
    assert tool_block_cost(model, [get_weather])["tool_block"] < report["tool_block"]


def test_timings_are_reported(qwen_model: Path) -> None:
    model = backend(qwen_model, Script("Hello!", "Again!"))
    first = list(model.stream_turn(ModelRequest((toolwire.Message.user("hi"),)), CancelToken()))
    end = first[-1]
    assert isinstance(end, TurnEnd) and end.timings is not None
    assert {"load", "render", "prompt", "generation"} <= set(end.timings)
    second = list(model.stream_turn(ModelRequest((toolwire.Message.user("hi"),)),
                                    CancelToken()))
    assert isinstance(second[-1], TurnEnd) and "load" not in (second[-1].timings or {})





def test_load_shows_progress_on_a_terminal_and_llama_cpp_stays_quiet(
        qwen_model: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    # an n_ctx above the trained 4096 makes llama.cpp warn; not verbose: not shown
    backend(qwen_model, n_ctx=8192, progress=True)
    assert re.fullmatch(r"loading toolwire-tiny \(\d+\.\d MB\)\.\.\. done in \d+\.\d s\n",
                        terminal.getvalue())
    assert capfd.readouterr().err == ""
    quiet = Terminal()
    monkeypatch.setattr(sys, "stderr", quiet)
    backend(qwen_model)
    assert quiet.getvalue() == ""


def test_a_turn_cancelled_while_its_prompt_is_evaluated_stops_within_one_batch(
        tmp_path: Path) -> None:
    """Issue 40, item 4: ``Llama.generate`` evaluated the whole prompt before reading the
    cancel (a 3,400-token prompt held the model up to a minute after its client left).
    The prompt is now evaluated a batch at a time: counted here in llama.cpp's own
    decode calls, with batches of 8 tokens."""
    path = write_tiny_gguf(tmp_path / "tiny.gguf", CHATML_TEMPLATE, context_length=8192)
    backend = LlamaCppBackend(path, n_ctx=8192, max_tokens=8, **TINY_BACKEND_OPTIONS)
    try:
        model = backend._runtime.model
        model.n_batch = 8
        cancel = CancelToken()
        decodes: list[int] = []
        decode = model._ctx.decode

        def counted(batch: Any) -> Any:
            decodes.append(1)
            if len(decodes) == 1:
                cancel.cancel("the client left")  # while the prompt is evaluated
            return decode(batch)

        model._ctx.decode = counted
        request = ModelRequest((Message.user("hello there " * 300),))
        items = list(backend.stream_turn(request, cancel))
        assert isinstance(items[-1], TurnEnd) and items[-1].reason == "cancelled"
        assert items[-1].usage["prompt_tokens"] > 3000  # hundreds of batches of 8
        assert len(decodes) <= 2
        assert not any(isinstance(e, TextEvent) for e in items)
        model._ctx.decode = decode
        again = list(backend.stream_turn(request, CancelToken()))  # the cache is sound
        assert again[-1].reason in ("stop", "length")
    finally:
        backend.close()
