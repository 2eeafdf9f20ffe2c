"""Reasoning filters for families whose reasoning tags are not ``<think>``.

Mistral writes ``[THINK]...[/THINK]``, Cohere ``<|START_THINKING|>...<|END_THINKING|>``,
Apertus ``<|inner_prefix|>...<|inner_suffix|>``, Apriel ends its reasoning with
``[BEGIN FINAL RESPONSE]``. :func:`family_reasoning_filter_spec` builds the
:class:`~toolwire.parsing.StreamFilterSpec` such a family registers, on the
core's :class:`~toolwire.reasoning.ReasoningBlockFilter`, with two rules of its
own:

* it applies to the family's templates (those that mention the closing tag)
  and, when no template is known, only to replies of the family, so a stored
  reply of another family is never read with these tags;
* tags are handed to the block filter whole: a tail of a delta that may be the
  beginning of a tag is held back here, so tags that begin with another
  character than ``<`` (which the core's partial-tag rule looks for) are
  recognised however the reply is split.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from .call_sections import partial_marker_start
from .events import Event
from .parsing import FilterContext, StreamFilter, StreamFilterSpec
from .reasoning import ReasoningBlockFilter, StartState

__all__ = ["WholeTagFilter", "family_reasoning_filter_spec"]


class WholeTagFilter:
    """Feeds a filter text in which none of ``tags`` is ever split across deltas."""

    __slots__ = ("_firsts", "_held", "_inner", "_longest", "_tags")

    def __init__(self, inner: StreamFilter, tags: tuple[str, ...]) -> None:
        self._inner = inner
        self._tags = tags
        self._firsts = re.compile("[" + "".join(sorted({re.escape(t[0]) for t in tags})) + "]")
        self._longest = max(len(t) for t in tags)
        self._held = ""

    def feed(self, text: str) -> list[Event]:
        """Pass on the text up to a possible tag beginning at its end."""
        data = self._held + text
        safe = partial_marker_start(data, 0, self._tags, self._firsts, self._longest)
        self._held = data[safe:]
        return self._inner.feed(data[:safe]) if safe else []

    def close(self) -> list[Event]:
        """Pass on what is held, then close the inner filter."""
        held, self._held = self._held, ""
        out = self._inner.feed(held) if held else []
        return out + self._inner.close()


def family_reasoning_filter_spec(open_tag: str, close_tag: str, *, name: str,
                                 families: Collection[str], starts_unopened: bool = False,
                                 priority: int = 100) -> StreamFilterSpec:
    """A reasoning filter for ``families``, whose blocks run from ``open_tag`` to ``close_tag``.

    :param name: the filter's registered name.
    :param families: the parser families it serves when no template is known.
    :param starts_unopened: the model may begin reasoning without ``open_tag``
        (Apriel 1.5): unless the prompt ends with the opening tag, the filter
        waits to see whether a lone closing tag comes.
    :param priority: the filter's place among stream filters.
    """

    def create(context: FilterContext) -> StreamFilter | None:
        if context.chat_template is None:
            if context.family not in families:
                return None
        elif close_tag not in context.chat_template:
            return None
        start: StartState = "auto"
        if context.prompt_tail.rstrip().endswith(open_tag):
            start = "reasoning"
        elif context.prompt_tail and not starts_unopened:
            start = "text"
        return WholeTagFilter(ReasoningBlockFilter(open_tag, close_tag, start),
                              (open_tag, close_tag))

    return StreamFilterSpec(name=name, priority=priority, create=create,
                            description=f"{open_tag}...{close_tag} as reasoning")
