"""The deepseek parser: R1's fenced calls and V3.1's bare ones, the R1 think block, spelling
drifts, detection, conformance and BFCL round trips.

Limits recorded here:

* the conformance suite learns markers by splitting rendered markup on blanks, and
  DeepSeek's tokens touch each other, so the run is given the real tokens (else
  generated content may hold ``<｜tool▁calls▁begin｜>`` itself);
* ``DeepSeek-R1-Distill-Llama-8B`` renders a call only when the content is
  ``None`` and then needs JSON-string arguments, which the conformance renderer
  does not do: its properties are checked by the harness in
  ``tests.support.json_families`` (content ``None``, arguments as strings). That
  template also closes the section after the *second* call and renders any
  third call after ``<｜end▁of▁sentence｜>`` (fixed in llama.cpp's copy,
  R1-Distill-Qwen), so its turns are drawn with at most two calls.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.families import (
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
from toolwire.events import ReasoningEvent, ToolCallDeltaEvent, ToolCallEndEvent
from toolwire.parse.engine import CallParser
from toolwire.plugins import deepseek
from toolwire.plugins.deepseek import DEEPSEEK_FORMAT
from toolwire.testing import AssistantTurnRenderer

FAMILY = "deepseek"
CONFORMANCE_TEMPLATES = ["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                         "deepseek-ai-DeepSeek-V3.1.jinja", "llama-cpp-deepseek-r1.jinja"]
TEMPLATES = [*CONFORMANCE_TEMPLATES, "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"]
TOKENS = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
          "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<｜end▁of▁sentence｜>", "<｜Assistant｜>")
MARKERS = (*TOKENS, *(t.replace("▁", "_") for t in TOKENS),
           *(t.replace("▁", " ") for t in TOKENS), "<think>", "</think>")
R1_DISTILL_LLAMA = TurnCut(
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", FAMILY, "<｜Assistant｜>",
    "<｜end▁of▁sentence｜>",
    reason="renders calls only when content is None, then needs JSON-string arguments",
    markers=MARKERS, string_args=True, content=False, content_none=True, max_calls=2)


def r1_call(name: str, arguments: str) -> str:
    return (f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{arguments}\n```"
            "<｜tool▁call▁end｜>")


def v31_call(name: str, arguments: str) -> str:
    return f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{arguments}<｜tool▁call▁end｜>"


def section(*calls: str, sep: str = "\n") -> str:
    return "<｜tool▁calls▁begin｜>" + sep.join(calls) + "<｜tool▁calls▁end｜>"


def parse_reply(text: str, chunk: int = 0, **kwargs: Any) -> dict[str, Any]:
    return parse_text(FAMILY, text, (), chunk, **kwargs).to_dict()


# -- reference conversions -----------------------------------------------------------


@pytest.mark.parametrize("chunk", [0, 1, 6])
def test_r1_fenced_calls(chunk: int) -> None:
    reply = "Checking.\n" + section(r1_call("get_weather", '{"city": "Paris", "days": 3}'),
                                    r1_call("ping", "{}"))
    out = parse_reply(reply, chunk)
    assert out["content"] == "Checking."
    assert out["tool_calls"] == [{"name": "get_weather", "arguments": {"city": "Paris",
                                                                       "days": 3}},
                                 {"name": "ping", "arguments": {}}]
    assert out["diagnostics"] == []


@pytest.mark.parametrize("chunk", [0, 1, 6])
def test_v31_bare_calls(chunk: int) -> None:
    reply = section(v31_call("get_weather", '{"city": "Paris"}'), v31_call("ping", "{}"), sep="")
    out = parse_reply(reply, chunk)
    assert [(c["name"], c["arguments"]) for c in out["tool_calls"]] == \
        [("get_weather", {"city": "Paris"}), ("ping", {})]


def test_v31_tool_named_function() -> None:
    out = parse_reply(section(v31_call("function", '{"x": 1}')))
    assert out["tool_calls"] == [{"name": "function", "arguments": {"x": 1}}]


def test_r1_think_block_then_calls() -> None:
    template = template_source("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
    reply = "Need the weather.\n</think>\n\n" + section(r1_call("get_weather", "{}"))
    events = parse(FAMILY, [reply[i:i + 3] for i in range(0, len(reply), 3)], template=template,
                   prompt_tail="<｜User｜>hi<｜Assistant｜><think>\n")
    merged = merge_events(events)
    assert merged[0] == ReasoningEvent("Need the weather.")
    assert [e.name for e in merged if isinstance(e, ToolCallEndEvent)] == ["get_weather"]


def test_content_rendered_after_the_calls_is_text() -> None:
    # R1-Distill-Qwen renders a tool-call turn's content after the calls and two tokens
    reply = section(r1_call("a", "{}")) + "<｜end▁of▁sentence｜><｜Assistant｜>Done."
    out = parse_reply(reply)
    assert out["content"] == "Done." and len(out["tool_calls"]) == 1


def test_arguments_stream_as_deltas() -> None:
    args = '{"text": "' + "token " * 40 + '"}'
    reply = section(r1_call("write", args))
    parser = CallParser(DEEPSEEK_FORMAT, {})
    events = [e for i in range(0, len(reply), 4) for e in parser.feed(reply[i:i + 4])]
    deltas = [e for e in events + parser.close() if isinstance(e, ToolCallDeltaEvent)]
    assert len(deltas) > 30 and "".join(d.text for d in deltas) == args


# -- tolerated drifts ---------------------------------------------------------------------


def test_underscore_and_space_spellings_of_the_tokens() -> None:
    for spelt in ("_", " "):
        reply = section(r1_call("a", '{"k": 1}')).replace("▁", spelt)
        assert parse_reply(reply, 2)["tool_calls"] == [{"name": "a", "arguments": {"k": 1}}]


def test_lone_call_begin_without_the_section_token() -> None:
    out = parse_reply(r1_call("a", "{}") + "<｜tool▁calls▁end｜>")
    assert out["tool_calls"] == [{"name": "a", "arguments": {}}] and out["content"] == ""


def test_r1_call_without_a_fence() -> None:
    reply = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n" \
            '{"k": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    assert parse_reply(reply, 1)["tool_calls"] == [{"name": "a", "arguments": {"k": 2}}]


def test_reply_ending_before_the_closing_tokens() -> None:
    reply = "<｜tool▁calls▁begin｜>" + r1_call("a", "{}")[:-len("<｜tool▁call▁end｜>")]
    out = parse_reply(reply)
    assert out["tool_calls"] == [{"name": "a", "arguments": {}}]
    assert out["diagnostics"] == []


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁begin｜>hello", "<｜tool▁call▁begin｜>function",
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>", "<｜tool▁call▁begin｜>a<｜tool▁sep｜>no json",
    "<｜tool▁call▁begin｜>a b<｜tool▁sep｜>{}", "x <｜tool▁ca", "<｜tool▁calls▁begin｜>" * 10,
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n```json\n[1]\n```",
])
def test_bad_input_never_raises_and_never_loses_text(text: str) -> None:
    out = parse_reply(text, chunk=3)
    assert out["tool_calls"] == []
    assert strip_blanks(out["content"]) == strip_blanks(without_dropped(text, out))


@given(data=st.data())
def test_garbage_never_raises_and_chunking_does_not_matter(data: st.DataObject) -> None:
    check_garbage(FAMILY, MARKERS, data)


# -- detection over every real template ---------------------------------------------------


@pytest.mark.parametrize("name", template_names())
def test_detection_table(name: str) -> None:
    mine = name in TEMPLATES
    assert (deepseek.detect(template_source(name)) > 0) == mine
    if mine:
        assert selected_family(name) == FAMILY


# -- conformance ------------------------------------------------------------------------------


@pytest.mark.kit
@pytest.mark.parametrize("name", CONFORMANCE_TEMPLATES)
def test_conformance(name: str) -> None:
    assert conformance(deepseek, name, markers=MARKERS).passed


@given(data=st.data())
def test_r1_distill_llama_round_trip_with_string_arguments(data: st.DataObject) -> None:
    check_cut_round_trip(R1_DISTILL_LLAMA, data)


# -- BFCL round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                                  "deepseek-ai-DeepSeek-V3.1.jinja"])
def test_bfcl_parallel_round_trip(name: str) -> None:
    source = template_source(name)
    renderer = AssistantTurnRenderer(source)
    for tools, calls in bfcl_sample("parallel_multiple", every=3):
        reply = render_turn(renderer, calls, tools)
        got = parse_text(FAMILY, reply.text, tools, 13, template=source,
                         prompt_tail=reply.prompt_tail)
        assert canonical_calls((c.name, c.arguments) for c in got.tool_calls) == \
            canonical_calls(calls), reply.text


def test_bfcl_round_trip_through_r1_distill_llama() -> None:
    for tools, calls in bfcl_sample("parallel_multiple", every=3):
        calls = calls[:R1_DISTILL_LLAMA.max_calls]
        tail, reply = render_cut(R1_DISTILL_LLAMA, calls, tools)
        got = parse_text(FAMILY, reply, tools, 13, template=template_source(
            R1_DISTILL_LLAMA.template), prompt_tail=tail)
        assert canonical_calls((c.name, c.arguments) for c in got.tool_calls) == \
            canonical_calls(calls), reply
