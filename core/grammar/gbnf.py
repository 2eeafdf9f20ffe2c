"""Writing GBNF, the grammar language llama.cpp constrains sampling with.

:class:`RuleSet` collects named rules (a rule with the same body as an earlier
one is that rule, so shared pieces are written once) and prints the grammar.
:func:`literal` and :func:`char_class` spell text and character sets in GBNF's
escapes. Expressions are plain strings in GBNF syntax; rule names are made of
letters, digits and ``-``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["RuleSet", "alternatives", "char_class", "literal", "optional", "sequence"]

_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9-]+")
_CLASS_SPECIAL = {"\\": "\\\\", "]": "\\]", "[": "\\[", "-": "\\-", "^": "\\^",
                  "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(char: str, special: dict[str, str]) -> str:
    code = ord(char)
    if char in special:
        return special[char]
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02X}"
    return char


_LITERAL_SPECIAL = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def literal(text: str) -> str:
    """``text`` as a GBNF string literal; the empty text is ``""`` (matches nothing)."""
    return '"' + "".join(_escape_char(c, _LITERAL_SPECIAL) for c in text) + '"'


def char_class(chars: Iterable[str], *, negate: bool = False, ranges: str = "") -> str:
    """A character class of ``chars`` (each escaped), with raw GBNF ``ranges`` appended.

    ``char_class('<"', negate=True, ranges="\\\\x00-\\\\x1F")`` is ``[^<"\\x00-\\x1F]``.
    """
    body = "".join(_escape_char(c, _CLASS_SPECIAL) for c in sorted(set(chars)))
    return "[" + ("^" if negate else "") + body + ranges + "]"


def sequence(*parts: str) -> str:
    """Parts one after the other (empty parts left out; ``""`` when none remain)."""
    kept = [p for p in parts if p and p != '""']
    if not kept:
        return '""'
    return " ".join(kept)


def alternatives(*parts: str) -> str:
    """One of ``parts``, parenthesised (duplicates dropped, order kept)."""
    kept = list(dict.fromkeys(p for p in parts if p))
    if len(kept) == 1:
        return kept[0]
    return "(" + " | ".join(kept) + ")"


def optional(part: str) -> str:
    """``part`` or nothing."""
    if not part or part == '""':
        return ""
    return f"({part})?"


class RuleSet:
    """The rules of one grammar, in the order they were added, ``root`` first.

    A rule is added under a hint (made safe and unique); adding a body already
    present returns the earlier rule's name, so shared pieces are written once.
    :meth:`reserve` names a rule before its body is known (for recursion).
    """

    def __init__(self) -> None:
        self._bodies: dict[str, str] = {}
        self._by_body: dict[str, str] = {}
        self._taken: set[str] = {"root"}
        self.memo: dict[tuple[object, ...], str] = {}
        """Expressions writers already made, by what they were made from."""

    def _fresh(self, hint: str) -> str:
        base = _NAME_UNSAFE.sub("-", hint).strip("-").lower() or "r"
        name = base
        n = 1
        while name in self._taken:
            n += 1
            name = f"{base}-{n}"
        self._taken.add(name)
        return name

    def add(self, hint: str, body: str) -> str:
        """The name of a rule with ``body`` (a new one named after ``hint``, or the old one)."""
        found = self._by_body.get(body)
        if found is not None:
            return found
        name = self._fresh(hint)
        self._bodies[name] = body
        self._by_body[body] = name
        return name

    def reserve(self, hint: str) -> str:
        """A fresh rule name whose body :meth:`define` gives later."""
        return self._fresh(hint)

    def define(self, name: str, body: str) -> None:
        """Give a reserved rule its body."""
        self._bodies[name] = body
        self._by_body.setdefault(body, name)

    def render(self, root: str) -> str:
        """The grammar text: ``root ::= ...`` then every rule."""
        lines = [f"root ::= {root}"]
        lines += [f"{name} ::= {body}" for name, body in self._bodies.items()]
        return "\n".join(lines) + "\n"
