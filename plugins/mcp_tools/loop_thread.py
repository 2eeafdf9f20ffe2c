"""One event loop on its own thread, owning every MCP session of a :class:`MCPServers`.

The MCP SDK is asynchronous and its sessions live in the task that opened them;
toolwire runs tools in worker threads, and its callers may be synchronous code
or an event loop of their own (possibly blocked in a synchronous call). So the
sessions get a loop of their own, on a daemon thread: any thread hands it a
coroutine and waits for the answer with its own timeout. Nothing ever waits on
the caller's loop, so a blocked caller cannot deadlock the sessions, and an
abandoned wait only cancels the coroutine it handed over.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """An asyncio loop running on a daemon thread, started on first use."""

    def __init__(self, name: str = "toolwire-mcp") -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        """Whether the loop's thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def in_loop(self) -> bool:
        """Whether the calling thread is the loop's own thread."""
        return self._thread is threading.current_thread()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coroutine`` on the loop; cancelling the future cancels its task."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._started())

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for its result from another thread.

        :raises TimeoutError: it did not finish within ``timeout`` (it is then cancelled).
        """
        if self.in_loop():
            coroutine.close()
            raise RuntimeError("LoopThread.run was called from the loop's own thread")
        future = self.submit(coroutine)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout:g} seconds") from None

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and join its thread (a later :meth:`submit` starts a new one)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not threading.current_thread():
            thread.join(timeout)

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(target=self._serve, args=(loop, ready),
                                          name=self._name, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
