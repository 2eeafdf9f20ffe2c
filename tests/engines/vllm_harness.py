"""vLLM's own serving-loop pieces, driven the way ``OpenAIServingChat`` drives them.

Nothing here stands in for vLLM: the parser class is the one vLLM's
``ParserManager`` composes from ``--tool-call-parser``/``--reasoning-parser``,
checked against the tokenizer as ``vllm serve`` checks it at start; a request is
vLLM's ``ChatCompletionRequest``; a reply streams through vLLM's
``ChatStreamProcessor`` (one per request, fed each engine output's
``delta_text``, token ids and ``finish_reason``, the prompt's ids with each) and
a whole reply through the composed parser's ``parse``, as the non-streaming
route does. The tokenizer is a real Hugging Face fast tokenizer (byte-level, so
any text round-trips) holding the model's chat template
(:mod:`tests.engines.tokenizer`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.chat_completion.stream_processor import ChatStreamProcessor
from vllm.parser import ParserManager

import toolwire.engines.vllm as toolwire_vllm
from tests.engines.tokenizer import token_ids

toolwire_vllm.register()  # what vLLM's general-plugin loader does at start

def parser_class(tokenizer: Any, tool_parser: str | None = "toolwire",
                 reasoning_parser: str | None = None) -> Any:
    """The parser class ``vllm serve --enable-auto-tool-choice --tool-call-parser ...``
    builds, validated against the tokenizer as at start (raises ``TypeError`` there)."""
    return ParserManager.get_parser(tool_parser_name=tool_parser,
                                    reasoning_parser_name=reasoning_parser,
                                    enable_auto_tools=tool_parser is not None,
                                    model_name="test-model", tokenizer=tokenizer)


def chat_request(tools: Sequence[dict[str, Any]] = (), **fields: Any) -> ChatCompletionRequest:
    """vLLM's request record for a chat with ``tools``."""
    body: dict[str, Any] = {"model": "test-model",
                            "messages": [{"role": "user", "content": "Go."}], **fields}
    if tools:
        body["tools"] = list(tools)
    return ChatCompletionRequest.model_validate(body)


@attrs.frozen
class Streamed:
    """What a client assembles from a streamed reply."""

    content: str
    reasoning: str
    calls: tuple[tuple[str, str], ...]  # (name, arguments JSON) by index
    names_sent: tuple[int, ...]  # how many deltas named each call
    finish_reason: str | None


def stream(parser_cls: Any, tokenizer: Any, request: ChatCompletionRequest,
           chunks: Iterable[str], *, prompt_ids: Sequence[int] | None = None,
           finish_reason: str = "stop") -> Streamed:
    """Stream ``chunks`` (the engine's delta texts) through vLLM's chat stream processor."""
    parser = parser_cls(tokenizer, request.tools, chat_template_kwargs={}, model_config=None)
    processor = ChatStreamProcessor(request, parser, enable_auto_tools=True,
                                    parser_cls=parser_cls)
    prompt = list(prompt_ids) if prompt_ids is not None else prompt_token_ids(tokenizer, request)
    parts = [c for c in chunks if c]
    content, reasoning = [], []
    arguments: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    named: dict[int, int] = {}
    final = None
    for i, chunk in enumerate(parts or [""]):
        last = i == len(parts) - 1 or not parts
        ids = token_ids(chunk)
        if last and finish_reason == "stop":
            ids.append(tokenizer.eos_token_id)  # the EOS is a token id, never text
        delta, reason = processor.step(chunk, ids, finish_reason if last else None, prompt)
        final = reason if last else final
        if delta is None:
            continue
        content.append(delta.content or "")
        reasoning.append(delta.reasoning or "")
        for call in delta.tool_calls:
            if call.function is not None and call.function.name:
                names[call.index] = call.function.name
                named[call.index] = named.get(call.index, 0) + 1
            if call.function is not None and call.function.arguments:
                arguments.setdefault(call.index, []).append(call.function.arguments)
    indices = sorted(set(names) | set(arguments))
    return Streamed("".join(content), "".join(reasoning),
                    tuple((names.get(i, ""), "".join(arguments.get(i, []))) for i in indices),
                    tuple(named.get(i, 0) for i in indices), final)


def prompt_text(tokenizer: Any, request: ChatCompletionRequest) -> str:
    """The prompt vLLM renders for ``request`` (Hugging Face's own template renderer;
    a plain transcript for a tokenizer with no template)."""
    if not tokenizer.chat_template:
        return "".join(f"{m['role']}: {m['content']}\n" for m in request.messages)
    text = tokenizer.apply_chat_template(
        [dict(m) for m in request.messages], tools=[t.model_dump() for t in request.tools or ()]
        or None, add_generation_prompt=True, tokenize=False,
        **(request.chat_template_kwargs or {}))
    return str(text)


def prompt_token_ids(tokenizer: Any, request: ChatCompletionRequest) -> list[int]:
    """The prompt's token ids, as the engine reports them with each output."""
    return list(tokenizer.encode(prompt_text(tokenizer, request), add_special_tokens=False))


def whole(parser_cls: Any, tokenizer: Any, request: ChatCompletionRequest,
          text: str) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """``(content, reasoning, calls)`` of the non-streaming route's ``parser.parse``."""
    parser = parser_cls(tokenizer, request.tools, chat_template_kwargs={}, model_config=None)
    reasoning, content, calls = parser.parse(text, request, enable_auto_tools=True)
    return (content or "", reasoning or "",
            tuple((c.name, c.arguments) for c in calls or ()))


def canonical(calls: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Calls with their arguments as canonical JSON (key order, spacing)."""
    return [(name, json.dumps(json.loads(args), sort_keys=True)) for name, args in calls]
