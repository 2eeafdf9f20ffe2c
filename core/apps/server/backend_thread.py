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


async def stream_backend_turn(backend: Backend, request: ModelRequest,
                              cancel: CancelToken) -> AsyncGenerator[list[Item], None]:
    """Yield ``backend.stream_turn(request, cancel)``'s items in batches, as they come.

    A backend that raises (it must not) ends with an ``error`` event and
    ``TurnEnd("error")``, as the protocol asks of it.
    """
    handoff = _Handoff(asyncio.get_running_loop())

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
                yield items
    finally:
        if not finished:
            cancel.cancel(cancel.reason or "stopped")
            await asyncio.shield(asyncio.get_running_loop().run_in_executor(None, thread.join))
