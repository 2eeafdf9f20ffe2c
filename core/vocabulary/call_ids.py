"""Tool-call ids: the forms the OpenAI API and the chat templates expect.

A model rarely writes a call id; the parser gives each call one, in the form
the family's template wants back in the history (OpenAI's ``call_...`` by
default, nine characters for Mistral).
"""

from __future__ import annotations

import secrets
import string

__all__ = ["default_call_id", "nine_char_call_id"]


def default_call_id(index: int) -> str:
    """A fresh OpenAI-style call id (``call_`` and 24 random characters)."""
    return "call_" + secrets.token_hex(12)


_ALNUM = string.ascii_letters + string.digits


def nine_char_call_id(index: int) -> str:
    """A 9-character alphanumeric id, as Mistral templates demand."""
    return "".join(secrets.choice(_ALNUM) for _ in range(9))
