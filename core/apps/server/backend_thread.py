"""One backend turn in a worker thread, its items delivered to the event loop in batches.

A backend's ``stream_turn`` is a blocking iterator (llama.cpp computes in the
calling thread), so the server runs it in a thread of its own. The thread
appends each item to a buffer and wakes the event loop only when the loop is not
already due to look (one wake-up per batch, not per token); the loop takes
everything buffered at once, so a busy server sends several tokens per write.
Leaving the iteration early cancels the turn and waits for the thread, so the
model is free before the caller's turn ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import AsyncGenerator
from typing import Any

from ...events import ErrorEvent, Event
from ...vocabulary.backend import Backend, ModelRequest, TurnEnd
from ...vocabulary.cancel import CancelToken

__all__ = ["stream_backend_turn"]

Item = Event | TurnEnd


class _Handoff:
    """Items from the worker thread to the event loop, with at most one wake-up pending."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ready = asyncio.Event()
        self.items: deque[Any] = deque()
        self.finished = False
        self._lock = threading.Lock()
        self._wake_pending = False

    def put(self, item: Any = None, *, last: bool = False) -> None:
        """Called by the worker: buffer ``item`` (or mark the end) and wake the loop once."""
        with self._lock:
            if last:
                self.finished = True
            else:
                self.items.append(item)
            if self._wake_pending:
                return
            self._wake_pending = True
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody listens
            self.loop.call_soon_threadsafe(self.ready.set)

    def take(self) -> tuple[list[Any], bool]:
        """Called by the loop: everything buffered, and whether the worker has ended."""
        with self._lock:
            self._wake_pending = False
            self.ready.clear()
            items = list(self.items)
            self.items.clear()
            return items, self.finished


class _IdleTicker:
    """Wakes the loop when ``idle`` seconds pass without an item (one timer, re-armed
    only when it fires: an item costs a clock reading, not a timer)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, handoff: _Handoff, idle: float) -> None:
        self.loop = loop
        self.handoff = handoff
        self.idle = idle
        self.last = loop.time()
        self._timer = loop.call_later(idle, self._fire)

    def _fire(self) -> None:
        wait = self.last + self.idle - self.loop.time()
        if wait <= 0:
            self.handoff.ready.set()
            wait = self.idle
        self._timer = self.loop.call_later(wait, self._fire)

    def active(self) -> None:
        self.last = self.loop.time()

    def due(self) -> bool:
        """Whether the wake-up was the timer's (then the quiet time starts again)."""
        if self.loop.time() - self.last < self.idle:
            return False
        self.last = self.loop.time()
        return True

    def stop(self) -> None:
        self._timer.cancel()


async def stream_backend_turn(backend: Backend, request: ModelRequest, cancel: CancelToken,
                              *, idle: float | None = None,
                              ) -> AsyncGenerator[list[Item], None]:
    """Yield ``backend.stream_turn(request, cancel)``'s items in batches, as they come.

    A backend that raises (it must not) ends with an ``error`` event and
    ``TurnEnd("error")``, as the protocol asks of it.

    :param idle: when set, an empty batch is yielded whenever this many seconds
        pass without an item (a stream that must show it is alive, with a ping).
    """
    loop = asyncio.get_running_loop()
    handoff = _Handoff(loop)
    ticker = _IdleTicker(loop, handoff, idle) if idle is not None else None

    def worker() -> None:
        stream = None
        try:
            stream = backend.stream_turn(request, cancel)
            for item in stream:
                handoff.put(item)
        except BaseException as exc:  # a worker thread has no caller to raise to
            handoff.put(ErrorEvent("backend", f"{type(exc).__name__}: {exc}"))
            handoff.put(TurnEnd("error"))
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()
            handoff.put(last=True)

    thread = threading.Thread(target=worker, name="toolwire-turn", daemon=True)
    thread.start()
    finished = False
    try:
        while not finished:
            await handoff.ready.wait()
            items, finished = handoff.take()
            if items:
                if ticker is not None:
                    ticker.active()
                yield items
            elif ticker is not None and not finished and ticker.due():
                yield []
    finally:
        if ticker is not None:
            ticker.stop()
        if not finished:
            cancel.cancel(cancel.reason or "stopped")
            await asyncio.shield(asyncio.get_running_loop().run_in_executor(None, thread.join))
