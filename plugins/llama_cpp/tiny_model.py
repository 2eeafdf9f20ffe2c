"""A tiny, real llama.cpp model for tests and demos, and grammars that force its output.

:func:`write_tiny_gguf` (:mod:`toolwire.testing.tiny_gguf`, re-exported here)
writes a complete GGUF model of the ``llama`` architecture with random weights.
Its output is noise, so tests and ``toolwire demo`` steer it with
:func:`grammar_for`, a GBNF grammar that allows exactly one string; once that
string is complete llama.cpp's grammar sampler allows only end-of-generation
tokens, so the model ends its turn by itself, as a real model does.

The vocabulary and the options are documented there.
"""

from __future__ import annotations

from toolwire.testing.tiny_gguf import (
    CHATML_TEMPLATE,
    CONTROL_TOKENS,
    TAG_TOKENS,
    TINY_BACKEND_OPTIONS,
    write_tiny_gguf,
)

__all__ = [
    "CHATML_TEMPLATE",
    "CONTROL_TOKENS",
    "TAG_TOKENS",
    "TINY_BACKEND_OPTIONS",
    "grammar_for",
    "grammar_literal",
    "write_tiny_gguf",
]


def grammar_literal(text: str) -> str:
    """``text`` as a GBNF string literal (quoted, with escapes).

    Quotes, backslashes and control characters are escaped; other characters,
    non-ASCII included, are written as they are (GBNF source is UTF-8).
    """
    out = ['"']
    for char in text:
        code = ord(char)
        if char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02X}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def grammar_for(text: str) -> str:
    """A GBNF grammar whose only sentence is ``text``.

    llama.cpp samples only tokens that keep the output a prefix of ``text``;
    when it is complete only end-of-generation tokens remain, so the model ends
    its turn. An empty ``text`` allows only ending at once.
    """
    if not text:
        return 'root ::= ""\n'
    return f"root ::= {grammar_literal(text)}\n"
