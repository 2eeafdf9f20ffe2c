"""The mistral parser: Nemo's JSON list, the v11 ``name[ARGS]`` form and Small 3.2's
``[CALL_ID]``, ``[THINK]`` reasoning, detection, conformance and BFCL round trips.

Limit recorded here: the Mistral Nemo and Small 3.2 templates raise unless call
ids are 9 alphanumeric characters, so the family sets
``make_call_id=nine_char_call_id`` and the conformance run renders with it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.families import (
    bfcl_sample,
    canonical_calls,
    parse,
    parse_text,
    plugins,
    template_source,
    without_dropped,
)
from tests.support.json_families import (
    check_garbage,
    conformance,
    render_turn,
    selected_family,
    strip_blanks,
    template_names,
)
from toolwire import merge_events
from toolwire.events import ReasoningEvent, TextEvent, ToolCallDeltaEvent, ToolCallEndEvent
from toolwire.parse.engine import CallParser
from toolwire.plugins import mistral
from toolwire.plugins.mistral import MISTRAL_FORMAT
from toolwire.testing import AssistantTurnRenderer
from toolwire.vocabulary.call_ids import nine_char_call_id

FAMILY = "mistral"
TEMPLATES = ["mistralai-Mistral-Nemo-Instruct-2407.jinja",
             "Mistral-Small-3.2-24B-Instruct-2506.jinja",
             "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
             "unsloth-mistral-Devstral-Small-2507.jinja"]
MARKUP = ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]")


def parse_reply(text: str, chunk: int = 0, **kwargs: Any) -> dict[str, Any]:
    return parse_text(FAMILY, text, (), chunk, **kwargs).to_dict()


# -- reference conversions -----------------------------------------------------------


def test_v11_calls_each_after_their_own_marker() -> None:
    reply = 'Let me check.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}' \
            "[TOOL_CALLS]ping[ARGS]{}"
    out = parse_reply(reply, chunk=3)
    assert out["content"] == "Let me check."
    assert out["tool_calls"] == [{"name": "get_weather", "arguments": {"city": "Paris",
                                                                       "days": 3}},
                                 {"name": "ping", "arguments": {}}]


def test_small_32_call_ids_are_read_and_not_kept() -> None:
    reply = '[TOOL_CALLS]get_weather[CALL_ID]hRd62muVF[ARGS]{"city": "Paris"}'
    events = merge_events(parse(FAMILY, [reply[i:i + 2] for i in range(0, len(reply), 2)]))
    call = next(e for e in events if isinstance(e, ToolCallEndEvent))
    assert (call.name, dict(call.arguments), call.id) == ("get_weather", {"city": "Paris"}, "")


def test_nemo_json_list() -> None:
    reply = '[TOOL_CALLS][{"name": "a", "arguments": {"x": 1}, "id": "x0VGdo78b"}, ' \
            '{"name": "b", "arguments": {}, "id": "Cu9APAeSF"}]'
    out = parse_reply(reply, chunk=1)
    assert [(c["name"], c["arguments"]) for c in out["tool_calls"]] == [("a", {"x": 1}),
                                                                         ("b", {})]


def test_arguments_stream_as_deltas() -> None:
    reply = '[TOOL_CALLS]write[ARGS]{"text": "' + "word " * 50 + '"}'
    parser = CallParser(MISTRAL_FORMAT, {})
    events = [e for i in range(0, len(reply), 4) for e in parser.feed(reply[i:i + 4])]
    deltas = [e for e in events + parser.close() if isinstance(e, ToolCallDeltaEvent)]
    assert len(deltas) > 40
    assert "".join(d.text for d in deltas) == reply.split("[ARGS]")[1]


def test_think_block_is_reasoning_with_the_ministral_template() -> None:
    template = template_source("mistralai-Ministral-3-14B-Reasoning-2512.jinja")
    reply = "[THINK]the user wants weather[/THINK]Checking.[TOOL_CALLS]get_weather[ARGS]{}"
    out = parse_reply(reply, chunk=4, template=template, prompt_tail="[/INST]")
    assert out["reasoning"] == "the user wants weather"
    assert out["content"] == "Checking."
    assert [c["name"] for c in out["tool_calls"]] == ["get_weather"]


def test_think_filter_stays_out_of_other_families() -> None:
    events = parse("hermes_json", ["[THINK]not mistral[/THINK] text"], prompt_tail="\n")
    assert merge_events(events) == [TextEvent("[THINK]not mistral[/THINK] text")]
    events = parse(FAMILY, ["[THINK]plan[/THINK]answer"])
    assert merge_events(events) == [ReasoningEvent("plan"), TextEvent("answer")]


def test_family_makes_nine_character_ids() -> None:
    spec = plugins().parser(FAMILY)
    assert spec.make_call_id is nine_char_call_id
    assert re.fullmatch(r"[A-Za-z0-9]{9}", spec.make_call_id(0))


# -- tolerated drifts ---------------------------------------------------------------------


def test_a_single_object_instead_of_a_list() -> None:
    out = parse_reply('[TOOL_CALLS] {"name": "a", "arguments": {"k": "v"}}')
    assert out["tool_calls"] == [{"name": "a", "arguments": {"k": "v"}}]


def test_second_call_without_repeating_the_marker() -> None:
    out = parse_reply('[TOOL_CALLS]a[ARGS]{"x": 1}b[ARGS]{}')
    assert [c["name"] for c in out["tool_calls"]] == ["a", "b"]


def test_text_after_v11_calls_is_text() -> None:
    out = parse_reply("[TOOL_CALLS]a[ARGS]{} I called it.")
    assert out["content"] == "I called it."


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "[TOOL_CALLS]", "[TOOL_CALLS] hello", "[TOOL_CALLS]name", "[TOOL_CALLS]name[ARGS]",
    "[TOOL_CALLS]name[ARGS]not json", "[TOOL_CALLS][{", "[TOOL_CALLS][1, 2]",
    "[TOOL_CALLS]a[CALL_ID]x y[ARGS]{}", "[TOOL_CALLS][ARGS]{}", "see [link](x) and [TOOL_",
    "[TOOL_CALLS]" * 20, '[TOOL_CALLS]a[ARGS]{"k": [1, 2}',
])
def test_bad_input_never_raises_and_never_loses_text(text: str) -> None:
    out = parse_reply(text, chunk=3)
    assert out["tool_calls"] == []
    assert strip_blanks(out["content"]) == strip_blanks(without_dropped(text, out))


@given(data=st.data())
def test_garbage_never_raises_and_chunking_does_not_matter(data: st.DataObject) -> None:
    check_garbage(FAMILY, MARKUP, data)


# -- detection over every real template ---------------------------------------------------


@pytest.mark.parametrize("name", template_names())
def test_detection_table(name: str) -> None:
    mine = name in TEMPLATES
    assert (mistral.detect(template_source(name)) > 0) == mine
    if mine:
        assert selected_family(name) == FAMILY


# -- conformance ------------------------------------------------------------------------------


@pytest.mark.kit
@pytest.mark.parametrize("name", TEMPLATES)
def test_conformance(name: str) -> None:
    assert conformance(mistral, name).passed


# -- BFCL round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mistralai-Mistral-Nemo-Instruct-2407.jinja",
                                  "Mistral-Small-3.2-24B-Instruct-2506.jinja",
                                  "unsloth-mistral-Devstral-Small-2507.jinja"])
def test_bfcl_parallel_round_trip(name: str) -> None:
    source = template_source(name)
    renderer = AssistantTurnRenderer(source, make_call_id=nine_char_call_id)
    for tools, calls in bfcl_sample("parallel_multiple", every=3):
        reply = render_turn(renderer, calls, tools)
        got = parse_text(FAMILY, reply.text, tools, 11, template=source,
                         prompt_tail=reply.prompt_tail)
        assert canonical_calls((c.name, c.arguments) for c in got.tool_calls) == \
            canonical_calls(calls), reply.text
