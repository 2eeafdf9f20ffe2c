"""Tool-call arguments on the chat-completions stream: exactly the call's typed value.

The property under test: whatever the cuts in the model's output, the argument
fragments the stream sends concatenate to one JSON text that reads back as the
call's final, schema-typed arguments, equal to the non-streamed
``function.arguments`` and free of duplicate keys, in every family; and stop
strings cut the text at the first one, in linear time.
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


# -- a call goes out whole, exactly its typed arguments ------------------------------------

TYPED_TOOL = {"type": "function", "function": {"name": "label_it", "parameters": {
    "type": "object", "properties": {
        "label": {"type": ["string", "null"]}, "count": {"type": "integer"},
        "note": {"type": "string"}}}}}


@pytest.mark.parametrize(("written", "typed"), [
    ("<parameter=label>\nnull\n</parameter>\n", {"label": None}),
    ("<parameter=count>\n42\n</parameter>\n", {"count": 42}),
    ("<parameter=note>\nnull\n</parameter>\n<parameter=count>\n7\n</parameter>\n",
     {"note": "null", "count": 7}),
])
def test_a_value_typed_after_it_was_written_is_sent_once_as_its_typed_value(
        written: str, typed: dict[str, Any]) -> None:
    reply = f"<tool_call>\n<function=label_it>\n{written}</function>\n</tool_call>"
    for size in (1, 3, len(reply)):
        pieces = [reply[i:i + size] for i in range(0, len(reply), size)]
        events = parse("qwen_xml", pieces, [TYPED_TOOL])
        joined, response = streamed_arguments(events)
        (sent,) = response["choices"][0]["message"]["tool_calls"]
        assert joined == {0: sent["function"]["arguments"]}
        assert strict_loads(joined[0]) == typed


# -- stop strings --------------------------------------------------------------------------


def _first_stop_cut(text: str, stops: Sequence[str]) -> str:
    found = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return text[:min(found)] if found else text


@given(before=st.text(alphabet="abc\n", max_size=20), data=st.data())
def test_stop_strings_cut_the_text_at_the_first_one_whatever_the_cuts(
        before: str, data: st.DataObject) -> None:
    stops = ("ab\n", "cc")
    text = before + "cc" + "tail"
    matcher = StopMatcher(stops)
    out = "".join(matcher.feed(p) for p in data.draw(tws.chunkings(text))) + matcher.flush()
    assert out == _first_stop_cut(text, stops) and matcher.matched


@given(stops=st.lists(st.text(alphabet="ab", min_size=1, max_size=5), min_size=1, max_size=4),
       text=st.text(alphabet="ab", max_size=40), data=st.data())
def test_overlapping_stop_strings_cut_before_the_earliest_starting_one(
        stops: list[str], text: str, data: st.DataObject) -> None:
    """Stops that overlap each other and repeat characters: the earliest occurrence
    of any wins, however the text comes; nothing of a stop string is released."""
    matcher = StopMatcher(stops)
    released = ""
    for piece in data.draw(tws.chunkings(text)) if text else []:
        released += matcher.feed(piece)
        assert _first_stop_cut(text, stops).startswith(released)
    released += matcher.flush()
    assert released == _first_stop_cut(text, stops)
    assert matcher.matched == (released != text or any(s in text for s in stops))


def test_a_model_repeating_one_character_against_a_long_stop_is_read_once() -> None:
    """The stop string ``a`` x 3000 + ``b`` against 24,000 ``a`` one at a time: nothing
    matches, only the last 3,000 characters are held, and each one is looked at a
    bounded number of times (the matcher holds no copy of what it released)."""
    stop = "a" * 3000 + "b"
    matcher = StopMatcher([stop])
    released = "".join(matcher.feed("a") for _ in range(24_000))
    assert released == "a" * (24_000 - 3000) and not matcher.matched
    assert matcher.flush() == "a" * 3000


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
