"""The seed_xml parser (ByteDance Seed-OSS): conformance through the real template,
BFCL round trips, Python-literal values, literal tags in values, reasoning, bad input."""

from __future__ import annotations

import re
from typing import Any

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
)
from toolwire.events import ToolCallDeltaEvent
from toolwire.plugins import seed_xml
from toolwire.plugins.seed_xml import SEED_FORMAT

TEMPLATE = "ByteDance-Seed-OSS.jinja"
MARKERS = markers(SEED_FORMAT, "<seed:think>", "</seed:think>", "<seed:bos>", "<seed:eos>")
TOOLS = [{"type": "function", "function": {"name": "t", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}, "n": {"type": "integer"},
                                     "flag": {"type": "boolean"},
                                     "opts": {"type": "object"},
                                     "tags": {"type": "array", "items": {"type": "string"}}}}}}]


def call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in params.items())
    return f"<seed:tool_call>\n<function={name}>\n{body}</function>\n</seed:tool_call>"


@pytest.mark.kit
def test_conformance_through_the_seed_template() -> None:
    conformance(seed_xml, TEMPLATE, MARKERS)


def test_bfcl_ground_truth_calls_round_trip() -> None:
    assert bfcl_round_trip("seed_xml", TEMPLATE) > 800


@settings(max_examples=conformance_examples() * 2)
@given(data=st.data())
def test_values_holding_seed_tags_come_back_unchanged(data: st.DataObject) -> None:
    check_literal_markup("seed_xml", TEMPLATE, SEED_FORMAT, data, content_markers=MARKERS)


def test_python_literal_values_are_typed_by_the_schema() -> None:
    reply = call("t", text="True", n="3", flag="False", opts="{'a': [1, None, True], 'b': 'x\"y'}",
                 tags="['q', 'r']")
    out = parse_text("seed_xml", reply, TOOLS)
    assert [dict(c.arguments) for c in out.tool_calls] == [
        {"text": "True", "n": 3, "flag": False, "opts": {"a": [1, None, True], "b": 'x"y'},
         "tags": ["q", "r"]}]


def test_json_spellings_are_accepted_too() -> None:
    out = parse_text("seed_xml", call("t", flag="true", opts='{"a": null}'), TOOLS)
    assert dict(out.tool_calls[0].arguments) == {"flag": True, "opts": {"a": None}}


def test_value_is_kept_verbatim_on_its_line() -> None:
    text = "  two\nlines  "
    out = parse_text("seed_xml", call("t", text=text), TOOLS)
    assert out.tool_calls[0].arguments["text"] == text


def test_seed_think_block_is_reasoning_through_the_template() -> None:
    reply = "<seed:think>plan it</seed:think>\nSure." + "\n\n" + call("t", n="1")
    out = parse_text("seed_xml", reply, TOOLS, chunk=3, template=template_source(TEMPLATE),
                     prompt_tail="<seed:bos>assistant\n")
    assert (out.reasoning, out.content) == ("plan it", "Sure.")
    assert [dict(c.arguments) for c in out.tool_calls] == [{"n": 1}]


def test_seed_think_filter_leaves_other_families_alone() -> None:
    out = parse_text("glm_xml", "<seed:think>not mine</seed:think> text")
    assert out.reasoning == "" and "<seed:think>" in out.content


def test_string_value_streams_as_argument_deltas() -> None:
    reply = call("t", text="line 1\nline 2\nline 3")
    events = parse("seed_xml", [reply[i:i + 4] for i in range(0, len(reply), 4)], TOOLS,
                   template=template_source(TEMPLATE), prompt_tail="<seed:bos>assistant\n")
    deltas = [e for e in events if isinstance(e, ToolCallDeltaEvent)]
    assert len(deltas) > 3 and "".join(d.text for d in deltas) == "line 1\nline 2\nline 3"


def test_several_calls_in_one_turn() -> None:
    out = parse_text("seed_xml", call("t", n="1") + "\n" + call("t", n="2"), TOOLS)
    assert [(c.index, dict(c.arguments)) for c in out.tool_calls] == [(0, {"n": 1}),
                                                                      (1, {"n": 2})]


@pytest.mark.parametrize("text", [
    "<seed:tool_call>", "<seed:tool_call>\n<function=>", "<seed:tool_call>{\"name\": 1}",
    "<seed:tool_call>\n<function=t>\n<parameter=text>unclosed",
    "</seed:tool_call></function>", "<seed:tool_call>\n<function=t\n", "a <seed:tool_c",
    "<seed:tool_call>\n<function=t>\n<parameter=>x</parameter>\n</function>\n</seed:tool_call>",
])
def test_bad_input_never_raises_and_never_loses_text(text: str) -> None:
    out = parse_text("seed_xml", text, TOOLS, chunk=2)
    assert out.tool_calls == ()
    assert re.sub(r"\s", "", out.content) == re.sub(r"\s", "", without_dropped(text, out))


def test_call_cut_inside_a_value_is_text_with_a_diagnostic() -> None:
    text = "Hi " + call("t", text="unfinished value")[:-40]
    out = parse_text("seed_xml", text, TOOLS)
    assert out.tool_calls == () and out.diagnostics[0].code == "unclosed_call"
    assert re.sub(r"\s", "", out.content) == re.sub(r"\s", "", text)


def test_call_cut_after_a_complete_parameter_is_kept_with_a_diagnostic() -> None:
    text = call("t", text="x", n="2")[:-len("</function>\n</seed:tool_call>")]
    out = parse_text("seed_xml", text, TOOLS)
    assert _args(out) == [{"text": "x", "n": 2}]
    assert [d.code for d in out.diagnostics] == ["unclosed_call"]


def _args(out: Any) -> list[dict[str, Any]]:
    return [dict(c.arguments) for c in out.tool_calls]


def test_missing_section_close_at_the_end_keeps_the_call() -> None:
    reply = call("t", n="4")[:-len("</seed:tool_call>")]
    assert _args(parse_text("seed_xml", reply, TOOLS)) == [{"n": 4}]
