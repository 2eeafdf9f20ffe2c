"""A scripted stand-in backend that streams given raw model text through a parser."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..backends.repeated_calls import end_at_repeated_call
from ..events import ErrorEvent, Event
from ..families.selection import build_pipeline, select_parser
from ..hooks.manager import PluginManager
from ..parse.protocol import ParserSpec
from ..vocabulary.backend import ModelRequest, TurnEnd
from ..vocabulary.cancel import CancelToken

__all__ = ["Registered", "ScriptedBackend", "isolated_plugin_manager"]

Reply = str | Callable[[ModelRequest], str]


Registered = Callable[[object], PluginManager]
"""The type of the ``registered`` fixture: ``registered(plugin) -> PluginManager``."""


def isolated_plugin_manager(*plugins: object, builtins: bool = True) -> PluginManager:
    """A plugin manager with the built-ins (optional) and ``plugins``, no entry points."""
    manager = PluginManager(builtins=builtins, entry_points=False)
    for plugin in plugins:
        manager.register(plugin)
    return manager


class ScriptedBackend:
    """Replays one raw reply per model turn, with the parser in the path.

    :param replies: raw model text per turn, or callables that build it from the
        request (to assert on what the model was sent).
    :param family: the parser family (default ``qwen_xml``).
    :param chat_template: select the parser from a template instead.
    :param chunk_size: characters per delta (``1`` for character streaming).
    :param prompt_tail: what the rendered prompt ends with (``"<think>\\n"`` makes
        the reply begin inside a reasoning block). The default, a prompt that
        ends outside any block, makes the reply stream delta by delta as a live
        model's does; ``""`` (unknown) makes the reasoning filter hold the text
        until it knows whether a lone ``</think>`` follows, as for a stored reply.
    :param finish_reason: the ``TurnEnd`` reason to report.

    Every request is kept in :attr:`requests`.
    """

    name = "scripted"

    def __init__(self, replies: Iterable[Reply], *, family: str | None = "qwen_xml",
                 chat_template: str | None = None, chunk_size: int = 4,
                 prompt_tail: str = "\n", finish_reason: str = "stop",
                 plugins: PluginManager | None = None) -> None:
        self._replies = list(replies)
        self._plugins = plugins or isolated_plugin_manager()
        self._spec: ParserSpec = select_parser(chat_template, self._plugins,
                                               family=family if chat_template is None else None
                                               ).spec
        self._template = chat_template
        self.chunk_size = chunk_size
        self.prompt_tail = prompt_tail
        self.finish_reason = finish_reason
        self.requests: list[ModelRequest] = []
        self.closed_early = 0

    def make_call_id(self, index: int) -> str:
        """Ids in the family's form."""
        return self._spec.make_call_id(index)

    def stream_turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        """Stream the next scripted reply through the pipeline, under the repeated-call
        rule as the real backends are (a call the reply already wrote ends it)."""
        self.requests.append(request)
        yield from end_at_repeated_call(lambda token: self._replay(request, token), cancel)

    def _replay(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        if not self._replies:
            yield ErrorEvent("script_exhausted", "the scripted backend has no reply left")
            yield TurnEnd("error")
            return
        reply = self._replies.pop(0)
        text = reply(request) if callable(reply) else reply
        pipeline = build_pipeline(self._spec, request.tool_parameters(), plugins=self._plugins,
                                  chat_template=self._template, prompt_tail=self.prompt_tail)
        step = max(self.chunk_size, 1)
        for start in range(0, len(text), step):
            if cancel.cancelled:
                self.closed_early += 1
                yield TurnEnd("cancelled")
                return
            yield from pipeline.feed(text[start:start + step])
        yield from pipeline.close(end_reason="length" if self.finish_reason == "length"
                                  else "stop")
        yield TurnEnd(self.finish_reason, usage={"completion_tokens": len(text) // 4 + 1})

    def remaining(self) -> list[Any]:
        """Replies not yet used."""
        return list(self._replies)
