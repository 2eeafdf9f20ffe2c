"""The shared streaming core of the JSON families: the JSON value scanner
(``toolwire.parse.json_stream``), the JSON call readers (``toolwire.parse.json_readers``), the
engine reading sections of JSON calls, and the reasoning filter for other tags
(``toolwire.reasoning_tags``)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolwire import merge_events
from toolwire.events import (
    DiagnosticEvent,
    Event,
    ReasoningEvent,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from toolwire.parse.engine import CallParser
from toolwire.parse.json_readers import CallObjectReader, CallObjectsReader, JsonArgsReader
from toolwire.parse.json_stream import INVALID, NEED_MORE, JsonValueScanner, decode_json
from toolwire.parse.markers import TokenSet
from toolwire.parse.protocol import FilterContext
from toolwire.parse.readers import DONE, FAIL, MORE, NOT_A_CALL, CallContext, CallNumbering
from toolwire.parse.reasoning import family_think_filter_spec
from toolwire.parse.record import CallFormat, CallObjects
from toolwire.parse.values import arguments_from
from toolwire.testing import strategies as tws
from toolwire.vocabulary.schema import ToolSchemaIndex


def scan(pieces: list[str]) -> tuple[int, JsonValueScanner]:
    """Feed pieces; return the end of the value within their concatenation."""
    scanner = JsonValueScanner()
    offset = 0
    for piece in pieces:
        end = scanner.feed(piece)
        if end >= 0:
            return offset + end, scanner
        if end == INVALID:
            return INVALID, scanner
        offset += len(piece)
    return (offset if scanner.finish() else NEED_MORE), scanner


# -- the scanner -----------------------------------------------------------------------


@given(value=tws.json_values(), indent=st.sampled_from([None, 0, 2]),
       suffix=st.sampled_from(["", " tail", "</tool_call>", "```", "\n[x]", ",{}"]),
       data=st.data())
def test_scanner_finds_the_end_of_any_value_however_it_is_split(
        value: Any, indent: int | None, suffix: str, data: st.DataObject) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=data.draw(st.booleans()))
    # every suffix begins with a character that cannot continue a bare number or
    # literal, and an empty one ends it at finish()
    pieces = data.draw(tws.chunkings(" \n" + text + suffix))
    end, scanner = scan(pieces)
    assert end == len(text) + 2
    assert scanner.text == text
    assert scanner.decode() == (True, value)


@pytest.mark.parametrize("text", ['"a\\"b"', '"\\\\"', '"\\u00e9\\n"', '{"k": "\\\\\\""}'])
def test_escapes_split_at_every_position(text: str) -> None:
    for cut in range(1, len(text)):
        end, scanner = scan([text[:cut], text[cut:], "rest"])
        assert end == len(text), cut
        assert scanner.decode() == (True, json.loads(text))


@pytest.mark.parametrize(("text", "at"), [
    ("{]", 1), ("[}", 1), ('{"a": 1 <tag>', 8), ("<x>", 0), ("{'a': 1}", 1), (")", 0),
])
def test_text_that_stops_being_json_is_invalid_at_once(text: str, at: int) -> None:
    scanner = JsonValueScanner()
    assert scanner.feed(text) == INVALID
    assert scanner.error_at == at and scanner.failed
    assert scanner.feed("more") == INVALID


def test_closers_and_depth_of_an_unfinished_value() -> None:
    scanner = JsonValueScanner()
    assert scanner.feed('{"a": [1, {"b": "x') == NEED_MORE
    assert scanner.in_string and scanner.depth == 3
    assert scanner.feed('"') == NEED_MORE
    assert not scanner.in_string and scanner.closers() == "}]}"


def test_depth_beyond_the_limit_is_invalid() -> None:
    scanner = JsonValueScanner(max_depth=10)
    assert scanner.feed("[" * 11) == INVALID


def test_a_top_level_scalar_ends_at_a_delimiter_or_at_the_end() -> None:
    scanner = JsonValueScanner()
    assert scanner.feed("12") == NEED_MORE and scanner.feed("3") == NEED_MORE
    assert scanner.feed("4}") == 1 and scanner.text == "1234"
    scanner = JsonValueScanner()
    assert scanner.feed("true") == NEED_MORE and scanner.finish() and scanner.done


def test_decode_never_raises() -> None:
    assert decode_json("[" * 100_000 + "]" * 100_000) == (False, None)
    assert decode_json("{bad") == (False, None)
    assert decode_json('"raw\nnewline"') == (True, "raw\nnewline")


def test_scanning_is_linear_in_the_text() -> None:
    body = json.dumps({"content": "x = '<a>' \\ \"q\"\n" * 40_000})
    deltas = [body[i:i + 4] for i in range(0, len(body), 4)]

    def run(count: int) -> float:
        scanner = JsonValueScanner(keep_text=False)
        start = time.perf_counter()
        for delta in deltas[:count]:
            scanner.feed(delta)
        return time.perf_counter() - start

    small, large = run(len(deltas) // 4), run(len(deltas))
    assert large < max(small, 0.01) * 12  # 4x the text: far less than 16x (quadratic)
    assert large < 2.0


# -- the call readers ---------------------------------------------------------------------


def read(reader: Any, pieces: list[str]) -> tuple[int, int, list[Event]]:
    """Feed a reader as the section parser does (holding back what it asks to)."""
    out: list[Event] = []
    pending = ""
    for i, piece in enumerate(pieces):
        data = pending + piece
        status, at = reader.feed(data, 0, out, eof=i == len(pieces) - 1)
        if status != MORE:
            return status, at + sum(map(len, pieces[:i])) - len(pending), out
        pending = data[at:]
    return MORE, -1, out


def test_object_reader_streams_arguments_and_emits_the_call() -> None:
    text = '{"name": "f", "arguments": {"a": [1, 2], "b": "x"}, "id": "q"} tail'
    status, at, out = read(CallObjectReader(CallObjects(), CallNumbering()), list(text))
    assert (status, at) == (DONE, text.index(" tail"))
    assert isinstance(out[0], ToolCallStartEvent)
    deltas = "".join(e.text for e in out if isinstance(e, ToolCallDeltaEvent))
    assert deltas == '{"a": [1, 2], "b": "x"}'
    assert out[-1] == ToolCallEndEvent("f", {"a": [1, 2], "b": "x"}, index=0)


def test_strict_object_with_a_foreign_key_is_not_a_call() -> None:
    shape = CallObjects(strict=True, require_args=True)
    reader = CallObjectReader(shape, CallNumbering())
    status, _, out = read(reader, ['{"answer": 42}'])
    assert (status, reader.failure, out) == (FAIL, NOT_A_CALL, [])


def test_named_object_takes_the_key_as_the_tool_name() -> None:
    status, _, out = read(CallObjectReader(CallObjects(named=True), CallNumbering()),
                          ['{"get_weather": {"city": "Oslo"}}'])
    assert status == DONE and out[-1] == ToolCallEndEvent("get_weather", {"city": "Oslo"})


def test_list_reader_numbers_calls_in_order() -> None:
    numbering = CallNumbering()
    numbering.take()  # a call earlier in the reply
    status, _, out = read(CallObjectsReader(CallObjects(container="list"), numbering),
                          ['[{"name": "a", "arguments": {}}, {"name": "b"}]'])
    assert status == DONE
    assert [(e.name, e.index) for e in out if isinstance(e, ToolCallEndEvent)] == [("a", 1),
                                                                               ("b", 2)]


def _call(name: str) -> CallContext:
    return CallContext(0, name, "", ToolSchemaIndex({}))


def test_args_reader_needs_json_arguments() -> None:
    reader = JsonArgsReader(_call("f"))
    status, _, out = read(reader, ["hello"])
    assert status == FAIL and out == [] and reader.failure == "malformed_arguments"
    reader = JsonArgsReader(_call("f"))
    status, _, out = read(reader, ['  "{\\"k\\": 1}" x'])
    assert status == DONE and reader.arguments == {"k": 1}
    assert [n.code for n in reader.notes] == ["double_encoded_arguments"]


@pytest.mark.parametrize(("value", "expected"), [
    (None, ({}, False)), ({"a": 1}, ({"a": 1}, False)), ("", ({}, False)),
    ('{"a": 1}', ({"a": 1}, True)), ("[1]", (None, False)), ([1], (None, False)),
    (3, (None, False)),
])
def test_arguments_from(value: Any, expected: tuple[dict[str, Any] | None, bool]) -> None:
    assert arguments_from(value) == expected


def test_token_sets_find_partial_markers() -> None:
    markers = TokenSet(("[TOOL_CALLS]", "<tool_call>"))
    assert markers.partial("abc [TOOL_", 0) == 4
    assert markers.partial("abc [x] <tool", 0) == 8
    assert markers.partial("abc [TOOL_CALLS]", 0) == 16


# -- the section parser --------------------------------------------------------------------


TOY = CallFormat(family="toy", section_open="<<call>>", arguments=CallObjects(),
                 drops="<end>")
"""A toy family: ``<<call>>`` then a call object, ``<end>`` dropped."""


def toy(text: str, size: int) -> list[Event]:
    parser = CallParser(TOY, {})
    events = [e for i in range(0, len(text), size) for e in parser.feed(text[i:i + size])]
    return merge_events(events + parser.close())


@pytest.mark.parametrize("size", [1, 2, 5, 100])
def test_section_parser_reads_calls_between_text(size: int) -> None:
    text = 'Hi \n<<call>>{"name": "a", "arguments": {"x": 1}}\n\nbye<end>  '
    events = toy(text, size)
    assert events[0] == TextEvent("Hi")
    assert ToolCallEndEvent("a", {"x": 1}) in events
    # only the token is dropped; blanks on both sides of the call leave one separator
    assert events[-1] == TextEvent(" \nbye  ")


@pytest.mark.parametrize("size", [1, 3, 100])
def test_a_failed_section_is_text_with_its_blanks_and_a_diagnostic(size: int) -> None:
    text = 'Hi \n<<call>>{"name": "a", "arguments": nope} bye'
    events = toy(text, size)
    assert "".join(e.text for e in events if isinstance(e, TextEvent)) == text
    assert [e.code for e in events if isinstance(e, DiagnosticEvent)] == ["malformed_call"]


def test_a_reader_that_raises_becomes_a_parser_error_diagnostic() -> None:
    from toolwire.parse.record import GrammarArguments

    def broken(call: CallContext) -> Any:
        raise RuntimeError("bug")

    fmt = CallFormat(family="broken", call_open="<<call ", header_end=">>",
                     arguments=GrammarArguments(reader=broken))
    parser = CallParser(fmt, {})
    events = parser.feed("x <<call f>>{") + parser.close()
    assert any(isinstance(e, DiagnosticEvent) and e.code == "parser_error" for e in events)


@given(text=tws.adversarial_text(max_size=120, fragments=tws.markup_fragments(
    ["<<call>>", "<end>"])), data=st.data())
def test_section_parser_chunking_does_not_matter(text: str, data: st.DataObject) -> None:
    pieces = data.draw(tws.chunkings(text))
    parser = CallParser(TOY, {})
    events = [e for piece in pieces for e in parser.feed(piece)] + parser.close()
    assert merge_events(events) == toy(text, max(len(text), 1))


# -- reasoning filters for tags that are not <think> -----------------------------------------


@pytest.mark.parametrize("size", [1, 2, 3, 100])
def test_reasoning_tags_not_beginning_with_a_bracket_survive_any_split(size: int) -> None:
    spec = family_think_filter_spec("[THINK]", "[/THINK]", name="t", families=("x",))
    made = spec.create(FilterContext(family="x", prompt_tail="[/INST]"))
    assert made is not None
    text = "[THINK]plan it[/THINK]The answer."
    events = [e for i in range(0, len(text), size) for e in made.feed(text[i:i + size])]
    assert merge_events(events + made.close()) == [ReasoningEvent("plan it"),
                                                   TextEvent("The answer.")]


def test_reasoning_filter_applies_to_its_templates_and_families_only() -> None:
    spec = family_think_filter_spec("[THINK]", "[/THINK]", name="t", families=("x",))
    assert spec.create(FilterContext(family="y")) is None
    assert spec.create(FilterContext(family="y", chat_template="no tags")) is None
    assert spec.create(FilterContext(family="y", chat_template="...[/THINK]...")) is not None


def test_reasoning_may_start_without_its_opening_tag() -> None:
    spec = family_think_filter_spec("Steps:", "[BEGIN FINAL RESPONSE]", name="t",
                                        families=("x",), starts_unopened=True)
    made = spec.create(FilterContext(family="x", prompt_tail="<|assistant|>\n"))
    assert made is not None
    events = made.feed("thinking\n[BEGIN FINAL") + made.feed(" RESPONSE]\nanswer") + made.close()
    assert merge_events(events) == [ReasoningEvent("thinking"), TextEvent("answer")]
