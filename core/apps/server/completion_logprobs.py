"""Which generated tokens the reply's content came from, for OpenAI's ``logprobs``.

A backend asked for log probabilities (``ModelRequest.logprobs``) yields a
``token_logprob`` event per token, just before the events that reading the
token's text produced. The reply's *raw* text is the tokens' texts end to end;
the parser turns it into content, reasoning and calls, holding text back while
it may still be markup. :class:`TokenLedger` lines the two up:

* each ``text`` event is found in the raw text (a parser passes content through
  as the model wrote it): at its end when the raw text ends with it (the parser
  held nothing back, the usual case), else from where the previous one ended;
  the tokens under it get a *share*: how many of the content's characters are
  theirs. Reasoning is found the same way and shares nothing; a call's events
  (and reasoning not found as it is) move the search to the start of the latest
  token (the call's markup ended in it). Text found only without its leading
  blanks (a separator the parser kept from before a call) is found there, the
  blanks going with its first token. Text not found at all (a parser that
  rewrote it) goes to the latest token, and the search moves past it and every token
  before it (an empty one too: tokens are reported in order).
* as the builder releases content, the shares are used up in order, and a token
  is reported once its share is released and no later text can still be its
  (the search has passed its end and a later token came): a token split across
  text the parser or the builder held back is reported once, in order, when it
  is whole.

A token's ``token`` is the part of its text that is content (all of it, but for
a token that is part markup or reasoning, or one a stop string cut), so the
reported tokens' texts concatenate to exactly the content; a token whose text is
all reasoning or markup is not reported (OpenAI reports content tokens only).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import attrs

from ...events import Event, ReasoningEvent, TextEvent, TokenLogprobEvent

__all__ = ["TokenLedger", "logprobs_entry"]


def logprobs_entry(token: TokenLogprobEvent, text: str) -> dict[str, Any]:
    """OpenAI's entry of ``logprobs.content`` for ``token``, whose content is ``text``:
    its own bytes when all its text is content, else ``text``'s UTF-8."""
    own = text == token.text
    return {"token": text, "logprob": token.logprob,
            "bytes": list(token.bytes) if own else list(text.encode("utf-8")),
            "top_logprobs": list(token.top_logprobs)}  # the event's own: never changed


@attrs.define
class _Share:
    token: TokenLogprobEvent | None  # None: content no token accounts for
    end: int  # where the token's text ends in the raw text
    chars: int  # the content characters that are this token's
    released: list[str] = attrs.field(factory=list)
    taken: int = 0


class TokenLedger:
    """Lines up one turn's ``token_logprob`` events with its content (see the module)."""

    def __init__(self) -> None:
        self._window = ""  # the raw text from ``_base`` on
        self._base = 0
        self._cursor = 0  # where the next search starts (absolute)
        self._tokens: deque[tuple[int, int, TokenLogprobEvent]] = deque()  # (start, end, token)
        self._end = 0  # the raw text's length
        self._latest: TokenLogprobEvent | None = None
        self._shares: deque[_Share] = deque()

    # -- what the backend yields -----------------------------------------------------------

    def take(self, item: Event) -> bool:
        """Read one item of the turn; ``True`` when it was a token's (nothing more to
        do with it), ``False`` for the parser's events (see :meth:`event`)."""
        if isinstance(item, TokenLogprobEvent):
            self.token(item)
            return True
        self.event(item)
        return False

    def token(self, token: TokenLogprobEvent) -> None:
        """A generated token (its text follows it into the parser)."""
        start = self._end
        self._end += len(token.text)
        self._window += token.text
        self._tokens.append((start, self._end, token))
        self._latest = token

    def event(self, event: Event) -> None:
        """An event the parser wrote: ``text`` gets its shares, the rest moves the search."""
        if isinstance(event, TextEvent):
            self._content(event.text)
        elif isinstance(event, ReasoningEvent) and event.text:
            found = self._find(event.text)
            if found is not None:
                self._advance(found + len(event.text))
            elif self._tokens:  # rewritten: what follows is after the latest token's start
                self._advance(self._tokens[-1][0])
        elif event.type.startswith("tool_call") and self._tokens:
            # the call's markup ends inside the latest token: what follows is after
            # that token's start
            self._advance(self._tokens[-1][0])

    def _find(self, text: str) -> int | None:
        if not text:
            return None
        start = self._cursor - self._base
        if self._window.endswith(text) and len(self._window) - len(text) >= start:
            return self._end - len(text)
        at = self._window.find(text, start)
        return None if at < 0 else self._base + at

    def _content(self, text: str) -> None:
        if not text:
            return
        start, moved = self._find(text), 0
        if start is None:
            # blanks the parser moved (the separator kept from before a call, written
            # before the text after it): the text is found without them, and they go
            # with the token where it is found
            found = text.lstrip()
            start = self._find(found) if found != text else None
            moved, text = len(text) - len(found), found
        if start is None:  # not as the model wrote it: the latest token's
            self._share(self._latest, self._end, len(text) + moved)
            self._advance(self._end)
            # every token still listed is the latest or came before it (an empty one at
            # the cursor): none may get a share after the latest's, so none is found later
            self._tokens.clear()
            return
        stop = start + len(text)
        for begin, end, token in self._tokens:
            if begin >= stop:
                break
            inside = min(end, stop) - max(begin, start)
            if inside > 0 or (begin == end and start <= begin):
                self._share(token, end, max(inside, 0) + moved)
                moved = 0
        self._advance(stop)

    def _share(self, token: TokenLogprobEvent | None, end: int, chars: int) -> None:
        last = self._shares[-1] if self._shares else None
        if last is not None and token is not None and last.token is token:
            last.chars += chars  # the rest of a token the parser held back
        else:
            self._shares.append(_Share(token, end, chars))

    def _advance(self, to: int) -> None:
        self._cursor = max(self._cursor, to)
        while self._tokens and self._tokens[0][1] <= self._cursor \
                and self._tokens[0][0] < self._cursor:
            self._tokens.popleft()
        cut = self._cursor - self._base
        if cut > 4096 and cut * 2 > len(self._window):  # keep the window short, cheaply
            self._window = self._window[cut:]
            self._base = self._cursor

    # -- what the builder releases ------------------------------------------------------------

    def release(self, text: str) -> list[dict[str, Any]]:
        """Content the reply now carries: the entries of the tokens it completes."""
        at = 0
        for share in self._shares:
            if at >= len(text):
                break
            take = min(share.chars - share.taken, len(text) - at)
            if take > 0:
                share.released.append(text[at:at + take])
                share.taken += take
                at += take
        if at < len(text):  # more content than the tokens account for
            self._shares.append(_Share(None, self._cursor, len(text) - at, [text[at:]],
                                       len(text) - at))
        return self._complete(final=False)

    def finish(self) -> list[dict[str, Any]]:
        """The reply's content is complete: the entries of the tokens it holds, each
        with the part of it that was released; tokens never released are dropped."""
        return self._complete(final=True)

    def _complete(self, *, final: bool) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        while self._shares:
            share = self._shares[0]
            # only the latest token can still gain text (see _content)
            whole = share.taken == share.chars and share.end <= self._cursor \
                and (share.token is not self._latest or share.token is None)
            if not (whole or final):
                break
            self._shares.popleft()
            if share.token is not None and (share.taken or (share.chars == 0 and whole)):
                entries.append(logprobs_entry(share.token, "".join(share.released)))
        return entries
