"""``logprobs`` / ``top_logprobs`` on ``/v1/chat/completions`` (issue 29, item 6).

A real llama.cpp tiny model (random weights) behind a real uvicorn server on
127.0.0.1, spoken to by the real ``openai`` SDK and by raw HTTP: the content
tokens' log probabilities in OpenAI's shape, whole and streamed, the same as a
direct llama-cpp-python evaluation of the same prompt; only content tokens (a
forced call's markup is not content); a 400 naming the field for the invalid
forms and for a backend that cannot give them. The model worker carries them
too. The line-up of tokens and content is also checked through a real parser on
every way of cutting a reply with text, a call and text into tokens.
"""

from __future__ import annotations

import codecs
import http.client
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.apps.test_server import running_server, scripted_app, serving_backend
from tests.support.templates import shared_template
from tests.support.tiers import needs
from toolwire import CancelToken, ModelRequest, TurnEnd
from toolwire.apps.server.completion_stream import CompletionBuilder
from toolwire.events import (
    ReasoningEvent,
    TextEvent,
    TokenLogprobEvent,
    ToolCallEndEvent,
    event_from_dict,
)
from toolwire.families.selection import build_pipeline
from toolwire.testing import ScriptedBackend, isolated_plugin_manager, write_tiny_gguf
from toolwire.testing.tiny_gguf import TINY_BACKEND_OPTIONS
from toolwire.vocabulary.history import Message

pytest.importorskip("llama_cpp")
import llama_cpp

from toolwire.plugins.llama_cpp import LlamaCppBackend

MODEL_ID = "tiny-logprobs"
MESSAGES: list[Any] = [{"role": "user", "content": "Tell me something."}]
TOOLS: Any = [{"type": "function", "function": {
    "name": "search_text", "description": "Search the notes for a pattern.",
    "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}},
                   "required": ["pattern"]}}}]


class Served:
    def __init__(self, base: str, backend: LlamaCppBackend, path: Path) -> None:
        self.base, self.backend, self.path = base, backend, path


def _serve(path: Path, **options: Any) -> Iterator[Served]:
    backend = LlamaCppBackend(path, temperature=1.0, top_p=1.0, **options,
                              **TINY_BACKEND_OPTIONS)  # type: ignore[arg-type]

    with serving_backend(backend, model=MODEL_ID) as base:
        yield Served(base, backend, path)


@pytest.fixture(scope="module")
@needs("model")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The tiny model (ChatML) at temperature 1.0."""
    path = write_tiny_gguf(tmp_path_factory.mktemp("logprobs") / "tiny.gguf")
    yield from _serve(path, n_ctx=512, max_tokens=64)


@pytest.fixture(scope="module")
@needs("model")
def tiny_qwen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The tiny model under Qwen2.5's real template (its calls in <tool_call> markup)."""
    source = shared_template("Qwen-Qwen2.5-7B-Instruct.jinja")
    extra = sorted({c for c in source if ord(c) > 127})
    path = write_tiny_gguf(tmp_path_factory.mktemp("logprobs-qwen") / "tiny.gguf", source,
                           sample_bytes=False, extra_tokens=extra)
    yield from _serve(path, n_ctx=4096, max_tokens=400)


def sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=120)


def assert_well_formed(entries: list[dict[str, Any]], top: int) -> None:
    """Each logprob <= 0, ``top`` alternatives sorted most likely first, the chosen
    token no likelier than the likeliest."""
    for entry in entries:
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        assert entry["logprob"] <= 0
        alternatives = entry["top_logprobs"]
        assert len(alternatives) == top
        values = [a["logprob"] for a in alternatives]
        assert values == sorted(values, reverse=True)
        assert all(v <= 0 for v in values)
        assert all(set(a) == {"token", "logprob", "bytes"} for a in alternatives)
        if alternatives:
            assert entry["logprob"] <= values[0] + 1e-6
            if entry["logprob"] >= values[-1] + 1e-6:  # it ranks among them: it is there
                assert any(a["bytes"] == entry["bytes"] and
                           abs(a["logprob"] - entry["logprob"]) < 1e-6 for a in alternatives)


def entries_of(choice: Any) -> list[dict[str, Any]]:
    assert choice.logprobs is not None
    assert choice.logprobs.refusal is None
    return [item.model_dump() for item in choice.logprobs.content or []]


# -- the shape, whole and streamed --------------------------------------------------------------


def test_logprobs_give_each_content_token_in_openais_shape(tiny: Served) -> None:
    answer = sdk(tiny.base).chat.completions.create(
        model=MODEL_ID, messages=MESSAGES, logprobs=True, top_logprobs=5, seed=11,
        max_tokens=24)
    choice = answer.choices[0]
    entries = entries_of(choice)
    assert entries, "the tiny model wrote nothing"
    assert "".join(e["token"] for e in entries) == choice.message.content
    assert_well_formed(entries, 5)
    assert answer.usage is not None and len(entries) <= answer.usage.completion_tokens


def test_without_top_logprobs_each_token_has_no_alternatives(tiny: Served) -> None:
    choice = sdk(tiny.base).chat.completions.create(
        model=MODEL_ID, messages=MESSAGES, logprobs=True, seed=3, max_tokens=8).choices[0]
    entries = entries_of(choice)
    assert entries and "".join(e["token"] for e in entries) == choice.message.content
    assert_well_formed(entries, 0)


def test_a_request_without_logprobs_gets_none(tiny: Served) -> None:
    client = sdk(tiny.base)
    assert client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, max_tokens=4,
                                          logprobs=False).choices[0].logprobs is None
    for chunk in client.chat.completions.create(model=MODEL_ID, messages=MESSAGES,
                                                max_tokens=4, stream=True):
        assert all(c.logprobs is None for c in chunk.choices)


def test_streamed_logprobs_come_with_the_text_and_match_the_whole_reply(tiny: Served) -> None:
    options: dict[str, Any] = {"model": MODEL_ID, "messages": MESSAGES, "logprobs": True,
                               "top_logprobs": 3, "seed": 5, "max_tokens": 24}
    client = sdk(tiny.base)
    whole = client.chat.completions.create(**options).choices[0]
    content, entries = [], []
    for chunk in client.chat.completions.create(stream=True, **options):
        for choice in chunk.choices:
            if choice.delta.content:
                content.append(choice.delta.content)
                assert choice.logprobs is not None  # a content chunk carries its tokens
            if choice.logprobs is not None:
                entries.extend(entries_of(choice))
    assert "".join(content) == whole.message.content
    assert "".join(e["token"] for e in entries) == "".join(content)
    assert entries == entries_of(whole)  # the same seed: the same tokens, each once
    assert_well_formed(entries, 3)


def test_raw_sse_chunks_carry_logprobs_content_and_a_null_refusal(tiny: Served) -> None:
    body = {"model": MODEL_ID, "messages": MESSAGES, "logprobs": True, "top_logprobs": 2,
            "seed": 5, "max_tokens": 16, "stream": True}
    content, entries = "", []
    conn = http.client.HTTPConnection("127.0.0.1", int(tiny.base.rsplit(":", 1)[1]),
                                      timeout=120)
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    frames = response.read().decode().split("\n\n")
    conn.close()
    assert frames[-2] == "data: [DONE]"
    for frame in frames[:-2]:
        assert frame.startswith("data: ")
        choice = json.loads(frame[6:])["choices"][0]
        piece = choice["delta"].get("content") or ""
        content += piece
        if choice["logprobs"] is None:
            assert not piece  # only the role's chunk and the finishing one
            continue
        assert set(choice["logprobs"]) == {"content", "refusal"}
        assert choice["logprobs"]["refusal"] is None
        entries.extend(choice["logprobs"]["content"])
    assert content and "".join(e["token"] for e in entries) == content, frames
    assert_well_formed(entries, 2)


# -- the same numbers as llama.cpp's ---------------------------------------------------------------


@pytest.mark.model
def test_the_logprobs_are_llama_cpps_for_the_same_prompt(tiny: Served) -> None:
    answer = sdk(tiny.base).chat.completions.create(
        model=MODEL_ID, messages=MESSAGES, logprobs=True, top_logprobs=4, temperature=0,
        max_tokens=6)
    entries = entries_of(answer.choices[0])
    assert answer.usage is not None and len(entries) == answer.usage.completion_tokens
    _, prompt = tiny.backend.fit_prompt(ModelRequest((Message.user(MESSAGES[0]["content"]),)))
    direct = llama_cpp.Llama(str(tiny.path), n_ctx=512, logits_all=True, n_threads=1,
                             verbose=False)
    try:
        pieces = {token: direct.detokenize([token], special=True)
                  for token in range(direct.n_vocab())}
        context = list(prompt.tokens or ())
        for entry in entries[:3]:
            direct.reset()
            direct.eval(context)
            logprobs = llama_cpp.Llama.logits_to_logprobs(direct.scores[len(context) - 1])
            same = [t for t, p in pieces.items() if list(p) == entry["bytes"]]
            chosen = [t for t in same if abs(float(logprobs[t]) - entry["logprob"]) < 1e-3]
            assert chosen, (entry, [float(logprobs[t]) for t in same])
            best = sorted((float(v) for v in logprobs), reverse=True)[:4]
            assert [a["logprob"] for a in entry["top_logprobs"]] == pytest.approx(best, abs=1e-3)
            context.append(chosen[0])
    finally:
        direct.close()


# -- only content tokens ------------------------------------------------------------------------


def test_a_forced_calls_markup_tokens_are_not_content_tokens(tiny_qwen: Served) -> None:
    for stream in (False, True):
        options: dict[str, Any] = {"model": MODEL_ID, "messages": MESSAGES, "tools": TOOLS,
                                   "tool_choice": "required", "logprobs": True,
                                   "top_logprobs": 1, "seed": 2}
        client = sdk(tiny_qwen.base)
        if stream:
            content, entries, calls = "", [], 0
            for chunk in client.chat.completions.create(stream=True, **options):
                for choice in chunk.choices:
                    content += choice.delta.content or ""
                    calls += len(choice.delta.tool_calls or [])
                    if choice.logprobs is not None:
                        entries.extend(entries_of(choice))
        else:
            answer = client.chat.completions.create(**options)
            choice = answer.choices[0]
            content, entries = choice.message.content or "", entries_of(choice)
            calls = len(choice.message.tool_calls or [])
            assert answer.usage is not None
            assert len(entries) < answer.usage.completion_tokens  # the markup's are not here
        assert calls >= 1
        assert "".join(e["token"] for e in entries) == content
        assert all("<tool_call>" not in e["token"] for e in entries)


# -- refused ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "param"), [
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": False, "top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": "3"}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 2.5}, "top_logprobs"),
    ({"logprobs": "yes"}, "logprobs"),
])
def test_invalid_logprobs_forms_are_a_400_naming_the_field(tiny: Served, fields: dict[str, Any],
                                                           param: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk(tiny.base).chat.completions.create(model=MODEL_ID, messages=MESSAGES, max_tokens=2,
                                               **fields)
    assert caught.value.status_code == 400
    assert isinstance(caught.value.body, dict) and caught.value.body["param"] == param


def test_a_backend_that_cannot_give_logprobs_answers_400_naming_logprobs() -> None:
    backend = ScriptedBackend(["hello"])
    with running_server(scripted_app(backend)) as base:
        client = sdk(base)
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as caught:
                client.chat.completions.create(model="scripted", messages=MESSAGES,
                                               logprobs=True, stream=stream)
            body = caught.value.body
            assert isinstance(body, dict) and body["param"] == "logprobs"
            assert "log probabilities" in body["message"]
        assert not backend.requests  # refused before the model ran
        answer = client.chat.completions.create(model="scripted", messages=MESSAGES,
                                                logprobs=False)
        assert answer.choices[0].message.content == "hello"


# -- across the model worker -----------------------------------------------------------------------


@pytest.mark.model
@pytest.mark.process
def test_token_logprobs_cross_the_model_worker(tiny: Served) -> None:
    from toolwire.backends.model_worker import WorkerBackend, WorkerSpec
    from toolwire.hooks.manager import default_plugin_manager

    options = {"model_path": str(tiny.path), "n_ctx": 512, "max_tokens": 8,
               "temperature": 0.0, "n_threads": 1, "progress": False}
    worker = WorkerBackend(WorkerSpec("llama_cpp", options, label="tiny.gguf"),
                           default_plugin_manager()).start()
    local = LlamaCppBackend(**options)  # type: ignore[arg-type]
    try:
        assert worker.token_logprobs
        request = ModelRequest((Message.user("hi"),), logprobs=2)
        there = [e for e in worker.stream_turn(request, CancelToken())
                 if not isinstance(e, TurnEnd)]
        here = [e for e in local.stream_turn(request, CancelToken())
                if not isinstance(e, TurnEnd)]
    finally:
        worker.close()
        local.close()
    tokens = [e for e in there if isinstance(e, TokenLogprobEvent)]
    assert len(tokens) == 8 and all(len(t.top_logprobs) == 2 for t in tokens)
    assert [e.to_dict() for e in there] == [e.to_dict() for e in here]
    assert all(event_from_dict(t.to_dict()) == t for t in tokens)


# -- the line-up through a real parser ---------------------------------------------------------

REPLY = ('Hé said <b>hi</b> '
         '<tool_call>\n{"name": "search_text", "arguments": {"pattern": "x<y"}}\n</tool_call>'
         '\nthen <tool_ok')
REASONED = "<think>I said hi, then ok: é</think>\n\nThen ok: <b>é</b> hi"
THINK_TEMPLATE = "{{ '<think>' }}{{ '</think>' }}"  # a template whose model reasons
PLUGINS = isolated_plugin_manager()
PARAMETERS = {"search_text": TOOLS[0]["function"]["parameters"]}


def _pipeline(template: str | None) -> Any:
    return build_pipeline(PLUGINS.parser("hermes_json"), PARAMETERS, plugins=PLUGINS,
                          chat_template=template, prompt_tail="\n")


def _content_of_whole(reply: str, template: str | None) -> str:
    """What the parser reads as content in the reply fed whole."""
    pipeline = _pipeline(template)
    events = [*pipeline.feed(reply), *pipeline.close()]
    return "".join(e.text for e in events if isinstance(e, TextEvent))


def _stream_tokens(reply: str, cuts: set[int], stop: tuple[str, ...],
                   template: str | None = None) -> tuple[list[Any], list[Any], list[int]]:
    """The reply cut into tokens at the byte offsets ``cuts``, each token's event
    before its text's events, through a real parser into the builder: the chunks,
    the reported entries, and the reported tokens' numbers (1, 2, ...)."""
    raw = reply.encode()
    bounds = [0, *sorted(cuts), len(raw)]
    pipeline = _pipeline(template)
    builder = CompletionBuilder("chatcmpl-x", 0, "m", make_call_id=lambda i: f"call_{i}",
                                stop=stop, logprobs=True)
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    chunks: list[dict[str, Any]] = []
    for n, (a, b) in enumerate(itertools.pairwise(bounds)):
        text = decoder.decode(raw[a:b])
        chunks.extend(builder.feed(TokenLogprobEvent(text, -0.01 * (n + 1), raw[a:b])))
        for event in pipeline.feed(text) if text else ():
            chunks.extend(builder.feed(event))
    for event in pipeline.close():
        chunks.extend(builder.feed(event))
    builder.feed(TurnEnd("stop"))
    chunks.extend(builder.closing_chunks())
    entries = [e for c in chunks if c["choices"][0]["logprobs"]
               for e in c["choices"][0]["logprobs"]["content"]]
    order = [round(-e["logprob"] * 100) for e in entries]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert "".join(e["token"] for e in entries) == content
    assert order == sorted(set(order))  # each token once, in order
    return chunks, entries, order


def _spans(reply: str, cuts: set[int]) -> list[tuple[int, int]]:
    bounds = [0, *sorted(cuts), len(reply.encode())]
    return list(itertools.pairwise(bounds))


@settings(max_examples=150, deadline=None)
@given(cuts=st.sets(st.integers(1, len(REPLY.encode()) - 1)), stop=st.booleans())
def test_each_content_token_is_reported_once_in_order_however_the_reply_is_cut(
        cuts: set[int], stop: bool) -> None:
    chunks, entries, order = _stream_tokens(REPLY, cuts, ("n <",) if stop else ())
    whole = _content_of_whole(REPLY, None)
    content = "".join(e["token"] for e in entries)
    assert content == (whole[:whole.index("n <")] if stop else whole)
    assert sum(1 for c in chunks if c["choices"][0]["delta"].get("tool_calls")) == 1
    raw = REPLY.encode()
    call_start, call_end = raw.find(b"<tool_call>"), raw.find(b"</tool_call>") + 12
    # blanks on both sides of the call leave one separator: the space before it, which
    # the content writes after it, with the token where the text after the call begins
    before, after = raw.find(b" <tool_call>"), call_end + 1
    for n, (a, b) in enumerate(_spans(REPLY, cuts)):
        if call_start <= a and b <= call_end:  # all markup: not a content token
            assert n + 1 not in order
        elif b <= before or (a >= after and not stop):  # all content: itself, whole
            moved = b" " if a == after else b""
            assert entries[order.index(n + 1)]["bytes"] == list(moved + raw[a:b])


@settings(max_examples=150, deadline=None)
@given(cuts=st.sets(st.integers(1, len(REASONED.encode()) - 1)))
def test_reasoning_tokens_are_not_content_tokens_however_the_reply_is_cut(
        cuts: set[int]) -> None:
    chunks, entries, order = _stream_tokens(REASONED, cuts, (), THINK_TEMPLATE)
    assert "".join(e["token"] for e in entries) == _content_of_whole(REASONED, THINK_TEMPLATE)
    assert any(c["choices"][0]["delta"].get("reasoning_content") for c in chunks)
    raw = REASONED.encode()
    content_start = raw.find(b"</think>\n\n") + 10
    for n, (a, b) in enumerate(_spans(REASONED, cuts)):
        if b <= content_start:  # reasoning or its markup
            assert n + 1 not in order
        elif a >= content_start:  # all content: itself, whole
            assert entries[order.index(n + 1)]["bytes"] == list(raw[a:b])


_ITEMS = st.one_of(
    st.tuples(st.just("token"), st.text(max_size=4)),
    st.tuples(st.just("text"), st.text(max_size=6)),
    st.tuples(st.just("reasoning"), st.text(max_size=6)),
    st.tuples(st.just("call"), st.just("")),
)


@settings(max_examples=300, deadline=None)
@given(items=st.lists(_ITEMS, max_size=40), stop=st.sampled_from(["", "a", "ab"]))
@example(items=[("token", ""), ("token", ""), ("text", "0"), ("token", "0"), ("text", "0")],
         stop="")  # text no token holds went to the latest; the empty one before it came later
def test_whatever_a_parser_writes_each_token_is_reported_at_most_once_and_texts_add_up(
        items: list[tuple[str, str]], stop: str) -> None:
    """Content unrelated to the tokens' texts (a parser that rewrote everything)
    still gives entries whose texts are the content, each token once, in order."""
    builder = CompletionBuilder("chatcmpl-x", 0, "m", make_call_id=lambda i: f"call_{i}",
                                stop=(stop,) if stop else (), logprobs=True)
    chunks: list[dict[str, Any]] = []
    tokens = 0
    for kind, text in items:
        if kind == "token":
            tokens += 1
            event: Any = TokenLogprobEvent(text, -0.01 * tokens, text.encode())
        elif kind == "text":
            event = TextEvent(text)
        elif kind == "reasoning":
            event = ReasoningEvent(text)
        else:
            event = ToolCallEndEvent("search_text", {"pattern": "x"}, index=0)
        chunks.extend(builder.feed(event))
    builder.feed(TurnEnd("stop"))
    chunks.extend(builder.closing_chunks())
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    entries = [e for c in chunks if c["choices"][0]["logprobs"]
               for e in c["choices"][0]["logprobs"]["content"]]
    order = [round(-e["logprob"] * 100) for e in entries]
    assert order == sorted(set(order))
    first_token = next((i for i, (kind, _) in enumerate(items) if kind == "token"), len(items))
    if all(not text for kind, text in items[:first_token] if kind == "text"):
        # every text came after a token (as a backend's do): all of it is reported
        assert "".join(e["token"] for e in entries) == content
