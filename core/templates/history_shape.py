"""How a chat template wants earlier tool calls in the conversation it renders.

Most templates iterate a call's ``arguments`` as a mapping and accept ``""``
beside calls. A few render a call only in OpenAI's wire form: arguments as a
JSON string (Functionary v3.2 concatenates them as text, and raises on a
mapping) or content ``None`` beside calls (DeepSeek-R1-Distill-Llama tests
``content is none`` and otherwise renders the turn *without its calls*, which
would silently hide from the model what it did). A probe render per shape, all in
one job, finds the first one in which the template shows a probe call; the verdict
is cached per template.source_hash, so a chat pays for it once.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .chat_template import ChatTemplate

__all__ = ["HISTORY_SHAPES", "HistoryShape", "apply_history_shape", "history_shape"]

_PROBE_VALUE = "toolwire-history-probe-7f3a"
_PROBE_TOOL = {"type": "function", "function": {
    "name": "probe_lookup", "description": "Look a word up.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "The word."}},
        "required": ["query"], "additionalProperties": False}}}


@attrs.frozen
class HistoryShape:
    """The form of an assistant message with calls that the template renders.

    :ivar arguments_as_json: arguments go in as a JSON string, not a mapping.
    :ivar empty_content_none: empty content beside calls goes in as ``None``.
    """

    arguments_as_json: bool = False
    empty_content_none: bool = False


_DEFAULT = HistoryShape()
HISTORY_SHAPES: tuple[HistoryShape, ...] = (
    _DEFAULT, HistoryShape(empty_content_none=True), HistoryShape(arguments_as_json=True),
    HistoryShape(arguments_as_json=True, empty_content_none=True))
"""The forms a template may want, in the order they are tried (the usual one first)."""
_VERDICTS: dict[str, HistoryShape] = {}
_LOCK = threading.Lock()


def history_shape(template: ChatTemplate, **render_options: Any) -> HistoryShape:
    """The first shape in which ``template`` renders a probe call (the default if none does);
    the probes of every shape render in one job.

    :param render_options: passed to the render (``bos_token`` and the like).
    """
    with _LOCK:
        known = _VERDICTS.get(template.source_hash)
    if known is not None:
        return known
    results = template.render_many([_probe(shape, render_options) for shape in HISTORY_SHAPES])
    found = next((shape for shape, text in zip(HISTORY_SHAPES, results, strict=True)
                  if isinstance(text, str) and _PROBE_VALUE in text), _DEFAULT)
    with _LOCK:
        _VERDICTS[template.source_hash] = found
    return found


def _probe(shape: HistoryShape, render_options: Mapping[str, Any]) -> dict[str, Any]:
    arguments = {"query": _PROBE_VALUE}
    call = {"id": "call0probe", "type": "function", "function": {
        "name": "probe_lookup",
        "arguments": json.dumps(arguments) if shape.arguments_as_json else arguments}}
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Look it up."},
                {"role": "assistant", "content": None if shape.empty_content_none else "",
                 "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call0probe", "name": "probe_lookup",
                 "content": "found"}]
    return {"messages": messages, "tools": [_PROBE_TOOL], "add_generation_prompt": True,
            **render_options}


def apply_history_shape(records: Sequence[dict[str, Any]],
                        shape: HistoryShape) -> list[dict[str, Any]]:
    """``records`` (from :func:`~toolwire.vocabulary.history.to_template_messages`
    with mapping arguments) in ``shape``; records without calls are kept as they are."""
    if shape == _DEFAULT:
        return list(records)
    out = []
    for record in records:
        calls = record.get("tool_calls")
        if record.get("role") != "assistant" or not calls:
            out.append(record)
            continue
        record = dict(record)
        if shape.empty_content_none and not record.get("content"):
            record["content"] = None
        if shape.arguments_as_json:
            record["tool_calls"] = [
                {**call, "function": {**call["function"], "arguments": json.dumps(
                    call["function"]["arguments"], ensure_ascii=False)}}
                if not isinstance(call["function"]["arguments"], str) else call
                for call in calls]
        out.append(record)
    return out
