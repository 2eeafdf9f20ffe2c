"""Running the app under uvicorn with the connection bounds of :class:`ServerLimits`.

uvicorn closes an idle keep-alive connection (``timeout_keep_alive``), refuses
requests beyond ``limit_concurrency`` with ``503`` and caps the request head
(``h11_max_incomplete_event_size``), but it waits for ever on a connection that
never finishes sending its request head: :func:`bounded_http_protocol` adds that
bound (the body's bound is the routes', see :func:`.http_input.read_body`).
uvicorn is imported only when a server is made.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from .limits import ServerLimits

if TYPE_CHECKING:
    import uvicorn

__all__ = ["bounded_http_protocol", "uvicorn_config"]


def bounded_http_protocol(header_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, closing a connection whose request head is not complete
    ``header_timeout`` seconds after the connection opened or its first byte came."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class BoundedH11Protocol(H11Protocol):
        """H11Protocol with a deadline for each request head."""

        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._arm_head_timer()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE:
                if self._head_timer is None and self.conn.trailing_data[0]:
                    self._arm_head_timer()  # part of a next request head has come
            else:
                self._cancel_head_timer()

        def on_response_complete(self) -> None:
            self._cancel_head_timer()
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

        def _arm_head_timer(self) -> None:
            self._cancel_head_timer()
            self._head_timer = self.loop.call_later(header_timeout, self._head_timed_out)

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
    """A uvicorn configuration that applies ``limits`` to every connection."""
    import uvicorn

    return uvicorn.Config(
        app, host=host, port=port, log_level=log_level, access_log=False, lifespan="off",
        timeout_graceful_shutdown=5, http=bounded_http_protocol(limits.header_timeout),
        timeout_keep_alive=max(1, round(limits.keep_alive_timeout)),
        limit_concurrency=limits.max_connections,
        h11_max_incomplete_event_size=limits.max_header_bytes)
