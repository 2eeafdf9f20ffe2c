"""Closing a connection without losing the answer already sent: a lingering close.

When a server closes a TCP socket while bytes the client sent are still unread
(the rest of a body nobody reads, a pipelined request), the kernel answers with
a reset, and a reset can make the client drop the answer it has not read yet.
:class:`LingeringTransport` wraps an asyncio transport so that ``close()``, when
the client may still be sending, first sends everything written and a FIN
(``write_eof``), then keeps reading and discarding what the client sends until
the client closes too, ``linger`` seconds pass or ``max_drain`` bytes have come;
then the connection is aborted. Otherwise ``close()`` closes at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["LingeringTransport"]


class LingeringTransport(asyncio.Transport):
    """An asyncio transport whose ``close()`` lingers while the peer may still send.

    :param inner: the transport of the socket.
    :param loop: the loop ``inner`` runs on (for the linger deadline).
    :param linger: seconds a lingering close waits for the client to close.
    :param max_drain: bytes a lingering close discards before it aborts.
    :param peer_may_send: asked at ``close()``: whether the client may still be
        sending (then the close lingers).
    """

    def __init__(self, inner: asyncio.Transport, loop: asyncio.AbstractEventLoop, *,
                 linger: float, max_drain: int, peer_may_send: Callable[[], bool]) -> None:
        super().__init__()
        self._inner = inner
        self._loop = loop
        self._linger = linger
        self._peer_may_send = peer_may_send
        self._max_drain = max_drain
        self._closing = False
        self._deadline: asyncio.TimerHandle | None = None
        self._drained = 0
        self.lingering = False
        """Whether a lingering close is in progress (what arrives is to be discarded)."""

    def close(self) -> None:
        """Close; linger first when the client may still be sending."""
        if self._closing:
            return
        self._closing = True
        if not self._peer_may_send() or not self._inner.can_write_eof() \
                or self._inner.is_closing():
            self._inner.close()
            return
        self.lingering = True
        self._inner.write_eof()  # after what is buffered: the answer, then a FIN
        if not self._inner.is_reading():
            self._inner.resume_reading()
        self._deadline = self._loop.call_later(self._linger, self.abort)

    def discard(self, data: bytes) -> None:
        """Drop bytes that came while lingering; abort past ``max_drain`` of them."""
        self._drained += len(data)
        if self._drained > self._max_drain:
            self.abort()

    def abort(self) -> None:
        """Close at once, dropping what is not sent yet."""
        self._closing = True
        self._stop_lingering()
        self._inner.abort()

    def socket_closed(self) -> None:
        """The socket is closed (the protocol lost its connection): nothing to wait for."""
        self._closing = True
        self._stop_lingering()

    def _stop_lingering(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def is_closing(self) -> bool:
        """Whether ``close()`` or ``abort()`` was called, or the socket is closing."""
        return self._closing or self._inner.is_closing()

    def pause_reading(self) -> None:
        """Stop reading, except while lingering (the drain must go on)."""
        if not self.lingering:
            self._inner.pause_reading()

    def resume_reading(self) -> None:
        """Read again."""
        self._inner.resume_reading()

    def is_reading(self) -> bool:
        """Whether the socket is being read."""
        return self._inner.is_reading()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data``."""
        self._inner.write(data)

    def writelines(self, list_of_data: Any) -> None:
        """Send each item of ``list_of_data``."""
        self._inner.writelines(list_of_data)

    def write_eof(self) -> None:
        """Send a FIN once what is buffered is sent."""
        self._inner.write_eof()

    def can_write_eof(self) -> bool:
        """Whether :meth:`write_eof` is supported."""
        return self._inner.can_write_eof()

    def get_write_buffer_size(self) -> int:
        """Bytes written and not yet sent."""
        return self._inner.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        """The flow-control water marks."""
        return self._inner.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Set the flow-control water marks."""
        self._inner.set_write_buffer_limits(high, low)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The socket's extra information (``peername``, ``socket``...)."""
        return self._inner.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Hand the socket's events to ``protocol``."""
        self._inner.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        """The protocol the socket's events go to."""
        return self._inner.get_protocol()
