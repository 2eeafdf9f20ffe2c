"""A tool schema's regular expressions, bounded: a size cap, and matching in linear time.

A tool schema is untrusted (an HTTP client's ``tools``, an MCP server's listing)
and its ``pattern`` keywords and ``patternProperties`` keys are regular
expressions that jsonschema would hand to Python's ``re``: a backtracking
engine that holds the interpreter lock while it works, so ``^(a+)+$`` against
``'a' * 30 + '!'`` freezes every thread for a minute and no timeout can stop it;
compiling a 7 MB pattern takes seconds, and 600 nested groups overflow the
parser's stack. So each pattern is :func:`compiled <compile_pattern>` once,
after bounds on its size (:data:`MAX_PATTERN_CHARS`) and its nesting
(:data:`MAX_PATTERN_NESTING`, checked by a scan before any parser sees it), into
a program of at most :data:`MAX_PROGRAM` instructions; and it is matched by
:meth:`BoundedPattern.search`, a Thompson-NFA simulation (Pike's VM without
captures) that keeps *the set* of the program's states at each position and
never backtracks: it takes at most (program size) x (text length + 1) steps,
and stops with :class:`PatternStepsExceeded` past a step budget
(:data:`PATTERN_STEPS`), which a caller reports as a failed check.

Why the matches are Python's: the pattern is parsed by ``re``'s own parser (so
the syntax, inline flags and ``(?x)`` are ``re``'s, and ``re.compile`` must accept
the pattern too), and every single-character test (a literal, a class, ``.``,
``\\d``, ``\\w``, a word boundary's sides) is decided by ``re`` itself, with the
flags in force at that point (``IGNORECASE``'s case folding, ``ASCII``,
``DOTALL``): a pattern of one character cannot backtrack. What the simulation adds
is only the order of those tests, which for a yes-or-no search is what any
correct engine computes: whether some path through the pattern's automaton reads
a substring of the text. Lookahead and (fixed-width) lookbehind run a
sub-program from the position, memoized per position and counted in the same
budget. What has no automaton is refused when the pattern is compiled:
backreferences and conditionals (``\\1``, ``(?(1)...)``), whose matching is
NP-hard, and atomic groups and possessive quantifiers (``(?>...)``, ``a*+``),
which make a search fail where the automaton would succeed.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from re import _constants as sre  # type: ignore[attr-defined]  # re's own parser, below
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any, Final

import attrs

__all__ = ["MAX_PATTERN_CHARS", "MAX_PATTERN_NESTING", "MAX_PROGRAM", "PATTERN_STEPS",
           "BoundedPattern", "PatternError", "PatternStepsExceeded", "clear_pattern_cache",
           "compile_pattern"]

MAX_PATTERN_CHARS: Final = 4_096
"""The longest pattern a schema may hold."""
MAX_PATTERN_NESTING: Final = 32
"""The deepest nesting of groups in a pattern."""
MAX_PROGRAM: Final = 20_000
"""The most instructions a pattern compiles to (counted repetitions are written out:
``[a-z]{2,200}`` takes about 400)."""
PATTERN_STEPS: Final = 250_000
"""The most steps one search may take (well under a second): a string of 5,000
characters against a pattern of 50 instructions."""

_WORD: Final = ("word",)


class PatternError(ValueError):
    """The pattern cannot be used (not a regular expression, over a bound, or a
    feature without an automaton); the message says which.

    :ivar syntax: ``re`` does not accept it (as opposed to a bound or a feature).
    """

    def __init__(self, message: str, *, syntax: bool = False) -> None:
        super().__init__(message)
        self.syntax = syntax


class PatternStepsExceeded(Exception):
    """A search took more steps than its budget."""


# Instructions: (kind, argument...) tuples, indexed by position in the program.
_CHAR, _SPLIT, _JMP, _ASSERT, _LOOK, _MATCH = range(6)

_CATEGORIES: Final = {
    sre.CATEGORY_DIGIT: r"\d", sre.CATEGORY_NOT_DIGIT: r"\D",
    sre.CATEGORY_SPACE: r"\s", sre.CATEGORY_NOT_SPACE: r"\S",
    sre.CATEGORY_WORD: r"\w", sre.CATEGORY_NOT_WORD: r"\W",
}
_CHAR_FLAGS: Final = re.IGNORECASE | re.DOTALL | re.ASCII | re.UNICODE
_UNSUPPORTED: Final = {
    sre.GROUPREF: "a backreference", sre.GROUPREF_EXISTS: "a conditional group",
    sre.ATOMIC_GROUP: "an atomic group", sre.POSSESSIVE_REPEAT: "a possessive quantifier",
}


def _char(code: int) -> str:
    return f"\\U{code:08x}"


def _class_source(items: list[tuple[Any, Any]]) -> str:
    parts = []
    negate = ""
    for op, av in items:
        if op is sre.NEGATE:
            negate = "^"
        elif op is sre.LITERAL:
            parts.append(_char(av))
        elif op is sre.RANGE:
            parts.append(f"{_char(av[0])}-{_char(av[1])}")
        elif op is sre.CATEGORY:
            parts.append(_CATEGORIES[av])
        else:
            raise PatternError(f"an unknown character class item {op}")
    return f"[{negate}{''.join(parts)}]"


class _Compiler:
    """Turns ``re``'s parse tree into a program, single-character tests kept by ``re``."""

    def __init__(self) -> None:
        self.tests: list[Callable[[str], Any]] = []
        self._tests_by_source: dict[tuple[str, int], int] = {}
        self.size = 0  # instructions in all programs (lookarounds have their own)

    def test(self, source: str, flags: int) -> int:
        key = (source, flags & _CHAR_FLAGS)
        index = self._tests_by_source.get(key)
        if index is None:
            index = len(self.tests)
            self.tests.append(re.compile(source, key[1]).fullmatch)
            self._tests_by_source[key] = index
        return index

    def program(self, items: Any, flags: int) -> list[tuple[Any, ...]]:
        code: list[tuple[Any, ...]] = []
        self._emit(code, items, flags)
        self._add(code, (_MATCH,))
        return code

    def _add(self, code: list[tuple[Any, ...]], instruction: tuple[Any, ...]) -> int:
        self.size += 1
        if self.size > MAX_PROGRAM:
            raise PatternError(f"it compiles to more than {MAX_PROGRAM:,} instructions "
                               "(counted repetitions are written out)")
        code.append(instruction)
        return len(code) - 1

    def _emit(self, code: list[tuple[Any, ...]], items: Any, flags: int) -> None:
        for op, av in items:
            if op in _UNSUPPORTED:
                raise PatternError(f"it uses {_UNSUPPORTED[op]}, which no automaton can match")
            if op is sre.LITERAL:
                self._add(code, (_CHAR, self.test(_char(av), flags)))
            elif op is sre.NOT_LITERAL:
                self._add(code, (_CHAR, self.test(f"[^{_char(av)}]", flags)))
            elif op is sre.ANY:
                self._add(code, (_CHAR, self.test(".", flags)))
            elif op is sre.IN:
                self._add(code, (_CHAR, self.test(_class_source(av), flags)))
            elif op is sre.AT:
                self._add(code, (_ASSERT, av, bool(flags & re.MULTILINE)))
            elif op is sre.BRANCH:
                self._branch(code, av[1], flags)
            elif op is sre.SUBPATTERN:
                _, add, remove, inner = av
                self._emit(code, inner, (flags | add) & ~remove)
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
                self._repeat(code, av, flags)
            elif op in (sre.ASSERT, sre.ASSERT_NOT):
                direction, inner = av
                width = inner.getwidth()[0] if direction < 0 else 0
                sub = self.program(inner, flags)
                self._add(code, (_LOOK, sub, direction > 0, op is sre.ASSERT_NOT, width))
            else:
                raise PatternError(f"it uses {str(op).lower()}, which is not supported")

    def _branch(self, code: list[tuple[Any, ...]], alternatives: Any, flags: int) -> None:
        jumps = []
        for index, alternative in enumerate(alternatives):
            if index < len(alternatives) - 1:
                split = self._add(code, (_SPLIT, 0, 0))
                self._emit(code, alternative, flags)
                jumps.append(self._add(code, (_JMP, 0)))
                code[split] = (_SPLIT, split + 1, len(code))
            else:
                self._emit(code, alternative, flags)
        for jump in jumps:
            code[jump] = (_JMP, len(code))

    def _repeat(self, code: list[tuple[Any, ...]], av: Any, flags: int) -> None:
        low, high, item = av
        for _ in range(low):
            self._emit(code, item, flags)
        if high == sre.MAXREPEAT:
            loop = self._add(code, (_SPLIT, 0, 0))
            self._emit(code, item, flags)
            self._add(code, (_JMP, loop))
            code[loop] = (_SPLIT, loop + 1, len(code))
            return
        splits = []
        for _ in range(high - low):
            splits.append(self._add(code, (_SPLIT, 0, 0)))
            self._emit(code, item, flags)
        for split in splits:
            code[split] = (_SPLIT, split + 1, len(code))


def _nesting(pattern: str) -> int:
    """How deeply groups nest in ``pattern`` (escapes and classes skipped), found by a
    scan, so that no recursive parser meets a pattern nested past the bound."""
    depth = deepest = 0
    in_class = False
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            if pattern[i + 1:i + 2] == "^":
                i += 1
            if pattern[i + 1:i + 2] == "]":  # a "]" first in a class is itself
                i += 1
        elif char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth -= 1
        i += 1
    return deepest


@attrs.frozen(eq=False)
class BoundedPattern:
    """A compiled pattern (see :func:`compile_pattern`).

    :ivar pattern: its source.
    :ivar size: the instructions it compiled to (lookarounds' included).
    """

    pattern: str
    _code: list[tuple[Any, ...]] = attrs.field(repr=False)
    _tests: list[Callable[[str], Any]] = attrs.field(repr=False)
    _word: int = attrs.field(repr=False)
    size: int = 0

    def search(self, text: str, steps: int = PATTERN_STEPS) -> bool:
        """Whether the pattern matches somewhere in ``text`` (as ``re.search`` does).

        :raises PatternStepsExceeded: past ``steps`` steps.
        """
        return _Search(self, text, steps).run(self._code, 0, None, anchored=False)


class _Search:
    """One search: the memo of single-character tests and lookarounds, and the steps."""

    def __init__(self, pattern: BoundedPattern, text: str, steps: int) -> None:
        self.text = text
        self.tests = pattern._tests
        self.word = pattern._word
        self.left = steps
        self.budget = steps
        self.chars: dict[tuple[int, str], bool] = {}
        self.looks: dict[tuple[int, int], bool] = {}

    def spend(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise PatternStepsExceeded(f"matching took more than {self.budget:,} steps")

    def matches(self, test: int, char: str) -> bool:
        key = (test, char)
        found = self.chars.get(key)
        if found is None:
            found = self.chars[key] = self.tests[test](char) is not None
        return found

    def is_word(self, position: int) -> bool:
        return 0 <= position < len(self.text) and self.matches(self.word, self.text[position])

    def holds(self, kind: Any, multiline: bool, position: int) -> bool:
        text, n = self.text, len(self.text)
        if kind is sre.AT_BEGINNING_STRING:
            return position == 0
        if kind is sre.AT_END_STRING:
            return position == n
        if kind is sre.AT_BEGINNING:
            return position == 0 or (multiline and text[position - 1] == "\n")
        if kind is sre.AT_END:
            if multiline:
                return position == n or text[position] == "\n"
            return position == n or (position == n - 1 and text[position] == "\n")
        if kind is sre.AT_BOUNDARY:
            return n > 0 and self.is_word(position - 1) != self.is_word(position)
        if kind is sre.AT_NON_BOUNDARY:  # as re: never in an empty text
            return n > 0 and self.is_word(position - 1) == self.is_word(position)
        raise PatternError(f"an unknown assertion {kind}")

    def looks_true(self, instruction: tuple[Any, ...], position: int) -> bool:
        key = (id(instruction), position)
        found = self.looks.get(key)
        if found is None:
            _, code, ahead, negate, width = instruction
            if ahead:
                found = self.run(code, position, None, anchored=True)
            else:
                found = position >= width and self.run(code, position - width, position,
                                                       anchored=True)
            found = found != negate
            self.looks[key] = found
        return found

    def closure(self, code: list[tuple[Any, ...]], starts: list[int], position: int,
                into: set[int]) -> bool:
        """Add the states reached from ``starts`` without reading; whether one matches."""
        stack = list(starts)
        matched = False
        while stack:
            pc = stack.pop()
            if pc in into:
                continue
            into.add(pc)
            instruction = code[pc]
            kind = instruction[0]
            if kind == _SPLIT:
                stack.append(instruction[2])
                stack.append(instruction[1])
            elif kind == _JMP:
                stack.append(instruction[1])
            elif kind == _ASSERT:
                if self.holds(instruction[1], instruction[2], position):
                    stack.append(pc + 1)
            elif kind == _LOOK:
                if self.looks_true(instruction, position):
                    stack.append(pc + 1)
            elif kind == _MATCH:
                matched = True
        self.spend(len(into))
        return matched

    def run(self, code: list[tuple[Any, ...]], start: int, end: int | None, *,
            anchored: bool) -> bool:
        """Whether ``code`` reads ``text[start:i]`` for some ``i`` (only ``i == end``
        when given); unanchored, from any start position onwards."""
        text = self.text
        states: set[int] = set()
        if self.closure(code, [0], start, states) and (end is None or end == start):
            return True
        last = len(text) if end is None else end
        for position in range(start, last):
            char = text[position]
            following = [pc + 1 for pc in states
                         if code[pc][0] == _CHAR and self.matches(code[pc][1], char)]
            states = set()
            if not anchored:
                following.append(0)
            if not following:
                return False
            done = self.closure(code, following, position + 1, states)
            if done and (end is None or position + 1 == end):
                return True
        return False


_CACHE_INSTRUCTIONS: Final = 1_000_000
"""The compiled patterns kept hold at most this many instructions in all (the least
recently used go first), so many large patterns cannot fill the memory."""
_cache: OrderedDict[str, BoundedPattern] = OrderedDict()
_cached_instructions = 0
_cache_lock = threading.Lock()


def compile_pattern(pattern: str) -> BoundedPattern:
    """A schema's pattern, compiled once (the cache keeps the most recently used,
    at most :data:`_CACHE_INSTRUCTIONS` instructions in all).

    :raises PatternError: it is not a regular expression ``re`` accepts, it is over
        :data:`MAX_PATTERN_CHARS`, :data:`MAX_PATTERN_NESTING` or :data:`MAX_PROGRAM`,
        or it uses a feature no automaton can match (see the module doc).
    """
    global _cached_instructions
    with _cache_lock:
        known = _cache.get(pattern)
        if known is not None:
            _cache.move_to_end(pattern)
            return known
    made = _compile(pattern)
    with _cache_lock:
        if pattern not in _cache:
            _cache[pattern] = made
            _cached_instructions += made.size
            while _cached_instructions > _CACHE_INSTRUCTIONS and len(_cache) > 1:
                _, dropped = _cache.popitem(last=False)
                _cached_instructions -= dropped.size
    return made


def clear_pattern_cache() -> None:
    """Forget every compiled pattern."""
    global _cached_instructions
    with _cache_lock:
        _cache.clear()
        _cached_instructions = 0


def _compile(pattern: str) -> BoundedPattern:
    """Compile a schema's pattern (what :func:`compile_pattern` caches)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"it is {len(pattern):,} characters long, over the limit of "
                           f"{MAX_PATTERN_CHARS:,}")
    nesting = _nesting(pattern)
    if nesting > MAX_PATTERN_NESTING:
        raise PatternError(f"its groups nest {nesting} levels deep, over the limit of "
                           f"{MAX_PATTERN_NESTING}")
    try:
        re.compile(pattern)
        parsed = sre_parse.parse(pattern, 0)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        raise PatternError(f"it is not a regular expression: {exc}", syntax=True) from None
    compiler = _Compiler()
    flags = parsed.state.flags
    code = compiler.program(parsed, flags)
    word = compiler.test(r"\w", flags)
    return BoundedPattern(pattern, code, compiler.tests, word, compiler.size)
