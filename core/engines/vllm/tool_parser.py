"""vLLM's tool-parser slot filled by toolwire (``--tool-call-parser toolwire``).

One :class:`ToolwireToolParser` per request (vLLM builds one for each), holding
one toolwire pipeline (:class:`toolwire.engines.reply_stream.ReplyStream`) fed
only ``delta_text``: the parser is *engine-based* in vLLM's terms, so vLLM
hands it deltas, not the growing text, and calls :meth:`finish_streaming` at
the end, where the pipeline gives up what it held. A caller that passes the
growing ``previous_text``/``current_text`` (the older pattern) is read the same
way, from ``delta_text`` alone. Answers are vLLM's own ``DeltaMessage`` and
``DeltaToolCall`` records; the whole-reply path (``extract_tool_calls``) reads
the same calls.

Reasoning: with ``--reasoning-parser toolwire`` (or another reasoning parser)
vLLM takes the reasoning block off first and this parser reads what follows.
Without one, vLLM's rule is that reasoning markup is content: the pipeline still
reads the block as reasoning (so a call the model only thought about is never
run) and gives it back as content between its tags, in both paths alike.

Constrained calls: under ``tool_choice`` ``"required"`` or a named tool,
:meth:`adjust_request` hands vLLM toolwire's grammar of the family's own
markup (``structured_outputs.grammar``, which vLLM's xgrammar and guidance
backends take), instead of vLLM's default JSON schema that makes the model
write JSON. A family with no grammar (its parser is hand-written, or its
values are its own syntax) keeps vLLM's default, and so its JSON path.

vLLM tells neither path why the reply ended, so both close every reply as
toolwire closes one the token limit cut (``end_reason="length"``): a call
counts once its own closing markup is written, and a call the reply ended
inside is never sent, streamed or whole (``docs/engines.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar

from vllm.entrypoints.generate.base.protocol import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.renderers.chat_utils.tool_call import make_tool_call_id
from vllm.sampling_params import StructuredOutputsParams
from vllm.tool_parsers.abstract_tool_parser import ToolParser

import toolwire

from ..reply_stream import ReplyPiece, ReplyStream
from ..served_family import ServedFamily, forced_tool_choice
from .served import (
    END_REASON,
    family_for_request,
    forced_family_classes,
    prompt_tail,
    request_tools,
    served_family,
)

__all__ = ["ToolwireToolParser"]

log = logging.getLogger(__name__)


def _call_id(_index: int) -> str:
    return str(make_tool_call_id())


class ToolwireToolParser(ToolParser):
    """toolwire's pipeline in vLLM's tool-parser slot (see the module docstring).

    :raises toolwire.ParserNotFoundError: at start, when no family claims the
        served model's chat template (vLLM stops and prints the reason).
    """

    forced_family: ClassVar[str | None] = None
    """The family ``toolwire-<family>`` names (``None``: chosen from the template)."""

    engine_based_streaming = True

    def __init__(self, tokenizer: Any, tools: list[Any] | None = None) -> None:
        super().__init__(tokenizer, tools)
        self._served = served_family(tokenizer, self.forced_family)
        # required/named calls: toolwire's grammar and this parser, where the family
        # has a grammar; vLLM's own JSON path where it has none
        self.supports_required_and_named = not self._served.has_grammar
        self.skip_reasoning_parsing = False  # vLLM sets it when no reasoning parser runs
        self._stream: ReplyStream | None = None

    @property
    def family(self) -> ServedFamily:
        """The family chosen for the served model."""
        return self._served

    # -- constrained calls ------------------------------------------------------------

    def adjust_request(self, request: Any) -> Any:
        """Keep special-token markup in the text, and constrain required and named calls
        to the family's own markup.

        :raises ValueError: (a 400 for the client) the request's own template is
            claimed by no family, or a tool's schema cannot be written as a grammar.
        """
        tools = request_tools(request)
        if not tools:
            return request
        try:
            family = family_for_request(self._served, self.forced_family, request)
        except toolwire.ToolwireError as exc:
            raise ValueError(f"toolwire: the request's chat_template: {exc}") from exc
        if hasattr(request, "skip_special_tokens"):
            request.skip_special_tokens = False  # markup written as special tokens
        if hasattr(request, "spaces_between_special_tokens"):
            request.spaces_between_special_tokens = False
        choice = forced_tool_choice(request.tool_choice)
        if choice is None or not family.has_grammar:
            return super().adjust_request(request)
        # a reasoning parser holds the grammar back until reasoning ends, so the
        # grammar is then the calls alone; without one it covers the reasoning too
        tail = prompt_tail(family, request) if self.skip_reasoning_parsing else ""
        try:
            grammar = family.grammar(tools, choice,
                                     parallel_tool_calls=request.parallel_tool_calls is not False,
                                     prompt_tail=tail)
        except toolwire.ToolwireError as exc:
            raise ValueError(f"toolwire: tool_choice cannot be enforced: {exc}") from exc
        request.structured_outputs = StructuredOutputsParams(grammar=grammar.gbnf)
        if hasattr(request, "response_format"):
            request.response_format = None
        return request

    # -- the whole reply --------------------------------------------------------------

    def extract_tool_calls(self, model_output: str,
                           request: Any) -> ExtractedToolCallInformation:
        """The calls and the content of a whole reply (``model_output``)."""
        stream = self._new_stream(request)
        piece = _joined(stream.feed(model_output), stream.close(END_REASON))
        calls = [ToolCall(id=c.id, type="function",
                          function=FunctionCall(name=c.name, arguments=c.arguments))
                 for c in piece.calls]
        content = piece.content if piece.content.strip() else None
        return ExtractedToolCallInformation(tools_called=bool(calls), tool_calls=calls,
                                            content=content)

    # -- streaming --------------------------------------------------------------------

    def extract_tool_calls_streaming(
        self, previous_text: str, current_text: str, delta_text: str,
        previous_token_ids: Sequence[int], current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int], request: Any) -> DeltaMessage | None:
        """The content, reasoning and calls ``delta_text`` settles (``None``: none yet)."""
        if self._stream is None:
            self._stream = self._new_stream(request)
        return self._delta(self._stream.feed(delta_text))

    def finish_streaming(self) -> DeltaMessage | None:
        """The end of the reply: what the pipeline still held (vLLM calls it once)."""
        if self._stream is None:
            return None
        return self._delta(self._stream.close(END_REASON))

    # -- internals --------------------------------------------------------------------

    def _new_stream(self, request: Any) -> ReplyStream:
        try:
            family = family_for_request(self._served, self.forced_family, request)
        except toolwire.ToolwireError as exc:  # adjust_request refused it already
            log.warning("toolwire: %s; reading the reply as %s", exc, self._served.name)
            family = self._served
        # after a reasoning parser the reply is past its reasoning block
        tail = prompt_tail(family, request) if self.skip_reasoning_parsing else ""
        state = None if self.skip_reasoning_parsing else toolwire.PromptState.THINK_CLOSED
        tags = family.reasoning_tags if self.skip_reasoning_parsing else None
        return ReplyStream(family.pipeline(request_tools(request), prompt_tail=tail,
                                           prompt_state=state), _call_id,
                           reasoning_tags=tags)

    def _delta(self, piece: ReplyPiece) -> DeltaMessage | None:
        for diagnostic in piece.diagnostics:
            log.debug("toolwire: %s: %s", diagnostic.code, diagnostic.message)
        if not piece:
            return None
        if not piece.calls and not piece.reasoning:
            return DeltaMessage(content=piece.content)
        calls = []
        for call in piece.calls:
            self.prev_tool_call_arr.append({"name": call.name, "arguments": call.arguments})
            self.streamed_args_for_tool.append(call.arguments)
            self.current_tool_id = call.index
            function = DeltaFunctionCall(name=call.name, arguments=call.arguments)
            calls.append(DeltaToolCall(index=call.index, id=call.id, type="function",
                                       function=function))
        return DeltaMessage(content=piece.content or None, reasoning=piece.reasoning or None,
                            tool_calls=calls)


def _joined(first: ReplyPiece, second: ReplyPiece) -> ReplyPiece:
    return ReplyPiece(first.content + second.content, first.reasoning + second.reasoning,
                      first.calls + second.calls, first.diagnostics + second.diagnostics)



__getattr__ = forced_family_classes(ToolwireToolParser, __name__)
"""``ToolwireToolParser__<family>``: the parser of ``toolwire-<family>``."""
