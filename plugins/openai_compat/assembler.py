"""Assembling streamed ``tool_calls`` deltas into complete calls.

OpenAI streams each call as deltas keyed by ``index``: the first carries the
call's ``id`` and ``function.name``, the rest carry pieces of
``function.arguments`` (a JSON text) to be concatenated. Compatible servers
vary, and :class:`ToolCallAssembler` accepts all of these:

* id and name once, repeated on every delta (same value), or growing (each
  delta repeats the whole value so far); an id that arrives late;
* several calls interleaved by ``index``;
* no ``index`` (Gemini): a call is found by its ``id``; a delta with neither
  continues the latest call;
* one ``index`` reused for each call, every call sent whole in its own chunk
  (Gemini): a different ``id``, a different name, or a new name-and-arguments
  delta after complete arguments opens the next call;
* an ``id`` repeated for a second call: that call gets no id here and the chat
  loop gives it a fresh one, so ids stay unique in the history;
* arguments sent as an object instead of a JSON text, or as a JSON text
  encoded twice.

Calls get their own ``index``: their position in the reply (0, 1, ...), in the
order they begin; the wire ``index`` only tells deltas apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from toolwire.plugin_api import (
    ErrorEvent,
    Event,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)

__all__ = ["ToolCallAssembler", "parse_arguments"]

_MAX_RAW_SHOWN = 500


@attrs.define
class _Slot:
    position: int
    wire_index: int | None
    id: str = ""
    name: str = ""
    fragments: list[str] = attrs.Factory(list)
    started: bool = False
    extra: dict[str, Any] = attrs.Factory(dict)

    @property
    def arguments(self) -> str:
        return "".join(self.fragments)


def _complete_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _shown(raw: str) -> str:
    return repr(raw if len(raw) <= _MAX_RAW_SHOWN else raw[:_MAX_RAW_SHOWN] + "...")


def parse_arguments(name: str, raw: str,
                    parameters: Mapping[str, Any] | None) -> dict[str, Any] | str:
    """Read one call's finished argument text.

    :param parameters: the tool's parameters schema, ``None`` for a tool that was
        not offered (the dispatcher then refuses it by name).
    :returns: the arguments, or a message saying why they are unusable.
    """
    text = raw.strip()
    if not text:
        required = (parameters or {}).get("required") or []
        if required:
            return (f"the model called {name!r} with empty arguments, but it requires "
                    f"{', '.join(map(repr, required))}; raw arguments: {_shown(raw)}")
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        return (f"the model's arguments for {name!r} are not valid JSON ({exc}); "
                f"raw arguments: {_shown(raw)}")
    if isinstance(value, str):  # some servers encode the JSON text twice
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if not isinstance(value, dict):
        return (f"the model's arguments for {name!r} are not a JSON object; "
                f"raw arguments: {_shown(raw)}")
    return value


class ToolCallAssembler:
    """Turns a reply's ``tool_calls`` deltas into call events.

    :param tools: ``{tool name: parameters schema}`` of the offered tools; it
        decides whether empty arguments mean ``{}``.

    :meth:`feed` returns ``tool_call_start`` and ``tool_call_delta`` events as the
    deltas arrive; :meth:`finish` returns one ``tool_call`` event per call, or an
    ``error`` event (kind ``invalid_arguments``) for a call whose arguments are
    not a JSON object.
    """

    def __init__(self, tools: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self._tools = dict(tools or {})
        self._slots: list[_Slot] = []
        self._by_index: dict[int, _Slot] = {}
        self._by_id: dict[str, _Slot] = {}

    @property
    def count(self) -> int:
        """How many calls have been seen so far."""
        return len(self._slots)

    def feed(self, deltas: Iterable[Mapping[str, Any]]) -> list[Event]:
        """Take one chunk's ``delta.tool_calls`` list; return the events it makes."""
        events: list[Event] = []
        for delta in deltas:
            if isinstance(delta, Mapping):
                self._feed_one(delta, events)
        return events

    def _feed_one(self, delta: Mapping[str, Any], events: list[Event]) -> None:
        raw_index = delta.get("index")
        index = raw_index if isinstance(raw_index, int) and not isinstance(raw_index, bool) \
            else None
        raw_id = delta.get("id")
        call_id = raw_id if isinstance(raw_id, str) else ""
        function = delta.get("function")
        function = function if isinstance(function, Mapping) else {}
        raw_name = function.get("name")
        name = raw_name if isinstance(raw_name, str) else ""
        arguments = function.get("arguments")
        if isinstance(arguments, Mapping):
            fragment = json.dumps(dict(arguments), ensure_ascii=False)
        else:
            fragment = arguments if isinstance(arguments, str) else ""
        slot = self._slot_for(index, call_id, name, fragment)
        if call_id and not slot.id and call_id not in self._by_id:
            slot.id = call_id  # a late id
            self._by_id[call_id] = slot
        if name and (not slot.name or name.startswith(slot.name)):
            slot.name = name  # first, repeated or grown
        extra = delta.get("extra_content")
        if isinstance(extra, Mapping):
            slot.extra.update(extra)
        if fragment:
            slot.fragments.append(fragment)
        if slot.name and not slot.started:
            slot.started = True
            events.append(ToolCallStartEvent(slot.position, slot.name, slot.id))
            if slot.arguments:  # includes arguments that came before the name
                events.append(ToolCallDeltaEvent(slot.position, slot.name, slot.arguments,
                                                 None, slot.id))
        elif fragment and slot.started:
            events.append(ToolCallDeltaEvent(slot.position, slot.name, fragment, None, slot.id))

    def _new_slot(self, index: int | None, call_id: str) -> _Slot:
        slot = _Slot(len(self._slots), index, call_id)
        self._slots.append(slot)
        if index is not None:
            self._by_index[index] = slot
        if call_id:
            self._by_id[call_id] = slot
        return slot

    @staticmethod
    def _opens_next(slot: _Slot, call_id: str, name: str, fragment: str) -> bool:
        """Whether a delta addressed to ``slot`` really begins another call."""
        if call_id and slot.id and call_id != slot.id:
            return True  # one index reused by the next call
        if name and slot.name and not (name.startswith(slot.name) or slot.name.startswith(name)):
            return True  # another tool under the same key
        # a call header with arguments after a call that is already complete
        return bool(name and fragment.strip() and slot.fragments
                    and _complete_object(slot.arguments))

    def _slot_for(self, index: int | None, call_id: str, name: str, fragment: str) -> _Slot:
        if call_id and call_id in self._by_id:
            slot: _Slot | None = self._by_id[call_id]
        elif index is not None:
            slot = self._by_index.get(index)
        else:
            slot = self._slots[-1] if self._slots else None  # continues the latest call
        if slot is None:
            return self._new_slot(index, call_id)
        if self._opens_next(slot, call_id, name, fragment):
            # a repeated id stays with its first call; the loop gives this one a fresh id
            return self._new_slot(index, "" if call_id in self._by_id else call_id)
        if index is not None:
            self._by_index[index] = slot
        return slot

    def provider_extras(self) -> dict[str, Mapping[str, Any]]:
        """``extra_content`` the provider attached to calls, by call id.

        Gemini puts ``thought_signature`` there and wants it back when the call
        is replayed in the next request.
        """
        return {s.id: dict(s.extra) for s in self._slots if s.id and s.extra}

    def finish(self, *, truncated: bool = False) -> list[Event]:
        """The complete calls, in order; ``error`` events for unusable ones.

        :param truncated: the reply hit the token limit (said in error messages).
        """
        events: list[Event] = []
        for slot in self._slots:
            raw = slot.arguments
            if not slot.name:
                events.append(ErrorEvent(
                    "invalid_arguments",
                    f"the model sent a tool call without a function name; raw arguments: "
                    f"{_shown(raw)}"))
                continue
            parsed = parse_arguments(slot.name, raw, self._tools.get(slot.name))
            if isinstance(parsed, str):
                if truncated:
                    parsed += " (the reply hit the token limit while writing this call)"
                events.append(ErrorEvent("invalid_arguments", parsed))
                continue
            events.append(ToolCallEndEvent(slot.name, parsed, slot.id, slot.position))
        return events
