"""Untrusted text made safe to print on a terminal.

A terminal obeys the control characters in what it prints: ``ESC`` opens
sequences that set the window title, write the clipboard (OSC 52), make links
whose target differs from their text (OSC 8), move the cursor and repaint lines
(CSI), and ``CR`` or backspace can hide what came before. Model text, reasoning,
tool arguments, tool results and what MCP servers say are written by someone
else, so the command line prints them through :func:`terminal_safe`: every C0
control but newline and tab, ``DEL``, the C1 controls (``U+0080``-``U+009F``; a
terminal may read ``U+009B`` as CSI), the bidirectional overrides and isolates
(which can show text in another order than it is read) and lone surrogates
(which cannot be encoded at all) are shown as escapes (``\\x1b``, ``\\u202e``)
instead of being sent. :func:`json_safe` does the same for a JSON line whose
strings keep other characters as they are (``ensure_ascii=False``): those
characters become JSON's own ``\\uXXXX`` escapes, so the data read back is the
same.
"""

from __future__ import annotations

import re

__all__ = ["json_safe", "terminal_safe"]

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """``text`` with every character a terminal would act on shown as an escape."""
    return _UNSAFE.sub(_escape, text)


def json_safe(line: str) -> str:
    """A JSON text (``ensure_ascii=False``) with the characters :func:`terminal_safe`
    escapes written as JSON ``\\uXXXX`` escapes (JSON escapes the C0 controls itself)."""
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", line)
