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

from typing import Any, Final

from toolwire.plugin_api import ObjectLiteral, read_object_literal

__all__ = ["QUOTE", "SYNTAX", "read_gemma_object"]

QUOTE: Final = '<|"|>'

SYNTAX: Final = ObjectLiteral(quote=QUOTE, escapes=False)
"""The notation as the core's object-literal reader reads it (derived records share it)."""


def read_gemma_object(text: str) -> dict[str, Any] | None:
    """Decode a complete ``{key:value,...}`` body (``None`` when it is not one)."""
    return read_object_literal(SYNTAX, text)
