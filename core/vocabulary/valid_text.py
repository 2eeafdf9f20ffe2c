"""Text from outside made valid: no lone surrogate ever goes further than where it came in.

A Python string can hold code points no encoding can write: the surrogates
``U+D800`` to ``U+DFFF`` on their own. They come in from outside by several
roads: a file name that is not UTF-8 (``os.listdir`` gives ``'caf\\udce9.txt'``
for a Latin-1 ``café.txt``), a JSON text's ``"\\ud800"`` escape (an MCP server's
result, a resume file, a model's arguments), a Jinja string literal in a chat
template, a terminal under the C locale. Whatever then encodes the string (a
save file, the model worker's pipe, a tokenizer, an HTTP body) fails, and fails
again on every later turn, since the conversation keeps the string.

So the records every part speaks make their text valid as they are made
(:class:`~toolwire.vocabulary.history.Message`, ``ToolCall``, a tool's schema, a
call's result, a rendered prompt): :func:`valid_text` joins a surrogate pair
into the character it stands for (a JSON text may escape one character as two)
and writes every other surrogate as ``U+FFFD``, as ``read_file`` does with bytes
that are not UTF-8. A string that is valid already (nearly every one) is
returned as it is, after one check in C.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from .string_map import map_strings

__all__ = ["REPLACEMENT", "valid_json_value", "valid_text"]

REPLACEMENT: Final = "\ufffd"
"""What a lone surrogate becomes."""

_SURROGATES: Final = re.compile("[\ud800-\udfff]+")
_PAIR: Final = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def _is_valid(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _replace(match: re.Match[str]) -> str:
    run = match.group()
    joined = _PAIR.sub(lambda pair: pair.group().encode("utf-16", "surrogatepass")
                       .decode("utf-16"), run)
    return "".join(REPLACEMENT if "\ud800" <= c <= "\udfff" else c for c in joined)


def valid_text(text: str) -> str:
    """``text`` with surrogate pairs joined and every lone surrogate as ``U+FFFD``
    (anything that is not a string is returned as it is)."""
    if not isinstance(text, str) or _is_valid(text):
        return text
    return _SURROGATES.sub(_replace, text)


def valid_json_value(value: Any) -> Any:
    """``value`` (JSON-shaped: dicts, lists, strings...) with every string and key made
    valid by :func:`valid_text`; the same object when nothing needed it (the usual
    case, found by one look at each container). Walks without recursion, so any
    nesting is fine (a container that holds itself is left as it is: no JSON value
    does)."""
    if isinstance(value, str):
        return valid_text(value)
    if not isinstance(value, Mapping | list | tuple) or _all_valid(value):
        return value
    try:
        return map_strings(value, valid_text)
    except ValueError:
        return value


_SCALARS: Final = frozenset({int, float, bool, type(None)})


def _all_valid(value: Any) -> bool:
    """Whether every string and key in ``value`` is valid (each container looked at once;
    JSON's own types by their type, before the slower abstract checks)."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str:
            if not _is_valid(item):
                return False
            continue
        if kind in _SCALARS or id(item) in seen:
            continue
        if kind is dict or (kind is not list and kind is not tuple
                            and isinstance(item, Mapping)):
            seen.add(id(item))
            for key, inner in item.items():
                if type(key) is str and not _is_valid(key):
                    return False
                stack.append(inner)
        elif kind is list or kind is tuple or isinstance(item, list | tuple):
            seen.add(id(item))
            stack.extend(item)
        elif isinstance(item, str) and not _is_valid(item):
            return False
    return True
