"""Regular expressions from outside: compiled within bounds, matched with a timeout.

A pattern from outside (a tool schema's ``pattern`` or ``patternProperties`` key,
from an HTTP client or an MCP server; a model's ``search_text`` pattern) is matched
by the ``regex`` package, never by ``re``. ``re`` backtracks holding the interpreter
lock, so ``^(a+)+$`` against ``'a' * 30 + '!'`` freezes every thread for a minute
and no timeout stops it; ``regex`` takes a timeout, and releases the lock while it
matches (``concurrent=True``), so other threads run meanwhile.

Compiling is the other danger: ``regex`` writes counted repetitions out
(``a{1000000}`` takes it a gigabyte, ``((a{1000}){1000}){1000}`` more) and its parser
recurses. So a pattern is compiled in this process only once the pattern child
(:mod:`toolwire.isolation`) has compiled it within
:attr:`~toolwire.limits.PatternLimits.compile_memory_bytes` and
``compile_seconds``; :func:`check_patterns` asks it, for all of a schema's patterns
in one job, and the verdict is kept (not a refusal for the check's wall time, which a
busy machine may cause: that pattern is asked again next time). What the compiled
patterns kept here take is held to ``kept_bytes`` (``regex`` measures a compiled
pattern).

Where a match needs a hard bound (a search over a whole workspace, which a
cancelled reply must stop at once), :func:`match_lines` runs it in the pattern child
too, which is killed at its deadline or cancellation.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import regex

from ..errors import ChildStoppedError
from ..isolation.jobs import JobLimits, JobPool
from ..limits import PATTERN_LIMITS

__all__ = ["PatternError", "check_patterns", "compile_pattern", "handle_job", "match_lines",
           "search"]

_CHILDREN: Final = JobPool("toolwire.vocabulary.patterns")
"""The pattern children: compile checks and workspace searches."""
_SEARCH_GRACE: Final = 1.0
"""Seconds past a search's deadline before its child is killed: the child's own
timeout answers first, and the child stays warm."""
_VERDICTS_KEPT: Final = 4096


class PatternError(ValueError):
    """The pattern cannot be used: it is not a regular expression, or it is over a bound;
    the message says which.

    :ivar syntax: ``regex`` does not accept it (as opposed to a bound).
    """

    def __init__(self, message: str, *, syntax: bool = False) -> None:
        super().__init__(message)
        self.syntax = syntax


# -- in the child -------------------------------------------------------------------------

def _compile_here(pattern: str) -> regex.Pattern[str]:
    """``pattern`` compiled; :class:`PatternError` for what ``regex`` refuses."""
    try:
        return regex.compile(pattern, cache_pattern=False)
    except regex.error as exc:
        raise PatternError(str(exc), syntax=True) from None
    except RecursionError:
        raise PatternError("its groups nest too deeply") from None
    except (OverflowError, ValueError) as exc:
        raise PatternError(str(exc)) from None


def _check(pattern: str) -> dict[str, Any]:
    try:
        _compile_here(pattern)
    except PatternError as exc:
        return {"error": str(exc), "syntax": exc.syntax}
    return {"ok": True}


def _lines(job: Mapping[str, Any]) -> dict[str, Any]:
    try:
        compiled = _compile_here(str(job["pattern"]))
    except PatternError as exc:
        return {"error": str(exc), "syntax": exc.syntax}
    deadline = time.monotonic() + float(job["seconds"])
    limit = int(job["limit"])
    found: list[int] = []
    try:
        for index, line in enumerate(str(job["text"]).split("\n")):
            if compiled.search(line, timeout=max(deadline - time.monotonic(), 0.0)):
                found.append(index)
                if len(found) >= limit:
                    break
    except TimeoutError:
        return {"timeout": True}
    return {"lines": found}


def handle_job(job: Mapping[str, Any]) -> dict[str, Any]:
    """The pattern child's entry: ``{"op": "check", "patterns": [...]}`` compiles each
    (``{"ok": true}`` or ``{"error": ..., "syntax": B}``); ``{"op": "lines",
    "pattern", "text", "limit", "seconds"}`` finds the lines of a text it matches."""
    if job.get("op") == "check":
        return {"results": [_check(str(p)) for p in job["patterns"]]}
    return _lines(job)


# -- in this process ----------------------------------------------------------------------

_lock = threading.Lock()
_verdicts: OrderedDict[str, tuple[str, bool]] = OrderedDict()
"""pattern -> (why it cannot be used, or "", whether that is its syntax)"""
_compiled: OrderedDict[str, tuple[regex.Pattern[str], int]] = OrderedDict()
_kept = 0


def _over_length(pattern: str) -> str:
    limit = PATTERN_LIMITS.max_chars
    return f"it is {len(pattern):,} characters; the limit is {limit:,}" \
        if len(pattern) > limit else ""


def _ask(patterns: list[str]) -> list[tuple[str, bool, bool]]:
    """Each pattern's verdict: ``(why not, a syntax error, lasting)``; a refusal because
    the check ran out of wall time may be the machine's load, so it is not lasting."""
    limits = JobLimits(memory_bytes=PATTERN_LIMITS.compile_memory_bytes,
                       wall_seconds=PATTERN_LIMITS.compile_seconds * len(patterns))
    try:
        answer = _CHILDREN.run({"op": "check", "patterns": patterns}, limits)
    except ChildStoppedError as stopped:
        if len(patterns) > 1:  # which one: each alone
            return [verdict for p in patterns for verdict in _ask([p])]
        bound = {"memory": f"more than {PATTERN_LIMITS.compile_memory_bytes >> 20} MiB",
                 "wall time": f"more than {PATTERN_LIMITS.compile_seconds:g} s"}
        return [(f"compiling it takes {bound.get(stopped.bound, stopped.how)}", False,
                 stopped.bound != "wall time")]
    return [("", False, True) if r.get("ok") else (str(r.get("error")), bool(r.get("syntax")),
                                                    True)
            for r in answer["results"]]


def check_patterns(patterns: Sequence[str]) -> list[PatternError | None]:
    """Whether each pattern can be used: ``None``, or the :class:`PatternError` saying
    why not. The ones not seen before are compiled in the pattern child, in one job."""
    with _lock:
        unknown = list(dict.fromkeys(p for p in patterns if p not in _verdicts
                                     and not _over_length(p)))
    verdicts = dict(zip(unknown, _ask(unknown), strict=True)) if unknown else {}
    if verdicts:
        with _lock:
            _verdicts.update((p, (why, syntax)) for p, (why, syntax, lasting)
                             in verdicts.items() if lasting)
            while len(_verdicts) > _VERDICTS_KEPT:
                _verdicts.popitem(last=False)
    out: list[PatternError | None] = []
    for pattern in patterns:
        too_long = _over_length(pattern)
        if too_long:
            out.append(PatternError(too_long))
            continue
        if pattern in verdicts:  # asked now (kept or not)
            why, syntax, _ = verdicts[pattern]
        else:
            with _lock:
                why, syntax = _verdicts.get(pattern, ("", False))
        out.append(PatternError(why, syntax=syntax) if why else None)
    return out


def compile_pattern(pattern: str) -> regex.Pattern[str]:
    """``pattern`` compiled, once (:func:`check_patterns` first).

    :raises PatternError: it cannot be used.
    """
    global _kept
    with _lock:
        kept = _compiled.get(pattern)
        if kept is not None:
            _compiled.move_to_end(pattern)
            return kept[0]
    problem = check_patterns([pattern])[0]
    if problem is not None:
        raise problem
    compiled = _compile_here(pattern)
    size = sys.getsizeof(compiled)
    with _lock:
        _compiled[pattern] = (compiled, size)
        _kept += size
        while _kept > PATTERN_LIMITS.kept_bytes and len(_compiled) > 1:
            _kept -= _compiled.popitem(last=False)[1][1]
    return compiled


def search(compiled: regex.Pattern[str], text: str, seconds: float) -> bool:
    """Whether ``compiled`` matches somewhere in ``text``, decided within ``seconds``.

    :raises TimeoutError: the match took longer.
    """
    return compiled.search(text, timeout=max(seconds, 0.0), concurrent=True) is not None


def match_lines(pattern: str, text: str, limit: int, *, deadline: float,
                cancelled: Callable[[], bool] | None = None) -> list[int]:
    """Indices of up to ``limit`` lines of ``text`` (split on ``\\n``) that ``pattern``
    matches, found in the pattern child: ``regex``'s timeout ends the match at
    ``deadline``; a child that does not answer by then (plus a second) is killed, and
    so is one whose reply was cancelled.

    :raises PatternError: the pattern is not a regular expression.
    :raises ChildStoppedError: the deadline came (``bound`` ``wall time``), the reply
        was cancelled (``cancelled``), or the child passed another bound or died.
    """
    seconds = deadline - time.monotonic()
    limits = JobLimits(memory_bytes=PATTERN_LIMITS.search_memory_bytes,
                       wall_seconds=max(seconds, 0.0) + _SEARCH_GRACE)
    answer = _CHILDREN.run({"op": "lines", "pattern": pattern, "text": text, "limit": limit,
                            "seconds": max(seconds, 0.0)}, limits, cancelled=cancelled)
    if "error" in answer:
        raise PatternError(str(answer["error"]), syntax=bool(answer.get("syntax")))
    if answer.get("timeout"):
        raise ChildStoppedError("the match ran past its deadline", bound="wall time",
                                how="it ran past its deadline")
    return [int(i) for i in answer["lines"]]
