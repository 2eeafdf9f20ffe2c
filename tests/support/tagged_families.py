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
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

import toolwire
from tests.support.families import (
    Call,
    Keep,
    all_of,
    bfcl_cases,
    canonical,
    conformance_examples,
    parse,
    plugins,
    schema_valid,
    template_source,
    without,
)
from tests.support.templates import template_path
from toolwire.parse.protocol import collect_reply
from toolwire.parse.record import CallFormat, TaggedArguments
from toolwire.testing import (
    AssistantTurnRenderer,
    ConformanceReport,
    check_parser,
)
from toolwire.testing import strategies as tws

__all__ = [
    "bfcl_round_trip",
    "check_literal_markup",
    "conformance",
    "literal_markup_keep",
    "markers",
    "render",
]

THINK = ("<think>", "</think>")









def markers(fmt: CallFormat | None, *extra: str) -> tuple[str, ...]:
    """A family's markers: every token of its format plus ``extra`` (reasoning tags...)."""
    tokens = fmt.markup if fmt is not None else ()
    return tuple(dict.fromkeys((*tokens, *extra)))


def conformance(plugin: ModuleType, name: str, marks: Sequence[str], *,
                keep: Keep | None = None, raise_on_failure: bool = True) -> ConformanceReport:
    """``check_parser`` through a real template, among all family plugins."""
    return check_parser(plugin, template_path(name), examples=conformance_examples(),
                        markers=marks, keep=keep if keep is not None else without(marks),
                        plugins=plugins(), raise_on_failure=raise_on_failure, seed=1234)


# -- what a format can express ------------------------------------------------------------








def literal_markup_keep(fmt: CallFormat) -> Keep:
    """What a tagged format can carry in a value: its own tags, unless a closing tag
    is directly followed (after blanks) by a tag that would confirm it.

    That is the documented ambiguity of every tagged format; ``</parameter>`` alone,
    or followed by text, is fine. So is a value beginning and ending with a newline
    where the template writes none inside the tags (:meth:`TaggedArguments.reads_as_layout`).
    A closing tag, or the call's end, followed by the next call's opening marker reads
    as that call (the rule of the next call), and the family's end-of-turn tokens end
    the turn wherever they are (a value cannot hold one).
    """
    args = next(k for k in fmt.kinds if isinstance(k, TaggedArguments))
    opens = [re.escape(t) for t in (*fmt.call_open, *fmt.section_open) if t]
    follows = [re.escape(t) for t in (*fmt.call_close, *fmt.section_close, *args.spelt(args.open),
                                      *(args.json_block[:1] if args.json_block else ())) if t]
    # every spelling of a closing tag the reader takes (DSML's drifted `</｜DSML｜ parameter>`)
    closes = "|".join(re.escape(s.replace("{name}", "")) for c in args.closes()
                      for s in args.spelt(c))
    pattern = re.compile("(?:" + closes + r")[ \t\r\n]*(?:" + "|".join([*follows, *opens])
                         + r"|$)")
    # the call's end followed by the section's end (or the value's end, or the next call)
    # reads as a call whose value lacks its closing tag
    ends = [re.escape(t) for t in (*fmt.call_close, *fmt.section_close)]
    if ends:
        sections = [re.escape(t) for t in fmt.section_close]
        after = r"[ \t\r\n]*(?:" + "|".join([*sections, *opens, "$"]) + ")"
        pattern = re.compile(pattern.pattern + "|(?:" + "|".join(ends) + ")" + after)
    turn_ends = [t for t in (*fmt.drops, *fmt.trailers) if t.strip()]

    def keep(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
        for value in arguments.values():
            if isinstance(value, str) and args.reads_as_layout(value):
                return False  # a newline on both sides is layout where the template has none
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            if pattern.search(text) or any(t in text for t in turn_ends):
                return False
        return True

    return keep


# -- parsing and rendering ---------------------------------------------------------------






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




BFCL_KINDS = ("simple_python", "multiple", "parallel", "parallel_multiple")






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
def _markup_calls(draw: st.DrawFn, fmt: CallFormat, keep: Keep
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


def check_literal_markup(family: str, template: str, fmt: CallFormat, data: st.DataObject,
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
    # the template's end-of-turn token is a control token no model writes as text
    end = _renderer(template).end_of_turn.strip()
    avoid = (*fmt.markup, *content_markers, *((end,) if end else ()))
    # nor ends with an opening marker's beginning (a reply ending there was cut in it)
    content = data.draw(tws.adversarial_text().filter(
        lambda text: not any(m in text for m in avoid)
        and not fmt.ends_inside_opener(text.rstrip())), label="content")
    try:
        tail, reply = render(template, calls, tools, content=content)
    except toolwire.TemplateError:
        return
    pieces = data.draw(tws.chunkings(reply), label="chunks")
    got = collect_reply(parse(family, pieces, tools, template=template_source(template),
                              prompt_tail=tail))
    assert canonical((c.name, c.arguments) for c in got.tool_calls) == canonical(calls), reply
    assert got.diagnostics == (), reply
