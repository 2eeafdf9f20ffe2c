"""Section readers for tool calls written as JSON, streamed as they arrive.

Families write a call as a JSON object (``{"name": ..., "arguments": {...}}``,
Cohere's ``{"tool_name": ..., "parameters": ...}``, Apertus' ``{"NAME": {...}}``),
as a list of such objects, or as bare arguments after a name given by markup
(DeepSeek, Mistral v11, Functionary). The readers here follow the object's
structure with a cursor and a :class:`~toolwire.parse.json_stream.JsonValueScanner`
per key and value; the arguments' text is emitted as ``tool_call_delta``
events (``parameter=None``) while it arrives, and each value is decoded once,
when it is complete. They implement the
:class:`~toolwire.parse.call_sections.SectionReader` protocol, so a family composes
them with its markup.

Arguments are JSON, hence already typed; nothing is validated here (the
dispatcher validates against the schema). Two drifts of real output are read:
arguments written as a JSON *string* holding an object (templates that apply
``tojson`` twice teach models this) and a missing ``"arguments"`` key (a
parameterless call).
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from ..events import Event, ToolCallDeltaEvent, ToolCallEvent, ToolCallStartEvent
from .call_sections import DONE, FAIL, MORE, NOT_A_CALL, CallNumbering
from .json_stream import INVALID, NEED_MORE, JsonValueScanner, decode_json

__all__ = [
    "ArgsReader",
    "CallListReader",
    "CallObjectReader",
    "CallShape",
    "arguments_from",
]

_BLANK_CHARS: Final = " \t\r\n"
_ARGS_FIRST: Final = frozenset('{"n')  # an object, a JSON-encoded object, or null

# CallObjectReader states
_OPEN, _KEY_OR_CLOSE, _KEY_AFTER_COMMA, _KEY, _COLON, _VALUE_START, _VALUE, _AFTER_VALUE, \
    _CLOSED, _FAILED = range(10)
# roles of a value
_OTHER, _NAME, _ARGS = range(3)


@attrs.frozen
class CallShape:
    """How a family writes one call as a JSON object.

    :ivar name_keys: keys whose (string) value is the tool name.
    :ivar args_keys: keys whose value is the arguments object.
    :ivar named: the object has one key, the tool name, whose value is the
        arguments (Apertus: ``{"get_weather": {...}}``).
    :ivar strict: only ``name_keys``, ``args_keys`` and ``extra_keys`` may
        appear; any other key means the object is not a call but text (for
        formats where a call is bare JSON, which an answer may also be).
    :ivar extra_keys: keys tolerated besides name and arguments in strict mode.
    :ivar require_args: an object without arguments is not a call (strict formats).
    """

    name_keys: tuple[str, ...] = ("name",)
    args_keys: tuple[str, ...] = ("arguments", "parameters")
    named: bool = False
    strict: bool = False
    extra_keys: tuple[str, ...] = ("type", "id")
    require_args: bool = False


def arguments_from(value: Any) -> dict[str, Any] | None:
    """Decoded arguments as a dict, or ``None`` when they cannot be arguments.

    ``null`` and a blank string are no arguments; a string holding a JSON
    object (arguments encoded twice) is decoded.
    """
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        if not value.strip():
            return {}
        ok, inner = decode_json(value)
        if ok and isinstance(inner, dict):
            return inner
    return None


class _Reader:
    """What every reader shares: consumed text, failure, and the call it streams."""

    __slots__ = ("_index", "_name", "_numbering", "_streaming", "failure", "message", "raw",
                 "started")

    def __init__(self, numbering: CallNumbering) -> None:
        self._numbering = numbering
        self.raw: list[str] = []
        self.failure = ""
        self.message = ""
        self.started = 0
        self._index = -1
        self._name = ""
        self._streaming = False

    def _blanks(self, data: str, pos: int) -> int:
        k = pos
        n = len(data)
        while k < n and data[k] in _BLANK_CHARS:
            k += 1
        if k > pos:
            self.raw.append(data[pos:k])
        return k

    def _take(self, data: str, start: int, end: int, out: list[Event]) -> None:
        if end > start:
            piece = data[start:end]
            self.raw.append(piece)
            if self._streaming:
                out.append(ToolCallDeltaEvent(self._index, self._name, piece))

    def _start_call(self, name: str, out: list[Event]) -> None:
        self._name = name
        self._index = self._numbering.take()
        self.started += 1
        out.append(ToolCallStartEvent(index=self._index, name=name))

    def _fail(self, pos: int, code: str, message: str) -> tuple[int, int]:
        self.failure = code
        self.message = message
        self._streaming = False
        return FAIL, pos

    def _unclosed(self, pos: int) -> tuple[int, int]:
        return self._fail(pos, "unclosed_call", "the reply ended inside a tool call; "
                                                "shown as text")


class CallObjectReader(_Reader):
    """Reads one call object, from its ``{`` (after blanks) to its ``}``.

    Emits ``tool_call_start`` once the name is known and the arguments begin,
    the arguments' text as deltas, and ``tool_call`` at the closing brace.
    """

    __slots__ = ("_args_text", "_keys", "_missing_brace", "_role", "_scanner", "_shape", "_state",
                 "_value_from")

    def __init__(self, shape: CallShape, numbering: CallNumbering) -> None:
        super().__init__(numbering)
        self._shape = shape
        self._state = _OPEN
        self._scanner = JsonValueScanner(keep_text=False)
        self._value_from = 0
        self._role = _OTHER
        self._keys = 0
        self._args_text: str | None = None
        self._missing_brace = False

    @property
    def complete_but_unclosed(self) -> bool:
        """The reader failed where the object's closing ``}`` should have been."""
        return self._missing_brace and self._name != ""

    def feed(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """Consume from ``pos``; see :class:`~toolwire.parse.call_sections.SectionReader`."""
        n = len(data)
        while True:
            state = self._state
            if state == _VALUE or state == _KEY:
                scanner = self._scanner
                end = scanner.feed(data, pos)
                if end == NEED_MORE:
                    self._take(data, pos, n, out)
                    if not eof:
                        return MORE, n
                    if not scanner.finish():
                        return self._unclosed(n)
                    end = pos = n
                elif end == INVALID:
                    self._take(data, pos, scanner.error_at, out)
                    return self._refuse(scanner.error_at, "the JSON of the call is malformed")
                else:
                    self._take(data, pos, end, out)
                    pos = end
                result = self._end_key(out, pos) if state == _KEY else self._end_value(out, pos)
                if result is not None:
                    return result
                continue
            if state == _CLOSED or state == _FAILED:
                return (DONE if state == _CLOSED else FAIL), pos
            pos = self._blanks(data, pos)
            if pos >= n:
                return self._unclosed(n) if eof else (MORE, n)
            c = data[pos]
            if state == _OPEN:
                if c != "{":
                    return self._refuse(pos, "expected a JSON object")
                self.raw.append(c)
                self._state = _KEY_OR_CLOSE
                pos += 1
            elif state == _KEY_OR_CLOSE or state == _KEY_AFTER_COMMA:
                if c == '"':
                    self._begin_scan(_KEY)
                elif c == "}" and state == _KEY_OR_CLOSE:
                    self.raw.append(c)
                    return self._close(out, pos + 1)
                else:
                    return self._refuse(pos, "expected a key in the call object")
            elif state == _COLON:
                if c != ":":
                    return self._refuse(pos, "expected ':' in the call object")
                self.raw.append(c)
                self._state = _VALUE_START
                pos += 1
            elif state == _VALUE_START:
                if self._role == _ARGS and self._name and not self.started:
                    self._start_call(self._name, out)
                self._streaming = self._role == _ARGS and self.started > 0
                self._begin_scan(_VALUE)
            else:  # _AFTER_VALUE
                if c == ",":
                    self.raw.append(c)
                    self._state = _KEY_AFTER_COMMA
                    pos += 1
                elif c == "}":
                    self.raw.append(c)
                    return self._close(out, pos + 1)
                else:
                    self._missing_brace = True
                    return self._refuse(pos, "expected ',' or '}' in the call object")

    def force_close(self, out: list[Event]) -> bool:
        """Finish a call whose closing ``}`` is missing (a known drift).

        :returns: ``False`` when the reader did not fail just there.
        """
        if not self.complete_but_unclosed:
            return False
        self._missing_brace = False
        self.failure = self.message = ""
        status, _ = self._close(out, 0)
        return status == DONE

    # -- steps -----------------------------------------------------------------

    def _begin_scan(self, state: int) -> None:
        self._scanner = JsonValueScanner(keep_text=False)
        self._value_from = len(self.raw)
        self._state = state

    def _value_text(self) -> str:
        text = "".join(self.raw[self._value_from:])
        del self.raw[self._value_from:]
        self.raw.append(text)
        return text

    def _refuse(self, pos: int, message: str) -> tuple[int, int]:
        self._state = _FAILED
        if self._shape.strict and not self.started:
            return self._fail(pos, NOT_A_CALL, message)
        return self._fail(pos, "malformed_call", message + "; shown as text")

    def _end_key(self, out: list[Event], pos: int) -> tuple[int, int] | None:
        ok, key = decode_json(self._value_text())
        if not ok or not isinstance(key, str):
            return self._refuse(pos, "a key of the call object is not a string")
        shape = self._shape
        self._keys += 1
        self._state = _COLON
        if shape.named:
            if self._keys > 1 or not key:
                return self._refuse(pos, "a named call object has exactly one key, the tool name")
            self._name = key
            self._role = _ARGS
        elif key in shape.name_keys and not self._name:
            self._role = _NAME
        elif key in shape.args_keys and self._args_text is None:
            self._role = _ARGS
        elif shape.strict and key not in shape.extra_keys:
            return self._refuse(pos, f"unexpected key {key!r} in a call object")
        else:
            self._role = _OTHER
        return None

    def _end_value(self, out: list[Event], pos: int) -> tuple[int, int] | None:
        self._state = _AFTER_VALUE
        self._streaming = False
        if self._role == _OTHER:
            return None
        text = self._value_text()
        if self._role == _ARGS:
            self._args_text = text
            return None
        ok, name = decode_json(text)
        if not ok or not isinstance(name, str) or not name.strip():
            return self._refuse(pos, "the tool name is not a string")
        self._name = name.strip()
        return None

    def _close(self, out: list[Event], pos: int) -> tuple[int, int]:
        self._state = _CLOSED
        if not self._name:
            return self._refuse(pos, "a call object without a tool name")
        if self._args_text is None:
            if self._shape.require_args:
                return self._refuse(pos, "a call object without arguments")
            arguments: dict[str, Any] | None = {}
        else:
            ok, value = decode_json(self._args_text)
            arguments = arguments_from(value) if ok else None
            if arguments is None:
                return self._refuse(pos, "the arguments are not a JSON object")
        if not self.started:
            self._start_call(self._name, out)
            if self._args_text:
                out.append(ToolCallDeltaEvent(self._index, self._name, self._args_text))
        out.append(ToolCallEvent(name=self._name, arguments=arguments, index=self._index))
        self.raw = []
        self._state = _CLOSED
        return DONE, pos


# CallListReader states
_LIST_OPEN, _ITEM_OR_END, _ITEM, _AFTER_ITEM, _ITEM_REQUIRED = range(5)


class CallListReader(_Reader):
    """Reads a JSON list of call objects, from its ``[`` to its ``]``.

    :param opened: the ``[`` belongs to the family's marker (FireFunction's
        ``functools[``) and was consumed with it.
    """

    __slots__ = ("_calls_before", "_item", "_shape", "_state", "calls")

    def __init__(self, shape: CallShape, numbering: CallNumbering, *, opened: bool = False
                 ) -> None:
        super().__init__(numbering)
        self._shape = shape
        self._state = _ITEM_OR_END if opened else _LIST_OPEN
        self._item: CallObjectReader | None = None
        self._calls_before = 0
        self.calls = 0

    def feed(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """Consume from ``pos``; see :class:`~toolwire.parse.call_sections.SectionReader`."""
        n = len(data)
        while True:
            state = self._state
            if state == _ITEM:
                item = self._item
                assert item is not None
                status, pos = item.feed(data, pos, out, eof)
                self.started = self._calls_before + item.started
                if status == MORE:
                    return MORE, pos
                if status == FAIL:
                    self.raw.extend(item.raw)
                    self._state = _FAILED
                    return self._fail(pos, item.failure, item.message)
                self.raw = []
                self.calls += 1
                self._calls_before = self.started
                self._state = _AFTER_ITEM
                continue
            if state == _FAILED:
                return FAIL, pos
            pos = self._blanks(data, pos)
            if pos >= n:
                return self._unclosed(n) if eof else (MORE, n)
            c = data[pos]
            if state == _LIST_OPEN:
                if c != "[":
                    return self._failed(pos, "expected a JSON list of calls")
                self.raw.append(c)
                self._state = _ITEM_OR_END
                pos += 1
            elif c == "{" and state != _AFTER_ITEM:
                self._item = CallObjectReader(self._shape, self._numbering)
                self._state = _ITEM
            elif c == "]" and state != _ITEM_REQUIRED:
                self.raw.append(c)
                self._state = _CLOSED
                return DONE, pos + 1
            elif c == "," and state == _AFTER_ITEM:
                self.raw.append(c)
                self._state = _ITEM_REQUIRED
                pos += 1
            else:
                return self._failed(pos, "expected a call object in the list")

    def _failed(self, pos: int, message: str) -> tuple[int, int]:
        self._state = _FAILED
        code = NOT_A_CALL if self._shape.strict and not self.started else "malformed_call"
        return self._fail(pos, code, message)


# ArgsReader states
_ARGS_START, _ARGS_VALUE, _ARGS_DONE = range(3)


class ArgsReader(_Reader):
    """Reads the bare JSON arguments of a call whose name the markup gave.

    The ``tool_call_start`` event is emitted on the first feed; the value's text
    streams as deltas; ``tool_call`` follows its last character.
    """

    __slots__ = ("_scanner", "_state", "_value_from")

    def __init__(self, name: str, numbering: CallNumbering) -> None:
        super().__init__(numbering)
        self._name = name
        self._state = _ARGS_START
        self._scanner = JsonValueScanner(keep_text=False)
        self._value_from = 0

    def feed(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """Consume from ``pos``; see :class:`~toolwire.parse.call_sections.SectionReader`."""
        n = len(data)
        if self._state == _ARGS_DONE:
            return DONE, pos
        if self._state == _ARGS_START:
            pos = self._blanks(data, pos)
            if pos >= n:
                return self._unclosed(n) if eof else (MORE, n)
            if data[pos] not in _ARGS_FIRST:
                return self._fail(pos, "malformed_call",
                                  "expected JSON arguments after the tool name; shown as text")
            self._start_call(self._name, out)
            self._value_from = len(self.raw)
            self._state = _ARGS_VALUE
            self._streaming = True
        scanner = self._scanner
        end = scanner.feed(data, pos)
        if end == INVALID:
            self._take(data, pos, scanner.error_at, out)
            return self._fail(scanner.error_at, "malformed_call",
                              "the arguments are not JSON; shown as text")
        if end == NEED_MORE:
            self._take(data, pos, n, out)
            if not eof:
                return MORE, n
            if not scanner.finish():
                return self._unclosed(n)
            end = n
        else:
            self._take(data, pos, end, out)
        self._streaming = False
        ok, value = decode_json("".join(self.raw[self._value_from:]))
        arguments = arguments_from(value) if ok else None
        if arguments is None:
            return self._fail(end, "malformed_call",
                              "the arguments are not a JSON object; shown as text")
        out.append(ToolCallEvent(name=self._name, arguments=arguments, index=self._index))
        self.raw = []
        self._state = _ARGS_DONE
        return DONE, end
