"""Reading a request body: size, time and nesting bounds, and one typed error; and
watching the client's line while a route answers (:class:`ClientLine`).

Works on the raw ASGI ``receive`` channel, so an upload that is cut off, too
big, too slow or nested too deeply becomes a :class:`RequestError` (or a quiet
:class:`ClientGone`) instead of an exception with a traceback. A route reads its
body with :func:`read_json_request`, which decodes and checks it in a worker
thread: decoding a body of 8 MiB and reading 120,000 calls from it took the event
loop, and every other client, for seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import re
import threading
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    MutableMapping,
)
from typing import Any, TypeVar

from ...limits import ServerLimits
from ...vocabulary.cancel import CancelToken

__all__ = [
    "ClientGone",
    "ClientLine",
    "RequestError",
    "decode_json_body",
    "header_value",
    "json_depth_exceeds",
    "read_body",
    "read_json_request",
    "require_json_media_type",
]

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Parsed = TypeVar("Parsed")

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class RequestError(Exception):
    """A request the server refuses, with the HTTP status and what is wrong.

    :param status: the HTTP status (``400``, ``404``, ``408``, ``413``, ``415``, ``429``...).
    :param message: what is wrong, for the client.
    :param param: the request field concerned (OpenAI's ``param``), if any.
    :param code: a machine-readable code (OpenAI's ``code``), if any.
    """

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


class ClientGone(Exception):
    """The client closed the connection before its request was read (nothing to answer)."""


class ClientLine:
    """A client's connection while a route answers: gone once the client disconnects
    or a send fails, either of which cancels ``token`` (its generation).

    :param token: what the client's leaving cancels.
    """

    def __init__(self, token: CancelToken) -> None:
        self.token = token
        self.gone = False

    @contextlib.asynccontextmanager
    async def watching(self, receive: Receive) -> AsyncIterator[None]:
        """Watch for the client's disconnect while the block answers."""
        watcher = asyncio.create_task(self._wait(receive))
        try:
            yield
        finally:
            watcher.cancel()

    async def _wait(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.leave()

    async def send(self, send: Send, message: dict[str, Any]) -> None:
        """Send ``message`` unless the client has gone; a failed send means it has."""
        if self.gone:
            return
        try:
            await send(message)
        except OSError:
            self.leave()

    def leave(self) -> None:
        """The client has gone: cancel its generation."""
        self.gone = True
        self.token.cancel("disconnected")


def header_value(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first value of header ``name`` (lower case) in an ASGI header list."""
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


def require_json_media_type(headers: Iterable[tuple[bytes, bytes]]) -> None:
    """Refuse a body not declared as ``application/json`` (``415``).

    A plain cross-site form cannot send that type, so this also stops another web
    page from posting to a local server.
    """
    declared = (header_value(headers, b"content-type") or "").split(";")[0].strip().lower()
    if declared != "application/json":
        raise RequestError(415, "send the body as application/json",
                           code="unsupported_media_type")


async def read_body(receive: Receive, headers: Iterable[tuple[bytes, bytes]], *,
                    limit: int, timeout: float) -> bytes:
    """Read the whole request body from ``receive``.

    :raises RequestError: ``413`` as soon as the body is known to exceed
        ``limit`` bytes; ``408`` when it has not all arrived within ``timeout``
        seconds.
    :raises ClientGone: the client disconnected mid-upload.
    """
    declared = header_value(headers, b"content-length") or ""
    if declared.strip().isdigit() and int(declared) > limit:
        raise _too_large(limit)
    body = bytearray()
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _too_slow(timeout)
        try:
            message = await asyncio.wait_for(receive(), remaining)
        except TimeoutError:
            raise _too_slow(timeout) from None
        if message["type"] == "http.disconnect":
            raise ClientGone
        body.extend(message.get("body", b""))
        if len(body) > limit:
            raise _too_large(limit)
        if not message.get("more_body", False):
            return bytes(body)


async def read_json_request(receive: Receive, headers: Iterable[tuple[bytes, bytes]],
                            limits: ServerLimits, parse: Callable[[Any], Parsed]) -> Parsed:
    """Read a request's JSON body under ``limits`` and turn it into a request with
    ``parse``, off the event loop.

    The body arrives on the event loop (waiting costs nothing); its decoding and
    ``parse`` (checking every field, reading every message) run in a worker thread,
    so however large the body, the server goes on answering its other clients.

    :raises RequestError: as :func:`read_body` and :func:`decode_json_body`, or from
        ``parse``.
    :raises ClientGone: the client disconnected mid-upload.
    """
    body = await read_body(receive, headers, limit=limits.max_body_bytes,
                           timeout=limits.body_timeout)

    def decode_and_parse() -> Parsed:
        with _COLLECTOR.held():
            return parse(decode_json_body(body, max_depth=limits.max_json_depth))

    return await asyncio.to_thread(decode_and_parse)


class _CollectorPause:
    """Python's cyclic garbage collector held off while bodies become requests.

    Decoding 8 MiB of JSON makes millions of objects and no cycles; the collector,
    set off by their number, would walk every object of the process again and again
    while they are made (most of the 8 s a 12 MB body took, and pauses of a second
    for every other client, since a collection stops every thread). Reading one body
    is bounded in size and time, so the pause is too; reads that overlap share it,
    and the collector runs again as the last one ends (if it ran before the first).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._resume = False

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the collector off for the block."""
        with self._lock:
            self._holders += 1
            if self._holders == 1:
                self._resume = gc.isenabled()
                gc.disable()
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0 and self._resume:
                    gc.enable()


_COLLECTOR = _CollectorPause()


def _too_large(limit: int) -> RequestError:
    return RequestError(413, f"the body is larger than {limit} bytes",
                        code="request_too_large")


def _too_slow(timeout: float) -> RequestError:
    return RequestError(408, f"the body did not arrive within {timeout:g} seconds",
                        code="request_timeout")


def json_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether arrays and objects in ``value`` nest more than ``limit`` deep (no recursion)."""
    return _first_flaw(value, limit) == "depth"


def _first_flaw(value: Any, limit: int) -> str | None:
    """``"depth"`` (nesting over ``limit``), ``"surrogate"`` (a key or string holding a
    lone surrogate) or ``None``: one walk, no recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _LONE_SURROGATE.search(item):
                return "surrogate"
            continue
        if isinstance(item, Mapping):
            if any(_LONE_SURROGATE.search(key) for key in item):
                return "surrogate"
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return "depth"
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, Mapping | list | str))
    return None


def decode_json_body(body: bytes, *, max_depth: int) -> Any:
    """The JSON value of a body.

    A string may not hold a lone surrogate (``"\\ud800"`` alone): JSON lets the
    escape through, but it is not text, and no model, template or tokenizer can
    take it.

    :raises RequestError: ``400`` when the body is not JSON (UTF-8), nests more
        than ``max_depth`` levels, or holds a lone surrogate.
    """
    try:
        value = json.loads(body)
    except RecursionError:
        raise _too_deep(max_depth) from None
    except ValueError as exc:
        raise RequestError(400, f"the body is not valid JSON: {exc}",
                           code="invalid_json") from None
    flaw = _first_flaw(value, max_depth)
    if flaw == "depth":
        raise _too_deep(max_depth)
    if flaw == "surrogate":
        raise RequestError(400, "the body holds a lone surrogate escape (\\ud800 to "
                                "\\udfff without its pair), which is not text",
                           code="invalid_json")
    return value


def _too_deep(limit: int) -> RequestError:
    return RequestError(400, f"the body nests arrays and objects more than {limit} levels deep",
                        code="invalid_json")
