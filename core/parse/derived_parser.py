"""A streaming parser built from a :class:`~toolwire.templates.derive.DerivedFormat`.

The format's markers become a small program of steps — literal text, holes
(the call id, the function name, an argument name), JSON arguments, tagged
arguments — that the parser walks with a cursor, one delta at a time. Only a
tail that may be the start of the next marker is held back; string values and
JSON arguments stream as argument deltas. Text that stops matching the program
is given back as text with a diagnostic; nothing raises.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from ..conversation.schema import ToolSchemaIndex
from ..events import (
    DiagnosticEvent,
    Event,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEvent,
    ToolCallStartEvent,
)
from ..templates.derive import ID_HOLE, KEY_HOLE, DerivedFormat
from .json_stream import INVALID, NEED_MORE, JsonValueScanner, decode_json
from .protocol import ParserSpec, StreamParser, collect_reply, nine_char_call_id
from .streaming import HeldWhitespace

__all__ = ["DerivedParser", "derived_parser_spec", "verify_format"]

_MAX_HOLE = 256
_HOLE_CHARS = re.compile(r"[^\n<>\"{}\[\]]*")


@attrs.frozen
class _Step:
    kind: str  # "lit", "id", "name", "args"
    text: str = ""


def _segments(marker: str) -> list[_Step]:
    """``a{id}b`` -> literal, id hole, literal (empty literals dropped)."""
    steps: list[_Step] = []
    parts = marker.split(ID_HOLE)
    for i, part in enumerate(parts):
        if part:
            steps.append(_Step("lit", part))
        if i < len(parts) - 1:
            steps.append(_Step("id"))
    return steps


class DerivedParser:
    """One reply's parser for a derived format: ``feed`` deltas, then ``close``."""

    def __init__(self, fmt: DerivedFormat, tools: Mapping[str, Any]) -> None:
        self.fmt = fmt
        self._schemas = ToolSchemaIndex(tools)
        self._opening = fmt.opening
        call = [*_segments(fmt.call_open), _Step("name"), *_segments(fmt.name_close),
                _Step("args"), *_segments(fmt.call_close)]
        self._call_steps = call
        self._section_steps = _segments(fmt.section_open)
        self._next_call = [*_segments(fmt.call_separator), *call] if fmt.call_separator \
            else call
        self._pending = ""
        self._held = HeldWhitespace()
        self._lead = False
        self._steps: list[_Step] = []
        self._step = 0
        self._in_calls = False
        self._raw: list[str] = []
        self._calls = 0
        self._name = ""
        self._arguments: dict[str, Any] = {}
        self._json: JsonValueScanner | None = None
        self._tag_state = ""  # "", "key", "value"
        self._key = ""
        self._value_is_string = True
        self._value_parts: list[str] = []
        self._args_first = True

    # -- protocol ---------------------------------------------------------------

    def feed(self, text: str) -> list[Event]:
        """Consume a delta."""
        out: list[Event] = []
        try:
            self._run(self._pending + text, out, eof=False)
        except Exception as exc:  # a parser bug must never end a chat
            out.append(DiagnosticEvent("parser_error", f"derived parser failed: {exc!r}"))
        return out

    def close(self) -> list[Event]:
        """End of reply."""
        out: list[Event] = []
        try:
            self._run(self._pending, out, eof=True)
            if self._in_calls:
                self._give_back(out, "unclosed_call", "the reply ended inside a tool call")
            rest = self._held.release()
            if rest and not self._lead:
                out.append(TextEvent(rest))
        except Exception as exc:
            out.append(DiagnosticEvent("parser_error", f"derived parser failed: {exc!r}"))
        return out

    # -- driver -------------------------------------------------------------------

    def _run(self, data: str, out: list[Event], eof: bool) -> None:
        self._pending = ""
        pos = 0
        while True:
            before = self._state_key()
            start = pos
            pos = self._scan_call(data, pos, out, eof) if self._in_calls \
                else self._scan_text(data, pos, out, eof)
            if pos < 0:
                return
            if pos == start and self._state_key() == before:
                if pos < len(data):  # no progress: keep the rest for more text
                    self._pending = data[pos:]
                return

    def _state_key(self) -> tuple[bool, int, str, int]:
        return self._in_calls, self._step, self._tag_state, id(self._steps)

    def _hold(self, data: str, pos: int) -> int:
        self._pending = data[pos:]
        return -1

    # -- text ---------------------------------------------------------------------

    def _scan_text(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        if self._lead:
            while pos < len(data) and data[pos] in " \t\r\n":
                pos += 1
            if pos >= len(data):
                return pos
            self._lead = False
        k = data.find(self._opening, pos)
        if k >= 0:
            self._emit_text(data[pos:k], out)
            self._held.drop()
            self._in_calls = True
            self._steps = [*self._section_steps, *self._call_steps, _Step("after")]
            self._step = 0
            self._raw = []
            return k
        safe = len(data) if eof else _partial_start(data, pos, self._opening)
        self._emit_text(data[pos:safe], out)
        return self._hold(data, safe) if safe < len(data) else len(data)

    def _emit_text(self, text: str, out: list[Event]) -> None:
        chunk = self._held.push(text)
        if chunk:
            out.append(TextEvent(chunk))

    # -- calls ----------------------------------------------------------------------

    def _scan_call(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        step = self._steps[self._step]
        if step.kind == "lit":
            return self._match_literal(data, pos, step.text, out, eof)
        if step.kind in ("id", "name"):
            return self._read_hole(data, pos, step.kind, out, eof)
        if step.kind == "args":
            if self.fmt.arguments == "json":
                return self._read_json_args(data, pos, out, eof)
            return self._read_tagged_args(data, pos, out, eof)
        return self._after_call(data, pos, out, eof)

    def _consume(self, data: str, start: int, end: int) -> int:
        if end > start:
            self._raw.append(data[start:end])
        return end

    def _advance(self) -> None:
        self._step += 1

    def _match_literal(self, data: str, pos: int, literal: str, out: list[Event],
                       eof: bool) -> int:
        available = len(data) - pos
        if data.startswith(literal, pos):
            self._advance()
            return self._consume(data, pos, pos + len(literal))
        if available < len(literal) and literal.startswith(data[pos:]) and not eof:
            return self._hold(data, pos)
        self._consume(data, pos, pos)
        return self._fail(data, pos, out, "malformed_call",
                          f"expected {literal!r} in the call markup")

    def _next_literal(self) -> str:
        for step in self._steps[self._step + 1:]:
            if step.kind == "lit":
                return step.text
            if step.kind == "args":
                return "{" if self.fmt.arguments == "json" else self._args_start()
        return ""

    def _args_start(self) -> str:
        return self.fmt.arg_open or self.fmt.string_key_close

    def _read_hole(self, data: str, pos: int, kind: str, out: list[Event], eof: bool) -> int:
        # The hole stays in the pending text until its end is found (it is short:
        # at most _MAX_HOLE characters), so a failure resumes at the same place
        # however the reply was split.
        terminators = [t for t in (self._next_literal(),) if t]
        if kind == "name" and self.fmt.arguments == "tagged":
            closing = self.fmt.call_close.split(ID_HOLE, 1)[0]
            if closing:
                terminators.append(closing)
        found = [k for k in (data.find(t, pos) for t in terminators) if k >= 0]
        if found:
            k = min(found)
            value = data[pos:k]
            if len(value) > _MAX_HOLE or not _HOLE_CHARS.fullmatch(value) or \
                    (kind == "name" and not value.strip()):
                return self._fail(data, pos, out, "malformed_call",
                                  f"no valid {kind} in the call markup")
            self._consume(data, pos, k)
            if kind == "name":
                self._start_call(value.strip(), out)
            self._advance()
            return k
        if eof:
            return self._fail(data, pos, out, "unclosed_call", "the reply ended inside a call")
        safe = max(pos, len(data) - (max((len(t) for t in terminators), default=1) - 1))
        if safe - pos > _MAX_HOLE or not _HOLE_CHARS.fullmatch(data, pos, safe):
            return self._fail(data, pos, out, "malformed_call", f"no valid {kind} in the call "
                                                                "markup")
        return self._hold(data, pos)

    def _start_call(self, name: str, out: list[Event]) -> None:
        self._name = name
        self._arguments = {}
        self._json = None
        self._tag_state = ""
        self._args_first = True
        out.append(ToolCallStartEvent(index=self._calls, name=name))

    # JSON arguments ------------------------------------------------------------------

    def _read_json_args(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        if self._json is None:
            self._json = JsonValueScanner()
        end = self._json.feed(data, pos)
        if end == INVALID:
            return self._fail(data, pos, out, "malformed_call", "the arguments are not JSON")
        stop = len(data) if end == NEED_MORE else end
        if stop > pos:
            out.append(ToolCallDeltaEvent(index=self._calls, name=self._name,
                                          text=data[pos:stop]))
        self._consume(data, pos, stop)
        if end == NEED_MORE:
            if eof:
                return self._fail(data, stop, out, "unclosed_call",
                                  "the reply ended inside the arguments")
            return stop
        ok, value = self._json.decode()
        if not ok or not isinstance(value, dict):
            return self._fail(data, stop, out, "malformed_call",
                              "the arguments are not a JSON object")
        self._arguments = value
        self._advance()
        return end

    # tagged arguments -----------------------------------------------------------------

    def _read_tagged_args(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        fmt = self.fmt
        if self._tag_state == "key":
            return self._read_key(data, pos, out, eof)
        if self._tag_state == "value":
            return self._read_value(data, pos, out, eof)
        opener = fmt.arg_open if self._args_first else fmt.arg_separator + fmt.arg_open
        closing = self.fmt.call_close.split(ID_HOLE, 1)[0]
        for candidate, action in ((opener, "key"), (closing, "end")):
            if candidate and data.startswith(candidate, pos):
                if action == "end":
                    self._advance()
                    return pos
                self._tag_state = "key"
                return self._consume(data, pos, pos + len(candidate))
            if candidate and not eof and len(data) - pos < len(candidate) and \
                    candidate.startswith(data[pos:]):
                return self._hold(data, pos)
        if not closing and eof:
            self._advance()
            return pos
        return self._fail(data, pos, out, "malformed_call", "expected an argument or the "
                                                             "end of the call")

    def _read_key(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        fmt = self.fmt
        closers = sorted({(fmt.string_key_close, True), (fmt.key_close, False)},
                         key=lambda c: -len(c[0]))
        best: tuple[int, str, bool] | None = None
        for closer, is_string in closers:
            if not closer:
                continue
            k = data.find(closer, pos)
            if k >= 0 and (best is None or k < best[0]):
                best = (k, closer, is_string)
        if best is None:
            if eof or len(data) - pos > _MAX_HOLE:
                return self._fail(data, pos, out, "malformed_call", "an argument name never "
                                                                    "closes")
            return self._hold(data, pos)
        k, closer, marked_string = best
        key = data[pos:k].strip()
        if not key or len(key) > _MAX_HOLE:
            return self._fail(data, pos, out, "malformed_call", "an empty argument name")
        self._key = key
        self._value_parts = []
        same = fmt.string_key_close == fmt.key_close
        self._value_is_string = self._schemas.is_string(self._name, key) if same \
            else marked_string
        self._tag_state = "value"
        return self._consume(data, pos, k + len(closer))

    def _value_closer(self) -> str:
        fmt = self.fmt
        closer = fmt.string_value_close if self._value_is_string else fmt.value_close
        if fmt.string_key_close == fmt.key_close:
            closer = fmt.string_value_close
        return closer.replace(KEY_HOLE, self._key)

    def _read_value(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        closer = self._value_closer()
        k = data.find(closer, pos)
        if k < 0:
            if eof:
                return self._fail(data, pos, out, "unclosed_call", "a value never closes")
            safe = _partial_start(data, pos, closer)
            self._value_piece(data, pos, safe, out)
            return self._hold(data, safe)
        self._value_piece(data, pos, k, out)
        raw = "".join(self._value_parts)
        if self._value_is_string and self._schemas.is_string(self._name, self._key):
            value: Any = raw
        elif not self._value_is_string:
            ok, decoded = decode_json(raw)
            value = decoded if ok else self._schemas.coerce(self._name, self._key, raw)
        else:
            value = self._schemas.coerce(self._name, self._key, raw)
        self._arguments[self._key] = value
        self._tag_state = ""
        self._args_first = False
        return self._consume(data, k, k + len(closer))

    def _value_piece(self, data: str, start: int, end: int, out: list[Event]) -> None:
        if end <= start:
            return
        piece = data[start:end]
        self._value_parts.append(piece)
        self._raw.append(piece)
        if self._value_is_string:
            out.append(ToolCallDeltaEvent(index=self._calls, name=self._name, text=piece,
                                          parameter=self._key))

    # after a call ------------------------------------------------------------------------

    def _after_call(self, data: str, pos: int, out: list[Event], eof: bool) -> int:
        if self._name:
            out.append(ToolCallEvent(name=self._name, arguments=self._arguments,
                                     index=self._calls))
            self._calls += 1
            self._name = ""
            self._raw = []
        fmt = self.fmt
        # Another call follows only if the separator *and* the call's opening do.
        follow = (fmt.call_separator + fmt.call_open).split(ID_HOLE, 1)[0]
        for candidate, action in ((follow, "next"), (fmt.section_close, "close")):
            if candidate and data.startswith(candidate, pos):
                if action == "next":
                    self._steps = [*self._next_call, _Step("after")]
                    self._step = 0
                    return pos
                self._end_calls()
                return pos + len(candidate)
            if candidate and not eof and len(data) - pos < len(candidate) and \
                    candidate.startswith(data[pos:]):
                return self._hold(data, pos)
        if not fmt.section_close or eof or pos < len(data):
            # A reply may end, or continue with text, without the closing marker.
            self._end_calls()
            return pos
        return self._hold(data, pos)

    def _end_calls(self) -> None:
        self._in_calls = False
        self._lead = True
        self._steps = []

    # failures --------------------------------------------------------------------------

    def _fail(self, data: str, pos: int, out: list[Event], code: str, message: str) -> int:
        """Give what was read of the call back as text and go on reading text at ``pos``
        (the rest may hold a real call)."""
        self._give_back(out, code, message)
        self._lead = False
        return pos

    def _give_back(self, out: list[Event], code: str, message: str) -> None:
        raw = "".join(self._raw)
        self._raw = []
        if self._name:
            self._name = ""
        if raw:
            out.append(TextEvent(raw))
        out.append(DiagnosticEvent(code, f"{message}; shown as text", raw))
        self._end_calls()


def _partial_start(data: str, start: int, marker: str) -> int:
    """Where a trailing prefix of ``marker`` begins (``len(data)`` if none)."""
    if not marker:
        return len(data)
    n = len(data)
    for k in range(max(start, n - len(marker) + 1), n):
        if marker.startswith(data[k:]):
            return k
    return n


def derived_parser_spec(fmt: DerivedFormat, name: str = "derived") -> ParserSpec:
    """A :class:`ParserSpec` whose parsers follow ``fmt``."""

    def create(tools: Mapping[str, Any]) -> StreamParser:
        return DerivedParser(fmt, tools)

    # Derivation was verified with 9-character alphanumeric ids, the strictest form
    # real templates demand (Mistral), so replayed history renders the same way.
    return ParserSpec(name=name, detect=lambda source: 0.0, create=create,
                      make_call_id=nine_char_call_id,
                      description="derived from the chat template",
                      plugin="toolwire.templates.derive")


_CHECK_TOOLS: dict[str, Any] = {
    name: {"type": "object", "properties": {
        "zqkeyone": {"type": "string"}, "zqkeytwo": {"type": "integer"},
        "zqkeythree": {"type": "object"}, "zqkeyfour": {"type": "boolean"}}}
    for name in ("zqfnalpha", "zqfnbeta")
}


def verify_format(fmt: DerivedFormat, renderer: Any) -> str:
    """Render a richer assistant turn and parse it back; return a problem or ``""``.

    :param renderer: the derivation's renderer (``toolwire.templates.derive._Renderer``).
    """
    from ..errors import TemplateError

    calls = [("zqfnalpha", {"zqkeyone": "multi\nline < value", "zqkeytwo": 42,
                            "zqkeythree": {"a": [1, 2]}, "zqkeyfour": True}),
             ("zqfnbeta", {"zqkeyone": "second"}), ("zqfnalpha", {})]
    if not fmt.parallel:
        calls = calls[:1]
    rendered = [{"id": f"zqid0000{i + 1}", "type": "function",
                 "function": {"name": n, "arguments": a}} for i, (n, a) in enumerate(calls)]
    try:
        reply = renderer.block(rendered, holes=False)
    except TemplateError as exc:
        return f"the check conversation does not render: {exc}"
    for step in (1, 3, len(reply)):
        parser = DerivedParser(fmt, _CHECK_TOOLS)
        events: list[Event] = []
        for at in range(0, len(reply), step):
            events.extend(parser.feed(reply[at:at + step]))
        events.extend(parser.close())
        got = collect_reply(events)
        have = [(c.name, dict(c.arguments)) for c in got.tool_calls]
        if have != calls:
            return f"parsed {have!r} from a render of {calls!r}"
        if any(d.code in ("malformed_call", "unclosed_call", "parser_error")
               for d in got.diagnostics):
            return f"diagnostics: {[d.message for d in got.diagnostics]}"
    return ""
