"""Drifts of a rendered reply: the shapes a model writes when it leaves markup out.

A family's rules (docs/families.md) say how the engine reads markup a model got
wrong; these functions make those shapes from a reply rendered through the real
template, using the family's :class:`~toolwire.parse.record.CallFormat` to find its
markers, so the rule table, the conformance kit and a plugin author's own tests
try the same things:

``missing_call_close``
    between two calls, the first call's closing markup (its call's and its
    section's closing markers) is left out: its last value's closing markup is
    followed by the next call's opening marker (the next call must stay a call);
``missing_value_close``
    (tagged values) the last value's closing tag and the section's closing marker are
    left out: the call's closing marker is followed by the next call's opening one;
``calls_in_one_block``
    (a family whose calls have a closing marker and arguments that end by themselves:
    JSON, an object literal) the first call's closing marker and the second's opening
    markup are left out: the second call's header follows the first's arguments in
    one block (Gemma 4's ``<|tool_call>call:a{...}call:b{...}<tool_call|>``);
``end_of_turn``
    the reply ends, after the last call's arguments, at one of the family's own
    end-of-turn tokens (``drops``, ``trailers``) while a value, the call or its section
    is still open (every closing marker boundary is tried).

Each drift reads back as the calls that were rendered. The caller says where the
calls' arguments end, by the last value of each call as the reply writes it (a
distinct word the template does not escape).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from ..parse.record import CallFormat, CallObjects, PythonicCalls, TaggedArguments

__all__ = ["DRIFT_SHAPES", "Drift", "drifts", "end_tokens"]

DRIFT_SHAPES: tuple[str, ...] = ("missing_call_close", "missing_value_close",
                                 "calls_in_one_block", "end_of_turn")
"""The shapes :func:`drifts` makes."""

_BLANKS = re.compile(r"[ \t\r\n]*")


@attrs.frozen
class Drift:
    """One drifted reply.

    :ivar shape: one of :data:`DRIFT_SHAPES`.
    :ivar reply: the reply as the model wrote it.
    :ivar note: what was left out or added, for messages.
    """

    shape: str
    reply: str
    note: str


def end_tokens(fmt: CallFormat) -> tuple[str, ...]:
    """The family's own end-of-turn tokens: what ends a model's message wherever it is."""
    return tuple(dict.fromkeys(t for t in (*fmt.drops, *fmt.trailers) if t.strip()))


def _tagged(fmt: CallFormat) -> TaggedArguments | None:
    return next((k for k in fmt.kinds if isinstance(k, TaggedArguments)), None)


def _closers(fmt: CallFormat) -> tuple[str, ...]:
    return tuple(sorted({t for t in (*fmt.call_close, *fmt.section_close) if t.strip()},
                        key=len, reverse=True))


def _openers(fmt: CallFormat) -> tuple[str, ...]:
    return tuple(t for t in (*fmt.section_open, *fmt.call_open) if t.strip())


def _value_closes(fmt: CallFormat) -> re.Pattern[str] | None:
    """A pattern for a tagged value's closing tag (``{name}`` standing for a name)."""
    args = _tagged(fmt)
    if args is None:
        return None
    spelt = [re.escape(c).replace(re.escape("{name}"), r"[^\s<>]{1,256}")
             for close in args.closes() for c in args.spelt(close)]
    return re.compile("|".join(spelt)) if spelt else None


def _marker_run(text: str, markers: Sequence[str], pos: int = 0
                ) -> tuple[list[tuple[int, int]], int]:
    """The markers that follow ``pos`` with only blanks around them (at each place the
    first of ``markers`` that is there): their spans, and where the run ends."""
    spans: list[tuple[int, int]] = []
    while True:
        pos = _BLANKS.match(text, pos).end()  # type: ignore[union-attr]
        token = next((m for m in markers if text.startswith(m, pos)), None)
        if token is None:
            return spans, pos
        spans.append((pos, pos + len(token)))
        pos += len(token)


def _walk_closers(text: str, closers: Sequence[str]) -> list[tuple[int, int]] | None:
    """``text`` as blanks and closing markers: the markers' spans, or ``None`` when it
    holds anything else."""
    spans, end = _marker_run(text, closers)
    return spans if end >= len(text) else None


def _opening_run(fmt: CallFormat, reply: str, at: int) -> int:
    """Where the opening markup that begins at ``at`` ends (blanks and opening markers)."""
    return _marker_run(reply, sorted(_openers(fmt), key=len, reverse=True), at)[1]


def _between(fmt: CallFormat, reply: str, value_end: int) -> tuple[int, int, int] | None:
    """After a call's last value: ``(closers_start, next_open, value_close_end)``: where
    its call's closing markers begin, where the next call's opening markup begins, and
    where the value's own closing markup ends (before the closers)."""
    openers = _openers(fmt)
    closers = _closers(fmt)
    nexts = [k for o in openers if (k := reply.find(o, value_end)) >= 0]
    if not nexts or not closers:
        return None
    next_open = min(nexts)
    firsts = [k for c in closers if (k := reply.find(c, value_end, next_open)) >= 0]
    if not firsts:
        return None
    start = min(firsts)
    if _walk_closers(reply[start:next_open], closers) is None:
        return None
    value_part = reply[value_end:start]
    return start, next_open, value_end + len(value_part.rstrip())


def drifts(fmt: CallFormat, reply: str, values: Sequence[str]) -> list[Drift]:
    """Every drift of ``reply`` the family's record allows (see the module doc).

    :param fmt: the family's record.
    :param reply: a reply rendered through the family's template.
    :param values: the last argument value of each call, in order, as the reply
        writes it (a word found once after the previous one).
    """
    if isinstance(fmt.arguments, CallObjects | PythonicCalls) and not _openers(fmt):
        return []
    ends: list[int] = []
    pos = 0
    for value in values:
        at = reply.find(value, pos)
        if at < 0:
            return []
        pos = at + len(value)
        ends.append(pos)
    out: list[Drift] = []
    tagged = _tagged(fmt)
    closers = _closers(fmt)
    header_calls = not fmt.whole_calls and tagged is None and bool(fmt.call_close)
    value_closes = _value_closes(fmt)
    for end in ends[:-1]:
        found = _between(fmt, reply, end)
        if found is None:
            continue
        start, next_open, value_close_end = found
        gap = reply[start:next_open]
        spans = _walk_closers(gap, closers) or []
        blanks = "".join(ch for ch in gap if ch in " \t\r\n")[:1]
        out.append(Drift("missing_call_close",
                         reply[:value_close_end] + blanks + reply[next_open:],
                         f"left out {gap.strip()!r} before the next call"))
        if tagged is not None and value_closes is not None:
            own = value_closes.match(reply, _BLANKS.match(reply, end).end())  # type: ignore[union-attr]
            calls = [s for s in spans if gap[s[0]:s[1]] in fmt.call_close]
            if own is not None and calls:
                call_close = gap[calls[0][0]:calls[0][1]]
                out.append(Drift("missing_value_close",
                                 reply[:end] + "\n" + call_close + "\n" + reply[next_open:],
                                 f"left out {own.group(0)!r} and the section's closing "
                                 "marker before the next call"))
        if header_calls:
            header_at = _opening_run(fmt, reply, next_open)
            out.append(Drift("calls_in_one_block", reply[:start] + reply[header_at:],
                             f"left out {reply[start:header_at]!r}: the next call's header "
                             "follows the arguments"))
    out.extend(_turn_ends(fmt, reply, ends[-1], value_closes))
    return out


def _turn_ends(fmt: CallFormat, reply: str, value_end: int,
               value_closes: re.Pattern[str] | None) -> list[Drift]:
    """The reply ended by the family's end-of-turn token at each point after the last
    call's arguments where a closing marker was still to come."""
    closers = _closers(fmt)
    if value_closes is not None:  # a tagged value: open at its end, then after its tag
        cuts = [value_end]
        own = value_closes.match(reply, _BLANKS.match(reply, value_end).end())  # type: ignore[union-attr]
        after = own.end() if own is not None else value_end
        cuts.append(after)
    else:  # arguments that end with their own last bracket: after it
        firsts = [k for c in closers if (k := reply.find(c, value_end)) >= 0]
        if not firsts:
            return []
        after = min(firsts)
        cuts = [after]
    spans = _walk_closers(reply[after:], closers) or []
    cuts.extend(after + b for _, b in spans)
    whole = len(reply.rstrip())
    return [Drift("end_of_turn", reply[:cut] + token,
                  f"the turn ended at {token!r} with {reply[cut:].strip()!r} left out")
            for token in end_tokens(fmt) for cut in sorted(set(cuts)) if cut < whole]
