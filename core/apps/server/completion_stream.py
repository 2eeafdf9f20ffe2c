"""A backend turn's events as an OpenAI chat completion: streamed chunks or one response.

:class:`CompletionBuilder` reads one turn's items (``text``, ``reasoning``,
``tool_call_start`` / ``tool_call_delta`` / ``tool_call_end``, ``error``, then the
``TurnEnd``) and writes ``chat.completion.chunk`` payloads as they come; at the
end it writes the finishing chunk (and the usage chunk when asked), or the whole
``chat.completion`` body for a non-streaming request. Both forms come from the
same state, so a streamed reply concatenates to exactly the non-streamed one.
Text and reasoning stream as the model writes them; a call goes out whole when
the model has finished it, so what a client receives as a call is always a
call the parser read, with exactly its typed arguments.

Two request options are enforced here, on what the model writes: ``stop``
strings end the reply's text (the text before the first one is kept), and
``parallel_tool_calls: false`` ends the reply after its first complete call.
Either sets :attr:`CompletionBuilder.should_stop`, and the route then stops the
model.

With ``logprobs`` asked, the turn's ``token_logprob`` events are lined up with the
content (:class:`.completion_logprobs.TokenLedger`): each content chunk carries
``logprobs.content`` for the tokens it completes, and the whole response all of
them.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from ...events import (
    DiagnosticEvent,
    ErrorEvent,
    Event,
    ReasoningEvent,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallEvent,
    ToolCallStartEvent,
)
from ...vocabulary.backend import TurnEnd
from .completion_logprobs import TokenLedger
from .sse import json_text

__all__ = ["CompletionBuilder", "DroppedCall", "StopMatcher", "openai_usage"]

_GIVEN_BACK: Final = frozenset({"truncated_call", "unclosed_call", "malformed_call"})
"""The diagnostics of markup a parser gave back as text (``raw`` is that text)."""


class StopMatcher:
    """Finds the first stop string in text that arrives in pieces, in linear time.

    The reply's text ends before the earliest-starting occurrence of any stop
    string, however the text was cut into pieces. Each stop string has a
    Knuth-Morris-Pratt automaton, so each character is looked at a bounded
    number of times per stop string (amortised), whatever the text and the
    stop strings repeat. The end of the text that could still begin a stop
    string is held back, so no part of one is ever released; once one has
    completed, the match is settled when no other stop string's partial match
    began before it.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(dict.fromkeys(s for s in stops if s))
        self._tables = [_failure_table(stop) for stop in self.stops]
        self._states = [0] * len(self.stops)
        self._openers = re.compile("[" + "".join(sorted({re.escape(s[0]) for s in self.stops}))
                                   + "]") if self.stops else None
        self._seen = 0  # characters fed so far
        self._released = 0  # characters given back so far
        self._pending: deque[str] = deque()  # the fed text not given back yet
        self._cut: int | None = None  # where the earliest complete stop string begins
        self.matched = False

    def feed(self, text: str) -> str:
        """Take text; return what is certain to come before any stop string."""
        if self.matched:
            return ""
        if self._openers is None:
            return text
        self._pending.append(text)
        base = self._seen
        i, n = 0, len(text)
        while i < n:
            if not any(self._states):  # nothing partial: skip to a stop's first character
                found = self._openers.search(text, i)
                if found is None:
                    break
                i = found.start()
            self._step(text[i], base + i)
            i += 1
            if self._cut is not None and self._settled(base + i):
                self.matched = True
                return self._release(self._cut)
        self._seen = base + n
        safe = min(self._seen - state for state in self._states)
        return self._release(safe if self._cut is None else min(safe, self._cut))

    def _step(self, char: str, position: int) -> None:
        for k, stop in enumerate(self.stops):
            state, table = self._states[k], self._tables[k]
            while state and stop[state] != char:
                state = table[state - 1]
            if stop[state] == char:
                state += 1
            if state == len(stop):
                start = position + 1 - state
                if self._cut is None or start < self._cut:
                    self._cut = start
                state = table[state - 1]
            self._states[k] = state

    def _settled(self, seen: int) -> bool:
        """No stop string's partial match began before the complete one."""
        assert self._cut is not None
        return all(seen - state >= self._cut for state in self._states)

    def _release(self, upto: int) -> str:
        """The pending text up to absolute position ``upto``."""
        want = upto - self._released
        out: list[str] = []
        while want > 0 and self._pending:
            piece = self._pending[0]
            if len(piece) <= want:
                out.append(self._pending.popleft())
                want -= len(piece)
            else:
                out.append(piece[:want])
                self._pending[0] = piece[want:]
                want = 0
        released = "".join(out)
        self._released += len(released)
        if self.matched:
            self._pending.clear()
        return released

    def flush(self) -> str:
        """Release the held-back text (the text ended, or something else came first)."""
        if self.matched:
            return ""
        if self._cut is not None:
            self.matched = True
            return self._release(self._cut)
        rest = self._release(self._seen)
        self._states = [0] * len(self.stops)  # text after something else starts afresh
        return rest


def _failure_table(stop: str) -> list[int]:
    """KMP's table: for each prefix of ``stop``, its longest proper border."""
    table = [0] * len(stop)
    border = 0
    for i in range(1, len(stop)):
        while border and stop[i] != stop[border]:
            border = table[border - 1]
        if stop[i] == stop[border]:
            border += 1
        table[i] = border
    return table


def openai_usage(usage: Mapping[str, Any] | None) -> dict[str, int]:
    """A backend's usage as OpenAI's ``usage`` object."""
    usage = usage or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


@attrs.frozen
class DroppedCall:
    """A call the model began but did not finish: not returned as a call.

    :ivar name: the tool it was calling (``""`` when the cut came before its name).
    :ivar reason: ``length`` (the token limit cut it), or ``malformed`` (the
        parser read its markup as text: it is in the content).
    """

    name: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        """The entry of the ``dropped_tool_calls`` extension field."""
        return {"name": self.name, "reason": self.reason}


class CompletionBuilder:
    """Builds one chat completion from one backend turn.

    A call is sent when the model has finished writing it (its ``tool_call_end``):
    its header and its arguments, ``json.dumps`` of the typed arguments, in one
    chunk. So the arguments are always exactly the call's final value (one JSON
    object, each key once), and a call the model never finished (the token limit
    cut it) is never sent as a call: it is listed in the choice's
    ``dropped_tool_calls`` extension field instead.

    :param completion_id: the ``chatcmpl-...`` id.
    :param created: the Unix time stamp of the request.
    :param model: the model id to report.
    :param make_call_id: makes a call id when the parser gave none.
    :param stop: stop strings (``stop``).
    :param parallel_tool_calls: ``False``: end after the first complete call.
    :param include_usage: chunks carry ``usage: null`` and a usage chunk ends the stream.
    :param legacy_functions: answer in the deprecated ``functions`` shape:
        ``function_call`` instead of ``tool_calls`` (one call at most), and
        ``finish_reason: "function_call"``.
    :param logprobs: report the content tokens' log probabilities (OpenAI's
        ``logprobs``), from the turn's ``token_logprob`` events.
    """

    def __init__(self, completion_id: str, created: int, model: str, *,
                 make_call_id: Callable[[int], str], stop: Sequence[str] = (),
                 parallel_tool_calls: bool = True, include_usage: bool = False,
                 legacy_functions: bool = False, logprobs: bool = False) -> None:
        self.completion_id = completion_id
        self.created = created
        self.model = model
        self.make_call_id = make_call_id
        self.legacy_functions = legacy_functions
        self.parallel_tool_calls = parallel_tool_calls and not legacy_functions
        self.include_usage = include_usage
        self._stop = StopMatcher(stop)
        self._tail = ""  # the latest text, held one item: it may end in markup of a cut call
        # markup the parser gave back as text, written right after the tail: dropped if
        # the limit cut the reply, else released after the tail
        self._suspect = ""
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._open: dict[int, tuple[str, str]] = {}  # parser index -> (name, id), unfinished
        self._calls: list[dict[str, Any]] = []
        self._dropped: list[DroppedCall] = []
        self._end: TurnEnd | None = None
        self._ledger = TokenLedger() if logprobs else None
        self._logprobs: list[dict[str, Any]] = []  # every content token's entry so far
        self.error: ErrorEvent | None = None
        self.should_stop = False

    # -- chunks --------------------------------------------------------------------------

    def chunk(self, delta: Mapping[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        """A ``chat.completion.chunk`` payload with one choice's ``delta``."""
        payload: dict[str, Any] = {
            "id": self.completion_id, "object": "chat.completion.chunk",
            "created": self.created, "model": self.model, "system_fingerprint": None,
            "choices": [{"index": 0, "delta": dict(delta), "logprobs": None,
                         "finish_reason": finish_reason}]}
        if self.include_usage:
            payload["usage"] = None
        return payload

    def first_chunk(self) -> dict[str, Any]:
        """The stream's first chunk: the assistant's role."""
        return self.chunk({"role": "assistant", "content": ""})

    def feed(self, item: Event | TurnEnd) -> list[dict[str, Any]]:
        """Take one item of the turn; return the chunks it adds (often one, maybe none)."""
        if isinstance(item, TurnEnd):
            self._end = item
            return []
        if self.should_stop:
            return []
        if self._ledger is not None and self._ledger.take(item):
            return []
        if isinstance(item, DiagnosticEvent):
            named_only = any(item.raw == name for name, _ in self._open.values())
            if item.code in _GIVEN_BACK and item.raw and not named_only \
                    and self._tail.endswith(item.raw):
                # the markup ends the held text: it stays after what precedes it
                self._tail = self._tail[:len(self._tail) - len(item.raw)]
                self._suspect = item.raw + self._suspect
            return []
        chunks = self._release()
        if isinstance(item, TextEvent):
            self._tail = item.text
            return chunks
        chunks.extend(self._content_chunks(self._stop.flush()))
        if self.should_stop:
            return chunks
        if isinstance(item, ReasoningEvent):
            if item.text:
                self._reasoning.append(item.text)
                chunks.append(self.chunk({"reasoning_content": item.text}))
        elif isinstance(item, ToolCallStartEvent | ToolCallDeltaEvent):
            known = self._open.get(item.index)
            self._open[item.index] = (item.name or (known[0] if known else ""),
                                      item.id or (known[1] if known else ""))
        elif isinstance(item, ToolCallEndEvent | ToolCallEvent):  # the latter: older backends
            chunks.extend(self._finished_call(item))
        elif isinstance(item, ErrorEvent):
            self.error = self.error or item
        return chunks

    def _release(self) -> list[dict[str, Any]]:
        """The held text is content after all (something came after it), in the order
        the model wrote it: the text, then the markup given back at its end."""
        held, self._tail, self._suspect = self._tail + self._suspect, "", ""
        if not held:
            return []
        return self._content_chunks(self._stop.feed(held))

    def _content_chunks(self, text: str) -> list[dict[str, Any]]:
        chunks: list[dict[str, Any]] = []
        if text:
            self._content.append(text)
            chunks.append(self.chunk({"content": text}))
            if self._ledger is not None:
                entries = self._ledger.release(text)
                if self._stop.matched:  # nothing more comes: the cut tokens too
                    entries.extend(self._ledger.finish())
                self._logprobs.extend(entries)
                chunks[-1]["choices"][0]["logprobs"] = {"content": entries, "refusal": None}
        if self._stop.matched:
            self.should_stop = True
        return chunks

    def _finished_call(self, item: ToolCallEndEvent | ToolCallEvent) -> list[dict[str, Any]]:
        opened = self._open.pop(item.index, ("", ""))
        if self._calls and not self.parallel_tool_calls:
            return []  # only the first call of the reply is answered
        function = {"name": item.name or opened[0], "arguments": json_text(dict(item.arguments))}
        call: dict[str, Any] = {"id": item.id or opened[1] or self.make_call_id(item.index),
                                "type": "function", "function": function}
        self._calls.append(call)
        if not self.parallel_tool_calls:
            self.should_stop = True
        if self.legacy_functions:
            return [self.chunk({"function_call": dict(function)})]
        return [self.chunk({"tool_calls": [{"index": len(self._calls) - 1, **call}]})]

    # -- the end -------------------------------------------------------------------------

    @property
    def finish_reason(self) -> str:
        """``stop``, ``length``, ``tool_calls`` or ``function_call``, from the turn's
        end and what was read."""
        if self._stop.matched:
            return "stop"
        if self._end is not None and self._end.reason == "length":
            return "length"
        if self._calls:
            return "function_call" if self.legacy_functions else "tool_calls"
        return "stop"

    @property
    def usage(self) -> dict[str, int]:
        """The turn's token counts in OpenAI's form."""
        return openai_usage(self._end.usage if self._end else None)

    @property
    def dropped_calls(self) -> tuple[DroppedCall, ...]:
        """The calls the model began but did not finish (known once the turn ended)."""
        return tuple(self._dropped)

    def _settle(self) -> list[dict[str, Any]]:
        """The held-back text; the unfinished calls set aside (once).

        A reply the token limit cut keeps out of its content the markup the parser
        gave back as text (an unfinished call, a section's leftover after its last
        complete call).
        """
        cut = self._end is not None and self._end.reason == "length"
        markup = ""
        if cut and self._suspect and not self.should_stop:
            markup, self._suspect = self._suspect, ""
        chunks = self._release()
        chunks.extend(self._content_chunks(self._stop.flush()))
        if not self.should_stop:
            reason = "length" if cut else "malformed"
            unfinished = [name for name, _ in self._open.values()]
            if markup and not unfinished:
                unfinished = [""]  # cut inside the call's header: its name never came
            self._dropped.extend(DroppedCall(name, reason) for name in unfinished)
        self._open.clear()
        return chunks

    def _finish_logprobs(self) -> list[dict[str, Any]]:
        """The entries of content tokens still open when the reply ended."""
        if self._ledger is None:
            return []
        rest = self._ledger.finish()
        self._logprobs.extend(rest)
        return rest

    def _choice_extras(self) -> dict[str, Any]:
        if not self._dropped:
            return {}
        return {"dropped_tool_calls": [d.to_dict() for d in self._dropped]}

    def closing_chunks(self) -> list[dict[str, Any]]:
        """The held-back text, the finishing chunk (with ``dropped_tool_calls`` when a
        call was left unfinished) and (when asked) the usage chunk."""
        chunks = self._settle()
        rest = self._finish_logprobs()
        last = self.chunk({}, self.finish_reason)
        if rest:
            last["choices"][0]["logprobs"] = {"content": rest, "refusal": None}
        last["choices"][0].update(self._choice_extras())
        chunks.append(last)
        if self.include_usage:
            chunks.append({"id": self.completion_id, "object": "chat.completion.chunk",
                           "created": self.created, "model": self.model,
                           "system_fingerprint": None, "choices": [], "usage": self.usage})
        return chunks

    def response(self) -> dict[str, Any]:
        """The whole ``chat.completion`` body (call after the turn has ended)."""
        self._settle()
        self._finish_logprobs()
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(self._content) or None}
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        if self._calls and self.legacy_functions:
            message["function_call"] = dict(self._calls[0]["function"])
        elif self._calls:
            message["tool_calls"] = list(self._calls)
        elif message["content"] is None:
            message["content"] = ""
        logprobs = None if self._ledger is None else {"content": self._logprobs,
                                                      "refusal": None}
        choice = {"index": 0, "message": message, "logprobs": logprobs,
                  "finish_reason": self.finish_reason, **self._choice_extras()}
        return {"id": self.completion_id, "object": "chat.completion", "created": self.created,
                "model": self.model, "system_fingerprint": None, "choices": [choice],
                "usage": self.usage}
