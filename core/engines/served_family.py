"""The family a served model speaks, chosen once when the engine starts.

An engine adapter meets toolwire at three points: which family reads this
model's replies (selected from the served tokenizer's chat template with the
same selection and verification a chat uses for a GGUF, or forced by name), the
pipeline that reads one reply, and the grammar that holds a constrained reply to
the family's own markup. :class:`ServedFamily` answers all three from the public
API (``toolwire.select_parser``, ``toolwire.build_pipeline``,
``toolwire.grammar_for``), so an engine half never reaches below the doors.

A template no family claims is refused here, with the reason, so the engine
refuses to start instead of failing at the first request.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

import toolwire

__all__ = ["PROMPT_TAIL_CHARS", "ServedFamily", "forced_tool_choice", "openai_tools",
           "tool_parameters"]

PROMPT_TAIL_CHARS: Final = 64
"""How much of the rendered prompt's end the pipeline is told (an open ``<think>``)."""

_PROBE_TOOL: Final = {"type": "function", "function": {
    "name": "probe", "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                                    "required": ["q"]}}}


def openai_tools(tools: Sequence[Any] | None) -> list[dict[str, Any]]:
    """An engine's tool records (pydantic models or dicts) as OpenAI tool dicts."""
    out: list[dict[str, Any]] = []
    for item in tools or ():
        data = item.model_dump(exclude_none=True) if hasattr(item, "model_dump") else item
        if not isinstance(data, Mapping):
            continue
        if "function" not in data and "name" in data:  # the Responses API's flat form
            data = {"type": "function", "function": {
                k: data[k] for k in ("name", "description", "parameters", "strict") if k in data}}
        out.append(dict(data))
    return out


def forced_tool_choice(choice: Any) -> str | dict[str, Any] | None:
    """An engine's ``tool_choice`` as toolwire's grammar takes it when it forces calls
    (``"required"``, or a named tool in any of the engines' shapes); ``None`` for
    ``"auto"``, ``"none"`` or nothing."""
    if choice == "required":
        return "required"
    if isinstance(choice, Mapping):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else choice.get("name")
    else:
        name = getattr(getattr(choice, "function", None), "name", None) or getattr(
            choice, "name", None)
    if isinstance(name, str) and name:
        return {"type": "function", "function": {"name": name}}
    return None


def tool_parameters(tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``{tool name: parameters schema}`` of OpenAI tool dicts (what a parser types by)."""
    out: dict[str, Any] = {}
    for item in tools:
        function = item.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            out[function["name"]] = function.get("parameters") or {}
    return out


@attrs.frozen
class ServedFamily:
    """The family one served model's replies are read with.

    :ivar spec: the family's parser.
    :ivar template: the chat template it was chosen from (``None``: forced by name
        with no template at hand).
    :ivar note: selection's caveat (a claim it could not verify, a derived parser).
    """

    spec: toolwire.ParserSpec
    template: str | None
    note: str = ""
    plugins: toolwire.PluginManager | None = attrs.field(default=None, eq=False, repr=False)

    @classmethod
    def choose(cls, template: str | None, family: str | None = None,
               plugins: toolwire.PluginManager | None = None) -> ServedFamily:
        """The family for ``template``, or the ``family`` named (used as is).

        :raises toolwire.ParserNotFoundError: no template and no family, or no family
            claims the template (the message says which markers it holds and why
            each claim was refused), or the named family is not registered.
        :raises toolwire.ParserConflictError: two families claim it equally.
        """
        if family is None and not template:
            raise toolwire.ParserNotFoundError(
                "the served model's tokenizer has no chat template, so toolwire cannot "
                "choose its tool-call family; name one (toolwire-<family>)")
        manager = plugins or toolwire.default_plugin_manager()
        choice = toolwire.select_parser(template or None, manager, family=family)
        return cls(choice.spec, template or None, choice.note, manager)

    @property
    def name(self) -> str:
        """The family's name (``qwen_xml``)."""
        return self.spec.name

    @property
    def reasoning_tags(self) -> tuple[str, str] | None:
        """The tags of the reasoning block a reply may begin with (``None``: none)."""
        fmt = self.spec.format
        if isinstance(fmt, toolwire.CallFormat) and fmt.reasoning is not None:
            return (fmt.reasoning[0], fmt.reasoning[1])
        if self.template is not None and "</think>" in self.template:
            return ("<think>", "</think>")
        return None

    @functools.cached_property
    def has_grammar(self) -> bool:
        """Whether the family's calls can be written as a grammar (a record that has one)."""
        try:
            toolwire.grammar_for(self.spec, [_PROBE_TOOL], plugins=self.plugins)
        except toolwire.GrammarFormatError:
            return False
        return True

    def pipeline(self, tools: Sequence[Mapping[str, Any]], *, prompt_tail: str = "",
                 prompt_state: toolwire.PromptState | None = None, filters: bool = True,
                 parser: bool = True) -> toolwire.ReplyPipeline:
        """A fresh pipeline for one reply (see ``toolwire.build_pipeline``)."""
        return toolwire.build_pipeline(self.spec, tool_parameters(tools), plugins=self.plugins,
                                       chat_template=self.template, prompt_tail=prompt_tail,
                                       prompt_state=prompt_state, filters=filters,
                                       parser=parser)

    def grammar(self, tools: Sequence[Mapping[str, Any]], tool_choice: Any, *,
                parallel_tool_calls: bool = True, prompt_tail: str = "") -> toolwire.ToolGrammar:
        """The grammar of this family's calls to ``tools`` under ``tool_choice``.

        :raises toolwire.GrammarError: the family or a schema cannot be written as one.
        :raises toolwire.ToolChoiceError: the choice is malformed or names no offered tool.
        """
        return toolwire.grammar_for(self.spec, tools, template=self.template,
                                    tool_choice=tool_choice,
                                    parallel_tool_calls=parallel_tool_calls,
                                    plugins=self.plugins, prompt_tail=prompt_tail)

    def prompt_tail(self, messages: Sequence[Mapping[str, Any]] | None = None,
                    tools: Sequence[Mapping[str, Any]] | None = None,
                    template_kwargs: Mapping[str, Any] | None = None) -> str:
        """The end of the generation prompt the template renders (``""``: unknown).

        The conversation itself is rendered when it can be; a conversation the
        sandbox cannot render (content toolwire does not know) falls back to one
        user message, whose generation prompt ends the same way in the templates
        that open a reasoning block (the block depends on the template's options,
        not on the history).
        """
        if self.template is None:
            return ""
        kwargs = {k: v for k, v in (template_kwargs or {}).items()
                  if k not in ("messages", "tools", "add_generation_prompt")}
        template = _compiled(self.template)
        for conversation in (messages, [{"role": "user", "content": "?"}]):
            if not conversation:
                continue
            try:
                text = template.render(list(conversation), tools=list(tools or ()) or None,
                                       add_generation_prompt=True, **kwargs)
            except (toolwire.ToolwireError, ValueError, TypeError):
                continue
            return text[-PROMPT_TAIL_CHARS:]
        return ""


@functools.lru_cache(maxsize=16)
def _compiled(source: str) -> toolwire.ChatTemplate:
    return toolwire.get_chat_template(source)
