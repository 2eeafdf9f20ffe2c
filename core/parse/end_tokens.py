"""Dropping a template's end-of-turn token from a reply's text, and the end token a
reply ends with (:class:`FinalEndTokenTrim`, silently: a model ends its turn with one).

A backend that does not stop on the template's end-of-turn token (``<|im_end|>``,
``<seed:eos>``, ``</s>``...), or a stored reply that kept it, hands the token to the
parser as text. :class:`EndTokenDropper` wraps the parser and removes the token from
the text it emits, never from arguments or reasoning: a value may hold the same
characters. A token cut between two text events is held until it is known.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..events import DiagnosticEvent, Event, TextEvent
from .protocol import EndReason, StreamParser, _close_stage
from .streaming import partial_tag_start

__all__ = ["EndTokenDropper", "FinalEndTokenTrim"]


class EndTokenDropper:
    """A parser whose text events lose ``tokens`` (each with a ``stray_markup`` note).

    :param parser: the family's parser.
    :param tokens: the end-of-turn tokens (blank ones are ignored).
    """

    def __init__(self, parser: StreamParser, tokens: Sequence[str]) -> None:
        self._parser = parser
        self._tokens = tuple(sorted({t for t in tokens if t.strip()}, key=len, reverse=True))
        self._firsts = frozenset(t[0] for t in self._tokens)
        self._held = ""

    def feed(self, text: str) -> list[Event]:
        """Feed a delta to the parser; drop the tokens from its text."""
        return self._filter(self._parser.feed(text), final=False)

    def close(self, end_reason: EndReason = "stop") -> list[Event]:
        """Close the parser; what is held is text."""
        return self._filter(_close_stage(self._parser, end_reason), final=True)

    def _filter(self, events: list[Event], *, final: bool) -> list[Event]:
        if not self._tokens or (not self._held and not any(
                type(e) is TextEvent and any(c in e.text for c in self._firsts)
                for e in events)):
            if self._held and (final or any(type(e) is not TextEvent for e in events)):
                events = [TextEvent(self._flush()), *events]
            return events
        out: list[Event] = []
        for event in events:
            if type(event) is not TextEvent:
                if self._held:
                    out.append(TextEvent(self._flush()))
                out.append(event)
                continue
            self._text(self._held + event.text, out)
        if final and self._held:
            out.append(TextEvent(self._flush()))
        return out

    def _text(self, text: str, out: list[Event]) -> None:
        self._held = ""
        pos = 0
        while True:
            found = [(k, t) for t in self._tokens if (k := text.find(t, pos)) >= 0]
            if not found:
                break
            k, token = min(found, key=lambda f: (f[0], -len(f[1])))
            if k > pos:
                out.append(TextEvent(text[pos:k]))
            out.append(DiagnosticEvent("stray_markup", "the template's end-of-turn token in "
                                                       "the text; dropped", token))
            pos = k + len(token)
        safe = partial_tag_start(text, pos, self._tokens)
        if safe > pos:
            out.append(TextEvent(text[pos:safe]))
        self._held = text[safe:]

    def _flush(self) -> str:
        held, self._held = self._held, ""
        return held


class FinalEndTokenTrim:
    """A parser fed a reply without the end token the reply ends with (nor the blanks
    after it): dropped without a diagnostic, since a model that ends its turn writes one.

    The end of each delta is held while it could still be such a token; a token
    followed by more text is fed on. Blanks after a whole token are gathered, not joined
    to it delta by delta (a model that writes blanks after its end token one at a time
    would make that quadratic).
    """

    def __init__(self, parser: StreamParser, tokens: tuple[str, ...]) -> None:
        self._parser = parser
        self._tokens = tokens  # longest first
        self._span = len(tokens[0])
        self._firsts = frozenset(t[0] for t in tokens)
        self._held = ""
        self._whole = False  # what is held is a whole token (and blanks)
        self._blanks: list[str] = []  # blanks after it, since

    def feed(self, text: str) -> list[Event]:
        """Feed the parser what cannot be a final end token."""
        if not text:  # (nothing to decide; joining what is held for it costs each time)
            return []
        if self._held:
            if self._whole and text.isspace():
                self._blanks.append(text)
                return []
            text = self._take_held() + text
        stripped = text.rstrip() if text[-1:].isspace() else text
        if self._firsts.isdisjoint(text[-self._span:]) and (
                stripped is text or self._firsts.isdisjoint(stripped[-self._span:])):
            return self._parser.feed(text)  # the common case: nothing held
        whole = next((t for t in self._tokens if stripped.endswith(t)), None)
        cut = (len(stripped) - len(whole) if whole is not None
               else partial_tag_start(text, 0, self._tokens))
        self._held = text[cut:]
        self._whole = whole is not None
        return self._parser.feed(text[:cut]) if cut else []

    def _take_held(self) -> str:
        held = self._held + "".join(self._blanks) if self._blanks else self._held
        self._held, self._whole, self._blanks = "", False, []
        return held

    def close(self, end_reason: EndReason = "stop") -> list[Event]:
        """Feed what is held unless it is a whole end token; close the parser."""
        held = self._take_held()
        fed = self._parser.feed(held) if held and held.rstrip() not in self._tokens else []
        return [*fed, *_close_stage(self._parser, end_reason)]
