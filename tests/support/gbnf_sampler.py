"""Random sentences of a GBNF grammar, in Python, to test grammars without a model.

Reads the GBNF subset :mod:`toolwire.grammar` writes (literals, character
classes with ranges and negation, rule references, groups, alternatives,
``?``/``*``/``+``/``{m,n}``) and draws sentences from it: each choice at random,
repetitions mostly short, and, once a derivation runs deep, the choices that
end soonest. Characters of a negated class come from a pool that holds every
character the family's markup uses, so values brush against the markup.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["GbnfSampler"]

_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "]": "]", "[": "[",
            "-": "-", "^": "^", "/": "/"}
_POOL = ("abcXYZ019 _-.,:;!?'\"\\/<>=[]{}()|@#&*+\n\t\r" + "é中🙂｜▁"
         + "\x01\x1f\x7f")


class GbnfSampler:
    """Parses a grammar once; :meth:`sentence` draws one.

    :param text: the grammar.
    :param extra_chars: more characters negated classes may produce (the markup's).
    """

    def __init__(self, text: str, extra_chars: str = "") -> None:
        self.rules: dict[str, Any] = {}
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, body = line.partition(" ::= ")
            self._src = body
            self._at = 0
            self.rules[name] = self._alternatives()
        self.pool = "".join(dict.fromkeys(_POOL + extra_chars))

    # -- parsing ------------------------------------------------------------------

    def _peek(self) -> str:
        while self._at < len(self._src) and self._src[self._at] == " ":
            self._at += 1
        return self._src[self._at] if self._at < len(self._src) else ""

    def _alternatives(self) -> Any:
        options = [self._sequence()]
        while self._peek() == "|":
            self._at += 1
            options.append(self._sequence())
        return ("alt", options)

    def _sequence(self) -> Any:
        items = []
        while self._peek() not in ("", "|", ")"):
            items.append(self._item())
        return ("seq", items)

    def _item(self) -> Any:
        atom = self._atom()
        c = self._src[self._at] if self._at < len(self._src) else ""
        if c and c in "?*+":
            self._at += 1
            return ("rep", atom, {"?": (0, 1), "*": (0, None), "+": (1, None)}[c])
        if c == "{":
            end = self._src.index("}", self._at)
            low, _, high = self._src[self._at + 1:end].partition(",")
            bounds = (int(low), int(low) if "," not in self._src[self._at:end]
                      else (int(high) if high else None))
            self._at = end + 1
            return ("rep", atom, bounds)
        return atom

    def _atom(self) -> Any:
        c = self._peek()
        if c == "(":
            self._at += 1
            inner = self._alternatives()
            assert self._peek() == ")"
            self._at += 1
            return inner
        if c == '"':
            return ("lit", self._literal())
        if c == "[":
            return self._class()
        match = re.compile(r"[a-zA-Z0-9-]+").match(self._src, self._at)
        assert match is not None, self._src[self._at:]
        self._at = match.end()
        return ("ref", match.group(0))

    def _char(self) -> str:
        c = self._src[self._at]
        if c != "\\":
            self._at += 1
            return c
        kind = self._src[self._at + 1]
        if kind in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[kind]
            value = self._src[self._at + 2:self._at + 2 + width]
            self._at += 2 + width
            return chr(int(value, 16))
        self._at += 2
        return _ESCAPES[kind]

    def _literal(self) -> str:
        self._at += 1
        out = []
        while self._src[self._at] != '"':
            out.append(self._char())
        self._at += 1
        return "".join(out)

    def _class(self) -> Any:
        self._at += 1
        negate = self._src[self._at] == "^"
        if negate:
            self._at += 1
        ranges = []
        while self._src[self._at] != "]":
            low = self._char()
            high = low
            if self._src[self._at] == "-" and self._src[self._at + 1] != "]":
                self._at += 1
                high = self._char()
            ranges.append((low, high))
        self._at += 1
        return ("class", negate, ranges)

    # -- drawing --------------------------------------------------------------------

    def sentence(self, rng: random.Random, start: str = "root") -> str:
        """One random sentence."""
        out: list[str] = []
        self._draw(("ref", start), rng, out, 0)
        return "".join(out)

    def _draw(self, node: Any, rng: random.Random, out: list[str], depth: int) -> None:
        kind = node[0]
        if kind == "lit":
            out.append(node[1])
        elif kind == "ref":
            self._draw(self.rules[node[1]], rng, out, depth + 1)
        elif kind == "seq":
            for item in node[1]:
                self._draw(item, rng, out, depth)
        elif kind == "alt":
            options: Sequence[Any] = node[1]
            if depth > 60:  # end soon: the option with the fewest references
                options = sorted(options, key=lambda o: str(o).count("'ref'"))[:1]
            self._draw(rng.choice(options), rng, out, depth)
        elif kind == "rep":
            low, high = node[2]
            top = low + (3 if depth < 40 else 0)
            count = rng.randint(low, top if high is None else min(high, top))
            for _ in range(count):
                self._draw(node[1], rng, out, depth + 1)
        else:
            out.append(self._pick(node, rng))

    def _pick(self, node: Any, rng: random.Random) -> str:
        _, negate, ranges = node

        def inside(c: str) -> bool:
            return any(low <= c <= high for low, high in ranges)

        if not negate:
            low, high = rng.choice(ranges)
            return chr(rng.randint(ord(low), ord(high)))
        allowed = [c for c in self.pool if not inside(c) and c != "\x00"]
        return rng.choice(allowed)
