"""What every family shares on the one engine (``toolwire.parse.engine``): the safe
literal reader, token sets, nested values, family-scoped reasoning filters, and
properties every family parser shares (no exceptions, chunking does not matter,
text without markup comes out whole)."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support.families import bfcl_invalid_calls, conformance_examples, plugins
from toolwire.events import (
    DiagnosticEvent,
    Event,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
)
from toolwire.parse import values
from toolwire.parse.engine import CallParser
from toolwire.parse.markers import TokenSet
from toolwire.parse.protocol import FilterContext, merge_events
from toolwire.parse.reasoning import family_think_filter_spec
from toolwire.parse.record import CallFormat, GrammarArguments, ObjectLiteral
from toolwire.parse.values import decode_nested_value, is_literal, python_literal
from toolwire.plugins.gemma4 import GEMMA4_FORMAT
from toolwire.plugins.glm_xml import GLM_FORMAT, HY3_FORMAT
from toolwire.plugins.harmony import GLIMMER_FORMAT
from toolwire.plugins.invoke_xml import DSML_FORMAT, M2_FORMAT, M3_FORMAT, MINICPM_FORMAT
from toolwire.plugins.kimi import K2_FORMAT, K3_FORMAT
from toolwire.plugins.pythonic import CALLS_CLOSE, CALLS_OPEN
from toolwire.plugins.seed_xml import SEED_FORMAT
from toolwire.plugins.solar import SOLAR_FORMAT
from toolwire.testing import strategies as tws

FAMILY_MARKUP: dict[str, tuple[str, ...]] = {
    "seed_xml": SEED_FORMAT.markup, "glm_xml": GLM_FORMAT.markup, "hy3_xml": HY3_FORMAT.markup,
    "minimax_xml": M2_FORMAT.markup, "minimax_m3": M3_FORMAT.markup,
    "dsml": DSML_FORMAT.markup, "minicpm_xml": (*MINICPM_FORMAT.markup, "<![CDATA[", "]]>"),
    "kimi_k2": K2_FORMAT.markup, "kimi_k3": K3_FORMAT.markup,
    "gemma4": (*GEMMA4_FORMAT.markup, '<|"|>'), "solar": SOLAR_FORMAT.markup,
    "pythonic": (CALLS_OPEN, CALLS_CLOSE, "[", "(", "=", "'"),
    "harmony": ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "to="),
    "glimmer": (*GLIMMER_FORMAT.markup, "<|start|>", "<|message|>", "<|eom|>", " to="),
}


# -- the literal reader ------------------------------------------------------------------


@pytest.mark.parametrize(("text", "value"), [
    ("{'a': [1, None, True], 'b': 'x\"y'}", {"a": [1, None, True], "b": 'x"y'}),
    ('{"a": [1, null, true, false]}', {"a": [1, None, True, False]}),
    ("(1, -2.5, +3)", [1, -2.5, 3]), ("-0.0", -0.0), ("'\\u00e9\\n'", "é\n"),
    ('"\\ud83d\\ude00"', "😀"), ("None", None), ("  [ ]  ", []),
])
def test_python_literal_reads_python_and_json_spellings(text: str, value: object) -> None:
    got = python_literal(text)
    assert is_literal(got) and got == value
    assert repr(got) == repr(value)  # keeps -0.0 and int/float apart


def test_an_escaped_literal_string_arrives_whole_a_raw_one_streams() -> None:
    """Python's str() of a dict holds escapes, decoded only once the string is whole;
    a notation without escapes streams its top-level strings as they are written."""
    def events_of(literal: ObjectLiteral, reply: str) -> list[Event]:
        fmt = CallFormat(family="lit", call_open="<call ", header_stop="{",
                         call_close="</call>", arguments=GrammarArguments(reader=literal))
        parser = CallParser(fmt, {"f": {"type": "object",
                                        "properties": {"a": {"type": "string"}}}})
        return [e for i in range(0, len(reply), 3) for e in parser.feed(reply[i:i + 3])] + \
            parser.close()

    escaped = events_of(ObjectLiteral(quote="'"), "<call f{'a': 'x\\ny z'}</call>")
    assert not [e for e in escaped if isinstance(e, ToolCallDeltaEvent)]
    assert [dict(e.arguments) for e in escaped if isinstance(e, ToolCallEndEvent)] == \
        [{"a": "x\ny z"}]
    raw = events_of(ObjectLiteral(quote="~", escapes=False), "<call f{a:~x\\ny z~}</call>")
    assert "".join(e.text for e in raw if isinstance(e, ToolCallDeltaEvent)) == "x\\ny z"
    assert [dict(e.arguments) for e in raw if isinstance(e, ToolCallEndEvent)] == \
        [{"a": "x\\ny z"}]


@pytest.mark.parametrize("text", [
    "__import__('os').system('true')", "open('/etc/passwd')", "[x for x in range(3)]",
    "f'{1}'", "b'x'", "1j", "{1, 2}", "a.b", "{**x}", "{1: 'a'}", "-'x'", "lambda: 1",
    "1 + 2", "(" * 10_000 + ")" * 10_000, "",
])
def test_python_literal_refuses_everything_else_without_evaluating(text: str) -> None:
    assert not is_literal(python_literal(text))


_LITERAL_ALPHABET = st.sampled_from([*"ab 0-9_\"'\\\n\r\x00\t.eE+xé😀",
                                       *"\x0b\x0c\x1a\x85\u2028\ufeff\ud800"])


@given(st.one_of(
    st.text(_LITERAL_ALPHABET, max_size=12).map(lambda t: f'"{t}"'),
    st.text(_LITERAL_ALPHABET, max_size=12).map(lambda t: f"'{t}'"),
    st.from_regex(r"[ ]?-?[0-9_]{1,25}[ ]?", fullmatch=True),
    st.sampled_from(["True", "False", "None", "true", "false", "null", "TRUE", "nul"]),
    st.text(_LITERAL_ALPHABET, max_size=12)))
@example('"a\nb"')
@example("'a\rb'")
@example('"\x00"')
@example('"\ud800"')
@example('"a\\nb"')
@example("'a\"b'")
@example("0123")
@example("-0")
@example("1" * 19)
@example("1_0")
@example(" 'x' ")
def test_python_literal_reads_as_pythons_parser_does(text: str) -> None:
    """The simple literals read without Python's parser read as the parser reads them
    (the reading with the shortcut off is the rule); anything else is the parser's."""
    shortcut = values._SIMPLE_LITERAL
    values._SIMPLE_LITERAL = re.compile("(?!)")  # (matches nothing: the parser reads all)
    try:
        expected = python_literal(text)
    finally:
        values._SIMPLE_LITERAL = shortcut
    assert repr(python_literal(text)) == repr(expected)


# -- token sets and nested values --------------------------------------------------------


def test_token_set_finds_the_earliest_and_longest_token() -> None:
    tokens = TokenSet(("<a>", "<ab>", "]x["))
    match = tokens.find("zz<ab>]x[", 0)
    assert match is not None and (match.start(), match.group(0)) == (2, "<ab>")


@pytest.mark.parametrize(("text", "held_from"), [
    ("abc <a", 4), ("abc ]x", 4), ("abc", 3), ("<ab", 0), ("x]", 1), ("<a>", 3),
])
def test_token_set_holds_back_only_a_possible_token_start(text: str, held_from: int) -> None:
    assert TokenSet(("<ab>", "]x[", "<a>")).partial(text, 0) == held_from


def _earliest_token_or_beginning(tokens: tuple[str, ...], data: str, pos: int
                                 ) -> tuple[int, int, bool] | None:
    """What :meth:`TokenSet.token_or_beginning` answers, the slow way: at the earliest
    position, the longest token written there, else a proper beginning of one running
    to the end."""
    for at in range(pos, len(data)):
        for token in sorted(tokens, key=len, reverse=True):
            if data.startswith(token, at):
                return at, at + len(token), True
        if any(len(token) > len(data) - at and token.startswith(data[at:])
               for token in tokens):
            return at, len(data), False
    return None


_MARKUP = st.text(alphabet="<|>/ab\n", min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@example(tokens=["<", "<<"], data="<<", pos=0)  # the longer token wins at one position
@example(tokens=["<|a|>", "<|b"], data="x<|", pos=0)  # a beginning two tokens share
@given(tokens=st.lists(_MARKUP, min_size=1, max_size=5, unique=True),
       data=st.text(alphabet="<|>/abx\n", max_size=14), pos=st.integers(0, 14))
def test_one_search_finds_the_earliest_token_or_a_beginning_ending_the_data(
        tokens: list[str], data: str, pos: int) -> None:
    found = TokenSet(tuple(tokens)).token_or_beginning(data, min(pos, len(data)))
    answer = found and (found.start(), found.end(), found.lastgroup is not None)
    assert answer == _earliest_token_or_beginning(tuple(tokens), data, min(pos, len(data)))


def test_nested_value_that_is_not_well_formed_stays_text() -> None:
    ns = "]<]minimax[>["
    raw = f"{ns}<a>1{ns}</b>"
    assert decode_nested_value(raw, ns, {"type": "object"}) == raw


# -- family reasoning filters --------------------------------------------------------------


def test_family_reasoning_filter_applies_to_its_templates_and_its_family_only() -> None:
    spec = family_think_filter_spec("<x:think>", "</x:think>", name="x", families=("fam",))
    assert spec.create(FilterContext(family="fam")) is not None
    assert spec.create(FilterContext(family="other")) is None
    assert spec.create(FilterContext(family="other", chat_template="... </x:think> ...",
                                     prompt_tail="<x:think>")) is not None
    assert spec.create(FilterContext(family="fam", chat_template="no tags")) is None


def test_leading_close_filter_waits_for_a_lone_closing_tag() -> None:
    spec = family_think_filter_spec("<t>", "</t>", name="t", families=("fam",),
                                    starts_unopened=True)
    made = spec.create(FilterContext(family="fam", chat_template="</t>", prompt_tail="ai\n"))
    assert made is not None
    events = made.feed("</t>") + made.feed("answer") + made.close()
    assert merge_events(events) == [TextEvent("answer")]


# -- properties of every family parser -------------------------------------------------------


@pytest.mark.parametrize("family", sorted(FAMILY_MARKUP))
@settings(max_examples=conformance_examples() * 2)
@given(data=st.data())
def test_garbage_never_raises_and_chunking_does_not_matter(family: str,
                                                            data: st.DataObject) -> None:
    text = data.draw(tws.adversarial_text(max_size=160, very_long=True,
                                          fragments=tws.markup_fragments(FAMILY_MARKUP[family])))
    spec = plugins().parser(family)

    def run(pieces: list[str]) -> list[Event]:
        parser = spec.create({})
        return merge_events([e for p in pieces for e in parser.feed(p)] + parser.close())

    whole = run([text])
    assert run(data.draw(tws.chunkings(text))) == whole
    assert not any(isinstance(e, DiagnosticEvent) and e.code == "parser_error" for e in whole)


@pytest.mark.parametrize("family", sorted(FAMILY_MARKUP))
@settings(max_examples=conformance_examples() * 2)
@given(data=st.data())
def test_text_without_markup_comes_out_whole(family: str, data: st.DataObject) -> None:
    markup = FAMILY_MARKUP[family]
    text = data.draw(tws.adversarial_text(max_size=120).filter(
        lambda s: not any(m[:3] in s for m in markup if len(m) >= 3) and "<|" not in s))
    parser = plugins().parser(family).create({})
    pieces = data.draw(tws.chunkings(text))
    events = merge_events([e for p in pieces for e in parser.feed(p)] + parser.close())
    if family in ("harmony", "glimmer"):  # a reply without a header is plain text
        assert "".join(e.text for e in events if isinstance(e, TextEvent)) == text
        return
    assert "".join(e.text for e in events if isinstance(e, TextEvent)) == text
    fmt = plugins().parser(family).format
    if isinstance(fmt, CallFormat) and fmt.ends_inside_opener(text):
        # a reply ending with the start of an opening marker was cut inside a call
        (note,) = [e for e in events if isinstance(e, DiagnosticEvent)]
        assert note.code == "truncated_call" and text.endswith(note.raw), note
    else:
        assert all(isinstance(e, TextEvent) for e in events)


def test_a_huge_string_argument_is_parsed_in_one_pass() -> None:
    content = ("x = '<' * 3  # </parameter not a tag\n" * 100_000)[:3_000_000]
    reply = (f"<seed:tool_call>\n<function=w>\n<parameter=content>{content}</parameter>\n"
             "</function>\n</seed:tool_call>")
    parser = plugins().parser("seed_xml").create({})
    events = [e for i in range(0, len(reply), 4096) for e in parser.feed(reply[i:i + 4096])]
    events += parser.close()
    calls = [e for e in events if isinstance(e, ToolCallEndEvent)]
    assert len(calls) == 1 and calls[0].arguments["content"] == content
    assert not [e for e in events if isinstance(e, DiagnosticEvent)]


def test_bfcl_round_trips_leave_out_only_the_calls_their_own_schema_refuses() -> None:
    """17 of 1747 BFCL ground-truth calls name an undeclared parameter or give a value of
    another type than declared (a list for a string, ``true`` for a string); formats
    that type text values by the schema cannot return them unchanged."""
    left_out = bfcl_invalid_calls()
    assert len(left_out) == 17
    assert ("parallel_multiple", "calculate_voltage_difference") in left_out  # undeclared
    assert ("simple_python", "game_result.get_winner") in left_out  # true for a string
