"""The json_wrappers plugin: one parser spec per wrapper format (Nemotron Nano v2, Apriel,
MiniMax-M1, FireFunction v2, Apertus, Command R7B / Cohere2, Command R+, Functionary
v3.1 / v3.2, GigaChat 3 / 3.1), their reasoning filters, detection, conformance and
BFCL round trips.

Limits recorded here (each template below that the conformance renderer cannot
drive is checked by the harness in ``tests.support.json_families`` instead):

* the conformance suite learns markers by splitting rendered markup on blanks, so
  markers that touch JSON (``functools[{"name":``, ``<|tools_prefix|>[{"``) come out
  glued; every run is given the format's real markup;
* ``NVIDIA-Nemotron-Nano-v2`` renders the content of a tool-call turn as a turn of
  its own inside an unclosed ``<think>``: the harness cuts the call turn, without
  content;
* ``command-r7b`` appends the generation header after every conversation, so a turn
  cannot be cut out as a difference of renders;
* ``command-r-plus`` reads a ``description`` of every parameter, which the
  conformance probes lack (the harness adds descriptions); its ``indent`` filter
  rewrites U+0085, U+2028 and U+2029 inside string values, so values avoid them;
* ``functionary-v3.2`` needs JSON-string arguments; its content cannot end with
  ``>`` (``>>>`` would then be read one character early) nor with ``<|eot_id|``;
* GigaChat 3 / 3.1 render only the first call of a turn (``parallel_calls`` skipped).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.families import (
    JSON_PLUGINS,
    bfcl_sample,
    canonical_calls,
    parse,
    parse_text,
    template_source,
    without_dropped,
)
from tests.support.json_families import (
    TurnCut,
    check_cut_round_trip,
    check_garbage,
    conformance,
    render_cut,
    render_turn,
    selected_family,
    strip_blanks,
    template_names,
)
from toolwire import merge_events
from toolwire.events import ReasoningEvent, TextEvent, ToolCallDeltaEvent, ToolCallEndEvent
from toolwire.hooks.manager import PluginManager
from toolwire.parse.engine import CallParser
from toolwire.plugins import json_wrappers
from toolwire.plugins.json_wrappers import FORMATS
from toolwire.testing import AssistantTurnRenderer

FORMAT = {fmt.family: fmt for fmt in FORMATS}
MARKUP: dict[str, tuple[str, ...]] = {
    "nemotron_nano_v2": ("<TOOLCALL>", "</TOOLCALL>", "<SPECIAL_12>", "<SPECIAL_11>",
                         "<think>", "</think>"),
    "apriel": ("<tool_calls>", "</tool_calls>", "[BEGIN FINAL RESPONSE]",
               "[END FINAL RESPONSE]", "Here are my reasoning steps:", "<|begin_assistant|>",
               "<|assistant|>", "<|end|>"),
    "minimax_m1": ("<tool_calls>", "</tool_calls>", "<end_of_sentence>",
                   "<beginning_of_sentence>"),
    "firefunction_v2": ("functools[", "<|eot_id|>", "<|start_header_id|>"),
    "apertus": ("<|tools_prefix|>", "<|tools_suffix|>", "<|assistant_start|>",
                "<|assistant_end|>", "<|inner_prefix|>", "<|inner_suffix|>"),
    "command_r7b": ("<|START_ACTION|>", "<|END_ACTION|>", "<|START_THINKING|>",
                    "<|END_THINKING|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>",
                    "<|END_OF_TURN_TOKEN|>", "<|START_OF_TURN_TOKEN|>", "<|CHATBOT_TOKEN|>"),
    "command_r_plus": ("Action:", "```", "<|END_OF_TURN_TOKEN|>", "<|START_OF_TURN_TOKEN|>"),
    "functionary_v3_1": ("<function=", "</function>", "<|eom_id|>", "<|eot_id|>",
                         "<|python_tag|>", "<|start_header_id|>"),
    "functionary_v3_2": (">>>", "<|eot_id|>", "<|start_header_id|>"),
    "gigachat": ("function call<|role_sep|>", "<|function_call|>", "<|message_sep|>",
                 "<|role_sep|>"),
}
CONFORMANCE_TEMPLATES: dict[str, str] = {
    "Apriel-1.6-15b-Thinker-fixed.jinja": "apriel",
    "unsloth-Apriel-1.5.jinja": "apriel",
    "MiniMax-M1.jinja": "minimax_m1",
    "fireworks-ai-llama-3-firefunction-v2.jinja": "firefunction_v2",
    "Apertus-8B-Instruct.jinja": "apertus",
    "Cohere2MoE.jinja": "command_r7b",
    "meetkai-functionary-medium-v3.1.jinja": "functionary_v3_1",
    "GigaChat3-10B-A1.8B.jinja": "gigachat",
    "GigaChat3.1-10B-A1.8B.jinja": "gigachat",
}
CUTS: dict[str, TurnCut] = {cut.template: cut for cut in (
    TurnCut("NVIDIA-Nemotron-Nano-v2.jinja", "nemotron_nano_v2", "<SPECIAL_11>Assistant\n",
            "<SPECIAL_12>", reason="content goes to a turn of its own inside an open <think>",
            markers=MARKUP["nemotron_nano_v2"], content=False),
    TurnCut("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "command_r7b",
            "<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>",
            reason="the generation header is appended to every conversation",
            markers=MARKUP["command_r7b"], content=False),
    TurnCut("CohereForAI-c4ai-command-r-plus-tool_use.jinja", "command_r_plus",
            "<|CHATBOT_TOKEN|>", "<|START_OF_TURN_TOKEN|>",
            reason="reads a description of every parameter", markers=MARKUP["command_r_plus"],
            # its indent filter splits values on every Unicode line boundary
            unrepresentable=("\x85", "\u2028", "\u2029")),
    TurnCut("meetkai-functionary-medium-v3.2.jinja", "functionary_v3_2",
            "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>",
            reason="needs JSON-string arguments", markers=MARKUP["functionary_v3_2"],
            string_args=True, live_prefix=">>>",
            # ">>>" after the content must not complete a marker the content began
            content_ok=lambda text: not text.endswith(">") and "<|eot_id|>" not in text + ">"),
)}
TEMPLATES: dict[str, str] = {**CONFORMANCE_TEMPLATES,
                             **{name: cut.family for name, cut in CUTS.items()}}


def parse_reply(family: str, text: str, chunk: int = 0, **kwargs: Any) -> dict[str, Any]:
    return parse_text(family, text, (), chunk, **kwargs).to_dict()


def calls_of(out: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(c["name"], c["arguments"]) for c in out["tool_calls"]]


# -- reference conversions, one per format --------------------------------------------------

REFERENCE: list[tuple[str, str, str]] = [
    ("nemotron_nano_v2", 'Sure.\n<TOOLCALL>[{"name": "a", "arguments": {"x": 1}}, '
                         '{"name": "b", "arguments": {}}]</TOOLCALL>', "Sure."),
    ("apriel", 'Sure.\n<tool_calls>[{"name": "a", "arguments": {"x": 1}, "id": "call_1"}, '
               '{"name": "b", "arguments": {}}]</tool_calls>', "Sure."),
    ("minimax_m1", '<tool_calls>\n{"name": "a", "arguments": {"x": 1}}\n'
                   '{"name": "b", "arguments": {}}\n</tool_calls>', ""),
    ("firefunction_v2", 'Sure. functools[{"name": "a", "arguments": {"x": 1}}, '
                        '{"name": "b", "arguments": {}}]', "Sure."),
    ("apertus", 'Sure.<|tools_prefix|>[{"a": {"x": 1}}, {"b": {}}]<|tools_suffix|>', "Sure."),
    ("command_r7b", '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "a", '
                    '"parameters": {"x": 1}},\n    {"tool_call_id": "1", "tool_name": "b", '
                    '"parameters": {}}\n]<|END_ACTION|>', ""),
    ("command_r_plus", 'Sure.\nAction:\n```json\n[\n    {\n        "tool_name": "a",\n'
                       '        "parameters": {\n            "x": 1\n        }\n    },\n'
                       '    {"tool_name": "b", "parameters": {}}\n]```\n', "Sure."),
    ("functionary_v3_1", 'Sure.<function=a>{"x": 1}</function><function=b>{}</function>'
                         "<|eom_id|>", "Sure."),
    ("functionary_v3_2", '>>>all\nSure.>>>a\n{"x": 1}>>>b\n{}', "Sure."),
    ("gigachat", 'Sure.<|message_sep|>\n\nfunction call<|role_sep|>\n'
                 '{"name": "a", "arguments": {"x": 1}}', "Sure."),
]


@pytest.mark.parametrize(("family", "reply", "content"), REFERENCE)
@pytest.mark.parametrize("chunk", [0, 1, 4])
def test_reference_conversion(family: str, reply: str, content: str, chunk: int) -> None:
    out = parse_reply(family, reply, chunk)
    expected = [("a", {"x": 1})] + ([] if family == "gigachat" else [("b", {})])
    assert calls_of(out) == expected
    assert out["content"] == content
    assert out["diagnostics"] == []


@pytest.mark.parametrize("family", sorted(FORMAT))
def test_arguments_stream_as_deltas(family: str) -> None:
    long_value = "z" * 80
    reply = dict((f, r) for f, r, _ in REFERENCE)[family].replace('"x": 1',
                                                                  f'"x": "{long_value}"')
    parser = CallParser(FORMAT[family], {})
    events = [e for i in range(0, len(reply), 4) for e in parser.feed(reply[i:i + 4])]
    deltas = [e for e in events + parser.close() if isinstance(e, ToolCallDeltaEvent)
              and e.index == 0]
    assert len(deltas) > 10
    assert json.loads("".join(d.text for d in deltas)) == {"x": long_value}


# -- reasoning, drops and format-specific rules ------------------------------------------------


def test_cohere_thinking_and_response_tokens() -> None:
    template = template_source("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja")
    reply = "<|START_THINKING|>I will look it up.<|END_THINKING|><|START_ACTION|>[" \
            '{"tool_call_id": "0", "tool_name": "a", "parameters": {}}]<|END_ACTION|>'
    out = parse_reply("command_r7b", reply, 3, template=template,
                      prompt_tail="<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>")
    assert out["reasoning"] == "I will look it up." and calls_of(out) == [("a", {})]
    out = parse_reply("command_r7b", "<|START_RESPONSE|>The answer.<|END_RESPONSE|>", 2,
                      template=template, prompt_tail="<|START_THINKING|><|END_THINKING|>")
    assert out["content"] == "The answer."


def test_apertus_inner_block_is_reasoning() -> None:
    template = template_source("Apertus-8B-Instruct.jinja")
    reply = "<|inner_prefix|>think first<|inner_suffix|>Here.<|tools_prefix|>[{\"a\": {}}]" \
            "<|tools_suffix|>"
    out = parse_reply("apertus", reply, 5, template=template, prompt_tail="<|assistant_start|>")
    assert out["reasoning"] == "think first" and out["content"] == "Here."
    assert calls_of(out) == [("a", {})]


def test_apriel_16_reasoning_after_the_prompt_opened_it() -> None:
    template = template_source("Apriel-1.6-15b-Thinker-fixed.jinja")
    reply = "The user wants a.\n[BEGIN FINAL RESPONSE]\nCalling.\n<tool_calls>[" \
            '{"name": "a", "arguments": {}}]</tool_calls>'
    out = parse_reply("apriel", reply, 4, template=template,
                      prompt_tail="<|begin_assistant|>\nHere are my reasoning steps:\n")
    assert out["reasoning"] == "The user wants a."
    assert out["content"] == "Calling." and calls_of(out) == [("a", {})]


def test_apriel_15_reasoning_without_an_opening_tag() -> None:
    template = template_source("unsloth-Apriel-1.5.jinja")
    reply = "Let me think.\n[BEGIN FINAL RESPONSE]\nThe answer is 4.\n[END FINAL RESPONSE]"
    out = parse_reply("apriel", reply, 3, template=template, prompt_tail="<|assistant|>\n")
    assert out["reasoning"] == "Let me think." and out["content"] == "The answer is 4."


def test_reasoning_filters_stay_out_of_other_families() -> None:
    text = "<|START_THINKING|>x<|END_THINKING|> [BEGIN FINAL RESPONSE] <|inner_suffix|>"
    assert merge_events(parse("hermes_json", [text], prompt_tail="\n")) == [TextEvent(text)]


def test_nemotron_reply_after_the_open_think_of_the_prompt() -> None:
    template = template_source("NVIDIA-Nemotron-Nano-v2.jinja")
    reply = "plan the call\n</think>\n\n<TOOLCALL>[{\"name\": \"a\", \"arguments\": {}}]" \
            "</TOOLCALL><SPECIAL_12>"
    events = parse("nemotron_nano_v2", [reply[i:i + 3] for i in range(0, len(reply), 3)],
                   template=template, prompt_tail="<SPECIAL_11>Assistant\n<think>\n")
    merged = merge_events(events)
    assert merged[0] == ReasoningEvent("plan the call")
    assert [e.name for e in merged if isinstance(e, ToolCallEndEvent)] == ["a"]
    assert not [e for e in merged if isinstance(e, TextEvent)]


@pytest.mark.parametrize("text", ["Action: none needed.", "Next Action: wait", "Action:\n"])
def test_command_r_plus_action_in_prose_is_text(text: str) -> None:
    out = parse_reply("command_r_plus", text, 2)
    assert out["content"] == text.rstrip() or out["content"] == text
    assert out["diagnostics"] == [] and out["tool_calls"] == []


def test_functionary_v32_reply_after_the_prompts_recipient_marker() -> None:
    out = parse_reply("functionary_v3_2", 'a\n{"x": 1}>>>all\nDone.', 2)
    assert calls_of(out) == [("a", {"x": 1})] and out["content"] == "Done."
    out = parse_reply("functionary_v3_2", "all\nJust text.", 3)
    assert out["content"] == "Just text." and out["tool_calls"] == []


@pytest.mark.parametrize("text", [">>> print(1)\n1", "Sure\nthing", "Hello world", ">>>x y"])
def test_functionary_v32_prose_is_text(text: str) -> None:
    out = parse_reply("functionary_v3_2", text, 2)
    assert out["content"] == text and out["diagnostics"] == []


def test_minimax_objects_may_also_come_as_a_list() -> None:
    out = parse_reply("minimax_m1", '<tool_calls>[{"name": "a", "arguments": {}}]</tool_calls>')
    assert calls_of(out) == [("a", {})]


def test_missing_closing_marker_at_the_end_of_the_reply() -> None:
    out = parse_reply("nemotron_nano_v2", '<TOOLCALL>[{"name": "a", "arguments": {}}]')
    assert calls_of(out) == [("a", {})] and out["diagnostics"] == []


def test_functionary_v31_missing_close_tag_before_text() -> None:
    out = parse_reply("functionary_v3_1", '<function=a>{"x": 1} and then text')
    assert calls_of(out) == [("a", {"x": 1})] and out["content"] == "and then text"


# -- bad input ---------------------------------------------------------------------------------

BAD = [
    ("nemotron_nano_v2", "<TOOLCALL>oops</TOOLCALL>"), ("nemotron_nano_v2", "<TOOLCALL>[1]"),
    ("apriel", "<tool_calls>[5, {\"name\": \"a\"}]</tool_calls>"),
    ("minimax_m1", "<tool_calls>\n{\"name\": 1}\n"), ("firefunction_v2", " functools[ nope"),
    ("apertus", '<|tools_prefix|>[{"a": {}, "b": {}}]<|tools_suffix|>'),
    ("apertus", "<|tools_prefix|>[{}]"), ("command_r7b", "<|START_ACTION|>[{\"x\": 1}]"),
    ("command_r_plus", "Action:\n```json\n[{\"tool_name\": ]```"),
    ("functionary_v3_1", "<function=a b>{}</function>"), ("functionary_v3_1", "<function=a>[]"),
    ("functionary_v3_2", ">>>a\nnot json"), ("gigachat", "<|function_call|>hello"),
    ("gigachat", "<|function_call|>{\"name\": \"a\", \"arguments\": 3}"),
]


@pytest.mark.parametrize(("family", "text"), BAD)
def test_bad_input_never_raises_and_never_loses_text(family: str, text: str) -> None:
    out = parse_reply(family, text, chunk=3)
    assert out["tool_calls"] == []
    assert strip_blanks(out["content"]) == strip_blanks(without_dropped(text, out))


@pytest.mark.parametrize("family", sorted(FORMAT))
@given(data=st.data())
def test_garbage_never_raises_and_chunking_does_not_matter(family: str,
                                                           data: st.DataObject) -> None:
    check_garbage(family, MARKUP[family], data)


# -- detection over every real template ---------------------------------------------------


@pytest.mark.parametrize("name", template_names())
def test_detection_table(name: str) -> None:
    source = template_source(name)
    claiming = [fmt.family for fmt in FORMATS if json_wrappers.detector(fmt)(source) > 0]
    assert claiming == ([TEMPLATES[name]] if name in TEMPLATES else [])
    if name in TEMPLATES:
        assert selected_family(name) == TEMPLATES[name]


def test_every_format_claims_a_real_template() -> None:
    assert set(TEMPLATES.values()) == set(FORMAT)


# -- conformance and the harness ------------------------------------------------------------


@pytest.mark.kit
@pytest.mark.parametrize("name", sorted(CONFORMANCE_TEMPLATES))
def test_conformance(name: str) -> None:
    family = CONFORMANCE_TEMPLATES[name]
    report = conformance(json_wrappers, name, markers=MARKUP[family])
    assert report.family == family and report.passed
    if family == "gigachat":
        assert report["parallel_calls"].status == "skipped"


@pytest.mark.parametrize("name", sorted(CUTS))
@given(data=st.data())
def test_round_trip_through_templates_the_conformance_renderer_cannot_drive(
        name: str, data: st.DataObject) -> None:
    check_cut_round_trip(CUTS[name], data)


# -- BFCL round trips -------------------------------------------------------------------------

BFCL_TEMPLATES = ["Apriel-1.6-15b-Thinker-fixed.jinja", "MiniMax-M1.jinja",
                  "fireworks-ai-llama-3-firefunction-v2.jinja", "Apertus-8B-Instruct.jinja",
                  "Cohere2MoE.jinja", "meetkai-functionary-medium-v3.1.jinja"]


@pytest.mark.parametrize("name", BFCL_TEMPLATES)
def test_bfcl_parallel_round_trip(name: str) -> None:
    source = template_source(name)
    renderer = AssistantTurnRenderer(source)
    family = TEMPLATES[name]
    for tools, calls in bfcl_sample("parallel_multiple", every=4):
        reply = render_turn(renderer, calls, tools)
        got = parse_text(family, reply.text, tools, 13, template=source,
                         prompt_tail=reply.prompt_tail)
        assert canonical_calls((c.name, c.arguments) for c in got.tool_calls) == \
            canonical_calls(calls), reply.text


@pytest.mark.parametrize("name", [*sorted(CUTS), "GigaChat3.1-10B-A1.8B.jinja"])
def test_bfcl_round_trip_through_the_harness(name: str) -> None:
    cut = CUTS.get(name) or TurnCut(name, "gigachat", "assistant<|role_sep|>\n",
                                    "<|message_sep|>\n\n<|", reason="one call per turn",
                                    markers=MARKUP["gigachat"], max_calls=1)
    source = template_source(name)
    for tools, calls in bfcl_sample("parallel_multiple", every=4):
        calls = calls[:cut.max_calls]
        tail, reply = render_cut(cut, calls, tools)
        got = parse_text(cut.family, reply, tools, 13, template=source, prompt_tail=tail)
        assert canonical_calls((c.name, c.arguments) for c in got.tool_calls) == \
            canonical_calls(calls), reply


# -- registration -----------------------------------------------------------------------------


def test_the_json_plugins_register_cleanly_in_strict_mode() -> None:
    manager = PluginManager(builtins=True, entry_points=False, strict=True)
    for module in JSON_PLUGINS:
        manager.register(module)
    parsers = manager.parsers()
    assert {"hermes_json", "llama3_json", "mistral", "deepseek", *FORMAT} <= set(parsers)
    assert parsers["apriel"].plugin == json_wrappers.__name__
    filters = {spec.name for spec in manager.stream_filters()}
    assert {"mistral_think", "apriel_reasoning", "apertus_reasoning",
            "command_r7b_reasoning"} <= filters


@pytest.mark.parametrize("body", ["`{\"path\": \"b.py\"}", "``", "`",
                                  "```json\n{\"path\": \"b\"}\n```"])
def test_functionary_v32_a_backtick_after_the_name_reads_the_same_however_cut(body: str) -> None:
    # found by the fuzzer: a lone backtick cut off after a call's name looked like the
    # start of a code fence, so the call was announced (tool_call_start) and then taken
    # back as text; parsed whole it was text from the start
    text = "Sure.>>>write_\n\n" + body
    whole = merge_events(parse("functionary_v3_2", [text], ()))
    for cut in range(1, len(text)):
        assert merge_events(parse("functionary_v3_2", [text[:cut], text[cut:]], ())) == whole, cut


@pytest.mark.parametrize("deltas", [
    ["al", "l<|", "eot_", "id|>", "<|eot_id|>\nSure, let me c}"],
    ["all<|eot_id|>", "<|eot_id|>\nSure, let me c}"],
    ["all<|eot_id|><|eot_id|>\nSure, let me c}"],
])
def test_a_line_held_at_the_replys_start_is_read_alike_however_it_arrives(
        deltas: list[str]) -> None:
    # found by the fuzzer (issue 39): the reply's first line, held until it shows whether
    # it is a call's header, opened a call scope over text the end-of-turn search had not
    # looked at; the end-of-turn token in it must read the same whatever the deltas
    source = template_source("meetkai-functionary-medium-v3.2.jinja")
    whole = merge_events(parse("functionary_v3_2", ["".join(deltas)], template=source))
    assert merge_events(parse("functionary_v3_2", deltas, template=source)) == whole
    assert [e.text for e in whole if isinstance(e, TextEvent)] == ["all\nSure, let me c}"]
