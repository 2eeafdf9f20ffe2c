"""Building a reply's pipeline: the stream filters that apply, then a fresh parser.

The pipeline is also where a reply's end tokens go. An end token the reply ends
with (the template's end-of-turn token, or the runtime's EOS/EOT that an engine
started with ``--special`` writes out) is how a model ends its turn: it is
dropped before the parser, silently. The template's end-of-turn token anywhere
else in the text is stray markup: dropped from the text with a ``stray_markup``
diagnostic (:class:`~toolwire.parse.end_tokens.EndTokenDropper`). The runtime's
EOS elsewhere stays: its spelling (``</s>``) may be ordinary text.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ToolwireError
from ..hooks.manager import PluginManager, default_plugin_manager
from ..parse.end_tokens import EndTokenDropper, FinalEndTokenTrim
from ..parse.protocol import FilterContext, ParserSpec, PromptState, ReplyPipeline, StreamParser
from ..parse.record import CallFormat
from ..templates.assistant_turns import AssistantTurnRenderer

__all__ = ["build_pipeline"]


def build_pipeline(spec: ParserSpec | None, tools: Mapping[str, Any], *,
                   plugins: PluginManager | None = None, chat_template: str | None = None,
                   prompt_tail: str = "", prompt_state: PromptState | None = None,
                   filters: bool = True, parser: bool = True,
                   end_tokens: Sequence[str] = ()) -> ReplyPipeline:
    """The stream filters that apply, then a fresh parser from ``spec``.

    The pipeline's ``close(end_reason=...)`` says why the reply ended (a call the
    token limit cut is never recovered).

    A host that already splits a reply in two (a serving engine's reasoning parser,
    then its tool parser: ``toolwire.engines``) builds the two halves: ``parser=False``
    gives the filters alone (their text is what the parser would be fed), and
    ``filters=False`` the parser alone (with the end-of-turn token dropped). Fed one
    after the other they read a reply exactly as the whole pipeline does.

    :param tools: tool name -> parameters schema (values are typed by it).
    :param prompt_tail: the end of the rendered prompt, so filters know, e.g.,
        that the reply begins inside an open ``<think>`` block.
    :param prompt_state: what the generation prompt left open, when the tail is
        not at hand (a stored reply); wins over what ``prompt_tail`` implies.
    :param filters: include the stream filters (reasoning, ...).
    :param parser: include the family's parser.
    :param end_tokens: the runtime's end-of-generation tokens (EOS, EOT): dropped
        when the reply ends with one, like the template's end-of-turn token.
    """
    plugins = plugins or default_plugin_manager()
    fmt = spec.format if spec is not None else None
    context = FilterContext(
        family=spec.name if spec else None, chat_template=chat_template,
        prompt_tail=prompt_tail, prompt_state=prompt_state,
        call_open=(*fmt.section_open, *fmt.call_open) if fmt is not None else (),
        call_close=(*fmt.section_close, *fmt.call_close, *fmt.trailers) if fmt is not None
        else ())
    stages = []
    for filter_spec in plugins.stream_filters() if filters else ():
        made = filter_spec.create(context)
        if made is not None:
            stages.append(made)
    reader: StreamParser | None = spec.create(tools) if spec is not None and parser else None
    if reader is not None:
        known = {*fmt.drops, *fmt.trailers} if isinstance(fmt, CallFormat) else set()
        token = _end_of_turn(chat_template) if chat_template is not None else ""
        # the parser drops its family's own tokens itself: what is left of the token too
        tokens = {token, *(token.replace(k, "").strip() for k in known if k.strip())}
        tokens -= {"", *known}
        final = {t.strip() for t in (*tokens, *end_tokens)} - {"", *known}
        if token and tokens:
            reader = EndTokenDropper(reader, tuple(sorted(tokens)))
        if final:
            reader = FinalEndTokenTrim(reader, tuple(sorted(final, key=len, reverse=True)))
    return ReplyPipeline(stages, reader)


@functools.lru_cache(maxsize=64)
def _end_of_turn(chat_template: str) -> str:
    """The token the template ends an assistant turn with (``""``: none it can say).

    A model echoes it (a backend that does not stop on it, a stored reply): it is
    never the reply's text.
    """
    try:
        return AssistantTurnRenderer(chat_template).end_of_turn.strip()
    except (ToolwireError, ValueError, TypeError, KeyError, RecursionError):
        return ""
