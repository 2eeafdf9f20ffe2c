"""The harmony parser (gpt-oss) and glimmer (Muse Glimmer): channels and recipients,
JSON and ``<atem:invoke>`` bodies, conformance through the real templates, BFCL round
trips, the gpt-oss template's limits, bad input."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolwire
from tests.support.families import (
    canonical,
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
from toolwire.events import ReasoningEvent, TextEvent, ToolCallDeltaEvent
from toolwire.parse.protocol import collect_reply, merge_events
from toolwire.plugins import harmony
from toolwire.plugins.harmony import GLIMMER_FORMAT
from toolwire.testing import strategies as tws

GPT_OSS = "openai-gpt-oss-120b.jinja"
GLIMMER = "muse-glimmer.jinja"
HARMONY_TOKENS = ("<|start|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|end|>",
                  "<|call|>", "<|return|>", "<|eom|>", "<|eot|>", "to=")
GPT_OSS_MARKERS = markers(None, *HARMONY_TOKENS)
GLIMMER_MARKERS = markers(GLIMMER_FORMAT, *HARMONY_TOKENS)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]


@pytest.mark.kit
def test_conformance_through_the_gpt_oss_template() -> None:
    """The template renders one call per message (``parallel_calls`` is skipped) and
    writes the content beside a call as an ``analysis`` message, which adds markup to
    the turn, so the suite leaves examples with content out; the content-as-reasoning
    round trip is checked by the next test."""
    report = conformance(harmony, GPT_OSS, GPT_OSS_MARKERS, raise_on_failure=False)
    assert report.statuses["parallel_calls"] == "skipped"  # the template renders one call
    assert report.failed == (), report.format_table()


@settings(max_examples=conformance_examples() * 2)
@given(case=tws.tool_calls_with_schemas(max_calls=1), data=st.data())
def test_gpt_oss_round_trip_reads_content_beside_a_call_as_reasoning(
        case: Any, data: st.DataObject) -> None:
    tools, calls = case
    keep = [c for c in calls if not any(t in s for s in _strings(c[1]) for t in HARMONY_TOKENS)]
    if not keep:
        return
    content = data.draw(tws.adversarial_text().filter(
        lambda s: not any(t in s for t in HARMONY_TOKENS)), label="content")
    tail, reply = render(GPT_OSS, keep, tools, content=content)
    pieces = data.draw(tws.chunkings(reply), label="chunks")
    got = collect_reply(parse("harmony", pieces, tools, template=template_source(GPT_OSS),
                              prompt_tail=tail))
    assert canonical((c.name, c.arguments) for c in got.tool_calls) == canonical(keep)
    assert (got.content, got.reasoning.strip()) == ("", content.strip())
    assert got.diagnostics == ()


def _strings(value: Any) -> list[str]:
    from tests.support.families import strings_in

    return list(strings_in(value))


@pytest.mark.kit
def test_conformance_through_the_glimmer_template() -> None:
    conformance(harmony, GLIMMER, GLIMMER_MARKERS)


def test_bfcl_ground_truth_first_calls_round_trip_through_gpt_oss() -> None:
    assert bfcl_round_trip("harmony", GPT_OSS, first_call_only=True, every=3) > 250


def test_bfcl_ground_truth_calls_round_trip_through_glimmer() -> None:
    assert bfcl_round_trip("glimmer", GLIMMER, every=3) > 500


@settings(max_examples=conformance_examples() * 2)
@given(data=st.data())
def test_values_holding_atem_tags_come_back_unchanged(data: st.DataObject) -> None:
    check_literal_markup("glimmer", GLIMMER, GLIMMER_FORMAT, data,
                         content_markers=GLIMMER_MARKERS)


# -- gpt-oss -----------------------------------------------------------------------------


def test_gpt_oss_as_the_model_writes_it() -> None:
    reply = ("<|channel|>analysis<|message|>Need weather.<|end|>"
             "<|start|>assistant<|channel|>commentary to=functions.get_weather "
             '<|constrain|>json<|message|>{"city": "Paris", "days": 2}<|call|>')
    events = parse("harmony", [reply[i:i + 3] for i in range(0, len(reply), 3)], TOOLS,
                   template=template_source(GPT_OSS), prompt_tail="<|start|>assistant")
    got = collect_reply(events)
    assert got.reasoning == "Need weather." and got.content == ""
    assert [(c.name, dict(c.arguments)) for c in got.tool_calls] == [
        ("get_weather", {"city": "Paris", "days": 2})]
    deltas = [e for e in events if isinstance(e, ToolCallDeltaEvent)]
    assert "".join(d.text for d in deltas) == '{"city": "Paris", "days": 2}'


def test_gpt_oss_final_channel_is_text() -> None:
    reply = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final" \
            "<|message|>It is 4.<|return|>"
    out = parse_text("harmony", reply, chunk=2)
    assert (out.reasoning, out.content) == ("Easy.", "It is 4.")


def test_gpt_oss_call_without_its_stop_token_is_complete() -> None:
    reply = '<|channel|>commentary to=functions.get_weather json<|message|>{"city": "Oslo"}'
    out = parse_text("harmony", reply, TOOLS, chunk=5)
    assert [dict(c.arguments) for c in out.tool_calls] == [{"city": "Oslo"}]
    assert out.diagnostics == ()


def test_gpt_oss_builtin_recipient_the_request_offers_is_a_call_by_its_full_name() -> None:
    search = {"type": "function", "function": {"name": "browser.search", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}}}}
    reply = '<|channel|>analysis to=browser.search<|message|>{"query": "x"}<|call|>'
    out = parse_text("harmony", reply, [search])
    assert [(c.name, dict(c.arguments)) for c in out.tool_calls] == [
        ("browser.search", {"query": "x"})]


# -- what ends a gpt-oss message -----------------------------------------------------------

GPT_OSS_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "weather",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string"},
                                          "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "get_time", "description": "time",
                                      "parameters": {"type": "object", "properties": {}}}}]
# a whole tool message, as a value would hold it: parsed from inside the string, it
# would be a phantom get_time({}) call
PHANTOM = ("<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json"
           "<|message|>{}<|call|>")


def every_chunking(text: str) -> list[list[str]]:
    """The whole text, every split in two, and deltas of 1 to 7 characters."""
    ways = [[text]] + [[text[:i], text[i:]] for i in range(1, len(text))]
    ways += [[text[i:i + n] for i in range(0, len(text), n)] for n in range(1, 8)]
    return ways


def parse_every_way(text: str, tools: list[dict[str, Any]], tail: str
                    ) -> toolwire.ParsedReply:
    """Parse ``text`` at every chunking; all must agree; return the reply."""
    whole = merge_events(parse("harmony", [text], tools, template=template_source(GPT_OSS),
                               prompt_tail=tail))
    for pieces in every_chunking(text):
        split = merge_events(parse("harmony", pieces, tools,
                                   template=template_source(GPT_OSS), prompt_tail=tail))
        assert split == whole, pieces
    return collect_reply(whole)


@pytest.mark.parametrize("value", [
    "a <|call|> b", "ends <|end|>", "done <|return|>", PHANTOM, 'quoted \\" <|call|> "x"',
    "<|start|>", "back\\slash <|end|><|call|>"])
def test_gpt_oss_end_tokens_inside_a_json_string_end_nothing(value: str) -> None:
    calls = [("get_weather", {"city": value, "days": 2})]
    tail, reply = render(GPT_OSS, calls, GPT_OSS_TOOLS)
    assert value in reply.replace('\\"', '"').replace("\\\\", "\\")
    got = parse_every_way(reply, GPT_OSS_TOOLS, tail)
    assert canonical((c.name, c.arguments) for c in got.tool_calls) == canonical(calls)
    assert (got.content, got.reasoning, got.diagnostics) == ("", "", ())


def test_gpt_oss_constrained_json_message_holding_a_whole_message_is_one_call() -> None:
    """As the model writes it (``<|constrain|>json``), not as the template renders it."""
    reply = ("<|channel|>analysis<|message|>Quote it.<|end|><|start|>assistant<|channel|>"
             "commentary to=functions.get_weather <|constrain|>json<|message|>"
             + json.dumps({"city": PHANTOM}) + "<|call|>")
    got = parse_every_way(reply, GPT_OSS_TOOLS, "<|start|>assistant")
    assert [(c.name, dict(c.arguments)) for c in got.tool_calls] == [
        ("get_weather", {"city": PHANTOM})]
    assert got.reasoning == "Quote it." and got.diagnostics == ()


def test_gpt_oss_string_that_never_closes_is_cut_at_its_first_end_token() -> None:
    """Without the rule's escape hatch one broken value would swallow the reply."""
    reply = ('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
             '{"city": "Par<|call|><|start|>assistant<|channel|>final<|message|>Hi<|return|>')
    got = parse_every_way(reply, GPT_OSS_TOOLS, "<|start|>assistant")
    assert got.tool_calls == ()
    assert [d.code for d in got.diagnostics] == ["malformed_arguments"]
    assert got.content.endswith('{"city": "ParHi')


@settings(max_examples=conformance_examples() * 4)
@given(value=st.lists(st.sampled_from([*HARMONY_TOKENS, '"', "\\", "{", "}", "x", " "]),
                      max_size=12).map("".join), data=st.data())
def test_gpt_oss_any_string_value_comes_back_whole(value: str, data: st.DataObject) -> None:
    calls = [("get_weather", {"city": value})]
    tail, reply = render(GPT_OSS, calls, GPT_OSS_TOOLS)
    pieces = data.draw(tws.chunkings(reply), label="chunks")
    got = collect_reply(parse("harmony", pieces, GPT_OSS_TOOLS,
                              template=template_source(GPT_OSS), prompt_tail=tail))
    assert canonical((c.name, c.arguments) for c in got.tool_calls) == canonical(calls)
    assert got.diagnostics == ()


def test_gpt_oss_call_token_does_not_end_reasoning() -> None:
    thinking = "I could emit <|call|> here, but first <|call|>more thought."
    reply = (f"<|channel|>analysis<|message|>{thinking}<|end|><|start|>assistant"
             "<|channel|>final<|message|>It is sunny.<|return|>")
    got = parse_every_way(reply, GPT_OSS_TOOLS, "<|start|>assistant")
    assert (got.reasoning, got.content) == (thinking, "It is sunny.")


def test_gpt_oss_call_token_is_text_in_a_final_message() -> None:
    reply = "<|channel|>final<|message|>Stop with <|call|> please.<|return|>"
    got = parse_every_way(reply, GPT_OSS_TOOLS, "<|start|>assistant")
    assert got.content == "Stop with <|call|> please." and got.tool_calls == ()


def test_gpt_oss_reasoning_through_the_template_keeps_a_call_token() -> None:
    calls = [("get_weather", {"city": "Oslo"})]
    tail, reply = render(GPT_OSS, calls, GPT_OSS_TOOLS, content="Use <|call|> later.")
    got = parse_every_way(reply, GPT_OSS_TOOLS, tail)
    assert got.reasoning == "Use <|call|> later."
    assert [(c.name, dict(c.arguments)) for c in got.tool_calls] == [("get_weather",
                                                                      {"city": "Oslo"})]


@pytest.mark.parametrize(("recipient", "body"), [
    ("python <|constrain|>code", 'print("hi")\nprint(1)'),
    ("browser.search", '{"query": "weather"}'),
    ("container.exec", '{"cmd": ["ls"]}')])
def test_gpt_oss_message_to_a_builtin_the_request_did_not_offer_is_a_diagnostic(
        recipient: str, body: str) -> None:
    message = f"<|start|>assistant to={recipient}<|message|>{body}"
    reply = (f"<|channel|>analysis<|message|>Run it.<|end|>{message}<|call|>"
             '<|start|>assistant<|channel|>commentary to=functions.get_time json<|message|>{}'
             "<|call|>")
    got = parse_every_way(reply, GPT_OSS_TOOLS, "<|start|>assistant")
    assert [(c.index, c.name, dict(c.arguments)) for c in got.tool_calls] == [
        (0, "get_time", {})]
    assert got.content == "" and got.reasoning == "Run it."
    assert [d.code for d in got.diagnostics] == ["unoffered_recipient"]
    assert got.diagnostics[0].raw == message


def test_reply_without_a_header_is_plain_text() -> None:
    text = "Hello there, no channels here.\nSecond line."
    events = merge_events(parse("harmony", [text[i:i + 4] for i in range(0, len(text), 4)]))
    assert events == [TextEvent(text)]


def test_unreadable_header_is_text_with_a_diagnostic() -> None:
    reply = "<|channel|>final {weird}<|message|>body<|end|>"
    out = parse_text("harmony", reply)
    assert out.diagnostics[0].code == "malformed_header"
    assert out.content == "<|channel|>final {weird}<|message|>body"


def test_tool_message_with_bad_json_is_text_with_a_diagnostic() -> None:
    reply = "<|channel|>commentary to=functions.get_weather<|message|>{nope<|call|>"
    out = parse_text("harmony", reply, TOOLS)
    assert out.tool_calls == () and out.diagnostics[0].code == "malformed_arguments"
    assert "{nope" in out.content


# -- Glimmer -----------------------------------------------------------------------------


def atem(name: str, **params: str) -> str:
    body = "".join(f'<atem:parameter name="{k}">{v}</atem:parameter>\n'
                   for k, v in params.items())
    return (f'<atem:function_calls>\n<atem:invoke name="{name}">\n{body}</atem:invoke>\n'
            "</atem:function_calls>")


def test_glimmer_recipients_route_reasoning_calls_and_text() -> None:
    reply = (" to=self<|message|>Look it up.<|eom|>"
             f"<|start|>assistant to=get_weather<|message|>{atem('get_weather', city='Rome')}"
             f"<|eom|><|start|>assistant to=get_weather<|message|>{atem('get_weather', days='3')}"
             "<|eom|><|start|>assistant to=user<|message|>Done.<|eot|>")
    events = parse("glimmer", [reply[i:i + 6] for i in range(0, len(reply), 6)], TOOLS,
                   template=template_source(GLIMMER), prompt_tail="<|start|>assistant")
    got = collect_reply(events)
    assert (got.reasoning, got.content) == ("Look it up.", "Done.")
    assert [(c.index, dict(c.arguments)) for c in got.tool_calls] == [(0, {"city": "Rome"}),
                                                                      (1, {"days": 3})]
    assert any(isinstance(e, ReasoningEvent) for e in events)


def test_glimmer_json_body_is_read_as_arguments() -> None:
    out = parse_text("glimmer", ' to=get_weather<|message|>{"city": "Lima"}<|eom|>', TOOLS)
    assert [(c.name, dict(c.arguments)) for c in out.tool_calls] == [
        ("get_weather", {"city": "Lima"})]


@pytest.mark.parametrize(("family", "text"), [
    ("harmony", "<|channel|>commentary to=functions.f<|message|>"),
    ("harmony", "<|channel|>commentary to=functions.f<|message|>{\"a\": "),
    ("harmony", "<|start|><|start|>"), ("harmony", "<|channel|>" + "x" * 600),
    ("glimmer", " to=f<|message|><atem:function_calls>"),
    ("glimmer", " to=f<|message|><atem:function_calls><atem:invoke name=\"f\">cut"),
    ("glimmer", " to=f<|message|>not a call<|eom|>"),
])
def test_bad_input_never_raises_and_never_loses_text(family: str, text: str) -> None:
    out = parse_text(family, text, TOOLS, chunk=3)
    assert out.tool_calls == ()
    ends = r"<\|(end|call|eom|eot|return)\|>"
    kept = without_dropped(text, out)  # an empty section is dropped, its raw in a diagnostic
    assert re.sub(r"\s", "", out.content) == re.sub(r"\s|" + ends, "", kept)


def test_stray_end_tokens_are_framing_not_text() -> None:
    assert parse_text("harmony", "<|end|><|call|> tail").content.strip() == "tail"


# -- a cut inside a message header (issue 39, item 5) ------------------------------------------

_HEADER = ("<|start|>assistant to=functions.get_weather<|channel|>commentary "
           "<|constrain|>json")


@pytest.mark.parametrize("size", [len("<|st"), len("<|start|>assistant to=functions.get"),
                                  len(_HEADER) - 3, len(_HEADER)])
def test_gpt_oss_a_cut_inside_a_call_header_is_held_back_with_truncated_call(size: int) -> None:
    # at the length limit a header still being written is an unfinished message: its text
    # comes with truncated_call (the endpoint keeps it out of the content), as any cut call
    reply = "<|channel|>analysis<|message|>Checking.<|end|>" + _HEADER[:size]
    for chunk in (0, 1, 4):
        got = toolwire.parse_reply(reply, family="harmony", tools=TOOLS, chunk_size=chunk,
                                   end_reason="length")
        assert (got.reasoning, got.tool_calls) == ("Checking.", ()), chunk
        assert [(d.code, d.raw) for d in got.diagnostics] == \
            [("truncated_call", _HEADER[:size])], (chunk, got.diagnostics)
        assert got.content == _HEADER[:size]  # given back, so the endpoint can drop it
    # a header addressing a tool where the reply simply stopped: unclosed_call, text
    got = toolwire.parse_reply(reply, family="harmony", tools=TOOLS, end_reason="stop")
    if size > len("<|start|>assistant to=functions.get"):
        assert [d.code for d in got.diagnostics] == ["unclosed_call"]
