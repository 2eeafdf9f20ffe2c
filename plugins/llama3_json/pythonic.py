"""Reading the pythonic call list Llama 3.2 models write: ``[get_weather(city="Paris")]``.

The Llama 3.2 templates ask for JSON, but the 1B/3B models often answer with a
Python list of calls (the form their built-in tool prompt uses). The reader
follows the list with a cursor that knows Python string quoting and bracket
depth, so it finds the closing ``]`` in one pass; the list is then parsed once
with :func:`ast.parse` and every keyword value read as a literal (JSON's
``true``/``false``/``null`` spellings are accepted too). Positional arguments
cannot be named without guessing and make the call malformed.
"""

from __future__ import annotations

import ast
import io
import json
import keyword
import re
import tokenize
from typing import Any, Final

from toolwire.events import Event, ToolCallDeltaEvent, ToolCallEvent, ToolCallStartEvent
from toolwire.parse.call_sections import DONE, FAIL, MORE, CallNumbering

__all__ = ["PYTHONIC_START", "PythonicListReader", "calls_from_source"]

PYTHONIC_START: Final = re.compile(r"\[\s*[A-Za-z_][A-Za-z0-9_.]*\s*\(")
"""How a pythonic call list begins: ``[`` then a (dotted) name and ``(``."""

_OUTSIDE = re.compile(r"""['"()\[\]{}]""")
_OPEN = {"(": ")", "[": "]", "{": "}"}
_JSON_NAMES: Final = {"true": True, "false": False, "null": None}
_MAX_DEPTH: Final = 200
_MAX_SOURCE: Final = 1_000_000  # ast.parse of untrusted text: bound the work


class _Unreadable(ValueError):
    """The list is Python but not a list of calls with literal keyword arguments."""


_KEYWORD_PREFIX: Final = "__toolwire_kw_"


def _escape_keywords(source: str) -> str:
    """Rename Python keywords used as tool or parameter names (``f(from="x")``).

    Tools and parameters may be named ``from``, ``in``, ``class``...; Python
    cannot parse such a call, so those names get a prefix, removed again by
    :func:`_name`. Only tried when the list does not parse as it is.
    """
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    significant = [t for t in tokens if t.type not in (tokenize.NL, tokenize.NEWLINE,
                                                       tokenize.COMMENT)]
    edits = []
    for i, tok in enumerate(significant):
        if tok.type != tokenize.NAME or not keyword.iskeyword(tok.string) \
                or tok.string in _JSON_NAMES or tok.string in ("True", "False", "None"):
            continue
        after = significant[i + 1].string if i + 1 < len(significant) else ""
        before = significant[i - 1].string if i else ""
        if after in ("=", "(", ".") or before == ".":
            edits.append(starts[tok.start[0] - 1] + tok.start[1])
    for at in reversed(edits):
        source = source[:at] + _KEYWORD_PREFIX + source[at:]
    return source


def _name(text: str) -> str:
    if text.startswith(_KEYWORD_PREFIX) and keyword.iskeyword(text[len(_KEYWORD_PREFIX):]):
        return text[len(_KEYWORD_PREFIX):]
    return text


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                raise _Unreadable("** in a dict")
            name = _literal(key)
            if not isinstance(name, str):
                raise _Unreadable("a dict key that is not a string")
            out[name] = _literal(value)
        return out
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError) as exc:
        raise _Unreadable(str(exc)) from exc


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return _name(node.id)
    if isinstance(node, ast.Attribute):
        return _dotted(node.value) + "." + _name(node.attr)
    raise _Unreadable("a call of something that is not a name")


def _parse(source: str) -> ast.Expression:
    try:
        return ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise _Unreadable(str(exc)) from exc


def calls_from_source(source: str) -> list[tuple[str, dict[str, Any]]]:
    """The calls of a pythonic list ``[f(a=1), g()]``.

    :raises ValueError: the text is not such a list.
    """
    if len(source) > _MAX_SOURCE:
        raise _Unreadable("too long")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError:
        tree = _parse(_escape_keywords(source.strip()))
    except (ValueError, RecursionError, MemoryError) as exc:
        raise _Unreadable(str(exc)) from exc
    if not isinstance(tree.body, ast.List):
        raise _Unreadable("not a list")
    calls = []
    for item in tree.body.elts:
        if not isinstance(item, ast.Call) or item.args:
            raise _Unreadable("not a call with keyword arguments")
        name = _dotted(item.func)
        if name.endswith(".call"):  # Llama's built-in tool syntax: brave_search.call(...)
            name = name[: -len(".call")]
        arguments = {}
        for given in item.keywords:
            if given.arg is None:
                raise _Unreadable("**kwargs")
            arguments[_name(given.arg)] = _literal(given.value)
        calls.append((name, arguments))
    return calls


class PythonicListReader:
    """Reads ``[f(a=1), g(b="x")]`` from its ``[``; emits the calls at the closing ``]``.

    Implements :class:`~toolwire.parse.call_sections.SectionReader`.
    """

    __slots__ = ("_depth", "_escape", "_numbering", "_quote", "failure", "message", "raw",
                 "started")

    def __init__(self, numbering: CallNumbering) -> None:
        self._numbering = numbering
        self._depth: list[str] = []
        self._quote = ""  # the open string's quote ('"', "'", '\"\"\"' or "'''")
        self._escape = False
        self.raw: list[str] = []
        self.failure = ""
        self.message = ""
        self.started = 0

    def feed(self, data: str, pos: int, out: list[Event], eof: bool) -> tuple[int, int]:
        """Consume from ``pos``; return ``(status, pos)``."""
        n = len(data)
        start = pos
        while pos < n:
            if self._escape:
                self._escape = False
                pos += 1
                continue
            if self._quote:
                pos = self._scan_string(data, pos, eof)
                if pos < 0:  # a quote cut short: wait for what follows it
                    self.raw.append(data[start:-pos - 1])
                    return MORE, -pos - 1
                continue
            match = _OUTSIDE.search(data, pos)
            if match is None:
                pos = n
                break
            k = match.start()
            c = data[k]
            pos = k + 1
            if c in "'\"":
                triple = data.startswith(c * 3, k)
                if not triple and not eof and n - k < 3 and (c * 3).startswith(data[k:]):
                    self.raw.append(data[start:k])
                    return MORE, k
                self._quote = c * 3 if triple else c
                pos = k + len(self._quote)
            elif c in _OPEN:
                if len(self._depth) >= _MAX_DEPTH:
                    return self._fail(data, start, k, "nested too deeply")
                self._depth.append(_OPEN[c])
            elif not self._depth or self._depth.pop() != c:
                return self._fail(data, start, k, "unbalanced brackets")
            elif not self._depth:
                self.raw.append(data[start:pos])
                return self._finish(out, pos)
        self.raw.append(data[start:pos])
        if eof:
            self.failure = "unclosed_call"
            self.message = "the reply ended inside a pythonic call list; shown as text"
            return FAIL, n
        return MORE, n

    def _scan_string(self, data: str, pos: int, eof: bool) -> int:
        quote = self._quote
        n = len(data)
        while pos < n:
            k = data.find("\\", pos)
            q = data.find(quote[0], pos)
            if q < 0 and k < 0:
                return n
            if k >= 0 and (q < 0 or k < q):
                if k + 1 >= n:
                    self._escape = True
                    return n
                pos = k + 2
                continue
            if len(quote) == 3:
                if data.startswith(quote, q):
                    self._quote = ""
                    return q + 3
                if not eof and n - q < 3 and quote.startswith(data[q:]):
                    return -q - 1
                pos = q + 1
                continue
            self._quote = ""
            return q + 1
        return n

    def _fail(self, data: str, start: int, at: int, message: str) -> tuple[int, int]:
        self.raw.append(data[start:at])
        self.failure = "malformed_call"
        self.message = f"not a pythonic call list ({message}); shown as text"
        return FAIL, at

    def _finish(self, out: list[Event], pos: int) -> tuple[int, int]:
        source = "".join(self.raw)
        try:
            calls = calls_from_source(source)
        except ValueError as exc:
            self.failure = "malformed_call"
            self.message = f"not a pythonic call list ({exc}); shown as text"
            return FAIL, pos
        for name, arguments in calls:
            index = self._numbering.take()
            self.started += 1
            out.append(ToolCallStartEvent(index=index, name=name))
            out.append(ToolCallDeltaEvent(index, name, json.dumps(arguments, ensure_ascii=False)))
            out.append(ToolCallEvent(name=name, arguments=arguments, index=index))
        self.raw = []
        return DONE, pos
