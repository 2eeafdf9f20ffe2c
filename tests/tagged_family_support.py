"""Shared support for the tagged and channel family tests (issue 10).

* a plugin manager with every family plugin, so detection is always tested
  among all of them;
* conformance runs (``toolwire.testing.check_parser``) sized to the test budget,
  with the family's real tokens as markers (the renderer learns merged tokens
  for formats that write their tags without blanks between them);
* ``keep`` rules that say which values a format can express;
* rendering through real templates, parsing, and BFCL round trips.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any

import jsonschema
from conftest import SHARED_TEMPLATES
from hypothesis import settings
from hypothesis import strategies as st
from json_family_support import bfcl_cases

import toolwire
from toolwire.events import Event
from toolwire.parsing import collect_reply
from toolwire.plugin_manager import PluginManager
from toolwire.plugins import (
    deepseek,
    gemma4,
    glm_xml,
    harmony,
    hermes_json,
    invoke_xml,
    json_wrappers,
    kimi,
    llama3_json,
    mistral,
    pythonic,
    seed_xml,
    solar,
)
from toolwire.schema import tool_parameters_by_name
from toolwire.selection import build_pipeline
from toolwire.tagged_stream import TaggedFormat
from toolwire.testing import (
    AssistantTurnRenderer,
    ConformanceReport,
    check_parser,
    isolated_plugin_manager,
)
from toolwire.testing import strategies as tws

__all__ = [
    "TAGGED_PLUGINS",
    "Call",
    "Keep",
    "all_of",
    "bfcl_invalid_calls",
    "bfcl_round_trip",
    "canonical",
    "check_literal_markup",
    "conformance",
    "literal_markup_keep",
    "markers",
    "parse",
    "parse_text",
    "plugins",
    "render",
    "strings_in",
    "template_source",
    "without",
]

TAGGED_PLUGINS: tuple[ModuleType, ...] = (seed_xml, glm_xml, invoke_xml, kimi, harmony, gemma4,
                                          pythonic, solar)
JSON_PLUGINS: tuple[ModuleType, ...] = (hermes_json, llama3_json, mistral, deepseek,
                                        json_wrappers)
THINK = ("<think>", "</think>")

Call = tuple[str, dict[str, Any]]
Keep = Callable[[dict[str, Any], dict[str, Any]], bool]


@functools.cache
def plugins() -> PluginManager:
    """The built-ins plus every family plugin of issues 9 and 10."""
    return isolated_plugin_manager(*TAGGED_PLUGINS, *JSON_PLUGINS)


def template_source(name: str) -> str:
    """The source of a real template."""
    return (SHARED_TEMPLATES / name).read_text(encoding="utf-8")


def conformance_examples() -> int:
    """Examples per property: 6 by default, 200 under the ``fuzz`` profile."""
    return max(4, settings().max_examples // 10)


def markers(fmt: TaggedFormat | None, *extra: str) -> tuple[str, ...]:
    """A family's markers: every token of its format plus ``extra`` (reasoning tags...)."""
    tokens = fmt.markup if fmt is not None else ()
    return tuple(dict.fromkeys((*tokens, *extra)))


def conformance(plugin: ModuleType, name: str, marks: Sequence[str], *,
                keep: Keep | None = None, raise_on_failure: bool = True) -> ConformanceReport:
    """``check_parser`` through a real template, among all family plugins."""
    return check_parser(plugin, SHARED_TEMPLATES / name, examples=conformance_examples(),
                        markers=marks, keep=keep if keep is not None else without(marks),
                        plugins=plugins(), raise_on_failure=raise_on_failure, seed=1234)


# -- what a format can express ------------------------------------------------------------


def strings_in(value: Any) -> Iterator[str]:
    """Every string inside an argument value (dict keys included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from strings_in(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings_in(item)


def without(tokens: Sequence[str]) -> Keep:
    """A ``keep``: no argument string holds one of ``tokens``."""

    def keep(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
        return not any(t in s for s in strings_in(arguments) for t in tokens)

    return keep


def all_of(*keeps: Keep) -> Keep:
    """A ``keep`` that every one of ``keeps`` accepts."""

    def keep(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
        return all(k(schema, arguments) for k in keeps)

    return keep


def literal_markup_keep(fmt: TaggedFormat) -> Keep:
    """What a tagged format can carry in a value: its own tags, unless a closing tag
    is directly followed (after blanks) by a tag that would confirm it.

    That is the documented ambiguity of every tagged format; ``</parameter>`` alone,
    or followed by text, is fine.
    """
    follows = [re.escape(t) for t in (fmt.call_close, *fmt.section_close, fmt.param_open,
                                      fmt.arguments_open) if t]
    pattern = re.compile(re.escape(fmt.param_close) + r"[ \t\r\n]*(?:" + "|".join(follows)
                         + r"|$)")

    def keep(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
        for value in arguments.values():
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            if pattern.search(text):
                return False
        return True

    return keep


# -- parsing and rendering ---------------------------------------------------------------


def parse(family: str, pieces: Iterable[str], tools: Sequence[Any] = (), *,
          template: str | None = None, prompt_tail: str = "") -> list[Event]:
    """Feed ``pieces`` through the family's pipeline (stream filters, then the parser)."""
    spec = plugins().parser(family)
    pipeline = build_pipeline(spec, tool_parameters_by_name(list(tools)), plugins=plugins(),
                              chat_template=template, prompt_tail=prompt_tail)
    events: list[Event] = []
    for piece in pieces:
        events.extend(pipeline.feed(piece))
    events.extend(pipeline.close())
    return events


def parse_text(family: str, text: str, tools: Sequence[Any] = (), chunk: int = 0,
               **kwargs: Any) -> toolwire.ParsedReply:
    """Parse a whole reply (in deltas of ``chunk`` characters when given)."""
    step = chunk or max(len(text), 1)
    pieces = [text[i:i + step] for i in range(0, len(text), step)] or [""]
    return collect_reply(parse(family, pieces, tools, **kwargs))


@functools.cache
def _renderer(name: str) -> AssistantTurnRenderer:
    spec = next(s for s in plugins().parsers().values()
                if s.detect(template_source(name)) > 0)
    return AssistantTurnRenderer(template_source(name), make_call_id=spec.make_call_id)


def render(name: str, calls: Sequence[Call], tools: Sequence[dict[str, Any]], *,
           content: str = "") -> tuple[str, str]:
    """``(prompt_tail, reply)``: an assistant turn rendered through a real template."""
    rendered = _renderer(name).render(calls, content=content, tools=tools)
    return rendered.prompt_tail, rendered.text


def canonical(calls: Iterable[tuple[str, Mapping[str, Any]]]) -> list[tuple[str, str]]:
    """Calls as ``(name, canonical JSON)`` pairs, for exact comparison."""
    return [(name, tws.json_dumps(dict(arguments))) for name, arguments in calls]


BFCL_KINDS = ("simple_python", "multiple", "parallel", "parallel_multiple")


def schema_valid(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
    """Whether a call's arguments are declared by, and valid against, its tool's schema."""
    parameters = schema.get("parameters") or {}
    if any(name not in parameters.get("properties", {}) for name in arguments):
        return False
    return bool(jsonschema.Draft202012Validator(parameters).is_valid(arguments))


def bfcl_invalid_calls() -> list[tuple[str, str]]:
    """``(kind, tool)`` of every BFCL ground-truth call its own schema refuses.

    Formats that write values as text type them by the schema and tell a
    literal tag from a real one by the schema's parameter names, so such calls
    (an undeclared parameter, a list for a string) cannot come back unchanged.
    """
    out: list[tuple[str, str]] = []
    for kind in BFCL_KINDS:
        for tools, calls in bfcl_cases(kind):
            schemas = {t["function"]["name"]: t["function"] for t in tools}
            out.extend((kind, n) for n, a in calls if not schema_valid(schemas[n], a))
    return out


def bfcl_round_trip(family: str, template: str, *, keep: Keep | None = None,
                    first_call_only: bool = False, every: int = 2) -> int:
    """Render BFCL ground-truth turns through ``template`` and parse them back.

    Calls their own schema refuses are left out (:func:`bfcl_invalid_calls`).

    :param keep: also leaves out calls the format cannot express.
    :param first_call_only: the template renders only the first call of a turn.
    :param every: take every ``every``-th record (all under the ``fuzz`` profile).
    :returns: the number of calls compared.
    """
    source = template_source(template)
    step = 1 if settings().max_examples >= 1000 else every
    compared = 0
    for kind in BFCL_KINDS:
        for tools, calls in bfcl_cases(kind)[::step]:
            schemas = {t["function"]["name"]: t["function"] for t in tools}
            calls = [(n, a) for n, a in calls if schema_valid(schemas[n], a)
                     and (keep is None or keep(schemas[n], a))]
            if first_call_only:
                calls = calls[:1]
            if not calls:
                continue
            tail, reply = render(template, calls, tools)
            got = collect_reply(parse(family, [reply], tools, template=source,
                                      prompt_tail=tail))
            assert canonical((c.name, c.arguments) for c in got.tool_calls) == \
                canonical(calls), (kind, reply)
            assert got.diagnostics == (), (kind, reply, got.diagnostics)
            compared += len(calls)
    return compared


@st.composite
def _markup_calls(draw: st.DrawFn, fmt: TaggedFormat, keep: Keep
                  ) -> tuple[list[dict[str, Any]], list[Call]]:
    """One or two calls to tools with string parameters whose values are made of
    the format's own tokens, their near misses and a little text."""
    pieces = st.one_of(st.sampled_from(tws.markup_fragments(fmt.markup)),
                       st.text(alphabet=" \n\tab<>/=\"'", max_size=3))
    strings = st.lists(pieces, max_size=8).map("".join)
    tools: list[dict[str, Any]] = []
    calls: list[Call] = []
    for index in range(draw(st.integers(min_value=1, max_value=2))):
        names = draw(st.lists(tws.identifiers(), min_size=1, max_size=3, unique=True))
        properties: dict[str, Any] = {n: {"type": "string"} for n in names}
        properties["count"] = {"type": "integer"}
        name = f"tool{index}"
        function: dict[str, Any] = {"name": name, "description": "strings",
                                    "parameters": {"type": "object", "properties": properties}}
        arguments: dict[str, Any] = {n: draw(strings) for n in names}
        if draw(st.booleans()):
            arguments["count"] = draw(st.integers(min_value=-5, max_value=5))
        tools.append({"type": "function", "function": function})
        if keep(function, arguments):
            calls.append((name, arguments))
    return tools, calls


def check_literal_markup(family: str, template: str, fmt: TaggedFormat, data: st.DataObject,
                         *, keep: Keep | None = None, content_markers: Sequence[str] = ()
                         ) -> None:
    """String values holding the format's own tags come back unchanged.

    Values are made of the format's tokens, their near misses and a little text;
    only the ambiguity :func:`literal_markup_keep` describes (and what ``keep``
    refuses) is left out. The reply is rendered through the real template and
    parsed in random deltas.
    """
    rule = literal_markup_keep(fmt) if keep is None else all_of(literal_markup_keep(fmt), keep)
    tools, calls = data.draw(_markup_calls(fmt, rule), label="case")
    if not calls:
        return
    avoid = (*fmt.markup, *content_markers)
    content = data.draw(tws.adversarial_text().filter(
        lambda text: not any(m in text for m in avoid)), label="content")
    try:
        tail, reply = render(template, calls, tools, content=content)
    except toolwire.TemplateError:
        return
    pieces = data.draw(tws.chunkings(reply), label="chunks")
    got = collect_reply(parse(family, pieces, tools, template=template_source(template),
                              prompt_tail=tail))
    assert canonical((c.name, c.arguments) for c in got.tool_calls) == canonical(calls), reply
    assert got.diagnostics == (), reply
