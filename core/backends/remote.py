"""What backends that talk to a server over HTTP share: the connection and the failures.

:class:`ProviderPreset` and :class:`ResolvedConnection` say where requests go and
which key they carry; :func:`classify_exception` turns an SDK or transport failure
into a :class:`~toolwire.BackendError` with a ``kind`` and a message that says
what to do. A backend plugin names its SDK's exception classes once
(:class:`SDKErrors`), so the policy lives here and no SDK is imported by the core.
Every failure of a request or a stream maps to one ``kind`` (the ``kind`` of the
``error`` event the user sees) and a message that says what happened and what
to do:

============== ==========================================================
kind           cause
============== ==========================================================
auth           HTTP 401/403; the message names the key variable
not_found      HTTP 404; names the model and the base URL
rate_limit     HTTP 429 after the bounded retries
server         HTTP 5xx after the bounded retries, or an error in the stream
tools_rejected HTTP 400 refusing ``tools`` (vLLM without tool parsing, ...)
context        HTTP 400 saying the prompt is too long
bad_request    any other HTTP 4xx
timeout        no answer (or no more data) within the timeout
connection     nothing listens at the base URL, DNS failure, TLS failure
stream_cut     the connection ended before the reply was complete
bad_response   the server sent something that is not the streaming format
backend        the request could not be made (an unexpected local failure)
============== ==========================================================
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import Any

import attrs

from ..errors import BackendError

__all__ = [
    "RETRYABLE_STATUS",
    "ProviderPreset",
    "RequestContext",
    "ResolvedConnection",
    "SDKErrors",
    "classify_exception",
    "rejects_stream_options",
    "retry_after_seconds",
    "server_message",
    "status_of",
]


@attrs.frozen
class ProviderPreset:
    """Where a provider lives and where its API key comes from.

    :ivar name: the ``provider=`` value.
    :ivar base_url: the default API root; ``None`` when the user must give one.
    :ivar api_key_env: the only environment variable the key is read from.
    :ivar key_required: creating the backend fails when no key is found.
    :ivar placeholder_key: sent when there is no key (servers that want some
        ``Authorization`` header but check nothing).
    :ivar key_bound_to_origin: the key from the environment is sent only to
        the origin of :attr:`base_url` (hosted providers).
    :ivar start_hint: advice shown when the server cannot be reached.
    :ivar tools_hint: advice shown when the server rejects ``tools``.
    :ivar description: one line for documentation.
    """

    name: str
    base_url: str | None
    api_key_env: str | None
    key_required: bool = False
    placeholder_key: str | None = None
    key_bound_to_origin: bool = False
    start_hint: str = ""
    tools_hint: str = ""
    description: str = ""


@attrs.frozen
class ResolvedConnection:
    """The base URL and key one backend uses, and where the key came from.

    :ivar api_key: the key to send as ``Authorization: Bearer``; ``None`` sends
        no ``Authorization`` header.
    :ivar key_source: ``"api_key argument"``, the variable's name,
        ``"placeholder"`` or ``""`` (no key).
    :ivar withheld: why a key found in the environment was not sent (empty
        when nothing was withheld).
    :ivar provider_origin: the destination is the preset's own default origin.
    """

    preset: ProviderPreset
    base_url: str
    api_key: str | None = attrs.field(repr=False)
    key_source: str
    withheld: str = ""
    provider_origin: bool = True

    @property
    def is_openai(self) -> bool:
        """Requests go to OpenAI itself, so OpenAI's own headers may be sent."""
        return self.preset.name == "openai" and self.provider_origin


@attrs.frozen
class SDKErrors:
    """The exception classes of the HTTP client SDK a backend uses.

    :ivar status: an HTTP error status came back (it has ``status_code``, ``body``
        and ``response``).
    :ivar timeout: no answer, or no more data, within the timeout.
    :ivar connection: nothing could be reached, or the connection broke.
    :ivar api: any other error the SDK reports.
    """

    status: type[BaseException]
    timeout: type[BaseException]
    connection: type[BaseException]
    api: type[BaseException]

    @classmethod
    def of(cls, sdk: Any) -> SDKErrors:
        """The classes of an SDK module shaped as ``openai``'s (``APIStatusError``,
        ``APITimeoutError``, ``APIConnectionError``, ``APIError``)."""
        return cls(sdk.APIStatusError, sdk.APITimeoutError, sdk.APIConnectionError,
                   sdk.APIError)


RETRYABLE_STATUS: frozenset[int] = frozenset({429, 500, 502, 503, 504})
"""Statuses retried by the backend's own bounded loop."""

_TOOLS_REJECTED_MARKERS = (
    "tool-call-parser", "tool_call_parser", "enable-auto-tool-choice",
    "auto tool choice", '"auto" tool choice', "tool choice", "tool_choice",
    "does not support tools", "tools are not supported", "tools is not supported",
    "not support tool", "function calling is not", "tool use is not",
)
_CONTEXT_MARKERS = (
    "context length", "context_length", "maximum context", "context window",
    "too many tokens", "prompt is too long", "exceeds the context",
)
_GENERIC_TOOLS_HINT = (
    "For vLLM, start the server with --enable-auto-tool-choice --tool-call-parser NAME "
    "(the parser for the model family: hermes, qwen3_xml, llama3_json, mistral, ...); for "
    "llama-server, start it with --jinja; for Ollama, use a model whose template supports "
    "tools. Or run the model locally with toolwire's llama_cpp backend."
)
_MAX_MESSAGE = 400


@attrs.frozen
class RequestContext:
    """What an error message needs to know about the request that failed."""

    connection: ResolvedConnection
    model: str
    timeout: float | None = None

    @property
    def provider(self) -> str:
        """The preset's name."""
        return self.connection.preset.name

    @property
    def base_url(self) -> str:
        """Where requests go."""
        return self.connection.base_url

    def key_advice(self) -> str:
        """Where the key came from and what to check, for auth errors."""
        conn = self.connection
        var = conn.preset.api_key_env
        if conn.key_source == "api_key argument":
            return "Check the api_key passed to the backend."
        if conn.key_source == "placeholder":
            return ("Only a placeholder key was sent; pass api_key=... if this server needs "
                    "a real one.")
        if conn.key_source:
            return f"Check the key in {conn.key_source}."
        if conn.withheld:
            return f"No key was sent: {conn.withheld}."
        if var:
            return f"No key was sent: set {var} or pass api_key=...."
        return "No key was sent: pass api_key=...."


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an SDK status error, else ``None``."""
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def server_message(exc: BaseException) -> str:
    """The server's own error text, shortened."""
    body = getattr(exc, "body", None)
    text = ""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            for key in ("message", "detail", "msg"):
                if isinstance(inner.get(key), str) and inner[key]:
                    text = inner[key]
                    break
        elif isinstance(inner, str):
            text = inner
        if not text:
            detail = body.get("detail")
            text = detail if isinstance(detail, str) else str(dict(body))
    elif isinstance(body, str):
        text = body
    if not text:
        text = str(getattr(exc, "message", "") or exc)
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + "..."


def _body_text(exc: BaseException) -> str:
    return (server_message(exc) + " " + str(getattr(exc, "body", "") or "")).lower()


def rejects_stream_options(exc: BaseException) -> bool:
    """Whether a 400/422 complains about the ``stream_options`` field."""
    return status_of(exc) in (400, 422) and "stream_options" in _body_text(exc)


def retry_after_seconds(exc: BaseException) -> float | None:
    """The wait a 429/503 asks for (``retry-after-ms``, ``retry-after`` seconds or date)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(float(raw_ms) / 1000.0, 0.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(float(raw), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _cause(exc: BaseException) -> str:
    inner: BaseException | None = exc.__cause__ or exc.__context__
    seen = 0
    while inner is not None and seen < 5:
        text = str(inner)
        if text:
            return text
        inner = inner.__cause__ or inner.__context__
        seen += 1
    return str(exc) or type(exc).__name__


def classify_exception(exc: BaseException, ctx: RequestContext, sdk: SDKErrors, *,
                       mid_stream: bool = False, tools_offered: bool = True,
                       retries: int = 0) -> BackendError:
    """Map an SDK or transport exception to a :class:`BackendError` with a ``kind``.

    :param sdk: the exception classes of the SDK that raised it.
    :param mid_stream: the reply had begun (what was received is kept).
    :param tools_offered: the request carried ``tools``.
    :param retries: how many retries were made before giving up.
    """
    where = f"{ctx.provider} at {ctx.base_url}"
    kept = " What was received so far is kept." if mid_stream else ""
    tried = f" after {retries} {'retry' if retries == 1 else 'retries'}" if retries else ""
    if isinstance(exc, sdk.status):
        return _status_error(exc, ctx, where, tools_offered, tried)
    if isinstance(exc, sdk.timeout):
        limit = f"within {ctx.timeout:g} s" if ctx.timeout is not None else "in time"
        what = "the stream stalled: no more data came" if mid_stream else "no answer came"
        return BackendError(f"{what} from {where} {limit} (model {ctx.model!r}).{kept} "
                            "Raise timeout= for slow models.", kind="timeout")
    if isinstance(exc, sdk.connection):
        if mid_stream:
            return BackendError(f"the connection to {where} broke before the reply was "
                                f"complete ({_cause(exc)}).{kept}", kind="stream_cut")
        hint = ctx.connection.preset.start_hint
        return BackendError(f"could not connect to {where}: {_cause(exc)}."
                            + (f" {hint}" if hint else " Is the server running, and is "
                               "base_url right?"), kind="connection")
    if isinstance(exc, sdk.api):
        return BackendError(f"{where} reported an error "
                            f"{'mid-reply' if mid_stream else 'for the request'}: "
                            f"{server_message(exc)}.{kept}", kind="server")
    if mid_stream:
        return BackendError(f"unexpected data from {where}: {type(exc).__name__}: {exc}.{kept}",
                            kind="bad_response")
    return BackendError(f"the request to {where} failed: {type(exc).__name__}: {exc}",
                        kind="backend")


def _status_error(exc: Any, ctx: RequestContext, where: str, tools_offered: bool,
                  tried: str) -> BackendError:
    status: int = exc.status_code
    said = server_message(exc)
    head = f"HTTP {status} from {where}"
    if status in (401, 403):
        verb = "rejected the API key" if status == 401 else "refused access"
        return BackendError(f"{ctx.provider} {verb} ({head}: {said}). {ctx.key_advice()}",
                            kind="auth", status=status)
    if status == 404:
        pull = " (for Ollama: `ollama pull MODEL`)" if ctx.provider == "ollama" else ""
        return BackendError(
            f"model {ctx.model!r} not found at {ctx.base_url} ({head}: {said}). Check the "
            f"model name{pull} and that base_url is the API root (usually ending in /v1).",
            kind="not_found", status=status)
    if status == 429:
        wait = retry_after_seconds(exc)
        asked = f"; the server asks to wait {wait:g} s" if wait is not None else ""
        return BackendError(f"rate limited{tried} ({head}: {said}{asked}). Try again later.",
                            kind="rate_limit", status=status, retry_after=wait)
    if status >= 500:
        return BackendError(f"the server failed{tried} ({head}: {said}).", kind="server",
                            status=status)
    text = _body_text(exc)
    if tools_offered and any(m in text for m in _TOOLS_REJECTED_MARKERS):
        hint = ctx.connection.preset.tools_hint or _GENERIC_TOOLS_HINT
        return BackendError(
            f"the server rejected the tools in the request ({head}: {said}). It is not set "
            f"up for native tool calling (automatic tool choice). {hint}",
            kind="tools_rejected", status=status)
    if any(m in text for m in _CONTEXT_MARKERS):
        return BackendError(f"the conversation does not fit the model's context ({head}: "
                            f"{said}). Start a new conversation or shorten it.",
                            kind="context", status=status)
    return BackendError(f"the request was refused ({head}: {said}).", kind="bad_request",
                        status=status)
