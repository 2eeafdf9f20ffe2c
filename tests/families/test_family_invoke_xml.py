"""The invoke-style XML parsers: minimax_xml (MiniMax-M2), minimax_m3 (nested-element
values), dsml (DeepSeek V3.2/V4/V4.1) and minicpm_xml (MiniCPM 5, CDATA values).

Conformance through every real template, BFCL round trips, literal tags in values,
each format's own value rules, reasoning, bad input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolwire
from tests.support.families import (
    all_of,
    conformance_examples,
    parse,
    parse_text,
    template_source,
    without,
    without_dropped,
)
from tests.support.families import plugins as tagged_plugins
from tests.support.tagged_families import (
    bfcl_round_trip,
    check_literal_markup,
    conformance,
    markers,
)
from toolwire.events import ToolCallDeltaEvent
from toolwire.parse.markers import valid_name
from toolwire.parse.values import decode_nested_value
from toolwire.plugins import invoke_xml
from toolwire.plugins.invoke_xml import (
    DSML_FORMAT,
    M2_FORMAT,
    M3_FORMAT,
    M3_TOKEN,
    MINICPM_FORMAT,
)
from toolwire.testing import check_parser
from toolwire.vocabulary.schema import resolve_ref, schema_types

M2 = "MiniMax-M2.jinja"
M3 = "MiniMax-M3.jinja"
DSML_TEMPLATES = ["deepseek-ai-DeepSeek-V3.2.jinja", "deepseek-ai-DeepSeek-V4.jinja",
                  "deepseek-ai-DeepSeek-V4-Flash-0731.jinja"]
MINICPM = "openbmb-MiniCPM5-1B.jinja"
THINK = ("<think>", "</think>")
M2_MARKERS = markers(M2_FORMAT, *THINK)
M3_MARKERS = markers(M3_FORMAT, "<mm:think>", "</mm:think>")
DSML_MARKERS = markers(DSML_FORMAT, *THINK)
MINICPM_MARKERS = markers(MINICPM_FORMAT, *THINK, "<![CDATA[", "]]>")
TOOLS = [{"type": "function", "function": {"name": "t", "parameters": {
    "type": "object", "properties": {
        "text": {"type": "string"}, "n": {"type": "integer"}, "flag": {"type": "boolean"},
        "point": {"type": "object", "properties": {"x": {"type": "number"},
                                                   "label": {"type": "string"}}},
        "tags": {"type": "array", "items": {"type": "string"}},
        "extra": {"type": "object"}}}}}]


# -- what MiniMax-M3's nested elements can carry -------------------------------------


def _looks_typed(text: str) -> bool:
    if text.strip() in ("True", "False", "None"):
        return True
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _m3_value_ok(value: Any, schema: Any, root: Any) -> bool:
    schema = resolve_ref(schema, root) if schema is not None else {}
    free = not schema_types(schema, root)
    if value is None:
        return False  # the template leaves None out
    if isinstance(value, Mapping):
        props = schema.get("properties", {}) if isinstance(schema, Mapping) else {}
        return bool(value) and all(
            valid_name(k) and k != "item" and M3_TOKEN not in k
            and _m3_value_ok(v, props.get(k) if isinstance(props, Mapping) else None, root)
            for k, v in value.items())
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema, Mapping) else None
        return bool(value) and all(_m3_value_ok(v, items, root) for v in value)
    if isinstance(value, str):
        return M3_TOKEN not in value and not (free and _looks_typed(value))
    return True


def m3_expressible(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
    """MiniMax-M3 writes nested values as elements: it drops ``None``, writes empty
    containers as nothing, and has no quotes to tell ``"5"`` from ``5`` where the
    schema does not say (free-form objects)."""
    params = schema["parameters"]
    props = params.get("properties", {})
    return all(_m3_value_ok(v, props.get(k), params) for k, v in arguments.items())


# -- conformance and BFCL ------------------------------------------------------------


@pytest.mark.kit
def test_conformance_through_the_minimax_m2_template() -> None:
    conformance(invoke_xml, M2, M2_MARKERS)


@pytest.mark.kit
def test_conformance_through_the_minimax_m3_template() -> None:
    conformance(invoke_xml, M3, M3_MARKERS,
                keep=all_of(without(M3_MARKERS), m3_expressible))


@pytest.mark.kit
@pytest.mark.parametrize("name", DSML_TEMPLATES)
def test_conformance_through_each_dsml_template(name: str) -> None:
    conformance(invoke_xml, name, DSML_MARKERS)


@pytest.mark.kit
def test_conformance_through_the_minicpm_template() -> None:
    conformance(invoke_xml, MINICPM, MINICPM_MARKERS)


@pytest.mark.parametrize(("family", "name"), [
    ("minimax_xml", M2), ("minimax_m3", M3), ("dsml", DSML_TEMPLATES[0]),
    ("dsml", DSML_TEMPLATES[1]), ("minicpm_xml", MINICPM)])
def test_bfcl_ground_truth_calls_round_trip(family: str, name: str) -> None:
    assert bfcl_round_trip(family, name, every=3) > 500


@settings(max_examples=conformance_examples() * 2)
@given(data=st.data())
def test_values_holding_invoke_tags_come_back_unchanged(data: st.DataObject) -> None:
    check_literal_markup("minimax_xml", M2, M2_FORMAT, data, content_markers=M2_MARKERS)


@settings(max_examples=conformance_examples() * 2)
@given(data=st.data())
def test_values_holding_dsml_tags_come_back_unchanged(data: st.DataObject) -> None:
    check_literal_markup("dsml", DSML_TEMPLATES[1], DSML_FORMAT, data,
                         content_markers=DSML_MARKERS)


@settings(max_examples=conformance_examples() * 2)
@given(data=st.data())
def test_values_holding_minicpm_tags_come_back_unchanged(data: st.DataObject) -> None:
    check_literal_markup("minicpm_xml", MINICPM, MINICPM_FORMAT, data,
                         keep=without(("]]>",)), content_markers=MINICPM_MARKERS)


# -- MiniMax-M2 ------------------------------------------------------------------------


def m2_call(name: str, **params: str) -> str:
    body = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params.items())
    return f'<minimax:tool_call>\n<invoke name="{name}">\n{body}</invoke>\n</minimax:tool_call>'


def test_minimax_m2_reference_conversion() -> None:
    reply = "Checking.\n" + m2_call("t", text="a <b> c", n="3", point='{"x": 1.5}')
    out = parse_text("minimax_xml", reply, TOOLS, chunk=4)
    assert out.content == "Checking."
    assert [dict(c.arguments) for c in out.tool_calls] == [
        {"text": "a <b> c", "n": 3, "point": {"x": 1.5}}]


def test_minimax_m2_several_invokes_share_one_section() -> None:
    reply = ('<minimax:tool_call>\n<invoke name="t">\n<parameter name="n">1</parameter>\n'
             '</invoke>\n<invoke name="t">\n<parameter name="n">2</parameter>\n</invoke>\n'
             '</minimax:tool_call>')
    out = parse_text("minimax_xml", reply, TOOLS, chunk=1)
    assert [c.arguments["n"] for c in out.tool_calls] == [1, 2]


# -- MiniMax-M3 ------------------------------------------------------------------------


def m3_call(name: str, body: str) -> str:
    ns = M3_TOKEN
    return (f"</mm:think>{ns}<tool_call>\n{ns}<invoke name=\"{name}\">{body}{ns}</invoke>\n"
            f"{ns}</tool_call>")


def test_minimax_m3_nested_elements_are_typed_by_the_schema() -> None:
    ns = M3_TOKEN
    body = (f"{ns}<n>7{ns}</n>{ns}<point>{ns}<x>2.5{ns}</x>{ns}<label>7{ns}</label>{ns}</point>"
            f"{ns}<tags>{ns}<item>a{ns}</item>{ns}<item>true{ns}</item>{ns}</tags>")
    out = parse_text("minimax_m3", m3_call("t", body), TOOLS, chunk=3,
                     template=template_source(M3), prompt_tail="]~b]ai\n")
    assert [dict(c.arguments) for c in out.tool_calls] == [
        {"n": 7, "point": {"x": 2.5, "label": "7"}, "tags": ["a", "true"]}]


def test_minimax_m3_free_form_values_read_items_as_lists() -> None:
    ns = M3_TOKEN
    raw = f"{ns}<a>{ns}<item>1{ns}</item>{ns}<item>x{ns}</item>{ns}</a>{ns}<b>false{ns}</b>"
    assert decode_nested_value(raw, ns, {"type": "object"}) == {"a": [1, "x"], "b": False}


def test_minimax_m3_a_parameter_named_like_an_inner_key_nests_correctly() -> None:
    ns = M3_TOKEN
    body = f"{ns}<extra>{ns}<extra>{ns}<extra>5{ns}</extra>{ns}</extra>{ns}</extra>"
    out = parse_text("minimax_m3", m3_call("t", body), TOOLS, template=template_source(M3),
                     prompt_tail="]~b]ai\n")
    assert dict(out.tool_calls[0].arguments) == {"extra": {"extra": {"extra": 5}}}


def test_minimax_m3_reasoning_and_the_lone_closing_tag() -> None:
    source = template_source(M3)
    thought = parse_text("minimax_m3", "<mm:think>why</mm:think>Yes.", TOOLS, chunk=2,
                         template=source, prompt_tail="]~b]ai\n")
    assert (thought.reasoning, thought.content) == ("why", "Yes.")
    direct = parse_text("minimax_m3", "</mm:think>Yes.", TOOLS, chunk=2, template=source,
                        prompt_tail="]~b]ai\n")
    assert (direct.reasoning, direct.content) == ("", "Yes.")


def test_minimax_m3_string_parameter_streams() -> None:
    ns = M3_TOKEN
    reply = m3_call("t", f"{ns}<text>" + "abcd" * 20 + f"{ns}</text>")
    events = parse("minimax_m3", [reply[i:i + 4] for i in range(0, len(reply), 4)], TOOLS,
                   template=template_source(M3), prompt_tail="]~b]ai\n")
    deltas = [e for e in events if isinstance(e, ToolCallDeltaEvent)]
    assert len(deltas) > 10 and "".join(d.text for d in deltas) == "abcd" * 20


# -- DSML ------------------------------------------------------------------------------


def dsml_call(section: str, name: str, *params: tuple[str, str, str]) -> str:
    d = "｜DSML｜"
    body = "".join(f'<{d}parameter name="{k}" string="{s}">{v}</{d}parameter>\n'
                   for k, s, v in params)
    return f'<{d}{section}>\n<{d}invoke name="{name}">\n{body}</{d}invoke>\n</{d}{section}>'


@pytest.mark.parametrize("section", ["function_calls", "tool_calls"])
def test_dsml_string_flag_decides_text_or_json(section: str) -> None:
    reply = dsml_call(section, "t", ("text", "true", "[1, 2]"), ("n", "false", "4"),
                      ("extra", "false", '{"k": [true, null]}'))
    out = parse_text("dsml", reply, TOOLS, chunk=3)
    assert [dict(c.arguments) for c in out.tool_calls] == [
        {"text": "[1, 2]", "n": 4, "extra": {"k": [True, None]}}]


def test_dsml_reasoning_through_the_v4_template() -> None:
    reply = "weigh it</think>Here." + dsml_call("tool_calls", "t", ("n", "false", "1"))
    out = parse_text("dsml", reply, TOOLS, chunk=5, template=template_source(DSML_TEMPLATES[1]),
                     prompt_tail="<｜Assistant｜><think>")
    assert (out.reasoning, out.content) == ("weigh it", "Here.")
    assert [dict(c.arguments) for c in out.tool_calls] == [{"n": 1}]


# -- MiniCPM ---------------------------------------------------------------------------


def test_minicpm_cdata_values_are_unwrapped_and_streamed() -> None:
    value = "line <1>\n& line </param> 2"
    reply = (f'<function name="t"><param name="text"><![CDATA[{value}]]></param>'
             '<param name="flag">True</param><param name="tags">[\'a\', \'b\']</param>'
             "</function>")
    events = parse("minicpm_xml", [reply[i:i + 3] for i in range(0, len(reply), 3)], TOOLS,
                   template=template_source(MINICPM), prompt_tail="<|im_start|>assistant\n")
    deltas = "".join(e.text for e in events if isinstance(e, ToolCallDeltaEvent))
    assert deltas == value
    out = parse_text("minicpm_xml", reply, TOOLS)
    assert [dict(c.arguments) for c in out.tool_calls] == [
        {"text": value, "flag": True, "tags": ["a", "b"]}]


def test_minicpm_function_tag_in_prose_is_text() -> None:
    text = 'Use <function> tags or <function=x> here, <function name="unclosed'
    out = parse_text("minicpm_xml", text, TOOLS, chunk=2)
    assert out.tool_calls == () and out.content == text


# -- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(("family", "text"), [
    ("minimax_xml", "<minimax:tool_call>"), ("minimax_xml", '<minimax:tool_call><invoke x="t">'),
    ("minimax_xml", '<minimax:tool_call><invoke name="t"><parameter name="text">cut'),
    ("minimax_m3", M3_TOKEN + "<tool_call>" + M3_TOKEN + "<invoke name=\"t\">" + M3_TOKEN + "<a>"),
    ("minimax_m3", M3_TOKEN + "</tool_call>" + M3_TOKEN),
    ("dsml", "<｜DSML｜tool_calls><｜DSML｜invoke name=\"t\"><｜DSML｜parameter string=\"x\">"),
    ("dsml", "</｜DSML｜invoke></｜DSML｜tool_calls>"),
    ("minicpm_xml", '<function name="t"><param name="text"><![CDATA[never closed'),
    ("minicpm_xml", '<function name="t"><param name="n">1</param>junk</function>'),
])
def test_bad_input_never_raises_and_never_loses_text(family: str, text: str) -> None:
    out = parse_text(family, text, TOOLS, chunk=2)
    assert out.tool_calls == ()
    assert re.sub(r"\s", "", out.content) == re.sub(r"\s", "", without_dropped(text, out))


# -- DeepSeek V4.1's DSML spelling --------------------------------------------------------

V41_TEMPLATE = Path(__file__).parent / "templates" / "dsml-v4.1-style.jinja"
V41_REPLY = ('Checking.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="t">\n'
             '<｜DSML｜ parameter name="text" string="true">a <b> c</｜DSML｜ parameter>\n'
             '<｜DSML｜ parameter name="n" string="false">3</｜DSML｜ parameter>\n'
             '</｜DSML｜ invoke>\n</｜DSML｜ calls>')


def test_selection_picks_dsml_for_a_template_in_the_v41_spelling() -> None:
    choice = toolwire.select_parser(V41_TEMPLATE.read_text(encoding="utf-8"),
                                    tagged_plugins())
    assert choice.spec.name == "dsml"
    assert [(c.family, c.outcome) for c in choice.checks] == [("dsml", "verified")]


@pytest.mark.kit
def test_conformance_through_a_template_in_the_v41_spelling() -> None:
    check_parser(invoke_xml, V41_TEMPLATE, examples=conformance_examples(), family="dsml",
                 plugins=tagged_plugins(), seed=1234)


@pytest.mark.parametrize(("section", "tag"), [(" calls", " "), ("tool_calls", ""),
                                              ("function_calls", "")])
def test_every_dsml_spelling_is_read_in_any_chunking(section: str, tag: str) -> None:
    reply = V41_REPLY.replace("｜DSML｜ calls", f"｜DSML｜{section}").replace(
        "｜DSML｜ invoke", f"｜DSML｜{tag}invoke").replace(
        "｜DSML｜ parameter", f"｜DSML｜{tag}parameter")
    for chunk in (0, 1, 4):
        got = parse_text("dsml", reply, TOOLS, chunk=chunk)
        assert [(c.name, dict(c.arguments)) for c in got.tool_calls] == \
            [("t", {"text": "a <b> c", "n": 3})], (chunk, reply)
        assert (got.content, got.diagnostics) == ("Checking.", ())
