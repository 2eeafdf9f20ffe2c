"""Running the app under uvicorn with the connection bounds of :class:`ServerLimits`.

uvicorn closes an idle keep-alive connection (``timeout_keep_alive``) and caps
the request head (``h11_max_incomplete_event_size``); :func:`bounded_http_protocol`
adds the rest as rules of the HTTP protocol, so they hold for every route:

* a request head must be complete ``header_timeout`` seconds after the
  connection opened (or the head's first byte came), else the connection closes;
* an answer sent before the whole request body has arrived (a route that does not
  read the body, a refusal, the body timeout's ``408``) says ``Connection: close``
  and ends the connection, with a lingering close
  (:class:`.lingering_transport.LingeringTransport`) so the answer is not lost;
* a client that stops reading what it was sent (more than the transport's
  high-water mark waits unsent) has ``send_timeout`` seconds to read again, else
  the connection is cut (a stream's generation is then cancelled as for any
  disconnect);
* connections waiting on their client (idle, a head or body half-sent, closing)
  are bounded per client and in all, the longest-waiting closed first, and
  requests being answered are bounded apart from them (``503``), so idle and
  half-sent connections never lock a client out (:mod:`.connection_book`).

The body's own deadline is the routes' (:func:`.http_input.read_body`). uvicorn
is imported only when a server is made.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Hashable, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from ...limits import ServerLimits
from .connection_book import ConnectionBook, client_key
from .http_input import RequestError
from .lingering_transport import LingeringTransport
from .responses import Receive, Scope, Send, error_response

if TYPE_CHECKING:
    import uvicorn

__all__ = ["bounded_http_protocol", "unread_bytes", "uvicorn_config"]

_TRIM_DELAY = 0.05
"""Seconds between a bound being passed and the closing: heads already on their way
(a client opening many connections at once) are read first, so those connections
count as being answered, not as waiting."""


class _Evictable(Hashable, Protocol):
    def evict(self) -> None: ...

    def has_unread_bytes(self) -> bool: ...


def unread_bytes(sock: Any) -> int:
    """Bytes the kernel holds for ``sock`` that nobody has read yet (0 where it cannot tell)."""
    try:
        import fcntl
        import termios

        count: int = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD,
                                                    b"\0\0\0\0"))[0]
    except (ImportError, OSError, ValueError, AttributeError):
        return 0
    return count


class _Trim:
    """Closes what a :class:`ConnectionBook` names, shortly after a bound is passed."""

    def __init__(self, book: ConnectionBook[_Evictable]) -> None:
        self.book = book
        self.pending = False

    def soon(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.pending or not self.book.over_bounds():
            return
        self.pending = True
        loop.call_later(_TRIM_DELAY, self._run)

    def _run(self) -> None:
        self.pending = False
        # a connection whose bytes have come but are not read yet is about to move on
        # (a head that is there is not a head being waited for): spare it this time
        for conn in self.book.evictions(spare=lambda c: c.has_unread_bytes()):
            conn.evict()


def _with_close(message: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    headers = list(message.get("headers", []))
    if not any(k.lower() == b"connection" and b"close" in v.lower() for k, v in headers):
        headers.append((b"connection", b"close"))
    return {**message, "headers": headers}


def bounded_http_protocol(limits: ServerLimits) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol under ``limits``' connection bounds (one server's
    connections share one :class:`ConnectionBook`)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    book: ConnectionBook[_Evictable] = ConnectionBook(
        max_running=limits.max_connections, max_idle=limits.max_idle_connections,
        max_idle_per_client=limits.max_idle_per_client)
    trim = _Trim(book)
    busy = RequestError(503, f"the server is answering {limits.max_connections} requests "
                             "already; try again shortly", code="server_busy")

    class BoundedH11Protocol(H11Protocol):
        """H11Protocol with a head deadline, close-after-unread-body and the book."""

        _head_timer: asyncio.TimerHandle | None = None
        _send_timer: asyncio.TimerHandle | None = None
        _lingering: LingeringTransport
        _client_key = ""
        _seen_cycle: object = None
        _refused_scope: object = None
        _closed = False

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._app = self.app
            self.app = self._answer

        # -- the connection's life ------------------------------------------------------

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self._lingering = LingeringTransport(
                cast(asyncio.Transport, transport), self.loop, linger=limits.linger_timeout,
                max_drain=limits.max_body_bytes, peer_may_send=self._peer_may_send)
            super().connection_made(self._lingering)
            self._client_key = client_key(self.client[0] if self.client else None)
            self._arm_head_timer()
            self._note_state()

        def data_received(self, data: bytes) -> None:
            if self._lingering.lingering:
                self._lingering.discard(data)
                return
            super().data_received(data)
            if self.conn.their_state is h11.IDLE:
                if self._head_timer is None and self.conn.trailing_data[0]:
                    self._arm_head_timer()  # part of a next request head has come
            else:
                self._cancel_head_timer()
            self._note_state()

        def on_response_complete(self) -> None:
            self._cancel_head_timer()
            super().on_response_complete()
            self._note_state()

        def connection_lost(self, exc: Exception | None) -> None:
            self._closed = True
            book.forget(self)
            self._cancel_head_timer()
            self._cancel_send_timer()
            self._lingering.socket_closed()
            super().connection_lost(exc)

        def shutdown(self) -> None:
            # the server is stopping: nothing is worth waiting for a client to send
            if self._lingering.lingering or self.conn.their_state is h11.SEND_BODY:
                self._lingering.abort()
                return
            super().shutdown()

        def pause_writing(self) -> None:
            # the client does not read what it was sent: it has send_timeout to start again
            super().pause_writing()
            if self._send_timer is None:
                self._send_timer = self.loop.call_later(limits.send_timeout,
                                                        self._lingering.abort)

        def resume_writing(self) -> None:
            self._cancel_send_timer()
            super().resume_writing()

        def _cancel_send_timer(self) -> None:
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None

        def evict(self) -> None:
            """Close at once: the book chose this connection to make room."""
            self._lingering.abort()

        def has_unread_bytes(self) -> bool:
            """Whether the client has sent bytes that the loop is about to read (not
            while reading is paused or the connection is closing: they may stay)."""
            if self._lingering.is_closing() or not self._lingering.is_reading():
                return False
            return unread_bytes(self._lingering.get_extra_info("socket")) > 0

        # -- what the book is told -----------------------------------------------------

        def _note_state(self) -> None:
            if self._closed:
                return
            cycle = self.cycle
            if cycle is not None and cycle is not self._seen_cycle:
                # a new request is admitted or refused now, in the order heads arrive
                self._seen_cycle = cycle
                if not book.admits(self):
                    self._refused_scope = cycle.scope
            if (self._lingering.is_closing() or cycle is None or cycle.response_complete
                    or self.conn.their_state is h11.SEND_BODY):
                book.wait(self, self._client_key)
                trim.soon(self.loop)
            else:
                book.run(self)

        def _peer_may_send(self) -> bool:
            # a body not all sent, or a malformed request (answered 400): more may come
            return self.conn.their_state in (h11.SEND_BODY, h11.ERROR)

        # -- every request ---------------------------------------------------------------

        async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
            """Serve one request: ``503`` when it was refused; ``Connection: close`` on
            an answer that starts before the whole body has arrived."""
            async def send_closing(message: MutableMapping[str, Any]) -> None:
                if message["type"] == "http.response.start" and \
                        self.conn.their_state is h11.SEND_BODY:
                    message = _with_close(message)
                await send(message)

            if scope is self._refused_scope:
                self.logger.warning("refused a request with 503: %d requests are being "
                                    "answered (--max-connections)", limits.max_connections)
                app = error_response(scope["path"], busy, [("Retry-After", "1")])
                await app(scope, receive, send_closing)
                return
            await self._app(scope, receive, send_closing)

        # -- the head deadline -------------------------------------------------------------

        def _arm_head_timer(self) -> None:
            self._cancel_head_timer()
            self._head_timer = self.loop.call_later(limits.header_timeout,
                                                    self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return BoundedH11Protocol


def uvicorn_config(app: Any, *, host: str, port: int, limits: ServerLimits,
                   log_level: str = "info") -> uvicorn.Config:
    """A uvicorn configuration that applies ``limits`` to every connection.

    Each configuration has its own connection accounts: serve it with one server.
    """
    import uvicorn

    return uvicorn.Config(
        app, host=host, port=port, log_level=log_level, access_log=False, lifespan="off",
        timeout_graceful_shutdown=5, http=bounded_http_protocol(limits), ws="none",
        timeout_keep_alive=max(1, round(limits.keep_alive_timeout)),
        h11_max_incomplete_event_size=limits.max_header_bytes)
