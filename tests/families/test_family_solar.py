"""The solar parser (Upstage Solar Open): special-token blocks for reasoning, text and
calls, call ids from the markup, conformance and BFCL round trips through the real
template, bad input."""

from __future__ import annotations

import re

import pytest

from tests.support.families import parse, parse_text, without_dropped
from tests.support.tagged_families import bfcl_round_trip, conformance, markers
from toolwire.events import ToolCallDeltaEvent, ToolCallEndEvent
from toolwire.plugins import solar
from toolwire.plugins.solar import SOLAR_FORMAT, solar_call_id

TEMPLATE = "upstage-Solar-Open-100B.jinja"
MARKERS = markers(SOLAR_FORMAT, "<|begin|>", "<|tool_call:name|>")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]


def solar_call(call_id: str, name: str, arguments: str) -> str:
    return (f"<|tool_call:begin|>{call_id}<|tool_call:name|>{name}<|tool_call:args|>"
            f"{arguments}<|tool_call:end|>")


@pytest.mark.kit
def test_conformance_through_the_solar_template() -> None:
    conformance(solar, TEMPLATE, MARKERS)


def test_bfcl_ground_truth_calls_round_trip() -> None:
    assert bfcl_round_trip("solar", TEMPLATE) > 800


def test_reasoning_text_and_calls_with_their_ids() -> None:
    reply = ("<|think|>Two cities.<|end|><|begin|>assistant<|content|>On it.<|end|>"
             "<|begin|>assistant<|tool_calls|>"
             + solar_call("a1b2c3d4e5", "get_weather", '{"city": "Oslo"}')
             + solar_call("f6g7h8i9j0", "get_weather", '{"city": "Rome", "days": 2}')
             + "<|calls|>")
    events = parse("solar", [reply[i:i + 3] for i in range(0, len(reply), 3)], TOOLS)
    calls = [e for e in events if isinstance(e, ToolCallEndEvent)]
    assert [(c.id, dict(c.arguments)) for c in calls] == [
        ("a1b2c3d4e5", {"city": "Oslo"}), ("f6g7h8i9j0", {"city": "Rome", "days": 2})]
    deltas = [e for e in events if isinstance(e, ToolCallDeltaEvent) and e.index == 1]
    assert "".join(d.text for d in deltas) == '{"city": "Rome", "days": 2}'
    out = parse_text("solar", reply, TOOLS)
    assert (out.reasoning, out.content) == ("Two cities.", "On it.")


def test_fresh_call_ids_have_the_shape_the_template_asks_for() -> None:
    ids = {solar_call_id(i) for i in range(20)}
    assert len(ids) == 20 and all(re.fullmatch(r"[a-z0-9]{10}", i) for i in ids)


def test_section_cut_before_its_closing_token_keeps_the_calls() -> None:
    reply = "<|tool_calls|>" + solar_call("x", "get_weather", "{}")
    out = parse_text("solar", reply, TOOLS)
    assert [c.name for c in out.tool_calls] == ["get_weather"] and out.diagnostics == ()


@pytest.mark.parametrize("text", [
    "<|tool_calls|>", "<|tool_calls|><|tool_call:begin|>id<|tool_call:args|>{}<|tool_call:end|>",
    "<|tool_calls|>" + solar_call("id", "get_weather", "{oops") + "<|calls|>",
    "<|tool_calls|><|tool_call:begin|>id<|tool_call:name|>get_weather<|tool_call:args|>{\"a",
    "<|tool_call:end|> stray <|calls|>",
])
def test_bad_input_never_raises_and_never_loses_text(text: str) -> None:
    out = parse_text("solar", text, TOOLS, chunk=2)
    assert out.tool_calls == ()
    assert re.sub(r"\s", "", out.content) == re.sub(r"\s", "", without_dropped(text, out))
