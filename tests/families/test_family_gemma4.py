"""The gemma4 parser: Gemma's object syntax, conformance through both real templates,
BFCL round trips, streaming, the end-of-turn token, reasoning, bad input."""

from __future__ import annotations

import re

import pytest

from tests.support.families import parse, parse_text, template_source, without_dropped
from tests.support.tagged_families import bfcl_round_trip, conformance, markers
from toolwire.events import ToolCallDeltaEvent
from toolwire.parse.record import GrammarArguments, ObjectLiteral
from toolwire.plugins import gemma4
from toolwire.plugins.gemma4 import GEMMA4_FORMAT, QUOTE, read_gemma_object

TEMPLATES = ["google-gemma-4-31B-it.jinja", "google-gemma-4-31B-it-interleaved.jinja"]
MARKERS = markers(GEMMA4_FORMAT, QUOTE, "<|channel>", "<channel|>", "<|turn>",
                  "<turn|>")
TAIL = "<|turn>model\n<|channel>thought\n<channel|>"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                     "opts": {"type": "object"}}}}}]
Q = QUOTE


@pytest.mark.kit
@pytest.mark.parametrize("name", TEMPLATES)
def test_conformance_through_each_gemma4_template(name: str) -> None:
    conformance(gemma4, name, MARKERS)


@pytest.mark.parametrize("name", TEMPLATES)
def test_bfcl_ground_truth_calls_round_trip(name: str) -> None:
    assert bfcl_round_trip("gemma4", name, every=3) > 500


@pytest.mark.parametrize(("body", "value"), [
    (f"{{city:{Q}Paris{Q},days:3}}", {"city": "Paris", "days": 3}),
    ("{a:[1,None,true],b:{c:-0.0,d:1e+300}}", {"a": [1, None, True],
                                                   "b": {"c": -0.0, "d": 1e300}}),
    (f"{{ {Q}quoted key{Q} : {Q}a, b: {{c}}{Q} }}", {"quoted key": "a, b: {c}"}),
    ("{}", {}), ("{x:[]}", {"x": []}), ("{x:False,y:null}", {"x": False, "y": None}),
    ("{word:hello}", {"word": "hello"}),
])
def test_gemma_object_syntax(body: str, value: dict[str, object]) -> None:
    assert read_gemma_object(body) == value


@pytest.mark.parametrize("body", ["", "{", "{a}", "{a:1", "[1]", f"{{a:{Q}x}}", "{a:1}}",
                                  "{:1}", "{a:1,,b:2}"])
def test_text_that_is_not_a_gemma_object(body: str) -> None:
    assert read_gemma_object(body) is None


def test_calls_then_text_and_the_end_of_turn_token() -> None:
    reply = (f"<|tool_call>call:get_weather{{city:{Q}Oslo{Q},days:2}}<tool_call|>"
             f"<|tool_call>call:get_weather{{city:{Q}Rome{Q}}}<tool_call|>Checking both."
             "<|tool_response>")
    out = parse_text("gemma4", reply, TOOLS, chunk=3, template=template_source(TEMPLATES[0]),
                     prompt_tail=TAIL)
    assert out.content == "Checking both."
    assert [dict(c.arguments) for c in out.tool_calls] == [{"city": "Oslo", "days": 2},
                                                           {"city": "Rome"}]


def test_end_of_turn_token_without_a_call_stays_text() -> None:
    assert parse_text("gemma4", "Hi <|tool_response>").content == "Hi <|tool_response>"


def test_top_level_string_arguments_stream() -> None:
    value = "a, {b}: [c] " * 20
    reply = f"<|tool_call>call:get_weather{{city:{Q}{value}{Q},opts:{{k:{Q}x{Q}}}}}<tool_call|>"
    events = parse("gemma4", [reply[i:i + 4] for i in range(0, len(reply), 4)], TOOLS,
                   template=template_source(TEMPLATES[1]), prompt_tail=TAIL)
    deltas = [e for e in events if isinstance(e, ToolCallDeltaEvent)]
    assert {d.parameter for d in deltas} == {"city"} and len(deltas) > 10
    assert "".join(d.text for d in deltas) == value


def test_gemma4_is_a_pure_record_on_the_engines_object_literal_reader() -> None:
    assert GEMMA4_FORMAT.kinds == (GrammarArguments(reader=ObjectLiteral(quote=QUOTE,
                                                                       escapes=False),
                                                    name="gemma4 object"),)


def test_the_plugins_own_reader_of_an_unreleased_version_is_gone() -> None:
    # the engine's object-literal reader reads the notation: no second reader, no shim
    assert not hasattr(gemma4, "GemmaArgsReader")
    assert not hasattr(gemma4.values, "GemmaArgsReader")


def test_thought_channel_is_reasoning() -> None:
    reply = (f"<|channel>thought\nweather needed\n<channel|>"
             f"<|tool_call>call:get_weather{{city:{Q}Oslo{Q}}}<tool_call|>")
    out = parse_text("gemma4", reply, TOOLS, chunk=2, template=template_source(TEMPLATES[1]),
                     prompt_tail="<|turn>model\n")
    assert out.reasoning == "weather needed" and len(out.tool_calls) == 1


@pytest.mark.parametrize("text", [
    "<|tool_call>", "<|tool_call>call:get_weather{city:", f"<|tool_call>call:x{{a:{Q}cut",
    "<|tool_call>call:x{a:1}}<tool_call|>", "<|tool_call>{}<tool_call|>", "<tool_call|> stray",
])
def test_bad_input_never_raises_and_never_loses_text(text: str) -> None:
    out = parse_text("gemma4", text, TOOLS, chunk=2)
    assert out.tool_calls == ()
    assert re.sub(r"\s", "", out.content) == re.sub(r"\s", "", without_dropped(text, out))


def test_several_calls_in_one_tool_call_block_are_each_a_call() -> None:
    # issue 39, item 3: once a call's body closed, call:NAME{ before the block's closer is
    # the next call (the block's closer ends the last one)
    reply = (f"<|tool_call>call:get_weather{{city:{Q}Paris{Q}}}call:get_weather{{city:{Q}Oslo"
             f"{Q},days:2}}<tool_call|>Both.")
    for chunk in (0, 1, 5):
        got = parse_text("gemma4", reply, TOOLS, chunk=chunk)
        assert [(c.name, dict(c.arguments)) for c in got.tool_calls] == [
            ("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo", "days": 2})]
        assert (got.content, got.diagnostics) == ("Both.", ()), chunk
