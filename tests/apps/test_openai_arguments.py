"""Streamed tool-call arguments: OpenAI fragments that join to the call's final JSON text.

The property under test: whatever the cuts in the model's output, the argument
fragments the chat-completions stream sends concatenate to one JSON text that
reads back as the call's final arguments, equal to the non-streamed
``function.arguments`` and free of duplicate keys, for JSON families (raw JSON
rewritten token by token) and tagged families (string parameters streamed one
by one).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.support.families import parse, plugins
from tests.support.templates import template_path
from toolwire.apps.server.completion_stream import CompletionBuilder, StopMatcher
from toolwire.apps.server.sse import json_text
from toolwire.apps.server.tool_arguments import (
    ArgumentsWriter,
    CanonicalJsonStream,
    close_json_prefix,
)
from toolwire.events import Event, ToolCallEndEvent
from toolwire.testing import AssistantTurnRenderer
from toolwire.testing import strategies as tws

FAMILY_TEMPLATES = {
    "hermes_json": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "llama3_json": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "mistral": "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
    "glm_xml": "GLM-4.6.jinja",
    "seed_xml": "ByteDance-Seed-OSS.jinja",
    "kimi_k2": "Kimi-K2-Instruct.jinja",
    "gemma4": "google-gemma-4-31B-it.jinja",
}


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys {keys}"
    return dict(pairs)


def strict_loads(text: str) -> Any:
    """``json.loads`` that fails on duplicate keys."""
    return json.loads(text, object_pairs_hook=_no_duplicate_keys)


def streamed_arguments(events: Sequence[Event]) -> tuple[dict[int, str], dict[str, Any]]:
    """Feed events to a builder as the stream does: (index -> joined fragments, response)."""
    builder = CompletionBuilder("chatcmpl-x", 0, "m", make_call_id=lambda i: f"call_{i}")
    joined: dict[int, str] = {}
    chunks = [c for e in events for c in builder.feed(e)] + builder.closing_chunks()
    for chunk in chunks:
        for choice in chunk["choices"]:
            for call in choice["delta"].get("tool_calls", []):
                joined[call["index"]] = joined.get(call["index"], "") + \
                    call["function"].get("arguments", "")
    whole = CompletionBuilder("chatcmpl-x", 0, "m", make_call_id=lambda i: f"call_{i}")
    for event in events:
        whole.feed(event)
    return joined, whole.response()


# -- the canonical JSON rewriter -----------------------------------------------------------

objects = st.dictionaries(st.text(max_size=8), tws.json_values(), max_size=5)


@given(value=objects, indent=st.sampled_from([None, 0, 2]), ascii_only=st.booleans(),
       data=st.data())
def test_raw_json_in_any_cuts_becomes_the_canonical_text(value: dict[str, Any],
                                                        indent: int | None,
                                                        ascii_only: bool,
                                                        data: st.DataObject) -> None:
    raw = json.dumps(value, indent=indent, ensure_ascii=ascii_only) + "} trailing"
    stream = CanonicalJsonStream()
    out = "".join(stream.feed(piece) for piece in data.draw(tws.chunkings(raw)))
    assert out == json_text(value)
    assert stream.done and not stream.broken


@given(value=objects, data=st.data())
def test_every_prefix_of_the_rewrite_closes_into_valid_json(value: dict[str, Any],
                                                            data: st.DataObject) -> None:
    raw = json.dumps(value, ensure_ascii=True)
    stream = CanonicalJsonStream()
    sent = ""
    for piece in data.draw(tws.chunkings(raw)):
        sent += stream.feed(piece)
        if sent and not stream.done:
            closing, empty = close_json_prefix(sent)
            read = json.loads(sent + closing + "}")
            assert isinstance(read, dict)
            assert empty == (sent == "{")


def test_surrogate_escapes_split_anywhere_read_back_exactly() -> None:
    raw = '{"e": "\\ud83d\\ude00 and \\ud800 alone", "n": 1.50, "t": true}'
    for size in range(1, 8):
        stream = CanonicalJsonStream()
        out = "".join(stream.feed(raw[i:i + size]) for i in range(0, len(raw), size))
        assert out == json_text(json.loads(raw))
        assert json.loads(out) == json.loads(raw)


def test_text_that_is_not_json_stops_the_rewrite_without_losing_what_was_sent() -> None:
    stream = CanonicalJsonStream()
    assert stream.feed('{"a": 1, "b": tru') == '{"a": 1, "b": '
    assert stream.feed("x") == "" and stream.broken


# -- the writer -----------------------------------------------------------------------------


@given(params=st.dictionaries(st.text(min_size=1, max_size=6), st.text(max_size=12),
                              min_size=1, max_size=4),
       others=st.dictionaries(st.text(min_size=1, max_size=6), tws.json_values(), max_size=3),
       data=st.data())
def test_streamed_string_parameters_then_the_rest_make_one_exact_text(
        params: dict[str, str], others: dict[str, Any], data: st.DataObject) -> None:
    others = {k: v for k, v in others.items() if k not in params}
    writer = ArgumentsWriter()
    sent = ""
    for name, value in params.items():
        for piece in data.draw(tws.chunkings(value)):
            sent += writer.feed(piece, name)
    final = {**others, **params}
    sent += writer.finish(final)
    streamed = {k: v for k, v in params.items() if v}  # an empty value sends no delta
    expected = {**streamed, **{k: v for k, v in final.items() if k not in streamed}}
    assert sent == writer.text == json_text(expected)
    assert strict_loads(sent) == final


def test_a_parameter_written_twice_is_corrected_by_a_later_key() -> None:
    writer = ArgumentsWriter()
    sent = writer.feed("first", "a") + writer.feed("x", "b") + writer.feed("second", "a")
    sent += writer.finish({"a": "second", "b": "x", "n": 3})
    assert json.loads(sent) == {"a": "second", "b": "x", "n": 3}


def test_a_value_the_parser_retyped_is_corrected() -> None:
    writer = ArgumentsWriter()
    sent = writer.feed("4", "count") + writer.finish({"count": 42})
    assert sent == '{"count": "4", "count": 42}'
    assert json.loads(sent) == {"count": 42}


def test_raw_json_the_parser_changed_is_corrected_inside_nested_values() -> None:
    writer = ArgumentsWriter()
    sent = writer.feed('{"a": {"b": [1, "x', None)
    sent += writer.finish({"a": {"b": [1, "xyz"]}, "c": None})
    assert json.loads(sent) == {"a": {"b": [1, "xyz"]}, "c": None}


def test_a_call_without_deltas_is_sent_whole_and_an_unfinished_one_is_closed() -> None:
    whole = ArgumentsWriter()
    assert whole.finish({"q": "x", "n": [1]}) == '{"q": "x", "n": [1]}'
    cut = ArgumentsWriter()
    sent = cut.feed('{"q": "unfin', None) + cut.close_unfinished()
    assert json.loads(sent) == {"q": "unfin"}


# -- stop strings --------------------------------------------------------------------------


@given(before=st.text(alphabet="abc\n", max_size=20), data=st.data())
def test_stop_strings_cut_the_text_at_the_first_one_whatever_the_cuts(
        before: str, data: st.DataObject) -> None:
    stops = ("ab\n", "cc")
    text = before + "cc" + "tail"
    matcher = StopMatcher(stops)
    out = "".join(matcher.feed(p) for p in data.draw(tws.chunkings(text))) + matcher.flush()
    first = min(i for i in (text.find(s) for s in stops) if i >= 0)
    assert out == text[:first] and matcher.matched


# -- through every family's real template ---------------------------------------------------


def _family_case(family: str) -> tuple[AssistantTurnRenderer, Any]:
    path = template_path(FAMILY_TEMPLATES[family])
    if not path.exists():
        pytest.fail(f"shared template {path} is missing")
    spec = plugins().parser(family)
    renderer = AssistantTurnRenderer(path.read_text(encoding="utf-8"),
                                     make_call_id=spec.make_call_id)
    return renderer, path.read_text(encoding="utf-8")


@pytest.mark.parametrize("family", sorted(FAMILY_TEMPLATES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=tws.tool_calls_with_schemas(max_calls=2,
                                        strings=st.text(alphabet="abc xyz\"\\{}é\n",
                                                        min_size=1, max_size=10)),
       data=st.data())
def test_a_familys_streamed_arguments_join_to_its_final_arguments(
        family: str, case: tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]],
        data: st.DataObject) -> None:
    tools, calls = case
    assume(calls)
    renderer, template = _family_case(family)
    try:
        reply = renderer.render(calls, tools=tools)
    except Exception:  # a call the template cannot write (its own limits)
        assume(False)
        raise
    pieces = data.draw(tws.chunkings(reply.text))
    events = parse(family, pieces, tools, template=template, prompt_tail=reply.prompt_tail)
    finals = [e for e in events if isinstance(e, ToolCallEndEvent)]
    assume(finals)
    joined, response = streamed_arguments(events)
    sent = response["choices"][0]["message"]["tool_calls"]
    for position, final in enumerate(finals):
        assert joined[position] == sent[position]["function"]["arguments"]
        assert tws.json_dumps(strict_loads(joined[position])) == \
            tws.json_dumps(dict(final.arguments))
    whole_events = parse(family, [reply.text], tools, template=template,
                         prompt_tail=reply.prompt_tail)
    whole_finals = [e for e in whole_events if isinstance(e, ToolCallEndEvent)]
    if [(e.name, tws.json_dumps(dict(e.arguments))) for e in whole_finals] == \
            [(e.name, tws.json_dumps(dict(e.arguments))) for e in finals]:
        whole_joined, _ = streamed_arguments(whole_events)
        assert whole_joined == joined  # the same text whatever the cuts
