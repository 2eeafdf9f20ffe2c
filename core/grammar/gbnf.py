"""Writing GBNF, the grammar language llama.cpp constrains sampling with.

:class:`RuleSet` collects named rules (a rule with the same body as an earlier
one is that rule, so shared pieces are written once) and prints the grammar.
:func:`literal` and :func:`char_class` spell text and character sets in GBNF's
escapes. Expressions are plain strings in GBNF syntax; rule names are made of
letters, digits and ``-``.

:func:`repetition` writes every bounded or unbounded repetition, in the one form
llama.cpp accepts whatever the bounds (see :data:`MAX_REPEAT`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from ..limits import SchemaLimits

__all__ = ["MAX_REPEAT", "RuleSet", "alternatives", "char_class", "is_symbol", "literal",
           "optional", "repetition", "sequence"]

MAX_REPEAT: Final = SchemaLimits().grammar_repeat
"""The largest count a repetition is written with. llama.cpp's grammar parser
(``src/llama-grammar.cpp``) expands ``S{m,n}`` into copies of ``S`` and ``n - m``
rules of its own, and refuses the grammar (``MAX_REPETITION_THRESHOLD``, 2,000)
when a count is over 2,000 (``{2001}``), or when the count (the upper one, else the
lower one, ``*`` and ``?`` counting 1) times the rules the repeated part makes is
2,000 or more; an upper count over 2,000 it reads as no upper bound. So each
repetition here repeats one symbol (a rule name, a literal or a character class:
it makes one rule) and is a rule of its own (so the rules its expansion makes
are never counted in an enclosing group's), with counts of at most this: a
larger lower bound is written as this one, a larger upper bound as none. The
grammar then admits a little more than the schema, and dispatch validates."""

_SYMBOL = re.compile(r'[a-zA-Z0-9-]+|"(?:[^"\\]|\\.)*"|\[\^?(?:[^\]\\]|\\.)*\]|\.')

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


def is_symbol(expression: str) -> bool:
    """Whether ``expression`` is one symbol: a rule name, a literal, a character class."""
    return _SYMBOL.fullmatch(expression) is not None


def repetition(rules: RuleSet, part: str, low: int, high: int | None, *,
               hint: str = "repeat") -> str:
    """``part`` repeated ``low`` to ``high`` times (``None``: no upper bound), as a rule
    llama.cpp accepts (see :data:`MAX_REPEAT`: a bound past it is relaxed); ``""``
    when at most zero times."""
    if high is not None and high < low:
        high = low
    if high == 0:
        return ""
    if low == 0 and high is None and is_symbol(part):
        # one rule, whatever encloses it (and the grammar of an unbounded value as it was)
        return f"{part}*" if part[0] in "[\"" else f"({part})*"
    if not is_symbol(part):
        part = rules.add(f"{hint}-item", part)
    low = min(low, MAX_REPEAT)
    if high is not None and high > MAX_REPEAT:
        high = None
    if high is None:
        body = f"{part}*" if low == 0 else f"{part}+" if low == 1 else f"{part}{{{low},}}"
    elif low == high:
        body = part if low == 1 else f"{part}{{{low}}}"
    else:
        body = f"{part}?" if (low, high) == (0, 1) else f"{part}{{{low},{high}}}"
    return rules.add(hint, body)


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
