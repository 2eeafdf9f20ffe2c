"""Text in which some markers never occur: raw values between tags, reasoning.

A tagged family writes a string value verbatim, up to its closing tag; the
parser ends the value at that tag (and at the call's end, at the next
argument's opening...). So the grammar of such a value is *any text in which
none of those markers occurs*, and, since the closing markup follows, that does
not end in a way that makes one occur across the boundary (a value ending in
``</param`` before ``</parameter>`` is fine; one ending in ``<`` before
``/x>`` where ``</x>`` is forbidden is not).

That language is regular: :func:`avoiding_text` builds the automaton of the
markers (Aho-Corasick: a state is the longest suffix of the text so far that
begins a marker) and writes one GBNF rule per live state, characters that
lead to the same state merged into one class. A length-bounded value cannot
be counted through that automaton in GBNF, so :func:`bounded_text` uses the
simpler, stricter language of text without any marker's first character.
"""

from __future__ import annotations

from collections.abc import Sequence

from .gbnf import RuleSet, char_class, literal, repetition, sequence

__all__ = ["avoiding_text", "bounded_text", "first_chars", "reasoning_blocks", "reasoning_text"]

_NEVER = "\x00"  # a token beginning with NUL is never sampled under a grammar


def first_chars(words: Sequence[str]) -> str:
    """The first characters of ``words``."""
    return "".join(sorted({w[0] for w in words if w}))


def bounded_text(rules: RuleSet, words: Sequence[str], low: int, high: int | None, *,
                 not_first: str = "") -> str:
    """An expression for ``low``..``high`` characters, none a first character of
    ``words`` (counts llama.cpp cannot hold relaxed: :func:`~toolwire.grammar.gbnf.repetition`).

    :param not_first: characters the text may hold but not begin with.
    """
    never = first_chars(words) + _NEVER
    chars = char_class(never, negate=True)
    if not not_first or high == 0:
        return repetition(rules, chars, low, high, hint="bounded-text") or '""'
    first = char_class(never + not_first, negate=True)
    rest = repetition(rules, chars, max(low - 1, 0), None if high is None else high - 1,
                      hint="bounded-text")
    text = sequence(first, rest)
    return text if low else f"({text})?"


def reasoning_text(rules: RuleSet, close: str, max_chars: int | None) -> str:
    """The reasoning a prompt opened, up to its closing tag ``close``: at most
    ``max_chars`` characters (``None``: any text in which ``close`` does not occur)."""
    if max_chars is not None:
        return bounded_text(rules, [close], 0, max_chars)
    return avoiding_text(rules, [close], hint="reasoning", after=close)


def reasoning_blocks(rules: RuleSet, tags: Sequence[tuple[str, str]]) -> list[str]:
    """A whole reasoning block, opening tag to closing tag, for each pair of ``tags``."""
    return [sequence(literal(open_tag), avoiding_text(rules, [close], hint="reasoning",
                                                      after=close), literal(close))
            for open_tag, close in tags]


class _Automaton:
    """The Aho-Corasick automaton of ``words`` over their own characters."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words = tuple(dict.fromkeys(w for w in words if w))
        self.prefixes: set[str] = {w[:i] for w in self.words for i in range(len(w))}
        self.alphabet = "".join(sorted({c for w in self.words for c in w}))
        self.by_last: dict[str, list[str]] = {}
        for word in self.words:
            self.by_last.setdefault(word[-1], []).append(word)

    def dead(self, text: str) -> str | None:
        """The marker ``text`` ends with, if any."""
        for word in self.by_last.get(text[-1:], ()):
            if text.endswith(word):
                return word
        return None

    def step(self, state: str, char: str) -> str | None:
        """The state after ``char`` (``None``: a marker was completed)."""
        text = state + char
        if self.dead(text) is not None:
            return None
        for i in range(len(text) + 1):
            if text[i:] in self.prefixes:
                return text[i:]
        return ""  # pragma: no cover - the empty prefix always matches

    def may_end(self, state: str, after: str) -> bool:
        """Whether text in ``state`` may end before ``after``: the first marker met
        while reading ``after`` must lie wholly inside it (none straddles)."""
        current = state
        for i, char in enumerate(after):
            word = self.dead(current + char)
            if word is not None:
                return len(word) <= i + 1
            nxt = self.step(current, char)
            assert nxt is not None
            current = nxt
        return True


def avoiding_text(rules: RuleSet, words: Sequence[str], *, hint: str, after: str = "") -> str:
    """The rule name for text containing none of ``words`` (any length, even empty).

    :param after: the text the grammar writes right after the value (its
        closing markup): the value may not end so that a marker straddles into it.
    """
    key = ("avoiding", tuple(words), after)
    known = rules.memo.get(key)
    if known is not None:
        return known
    name = _write_automaton(rules, words, hint=hint, after=after)
    rules.memo[key] = name
    return name


def _write_automaton(rules: RuleSet, words: Sequence[str], *, hint: str, after: str) -> str:
    auto = _Automaton(words)
    if not auto.words:
        chars = char_class(_NEVER, negate=True)
        return rules.add(hint, f"{chars}*")
    states = sorted(auto.prefixes, key=lambda s: (len(s), s))
    names = {state: rules.reserve(f"{hint}-{i}") for i, state in enumerate(states)}
    for state in states:
        targets: dict[str, list[str]] = {}
        for char in auto.alphabet:
            nxt = auto.step(state, char)
            if nxt is not None:
                targets.setdefault(nxt, []).append(char)
        # characters outside every marker lead back to the start state
        special = [c for c in auto.alphabet if c not in targets.get("", [])]
        to_start = char_class("".join(special) + _NEVER, negate=True)
        options = []
        for target, moved in targets.items():
            if target:
                options.append(sequence(_chars(moved), names[target]))
        ends = auto.may_end(state, after)
        if state == "":
            loop = f"{to_start}*"
            if not options:
                body = loop if ends else f"{loop} {to_start}"
            else:
                moves = "(" + " | ".join(options) + ")"
                body = sequence(loop, f"{moves}?" if ends else moves)
        else:
            options.insert(0, sequence(to_start, names[""]))
            moves = "(" + " | ".join(options) + ")"
            body = f"{moves}?" if ends else moves
        rules.define(names[state], body)
    return names[""]


def _chars(chars: list[str]) -> str:
    if len(chars) == 1:
        return literal(chars[0])
    return char_class("".join(chars))
