"""Turns at the model: replies run a few at a time (one for a loaded model), in arrival order.

A llama.cpp model has one context, so its replies must run one after the other.
Every request that needs the model takes a :class:`QueueTicket` when it arrives;
tickets are served first come, first served; a bounded number may wait, and one
more is refused at once (the routes answer ``429``). A ticket whose reply is
cancelled while it waits leaves the line without ever reaching the model.

Everything here runs on the server's event loop (not thread-safe by design).
"""

from __future__ import annotations

import asyncio
from collections import deque

from ...vocabulary.cancel import CancelToken

__all__ = ["ModelQueue", "QueueFullError", "QueueTicket"]

_CANCEL_POLL_SECONDS = 0.05


class QueueFullError(Exception):
    """As many requests as allowed are already waiting for the model."""


class QueueTicket:
    """One request's place in line. Use :meth:`wait_turn`, then :meth:`release`."""

    def __init__(self, queue: ModelQueue, granted: bool) -> None:
        self._queue = queue
        self._granted = granted
        self._released = False
        self.queued = not granted
        """Whether the request had to wait when it arrived."""
        self._turn: asyncio.Future[None] | None = None if granted else (
            asyncio.get_running_loop().create_future())

    async def wait_turn(self, cancel: CancelToken | None = None) -> bool:
        """Wait until this request may use the model.

        :returns: ``True`` when it is its turn; ``False`` when ``cancel`` was set
            first (the ticket has then left the line).
        """
        while not self._granted:
            assert self._turn is not None
            if cancel is not None and cancel.cancelled:
                self.release()
                return False
            try:
                await asyncio.wait_for(asyncio.shield(self._turn), _CANCEL_POLL_SECONDS)
            except TimeoutError:
                continue
            except asyncio.CancelledError:
                self.release()
                raise
        return not self._released

    def release(self) -> None:
        """Leave the line, or give the model to the next in line (idempotent)."""
        if self._released:
            return
        self._released = True
        self._queue._leave(self)

    @property
    def granted(self) -> bool:
        """Whether this ticket holds a turn at the model."""
        return self._granted and not self._released

    def _grant(self) -> None:
        self._granted = True
        if self._turn is not None and not self._turn.done():
            self._turn.set_result(None)


class ModelQueue:
    """First come, first served turns at one model.

    :param slots: replies that may run at once (``1`` for a local model).
    :param max_waiting: requests that may wait; one more raises
        :class:`QueueFullError`.
    """

    def __init__(self, slots: int = 1, max_waiting: int = 16) -> None:
        if slots < 1 or max_waiting < 0:
            raise ValueError("slots must be at least 1 and max_waiting not negative")
        self.slots = slots
        self.max_waiting = max_waiting
        self._active = 0
        self._waiting: deque[QueueTicket] = deque()

    @property
    def active(self) -> int:
        """Replies using the model now."""
        return self._active

    @property
    def waiting(self) -> int:
        """Requests waiting for their turn."""
        return len(self._waiting)

    @property
    def busy(self) -> bool:
        """Whether a reply is using the model."""
        return self._active > 0

    def join(self) -> QueueTicket:
        """Take a place in line (or the model at once when it is free).

        :raises QueueFullError: ``max_waiting`` requests already wait.
        """
        if self._active < self.slots and not self._waiting:
            self._active += 1
            return QueueTicket(self, granted=True)
        if len(self._waiting) >= self.max_waiting:
            raise QueueFullError(f"{len(self._waiting)} requests are already waiting for the "
                                 "model; try again later")
        ticket = QueueTicket(self, granted=False)
        self._waiting.append(ticket)
        return ticket

    def _leave(self, ticket: QueueTicket) -> None:
        if ticket._granted:
            self._active -= 1
        else:
            self._waiting.remove(ticket)
        while self._waiting and self._active < self.slots:
            self._active += 1
            self._waiting.popleft()._grant()
