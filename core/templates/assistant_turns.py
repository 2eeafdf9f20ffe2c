"""Rendering assistant tool-call turns through a real template and cutting out the model's text.

Used by parser selection (to verify a claim) and by the conformance kit
(:mod:`toolwire.testing.conformance` explains how the cut is made)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import attrs

from ..errors import (
    TemplateError,
)
from ..vocabulary.call_ids import default_call_id
from .chat_template import get_chat_template
from .history_shape import HISTORY_SHAPES

__all__ = ["AssistantTurnRenderer", "RenderedReply"]

Call = tuple[str, dict[str, Any]]

_USER_MESSAGE: Final = {"role": "user", "content": "hi"}
_REMEMBERED: Final = 256

_PROBE_CONTENT = "toolwireprobecontent"
_PROBE_TOOL = "toolwire_probe_tool"
_PROBE_TOOL_2 = "toolwire_second_probe"
_PROBE_PARAM = "toolwire_probe_param"
_PROBE_VALUE = "toolwireprobevalue"
_SENTINELS = re.compile("|".join(re.escape(s) for s in (
    _PROBE_CONTENT, _PROBE_TOOL, _PROBE_TOOL_2, _PROBE_PARAM, _PROBE_VALUE)))

REASONING_TAGS = ("<think>", "</think>")  # written by many templates; markup to the harness

_FIXED_NOW = datetime(2026, 1, 15, 12, 0, 0)

# -- rendering an assistant turn --------------------------------------------------------


@attrs.frozen
class RenderedReply:
    """One assistant turn rendered through a template, cut to what the model wrote.

    :ivar text: the model's text: after the generation prompt (or header), before
        the end-of-turn marker. Feed this to the parser.
    :ivar prompt_tail: everything rendered before ``text`` (pass it as
        ``build_pipeline(..., prompt_tail=...)`` so the stream filters know, e.g.,
        that the reply begins inside an open ``<think>`` block).
    :ivar turn: the whole rendered assistant turn, header and end marker included.
    """

    text: str
    prompt_tail: str
    turn: str


def _call_message(calls: Sequence[Call], content: str | None,
                  ids: Sequence[str], string_arguments: bool = False) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function",
             "function": {"name": name,
                          "arguments": json.dumps(arguments, ensure_ascii=False)
                          if string_arguments else arguments}}
            for call_id, (name, arguments) in zip(ids, calls, strict=True)]
    return message


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _common_suffix(a: str, b: str) -> int:
    return _common_prefix(a[::-1], b[::-1])


_CLOSERS = ">]\n\t "
_OPENERS = "<[\n\t "


def _boundary_before(text: str, at: int) -> int:
    """The last cut at or before ``at`` that follows a tag's end or a blank (or 0)."""
    while at > 0 and text[at - 1] not in _CLOSERS:
        at -= 1
    return at


def _boundary_after(text: str, at: int) -> int:
    """How much of ``text`` from ``at`` on is an end marker starting at a tag or blank.

    ``at`` moves forward to the next ``<``, ``[`` or blank; returns the length of
    ``text[at:]`` (0 when there is none).
    """
    while at < len(text) and text[at] not in _OPENERS:
        at += 1
    return len(text) - at


def _end_of_turn_inside(turn: str, end_of_turn: str, start: int) -> int:
    """Where the model's text ends in a turn that ends otherwise than a plain one.

    Command R7B follows a tool-call turn with an opened chatbot turn of its own
    (``<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|>...``):
    the longest end of ``end_of_turn`` starting at a tag that the turn holds
    (its last occurrence), with nothing but tags after it, is where the model
    stopped (gpt-oss ends text turns with ``<|return|>``, which a call's value
    may hold). ``len(turn)`` when there is none.
    """
    at = 0
    while True:
        at = end_of_turn.find("<", at)
        if at < 0:
            return len(turn)
        found = turn.rfind(end_of_turn[at:], start)
        if found >= 0 and _TAGS_ONLY.fullmatch(turn, found):
            return found
        at += 1


_TAGS_ONLY = re.compile(r"(?:<[^<>\s]+>|\s)*")


def _probe_tools() -> list[dict[str, Any]]:
    parameters = {"type": "object", "properties": {_PROBE_PARAM: {"type": "string",
                                                                  "description": "a probe"}},
                  "required": [_PROBE_PARAM]}
    return [{"type": "function", "function": {"name": name, "description": "a probe",
                                              "parameters": parameters}}
            for name in (_PROBE_TOOL, _PROBE_TOOL_2)]


def _distinctive(token: str) -> bool:
    return len(token) >= 3 and any(c.isalpha() or c in "<>[]|" for c in token)


def _tokens(text: str) -> list[str]:
    return [t for fragment in _SENTINELS.split(text) for t in fragment.split()
            if _distinctive(t)]


class AssistantTurnRenderer:
    """Renders assistant tool-call turns through a chat template, generically.

    On creation it learns, from a few probe renders, where the model's text
    begins and ends, whether the template keeps content beside calls, whether it
    renders several calls in one turn, and its markers; the module docstring
    explains the method and its limits.

    :param source: the chat template source.
    :param make_call_id: makes call ids in the form the template requires.
    :param prefetch: ``(calls, tools)`` turns the caller will render, rendered in the
        same job as the probes (in the usual shape of a call turn).
    :raises TemplateError: the template cannot render a tool-call turn this way.

    :ivar header: what a plain-text assistant turn starts with.
    :ivar end_of_turn: what it ends with (removed from the model's text).
    :ivar content_with_calls: the template keeps the content beside tool calls.
    :ivar parallel_calls: the template renders several calls in one turn;
        ``parallel_reason`` says why not.
    :ivar string_arguments: the template renders a call's arguments only when
        they come as a JSON string (OpenAI's wire form), not as an object.
    :ivar markers: the template's own markup, learnt from a probe call.
    :ivar notes: what else was learnt, in words (for reports).
    """

    def __init__(self, source: str, *,
                 make_call_id: Callable[[int], str] = default_call_id,
                 prefetch: Sequence[tuple[Sequence[Call], Sequence[Mapping[str, Any]]]] = ()
                 ) -> None:
        self._template = get_chat_template(source)
        self._source = source
        self._make_call_id = make_call_id
        self._empty: str | None = ""
        self.string_arguments = False
        self._rendered: dict[str, str | TemplateError] = {}
        self.notes: list[str] = []
        tools = _probe_tools()
        self._probe_ids = [make_call_id(0), make_call_id(1)]
        one: list[Call] = [(_PROBE_TOOL, {_PROBE_PARAM: _PROBE_VALUE})]
        two = [*one, (_PROBE_TOOL_2, {_PROBE_PARAM: _PROBE_VALUE})]
        # every probe below in the usual shape, and what the caller will ask, in one job
        wanted = self._wanted([((), _PROBE_CONTENT), (one, ""), (one, _PROBE_CONTENT),
                               (two, "")], tools, self._probe_ids)
        for calls, asked_tools in prefetch:
            wanted += self._wanted([(calls, "")], asked_tools, None)
        self._renders(wanted, keep_errors=True)
        plain = self._turn(_call_message([], _PROBE_CONTENT, []), tools)[1]
        at = plain.find(_PROBE_CONTENT)
        if at < 0:
            raise TemplateError("the template does not render an assistant message's content")
        self.header = plain[:at]
        self.end_of_turn = plain[at + len(_PROBE_CONTENT):]
        self._empty = self._probe_empty_content(one, tools)
        with_content = self._try(one, _PROBE_CONTENT, tools)
        self.content_with_calls = with_content is not None and all(
            s in with_content.text for s in (_PROBE_CONTENT, _PROBE_TOOL))
        if not self.content_with_calls:
            self.notes.append("the template drops the content beside tool calls; "
                              "content is left empty")
        self.parallel_calls, self.parallel_reason = self._probe_parallel(one, tools)
        if not self.parallel_calls:
            self.notes.append(self.parallel_reason)
        sample = with_content if self.content_with_calls and with_content else \
            self.render(one, tools=tools, ids=self._probe_ids[:1])
        self._marker_sample = (sample, tools)

    @functools.cached_property
    def markers(self) -> tuple[str, ...]:
        """The template's own markup, learnt from a probe call (on first use: it is slow)."""
        return self._learn_markers(*self._marker_sample)

    # -- rendering --------------------------------------------------------------

    def render(self, calls: Sequence[Call], *, content: str = "",
               tools: Sequence[Mapping[str, Any]] | None = None,
               ids: Sequence[str] | None = None) -> RenderedReply:
        """Render one assistant turn with ``calls`` (arguments as mappings) and ``content``.

        :param ids: the call ids (default: made by ``make_call_id``).
        :raises TemplateError: the template failed, or its render has an unexpected shape.
        """
        before, turn, generation = self._turn(self._message(calls, content, ids), tools)
        if generation and turn.startswith(generation):
            start = len(generation)
        elif turn.startswith(self.header):
            start = len(self.header)
        else:
            # The tool-call turn opens differently (Cohere: <|START_ACTION|> where text
            # gets <|START_TEXT|>): keep what it shares with either, up to a tag boundary.
            shared = max(_common_prefix(turn, generation), _common_prefix(turn, self.header))
            start = _boundary_before(turn, shared)
        stop = len(turn)
        if turn.endswith(self.end_of_turn):
            stop -= len(self.end_of_turn)
        else:
            stop -= _boundary_after(turn, len(turn) - _common_suffix(turn, self.end_of_turn))
            if stop == len(turn):
                stop = _end_of_turn_inside(turn, self.end_of_turn, start)
        return RenderedReply(turn[start:max(stop, start)], before + turn[:start], turn)

    def prompt(self, tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        """The prompt a live model continues: a user turn and the generation prompt."""
        prompt: str = self._renders([([_USER_MESSAGE], tools, True)])[0]
        return prompt

    def prefetch(self, turns: Sequence[tuple[Sequence[Call], str]],
                 tools: Sequence[Mapping[str, Any]] | None, *,
                 ids: Sequence[str] | None = None) -> None:
        """Render the assistant turns ``(calls, content)`` with ``tools`` in one job, so
        that :meth:`render` finds them done (a render that fails is kept as its error).

        :param ids: the call ids (default: made by ``make_call_id``).
        """
        self._renders(self._wanted(turns, tools, ids), keep_errors=True)

    def _wanted(self, turns: Sequence[tuple[Sequence[Call], str]],
                tools: Sequence[Mapping[str, Any]] | None, ids: Sequence[str] | None
                ) -> list[tuple[list[dict[str, Any]], Any, bool]]:
        """The renders :meth:`render` needs for ``turns``: the user turn before them,
        with and without the generation prompt, and each turn after it."""
        return [([_USER_MESSAGE], tools, False), ([_USER_MESSAGE], tools, True),
                *(([_USER_MESSAGE, self._message(calls, content, ids)], tools, False)
                  for calls, content in turns)]

    def _message(self, calls: Sequence[Call], content: str,
                 ids: Sequence[str] | None) -> dict[str, Any]:
        ids = list(ids)[:len(calls)] if ids is not None else \
            [self._make_call_id(i) for i in range(len(calls))]
        return _call_message(calls, content if content else self._empty, ids,
                             self.string_arguments)

    def _renders(self, wanted: Sequence[tuple[list[dict[str, Any]], Any, bool]], *,
                 keep_errors: bool = False) -> list[Any]:
        """Each ``(messages, tools, generation prompt)`` rendered, the ones not rendered
        before in one job; raises the first error unless ``keep_errors``."""
        keys = [json.dumps([messages, tools, generation], default=repr)
                for messages, tools, generation in wanted]
        missing = {key: entry for key, entry in zip(keys, wanted, strict=True)
                   if key not in self._rendered}
        found = {key: self._rendered[key] for key in keys if key in self._rendered}
        if missing:
            # The clock is fixed: templates that print the time (firefunction's
            # ``datetime``, Llama's ``strftime_now``) must render alike twice.
            results = self._template.render_many([
                {"messages": messages, "tools": list(tools) if tools else None,
                 "add_generation_prompt": generation, "now": _FIXED_NOW,
                 "datetime": _FIXED_NOW.strftime("%Y-%m-%d %H:%M:%S")}
                for messages, tools, generation in missing.values()])
            found.update(zip(missing, results, strict=True))
            if len(self._rendered) + len(missing) > _REMEMBERED:
                self._rendered.clear()
            self._rendered.update(zip(missing, results, strict=True))
        out = [found[key] for key in keys]
        if not keep_errors:
            for result in out:
                if isinstance(result, TemplateError):
                    raise result
        return out

    def _turn(self, message: dict[str, Any], tools: Sequence[Mapping[str, Any]] | None
              ) -> tuple[str, str, str]:
        """``(conversation before the turn, the turn, the generation prompt)``."""
        # Keyed in the tools' own key order: a template prints a schema as it is
        # ordered (tojson), so tools equal but ordered otherwise render otherwise.
        before, prompt, full = self._renders([([_USER_MESSAGE], tools, False),
                                              ([_USER_MESSAGE], tools, True),
                                              ([_USER_MESSAGE, message], tools, False)])
        if full.startswith(before):
            generation = prompt[len(before):] if prompt.startswith(before) else ""
            return before, full[len(before):], generation
        # Some templates close every conversation with a block of their own (Command R+
        # appends a system instruction after the last turn): the turn is what lies
        # between the part both renders share at the start and the part they share at
        # the end.
        start = _boundary_before(full, _common_prefix(full, before))
        after = _common_suffix(full[start:], before[start:])
        if start == 0 or after == 0:
            raise TemplateError("rendering an assistant turn changed the conversation before it, "
                                "so the turn cannot be cut out")
        return before[:start], full[start:len(full) - after], ""

    def _try(self, calls: Sequence[Call], content: str,
             tools: Sequence[Mapping[str, Any]]) -> RenderedReply | None:
        try:
            return self.render(calls, content=content, tools=tools,
                               ids=self._probe_ids[:len(calls)])
        except TemplateError:
            return None

    # -- probes -----------------------------------------------------------------

    def _probe_empty_content(self, one: Sequence[Call],
                             tools: Sequence[Mapping[str, Any]]) -> str | None:
        """How an assistant message with calls must look for the template to render them.

        The content beside calls is ``""`` or ``None``; the arguments an object,
        or (as OpenAI sends them, and some templates concatenate them as text) a
        JSON string.
        """
        failure = "it renders no call"
        for shape in HISTORY_SHAPES:  # the forms a conversation's earlier calls may take
            self.string_arguments = shape.arguments_as_json
            empty = None if shape.empty_content_none else ""
            self._empty = empty
            try:
                rendered = self.render(one, tools=tools, ids=self._probe_ids[:1])
            except TemplateError as exc:
                failure = str(exc)
                continue
            if _PROBE_TOOL in rendered.text:
                if empty is None:
                    self.notes.append("the template renders calls only when content is None")
                if shape.arguments_as_json:
                    self.notes.append("the template renders arguments only as a JSON string")
                return empty
        self.string_arguments = False
        raise TemplateError(f"the template cannot render an assistant tool call: {failure}")

    def _probe_parallel(self, one: Sequence[Call],
                        tools: Sequence[Mapping[str, Any]]) -> tuple[bool, str]:
        two = [*one, (_PROBE_TOOL_2, {_PROBE_PARAM: _PROBE_VALUE})]
        try:
            rendered = self.render(two, tools=tools, ids=self._probe_ids)
        except TemplateError as exc:
            return False, f"the template raises on two calls in one turn: {exc}"
        if _PROBE_TOOL_2 not in rendered.text:
            return False, "the template renders only the first call of a turn"
        return True, ""

    def _learn_markers(self, sample: RenderedReply,
                       tools: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
        generation = self._turn(_call_message([], _PROBE_CONTENT, []), tools)[2]
        text = sample.text
        for call_id in self._probe_ids:
            text = text.replace(call_id, _PROBE_VALUE) if call_id else text
        found = dict.fromkeys(_tokens(generation) + _tokens(self.header) + _tokens(text))
        if REASONING_TAGS[1] in self._source:
            found.update(dict.fromkeys(REASONING_TAGS))
        return tuple(found)


