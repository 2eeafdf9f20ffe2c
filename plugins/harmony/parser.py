"""Streaming parser for harmony-framed replies (gpt-oss, Muse Glimmer).

A harmony reply is a run of messages, each a header, ``<|message|>``, a body
and an end token::

    <|channel|>analysis<|message|>Think...<|end|>
    <|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}<|call|>

The first message's ``<|start|>assistant`` belongs to the prompt. The header
says where the body goes: to a tool (``to=functions.f``, Glimmer's ``to=f``),
to the reasoning (gpt-oss's ``analysis`` channel, Glimmer's ``to=self``) or to
the user (``final``, ``to=user``). A tool body is JSON arguments (gpt-oss) or
Glimmer's ``<atem:function_calls>`` XML, read by the shared tagged engine.

What ends a message depends on where it goes. ``<|call|>`` ends only a
message with a recipient (a call): in reasoning or text it is written content.
In a JSON tool body, an end token inside a string literal is part of the
string (a model writing about ``<|call|>``, or a value holding a whole
message); should the string never close, the body is cut at the first such
token after all and the rest is read again as messages. A message to a
built-in recipient (``to=python``, ``to=browser.search``: no ``functions.``
prefix) the request did not offer is neither a call nor text: it is dropped
with an ``unoffered_recipient`` diagnostic holding the message.

Text that does not open with a header (a model that skipped the framing) is
plain text until the next end token; a header that cannot be read is text
plus a diagnostic. The parser never raises.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from toolwire.plugin_api import (
    CallFormat,
    CallParser,
    DiagnosticEvent,
    EndReason,
    Event,
    HeldWhitespace,
    ReasoningEvent,
    TextEvent,
    TokenSet,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    double_encoded_note,
    json_arguments,
    valid_name,
)

__all__ = [
    "CHANNEL",
    "CONSTRAIN",
    "END_TOKENS",
    "MESSAGE",
    "START",
    "HarmonyDialect",
    "HarmonyHeader",
    "HarmonyParser",
    "Route",
    "function_recipient",
    "read_header",
]

START: Final = "<|start|>"
MESSAGE: Final = "<|message|>"
CHANNEL: Final = "<|channel|>"
CONSTRAIN: Final = "<|constrain|>"
END_TOKENS: Final = ("<|end|>", "<|call|>", "<|return|>", "<|eom|>", "<|eot|>")
_MAX_HEADER: Final = 512
_BLANKS = re.compile(r"[ \t\r\n]*")
_STARTERS: Final = (CHANNEL, CONSTRAIN, "to=", "assistant")
_HEADER_PART = re.compile(
    r"\s*(?:to=([^\s<]+)|<\|channel\|>\s*([^\s<]+)|<\|constrain\|>\s*([^\s<]+)|([A-Za-z][\w.+/-]*))")


@attrs.frozen
class HarmonyHeader:
    """A message header: the recipient, the channel and the content type, if given."""

    recipient: str = ""
    channel: str = ""
    content_type: str = ""


def read_header(text: str) -> HarmonyHeader | None:
    """Read a header (``assistant to=functions.f<|channel|>commentary json``), or ``None``."""
    recipient = channel = content_type = ""
    pos = 0
    first = True
    text = text.rstrip()
    while pos < len(text):
        match = _HEADER_PART.match(text, pos)
        if match is None or match.end() == pos:
            return None
        to, chan, constrain, word = match.groups()
        if to is not None:
            recipient = to
        elif chan is not None:
            channel = chan
        elif constrain is not None:
            content_type = constrain
        elif word is not None and not (first and word == "assistant"):
            content_type = word
        first = False
        pos = match.end()
    return HarmonyHeader(recipient, channel, content_type)


@attrs.frozen
class Route:
    """Where a message body goes: ``kind`` is ``text``, ``reasoning``, ``call`` (to
    ``name``) or ``builtin`` (to the built-in tool ``name``: a call only when the
    request offered a tool of that name)."""

    kind: str
    name: str = ""


@attrs.frozen
class HarmonyDialect:
    """What differs between harmony users.

    :ivar family: the family name, used in diagnostics.
    :ivar route: header -> :class:`Route`.
    :ivar call_format: the tagged markup of tool bodies (Glimmer's
        ``<atem:invoke>``); ``None`` when tool bodies are JSON.
    """

    family: str
    route: Callable[[HarmonyHeader], Route]
    call_format: CallFormat | None = None


# states
_HEADER = 0
_BODY = 1
_TEXT = 2

_CALL_END: Final = "<|call|>"
_BODY_ENDS = TokenSet((*END_TOKENS, START))
# a message without a recipient cannot be ended by <|call|>: there it is content
_PROSE_ENDS = TokenSet((*(t for t in END_TOKENS if t != _CALL_END), START))
_MESSAGE = TokenSet((MESSAGE,))


def _skip_blanks(data: str, pos: int) -> int:
    match = _BLANKS.match(data, pos)
    return match.end() if match else pos


def _header_may_start(data: str, pos: int) -> bool | None:
    """Whether a header can begin at ``pos``: ``True``, ``False``, or ``None`` (too short)."""
    rest = data[pos:].lstrip(" \t")
    if not rest:
        return None
    for starter in _STARTERS:
        if rest.startswith(starter):
            return True
        if starter.startswith(rest):
            return None
    return False


class _JsonStrings:
    """Whether the JSON text read so far ends inside a string literal.

    Counted, not scanned (C speed on a long body): with every escaped backslash
    pair removed, each quote not after a backslash opens or closes a string.
    """

    __slots__ = ("_carry", "inside")

    def __init__(self) -> None:
        self.inside = False
        self._carry = ""  # an odd backslash that ended the text read: it escapes what follows

    def advance(self, text: str) -> None:
        """Read ``text``, the next part of the JSON text."""
        text = self._carry + text
        whole = text.rstrip("\\")
        self._carry = "\\" * ((len(text) - len(whole)) % 2)
        plain = whole.replace("\\\\", "")
        if (plain.count('"') - plain.count('\\"')) % 2:
            self.inside = not self.inside


class HarmonyParser:
    """One reply's parser for a harmony dialect; ``feed`` deltas, then ``close``."""

    def __init__(self, dialect: HarmonyDialect, tools: Mapping[str, Any]) -> None:
        self._dialect = dialect
        self._tools = tools
        self._state = _HEADER
        self._pending = ""
        self._lead = False  # after an end token: blanks there are separators
        self._held = HeldWhitespace()
        self._route = Route("text")
        self._calls = 0
        self._raw: list[str] = []
        self._json: list[str] | None = None
        self._strings = _JsonStrings()
        self._json_read = 0  # pieces of the JSON body _strings has read
        # (offset in the JSON body, token) of the first end token read as string content
        self._in_string_end: tuple[int, str] | None = None
        self._tagged: CallParser | None = None
        self._body_started = False
        self._call_index = 0
        self._call_name = ""
        self._message_calls = 0
        self._cut = False  # the token limit cut the reply (known at close)
        self._header_text: tuple[str, str] | None = None  # (header, text it was shown with)

    # -- public protocol -------------------------------------------------------

    def feed(self, text: str) -> list[Event]:
        """Consume a delta; return the events it makes certain."""
        out: list[Event] = []
        if not self._pending and self._state == _BODY and "<" not in text and text and (
                self._body_started or self._route.kind != "call"):
            # the hot path: a body being written, with no token that could end it
            try:
                self._body_piece(text, out)
            except Exception as exc:
                out.append(DiagnosticEvent("parser_error",
                                           f"{self._dialect.family} parser failed: {exc!r}"))
            return out
        try:
            self._run(self._pending + text, out, eof=False)
        except Exception as exc:  # a parser bug must never take down a chat
            self._pending = ""
            out.append(DiagnosticEvent("parser_error",
                                       f"{self._dialect.family} parser failed: {exc!r}"))
        return out

    def close(self, end_reason: EndReason = "stop") -> list[Event]:
        """End of reply: flush what is held.

        :param end_reason: ``"length"``: the token limit cut the reply, so a tool
            message without its end token is not a call (text, ``truncated_call``).
        """
        out: list[Event] = []
        self._cut = end_reason == "length"
        try:
            self._run(self._pending, out, eof=True)
            while self._state == _BODY:
                rest = self._cut_at_string_end(out) if end_reason != "length" else None
                if rest is not None:
                    self._run(rest, out, eof=True)
                    continue
                # the end token is often the stop token a backend strips: a body
                # that is complete by itself still counts, unless the token limit cut it
                self._end_body(out, complete=True, at_eof=True, cut=end_reason == "length")
        except Exception as exc:
            out.append(DiagnosticEvent("parser_error",
                                       f"{self._dialect.family} parser failed: {exc!r}"))
        return out

    # -- the state machine -------------------------------------------------------

    def _run(self, data: str, out: list[Event], eof: bool) -> None:
        self._pending = ""
        pos = 0
        n = len(data)
        while True:
            state = self._state
            if state == _HEADER:
                pos = self._scan_header(data, pos, out, eof)
            elif state == _BODY:
                pos = self._scan_body(data, pos, out, eof)
            else:
                pos = self._scan_text(data, pos, out, eof)
            if pos < 0:
                return
            if pos >= n and self._state == state:
                return

    def _hold(self, data: str, pos: int) -> int:
        self._pending = data[pos:]
        return -1

    def _scan_header(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        n = len(data)
        blanks = _skip_blanks(data, pos)
        if blanks > pos:
            # blanks before a header separate messages; before anything else they are text
            excess = self._held.push(data[pos:blanks])
            if excess:
                out.append(TextEvent(excess))
            pos = blanks
        if pos >= n:
            if eof:
                rest = self._held.release()
                if rest and not self._lead:
                    out.append(TextEvent(rest))
            return n
        start = pos + len(START) if data.startswith(START, pos) else pos
        if start == pos and len(data) - pos < len(START) and START.startswith(data[pos:]):
            if not eof:
                return self._hold(data, pos)
            if self._cut:  # cut inside <|start|>
                return self._unfinished_header(data, pos, out)
        may = _header_may_start(data, start)
        if may is None:
            if not eof:
                return self._hold(data, pos)
            if self._cut:  # cut inside the header's first token
                return self._unfinished_header(data, pos, out)
            may = False
        if not may:
            return self._header_is_text(data, pos, start, out)
        limit = start + _MAX_HEADER
        match = _MESSAGE.find(data, start, limit + len(MESSAGE))
        newline = data.find("\n", start, match.start() if match else limit)
        if match is None or newline >= 0:
            if newline < 0 and not eof and n < limit:
                return self._hold(data, pos)
            if match is None and newline < 0 and eof and len(data) - start <= _MAX_HEADER:
                if self._cut:
                    return self._unfinished_header(data, pos, out)
                text = data[start:]
                token = text.rfind("<")
                if token >= 0 and ">" not in text[token:]:
                    text = text[:token]  # a token the header ended inside
                header = read_header(text)
                if header is not None and self._dialect.route(header).kind in ("call",
                                                                               "builtin"):
                    return self._unfinished_header(data, pos, out)
            return self._header_is_text(data, pos, start, out)
        self._held.drop()
        self._lead = False
        header = read_header(data[start:match.start()])
        if header is None:
            raw = data[pos:match.end()]
            out.append(TextEvent(raw))
            out.append(DiagnosticEvent("malformed_header",
                                       f"a {self._dialect.family} message header could not be "
                                       "read; its message is shown as text", raw))
            self._route = Route("text")
        else:
            self._route = self._dialect.route(header)
        self._open_body(data[pos:match.end()], out)
        return match.end()

    def _unfinished_header(self, data: str, pos: int, out: list[Event]) -> int:
        """The reply ended inside a message's header, before its body: an unfinished
        message, held back like an unfinished call (text, with ``truncated_call`` where
        the token limit cut it, so the endpoint keeps it out of the content; a header
        addressing a tool that simply ends is ``unclosed_call``)."""
        self._held.drop()
        raw = data[pos:]
        out.append(TextEvent(raw))
        if self._cut:
            out.append(DiagnosticEvent("truncated_call", "the reply was cut by the token limit "
                                       "inside a message header; shown as text", raw))
        else:
            out.append(DiagnosticEvent("unclosed_call", "the reply ended inside the header of a "
                                       "tool message; shown as text", raw))
        self._state = _TEXT
        return len(data)

    def _header_is_text(self, data: str, pos: int, start: int, out: list[Event]) -> int:
        """No header here: the text up to the next end token is plain text."""
        held = self._held.release()
        if held:
            out.append(TextEvent(held))
        self._lead = False
        if start > pos:  # keep a stray <|start|> as text, then go on after it
            out.append(TextEvent(data[pos:start]))
        self._state = _TEXT
        return start

    def _open_body(self, header_raw: str, out: list[Event]) -> None:
        self._state = _BODY
        self._body_started = False
        route = self._route
        if route.kind == "builtin":
            # a built-in tool is a call only when the request offered it by that name
            route = self._route = Route("call" if route.name in self._tools else "dropped",
                                        route.name)
        if route.kind == "dropped":
            self._raw = [header_raw]
            return
        if route.kind != "call":
            return
        self._raw = [header_raw]
        self._call_name = route.name
        self._message_calls = 0

    def _start_call_body(self, data: str, pos: int, out: list[Event]) -> None:
        """Choose how to read a tool body from its first character."""
        fmt = self._dialect.call_format
        if fmt is not None and not data.startswith("{", pos):
            self._tagged = CallParser(fmt, self._tools, first_index=self._calls)
            return
        self._json = []
        self._strings = _JsonStrings()
        self._json_read = 0
        self._in_string_end = None
        self._call_index = self._calls
        self._calls += 1
        out.append(ToolCallStartEvent(index=self._call_index, name=self._call_name))

    def _scan_body(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        n = len(data)
        route = self._route
        if route.kind == "call" and not self._body_started:
            while pos < n and data[pos] in " \t\r\n":
                self._raw.append(data[pos])
                pos += 1
            if pos >= n:
                return pos  # nothing of the body yet (at the end: an empty, unclosed body)
            self._body_started = True
            self._start_call_body(data, pos, out)
        ends = _BODY_ENDS if route.kind in ("call", "dropped") else _PROSE_ENDS
        while True:
            match = ends.find(data, pos)
            end = match.start() if match is not None else (n if eof else ends.partial(data, pos))
            self._body_piece(data[pos:end], out)
            if match is None:
                return self._hold(data, end) if end < n else n
            if self._json is None or not self._inside_json_string():
                break
            token = match.group(0)  # inside a JSON string: content, not an end
            if self._in_string_end is None:
                self._in_string_end = (sum(map(len, self._json or ())), token)
            self._body_piece(token, out)
            pos = match.end()
        token = match.group(0)
        self._end_body(out, complete=True)
        if token == START:
            return match.start()  # a new message began without an end token
        return match.end()

    def _body_piece(self, piece: str, out: list[Event]) -> None:
        if not piece:
            return
        kind = self._route.kind
        if kind == "text":
            out.append(TextEvent(piece))
        elif kind == "reasoning":
            out.append(ReasoningEvent(piece))
        elif self._json is not None:
            self._raw.append(piece)
            out.append(ToolCallDeltaEvent(self._call_index, self._call_name, piece))
            self._json.append(piece)
        elif self._tagged is not None:
            self._tagged_events(self._tagged.feed(piece), out)
        elif kind == "dropped":
            self._raw.append(piece)

    def _inside_json_string(self) -> bool:
        """Whether the JSON body read so far ends inside a string literal.

        Read lazily, only where an end token is found: the pieces since the last
        time in one step, so streaming a body costs nothing more per delta."""
        if self._json is None:
            return False
        if self._json_read < len(self._json):
            self._strings.advance("".join(self._json[self._json_read:]))
            self._json_read = len(self._json)
        return self._strings.inside

    def _cut_at_string_end(self, out: list[Event]) -> str | None:
        """At the end of the reply inside a JSON string that never closed: end the body at
        the first end token read as string content, and return what followed it."""
        if self._json is None or self._in_string_end is None or not self._inside_json_string():
            return None
        at, token = self._in_string_end
        body = "".join(self._json)
        raw = "".join(self._raw)
        self._raw = [raw[:len(raw) - len(body) + at]]
        self._json = [body[:at]]
        self._strings = _JsonStrings()
        self._json_read = 0
        self._in_string_end = None
        self._end_body(out, complete=True)
        return body[at:] if token == START else body[at + len(token):]

    def _end_body(self, out: list[Event], *, complete: bool, at_eof: bool = False,
                  cut: bool = False) -> None:
        self._state = _HEADER
        self._lead = True
        if self._route.kind == "dropped":
            self._dropped(out)
            return
        if self._route.kind != "call":
            return
        tagged, json_body = self._tagged, self._json
        self._tagged = self._json = None
        if tagged is not None:
            self._tagged_events(tagged.close(end_reason="length" if cut else "stop"), out)
            self._calls = tagged.calls_started
            self._header_text = None
            if not self._message_calls and not (cut and not self._raw):
                self._no_call_in_message(out)  # (a cut body said so, header and all)
            self._raw = []
            return
        if cut:
            self._malformed(out, "truncated_call")
            return
        if json_body is None:  # an empty tool message
            if at_eof or not complete:
                self._malformed(out, "unclosed_call")
                return
            json_body = []
            self._call_index = self._calls
            self._calls += 1
            out.append(ToolCallStartEvent(index=self._call_index, name=self._call_name))
        text = "".join(json_body)
        arguments, double = json_arguments(text) if complete else (None, False)
        if double:
            out.append(double_encoded_note(self._call_name, text))
        if arguments is None:
            self._malformed(out, "unclosed_call" if at_eof or not complete
                            else "malformed_arguments")
            return
        out.append(ToolCallEndEvent(name=self._call_name, arguments=arguments,
                                 index=self._call_index))
        self._raw = []

    def _tagged_events(self, events: list[Event], out: list[Event]) -> None:
        """Pass on a tagged body's events; text before its first call keeps the header."""
        for event in events:
            if isinstance(event, ToolCallEndEvent):
                self._message_calls += 1
            elif isinstance(event, TextEvent) and not self._message_calls and self._raw:
                # one text: what a diagnostic gives back of it holds the header too
                header = "".join(self._raw)
                self._raw = []
                self._header_text = (header, event.text)
                event = TextEvent(header + event.text)
            elif isinstance(event, DiagnosticEvent) and self._header_text is not None:
                header, text = self._header_text
                self._header_text = None
                if event.raw and event.raw == text:
                    event = DiagnosticEvent(event.code, event.message, header + event.raw)
            out.append(event)

    def _dropped(self, out: list[Event]) -> None:
        """A message to a built-in tool the request did not offer: neither call nor text."""
        raw = "".join(self._raw)
        self._raw = []
        out.append(DiagnosticEvent("unoffered_recipient",
                                   f"a {self._dialect.family} message to the built-in tool "
                                   f"{self._route.name!r}, which the request did not offer, "
                                   "was dropped", raw))

    def _no_call_in_message(self, out: list[Event]) -> None:
        """A tool message whose body held no call: its header is text too."""
        raw = "".join(self._raw)
        if raw:
            out.append(TextEvent(raw))
        out.append(DiagnosticEvent("malformed_call",
                                   f"a {self._dialect.family} message addressed to "
                                   f"{self._call_name!r} holds no call; shown as text", raw))

    def _malformed(self, out: list[Event], code: str) -> None:
        raw = "".join(self._raw)
        self._raw = []
        message = ("the reply ended inside a tool message; shown as text" if
                   code == "unclosed_call" else
                   "the reply was cut by the token limit inside a tool message; shown as text"
                   if code == "truncated_call" else
                   f"the arguments of a {self._dialect.family} tool message are not a JSON "
                   "object; shown as text")
        if raw:
            out.append(TextEvent(raw))
        out.append(DiagnosticEvent(code, message, raw))

    def _scan_text(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        n = len(data)
        match = _BODY_ENDS.find(data, pos)
        end = match.start() if match is not None else (n if eof else _BODY_ENDS.partial(data,
                                                                                       pos))
        if end > pos:
            out.append(TextEvent(data[pos:end]))
        if match is None:
            return self._hold(data, end) if end < n else n
        self._state = _HEADER
        self._lead = True
        if match.group(0) == START:
            # the header scanner reads what follows; a stray token it shows as text
            # and goes on after it, so the scan always moves forward
            return match.start()
        return match.end()


def function_recipient(recipient: str) -> str:
    """``functions.f`` -> ``f``; other recipients (``browser.search``) stay whole."""
    name = recipient.removeprefix("functions.")
    return name if valid_name(name) else recipient
