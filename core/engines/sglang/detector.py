"""SGLang's tool-call detector slot filled by toolwire (``--tool-call-parser toolwire``).

SGLang reads tool calls with a ``BaseFormatDetector`` per request, chosen by
name from ``FunctionCallParser.ToolCallParserEnum`` (a static dict, filled by
:func:`register`: from SGLang's plugin entry point, or from the launcher
``python -m toolwire.engines.sglang``). :class:`ToolwireDetector` holds one
toolwire pipeline per request, fed each ``parse_streaming_increment`` text and
closed by ``finish``; a call goes out whole, as a ``ToolCallItem`` with its
name and its arguments' final JSON, once the model has finished it
(:mod:`toolwire.engines.reply_stream`). ``detect_and_parse`` reads a whole reply
the same way.

For ``tool_choice`` ``"required"`` or a named tool, :meth:`get_structural_tag`
hands SGLang an xgrammar structural tag holding toolwire's grammar of the
family's own markup, so the model writes the format it was trained on; a
family with no grammar keeps SGLang's default (a JSON array of calls).

SGLang runs its reasoning parser (``--reasoning-parser``) before the detector.
Without one, reasoning markup is content, as SGLang's own detectors leave it:
the pipeline still reads the block as reasoning (a call written inside it is
never a call) and gives it back as content between its tags.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, ClassVar

from sglang.srt.function_call.base_format_detector import BaseFormatDetector
from sglang.srt.function_call.core_types import (
    StreamingParseResult,
    StructureInfo,
    ToolCallItem,
)
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from xgrammar.structural_tag import GrammarFormat, StructuralTag

import toolwire

from ..reply_stream import CallPiece, ReplyPiece, ReplyStream
from ..served_family import ServedFamily, forced_tool_choice, openai_tools

__all__ = ["END_REASON", "PARSER_NAME", "ToolwireDetector", "detector_for", "register"]

log = logging.getLogger(__name__)

PARSER_NAME = "toolwire"
"""The name the family is chosen by template under; ``toolwire-<family>`` forces one."""

END_REASON: toolwire.EndReason = "length"
"""How every reply is closed. SGLang's ``finish`` does not say why the reply ended,
so a call counts once its own closing markup is written, and a call the reply ended
inside is never sent."""


@functools.lru_cache(maxsize=32)
def _chosen(template: str | None, family: str | None) -> ServedFamily:
    return ServedFamily.choose(template, family)


def _served_template(tokenizer: Any) -> str | None:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default")
    return template if isinstance(template, str) and template.strip() else None


class ToolwireDetector(BaseFormatDetector):
    """toolwire's pipeline in SGLang's detector slot (see the module docstring).

    :param tokenizer: the served tokenizer (SGLang passes it); its chat template
        chooses the family.
    :raises toolwire.ParserNotFoundError: no family claims the template.
    """

    forced_family: ClassVar[str | None] = None
    """The family ``toolwire-<family>`` names (``None``: chosen from the template)."""

    served_template: ClassVar[str | None] = None
    """The template the launcher read from the model (used when no tokenizer is given)."""

    def __init__(self, tokenizer: Any = None) -> None:
        super().__init__()
        template = _served_template(tokenizer) if tokenizer is not None else None
        self._served = self.choose_family(template or self.served_template)
        fmt = self._served.spec.format
        markers = (*fmt.section_open, *fmt.call_open) if isinstance(
            fmt, toolwire.CallFormat) else ()
        self.bot_token = markers[0] if markers else ""
        self._markers = tuple(m for m in markers if m.strip())
        self._stream: ReplyStream | None = None

    @classmethod
    def choose_family(cls, template: str | None) -> ServedFamily:
        """The family this detector reads ``template``'s replies with (cached).

        :raises toolwire.ParserNotFoundError: no family claims the template, or there
            is none and no family is named.
        """
        return _chosen(template, cls.forced_family)

    @property
    def family(self) -> ServedFamily:
        """The family replies are read with."""
        return self._served

    # -- reading ----------------------------------------------------------------------

    def has_tool_call(self, text: str) -> bool:
        """Whether ``text`` holds one of the family's call-opening markers (a family
        whose calls may stand bare, or with no record, is always worth reading)."""
        if not self._markers:
            return True
        fmt = self._served.spec.format
        bare = isinstance(fmt, toolwire.CallFormat) and (fmt.at_start or fmt.bare_calls)
        return bare or any(marker in text for marker in self._markers)

    def detect_and_parse(self, text: str, tools: list[Any]) -> StreamingParseResult:
        """The content and calls of a whole reply."""
        stream = self._new_stream(tools)
        first, last = stream.feed(text), stream.close(END_REASON)
        return self._result(ReplyPiece(first.content + last.content, "",
                                       first.calls + last.calls,
                                       first.diagnostics + last.diagnostics), record=False)

    def parse_streaming_increment(self, new_text: str, tools: list[Any]) -> StreamingParseResult:
        """The content and finished calls ``new_text`` settles."""
        if self._stream is None:
            self._stream = self._new_stream(tools)
        return self._result(self._stream.feed(new_text))

    def finish(self, tools: list[Any]) -> StreamingParseResult:
        """The end of the reply: what the pipeline still held."""
        if self._stream is None:
            return StreamingParseResult()
        return self._result(self._stream.close(END_REASON))

    # -- constrained calls ------------------------------------------------------------

    def supports_structural_tag(self) -> bool:
        return self._served.has_grammar

    def get_structural_tag(self, tools: list[Any] | None = None,
                           tool_choice: Any = "auto", thinking_mode: bool = False,
                           parallel_tool_calls: bool = True) -> StructuralTag | None:
        """toolwire's grammar of the family's markup for ``"required"`` or a named tool
        (``None`` under ``"auto"``, and for a family with no grammar).

        :raises toolwire.GrammarError: a tool's schema cannot be written as a grammar
            (SGLang logs it and leaves the turn unconstrained).
        """
        choice = forced_tool_choice(tool_choice)
        if choice is None or not self._served.has_grammar:
            return None
        tags = self._served.reasoning_tags
        # with thinking_mode the reply begins inside reasoning: the model finishes it first
        tail = tags[0] if thinking_mode and tags else ""
        grammar = self._served.grammar(openai_tools(tools), choice,
                                       parallel_tool_calls=parallel_tool_calls,
                                       prompt_tail=tail)
        return StructuralTag(format=GrammarFormat(grammar=grammar.gbnf))

    def structure_info(self) -> Any:
        """``name -> StructureInfo(begin, end, trigger)``: a call written as ``begin``,
        its JSON arguments, then ``end``, for families whose record says so; SGLang uses
        it only where :meth:`get_structural_tag` gave nothing."""
        fmt = self._served.spec.format

        def info(name: str) -> StructureInfo:
            if not isinstance(fmt, toolwire.CallFormat) or not isinstance(
                    fmt.arguments, toolwire.JsonArguments) or not fmt.header.patterns:
                raise ValueError(f"toolwire: the {self._served.name} family's calls are "
                                 "not a header and a JSON object; use tool_choice "
                                 "'required' or a named tool for its grammar")
            header = fmt.header.patterns[0].replace("{name}", name).replace(
                "{index}", "0").replace("{id}", "call_0").replace("{any}", "")
            begin = _first(fmt.section_open) + _first(fmt.call_open) + header + _first(
                fmt.header_end)
            end = _first(fmt.call_close) + _first(fmt.section_close)
            return StructureInfo(begin=begin, end=end, trigger=self.bot_token or begin)

        return info

    # -- internals --------------------------------------------------------------------

    def _new_stream(self, tools: list[Any]) -> ReplyStream:
        return ReplyStream(
            self._served.pipeline(openai_tools(tools),
                                  prompt_state=toolwire.PromptState.THINK_CLOSED),
            lambda index: f"call_{index}", reasoning_tags=self._served.reasoning_tags)

    def _result(self, piece: ReplyPiece, *, record: bool = True) -> StreamingParseResult:
        for diagnostic in piece.diagnostics:
            log.debug("toolwire: %s: %s", diagnostic.code, diagnostic.message)
        return StreamingParseResult(normal_text=piece.content,
                                    calls=[self._item(call, record) for call in piece.calls])

    def _item(self, call: CallPiece, record: bool) -> ToolCallItem:
        if record:  # what SGLang's serving loop checks at the end for unsent arguments
            self.prev_tool_call_arr.append({"name": call.name, "arguments": call.arguments})
            self.streamed_args_for_tool.append(call.arguments)
            self.current_tool_id = call.index + 1
        return ToolCallItem(tool_index=call.index, name=call.name, parameters=call.arguments)


def _first(markers: tuple[str, ...]) -> str:
    """A record's first spelling of a marker (the template's), ``""`` for none."""
    return markers[0] if markers else ""


@functools.cache
def detector_for(family: str) -> type[ToolwireDetector]:
    """The detector of ``toolwire-<family>``: that family, whatever the template."""
    return type(f"ToolwireDetector__{family}", (ToolwireDetector,),
                {"forced_family": family, "__module__": __name__})


def register(template: str | None = None,
             plugins: toolwire.PluginManager | None = None) -> dict[str, type[ToolwireDetector]]:
    """Put toolwire's detectors in SGLang's ``ToolCallParserEnum``, in this process.

    :param template: the served model's chat template, for the detectors SGLang
        builds without its tokenizer (it does so for a request's structural tag).
    :returns: the names registered -> their detector classes.
    """
    if template is not None:
        ToolwireDetector.served_template = template
    manager = plugins or toolwire.default_plugin_manager()
    registered: dict[str, type[ToolwireDetector]] = {PARSER_NAME: ToolwireDetector}
    for family in sorted(manager.parsers()):
        registered[f"{PARSER_NAME}-{family}"] = detector_for(family)
    FunctionCallParser.ToolCallParserEnum.update(registered)
    return registered
