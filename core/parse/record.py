"""One record type for a model family's tool-call markup: :class:`CallFormat`.

Every family, built-in, third-party or derived from a chat template, is a
:class:`CallFormat` run by the one streaming engine (:class:`toolwire.parse.engine.CallParser`).
A reply is text in which calls appear; the record says how::

    [section_open]  call  [separator call]...  [section_close]
    call      = [call_open] HEADER header_end  ARGUMENTS  [call_close]
    HEADER    = the tool name (and perhaps an id), read by ``header``

and ``arguments`` says what the arguments look like:

* :class:`JsonArguments`: one JSON object (Kimi, DeepSeek, Mistral v11...);
* :class:`TaggedArguments`: name/value pairs written as markup, each value raw
  text typed by the tool's schema or by the markup (Qwen XML, GLM, MiniMax...);
* :class:`CallObjects`: the section holds whole calls as JSON objects, a list of
  them, or several in a row, the name inside each object (Hermes, Mistral v3,
  Command R7B...); there is no call markup then;
* :class:`PythonicCalls`: ``[name(key=value, ...), ...]`` (LFM2.5, Llama 3.2);
* :class:`GrammarArguments`: a family's own value syntax, read by a hook or by the
  engine's object-literal reader (Gemma 4).

A new family is usually one record::

    CallFormat(family="my_xml", call_open="<call ", header=Header(attributes={"name": "name"}),
               header_end=(">",), call_close="</call>",
               arguments=TaggedArguments(open="<arg ", header=Header(attributes={"name": "name"}),
                                         header_end=(">",), close="</arg>"))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

if TYPE_CHECKING:
    from .readers import BodyReader, CallContext

__all__ = [
    "Arguments",
    "CallFormat",
    "CallObjects",
    "GrammarArguments",
    "Header",
    "JsonArguments",
    "ObjectLiteral",
    "PythonicCalls",
    "TaggedArguments",
]

Kind = Literal["string", "json"]


def _tuple(value: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,) if value else ()
    return tuple(v for v in value if v)


def _kinds(value: Mapping[str, str | None] | tuple[str, ...] | str) -> Mapping[str, str | None]:
    if isinstance(value, str):
        return {value: None} if value else {}
    if isinstance(value, tuple | list):
        return {v: None for v in value if v}
    return dict(value)


@attrs.frozen(kw_only=True)
class Header:
    """How a header (the text between an opening marker and its end) names a thing.

    Either text *patterns* with holes, tried in order (the first that matches
    the whole header, blanks around it ignored, wins)::

        "{name}"                       get_weather
        "functions.{name}:{index}"     functions.get_weather:0
        "{id}<|tool_call:name|>{name}" a1b2c3<|tool_call:name|>get_weather

    or XML *attributes*: ``{"name": "name"}`` reads ``name="..."`` (``{"name":
    "tool", "kind": "type"}`` reads the name from ``tool=`` and the value kind
    from ``type=``).

    :ivar patterns: holes: ``{name}`` (a tool or parameter name), ``{id}`` (a call
        id: no blanks or quotes), ``{index}`` (digits), ``{kind}`` (a word),
        ``{any}`` (like an id, not kept). A hole written twice (``to={name} ...
        name="{name}"``) must hold the same text both times.
    :ivar attributes: hole -> attribute name, for XML-attribute headers.
    :ivar kinds: a ``{kind}`` value -> ``"string"`` (raw text) or ``"json"``; the
        key ``"*"`` covers any other value.
    :ivar id_is_header: the whole header is the call's id (Kimi K2 answers a call
        by ``functions.NAME:IDX``).
    :ivar prefixes: literal texts that may come first and are skipped (DeepSeek R1
        writes the call type, ``function<｜tool▁sep｜>``, before the name).
    """

    patterns: tuple[str, ...] = attrs.field(default=("{name}",), converter=_tuple)
    attributes: Mapping[str, str] = attrs.field(factory=dict)
    kinds: Mapping[str, str] = attrs.field(factory=dict)
    id_is_header: bool = False
    prefixes: tuple[str, ...] = attrs.field(default=(), converter=_tuple)


@attrs.frozen(kw_only=True)
class JsonArguments:
    """The arguments are one JSON object after the header.

    :ivar fence: the object may be fenced with ```` ```json ```` and ```` ``` ````.
    """

    fence: bool = False


@attrs.frozen(kw_only=True)
class TaggedArguments:
    """Arguments as markup pairs: ``open HEADER header_end [value_open] VALUE close``.

    :ivar open: the marker before a parameter's header (``<parameter=``).
    :ivar header: how the header names the parameter (and perhaps the value's kind).
    :ivar header_end: marker(s) ending the header -> the value kind they imply
        (``"string"``, ``"json"``, or ``None``: typed by the schema). A tuple or
        string means ``None`` for each.
    :ivar value_open: a marker expected (after blanks) before the value (GLM's
        ``<arg_value>``).
    :ivar close: the value's closing marker; ``{name}`` stands for the
        parameter's name (``</{name}>``). A mapping gives one per kind where
        they differ (``{"string": '"</arg>', "json": "</arg>"}``).
    :ivar separator: text written between two arguments besides blanks.
    :ivar trim_newline: the template writes a newline after the header and one
        before the close; they are markup, not value (Qwen XML).
    :ivar cdata: a value may be wrapped in ``<![CDATA[...]]>``.
    :ivar nested: the token prefixing every tag of a nested-element value
        (MiniMax-M3 writes objects and lists as nested elements); the value
        closes with that token and ``</NAME>``.
    :ivar python_values: non-string values may be written as Python literals
        (templates that print values with ``|string``: ``True``, ``None``, ``{'a': 1}``).
    :ivar json_block: ``(open, header_end, close)`` of a block that holds all the
        arguments as one JSON object instead of pairs (Kimi K3).
    :ivar spellings: other spellings a model writes for :attr:`open` or a closing
        marker, each read as that marker (DeepSeek V4.1 writes ``<｜DSML｜ parameter``
        where V4 writes ``<｜DSML｜parameter``); grammars use the template's own.
    """

    open: str
    header: Header = attrs.field(factory=Header)
    header_end: Mapping[str, str | None] = attrs.field(default={">": None}, converter=_kinds)
    value_open: str = ""
    close: str | Mapping[str, str] = ""
    separator: str = ""
    trim_newline: bool = False
    cdata: bool = False
    nested: str = ""
    python_values: bool = False
    json_block: tuple[str, str, str] | None = None
    spellings: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)

    def spelt(self, marker: str) -> tuple[str, ...]:
        """``marker`` and the other spellings of it a model writes."""
        return (marker, *self.spellings.get(marker, ()))

    def reads_as_layout(self, value: str) -> bool:
        """Whether a string ``value`` written raw reads back without its first and last
        newline: where the template writes no newline inside a value's tags, a newline
        on both sides is a model's layout (the documented ambiguity of such formats)."""
        return not self.trim_newline and len(value) > 1 and value[0] == value[-1] == "\n"

    def close_for(self, kind: str | None) -> str:
        """The closing marker of a value of ``kind`` (``{name}`` not yet filled in)."""
        if isinstance(self.close, str):
            return self.close
        return self.close.get(kind or "json") or next(iter(self.close.values()), "")

    def closes(self) -> tuple[str, ...]:
        """Every closing marker (``{name}`` not filled in)."""
        if isinstance(self.close, str):
            return _tuple(self.close)
        return tuple(dict.fromkeys(v for v in self.close.values() if v))


@attrs.frozen(kw_only=True)
class CallObjects:
    """The section holds whole calls as JSON, each naming its tool.

    :ivar name_keys: keys whose (string) value is the tool name.
    :ivar args_keys: keys whose value is the arguments object.
    :ivar named: a call is ``{"NAME": {arguments}}`` (Apertus).
    :ivar strict: only the name, arguments and ``extra_keys`` may appear; any
        other key means the JSON is not a call but text (formats whose calls are
        bare JSON, which an answer may also be).
    :ivar extra_keys: keys tolerated besides name and arguments.
    :ivar require_args: an object without arguments is not a call (strict formats).
    :ivar container: ``"any"`` (an object, a list of objects, or objects one
        after another), ``"list"``, ``"object"``.
    :ivar opened_list: the list's ``[`` is part of the opening marker (``functools[``).
    :ivar fence: the JSON may be fenced with ```` ```json ```` and ```` ``` ````.
    :ivar separators: characters allowed between objects besides blanks (``;``).
    """

    name_keys: tuple[str, ...] = ("name",)
    args_keys: tuple[str, ...] = ("arguments", "parameters")
    named: bool = False
    strict: bool = False
    extra_keys: tuple[str, ...] = ("type", "id")
    require_args: bool = False
    container: Literal["any", "list", "object"] = "any"
    opened_list: bool = False
    fence: bool = False
    separators: str = ""


@attrs.frozen(kw_only=True)
class PythonicCalls:
    """Calls written as Python: ``[name(key=value, ...), ...]`` or ``name(...)``.

    :ivar raw_strings: string values are the raw text between their quotes, not
        escaped (the LFM2.5 template writes ``'`` + text + ``'``); a closing quote
        counts only at a structural boundary (``, key=`` or the end of the call).
        Otherwise strings are Python literals with escapes (Llama 3.2).
    :ivar bare: calls may be written without the surrounding list brackets.
    """

    raw_strings: bool = False
    bare: bool = False


@attrs.frozen(kw_only=True)
class GrammarArguments:
    """A family's own value syntax, read by a hook.

    :ivar reader: ``reader(call) -> BodyReader`` reading one call's arguments
        from their first character to their last (the engine then expects
        ``call_close``); see :class:`toolwire.parse.readers.BodyReader`. Or an
        :class:`ObjectLiteral`, which the engine reads with its own object-literal
        reader (:mod:`toolwire.parse.literal_reader`).
    :ivar name: a name for the syntax, for messages and ``toolwire detect``.
    """

    reader: Callable[[CallContext], BodyReader] | ObjectLiteral
    name: str = "custom"


@attrs.frozen(kw_only=True)
class ObjectLiteral:
    """An object-literal notation that is not JSON, as a :class:`GrammarArguments` reader.

    ``GrammarArguments(reader=ObjectLiteral(...))`` reads a call's arguments written
    as ``{key: value, ...}`` where only the grammar says where a value ends
    (:mod:`toolwire.parse.literal_reader`): Gemma 4's ``{city:<|"|>Paris<|"|>}``, or
    Python's ``str()`` of a dict, ``{'city': 'Paris', 'ok': True}``.

    :ivar quote: the token that opens and closes a string (``<|"|>``, ``'``).
    :ivar escapes: strings hold backslash escapes and are quoted with ``'`` or ``"``,
        whichever Python chose (its ``str()`` of a dict); otherwise a string is the raw
        text between two quote tokens.
    """

    quote: str = "'"
    escapes: bool = True

    def quotes(self) -> tuple[str, ...]:
        """The tokens that may open (and then close) a string."""
        return ("'", '"') if self.escapes and self.quote in ("'", '"') else (self.quote,)


Arguments = JsonArguments | TaggedArguments | CallObjects | PythonicCalls | GrammarArguments
_WHOLE = (CallObjects, PythonicCalls)


def _arguments(value: Arguments | tuple[Arguments, ...]) -> Arguments | tuple[Arguments, ...]:
    if isinstance(value, list):
        return tuple(value)
    return value


@attrs.frozen(kw_only=True)
class CallFormat:
    """One model family's tool-call markup, as the engine reads it.

    :ivar family: the family name (also the parser's registered name).
    :ivar description: one line for ``toolwire plugins``.
    :ivar arguments: how a call's arguments (or, for :class:`CallObjects` and
        :class:`PythonicCalls`, whole calls) are written. A tuple gives
        alternatives, told apart by how the body begins (Mistral writes a JSON
        list of call objects in one generation, ``name[ARGS]{...}`` in the next;
        Llama 3.2 JSON or a pythonic list).
    :ivar section_open: markers opening a block of calls (empty: calls stand alone).
    :ivar section_close: markers closing that block (empty: it ends with the reply
        or at the first text that is not a call).
    :ivar separator: text written between two calls of a section besides blanks.
    :ivar call_open: the marker(s) opening one call, the first as the template
        writes it, then drifted spellings. Empty where a call begins right at its
        header inside a section (Mistral v11's ``[TOOL_CALLS]NAME[ARGS]``), or for
        :class:`CallObjects` and :class:`PythonicCalls`.
    :ivar implicit_section: a call opening marker met in text opens the section
        too (a model that skipped the section's marker), for a whole, well-formed
        call only: a header that reads, then the arguments' first marker (or JSON);
        anything else is plain text. Such a section ends with its closing marker or
        at the first text after its calls that is not a call.
    :ivar bare_calls: the same reading of a call without its section's opening
        marker, for a model known to drop it (Qwen3-Coder) where the template always
        writes it: grammars keep the template's form (``implicit_section`` lets
        them write a call alone).
    :ivar header: how the call header names the tool (and perhaps the id).
    :ivar header_end: markers ending the call header, consumed.
    :ivar header_stop: markers ending the call header that stay in the stream
        (GLM's name ends where ``<arg_key>`` begins; Gemma 4's at ``{``).
    :ivar call_close: the marker(s) closing one call (empty: the arguments' end ends it).
    :ivar text_headers: header names that address the user rather than a tool:
        what follows is text (Functionary v3.2's ``>>>all``).
    :ivar strict_open: an opening marker whose header is not a call is a
        malformed call (text plus a diagnostic); otherwise plain text.
    :ivar at_start: calls may begin the reply without their opening marker (Llama
        3's bare JSON, Functionary v3.2's first recipient line).
    :ivar drops: tokens removed from the text wherever they appear (echoed
        end-of-turn or role tokens). Met while a section, call or value is open,
        a drop or a trailer is the model's end of turn: what is open ends there.
    :ivar trailers: tokens removed from the text once a call was made.
    :ivar blocks: ``{open: (kind, close)}`` text regions the parser routes itself;
        ``kind`` is ``"reasoning"`` or ``"text"`` (Solar's ``<|think|>``).
    :ivar reasoning: ``(open, close)`` of the family's reasoning block when it is
        not ``<think>`` (a stream filter routes it).
    :ivar reasoning_unopened: the model may begin reasoning without the opening
        tag, or write a lone closing tag first.
    :ivar reasoning_headers: optional words the model may write straight after the
        reasoning block's opening tag, dropped with it (Gemma 4's ``thought`` after
        ``<|channel>``); a block without one is reasoning too.
    :ivar answer_open: markers that open the answer: a reasoning block still open
        there ends without its closing tag (Kimi K3's ``<|open|>response<|sep|>``,
        written straight away when the prompt opened the think block).
    :ivar max_calls: the most calls the template renders in one turn (``1`` for
        templates that render only the first call).
    """

    family: str
    arguments: Arguments | tuple[Arguments, ...] = attrs.field(converter=_arguments)
    description: str = ""
    section_open: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    section_close: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    separator: str = ""
    call_open: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    implicit_section: bool = False
    bare_calls: bool = False
    header: Header = attrs.field(factory=Header)
    header_end: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    header_stop: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    call_close: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    text_headers: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    strict_open: bool = True
    at_start: bool = False
    drops: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    trailers: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    blocks: Mapping[str, tuple[str, str]] = attrs.field(factory=dict)
    reasoning: tuple[str, str] | None = None
    reasoning_unopened: bool = False
    reasoning_headers: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    answer_open: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    max_calls: int | None = None

    def __attrs_post_init__(self) -> None:
        kinds = self.kinds
        if not kinds:
            raise ValueError(f"{self.family}: no arguments syntax")
        header_kinds = [k for k in kinds if not isinstance(k, _WHOLE)]
        if len(header_kinds) > 1:
            raise ValueError(f"{self.family}: at most one kind of arguments after a header")
        if header_kinds and not (self.call_open or self.section_open or self.at_start):
            raise ValueError(f"{self.family}: calls need a call_open or section_open marker")
        if len(header_kinds) < len(kinds) and not (self.section_open or self.at_start):
            raise ValueError(f"{self.family}: calls without call markup need section_open "
                             "or at_start")
        if header_kinds and not (self.header_end or self.header_stop):
            raise ValueError(f"{self.family}: a call header needs header_end or header_stop")

    def ends_inside_opener(self, text: str) -> bool:
        """Whether ``text`` ends with the beginning of one of the format's opening markers
        (``"... <tool_"``): a reply that ends there was cut inside a call's opening marker,
        so its text comes with a ``truncated_call`` diagnostic (the documented ambiguity:
        text that itself ends so reads the same). Formats whose opening marker may be
        prose (``strict_open=False``) say nothing of it."""
        if not self.strict_open:
            return False
        openers = (*self.section_open, *(self.call_open if not self.section_open
                                         or self.implicit_section or self.bare_calls else ()))
        return any(text.endswith(o[:i]) for o in openers for i in range(1, len(o)))

    @property
    def kinds(self) -> tuple[Arguments, ...]:
        """The argument syntaxes, as a tuple."""
        return self.arguments if isinstance(self.arguments, tuple) else (self.arguments,)

    @property
    def whole_calls(self) -> bool:
        """Some body holds whole calls (names inside), not one call's arguments."""
        return any(isinstance(k, _WHOLE) for k in self.kinds)

    @property
    def markup(self) -> tuple[str, ...]:
        """Every literal marker of the format (for tests: text that is never content)."""
        tokens: list[str] = [*self.section_open, *self.section_close, *self.call_open,
                             *self.call_close, *self.header_end, *self.header_stop,
                             *self.drops, *self.trailers, *self.blocks,
                             *(close for _, close in self.blocks.values())]
        for args in self.kinds:
            if isinstance(args, TaggedArguments):
                tokens += [*args.spelt(args.open), *args.header_end, args.value_open,
                           *(s.replace("{name}", "") for c in args.closes()
                             for s in args.spelt(c)), args.nested]
                if args.json_block:
                    tokens += [args.json_block[0], args.json_block[2]]
        if self.reasoning:
            tokens += list(self.reasoning)
        return tuple(dict.fromkeys(t for t in tokens if len(t.strip()) > 2))

    def describe(self) -> dict[str, Any]:
        """JSON-ready data: every field, arguments tagged with their kind's name."""
        data = attrs.asdict(self, recurse=False)
        data["header"] = attrs.asdict(self.header)
        data["arguments"] = [{"kind": type(k).__name__,
                              **attrs.asdict(k, filter=lambda a, v: not callable(v)
                                             or attrs.has(type(v)))}  # ObjectLiteral is data
                             for k in self.kinds]
        data["blocks"] = {k: list(v) for k, v in self.blocks.items()}
        return data
