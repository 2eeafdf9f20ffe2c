"""A delta that only lengthens a beginning of markup held back is appended to it, unread.

The engine keeps, with what it holds back, the beginnings of markup the scanner that held
it would hold all of back again (``_held_markup``). These tests hold the shortcut to what
it claims: with it and without it, every delta gives the same events and leaves the same
text held, for every family's markup, cut anywhere.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.families import conformance_examples, plugins
from toolwire.events import Event
from toolwire.parse.engine import CallParser
from toolwire.parse.markers import NOTHING_HELD
from toolwire.parse.record import CallFormat
from toolwire.plugins.kimi import K3_FORMAT
from toolwire.testing import strategies as tws
from toolwire.testing.drift import end_tokens


class _ReadAgain(CallParser):
    """The engine without the shortcut: every delta after a hold is read again."""

    __slots__ = ()

    def feed(self, text: str) -> list[Event]:
        self._held_markup = NOTHING_HELD
        return super().feed(text)


def _formats() -> dict[str, CallFormat]:
    found = {}
    for name, spec in sorted(plugins().parsers().items()):
        if isinstance(spec.format, CallFormat):
            found[name] = spec.format
    return found


FORMATS = _formats()
TOOLS: dict[str, Any] = {"search": {"type": "object", "properties": {
    "query": {"type": "string"}, "limit": {"type": "integer"}}}}


def _deltas(parser: CallParser, pieces: list[str]) -> list[Any]:
    """Each delta's events and what is held after it, then the close's events."""
    steps: list[Any] = [(parser.feed(piece), parser._pending) for piece in pieces]
    return [*steps, parser.close()]


def test_every_family_with_call_markup_is_checked() -> None:
    assert {"qwen_xml", "kimi_k3", "hermes_json", "gemma4"} <= set(FORMATS)


def _markup_heavy(fmt: CallFormat) -> st.SearchStrategy[str]:
    """Replies of the family's markup, whole and cut short anywhere, between short words,
    blanks and quotes: where scanners hold beginnings back."""
    markup = (*fmt.markup, *end_tokens(fmt))
    whole = st.sampled_from(markup)
    cut = st.sampled_from(markup).flatmap(
        lambda m: st.integers(1, max(1, len(m) - 1)).map(lambda k: m[:k]))
    other = st.sampled_from(("a", "x 1", "search", " ", "\n", '"', "=", "{", "}", "[", "<", "|"))
    opening = st.sampled_from(("", *fmt.section_open, *fmt.call_open))
    return st.tuples(opening, st.lists(st.one_of(whole, cut, other), max_size=24)).map(
        lambda drawn: drawn[0] + "".join(drawn[1]))


@pytest.mark.parametrize("family", sorted(FORMATS))
@settings(max_examples=conformance_examples() * 20)
@given(data=st.data())
def test_the_shortcut_gives_what_reading_again_gives(family: str,
                                                     data: st.DataObject) -> None:
    fmt = FORMATS[family]
    text = data.draw(st.one_of(_markup_heavy(fmt), tws.adversarial_text(
        max_size=160, fragments=tws.markup_fragments((*fmt.markup, *end_tokens(fmt))))))
    pieces = data.draw(tws.chunkings(text))
    assert _deltas(CallParser(fmt, TOOLS), pieces) == _deltas(_ReadAgain(fmt, TOOLS), pieces)


def test_kimi_k3_markup_in_short_deltas_takes_the_shortcut_and_reads_alike() -> None:
    reply = ('<|open|>tools<|sep|><|open|>call tool="search" index="1"<|sep|>'
             '<|open|>argument key="query" type="string"<|sep|>term<|close|>argument<|sep|>'
             '<|open|>argument key="limit" type="number"<|sep|>3<|close|>argument<|sep|>'
             '<|close|>call<|sep|><|close|>tools<|sep|>')
    pieces = [reply[i:i + 3] for i in range(0, len(reply), 3)]
    parser = CallParser(K3_FORMAT, TOOLS)
    appended = 0
    steps: list[Any] = []
    for piece in pieces:
        before = parser._pending
        shortcut = bool(before) and before + piece in parser._held_markup
        steps.append((parser.feed(piece), parser._pending))
        appended += shortcut and parser._pending == before + piece
    steps.append(parser.close())
    assert appended >= 5
    assert steps == _deltas(_ReadAgain(K3_FORMAT, TOOLS), pieces)
