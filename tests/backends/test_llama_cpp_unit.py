"""Unit tests of the llama_cpp backend with a stand-in model (no llama.cpp needed).

The stand-in has the surface the backend uses on a ``llama_cpp.Llama``:
``tokenize``, ``detokenize``, ``generate`` (recording its keyword arguments)
plus ``is_eog``/``add_bos_token``. Its vocabulary is bytes: one token per byte
of the prompt, and scripted replies given as byte chunks, one token each, so a
multi-byte character can be split across tokens exactly as in a real model.
The metadata comes from a real GGUF file written by ``write_tiny_gguf``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import toolwire
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
    TextEvent,
    ToolCall,
    ToolCallEvent,
    ToolCallStartEvent,
    ToolResultEvent,
    TurnEnd,
)
from toolwire.backends.context_fit import prune_history, removal_order
from toolwire.grammar.gbnf import literal as grammar_literal
from toolwire.plugins.llama_cpp.backend import LlamaCppBackend
from toolwire.templates.default_template import DEFAULT_CHAT_TEMPLATE
from toolwire.testing.scripted import isolated_plugin_manager
from toolwire.testing.tiny_gguf import CHATML_TEMPLATE, write_tiny_gguf
from toolwire.testing.tiny_gguf import forcing_grammar as grammar_for

Reply = str | Sequence[bytes]

EOS = 0
BOS = 1
_BYTE0 = 2  # token of byte b is _BYTE0 + b


class StandInLlama:
    """A byte-level fake of ``llama_cpp.Llama`` that replays scripted replies."""

    def __init__(self, replies: Sequence[Reply], *, n_ctx: int = 4096,
                 add_bos: bool = False) -> None:
        self.replies = list(replies)
        self._n_ctx = n_ctx
        self._add_bos = add_bos
        self._chunks: dict[int, bytes] = {}
        self.prompts: list[str] = []
        self.prompt_tokens: list[list[int]] = []
        self.generate_kwargs: list[dict[str, Any]] = []
        self.consumed: list[int] = []  # tokens the backend pulled, per turn
        self.closed = 0

    # -- the Llama surface ------------------------------------------------
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        assert special is True, "prompt markup must be tokenized as special tokens"
        bos = b"<s>"
        tokens: list[int] = []
        if add_bos:
            tokens.append(BOS)
        i = 0
        while i < len(text):
            if text.startswith(bos, i):
                tokens.append(BOS)
                i += len(bos)
                continue
            tokens.append(_BYTE0 + text[i])
            i += 1
        return tokens

    def detokenize(self, tokens: list[int], prev_tokens: Any = None,
                   special: bool = False) -> bytes:
        out = b""
        for token in tokens:
            if token in self._chunks:
                out += self._chunks[token]
            elif token >= _BYTE0:
                out += bytes([token - _BYTE0])
        return out

    def generate(self, tokens: Sequence[int], **kwargs: Any) -> Iterator[int]:
        self.generate_kwargs.append(kwargs)
        self.prompt_tokens.append(list(tokens))
        self.prompts.append(self.detokenize(list(tokens)).decode())
        reply = self.replies.pop(0)
        chunks = [reply.encode()[i:i + 1] for i in range(len(reply.encode()))] \
            if isinstance(reply, str) else list(reply)
        ids = []
        for chunk in chunks:
            token = 1000 + len(self._chunks)
            self._chunks[token] = chunk
            ids.append(token)
        return self._stream(ids)

    def _stream(self, ids: list[int]) -> Iterator[int]:
        count = 0
        try:
            for token in ids:
                count += 1
                yield token
            count += 1
            yield EOS
            # a real generator never stops by itself: what follows must not be read
            while True:
                count += 1
                yield self.tokenize(b"X", add_bos=False, special=True)[0]
        finally:
            self.consumed.append(count)
            self.closed += 1

    def token_bos(self) -> int:
        return BOS

    def n_ctx(self) -> int:
        return self._n_ctx

    def add_bos_token(self) -> bool:
        return self._add_bos

    def is_eog(self, token: int) -> bool:
        return token == EOS


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GGUF whose template is the default ChatML + Qwen-XML one (a parser claims it)."""
    return write_tiny_gguf(tmp_path_factory.mktemp("m") / "qwenish.gguf", DEFAULT_CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def plain_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GGUF with a plain ChatML template that renders no tools (no parser claims it)."""
    return write_tiny_gguf(tmp_path_factory.mktemp("m") / "plain.gguf", CHATML_TEMPLATE)


def backend_for(path: Path, replies: Sequence[Reply], **options: Any,
                ) -> tuple[LlamaCppBackend, StandInLlama]:
    fake = StandInLlama(replies, n_ctx=options.pop("fake_n_ctx", 4096),
                        add_bos=options.pop("add_bos", False))
    options.setdefault("plugins", isolated_plugin_manager())
    return LlamaCppBackend(path, model=fake, progress=False, **options), fake


def call_markup(name: str, **args: str) -> str:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


calls_made: list[tuple[str, dict[str, Any]]] = []


@toolwire.tool
def get_weather(city: str, days: int = 1) -> str:
    """Weather forecast for a city.

    :param city: the city name
    :param days: how many days ahead
    """
    calls_made.append(("get_weather", {"city": city, "days": days}))
    return f"sunny in {city} for {days} days"


@toolwire.tool
def write_file(path: str, content: str) -> str:
    """Write a text file.

    :param path: where
    :param content: the full text
    """
    calls_made.append(("write_file", {"path": path, "content": content}))
    return f"wrote {len(content)} characters"


@toolwire.tool
def configure(enabled: bool, ratio: float, tags: list[str], limits: dict[str, int]) -> str:
    """Set options.

    :param enabled: on or off
    :param ratio: a fraction
    :param tags: labels
    :param limits: named limits
    """
    calls_made.append(("configure", {"enabled": enabled, "ratio": ratio, "tags": tags,
                                     "limits": limits}))
    return "ok"


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    calls_made.clear()


def run(chat: Chat, message: str, cancel: CancelToken | None = None) -> list[Any]:
    return list(chat.send(message, cancel=cancel))


def turn(backend: LlamaCppBackend, request: ModelRequest,
         cancel: CancelToken | None = None) -> list[Any]:
    return list(backend.stream_turn(request, cancel or CancelToken()))


# -- the tool loop -------------------------------------------------------------


def test_several_calls_in_one_turn_run_in_order_and_return_to_the_model(
        model_file: Path) -> None:
    reply = (call_markup("get_weather", city="Paris", days="2") + "\n"
             + call_markup("get_weather", city="Oslo"))
    backend, fake = backend_for(model_file, [reply, "Paris is sunny, Oslo too."])
    events = run(Chat(backend, [get_weather]), "Weather in Paris and Oslo?")
    assert calls_made == [("get_weather", {"city": "Paris", "days": 2}),
                          ("get_weather", {"city": "Oslo", "days": 1})]
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert [r.content for r in results] == ["sunny in Paris for 2 days", "sunny in Oslo for 1 days"]
    second_prompt = fake.prompts[1]
    assert "<tool_response>\nsunny in Paris for 2 days\n</tool_response>" in second_prompt
    assert "<tool_response>\nsunny in Oslo for 1 days\n</tool_response>" in second_prompt
    assert second_prompt.count("<function=get_weather>") == 2  # the calls are replayed
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "stop" and done.turns == 2
    assert "".join(e.text for e in events if isinstance(e, TextEvent)) == \
        "Paris is sunny, Oslo too."


def test_multiline_string_arguments_arrive_verbatim(model_file: Path) -> None:
    content = ("def f(x):\n    if x < 3:\n        return '<tag>'\n\n\n    return x  \n"
               "# </parameter> inside a comment\n\tend")
    reply = call_markup("write_file", path="a.py", content=content)
    backend, fake = backend_for(model_file, [reply, "Done."])
    run(Chat(backend, [write_file]), "write it")
    assert calls_made == [("write_file", {"path": "a.py", "content": content})]
    # replayed to the model exactly as written
    assert f"<parameter=content>\n{content}\n</parameter>" in fake.prompts[1]


def test_values_are_typed_by_the_schema(model_file: Path) -> None:
    reply = call_markup("configure", enabled="true", ratio="0.25", tags='["a", "b"]',
                        limits='{"n": 3}')
    backend, _ = backend_for(model_file, [reply, "ok"])
    run(Chat(backend, [configure]), "configure")
    assert calls_made == [("configure", {"enabled": True, "ratio": 0.25, "tags": ["a", "b"],
                                         "limits": {"n": 3}})]


def test_no_stop_strings_the_model_ends_its_turn_with_eog(model_file: Path) -> None:
    backend, fake = backend_for(model_file, ["Hello there."], temperature=0.3, top_p=0.9)
    events = turn(backend, ModelRequest((Message.user("hi"),)))
    kwargs = fake.generate_kwargs[0]
    assert "stop" not in kwargs and "stopping_criteria" not in kwargs
    assert kwargs["temp"] == 0.3 and kwargs["top_p"] == 0.9 and kwargs["grammar"] is None
    # reply bytes + the EOS token, and nothing after it was read
    assert fake.consumed == [len(b"Hello there.") + 1] and fake.closed == 1
    assert "".join(e.text for e in events if isinstance(e, TextEvent)) == "Hello there."
    end = events[-1]
    assert isinstance(end, TurnEnd) and end.reason == "stop"
    assert end.usage == {"prompt_tokens": len(fake.prompt_tokens[0]),
                         "completion_tokens": len(b"Hello there.")}
    assert end.timings is not None and {"prompt", "generation"} <= set(end.timings)


def test_tools_are_rendered_by_the_template_and_absent_without_tools(model_file: Path) -> None:
    backend, fake = backend_for(model_file, ["a", "b"], enable_thinking=True)
    turn(backend, ModelRequest((Message.user("hi"),), (get_weather,)))
    turn(backend, ModelRequest((Message.user("hi"),), (), final_turn=True))
    with_tools, without = fake.prompts
    schema = json.dumps(get_weather.openai_schema(), ensure_ascii=False)
    assert schema in with_tools
    assert "<tools>" not in without and "get_weather" not in without
    assert with_tools.endswith("<|im_start|>assistant\n")


def test_flat_json_inside_tool_call_tags_is_not_a_call(model_file: Path) -> None:
    reply = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    backend, _ = backend_for(model_file, [reply])
    events = run(Chat(backend, [get_weather]), "weather?")
    assert calls_made == []
    assert not any(isinstance(e, ToolCallEvent) for e in events)
    codes = [e.code for e in events if isinstance(e, DiagnosticEvent)]
    assert "json_in_tool_call" in codes
    assert '"name": "get_weather"' in "".join(e.text for e in events if isinstance(e, TextEvent))


def test_cancel_while_a_call_streams_closes_generation_and_runs_no_tool(
        model_file: Path) -> None:
    reply = call_markup("get_weather", city="Paris") + "\n" + call_markup("get_weather",
                                                                          city="Rome")
    backend, fake = backend_for(model_file, [reply, "never"])
    chat = Chat(backend, [get_weather])
    cancel = CancelToken()
    events = []
    for event in chat.send("weather?", cancel=cancel):
        events.append(event)
        if isinstance(event, ToolCallStartEvent):
            cancel.cancel()
    assert calls_made == []
    assert fake.closed == 1 and len(fake.replies) == 1  # one generation, closed early
    assert fake.consumed[0] < len(reply.encode())
    assert isinstance(events[-1], DoneEvent) and events[-1].reason == "cancelled"
    assert not any(isinstance(e, ToolResultEvent | ToolCallEvent) for e in events)
    # the chat stays usable
    fake.replies.insert(0, "fine")
    assert chat.ask("again") == "fine"


def test_cancel_before_generation_starts(model_file: Path) -> None:
    backend, fake = backend_for(model_file, ["never"])
    cancel = CancelToken()
    cancel.cancel()
    events = turn(backend, ModelRequest((Message.user("hi"),)), cancel)
    assert isinstance(events[-1], TurnEnd) and events[-1].reason == "cancelled"
    assert fake.generate_kwargs == []


def test_utf8_split_across_tokens_is_reassembled(model_file: Path) -> None:
    chunks = [b"caf", b"\xc3", b"\xa9 ", b"\xf0\x9f", b"\x99", b"\x82 ", b"\xe4\xb8", b"\xad!"]
    backend, _ = backend_for(model_file, [chunks])
    events = turn(backend, ModelRequest((Message.user("hi"),)))
    texts = [e.text for e in events if isinstance(e, TextEvent)]
    assert "".join(texts) == "café 🙂 中!"
    assert all("\ufffd" not in t for t in texts)


def test_utf8_split_inside_a_string_argument(model_file: Path) -> None:
    markup = call_markup("get_weather", city="Zürich 東京").encode()
    chunks = [markup[i:i + 1] for i in range(len(markup))]  # every byte its own token
    backend, _ = backend_for(model_file, [chunks, "ok"])
    run(Chat(backend, [get_weather]), "weather?")
    assert calls_made == [("get_weather", {"city": "Zürich 東京", "days": 1})]


def test_max_tokens_cut_keeps_the_partial_reply_and_drops_a_split_character(
        model_file: Path) -> None:
    backend, _ = backend_for(model_file, [[b"ab", b"c", b"\xc3"]], max_tokens=3)
    chat = Chat(backend)
    events = run(chat, "hi")
    assert "".join(e.text for e in events if isinstance(e, TextEvent)) == "abc"
    assert [e.kind for e in events if isinstance(e, ErrorEvent)] == ["length"]
    assert isinstance(events[-1], DoneEvent) and events[-1].reason == "length"
    assert chat.history[-1].content == "abc"


def test_turn_end_reason_is_tool_calls_when_the_model_called(model_file: Path) -> None:
    backend, _ = backend_for(model_file, [call_markup("get_weather", city="X")])
    events = turn(backend, ModelRequest((Message.user("hi"),), (get_weather,)))
    assert isinstance(events[-1], TurnEnd) and events[-1].reason == "tool_calls"


def test_one_bos_even_when_the_template_writes_it(tmp_path: Path) -> None:
    template = "{{ bos_token }}" + CHATML_TEMPLATE
    path = write_tiny_gguf(tmp_path / "bos.gguf", template)
    backend, fake = backend_for(path, ["a"], add_bos=True)
    turn(backend, ModelRequest((Message.user("hi"),)))
    assert fake.prompt_tokens[0][0] == BOS and fake.prompt_tokens[0].count(BOS) == 1
    backend, fake = backend_for(write_tiny_gguf(tmp_path / "nobos.gguf"), ["a"], add_bos=True)
    turn(backend, ModelRequest((Message.user("hi"),)))
    assert fake.prompt_tokens[0][0] == BOS and fake.prompt_tokens[0].count(BOS) == 1


def test_grammar_callable_sees_the_request_and_reaches_generate(model_file: Path) -> None:
    seen: list[ModelRequest] = []

    def grammar(request: ModelRequest) -> str:
        seen.append(request)
        return grammar_for("hi")

    backend, fake = backend_for(model_file, ["hi"], grammar=grammar)
    request = ModelRequest((Message.user("x"),))
    turn(backend, request)
    assert seen == [request]
    assert fake.generate_kwargs[0]["grammar"] == 'root ::= "hi"\n'


def test_grammar_literal_escapes() -> None:
    assert grammar_literal('a"b\\c\nd\te\x01é') == '"a\\"b\\\\c\\nd\\te\\x01é"'
    assert grammar_for("") == 'root ::= ""\n'


def test_an_unclaimed_template_given_by_the_user_streams_text_and_says_no_parser_once(
        plain_file: Path) -> None:
    # the file's own unclaimed template would give way to the default one for tool
    # turns; the user's explicit template is kept
    backend, _ = backend_for(plain_file, ["<tool_call>x</tool_call> hi", "again"],
                             chat_template=CHATML_TEMPLATE)
    first = turn(backend, ModelRequest((Message.user("hi"),), (get_weather,)))
    second = turn(backend, ModelRequest((Message.user("hi"),), (get_weather,)))
    notices = [e for e in first if isinstance(e, NoParserEvent)]
    assert len(notices) == 1 and "no parser plugin claims" in notices[0].message
    assert notices[0].seen_markers == ()  # plain ChatML shows no known call markers
    assert "".join(e.text for e in first if isinstance(e, TextEvent)) == \
        "<tool_call>x</tool_call> hi"
    assert not any(isinstance(e, NoParserEvent) for e in second)


def test_tool_use_template_is_preferred_when_tools_are_offered(tmp_path: Path) -> None:
    tool_use = "TOOL-USE {{ tools | length }} " + DEFAULT_CHAT_TEMPLATE  # qwen_xml claims it
    path = write_tiny_gguf(tmp_path / "named.gguf", "DEFAULT " + CHATML_TEMPLATE,
                           named_chat_templates={"tool_use": tool_use})
    backend, fake = backend_for(path, ["a", "b"])
    turn(backend, ModelRequest((Message.user("hi"),), (get_weather,)))
    turn(backend, ModelRequest((Message.user("hi"),)))
    assert fake.prompts[0].startswith("TOOL-USE 1<|im_start|>system")
    assert fake.prompts[1].startswith("DEFAULT ")
    assert backend.template_choice(tools=True).key == "tokenizer.chat_template.tool_use"


def test_chat_template_option_overrides_the_file(model_file: Path) -> None:
    backend, fake = backend_for(model_file, ["a"], chat_template="OVERRIDE " + CHATML_TEMPLATE)
    turn(backend, ModelRequest((Message.user("hi"),)))
    assert fake.prompts[0].startswith("OVERRIDE <|im_start|>user\nhi")
    assert backend.template_choice(tools=True).key == "override"


def test_a_claim_the_template_cannot_verify_is_said_once(model_file: Path) -> None:
    # Qwen XML instructions, but assistant calls are rendered as nothing: the
    # qwen_xml claim stands on its score alone, and the first turn says so
    instructions = ("{% if tools %}<|im_start|>system\nCall tools as <tool_call>\n"
                    "<function=NAME>\n<parameter=P>\nV\n</parameter>\n</function>\n"
                    "</tool_call><|im_end|>\n{% endif %}")
    backend, _ = backend_for(model_file, ["a", "b"], chat_template=instructions + CHATML_TEMPLATE)
    request = ModelRequest((Message.user("hi"),), (get_weather,))
    first, second = turn(backend, request), turn(backend, request)
    notes = [e for e in first if isinstance(e, DiagnosticEvent) and e.code == "parser_unverified"]
    assert len(notes) == 1 and "'qwen_xml'" in notes[0].message
    assert "could not be verified" in notes[0].message
    assert not [e for e in second if isinstance(e, DiagnosticEvent)]
    assert backend.template_choice(tools=True).parser.name == "qwen_xml"  # type: ignore[union-attr]


def test_a_verified_claim_says_nothing(model_file: Path) -> None:
    request = ModelRequest((Message.user("hi"),), (get_weather,))
    backend, _ = backend_for(model_file, ["a"])
    assert not [e for e in turn(backend, request) if isinstance(e, DiagnosticEvent)]


def test_a_file_that_is_not_gguf_fails_at_create(tmp_path: Path) -> None:
    path = tmp_path / "junk.gguf"
    path.write_bytes(b"not a gguf file at all")
    with pytest.raises(toolwire.GGUFError):
        backend_for(path, [])


def test_forcing_an_unknown_family_fails_at_create(model_file: Path) -> None:
    with pytest.raises(toolwire.ParserNotFoundError):
        backend_for(model_file, [], family="no_such_family")


# -- context budget --------------------------------------------------------------


def test_context_overflow_is_an_error_event_saying_by_how_much(model_file: Path) -> None:
    backend, fake = backend_for(model_file, ["never"], n_ctx=300, max_tokens=100)
    events = turn(backend, ModelRequest((Message.system("s"), Message.user("x" * 400))))
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert [e.kind for e in errors] == ["context"]
    over = len(fake.tokenize(backend.render([Message.system("s"), Message.user("x" * 400)],
                                            None).encode(), False, True)) - 200
    assert f"{over} tokens over" in errors[0].message
    assert isinstance(events[-1], TurnEnd) and events[-1].reason == "error"
    assert fake.generate_kwargs == []


def test_old_tool_turns_are_pruned_whole_to_fit(model_file: Path) -> None:
    call = ToolCall("c1", "get_weather", {"city": "Paris"})
    history = (
        Message.system("sys"),
        Message.user("first question"),
        Message.assistant("", (call,)),
        Message.tool_result(call, "R" * 300),
        Message.assistant("first answer"),
        Message.user("second question"),
    )
    backend, fake = backend_for(model_file, ["ok"], n_ctx=400, max_tokens=100)
    events = turn(backend, ModelRequest(history))
    notes = [e for e in events if isinstance(e, DiagnosticEvent)]
    assert [n.code for n in notes] == ["context_pruned"]
    prompt = fake.prompts[0]
    assert "RRRR" not in prompt and "<function=get_weather>" not in prompt
    assert "first question" in prompt and "first answer" in prompt  # only the tool turn went
    assert "sys" in prompt and "second question" in prompt


def _count(messages: Sequence[Message]) -> int:
    return sum(len(m.content) + 10 * len(m.tool_calls) + 1 for m in messages)


def _conversation() -> list[Message]:
    c1 = ToolCall("1", "t", {})
    c2 = ToolCall("2", "t", {})
    c3 = ToolCall("3", "t", {})
    c4 = ToolCall("4", "t", {})
    return [
        Message.system("S" * 10),                     # 0
        Message.user("q1"),                           # 1
        Message.assistant("", (c1, c2)),              # 2
        Message.tool_result(c1, "a" * 100),           # 3
        Message.tool_result(c2, "b" * 100),           # 4
        Message.assistant("answer1"),                 # 5
        Message.user("q2"),                           # 6
        Message.assistant("answer2"),                 # 7
        Message.user("q3"),                           # 8
        Message.assistant("", (c3,)),                 # 9
        Message.tool_result(c3, "c" * 100),           # 10
        Message.assistant("", (c4,)),                 # 11
        Message.tool_result(c4, "d" * 100),           # 12
    ]


def test_removal_order_tool_turns_then_exchanges_then_current_tool_turns() -> None:
    assert removal_order(_conversation()) == [(2, 3, 4), (1, 5), (6, 7), (9, 10)]


def test_pruning_never_separates_a_call_from_its_result() -> None:
    messages = _conversation()
    for budget in range(0, _count(messages) + 2):
        result = prune_history(messages, _count, budget)
        kept = result.messages
        ids_called = {c.id for m in kept for c in m.tool_calls}
        ids_answered = {m.tool_call_id for m in kept if m.role == "tool"}
        assert ids_called == ids_answered
        assert kept[0] is messages[0]  # the system prompt
        assert messages[8] in kept and messages[11] in kept and messages[12] in kept
        assert result.fits == (result.tokens <= budget)
        assert result.removed == len(messages) - len(kept)


def test_pruning_takes_the_fewest_groups_and_counts_logarithmically() -> None:
    messages = _conversation()
    calls: list[int] = []

    def count(ms: Sequence[Message]) -> int:
        calls.append(len(ms))
        return _count(ms)

    full = _count(messages)
    result = prune_history(messages, count, full - 50)
    assert result.fits and result.removed == 3  # the first tool turn (3 messages) was enough
    assert result.messages == tuple(m for i, m in enumerate(messages) if i not in (2, 3, 4))
    assert len(calls) <= 4
    assert prune_history(messages, _count, full).removed == 0


def test_pruning_overflow_reports_the_protected_size() -> None:
    messages = _conversation()
    result = prune_history(messages, _count, 20)
    assert not result.fits
    assert [messages.index(m) for m in result.messages] == [0, 8, 11, 12]
    assert result.over_by == result.tokens - 20 > 0


def test_final_answer_prompt_keeps_the_question_it_follows() -> None:
    c = ToolCall("1", "t", {})
    messages = [Message.system("s"), Message.user("old"), Message.assistant("old answer"),
                Message.user("question"), Message.assistant("", (c,)),
                Message.tool_result(c, "x" * 50), Message.user("answer now")]
    order = removal_order(messages, final_answer_prompt=True)
    assert order == [(1, 2)]
    result = prune_history(messages, _count, 1, final_answer_prompt=True)
    assert [m.content for m in result.messages] == ["s", "question", "", "x" * 50,
                                                    "answer now"]


def test_pruning_keeps_a_leading_assistant_message_group_whole() -> None:
    messages = [Message.assistant("greeting"), Message.user("q1"), Message.assistant("a1"),
                Message.user("q2")]
    assert removal_order(messages) == [(0,), (1, 2)]


# -- plugin, options, async --------------------------------------------------------


def test_plugin_registers_the_backend_with_its_options(model_file: Path) -> None:
    manager = isolated_plugin_manager()
    spec = manager.backend("llama_cpp")
    assert "model_path" in spec.options and "grammar" in spec.options
    with pytest.raises(TypeError, match="model_path"):
        spec.create()
    with pytest.raises(BackendError) as info:
        spec.create(model_path=str(model_file.parent / "missing.gguf"))
    assert info.value.kind == "not_found" and "missing.gguf" in str(info.value)


@pytest.mark.process
def test_importing_the_plugin_does_not_import_llama_cpp() -> None:
    code = ("import sys, toolwire, toolwire.plugins.llama_cpp as p; "
            "toolwire.default_plugin_manager().backend('llama_cpp'); "
            "print('llama_cpp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_option_checks(model_file: Path) -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        backend_for(model_file, [], n_ctx=100, max_tokens=100)
    backend, _ = backend_for(model_file, [])
    assert backend.n_ctx == 4096 and backend.prompt_room == 4096 - 1024  # min(4096, 8192)


def test_asend_runs_the_backend_in_a_worker_thread(model_file: Path) -> None:
    backend, _ = backend_for(model_file, [call_markup("get_weather", city="Lima"), "Sunny."])
    chat = Chat(backend, [get_weather])

    async def collect() -> list[Any]:
        return [e async for e in chat.asend("weather in Lima?")]

    events = asyncio.run(collect())
    assert calls_made == [("get_weather", {"city": "Lima", "days": 1})]
    assert isinstance(events[-1], DoneEvent) and events[-1].reason == "stop"

