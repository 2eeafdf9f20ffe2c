"""The kimi_k2 parser (special-token sections, JSON arguments, ``functions.NAME:IDX`` ids)
and kimi_k3 (typed xtml tags): conformance through every real template, BFCL round
trips, call ids, typed values, reasoning, bad input."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.families import (
    conformance_examples,
    parse,
    parse_text,
    template_source,
    without_dropped,
)
from tests.support.tagged_families import (
    bfcl_round_trip,
    check_literal_markup,
    conformance,
    markers,
    render,
)
from toolwire.events import ToolCallDeltaEvent, ToolCallEndEvent, ToolCallStartEvent
from toolwire.plugins import kimi
from toolwire.plugins.kimi import K2_FORMAT, K3_FORMAT, kimi_call_id

K2_TEMPLATES = ["Kimi-K2-Instruct.jinja", "Kimi-K2-Thinking.jinja", "moonshotai-Kimi-K2.jinja"]
K3 = "Kimi-K3.jinja"
K2_MARKERS = markers(K2_FORMAT, "<think>", "</think>")
K3_MARKERS = markers(K3_FORMAT, "<|open|>think<|sep|>", "<|close|>think<|sep|>")
K3_TAIL = '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>'
TOOLS = [{"type": "function", "function": {"name": "t", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}, "n": {"type": "integer"},
                                     "opts": {"type": "object"}}}}},
         {"type": "function", "function": {"name": "math.sum", "parameters": {
             "type": "object", "properties": {"xs": {"type": "array"}}}}}]


def k2_call(call_id: str, arguments: str) -> str:
    return (f"<|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{arguments}"
            "<|tool_call_end|>")


def k2_section(*calls: str) -> str:
    return "<|tool_calls_section_begin|>" + "".join(calls) + "<|tool_calls_section_end|>"


@pytest.mark.kit
@pytest.mark.parametrize("name", K2_TEMPLATES)
def test_conformance_through_each_kimi_k2_template(name: str) -> None:
    conformance(kimi, name, K2_MARKERS)


@pytest.mark.kit
def test_conformance_through_the_kimi_k3_template() -> None:
    conformance(kimi, K3, K3_MARKERS)


@pytest.mark.parametrize(("family", "name"), [("kimi_k2", "Kimi-K2-Instruct.jinja"),
                                              ("kimi_k3", K3)])
def test_bfcl_ground_truth_calls_round_trip(family: str, name: str) -> None:
    assert bfcl_round_trip(family, name, every=3) > 500


@settings(max_examples=conformance_examples() * 2)
@given(data=st.data())
def test_values_holding_xtml_tags_come_back_unchanged(data: st.DataObject) -> None:
    check_literal_markup("kimi_k3", K3, K3_FORMAT, data, content_markers=K3_MARKERS)


# -- Kimi K2 ---------------------------------------------------------------------------


def test_k2_call_ids_come_from_the_markup() -> None:
    reply = "Both." + k2_section(k2_call("functions.t:0", '{"text": "a", "n": 1}'),
                                 k2_call("functions.math.sum:1", '{"xs": [1, 2]}'))
    events = parse("kimi_k2", [reply[i:i + 5] for i in range(0, len(reply), 5)], TOOLS,
                   template=template_source("Kimi-K2-Instruct.jinja"),
                   prompt_tail="<|im_assistant|>assistant<|im_middle|>")
    calls = [e for e in events if isinstance(e, ToolCallEndEvent)]
    assert [(c.name, c.id, dict(c.arguments)) for c in calls] == [
        ("t", "functions.t:0", {"text": "a", "n": 1}),
        ("math.sum", "functions.math.sum:1", {"xs": [1, 2]})]
    starts = [e.id for e in events if isinstance(e, ToolCallStartEvent)]
    assert starts == ["functions.t:0", "functions.math.sum:1"]


def test_k2_arguments_stream_as_json_text() -> None:
    arguments = '{"text": "' + "x" * 200 + '"}'
    reply = k2_section(k2_call("functions.t:3", arguments))
    events = parse("kimi_k2", [reply[i:i + 4] for i in range(0, len(reply), 4)], TOOLS,
                   template=template_source("Kimi-K2-Instruct.jinja"),
                   prompt_tail="<|im_assistant|>assistant<|im_middle|>")
    deltas = [e for e in events if isinstance(e, ToolCallDeltaEvent)]
    assert len(deltas) > 20 and {d.parameter for d in deltas} == {None}
    assert "".join(d.text for d in deltas) == arguments


def test_k2_call_id_without_the_functions_prefix() -> None:
    out = parse_text("kimi_k2", k2_section(k2_call("t:7", "{}")), TOOLS)
    assert [(c.name, c.id) for c in out.tool_calls] == [("t", "t:7")]


def test_k2_fallback_call_id_has_the_kimi_shape() -> None:
    assert kimi_call_id(4) == "functions.call:4"


def test_k2_thinking_reasoning_is_the_core_think_block() -> None:
    reply = "<think>check</think>Fine." + k2_section(k2_call("functions.t:0", '{"n": 2}'))
    out = parse_text("kimi_k2", reply, TOOLS, chunk=3,
                     template=template_source("Kimi-K2-Thinking.jinja"),
                     prompt_tail="<|im_assistant|>assistant<|im_middle|>")
    assert (out.reasoning, out.content) == ("check", "Fine.")


def test_k2_arguments_that_are_not_an_object_are_text_with_a_diagnostic() -> None:
    reply = k2_section(k2_call("functions.t:0", "[1, 2]"))
    out = parse_text("kimi_k2", reply, TOOLS)
    assert out.tool_calls == () and out.diagnostics[0].code == "malformed_arguments"
    assert "[1, 2]" in out.content


@pytest.mark.parametrize("name", K2_TEMPLATES)
@pytest.mark.parametrize("broken", ['{"text": "b" oops}', '{"text": "b",, "n": 1}', "[2]"])
def test_k2_a_call_with_broken_json_keeps_the_calls_after_it(name: str, broken: str) -> None:
    calls = [("t", {"text": "a"}), ("t", {"text": "b"}), ("math.sum", {"xs": [3]})]
    tail, reply = render(name, calls, TOOLS)
    bad = reply.replace('{"text": "b"}', broken, 1)
    assert bad != reply
    for chunk in (0, 1, 7):
        out = parse_text("kimi_k2", bad, TOOLS, chunk=chunk, template=template_source(name),
                         prompt_tail=tail)
        assert [(c.name, dict(c.arguments)) for c in out.tool_calls] == [
            ("t", {"text": "a"}), ("math.sum", {"xs": [3]})], chunk
        assert [d.code for d in out.diagnostics] == ["malformed_arguments"]
        assert broken in out.content and "xs" not in out.content  # the bad call is text
        assert "<|tool_calls_section" not in out.content  # the section's markers are markup


@pytest.mark.parametrize("name", K2_TEMPLATES)
def test_k2_an_empty_tool_section_is_not_text(name: str) -> None:
    tail, reply = render(name, [], TOOLS, content="No tools needed.")
    for chunk in (0, 1, 5):
        out = parse_text("kimi_k2", reply + k2_section(), TOOLS, chunk=chunk,
                         template=template_source(name), prompt_tail=tail)
        assert (out.content, out.tool_calls) == ("No tools needed.", ()), chunk
        assert [(d.code, d.raw) for d in out.diagnostics] == [("stray_markup", k2_section())]


# -- Kimi K3 ---------------------------------------------------------------------------


def k3_call(name: str, *arguments: tuple[str, str, str]) -> str:
    body = "".join(f'<|open|>argument key="{k}" type="{t}"<|sep|>{v}<|close|>argument<|sep|>'
                   for k, t, v in arguments)
    return f'<|open|>call tool="{name}" index="1"<|sep|>{body}<|close|>call<|sep|>'


def k3_reply(text: str, *calls: str, reasoning: str = "") -> str:
    return (f"{reasoning}<|close|>think<|sep|><|open|>response<|sep|>{text}"
            f"<|close|>response<|sep|><|open|>tools<|sep|>{''.join(calls)}<|close|>tools<|sep|>"
            "<|close|>message<|sep|><|end_of_msg|>")


def test_k3_typed_arguments_reasoning_and_response() -> None:
    reply = k3_reply("Here.", k3_call("t", ("text", "string", "5"), ("n", "number", "5"),
                                      ("opts", "object", '{"a": null}')), reasoning="think")
    out = parse_text("kimi_k3", reply, TOOLS, chunk=4, template=template_source(K3),
                     prompt_tail=K3_TAIL)
    assert (out.reasoning, out.content) == ("think", "Here.")
    assert [dict(c.arguments) for c in out.tool_calls] == [
        {"text": "5", "n": 5, "opts": {"a": None}}]


def test_k3_json_block_holds_all_arguments() -> None:
    call = ('<|open|>call tool="t" index="1"<|sep|><|open|>json type="object"<|sep|>'
            '{"text": "x", "n": 3}<|close|>json<|sep|><|close|>call<|sep|>')
    out = parse_text("kimi_k3", k3_reply("", call), TOOLS, chunk=2, template=template_source(K3),
                     prompt_tail=K3_TAIL)
    assert [dict(c.arguments) for c in out.tool_calls] == [{"text": "x", "n": 3}]


def test_k3_attribute_entities_are_decoded() -> None:
    call = k3_call("t", ("text", "string", "v"))
    out = parse_text("kimi_k3", k3_reply("", call.replace('key="text"', 'key="te&amp;xt"')),
                     TOOLS, template=template_source(K3), prompt_tail=K3_TAIL)
    assert dict(out.tool_calls[0].arguments) == {"te&xt": "v"}


def test_k3_a_key_holding_quotes_is_read_and_the_next_argument_stays_its_own() -> None:
    keys = ['say "hi"', "a & b", "<x>"]
    tools = [{"type": "function", "function": {"name": "t", "parameters": {
        "type": "object", "properties": {k: {"type": "string"} for k in [*keys, "last"]}}}}]
    arguments = {**{k: f"v{i}" for i, k in enumerate(keys)}, "last": "end"}
    tail, reply = render(K3, [("t", arguments)], tools)
    assert "&quot;" in reply
    for chunk in (0, 1, 5):
        out = parse_text("kimi_k3", reply, tools, chunk=chunk, template=template_source(K3),
                         prompt_tail=tail)
        assert [dict(c.arguments) for c in out.tool_calls] == [arguments], chunk
        assert out.diagnostics == ()


def test_k3_reply_without_tools_is_its_response_text() -> None:
    reply = ("ok<|close|>think<|sep|><|open|>response<|sep|>Just text.<|close|>response<|sep|>"
             "<|close|>message<|sep|><|end_of_msg|>")
    out = parse_text("kimi_k3", reply, TOOLS, chunk=1, template=template_source(K3),
                     prompt_tail=K3_TAIL)
    assert (out.reasoning, out.content, out.tool_calls) == ("ok", "Just text.", ())


@pytest.mark.parametrize(("family", "text"), [
    ("kimi_k2", "<|tool_calls_section_begin|>"),
    ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.t:0"),
    ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.t:0"
                "<|tool_call_argument_begin|>{\"a\": "),
    ("kimi_k2", "<|tool_call_end|> stray <|tool_calls_section_end|>"),
    ("kimi_k3", "<|open|>tools<|sep|><|open|>call tool=\"t\"<|sep|><|open|>argument key=\"x\""),
    ("kimi_k3", "<|open|>tools<|sep|>junk<|close|>tools<|sep|>"),
])
def test_bad_input_never_raises_and_never_loses_text(family: str, text: str) -> None:
    out = parse_text(family, text, TOOLS, chunk=2)
    assert out.tool_calls == ()
    assert re.sub(r"\s", "", out.content) == re.sub(r"\s", "", without_dropped(text, out))


def test_k3_an_answer_written_straight_after_the_prompt_opened_think_block_is_text() -> None:
    tail, _ = render(K3, [], TOOLS)
    assert tail.endswith("<|open|>think<|sep|>")  # the template's prompt opens the block
    _, turn = render(K3, [], TOOLS, content="Hello there.")
    answer = turn[turn.index("<|open|>response<|sep|>"):]  # a model that does not think
    for chunk in (0, 1, 4):
        out = parse_text("kimi_k3", answer, TOOLS, chunk=chunk, template=template_source(K3),
                         prompt_tail=tail)
        assert (out.reasoning, out.content) == ("", "Hello there."), chunk
    thought = parse_text("kimi_k3", "Think." + turn, TOOLS, template=template_source(K3),
                         prompt_tail=tail)
    assert (thought.reasoning, thought.content) == ("Think.", "Hello there.")
