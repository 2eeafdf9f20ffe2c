"""What vLLM's parser slots know of the served model: its tokenizer and a request.

vLLM builds a tool parser and a reasoning parser for every request and once at
start (to check that the parsers suit the tokenizer). The family is chosen from
the tokenizer's chat template at that first build and cached per template, so a
template no family claims stops ``vllm serve`` with the reason, and every later
build costs a dictionary look-up. A request that brings its own
``chat_template`` is read with the family that template selects.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import toolwire

from ..served_family import ServedFamily, openai_tools

END_REASON: toolwire.EndReason = "length"
"""How every reply is closed. vLLM tells neither parser slot why a reply ended, so
each is read as toolwire reads one the token limit cut: a call counts once its own
closing markup is written, and a call the reply ended inside is never sent."""

__all__ = [
    "END_REASON",
    "decode_tail",
    "family_for_request",
    "forced_family_classes",
    "prompt_tail",
    "reasoning_is_open",
    "request_messages",
    "request_tools",
    "served_family",
    "served_template",
    "template_kwargs",
]


def served_template(tokenizer: Any) -> str | None:
    """The chat template a tokenizer holds (a named set: its ``tool_use`` one)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, Mapping):
        template = template.get("tool_use") or template.get("default") or next(
            iter(template.values()), None)
    return template if isinstance(template, str) and template.strip() else None


@functools.lru_cache(maxsize=32)
def _chosen(template: str | None, family: str | None) -> ServedFamily:
    return ServedFamily.choose(template, family)


def served_family(tokenizer: Any, family: str | None) -> ServedFamily:
    """The family of the model ``tokenizer`` serves (``family``: forced by name).

    :raises toolwire.ParserNotFoundError: no family claims the template, or the
        tokenizer has none and no family was named (vLLM stops at start with this).
    """
    return _chosen(served_template(tokenizer), family)


def family_for_request(served: ServedFamily, forced: str | None, request: Any) -> ServedFamily:
    """The family a request is read with: its own ``chat_template``'s, when it brings one.

    :raises toolwire.ParserNotFoundError: no family claims the request's template.
    """
    template = getattr(request, "chat_template", None)
    if not isinstance(template, str) or not template.strip() or template == served.template:
        return served
    return _chosen(template, forced)


def request_tools(request: Any) -> list[dict[str, Any]]:
    """The request's tools as OpenAI dicts (``[]`` when ``tool_choice`` is ``none``)."""
    if getattr(request, "tool_choice", None) == "none":
        return []
    return openai_tools(getattr(request, "tools", None))



def decode_tail(tokenizer: Any, token_ids: Sequence[int], tokens: int = 32) -> str:
    """The text of the last ``tokens`` ids, special tokens included."""
    tail = list(token_ids[-tokens:])
    if not tail:
        return ""
    try:
        text = tokenizer.decode(tail, skip_special_tokens=False)
    except (TypeError, ValueError, IndexError, KeyError):
        return ""
    return text if isinstance(text, str) else ""


def template_kwargs(request: Any, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The chat template's options for a request (``enable_thinking``, ...)."""
    kwargs = dict(given or {})
    kwargs.update(getattr(request, "chat_template_kwargs", None) or {})
    return kwargs


def request_messages(request: Any) -> list[dict[str, Any]]:
    """The request's messages as plain dicts (``[]`` where it has none)."""
    out: list[dict[str, Any]] = []
    for message in getattr(request, "messages", None) or ():
        data = message.model_dump(exclude_none=True) if hasattr(message, "model_dump") \
            else message
        if isinstance(data, Mapping):
            out.append(dict(data))
    return out


def prompt_tail(family: ServedFamily, request: Any,
                given_kwargs: Mapping[str, Any] | None = None) -> str:
    """The end of the prompt the request's conversation renders to (``""``: unknown)."""
    if family.reasoning_tags is None:
        return ""
    return family.prompt_tail(request_messages(request), request_tools(request),
                              template_kwargs(request, given_kwargs))


def reasoning_is_open(family: ServedFamily, text: str) -> bool:
    """Whether ``text`` (a prompt's end) leaves the family's reasoning block open."""
    tags = family.reasoning_tags
    if tags is None or not text:
        return False
    return toolwire.PromptState.from_tail(text, tags[0]) is toolwire.PromptState.THINK_OPEN


def forced_family_classes(base: type, module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` that answers ``<Base>__<family>``: ``base`` with its family
    forced (the parser of ``toolwire-<family>``), made once per family."""
    prefix = f"{base.__name__}__"

    @functools.cache
    def forced(family: str) -> type:
        return type(prefix + family, (base,), {"forced_family": family, "__module__": module})

    def module_attribute(name: str) -> Any:
        if name.startswith(prefix) and len(name) > len(prefix):
            return forced(name[len(prefix):])
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return module_attribute
