"""A call's arguments as OpenAI JSON-text fragments, written while the model writes them.

An OpenAI stream sends a tool call's ``function.arguments`` as pieces of one JSON
text that the client concatenates. toolwire's parsers report arguments in two
ways (see :class:`~toolwire.events.ToolCallDeltaEvent`): as the raw JSON the
model writes (``parameter`` is ``None``: JSON families), or as the text of one
string parameter at a time (tagged families; other parameters are known only
when the call is complete). :class:`ArgumentsWriter` turns either into fragments
of one canonical JSON text, the form ``json.dumps`` writes (``", "`` and
``": "``, characters unescaped), and completes it from the call's final, typed
arguments:

* **raw JSON** is rewritten token by token into the canonical form (whitespace
  dropped, numbers and escapes normalised, strings streamed character by
  character); the keys keep the model's order, so the text is exactly
  ``json.dumps(arguments)``;
* **tagged string parameters** open their key and stream their value as it
  comes; the parameters that did not stream follow when the call is complete, in
  the call's order. The text is ``json.dumps`` of the arguments with the
  streamed parameters first.

The text is a function of the parser's events only, so it is the same however
the model's output was cut, and the non-streaming response (built with the same
writer) carries the same text. A fragment is sent only once nothing can change
it: a comma waits for the next key, a number for the character after it.

If the final arguments ever disagree with what was already sent (a parameter
written twice, a parser that retypes a value), the text cannot be taken back:
the writer closes what was sent and appends the final value of every key that
differs, so the text still reads (``json.loads``: the last duplicate key wins)
as the final arguments. A key that was sent but is not in the final arguments
would stay; no built-in family does that.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from .sse import json_text

__all__ = ["ArgumentsWriter", "CanonicalJsonStream", "close_json_prefix"]

_SCALAR_CHARS: Final = frozenset("-+.0123456789eEtruefalsn")
_SIMPLE_ESCAPES: Final = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n",
                          "r": "\r", "t": "\t"}
_HEX: Final = frozenset("0123456789abcdefABCDEF")


def _escaped(text: str) -> str:
    """``text`` as the inside of a canonical JSON string."""
    return json_text(text)[1:-1]


class CanonicalJsonStream:
    """Rewrites one JSON object's text, fed in pieces, into its canonical form.

    :meth:`feed` returns the canonical text of what is certain so far. Input
    after the object closes is ignored; input that is not JSON stops the
    rewriting (:attr:`broken`), keeping what was written.
    """

    def __init__(self) -> None:
        self._stack: list[str] = []
        self._started = False
        self.done = False
        self.broken = False
        self._in_string = False
        self._escape: str | None = None
        self._high_surrogate: int | None = None
        self._scalar: list[str] = []
        self._comma = False

    def feed(self, text: str) -> str:
        """Take more raw JSON text; return the canonical text it adds."""
        out: list[str] = []
        run: list[str] = []  # plain string characters, escaped together
        for char in text:
            if self.done or self.broken:
                break
            if self._in_string:
                if self._escape is None and char not in ('"', "\\") and char >= " ":
                    if self._high_surrogate is not None:
                        self._flush_surrogate(out, run)
                    run.append(char)
                    continue
                if run:
                    out.append(_escaped("".join(run)))
                    run.clear()
                self._string_char(char, out)
                continue
            if self._scalar:
                if char in _SCALAR_CHARS:
                    self._scalar.append(char)
                    continue
                self._end_scalar(out)
                if self.broken:
                    break
            self._structure_char(char, out)
        if run:
            out.append(_escaped("".join(run)))
        return "".join(out)

    def _flush_surrogate(self, out: list[str], run: list[str]) -> None:
        if run:
            out.append(_escaped("".join(run)))
            run.clear()
        assert self._high_surrogate is not None
        out.append(_escaped(chr(self._high_surrogate)))
        self._high_surrogate = None

    def _string_char(self, char: str, out: list[str]) -> None:
        if self._escape is None:
            if char == "\\":
                self._escape = ""
            elif char == '"':
                if self._high_surrogate is not None:
                    self._flush_surrogate(out, [])
                self._in_string = False
                out.append('"')
            else:  # a raw control character: not JSON
                self.broken = True
            return
        self._escape += char
        if self._escape[0] in _SIMPLE_ESCAPES:
            decoded = _SIMPLE_ESCAPES[self._escape[0]]
            self._escape = None
            if self._high_surrogate is not None:
                self._flush_surrogate(out, [])
            out.append(_escaped(decoded))
            return
        if self._escape[0] != "u" or not all(c in _HEX for c in self._escape[1:]):
            self.broken = True
            return
        if len(self._escape) < 5:
            return
        code = int(self._escape[1:], 16)
        self._escape = None
        if 0xD800 <= code < 0xDC00:
            if self._high_surrogate is not None:
                self._flush_surrogate(out, [])
            self._high_surrogate = code
        elif 0xDC00 <= code < 0xE000 and self._high_surrogate is not None:
            pair = 0x10000 + ((self._high_surrogate - 0xD800) << 10) + (code - 0xDC00)
            self._high_surrogate = None
            out.append(_escaped(chr(pair)))
        else:
            if self._high_surrogate is not None:
                self._flush_surrogate(out, [])
            out.append(_escaped(chr(code)))

    def _end_scalar(self, out: list[str]) -> None:
        token = "".join(self._scalar)
        self._scalar.clear()
        try:
            value = json.loads(token)
        except ValueError:
            self.broken = True
            return
        if isinstance(value, float) and value in (float("inf"), float("-inf")):
            self.broken = True  # not representable as JSON again
            return
        self._value_start(out)
        out.append(json_text(value))

    def _value_start(self, out: list[str]) -> None:
        if self._comma:
            out.append(", ")
            self._comma = False

    def _structure_char(self, char: str, out: list[str]) -> None:
        if char in " \t\r\n":
            return
        if not self._started:
            if char != "{":
                self.broken = True
                return
            self._started = True
        if char in "{[":
            self._value_start(out)
            self._stack.append(char)
            out.append(char)
        elif char in "}]":
            if not self._stack or "{[".index(self._stack[-1]) != "}]".index(char) \
                    or self._comma:
                self.broken = True
                return
            self._stack.pop()
            out.append(char)
            self.done = not self._stack
        elif char == ",":
            if self._comma or not self._stack:
                self.broken = True
                return
            self._comma = True
        elif char == ":":
            out.append(": ")
        elif char == '"':
            self._value_start(out)
            self._in_string = True
            out.append('"')
        elif char in _SCALAR_CHARS:
            self._scalar.append(char)
        else:
            self.broken = True


def close_json_prefix(prefix: str) -> tuple[str, bool]:
    """What completes a canonical JSON object prefix, short of the outer ``}``.

    ``prefix`` is text this module wrote: it starts with ``{`` and never ends
    with a comma. Open strings are closed, keys without values get ``null``,
    nested containers are closed.

    :returns: the closing text, and whether the outer object is still empty.
    """
    # each level: its bracket and what comes next: "key", "colon", "value", "more"
    stack: list[list[str]] = []
    in_string = escape = False
    for char in prefix:
        if in_string:
            if escape:
                escape = False
            elif char == "\\":
                escape = True
            elif char == '"':
                in_string = False
                _after_value_or_key(stack)
            continue
        if char in "{[":
            if stack:
                _after_value_or_key(stack, opening=True)
            stack.append([char, "key" if char == "{" else "value"])
        elif char in "}]":
            stack.pop()
            if stack:
                stack[-1][1] = "more"
        elif char == ":":
            stack[-1][1] = "value"
        elif char == ",":
            stack[-1][1] = "key" if stack[-1][0] == "{" else "value"
        elif char == '"':
            in_string = True
        elif char not in " ":
            # a scalar's characters: the value is complete once written
            if stack[-1][1] == "value":
                stack[-1][1] = "more"
    closing: list[str] = []
    if in_string:
        closing.append('"')
        _after_value_or_key(stack)
    empty = len(stack) == 1 and stack[0][1] == "key" and prefix.rstrip() == "{"
    for depth in range(len(stack) - 1, -1, -1):
        bracket, state = stack[depth]
        if state == "colon":
            closing.append(": null")
        elif state == "value" and bracket == "{":
            closing.append("null")
        if depth:
            closing.append("}" if bracket == "{" else "]")
    return "".join(closing), empty


def _after_value_or_key(stack: list[list[str]], opening: bool = False) -> None:
    level = stack[-1]
    if level[0] == "{" and level[1] == "key":
        level[1] = "colon"
    elif level[1] == "value" or opening:
        level[1] = "more"


class ArgumentsWriter:
    """One call's ``function.arguments`` text, written in fragments as the call streams.

    Feed it the call's ``tool_call_delta`` pieces with :meth:`feed` (each returns
    the fragment to send now, possibly empty), then the final arguments with
    :meth:`finish` (returns the last fragment). :attr:`text` is everything sent.
    """

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._json: CanonicalJsonStream | None = None
        self._params: dict[str, list[str]] = {}
        self._current: str | None = None
        self._mode = ""  # "", "json", "params", or "held" (stop streaming; finish completes)
        self.finished = False

    @property
    def text(self) -> str:
        """The arguments text sent so far."""
        return "".join(self._parts)

    def _emit(self, fragment: str) -> str:
        if fragment:
            self._parts.append(fragment)
        return fragment

    def feed(self, text: str, parameter: str | None) -> str:
        """Take a delta's text (``parameter`` as in the event); return the fragment to send."""
        if self.finished or self._mode == "held" or not text:
            return ""
        mode = "json" if parameter is None else "params"
        if self._mode and self._mode != mode:
            self._mode = "held"
            return ""
        self._mode = mode
        if parameter is None:
            stream = self._json = self._json or CanonicalJsonStream()
            return self._emit(stream.feed(text))
        fragment = ""
        if parameter != self._current:
            if parameter in self._params:  # written twice: let finish settle it
                self._mode = "held"
                return ""
            fragment = ('", ' if self._current is not None else "{") + json_text(parameter) \
                + ': "'
            self._current = parameter
            self._params[parameter] = []
        self._params[parameter].append(text)
        return self._emit(fragment + _escaped(text))

    def finish(self, arguments: Mapping[str, Any]) -> str:
        """Complete the text with the call's final arguments; return the last fragment."""
        if self.finished:
            return ""
        self.finished = True
        sent = self.text
        if not sent:
            return self._emit(json_text(dict(arguments)))
        if self._mode == "params" and all(
                isinstance(arguments.get(name), str) and arguments[name] == "".join(parts)
                for name, parts in self._params.items()):
            rest = "".join(f", {json_text(key)}: {json_text(value)}"
                           for key, value in arguments.items() if key not in self._params)
            return self._emit('"' + rest + "}")
        if self._mode == "json":
            complete = json_text(dict(arguments))
            if complete.startswith(sent):
                return self._emit(complete[len(sent):])
        return self._emit(self._corrected(sent, arguments))

    def close_unfinished(self) -> str:
        """Close the text of a call the model never completed, so it is valid JSON."""
        if self.finished or not self.text:
            return ""
        self.finished = True
        closing, _ = close_json_prefix(self.text)
        return self._emit(closing + "}")

    @staticmethod
    def _corrected(sent: str, arguments: Mapping[str, Any]) -> str:
        closing, empty = close_json_prefix(sent)
        try:
            read: Any = json.loads(sent + closing + "}")
        except ValueError:
            read = {}
        fixes = [f"{json_text(key)}: {json_text(value)}" for key, value in arguments.items()
                 if key not in read or json_text(read[key]) != json_text(value)]
        joined = ", ".join(fixes)
        return closing + ("" if empty or not joined else ", ") + joined + "}"
