"""The reasoning stream filter: ``<think>...</think>`` becomes ``reasoning`` events.

Families differ only in their tags, so one class serves them all. A reply may
begin inside an already-open block (the prompt ended with ``<think>``): the
filter is told so by its context, or, when nothing is known (parsing a stored
reply), it waits to see whether a closing tag comes without an opening one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Literal

from ..events import Event, ReasoningEvent, TextEvent
from .protocol import FilterContext, PromptState, StreamFilter, StreamFilterSpec
from .streaming import HeldWhitespace, partial_tag_start

_SPACE = re.compile(r"\s*")


def _skip_space(data: str, pos: int) -> int:
    """The first position at or after ``pos`` that is not whitespace (no copy of the rest)."""
    match = _SPACE.match(data, pos)
    return match.end() if match else pos

__all__ = [
    "ReasoningBlockFilter",
    "family_think_filter_spec",
    "think_filter_spec",
]

StartState = Literal["text", "reasoning", "auto"]


class ReasoningBlockFilter:
    """Routes the text between ``open_tag`` and ``close_tag`` to reasoning events.

    Only a block at the very start of the reply (after blanks) is reasoning; a
    literal ``<think>`` later in the answer stays text. Whitespace just inside
    the block and just after it is dropped, as the templates add it.

    ``open_headers`` are words a model may write straight after the opening tag
    (Gemma 4's ``<|channel>thought``): one that stands alone there (blanks, the
    closing tag or the reply's end follow it) is part of the marker and dropped;
    a block written without it is reasoning all the same.

    A call written inside a block that never closes is a call: from a call's
    opening marker inside the block, the text is held; the block's closing tag
    makes it reasoning after all, and so does reasoning text after the call's
    closing marker, but a reply that ends after the call (blanks at most) passes
    the call on to the parser as text.
    """

    def __init__(self, open_tag: str = "<think>", close_tag: str = "</think>",
                 start: StartState = "auto", *, call_open: tuple[str, ...] = (),
                 call_close: tuple[str, ...] = (), answer_open: tuple[str, ...] = (),
                 open_headers: tuple[str, ...] = (), header_written: bool = False) -> None:
        self._open = open_tag
        self._close = close_tag
        self._headers = tuple(h for h in open_headers if h.strip())
        # a header may still come: at the block's start, unless the prompt wrote it
        self._header_due = bool(self._headers) and not header_written
        self._answer = tuple(m for m in answer_open if m.strip())
        self._state: str = start
        self._calls = _CallWatch(call_open, call_close)
        self._call_open = tuple(m for m in call_open if m.strip())
        self._call_close = tuple(m for m in call_close if m.strip())
        self._maybe: list[str] | None = None  # a call in reasoning, held (see the class doc)
        self._maybe_closed = False
        self._pending = ""
        self._lead = True  # strip leading blanks of the current segment
        self._held = HeldWhitespace()
        self._auto_parts: list[str] = []
        self._auto_text_seen = False

    def feed(self, text: str) -> list[Event]:
        """Consume a delta."""
        if self._state == "text" and not self._lead and not self._pending:
            return [TextEvent(text)] if text else []
        data = self._pending + text
        self._pending = ""
        out: list[Event] = []
        pos = 0
        while pos < len(data):
            if self._state == "text":
                if self._lead:
                    pos = _skip_space(data, pos)
                    if pos == len(data):
                        break
                    if data.startswith(self._open, pos):
                        pos += len(self._open)
                        self._state = "reasoning"
                        self._header_due = bool(self._headers)
                        continue
                    if len(data) - pos < len(self._open) and self._open.startswith(data[pos:]):
                        self._pending = data[pos:]
                        return out
                    self._lead = False
                out.append(TextEvent(data[pos:]))
                pos = len(data)
            elif self._state == "reasoning":
                pos = self._scan_reasoning(data, pos, out)
            else:
                pos = self._scan_auto(data, pos, out)
        return out

    def _scan_reasoning(self, data: str, pos: int, out: list[Event]) -> int:
        if self._lead:
            pos = _skip_space(data, pos)
            if pos == len(data):
                return pos
            if self._header_due:
                after = self._header_end(data, pos)
                if after is None:  # a header may be coming: wait for more
                    self._pending = data[pos:]
                    return len(data)
                self._header_due = False
                if after > pos:
                    return after  # the header goes with the marker; blanks after it too
            self._lead = False
        if self._maybe is not None:
            return self._scan_maybe_call(data, pos, out)
        end = data.find(self._close, pos)
        answer = min((k for k in (data.find(m, pos, end if end >= 0 else len(data))
                                  for m in self._answer) if k >= 0), default=-1)
        if answer >= 0:  # the answer begins: the block ended without its closing tag
            end = answer
        opener = min((k for k in (data.find(m, pos, end if end >= 0 else len(data))
                                  for m in self._call_open) if k >= 0), default=-1)
        if opener >= 0 and (answer < 0 or opener < answer):  # a call may begin: hold it
            chunk = self._held.push(data[pos:opener])
            if chunk:
                out.append(ReasoningEvent(chunk))
            # the blanks before the marker go with it (text, or reasoning after all)
            self._maybe, self._maybe_closed = [self._held.release()], False
            return opener
        if end >= 0:
            chunk = self._held.push(data[pos:end])
            self._held.drop()
            if chunk:
                out.append(ReasoningEvent(chunk))
            self._state = "text"
            self._lead = True
            return end if end == answer else end + len(self._close)
        safe = partial_tag_start(data, pos, (self._close, *self._call_open, *self._answer))
        chunk = self._held.push(data[pos:safe])
        if chunk:
            out.append(ReasoningEvent(chunk))
        self._pending = data[safe:]
        return len(data)

    def _header_end(self, data: str, pos: int, *, final: bool = False) -> int | None:
        """Where an optional header at ``pos`` ends (``pos`` when there is none), or
        ``None`` while ``data`` ends before that is known (never when ``final``)."""
        for header in self._headers:
            if data.startswith(header, pos):
                after = pos + len(header)
                if after == len(data):
                    return after if final else None
                if data[after].isspace() or data.startswith(self._close, after):
                    return after
                if not final and self._close.startswith(data[after:]):
                    return None
            elif not final and header.startswith(data[pos:]):
                return None
        return pos

    def _without_header(self, text: str) -> str:
        """``text`` (the start of a block) without an optional header leading it."""
        if not self._headers:
            return text
        start = _skip_space(text, 0)
        after = self._header_end(text, start, final=True)
        return text[after:] if after is not None else text

    def _scan_maybe_call(self, data: str, pos: int, out: list[Event]) -> int:
        """Inside reasoning, from a call's opening marker: hold until it is known."""
        end = data.find(self._close, pos)
        limit = end if end >= 0 else partial_tag_start(
            data, pos, (self._close, *self._call_close, *self._call_open))
        goes_on = self._maybe_scan(data, pos, limit)
        if goes_on is not None:  # reasoning text after the call: it was reasoning
            self._end_maybe(data[pos:goes_on], out)
            return goes_on
        if end >= 0:  # the block closes: the call was reasoning
            self._end_maybe(data[pos:end], out)
            self._held.drop()
            self._state = "text"
            self._lead = True
            return end + len(self._close)
        assert self._maybe is not None
        self._maybe.append(data[pos:limit])
        self._pending = data[limit:]
        return len(data)

    def _maybe_scan(self, data: str, pos: int, limit: int) -> int | None:
        """Follow the held calls' markers in ``data[pos:limit]`` (markers never straddle
        it: a partial one waits in ``_pending``): where text that is neither blanks nor
        the next call follows a call's closing marker, or ``None``."""
        i = pos
        while True:
            if self._maybe_closed:
                j = min(_skip_space(data, i), limit)
                if j >= limit:
                    return None
                closer = next((m for m in self._call_close if data.startswith(m, j)), None)
                if closer is not None:  # the section's end after the call's (or a trailer)
                    i = j + len(closer)
                    continue
                opener = next((m for m in self._call_open if data.startswith(m, j)), None)
                if opener is None:
                    return j
                self._maybe_closed = False  # another call: wait for its end
                i = j + len(opener)
                continue
            found = [(k, m) for m in self._call_close if 0 <= (k := data.find(m, i, limit))]
            if not found:
                return None
            k, marker = min(found)
            self._maybe_closed = True
            i = k + len(marker)

    def _end_maybe(self, more: str, out: list[Event]) -> None:
        """The held call was reasoning after all."""
        held = self._maybe or []
        self._maybe = None
        chunk = self._held.push("".join(held) + more)
        if chunk:
            out.append(ReasoningEvent(chunk))

    def _scan_auto(self, data: str, pos: int, out: list[Event]) -> int:
        # Undecided: a closing tag with no opening one means the reply began
        # inside the block. Hold the text (as parts, never rescanned) until then.
        if not self._auto_text_seen:
            k = _skip_space(data, pos)
            if k == len(data):
                self._auto_parts.append(data[pos:])
                return len(data)
            if data.startswith(self._open, k):
                self._auto_parts = []
                self._state = "text"
                return k
            if len(data) - k < len(self._open) and self._open.startswith(data[k:]):
                self._pending = data[pos:]
                return len(data)
            self._auto_text_seen = True
        end = data.find(self._close, pos)
        # what this feed consumes: up to the closing tag, or up to a partial one (held
        # and fed again next time, so the call watch must not see it twice)
        safe = end if end >= 0 else partial_tag_start(data, pos, (self._close,))
        if self._calls.complete_call_in(data[pos:safe]):
            # a finished call before any closing tag: the reply did not begin inside
            # reasoning, and a closing tag later cannot make the call reasoning
            held = "".join(self._auto_parts)
            self._auto_parts = []
            self._state = "text"
            self._lead = False
            if held:
                out.append(TextEvent(held))
            return pos
        if end >= 0:
            self._auto_parts.append(data[pos:end])
            held = self._without_header("".join(self._auto_parts)).strip()
            self._auto_parts = []
            if held:
                out.append(ReasoningEvent(held))
            self._state = "text"
            self._lead = True
            return end + len(self._close)
        if safe > pos:
            self._auto_parts.append(data[pos:safe])
        self._pending = data[safe:]
        return len(data)

    def close(self) -> list[Event]:
        """End of reply: flush what is held."""
        out: list[Event] = []
        rest, self._pending = self._pending, ""
        if self._state == "auto":
            self._state = "text"
            text = "".join(self._auto_parts) + rest
            self._auto_parts = []
            self._lead = False
            if text:
                out.append(TextEvent(text))
            return out
        if self._state == "reasoning" and self._maybe is not None:
            goes_on = self._maybe_scan(rest, 0, len(rest))
            if goes_on is not None:  # reasoning after the call: all of it is reasoning
                self._maybe.append(rest)
                self._maybe_closed = False
            else:
                self._maybe.append(rest)
            rest = ""
        if self._state == "reasoning" and self._maybe is not None:
            held = "".join(self._maybe)
            self._maybe = None
            if self._maybe_closed:  # the reply ended after the call: it is a call
                out.append(TextEvent(held))
            else:
                chunk = self._held.push(held)
                if chunk:
                    out.append(ReasoningEvent(chunk))
            self._held.drop()
        elif self._state == "reasoning":
            if self._lead and self._header_due:
                rest = self._without_header(rest)
            chunk = self._held.push(rest) if not self._lead else rest.strip()
            if chunk.strip():
                out.append(ReasoningEvent(chunk))
            self._held.drop()
        elif rest:
            out.append(TextEvent(rest))
        return out


class _CallWatch:
    """Notices a complete call (an opening marker, later a closing one) in held text.

    Looks only at the text it is given, plus a short tail of what came before
    (a marker may straddle deltas), so the held text is never rescanned.
    """

    __slots__ = ("_close", "_longest", "_open", "_opened", "_tail")

    def __init__(self, call_open: tuple[str, ...], call_close: tuple[str, ...]) -> None:
        self._open = tuple(m for m in call_open if m.strip())
        self._close = tuple(m for m in call_close if m.strip())
        self._longest = max((len(m) for m in (*self._open, *self._close)), default=0)
        self._opened = False
        self._tail = ""

    def complete_call_in(self, text: str) -> bool:
        """Whether ``text`` (with what came before) completes a call."""
        if not self._open:
            return False
        data = self._tail + text
        self._tail = data[-self._longest:] if self._longest > 1 else ""
        if not self._opened:
            found = [data.find(m) for m in self._open]
            first = min((k for k in found if k >= 0), default=-1)
            if first < 0:
                return False
            self._opened = True
            data = data[first:]
        return not self._close or any(m in data for m in self._close)


def _prompt_start_state(context: FilterContext, open_tag: str, *,
                        starts_unopened: bool = False) -> StartState:
    """Where the reply begins, from what the prompt left open.

    :param starts_unopened: the family's model may begin reasoning without its
        opening tag, or write a lone closing tag first: unless the prompt opened the
        block, the filter waits to see.
    """
    state = context.start_state(open_tag)
    if state is PromptState.THINK_OPEN:
        return "reasoning"
    if state is PromptState.THINK_CLOSED and not starts_unopened:
        return "text"
    return "auto"


def _prompt_start(context: FilterContext, open_tag: str, headers: tuple[str, ...], *,
                  starts_unopened: bool = False) -> tuple[StartState, bool]:
    """Where the reply begins, and whether the prompt already wrote the block's
    optional header (a tail ending ``<|channel>thought`` opened the block too)."""
    if context.prompt_state is None:
        for header in headers:
            if context.start_state(open_tag + header) is PromptState.THINK_OPEN:
                return "reasoning", True
    return _prompt_start_state(context, open_tag, starts_unopened=starts_unopened), False


def think_filter_spec(open_tag: str = "<think>", close_tag: str = "</think>", *,
                      name: str = "think", priority: int = 100) -> StreamFilterSpec:
    """A :class:`StreamFilterSpec` for a ``<think>``-style block.

    It applies when the chat template mentions ``close_tag``. With no template
    at hand (parsing a stored reply by family) it applies in its cautious
    ``auto`` mode, which only acts on a block at the start or a lone closing tag.
    A family with other tags registers its own spec under another name.
    """

    def create(context: FilterContext) -> StreamFilter | None:
        if context.chat_template is not None and close_tag not in context.chat_template:
            return None
        return ReasoningBlockFilter(open_tag, close_tag, _prompt_start_state(context, open_tag),
                                    call_open=context.call_open, call_close=context.call_close)

    return StreamFilterSpec(name=name, priority=priority, create=create,
                            description=f"{open_tag}...{close_tag} as reasoning")


def family_think_filter_spec(open_tag: str, close_tag: str, *, name: str,
                             families: Collection[str], starts_unopened: bool = False,
                             template_uses: Callable[[str], bool] | None = None,
                             priority: int = 100, answer_open: tuple[str, ...] = (),
                             open_headers: tuple[str, ...] = ()) -> StreamFilterSpec:
    """A reasoning filter for a family's own tags (``[THINK]``, ``<seed:think>``, ...).

    It applies to the templates that use the tags (by default: mention
    ``close_tag``) and, with no template at hand, only to replies of one of
    ``families``, so one family's tags never act on another family's replies.

    :param name: the filter's registered name (distinct from ``think``).
    :param starts_unopened: the model may begin reasoning without ``open_tag`` (Apriel
        1.5) or write a lone ``close_tag`` first (MiniMax-M3): unless the prompt ends
        with the opening tag, the filter waits to see whether a lone closing tag comes.
    :param template_uses: decides whether a template uses the tags, for templates
        that assemble them from pieces.
    :param answer_open: markers that open the answer: an open block ends there
        (the marker stays in the text, for the parser).
    :param open_headers: optional words after ``open_tag`` that belong to the marker
        (Gemma 4's ``thought``): dropped when written, not needed when not.
    """
    accepted = frozenset(families)

    def uses(template: str) -> bool:
        return template_uses(template) if template_uses is not None else close_tag in template

    def create(context: FilterContext) -> StreamFilter | None:
        if context.chat_template is None:
            if context.family not in accepted:
                return None
        elif not uses(context.chat_template):
            return None
        start, header_written = _prompt_start(context, open_tag, open_headers,
                                              starts_unopened=starts_unopened)
        return ReasoningBlockFilter(open_tag, close_tag, start, call_open=context.call_open,
                                    call_close=context.call_close, answer_open=answer_open,
                                    open_headers=open_headers, header_written=header_written)

    return StreamFilterSpec(name=name, priority=priority, create=create,
                            description=f"{open_tag}...{close_tag} as reasoning")
