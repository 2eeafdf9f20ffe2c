"""A configurable streaming parser for tagged tool-call formats.

Many families write a call as *open, name, key/value pairs, close*, differing
only in their markup::

    <minimax:tool_call><invoke name="f"><parameter name="p">v</parameter></invoke>...
    <tool_call>f<arg_key>p</arg_key><arg_value>v</arg_value></tool_call>
    <｜DSML｜invoke name="f"><｜DSML｜parameter name="p" string="true">v</｜DSML｜parameter>

or give the call a JSON (or custom) body between special tokens::

    <|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{"p": "v"}<|tool_call_end|>

:class:`TaggedFormat` describes one such markup; :class:`TaggedCallParser` is the
streaming parser for it. It is one pass over a cursor: each delta is scanned with
``str.find``/compiled alternations, only a short tail that may be the start of
a token (or a bounded tag header being read) is held back, and string values
stream as argument deltas while the model writes them.

A value's closing tag counts only when what follows it is another parameter of
the tool (by the schema's names, not yet given), the call's or section's end,
or the end of the reply; so a value may contain the format's own tags. Bad
input never raises: markup that is not a call becomes text plus a
:class:`~toolwire.events.DiagnosticEvent`.

The module also holds the value decoding shared by these families (a safe
Python-literal reader for templates that print values through ``|string``,
nested-XML values).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Protocol

import attrs

from ..conversation.schema import (
    ToolSchemaIndex,
    coerce_text_value,
    json_type_of,
    resolve_ref,
    schema_types,
)
from ..events import (
    DiagnosticEvent,
    Event,
    ReasoningEvent,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEvent,
    ToolCallStartEvent,
)
from .json_stream import decode_json
from .streaming import HeldWhitespace

__all__ = [
    "BodyDecoder",
    "CallHeader",
    "JsonBody",
    "ParamHeader",
    "TaggedCallParser",
    "TaggedFormat",
    "TokenSet",
    "attribute",
    "decode_nested_value",
    "is_literal",
    "name_attribute_call",
    "name_attribute_param",
    "plain_call_header",
    "plain_param_header",
    "python_literal",
    "valid_name",
]

MAX_NAME: Final = 256
MAX_GAP: Final = 64  # blanks allowed between a closing tag and the tag that confirms it
_BLANKS = re.compile(r"[ \t\r\n]*")
_NAME_RE = re.compile(r"[^\s<>\"'{}()\[\],]{1,256}")
_ATTR_RE = re.compile(r"""([A-Za-z_][\w:.-]*)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_ENTITIES = {"&quot;": '"', "&apos;": "'", "&lt;": "<", "&gt;": ">", "&amp;": "&"}
_ENTITY_RE = re.compile("|".join(map(re.escape, _ENTITIES)))


def valid_name(name: str) -> bool:
    """Whether ``name`` can be a tool or parameter name (no blanks, quotes or brackets)."""
    return _NAME_RE.fullmatch(name) is not None


def attribute(header: str, key: str) -> str | None:
    """The value of ``key="..."`` in a tag header, with XML entities decoded."""
    for match in _ATTR_RE.finditer(header):
        if match.group(1) == key:
            value = match.group(2) if match.group(2) is not None else match.group(3)
            return _ENTITY_RE.sub(lambda m: _ENTITIES[m.group(0)], value)
    return None


def _skip_blanks(data: str, pos: int) -> int:
    match = _BLANKS.match(data, pos)
    return match.end() if match else pos


class TokenSet:
    """A set of literal tokens: find the earliest one, or a trailing partial one.

    :param tokens: the tokens (any first character; longer ones win at one position).
    """

    __slots__ = ("firsts", "longest", "regex", "tokens")

    def __init__(self, tokens: Iterable[str]) -> None:
        self.tokens = tuple(sorted({t for t in tokens if t}, key=len, reverse=True))
        self.regex = re.compile("|".join(map(re.escape, self.tokens))) if self.tokens else None
        self.firsts = frozenset(t[0] for t in self.tokens)
        self.longest = max((len(t) for t in self.tokens), default=0)

    def __bool__(self) -> bool:
        return bool(self.tokens)

    def find(self, data: str, pos: int, endpos: int | None = None) -> re.Match[str] | None:
        """The earliest token at or after ``pos`` (ending by ``endpos``, when given)."""
        if self.regex is None:
            return None
        if endpos is None:
            return self.regex.search(data, pos)
        return self.regex.search(data, pos, endpos)

    def at(self, data: str, pos: int) -> str | None:
        """The token that starts exactly at ``pos``, if any."""
        for token in self.tokens:
            if data.startswith(token, pos):
                return token
        return None

    def partial(self, data: str, start: int) -> int:
        """Where a trailing proper prefix of a token begins (``len(data)`` if none).

        Looks only at the last ``longest - 1`` characters of ``data[start:]``.
        """
        n = len(data)
        for k in range(max(start, n - self.longest + 1), n):
            if data[k] in self.firsts:
                tail = data[k:]
                for token in self.tokens:
                    if len(token) > len(tail) and token.startswith(tail):
                        return k
        return n

    def is_prefix(self, data: str, start: int) -> bool:
        """Whether ``data[start:]`` is a proper prefix of a token (more text may complete it)."""
        tail = data[start:]
        return any(len(t) > len(tail) and t.startswith(tail) for t in self.tokens)


# -- records -------------------------------------------------------------------------


@attrs.frozen
class CallHeader:
    """What a call's opening tag says: the tool name and, if written, the call id."""

    name: str
    call_id: str = ""


@attrs.frozen
class ParamHeader:
    """What a parameter's opening tag says.

    :ivar name: the parameter name.
    :ivar kind: ``"string"`` when the markup says the value is raw text, ``"json"``
        when it says the value is JSON, ``None`` to type it by the tool's schema.
    """

    name: str
    kind: str | None = None


def plain_call_header(header: str) -> CallHeader | None:
    """The whole header (blanks stripped) is the tool name."""
    name = header.strip()
    return CallHeader(name) if valid_name(name) else None


def plain_param_header(header: str) -> ParamHeader | None:
    """The whole header (blanks stripped) is the parameter name."""
    name = header.strip()
    return ParamHeader(name) if valid_name(name) else None


def name_attribute_call(header: str) -> CallHeader | None:
    """A call header of the form `` name="f"``."""
    name = attribute(header, "name")
    return CallHeader(name) if name is not None and valid_name(name) else None


def name_attribute_param(header: str) -> ParamHeader | None:
    """A parameter header of the form `` name="p"``."""
    name = attribute(header, "name")
    return ParamHeader(name) if name is not None and valid_name(name) else None


class BodyDecoder(Protocol):
    """Reads a call body that is not key/value tags (JSON, a custom object syntax)."""

    def feed(self, text: str) -> list[tuple[str | None, str]]:
        """Take the next piece of the body; return ``(parameter, text)`` argument deltas."""
        ...

    def finish(self) -> dict[str, Any] | None:
        """The body is complete: the arguments, or ``None`` when it is not valid."""
        ...


class JsonBody:
    """A JSON-object call body: streams the raw JSON as one argument text.

    Deltas carry ``parameter=None`` (the arguments travel as one JSON text, see
    :class:`~toolwire.events.ToolCallDeltaEvent`); ``finish`` decodes the object.
    An empty body is ``{}``.
    """

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[str] = []

    def feed(self, text: str) -> list[tuple[str | None, str]]:
        """Keep the piece and stream it."""
        if not text:
            return []
        self._parts.append(text)
        return [(None, text)]

    def finish(self) -> dict[str, Any] | None:
        """Decode the object (``None`` unless it is a JSON object)."""
        text = "".join(self._parts).strip()
        if not text:
            return {}
        ok, value = decode_json(text)
        return value if ok and isinstance(value, dict) else None


# -- the format description ---------------------------------------------------------------


@attrs.frozen(kw_only=True)
class TaggedFormat:
    """One family's call markup, as :class:`TaggedCallParser` reads it.

    A call is ``call_open HEADER call_header_end BODY call_close``, optionally
    inside ``section_open ... section_close``. A *params* body is a run of
    ``param_open HEADER param_header_end [value_open] VALUE param_close`` (and,
    where the format has one, an ``arguments_open`` block holding the whole
    arguments as JSON); any other body is read by a :class:`BodyDecoder`.

    :ivar family: the family name, used in diagnostics.
    :ivar call_open: the call's opening token (``<invoke``, ``<tool_call>``).
    :ivar call_close: the call's closing token.
    :ivar call_header_end: tokens that end the call header and are consumed.
    :ivar call_header_stop: tokens that end the call header but stay in the
        stream (GLM's name ends where ``<arg_key>`` begins).
    :ivar read_call_header: header text -> :class:`CallHeader` (``None``: not a call).
    :ivar section_open: tokens opening a block of calls (empty: calls stand alone).
    :ivar section_close: tokens closing that block.
    :ivar strict_open: whether an opening whose header is not a call is a
        malformed call (text plus a diagnostic) or plain text.
    :ivar param_open: a parameter's opening token.
    :ivar param_header_end: the token ending a parameter header.
    :ivar value_open: a token expected (after blanks) before the value (GLM's
        ``<arg_value>``).
    :ivar param_close: the value's closing token (unused with ``nested``, where
        ``<city>`` closes with ``</city>``).
    :ivar read_param_header: header text -> :class:`ParamHeader` (``None``: malformed).
    :ivar arguments_open: opens a block holding all arguments as one JSON object.
    :ivar arguments_header_end: ends that block's header.
    :ivar arguments_close: closes that block.
    :ivar body: makes a :class:`BodyDecoder` for formats whose body is not tags.
    :ivar cdata: values may be wrapped in ``<![CDATA[...]]>``.
    :ivar nested: the token that prefixes every tag of a nested-XML value
        (MiniMax-M3); values are then decoded with :func:`decode_nested_value`.
    :ivar python_values: non-string values may be Python literals (templates
        that print values with ``|string``).
    :ivar dropped: special tokens removed wherever they appear in text.
    :ivar trailers: tokens removed from text once a call was made (an
        end-of-turn marker the template writes after calls).
    :ivar blocks: ``{open token: (kind, close token)}`` for text regions the
        parser routes itself; ``kind`` is ``"reasoning"`` or ``"text"``.
    """

    family: str
    call_open: str
    call_close: str
    call_header_end: tuple[str, ...] = ()
    call_header_stop: tuple[str, ...] = ()
    read_call_header: Callable[[str], CallHeader | None] = plain_call_header
    section_open: tuple[str, ...] = ()
    section_close: tuple[str, ...] = ()
    strict_open: bool = True
    param_open: str = ""
    param_header_end: str = ""
    value_open: str = ""
    param_close: str = ""
    read_param_header: Callable[[str], ParamHeader | None] = plain_param_header
    arguments_open: str = ""
    arguments_header_end: str = ""
    arguments_close: str = ""
    body: Callable[[], BodyDecoder] | None = None
    cdata: bool = False
    nested: str = ""
    python_values: bool = False
    dropped: tuple[str, ...] = ()
    trailers: tuple[str, ...] = ()
    blocks: Mapping[str, tuple[str, str]] = attrs.field(factory=dict)

    @property
    def markup(self) -> tuple[str, ...]:
        """Every literal token of the format (for tests: text that is never content)."""
        tokens = (*self.section_open, *self.section_close, self.call_open, self.call_close,
                  *self.call_header_end, *self.call_header_stop, self.param_open,
                  self.param_header_end, self.value_open, self.param_close,
                  self.arguments_open, self.arguments_close, self.nested, *self.dropped,
                  *self.trailers, *self.blocks, *(close for _, close in self.blocks.values()))
        return tuple(dict.fromkeys(t for t in tokens if len(t) > 2))


class _Tokens:
    """A format's token sets, built once per format."""

    def __init__(self, fmt: TaggedFormat) -> None:
        openers = fmt.section_open or (fmt.call_open,)
        self.text = TokenSet((*openers, *fmt.dropped, *fmt.blocks))
        self.text_after_call = TokenSet((*openers, *fmt.dropped, *fmt.trailers, *fmt.blocks))
        self.openers = frozenset(openers)
        self.section_close = TokenSet(fmt.section_close)
        self.section_body = TokenSet((fmt.call_open, *fmt.section_close))
        self.call_header_end = TokenSet((*fmt.call_header_end, *fmt.call_header_stop))
        self.call_body = TokenSet((fmt.call_close, *fmt.section_close, fmt.param_open,
                                   fmt.arguments_open, fmt.call_open))
        self.param_header_end = TokenSet((fmt.param_header_end,))
        self.arguments_header_end = TokenSet((fmt.arguments_header_end,))
        self.value_open = TokenSet((fmt.value_open,))
        self.param_close = TokenSet((fmt.param_close,))
        self.call_close = TokenSet((fmt.call_close,))
        self.arguments_close = TokenSet((fmt.arguments_close,))
        self.cdata_end = TokenSet(("]]>",))
        self.nested = TokenSet((fmt.nested,))
        self.follow = TokenSet((fmt.call_close, *fmt.section_close, fmt.param_open,
                                fmt.arguments_open))
        self.block_closes = {open_: TokenSet((close,)) for open_, (_, close) in fmt.blocks.items()}
        self.malformed_end = TokenSet(fmt.section_close or (fmt.call_close,))
        fast = set(self.text_after_call.firsts)
        self.text_fast_break = "".join(sorted(fast))


_CDATA_OPEN = "<![CDATA["

# states
_TEXT = 0
_SECTION = 1
_CALL_BODY = 2
_VALUE = 3
_BODY = 4
_MALFORMED = 5
_BLOCK = 6

# verdicts of a lookahead
_NEED_MORE = -1
_LITERAL = -2

# value modes
_PLAIN = 0
_CDATA_CHECK = 1
_CDATA = 2
_NESTED = 3


class _Call:
    """The call being read."""

    __slots__ = ("arguments", "call_id", "given", "index", "known", "name")

    def __init__(self, index: int, header: CallHeader, known: dict[str, Any] | None) -> None:
        self.index = index
        self.name = header.name
        self.call_id = header.call_id
        self.known = known
        self.arguments: dict[str, Any] = {}
        self.given: set[str] = set()

    def may_start(self, param: str) -> bool:
        """Whether a parameter tag naming ``param`` can be real here."""
        if param in self.given:
            return False
        return self.known is None or param in self.known


class TaggedCallParser:
    """One reply's parser for a :class:`TaggedFormat`; ``feed`` deltas, then ``close``.

    Never raises; an internal failure becomes a ``parser_error`` diagnostic.

    :param fmt: the markup.
    :param tools: ``{tool name: parameters schema}`` for typing values.
    :param first_index: the index of the first call (a caller embedding this
        parser in a larger one numbers calls across it).
    """

    def __init__(self, fmt: TaggedFormat, tools: Mapping[str, Any], *,
                 first_index: int = 0) -> None:
        self._fmt = fmt
        self._tok = _tokens_for(fmt)
        self._schemas = ToolSchemaIndex(tools)
        self._tools = tools
        self._state = _TEXT
        self._pending = ""
        self._held = HeldWhitespace()
        self._lead = False
        self._in_section = False
        self._section_calls = 0
        self._calls = first_index
        self._made_call = False
        self._call: _Call | None = None
        self._raw: list[str] = []
        self._malformed_code = ""
        self._param: ParamHeader = ParamHeader("")
        self._close_set = self._tok.call_close
        self._value_parts: list[str] = []
        self._value_string = True
        self._value_mode = _PLAIN
        self._depth = 0
        self._decoder: BodyDecoder | None = None
        self._body_is_arguments = False
        self._block_kind = ""
        self._block_close = self._tok.call_close

    @property
    def calls_started(self) -> int:
        """The index the next call would get."""
        return self._calls

    # -- public protocol -------------------------------------------------------

    def feed(self, text: str) -> list[Event]:
        """Consume a delta; return the events it makes certain."""
        if not self._pending and text:
            fast = self._fast_path(text)
            if fast is not None:
                return fast
        out: list[Event] = []
        try:
            self._run(self._pending + text, out, eof=False)
        except Exception as exc:  # a parser bug must never take down a chat
            self._pending = ""
            out.append(DiagnosticEvent("parser_error",
                                       f"{self._fmt.family} parser failed: {exc!r}"))
        return out

    def close(self) -> list[Event]:
        """End of reply: decide what is still held, flush it."""
        out: list[Event] = []
        try:
            self._run(self._pending, out, eof=True)
            self._finish(out)
        except Exception as exc:
            out.append(DiagnosticEvent("parser_error",
                                       f"{self._fmt.family} parser failed: {exc!r}"))
        return out

    def _fast_path(self, text: str) -> list[Event] | None:
        state = self._state
        if state == _TEXT and not self._lead:
            for ch in self._tok.text_fast_break:
                if ch in text:
                    return None
            chunk = self._held.push(text)
            return [TextEvent(chunk)] if chunk else []
        if (state == _VALUE and self._value_mode != _CDATA_CHECK) or state == _BODY:
            for ch in self._close_set.firsts:
                if ch in text:
                    return None
            call = self._call
            decoder = self._decoder
            if call is None or (state == _BODY and decoder is None):
                return None
            self._raw.append(text)
            if decoder is not None and state == _BODY:
                return [ToolCallDeltaEvent(call.index, call.name, piece, param, call.call_id)
                        for param, piece in decoder.feed(text)]
            self._value_parts.append(text)
            if self._value_string:
                return [ToolCallDeltaEvent(call.index, call.name, text, self._param.name,
                                           call.call_id)]
            return []
        return None

    # -- the state machine -------------------------------------------------------

    def _run(self, data: str, out: list[Event], eof: bool) -> None:
        self._pending = ""
        pos = 0
        n = len(data)
        while True:
            state = self._state
            if state == _TEXT:
                pos = self._scan_text(data, pos, out, eof)
            elif state == _VALUE:
                pos = self._scan_value(data, pos, out, eof)
            elif state == _CALL_BODY:
                pos = self._scan_call_body(data, pos, out, eof)
            elif state == _SECTION:
                pos = self._scan_section(data, pos, out, eof)
            elif state == _BODY:
                pos = self._scan_body(data, pos, out, eof)
            elif state == _BLOCK:
                pos = self._scan_block(data, pos, out, eof)
            else:
                pos = self._scan_malformed(data, pos, out, eof)
            if pos < 0:
                return
            if pos >= n and self._state == state:
                return

    def _hold(self, data: str, pos: int) -> int:
        self._pending = data[pos:]
        return -1

    def _take(self, data: str, start: int, end: int) -> None:
        if end > start:
            self._raw.append(data[start:end])

    # TEXT ------------------------------------------------------------------------

    def _scan_text(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        if self._lead:
            pos = _skip_blanks(data, pos)
            if pos >= len(data):
                return pos
            self._lead = False
        tokens = self._tok.text_after_call if self._made_call else self._tok.text
        match = tokens.find(data, pos)
        if match is None:
            safe = len(data) if eof else tokens.partial(data, pos)
            self._emit_text(data[pos:safe], out)
            return self._hold(data, safe) if safe < len(data) else len(data)
        k = match.start()
        token = match.group(0)
        self._emit_text(data[pos:k], out)
        end = k + len(token)
        fmt = self._fmt
        if token in self._tok.openers:
            if fmt.section_open:
                self._held.drop()
                self._raw = [token]
                self._in_section = True
                self._section_calls = 0
                self._state = _SECTION
                return end
            return self._open_call(data, k, out, eof, in_text=True)
        if token in fmt.blocks:
            self._held.drop()
            kind, _ = fmt.blocks[token]
            self._block_kind = kind
            self._block_close = self._tok.block_closes[token]
            self._state = _BLOCK
            self._lead = True
            return end
        # a dropped token or an end-of-turn trailer: a separator, not text
        self._held.drop()
        self._lead = True
        return end

    def _emit_text(self, text: str, out: list[Event]) -> None:
        chunk = self._held.push(text)
        if chunk:
            out.append(TextEvent(chunk))

    # BLOCK -----------------------------------------------------------------------

    def _scan_block(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        if self._lead:
            pos = _skip_blanks(data, pos)
            if pos >= len(data):
                return pos
            self._lead = False
        close = self._block_close
        match = close.find(data, pos)
        end = match.start() if match is not None else \
            (len(data) if eof else close.partial(data, pos))
        piece = data[pos:end]
        if self._block_kind == "reasoning":
            chunk = self._held.push(piece)
            if chunk:
                out.append(ReasoningEvent(chunk))
        else:
            self._emit_text(piece, out)
        if match is None:
            return self._hold(data, end) if end < len(data) else len(data)
        self._held.drop()
        self._state = _TEXT
        self._lead = True
        return match.end()

    # opening a call ----------------------------------------------------------------

    def _read_header(self, data: str, start: int, ends: TokenSet, eof: bool
                     ) -> tuple[str, int] | int:
        """Read a tag header from ``start`` up to the first of ``ends`` (bounded).

        :returns: ``(header, end position)`` where the end token starts, or
            ``_NEED_MORE``, or ``_LITERAL`` when no end comes within the bound.
        """
        limit = start + MAX_NAME + MAX_GAP + ends.longest
        match = ends.find(data, start, limit)
        if match is None:
            if not eof and len(data) < limit:
                return _NEED_MORE
            return _LITERAL
        return data[start:match.start()], match.start()

    def _call_header(self, data: str, at: int, eof: bool) -> tuple[CallHeader, int] | int:
        """Read the call header after the opening token at ``at``.

        :returns: ``(header, resume position)``, ``_NEED_MORE`` or ``_LITERAL``.
        """
        fmt = self._fmt
        start = _skip_blanks(data, at + len(fmt.call_open))
        if not self._tok.call_header_end:
            found: tuple[str, int] | int = ("", start)
        else:
            found = self._read_header(data, start, self._tok.call_header_end, eof)
        if isinstance(found, int):
            return found
        header_text, end = found
        header = fmt.read_call_header(header_text)
        if header is None:
            return _LITERAL
        token = self._tok.call_header_end.at(data, end)
        if token is not None and token in fmt.call_header_end:
            end += len(token)
        return header, end

    def _open_call(self, data: str, at: int, out: list[Event], eof: bool,
                   in_text: bool) -> int:
        """A call opening token starts at ``at``: read its header and start the call."""
        fmt = self._fmt
        found = self._call_header(data, at, eof)
        if found == _NEED_MORE:
            return self._hold(data, at)
        if isinstance(found, int):
            if in_text and not fmt.strict_open:
                self._emit_text(fmt.call_open, out)
                return at + len(fmt.call_open)
            if in_text:
                self._held.drop()
                self._raw = []
            after = _skip_blanks(data, at + len(fmt.call_open))
            code = "json_in_tool_call" if data.startswith("{", after) else "malformed_call"
            return self._to_malformed(at, code)
        header, end = found
        if in_text:
            self._held.drop()
            self._raw = []
        self._take(data, at, end)
        call = _Call(self._calls, header, self._schemas.parameters(header.name))
        self._calls += 1
        self._call = call
        out.append(ToolCallStartEvent(index=call.index, name=call.name, id=call.call_id))
        if fmt.body is not None:
            self._decoder = fmt.body()
            self._body_is_arguments = False
            self._close_set = self._tok.call_close
            self._state = _BODY
        else:
            self._state = _CALL_BODY
        return end

    def _to_malformed(self, pos: int, code: str) -> int:
        self._state = _MALFORMED
        self._malformed_code = code
        self._call = None
        return pos

    # SECTION ---------------------------------------------------------------------

    def _scan_section(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        start = _skip_blanks(data, pos)
        self._take(data, pos, start)
        if start >= len(data):
            return len(data)
        fmt = self._fmt
        if data.startswith(fmt.call_open, start):
            return self._open_call(data, start, out, eof, in_text=False)
        token = self._tok.section_close.at(data, start)
        if token is not None:
            self._end_section()
            return start + len(token)
        if self._tok.section_body.is_prefix(data, start):
            if not eof:
                return self._hold(data, start)
            if self._section_calls and self._tok.section_close.is_prefix(data, start):
                # the reply was cut inside the section's closing token: the calls are done
                self._end_section()
                return len(data)
        return self._to_malformed(start, "malformed_call")

    def _end_section(self) -> None:
        self._in_section = False
        self._raw = []
        self._state = _TEXT
        self._lead = True

    # CALL_BODY -----------------------------------------------------------------------

    def _scan_call_body(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        call = self._call
        assert call is not None
        start = _skip_blanks(data, pos)
        self._take(data, pos, start)
        n = len(data)
        if start >= n:
            return n
        fmt = self._fmt
        if data.startswith(fmt.call_close, start):
            end = start + len(fmt.call_close)
            self._take(data, start, end)
            self._complete_call(out)
            return end
        token = self._tok.section_close.at(data, start)
        if token is not None:  # the call's closing tag is missing
            self._complete_call(out)
            self._end_section()
            return start + len(token)
        if fmt.param_open and data.startswith(fmt.param_open, start):
            return self._open_param(data, start, out, eof)
        if fmt.arguments_open and data.startswith(fmt.arguments_open, start):
            return self._open_arguments(data, start, eof)
        if data.startswith(fmt.call_open, start):
            self._complete_call(out)  # the next call began without closing this one
            return start
        if not eof and self._tok.call_body.is_prefix(data, start):
            return self._hold(data, start)
        return self._to_malformed(start, "malformed_call")

    def _open_param(self, data: str, start: int, out: list[Event], eof: bool) -> int:
        fmt = self._fmt
        call = self._call
        assert call is not None
        header_start = start + len(fmt.param_open)
        found = self._read_header(data, header_start, self._tok.param_header_end, eof)
        if found == _NEED_MORE:
            return self._hold(data, start)
        if isinstance(found, int):
            if self._closes_call_in_nested_markup(data, start):
                return self._close_nested_call(data, start, out)
            return self._to_malformed(start, "malformed_call")
        header_text, end = found
        header = fmt.read_param_header(header_text)
        if header is None:
            if self._closes_call_in_nested_markup(data, start):
                return self._close_nested_call(data, start, out)
            return self._to_malformed(start, "malformed_call")
        end += len(fmt.param_header_end)
        if fmt.value_open:
            value_at = _skip_blanks(data, end)
            if data.startswith(fmt.value_open, value_at):
                end = value_at + len(fmt.value_open)
            elif not eof and value_at - end <= MAX_GAP and (
                    value_at >= len(data) or self._tok.value_open.is_prefix(data, value_at)):
                return self._hold(data, start)
            else:
                return self._to_malformed(start, "malformed_call")
        self._take(data, start, end)
        self._param = header
        self._value_parts = []
        self._value_string = header.kind == "string" or (
            header.kind is None and self._schemas.is_string(call.name, header.name))
        if fmt.nested:
            self._value_mode = _NESTED
            self._close_set = self._tok.nested
            self._depth = 0
        else:
            self._value_mode = _CDATA_CHECK if fmt.cdata else _PLAIN
            self._close_set = self._tok.param_close
        self._state = _VALUE
        return end

    def _closes_call_in_nested_markup(self, data: str, start: int) -> bool:
        # MiniMax-M3 prefixes every tag with one token, so "NS</invoke>" also
        # begins like a parameter tag; it is the call's end.
        return bool(self._fmt.nested) and data.startswith(self._fmt.call_close, start)

    def _close_nested_call(self, data: str, start: int, out: list[Event]) -> int:
        end = start + len(self._fmt.call_close)
        self._take(data, start, end)
        self._complete_call(out)
        return end

    def _open_arguments(self, data: str, start: int, eof: bool) -> int:
        fmt = self._fmt
        header_start = start + len(fmt.arguments_open)
        found = self._read_header(data, header_start, self._tok.arguments_header_end, eof)
        if found == _NEED_MORE:
            return self._hold(data, start)
        if isinstance(found, int):
            return self._to_malformed(start, "malformed_call")
        end = found[1] + len(fmt.arguments_header_end)
        self._take(data, start, end)
        self._decoder = JsonBody()
        self._body_is_arguments = True
        self._close_set = self._tok.arguments_close
        self._state = _BODY
        return end

    # VALUE ---------------------------------------------------------------------------

    def _scan_value(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        mode = self._value_mode
        if mode == _CDATA_CHECK:
            if data.startswith(_CDATA_OPEN, pos):
                self._take(data, pos, pos + len(_CDATA_OPEN))
                self._value_mode = _CDATA
                self._close_set = self._tok.cdata_end
                return pos + len(_CDATA_OPEN)
            if not eof and len(data) - pos < len(_CDATA_OPEN) and \
                    _CDATA_OPEN.startswith(data[pos:]):
                return self._hold(data, pos)
            self._value_mode = _PLAIN
            return pos
        if mode == _NESTED:
            return self._scan_nested_value(data, pos, out, eof)
        close_set = self._close_set
        search = pos
        n = len(data)
        while True:
            match = close_set.find(data, search)
            if match is None:
                end = n if eof else close_set.partial(data, search)
                self._value_piece(data, pos, end, out)
                if eof:
                    return self._to_malformed(n, "unclosed_call")
                return self._hold(data, end) if end < n else n
            k = match.start()
            after = match.end()
            if mode == _CDATA:
                close = self._fmt.param_close
                if data.startswith(close, after):
                    after += len(close)
                elif not eof and n - after < len(close) and close.startswith(data[after:]):
                    self._value_piece(data, pos, k, out)
                    return self._hold(data, k)
                else:
                    search = k + 1
                    continue
            verdict = self._follows_value(data, after, eof)
            if verdict == _LITERAL:
                search = k + 1
                continue
            self._value_piece(data, pos, k, out)
            if verdict == _NEED_MORE:
                return self._hold(data, k)
            self._take(data, k, after)
            self._finish_value(out)
            return after

    def _scan_nested_value(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        ns = self._fmt.nested
        n = len(data)
        search = pos
        while True:
            k = data.find(ns, search)
            if k < 0:
                end = n if eof else self._tok.nested.partial(data, search)
                self._value_piece(data, pos, end, out)
                if eof:
                    return self._to_malformed(n, "unclosed_call")
                return self._hold(data, end) if end < n else n
            tag_at = k + len(ns)
            gt = data.find(">", tag_at, tag_at + MAX_NAME + 2)
            if gt < 0:
                if not eof and n - tag_at <= MAX_NAME + 1:
                    self._value_piece(data, pos, k, out)
                    return self._hold(data, k)
                search = k + 1
                continue
            tag = data[tag_at + 1:gt]
            if data.startswith("</", tag_at):
                if self._depth > 0:
                    self._depth -= 1
                    search = gt + 1
                    continue
                self._value_piece(data, pos, k, out)
                self._finish_value(out)
                if tag[1:] == self._param.name:
                    self._take(data, k, gt + 1)
                    return gt + 1
                return k  # another closing tag: this parameter's own is missing
            if data.startswith("<", tag_at) and valid_name(tag):
                self._depth += 1
            search = gt + 1

    def _value_piece(self, data: str, start: int, end: int, out: list[Event]) -> None:
        if end <= start:
            return
        piece = data[start:end]
        self._value_parts.append(piece)
        self._raw.append(piece)
        if self._value_string:
            call = self._call
            assert call is not None
            out.append(ToolCallDeltaEvent(call.index, call.name, piece, self._param.name,
                                          call.call_id))

    def _follows_value(self, data: str, at: int, eof: bool) -> int:
        """Whether a real tag (or the end of the reply) follows a value's closing tag.

        :returns: ``at`` when it does, ``_LITERAL`` when the closing tag is part
            of the value, ``_NEED_MORE`` when the text so far cannot tell.
        """
        n = len(data)
        j = at
        limit = at + MAX_GAP
        while j < n and j < limit and data[j] in " \t\r\n":
            j += 1
        if j >= n:
            if eof:
                return at
            return _NEED_MORE if j < limit else _LITERAL
        if j >= limit:
            return _LITERAL
        fmt = self._fmt
        call = self._call
        assert call is not None
        if data.startswith(fmt.call_close, j) or self._tok.section_close.at(data, j):
            return at
        if fmt.arguments_open and data.startswith(fmt.arguments_open, j):
            return at
        if fmt.param_open and data.startswith(fmt.param_open, j):
            found = self._read_header(data, j + len(fmt.param_open), self._tok.param_header_end,
                                      eof)
            if found == _NEED_MORE:
                return _NEED_MORE
            if isinstance(found, int):
                return _LITERAL
            header = fmt.read_param_header(found[0])
            if header is None or header.name == self._param.name:
                return _LITERAL
            return at if call.may_start(header.name) else _LITERAL
        if not eof and self._tok.follow.is_prefix(data, j):
            return _NEED_MORE
        return _LITERAL

    def _finish_value(self, out: list[Event]) -> None:
        call = self._call
        assert call is not None
        raw = "".join(self._value_parts)
        self._value_parts = []
        name = self._param.name
        if name in call.given:
            out.append(DiagnosticEvent("duplicate_parameter",
                                       f"parameter {name!r} of {call.name!r} given twice; "
                                       "the last value is used", name))
        call.given.add(name)
        call.arguments[name] = raw if self._value_string else self._decode(call, raw)
        self._state = _CALL_BODY

    def _decode(self, call: _Call, raw: str) -> Any:
        header = self._param
        fmt = self._fmt
        if fmt.nested:
            params = self._schemas.parameters(call.name) or {}
            return decode_nested_value(raw, fmt.nested, params.get(header.name),
                                       self._tools.get(call.name))
        if header.kind == "json":
            try:
                return json.loads(raw)
            except (ValueError, RecursionError):
                pass
        value = self._schemas.coerce(call.name, header.name, raw)
        if fmt.python_values and isinstance(value, str) and value.strip():
            literal = python_literal(value)
            if literal is not _NOT_LITERAL:
                types = self._schemas.types(call.name, header.name)
                if not types or json_type_of(literal) in types or (
                        "number" in types and json_type_of(literal) == "integer"):
                    return literal
        return value

    # BODY (a decoder's) -------------------------------------------------------------------

    def _scan_body(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        call = self._call
        decoder = self._decoder
        assert call is not None and decoder is not None
        close = self._close_set
        match = close.find(data, pos)
        n = len(data)
        end = match.start() if match is not None else (n if eof else close.partial(data, pos))
        if end > pos:
            piece = data[pos:end]
            self._raw.append(piece)
            for param, text in decoder.feed(piece):
                out.append(ToolCallDeltaEvent(call.index, call.name, text, param, call.call_id))
        if match is None:
            if eof:
                return self._to_malformed(n, "unclosed_call")
            return self._hold(data, end) if end < n else n
        self._take(data, match.start(), match.end())
        arguments = decoder.finish()
        self._decoder = None
        if arguments is None:
            return self._to_malformed(match.end(), "malformed_arguments")
        call.arguments.update(arguments)
        if self._body_is_arguments:
            self._state = _CALL_BODY
        else:
            self._complete_call(out)
        return match.end()

    # MALFORMED ------------------------------------------------------------------------

    def _scan_malformed(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        ends = self._tok.malformed_end
        match = ends.find(data, pos)
        if match is not None:
            self._take(data, pos, match.end())
            self._flush_malformed(out)
            return match.end()
        safe = len(data) if eof else ends.partial(data, pos)
        self._take(data, pos, safe)
        if eof:
            self._malformed_code = self._malformed_code or "unclosed_call"
            self._flush_malformed(out)
            return len(data)
        return self._hold(data, safe) if safe < len(data) else len(data)

    def _flush_malformed(self, out: list[Event]) -> None:
        raw = "".join(self._raw)
        self._raw = []
        code = self._malformed_code or "malformed_call"
        family = self._fmt.family
        message = {
            "json_in_tool_call": f"JSON where a {family} call's name belongs is not a call in "
                                 "this format; shown as text",
            "unclosed_call": "the reply ended inside a tool call; shown as text",
            "malformed_arguments": f"the arguments of a {family} call are not a valid "
                                   "object; shown as text",
        }.get(code, f"text inside {family} tool-call markup is not a call; shown as text")
        if raw:
            out.append(TextEvent(raw))
        out.append(DiagnosticEvent(code, message, raw))
        self._malformed_code = ""
        self._in_section = False
        self._call = None
        self._state = _TEXT
        self._lead = True

    # finishing ------------------------------------------------------------------------

    def _complete_call(self, out: list[Event]) -> None:
        call = self._call
        assert call is not None
        out.append(ToolCallEvent(name=call.name, arguments=call.arguments, id=call.call_id,
                                 index=call.index))
        self._call = None
        self._made_call = True
        self._section_calls += 1
        self._raw = []
        if self._in_section:
            self._state = _SECTION
        else:
            self._state = _TEXT
            self._lead = True

    def _finish(self, out: list[Event]) -> None:
        state = self._state
        if state == _CALL_BODY and self._call is not None:
            out.append(DiagnosticEvent(
                "unclosed_call",
                f"the reply ended inside call {self._call.name!r} after a complete parameter; "
                "the call is kept", ""))
            self._complete_call(out)
        if self._state == _SECTION:
            if self._section_calls:
                self._end_section()  # the calls are complete; the section's end was cut off
            else:
                self._to_malformed(0, "unclosed_call")
        elif self._state in (_VALUE, _BODY):
            self._to_malformed(0, "unclosed_call")
        if self._state == _MALFORMED:
            self._malformed_code = self._malformed_code or "unclosed_call"
            self._flush_malformed(out)
        if self._state == _BLOCK:
            if self._block_kind == "reasoning":
                self._held.drop()  # blanks at the end of unclosed reasoning are not text
            self._state = _TEXT
        rest = self._held.release()
        if rest and not self._lead:
            out.append(TextEvent(rest))


_TOKENS_CACHE: dict[int, tuple[TaggedFormat, _Tokens]] = {}


def _tokens_for(fmt: TaggedFormat) -> _Tokens:
    cached = _TOKENS_CACHE.get(id(fmt))
    if cached is not None and cached[0] is fmt:
        return cached[1]
    tokens = _Tokens(fmt)
    _TOKENS_CACHE[id(fmt)] = (fmt, tokens)
    return tokens


# -- values -------------------------------------------------------------------------------


class _NotLiteral:
    """Marks text that is not a Python literal (``None`` is a literal)."""

    __slots__ = ()


_NOT_LITERAL: Final = _NotLiteral()
_LITERAL_NAMES: Final[dict[str, Any]] = {"True": True, "False": False, "None": None,
                                         "true": True, "false": False, "null": None}


def _join_surrogates(text: str) -> str:
    if not any("\ud800" <= c <= "\udfff" for c in text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


def _literal_node(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, str):
            return _join_surrogates(value)
        if value is None or isinstance(value, bool | int | float):
            return value
        raise ValueError("unsupported constant")
    if isinstance(node, ast.Name) and node.id in _LITERAL_NAMES:
        return _LITERAL_NAMES[node.id]
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal_node(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for key, item in zip(node.keys, node.values, strict=True):
            if key is None:
                raise ValueError("dict unpacking")
            name = _literal_node(key)
            if not isinstance(name, str):
                raise ValueError("non-string key")
            out[name] = _literal_node(item)
        return out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _literal_node(node.operand)
        if isinstance(operand, bool) or not isinstance(operand, int | float):
            raise ValueError("sign on a non-number")
        return -operand if isinstance(node.op, ast.USub) else operand
    raise ValueError(f"not a literal: {type(node).__name__}")


def python_literal(text: str) -> Any:
    """Read a Python (or JSON) literal without evaluating anything.

    Accepts strings, numbers, ``True``/``False``/``None`` and ``true``/``false``/
    ``null``, lists, tuples (as lists) and dicts with string keys: what
    templates print when they pass a value through ``|string``, or JSON.
    Returns the private ``_NOT_LITERAL`` marker for anything else.
    """
    try:
        tree = ast.parse(text.strip(), mode="eval")
        return _literal_node(tree.body)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return _NOT_LITERAL


def is_literal(value: Any) -> bool:
    """Whether :func:`python_literal` returned a value (not its failure marker)."""
    return value is not _NOT_LITERAL


def _nested_tree(raw: str, ns: str) -> str | list[tuple[str, Any]]:
    """Parse ``ns<a>..ns</a>`` markup into ``[(tag, subtree)]``; text without tags is a leaf."""
    if ns not in raw:
        return raw
    root: list[tuple[str, Any]] = []
    stack: list[tuple[str, list[tuple[str, Any]], list[str]]] = [("", root, [])]
    pos = 0
    n = len(raw)
    while pos < n:
        k = raw.find(ns, pos)
        if k < 0:
            stack[-1][2].append(raw[pos:])
            break
        stack[-1][2].append(raw[pos:k])
        gt = raw.find(">", k + len(ns))
        if gt < 0:
            raise ValueError("unterminated tag")
        tag = raw[k + len(ns) + 1:gt]
        if raw.startswith("</", k + len(ns)):
            name, children, texts = stack.pop()
            if name != tag[1:] or not stack:
                raise ValueError("mismatched tag")
            subtree: str | list[tuple[str, Any]] = children if children else "".join(texts)
            stack[-1][1].append((name, subtree))
        else:
            stack.append((tag, [], []))
        pos = gt + 1
    if len(stack) != 1:
        raise ValueError("unclosed tag")
    return root if root else "".join(stack[0][2])


def decode_nested_value(raw: str, ns: str, schema: Any, root: Any = None) -> Any:
    """Decode a value written as nested tags (MiniMax-M3), typed by its schema.

    Mappings are ``ns<key>value ns</key>`` runs, lists are ``ns<item>...`` runs,
    scalars are text (typed as :func:`~toolwire.conversation.schema.coerce_text_value` does).
    Without a schema a run of ``item`` tags is a list and leaves are read as
    JSON when they parse. Text that is not well-formed stays text.
    """
    try:
        tree = _nested_tree(raw, ns)
    except ValueError:
        return raw
    return _typed(tree, schema, root)


def _typed(node: str | list[tuple[str, Any]], schema: Any, root: Any) -> Any:
    schema = resolve_ref(schema, root) if schema is not None else {}
    types = schema_types(schema, root)
    if isinstance(node, str):
        if not node and types and "string" not in types:
            if "array" in types:
                return []
            if "object" in types:
                return {}
            if "null" in types:
                return None
        return coerce_text_value(node, schema, root, types)
    as_list = ("array" in types and "object" not in types) or (
        not types and all(tag == "item" for tag, _ in node))
    if as_list:
        items = schema.get("items") if isinstance(schema, Mapping) else None
        return [_typed(child, items, root) for _, child in node]
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    extra = schema.get("additionalProperties") if isinstance(schema, Mapping) else None
    out: dict[str, Any] = {}
    for tag, child in node:
        sub = props.get(tag) if isinstance(props, Mapping) else None
        if sub is None and isinstance(extra, Mapping):
            sub = extra
        out[tag] = _typed(child, sub, root)
    return out
