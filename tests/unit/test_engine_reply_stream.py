"""The engine-neutral half of toolwire.engines: one reply's pipeline, fed an engine's deltas.

These run without any engine installed (tests/engines/ drives the real vLLM and
SGLang around the same pieces). The property: however the engine cuts the reply
into deltas, the pieces concatenate to exactly what toolwire's ``parse_reply``
reads, each call arrives once, whole, with contiguous indices and its final JSON,
and a call the reply ended inside is never sent, nor its markup shown as content.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import toolwire
from tests.engines.tools import WEATHER
from toolwire.engines.reply_stream import ReplyPiece, ReplyStream, arguments_json
from toolwire.engines.served_family import (
    ServedFamily,
    forced_tool_choice,
    openai_tools,
    tool_parameters,
)
from toolwire.testing.strategies import adversarial_text, chunkings

CALLS: dict[str, str] = {
    "qwen_xml": ("<tool_call>\n<function=get_weather>\n<parameter=city>\n{city}\n</parameter>\n"
                 "<parameter=days>\n{days}\n</parameter>\n</function>\n</tool_call>"),
    "hermes_json": ('<tool_call>\n{{"name": "get_weather", "arguments": {{"city": {city_json}, '
                    '"days": {days}}}}}\n</tool_call>'),
    "kimi_k2": ("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                "<|tool_call_argument_begin|>{{\"city\": {city_json}, \"days\": {days}}}"
                "<|tool_call_end|><|tool_calls_section_end|>"),
}
"""One call of ``get_weather`` in each family's markup."""


def _call(family: str, city: str, days: int) -> str:
    return CALLS[family].format(city=city, city_json=json.dumps(city), days=days)


def _read(family: str, chunks: list[str], end_reason: toolwire.EndReason) -> ReplyPiece:
    served = ServedFamily.choose(None, family)
    stream = ReplyStream(served.pipeline([WEATHER]), lambda i: f"call_{i}")
    pieces = [stream.feed(c) for c in chunks] + [stream.close(end_reason)]
    assert stream.feed("more") == ReplyPiece()  # closed: nothing more is read
    return ReplyPiece("".join(p.content for p in pieces), "".join(p.reasoning for p in pieces),
                      tuple(c for p in pieces for c in p.calls))


cities = st.text(st.characters(codec="utf-8", exclude_characters="<>\n"), min_size=1,
                 max_size=12).filter(str.strip)


@given(family=st.sampled_from(sorted(CALLS)), before=adversarial_text(max_size=30),
       calls=st.lists(st.tuples(cities, st.integers(0, 99)), min_size=0, max_size=3),
       data=st.data())
def test_pieces_concatenate_to_what_parse_reply_reads_however_the_deltas_fall(
        family: str, before: str, calls: list[tuple[str, int]], data: st.DataObject) -> None:
    text = before + "\n".join(_call(family, c, d) for c, d in calls)
    chunks = data.draw(chunkings(text))
    for end_reason in ("stop", "length"):
        got = _read(family, chunks, end_reason)
        ref = toolwire.parse_reply(text, family=family, tools=[WEATHER], end_reason=end_reason)
        assert [c.index for c in got.calls] == list(range(len(ref.tool_calls)))
        assert [(c.name, c.arguments) for c in got.calls] == [
            (c.name, arguments_json(c.arguments)) for c in ref.tool_calls]
        assert got.reasoning == ref.reasoning
        # at the cut, markup the parser gave back is held out of the content (only there)
        assert got.content == ref.content or (
            end_reason == "length" and ref.content.startswith(got.content))


@given(family=st.sampled_from(sorted(CALLS)), cut=st.integers(0, 10_000), data=st.data())
def test_a_call_the_reply_ended_inside_is_never_sent_nor_shown(
        family: str, cut: int, data: st.DataObject) -> None:
    text = "Checking. " + _call(family, "Paris", 3) + "\n" + _call(family, "Oslo", 5)
    cut_text = text[:cut % (len(text) + 1)]
    got = _read(family, data.draw(chunkings(cut_text)), "length")
    for call in got.calls:
        assert json.loads(call.arguments) in ({"city": "Paris", "days": 3},
                                              {"city": "Oslo", "days": 5})
    open_markup = ("<function=", "<parameter=", '"name"', "<|tool_call_begin|>")
    assert not any(m in got.content for m in open_markup), got.content


def test_reasoning_is_given_back_as_content_between_its_tags_when_asked() -> None:
    served = ServedFamily.choose(None, "hermes_json")
    text = '<think>\nhmm\n</think>\n\nSure.<tool_call>\n{"name": "get_weather", ' \
           '"arguments": {"city": "Oslo"}}\n</tool_call>'
    for tags in (None, ("<think>", "</think>")):
        stream = ReplyStream(served.pipeline([WEATHER]), str, reasoning_tags=tags)
        pieces = [stream.feed(ch) for ch in text] + [stream.close("length")]
        content = "".join(p.content for p in pieces)
        reasoning = "".join(p.reasoning for p in pieces)
        assert (content, reasoning) == (("Sure.", "hmm") if tags is None
                                        else ("<think>hmm</think>Sure.", ""))
        assert [c.name for p in pieces for c in p.calls] == ["get_weather"]


def test_filters_then_parser_read_a_reply_as_the_whole_pipeline_does() -> None:
    """build_pipeline(parser=False) then (filters=False): the split an engine makes."""
    served = ServedFamily.choose(None, "hermes_json")
    text = ('<think>\nI could <tool_call>{"name": "x"}</tool_call>\n</think>\n\nSure.'
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')
    first = served.pipeline([], parser=False)
    second = served.pipeline([WEATHER], filters=False)
    events = []
    for ch in text:
        for event in first.feed(ch):
            events.extend(second.feed(event.text) if isinstance(event, toolwire.TextEvent)
                          else [event])
    for event in first.close():
        events.extend(second.feed(event.text) if isinstance(event, toolwire.TextEvent)
                      else [event])
    events.extend(second.close())
    whole = toolwire.parse_reply(text, family="hermes_json", tools=[WEATHER])
    reasoning = "".join(e.text for e in events if isinstance(e, toolwire.ReasoningEvent))
    content = "".join(e.text for e in events if isinstance(e, toolwire.TextEvent))
    calls = [e.name for e in events if isinstance(e, toolwire.ToolCallEndEvent)]
    assert (reasoning, content, calls) == (whole.reasoning, whole.content,
                                           [c.name for c in whole.tool_calls])


@pytest.mark.parametrize(("choice", "want"), [
    ("required", "required"),
    ("auto", None), ("none", None), (None, None),
    ({"type": "function", "function": {"name": "f"}}, {"type": "function",
                                                        "function": {"name": "f"}}),
    ({"type": "function", "name": "f"}, {"type": "function", "function": {"name": "f"}}),
])
def test_an_engines_tool_choice_is_read_in_all_its_shapes(choice: Any, want: Any) -> None:
    assert forced_tool_choice(choice) == want


def test_engine_tool_records_become_openai_tools_and_parameters() -> None:
    flat = {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}
    tools = openai_tools([WEATHER, flat, "junk"])
    assert [t["function"]["name"] for t in tools] == ["get_weather", "f"]
    assert tool_parameters(tools)["f"] == {"type": "object"}


def test_a_template_no_family_claims_is_refused_with_the_reason() -> None:
    with pytest.raises(toolwire.ParserNotFoundError, match="no parser plugin claims"):
        ServedFamily.choose("{{ messages[0]['content'] }}")
    with pytest.raises(toolwire.ParserNotFoundError, match="toolwire-<family>"):
        ServedFamily.choose(None)


def test_the_docs_family_table_lists_every_family() -> None:
    from tests.engines.family_table import table_rows
    from toolwire.testing import isolated_plugin_manager

    listed = {family for families, _, _ in table_rows() for family in families}
    assert listed == set(isolated_plugin_manager().parsers())
