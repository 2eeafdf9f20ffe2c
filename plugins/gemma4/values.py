"""Gemma 4's object syntax for call arguments.

The template writes arguments as ``{key:value,...}`` with unquoted, sorted keys;
strings sit between ``<|"|>`` tokens, booleans are ``true``/``false``, ``None``
prints as ``None`` and numbers as Python prints them; lists are ``[...]``::

    {city:<|"|>Paris<|"|>,days:3,opts:{a:[1,None,true]}}

That is an :class:`~toolwire.plugin_api.ObjectLiteral` notation (:data:`SYNTAX`): the
engine's own object-literal reader reads a call body in one pass, streaming top-level
string values as argument deltas, and :func:`read_gemma_object` decodes a complete body.
"""

from __future__ import annotations

import warnings
from typing import Any, Final

from toolwire.plugin_api import CallContext, LiteralObjectReader, ObjectLiteral, read_object_literal

__all__ = ["QUOTE", "SYNTAX", "read_gemma_object"]

QUOTE: Final = '<|"|>'

SYNTAX: Final = ObjectLiteral(quote=QUOTE, escapes=False)
"""The notation as the core's object-literal reader reads it (derived records share it)."""


def read_gemma_object(text: str) -> dict[str, Any] | None:
    """Decode a complete ``{key:value,...}`` body (``None`` when it is not one)."""
    return read_object_literal(SYNTAX, text)


class _GemmaArgsReader(LiteralObjectReader):
    """The engine's object-literal reader for Gemma's notation (the deprecated name)."""

    __slots__ = ()

    def __init__(self, call: CallContext) -> None:
        super().__init__(SYNTAX, call)


def __getattr__(name: str) -> Any:
    if name == "GemmaArgsReader":
        warnings.warn("toolwire.plugins.gemma4.GemmaArgsReader is deprecated: GEMMA4_FORMAT "
                      "reads its arguments with GrammarArguments(reader=SYNTAX), the engine's "
                      "own object-literal reader", DeprecationWarning, stacklevel=2)
        return _GemmaArgsReader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
