"""The glm_xml parser (GLM-4.5/4.6/4.7, Poolside Laguna) and hy3_xml (Tencent Hy3):
conformance through every real template, BFCL round trips, literal tags in values,
newline and no-newline layouts, reasoning, bad input."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.families import (
    conformance_examples,
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
from toolwire.plugins import glm_xml
from toolwire.plugins.glm_xml import GLM_FORMAT, HY3_FORMAT

GLM_TEMPLATES = ["GLM-4.6.jinja", "GLM-4.7-Flash.jinja", "poolside-Laguna-S-2.1.jinja",
                 "poolside-Laguna-XS-2.1.jinja", "poolside-Laguna-XS.2.jinja"]
HY3 = "tencent-Hy3.jinja"
GLM_MARKERS = markers(GLM_FORMAT, "<think>", "</think>")
HY3_MARKERS = markers(HY3_FORMAT, "<think:opensource>", "</think:opensource>")
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"},
                                     "exact": {"type": "boolean"},
                                     "filters": {"type": "object"}}}}}]


def glm_call(name: str, newlines: bool = True, **params: str) -> str:
    sep = "\n" if newlines else ""
    body = "".join(f"<arg_key>{k}</arg_key>{sep}<arg_value>{v}</arg_value>{sep}"
                   for k, v in params.items())
    return f"<tool_call>{name}{sep}{body}</tool_call>"


@pytest.mark.kit
@pytest.mark.parametrize("name", GLM_TEMPLATES)
def test_conformance_through_each_glm_template(name: str) -> None:
    conformance(glm_xml, name, GLM_MARKERS)


@pytest.mark.kit
def test_conformance_through_the_hy3_template() -> None:
    conformance(glm_xml, HY3, HY3_MARKERS)


@pytest.mark.parametrize(("family", "name"), [("glm_xml", "GLM-4.6.jinja"),
                                              ("glm_xml", "GLM-4.7-Flash.jinja"),
                                              ("hy3_xml", HY3)])
def test_bfcl_ground_truth_calls_round_trip(family: str, name: str) -> None:
    assert bfcl_round_trip(family, name, every=3) > 500


@settings(max_examples=conformance_examples() * 2)
@given(data=st.data())
def test_values_holding_glm_tags_come_back_unchanged(data: st.DataObject) -> None:
    check_literal_markup("glm_xml", "GLM-4.7-Flash.jinja", GLM_FORMAT, data,
                         content_markers=GLM_MARKERS)


@settings(max_examples=conformance_examples() * 2)
@given(data=st.data())
def test_values_holding_hy3_tags_come_back_unchanged(data: st.DataObject) -> None:
    check_literal_markup("hy3_xml", HY3, HY3_FORMAT, data, content_markers=HY3_MARKERS)


@pytest.mark.parametrize("value", ["<tool_calls:opensource><tool_calls:opensource>",
                                   "<tool_call:opensource>x", "a<tool_calls:opensource>b"])
def test_unclosed_section_openers_in_a_value_before_the_turns_end_token(value: str) -> None:
    # found by hypothesis: the blocks a value opens were closed by the call's and the
    # section's own closers, and the end-of-turn token after them read as more value
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string"}}}}}]
    tail, reply = render(HY3, [("f", {"a": value})], tools)
    assert reply.endswith(HY3_FORMAT.trailers[0]), reply
    for chunk in (1, 3, len(reply)):
        out = parse_text("hy3_xml", reply, tools, chunk=chunk, template=template_source(HY3),
                         prompt_tail=tail)
        assert [(c.name, dict(c.arguments)) for c in out.tool_calls] == [("f", {"a": value})]
        assert out.content == "" and not out.diagnostics, (chunk, out)


@pytest.mark.parametrize("newlines", [True, False])
def test_reference_conversion_with_and_without_newlines(newlines: bool) -> None:
    reply = "Looking.\n" + glm_call("search", newlines, query="alex", limit="10", exact="true",
                                    filters='{"tag": [1, null]}')
    out = parse_text("glm_xml", reply, TOOLS, chunk=5)
    assert out.content == "Looking."
    assert [dict(c.arguments) for c in out.tool_calls] == [
        {"query": "alex", "limit": 10, "exact": True, "filters": {"tag": [1, None]}}]


def test_python_spelling_of_booleans_is_accepted() -> None:
    out = parse_text("glm_xml", glm_call("search", exact="True"), TOOLS)
    assert out.tool_calls[0].arguments["exact"] is True


def test_call_without_arguments() -> None:
    out = parse_text("glm_xml", "<tool_call>search</tool_call>", TOOLS)
    assert [(c.name, dict(c.arguments)) for c in out.tool_calls] == [("search", {})]


def test_several_calls_back_to_back() -> None:
    reply = glm_call("search", False, query="a") + glm_call("search", False, query="b")
    out = parse_text("glm_xml", reply, TOOLS, chunk=1)
    assert [c.arguments["query"] for c in out.tool_calls] == ["a", "b"]


def test_reasoning_before_the_call_through_the_glm_template() -> None:
    reply = "plan</think>Answer." + glm_call("search", False, query="q")
    out = parse_text("glm_xml", reply, TOOLS, chunk=4,
                     template=template_source("GLM-4.7-Flash.jinja"),
                     prompt_tail="<|assistant|><think>")
    assert (out.reasoning, out.content) == ("plan", "Answer.")
    assert len(out.tool_calls) == 1


def test_hy3_reference_conversion_drops_the_end_of_sentence_token() -> None:
    reply = ("<think:opensource>hmm</think:opensource>Sure.<tool_calls:opensource>\n"
             "<tool_call:opensource>search<tool_sep:opensource>\n"
             "<arg_key:opensource>query</arg_key:opensource>\n"
             "<arg_value:opensource>x</arg_value:opensource>\n"
             "<arg_key:opensource>limit</arg_key:opensource>\n"
             "<arg_value:opensource>2</arg_value:opensource>\n"
             "</tool_call:opensource>\n</tool_calls:opensource><｜hy_eos:opensource｜>")
    out = parse_text("hy3_xml", reply, TOOLS, chunk=3, template=template_source(HY3),
                     prompt_tail="<｜hy_Assistant:opensource｜>")
    assert (out.reasoning, out.content) == ("hmm", "Sure.")
    assert [dict(c.arguments) for c in out.tool_calls] == [{"query": "x", "limit": 2}]


def test_json_inside_tool_call_tags_is_not_a_call() -> None:
    reply = 'Ok.\n<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>'
    out = parse_text("glm_xml", reply, TOOLS)
    assert out.tool_calls == () and out.diagnostics[0].code == "json_in_tool_call"
    assert '{"name": "search"' in out.content


@pytest.mark.parametrize("text", [
    "<tool_call>", "<tool_call>search<arg_key>query</arg_key>oops</tool_call>",
    "<tool_call>search<arg_key>query</arg_key><arg_value>unclosed",
    "</arg_value></tool_call>", "<tool_call>\n\n", "x <tool_ca", "<arg_key>a</arg_key>",
    "<tool_call>search<arg_key></arg_key><arg_value>v</arg_value></tool_call>",
])
def test_bad_input_never_raises_and_never_loses_text(text: str) -> None:
    out = parse_text("glm_xml", text, TOOLS, chunk=2)
    assert out.tool_calls == ()
    assert re.sub(r"\s", "", out.content) == re.sub(r"\s", "", without_dropped(text, out))


def test_a_value_holding_a_closing_tag_followed_by_text_stays_whole() -> None:
    value = "a</arg_value> still the value </tool_call> too"
    out = parse_text("glm_xml", glm_call("search", query=value, limit="1"), TOOLS, chunk=1)
    assert dict(out.tool_calls[0].arguments) == {"query": value, "limit": 1}
