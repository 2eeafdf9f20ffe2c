"""The threads that run tool calls under a timeout: a bounded pool.

A tool call with a timeout runs in a worker thread, so the dispatcher can stop
waiting for it. Python cannot stop a thread, so a call that never returns keeps
its thread: the pool therefore holds at most ``max_threads`` threads
(:attr:`toolwire.limits.DispatchLimits.tool_threads`: the ``TOOLWIRE_TOOL_THREADS``
environment variable, read when the pool is first used, or 32). A call that finds
every thread busy waits for one, within its own timeout; but when every thread is
held by a call the dispatcher has already given up on (timed out or cancelled), the
pool is exhausted and refuses at once with :class:`~toolwire.errors.ToolBusyError`,
saying so, instead of waiting for threads that may never come back.

Idle threads are reused (a call costs a hand-off, not a thread start), at most
:data:`MAX_IDLE` of them are kept, and all are daemon threads, so a hung tool
never keeps the process from exiting.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, Final

from ..errors import ToolBusyError
from ..limits import DispatchLimits

__all__ = ["MAX_IDLE", "ToolJob", "ToolThreadPool", "tool_threads"]

MAX_IDLE: Final = 8
"""Idle threads kept for the next calls."""


class ToolJob:
    """One call handed to the pool; ``done`` is set when it finished or was skipped."""

    __slots__ = ("abandoned", "args", "context", "done", "error", "finished", "function",
                 "started", "value")

    def __init__(self, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.function = function
        self.args = args
        self.context = contextvars.copy_context()
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.started = False
        self.finished = False
        self.abandoned = False

    def run(self) -> None:
        """Run the function in the submitter's context; keep its value or what it raised."""
        try:
            self.value = self.context.run(self.function, *self.args)
        except BaseException as exc:  # handed to the dispatcher, which contains it
            self.error = exc
        finally:
            self.done.set()


class ToolThreadPool:
    """At most ``max_threads`` daemon threads running :class:`ToolJob` s (see the module doc).

    :param max_threads: the most threads the pool starts.
    """

    def __init__(self, max_threads: int = DispatchLimits().tool_threads) -> None:
        if max_threads < 1:
            raise ValueError("max_threads must be at least 1")
        self.max_threads = max_threads
        self._jobs: queue.SimpleQueue[ToolJob] = queue.SimpleQueue()
        self._lock = threading.Lock()
        # Every queued job has a taker: an idle thread it woke, a thread started
        # for it, or (counted in _pending) a busy thread that takes it when done.
        self._threads = 0
        self._idle = 0
        self._pending = 0
        self._stuck = 0  # threads running a call the dispatcher gave up on

    @property
    def threads(self) -> int:
        """Threads alive now."""
        return self._threads

    @property
    def stuck(self) -> int:
        """Threads still running a call that was abandoned."""
        return self._stuck

    def submit(self, function: Callable[..., Any], *args: Any) -> ToolJob:
        """Queue a call; start a thread if none is free and the bound allows.

        :raises ToolBusyError: every thread the pool may have is running an
            abandoned call.
        """
        job = ToolJob(function, args)
        with self._lock:
            if self._idle:
                self._idle -= 1
                start = False
            elif self._threads < self.max_threads:
                self._threads += 1
                start = True
            elif self._stuck >= self._threads:
                raise ToolBusyError(
                    f"no tool thread is free: all {self._threads} are still running calls "
                    "that timed out or were cancelled earlier, so this call was not run. "
                    f"Stop using the tool that hangs (or raise TOOLWIRE_TOOL_THREADS)", tool="")
            else:
                self._pending += 1
                start = False
        if start:
            threading.Thread(target=self._work, name="toolwire-tool", daemon=True).start()
        self._jobs.put(job)
        return job

    def abandon(self, job: ToolJob) -> bool:
        """The dispatcher stopped waiting for ``job``; returns whether it had started.

        A job not started yet is skipped; a running one holds its thread until it
        returns, and counts as stuck meanwhile.
        """
        with self._lock:
            if job.abandoned:
                return job.started
            job.abandoned = True
            if job.started and not job.finished:
                self._stuck += 1
            return job.started

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            with self._lock:
                run = not job.abandoned
                job.started = run
            if run:
                job.run()
            else:
                job.done.set()
            with self._lock:
                job.finished = True
                if run and job.abandoned:
                    self._stuck -= 1
                if self._pending:
                    self._pending -= 1  # a queued job waits for this thread
                elif self._idle >= MAX_IDLE:
                    self._threads -= 1
                    return
                else:
                    self._idle += 1


_shared: ToolThreadPool | None = None
_shared_lock = threading.Lock()


def tool_threads() -> ToolThreadPool:
    """The process-wide pool the dispatcher uses (``TOOLWIRE_TOOL_THREADS`` threads)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ToolThreadPool(DispatchLimits().tool_threads)
        return _shared
