"""The llama3_json parser: bare JSON calls, ``<|python_tag|>``, the pythonic lists Llama 3.2
writes, JSON answers that are not calls, detection, conformance and BFCL round trips.

Limit recorded here: the Llama 3.x templates raise ``This model only supports
single tool-calls at once!`` on a second call, so the conformance run skips
``parallel_calls`` and the BFCL round trip uses one-call records; several calls
in one reply (a drift) are tested on hand-written replies.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.families import (
    bfcl_sample,
    canonical_calls,
    parse_text,
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
from toolwire.events import TextEvent, ToolCallEndEvent
from toolwire.parse.engine import CallParser
from toolwire.plugins import llama3_json
from toolwire.plugins.llama3_json import LLAMA3_FORMAT, calls_from_source
from toolwire.testing import AssistantTurnRenderer
from toolwire.testing import strategies as tws

FAMILY = "llama3_json"
TEMPLATES = ["meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
             "meta-llama-Llama-3.3-70B-Instruct.jinja"]
WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}}}}}]


def parse_reply(text: str, chunk: int = 0) -> dict[str, Any]:
    return parse_text(FAMILY, text, WEATHER, chunk).to_dict()


def stream(text: str, size: int) -> list[Any]:
    parser = CallParser(LLAMA3_FORMAT, {})
    events = [e for i in range(0, len(text), size) for e in parser.feed(text[i:i + size])]
    return merge_events(events + parser.close())


# -- reference conversions -----------------------------------------------------------


@pytest.mark.parametrize("chunk", [0, 1, 5])
def test_bare_json_reply_is_a_call(chunk: int) -> None:
    out = parse_reply('{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}',
                      chunk)
    assert out["tool_calls"] == [{"name": "get_weather",
                                  "arguments": {"city": "Paris", "days": 3}}]
    assert out["content"] == "" and out["diagnostics"] == []


def test_python_tag_call_and_echoed_end_token() -> None:
    out = parse_reply('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}'
                      "<|eom_id|>")
    assert out["tool_calls"] == [{"name": "get_weather", "arguments": {"city": "Oslo"}}]
    assert out["content"] == ""


def test_type_function_key_and_arguments_key_are_accepted() -> None:
    out = parse_reply('{"type": "function", "name": "get_weather", "arguments": {"city": "A"}}')
    assert out["tool_calls"] == [{"name": "get_weather", "arguments": {"city": "A"}}]


def test_a_json_answer_is_text_without_a_diagnostic() -> None:
    for reply in ['{"result": 42, "unit": "m"}', '{"name": "Bob", "age": 3}',
                  '{"name": "Bob"}', '  {"name": 5, "parameters": {}}']:
        out = parse_reply(reply, chunk=2)
        assert out["tool_calls"] == [] and out["diagnostics"] == []
        assert out["content"] == reply


def test_json_in_the_middle_of_text_is_text() -> None:
    reply = 'Call it like {"name": "get_weather", "parameters": {}} please.'
    assert parse_reply(reply)["content"] == reply


# -- tolerated drifts -------------------------------------------------------------------


def test_several_calls_separated_by_semicolons_or_lines() -> None:
    reply = '{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}}\n\n' \
            '{"name": "c", "parameters": {}}'
    out = parse_reply(reply, chunk=3)
    assert [(c["name"], c["arguments"]) for c in out["tool_calls"]] == \
        [("a", {}), ("b", {"x": 1}), ("c", {})]


def test_pythonic_call_list_is_read() -> None:
    reply = '[get_weather(city="Paris", days=3), get_time(zone=\'CET\', exact=True, ' \
            'extra=None, tags=["a", "b"], opts={"k": false})]'
    for size in (1, 4, 1000):
        calls = [e for e in stream(reply, size) if isinstance(e, ToolCallEndEvent)]
        assert [(c.name, dict(c.arguments)) for c in calls] == [
            ("get_weather", {"city": "Paris", "days": 3}),
            ("get_time", {"zone": "CET", "exact": True, "extra": None, "tags": ["a", "b"],
                          "opts": {"k": False}})]


def test_pythonic_builtin_tool_syntax_after_python_tag() -> None:
    out = parse_reply('<|python_tag|>[brave_search.call(query="weather in Paris")]')
    assert out["tool_calls"] == [{"name": "brave_search",
                                  "arguments": {"query": "weather in Paris"}}]


def test_pythonic_strings_hold_brackets_quotes_and_triple_quotes() -> None:
    reply = '[write(path="a]b.py", text=\'\'\'x = "]"\ny = \'(\'\'\'\'\', n=1)]'
    calls = [e for e in stream(reply, 2) if isinstance(e, ToolCallEndEvent)]
    # the text is a triple-quoted string followed by an empty one, as Python reads it
    assert [dict(c.arguments) for c in calls] == [{"path": "a]b.py", "text": 'x = "]"\ny = \'(',
                                                   "n": 1}]


@pytest.mark.parametrize("reply", ["[1, 2, 3] are numbers", "[link](http://x.y) text",
                                   "[ ] todo", "[Note] something", "[f (x)"])
def test_text_beginning_with_a_bracket_is_text(reply: str) -> None:
    out = parse_reply(reply, chunk=2)
    assert out["tool_calls"] == []
    assert strip_blanks(out["content"]) == strip_blanks(reply)


def test_pythonic_call_with_positional_arguments_is_malformed() -> None:
    out = parse_reply('[get_weather("Paris")]')
    assert out["tool_calls"] == []
    assert out["diagnostics"][0]["code"] == "malformed_call"
    assert out["content"] == '[get_weather("Paris")]'


def test_python_keywords_as_tool_and_parameter_names() -> None:
    assert calls_from_source('[search(from="x", to="y"), lambda.call(in=1), f(a="if(")]') == \
        [("search", {"from": "x", "to": "y"}), ("lambda", {"in": 1}), ("f", {"a": "if("})]


def test_calls_from_source_reads_only_literals() -> None:
    assert calls_from_source("[f(a=[1, (2, 3)], b={'x': -1.5})]") == \
        [("f", {"a": [1, [2, 3]], "b": {"x": -1.5}})]
    for bad in ["[f(a=__import__('os'))]", "[f(a=b)]", "f(a=1)", "[f(**k)]", "[1]"]:
        with pytest.raises(ValueError):
            calls_from_source(bad)


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "{", '{"name": "a", "parameters": {', "<|python_tag|>", "<|python_tag|>garbage",
    '{"name": "a", "parameters": {}} trailing text', "[f(a=1", "[" * 300 + "f(", "\x00{\udcff",
    '<|python_tag|>{"name": "a"}', '[f(a="unterminated)]',
])
def test_bad_input_never_raises_and_never_loses_text(text: str) -> None:
    out = parse_reply(text, chunk=3)
    if out["tool_calls"]:
        return
    assert strip_blanks(out["content"]) == strip_blanks(text.replace("<|python_tag|>", "")) or \
        strip_blanks(out["content"]) == strip_blanks(without_dropped(text, out))


def test_text_streams_without_waiting_for_the_end() -> None:
    parser = CallParser(LLAMA3_FORMAT, {})
    assert merge_events(parser.feed("Hello there")) == [TextEvent("Hello there")]


@given(data=st.data())
def test_garbage_never_raises_and_chunking_does_not_matter(data: st.DataObject) -> None:
    check_garbage(FAMILY, ("<|python_tag|>", "<|eom_id|>", "<|eot_id|>", "{", "["), data)


# -- detection over every real template ---------------------------------------------------


@pytest.mark.parametrize("name", template_names())
def test_detection_table(name: str) -> None:
    mine = name in TEMPLATES
    assert (llama3_json.detect(template_source(name)) > 0) == mine
    if mine:
        assert selected_family(name) == FAMILY


# -- conformance -------------------------------------------------------------------------------


@pytest.mark.kit
@pytest.mark.parametrize("name", TEMPLATES)
def test_conformance(name: str) -> None:
    report = conformance(llama3_json, name)
    assert report.passed
    parallel = report["parallel_calls"]
    assert parallel.status == "skipped" and "single tool-calls" in (parallel.reason or "")


# -- BFCL round trips -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["simple_python", "multiple"])
def test_bfcl_round_trip_through_llama31(kind: str) -> None:
    source = template_source("meta-llama-Llama-3.1-8B-Instruct.jinja")
    renderer = AssistantTurnRenderer(source)
    for tools, calls in bfcl_sample(kind, every=2):
        reply = render_turn(renderer, calls[:1], tools)
        got = parse_text(FAMILY, reply.text, tools, 9, template=source,
                         prompt_tail=reply.prompt_tail)
        assert canonical_calls((c.name, c.arguments) for c in got.tool_calls) == \
            canonical_calls(calls[:1]), reply.text


def _pythonic(calls: list[tuple[str, dict[str, Any]]]) -> str:
    return "[" + ", ".join(f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"
                           for name, args in calls) + "]"


def test_bfcl_round_trip_in_the_pythonic_form() -> None:
    for tools, calls in bfcl_sample("parallel_multiple", every=2):
        reply = _pythonic(calls)
        events = stream(reply, 4)
        got = [(e.name, e.arguments) for e in events if isinstance(e, ToolCallEndEvent)]
        assert canonical_calls(got) == canonical_calls(calls), reply
        assert tools


@given(case=tws.tool_calls_with_schemas(max_calls=3))
def test_pythonic_round_trip_of_generated_calls(case: Any) -> None:
    _, calls = case
    if not calls:
        return
    got = [(e.name, e.arguments) for e in stream(_pythonic(calls), 3)
           if isinstance(e, ToolCallEndEvent)]
    assert canonical_calls(got) == canonical_calls(calls)
