"""The two streaming text-completion endpoints, read into one kind of item.

* ``completions``: OpenAI-style ``POST /v1/completions`` (vLLM, SGLang,
  llama-cpp-python's server, llama-server), through the ``openai`` SDK's
  ``completions`` API; text in ``choices[0].text``, the end in
  ``finish_reason``, token counts in a last ``usage`` chunk where the engine
  sends one.
* ``llama``: llama-server's native ``POST /completion``, through plain
  ``httpx2`` streaming; server-sent events ``data: {"content": ..., "stop":
  false}``, the last one with ``"stop": true``, ``stop_type`` (``eos``,
  ``word``, ``limit``) and ``tokens_predicted``.

Both readers yield :class:`TextPiece`, :class:`Finished` and :class:`Usage`
items and raise the ``openai`` SDK's exception types for every failure (the
native reader converts ``httpx2``'s), so one mapping,
:func:`toolwire.plugins.openai_compat.classify_exception`, names every error.

:func:`grammar_fields` puts a grammar where each engine reads one: ``grammar``
(GBNF) for the llama.cpp servers, ``structured_outputs.grammar`` for vLLM,
``ebnf`` for SGLang; other engines cannot be constrained. A lazy grammar (calls
constrained from their opening marker on, :func:`lazy_grammar_fields`) goes to
llama-server only.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from toolwire.plugin_api import OpenedStream, SDKErrors

from .engine import EngineInfo

__all__ = [
    "Finished",
    "OpenedStream",
    "TextPiece",
    "Usage",
    "grammar_fields",
    "lazy_grammar_fields",
    "open_completions_stream",
    "open_llama_stream",
    "openai_errors",
    "special_token_fields",
]

_LLAMA_STOP_TYPES = {"eos": "stop", "word": "stop", "limit": "length"}
_FINISH_REASONS = {"stop": "stop", "length": "length", "eos": "stop"}


@attrs.frozen
class TextPiece:
    """Text the model wrote."""

    text: str


@attrs.frozen
class Finished:
    """The engine said why the reply ended: ``stop`` or ``length``."""

    reason: str


@attrs.frozen
class Usage:
    """Token counts the engine reported (``None`` when it did not say)."""

    completion_tokens: int | None = None
    prompt_tokens: int | None = None


Item = TextPiece | Finished | Usage


def grammar_fields(engine: EngineInfo, grammar: str) -> dict[str, Any] | None:
    """The request fields that carry ``grammar`` to this engine, or ``None`` if none can."""
    if engine.is_llama_cpp:
        return {"grammar": grammar}
    if engine.kind == "vllm":
        return {"structured_outputs": {"grammar": grammar}}
    if engine.kind == "sglang":
        return {"ebnf": grammar}
    return None


def lazy_grammar_fields(engine: EngineInfo, grammar: str,
                        patterns: tuple[str, ...]) -> dict[str, Any] | None:
    """The fields of a grammar that applies from a trigger on (llama-server only).

    Each trigger is a full-text pattern (llama.cpp's trigger type 3,
    ``PATTERN_FULL``); the grammar starts at the pattern's first group.
    """
    if engine.kind != "llama_server":
        return None
    return {"grammar": grammar, "grammar_lazy": True,
            "grammar_triggers": [{"type": 3, "value": p} for p in patterns]}


def special_token_fields(engine: EngineInfo, markers: tuple[str, ...]) -> dict[str, Any]:
    """Ask the engine to write the template's special-token markup as text.

    vLLM and SGLang skip special tokens when detokenizing unless told, and put
    spaces between them; llama-server writes a special token only when it is
    among ``preserved_tokens``.
    """
    if engine.kind in ("vllm", "sglang"):
        return {"skip_special_tokens": False, "spaces_between_special_tokens": False}
    if engine.kind == "llama_server" and markers:
        return {"preserved_tokens": list(markers)}
    return {}


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


# -- OpenAI-style /v1/completions ----------------------------------------------------


def open_completions_stream(client: Any, kwargs: Mapping[str, Any]) -> OpenedStream:
    """Send ``client.completions.create(**kwargs)`` (``stream=True``); raises SDK errors."""
    stream = client.completions.create(**kwargs)
    return OpenedStream(_completion_items(stream), stream.close)


def _completion_items(stream: Any) -> Iterator[Item]:
    for chunk in stream:
        data = chunk.to_dict()
        usage = data.get("usage")
        if isinstance(usage, Mapping):
            yield Usage(_count(usage.get("completion_tokens")), _count(usage.get("prompt_tokens")))
        choices = data.get("choices")
        if not isinstance(choices, list):
            continue
        for choice in choices:
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            text = choice.get("text")
            if isinstance(text, str) and text:
                yield TextPiece(text)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                yield Finished(_FINISH_REASONS.get(reason.lower(), "stop"))


# -- llama-server's native /completion ------------------------------------------------


def open_llama_stream(http: Any, url: str, body: Mapping[str, Any]) -> OpenedStream:
    """``POST url`` with ``body`` and stream the answer; raises SDK errors.

    :param http: an ``httpx2.Client`` (its headers carry the API key).
    """
    import httpx2
    import openai

    request = http.build_request("POST", url, json=dict(body))
    try:
        response = http.send(request, stream=True)
    except httpx2.TimeoutException as exc:
        raise openai.APITimeoutError(request=request) from exc
    except httpx2.HTTPError as exc:
        raise openai.APIConnectionError(message=str(exc) or type(exc).__name__,
                                        request=request) from exc
    if response.status_code != 200:
        try:
            response.read()
        except httpx2.HTTPError:
            pass
        finally:
            response.close()
        raise _status_error(response)
    return OpenedStream(_llama_items(response), response.close)


def _status_error(response: Any) -> Exception:
    import openai

    try:
        body: Any = response.json()
    except ValueError:
        body = response.text[:2000] or None
    error = body.get("error") if isinstance(body, Mapping) else None
    said = error.get("message") if isinstance(error, Mapping) else None
    message = said if isinstance(said, str) else f"HTTP {response.status_code}"
    return openai.APIStatusError(message, response=response, body=body)


def _llama_items(response: Any) -> Iterator[Item]:
    import httpx2
    import openai

    try:
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue  # comments (": ping"), blank lines, other fields
            payload = line[len("data:"):].strip()
            if payload == "[DONE]":
                continue
            data = json.loads(payload)
            if not isinstance(data, Mapping):
                raise ValueError(f"an event that is not a JSON object: {payload[:200]}")
            error = data.get("error")
            if error is not None:
                said = error.get("message") if isinstance(error, Mapping) else error
                raise openai.APIError(str(said), response.request,
                                      body=error if isinstance(error, Mapping) else None)
            content = data.get("content")
            if isinstance(content, str) and content:
                yield TextPiece(content)
            if data.get("stop") is True:
                kind = data.get("stop_type")
                yield Finished(_LLAMA_STOP_TYPES.get(kind, "stop") if isinstance(kind, str)
                               else "stop")
                yield Usage(_count(data.get("tokens_predicted")),
                            _count(data.get("tokens_evaluated")))
                return
    except httpx2.TimeoutException as exc:
        raise openai.APITimeoutError(request=response.request) from exc
    except httpx2.HTTPError as exc:
        raise openai.APIConnectionError(message=str(exc) or type(exc).__name__,
                                        request=response.request) from exc


@functools.cache
def openai_errors() -> SDKErrors:
    """The ``openai`` SDK's error classes (this backend's transport raises them)."""
    import openai

    return SDKErrors.of(openai)
