"""One backend turn in a worker thread, its items delivered to the event loop.

A backend's ``stream_turn`` is a blocking iterator (llama.cpp computes in the
calling thread), so the server runs it in a thread of its own and receives what
it yields on the event loop. Leaving the iteration early cancels the turn and
waits for the thread, so the model is free before the caller's turn ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator
from typing import Any

from ...backends.protocol import Backend, ModelRequest, TurnEnd
from ...conversation.cancel import CancelToken
from ...events import ErrorEvent, Event

__all__ = ["stream_backend_turn"]

_END = object()


async def stream_backend_turn(backend: Backend, request: ModelRequest,
                              cancel: CancelToken) -> AsyncGenerator[Event | TurnEnd, None]:
    """Yield ``backend.stream_turn(request, cancel)``'s items as they come.

    A backend that raises (it must not) ends with an ``error`` event and
    ``TurnEnd("error")``, as the protocol asks of it.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def worker() -> None:
        stream = None
        try:
            stream = backend.stream_turn(request, cancel)
            for item in stream:
                loop.call_soon_threadsafe(queue.put_nowait, item)
        except BaseException as exc:  # a worker thread has no caller to raise to
            for item in (ErrorEvent("backend", f"{type(exc).__name__}: {exc}"),
                         TurnEnd("error")):
                loop.call_soon_threadsafe(queue.put_nowait, item)
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody listens
                loop.call_soon_threadsafe(queue.put_nowait, _END)

    thread = threading.Thread(target=worker, name="toolwire-turn", daemon=True)
    thread.start()
    finished = False
    try:
        while True:
            item = await queue.get()
            if item is _END:
                finished = True
                return
            yield item
    finally:
        if not finished:
            cancel.cancel(cancel.reason or "stopped")
            await asyncio.shield(loop.run_in_executor(None, thread.join))
