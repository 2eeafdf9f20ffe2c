"""The hermes_json parser: reference conversions, tolerated drifts, bad input, detection over
every real template, conformance through each Hermes template, and BFCL round trips."""

from __future__ import annotations

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
    cases_without_nullable_list_types,
    check_garbage,
    conformance,
    render_turn,
    selected_family,
    strip_blanks,
    template_names,
)
from toolwire import merge_events
from toolwire.events import (
    ReasoningEvent,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from toolwire.parse.engine import CallParser
from toolwire.plugins import hermes_json
from toolwire.plugins.hermes_json import HERMES_FORMAT
from toolwire.testing import AssistantTurnRenderer

FAMILY = "hermes_json"
TEMPLATES = [
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
    "Qwen-Qwen2.5-7B-Instruct.jinja",
    "Qwen-QwQ-32B.jinja",
    "Qwen-Qwen3-0.6B.jinja",
    "ibm-granite-granite-4.0.jinja",
    "ibm-granite-granite-4.1.jinja",
    "MiMo-VL.jinja",
    "Bielik-11B-v3.0-Instruct.jinja",
    "Reka-Edge.jinja",
]
WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}}}}}]


def call(name: str, arguments: str, key: str = "arguments") -> str:
    return f'<tool_call>\n{{"name": "{name}", "{key}": {arguments}}}\n</tool_call>'


def parse_reply(text: str, chunk: int = 0, **kwargs: Any) -> dict[str, Any]:
    return parse_text(FAMILY, text, WEATHER, chunk, **kwargs).to_dict()


# -- reference conversions -----------------------------------------------------------


def test_a_call_after_text_has_typed_json_arguments() -> None:
    out = parse_reply("Let me check.\n" + call("get_weather", '{"city": "Paris", "days": 3}'))
    assert out["content"] == "Let me check."
    assert out["tool_calls"] == [{"name": "get_weather",
                                  "arguments": {"city": "Paris", "days": 3}}]
    assert out["diagnostics"] == []


def test_several_blocks_are_several_calls_in_order() -> None:
    reply = call("a", "{}") + "\n" + call("b", '{"x": [1, {"y": null}]}')
    out = parse_reply(reply, chunk=3)
    assert out["tool_calls"] == [{"name": "a", "arguments": {}},
                                 {"name": "b", "arguments": {"x": [1, {"y": None}]}}]


def test_arguments_stream_as_json_deltas_between_start_and_call() -> None:
    args = '{"city": "Paris", "note": "a long value that arrives in many pieces"}'
    reply = call("get_weather", args)
    parser = CallParser(HERMES_FORMAT, {})
    events = [e for i in range(0, len(reply), 4) for e in parser.feed(reply[i:i + 4])]
    events += parser.close()
    deltas = [e for e in events if isinstance(e, ToolCallDeltaEvent)]
    assert len(deltas) > 5
    assert all(d.parameter is None for d in deltas)
    assert "".join(d.text for d in deltas) == args
    kinds = [type(e) for e in events if not isinstance(e, TextEvent)]
    assert kinds[0] is ToolCallStartEvent and kinds[-1] is ToolCallEndEvent


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 7])
def test_an_escaped_json_string_streams_whole_and_decodes_in_any_deltas(chunk: int) -> None:
    # deltas holding escapes (but not ending inside one) take the reader's plain path
    args = r'{"path": "a.c", "content": "if (a[i] < b) {\n\tx = \"y\\\";\u00e9\n}"}'
    reply = call("write_file", args)
    parser = CallParser(HERMES_FORMAT, {})
    events = [e for i in range(0, len(reply), chunk) for e in parser.feed(reply[i:i + chunk])]
    events += parser.close()
    assert "".join(e.text for e in events if isinstance(e, ToolCallDeltaEvent)) == args
    (end,) = [e for e in events if isinstance(e, ToolCallEndEvent)]
    assert end.arguments == {"path": "a.c", "content": 'if (a[i] < b) {\n\tx = "y\\";\u00e9\n}'}
    assert merge_events(events) == merge_events(_events_of_the_whole_reply(reply))


def _events_of_the_whole_reply(reply: str) -> list[Any]:
    parser = CallParser(HERMES_FORMAT, {})
    return parser.feed(reply) + parser.close()


def test_text_after_the_calls_is_text() -> None:
    out = parse_reply(call("a", "{}") + "\n\nDone.")
    assert out["content"] == "Done."


def test_qwen3_think_block_is_reasoning() -> None:
    template = template_source("Qwen-Qwen3-0.6B.jinja")
    reply = "<think>\nweather first\n</think>\n\n" + call("get_weather", '{"city": "Oslo"}')
    out = parse_text(FAMILY, reply, WEATHER, 5, template=template,
                     prompt_tail="<|im_start|>assistant\n").to_dict()
    assert out["reasoning"] == "weather first"
    assert out["tool_calls"] == [{"name": "get_weather", "arguments": {"city": "Oslo"}}]


def test_reply_beginning_inside_an_open_think_block() -> None:
    events = parse(FAMILY, ["still thinking </th", "ink>\n\nanswer"],
                   template=template_source("Qwen-QwQ-32B.jinja"),
                   prompt_tail="<|im_start|>assistant\n<think>\n")
    assert merge_events(events) == [ReasoningEvent("still thinking"), TextEvent("answer")]


# -- tolerated drifts ------------------------------------------------------------------


def test_parameters_key_is_read_as_arguments() -> None:
    out = parse_reply(call("get_weather", '{"city": "Rome"}', key="parameters"))
    assert out["tool_calls"][0]["arguments"] == {"city": "Rome"}


def test_arguments_encoded_as_a_json_string_are_decoded() -> None:
    out = parse_reply(call("get_weather", '"{\\"city\\": \\"Rome\\", \\"days\\": 2}"'))
    assert out["tool_calls"][0]["arguments"] == {"city": "Rome", "days": 2}


def test_arguments_before_the_name() -> None:
    out = parse_reply('<tool_call>\n{"arguments": {"city": "Rome"}, "name": "get_weather"}\n'
                      "</tool_call>", chunk=2)
    assert out["tool_calls"] == [{"name": "get_weather", "arguments": {"city": "Rome"}}]


def test_a_list_of_calls_in_one_block() -> None:
    reply = '<tool_call>\n[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]' \
            "\n</tool_call>"
    assert [c["name"] for c in parse_reply(reply)["tool_calls"]] == ["a", "b"]


def test_several_objects_in_one_block() -> None:
    reply = '<tool_call>\n{"name": "a", "arguments": {}}\n{"name": "b", "arguments": {}}\n' \
            "</tool_call>"
    assert [c["name"] for c in parse_reply(reply)["tool_calls"]] == ["a", "b"]


def test_missing_close_tag_at_the_end_of_the_reply() -> None:
    out = parse_reply('<tool_call>\n{"name": "a", "arguments": {"k": 1}}')
    assert out["tool_calls"] == [{"name": "a", "arguments": {"k": 1}}]
    assert out["diagnostics"] == []


def test_missing_final_brace_before_the_close_tag_is_repaired() -> None:
    out = parse_reply('<tool_call>\n{"name": "a", "arguments": {"k": 1}\n</tool_call>',
                      chunk=1)
    assert out["tool_calls"] == [{"name": "a", "arguments": {"k": 1}}]
    assert [d["code"] for d in out["diagnostics"]] == ["repaired_call"]
    assert out["content"] == ""


def test_missing_arguments_mean_no_arguments() -> None:
    out = parse_reply('<tool_call>\n{"name": "ping"}\n</tool_call>')
    assert out["tool_calls"] == [{"name": "ping", "arguments": {}}]


def test_raw_newlines_inside_json_strings_are_accepted() -> None:
    out = parse_reply('<tool_call>\n{"name": "a", "arguments": {"code": "x = 1\ny = 2"}}\n'
                      "</tool_call>")
    assert out["tool_calls"][0]["arguments"] == {"code": "x = 1\ny = 2"}


# -- what is not a call -------------------------------------------------------------------


def test_qwen_xml_inside_tool_call_tags_is_text_with_a_diagnostic() -> None:
    reply = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n" \
            "</function>\n</tool_call>"
    out = parse_reply(reply)
    assert out["tool_calls"] == []
    assert out["diagnostics"][0]["code"] == "xml_in_tool_call"
    assert strip_blanks(out["content"]) == strip_blanks(reply)


def test_arguments_that_are_not_an_object_make_a_malformed_call() -> None:
    out = parse_reply('<tool_call>\n{"name": "a", "arguments": [1, 2]}\n</tool_call>')
    assert out["tool_calls"] == []
    assert out["diagnostics"][0]["code"] == "malformed_call"


def test_unclosed_call_at_the_end_is_text_with_a_diagnostic() -> None:
    reply = 'Sure <tool_call>\n{"name": "a", "arguments": {"k": "unfinish'
    out = parse_reply(reply, chunk=7)
    assert out["tool_calls"] == []
    assert out["diagnostics"][0]["code"] == "unclosed_call"
    assert out["content"] == reply


def test_partial_tag_is_held_back_until_resolved() -> None:
    parser = CallParser(HERMES_FORMAT, {})
    assert merge_events(parser.feed("abc <tool_c")) == [TextEvent("abc")]
    assert merge_events(parser.feed("at")) == [TextEvent(" <tool_cat")]


@pytest.mark.parametrize("text", [
    "<tool_call><tool_call></tool_call>", "</tool_call>", "<tool_call>{", "<tool_call>{}",
    '<tool_call>{"name": 5, "arguments": {}}</tool_call>', "<tool_call>" * 30,
    '<tool_call>{"name": "a", "arguments": {}]</tool_call>', "\x00\xff<\udcff>",
    '<tool_call>{"name": "a", "arguments": {"x": tru}}</tool_call>', '<tool_call>["a"]',
    '<tool_call>{"name": "a", "arguments": ' + "[" * 2000 + "]" * 2000 + "}</tool_call>",
])
def test_bad_input_never_raises_and_never_loses_text(text: str) -> None:
    out = parse_reply(text, chunk=3)
    assert out["tool_calls"] == []
    assert strip_blanks(out["content"]) == strip_blanks(without_dropped(text, out))


def test_huge_argument_is_read_in_one_pass() -> None:
    content = "x = '<tool_call>' * 3  # \"quoted\" \\ backslash\n" * 100_000
    import json

    reply = call("write", json.dumps({"path": "big.py", "content": content}))
    out = parse_reply(reply, chunk=4096)
    assert out["tool_calls"][0]["arguments"]["content"] == content


@given(data=st.data())
def test_garbage_never_raises_and_chunking_does_not_matter(data: st.DataObject) -> None:
    check_garbage(FAMILY, ("<tool_call>", "</tool_call>", '{"name":', '"arguments":'), data)


# -- detection over every real template ---------------------------------------------------


@pytest.mark.parametrize("name", template_names())
def test_detection_table(name: str) -> None:
    mine = name in TEMPLATES
    assert (hermes_json.detect(template_source(name)) > 0) == mine
    if mine:
        assert selected_family(name) == FAMILY


# -- conformance through every Hermes template --------------------------------------------


RECURSING_ON_NULLABLE_TYPES = {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
                               "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"}
LEARNT_MARKERS = ("<|im_start|>assistant", "<tool_call>", '{"name":', '"arguments":',
                  "</tool_call>")


# check_parser tests ``tools_strategy or default``, which hypothesis warns about
@pytest.mark.kit
@pytest.mark.filterwarnings("ignore:bool.*is always True:hypothesis.errors.HypothesisWarning")
@pytest.mark.parametrize("name", TEMPLATES)
def test_conformance(name: str) -> None:
    strategy = cases_without_nullable_list_types(LEARNT_MARKERS) \
        if name in RECURSING_ON_NULLABLE_TYPES else None
    report = conformance(hermes_json, name, tools_strategy=strategy)
    assert report.family == FAMILY and report.passed


# -- BFCL round trip ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["simple_python", "parallel_multiple"])
def test_bfcl_round_trip_through_qwen25(kind: str) -> None:
    source = template_source("Qwen-Qwen2.5-7B-Instruct.jinja")
    renderer = AssistantTurnRenderer(source)
    spec = plugins().parser(FAMILY)
    for tools, calls in bfcl_sample(kind, every=2):
        reply = render_turn(renderer, calls, tools)
        events = parse(FAMILY, [reply.text[i:i + 7] for i in range(0, len(reply.text), 7)],
                       tools, template=source, prompt_tail=reply.prompt_tail)
        got = [(e.name, e.arguments) for e in events if isinstance(e, ToolCallEndEvent)]
        assert canonical_calls(got) == canonical_calls(calls), reply.text
        assert spec.name == FAMILY
