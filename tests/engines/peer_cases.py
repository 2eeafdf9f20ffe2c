"""Cases from the engines' own parser tests, as data: a reply and what it must read as.

The replies and expected calls are those of vLLM's ``qwen3_coder`` parser tests and
SGLang's ``qwen3_coder`` detector tests, plus Hermes calls in the shapes those
engines' Hermes tests use (facts about the formats, restated here). Each engine test
feeds them through toolwire's adapter: toolwire's own ``parse_reply`` reads every one
as the peer expects (checked first), and the adapters must too, whole and streamed.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

__all__ = ["PEER_CASES", "PeerCase"]


def _fn(name: str, properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": properties, "required": list(required)}}}


WEATHER = _fn("get_current_weather", {
    "city": {"type": "string"}, "state": {"type": "string"},
    "unit": {"type": "string", "enum": ["fahrenheit", "celsius"]}}, ("city", "state"))
AREA = _fn("calculate_area", {"shape": {"type": "string"}, "dimensions": {"type": "object"},
                              "precision": {"type": "integer"}})
TYPES = _fn("test_types", {"int_param": {"type": "integer"}, "float_param": {"type": "number"},
                           "bool_param": {"type": "boolean"}, "str_param": {"type": "string"},
                           "obj_param": {"type": "object"}})
SG_WEATHER = _fn("get_current_weather", {
    "location": {"type": "string"}, "unit": {"type": "string"}, "days": {"type": "integer"}},
    ("location",))
SG_SQL = _fn("sql_interpreter", {"query": {"type": "string"}, "dry_run": {"type": "boolean"}})
SG_TODO = _fn("TodoWrite", {"todos": {"type": "array", "items": {"type": "object", "properties": {
    "content": {"type": "string"}, "status": {"type": "string"}}}}})
SG_TOOLS = (SG_WEATHER, SG_SQL, SG_TODO)
HERMES_WEATHER = _fn("get_current_weather", {
    "city": {"type": "string"}, "state": {"type": "string"}, "unit": {"type": "string"}})


@attrs.frozen
class PeerCase:
    """A peer test's reply, the family that reads it, the tools, and the reading."""

    name: str
    family: str
    reply: str
    tools: tuple[dict[str, Any], ...]
    calls: tuple[tuple[str, dict[str, Any]], ...]
    content: str | None  # None: no content worth sending (empty or blank)

    def calls_json(self) -> list[tuple[str, Any]]:
        return [(n, json.loads(json.dumps(a))) for n, a in self.calls]


def _qwen(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


_DALLAS = {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}

PEER_CASES: tuple[PeerCase, ...] = (
    PeerCase("qwen3_coder: no tools called", "qwen_xml",
             "This is a test response without any tool calls", (WEATHER, AREA), (),
             "This is a test response without any tool calls"),
    PeerCase("qwen3_coder: one call", "qwen_xml", _qwen("get_current_weather", **_DALLAS),
             (WEATHER, AREA), (("get_current_weather", _DALLAS),), None),
    PeerCase("qwen3_coder: one call after content", "qwen_xml",
             "Sure! Let me check the weather for you." + _qwen("get_current_weather", **_DALLAS),
             (WEATHER, AREA), (("get_current_weather", _DALLAS),),
             "Sure! Let me check the weather for you."),
    PeerCase("qwen3_coder: a multi-line JSON object parameter", "qwen_xml",
             _qwen("calculate_area", shape="rectangle",
                   dimensions='{"width": 10, \n "height": 20}', precision="2"),
             (WEATHER, AREA), (("calculate_area", {"shape": "rectangle", "dimensions": {
                 "width": 10, "height": 20}, "precision": 2}),), None),
    PeerCase("qwen3_coder: parallel calls", "qwen_xml",
             _qwen("get_current_weather", **_DALLAS) + "\n" + _qwen(
                 "get_current_weather", city="Orlando", state="FL", unit="fahrenheit"),
             (WEATHER, AREA), (("get_current_weather", _DALLAS), ("get_current_weather", {
                 "city": "Orlando", "state": "FL", "unit": "fahrenheit"})), None),
    PeerCase("qwen3_coder: typed parameters after content", "qwen_xml",
             "Let me calculate that area for you." + _qwen(
                 "calculate_area", shape="circle", dimensions='{"radius": 15.5}', precision="3"),
             (WEATHER, AREA), (("calculate_area", {"shape": "circle", "dimensions": {
                 "radius": 15.5}, "precision": 3}),), "Let me calculate that area for you."),
    PeerCase("qwen3_coder: the call without its <tool_call> tags", "qwen_xml",
             "<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n"
             "<parameter=state>\nTX\n</parameter>\n</function>", (WEATHER, AREA),
             (("get_current_weather", {"city": "Dallas", "state": "TX"}),), None),
    PeerCase("qwen3_coder: values typed by the schema", "qwen_xml",
             _qwen("test_types", int_param="42", float_param="3.14", bool_param="true",
                   str_param="hello world", obj_param='{"key": "value"}'), (TYPES,),
             (("test_types", {"int_param": 42, "float_param": 3.14, "bool_param": True,
                              "str_param": "hello world", "obj_param": {"key": "value"}}),),
             None),
    PeerCase("sglang qwen3_coder: plain text", "qwen_xml", "This is plain text test",
             SG_TOOLS, (), "This is plain text test"),
    PeerCase("sglang qwen3_coder: one bare call, values on the tag's line", "qwen_xml",
             "<function=get_current_weather>\n<parameter=location>Boston</parameter>\n"
             "<parameter=unit>celsius</parameter>\n<parameter=days>3</parameter>\n</function>",
             SG_TOOLS, (("get_current_weather", {"location": "Boston", "unit": "celsius",
                                                 "days": 3}),), None),
    PeerCase("sglang qwen3_coder: text, then a bare call", "qwen_xml",
             "Text prefix + tool call test\n\n<function=get_current_weather>\n"
             "<parameter=location>Boston</parameter>\n<parameter=unit>celsius</parameter>\n"
             "<parameter=days>3</parameter>\n</function>", SG_TOOLS,
             (("get_current_weather", {"location": "Boston", "unit": "celsius", "days": 3}),),
             "Text prefix + tool call test"),
    PeerCase("sglang qwen3_coder: two bare calls", "qwen_xml",
             "Text prefix + double tool call test\n\n<function=get_current_weather>\n"
             "<parameter=location>New York</parameter>\n</function>\n<function=sql_interpreter>"
             "\n<parameter=query>SELECT * FROM users</parameter>\n<parameter=dry_run>True"
             "</parameter>\n</function>\n", SG_TOOLS,
             (("get_current_weather", {"location": "New York"}),
              ("sql_interpreter", {"query": "SELECT * FROM users", "dry_run": True})),
             "Text prefix + double tool call test"),
    PeerCase("sglang qwen3_coder: parameters closed only by the next one", "qwen_xml",
             "Text prefix + implicit parameter close test\n\n<function=get_current_weather>\n"
             "<parameter=location>Paris\n<parameter=unit>celsius\n<parameter=days>3\n"
             "</function>", SG_TOOLS,
             (("get_current_weather", {"location": "Paris", "unit": "celsius", "days": 3}),),
             "Text prefix + implicit parameter close test"),
    PeerCase("sglang qwen3_coder: an array of objects with a single-quoted string", "qwen_xml",
             "Text prefix + complex schema tool call test\n\n<function=TodoWrite>\n"
             "<parameter=todos>\n[\n {\"content\": \"Buy a new car\", \"status\": 'pending'},"
             "\n {\"content\": \"Buy a new house\", \"status\": \"completed\"}\n]\n"
             "</parameter>\n</function>\n\n", SG_TOOLS,
             (("TodoWrite", {"todos": [{"content": "Buy a new car", "status": "pending"},
                                       {"content": "Buy a new house", "status": "completed"}]}),),
             "Text prefix + complex schema tool call test"),
    PeerCase("hermes: one call", "hermes_json",
             '<tool_call>\n{"name": "get_current_weather", "arguments": {"city": "Dallas", '
             '"state": "TX", "unit": "fahrenheit"}}\n</tool_call>', (HERMES_WEATHER,),
             (("get_current_weather", _DALLAS),), None),
    PeerCase("hermes: content, then parallel calls", "hermes_json",
             'Checking both.\n<tool_call>\n{"name": "get_current_weather", "arguments": '
             '{"city": "Dallas", "state": "TX", "unit": "fahrenheit"}}\n</tool_call>\n'
             '<tool_call>\n{"name": "get_current_weather", "arguments": {"city": "Orlando", '
             '"state": "FL", "unit": "fahrenheit"}}\n</tool_call>', (HERMES_WEATHER,),
             (("get_current_weather", _DALLAS), ("get_current_weather", {
                 "city": "Orlando", "state": "FL", "unit": "fahrenheit"})), "Checking both."),
    PeerCase("hermes: no call, plain text", "hermes_json", "The weather is nice today.",
             (HERMES_WEATHER,), (), "The weather is nice today."),
)
"""The cases (vLLM's ``tests/tool_parsers`` for qwen3_coder and hermes; SGLang's
``test_function_call_parser`` covers the same formats with the same shapes)."""
