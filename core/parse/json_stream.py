"""Finding where a JSON value ends while its text is still arriving.

A streaming parser of a JSON tool-call format must know, delta by delta,
whether the arguments are complete, without parsing the partial value again on
every delta (which makes a long reply quadratic). :class:`JsonValueScanner`
keeps the little state that decides it: whether the cursor is inside a string
or right after a backslash, and the stack of open ``{`` and ``[``. Each delta is
scanned once, from where the previous one stopped, with ``re`` searches that
jump to the next character that matters (a quote, a backslash, a bracket);
the finished text is decoded by ``json.loads`` once, at the end.

The scanner checks structure only: brackets must match and, outside strings,
only the characters JSON allows there may appear. That is enough to notice at
once when the text stops being JSON (the ``<`` of a closing tag after a value
that lacks its last brace), which lets a parser react at the right place
instead of swallowing the rest of the reply. Everything else (``tru``, a
missing comma) is left to the final ``json.loads``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["INVALID", "NEED_MORE", "JsonValueScanner", "decode_json"]

NEED_MORE: Final = -1
"""``feed`` consumed all the text given and the value has not ended yet."""

INVALID: Final = -2
"""``feed`` met a character that cannot continue the value (see ``error_at``)."""

# Outside strings: the next character that is not plain (blanks, separators,
# digits, letters of literals, number signs); those are what the scanner acts on.
_NEXT_SIGNIFICANT = re.compile(r"[^\s,:0-9A-Za-z.+\-]")
_STRING_SPECIAL = re.compile(r'["\\]')
_SCALAR_CHARS = re.compile(r"[0-9A-Za-z.+\-]*")
_SCALAR_FIRST: Final = frozenset("-0123456789tfnNI")
_BLANKS: Final = frozenset(" \t\r\n")
_CLOSERS: Final = {"{": "}", "[": "]"}

# modes
_START, _CONTAINER, _STRING, _ESCAPE, _SCALAR, _DONE, _FAILED = range(7)


def decode_json(text: str) -> tuple[bool, Any]:
    """Decode a complete JSON text once: ``(True, value)`` or ``(False, None)``.

    Control characters inside strings are accepted (models write raw newlines
    in string values); a too deep or too large value is a failure, never an
    exception.
    """
    try:
        return True, json.loads(text, strict=False)
    except (ValueError, RecursionError, MemoryError):
        return False, None


class JsonValueScanner:
    """Tracks one JSON value across deltas and says where it ends.

    Feed it text from the first character of the value (leading blanks are
    skipped); ``feed`` returns the index just past the value's last character,
    :data:`NEED_MORE`, or :data:`INVALID`. A bare number or literal at the top
    level ends at the first character that cannot belong to it, or at
    :meth:`finish` (the end of the reply).

    :param max_depth: more nested ``{``/``[`` than this makes the value invalid
        (``json.loads`` would overflow the stack long before memory runs out).
    :param keep_text: keep the value's text, for :attr:`text` and :meth:`decode`;
        a caller that records the text itself passes ``False``.
    """

    __slots__ = ("_mode", "_parts", "_stack", "error_at", "keep_text", "max_depth")

    def __init__(self, *, max_depth: int = 512, keep_text: bool = True) -> None:
        self._mode = _START
        self._stack: list[str] = []
        self._parts: list[str] = []
        self.max_depth = max_depth
        self.keep_text = keep_text
        self.error_at = -1

    # -- state -----------------------------------------------------------------

    @property
    def done(self) -> bool:
        """The value has ended."""
        return self._mode == _DONE

    @property
    def started(self) -> bool:
        """The first character of the value has been seen."""
        return self._mode != _START

    @property
    def failed(self) -> bool:
        """The text stopped being a JSON value."""
        return self._mode == _FAILED

    @property
    def in_string(self) -> bool:
        """The cursor is inside a string (so an unclosed value cannot be repaired)."""
        return self._mode in (_STRING, _ESCAPE)

    @property
    def in_plain_string(self) -> bool:
        """Inside a string, not after a backslash: text without ``"`` or ``\\`` stays inside."""
        return self._mode == _STRING

    @property
    def depth(self) -> int:
        """How many ``{``/``[`` are open."""
        return len(self._stack)

    @property
    def text(self) -> str:
        """The value's text consumed so far (with ``keep_text``)."""
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def closers(self) -> str:
        """The brackets that would close every open container, innermost first."""
        return "".join(_CLOSERS[c] for c in reversed(self._stack))

    def decode(self) -> tuple[bool, Any]:
        """``json.loads`` the kept text once (see :func:`decode_json`)."""
        return decode_json(self.text)

    # -- scanning --------------------------------------------------------------

    def feed(self, data: str, pos: int = 0) -> int:
        """Scan ``data[pos:]``; return the end of the value, NEED_MORE or INVALID."""
        if self._mode == _START:
            n = len(data)
            while pos < n and data[pos] in _BLANKS:
                pos += 1
        start = pos
        end = self._scan(data, pos)
        if self.keep_text:
            stop = len(data) if end == NEED_MORE else self.error_at if end == INVALID else end
            if stop > start:
                self._parts.append(data[start:stop])
        return end

    def finish(self) -> bool:
        """The text ended: whether the value is complete (a top-level scalar ends here)."""
        if self._mode == _SCALAR:
            self._mode = _DONE
        return self._mode == _DONE

    def _fail(self, at: int) -> int:
        self._mode = _FAILED
        self.error_at = at
        return INVALID

    def _scan(self, data: str, pos: int) -> int:
        mode = self._mode
        if mode == _DONE:
            return pos
        if mode == _FAILED:
            return INVALID
        n = len(data)
        stack = self._stack
        while pos < n:
            if mode == _STRING:
                match = _STRING_SPECIAL.search(data, pos)
                if match is None:
                    break
                k = match.start()
                if data[k] == "\\":
                    if k + 1 >= n:
                        mode = _ESCAPE
                        break
                    pos = k + 2
                    continue
                pos = k + 1
                if not stack:
                    self._mode = _DONE
                    return pos
                mode = _CONTAINER
            elif mode == _CONTAINER:
                match = _NEXT_SIGNIFICANT.search(data, pos)
                if match is None:
                    break
                k = match.start()
                c = data[k]
                pos = k + 1
                if c == '"':
                    mode = _STRING
                elif c == "{" or c == "[":
                    if len(stack) >= self.max_depth:
                        return self._fail(k)
                    stack.append(c)
                elif c == "}" or c == "]":
                    if _CLOSERS[stack[-1]] != c:
                        return self._fail(k)
                    stack.pop()
                    if not stack:
                        self._mode = _DONE
                        return pos
                else:
                    return self._fail(k)
            elif mode == _ESCAPE:
                pos += 1
                mode = _STRING
            elif mode == _SCALAR:
                match = _SCALAR_CHARS.match(data, pos)
                end = match.end() if match else pos
                if end >= n:
                    break
                self._mode = _DONE
                return end
            else:  # _START: the caller skipped blanks, so this is the first character
                c = data[pos]
                if c == "{" or c == "[":
                    stack.append(c)
                    mode = _CONTAINER
                    pos += 1
                elif c == '"':
                    mode = _STRING
                    pos += 1
                elif c in _SCALAR_FIRST:
                    mode = _SCALAR
                else:
                    return self._fail(pos)
        self._mode = mode
        return NEED_MORE
