"""A cancel token that any thread or asyncio task may set."""

from __future__ import annotations

import threading

__all__ = ["CancelToken"]


class CancelToken:
    """Set once to stop the current reply; checked by backends and the loop.

    ``cancel()`` is safe from any thread (a signal handler, another task's
    thread). Once set, the backend closes its stream and no further tool runs.
    """

    __slots__ = ("_event", "reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""

    def cancel(self, reason: str = "cancelled") -> None:
        """Ask the reply to stop as soon as possible."""
        self.reason = reason
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until cancelled or ``timeout`` passes; return whether cancelled."""
        return self._event.wait(timeout)
