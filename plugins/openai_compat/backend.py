"""The ``openai_compat`` backend: native ``tools`` on any OpenAI-compatible server.

Each model turn is one streamed chat-completions request built with the
``openai`` SDK: ``messages`` from :func:`toolwire.to_openai_messages`, the offered
tools as ``tools`` (left out entirely when none are offered, as on the reserved
final turn), ``stream=True`` and ``stream_options={"include_usage": true}``
(dropped for good if the server rejects it). There is no text protocol and no
stop string: the server parses the model's calls and streams them as
``tool_calls`` deltas, which :class:`ToolCallAssembler` puts together.

Failures never raise out of :meth:`OpenAICompatBackend.stream_turn`: they become
an ``error`` event with a ``kind`` (see :mod:`.errors`) and ``TurnEnd("error")``.
429 and 5xx answers are retried by the backend itself (the SDK's own retries
are off), honouring ``retry-after``, at most ``max_retries`` times and
``max_retry_wait`` seconds in all.

The ``openai`` package is imported when the first client is made, never at
import time.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import string
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from toolwire.plugin_api import (
    BackendError,
    Broken,
    CancelToken,
    DiagnosticEvent,
    ErrorEvent,
    Event,
    ModelRequest,
    OpenedStream,
    ReasoningEvent,
    RequestContext,
    ResolvedConnection,
    RetryNotice,
    RetryPolicy,
    StreamPump,
    TextEvent,
    ToolCallEndEvent,
    TurnEnd,
    aend_at_repeated_call,
    classify_exception,
    end_at_repeated_call,
    extra_hint,
    rejects_stream_options,
    to_openai_messages,
)

from .assembler import ToolCallAssembler
from .errors import openai_errors
from .presets import PRESETS, resolve_connection

if TYPE_CHECKING:
    import openai

__all__ = ["DEFAULT_TIMEOUT", "OpenAICompatBackend", "TurnTranslator", "normalize_usage"]

DEFAULT_TIMEOUT = 600.0
"""Seconds to wait for the answer to start, and between two pieces of it."""

_ALNUM = string.ascii_letters + string.digits
_UNSENT_KEY = "toolwire-no-key"  # satisfies the SDK; the Authorization header is omitted
_FINISH_REASONS = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}
_MAX_REMEMBERED_EXTRAS = 512

Item = Event | TurnEnd


def normalize_usage(usage: object) -> dict[str, Any] | None:
    """The numeric top-level counts of a ``usage`` object (``prompt_tokens``, ...)."""
    if not isinstance(usage, Mapping):
        return None
    counts = {k: v for k, v in usage.items()
              if isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)}
    return counts or None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


class TurnTranslator:
    """Turns one reply's chunks (as dicts) into toolwire events.

    Shared by the sync and async paths: :meth:`feed` per chunk, then
    :meth:`end` when the stream ends cleanly, or :meth:`broken` when it fails.

    :param tools: ``{name: parameters schema}`` of the offered tools.
    :param ctx: for error messages.
    """

    def __init__(self, tools: Mapping[str, Mapping[str, Any]], ctx: RequestContext) -> None:
        self.assembler = ToolCallAssembler(tools)
        self.ctx = ctx
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None

    def feed(self, chunk: Mapping[str, Any]) -> list[Event]:
        """One ``chat.completion.chunk``; returns its events."""
        usage = normalize_usage(chunk.get("usage"))
        if usage:
            self.usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return []
        choice = next((c for c in choices if isinstance(c, Mapping) and c.get("index", 0) == 0),
                      None)
        if choice is None:
            return []
        events: list[Event] = []
        delta = choice.get("delta")
        if isinstance(delta, Mapping):
            reasoning = _text(delta.get("reasoning_content")) or _text(delta.get("reasoning"))
            if reasoning:
                events.append(ReasoningEvent(reasoning))
            content = _text(delta.get("content"))
            if content:
                events.append(TextEvent(content))
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                events.extend(self.assembler.feed(calls))
            legacy = delta.get("function_call")
            if isinstance(legacy, Mapping):
                events.extend(self.assembler.feed([{"index": 0, "function": legacy}]))
        reason = choice.get("finish_reason")
        if isinstance(reason, str) and reason:
            self.finish_reason = reason
        return events

    def end(self) -> list[Item]:
        """The stream ended cleanly: the calls, then the ``TurnEnd``."""
        if self.finish_reason is None:
            return [ErrorEvent("stream_cut",
                               f"the stream from {self.ctx.provider} at {self.ctx.base_url} "
                               "ended before the reply was complete (no finish_reason). What "
                               "was received so far is kept."),
                    TurnEnd("error", self.usage)]
        raw = self.finish_reason.lower()
        reason = _FINISH_REASONS.get(raw, "stop")
        out: list[Item] = list(self.assembler.finish(truncated=reason == "length"))
        if any(isinstance(e, ErrorEvent) for e in out):
            out.append(TurnEnd("error", self.usage))
            return out
        if reason == "content_filter":
            out.append(DiagnosticEvent("content_filter",
                                       "the provider's content filter stopped the reply; what "
                                       "was written is kept", raw))
        elif reason == "stop" and any(isinstance(e, ToolCallEndEvent) for e in out):
            reason = "tool_calls"  # Gemini and Ollama say "stop" after calls
        out.append(TurnEnd(reason, self.usage))
        return out

    def broken(self, exc: BaseException) -> list[Item]:
        """The stream failed part-way: an ``error`` event and ``TurnEnd("error")``."""
        if self.finish_reason is not None:
            return self.end()  # only the usage chunk or [DONE] was lost
        error = classify_exception(exc, self.ctx, openai_errors(), mid_stream=True)
        return [ErrorEvent(error.kind, str(error)), TurnEnd("error", self.usage)]


def _failure(error: BackendError, usage: Mapping[str, Any] | None = None) -> list[Item]:
    return [ErrorEvent(error.kind, str(error)), TurnEnd("error", usage)]


def _number(value: object, default: float | None) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return default


def _env_header_names(environ: Mapping[str, str]) -> list[str]:
    raw = environ.get("OPENAI_CUSTOM_HEADERS") or ""
    return [line.split(":", 1)[0].strip() for line in raw.splitlines()
            if ":" in line and line.split(":", 1)[0].strip()]


class OpenAICompatBackend:
    """A model behind an OpenAI-compatible chat-completions API.

    :param provider: a preset: ``openai``, ``ollama``, ``vllm``, ``gemini``,
        ``anthropic``, ``llama_server`` or ``custom`` (see ``docs/remote.md``).
    :param model: the model name the server knows.
    :param base_url: the API root; overrides the preset's.
    :param api_key: an explicit key (sent to whatever ``base_url`` is); without
        it the key comes only from the preset's own variable.
    :param timeout: seconds to wait for the answer to start and between pieces
        of it; ``None`` waits forever.
    :param max_retries: retries of a 429 or 5xx answer (the SDK's own are off).
    :param max_retry_wait: the most seconds all retries of one turn may wait.
    :param retry_backoff: first wait when the server gives no ``retry-after``;
        doubles on each retry.
    :param extra_body: extra request fields (``temperature``, ``max_tokens``,
        provider options), sent on every request; a turn's ``request.sampling``
        fields are sent as request fields and replace the same ones here.
    :param client: an ``openai.OpenAI`` client to use as it is (its own key
        and URL; ``provider``, ``base_url`` and ``api_key`` then only label
        error messages).
    :param async_client: the same for :meth:`astream_turn`.
    :param environ: where key variables are read (default ``os.environ``).
    :raises BackendError: ``kind="config"`` for an unknown provider or missing
        base URL, ``kind="auth"`` for a missing required key.
    """

    name = "openai_compat"

    def __init__(
        self,
        provider: str = "openai",
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        max_retries: int = 3,
        max_retry_wait: float = 30.0,
        retry_backoff: float = 1.0,
        extra_body: Mapping[str, Any] | None = None,
        client: openai.OpenAI | None = None,
        async_client: openai.AsyncOpenAI | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        if not model:
            raise BackendError("openai_compat needs model= (the model name the server knows)",
                               kind="config")
        self.retry = RetryPolicy(max_retries, max_retry_wait, retry_backoff,
                                 resend=self._drop_stream_options)
        env = os.environ if environ is None else environ
        if client is not None or async_client is not None:
            given = client if client is not None else async_client
            url = str(getattr(given, "base_url", "") or base_url or "")
            timeout = _number(getattr(given, "timeout", None), timeout)
            self.connection = ResolvedConnection(PRESETS.get(provider, PRESETS["custom"]), url,
                                                 None, "the client given to the backend")
        else:
            self.connection = resolve_connection(provider, base_url=base_url, api_key=api_key,
                                                 environ=env)
        self.provider = provider
        self.model = model
        self.timeout = timeout
        self.extra_body: dict[str, Any] = dict(extra_body or {})
        self._client = client
        self._async_client = async_client
        self._own_clients = client is None and async_client is None
        self._headers_from_env = _env_header_names(env)
        self._lock = threading.Lock()
        self._stream_options = True
        self._extras: OrderedDict[str, Mapping[str, Any]] = OrderedDict()
        self.context = RequestContext(self.connection, model, timeout)

    def __repr__(self) -> str:
        return (f"OpenAICompatBackend(provider={self.provider!r}, model={self.model!r}, "
                f"base_url={self.connection.base_url!r})")

    # -- the Backend protocol -------------------------------------------------

    def make_call_id(self, index: int) -> str:
        """An OpenAI-style id: ``call_`` and 24 random letters and digits."""
        return "call_" + "".join(secrets.choice(_ALNUM) for _ in range(24))

    def stream_turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Item]:
        """Run one turn over HTTP; yield its events, then a ``TurnEnd``. A call the
        reply already wrote ends it (the repeated-call rule, ``docs/grammar.md``)."""
        yield from end_at_repeated_call(lambda token: self._stream_turn(request, token), cancel)

    def _stream_turn(self, request: ModelRequest, cancel: CancelToken) -> Iterator[Item]:
        if cancel.cancelled:
            yield TurnEnd("cancelled")
            return
        try:
            client = self._sync_client()
        except BackendError as exc:
            yield from _failure(exc)
            return

        def open_stream() -> OpenedStream:
            create: Callable[..., Any] = client.chat.completions.create
            stream = create(**self._request_kwargs(request))  # again on a retry: fields change
            return OpenedStream((chunk.to_dict() for chunk in stream), stream.close)

        translator = TurnTranslator(request.tool_parameters(), self.context)
        # read on the pump's thread: a cancel (Ctrl-C) ends the turn even while the
        # provider sends nothing, instead of waiting for its next byte
        pump = StreamPump(open_stream, self.retry).start()
        try:
            for item in pump.items(lambda: cancel.cancelled):
                if isinstance(item, RetryNotice):
                    yield self.retry.note(item, self.connection.base_url)
                elif isinstance(item, Broken):
                    yield from (translator.broken(item.error) if item.opened
                                else self._refused(item.error, request, item.retries))
                    return
                else:
                    yield from translator.feed(item)
                if cancel.cancelled:
                    break
        finally:
            pump.abandon()
        if cancel.cancelled:
            yield TurnEnd("cancelled", translator.usage)
            return
        self._remember_extras(translator)
        yield from translator.end()

    async def astream_turn(self, request: ModelRequest,
                           cancel: CancelToken | None = None) -> AsyncIterator[Item]:
        """:meth:`stream_turn` on ``AsyncOpenAI``, for asyncio applications."""
        async for item in aend_at_repeated_call(
                lambda token: self._astream_turn(request, token), cancel or CancelToken()):
            yield item

    async def _astream_turn(self, request: ModelRequest,
                            token: CancelToken) -> AsyncIterator[Item]:
        if token.cancelled:
            yield TurnEnd("cancelled")
            return
        try:
            client = self._async()
        except BackendError as exc:
            for item in _failure(exc):
                yield item
            return
        translator = TurnTranslator(request.tool_parameters(), self.context)
        attempt = 0
        waited = 0.0
        while True:
            try:
                create: Callable[..., Any] = client.chat.completions.create
                stream = await create(**self._request_kwargs(request))
                break
            except Exception as exc:
                step = self.retry.decide(exc, attempt, waited)
                if isinstance(step, BaseException):
                    for item in self._refused(step, request, attempt):
                        yield item
                    return
                if step is not None:
                    yield self.retry.note(RetryNotice(exc, step, attempt),
                                          self.connection.base_url)
                    attempt += 1
                    waited += step
                if await _sleep_unless_cancelled(token, step or 0.0):
                    yield TurnEnd("cancelled")
                    return
        try:
            async for chunk in stream:
                if token.cancelled:
                    break
                for event in translator.feed(chunk.to_dict()):
                    yield event
                if token.cancelled:
                    break
        except Exception as exc:
            if not token.cancelled:
                for item in translator.broken(exc):
                    yield item
                return
        finally:
            await stream.close()
        if token.cancelled:
            yield TurnEnd("cancelled", translator.usage)
            return
        self._remember_extras(translator)
        for item in translator.end():
            yield item

    # -- requests -----------------------------------------------------------------

    def _messages(self, request: ModelRequest) -> list[dict[str, Any]]:
        messages = to_openai_messages(request.messages)
        if self._extras:
            for message in messages:
                for call in message.get("tool_calls") or ():
                    extra = self._extras.get(call.get("id") or "")
                    if extra:
                        call["extra_content"] = dict(extra)
        return messages

    def _request_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model, "messages": self._messages(request),
                                  "stream": True}
        tools = request.tool_schemas()
        if tools:
            kwargs["tools"] = tools
            # passed to the provider as they are; the defaults are not sent
            if request.tool_choice != "auto":
                kwargs["tool_choice"] = request.tool_choice
            if not request.parallel_tool_calls:
                kwargs["parallel_tool_calls"] = False
        if self._stream_options:
            kwargs["stream_options"] = {"include_usage": True}
        sampling = self._sampling_fields(request)
        top_k = sampling.pop("top_k", None)
        kwargs.update(sampling)
        # the turn's own settings win over the same fields of extra_body
        replaced = set(sampling) | ({"max_tokens", "max_completion_tokens"}
                                    if request.sampling.max_tokens is not None else set())
        extra = {k: v for k, v in self.extra_body.items() if k not in replaced}
        if top_k is not None and not self.connection.is_openai:
            extra["top_k"] = top_k  # not an OpenAI field: the engines that take it read it there
        if extra:
            kwargs["extra_body"] = extra
        headers = self._request_headers()
        if headers is not None:
            kwargs["extra_headers"] = headers
        return kwargs

    def _sampling_fields(self, request: ModelRequest) -> dict[str, Any]:
        """A turn's sampling overrides as request fields: the token cap as
        ``max_completion_tokens`` to OpenAI (whose reasoning models refuse
        ``max_tokens``), as ``max_tokens`` to the others (the name they all read)."""
        fields = request.sampling.fields()
        cap = fields.pop("max_tokens", None)
        if cap is not None:
            fields["max_completion_tokens" if self.connection.is_openai else "max_tokens"] = cap
        return fields

    def _request_headers(self) -> dict[str, Any] | None:
        """``Authorization`` exactly as resolved, OpenAI's own headers only to OpenAI."""
        if not self._own_clients:
            return None
        from openai import omit

        key = self.connection.api_key
        headers: dict[str, Any] = {"Authorization": f"Bearer {key}" if key else omit}
        if not self.connection.is_openai:
            for name in ("OpenAI-Organization", "OpenAI-Project", *self._headers_from_env):
                if name.lower() != "authorization":
                    headers[name] = omit
        return headers

    def _drop_stream_options(self, exc: BaseException) -> bool:
        if self._stream_options and rejects_stream_options(exc):
            self._stream_options = False  # this server does not know the field: send again
            return True
        return False

    def _refused(self, exc: BaseException, request: ModelRequest, retries: int) -> list[Item]:
        """A request the server refused (after ``retries`` retries), as the turn's end."""
        return _failure(classify_exception(exc, self.context, openai_errors(),
                                           tools_offered=bool(request.tools), retries=retries))

    def _remember_extras(self, translator: TurnTranslator) -> None:
        for call_id, extra in translator.assembler.provider_extras().items():
            self._extras[call_id] = extra
            self._extras.move_to_end(call_id)
        while len(self._extras) > _MAX_REMEMBERED_EXTRAS:
            self._extras.popitem(last=False)

    # -- clients --------------------------------------------------------------------

    def _client_options(self) -> dict[str, Any]:
        return {"api_key": self.connection.api_key or _UNSENT_KEY,
                "base_url": self.connection.base_url, "timeout": self.timeout,
                "max_retries": 0}

    def _sync_client(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                self._client = _make_client("OpenAI", self._client_options())
            elif not self._own_clients and self._client.max_retries:
                self._client = self._client.with_options(max_retries=0)
            return self._client

    def _async(self) -> openai.AsyncOpenAI:
        with self._lock:
            if self._async_client is None:
                self._async_client = _make_client("AsyncOpenAI", self._client_options())
            elif not self._own_clients and self._async_client.max_retries:
                self._async_client = self._async_client.with_options(max_retries=0)
            return self._async_client

    def close(self) -> None:
        """Close the HTTP connections of a client this backend made."""
        if self._own_clients and self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        """Close both clients this backend made."""
        self.close()
        if self._own_clients and self._async_client is not None:
            await self._async_client.close()
            self._async_client = None

    def __enter__(self) -> OpenAICompatBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _make_client(kind: str, options: Mapping[str, Any]) -> Any:
    """An ``openai.OpenAI`` or ``openai.AsyncOpenAI``; failures become ``BackendError``."""
    try:
        import openai
    except ImportError as exc:
        raise BackendError("the openai_compat backend needs the openai package: "
                           f"{extra_hint('remote')}", kind="config") from exc
    try:
        return getattr(openai, kind)(**options)
    except Exception as exc:
        raise BackendError(f"cannot make the openai client for {options.get('base_url')}: "
                           f"{exc}", kind="config") from exc


async def _sleep_unless_cancelled(cancel: CancelToken, delay: float) -> bool:
    """Sleep ``delay`` seconds; return ``True`` as soon as ``cancel`` is set."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + delay
    while not cancel.cancelled:
        left = deadline - loop.time()
        if left <= 0:
            return False
        await asyncio.sleep(min(left, 0.05))
    return True
