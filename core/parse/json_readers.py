"""Readers for calls written as JSON, streamed as they arrive.

* :class:`JsonArgsReader`: the bare JSON arguments of a call whose name the
  markup gave (Kimi, DeepSeek, Mistral v11, Functionary), optionally fenced;
* :class:`CallObjectReader`: one call object (``{"name": ..., "arguments": {...}}``,
  Cohere's ``{"tool_name": ..., "parameters": ...}``, Apertus' ``{"NAME": {...}}``);
* :class:`CallObjectsReader`: a section's calls: one object, a list of them, or
  objects one after another, optionally fenced.

Each follows the JSON with a cursor and a :class:`~toolwire.parse.json_stream.JsonValueScanner`
per key and value; the arguments' text streams as ``tool_call_delta`` events
(``parameter=None``) and is decoded once, when complete. Drifts read in every
family alike: arguments double-encoded as a JSON string (a
``double_encoded_arguments`` diagnostic), a missing ``"arguments"`` key (a call
without parameters), and a call object missing its last ``}`` where the section
visibly ends (``repaired_call``).
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

import attrs

from ..events import (
    DiagnosticEvent,
    Event,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from .json_stream import INVALID, NEED_MORE, JsonValueScanner, decode_json
from .readers import DONE, FAIL, GO, MORE, NOT_A_CALL, CallContext, CallNumbering, ReaderBase
from .record import CallObjects
from .values import DOUBLE_ENCODED, arguments_from, json_arguments

__all__ = ["CallObjectReader", "CallObjectsReader", "JsonArgsReader", "double_encoded_note"]

_BLANK_CHARS: Final = " \t\r\n"
_ARGS_FIRST: Final = frozenset('{"n')  # an object, a JSON-encoded object, or null
FENCE: Final = "```"
_SHOWN: Final = "; shown as text"


def double_encoded_note(name: str, raw: str) -> DiagnosticEvent:
    """The diagnostic for arguments written as a JSON string holding an object."""
    return DiagnosticEvent(DOUBLE_ENCODED, f"the arguments of {name!r} were a JSON string "
                                           "holding an object; read as that object", raw)


class _JsonReader(ReaderBase):
    """What the JSON readers share (:cvar VALUE_STATE: the state in which the reader's
    ``_scanner`` reads a value; ``-1``: none, the reader has its own :meth:`plain_delta`)."""

    __slots__ = ("_fenced", "_index", "_name", "_numbering", "_streaming")

    VALUE_STATE: ClassVar[int] = -1
    _scanner: JsonValueScanner  # (set by each reader that reads one value)

    def __init__(self, numbering: CallNumbering | None) -> None:
        super().__init__()
        self._numbering = numbering
        self._index = -1
        self._name = ""
        self._streaming = False
        self._fenced = False

    def _past_fence(self, data: str, pos: int, eof: bool) -> int:
        """Past a code fence (```json) opening the body, taken as markup: where the body
        begins (``pos`` without a fence); ``-1`` while more text must tell."""
        end = _fence_at(data, pos, eof)
        if end == -1:
            return -1
        if end is not None:
            self.take(data, pos, end)
            self._fenced = True
            return end
        return pos

    def _blanks(self, data: str, pos: int) -> int:
        k = pos
        n = len(data)
        while k < n and data[k] in _BLANK_CHARS:
            k += 1
        self.take(data, pos, k)
        return k

    def _consume(self, data: str, start: int, end: int, out: list[Event]) -> None:
        if end > start:
            piece = data[start:end]
            self.raw.append(piece)
            if self._streaming:
                out.append(ToolCallDeltaEvent(self._index, self._name, piece, None, self._id))

    @property
    def _id(self) -> str:
        return ""

    def plain_delta(self, text: str) -> list[Event] | None:
        """A string inside a value (:attr:`VALUE_STATE`) with no quote, not ending with a
        backslash (its escapes whole): taken whole, when the scanner cannot leave the string."""
        if self._state != self.VALUE_STATE:
            return None
        scanner = self._scanner
        if scanner.keep_text or not scanner.in_plain_string or '"' in text or text.endswith("\\"):
            return None
        out: list[Event] = []
        self._consume(text, 0, len(text), out)
        return out

    def _start_call(self, name: str, out: list[Event]) -> None:
        assert self._numbering is not None
        self._name = name
        self._index = self._numbering.take()
        self.started += 1
        out.append(ToolCallStartEvent(index=self._index, name=name))

    def fail(self, pos: int, code: str, message: str) -> tuple[int, int]:
        self._streaming = False
        return super().fail(pos, code, message)


def _fence_at(data: str, pos: int, eof: bool) -> int | None:
    """After an opening fence at ``pos``: its end (``-1``: cut short), or ``None``: none."""
    if data.startswith(FENCE, pos):
        end = pos + len(FENCE)
        if data.startswith("json", end):
            return end + 4
        if not eof and len(data) - end < 4 and "json".startswith(data[end:]):
            return -1
        return end
    if not eof and len(data) - pos < len(FENCE) and FENCE.startswith(data[pos:]):
        return -1
    return None


# JsonArgsReader states
_ARGS_FENCE, _ARGS_START, _ARGS_VALUE, _ARGS_CLOSE_FENCE, _ARGS_DONE = range(5)


class JsonArgsReader(_JsonReader):
    """Reads the JSON arguments of a call whose name the markup gave.

    The value's text streams as deltas; :attr:`arguments` holds the decoded
    object once the reader answers ``DONE`` (just past the value, or past the
    closing fence).

    :param call: the call being read.
    :param fence: the value may be fenced with ```` ```json ````.
    """

    __slots__ = ("_call", "_scanner", "_value_from")

    VALUE_STATE = _ARGS_VALUE

    @property
    def _id(self) -> str:
        return self._call.call_id

    def __init__(self, call: CallContext, *, fence: bool = False) -> None:
        super().__init__(None)
        self._call = call
        self._index = call.index
        self._name = call.name
        self._state = _ARGS_FENCE if fence else _ARGS_START
        self._scanner = JsonValueScanner(keep_text=False)
        self._value_from = 0

    def feed(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """Consume from ``pos``; see :mod:`toolwire.parse.readers`."""
        n = len(data)
        while True:
            state = self._state
            if state == _ARGS_DONE:
                return DONE, pos
            if state == _ARGS_VALUE:
                return self._value(data, pos, out, eof)
            pos = self._blanks(data, pos)
            if pos >= n:
                if eof:
                    if state == _ARGS_CLOSE_FENCE:  # the reply ended before the closing fence
                        self._state = _ARGS_DONE
                        return DONE, n
                    return self.unclosed(n)
                return MORE, n
            if state == _ARGS_FENCE:
                end = self._past_fence(data, pos, eof)
                if end == -1:
                    return MORE, pos
                pos = end
                self._state = _ARGS_START
            elif state == _ARGS_START:
                if data[pos] not in _ARGS_FIRST:
                    return self.fail(pos, "malformed_arguments", "expected JSON arguments after "
                                                                 "the tool name; shown as text")
                self._value_from = len(self.raw)
                self._state = _ARGS_VALUE
                self._streaming = True
            else:  # _ARGS_CLOSE_FENCE
                if data.startswith(FENCE, pos):
                    self.take(data, pos, pos + len(FENCE))
                    pos += len(FENCE)
                elif not eof and n - pos < len(FENCE) and FENCE.startswith(data[pos:]):
                    return MORE, pos
                self._state = _ARGS_DONE

    def _value(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        n = len(data)
        scanner = self._scanner
        end = scanner.feed(data, pos)
        if end == INVALID:
            self._consume(data, pos, scanner.error_at, out)
            return self.fail(scanner.error_at, "malformed_arguments",
                             "the arguments are not JSON; shown as text")
        if end == NEED_MORE:
            self._consume(data, pos, n, out)
            if not eof:
                return MORE, n
            if not scanner.finish():
                return self.unclosed(n)
            end = n
        else:
            self._consume(data, pos, end, out)
        self._streaming = False
        text = "".join(self.raw[self._value_from:])
        arguments, double = json_arguments(text)
        if arguments is None:
            return self.fail(end, "malformed_arguments",
                             "the arguments are not a JSON object; shown as text")
        if double:
            self.notes.append(double_encoded_note(self._name, text))
        self.arguments = arguments
        self._state = _ARGS_CLOSE_FENCE if self._fenced else _ARGS_DONE
        return self.feed(data, end, out, eof)


# CallObjectReader states
_OPEN, _KEY_OR_CLOSE, _KEY_AFTER_COMMA, _KEY, _COLON, _VALUE_START, _VALUE, _AFTER_VALUE, \
    _CLOSED, _FAILED = range(10)
# roles of a value
_OTHER, _NAME, _ARGS = range(3)


class CallObjectReader(_JsonReader):
    """Reads one call object, from its ``{`` (after blanks) to its ``}``.

    Emits ``tool_call_start`` once the name is known and the arguments begin,
    the arguments' text as deltas, and ``tool_call`` at the closing brace.
    """

    __slots__ = ("_args_text", "_keys", "_missing_brace", "_role", "_scanner", "_shape",
                 "_value_from")

    VALUE_STATE = _VALUE

    def __init__(self, shape: CallObjects, numbering: CallNumbering) -> None:
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
        """Consume from ``pos``; see :mod:`toolwire.parse.readers`."""
        n = len(data)
        while True:
            state = self._state
            if state == _VALUE or state == _KEY:
                scanner = self._scanner
                end = scanner.feed(data, pos)
                if end == NEED_MORE:
                    self._consume(data, pos, n, out)
                    if not eof:
                        return MORE, n
                    if not scanner.finish():
                        return self.unclosed(n)
                    end = pos = n
                elif end == INVALID:
                    self._consume(data, pos, scanner.error_at, out)
                    return self._refuse(scanner.error_at, "the JSON of the call is malformed")
                else:
                    self._consume(data, pos, end, out)
                    pos = end
                result = self._end_key(pos) if state == _KEY else self._end_value(pos)
                if result is not None:
                    return result
                continue
            if state == _CLOSED or state == _FAILED:
                return (DONE if state == _CLOSED else FAIL), pos
            pos = self._blanks(data, pos)
            if pos >= n:
                return self.unclosed(n) if eof else (MORE, n)
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
        raw = "".join(self.raw)
        self._missing_brace = False
        self.failure = self.message = ""
        status, _ = self._close(out, 0)
        if status == DONE:
            out.append(DiagnosticEvent("repaired_call", "the call object lacked its closing "
                                                        "'}'; read as closed", raw))
        return status == DONE

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
            return self.fail(pos, NOT_A_CALL, message)
        return self.fail(pos, "malformed_call", message + "; shown as text")

    def _end_key(self, pos: int) -> tuple[int, int] | None:
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

    def _end_value(self, pos: int) -> tuple[int, int] | None:
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
        double = False
        if self._args_text is None:
            if self._shape.require_args:
                return self._refuse(pos, "a call object without arguments")
            arguments: dict[str, Any] | None = {}
        else:
            ok, value = decode_json(self._args_text)
            arguments, double = arguments_from(value) if ok else (None, False)
            if arguments is None:
                return self._refuse(pos, "the arguments are not a JSON object")
        if not self.started:
            self._start_call(self._name, out)
            if self._args_text:
                out.append(ToolCallDeltaEvent(self._index, self._name, self._args_text))
        if double:
            out.append(double_encoded_note(self._name, self._args_text or ""))
        out.append(ToolCallEndEvent(name=self._name, arguments=arguments, index=self._index))
        self.raw = []
        return DONE, pos


# CallObjectsReader states
_FENCE_OPEN, _BODY, _LIST_ITEM_OR_END, _IN_OBJECT, _AFTER_OBJECT, _LIST_AFTER_ITEM, \
    _LIST_ITEM_REQUIRED, _AFTER_ALL, _OVER, _SKIP_ITEM, _AFTER_SKIPPED = range(11)


class CallObjectsReader(_JsonReader):
    """A section's calls as JSON: an object, a list of objects, or objects in a row.

    :param shape: the family's call objects.
    :param numbering: the reply's call numbering.
    :param closers: markers that end the section (a repaired call's brace is
        missing right before one of them).
    :param strict: JSON that is not a call is plain text until a call began
        (calls at the reply's start, without a marker), whatever the shape says.
    """

    __slots__ = ("_calls_read", "_closers", "_in_list", "_item", "_shape", "_skip",
                 "_skipped", "_unshown")

    def __init__(self, shape: CallObjects, numbering: CallNumbering,
                 closers: tuple[str, ...] = (), *, strict: bool = False) -> None:
        super().__init__(numbering)
        if strict and not shape.strict:
            shape = attrs.evolve(shape, strict=True, require_args=True,
                                 extra_keys=tuple(k for k in shape.extra_keys if k != "id"))
        self._shape = shape
        self._closers = closers
        self._in_list = shape.opened_list
        self._item: CallObjectReader | None = None
        self._skip: JsonValueScanner | None = None
        self._skipped: list[str] = []  # a list item that is not a call, being passed over
        self._calls_read = 0
        self._unshown: list[Event] = []  # skipped items before any call: text if one comes
        if shape.opened_list:
            self._state = _LIST_ITEM_OR_END
        else:
            self._state = _FENCE_OPEN if shape.fence else _BODY

    def plain_delta(self, text: str) -> list[Event] | None:
        """Inside a call object: whatever that object's reader takes whole."""
        if self._state != _IN_OBJECT or self._item is None:
            return None
        return self._item.plain_delta(text)

    def _item_step(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """The step inside a call object (its end: the list's structure reads on)."""
        status, pos = self._feed_item(data, pos, out, eof)
        return (GO, pos) if status == DONE else (status, pos)

    def _skip_step(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """The step over an item that is not a call (its end: the structure reads on)."""
        status, pos = self._skip_item(data, pos, out, eof)
        return (GO, pos) if status == DONE else (status, pos)

    def _structure(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """The step between call objects: blanks, then the next piece of the structure."""
        n = len(data)
        state = self._state
        pos = self._blanks(data, pos)
        if pos >= n:
            if not eof:
                return MORE, n
            if state in (_AFTER_OBJECT, _AFTER_ALL) and self.started:
                return DONE, n  # the reply ended before the section's end: tolerated
            return self.unclosed(n)
        c = data[pos]
        if state == _FENCE_OPEN:
            end = self._past_fence(data, pos, eof)
            if end == -1:
                return MORE, pos
            pos = end
            self._state = _BODY
        elif state == _BODY:
            if c == "[" and self._shape.container != "object":
                self.raw.append(c)
                self._in_list = True
                self._state = _LIST_ITEM_OR_END
                pos += 1
            elif c == "{" and self._shape.container != "list":
                self._begin_item()
            elif c == "<" and not self._shape.strict:
                self._state = _OVER
                return self.fail(pos, "xml_in_tool_call", "tags where JSON calls belong "
                                                          "(another family's markup); "
                                                          "shown as text")
            else:
                return self._refuse(pos, "expected JSON calls after the marker")
        elif state == _LIST_ITEM_OR_END or state == _LIST_ITEM_REQUIRED:
            if c == "{":
                self._begin_item()
            elif c == "]" and state == _LIST_ITEM_OR_END:
                self.raw.append(c)
                self._in_list = False
                self._state = _AFTER_ALL
                pos += 1
            else:
                return self._refuse(pos, "expected a call object in the list")
        elif state == _LIST_AFTER_ITEM:
            if c == ",":
                self.raw.append(c)
                self._state = _LIST_ITEM_REQUIRED
                pos += 1
            elif c == "]":
                if self._unshown and not self._calls_read:  # no item was a call
                    note = self._unshown[-1]
                    assert isinstance(note, DiagnosticEvent)
                    return self._refuse(pos, note.message.split(";")[0])
                self.raw.append(c)
                self._in_list = False
                self._state = _AFTER_ALL
                pos += 1
            else:
                return self._refuse(pos, "expected ',' or ']' in the list of calls")
        elif state == _AFTER_OBJECT and self._shape.container == "any" and (
                c == "{" or c in self._shape.separators):
            if c == "{":
                self._begin_item()
            else:
                self.raw.append(c)
                pos += 1
        else:  # _AFTER_OBJECT or _AFTER_ALL: the closing fence, then the section's end
            if self._fenced:
                if data.startswith(FENCE, pos):
                    self.take(data, pos, pos + len(FENCE))
                    self._fenced = False
                    pos += len(FENCE)
                    return GO, pos
                if not eof and n - pos < len(FENCE) and FENCE.startswith(data[pos:]):
                    return MORE, pos
            self._state = _OVER
            return DONE, pos
        return GO, pos

    def _begin_item(self) -> None:
        assert self._numbering is not None
        self._item = CallObjectReader(self._shape, self._numbering)
        self._state = _IN_OBJECT

    def _feed_item(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        item = self._item
        assert item is not None
        before = item.started
        status, at = item.feed(data, pos, out, eof)
        self.started += item.started - before
        if status == MORE:
            return MORE, at
        if status == FAIL:
            if (not eof and item.complete_but_unclosed and not self._in_list
                    and any(len(data) - at < len(c) and c.startswith(data[at:])
                            for c in self._closers)):
                return MORE, at  # the section's end may be arriving: decide with it
            if self._repairable(item, data, at, eof) and item.force_close(out):
                self.raw = []
                self._state = _LIST_AFTER_ITEM if self._in_list else _AFTER_OBJECT
                return DONE, at
            if self._in_list and (self.started or item.failure != NOT_A_CALL):
                return self._begin_skip(item, data, at, out, eof)
            self.raw.extend(item.raw)
            self._state = _OVER
            if item.failure == NOT_A_CALL and self.started:
                return self.fail(at, "malformed_call", item.message + "; shown as text")
            return self.fail(at, item.failure, item.message)
        self.raw = []
        self._calls_read += 1
        if self._unshown:  # the items before this call that were not calls: text now
            end = max(i for i, e in enumerate(out) if type(e) is ToolCallEndEvent)
            out[end:end] = self._unshown
            self._unshown = []
        self._state = _LIST_AFTER_ITEM if self._in_list else _AFTER_OBJECT
        return DONE, at

    def _begin_skip(self, item: CallObjectReader, data: str, at: int, out: list[Event],
                    eof: bool) -> tuple[int, int]:
        """A list item that is whole JSON but not a call: the list goes on after it.

        The item is followed to its last bracket; where a ``,`` or ``]`` comes next it
        is text with a diagnostic, and the calls after it are still read (one malformed
        call never loses its neighbours). JSON whose brackets do not match fails the
        list, as before.
        """
        text = "".join(item.raw)
        self._skip = JsonValueScanner(keep_text=False)
        self._skipped = [text]
        self._item = None
        self.failure = item.failure
        self.message = item.message.removesuffix(_SHOWN)
        end = self._skip.feed(text)
        if end == INVALID or (end != NEED_MORE and end < len(text)):
            return self._give_up(at)
        self._state = _SKIP_ITEM if end == NEED_MORE else _AFTER_SKIPPED
        return self._skip_item(data, at, out, eof)

    def _skip_item(self, data: str, pos: int, out: list[Event],
                   eof: bool) -> tuple[int, int]:
        n = len(data)
        scanner = self._skip
        assert scanner is not None
        if self._state == _SKIP_ITEM:
            end = scanner.feed(data, pos)
            if end == INVALID:
                self._skipped.append(data[pos:scanner.error_at])
                return self._give_up(scanner.error_at)
            if end == NEED_MORE:
                self._skipped.append(data[pos:])
                return self._give_up(n) if eof else (MORE, n)
            self._skipped.append(data[pos:end])
            pos = end
            self._state = _AFTER_SKIPPED
        k = pos
        while k < n and data[k] in _BLANK_CHARS:
            k += 1
        if k >= n:
            if eof:
                self._skipped.append(data[pos:])
                return self._give_up(n)
            return MORE, pos
        if data[k] not in ",]":
            self._skipped.append(data[pos:k])
            return self._give_up(k)
        raw = "".join(self._skipped)
        shown: list[Event] = [TextEvent(raw), DiagnosticEvent(
            self.failure if self.failure != NOT_A_CALL else "malformed_call",
            (self.message or "not a call") + "; this item of the list is shown as text, the "
            "calls around it are read", raw)]
        self.failure = self.message = ""
        if self._calls_read:
            out.extend(shown)
            self.raw = []
        else:  # a list none of whose items is a call is text as a whole: keep it all
            self._unshown.extend(shown)
            self.raw.extend(self._skipped)
        self._skip, self._skipped = None, []
        self._state = _LIST_AFTER_ITEM
        return DONE, pos

    def _give_up(self, pos: int) -> tuple[int, int]:
        """The item's brackets do not show where it ends: the rest of the list is text."""
        self.raw.extend(self._skipped)
        self._skip, self._skipped = None, []
        self._state = _OVER
        failure = self.failure if self.failure and self.failure != NOT_A_CALL \
            else "malformed_call"
        return self.fail(pos, failure, (self.message or "not a call") + _SHOWN)

    def _repairable(self, item: CallObjectReader, data: str, at: int, eof: bool) -> bool:
        """A call missing only its last ``}``, right before the list's or the section's end
        or the next call object."""
        if not item.complete_but_unclosed:
            return False
        if self._in_list:
            return data.startswith("]", at)
        if self._shape.container == "any" and data.startswith("{", at):
            return True  # the next call object (one per line) shows where this one ended
        return any(data.startswith(c, at) for c in self._closers) or (eof and at >= len(data))

    def _refuse(self, pos: int, message: str) -> tuple[int, int]:
        self._state = _OVER
        code = NOT_A_CALL if self._shape.strict and not self.started else "malformed_call"
        return self.fail(pos, code, message + ("" if code == NOT_A_CALL else "; shown as text"))


CallObjectsReader.STEPS = tuple(
    {_IN_OBJECT: CallObjectsReader._item_step, _SKIP_ITEM: CallObjectsReader._skip_step,
     _AFTER_SKIPPED: CallObjectsReader._skip_step, _OVER: ReaderBase.over}.get(
        state, CallObjectsReader._structure) for state in range(_AFTER_SKIPPED + 1))  # (by state)
