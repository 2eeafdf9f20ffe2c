"""From the markers a template renders to the engine's record, and the self-check.

:func:`~toolwire.families.derive.derive_format` reads the literal markers off
probe renders (an :class:`InferredMarkup`); :func:`to_call_format` turns them into
the :class:`~toolwire.parse.record.CallFormat` the one engine runs, the same kind
of record a plugin author writes; :func:`verify_format` renders a richer turn and
parses it back with that record, so a wrong record is never used.

How markers become the record:

* ``{id}`` holes in the opening marker or after the name move into the header's
  pattern (``{id}<|tool_call:name|>{name}``, ``{name}[CALL_ID]{id}``); the literal
  text before the first hole is the opening marker, the text after the last one
  ends the header;
* blanks around markers are the template's layout and are not required (the
  engine skips blanks between structure), except inside tagged arguments,
  where a newline after the name and before the closing tag is markup the
  value does not hold (``trim_newline``);
* a name followed only by blanks ends where the arguments begin (``header_stop``);
* string and non-string values marked apart (``string="true"``) become per-kind
  header ends and closes.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from ..errors import TemplateError
from ..events import Event
from ..parse.engine import CallParser
from ..parse.protocol import FilterContext, ReplyPipeline, StreamFilter, collect_reply
from ..parse.reasoning import think_filter_spec
from ..parse.record import (
    CallFormat,
    CallObjects,
    GrammarArguments,
    Header,
    JsonArguments,
    ObjectLiteral,
    PythonicCalls,
    TaggedArguments,
)
from .derive_probe import CONTENT, ID_HOLE, ProbeRenderer, refusal

__all__ = ["CHECK_CALLS", "ID_HOLE", "KEY_HOLE", "InferredMarkup", "to_call_format",
           "verify_format"]

KEY_HOLE = "{key}"
DERIVED_FAMILY = "derived"


@attrs.frozen
class InferredMarkup:
    """The literal markers a template renders around calls, as inferred from probes.

    Calls read ``section_open`` + call (+ ``call_separator`` + call)* +
    ``section_close``; one call ``call_open`` NAME ``name_close`` ARGS
    ``call_close``. ``{id}`` inside those markers stands for the call id. ARGS is
    one JSON object (``arguments == "json"``), a whole call written as a JSON object
    (``"objects"``: the name under ``name_key``, the arguments under ``args_key``,
    ``extra_keys`` beside them; ``section_open`` and ``section_close`` around the
    objects, ``call_separator`` between them), or tagged pairs: ``arg_open`` KEY
    ``key_close`` VALUE ``value_close``, joined by ``arg_separator``; ``{key}``
    inside ``value_close`` repeats the argument name; string values may be
    marked apart (``string_key_close`` / ``string_value_close``).
    """

    section_open: str
    section_close: str
    call_open: str
    name_close: str
    call_close: str
    call_separator: str
    arguments: str
    arg_open: str = ""
    key_close: str = ""
    value_close: str = ""
    string_key_close: str = ""
    string_value_close: str = ""
    arg_separator: str = ""
    parallel: bool = True
    reasoning_open: str = ""
    reasoning_close: str = ""
    name_key: str = ""
    args_key: str = ""
    extra_keys: tuple[str, ...] = ()
    cdata: bool = False
    nested: str = ""
    name_echo: str = ""
    raw_strings: bool = False
    bare: bool = False
    quote: str = ""
    escapes: bool = False
    python_values: bool = False


_HOLE = re.compile(r"\{id\}")


def _literal(marker: str, what: str, seen: InferredMarkup) -> str:
    if ID_HOLE in marker:
        raise refusal(f"a call id inside the {what} (a counter hole there is not "
                      "supported)", seen=repr(seen), rule="counters and ids")
    return marker.strip()


def to_call_format(inferred: InferredMarkup, *, drops: tuple[str, ...] = (),
                   prompt_opens: str = "", content_prefix: str = "") -> CallFormat:
    """The engine's record for inferred markers.

    :param drops: turn markup seen around the calls, dropped from the text.
    :param prompt_opens: the call opening the generation prompt ends with: the reply
        may begin with a call without it.
    :param content_prefix: what a call turn writes before its content.
    :raises DerivationError: the markers need something a record cannot say.
    """
    fmt = _as_call_objects(inferred) or _as_pythonic(inferred)
    if fmt is None:
        fmt = _as_header_calls(inferred)
        if prompt_opens:
            fmt = _opened_by_prompt(fmt, inferred.name_close, content_prefix)
    # a drop inside a marker would win over the marker while a delta still ends
    # between the two (a complete token is never held back for a longer one)
    markup = fmt.markup
    kept = tuple(d for d in drops if not any(d in m for m in markup))
    return attrs.evolve(fmt, drops=kept) if kept else fmt


def _opened_by_prompt(fmt: CallFormat, name_close: str, content_prefix: str) -> CallFormat:
    """Calls may begin the reply without their opening, which the generation prompt wrote
    (Functionary v3.2's ``>>>``). Text then comes after a header of its own when the
    content is written after a word and the name's end (``all\n``): that word addresses
    the user, not a tool (``text_headers``)."""
    fmt = attrs.evolve(fmt, at_start=True)
    word = content_prefix[:len(content_prefix) - len(name_close)].strip()
    if name_close and content_prefix.endswith(name_close) and _WORD.fullmatch(word):
        fmt = attrs.evolve(fmt, text_headers=(word,), header_end=(name_close,),
                           header_stop=())
    return fmt


def _as_header_calls(inferred: InferredMarkup) -> CallFormat:
    head, hole, rest = inferred.call_open.partition(ID_HOLE)
    call_open = head.strip()
    pattern_head = hole + rest
    if not call_open:
        raise refusal("nothing marks where a call begins", seen=repr(inferred),
                      rule="call openings")
    name_close = inferred.name_close
    holes = list(_HOLE.finditer(name_close))
    if holes:
        last = holes[-1].end()
        pattern_tail, end = name_close[:last], name_close[last:].strip()
    else:
        pattern_tail, end = "", name_close.strip()
    # a name written twice: both holes are one value, checked equal
    name = "{name}" + inferred.name_echo + "{name}" if inferred.name_echo else "{name}"
    pattern = (pattern_head.strip() + name + pattern_tail.rstrip()).replace(ID_HOLE, "{id}")
    arguments: JsonArguments | TaggedArguments | GrammarArguments
    if inferred.arguments == "json":
        arguments = JsonArguments()
    elif inferred.arguments == "literal":
        arguments = GrammarArguments(reader=ObjectLiteral(quote=inferred.quote,
                                                          escapes=inferred.escapes),
                                     name="object literal")
    else:
        arguments = _tagged(inferred)
    header_stop: tuple[str, ...] = ()
    if not end:  # the name is followed only by blanks: it ends where the arguments begin
        if isinstance(arguments, TaggedArguments):
            header_stop = (arguments.open, _literal(inferred.call_close, "call's end", inferred))
        else:
            header_stop = ("{",)
    section_open = _literal(inferred.section_open, "section's opening", inferred)
    section_close = _literal(inferred.section_close, "section's end", inferred)
    trailers: tuple[str, ...] = ()
    if section_close and not section_open:  # written after the calls: a trailer
        trailers, section_close = (section_close,), ""
    return CallFormat(
        family=DERIVED_FAMILY,
        description="derived from the chat template",
        section_open=section_open,
        section_close=section_close,
        trailers=trailers,
        separator=inferred.call_separator.strip(),
        call_open=call_open,
        # a call opening outside its section opens one (the template may close the
        # section early, a model may skip its marker), where that opening is markup
        # that prose does not hold (not Apertus's '{"')
        implicit_section=bool(section_open) and _is_tag(call_open),
        header=Header(patterns=(pattern,)),
        header_end=end,
        header_stop=tuple(t for t in header_stop if t),
        call_close=_literal(inferred.call_close, "call's end", inferred),
        arguments=arguments,
        reasoning=_reasoning(inferred),
        max_calls=None if inferred.parallel else 1,
    )


def _is_tag(marker: str) -> bool:
    return len(marker) >= 3 and any(c in marker for c in "<>[]|｜")


def _as_call_objects(inferred: InferredMarkup) -> CallFormat | None:
    """Whole calls written as JSON objects naming their tool.

    Read as JSON call objects rather than literal markers, so an object's end is
    where the JSON ends, keys may come in any order, and keys beside the name and
    the arguments (an id, Cohere's ``tool_call_id`` counter) are tolerated.
    """
    if inferred.arguments != "objects":
        return None
    head, tail = inferred.section_open.strip(), inferred.section_close.strip()
    if head.endswith("[") and (tail.startswith("]") or not tail):  # a list of objects
        head, tail = head[:-1].rstrip(), tail[1:].lstrip()
    extra = tuple(dict.fromkeys(("type", "id", *inferred.extra_keys)))
    return _whole_calls(inferred, head, tail, "call objects", CallObjects(
        name_keys=(inferred.name_key,), args_keys=(inferred.args_key,), extra_keys=extra,
        strict=not head))


def _as_pythonic(inferred: InferredMarkup) -> CallFormat | None:
    """Calls written as Python, read by the engine's pythonic reader."""
    if inferred.arguments != "pythonic":
        return None
    return _whole_calls(inferred, inferred.section_open.strip(),
                        inferred.section_close.strip(), "pythonic calls",
                        PythonicCalls(raw_strings=inferred.raw_strings, bare=inferred.bare),
                        separator=inferred.call_separator.strip())


def _whole_calls(inferred: InferredMarkup, head: str, tail: str, what: str,
                 arguments: CallObjects | PythonicCalls, **fields: Any) -> CallFormat:
    """Calls whose arguments' reader finds their ends, between ``head`` and ``tail``
    (a ``tail`` with no ``head`` is a trailer; no ``head``: the reply's start)."""
    if ID_HOLE in head + tail:
        raise refusal(f"a call id outside the {what}", seen=repr(inferred),
                      rule="counters and ids")
    trailers = (tail,) if tail and not head else ()
    return CallFormat(
        family=DERIVED_FAMILY,
        description="derived from the chat template",
        section_open=head,
        section_close="" if trailers else tail,
        at_start=not head,
        trailers=trailers,
        arguments=arguments,
        reasoning=_reasoning(inferred),
        max_calls=None if inferred.parallel else 1,
        **fields,
    )


def _reasoning(inferred: InferredMarkup) -> tuple[str, str] | None:
    if inferred.reasoning_close and inferred.reasoning_close != "</think>":
        return inferred.reasoning_open, inferred.reasoning_close
    return None


def _tagged(inferred: InferredMarkup) -> TaggedArguments:
    key_close, value_close = inferred.key_close, inferred.value_close
    string_key, string_value = inferred.string_key_close, inferred.string_value_close
    trim = all(k.endswith("\n") for k in (key_close, string_key)) and all(
        v.startswith("\n") for v in (value_close, string_value))
    if trim:
        key_close, string_key = key_close[:-1], string_key[:-1]
        value_close, string_value = value_close[1:], string_value[1:]
    header = Header()
    kind = _kind_hole(key_close, string_key)
    if kind is not None and value_close == string_value:
        # the value's type is written in the header (Kimi K3's type="string"): a {kind}
        # hole, string for the word strings get and JSON for any other
        before, string_word, after = kind
        header = Header(patterns=("{name}" + before + "{kind}",),
                        kinds={string_word: "string", "*": "json"})
        header_end: dict[str, str | None] = {after: None}
        close: str | dict[str, str] = value_close.replace(KEY_HOLE, "{name}")
    elif (key_close, value_close) == (string_key, string_value):
        header_end = {key_close: None}
        close = value_close.replace(KEY_HOLE, "{name}")
    else:
        header_end = {key_close: "json", string_key: "string"}
        close = {"json": value_close.replace(KEY_HOLE, "{name}"),
                 "string": string_value.replace(KEY_HOLE, "{name}")}
    if ID_HOLE in inferred.arg_open + key_close + string_key + value_close + string_value:
        raise refusal("a call id inside an argument's markup",
                      seen=repr(inferred), rule="counters and ids")
    return TaggedArguments(open=inferred.arg_open.strip() or inferred.arg_open,
                           header=header, header_end=header_end, close=close,
                           separator=inferred.arg_separator.strip(), trim_newline=trim,
                           cdata=inferred.cdata, nested=inferred.nested,
                           python_values=inferred.python_values)


_WORD = re.compile(r"[A-Za-z_]+")


def _kind_hole(json_close: str, string_close: str) -> tuple[str, str, str] | None:
    """``(text before, the string's word, text after)`` where two header ends differ
    only by a type word (``" type="number">`` / ``" type="string">``), else ``None``."""
    if json_close == string_close:
        return None
    start = 0
    while start < min(len(json_close), len(string_close)) and \
            json_close[start] == string_close[start]:
        start += 1
    while start > 0 and json_close[start - 1].isalpha():
        start -= 1
    end = 0
    while end < min(len(json_close), len(string_close)) - start and \
            json_close[-1 - end] == string_close[-1 - end]:
        end += 1
    while end > 0 and json_close[-end].isalpha():
        end -= 1
    json_word = json_close[start:len(json_close) - end]
    string_word = string_close[start:len(string_close) - end]
    after = json_close[len(json_close) - end:]
    if not (_WORD.fullmatch(json_word) and _WORD.fullmatch(string_word) and after.strip()):
        return None
    return json_close[:start], string_word, after


_CHECK_TOOLS: dict[str, Any] = {
    name: {"type": "object", "properties": {
        "zqkeyone": {"type": "string"}, "zqkeytwo": {"type": "integer"},
        "zqkeythree": {"type": "object"}, "zqkeyfour": {"type": "boolean"}}}
    for name in ("zqfnalpha", "zqfnbeta")
}

_THINK = think_filter_spec()


def _pipeline(fmt: CallFormat, source: str, prompt_tail: str) -> ReplyPipeline:
    """The derived parser behind the core's ``<think>`` filter, as a chat runs it."""
    context = FilterContext(family=fmt.family, chat_template=source, prompt_tail=prompt_tail,
                            call_open=(*fmt.section_open, *fmt.call_open),
                            call_close=(*fmt.section_close, *fmt.call_close))
    made: StreamFilter | None = _THINK.create(context)
    return ReplyPipeline([made] if made is not None else [], CallParser(fmt, _CHECK_TOOLS))


def _inside_open_think(source: str, reply: str, prompt_tail: str) -> bool:
    """The core's filter reads the whole reply as reasoning: the prompt opens ``<think>``
    and the reply never closes it (Nemotron Nano v2 renders content there)."""
    return "</think>" in source and prompt_tail.rstrip().endswith("<think>") and \
        "</think>" not in reply


CHECK_CALLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("zqfnalpha", {"zqkeyone": "multi\nline < value", "zqkeytwo": 42,
                   "zqkeythree": {"a": [1, 2]}, "zqkeyfour": True}),
    ("zqfnbeta", {"zqkeyone": "second"}), ("zqfnalpha", {}))
"""The calls of the richer turn :func:`verify_format` renders."""


def verify_format(fmt: CallFormat, renderer: ProbeRenderer) -> str:
    """Render a richer assistant turn and parse it back with ``fmt``; a problem or ``""``.

    The turn is rendered without content and, where the template keeps it, with
    content beside the calls; each is parsed whole and in 1- and 3-character
    deltas, through the core's ``<think>`` filter as a chat would.
    """
    calls = [(name, dict(arguments)) for name, arguments in CHECK_CALLS]
    if fmt.max_calls == 1 or not renderer.parallel:
        calls = calls[:1]
    contents = ["", CONTENT] if renderer.content_mode != "none" else [""]
    for content in contents:
        try:
            reply, tail = renderer.reply(calls, content)
        except TemplateError as exc:
            return f"the check conversation does not render: {exc}"
        if content and _inside_open_think(renderer.source, reply, tail):
            continue  # the template writes the content inside reasoning it never closes
        for step in (1, 3, len(reply)):
            pipeline = _pipeline(fmt, renderer.source, tail)
            events: list[Event] = []
            for at in range(0, len(reply), step):
                events.extend(pipeline.feed(reply[at:at + step]))
            events.extend(pipeline.close())
            got = collect_reply(events)
            have = [(c.name, dict(c.arguments)) for c in got.tool_calls]
            if have != calls:
                return f"parsed {have!r} from a render of {calls!r}"
            if got.diagnostics:
                return f"diagnostics: {[d.message for d in got.diagnostics]}"
            if got.content.strip() != content:
                return f"text left over: {got.content.strip()[:100]!r}"
            if got.reasoning.strip():
                return f"reasoning from a turn without any: {got.reasoning.strip()[:100]!r}"
    return ""
