"""vLLM's reasoning-parser slot filled by toolwire (``--reasoning-parser toolwire``).

vLLM gives a reply to the reasoning parser first, until it says the reasoning
is over, and the rest to the tool parser. This parser runs the first half of
toolwire's pipeline (its stream filters: the family's reasoning block, read by
the rules of ``docs/families.md``) and says the reasoning is over at the first
text they let through; that text, and everything after it, is what toolwire's
parser would have been fed, so ``--tool-call-parser toolwire`` reads it
exactly as the whole pipeline would.

vLLM also asks a reasoning parser, with token ids only, where reasoning ends,
to hold a grammar back until then (structured outputs). Those answers come
from the family's tags in the decoded text: the prompt closed the block
(``<think></think>`` at its end), the output wrote the closing tag, or the
output began with something other than the opening tag.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from vllm.entrypoints.generate.base.protocol import DeltaMessage
from vllm.reasoning.abs_reasoning_parsers import ReasoningParser

from ..reply_stream import ReplyPiece, ReplyStream
from .served import (
    END_REASON,
    decode_tail,
    forced_family_classes,
    prompt_tail,
    served_family,
)

__all__ = ["ToolwireReasoningParser"]


def _no_call_id(index: int) -> str:
    return f"call_{index}"  # a filter reads no calls; the stream needs the callable


class ToolwireReasoningParser(ReasoningParser):
    """toolwire's reasoning filters in vLLM's reasoning-parser slot.

    :raises toolwire.ParserNotFoundError: at start, when no family claims the
        served model's chat template.
    """

    forced_family: ClassVar[str | None] = None
    """The family ``toolwire-<family>`` names (``None``: chosen from the template)."""

    engine_based_streaming = True

    def __init__(self, tokenizer: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(tokenizer, *args, **kwargs)
        self._served = served_family(tokenizer, self.forced_family)
        self._template_kwargs = dict(kwargs.get("chat_template_kwargs") or {})
        self._prompt_tail: str | None = None
        self._prompt_length: int | None = None
        self._stream: ReplyStream | None = None
        self._ended = False

    @property
    def reasoning_start_str(self) -> str | None:
        tags = self._served.reasoning_tags
        return tags[0] if tags else None

    @property
    def reasoning_end_str(self) -> str | None:
        tags = self._served.reasoning_tags
        return tags[1] if tags else None

    # -- the prompt, and token ids ----------------------------------------------------

    def set_prompt_token_ids(self, prompt_token_ids: Sequence[int]) -> None:
        """Remember how the prompt ends (an open reasoning block) and its length."""
        self._prompt_tail = decode_tail(self.model_tokenizer, prompt_token_ids)
        self._prompt_length = len(prompt_token_ids)

    def adjust_initial_state_from_prompt(self, prompt_token_ids: Sequence[int]) -> None:
        self.set_prompt_token_ids(prompt_token_ids)

    def is_reasoning_end(self, input_ids: Sequence[int]) -> bool:
        """Whether the ids end past reasoning: the prompt closed the block, or the
        output wrote the closing tag or began without the opening one."""
        tags = self._served.reasoning_tags
        if tags is None:
            return True
        if self._prompt_length is None:  # the first ids a parser sees are the prompt
            self._prompt_length = len(input_ids)
            return decode_tail(self.model_tokenizer, input_ids).rstrip().endswith(tags[1])
        output = input_ids[self._prompt_length:]
        text = _decode(self.model_tokenizer, tuple(output[:8])).lstrip()
        if text and not tags[0].startswith(text[:len(tags[0])]):
            return True  # the reply did not open a reasoning block
        return tags[1] in decode_tail(self.model_tokenizer, output, 64)

    def is_reasoning_end_streaming(self, input_ids: Sequence[int],
                                   delta_ids: Iterable[int]) -> bool:
        return self.is_reasoning_end(input_ids)

    def extract_content_ids(self, input_ids: list[int]) -> list[int]:
        """The ids after the one that closes the reasoning block (all, if none does)."""
        tags = self._served.reasoning_tags
        if tags is None:
            return input_ids
        for i in range(len(input_ids) - 1, -1, -1):
            if tags[1] in _decode(self.model_tokenizer, (input_ids[i],)):
                return input_ids[i + 1:]
        return input_ids

    # -- the text ---------------------------------------------------------------------

    def adjust_request(self, request: Any) -> Any:
        """Keep the reasoning tags in the text where they are special tokens."""
        if self._served.reasoning_tags is not None and hasattr(request, "skip_special_tokens"):
            request.skip_special_tokens = False
        return request

    def extract_reasoning(self, model_output: str, request: Any) -> tuple[str | None, str | None]:
        """``(reasoning, content)`` of a whole reply; the content is the text the
        tool parser reads."""
        stream = self._new_stream(request)
        first, last = stream.feed(model_output), stream.close(END_REASON)
        reasoning = first.reasoning + last.reasoning
        content = first.content + last.content
        return reasoning or None, content or None

    def extract_reasoning_streaming(
        self, previous_text: str, current_text: str, delta_text: str,
        previous_token_ids: Sequence[int], current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int]) -> DeltaMessage | None:
        """The reasoning ``delta_text`` settles; the first text ends the reasoning."""
        if self._stream is None:
            self._stream = self._new_stream(None)
        return self._delta(self._stream.feed(delta_text))

    def has_engine_confirmed_reasoning_end(self) -> bool:
        return self._ended

    def finish_streaming(self) -> DeltaMessage | None:
        """What the filters held when the reply ended inside its reasoning (nothing
        once the reasoning is over: vLLM then feeds the tool parser)."""
        if self._stream is None or self._ended:
            return None
        return self._delta(self._stream.close(END_REASON))

    # -- internals --------------------------------------------------------------------

    def _new_stream(self, request: Any) -> ReplyStream:
        tail = self._prompt_tail
        if tail is None:
            tail = prompt_tail(self._served, request, self._template_kwargs) \
                if request is not None else ""
        return ReplyStream(self._served.pipeline([], prompt_tail=tail, parser=False),
                           _no_call_id)

    def _delta(self, piece: ReplyPiece) -> DeltaMessage | None:
        if piece.content:
            self._ended = True
        if not piece:
            return None
        return DeltaMessage(reasoning=piece.reasoning or None, content=piece.content or None)


@functools.lru_cache(maxsize=4096)
def _decode_cached(tokenizer: Any, ids: tuple[int, ...]) -> str:
    return decode_tail(tokenizer, ids, len(ids))


def _decode(tokenizer: Any, ids: tuple[int, ...]) -> str:
    try:
        return _decode_cached(tokenizer, ids)
    except TypeError:  # an unhashable tokenizer
        return decode_tail(tokenizer, ids, len(ids))


__getattr__ = forced_family_classes(ToolwireReasoningParser, __name__)
"""``ToolwireReasoningParser__<family>``: the parser of ``toolwire-<family>``."""
